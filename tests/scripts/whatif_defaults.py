#!/usr/bin/env python3
"""whatif without --systems and --nodes compares every shipped system at 1, 2, 4, ... 128
nodes and says so: one result per system profile and node count, in the JSON and the
table, and the defaults named in both. Failed before: whatif required both options.
    whatif_defaults.py DPLAN PROFILES_DIR"""
import json
import os
import subprocess
import sys

dplan, profiles = sys.argv[1], sys.argv[2]
systems = sorted(f[:-5] for f in os.listdir(os.path.join(profiles, "system")) if f.endswith(".json"))
nodes = [1, 2, 4, 8, 16, 32, 64, 128]
bad = []

out = subprocess.run([dplan, "whatif", "tiny-gpt", "--tokens", "1e9", "--json"],
                     capture_output=True, text=True)
if out.returncode != 0:
    sys.exit(f"FAIL: whatif --json exited {out.returncode}: {out.stderr.strip()}")
d = json.loads(out.stdout)
got = [(r["system"], r["nodes"]) for r in d["results"]]
want = [(s, n) for s in systems for n in nodes]
if got != want:
    bad.append(f"results: {len(got)} (system, nodes) pairs, expected the {len(want)} of "
               f"{len(systems)} systems x {nodes}; first difference at "
               f"{next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))}")
for r in d["results"]:
    if r["gpus"] % r["nodes"] or r["gpus"] < r["nodes"]:
        bad.append(f"{r['system']} x{r['nodes']}: {r['gpus']} GPUs")
    if not r["fits"]:  # a 1.4M-parameter model fits every GPU
        bad.append(f"{r['system']} x{r['nodes']}: nothing fits tiny-gpt")
defaults = d.get("defaults", {})
for key in ("systems", "nodes"):
    if key not in defaults:
        bad.append(f"JSON defaults lack '{key}': {defaults}")

text = subprocess.run([dplan, "whatif", "tiny-gpt", "--tokens", "1e9"], capture_output=True,
                      text=True).stdout.splitlines()
if not any(l.startswith(f"systems  all {len(systems)} system profiles (--systems not given")
           for l in text):
    bad.append("the table does not say which systems it compared")
if "nodes    1, 2, 4, ... 128 (--nodes not given)" not in text:
    bad.append("the table does not say which node counts it tried")
rows = [l for l in text if l.split() and l.split()[0] in systems]
if len(rows) != len(want):
    bad.append(f"table: {len(rows)} rows, expected {len(want)}")

for b in bad:
    print("FAIL:", b)
if not bad:
    print(f"whatif_defaults: {len(systems)} systems x {len(nodes)} node counts, said in both outputs")
sys.exit(1 if bad else 0)
