#!/usr/bin/env bash
# suggest -o writes plan.json; estimate --plan and memory --plan read it back and
# predict exactly what the plan recorded.
set -eu
dplan=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$dplan" suggest llama2-13b --system dgx-h100 --nodes 2 -o "$tmp/plan.json" > /dev/null
grep -q '"dplan_plan":[[:space:]]*1' "$tmp/plan.json"
# each stage's layers are listed (prediction.memory.stages[]: first_layer/last_layer, or
# chunks when interleaved); 40 layers, so some stage ends at layer 39
grep -Eq '"last_layer":[[:space:]]*39' "$tmp/plan.json"
# (two empty strings would compare equal: a missing field fails)
want=$(grep -m1 '"step_time_s"' "$tmp/plan.json" | tr -dc '0-9.e-')
got=$("$dplan" estimate --plan "$tmp/plan.json" --json | grep -m1 '"step_time_s"' | tr -dc '0-9.e-')
[ -n "$want" ] && [ "$want" = "$got" ] || { echo "step time: plan '$want', estimate --plan '$got'"; exit 1; }
want=$(grep -m1 '"peak_bytes"' "$tmp/plan.json" | tr -dc '0-9.e-')
got=$("$dplan" memory --plan "$tmp/plan.json" --json | grep -m1 '"peak_bytes"' | tr -dc '0-9.e-')
[ -n "$want" ] && [ "$want" = "$got" ] || { echo "peak bytes: plan '$want', memory --plan '$got'"; exit 1; }
echo "plan round trip: ok (step $want s)"
