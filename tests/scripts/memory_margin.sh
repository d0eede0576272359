#!/usr/bin/env bash
# The searches keep a memory margin: suggest's winner leaves at least 5% of the usable
# memory free by default, fits with less when --memory-margin 0 asks for the bare
# verdict (Llama 2 70B on 4 DGX H100: the bare winner leaves 0.35 GiB, 0.4%), and
# estimate calls that bare winner FITS (tight). Failed before: the default winner was the
# bare one, which `dplan check` warns about.
#   memory_margin.sh DPLAN
set -u
dplan=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0
args=(llama2-70b --system dgx-h100 --nodes 4)
"$dplan" suggest "${args[@]}" --top 1 --json > "$tmp/d.json" || { echo "FAIL: suggest"; exit 1; }
"$dplan" suggest "${args[@]}" --top 1 --json --memory-margin 0 -o "$tmp/bare.plan" \
  > "$tmp/b.json" || { echo "FAIL: suggest --memory-margin 0"; exit 1; }
python3 - "$tmp/d.json" "$tmp/b.json" <<'PY' || bad=1
import json, sys
d, b = (json.load(open(p)) for p in sys.argv[1:3])
cap = d["memory"]["capacity_bytes"]
fail = []
if d["memory_margin"] != 0.05 or b["memory_margin"] != 0:
    fail.append(f"margins {d['memory_margin']}, {b['memory_margin']}: expected 0.05 and 0")
win, bare = d["memory"]["peak_bytes"], b["memory"]["peak_bytes"]
if not win <= 0.95 * cap:
    fail.append(f"default winner peaks at {win / cap:.4f} of the usable bytes, above 0.95")
if not 0.95 * cap < bare <= cap:
    fail.append(f"bare winner peaks at {bare / cap:.4f}: expected a tight fit in (0.95, 1]")
if not d["top"][0]["step_time_s"] >= b["top"][0]["step_time_s"]:
    fail.append("the margin made the winner faster: it only removes layouts")
for f in fail:
    print("FAIL:", f)
sys.exit(1 if fail else 0)
PY
"$dplan" estimate --plan "$tmp/bare.plan" > "$tmp/est.txt" || { echo "FAIL: estimate"; bad=1; }
grep -q "^FITS (tight): " "$tmp/est.txt" || { echo "FAIL: estimate does not call it tight"; bad=1; }
grep -q "^tight: under 5% headroom" "$tmp/est.txt" || { echo "FAIL: no tight note"; bad=1; }
"$dplan" estimate --plan "$tmp/bare.plan" --memory-margin 0 > "$tmp/est0.txt"
grep -q "^FITS: " "$tmp/est0.txt" || { echo "FAIL: --memory-margin 0 still tight"; bad=1; }
"$dplan" suggest "${args[@]}" --memory-margin 60 > /dev/null 2> "$tmp/err"
[ $? = 2 ] && grep -q "memory-margin: expected percent in \[0, 50\]" "$tmp/err" ||
  { echo "FAIL: --memory-margin 60: $(cat "$tmp/err")"; bad=1; }
# --ep-overlap fixed: every layout ranked can run it (ep > 1, vpp > 1 with pp > 1, no full
# recompute). Failed before: under the margin the fastest fitting layout recomputed fully,
# and suggest ended on the winner's failed validation.
"$dplan" suggest deepseek-v3 --system dgx-h100 --nodes 32 --tp 2 --pp 8 --ep-overlap --json \
  > "$tmp/ep.json" 2> "$tmp/ep.err" || { echo "FAIL: suggest --ep-overlap: $(cat "$tmp/ep.err")"; bad=1; }
python3 - "$tmp/ep.json" <<'PY' || bad=1
import json, sys
top = json.load(open(sys.argv[1]))["top"]
wrong = [c["layout"] for c in top if c["layout"].get("recompute") == "full" or
         c["layout"]["ep"] < 2 or (c["layout"]["pp"] > 1 and c["layout"]["vpp"] < 2)]
if not top or wrong:
    sys.exit(f"FAIL: --ep-overlap: {len(top)} ranked, {len(wrong)} cannot run it: {wrong[:1]}")
PY
[ $bad = 0 ] && echo "memory_margin: default winner keeps 5%, bare winner is tight, estimate says so; --ep-overlap ranks only layouts that run it"
exit $bad
