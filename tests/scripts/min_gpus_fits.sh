#!/usr/bin/env bash
# dplan memory --min-gpus for Llama 3 405B on DGX H100 answers at most 96 GPUs
# (tp=8 cp=2 dp=6, ZeRO-3, full recompute fits there; the search blind to cp said
# 104), and the layout it reports fits when dplan memory recomputes it.
set -eu
dplan=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# --memory-margin 0: the memory model's bare verdict (the default keeps 5% headroom, below)
"$dplan" memory llama3-405b --system dgx-h100 --min-gpus --memory-margin 0 --json > "$tmp/min.json"
# The JSON prints one key per line ("key":<tab>value); every layout key is unique.
val() { grep -m1 "\"$1\":" "$tmp/min.json" | sed 's/.*:[[:space:]]*//; s/[",]//g'; }
gpus=$(val gpus)
nodes=$(val nodes)
[ "$(val found)" = true ] || { echo "min-gpus found nothing"; exit 1; }
[ "$gpus" -le 96 ] || { echo "min-gpus says $gpus GPUs; tp=8 cp=2 zero=3 full recompute fits on 96"; exit 1; }
args=(--system dgx-h100 --nodes "$nodes" --tp "$(val tp)" --pp "$(val pp)" --dp "$(val dp)"
      --cp "$(val cp)" --ep "$(val ep)" --vpp "$(val vpp)" --mbs "$(val mbs)" --gbs "$(val gbs)"
      --zero "$(val zero)" --recompute "$(val recompute)")
[ "$(val sp)" = true ] && args+=(--sp)
# an uneven split: first/last_stage_layers (absent when 0), or the explicit stage_layers list
first=$(val first_stage_layers) last=$(val last_stage_layers)
[ -z "$first" ] || [ "$first" = 0 ] || args+=(--first-stage-layers "$first")
[ -z "$last" ] || [ "$last" = 0 ] || args+=(--last-stage-layers "$last")
if grep -q '"stage_layers":' "$tmp/min.json"; then
  list=$(tr -d ' \t\n' < "$tmp/min.json" | sed 's/.*"stage_layers":\[\([0-9,]*\)\].*/\1/')
  args+=(--stage-layers "$list")
fi
want=$(val peak_bytes)
"$dplan" memory llama3-405b "${args[@]}" --json > "$tmp/check.json"
grep -q '"fits":[[:space:]]*true' "$tmp/check.json" || { echo "reported layout does not fit: ${args[*]}"; exit 1; }
got=$(grep -m1 '"peak_bytes"' "$tmp/check.json" | tr -dc '0-9')
[ "$want" = "$got" ] || { echo "peak bytes: min-gpus $want, memory $got (${args[*]})"; exit 1; }
# With the default margin the answer keeps 5% of the usable bytes free, on no fewer GPUs.
"$dplan" memory llama3-405b --system dgx-h100 --min-gpus --json > "$tmp/min.json"
[ "$(val found)" = true ] || { echo "min-gpus with the default margin found nothing"; exit 1; }
mgpus=$(val gpus) mpeak=$(val peak_bytes) cap=$(val capacity_bytes)
[ "$mgpus" -ge "$gpus" ] || { echo "with the margin $mgpus GPUs, fewer than the bare $gpus"; exit 1; }
awk -v p="$mpeak" -v c="$cap" 'BEGIN { exit !(p <= 0.95 * c) }' ||
  { echo "with the margin the peak $mpeak keeps under 5% of $cap free"; exit 1; }
echo "min-gpus: $gpus GPUs, the layout fits (peak $got bytes); $mgpus GPUs keeping 5% headroom"
