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

# The swept probe's prices (executor/predict_ops.c bw, region), by hand, in the predicted
# split of tiny-gpt mbs 8 on one thread with optime-profile.json (every split: L2 and L3
# 100 GB/s, an OpenMP region 10 us, swept_gbps 1): tiny-gpt's 4 residual adds a step (2 a
# layer, 2 layers) each read and write 512 tokens x 64 x 4 B = 131,072 B: 262,144 B at
# 1 GB/s = 262.144 us, plus the region: 4 x 272.144 = 1088.576 us. Without the swept fields
# (an older profile) the same bytes move at L2's 100 GB/s: 4 x (2.62144 + 10) = 50.48576 us.
# Its 4 bias fills (QKV's 512 x 192 and FC1's 512 x 256 outputs, 2 layers: 458,752
# elements, 1,835,008 B) only write, so each line moves twice (write-allocate): 3,670,016 B
# at 1 GB/s + 4 regions = 3710.016 us; hot, each call's 768 KiB-1 MiB within L2, at 100
# GB/s: 36.70016 + 40 = 76.70016 us.
here=$(dirname "$0")
python3 - "$here/optime-profile.json" "$dir/hot.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for c in p["cpu"]:
    for k in ("hidden", "sweep_bytes", "swept_gbps"):
        del c[k]
json.dump(p, open(sys.argv[2], "w"))
PY
for prof in swept:"$here/optime-profile.json":1088.576:3710.016 \
    hot:"$dir/hot.json":50.48576:76.70016; do
    IFS=: read -r name file want want_bias <<<"$prof"
    mkdir -p "$dir/$name"
    DPLAN_OPTIME="$dir/$name" "$dplan" run tiny-gpt --mbs 8 --steps 2 --calibration "$file" \
        --out "$dir/run-$name" >"$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; exit 1; }
    got=$(awk -F'\t' '$1 == "residual" { printf "%.6f", $3 * 1e6 }' "$dir/$name/optime.pred.stage0.tsv")
    python3 -c "import sys; g, w = float(sys.argv[1] or 0), float(sys.argv[2]); sys.exit(0 if abs(g / w - 1) < 1e-6 else 'FAIL: $name: residual priced %.6f us a step, expected %.6f' % (g, w))" "$got" "$want"
    got=$(awk -F'\t' '$1 == "bias_fill" { printf "%.6f", $3 * 1e6 }' "$dir/$name/optime.pred.stage0.tsv")
    python3 -c "import sys; g, w = float(sys.argv[1] or 0), float(sys.argv[2]); sys.exit(0 if abs(g / w - 1) < 1e-6 else 'FAIL: $name: bias_fill priced %.6f us a step, expected %.6f' % (g, w))" "$got" "$want_bias"
done
echo "ok: swept and hot prices"
