#!/usr/bin/env bash
# Checkpoint, resume, restart and fault-injection tests (README "Checkpoints and restarts").
#   ckpt.sh CASE DPLAN CKPT_TOOL RUNS_DIR
# Every case trains tiny-gpt or tiny-llama for 20 steps (gbs 8, seq 32) on up to 4 ranks.
# "Bit-identical" means the final model.safetensors files compare equal byte for byte (cmp).
# Faults come from DPLAN_FAULT_INJECT=RANK:STEP:MODE (TEST-ONLY).
set -u
case=$1 dplan=$2 tool=$3 runs=$4
here=$(cd "$(dirname "$0")" && pwd)
models=$here/models
mkdir -p "$runs"
cd "$runs" || exit 1
fail=0
say() { echo "ckpt $case: $*"; }
bad() { echo "FAIL ckpt $case: $*"; fail=1; }

GPT=(tiny-gpt --steps 20 --gbs 8 --seq-len 32 --dp 2 --tp 2 --mbs 2)
LLAMA=(tiny-llama --steps 20 --gbs 8 --seq-len 32 --dp 2 --pp 2 --mbs 1 --zero 1)

# resume NAME EXPECTED_EXIT ARGS...: dplan run with --out NAME, output in NAME.out/.err
resume() {
  local name=$1 want=$2
  shift 2
  "$dplan" run "$@" --out "$name" > "$name.out" 2> "$name.err"
  local got=$?
  sanitized "$name"
  if [ "$got" != "$want" ]; then
    bad "dplan run $* --out $name: exit $got, expected $want"
    tail -20 "$name.err"
  fi
}
# run NAME EXPECTED_EXIT ARGS...: the same after deleting NAME
run() {
  rm -rf "$1"
  resume "$@"
}
# Sanitizer reports in any rank fail the case (a supervisor restart must not hide them).
sanitized() {
  if grep -Eq 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$1.err"; then
    bad "sanitizer report in $1.err"
    grep -E -A5 'Sanitizer|runtime error:' "$1.err" | head -30
  fi
}
identical() { # identical A B WHAT
  if cmp -s "$1/model.safetensors" "$2/model.safetensors"; then
    say "$3: final weights bit-identical to the uninterrupted run"
  else
    bad "$3: $1/model.safetensors differs from $2/model.safetensors"
  fi
}
has() { # has FILE REGEX WHAT
  grep -Eq -- "$2" "$1" || { bad "$3: $1 lacks /$2/"; tail -5 "$1"; }
}

case $case in
ref)
  # The uninterrupted runs (no checkpoints) the other cases compare with.
  run ref 0 "${GPT[@]}"
  ;;

src)
  # Uninterrupted runs that save checkpoints (sources for resharding and export); saving
  # must not change training.
  run src-gpt 0 "${GPT[@]}" --ckpt-dir src-gpt/ck --ckpt-every 10
  identical src-gpt ref "saving checkpoints"
  run src-llama 0 "${LLAMA[@]}" --ckpt-dir src-llama/ck --ckpt-every 10
  has src-gpt/log.jsonl '"status":"checkpointing","step":10,.*"checkpoint_saved_at":"20[0-9-]+T[0-9:]+Z"' "checkpoint record"
  has src-gpt/log.jsonl '"status":"finished"' "finished record"
  # --ckpt-interval: a save whenever that much time passed (here 60 us: after every step).
  run interval 0 tiny-gpt --steps 6 --gbs 8 --seq-len 32 --mbs 4 --ckpt-dir interval/ck \
    --ckpt-interval 0.000001 --keep 2
  [ "$(grep -c '"status":"checkpointing"' interval/log.jsonl)" = 6 ] ||
    bad "--ckpt-interval: $(grep -c checkpointing interval/log.jsonl) saves in 6 steps"
  [ "$(ls interval/ck | tr '\n' ' ')" = "step_00000005 step_00000006 " ] ||
    bad "--keep 2 left $(ls interval/ck | tr '\n' ' ')"
  ;;

