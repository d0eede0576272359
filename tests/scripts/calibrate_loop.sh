#!/usr/bin/env bash
# The loop of issue 16: calibrate this machine, predict `dplan run`'s step time for 8
# layouts of tiny-gpt and bench-gpt (DP, TP, PP, recompute, ZeRO-1), run them, and
# compare: their mean error within TOL, each within 2 TOL. The driver, its statistics,
# its retry rule and its load guard (exit 77) are in calibrate_loop.py, which says why
# each is what it is.
#   calibrate_loop.sh DPLAN OUT_DIR [TOL=0.15] [REPEATS=3]
set -u
exec python3 "$(dirname "$0")/calibrate_loop.py" "$@"
