#!/usr/bin/env bash
# The module layering (STYLE.md "Modules"), checked two ways:
#  1. each probe NAME:HEADER:WANT (tests/layering/CMakeLists.txt) is built; WANT=ok must
#     compile, WANT=refused must fail, and fail because HEADER is not found (not for some
#     other reason);
#  2. no source reaches around the include paths: no #include "../...", and no module
#     includes another module's internal.h (tests may include the module they test).
#   check.sh CMAKE BUILD_DIR SOURCE_DIR NAME:HEADER:WANT...
set -u
cmake=$1 build=$2 src=$3
shift 3
fail=0
for p in "$@"; do
  IFS=: read -r name header want <<< "$p"
  out=$("$cmake" --build "$build" --target "layering_$name" 2>&1)
  rc=$?
  if [ "$want" = ok ]; then
    if [ $rc != 0 ]; then
      echo "FAIL $name: including $header should compile:"
      echo "$out" | grep -E 'error' | head -5
      fail=1
    else
      echo "ok   $name: $header is visible"
    fi
  elif [ $rc = 0 ]; then
    echo "FAIL $name: including $header compiled; the include path lets the arrow through"
    fail=1
  elif ! echo "$out" | grep -Eq "$header.*(No such file|file not found)"; then
    echo "FAIL $name: the build failed, but not for want of $header:"
    echo "$out" | grep -E 'error' | head -5
    fail=1
  else
    echo "ok   $name: $header is refused"
  fi
done
cd "$src" || exit 1
files=$(find . -path ./build -prune -o \( -name '*.c' -o -name '*.h' \) -print)
if grep -n '#include "\.\./' $files; then
  echo "FAIL: relative includes above reach around the include paths"
  fail=1
fi
for f in $files; do
  mod=${f#./}
  mod=${mod%%/*}
  grep -Eo '#include "[a-z_]+/internal\.h"' "$f" | while read -r _ inc; do
    owner=${inc#\"}
    owner=${owner%%/*}
    [ "$owner" = "$mod" ] && continue
    # tests/<x>/ may include the internals of the module it tests
    [ "$mod" = tests ] && continue
    echo "FAIL: $f includes $inc, the internals of another module"
    exit 1
  done || fail=1
done
exit $fail
