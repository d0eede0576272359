#!/usr/bin/env bash
# 2-byte storage of the working copy of the weights (executor/README.md "Mixed
# precision"): the values a bf16 / fp16 run keeps in 2 bytes are the values the fp32
# emulation kept (already rounded), so packing must change no number.
#   storage.sh CASE DPLAN COMPARE RUNS_DIR
# CASE same: each layout's bf16 and fp16 runs against the same build's emulation
#   (DPLAN_TEST_STORE_FP32=1, TEST-ONLY, model.c: the working copy kept in fp32 as before
#   2-byte storage): losses and final weights equal bit for bit, and the 2-byte runs'
#   params pool smaller by the bytes the packing removes.
# CASE memory: the memory plan's params pool of fp32, bf16 and emulated bf16 runs against
#   bytes worked out by hand, and the processes' resident peaks (the figures in memory()).
# CASE record FILE: the losses and weights' checksum of every layout, to a file.
# CASE golden FILE: the same against FILE (recorded with the executor before 2-byte
#   storage, tests/executor/storage-golden.txt); skipped (77) on another CPU model or
#   OpenBLAS core, whose kernels sum in another order.
set -u
case=$1 dplan=$2 compare=$3 runs=$4
file=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$runs"
cd "$runs" || exit 1
fail=0
suite=storage
. "$here/runs_lib.sh"
losses() { grep -o '"step":[0-9]*,"steps":[0-9]*,"loss":[^,]*' "$1/log.jsonl" | tr '\n' ' '; }
pool() { grep -o "\"$2\":[0-9]*" "$1/log.jsonl" | head -1 | cut -d: -f2; }

m8=$here/models/tiny-gpt-8l.json moe=$here/models/tiny-moe.json qk3=$here/models/tiny-qwen3.json
BASE=(--steps 20 --gbs 8 --seq-len 32 --threads 1)
# name|model|options[|the only precision]: every seam the working copy passes (DP, ZeRO 1 and 2 with their
# padded flat buffer, TP with SP, interleaved PP, both recomputes, CP, flash attention,
# q/k norm, MoE with EP, and ZeRO 3, which has no working copy).
layouts=(
  "s|tiny-gpt|--mbs 8"
  "dp2|tiny-gpt|--dp 2 --mbs 2"
  "zero1|tiny-gpt|--dp 2 --zero 1 --mbs 2"
  "zero2|tiny-gpt|--dp 2 --zero 2 --mbs 2"
  "zero3|tiny-gpt|--dp 2 --zero 3 --mbs 2"
  "tp2sp|tiny-llama|--tp 2 --sp --mbs 2"
  "pp2vpp2|$m8|--pp 2 --vpp 2 --mbs 1"
  "rcfull|tiny-gpt|--recompute full --mbs 4"
  "rcsel|tiny-llama|--recompute selective --mbs 4"
  "cp2|tiny-llama|--cp 2 --mbs 2"
  "flash|tiny-llama|--mbs 4 --attention flash"
  "qk3|$qk3|--mbs 4"
  "moe|$moe|--mbs 2"
  "moe_ep2|$moe|--dp 2 --ep 2 --mbs 2|bf16" # EP refuses fp16 (as Megatron)
)
precs=("bf16|--precision bf16" "fp16|--precision fp16 --initial-loss-scale 1024")
# CASE same_small (the sanitizer build, several times slower: all 27 pairs take ~28 min
# there): one layout per seam kind, bf16 only.
if [ "$case" = same_small ]; then
  layouts=("${layouts[2]}" "${layouts[5]}" "${layouts[6]}" "${layouts[8]}" "${layouts[12]}")
  precs=("${precs[0]}")
fi

each() { # each FN: FN NAME MODEL OPTS... for every layout and precision (and fp32 once)
  local fn=$1 l p
  for l in "${layouts[@]}"; do
    IFS='|' read -r n m o only <<< "$l"
    read -ra o <<< "$o"
    for p in "${precs[@]}"; do
      [ -n "$only" ] && [ "${p%%|*}" != "$only" ] && continue
      read -ra po <<< "${p#*|}"
      "$fn" "${n}_${p%%|*}" "$m" "${o[@]}" "${po[@]}"
    done
  done
  "$fn" s_fp32 tiny-gpt --mbs 8
}

record_one() {
  local n=$1
  shift
  run "$n" "$@" "${BASE[@]}"
  echo "$n $(sha256sum < "$n/model.safetensors" | cut -c1-64) $(losses "$n")"
}

