#!/usr/bin/env bash
# `dplan calibrate --backend cpu` end to end (quick range), and its profile applied:
# alone it is the cluster of the planning commands (2 ranks of this machine: --np 2),
# estimate prices the CPU executor's step with it, run refuses a profile without CPU
# kernel costs, and a bad --max-size is a usage error.
#   calibrate_cpu.sh DPLAN OUT_DIR
set -u
dplan=$1 out=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
rm -rf "$out"
mkdir -p "$out"
fail() {
  echo "FAIL: $*"
  exit 1
}
"$dplan" calibrate --backend cpu --np 2 --max-size 256K -o "$out/p.json" > "$out/cal.txt" 2> "$out/cal.err" ||
  { cat "$out/cal.txt" "$out/cal.err"; fail "calibrate failed"; }
# nccl-tests' table: 1 KiB to 256 KiB by 2x is 1K, 2K, ..., 256K: 9 rows per collective.
for c in all_reduce all_gather reduce_scatter alltoall sendrecv; do
  grep -q "^# $c over 2 ranks" "$out/cal.txt" || fail "no $c table"
  # The fit, or why noise defeated it (a shared machine).
  grep -q "^$c .*busbw .* GB/s.*R^2" "$out/cal.txt" || grep -q "; $c left out of the profile" "$out/cal.err" ||
    fail "no $c fit line nor warning"
done
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float' "$out/cal.txt")
[ "$rows" = 45 ] || fail "expected 9 sizes x 5 collectives = 45 rows, got $rows"
grep -q '^gemm fp32' "$out/cal.txt" || grep -q 'GEMM curve left out' "$out/cal.err" || fail "no GEMM fit line"
grep -q '^memory ' "$out/cal.txt" || grep -q 'memory bandwidth left out' "$out/cal.err" || fail "no memory fit line"
grep -q 'calibrate: collectives' "$out/cal.err" || fail "no progress line on stderr"
python3 - "$out/p.json" << 'PY' || fail "profile content"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["dplan_calibration"] == 1 and p["machine"]["backend"] == "cpu"
# 2 cores: 2 threads alone, 1 thread alone, 1 thread each of 2 ranks (fewer on 1 core).
assert 1 <= len(p["cpu"]) <= 3, len(p["cpu"])
assert {c["collective"] for c in p["collectives"]} <= {
    "all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"}
assert all(c["link"] == "shm" and c["ranks_min"] == 2 and c["busbw_gbps"] > 0 for c in p["collectives"])
# Each fit keeps the 9 measured times it was fitted to, sizes ascending from 1 KiB.
for c in p["collectives"]:
    m = c["measured"]
    assert [b for b, _ in m] == [1024 << i for i in range(9)] and all(t > 0 for _, t in m), c
cl = p["machine"]["cluster"]
assert cl["nodes"] == 1 and cl["gpus_per_node"] == 2, cl
assert all(g["dtype"] == "fp32" and g["eff_max"] == 1 for g in p["gemm"])
# Bandwidth by reuse distance: hot, then 256 KiB .. 256 MiB by 2x; farther is never faster
# (a slower nearer point is raised to the farther one's); the kernels hot (no sweep).
r = p["reuse"]
m = r["measured"]
assert len(m) == 12 and m[0][0] == 262144 and m[-1][0] == (256 << 20) + 262144, [b for b, _, _ in m]
for i in range(len(m) - 1):
    assert m[i][1] >= m[i + 1][1] and m[i][2] >= m[i + 1][2], m
