#!/usr/bin/env bash
# `dplan simulate` against `dplan estimate` (issue 15 item 1): both price every operation
# with the cost model's per-operation terms, so on stages of equal layers the event
# simulation and the analytic step agree within 2%, whatever the layout: 1F1B, GPipe,
# interleaved, DualPipeV, tensor/context/expert parallel, ZeRO-1/2/3 with and without
# overlapped gathers, FP8, full recompute, torchtitan FSDP2, HSDP, per-op and per-module
# recompute. `estimate --simulate` reports the simulation's step.
set -eu
dplan=$1
fail=0
check() {
    local est sim
    est=$("$dplan" estimate "$@" --json) || { echo "estimate $*: failed"; fail=1; return; }
    sim=$("$dplan" simulate "$@" ${SIM_EXTRA:-} --json) || { echo "simulate $*: failed"; fail=1; return; }
    python3 - "$est" "$sim" "$* ${SIM_EXTRA:-}" <<'PY' || fail=1
import json, sys
est, sim, what = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
a, s = est["step_time_s"], sim["step_s"]
d = (s - a) / a
print(f"{what}: estimate {a:.4f} s, simulate {s:.4f} s ({100 * d:+.2f}%)")
# a simulation that did nothing (no passes) must not pass
ok = abs(d) <= 0.02 and sim["operations"] > 0 and all(st["busy_s"] > 0 for st in sim["stages"])
sys.exit(0 if ok else 1)
PY
}
check llama2-7b --system dgx-h100 --tp 2 --pp 4 --gbs 64
check llama2-7b --system dgx-h100 --nodes 2 --tp 2 --pp 2 --zero 1 --gbs 128
check llama2-7b --system dgx-h100 --nodes 2 --tp 2 --cp 2 --pp 2 --gbs 64 --seq-len 16384
check llama2-7b --system dgx-h100 --nodes 2 --tp 1 --pp 1 --zero 2 --gbs 64
check llama2-7b --system dgx-h100 --nodes 2 --tp 2 --pp 1 --zero 3 --gbs 64
check llama2-7b --system dgx-h100 --nodes 2 --tp 1 --pp 1 --zero 3 --no-overlap-param-gather --gbs 64
# GPipe's uniform timeline is 1F1B's (the same (m + p - 1)(F + B)); only memory differs
SIM_EXTRA="--schedule gpipe" check llama2-13b --system dgx-h100 --nodes 2 --tp 2 --pp 4 --gbs 64
check llama2-70b --system dgx-h100 --nodes 4 --tp 8 --sp --pp 4 --tp-overlap --gbs 128
check llama2-70b --system dgx-h100 --nodes 8 --tp 8 --pp 8 --vpp 5 --gbs 256 --recompute full
check llama3-8b --system dgx-h100 --nodes 2 --tp 2 --pp 4 --gbs 128 --precision fp8
check qwen3-30b-a3b --system dgx-h100 --nodes 2 --ep 8 --pp 2 --gbs 128
# the framework model (shard.c, dp__time_redo): torchtitan FSDP2 (one unit per block, fp32
# reduce-scatter), HSDP (reduce-scatter in 8-GPU shard groups, all-reduce across the 4
# replicas), torchtitan's per-op SAC and Megatron's recompute_modules
check llama2-7b --system dgx-h100 --nodes 2 --tp 1 --pp 1 --zero 3 --framework torchtitan --gbs 64
check llama2-7b --system dgx-h100 --nodes 4 --tp 1 --pp 1 --zero 3 --framework torchtitan --shard-group 8 --gbs 128
check llama2-7b --system dgx-h100 --tp 2 --pp 4 --gbs 64 --framework torchtitan --recompute op
check llama2-7b --system dgx-h100 --tp 2 --pp 4 --gbs 64 --recompute selective --recompute-modules core_attn,mlp
# torchtitan's gradient accumulation with PP (--local-batch): schedules one after another,
# each with its fill, drain, FSDP gathers and reduce-scatters
check llama3-8b --system dgx-h100 --nodes 2 --tp 1 --pp 4 --gbs 128 --framework torchtitan --zero 2 --local-batch 8
check llama3-70b --system dgx-h100 --nodes 4 --tp 8 --pp 4 --dp 1 --mbs 1 --gbs 32 --framework torchtitan --zero 3 --local-batch 8
# multi-token prediction (Megatron-Core --mtp-num-layers) on DeepSeek-V3's last stage, with
# the embedding copy's sync, Megatron-Bridge 25.09's 1024-GPU layout (tests/validation/moe.json)
check deepseek-v3 --system dgx-h100 --nodes 128 --tp 2 --pp 8 --sp --ep 64 --etp 1 --gbs 8192 --zero 1 --first-stage-layers 7 --last-stage-layers 6 --mtp-layers 1 --moe-imbalance 1
# DualPipeV (torchtitan): the V's stages, the overlapped pairs (a MoE layer's all-to-alls
# priced as ep_pair inside one), the deferred weight-gradient passes; dense and MoE, even and
# uneven stage lists, FSDP with full recompute, per-op SAC, DeepSeek-V3's 61 layers with CP
check llama2-7b --system dgx-h100 --tp 2 --pp 4 --vpp 2 --gbs 64 --framework torchtitan --pipeline-schedule dualpipev
check llama2-7b --system dgx-h100 --nodes 2 --tp 1 --pp 2 --vpp 2 --gbs 64 --framework torchtitan --pipeline-schedule dualpipev --zero 3 --recompute full
check llama3-8b --system dgx-h100 --nodes 2 --tp 2 --pp 4 --vpp 2 --gbs 128 --framework torchtitan --pipeline-schedule dualpipev --stage-layers 3,4,5,4,4,4,4,4
check qwen3-30b-a3b --system dgx-h100 --nodes 2 --ep 8 --pp 2 --vpp 2 --gbs 128 --framework torchtitan --pipeline-schedule dualpipev
check qwen3-30b-a3b --system dgx-h100 --nodes 8 --ep 8 --pp 8 --vpp 2 --gbs 256 --framework torchtitan --pipeline-schedule dualpipev --recompute op
check deepseek-v3 --system dgx-h100 --nodes 128 --pp 16 --vpp 2 --cp 4 --ep 32 --zero 2 --gbs 4096 --framework torchtitan --pipeline-schedule dualpipev --stage-layers 1,2*30,0

# estimate --simulate reports the simulation's step and the analytic one beside it
est=$("$dplan" estimate llama2-7b --system dgx-h100 --tp 2 --pp 4 --gbs 64 --simulate --json)
sim=$("$dplan" simulate llama2-7b --system dgx-h100 --tp 2 --pp 4 --gbs 64 --json)
python3 - "$est" "$sim" <<'PY' || fail=1
import json, sys
est, sim = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ok = est["simulated"] and est["step_time_s"] == sim["step_s"] and \
     est["analytic_step_time_s"] == sim["estimate_step_s"]
print("estimate --simulate:", "uses" if ok else "does not use", "the simulated step")
sys.exit(0 if ok else 1)
PY
exit $fail