same_one() {
  local n=$1
  shift
  run "$n" "$@" "${BASE[@]}"
  DPLAN_TEST_STORE_FP32=1 run "${n}_emu" "$@" "${BASE[@]}"
  [ "$(losses "$n")" = "$(losses "${n}_emu")" ] || bad "$n: losses differ from the emulation's"
  [ -n "$(losses "$n")" ] || bad "$n: no losses"
  cmp -s "$n/model.safetensors" "${n}_emu/model.safetensors" ||
    bad "$n: final weights differ from the emulation's"
  # The working copy's bytes (rank 0) go from 4 P to 2 LW + 4 E + 4 W (L layers of W
  # elements, edge E): 2 W (L - 2) bytes less, nothing on the 2-layer stages of
  # tiny-gpt and tiny-llama, 4 W on pp2vpp2's 4-layer stages (the exact figures are
  # exec_storage_memory's).
  case $n in *_fp32 | zero3_*) return ;; esac
  local a b
  a=$(pool "$n" params) b=$(pool "${n}_emu" params)
  [ "$a" -le "$b" ] || bad "$n: params pool $a, above the emulation's $b"
  case $n in pp2vpp2_*) [ "$a" -lt "$b" ] || bad "$n: params pool $a, not below the emulation's $b" ;; esac
}

cpu_id() {
  echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') |" \
    "$(nproc) cpus"
}

num() { # num RUN JSONPATH (python-style keys after ranks[0]): a number of summary.json
  python3 -c "import json,sys; r=json.load(open('$1/summary.json'))['ranks'][0]; print(int(r$2))"
}