h = r["sgemm_hot"]
assert 1 < h["gflops"] < 1e4 and h["quality"]["samples"] == 24 and h["quality"]["rms_rel"] < 0.25, h
assert all(r[k] >= 0 for k in ("attn_fwd", "act_fwd", "norm_fwd", "ce", "adamw", "sumsq"))
assert r["sgemm_cold"]["factor"] >= 0 and r["sumsq_ns"] > 0
assert all("sweep_bytes" not in c for c in p["cpu"]), "kernels swept though the reuse curve prices distance"
# Ranks in lock step: five segment lengths, each longer than the one before (2, 8, 32,
# 128, 512 passes over the same buffer: 4x the work each), each waiting >= 0.
ls = p["lockstep"]
assert ls["ranks"] == 2 and len(ls["measured"]) == 5 and ls["jitter"] >= 0, ls
seg = [s for s, _ in ls["measured"]]
assert all(2 < b / a < 8 for a, b in zip(seg, seg[1:])) and all(w >= 0 for _, w in ls["measured"]), ls
PY
grep -q '^reuse .*read / write GB/s' "$out/cal.txt" || fail "no reuse line"
grep -q '^lock step   2 ranks' "$out/cal.txt" || fail "no lock-step line"
# The profile is the cluster: 2 ranks; estimate prices the executor's step.
"$dplan" estimate tiny-gpt --calibration "$out/p.json" --dp 2 --gbs 8 > "$out/est.txt" 2>&1 ||
  { cat "$out/est.txt"; fail "estimate --calibration"; }
grep -q '1 node x 2 cpu-rank' "$out/est.txt" || fail "estimate did not plan for the 2 ranks"
grep -q '^CPU executor .*step [0-9.]* ms' "$out/est.txt" || fail "no CPU executor step"
"$dplan" estimate tiny-gpt --calibration "$out/p.json" --dp 2 --gbs 8 --json > "$out/est.json" &&
  python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['cpu_executor']; assert e['step_time_s'] > 0" "$out/est.json" ||
  fail "estimate --json has no cpu_executor"
# The run's summary gives the same parts under the same keys, and the parts add up to the
# step (executor.h: struct dp_exec_prediction).
"$dplan" run tiny-gpt --steps 1 --dp 2 --gbs 8 --seq-len 32 --calibration "$out/p.json" \
  --out "$out/parts" > /dev/null 2>&1 || fail "run --calibration"
python3 - "$out/est.json" "$out/parts/summary.json" << 'PY' || fail "prediction parts"
import json, sys
e = json.load(open(sys.argv[1]))["cpu_executor"]
r = json.load(open(sys.argv[2]))["cpu_prediction"]
assert set(e) == set(r), (sorted(e), sorted(r))
for p in (e, r):
    parts = sum(v for k, v in p.items() if k != "step_time_s")
    assert len(p) == 9 and abs(parts / p["step_time_s"] - 1) < 1e-9, p
PY
"$dplan" memory tiny-gpt --calibration "$out/p.json" --tp 2 --gbs 8 > "$out/mem.txt" 2>&1 ||
  { cat "$out/mem.txt"; fail "memory --calibration"; }
"$dplan" suggest tiny-gpt --calibration "$out/p.json" --gbs 8 > "$out/sug.txt" 2>&1 ||
  { cat "$out/sug.txt"; fail "suggest --calibration"; }
# With --calibration alone, cluster-size options are refused (the profile fixes them).
"$dplan" estimate tiny-gpt --calibration "$out/p.json" --nodes 4 > /dev/null 2> "$out/e1.err"
[ $? = 2 ] || fail "--calibration with --nodes: expected exit 2"
# With --system, the profile's all-reduce fit on link class "intra" replaces dgx-h100's
# NVLink: at busbw 1 GB/s and alpha 0, DP 8's gradient all-reduce takes 2(n-1)/n = 1.75
# (nccl-tests' factor) x 4 bytes (fp32 gradient reduction, Megatron's default for bf16)
# x 8.03e9 parameters (Llama 3 8B) / 1e9 B/s = 56.2 s, not overlapped away at that speed.
python3 - "$out/p.json" "$out/ov.json" << 'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["collectives"] = [{"collective": "all_reduce", "link": "intra", "ranks_min": 2, "ranks_max": 8,
                     "alpha_us": 0, "busbw_gbps": 1.0, "stderr": {"alpha_us": 0, "busbw_gbps": 0},
                     "quality": {"samples": 3, "params": 2, "r2": 1, "rms_rel": 0, "max_rel": 0}}]
