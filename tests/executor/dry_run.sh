#!/usr/bin/env bash
# `dplan run --dry-run` (cli/dry_run.c): the rank map with layers, each rank's groups,
# each stage's 1F1B order and the memory plan per stage, from the heading of the rank
# map to the line before "output:" (what follows names this machine's paths), against
# dry/NAME.expected. DPLAN_UPDATE_GOLDEN=1 rewrites the expected files.
#   dry_run.sh DPLAN DIR
set -u
dplan=$1 dir=$2
fail=0
for a in "$dir"/*.args; do
  name=${a%.args}
  eval "set -- $(cat "$a")"
  got=$("$dplan" run "$@" --out /nonexistent-dry-run --dry-run 2>&1 | sed -n '/^ *rank  *node/,/^output:/p' | sed '$d')
  if [ "${DPLAN_UPDATE_GOLDEN:-0}" = 1 ]; then
    printf '%s\n' "$got" > "$name.expected"
    continue
  fi
  if ! diff -u "$name.expected" <(printf '%s\n' "$got"); then
    echo "FAIL dry run $(basename "$name")"
    fail=1
  fi
done
exit $fail
