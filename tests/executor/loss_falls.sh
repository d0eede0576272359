#!/usr/bin/env bash
# Training on the default corpus (Debian's license texts, byte-tokenised) must clearly
# lower the loss in a short run: tiny-gpt, 60 steps of 8 x 64 tokens, default settings.
# Passes when the mean loss of the last 10 steps is at least 1.0 below that of the first 10.
#   loss_falls.sh DPLAN OUT [MODEL [layout options...]]   (MODEL: tiny-gpt)
set -u
dplan=$1 out=$2
model=${3:-tiny-gpt}
shift $(($# < 3 ? $# : 3))
rm -rf "$out"
"$dplan" run "$model" --steps 60 --gbs 8 --seq-len 64 --out "$out" "$@" > /dev/null 2> "$out.stderr" \
  || { cat "$out.stderr"; exit 1; }
grep -o '"loss":[-0-9.e]*' "$out/log.jsonl" | cut -d: -f2 | awk '
  { l[NR] = $1 }
  END {
    if (NR != 60) { print "expected 60 steps, got " NR; exit 1 }
    for (i = 1; i <= 10; i++) { a += l[i]; b += l[NR - 10 + i] }
    a /= 10; b /= 10
    printf "loss: first 10 steps %.4f, last 10 steps %.4f (drop %.4f, need >= 1.0)\n", a, b, a - b
    exit (a - b >= 1.0) ? 0 : 1
  }'
