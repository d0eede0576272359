#!/usr/bin/env bash
# What `dplan run`, `dplan data` and `dplan ckpt` must refuse or report before they do
# damage or waste time (issue 10, items 8-10):
#   guards.sh CASE DPLAN RUNS_DIR
#   outputs   an output that is an input (same file, also through links) or lies inside a
#             checkpoint is refused; temporary names never clobber a file; a failed write
#             leaves the old file intact
#   batch     a global batch larger than the data, and the epochs note
#   overlap   --overlap-grad-reduce on where it cannot run, and bad values of its options
#   memory    the CPU memory prediction against MemAvailable, before any allocation
#   ckptdir   an unwritable --ckpt-dir fails before step 1; a run whose checkpoints all
#             failed exits non-zero
#   damaged   resuming a damaged or incomplete checkpoint names what is wrong, before launch
#   killed    a rank killed without --max-restarts: the log ends on a "failed" record;
#             a supervised launch that never starts a rank says so
# Runs use tiny-gpt with seq-len 16 on one rank (two for `killed`): each case takes seconds.
set -u
case=$1 dplan=$2 runs=$3
rm -rf "$runs/$case"
mkdir -p "$runs/$case"
cd "$runs/$case" || exit 1
fail=0
say() { echo "guards $case: $*"; }
bad() {
  echo "FAIL guards $case: $*"
  fail=1
}
# expect CODE REGEX CMD...: run CMD, require exit CODE and one stderr line matching REGEX.
expect() {
  local want=$1 re=$2
  shift 2
  "$@" > out.txt 2> err.txt
  local got=$?
  if [ "$got" != "$want" ]; then
    bad "$*: exit $got, expected $want"
    head -5 err.txt
  elif ! grep -Eq -- "$re" err.txt; then
    bad "$*: stderr lacks /$re/:"
    head -5 err.txt
  fi
}
T=(--steps 2 --gbs 2 --mbs 2 --seq-len 16)

case $case in
outputs)
  printf 'some text that must survive\n' > in.txt
  cp in.txt keep.txt
  expect 1 'in.txt: output \(-o\) and input in.txt are the same file' "$dplan" data prepare in.txt -o in.txt
  ln -s in.txt sym.txt
  ln in.txt hard.txt
  expect 1 'sym.txt: output \(-o\) and input in.txt are the same file' "$dplan" data prepare in.txt -o sym.txt
  expect 1 'hard.txt: output \(-o\) and input in.txt are the same file' "$dplan" data prepare in.txt -o hard.txt
  cmp -s in.txt keep.txt || bad "data prepare changed its input"
  # The temporary file has a name of its own: an input called OUT.tmp survives.
  cp in.txt out.bin.tmp
  "$dplan" data prepare out.bin.tmp -o out.bin > /dev/null 2>&1 || bad "prepare out.bin.tmp"
  cmp -s out.bin.tmp keep.txt || bad "data prepare clobbered its input out.bin.tmp"
  # A write that fails (file size limit) leaves the previous output as it was.
  head -c 200000 /dev/zero | tr '\0' 'a' > big.txt
  cp out.bin out.old
  (trap '' XFSZ; ulimit -f 64; "$dplan" data prepare big.txt -o out.bin > /dev/null 2> xfsz.err)
  [ $? = 1 ] || bad "a write beyond the file size limit did not fail"
  cmp -s out.bin out.old || bad "a failed data prepare changed the old output"
  [ -z "$(ls -A | grep -E '^\.out\.bin')" ] || bad "a temporary file was left: $(ls -A)"
  # Checkpoints: an export into a checkpoint directory would damage it.
  "$dplan" run tiny-gpt "${T[@]}" --ckpt-dir ck --out r1 > /dev/null 2>&1 || bad "run for ck"
  expect 1 'output \(-o\) lies inside the checkpoint ck/step_00000002' "$dplan" ckpt export ck \
    -o ck/step_00000002/rank_00000.safetensors
  expect 1 'lies inside the checkpoint' "$dplan" ckpt export ck -o ck/step_00000002/x.safetensors
  "$dplan" ckpt info ck > info.txt 2>&1 || bad "the checkpoint is damaged: $(cat info.txt)"
  "$dplan" ckpt export ck -o model.safetensors > /dev/null 2>&1 || bad "export"
  cp model.safetensors model.old
  (trap '' XFSZ; ulimit -f 8; "$dplan" ckpt export ck -o model.safetensors > /dev/null 2>&1)
  [ $? = 1 ] || bad "an export beyond the file size limit did not fail"
  cmp -s model.safetensors model.old || bad "a failed export changed the old file"
  # dplan run: its outputs against its inputs and checkpoints.
  "$dplan" data prepare in.txt big.txt -o d.bin > /dev/null
  expect 1 'd.bin: output \(--log\) and input d.bin \(--data\) are the same file' "$dplan" run tiny-gpt "${T[@]}" --data d.bin \
    --out r2 --log d.bin
  expect 1 'r1/plan.json: output \(--out\) and input r1/plan.json \(the plan\) are the same file' "$dplan" run r1/plan.json --steps 2 --out r1
  expect 1 'output \(--out\) lies inside the checkpoint ck/step_00000002' "$dplan" run tiny-gpt "${T[@]}" \
    --out ck/step_00000002
  expect 1 'output \(--ckpt-dir\) lies inside the checkpoint ck/step_00000002' "$dplan" run tiny-gpt "${T[@]}" \
    --ckpt-dir ck/step_00000002 --out r3
  "$dplan" ckpt info ck > info.txt 2>&1 || bad "the checkpoint is damaged: $(cat info.txt)"
  ;;