kill)
  # (a) a rank is killed (SIGKILL) at step 7; the supervisor restarts the job from step 5.
  DPLAN_FAULT_INJECT=1:7:kill run kill 0 "${GPT[@]}" --ckpt-dir kill/ck --ckpt-every 5 \
    --max-restarts 2 --hang-timeout 10
  identical kill ref "rank 1 killed at step 7, --max-restarts 2"
  has kill/log.jsonl '"status":"failed","rank":1,"step":7,"reason":"signal"' "failed record"
  has kill/log.jsonl '"status":"restarting","restart":1,.*"resume_step":5' "restarting record"
  has kill/log.jsonl '"status":"finished".*"restarts":1' "finished record"
  has kill.err 'finished after 1 restart' "supervisor message"
  # Every record, a rank's or the launcher's, says which launch it belongs to.
  [ "$(grep -vc '"attempt":[01],' kill/log.jsonl)" = 0 ] || bad "a record without its attempt"
  has kill/log.jsonl '"attempt":1,"status":"running","step":8,' "a step of the relaunch"
  # --hang-timeout, --timeout's old name, still works and says it is deprecated (once).
  has kill.err 'warning: --hang-timeout is deprecated: it is --timeout' "deprecation note"
  [ "$(grep -c 'is deprecated' kill.err)" = 1 ] || bad "the deprecation note is not said once"
  ;;

hang)
  # (b) rank 2 hangs at step 7; no MPI call fails, the heartbeat watchdog notices and names it.
  start=$(date +%s)
  DPLAN_FAULT_INJECT=2:7:hang run hang 0 "${GPT[@]}" --ckpt-dir hang/ck --ckpt-every 5 \
    --max-restarts 2 --timeout 4
  identical hang ref "rank 2 hung at step 7, --timeout 4"
  has hang/log.jsonl '"status":"failed","rank":2,"step":7,"reason":"hang"' "failed record"
  has hang/log.jsonl '"status":"restarting"' "restarting record"
  took=$(($(date +%s) - start))
  [ "$took" -le 90 ] || bad "took $took s"
  # A rank that fails in every attempt: one restart (from the start: no checkpoint yet),
  # then the supervisor gives up with exit 1.
  DPLAN_FAULT_INJECT='1:3:exit:*' run giveup 1 "${GPT[@]}" --ckpt-dir giveup/ck \
    --max-restarts 1 --steps 4
  has giveup/log.jsonl '"status":"restarting".*"resume_from":null' "restart from the start"
  has giveup/log.jsonl '"attempt":1,"status":"failed","rank":1,"step":3,.*"will_restart":false' "last failure"
  has giveup.err 'giving up after 1 restart: rank 1 at step 3: exit status 3' "message"
  ;;

crash)
  # (c) rank 1 dies (SIGKILL) halfway through writing its file of the step-10 checkpoint.
  DPLAN_FAULT_INJECT=1:10:ckpt-crash run crash 1 "${GPT[@]}" --ckpt-dir crash/ck --ckpt-every 5
  [ -d crash/ck/step_00000010.tmp ] || bad "no half-written crash/ck/step_00000010.tmp"
  [ -e crash/ck/step_00000010 ] && bad "crash/ck/step_00000010 was published"
  "$dplan" ckpt info crash/ck > crash.info 2>&1 || bad "ckpt info failed: $(cat crash.info)"
  has crash.info ' 5 .* ok ' "step 5 intact"
  has crash.info ' 10 .* unpublished ' "step 10 unpublished"
  resume crash 0 "${GPT[@]}" --resume crash/ck
  has crash.err 'resuming from .*step_00000005' "resumed from step 5"
  identical crash ref "crash while writing step 10, resumed from step 5"
  # A full disk: the save fails cleanly, training goes on, the other checkpoints are kept.
  DPLAN_FAULT_INJECT=1:10:enospc run enospc 0 "${GPT[@]}" --ckpt-dir enospc/ck --ckpt-every 5 \
    --keep 0
  has enospc.err 'rank 1: checkpoint of step 10: .*rank_00001.safetensors: write failed: No space left on device' "rank message"
  has enospc.err 'checkpoint of step 10 failed: .* the checkpoint of step 5 is kept' "rank 0 message"
  has enospc/log.jsonl '"status":"checkpointing","step":10,.*"checkpoint_error"' "log record"
  [ "$(ls enospc/ck)" = "$(printf 'step_00000005\nstep_00000015\nstep_00000020')" ] ||
    bad "enospc/ck holds $(ls enospc/ck | tr '\n' ' ')"
  identical enospc ref "a failed save"
  ;;

