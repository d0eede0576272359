#!/usr/bin/env bash
# One executor equivalence test: train MODEL for 20 steps (gbs 8, seq 32) under a layout
# and compare losses, final weights and memory with the single-process reference.
#   run_layout.sh DPLAN COMPARE REF_DIR OUT_DIR MODEL [layout options...]
# With REF_DIR "-" the run is the reference itself (its memory is still checked).
# DPLAN_TEST_RESIDENT=1 (set by CMake outside the sanitizer builds) adds the resident check.
set -u
dplan=$1 compare=$2 ref=$3 out=$4 model=$5
shift 5
rm -rf "$out"
mkdir -p "$(dirname "$out")"
if ! "$dplan" run "$model" --steps 20 --gbs 8 --seq-len 32 --out "$out" "$@" \
    > "$out.stdout" 2> "$out.stderr"; then
  echo "run failed: dplan run $model $*"
  cat "$out.stderr"
  exit 1
fi
resident=()
[ "${DPLAN_TEST_RESIDENT:-0}" = 1 ] && resident=(--resident)
if [ "$ref" = - ]; then
  exec "$compare" --memory "$out" "${resident[@]}"
fi
exec "$compare" "$ref" "$out" "${resident[@]}"
