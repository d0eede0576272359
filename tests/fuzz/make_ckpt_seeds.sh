#!/usr/bin/env bash
# Write the seeds of fuzz_ckpt (seeds/ckpt/) and fuzz_safetensors (seeds/safetensors/)
# from real checkpoints: `dplan run` trains the two miniature models of models/ (hidden
# 8, vocabulary 32, so a rank file is ~20-40 KB) for 2 steps under several layouts on a
# token file written here, with a checkpoint after each step. Each ckpt seed packs one
# checkpoint as fuzz_ckpt reads it: [4-byte LE length][manifest.json], then
# [length][rank_0000R.safetensors] per rank. Files this script does not write (regression
# inputs) stay. Run from the repository root after a build:
#   tests/fuzz/make_ckpt_seeds.sh [build/dplan]
set -euo pipefail
cd "$(dirname "$0")/../.."
dplan=$(realpath "${1:-build/dplan}")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export DPLAN_PROFILES=${DPLAN_PROFILES:-$PWD/profiles}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -c "
import random, struct, sys
r = random.Random(1); n = 257
open(sys.argv[1], 'wb').write(struct.pack('<%dH' % n, *[r.randrange(32) for _ in range(n)]))" "$tmp/tok.bin"
mkdir -p tests/fuzz/seeds/ckpt tests/fuzz/seeds/safetensors
# name | model | layout
while IFS='|' read -r name model opts; do
  [ -n "$name" ] || continue
  # shellcheck disable=SC2086
  "$dplan" run "tests/fuzz/models/$model.json" --steps 2 --gbs 4 --seq-len 8 --data "$tmp/tok.bin" \
    --data-format raw --ckpt-dir "$tmp/$name" --ckpt-every 1 --out "$tmp/$name-out" $opts \
    < /dev/null > /dev/null 2> "$tmp/$name.err" || { cat "$tmp/$name.err"; exit 1; }
  python3 - "$tmp/$name/step_00000002" "tests/fuzz/seeds/ckpt/$name" <<'PY'
import glob, json, os, struct, sys
d, out = sys.argv[1:]
# The manifest without its indentation: the same document, a smaller input to mutate.
chunks = [json.dumps(json.load(open(os.path.join(d, "manifest.json"))),
                     separators=(",", ":")).encode()]
chunks += [open(f, "rb").read() for f in sorted(glob.glob(os.path.join(d, "rank_*.safetensors")))]
with open(out, "wb") as f:
    for c in chunks:
        f.write(struct.pack("<I", len(c)) + c)
PY
  cp "$tmp/$name/step_00000002/rank_00000.safetensors" "tests/fuzz/seeds/safetensors/$name-rank0"
done <<'LAYOUTS'
gpt|fuzz-gpt|
gpt_dp2_zero1|fuzz-gpt|--dp 2 --zero 1
gpt_pp2|fuzz-gpt|--pp 2
llama|fuzz-llama|
llama_tp2_sp|fuzz-llama|--tp 2 --sp
LAYOUTS
cp "$tmp/llama-out/model.safetensors" tests/fuzz/seeds/safetensors/llama-model
# Hand-made edges: the smallest valid file, metadata only, a header padded with spaces.
python3 - tests/fuzz/seeds/safetensors <<'PY'
import json, struct, sys, os
d = sys.argv[1]
def put(name, hdr, data=b""):
    open(os.path.join(d, name), "wb").write(struct.pack("<Q", len(hdr)) + hdr + data)
put("empty", b"{}")
put("metadata-only", b'{"__metadata__":{"format":"pt"}}')
h = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
put("padded", h + b" " * (-len(h) % 8), struct.pack("<2f", 1.0, 2.0))
PY
ls -l tests/fuzz/seeds/ckpt tests/fuzz/seeds/safetensors
