#!/usr/bin/env bash
# DPLAN_OPTIME=DIR (executor/optime.h): `dplan run` splits each step by backend operation
# on every rank, and its step-time prediction splits the same way.
#   optime.sh DPLAN DIR
set -eu
dplan=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir/op"
export OMP_NUM_THREADS=1
DPLAN_OPTIME="$dir/op" "$dplan" run tiny-gpt --mbs 8 --steps 4 --np 2 --tp 2 --out "$dir/run" \
    >"$dir/run.log" 2>&1 || { cat "$dir/run.log"; exit 1; }
python3 - "$dir/op" <<'PY'
import sys, os
d = sys.argv[1]
def rd(name):
    rows = {}
    for l in open(os.path.join(d, name)):
        if l.startswith("#") or l.startswith("op\t"):
            continue
        k, c, s = l.rstrip("\n").split("\t")
        rows[k] = (int(c), float(s))
    return rows
fail = []
for name in ("optime.rank0.tsv", "optime.rank1.tsv", "optime.pred.stage0.tsv"):
    r = rd(name)
    # tiny-gpt (2 layers) under TP 2: per layer QKV, attention out, FC1 and FC2 forward
    # and each twice backward (input and weight gradients) = 12, two layers 24, and the
    # vocab-parallel LM head 3: 27 GEMMs a step on every rank.
    if r.get("gemm", (0, 0))[0] != 27:
        fail.append("%s: %s GEMMs a step, expected 27" % (name, r.get("gemm")))
    # TP: an all-reduce after attention and after the MLP, forward and backward, per layer
    # (Megatron's f/g: 2 x 2 x 2 = 8), and more for the embedding and loss; at least 8.
    if r.get("allreduce", (0, 0))[0] < 8:
        fail.append("%s: %s all-reduces, expected 8 or more" % (name, r.get("allreduce")))
    ops = sum(s for k, (c, s) in r.items() if k not in ("step", "untimed") and " " not in k)
    step = r["step"][1]
    if not step > 0 or ops <= 0 or ops > 1.5 * step:
        fail.append("%s: operations %.6f s of a %.6f s step" % (name, ops, step))
    if name.startswith("optime.pred") and abs(ops - step) > 1e-9 + 1e-6 * step:
        # the pricer's step is exactly its operations' prices: nothing untimed
        fail.append("%s: the prices sum to %.9f, its step %.9f" % (name, ops, step))
if fail:
    print("FAIL: " + "; ".join(fail))
    sys.exit(1)
print("ok")
PY
