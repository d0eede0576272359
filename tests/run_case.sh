#!/usr/bin/env bash
# Run one golden/error case: a directory holding
#   args             the dplan arguments, one shell line (run from inside the directory)
#   expected_stdout  (optional) exact expected standard output
#   expected_stderr  (optional) exact expected standard error
#   exit_code        (optional) expected exit status, default 0
# DPLAN_UPDATE_GOLDEN=1 rewrites the expected files from the actual output.
set -u
dplan=$1
dir=$2
cd "$dir" || exit 1
[ -f args ] || { echo "$dir: no args file"; exit 1; }
want_code=0
[ -f exit_code ] && want_code=$(cat exit_code)
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
eval "set -- $(cat args)"
"$dplan" "$@" >"$out" 2>"$err"
code=$?
if [ "${DPLAN_UPDATE_GOLDEN:-0}" = 1 ]; then
  if [ -f expected_stderr ] || [ "$code" != 0 ]; then cp "$err" expected_stderr; fi
  if [ -f expected_stdout ] || [ "$code" = 0 ]; then cp "$out" expected_stdout; fi
  [ "$code" != 0 ] && echo "$code" > exit_code
  echo "$dir: updated"
  exit 0
fi
fail=0
if [ ! -f expected_stdout ] && [ ! -f expected_stderr ]; then
  echo "$dir: neither expected_stdout nor expected_stderr: the case checks only the exit code"; fail=1
fi
if [ "$code" != "$want_code" ]; then
  echo "$dir: exit code $code, expected $want_code"; fail=1
  sed 's/^/  stderr: /' "$err" | head -5
fi
for s in stdout stderr; do
  f=expected_$s
  [ -f "$f" ] || continue
  actual=$out; [ $s = stderr ] && actual=$err
  if ! diff -u "$f" "$actual" > /dev/null; then
    echo "$dir: $s differs from $f:"; diff -u "$f" "$actual" | head -40; fail=1
  fi
done
# Error cases must be exactly one line on stderr.
if [ "$want_code" != 0 ] && [ "$(wc -l < "$err")" != 1 ]; then
  echo "$dir: expected one line on stderr, got $(wc -l < "$err")"; fail=1
fi
exit $fail