batch)
  # 2001 tokens = 125 windows of 16 tokens (and one more token for the last target).
  head -c 2001 /dev/zero | tr '\0' 'b' > t.txt
  "$dplan" data prepare t.txt -o t.bin > /dev/null
  expect 1 'gbs=1099511627776: one step needs 1099511627776 sequences of 16 tokens, t.bin holds 125 ' \
    timeout 60 "$dplan" run tiny-gpt --seq-len 16 --gbs 1099511627776 --data t.bin --out r
  # 3 steps x 64 sequences read 192 windows of 125: epochs wrap, with a note.
  expect 0 'note: 3 steps x gbs 64 = 192 sequences of 16 tokens; t.bin holds 125: the data is read 1.54 times' \
    "$dplan" run tiny-gpt --seq-len 16 --gbs 64 --mbs 32 --steps 3 --data t.bin --out r
  grep -Eq '"data_epochs":[[:space:]]*1.536,' r/summary.json || bad "summary.json lacks data_epochs 1.536"
  ;;

overlap)
  # --overlap-grad-reduce on where the executor has no overlap (ZeRO-2/3 reduce per layer,
  # blocking): refused before launch, naming the option; a bad value is a usage error.
  expect 1 'tiny-gpt: --overlap-grad-reduce on: not with zero 2 ' \
    "$dplan" run tiny-gpt --seq-len 16 --dp 2 --zero 2 --overlap-grad-reduce on --out r
  [ -e r ] && bad "the refused run wrote r/"
  expect 2 '--overlap-grad-reduce: expected on or off, got "yes"' \
    "$dplan" run tiny-gpt --overlap-grad-reduce yes --out r
  expect 2 '--ddp-bucket-size: expected a number in ' \
    "$dplan" run tiny-gpt --ddp-bucket-size 0 --out r
  ;;

memory)
  # llama2-70b needs ~1 TB of fp32 weights, gradients and AdamW state: refused before any
  # allocation, naming the prediction and MemAvailable.
  head -c 200 /dev/zero > z.bin
  expect 1 'llama2-70b: the run needs [0-9.]+ GiB of memory on this node .*, but MemAvailable is [0-9.]+ GiB' \
    timeout 60 "$dplan" run llama2-70b --steps 1 --seq-len 16 --gbs 1 --data z.bin --data-format raw --out r
  grep -q 'params' err.txt || bad "the message does not say which pool dominates"
  [ "$(wc -l < err.txt)" = 1 ] || bad "more than one line: $(cat err.txt)"
  ;;

ckptdir)
  # An unwritable --ckpt-dir (below a regular file: root may write anywhere else) fails
  # before the first step.
  touch afile
  expect 1 'ckpt-dir afile/ck: .*Not a directory' "$dplan" run tiny-gpt "${T[@]}" \
    --ckpt-dir afile/ck --out r
  grep -q '"step":1,' r/log.jsonl 2> /dev/null && bad "it trained with an unwritable --ckpt-dir"
  # Every requested checkpoint fails (a full disk at the only save): exit 1, after the
  # weights are written; the log ends on a failed record.
  DPLAN_FAULT_INJECT=0:2:enospc expect 1 'every checkpoint this run requested failed \(1 of 1;' \
    "$dplan" run tiny-gpt "${T[@]}" --ckpt-dir ck2 --out r2
  [ -f r2/model.safetensors ] || bad "no model.safetensors"
  tail -1 r2/log.jsonl | grep -q '"status":"failed"' || bad "log ends on $(tail -1 r2/log.jsonl)"
  ;;