corrupt)
  # (d) the newest checkpoint is damaged: resume falls back to the previous one.
  DPLAN_FAULT_INJECT=1:13:exit run corrupt 1 "${GPT[@]}" --ckpt-dir corrupt/ck --ckpt-every 5
  cp -r corrupt/ck trunc-ck
  printf 'X' | dd of=corrupt/ck/step_00000010/rank_00001.safetensors bs=1 seek=4000 \
    conv=notrunc 2> /dev/null
  "$dplan" ckpt info corrupt/ck > corrupt.info 2>&1 && bad "ckpt info passed a damaged checkpoint"
  has corrupt.info ' 10 .*damaged .*rank_00001.safetensors: checksum mismatch' "info names the file"
  resume corrupt 0 "${GPT[@]}" --resume corrupt/ck
  has corrupt.err 'skipping checkpoint .*step_00000010: .*rank_00001.safetensors: checksum mismatch' "warning"
  has corrupt.err 'resuming from .*step_00000005' "fell back to step 5"
  identical corrupt ref "corrupted step 10, resumed from step 5"
  # Truncated and half-written checkpoints are skipped too; a foreign directory is ignored.
  truncate -s 1000 trunc-ck/step_00000010/rank_00000.safetensors
  mkdir -p trunc-ck/step_00000012 trunc-ck/step_00000011.tmp
  "$dplan" ckpt info trunc-ck --no-verify > trunc.info 2>&1
  has trunc.info ' 10 .*damaged .*truncated: 1000 bytes' "truncated"
  has trunc.info ' 12 .*damaged .*no manifest.json' "half-written"
  has trunc.info ' 11 .*unpublished' "tmp"
  # Manifests with nonsense in them (the loader must reject them, UBSan watching).
  for bad in 1e300 -5 '"x"' 2147483649; do
    rm -rf trunc-ck/step_00000004
    cp -r trunc-ck/step_00000005 trunc-ck/step_00000004
    sed -i -E "0,/\"step\":[[:space:]]*5/s//\"step\": 4/; s/\"offset\":[[:space:]]*\[[^]]*\]/\"offset\": [$bad, 0]/" \
      trunc-ck/step_00000004/manifest.json
    "$dplan" ckpt info trunc-ck/step_00000004 > nonsense.info 2>&1 &&
      bad "offset $bad: a nonsense manifest passed"
    has nonsense.info 'damaged .*manifest.json: tensors\[0\]\.shards\[0\]\.offset: expected \[a, b\]' "offset $bad rejected (with its JSON path)"
  done
  rm -rf trunc-ck/step_00000004
  printf '{"dplan_checkpoint": 1, "step": 3' > trunc-ck/step_00000003.json
  mkdir -p trunc-ck/step_00000003 && mv trunc-ck/step_00000003.json trunc-ck/step_00000003/manifest.json
  "$dplan" ckpt info trunc-ck/step_00000003 > syntax.info 2>&1
  has syntax.info 'damaged .*manifest.json:1:[0-9]+: JSON syntax error' "syntax error"
  "$dplan" ckpt info trunc-ck --json > trunc.json 2> /dev/null
  has trunc.json '"newest_complete":.*step_00000005' "json newest"
  # An incompatible model or batch is refused with the reason, before any rank starts.
  run foreign 1 tiny-llama --steps 20 --gbs 8 --seq-len 32 --resume corrupt/ck
  has foreign.err 'written for model tiny-gpt, which differs from this run.s tiny-llama: .*ffn gelu vs swiglu' "model refused"
  run rebatch 1 "${GPT[@]}" --gbs 16 --resume corrupt/ck
  has rebatch.err 'written with gbs=8 seq_len=32, this run has gbs=16' "batch refused"
  run nockpt 1 "${GPT[@]}" --resume "$runs"
  has nockpt.err 'no complete checkpoint' "empty directory"
  run usage 2 "${GPT[@]}" --ckpt-every 5
  has usage.err 'ckpt-every needs --ckpt-dir' "usage"
  ;;

