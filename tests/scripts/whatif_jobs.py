#!/usr/bin/env python3
"""whatif's searches on several threads give what one thread gives, byte for byte: every
shipped system at 1 and 8 nodes for Llama 2 13B, with --jobs 1 and --jobs 4, JSON and
table. The set must hold rows that fit and rows that do not (a 24 GiB card's node does not
hold 13B's training state), so that the comparison covers both paths. Prints the two
wall times (not asserted: a shared 2-core machine times nothing reliably).
    whatif_jobs.py DPLAN"""
import json
import subprocess
import sys
import time

dplan = sys.argv[1]
args = [dplan, "whatif", "llama2-13b", "--nodes", "1,8", "--tokens", "1e11"]
bad, outs, secs = [], {}, {}
for jobs in (1, 4):
    for fmt in ("json", "text"):
        t0 = time.monotonic()
        r = subprocess.run(args + ["--jobs", str(jobs)] + (["--json"] if fmt == "json" else []),
                           capture_output=True, text=True)
        secs[(jobs, fmt)] = time.monotonic() - t0
        if r.returncode != 0:
            sys.exit(f"FAIL: whatif --jobs {jobs} ({fmt}) exited {r.returncode}: {r.stderr.strip()}")
        outs[(jobs, fmt)] = r.stdout
for fmt in ("json", "text"):
    if outs[(1, fmt)] != outs[(4, fmt)]:
        a, b = outs[(1, fmt)].splitlines(), outs[(4, fmt)].splitlines()
        i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        bad.append(f"{fmt}: --jobs 4 differs from --jobs 1 at line {i + 1}")
res = json.loads(outs[(1, "json")])["results"]
fits = sum(r["fits"] for r in res)
if not (0 < fits < len(res)):
    bad.append(f"{fits} of {len(res)} rows fit: the case needs both kinds")
r = subprocess.run(args + ["--jobs", "0"], capture_output=True, text=True)
if r.returncode != 2 or "--jobs" not in r.stderr:
    bad.append(f"--jobs 0: exit {r.returncode}, stderr {r.stderr.strip()!r}")
for b in bad:
    print("FAIL:", b)
if not bad:
    print(f"whatif_jobs: {len(res)} searches ({fits} fit) identical with 1 and 4 threads; "
          f"JSON {secs[(1, 'json')]:.1f} s with 1, {secs[(4, 'json')]:.1f} s with 4")
sys.exit(1 if bad else 0)
