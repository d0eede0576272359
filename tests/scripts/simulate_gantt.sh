#!/usr/bin/env bash
# The Gantt chart of `dplan simulate --svg` (issue 15 item 3) shows the bubble the
# simulation reports: inside the pipeline span (the dashed lines), the rows' area not
# covered by pass bars, over the rows' whole area, is the --json "bubble", to the 0.1 px
# rounding of the bars' ends. For 1F1B, interleaved, GPipe and DualPipeV (its weight-
# gradient passes are bars too), uniform and uneven stages.
set -eu
dplan=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {
    "$dplan" simulate "$@" --svg "$tmp/g.svg" --json > "$tmp/g.json"
    python3 - "$tmp/g.svg" "$tmp/g.json" "$*" <<'PY' || fail=1
import json, re, sys
svg, sim, what = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), sys.argv[3]
span = re.search(r'data-span-x0="([0-9.]+)" data-span-x1="([0-9.]+)"', svg)
x0, x1 = float(span.group(1)), float(span.group(2))
rows = sim["pp"]
busy, n = 0.0, 0
for m in re.finditer(r'<rect class="bar" data-row="(\d+)" x="([0-9.]+)" y="[0-9.]+" '
                     r'width="([0-9.]+)"', svg):
    a, w = float(m.group(2)), float(m.group(3))
    busy += max(0.0, min(a + w, x1) - max(a, x0))  # the optimizer lies past the span
    n += 1
idle = 1 - busy / (rows * (x1 - x0))
# each bar's two ends rounded to 0.1 px
tol = n * 0.1 / (rows * (x1 - x0)) + 1e-6
ok = n >= 2 * sim["microbatches"] * sim["vpp"] * rows and abs(idle - sim["bubble"]) <= tol
print(f"{what}: Gantt idle area {100 * idle:.3f}%, simulated bubble {100 * sim['bubble']:.3f}% "
      f"({n} bars, tolerance {100 * tol:.3f}%)")
sys.exit(0 if ok else 1)
PY
}
check llama2-7b --system dgx-h100 --tp 2 --pp 4 --gbs 16
check llama2-7b --system dgx-h100 --tp 2 --pp 4 --vpp 2 --gbs 16
check llama2-7b --system dgx-h100 --tp 2 --pp 4 --gbs 16 --schedule gpipe
check llama2-7b --system dgx-h100 --tp 2 --pp 4 --stage-layers 6,9,9,8 --gbs 16
check qwen3-30b-a3b --system dgx-h100 --nodes 8 --ep 8 --pp 4 --vpp 2 --gbs 128 --framework torchtitan --pipeline-schedule dualpipev --stage-layers 3,7,7,7,7,7,7,3
exit $fail
