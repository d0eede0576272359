#!/usr/bin/env bash
# Mixed precision (executor/README.md "Mixed precision"): the CPU backend's bf16 / fp16
# storage emulation and fp16 dynamic loss scaling.
#   mixprec.sh CASE DPLAN COMPARE RUNS_DIR
# Runs train tiny-gpt / tiny-llama for up to 20 steps (gbs 8, seq 32) on up to 2 ranks.
# DPLAN_TEST_GRAD_INF=STEPS (TEST-ONLY, executor/schedule.c) makes world rank 0's first
# reduced gradient element inf at those steps of an fp16 run.
set -u
case=$1 dplan=$2 compare=$3 runs=$4
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$runs"
cd "$runs" || exit 1
fail=0
suite=mixprec
. "$here/runs_lib.sh"
resident=()
[ "${DPLAN_TEST_RESIDENT:-0}" = 1 ] && resident=(--resident)
# record FILE STEP: the step's log record
record() { grep "\"status\":\"[a-z]*\",\"step\":$2,\"steps\"" "$1" | tail -1; }
pool() { grep -o "\"$2\":[0-9]*" "$1" | head -1 | cut -d: -f2; } # pool LOG NAME: bytes

BASE=(--steps 20 --gbs 8 --seq-len 32)
case $case in
bf16)
  # bf16 and fp32 runs of the same model, data and seed. Tolerance on the losses: a
  # token's loss log sum exp(z) - z_t moves by at most 2 max|dz| when the logits z move
  # by dz, and a bf16 store moves each by at most u |z| (u = 2^-8, RNE with 8
  # significant bits); with |z| ~ 1 here that is 2^-7 absolute on losses of 4.4-5.3,
  # the last rounding alone in the worst case, so 2^-7 relative leaves room for the
  # rounding upstream (measured: 3e-4). fp32 runs of one layout repeat bit for bit, so
  # a difference above 1e-5 shows the rounding is on. Weights are not compared: AdamW's
  # normalised updates of tiny gradients differ by up to lr where their signs differ.
  run fp32 tiny-gpt "${BASE[@]}" --mbs 8
  run bf16 tiny-gpt "${BASE[@]}" --mbs 8 --precision bf16
  "$compare" fp32 bf16 --losses-only --rtol 0.0078125 "${resident[@]}" || bad "bf16 losses"
  if "$compare" fp32 bf16 --losses-only --rtol 1e-5 > same.txt 2>&1; then
    bad "bf16 losses within 1e-5 of fp32 at every step: is the rounding on?"
  else
    say "bf16 differs from fp32 by more than 1e-5: $(grep -m1 worst same.txt)"
  fi
  # fp16 with a scale that does not overflow here (no step skipped): the same bound with
  # fp16's u = 2^-11, so 2^-10 (measured: 3e-5, 8 times below bf16's, fp16's 3 more
  # significand bits).
  run fp16 tiny-gpt "${BASE[@]}" --mbs 8 --precision fp16 --initial-loss-scale 1024
  "$compare" fp32 fp16 --losses-only --rtol 0.0009765625 || bad "fp16 losses"
  grep -q '"skipped":true' fp16/log.jsonl && bad "fp16 at scale 1024 skipped a step"
  # The same bounds on layouts whose store points differ from the single process's (TP's
  # partial sums, CP's ring, interleaved PP's messages), each against its fp32 run.
  m8=$here/models/tiny-gpt-8l.json
  for l in "tp2_sp|tiny-gpt|--tp 2 --sp --mbs 2" "cp2|tiny-llama|--cp 2 --mbs 2 --recompute selective" \
           "tp2_pp2|tiny-llama|--tp 2 --pp 2 --mbs 2" "pp2_vpp2|$m8|--pp 2 --vpp 2 --mbs 1"; do
    IFS='|' read -r n m o <<< "$l"
    read -ra o <<< "$o"
    run "$n" "$m" "${BASE[@]}" "${o[@]}"
    run "${n}_bf16" "$m" "${BASE[@]}" "${o[@]}" --precision bf16
    run "${n}_fp16" "$m" "${BASE[@]}" "${o[@]}" --precision fp16 --initial-loss-scale 1024
    "$compare" "$n" "${n}_bf16" --losses-only --rtol 0.0078125 || bad "bf16 $n losses"
    "$compare" "$n" "${n}_fp16" --losses-only --rtol 0.0009765625 || bad "fp16 $n losses"
  done
  # The memory plan: bf16 keeps a working copy of the weights beside the fp32 master:
  # the layers' LW elements in 2 bytes, the edge E and one layer's window W in 4, so
  # params = 4 P + 2 LW + 4 E + 4 W; tiny-gpt has L = 2 layers (LW = 2 W), so this is
  # 4 P + 4 LW + 4 E = 2 x grads (4 P), as the fp32 copy of the emulation was (P =
  # 120576: W = 49984, LW = 99968, E = 20608; exec_storage_memory checks a model of 24
  # layers, where the two differ). fp32: params = grads.
  p32=$(pool fp32/log.jsonl params) g32=$(pool fp32/log.jsonl grads)
  p16=$(pool bf16/log.jsonl params) g16=$(pool bf16/log.jsonl grads)
  [ "$p32" = "$g32" ] || bad "fp32 params pool $p32, grads $g32: expected equal"
  [ "$p16" = $((2 * g16)) ] || bad "bf16 params pool $p16, expected 2 x grads = $((2 * g16))"
  ;;

