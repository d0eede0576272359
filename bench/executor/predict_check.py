#!/usr/bin/env python3
"""How close `dplan run`'s predicted CPU step time is to the measured one.

dplan run ends with "step time: measured X ms, predicted Y ms": the prediction is the CPU
step model of cli/run_predict.c fed by this machine's probe (executor/probe.c) and the
all-reduces the run timed. This script runs several model sizes and layouts, each
`--reps` times, interleaved (a drift in the machine's load hits every configuration
alike), and prints per configuration the measured step (rank 0's median over the steps
after the first) of the best run and the median run, the median prediction, and the
error predicted / measured - 1 against both. Other jobs on the machine only ever add
time, so the best run is the one closest to the machine the probe measured.

On a shared VM other jobs take the cores at random: an OpenMP barrier whose second
thread lost its core makes a 2-thread step of tiny-gpt 10x slower. So each run waits
until the machine has been idle for a second, and is repeated (up to --tries times) when
other processes used more than --max-foreign of the cores while it ran (the CPU time of
/proc/stat less that of the run itself); the count of such retries is printed.

  python3 bench/executor/predict_check.py [--dplan build/dplan] [--reps 5] [--quick]
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# label, threads per rank (None: dplan's default, cores / ranks), steps, dplan run arguments
CONFIGS = [
    ("tiny-gpt, 1 rank x 2 threads", None, 30, ["tiny-gpt", "--mbs", "8"]),
    ("tiny-gpt, 1 rank x 1 thread", 1, 30, ["tiny-gpt", "--mbs", "8"]),
    ("tiny-llama, 1 rank x 2 threads", None, 30, ["tiny-llama", "--mbs", "8"]),
    ("tiny-gpt dp=2 (2 ranks x 1)", None, 30, ["tiny-gpt", "--mbs", "8", "--dp", "2"]),
    ("tiny-gpt tp=2 (2 ranks x 1)", None, 30, ["tiny-gpt", "--mbs", "8", "--tp", "2"]),
    ("tiny-llama pp=2, 4 micro-batches", None, 30,
     ["tiny-llama", "--mbs", "4", "--gbs", "16", "--pp", "2"]),
    ("bench-gpt, 1 rank x 2 threads", None, 8, ["bench-gpt", "--mbs", "8"]),
    ("bench-gpt dp=2 (2 ranks x 1)", None, 8, ["bench-gpt", "--mbs", "8", "--dp", "2"]),
    ("gpt2-124m seq 256, 1 rank x 2", None, 4, ["gpt2-124m", "--mbs", "2", "--seq-len", "256"]),
]
QUICK = {0, 3, 4, 6}


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def cpu_busy():
    """(busy, total) seconds of all cores from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v) - idle) / tick, sum(v) / tick


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def wait_idle(frac, longest=10):
    """Until a second passes with less than `frac` of the cores busy."""
    t0 = time.time()
    while time.time() - t0 < longest:
        b0, a0 = cpu_busy()
        time.sleep(1.0)
        b1, a1 = cpu_busy()
        if a1 > a0 and (b1 - b0) / (a1 - a0) < frac:
            return


def run_quiet(dplan, threads, steps, args, tmp, max_foreign, tries, stats):
    """A run during which other processes used less than max_foreign of the cores."""
    for _ in range(tries):
        wait_idle(max_foreign)
        b0, a0 = cpu_busy()
        c0 = children_cpu()
        r = run(dplan, threads, steps, args, tmp)
        b1, a1 = cpu_busy()
        foreign = (b1 - b0) - (children_cpu() - c0)
        if a1 <= a0 or foreign / (a1 - a0) < max_foreign:
            return r
        stats["retries"] += 1
    stats["gave_up"] += 1
    return r


def run(dplan, threads, steps, args, tmp):
    out = os.path.join(tmp, "out")
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ)
    env.setdefault("DPLAN_PROFILES", os.path.join(ROOT, "profiles"))
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    else:
        env.pop("OMP_NUM_THREADS", None)
    cmd = [dplan, "run", *args, "--steps", str(steps), "--out", out]
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    return s["ranks"][0]["step_time_median_s"], s["predicted_step_time_s"], s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dplan", default=os.path.join(ROOT, "build", "dplan"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="four configurations only")
    ap.add_argument("--max-foreign", type=float, default=0.1,
                    help="repeat a run when other processes used this fraction of the cores")
    ap.add_argument("--tries", type=int, default=5)
    ap.add_argument("--only", type=int, nargs="*", help="configurations by index (0-based)")
    a = ap.parse_args()
    stats = {"retries": 0, "gave_up": 0}
    configs = [c for i, c in enumerate(CONFIGS)
               if (not a.quick or i in QUICK) and (a.only is None or i in a.only)]
    res = {c[0]: [] for c in configs}
    print(f"load average before: {loadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.reps):
            for label, threads, steps, args in configs:
                meas, pred, s = run_quiet(a.dplan, threads, steps, args, tmp, a.max_foreign,
                                          a.tries, stats)
                res[label].append((meas, pred, {k: v for k, v in s.get("cpu_prediction", {}).items() if k != "step_time_s"}))
    print(f"load average after: {loadavg()}; runs repeated for foreign load: "
          f"{stats['retries']}, kept although loaded: {stats['gave_up']}")
    print(f"{'':34} {'measured step (ms)':>19} {'predicted':>10} {'error vs':>17}")
    print(f"{'configuration':34} {'best run':>9} {'median':>9} {'(ms)':>10} {'best':>8} {'median':>8}")
    eb, em = [], []
    for label, *_ in configs:
        r = res[label]
        best = min(m for m, _, _ in r)
        med = statistics.median(m for m, _, _ in r)
        pred = statistics.median(p for _, p, _ in r)
        eb.append(pred / best - 1)
        em.append(pred / med - 1)
        print(f"{label:34} {1e3 * best:9.2f} {1e3 * med:9.2f} {1e3 * pred:10.2f} "
              f"{100 * eb[-1]:+7.0f}% {100 * em[-1]:+7.0f}%")
    print(f"error (predicted / measured - 1) against the best of {a.reps} runs: "
          f"{100 * min(eb):+.0f}% to {100 * max(eb):+.0f}%; against their median: "
          f"{100 * min(em):+.0f}% to {100 * max(em):+.0f}%")
    print("predicted parts of the last repetition (ms):")
    for label, *_ in configs:
        parts = res[label][-1][2]
        print(f"  {label:34} " + " ".join(f"{k} {1e3 * v:.2f}" for k, v in parts.items() if v > 0))


if __name__ == "__main__":
    main()