json.dump(p, open(sys.argv[2], "w"))
PY
"$dplan" estimate llama3-8b --system dgx-h100 --nodes 1 --dp 8 --calibration "$out/ov.json" --json > "$out/ov.out" ||
  fail "estimate --system --calibration"
python3 -c "
import json, sys
t = json.load(open(sys.argv[1]))['dp_comm_total_s']
sys.exit(0 if abs(t / 56.21 - 1) < 0.02 else 'dp comm %.3f s, expected 56.21' % t)" "$out/ov.out" ||
  fail "the profile's intra all-reduce was not laid over dgx-h100"
# On dgx-h100 the CPU executor's step answers nothing asked: it is priced only for the
# machine the profile measured (on Llama 3 8B it walked every granule of 32 GB of weights).
python3 -c "import json, sys; sys.exit('cpu_executor' in json.load(open(sys.argv[1])))" "$out/ov.out" ||
  fail "estimate --system dgx-h100 --calibration priced the CPU executor's step"
# The CPU executor's collectives are read off the measured times, not the fit. DP 2 of
# tiny-gpt (120,576 fp32 parameters: 2 layers of 49,984, the final norm's 128, the tied
# embedding and the positions 20,480) with its gradient buckets overlapped (the layout's
# dp_overlap, executor/overlap.c) all-reduces per step: the layers' bucket, 399,872 bytes;
# the stage's edge after the backward, blocking: the embeddings, 81,920 bytes, and the final
# norm, 512 bytes; and a 16-byte host buffer (loss and gradient norm). With all-reduce
# measured at 1 ms per KiB ([1 KiB, 1 ms] to [1 GiB, 2^20 ms]: t = bytes / 1024 ms in
# log-log too, the smallest size's 1 ms below it): 390.5 + 80 + 1 + 1 = 472.5 ms. With
# [256 KiB, 100 us] and [1 MiB, 400 us] (bandwidth 2.62 GB/s between them, 100 us below):
# 100 x 399872 / 262144 = 152.5390625 us for the bucket and 100 us for each of the other
# three: 452.5390625 us. The fit (alpha 5 ms, far from either) must not price them.
for case in "1024 1000 1073741824 1048576000 0.4725" "262144 100 1048576 400 0.0004525390625"; do
  python3 - "$out/p.json" "$out/tab.json" $case << 'PY'
import json, sys
p = json.load(open(sys.argv[1]))
b0, t0, b1, t1 = map(float, sys.argv[3:7])
p.pop("lockstep", None)  # the waits of ranks in lock step: test_executor_reuse prices them
for c in p["collectives"]:
    c["alpha_us"] = 5000
    c["measured"] = [[b0, t0], [b1, t1]]
json.dump(p, open(sys.argv[2], "w"))
PY
  want=${case##* }
  "$dplan" estimate tiny-gpt --calibration "$out/tab.json" --dp 2 --gbs 16 --mbs 8 --json > "$out/tab.out" ||
    fail "estimate with measured collective times"
  python3 -c "
import json, sys
t = json.load(open(sys.argv[1]))['cpu_executor']['communication_s']
sys.exit(0 if abs(t / float(sys.argv[2]) - 1) < 1e-6 else 'comm %.9g s, expected %s' % (t, sys.argv[2]))" "$out/tab.out" "$want" ||
    fail "collectives not priced off the measured times"
done
# A profile without CPU kernel costs: run refuses it before starting.
python3 -c "
import json, sys
p = json.load(open(sys.argv[1])); del p['cpu']
json.dump(p, open(sys.argv[2], 'w'))" "$out/p.json" "$out/nocpu.json"
"$dplan" run tiny-gpt --steps 1 --calibration "$out/nocpu.json" --out "$out/run" > /dev/null 2> "$out/r.err"
[ $? = 1 ] && grep -q "nocpu.json: cpu: the profile has no CPU kernel costs" "$out/r.err" ||
  { cat "$out/r.err"; fail "run with a profile without cpu"; }
"$dplan" calibrate --backend cpu --max-size 12x > /dev/null 2> "$out/u.err"
[ $? = 2 ] || fail "bad --max-size: expected exit 2"
echo ok
