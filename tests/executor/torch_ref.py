#!/usr/bin/env python3
"""A few training steps of `dplan run` against PyTorch from the same initial weights.

    torch_ref.py DPLAN OUT_DIR MODEL

MODEL is tiny-gpt or tiny-llama (profiles/models). dplan writes its initial weights (one
step at --lr 0: AdamW moves nothing, model.safetensors holds the initialisation), then
trains STEPS steps on a token file this script writes. PyTorch builds the same model
(tiny-gpt: bench/executor/torch_gpt.py's GPT, the benchmark's model; tiny-llama: the
Llama block below), loads those weights, and trains the same steps on the same windows
with the same AdamW, clipping and learning-rate schedule, written here from their
definitions in torch and dplan's README, not from dplan's code. Checked, in fp32:
  - the loss and the global gradient norm of every step (dplan's log.jsonl),
  - every final tensor, by relative Frobenius error (the metric of Megatron-LM's
    optimizer-grads-match test; the attention key bias, whose exact gradient is zero,
    in absolute terms, as tests/executor/compare_runs.c does).
Prints the worst differences; exit 1 if a tolerance is exceeded. Needs torch (run by
torch_ref.sh, which skips the test without it).
"""
import json
import math
import os
import random
import struct
import subprocess
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "executor"))
import torch_gpt  # noqa: E402  (the benchmark's GPT, the same model as bench-gpt's)

STEPS, GBS, SEQ = 4, 8, 32
LR, MIN_LR_FRAC, WD, CLIP, BETAS, EPS = 1e-3, 0.1, 0.1, 1.0, (0.9, 0.95), 1e-8
# Measured (worst over both models, torch 1.13 on Debian 12): loss 2.1e-7, gradient norm
# 1.7e-7, weights 4.0e-6 (h.1.mlp.w2 of tiny-gpt: Adam's g / (sqrt(v) + eps) turns rounding-
# level differences of near-zero gradients into steps of lr), where the steps move every
# tensor by 1e-3 to 1e-1 of its norm. The weights compare what AdamW did with the
# gradients (their signs, mostly: its first steps are nearly lr * sign(g)); the gradient
# norm compares their size, which AdamW would hide.
# A wrong gradient fails it: wpe's gradient x 1.01 (a 1% error in one tensor) makes the
# gradient norm 1.0e-3 off while the weights stay within 1.4e-5 (Adam's normalisation);
# RMSNorm's input gradient with 0.99 of its xhat term makes the weights 2.3e-3 off.
TOL_LOSS, TOL_NORM, TOL_W = 3e-6, 3e-6, 3e-5