fp8)
  # FP8 GEMMs (current per-tensor scaling, E4M3 forward, E5M2 gradients) against the
  # bf16 run of the same model, data and seed: bf16 storage in both, only the linear
  # GEMMs' inputs differ. E4M3's unit roundoff is 2^-4, 16 times bf16's, but each GEMM
  # output sums k products whose rounding errors have independent signs, and the
  # logits come from the output layer, which stays bf16; the bound is bf16's against
  # fp32, 2^-7 relative on the losses (measured: 2.1e-4 on tiny-gpt, 20 steps). That
  # the FP8 path is on at all: above 1e-5 from bf16. That it is the right recipe (formats,
  # scaling): test_executor_fp8.
  run bf16 tiny-gpt "${BASE[@]}" --mbs 8 --precision bf16
  run fp8 tiny-gpt "${BASE[@]}" --mbs 8 --precision fp8
  "$compare" bf16 fp8 --losses-only --rtol 0.0078125 "${resident[@]}" || bad "fp8 losses"
  if "$compare" bf16 fp8 --losses-only --rtol 1e-5 > same.txt 2>&1; then
    bad "fp8 losses within 1e-5 of bf16 at every step: are the FP8 GEMMs on?"
  else
    say "fp8 differs from bf16 by more than 1e-5: $(grep -m1 worst same.txt)"
  fi
  grep -q '"gemm_precision":.*"fp8"' fp8/plan.json || bad "fp8/plan.json lacks gemm_precision fp8"
  grep -q '"fp8_recipe":.*"current"' fp8/plan.json || bad "fp8/plan.json lacks fp8_recipe current"
  # Llama (RMSNorm, SwiGLU, RoPE, GQA) and TP 2 with SP (the GEMMs of a TP shard).
  for l in "l|tiny-llama|--mbs 8" "tp2_sp|tiny-gpt|--tp 2 --sp --mbs 2"; do
    IFS='|' read -r n m o <<< "$l"
    read -ra o <<< "$o"
    run "${n}_bf16" "$m" "${BASE[@]}" "${o[@]}" --precision bf16
    run "${n}_fp8" "$m" "${BASE[@]}" "${o[@]}" --precision fp8
    "$compare" "${n}_bf16" "${n}_fp8" --losses-only --rtol 0.0078125 || bad "fp8 $n losses"
  done
  # What the executor does not run is refused in one line, exit 2 (usage) or 1.
  for r in "2|--fp8-recipe: the executor runs current|--precision fp8 --fp8-recipe delayed" \
           "2|--fp8-params: the executor keeps bf16 weights|--precision fp8 --fp8-params" \
           "2|--precision auto: expected fp32, bf16, fp16 or fp8|--precision auto"; do
    IFS='|' read -r code msg o <<< "$r"
    read -ra o <<< "$o"
    "$dplan" run tiny-gpt "${BASE[@]}" --mbs 8 "${o[@]}" --out refused > refused.out 2> refused.err
    got=$?
    [ "$got" = "$code" ] || bad "dplan run ${o[*]}: exit $got, expected $code"
    grep -q -- "$msg" refused.err || bad "dplan run ${o[*]}: $(head -1 refused.err)"
    [ "$(wc -l < refused.err)" = 1 ] || bad "dplan run ${o[*]}: more than one line"
  done
  "$dplan" run "$here/models/tiny-moe.json" "${BASE[@]}" --mbs 8 --precision fp8 --out refused \
    > refused.out 2> refused.err
  got=$?
  [ "$got" = 1 ] || bad "dplan run tiny-moe --precision fp8: exit $got, expected 1"
  grep -q "precision fp8: mixture-of-experts layers have no FP8 GEMMs yet" refused.err ||
    bad "dplan run tiny-moe --precision fp8: $(head -1 refused.err)"
  ;;