cp)
  # Context parallelism (executor/cp.c): a cp=2 dp=2 ZeRO-1 run (AdamW state in 4 shards
  # over dp x cp; weights stored by the cp_rank 0, dp_rank 0 ranks) saves checkpoints,
  # survives a killed rank, and its step-10 checkpoint resumes on one process (cp=1, no
  # ZeRO) and on cp=4 within 1e-5.
  CP=(tiny-llama --steps 20 --gbs 8 --seq-len 32 --cp 2 --dp 2 --mbs 1 --zero 1)
  run cp-src 0 "${CP[@]}" --ckpt-dir cp-src/ck --ckpt-every 10
  DPLAN_FAULT_INJECT=3:7:kill run cp-kill 0 "${CP[@]}" --ckpt-dir cp-kill/ck --ckpt-every 5 \
    --max-restarts 2 --timeout 10
  identical cp-kill cp-src "cp=2: rank 3 killed at step 7, resumed from step 5"
  has cp-kill/log.jsonl '"status":"restarting","restart":1,.*"resume_step":5' "restarting record"
  run cp-rs 0 tiny-llama --steps 20 --gbs 8 --seq-len 32 --mbs 2 \
    --resume cp-src/ck/step_00000010
  "$tool" losses cp-src/log.jsonl cp-rs/log.jsonl 11 1e-5 || bad "cp2 dp2 zero1 -> 1 rank losses"
  "$tool" close cp-src/model.safetensors cp-rs/model.safetensors 1e-5 ||
    bad "cp2 dp2 zero1 -> 1 rank weights"
  # ... and on cp=4 (the 4 AdamW shards of dp x cp resharded to the 4 CP ranks).
  run cp-rs4 0 tiny-llama --steps 20 --gbs 8 --seq-len 32 --cp 4 --mbs 2 --zero 1 \
    --resume cp-src/ck/step_00000010
  "$tool" losses cp-src/log.jsonl cp-rs4/log.jsonl 11 1e-5 || bad "cp2 dp2 zero1 -> cp4 losses"
  "$tool" close cp-src/model.safetensors cp-rs4/model.safetensors 1e-5 ||
    bad "cp2 dp2 zero1 -> cp4 weights"
  ;;

reshard)
  # (e) resume the step-10 checkpoints under other layouts; the losses of steps 11..20 and
  # the final weights stay within 1e-5 of the uninterrupted run.
  run rs-gpt-pp2 0 tiny-gpt --steps 20 --gbs 8 --seq-len 32 --pp 2 --mbs 1 \
    --resume src-gpt/ck/step_00000010
  "$tool" losses src-gpt/log.jsonl rs-gpt-pp2/log.jsonl 11 1e-5 || bad "dp2 tp2 -> pp2 losses"
  "$tool" close src-gpt/model.safetensors rs-gpt-pp2/model.safetensors 1e-5 ||
    bad "dp2 tp2 -> pp2 weights"
  run rs-llama-tp2 0 tiny-llama --steps 20 --gbs 8 --seq-len 32 --tp 2 --sp --mbs 2 \
    --resume src-llama/ck/step_00000010
  "$tool" losses src-llama/log.jsonl rs-llama-tp2/log.jsonl 11 1e-5 ||
    bad "dp2 pp2 zero1 -> tp2 sp losses"
  "$tool" close src-llama/model.safetensors rs-llama-tp2/model.safetensors 1e-5 ||
    bad "dp2 pp2 zero1 -> tp2 sp weights"
  [ "$(ls src-gpt/ck/step_00000010 | wc -l)" = 5 ] ||
    bad "a run resumed from one checkpoint wrote into it: $(ls src-gpt/ck/step_00000010)"
  # The same layout resumes bit-identically (ZeRO-1 shards and the tied embedding's copy).
  run rs-llama-same 0 "${LLAMA[@]}" --resume src-llama/ck/step_00000010
  identical rs-llama-same src-llama "dp2 pp2 zero1 resumed on the same layout"
  ;;