damaged)
  "$dplan" run tiny-gpt "${T[@]}" --ckpt-dir ck --out r > /dev/null 2>&1 || bad "first run"
  cp -r ck ck-trunc
  cp -r ck ck-crc
  cp -r ck ck-hole
  truncate -s 1000 ck-trunc/step_00000002/rank_00000.safetensors
  expect 1 'resume ck-trunc/step_00000002: the checkpoint is damaged: .*rank_00000.safetensors: truncated: 1000 bytes' \
    "$dplan" run tiny-gpt --steps 4 --gbs 2 --mbs 2 --seq-len 16 --resume ck-trunc/step_00000002 --out r2
  expect 1 'resume ck-trunc: no complete checkpoint: step_00000002: .*truncated: 1000 bytes' \
    "$dplan" run tiny-gpt --steps 4 --gbs 2 --mbs 2 --seq-len 16 --resume ck-trunc --out r2
  printf 'X' | dd of=ck-crc/step_00000002/rank_00000.safetensors bs=1 seek=3000 conv=notrunc 2> /dev/null
  expect 1 'ck-crc/step_00000002: the checkpoint is damaged: .*rank_00000.safetensors: checksum mismatch' \
    "$dplan" run tiny-gpt --steps 4 --gbs 2 --mbs 2 --seq-len 16 --resume ck-crc/step_00000002 --out r2
  # A manifest with a tensor removed: ckpt info and resume say so, before any rank starts.
  python3 - ck-hole/step_00000002/manifest.json << 'EOF'
import json, sys
p = sys.argv[1]
m = json.load(open(p))
m["tensors"] = [t for t in m["tensors"] if t["name"] != "h.1.mlp.w1"]
json.dump(m, open(p, "w"), indent=1)
EOF
  "$dplan" ckpt info ck-hole > info.txt 2>&1 && bad "ckpt info passed a manifest without h.1.mlp.w1"
  grep -q 'damaged .*the manifest lacks tensor h.1.mlp.w1' info.txt || bad "info: $(cat info.txt)"
  expect 1 'the manifest lacks tensor h.1.mlp.w1' "$dplan" run tiny-gpt --steps 4 --gbs 2 \
    --mbs 2 --seq-len 16 --resume ck-hole --out r2
  [ "$(wc -l < err.txt)" = 1 ] || bad "more than one line: $(cat err.txt)"
  ;;

killed)
  # Rank 1 killed at step 3 without --max-restarts: the launcher ends the log with a
  # failed record naming the rank and how to continue.
  DPLAN_FAULT_INJECT=1:3:kill expect 1 'rank 1 was killed by signal 9.*--resume ck' \
    "$dplan" run tiny-gpt --steps 6 --gbs 4 --mbs 2 --seq-len 16 --dp 2 --ckpt-dir ck \
    --ckpt-every 2 --out r
  tail -1 r/log.jsonl | grep -Eq '"status":"failed".*"rank":1.*"hint":".*--resume ck' ||
    bad "log ends on $(tail -1 r/log.jsonl)"
  # A launcher that fails before any rank starts, supervised: the restart and give-up
  # lines say so instead of naming rank -1 at step -1.
  DPLAN_MPIRUN=/bin/false expect 1 \
    '^dplan: error: giving up after 1 restart: the launch \(no rank started\): the launcher exited with status 1$' \
    "$dplan" run tiny-gpt --steps 2 --gbs 2 --mbs 1 --seq-len 16 --dp 2 --max-restarts 1 --ckpt-dir ck2 --out r2
  grep -q 'dplan run: the launch (no rank started) failed (the launcher exited with status 1); restart 1 of 1' err.txt ||
    bad "restart line: $(grep 'restart 1' err.txt)"
  grep -q -- '-1' err.txt && bad "a -1 rank or step in: $(grep -- '-1' err.txt)"
  ;;

*)
  echo "unknown case $case"
  exit 2
  ;;
esac
[ $fail = 0 ] && say "passed"
exit $fail