parallel)
  # Layouts with the single process's store points and its fp32 summation order, which
  # bf16 needs: the working copy is a step function of the fp32 master, so an fp32 ulp
  # of difference flips a master weight near a bf16 midpoint by a whole bf16 ulp, and
  # the runs drift apart (2e-5 in the loss by step 20). So: one thread per rank (the
  # kernels' OpenMP reductions split by thread); DP with one micro-batch per rank
  # against the single process's two (g1 + g2 either way; with four against two per
  # rank, (g1 + g2) + (g3 + g4) is not ((g1 + g2) + g3) + g4); PP with untied
  # embeddings (tied ones add the two stages' embedding gradients in another order;
  # the messages are the stored tensors themselves). TP stores its partial sums before
  # the reduction, a second rounding: not among them (5e-5).
  T=(--threads 1 --precision bf16)
  run s tiny-gpt "${BASE[@]}" --mbs 4 "${T[@]}"
  # ZeRO-3's gathered windows are its working copy (rounded once gathered), so zero 3
  # equals it too, with full recompute (the backward's gather and recomputed forward).
  for l in "dp2|--dp 2 --mbs 4" "dp2_zero1|--dp 2 --mbs 4 --zero 1" \
           "dp2_zero3_full|--dp 2 --mbs 4 --zero 3 --recompute full"; do
    n=${l%%|*}
    read -ra o <<< "${l#*|}"
    run "$n" tiny-gpt "${BASE[@]}" "${o[@]}" "${T[@]}"
    "$compare" s "$n" "${resident[@]}" || bad "bf16 $n against the single process"
  done
  run l4 tiny-llama "${BASE[@]}" --mbs 4 "${T[@]}"
  run ldp2 tiny-llama "${BASE[@]}" --dp 2 --mbs 4 "${T[@]}"
  "$compare" l4 ldp2 "${resident[@]}" || bad "bf16 tiny-llama dp2 against the single process"
  run lz3 tiny-llama "${BASE[@]}" --dp 2 --mbs 4 --zero 3 "${T[@]}"
  "$compare" l4 lz3 "${resident[@]}" || bad "bf16 tiny-llama dp2 zero3 against the single process"
  run l2 tiny-llama "${BASE[@]}" --mbs 2 "${T[@]}"
  run lpp2 tiny-llama "${BASE[@]}" --pp 2 --mbs 2 "${T[@]}"
  "$compare" l2 lpp2 "${resident[@]}" || bad "bf16 tiny-llama pp2 against the single process"
  ;;

