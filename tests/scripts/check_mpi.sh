#!/usr/bin/env bash
# dplan check under mpirun, 2 ranks on this machine: the versions gathered over MPI
# (the fake NVML with one driver on both ranks, then two), the all-reduce bandwidth of
# the TP group against a calibration that expects 0.01 GB/s (any MPI beats it: PASS) and
# against the plan's NVLink 4 (369 GB/s, which shared memory on 2 CPU cores does not reach:
# FAIL), and OpenMPI's rank variables against the plan's GPU count.
# usage: check_mpi.sh DPLAN SOURCE_DIR FAKE_NVML
set -u
dplan=$1 src=$2 fake=$3
xml=$src/tests/topology/xml/dgx-h100.xml
plan2="tiny-llama --gpu h100-sxm5-80gb --gpus 2 --intra nvlink4 --tp 2 --topology $xml"
mpi="mpirun -np 2 --oversubscribe"
fail=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
expect() { # STATUS ID: the text output has that item with that status
  if ! grep -q "^$1  $2 " "$out"; then
    echo "expected $1 for $2:"; cat "$out"; fail=1
  fi
}
nvml="-x DPLAN_NVML_LIB=$fake -x DPLAN_CUDART_LIB=/nonexistent"

$mpi $nvml -x DPLAN_FAKE_NVML_DRIVER=550.54.15 "$dplan" check $plan2 \
  --calibration "$src/tests/check/cal-slow-intra.json" --busbw-iters 2 > "$out"
[ $? = 0 ] || { echo "exit status not 0 with only PASS/WARN"; cat "$out"; fail=1; }
expect PASS versions; expect PASS busbw.tp; expect PASS env
grep -q "^checked: 2 ranks" "$out" || { echo "not 2 ranks"; cat "$out"; fail=1; }

$mpi $nvml "$dplan" check $plan2 --busbw-iters 2 > "$out"
[ $? != 0 ] || { echo "exit status 0 with a FAIL"; fail=1; }
expect FAIL busbw.tp
grep -q "expected from the plan's nvlink4" "$out" || { echo "no nvlink4 expectation"; fail=1; }

mpirun --oversubscribe -np 1 $nvml -x DPLAN_FAKE_NVML_DRIVER=550.54.15 "$dplan" check $plan2 \
  --busbw-iters 1 : -np 1 $nvml -x DPLAN_FAKE_NVML_DRIVER=535.104.05 "$dplan" check $plan2 \
  --busbw-iters 1 > "$out"
expect FAIL versions
grep -q "rank 1 ([^)]*): driver 535.104.05" "$out" || { echo "rank 1 not named"; cat "$out"; fail=1; }

# Four GPUs in the plan, two ranks launched.
$mpi $nvml "$dplan" check tiny-llama --gpu h100-sxm5-80gb --gpus 4 --intra nvlink4 --tp 2 \
  --topology "$xml" > "$out"
expect FAIL env; expect WARN busbw
grep -q "OMPI_COMM_WORLD_SIZE 2 but the plan has 4 GPUs" "$out" || { cat "$out"; fail=1; }
exit $fail