vpp)
  # (h) interleaved 1F1B (executor/interleave.c): a pp2 vpp2 checkpoint (stage 0 holds
  # layers 0-1 and 4-5, stage 1 layers 2-3 and 6-7) resumes at pp1 within 1e-5 of the
  # uninterrupted run, and on its own layout bit-identically.
  V=("$here/models/tiny-gpt-8l.json" --steps 20 --gbs 8 --seq-len 32 --mbs 1)
  run vsrc 0 "${V[@]}" --pp 2 --vpp 2 --ckpt-dir vsrc/ck --ckpt-every 10
  run vrs-pp1 0 "${V[@]}" --resume vsrc/ck/step_00000010
  "$tool" losses vsrc/log.jsonl vrs-pp1/log.jsonl 11 1e-5 || bad "pp2 vpp2 -> pp1 losses"
  "$tool" close vsrc/model.safetensors vrs-pp1/model.safetensors 1e-5 ||
    bad "pp2 vpp2 -> pp1 weights"
  run vsame 0 "${V[@]}" --pp 2 --vpp 2 --resume vsrc/ck/step_00000010
  identical vsame vsrc "pp2 vpp2 resumed on the same layout"
  # DualPipeV's V (stage 0 holds layers 0-1 and 6-7 with the embedding and the loss, stage 1
  # layers 2-5): its checkpoint resumes at pp1 and under interleaved 1F1B (other layers per
  # stage) within 1e-5 of the uninterrupted run, and on its own layout bit-identically.
  D=(--pp 2 --vpp 2 --framework torchtitan --pipeline-schedule dualpipev)
  run dsrc 0 "${V[@]}" "${D[@]}" --ckpt-dir dsrc/ck --ckpt-every 10
  run drs-pp1 0 "${V[@]}" --resume dsrc/ck/step_00000010
  "$tool" losses dsrc/log.jsonl drs-pp1/log.jsonl 11 1e-5 || bad "dualpipev -> pp1 losses"
  "$tool" close dsrc/model.safetensors drs-pp1/model.safetensors 1e-5 ||
    bad "dualpipev -> pp1 weights"
  run drs-vpp 0 "${V[@]}" --pp 2 --vpp 2 --resume dsrc/ck/step_00000010
  "$tool" close dsrc/model.safetensors drs-vpp/model.safetensors 1e-5 ||
    bad "dualpipev -> pp2 vpp2 1f1b weights"
  run dsame 0 "${V[@]}" "${D[@]}" --resume dsrc/ck/step_00000010
  identical dsame dsrc "dualpipev resumed on the same layout"
  ;;

