#!/usr/bin/env bash
# The GPU check of the CUDA backend (issue 17, docs/gpu.md), one script for a machine with
# one NVIDIA GPU that may be bare (a CUDA toolkit, CMake, PyTorch; no package registry, no
# MPI/OpenBLAS/cJSON/hwloc/GSL development packages): it unpacks the .deb files that
# scripts/gpu-deps.sh downloaded beforehand (.gpu-deps/) into a prefix, builds dplan for
# this GPU against it, and runs
#   1. the backend op by op against the CPU backend (test_cuda_backend),
#   2. GPU vs CPU training of tiny models, 20 steps: exact fp32 GEMMs (DPLAN_CUDA_GEMM=fp32)
#      tight, TF32 within TF32's rounding,
#   3. multi-rank layouts (tp, pp, dp, ZeRO, cp, interleaved pp, MoE with ep 2, q/k norm)
#      on the one GPU over --backend cuda-mpi, against the single-process CPU run,
#   4. GPT-2 124M and 350M throughput at seq 1024: dplan against PyTorch (eager and torch.compile)
#      on the same GPU, MFU from the model FLOPs of Narayanan et al. 2021,
# and writes the table to bench/results/gpu-check-<gpu>-<date>.md.
#
# usage: scripts/gpu-check.sh [--no-gpu] [--skip-bench] [-j N]
#   --no-gpu      what this machine can prove without a GPU: unpack the debs, build against
#                 the prefix only (the system's own packages hidden from pkg-config and
#                 CMake), without CUDA, and train tiny-gpt on 2 ranks with the prefix's mpirun
#   --skip-bench  items 1-3 only
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
nogpu=0 bench=1 jobs=$(nproc)
while [ $# -gt 0 ]; do
  case $1 in
    --no-gpu) nogpu=1 ;;
    --skip-bench) bench=0 ;;
    -j) jobs=$2; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
