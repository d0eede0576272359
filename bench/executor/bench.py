#!/usr/bin/env python3
"""Benchmark `dplan run` (CPU backend) against PyTorch's CPU build on the same model.

Model: profiles/models/bench-gpt.json, a GPT-2 style decoder with 6 layers, hidden
256, 8 heads, sequence 128, byte vocabulary; batch 8 sequences per process; fp32;
AdamW and clipping (bench/executor/torch_gpt.py is the same model in PyTorch).

Configurations, run in turn within each repetition (interleaved, so drifts in the
machine's load hit all of them alike):
  dplan 1 core      one process, 1 thread                 batch 8
  dplan 2 cores     one process, 2 threads                batch 8
  dplan dp=2        two ranks (mpirun), 1 thread each     batch 8 per rank (gbs 16)
  torch 1 core      torch.set_num_threads(1)              batch 8
  torch 2 cores     torch.set_num_threads(2)              batch 8
  torch DDP dp=2    two processes (gloo), 1 thread each   batch 8 per rank
  GEMM-only ceiling build/bench_gemm_ceiling: one step's sgemm calls alone, 1 thread
                    (the most tokens/s anything built on these kernels can reach)
OpenBLAS 0.3.21 does not know recent Xeons and falls back to generic kernels; dplan
sets OPENBLAS_CORETYPE for itself (dp_exec_blas_hint), and the PyTorch runs get the
same value so that both use the same GEMM kernels. --torch-as-installed adds PyTorch
runs without it.

Each run's figure is the median step time over its steps after the first two; the
table gives, per configuration, the median over repetitions as tokens/s. Scaling
efficiency of dp=2 = tokens/s(dp=2) / (2 x tokens/s(1 core)). The ratios are given twice:
of the medians, and as the median of the ratios within each repetition (steadier when
the machine's speed drifts).

  python3 bench/executor/bench.py [--dplan build/dplan] [--reps 5] [--steps 15]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def median_step(times):
    t = times[2:] if len(times) > 4 else times
    return statistics.median(t)


def run_dplan(dplan, threads, dp, steps, tmp):
    out = os.path.join(tmp, "dplan-out")
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    gbs = 8 * dp
    cmd = [dplan, "run", "bench-gpt", "--steps", str(steps), "--gbs", str(gbs), "--mbs", "8",
           "--dp", str(dp), "--out", out]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    times, tokens = [], 0
    with open(os.path.join(out, "log.jsonl")) as f:
        for line in f:
            o = json.loads(line)
            if "step_time_s" not in o:  # the closing "finished" record
                continue
            times.append(o["step_time_s"])
            tokens = o["tokens_per_sec"] * o["step_time_s"]
    return round(tokens) / median_step(times)


def run_torch(threads, world, steps, coretype):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    script = os.path.join(HERE, "torch_gpt.py")
    base = [sys.executable, script, "--threads", str(threads), "--steps", str(steps),
            "--world", str(world)]
    if world == 1:
        p = subprocess.run(base, env=env, check=True, capture_output=True, text=True)
        d = json.loads(p.stdout)
    else:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + os.getpid() % 1000))
        procs = [subprocess.Popen(base + ["--rank", str(r)], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(world)]
        outs = [p.communicate() for p in procs]
        if any(p.returncode for p in procs):
            raise RuntimeError("torch DDP failed: " + outs[0][1][-400:])
        d = json.loads(outs[0][0])
    return d["tokens_per_step"] / median_step(d["step_time_s"])


def run_ceiling(exe, coretype):
    """Tokens/s of one core if only bench-gpt's GEMMs cost time (bench/executor/gemm_ceiling.c)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    out = subprocess.run([exe], env=env, check=True, capture_output=True, text=True).stdout
    line = [x for x in out.splitlines() if x.startswith("ceiling:")][0]
    return float(line.split()[1])


