# Sourced by the executor's test scripts (mixprec.sh, storage.sh) that compare several
# `dplan run`s: how a case reports and how one run is made. The script sets $suite, $case
# and $dplan (and fail=0) first.
say() { echo "$suite $case: $*"; }
bad() { echo "FAIL $suite $case: $*"; fail=1; }
run() { # run NAME ARGS...: dplan run ARGS --out NAME, stdout/stderr in NAME.out/.err
  local name=$1
  shift
  rm -rf "$name"
  if ! "$dplan" run "$@" --out "$name" > "$name.out" 2> "$name.err"; then
    bad "dplan run $* --out $name failed"
    tail -5 "$name.err"
  fi
}