t_start=$(date +%s)
say() { printf '[gpu-check %4ds] %s\n' $(( $(date +%s) - t_start )) "$*"; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

# ---- 0. the dependencies: .gpu-deps/*.deb unpacked into a prefix
# unpack DEB DIR: dpkg-deb where the machine has it, else Python (a .deb is an ar archive
# whose data.tar.xz holds the files; deb(5)).
unpack() {
  if command -v dpkg-deb > /dev/null; then dpkg-deb -x "$1" "$2"; return; fi
  python3 - "$1" "$2" << 'PY'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", "not a .deb"
at = 8
while at < len(data):
    name = data[at:at + 16].decode().strip().rstrip("/")
    size = int(data[at + 48:at + 58].decode().strip())
    body = data[at + 60:at + 60 + size]
    at += 60 + size + (size & 1)
    if name.startswith("data.tar"):
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as t:
            kw = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
            t.extractall(sys.argv[2], **kw)
PY
}
prefix=$root/build/gpu-deps-root # out of the source tree (tests/layering greps it)
cmake_deps=()
fresh_prefix=0
if ls .gpu-deps/*.deb > /dev/null 2>&1; then
  if [ ! -f "$prefix/.unpacked" ] || [ -n "$(find .gpu-deps -maxdepth 1 -name '*.deb' -newer "$prefix/.unpacked")" ]; then
    rm -rf "$prefix" && mkdir -p "$prefix"
    for d in .gpu-deps/*.deb; do unpack "$d" "$prefix"; done
    touch "$prefix/.unpacked"
    fresh_prefix=1
  fi
  M=$prefix/usr/lib/x86_64-linux-gnu
  # Debian links these through update-alternatives, which unpacking does not run.
  for t in mpirun mpiexec mpicc; do ln -sf "$t.openmpi" "$prefix/usr/bin/$t"; done
  export PATH=$prefix/usr/bin:$PATH
  export LD_LIBRARY_PATH=$M:$M/openblas-pthread:$M/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OPAL_PREFIX=$prefix/usr # Open MPI relocated: its components, help files, wrappers
  export PKG_CONFIG_LIBDIR=$M/pkgconfig:$M/openblas-pthread/pkgconfig:$prefix/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$prefix # the .pc files say /usr
  cmake_deps=(-DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf"
              -DMPI_C_COMPILER="$prefix/usr/bin/mpicc.openmpi"
              -DDPLAN_MPIEXEC="$prefix/usr/bin/mpirun.openmpi")
  say "dependencies: $(ls .gpu-deps/*.deb | wc -l) packages unpacked into $prefix"
elif [ $nogpu = 1 ]; then
  echo "gpu-check: --no-gpu tests the unpacked prefix, but .gpu-deps/ has no .deb files: run scripts/gpu-deps.sh" >&2
  exit 1
else
  say "dependencies: no .gpu-deps/*.deb, using the system's packages"
fi

# ---- the build
if [ $nogpu = 1 ]; then
  bdir=build/gpu-check-nogpu cuda=OFF targets=(dplan compare_runs)
else
  bdir=build/gpu-check cuda=ON targets=(dplan dplan_cuda compare_runs test_cuda_backend)
  # This GPU's architecture only: the build is part of the 8-minute budget.
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -1 | tr -d '. ')
  [ -n "$arch" ] && cmake_deps+=(-DCMAKE_CUDA_ARCHITECTURES="$arch")
fi
say "build: $bdir, DPLAN_CUDA=$cuda"
# A cache from an earlier prefix holds its paths (MPI's above all): start over.
[ $fresh_prefix = 1 ] && rm -rf "$bdir/CMakeCache.txt" "$bdir/CMakeFiles"
cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DDPLAN_CUDA=$cuda "${cmake_deps[@]}" > "$bdir.cmake.log" 2>&1 ||
  { tail -30 "$bdir.cmake.log"; exit 1; }
cmake --build "$bdir" -j "$jobs" --target "${targets[@]}" > "$bdir.build.log" 2>&1 ||
  { grep -E 'error|Error' -A3 "$bdir.build.log" | head -40; exit 1; }
dplan=$root/$bdir/dplan compare=$root/$bdir/compare_runs
if [ -d "$prefix" ] && ldd "$dplan" | grep -E 'libmpi|libcjson|libopenblas|libhwloc|libgsl' | grep -vq "$prefix"; then
  echo "gpu-check: $dplan links a library from outside $prefix:" >&2
  ldd "$dplan" | grep -E 'libmpi|libcjson|libopenblas|libhwloc|libgsl' >&2
  exit 1
fi
say "build: done"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=()
row() { results+=("$*"); echo "  $*"; }
# run NAME MODEL ARGS...: dplan run, 20 steps, into $work/NAME
run() {
  local name=$1 model=$2
  shift 2
  "$dplan" run "$model" --steps 20 --gbs 8 --seq-len 32 --out "$work/$name" "$@" \
    > "$work/$name.out" 2>&1 || { echo "  run $name failed:"; tail -5 "$work/$name.out"; return 1; }
}
cmp() { # cmp REF RUN RTOL [--losses-only]: losses per step and final weights (compare_runs)
  if "$compare" "$work/$1" "$work/$2" --rtol "$3" ${4:-} > "$work/$2.cmp" 2>&1; then echo pass; else echo "FAIL ($(tail -1 "$work/$2.cmp"))"; fi
}

if [ $nogpu = 1 ]; then
  say "no GPU: tiny-gpt on 1 and 2 ranks (dp 2) with the prefix's mpirun"
  run ref tiny-gpt --backend cpu && run dp2 tiny-gpt --backend cpu --dp 2 &&
    row "| tiny-gpt dp=2 vs 1 rank (cpu, prefix mpirun) | $(cmp ref dp2 1e-4) |"
  say "done in $(( $(date +%s) - t_start )) s"
  printf '%s\n' "${results[@]}" | grep -q FAIL && exit 1
  exit 0
fi

# ---- 1. op by op
say "1. test_cuda_backend"
if "$root/$bdir/test_cuda_backend" > "$work/ops.log" 2>&1; then row "| ops vs CPU backend | pass |"
else row "| ops vs CPU backend | FAIL: $(head -3 "$work/ops.log" | tr '\n' ' ') |"; fi

# ---- 2. GPU vs CPU training
say "2. equivalence, 20 steps"
for model in tiny-gpt tiny-llama; do
  run "$model-cpu" $model --backend cpu || continue
  DPLAN_CUDA_GEMM=fp32 run "$model-fp32" $model --backend cuda &&
    row "| $model cuda fp32 GEMMs vs cpu, rtol 1e-4 | $(cmp $model-cpu $model-fp32 1e-4) |"
  run "$model-tf32" $model --backend cuda &&
    row "| $model cuda TF32 vs cpu, rtol 1e-2 | $(cmp $model-cpu $model-tf32 1e-2) |"
  # bf16 storage emulated on both (executor/README.md "Mixed precision"), the GPU's GEMMs
  # through cuBLASLt on bf16 copies of the stored values (exact; cuda_lt.c): losses
  # within bf16's tolerance of exec_mixprec_bf16 (2^-7), weights not compared (bf16's
  # rounding steps make them drift apart as between layouts).
  run "$model-cpu-bf16" $model --backend cpu --precision bf16 &&
    run "$model-bf16" $model --backend cuda --precision bf16 &&
    row "| $model cuda bf16 (cuBLASLt) vs cpu bf16, losses rtol 2^-7 | $(cmp $model-cpu-bf16 $model-bf16 0.0078125 --losses-only) |"
  # FP8 (current scaling, E4M3/E5M2): cuBLASLt FP8 against the CPU's exact emulation, the
  # same quantised values, accumulation differs: the bf16 bound, 2^-7 on the losses.
  run "$model-cpu-fp8" $model --backend cpu --precision fp8 &&
    run "$model-fp8" $model --backend cuda --precision fp8 &&
    row "| $model cuda fp8 (cuBLASLt) vs cpu fp8, losses rtol 2^-7 | $(cmp $model-cpu-fp8 $model-fp8 0.0078125 --losses-only) |"
done

# ---- 3. layouts on the one GPU
say "3. layouts over cuda-mpi"
# cp 2: ring attention's kernels and the ring's sendrecv; dp 2 zero 3: the prefetching
# gather (allgather_v_start, blocking on this backend).
for lay in "--tp 2" "--pp 2" "--dp 2 --zero 1" "--tp 2 --pp 2" "--dp 4 --zero 3" "--cp 2" \
           "--dp 2 --zero 3"; do
  name="lay$(echo "$lay" | tr -d ' -')"
  DPLAN_CUDA_GEMM=fp32 run "$name" tiny-gpt --backend cuda-mpi $lay &&
    row "| tiny-gpt cuda-mpi $lay vs 1-rank cpu, rtol 1e-4 | $(cmp tiny-gpt-cpu $name 1e-4) |"
done
# Interleaved 1F1B (the batched p2p) needs 4 chunks of layers: tiny-gpt with 8 layers,
# against its own 1-rank cpu run at mbs 1 (the micro-batch sums the layout adds, as in
# tests/executor/CMakeLists.txt's vpp layouts).
m8=$root/tests/executor/models/tiny-gpt-8l.json
if run 8l-cpu "$m8" --backend cpu --mbs 1; then
  DPLAN_CUDA_GEMM=fp32 run lay8lpp2vpp2 "$m8" --backend cuda-mpi --pp 2 --vpp 2 --mbs 1 &&
    row "| tiny-gpt-8l cuda-mpi --pp 2 --vpp 2 vs 1-rank cpu, rtol 1e-4 | $(cmp 8l-cpu lay8lpp2vpp2 1e-4) |"
fi
# Mixture of experts (router, dispatch and combine, the EP all-to-all over MPI_Alltoallv)
# and Qwen3's q/k norm, against 1-rank cpu runs at the same micro-batch size (the
# auxiliary loss and capacity are per micro-batch; tests/executor/CMakeLists.txt's
# moe_refs): softmax top-2 (tiny-moe), sigmoid + bias (tiny-moe-v3), qk_norm with
# experts (tiny-qwen3moe).
mm=$root/tests/executor/models
for spec in "tiny-moe|--dp 2 --ep 2" "tiny-moe|--dp 2 --ep 2 --zero 1" "tiny-moe-v3|--dp 2 --ep 2" \
            "tiny-qwen3moe|--tp 2" "tiny-qwen3moe|--tp 2 --dp 2 --ep 2"; do
  model=${spec%%|*} lay=${spec#*|}
  [ -f "$work/$model-ref/log.jsonl" ] || run "$model-ref" "$mm/$model.json" --backend cpu --mbs 2 || continue
  if [ ! -f "$work/$model-gpu1/log.jsonl" ]; then
    DPLAN_CUDA_GEMM=fp32 run "$model-gpu1" "$mm/$model.json" --backend cuda --mbs 2 &&
      row "| $model cuda (1 rank) vs cpu, rtol 1e-4 | $(cmp $model-ref $model-gpu1 1e-4) |"
  fi
  name="$model-$(echo "$lay" | tr -d ' -')"
  DPLAN_CUDA_GEMM=fp32 run "$name" "$mm/$model.json" --backend cuda-mpi --mbs 2 $lay &&
    row "| $model cuda-mpi $lay vs 1-rank cpu, rtol 1e-4 | $(cmp $model-ref $name 1e-4) |"
done
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  run nccl-dp2 tiny-gpt --backend cuda --dp 2 &&
    row "| tiny-gpt cuda (NCCL) --dp 2 vs cpu, rtol 1e-2 | $(cmp tiny-gpt-cpu nccl-dp2 1e-2) |"
  run nccl-cp2 tiny-gpt --backend cuda --cp 2 &&
    row "| tiny-gpt cuda (NCCL) --cp 2 vs cpu, rtol 1e-2 | $(cmp tiny-gpt-cpu nccl-cp2 1e-2) |"
  [ -f "$work/tiny-moe-ref/log.jsonl" ] && run nccl-moe-ep2 "$mm/tiny-moe.json" --backend cuda --dp 2 --ep 2 --mbs 2 &&
    row "| tiny-moe cuda (NCCL all-to-all) --dp 2 --ep 2 vs cpu, rtol 1e-2 | $(cmp tiny-moe-ref nccl-moe-ep2 1e-2) |"
  [ -f "$work/8l-cpu/log.jsonl" ] && run nccl-vpp "$m8" --backend cuda --pp 2 --vpp 2 --mbs 1 &&
    row "| tiny-gpt-8l cuda (NCCL) --pp 2 --vpp 2 vs cpu, rtol 1e-2 | $(cmp 8l-cpu nccl-vpp 1e-2) |"
fi

# ---- 4. throughput
bench_rows=()
if [ $bench = 1 ]; then
  B=${GPU_CHECK_BATCH:-8} T=1024
  python3 -c "
import random, struct, sys
random.seed(0)
n = $B * $T * 40 + 1
with open('$work/tok.bin', 'wb') as f:
    f.write(struct.pack('<%dH' % n, *[random.randrange(50257) for _ in range(n)]))"
  # GPT-2 small and medium (Radford et al. 2019 Table 2), the shapes issue 17 names:
  # name, layers, hidden, heads for both implementations.
  for spec in "gpt2-124m 12 768 12" "gpt2-350m 24 1024 16"; do
    read -r gm gl gh ga <<< "$spec"
    say "4. $gm, seq $T, batch $B"
    if "$dplan" run "$gm" --backend cuda --steps 12 --gbs $B --mbs $B --seq-len $T \
        --data "$work/tok.bin" --data-format raw --out "$work/$gm" > "$work/$gm.out" 2>&1; then
      tok=$(python3 -c "
import json, statistics
r = [json.loads(l) for l in open('$work/$gm/log.jsonl')]
r = [x['tokens_per_sec'] for x in r if x.get('step', 0) > 2 and 'tokens_per_sec' in x]
print(statistics.median(r))")
      bench_rows+=("{\"model\": \"$gm\", \"impl\": \"dplan cuda\", \"precision\": \"fp32/tf32\", \"tokens_per_s\": $tok}")
    else
      bench_rows+=("{\"model\": \"$gm\", \"impl\": \"dplan cuda\", \"precision\": \"fp32/tf32\", \"error\": \"$(tail -1 "$work/$gm.out" | tr -d '"' | cut -c1-160)\"}")
    fi
    while IFS= read -r l; do bench_rows+=("$l"); done < <(
      timeout 150 python3 bench/gpu/torch_gpt2.py --name "$gm" --layers "$gl" --hidden "$gh" \
        --heads "$ga" --batch $B --seq $T --bf16 2>> "$work/torch.err" || true)
  done
fi

# ---- the table
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
slug=$(echo "$gpu" | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-')
mkdir -p bench/results
out=bench/results/gpu-check-$slug-$(date -u +%Y%m%d).md
{
  echo "# gpu-check on $gpu, $(date -u +%Y-%m-%d) (scripts/gpu-check.sh, commit $(git rev-parse --short HEAD 2> /dev/null || echo '?'))"
  echo
  echo "| check | result |"
  echo "|---|---|"
  printf '%s\n' "${results[@]}"
  if [ ${#bench_rows[@]} -gt 0 ]; then
    echo
    printf '%s\n' "${bench_rows[@]}" | python3 bench/gpu/table.py --gpu "$gpu" --profiles profiles/gpu
  fi
  echo
  echo "Wall time $(( $(date +%s) - t_start )) s including the build."
} > "$out"
say "wrote $out"
cat "$out"
printf '%s\n' "${results[@]}" | grep -q FAIL && exit 1
exit 0