zero)
  # (g) sharded states (executor/shard.c): ZeRO-3 and HSDP checkpoints keep ZeRO-1's flat
  # shards; saving (which gathers ZeRO-3's parameters) does not change training, a killed
  # rank's job resumes bit-identically, and the shards resume under other layouts.
  Z3=(tiny-gpt --steps 20 --gbs 8 --seq-len 32 --dp 2 --mbs 2 --zero 3)
  HS=(tiny-gpt --steps 20 --gbs 8 --seq-len 32 --dp 4 --mbs 1 --zero 2 --shard-group 2)
  run zref 0 "${Z3[@]}"
  run zsrc 0 "${Z3[@]}" --ckpt-dir zsrc/ck --ckpt-every 10
  identical zsrc zref "zero3: saving checkpoints"
  DPLAN_FAULT_INJECT=1:7:kill run zkill 0 "${Z3[@]}" --ckpt-dir zkill/ck --ckpt-every 5 \
    --max-restarts 2 --hang-timeout 10
  identical zkill zref "zero3: rank 1 killed at step 7, resumed from step 5"
  has zkill/log.jsonl '"status":"restarting","restart":1,.*"resume_step":5' "zero3 restarting record"
  run href 0 "${HS[@]}"
  DPLAN_FAULT_INJECT=2:7:kill run hkill 0 "${HS[@]}" --ckpt-dir hkill/ck --ckpt-every 5 \
    --max-restarts 2 --hang-timeout 10
  identical hkill href "hsdp zero2: rank 2 killed at step 7, resumed from step 5"
  # Other layouts: ZeRO-3 -> tp2 (no ZeRO) and -> HSDP ZeRO-2; HSDP -> dp2 ZeRO-3;
  # ZeRO-1 (src-llama, dp2 pp2) -> dp2 pp2 ZeRO-3.
  run rs-z3-tp2 0 tiny-gpt --steps 20 --gbs 8 --seq-len 32 --tp 2 --mbs 2 \
    --resume zsrc/ck/step_00000010
  "$tool" losses zsrc/log.jsonl rs-z3-tp2/log.jsonl 11 1e-5 || bad "dp2 zero3 -> tp2 losses"
  "$tool" close zsrc/model.safetensors rs-z3-tp2/model.safetensors 1e-5 ||
    bad "dp2 zero3 -> tp2 weights"
  run rs-z3-hsdp 0 "${HS[@]}" --resume zsrc/ck/step_00000010
  "$tool" losses zsrc/log.jsonl rs-z3-hsdp/log.jsonl 11 1e-5 || bad "dp2 zero3 -> hsdp losses"
  "$tool" close zsrc/model.safetensors rs-z3-hsdp/model.safetensors 1e-5 ||
    bad "dp2 zero3 -> hsdp weights"
  run rs-hsdp-z3 0 "${Z3[@]}" --resume hkill/ck/step_00000010
  "$tool" losses href/log.jsonl rs-hsdp-z3/log.jsonl 11 1e-5 || bad "hsdp -> dp2 zero3 losses"
  "$tool" close href/model.safetensors rs-hsdp-z3/model.safetensors 1e-5 ||
    bad "hsdp -> dp2 zero3 weights"
  run rs-llama-z3 0 tiny-llama --steps 20 --gbs 8 --seq-len 32 --dp 2 --pp 2 --mbs 1 --zero 3 --framework torchtitan \
    --resume src-llama/ck/step_00000010
  "$tool" losses src-llama/log.jsonl rs-llama-z3/log.jsonl 11 1e-5 ||
    bad "llama dp2 pp2 zero1 -> zero3 losses"
  "$tool" close src-llama/model.safetensors rs-llama-z3/model.safetensors 1e-5 ||
    bad "llama dp2 pp2 zero1 -> zero3 weights"
  ;;

export)
  # (f) export to one file; it parses with ckpt_tool's own reader, equals the run's
  # model.safetensors tensor by tensor, and the Hugging Face names hold the same numbers.
  "$dplan" ckpt export src-gpt/ck -o gpt.safetensors > export.out 2>&1 || bad "export: $(cat export.out)"
  "$tool" parse gpt.safetensors wte=256x64 wpe=64x64 h.1.attn.wq=64x64 h.1.mlp.w1=256x64 ||
    bad "gpt export does not parse"
  "$tool" same gpt.safetensors src-gpt/model.safetensors || bad "gpt export differs"
  "$dplan" ckpt export src-gpt/ck -o gpt-hf.safetensors --names hf --json > export.json ||
    bad "hf export"
  has export.json '"step":.*20' "json"
  "$tool" parse gpt-hf.safetensors transformer.wte.weight=256x64 \
    transformer.h.0.attn.c_attn.weight=64x192 transformer.h.0.attn.c_attn.bias=192 \
    transformer.h.1.mlp.c_fc.weight=64x256 transformer.h.1.mlp.c_proj.weight=256x64 ||
    bad "gpt hf export does not parse"
  "$tool" hf gpt.safetensors gpt-hf.safetensors || bad "gpt hf export"
  "$dplan" ckpt export src-llama/ck --step 10 -o llama10.safetensors > /dev/null ||
    bad "llama export"
  "$dplan" ckpt export src-llama/ck -o llama-hf.safetensors --names hf > /dev/null ||
    bad "llama hf export"
  "$dplan" ckpt export src-llama/ck -o llama.safetensors > /dev/null || bad "llama export"
  "$tool" same llama.safetensors src-llama/model.safetensors || bad "llama export differs"
  "$tool" parse llama-hf.safetensors model.embed_tokens.weight=256x64 lm_head.weight=256x64 \
    model.layers.1.self_attn.k_proj.weight=32x64 model.layers.0.mlp.gate_proj.weight=176x64 ||
    bad "llama hf export does not parse"
  "$tool" hf llama.safetensors llama-hf.safetensors || bad "llama hf export"
  # The checkpoint's own per-rank files are standard safetensors too.
  for f in src-llama/ck/step_00000010/rank_0000[0-3].safetensors; do
    "$tool" parse "$f" > /dev/null || bad "$f does not parse"
  done
  ;;