moe)
  # Mixture of experts (moe.c's store points: the experts' and shared experts' tensors
  # and gradients in the run's precision, the router in fp32): bf16 and fp16 against
  # fp32 with the bounds of the bf16 case (the logits' argument is the same), for the
  # softmax router (tiny-moe), the sigmoid + bias router (tiny-moe-v3), a shared expert
  # with its gate (tiny-qwen2moe) and q/k norm (tiny-qwen3moe); each bf16 run must also
  # differ from fp32 by more than 1e-5 (the rounding is on).
  mm=$here/models
  for n in tiny-moe tiny-moe-v3 tiny-qwen2moe tiny-qwen3moe; do
    run "$n" "$mm/$n.json" "${BASE[@]}" --mbs 2
    run "${n}_bf16" "$mm/$n.json" "${BASE[@]}" --mbs 2 --precision bf16
    "$compare" "$n" "${n}_bf16" --losses-only --rtol 0.0078125 "${resident[@]}" || bad "bf16 $n losses"
    "$compare" "$n" "${n}_bf16" --losses-only --rtol 1e-5 > same.txt 2>&1 &&
      bad "bf16 $n losses within 1e-5 of fp32 at every step: is the rounding on?"
  done
  run moe_fp16 "$mm/tiny-moe.json" "${BASE[@]}" --mbs 2 --precision fp16 --initial-loss-scale 1024
  "$compare" tiny-moe moe_fp16 --losses-only --rtol 0.0009765625 || bad "fp16 tiny-moe losses"
  # fp16's loss scale reaches every gradient, the auxiliary loss's too (a regression: it
  # was left unscaled, 1/1024 of its weight after the unscaling). After one step AdamW
  # has moved each weight by lr sign(g) (m / sqrt(v) = g / |g| at step 1), so fp16 and
  # fp32 differ only where fp16's rounding flips a gradient's sign, by 2 lr = 2e-3 on
  # weights of rms ~0.02: 1e-2 relative is 1% of a tensor's elements flipped (measured:
  # 3e-3, tiny expert gradients; the unscaled auxiliary gradient: 5e-2 on the router).
  run one "$mm/tiny-moe.json" --steps 1 --gbs 8 --seq-len 32 --mbs 2
  run one_fp16 "$mm/tiny-moe.json" --steps 1 --gbs 8 --seq-len 32 --mbs 2 --precision fp16 \
    --initial-loss-scale 1024
  "$compare" one one_fp16 --rtol 1e-2 || bad "fp16 tiny-moe after one step: weights"
  # Expert parallelism: ep 2 against the fp32 single process within bf16's bound, and
  # with one micro-batch per rank and one thread (the parallel case's conditions: the
  # same fp32 sums, so the same store points see the same values) equal to the
  # single-process bf16 run of two micro-batches, softmax and sigmoid routers.
  run moe_ep2_bf16 "$mm/tiny-moe.json" "${BASE[@]}" --mbs 2 --dp 2 --ep 2 --precision bf16
  "$compare" tiny-moe moe_ep2_bf16 --losses-only --rtol 0.0078125 || bad "bf16 ep2 losses"
  T=(--threads 1 --precision bf16)
  for n in tiny-moe tiny-moe-v3; do
    run "${n}_s" "$mm/$n.json" "${BASE[@]}" --mbs 4 "${T[@]}"
    run "${n}_ep2" "$mm/$n.json" "${BASE[@]}" --mbs 4 --dp 2 --ep 2 "${T[@]}"
    "$compare" "${n}_s" "${n}_ep2" "${resident[@]}" || bad "bf16 $n ep2 against the single process"
  done
  ;;