def read_safetensors(path):
    """Tensors of a safetensors file (huggingface/safetensors "Format": 8-byte length,
    JSON header, little-endian data), F32 only."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        b, e = t["data_offsets"]
        buf = bytearray(raw[8 + n + b:8 + n + e])
        out[name] = torch.frombuffer(buf, dtype=torch.float32).reshape(t["shape"]).clone()
    return out


class LlamaBlock(nn.Module):
    """Pre-norm RMSNorm, causal GQA attention with rotary embeddings on the halves of each
    head (transformers' rotate_half), SwiGLU MLP, no biases."""

    def __init__(self, h, heads, kv_heads, ffn):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, h // heads
        self.ln1 = nn.Parameter(torch.ones(h))
        self.wq = nn.Linear(h, heads * self.d, bias=False)
        self.wk = nn.Linear(h, kv_heads * self.d, bias=False)
        self.wv = nn.Linear(h, kv_heads * self.d, bias=False)
        self.wo = nn.Linear(heads * self.d, h, bias=False)
        self.ln2 = nn.Parameter(torch.ones(h))
        self.w_gate = nn.Linear(h, ffn, bias=False)
        self.w_up = nn.Linear(h, ffn, bias=False)
        self.w2 = nn.Linear(ffn, h, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        d = self.d

        def rope(t):  # t: [B, heads, T, d]; pairs (i, i + d/2) rotated by p * 10000^(-2i/d)
            t1, t2 = t[..., : d // 2], t[..., d // 2:]
            return torch.cat([t1 * cos - t2 * sin, t2 * cos + t1 * sin], dim=-1)

        y = rms_norm(x, self.ln1)
        q = self.wq(y).view(B, T, self.heads, d).transpose(1, 2)
        k = self.wk(y).view(B, T, self.kv_heads, d).transpose(1, 2)
        v = self.wv(y).view(B, T, self.kv_heads, d).transpose(1, 2)
        q, k = rope(q), rope(k)
        rep = self.heads // self.kv_heads  # query head i reads KV head i // rep
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        x = x + self.wo((att @ v).transpose(1, 2).reshape(B, T, C))
        y = rms_norm(x, self.ln2)
        return x + self.w2(F.silu(self.w_gate(y)) * self.w_up(y))


def rms_norm(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Llama(nn.Module):
    def __init__(self, m):
        super().__init__()
        h = m["hidden"]
        self.wte = nn.Embedding(m["vocab"], h)
        self.blocks = nn.ModuleList(
            [LlamaBlock(h, m["heads"], m["kv_heads"], m["ffn_hidden"]) for _ in range(m["layers"])])
        self.lnf = nn.Parameter(torch.ones(h))
        self.lm_head = nn.Linear(h, m["vocab"], bias=False)
        self.d = h // m["heads"]

    def forward(self, idx, targets):
        T = idx.shape[1]
        half = self.d // 2
        inv = torch.tensor([10000.0 ** (-2.0 * i / self.d) for i in range(half)], dtype=torch.float64)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        cos, sin = torch.cos(ang).float(), torch.sin(ang).float()
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x, cos, sin)
        logits = self.lm_head(rms_norm(x, self.lnf))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def build(m, w):
    """The PyTorch model of `m` holding the dplan tensors `w`; returns it and a map from
    dplan's tensor names to its parameters (fused ones as (param, row range))."""
    names = {}
    if m["ffn"] == "gelu":
        model = torch_gpt.GPT(m["layers"], m["hidden"], m["heads"], m["ffn_hidden"], m["vocab"],
                              m["max_position"])
        h = m["hidden"]
        with torch.no_grad():
            model.wte.weight.copy_(w["wte"])
            model.wpe.weight.copy_(w["wpe"])
            names["wte"] = (model.wte.weight, None)
            names["wpe"] = (model.wpe.weight, None)
            for i, b in enumerate(model.blocks):
                p = f"h.{i}."
                pairs = {"ln1.w": b.ln1.weight, "ln1.b": b.ln1.bias, "attn.wo": b.proj.weight,
                         "attn.bo": b.proj.bias, "ln2.w": b.ln2.weight, "ln2.b": b.ln2.bias,
                         "mlp.w1": b.fc.weight, "mlp.b1": b.fc.bias, "mlp.w2": b.fc_proj.weight,
                         "mlp.b2": b.fc_proj.bias}
                for k, t in pairs.items():
                    t.copy_(w[p + k])
                    names[p + k] = (t, None)
                # torch_gpt fuses q, k, v into one [3h, h] linear, in that order
                for j, k in enumerate("qkv"):
                    rows = (j * h, (j + 1) * h)
                    b.qkv.weight[rows[0]:rows[1]].copy_(w[p + "attn.w" + k])
                    b.qkv.bias[rows[0]:rows[1]].copy_(w[p + "attn.b" + k])
                    names[p + "attn.w" + k] = (b.qkv.weight, rows)
                    names[p + "attn.b" + k] = (b.qkv.bias, rows)
            model.lnf.weight.copy_(w["lnf.w"])
            model.lnf.bias.copy_(w["lnf.b"])
            names["lnf.w"] = (model.lnf.weight, None)
            names["lnf.b"] = (model.lnf.bias, None)
    else:
        model = Llama(m)
        with torch.no_grad():
            pairs = {"wte": model.wte.weight, "lnf.w": model.lnf, "lm_head": model.lm_head.weight}
            for i, b in enumerate(model.blocks):
                p = f"h.{i}."
                pairs.update({p + "ln1.w": b.ln1, p + "attn.wq": b.wq.weight,
                              p + "attn.wk": b.wk.weight, p + "attn.wv": b.wv.weight,
                              p + "attn.wo": b.wo.weight, p + "ln2.w": b.ln2,
                              p + "mlp.w_gate": b.w_gate.weight, p + "mlp.w_up": b.w_up.weight,
                              p + "mlp.w2": b.w2.weight})
            for k, t in pairs.items():
                t.copy_(w[k])
                names[k] = (t, None)
    missing = set(w) - set(names)
    assert not missing, f"dplan tensors without a PyTorch counterpart: {sorted(missing)}"
    return model, names


def lr_at(step):
    """dplan run --help: no warm-up, cosine decay from LR to LR * MIN_LR_FRAC at the last
    step."""
    t = (step - 1) / (STEPS - 1)
    lo = LR * MIN_LR_FRAC
    return lo + 0.5 * (LR - lo) * (1 + math.cos(math.pi * t))


def run(dplan, out, model, tokens, steps, lr):
    cmd = [dplan, "run", model, "--steps", str(steps), "--lr", repr(lr), "--gbs", str(GBS),
           "--mbs", str(GBS), "--seq-len", str(SEQ), "--data", tokens, "--data-format", "raw",
           "--threads", "1", "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"torch_ref: {' '.join(cmd)} failed:\n{r.stderr}")
    log = {}
    for line in open(os.path.join(out, "log.jsonl")):
        rec = json.loads(line)
        if "loss" in rec and rec.get("status") in ("running", "done"):
            log[rec["step"]] = rec
    return log


def main():
    dplan, out, name = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    profiles = os.environ.get("DPLAN_PROFILES", os.path.join(HERE, "..", "..", "profiles"))
    m = json.load(open(os.path.join(profiles, "models", name + ".json")))
    # STEPS steps of GBS windows of SEQ + 1 tokens (window w starts at token w * SEQ).
    rng = random.Random(20240613)
    n = STEPS * GBS * SEQ + 1
    tok = [rng.randrange(m["vocab"]) for _ in range(n)]
    tokens = os.path.join(out, "tokens.bin")
    with open(tokens, "wb") as f:
        f.write(struct.pack(f"<{n}H", *tok))

    run(dplan, os.path.join(out, "init"), name, tokens, 1, 0.0)
    log = run(dplan, os.path.join(out, "train"), name, tokens, STEPS, LR)
    w0 = read_safetensors(os.path.join(out, "init", "model.safetensors"))
    w1 = read_safetensors(os.path.join(out, "train", "model.safetensors"))

    torch.set_num_threads(1)
    model, names = build(m, w0)
    params = list(model.parameters())
    decay = [p for p in params if p.dim() == 2]  # AdamW decay on 2-D weights only
    other = [p for p in params if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": other, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    data = torch.tensor(tok, dtype=torch.long)
    fail = False
    worst_loss = worst_norm = 0.0
    for step in range(1, STEPS + 1):
        w = torch.arange((step - 1) * GBS, step * GBS)[:, None] * SEQ + torch.arange(SEQ + 1)
        batch = data[w]
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.zero_grad(set_to_none=True)
        loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(params, CLIP))
        opt.step()
        rec = log.get(step)
        if rec is None:
            print(f"torch_ref: dplan logged no loss for step {step}")
            fail = True
            continue
        el = abs(rec["loss"] - loss.item()) / abs(loss.item())
        en = abs(rec["grad_norm"] - norm) / norm
        worst_loss, worst_norm = max(worst_loss, el), max(worst_norm, en)
        if not (el <= TOL_LOSS and en <= TOL_NORM and abs(rec["lr"] - lr_at(step)) <= 1e-12):
            print(f"torch_ref: step {step}: loss {rec['loss']:.9g} vs torch {loss.item():.9g} "
                  f"(rel {el:.3g}), grad norm {rec['grad_norm']:.9g} vs {norm:.9g} (rel {en:.3g}),"
                  f" lr {rec['lr']:.9g} vs {lr_at(step):.9g}")
            fail = True
    worst_w, worst_name, n = 0.0, "", 0
    with torch.no_grad():
        for k, (p, rows) in names.items():
            t = p if rows is None else p[rows[0]:rows[1]]
            ref, got = t.double(), w1[k].double()
            if k.endswith(".attn.bk"):
                e = float((got - ref).abs().max())
            else:
                e = float((got - ref).norm() / ref.norm())
            a, b = w0[k].double(), w1[k].double()
            moved = float((b - a).norm() / max(a.norm(), b.norm()).clamp(min=1e-30))
            if not e <= TOL_W:
                print(f"torch_ref: {k}: relative Frobenius error {e:.3g} > {TOL_W} "
                      f"(the steps moved it by {moved:.3g})")
                fail = True
            if e > worst_w or math.isnan(e):
                worst_w, worst_name = e, k
            n += 1
    print(f"torch_ref {name}: {STEPS} steps, {len(log)} logged; worst relative difference: loss "
          f"{worst_loss:.3g} (tol {TOL_LOSS}), gradient norm {worst_norm:.3g} (tol {TOL_NORM}); "
          f"{n} tensors, worst {worst_w:.3g} ({worst_name}, tol {TOL_W}); torch {torch.__version__}")
    return 1 if fail or n == 0 or len(log) != STEPS else 0


if __name__ == "__main__":
    sys.exit(main())