moe)
  # Mixture of experts: the step-10 checkpoint of an ep=2 run (experts sharded over the
  # two DP ranks) resumes on one rank (ep=1), on ep=4, on cp=2 dp=2 ep=2 and on tp=2 sp
  # etp=1 ep=2 (Megatron-Core's folding: the EP group is the two TP ranks, each expert
  # whole on one of them, which write the final weights) within 1e-5 of the uninterrupted
  # run;
  # resuming it with a dense model, or a dense checkpoint with the MoE model, is refused
  # before any rank starts.
  MOE=("$models/tiny-moe.json" --steps 20 --gbs 8 --seq-len 32 --mbs 2)
  run moe-src 0 "${MOE[@]}" --dp 2 --ep 2 --ckpt-dir moe-src/ck --ckpt-every 10
  for to in "ep1" "ep4" "cp2ep2" "tp2etp1"; do
    opts=()
    [ "$to" = ep4 ] && opts=(--dp 4 --ep 4)
    [ "$to" = cp2ep2 ] && opts=(--cp 2 --dp 2 --ep 2)
    [ "$to" = tp2etp1 ] && opts=(--tp 2 --sp --etp 1 --ep 2)
    run "moe-$to" 0 "${MOE[@]}" "${opts[@]}" --resume moe-src/ck/step_00000010
    "$tool" losses moe-src/log.jsonl "moe-$to/log.jsonl" 11 1e-5 || bad "ep2 -> $to losses"
    "$tool" close moe-src/model.safetensors "moe-$to/model.safetensors" 1e-5 ||
      bad "ep2 -> $to weights"
  done
  run moe-dense 1 tiny-llama --steps 20 --gbs 8 --seq-len 32 --mbs 2 \
    --resume moe-src/ck/step_00000010
  has moe-dense.err 'experts 4 vs 0' "MoE checkpoint resumed by a dense model"
  [ "$(grep -c 'dplan: error' moe-dense.err)" = 1 ] || bad "moe-dense: not one error line"
  run moe-dsrc 0 tiny-llama --steps 4 --gbs 8 --seq-len 32 --mbs 4 --ckpt-dir moe-dsrc/ck \
    --ckpt-every 2
  run moe-rev 1 "${MOE[@]}" --resume moe-dsrc/ck/step_00000002
  has moe-rev.err 'experts 0 vs 4' "dense checkpoint resumed by a MoE model"
  # DeepSeek-V3 routing: the router bias (moved by the load, not by the optimizer) is in
  # the checkpoint, so resuming on dp 2 zero 3 (the bias then in a shard) follows the
  # uninterrupted dp 2 ep 2 run.
  V3=("$models/tiny-moe-v3.json" --steps 20 --gbs 8 --seq-len 32 --mbs 2)
  run v3-src 0 "${V3[@]}" --dp 2 --ep 2 --ckpt-dir v3-src/ck --ckpt-every 10
  run v3-zero3 0 "${V3[@]}" --dp 2 --zero 3 --resume v3-src/ck/step_00000010
  "$tool" losses v3-src/log.jsonl v3-zero3/log.jsonl 11 1e-5 || bad "v3 ep2 -> zero3 losses"
  "$tool" close v3-src/model.safetensors v3-zero3/model.safetensors 1e-5 ||
    bad "v3 ep2 -> zero3 weights"
  ;;