def coretype_hint(dplan):
    """The OPENBLAS_CORETYPE dplan picks (it prints nothing; ask the same way it does)."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return os.environ["OPENBLAS_CORETYPE"]
    flags = open("/proc/cpuinfo").read()
    if all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd")):
        return "SkylakeX"
    if "avx2" in flags and " fma" in flags:
        return "Haswell"
    return None


def paired(results):
    """Ratios within each repetition, whose configurations ran minutes apart at most: on a
    shared machine whose speed drifts, the median of these is steadier than the ratio of
    the medians above."""
    names = {"d1": "dplan 1 core", "d2": "dplan 2 cores (2 threads)",
             "dd": "dplan dp=2 (2 ranks x 1 thread)", "t1": "torch 1 core",
             "t2": "torch 2 cores (2 threads)", "td": "torch DDP dp=2 (gloo, 1 thread each)"}
    v = {k: results.get(name, []) for k, name in names.items()}
    rows = []
    if v["d1"] and len(v["d1"]) == len(v["dd"]):
        rows.append(("dp=2 scaling efficiency",
                     [b / (2 * a) for a, b in zip(v["d1"], v["dd"])]))
    if all(len(x) == len(v["d1"]) > 0 for x in v.values()):
        rows.append(("1 core, dplan / torch", [a / b for a, b in zip(v["d1"], v["t1"])]))
        rows.append(("2 cores, dplan best / torch best",
                     [max(a, b) / max(c, d)
                      for a, b, c, d in zip(v["d2"], v["dd"], v["t2"], v["td"])]))
    if rows:
        print(f"per repetition ({len(rows[0][1])} pairs), median (min..max):")
    for name, xs in rows:
        print(f"  {name:34s} {statistics.median(xs):6.3f}  ({min(xs):.3f}..{max(xs):.3f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dplan", default=os.path.join(ROOT, "build", "dplan"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--torch-as-installed", action="store_true")
    ap.add_argument("--json", help="also write the raw figures here")
    args = ap.parse_args()
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    os.environ.setdefault("DPLAN_PROFILES", os.path.join(ROOT, "profiles"))
    have_torch = False
    if not args.no_torch:
        try:
            import torch  # noqa: F401
            have_torch = True
        except ImportError:
            print("PyTorch not found (apt-get install python3-torch): dplan figures only")
    core = coretype_hint(args.dplan)
    configs = [
        ("dplan 1 core", 1, lambda tmp: run_dplan(args.dplan, 1, 1, args.steps, tmp)),
        ("dplan 2 cores (2 threads)", 2, lambda tmp: run_dplan(args.dplan, 2, 1, args.steps, tmp)),
        ("dplan dp=2 (2 ranks x 1 thread)", 2,
         lambda tmp: run_dplan(args.dplan, 1, 2, args.steps, tmp)),
    ]
    ceiling = os.path.join(os.path.dirname(os.path.abspath(args.dplan)), "bench_gemm_ceiling")
    if os.path.exists(ceiling):
        configs.append(("GEMM-only ceiling, 1 core", 1, lambda tmp: run_ceiling(ceiling, core)))
    if have_torch:
        configs += [
            ("torch 1 core", 1, lambda tmp: run_torch(1, 1, args.steps, core)),
            ("torch 2 cores (2 threads)", 2, lambda tmp: run_torch(2, 1, args.steps, core)),
            ("torch DDP dp=2 (gloo, 1 thread each)", 2,
             lambda tmp: run_torch(1, 2, args.steps, core)),
        ]
        if args.torch_as_installed:
            configs += [
                ("torch 1 core, as installed", 1, lambda tmp: run_torch(1, 1, args.steps, None)),
                ("torch 2 cores, as installed", 2, lambda tmp: run_torch(2, 1, args.steps, None)),
            ]
    results = {name: [] for name, _, _ in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for name, _, fn in configs:
                try:
                    results[name].append(fn(tmp))
                except Exception as e:  # a failed configuration is reported, not fatal
                    print(f"{name}: failed: {e}", file=sys.stderr)
            print(f"repetition {rep + 1}/{args.reps} done", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in results.items() if v}
    print(f"bench-gpt (6 layers, hidden 256, 8 heads, seq 128, batch 8 per process, fp32), "
          f"{args.reps} interleaved repetitions x {args.steps} steps, medians; "
          f"OPENBLAS_CORETYPE={core}")
    print(f"{'configuration':40s} {'cores':>5s} {'tokens/s':>10s} {'min..max':>17s}")
    for name, cores, _ in configs:
        if name in med:
            v = results[name]
            print(f"{name:40s} {cores:5d} {med[name]:10.0f} {min(v):8.0f}..{max(v):<8.0f}")
    d1, d2, dd = med.get("dplan 1 core"), med.get("dplan 2 cores (2 threads)"), \
        med.get("dplan dp=2 (2 ranks x 1 thread)")
    if d1 and dd:
        print(f"dp=2 scaling efficiency: {dd / (2 * d1):.3f} (tokens/s dp=2 / 2 x 1 core)")
    if have_torch:
        t1 = med.get("torch 1 core")
        t2 = max(v for k, v in med.items() if k.startswith("torch") and "1 core" not in k
                 and "as installed" not in k)
        if d1 and t1:
            print(f"1 core: dplan / torch = {d1 / t1:.2f}x")
        cg = med.get("GEMM-only ceiling, 1 core")
        if cg and d1 and t1:
            print(f"1 core: the GEMM-only ceiling is {cg / t1:.2f}x torch; dplan runs at "
                  f"{d1 / cg:.0%} of it, torch at {t1 / cg:.0%}")
        ti1, ti2 = med.get("torch 1 core, as installed"), med.get("torch 2 cores, as installed")
        if d1 and ti1 and ti2:
            best2 = max(x for x in (d2, dd) if x)
            print(f"against torch as installed: 1 core {d1 / ti1:.2f}x, "
                  f"2 cores {best2 / ti2:.2f}x")
        if t2:
            best2 = max(x for x in (d2, dd) if x)
            print(f"2 cores: dplan best / torch best = {best2 / t2:.2f}x "
                  f"(dplan 2 threads {d2 / t2:.2f}x, dplan dp=2 {dd / t2:.2f}x)")
    paired(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": results, "median": med, "openblas_coretype": core}, f, indent=1)


if __name__ == "__main__":
    main()
