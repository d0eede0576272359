#!/usr/bin/env bash
# The same H100 node with and without NVLink (cluster files that `dplan topo`
# wrote from the tests/topology XML fixtures): without NVLink, tensor- and
# data-parallel traffic crosses PCIe, so the layouts without a pipeline (pp=1:
# all eight GPUs in TP and DP groups) lose far more against the planner's choice
# than they do with NVLink, and the choice itself is a pipeline (pp > 1).
set -eu
dplan=$1
dir=$2
# field CLUSTER KEY [suggest options...]: the winner's number for "KEY".
field() {
  local c=$1 k=$2; shift 2
  "$dplan" suggest llama2-13b --cluster "$dir/$c.json" --nodes 1 --top 1 --json "$@" |
    grep -E "\"$k\":[[:space:]]*[0-9.]+" | head -1 | sed -E 's/.*:[[:space:]]*([0-9.]+).*/\1/'
}
for c in dgx-h100 dgx-h100-no-nvlink; do
  best=$(field "$c" step_time_s); flat=$(field "$c" step_time_s --pp 1); pp=$(field "$c" pp)
  loss=$(awk -v a="$flat" -v b="$best" 'BEGIN { printf "%.4f", a / b - 1 }')
  echo "$c: choice pp=$pp, ${best} s; best with pp=1 ${flat} s (+${loss})"
  eval "loss_${c//-/_}=$loss pp_${c//-/_}=$pp"
done
awk -v nv="$loss_dgx_h100" -v pcie="$loss_dgx_h100_no_nvlink" -v pp="$pp_dgx_h100_no_nvlink" \
  'BEGIN { exit !(pcie > nv + 0.10 && pp > 1) }'