moezero)
  # ZeRO with experts (executor/shard.c): dense state sharded over DP, expert state over
  # EDP. The step-10 checkpoint of dp 4 ep 2 zero 1 (expert state in shards of 2, written
  # per tensor) resumes on the same layout, on one rank (ep 1, no ZeRO) and on dp 2 ep 2
  # zero 3 within 1e-5 of the uninterrupted run; a zero1_flat checkpoint (dp 2 ep 1
  # zero 1) resumes on dp 2 ep 2 zero 2; the step-10 checkpoint of cp 2 dp 2 ep 2 zero 1
  # (the expert shard groups take in the cp ranks) resumes on tp 2 sp etp 1 dp 2 zero 2
  # with HSDP (shard group 1: the expert state in shards of 2, two replicas).
  MOE=("$models/tiny-moe.json" --steps 20 --gbs 8 --seq-len 32 --mbs 2)
  run mz-src 0 "${MOE[@]}" --dp 4 --ep 2 --zero 1 --ckpt-dir mz-src/ck --ckpt-every 10
  grep -q '"per_tensor"' mz-src/ck/step_00000010/manifest.json ||
    bad "ep2 zero1: optimizer state not per tensor"
  for to in "same" "ep1" "ep2z3"; do
    opts=()
    [ "$to" = same ] && opts=(--dp 4 --ep 2 --zero 1)
    [ "$to" = ep2z3 ] && opts=(--dp 2 --ep 2 --zero 3)
    run "mz-$to" 0 "${MOE[@]}" "${opts[@]}" --resume mz-src/ck/step_00000010
    "$tool" losses mz-src/log.jsonl "mz-$to/log.jsonl" 11 1e-5 || bad "dp4 ep2 zero1 -> $to losses"
    "$tool" close mz-src/model.safetensors "mz-$to/model.safetensors" 1e-5 ||
      bad "dp4 ep2 zero1 -> $to weights"
  done
  run mz-flat 0 "${MOE[@]}" --dp 2 --zero 1 --ckpt-dir mz-flat/ck --ckpt-every 10
  grep -q '"zero1_flat"' mz-flat/ck/step_00000010/manifest.json || bad "dp2 zero1: not zero1_flat"
  run mz-flat-z2 0 "${MOE[@]}" --dp 2 --ep 2 --zero 2 --resume mz-flat/ck/step_00000010
  "$tool" losses mz-flat/log.jsonl mz-flat-z2/log.jsonl 11 1e-5 || bad "zero1_flat -> ep2 zero2 losses"
  "$tool" close mz-flat/model.safetensors mz-flat-z2/model.safetensors 1e-5 ||
    bad "zero1_flat -> ep2 zero2 weights"
  run mz-cp 0 "${MOE[@]}" --cp 2 --dp 2 --ep 2 --zero 1 --ckpt-dir mz-cp/ck --ckpt-every 10
  grep -q '"per_tensor"' mz-cp/ck/step_00000010/manifest.json ||
    bad "cp2 ep2 zero1: optimizer state not per tensor"
  run mz-fold 0 "${MOE[@]}" --tp 2 --sp --etp 1 --dp 2 --zero 2 --shard-group 1 \
    --resume mz-cp/ck/step_00000010
  "$tool" losses mz-cp/log.jsonl mz-fold/log.jsonl 11 1e-5 || bad "cp2 ep2 zero1 -> etp1 hsdp losses"
  "$tool" close mz-cp/model.safetensors mz-fold/model.safetensors 1e-5 ||
    bad "cp2 ep2 zero1 -> etp1 hsdp weights"
  ;;

*)
  echo "unknown case $case"
  exit 2
  ;;
esac
[ $fail = 0 ] && say "passed"
exit $fail
