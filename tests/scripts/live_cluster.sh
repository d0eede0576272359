#!/usr/bin/env bash
# Planning commands without --system/--gpu/--cluster plan on the machine they run on, read
# as `dplan topo` reads it (hwloc, then NVML); the machine comes from HWLOC_XMLFILE here,
# so the test does not depend on the host. Checks: on a GPU node (DGX H100 XML) estimate
# predicts what it predicts with the cluster file `dplan topo -o` writes there, at --nodes
# too, and says which machine it used;
# a node without GPUs is one usage error naming the alternatives.
#   live_cluster.sh DPLAN TOPOLOGY_XML_DIR
set -u
dplan=$1 xml=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0
fail() { echo "FAIL: $*"; bad=1; }

HWLOC_XMLFILE=$xml/this-machine.xml "$dplan" memory llama3-8b > "$tmp/out" 2> "$tmp/err"
code=$?
[ "$code" = 2 ] || fail "no GPUs: exit $code, expected 2"
[ "$(wc -l < "$tmp/err")" = 1 ] || fail "no GPUs: $(wc -l < "$tmp/err") lines on stderr, expected 1"
grep -q "no cluster given, and this machine has no GPUs: use --system NAME --nodes N" "$tmp/err" ||
  fail "no GPUs: stderr: $(cat "$tmp/err")"

HWLOC_XMLFILE=$xml/dgx-h100.xml "$dplan" topo -o "$tmp/cluster.json" > /dev/null 2>&1 ||
  fail "dplan topo -o"
for nodes in "" 4; do
  args=(estimate llama3-8b --tp 8 --json)
  [ -n "$nodes" ] && args+=(--nodes "$nodes")
  HWLOC_XMLFILE=$xml/dgx-h100.xml "$dplan" "${args[@]}" > "$tmp/live.json" 2> "$tmp/live.err" ||
    { fail "live ${nodes:-1} node(s): $(cat "$tmp/live.err")"; continue; }
  grep -q "^dplan: cluster: this machine, ${nodes:-1} nodes\? of 8 x h100-sxm5-80gb" "$tmp/live.err" ||
    fail "live ${nodes:-1} node(s): stderr does not say which machine: $(cat "$tmp/live.err")"
  "$dplan" estimate llama3-8b --tp 8 --json --cluster "$tmp/cluster.json" \
    --nodes "${nodes:-1}" > "$tmp/file.json" 2> /dev/null || fail "--cluster file"
  python3 - "$tmp/live.json" "$tmp/file.json" "${nodes:-1}" <<'PY' || bad=1
import json, sys
live, file = (json.load(open(p)) for p in sys.argv[1:3])
nodes = int(sys.argv[3])
if live["gpus"] != 8 * nodes:
    sys.exit(f"FAIL: live cluster has {live['gpus']} GPUs, expected {8 * nodes}")
for k in ("step_time_s", "tokens_per_s"):
    if abs(live[k] - file[k]) > 1e-12 * abs(file[k]):
        sys.exit(f"FAIL: {k}: live {live[k]} vs cluster file {file[k]}")
if live["memory"] != file["memory"]:
    sys.exit("FAIL: the memory reports differ")
PY
done
[ $bad = 0 ] && echo "live_cluster: no-GPU error, 1 and 4 DGX H100 nodes from hwloc = their cluster file"
exit $bad
