#!/usr/bin/env python3
"""The throughput table of scripts/gpu-check.sh: JSON lines (model, impl, precision,
tokens_per_s, or error) on stdin, a Markdown table on stdout with TFLOP/s and MFU per
model (GPT-2 124M and 350M) at seq 1024. Model FLOPs per token: Narayanan et al. 2021 eq. 3 (flops.py); the peak is the GPU profile's dense TF32 or BF16 figure
(profiles/gpu/*.json, matched by the GPU's name)."""
import argparse
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
from flops import model_flops_per_token  # noqa: E402


def peak_of(gpu, profiles):
    """The profile of this GPU: its first name part (h100, a100, ...) in the device name,
    then the most other parts found there (80gb, sxm4), PCIe only when the name says so,
    fewest parts unaccounted for (500w)."""
    name = gpu.lower().replace("-", " ")
    words = set(re.findall(r"[a-z0-9]+", name))
    best, best_score = None, None
    for f in sorted(glob.glob(os.path.join(profiles, "*.json"))):
        p = json.load(open(f))
        parts = p["name"].split("-")
        if parts[0] not in words or ("pcie" in parts) != ("pcie" in words):
            continue
        hit = sum(1 for w in parts[1:] if w in words)
        score = (hit, -(len(parts) - 1 - hit))
        if best_score is None or score > best_score:
            best, best_score = p, score
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--profiles", required=True)
    ap.add_argument("--seq", type=int, default=1024)
    a = ap.parse_args()
    prof = peak_of(a.gpu, a.profiles)
    # layers, hidden of the shapes gpu-check.sh runs (GPT-2 small, medium), vocabulary 50257
    shapes = {"gpt2-124m": (12, 768), "gpt2-350m": (24, 1024)}
    fpt = {m: model_flops_per_token(L, h, 50257, a.seq) for m, (L, h) in shapes.items()}
    print(f"seq {a.seq}, model FLOPs per token: "
          + ", ".join(f"{m} {f / 1e6:.1f} MFLOP" for m, f in fpt.items()) + "; peak "
          + (f"TF32 {prof['peak_tflops']['tf32']}, BF16 {prof['peak_tflops']['bf16']} TFLOP/s "
             f"(profiles/gpu/{prof['name']}.json)" if prof else "unknown (no profile matches)"))
    print()
    print("| model | implementation | precision | tokens/s | TFLOP/s | MFU |")
    print("|---|---|---|---|---|---|")
    for line in sys.stdin:
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        model = r.get("model", "gpt2-124m")
        if "error" in r:
            print(f"| {model} | {r['impl']} | {r['precision']} | error: {r['error']} | | |")
            continue
        tf = r["tokens_per_s"] * fpt[model] / 1e12
        key = "bf16" if "bf16" in r["precision"] else "tf32"
        mfu = f"{100 * tf / prof['peak_tflops'][key]:.1f}% of {key}" if prof else "?"
        print(f"| {model} | {r['impl']} | {r['precision']} | {r['tokens_per_s']:.0f} | {tf:.1f} | {mfu} |")


if __name__ == "__main__":
    main()
