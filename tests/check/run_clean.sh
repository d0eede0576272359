#!/usr/bin/env bash
# Run one `dplan check` golden case (a directory as ../run_case.sh takes, plus an `env`
# file of KEY=VALUE lines) in a clean environment: only PATH, DPLAN_PROFILES,
# DPLAN_UPDATE_GOLDEN and the case's variables, "@FAKE_NVML@" replaced by the fake NVML,
# and DPLAN_CHECK_NO_MPI=1 (test-only: the faked launcher variables have no launcher
# behind them, so MPI must not start).
# usage: run_clean.sh DPLAN CASE_DIR PROFILES FAKE_NVML
set -u
dplan=$1 dir=$2 profiles=$3 fake=$4
vars=()
while IFS= read -r line || [ -n "$line" ]; do
  [ -n "$line" ] && vars+=("${line//@FAKE_NVML@/$fake}")
done < "$dir/env"
exec env -i PATH=/usr/local/bin:/usr/bin:/bin DPLAN_PROFILES="$profiles" \
  DPLAN_UPDATE_GOLDEN="${DPLAN_UPDATE_GOLDEN:-0}" DPLAN_CHECK_NO_MPI=1 "${vars[@]}" \
  "$(dirname "$0")/../run_case.sh" "$dplan" "$dir"
