#!/usr/bin/env python3
"""PyTorch GPT-2 training throughput on one GPU, the baseline of scripts/gpu-check.sh.

The same model as dplan's gpt2-124m profile (GPT-2 small: 12 layers, 12 heads, hidden 768,
vocabulary 50257, learned positions, pre-LayerNorm, GELU tanh, tied embeddings; Radford
et al. 2019) or, with --layers 24 --hidden 1024 --heads 16, gpt2-350m (GPT-2 medium), trained with AdamW on random tokens at the given batch and sequence length.
Modes: fp32 storage with TF32 matmuls (what dplan's CUDA backend computes today) and bf16
autocast (the mixed-precision target), each eager and under torch.compile. Attention is
F.scaled_dot_product_attention(is_causal=True) (flash or memory-efficient kernels), the
fastest PyTorch offers. Prints one JSON object per mode on stdout.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
import torch.nn as nn
import torch.nn.functional as F

from flops import model_flops_per_token


class Block(nn.Module):
    def __init__(self, h, a):
        super().__init__()
        self.a = a
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc = nn.Linear(h, 4 * h)
        self.out = nn.Linear(4 * h, h)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.a, C // self.a).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, h, a, V, T):
        super().__init__()
        self.wte = nn.Embedding(V, h)
        self.wpe = nn.Embedding(T, h)
        self.blocks = nn.ModuleList(Block(h, a) for _ in range(L))
        self.lnf = nn.LayerNorm(h)

    def forward(self, idx, tgt):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.view(-1))


def run(args, compiled, bf16):
    torch.manual_seed(0)
    dev = "cuda"
    m = GPT(args.layers, args.hidden, args.heads, args.vocab, args.seq).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    step_fn = torch.compile(m) if compiled else m
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
    tgt = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
    times = []
    for i in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = step_fn(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    dt = times[len(times) // 2]
    tok_s = args.batch * args.seq / dt
    return {
        "model": args.name,
        "impl": "pytorch " + ("compile" if compiled else "eager"),
        "precision": "bf16 autocast" if bf16 else "fp32/tf32",
        "step_s": dt,
        "tokens_per_s": tok_s,
        "tflops": tok_s * model_flops_per_token(args.layers, args.hidden, args.vocab, args.seq) / 1e12,
        "loss": float(loss),
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", default="gpt2-124m", help="the model's name in the output")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--modes", default="eager,compile", help="eager, compile (comma-separated)")
    p.add_argument("--bf16", action="store_true", help="also the bf16 autocast modes")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    for bf16 in ([False, True] if args.bf16 else [False]):
        for mode in args.modes.split(","):
            try:
                r = run(args, mode == "compile", bf16)
            except Exception as e:  # torch.compile needs a compiler toolchain: say so
                r = {"model": args.name, "impl": "pytorch " + mode, "precision": "bf16 autocast" if bf16 else "fp32/tf32",
                     "error": str(e).splitlines()[0][:200]}
            r["device"] = torch.cuda.get_device_name()
            print(json.dumps(r), flush=True)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()


if __name__ == "__main__":
    main()
