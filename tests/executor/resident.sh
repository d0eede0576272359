#!/usr/bin/env bash
# The resident-memory check of one layout: train MODEL for 2 steps (the buffers are all
# allocated, and every collective has run, during the first) and compare each rank's
# resident growth with its accounted buffers (compare_runs --resident, which says what
# the margin holds and why).
#   resident.sh DPLAN COMPARE OUT_DIR MODEL [layout options...]
set -u
dplan=$1 compare=$2 out=$3 model=$4
shift 4
rm -rf "$out"
mkdir -p "$(dirname "$out")"
if ! "$dplan" run "$model" --steps 2 --out "$out" "$@" > "$out.stdout" 2> "$out.stderr"; then
  echo "run failed: dplan run $model $*"
  cat "$out.stderr"
  exit 1
fi
exec "$compare" --resident "$out"