scaler)
  # fp16 on dp 2 from scale 1024 (no natural overflow), constant lr; rank 0's gradient
  # made inf at steps 3, 4 and 8 (rank 1 learns it from the MAX over the world).
  # Megatron's hysteresis 2: step 3 spends one (scale kept), step 4 the last (halved to
  # 512 for step 5); the tracker is not restored until a growth, so step 8 halves at
  # once (256 for step 9).
  FP16=(tiny-gpt --gbs 8 --seq-len 32 --dp 2 --mbs 2 --precision fp16 --initial-loss-scale 1024
        --min-lr-frac 1)
  DPLAN_TEST_GRAD_INF=3,4,8 run inf "${FP16[@]}" --steps 10
  for want in "1 1024 false" "2 1024 false" "3 1024 true" "4 1024 true" "5 512 false" \
              "8 512 true" "9 256 false" "10 256 false"; do
    read -r st sc sk <<< "$want"
    rec=$(record inf/log.jsonl "$st")
    grep -q "\"loss_scale\":$sc,\"skipped\":$sk" <<< "$rec" ||
      bad "step $st: expected loss_scale $sc, skipped $sk: $rec"
  done
  grep -q '^loss scale: 256 after the last step; 3 steps skipped for an overflow$' inf.err ||
    bad "summary: $(grep 'loss scale' inf.err)"
  # The lr schedule counts updates, not steps (Megatron's scheduler): over 4 steps,
  # cosine from 1e-3 to 1e-4, lr(k) = 1e-4 + 0.45e-3 (1 + cos(pi (k - 1) / 3)) for the k-th
  # update: step 2 skipped and step 3 both at k = 2 (7.75e-4), step 4 at k = 3 (3.25e-4).
  DPLAN_TEST_GRAD_INF=2 run lr tiny-gpt --gbs 8 --seq-len 32 --mbs 8 --precision fp16 \
    --initial-loss-scale 1024 --steps 4
  for want in "2 0.000775" "3 0.000775" "4 0.000325"; do
    read -r st lr <<< "$want"
    got=$(record lr/log.jsonl "$st" | grep -o '"lr":[0-9.e-]*' | cut -d: -f2)
    awk -v g="$got" -v w="$lr" 'BEGIN { exit !(g - w < 1e-12 && w - g < 1e-12) }' ||
      bad "step $st: lr $got, expected $lr"
  done
  # A skipped step changes no weight and no AdamW state: 4 steps with steps 3 and 4
  # skipped end where 2 clean steps end, bit for bit.
  run two "${FP16[@]}" --steps 2
  DPLAN_TEST_GRAD_INF=3,4 run four "${FP16[@]}" --steps 4
  cmp -s two/model.safetensors four/model.safetensors ||
    bad "steps 3, 4 skipped, but the weights differ from the 2-step run's"
  ;;

resume)
  # The scaler's state survives a kill and resume: rank 1 is killed at step 7, the job
  # restarts from the step-5 checkpoint (scale 512, hysteresis spent), step 8's overflow
  # must halve at once as in the uninterrupted run (a scaler started afresh would keep
  # 1024 after step 8 and diverge), and the final weights equal it bit for bit.
  FP16=(tiny-gpt --steps 10 --gbs 8 --seq-len 32 --dp 2 --mbs 2 --precision fp16
        --initial-loss-scale 1024 --min-lr-frac 1)
  DPLAN_TEST_GRAD_INF=3,4,8 run whole "${FP16[@]}" --ckpt-dir whole/ck --ckpt-every 5
  DPLAN_TEST_GRAD_INF=3,4,8 DPLAN_FAULT_INJECT=1:7:kill run killed "${FP16[@]}" \
    --ckpt-dir killed/ck --ckpt-every 5 --max-restarts 2 --timeout 10
  grep -q '"status":"restarting".*"resume_step":5' killed/log.jsonl || bad "no restart from step 5"
  grep -q '"attempt":1,"status":"running","step":6,.*"loss_scale":512,"skipped":false' \
    killed/log.jsonl || bad "step 6 after the resume: $(grep '"attempt":1,"status":"running","step":6,' killed/log.jsonl)"
  grep -q '"attempt":1,"status":"running","step":9,.*"loss_scale":256,"skipped":false' \
    killed/log.jsonl || bad "step 9 after the resume: $(grep '"attempt":1,"status":"running","step":9,' killed/log.jsonl)"
  # After step 5: scale 512, one clean step since the backoff, no hysteresis left;
  # AdamW's t is 3 (steps 3 and 4 made no update).
  tr -d ' \t\n' < whole/ck/step_00000005/manifest.json > m5.txt
  grep -q '"step":3,.*"loss_scale":512,"loss_scale_growth":1,"loss_scale_hysteresis":0' m5.txt ||
    bad "the step-5 manifest lacks the scaler state: $(grep -o '"optimizer":{[^}]*}' m5.txt)"
  cmp -s whole/model.safetensors killed/model.safetensors ||
    bad "the resumed run's weights differ from the uninterrupted run's"
  ;;
*)
  echo "mixprec.sh: unknown case $case"
  exit 2
  ;;
esac
[ "$fail" = 0 ] && say ok
exit "$fail"
