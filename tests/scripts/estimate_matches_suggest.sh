#!/usr/bin/env bash
# estimate and suggest share one default global batch (issue 10, item 4): estimating
# suggest's winner with its knobs and no --gbs predicts the same step, and both print
# where the batch came from; on a cluster whose GPU count has an odd factor (a 72-GPU
# GB200 NVL72 rack) too, where that batch is 9 x 2^k sequences.
set -eu
dplan=$1
check() {
local sys=$1 nodes=$2 note=$3
out=$("$dplan" suggest llama2-13b --system "$sys" --nodes "$nodes" --no-uneven --top 1)
grep -q "^batch .*(--gbs not given: $note)" <<<"$out" || { echo "suggest: no '$note' batch"; exit 1; }
row=$(grep -E '^ +1  tp=' <<<"$out")
# " 1  tp=2 pp=1 dp=8 mbs=1 zero=1 sp   12.345  67890  55.0%  ..." -> knobs, tokens/s
knobs=$(awk '{for (i = 2; i <= NF && $i !~ /^[0-9.]+$/; i++) {
                split($i, kv, "="); k = kv[1]; v = kv[2];
                if (k == "rc") k = "recompute";
                printf "--%s%s ", k, (v == "" ? "" : " " v) } }' <<<"$row")
want=$(awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[0-9.]+$/) {print $(i + 1); exit}}' <<<"$row")
est=$("$dplan" estimate llama2-13b --system "$sys" --nodes "$nodes" $knobs)
grep -q "^batch .*(--gbs not given: $note)" <<<"$est" || { echo "estimate: no '$note' batch"; exit 1; }
got=$(sed -n 's/^step time [0-9.]* s: \([0-9]*\) tokens\/s.*/\1/p' <<<"$est")
[ -n "$got" ] && [ "$want" = "$got" ] || {
    echo "suggest's #1 ($knobs) runs at $want tokens/s, estimate of the same knobs says $got"
    exit 1
}
echo "estimate matches suggest on $sys x $nodes: $knobs at $got tokens/s"
}
check dgx-h100 2 '~4M tokens'
check gb200-nvl72 1 '~4M tokens, a multiple of 9 (the odd factor of 72 GPUs)'
