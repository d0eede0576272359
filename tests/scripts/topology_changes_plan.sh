#!/usr/bin/env bash
# The same H100 node with and without NVLink (cluster files that `dplan topo`
# wrote from the tests/topology XML fixtures): without NVLink, data-parallel
# gradient traffic crosses PCIe, and the planner moves parallelism into the
# pipeline instead: fewer ranks in the gradient group (dp x cp: context-parallel
# ranks reduce gradients with the data-parallel ones), more stages.
set -eu
dplan=$1
dir=$2
best() { "$dplan" suggest llama2-13b --cluster "$dir/$1.json" --nodes 1 --top 1 --json |
         grep -E "\"$2\":[[:space:]]*[0-9]+" | head -1 | tr -dc '0-9'; }
grad() { echo $(( $(best "$1" dp) * $(best "$1" cp) )); }
dp_nv=$(grad dgx-h100); pp_nv=$(best dgx-h100 pp)
dp_pcie=$(grad dgx-h100-no-nvlink); pp_pcie=$(best dgx-h100-no-nvlink pp)
echo "NVLink: dp*cp=$dp_nv pp=$pp_nv; PCIe only: dp*cp=$dp_pcie pp=$pp_pcie"
[ "$dp_pcie" -lt "$dp_nv" ] && [ "$pp_pcie" -gt "$pp_nv" ]
