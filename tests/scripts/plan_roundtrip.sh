#!/usr/bin/env bash
# suggest -o writes plan.json; estimate --plan and memory --plan read it back and
# predict exactly what the plan recorded. The pipeline split travels exactly: an
# uneven interleaved one (Llama 3.1 405B's 126 layers at pp=8 vpp=8, which the
# planner picks), and a plan in the old first/last_stage_layers form still loads.
set -eu
dplan=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() { # plan.json
  grep -q '"dplan_plan":[[:space:]]*1' "$1"
  want=$(grep -m1 '"step_time_s"' "$1" | tr -dc '0-9.e-')
  got=$("$dplan" estimate --plan "$1" --json | grep -m1 '"step_time_s"' | tr -dc '0-9.e-')
  [ "$want" = "$got" ] || { echo "$1: step time: plan $want, estimate --plan $got"; exit 1; }
  want=$(grep -m1 '"peak_bytes"' "$1" | tr -dc '0-9.e-')
  got=$("$dplan" memory --plan "$1" --json | grep -m1 '"peak_bytes"' | tr -dc '0-9.e-')
  [ "$want" = "$got" ] || { echo "$1: peak bytes: plan $want, memory --plan $got"; exit 1; }
}
# the stage_layers list of a plan, on one line
split_of() { tr -d ' \t\n' < "$1" | sed 's/.*"stage_layers":\[\([0-9,]*\)\].*/\1/'; }

"$dplan" suggest llama2-13b --system dgx-h100 --nodes 2 -o "$tmp/plan.json" > /dev/null
check "$tmp/plan.json"
# each stage's layers are listed (prediction.memory.stages[]: first_layer/last_layer, or
# chunks when interleaved); 40 layers, so some stage ends at layer 39
grep -Eq '"last_layer":[[:space:]]*39' "$tmp/plan.json"

"$dplan" suggest llama3-405b --system dgx-h100 --nodes 128 --tp 8 --pp 8 --vpp 8 --cp 2 \
  --gbs 512 -o "$tmp/uneven.json" > /dev/null
check "$tmp/uneven.json"
# 126 layers in 64 chunks: a balanced uneven split has 62 chunks of 2 and two of 1 (which
# chunks are unloaded, the first (Megatron's published Et|(tt|)*62,tL) or the last ones, is
# a choice within 0.2% of step time under issue 12's framework profile, not checked here)
got=$(split_of "$tmp/uneven.json")
twos=$(echo "$got" | tr ',' '\n' | grep -c '^2$')
ones=$(echo "$got" | tr ',' '\n' | grep -c '^1$')
[ "$twos" = 62 ] && [ "$ones" = 2 ] || { echo "uneven split: plan has $got"; exit 1; }
# the layout that estimate --plan reads back is the plan's, split included
"$dplan" estimate --plan "$tmp/uneven.json" --json > "$tmp/est.json"
back=$(split_of "$tmp/est.json")
[ "$back" = "$got" ] || { echo "uneven split read back as $back, plan has $got"; exit 1; }
ml=$(tr -d ' \t\n' < "$tmp/est.json" | sed 's/.*"megatron_layout":"\([^"]*\)".*/\1/')
case "$ml" in E*L) ;; *) echo "megatron layout $ml lacks the embedding or the loss"; exit 1 ;; esac

# a plan in the old form: first/last_stage_layers, no stage_layers
cat > "$tmp/legacy.json" <<'JSON'
{"dplan_plan": 1,
 "model": {"name": "m", "layers": 10, "hidden": 64, "heads": 4, "ffn_hidden": 256, "ffn": "gelu",
           "vocab": 256, "seq_len": 64, "tied_embeddings": true, "norm": "layernorm"},
 "layout": {"tp": 1, "pp": 4, "dp": 1, "mbs": 1, "gbs": 4, "seq_len": 64,
            "first_stage_layers": 2, "last_stage_layers": 2}}
JSON
"$dplan" memory --plan "$tmp/legacy.json" --gpu a100-sxm4-80gb --gpus 4 > "$tmp/legacy.txt"
grep -q 'stage 0 (2L: 0-1)' "$tmp/legacy.txt" && grep -q 'stage 1 (3L: 2-4)' "$tmp/legacy.txt" &&
  grep -q 'stage 3 (2L: 8-9)' "$tmp/legacy.txt" \
  || { echo "legacy plan: first/last stage layers lost"; cat "$tmp/legacy.txt"; exit 1; }
echo "plan round trip: ok"
