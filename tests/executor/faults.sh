#!/usr/bin/env bash
# A rank that dies or hangs must bring the whole job down promptly with a message naming
# what happened, never hang: DPLAN_FAULT_INJECT=RANK:STEP:exit|hang (cmd_run.c).
#   faults.sh DPLAN OUT_DIR exit|hang
set -u
dplan=$1 out=$2 mode=$3
rm -rf "$out"
start=$(date +%s)
DPLAN_FAULT_INJECT=1:2:$mode timeout 60 "$dplan" run tiny-gpt --steps 5 --gbs 4 --seq-len 16 \
  --dp 2 --timeout 5 --out "$out" > /dev/null 2> "$out.stderr"
code=$?
took=$(( $(date +%s) - start ))
fail=0
[ "$code" = 1 ] || { echo "exit code $code, expected 1"; fail=1; }
[ "$took" -le 40 ] || { echo "took $took s"; fail=1; }
if [ "$mode" = exit ]; then
  want='rank 1 failed with exit status 3'
else
  want='no progress for 5 s at step 2'
fi
grep -q "$want" "$out.stderr" || { echo "stderr lacks \"$want\""; fail=1; }
[ $fail = 0 ] || cat "$out.stderr"
echo "fault $mode: exit $code after ${took} s"
exit $fail
