#!/usr/bin/env python3
"""The benchmark model of bench/executor in PyTorch (CPU, fp32), written to train
exactly what `dplan run bench-gpt` trains: a GPT-2 style decoder (pre-norm
LayerNorm with biases, learned positions, tied embedding/LM head, GELU with the
tanh approximation, biases on every linear), causal attention, cross-entropy,
AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D weights only) and
gradient clipping at 1.0, on batches of byte tokens.

Prints one JSON object: the per-step wall times (zero_grad, forward, backward,
clip, step) and the tokens per step. With --world 2 it runs DistributedDataParallel
over gloo (one process per rank, the batch per rank), timing rank 0.

Needs python3-torch (Debian); benchmark only, not a dplan dependency.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h, eps=1e-5)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h, eps=1e-5)
        self.fc = nn.Linear(h, ffn)
        self.fc_proj = nn.Linear(ffn, h)

    def forward(self, x, mask):
        B, T, C = x.shape
        d = C // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.heads, d).transpose(1, 2)
        k = k.view(B, T, self.heads, d).transpose(1, 2)
        v = v.view(B, T, self.heads, d).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        x = x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, layers, h, heads, ffn, vocab, seq):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(seq, h)
        self.blocks = nn.ModuleList([Block(h, heads, ffn) for _ in range(layers)])
        self.lnf = nn.LayerNorm(h, eps=1e-5)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight",)) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied LM head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--rank", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    if args.world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=args.rank, world_size=args.world)
    model = GPT(args.layers, args.hidden, args.heads, 4 * args.hidden, args.vocab, args.seq)
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    if args.world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    g = torch.Generator().manual_seed(args.rank)
    data = torch.randint(0, args.vocab, (64, args.batch, args.seq + 1), generator=g)
    times, losses = [], []
    for step in range(args.steps):
        batch = data[step % 64]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    if args.rank == 0:
        print(json.dumps({"threads": args.threads, "world": args.world,
                          "tokens_per_step": args.batch * args.seq * args.world,
                          "step_time_s": times, "loss": losses,
                          "torch": torch.__version__}))
    if args.world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
