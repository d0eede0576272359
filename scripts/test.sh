#!/usr/bin/env bash
# Build dplan and run every test: a gcc Release build with warnings as errors,
# then a clang Debug build under AddressSanitizer + UndefinedBehaviorSanitizer,
# the loader fuzzer for a short while, and the format check.
# This is the command .ci/run runs and the README gives.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

echo "== gcc Release, -Werror"
cmake -S . -B build/ci-release -DCMAKE_BUILD_TYPE=Release -DDPLAN_WERROR=ON \
  -DCMAKE_C_COMPILER=gcc > /dev/null
cmake --build build/ci-release -j "$jobs"
ctest --test-dir build/ci-release --output-on-failure -j "$jobs"

echo "== clang Debug, AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build/ci-asan -DCMAKE_BUILD_TYPE=Debug -DDPLAN_WERROR=ON \
  -DCMAKE_C_COMPILER=clang -DDPLAN_SANITIZE=address,undefined -DDPLAN_FUZZ=ON > /dev/null
cmake --build build/ci-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/ci-asan --output-on-failure -j "$jobs"

echo "== fuzz the loaders (20 s each)"
for f in build/ci-asan/fuzz_*; do
  corpus=$(mktemp -d)
  cp tests/fuzz/seeds/* "$corpus"/ 2>/dev/null || true
  "$f" -max_total_time=20 -max_len=4096 -print_final_stats=0 "$corpus" 2>&1 | tail -2
  rm -rf "$corpus"
done

echo "== clang-format"
git ls-files '*.c' '*.h' | xargs clang-format --dry-run -Werror

echo "== all tests passed"