memory() {
  # bench-gpt-24l (tests/executor/models): h 256, ffn 1024, 8 heads, 24 layers, vocab 256
  # (padded to 256), 128 learned positions, tied embeddings, LayerNorm with biases; mbs 4
  # of seq 128: N = 512 tokens; one rank (no padding, one slot in flight), math attention,
  # no recompute.
  # The working copy of the weights (params). One layer: 2 norms 2 x 2 x 256 = 1024,
  # Wqkv 768 x 256 + 768 = 197376, Wo 256 x 256 + 256 = 65792, W1 1024 x 256 + 1024 =
  # 263168, W2 256 x 1024 + 256 = 262400: W = 789760; the layers LW = 24 W = 18954240;
  # the edge E = wte 256 x 256 + wpe 128 x 256 + final norm 512 = 98816; P = 19053056.
  #  fp32: the master, 4 P = 76212224 bytes.
  #  bf16, emulated (the executor before 2-byte storage): + the fp32 copy 4 P = 152424448.
  #  bf16, 2-byte words: + 2 LW + 4 E + 4 W = 37908480 + 395264 + 3159040 = 41462784,
  #  117675008 in all: 34749440 bytes (33.14 MiB) below the emulation.
  # The slot (act_slots). One layer keeps x, ln1, x2, ln2 N h = 131072 each, qkv N 3h =
  # 393216, ctx N h = 131072, fc1 and act N 4h = 524288 each: 2097152 elements in the
  # precision; ln1 and ln2 statistics 2 N = 1024 each and the probabilities B a T T =
  # 4 x 8 x 128 x 128 = 524288 in fp32: 526336. Token ids 2 N x 4 = 4096 bytes.
  #  fp32: 24 (2097152 + 526336) 4 + 4096 = 251858944.
  #  bf16: the first layer's x in fp32 (where the embedding writes), the rest in words:
  #  24 (2097152 x 2 + 526336 x 4) + 131072 x 2 + 4096 = 151457792: 100401152 less.
  # The work set (act_work): one layer's fp32 tensors but the statistics and the
  # probabilities (they stay in the slot), 1966080, and the layer's input and output,
  # 2 x 131072: 2228224 x 4 = 8912896 more than fp32's.
  # So bf16 predicts 41462784 - 100401152 + 8912896 = -50025472 bytes against fp32
  # (47.7 MiB less), and 34749440 + 100401152 - 8912896 = 126237696 less than the
  # emulation (120.4 MiB).
  local B=("$here/models/bench-gpt-24l.json" --steps 2 --gbs 8 --mbs 4)
  run f32 "${B[@]}"
  run b16 "${B[@]}" --precision bf16
  DPLAN_TEST_STORE_FP32=1 run emu "${B[@]}" --precision bf16
  p() { num "$1" "['predicted_bytes']['$2']"; }
  m() { num "$1" "['measured_peak_bytes']['$2']"; }
  for want in "f32 params 76212224" "b16 params 117675008" "emu params 152424448" \
              "f32 act_slots 251858944" "b16 act_slots 151457792" "emu act_slots 251858944"; do
    read -r n pl w <<< "$want"
    [ "$(p "$n" "$pl")" = "$w" ] || bad "$n: predicted $pl $(p "$n" "$pl"), expected $w"
    [ "$(m "$n" "$pl")" = "$w" ] || bad "$n: measured $pl $(m "$n" "$pl"), expected $w"
  done
  [ $(( $(p b16 act_work) - $(p f32 act_work) )) = 8912896 ] ||
    bad "act_work: bf16 $(p b16 act_work), fp32 $(p f32 act_work): expected 8912896 more"
  for pl in grads optimizer act_head comm; do
    [ "$(p f32 "$pl")" = "$(p b16 "$pl")" ] && [ "$(p b16 "$pl")" = "$(p emu "$pl")" ] ||
      bad "pool $pl: fp32 $(p f32 "$pl"), bf16 $(p b16 "$pl"), emulated $(p emu "$pl")"
  done
  [ "$(p emu act_work)" = "$(p f32 act_work)" ] || bad "act_work: the emulation's is not fp32's"
  local tf=0 tb=0
  for pl in params grads optimizer act_slots act_head act_work comm; do
    tf=$((tf + $(p f32 "$pl"))) tb=$((tb + $(p b16 "$pl")))
  done
  echo "storage memory: predicted per rank fp32 $tf, bf16 $tb bytes"
  [ $((tf - tb)) = 50025472 ] || bad "bf16 predicts $((tf - tb)) bytes below fp32, expected 50025472"
  # The estimate `dplan run --dry-run` prints (dp_exec_memory, without a rank): the same
  # table, in MiB to 3 decimals: params 117675008 / 2^20 = 112.224, act_slots 144.441,
  # total 516131840 / 2^20 = 492.222; fp32 72.682, 240.191 and 539.930.
  local d
  for want in "--precision bf16|112.224|144.441|492.222" "--precision fp32|72.682|240.191|539.930"; do
    IFS='|' read -r o pa sl to <<< "$want"
    read -ra o <<< "$o"
    d=$("$dplan" run "${B[@]}" "${o[@]}" --dry-run 2>&1 | grep -A2 '^predicted memory' | tail -1)
    read -ra f <<< "$d"
    [ "${f[1]}" = "$pa" ] && [ "${f[4]}" = "$sl" ] && [ "${f[8]}" = "$to" ] ||
      bad "dry-run ${o[*]}: '$d', expected params $pa, act_slots $sl, total $to MiB"
  done
  # The process: each run's resident growth matches its accounted buffers (compare_runs),
  # and the 2-byte run's is below the emulation's by the 126237696 bytes above, give or
  # take what neither accounts (1 to 4.7 MiB a run on these layouts, README "Resident
  # memory") and the 2 MiB pages of the buffers: within 4 MiB (measured: 123383808;
  # in whole 2 MiB pages the buffers differ by 123336704: the fp32 copy's 37 pages
  # against 19 + 2 and the edge's 395264 bytes, the slot's 121 against 73, and the work
  # set's 5 more). Without 2-byte storage both runs hold the same buffers: a saving of 0.
  "$compare" --resident b16 || bad "bf16 resident growth against its buffers"
  "$compare" --resident emu || bad "emulated bf16 resident growth against its buffers"
  local ge gb
  ge=$(( $(num emu "['rss_train_peak_bytes']") - $(num emu "['rss_base_bytes']") ))
  gb=$(( $(num b16 "['rss_train_peak_bytes']") - $(num b16 "['rss_base_bytes']") ))
  echo "storage memory: resident growth emulated $ge, 2-byte $gb bytes: saved $((ge - gb))" \
    "(expected 126237696 +- 4 MiB)"
  [ $((ge - gb)) -ge $((126237696 - 4194304)) ] && [ $((ge - gb)) -le $((126237696 + 4194304)) ] ||
    bad "resident saving $((ge - gb)) bytes, expected 126237696 +- 4194304"
}

case $case in
same | same_small) each same_one ;;
memory) memory ;;
record)
  { echo "# $(cpu_id)"; each record_one; } > "$file"
  ;;
golden)
  [ "$(head -1 "$file")" = "# $(cpu_id)" ] || {
    echo "storage golden: recorded on $(head -1 "$file"), this is $(cpu_id): skipped"
    exit 77
  }
  { echo "# $(cpu_id)"; each record_one; } > now.txt
  diff "$file" now.txt > golden.diff || bad "runs differ from $file: $(head -5 golden.diff)"
  ;;
*) echo "storage.sh: unknown case $case" >&2; exit 2 ;;
esac
[ "$fail" = 0 ] && echo "storage $case: ok"
exit "$fail"
