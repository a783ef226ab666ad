#!/usr/bin/env python3
"""PyTorch peer for anvil's GPU training benchmark (scripts/gpu-check.sh).

A plain GPT-2 (pre-LN, tied LM head, tanh-GELU, no dropout) trained on random
tokens on one CUDA device with AdamW and gradient clipping, as anvil trains
it, so that tokens/s compare side by side on the same GPU in the same run.
What a user would pick: bf16 autocast (fp32 master weights), PyTorch's fused
scaled_dot_product_attention (flash attention on the GPU), fused AdamW, no
torch.compile (pass --compile to add it). The vocabulary is padded to a
multiple of 64 as anvil does. The last stdout line is one JSON object.
"""
import argparse
import json
import math
import statistics
import sys
import time


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--compile", action="store_true")
    a = p.parse_args(argv)

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    dev = torch.device("cuda")
    torch.manual_seed(1337)
    C, L, NH, T = a.embd, a.layers, a.heads, a.seq
    Vp = (a.vocab + 63) // 64 * 64

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C)
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C)
            self.fc = nn.Linear(C, 4 * C)
            self.fcproj = nn.Linear(4 * C, C)

        def forward(self, x):
            B = x.shape[0]
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(Vp, C)
            self.wpe = nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            for b in self.blocks:
                x = b(x)
            logits = self.lnf(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.float().view(-1, Vp), targets.view(-1))

    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    run = torch.compile(model) if a.compile else model
    x = torch.randint(0, a.vocab, (a.batch, T), device=dev)
    y = torch.randint(0, a.vocab, (a.batch, T), device=dev)
    times = []
    for step in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = run(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
        print(f"step {step}: loss {loss.item():.4f} {1e3 * (time.perf_counter() - t0):.1f} ms", file=sys.stderr)
    med = statistics.median(times)
    n = sum(p.numel() for p in model.parameters()) - T * C - (Vp - a.vocab) * C
    flops = (6 * n + 12 * L * C * T) * a.batch * T
    print(json.dumps({"peer": "torch", "torch": torch.__version__, "dtype": a.dtype, "compile": a.compile,
                      "batch": a.batch, "seq": T, "ms_per_step_median": 1e3 * med,
                      "tokens_per_s": a.batch * T / med, "tflops": flops / med / 1e12,
                      "gpu": torch.cuda.get_device_name(0), "final_loss": loss.item(),
                      "loss_ok": math.isfinite(loss.item())}))


if __name__ == "__main__":
    main(sys.argv[1:])
