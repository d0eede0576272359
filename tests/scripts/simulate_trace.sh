#!/usr/bin/env bash
# `dplan simulate --trace` (issue 15 item 2): the file is Chrome Trace Event Format JSON
# that Perfetto and chrome://tracing open: a "traceEvents" array; complete events ("X")
# with name, ts, dur >= 0, pid and tid; each process and thread named ("M"); slices on
# one thread nested or disjoint (the viewers' rule for "X" events); memory counters
# ("C"). One process per stage by default, with --ranks just those GPUs; the passes
# are every (micro-batch, chunk) forward and backward; the step in otherData is the
# one the report prints.
set -eu
dplan=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
knobs="llama2-7b --system dgx-h100 --tp 2 --pp 4 --vpp 2 --gbs 8"
"$dplan" simulate $knobs --trace "$tmp/all.json" --json > "$tmp/sim.json"
"$dplan" simulate $knobs --trace "$tmp/ranks.json" --ranks 1,6-7 > /dev/null
"$dplan" simulate $knobs --trace "$tmp/passes.json" --trace-passes > /dev/null
python3 - "$tmp" <<'PY'
import json, sys, collections
tmp = sys.argv[1]
sim = json.load(open(f"{tmp}/sim.json"))
fail = []
def check(path, want_pids, layers):
    d = json.load(open(path))
    ev = d["traceEvents"]
    x = [e for e in ev if e["ph"] == "X"]
    m = [e for e in ev if e["ph"] == "M"]
    c = [e for e in ev if e["ph"] == "C"]
    if not x:
        fail.append(f"{path}: no slices")
    for e in x:
        if not (isinstance(e["name"], str) and e["ts"] >= 0 and e["dur"] >= 0
                and isinstance(e["pid"], int) and isinstance(e["tid"], int)):
            fail.append(f"{path}: bad slice {e}")
            break
    pids = sorted({e["pid"] for e in x})
    if pids != want_pids:
        fail.append(f"{path}: processes {pids}, expected {want_pids}")
    named = {e["pid"] for e in m if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in m if e["name"] == "thread_name"}
    if not set(pids) <= named or not {(e["pid"], e["tid"]) for e in x} <= threads:
        fail.append(f"{path}: unnamed process or thread")
    # nested or disjoint on each thread (ns resolution of the printed times)
    by = collections.defaultdict(list)
    for e in x:
        by[(e["pid"], e["tid"])].append((e["ts"], -e["dur"], e["name"]))
    for k, v in by.items():
        v.sort()
        stack = []
        for ts, nd, name in v:
            end = ts - nd
            while stack and stack[-1] <= ts + 1e-3:
                stack.pop()
            if stack and end > stack[-1] + 1e-3:
                fail.append(f"{path}: {name} at {ts} overlaps its enclosing slice on {k}")
                break
            stack.append(end)
    # passes: 2 M v per GPU shown (cat "pass"); layer slices only without --trace-passes
    M, v = sim["microbatches"], sim["vpp"]
    for pid in pids:
        n = sum(1 for e in x if e["pid"] == pid and e.get("cat") == "pass")
        if n != 2 * M * v:
            fail.append(f"{path}: pid {pid} has {n} passes, expected {2 * M * v}")
    has_layers = any(" L" in e["name"] for e in x)
    if has_layers != layers:
        fail.append(f"{path}: layer slices {'present' if has_layers else 'missing'}")
    if layers and not c:
        fail.append(f"{path}: no memory counters")
    if abs(d["otherData"]["step_s"] - sim["step_s"]) > 1e-9:
        fail.append(f"{path}: otherData.step_s {d['otherData']['step_s']} != {sim['step_s']}")
    return x
# tp=2 pp=4: stage i's first GPU is rank 2 i
check(f"{tmp}/all.json", [0, 2, 4, 6], True)
check(f"{tmp}/ranks.json", [1, 6, 7], True)
x = check(f"{tmp}/passes.json", [0, 2, 4, 6], False)
print("\n".join(fail) if fail else "trace well-formed: processes, threads, nesting, passes, counters")
sys.exit(1 if fail else 0)
PY
# a rank outside the job is refused
if "$dplan" simulate $knobs --trace "$tmp/bad.json" --ranks 8 2> "$tmp/err"; then
    echo "--ranks 8 of 8 GPUs was accepted"; exit 1
fi
grep -q "rank 8 is outside the job's 8 GPUs" "$tmp/err"
