#!/usr/bin/env bash
# Build dplan and run every test: a gcc Release build with warnings as errors,
# then a clang Debug build under AddressSanitizer + UndefinedBehaviorSanitizer,
# the loader fuzzers (a build of their own) for a short while, and the format check.
# This is the command .ci/run runs and the README gives.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

# DPLAN_CUDA=ON: the CUDA backend is compiled and linked every time (CUDA is under
# /usr/local/cuda on every build machine; its GPU tests skip without a GPU).
echo "== gcc Release, -Werror, CUDA backend"
cmake -S . -B build/ci-release -DCMAKE_BUILD_TYPE=Release -DDPLAN_WERROR=ON \
  -DCMAKE_C_COMPILER=gcc -DDPLAN_CUDA=ON > /dev/null
cmake --build build/ci-release -j "$jobs"
ctest --test-dir build/ci-release --output-on-failure -j "$jobs"

echo "== clang Debug, AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build/ci-asan -DCMAKE_BUILD_TYPE=Debug -DDPLAN_WERROR=ON \
  -DCMAKE_C_COMPILER=clang -DDPLAN_SANITIZE=address,undefined > /dev/null
cmake --build build/ci-asan -j "$jobs"
# Leaks are checked in every test but those whose processes start Open MPI (every
# `dplan run`, one rank or several: exec_*, and the mpi-labelled export_mpirun_local and
# check_mpi): there LeakSanitizer's exit-time tracer crashes now and then ("Tracer caught
# signal 11"), so their ENVIRONMENT sets detect_leaks=0 (tests/executor/CMakeLists.txt
# says why); ASan and UBSan stay on in them.
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/ci-asan --output-on-failure -j "$jobs"

# The fuzz targets get a build of their own: there every library carries
# libFuzzer's coverage instrumentation (-fsanitize=fuzzer-no-link), which the
# ASan build's tests do not need. Only the targets and what they link are built.
echo "== fuzz the loaders and the checkpoint readers (clang Debug, ASan + UBSan, 20 s each)"
cmake -S . -B build/ci-fuzz -DCMAKE_BUILD_TYPE=Debug -DDPLAN_WERROR=ON \
  -DCMAKE_C_COMPILER=clang -DDPLAN_SANITIZE=address,undefined -DDPLAN_FUZZ=ON > /dev/null
cmake --build build/ci-fuzz -j "$jobs" --target fuzz_loaders fuzz_topo_xml fuzz_safetensors fuzz_ckpt
fuzz() { # target max_len seed-dir...
  local target=$1 max_len=$2 corpus log
  shift 2
  corpus=$(mktemp -d) log=$(mktemp)
  for d in "$@"; do
    for s in tests/fuzz/seeds/"$d"/*; do cp "$s" "$corpus/$d-${s##*/}"; done
  done
  if ! DPLAN_PROFILES="$PWD/profiles" ASAN_OPTIONS=detect_leaks=1 \
    build/ci-fuzz/"$target" -max_total_time=20 -max_len="$max_len" -print_final_stats=1 \
    -artifact_prefix=build/ci-fuzz/ "$corpus" > "$log" 2>&1; then
    tail -40 "$log"
    echo "$target: failed; the failing input is in build/ci-fuzz/ (named above)"
    exit 1
  fi
  # libFuzzer's "INITED" line is the seeds' coverage, "DONE" the end's: cov = edges
  # (coverage counters hit), ft = features (edges with hit-count buckets and the like).
  awk -v t="$target" '
    /[[:space:]]INITED[[:space:]]/ { for (i = 1; i <= NF; i++) { if ($i == "cov:") c0 = $(i+1); if ($i == "ft:") f0 = $(i+1) } }
    /[[:space:]]DONE[[:space:]]/ { for (i = 1; i <= NF; i++) { if ($i == "cov:") c1 = $(i+1); if ($i == "ft:") f1 = $(i+1); if ($i == "corp:") cp = $(i+1) } }
    /Loaded .* inline 8-bit counters/ { for (i = 1; i <= NF; i++) if ($i ~ /^\([0-9]+$/) n += substr($i, 2) }
    /^stat::number_of_executed_units:/ { runs = $2 }
    /^stat::average_exec_per_sec:/ { eps = $2 }
    END { printf "%s: %d runs (%d/s); coverage %s edges, %s features (seeds alone: %s edges, %s features) of %d counters; corpus %s\n", t, runs, eps, c1, f1, c0, f0, n, cp }' "$log"
  rm -rf "$corpus" "$log"
}
fuzz fuzz_loaders 4096 model gpu link network system cluster layout calibration
fuzz fuzz_topo_xml 16384 topo_xml
fuzz fuzz_safetensors 32768 safetensors
fuzz fuzz_ckpt 49152 ckpt

echo "== clang-format"
git ls-files '*.c' '*.h' | xargs clang-format --dry-run -Werror

echo "== all tests passed"
