#!/usr/bin/python3
"""PyTorch peer for anvil's training benchmark (bench/bench_train.sh).

A plain GPT-2 (pre-LN, tied LM head, tanh-GELU, no dropout) trained on random
tokens with the same optimizer recipe as anvil, so that tokens/s and peak RSS
can be compared side by side on the same machine.

Run it with /usr/bin/python3 (the interpreter that has torch). Per-step times
go to stderr; the last stdout line is one JSON object.

Choices that matter for a fair comparison:
- float32 everywhere (checked at start up). --bf16, the peer of anvil's
  --dtype bf16, runs the forward pass under torch.autocast("cpu",
  dtype=torch.bfloat16): the parameters, gradients and AdamW stay float32,
  the linear layers and attention matmuls run in bf16 (in torch 1.13 the
  elementwise ops after them then take bf16 too; the loss is float32), and
  the backward follows the forward's dtypes. Without it no autocast context
  is entered.
- Attention is the explicit matmul/masked_fill/softmax/matmul form. torch 1.13
  has no public scaled_dot_product_attention; its private
  F._scaled_dot_product_attention decomposes into the same bmm ops on the CPU
  (the flash kernel is CUDA-only), so it would not be faster.
- The vocabulary is padded to a multiple of 64 (50257 -> 50304) as anvil does;
  the loss is taken over the full padded logits (as nanoGPT does) because
  slicing the real columns out would add a copy of the largest tensor in the
  step, which would handicap the peer. Targets are always < the real vocab.
- By default the process runs with GLIBC_TUNABLES=glibc.malloc.hugetlb=1
  (re-executing itself to set it, since glibc reads it only at start up).
  torch allocates every large activation and optimizer temporary afresh each
  step; glibc serves blocks over 32 MiB with mmap and unmaps them on free, so
  every step faults its working set in again. On this VM a 4 KiB page fault
  costs tens of microseconds (an out-of-place op on 160 MB takes ~1 s instead
  of ~0.03 s); transparent huge pages cut the fault count 512-fold. This is a
  plain environment setting any PyTorch user could apply; --malloc default
  measures stock glibc behaviour.
- OMP_NUM_THREADS must be set before torch loads, because torch's OpenBLAS
  (the pthread build, picked by the libblas.so.3 alternative) reads it only
  once; that is why torch is imported inside main() after parsing arguments.
"""
import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--seq", type=int, default=256, help="sequence length = block size")
    p.add_argument("--vocab", type=int, default=50257, help="real vocabulary size (padded to a multiple of 64)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps before the timed ones")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--malloc", choices=("hugetlb", "default"), default="hugetlb",
                   help="glibc malloc tuning (see module docstring)")
    p.add_argument("--foreach", choices=("on", "off"), default="on",
                   help="AdamW multi-tensor (foreach) implementation")
    p.add_argument("--bf16", action="store_true",
                   help="run the forward pass under CPU bf16 autocast (see module docstring)")
    a = p.parse_args(argv)
    if a.embd % a.heads != 0:
        p.error("--embd must be divisible by --heads")
    for name in ("layers", "heads", "embd", "seq", "vocab", "batch", "steps", "threads"):
        if getattr(a, name) < 1:
            p.error("--%s must be >= 1" % name)
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    return a


def build_model(torch, cfg, padded_vocab):
    nn = torch.nn
    F = torch.nn.functional
    C, H, L, T = cfg.embd, cfg.heads, cfg.layers, cfg.seq

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            # True above the diagonal: positions a query must not see.
            self.register_buffer("future", torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1),
                                 persistent=False)

        def forward(self, x):
            B, t, _ = x.shape
            hd = C // H
            q, k, v = self.qkv(x).split(C, dim=2)
            q = q.view(B, t, H, hd).transpose(1, 2)
            k = k.view(B, t, H, hd).transpose(1, 2)
            v = v.view(B, t, H, hd).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(self.future[:t, :t], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, t, C)
            return self.proj(y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(C, 4 * C)
            self.proj = nn.Linear(4 * C, C)

        def forward(self, x):
            return self.proj(F.gelu(self.fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C)
            self.attn = SelfAttention()
            self.ln2 = nn.LayerNorm(C)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(padded_vocab, C)
            self.wpe = nn.Embedding(T, C)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f = nn.LayerNorm(C)
            self.register_buffer("pos", torch.arange(T), persistent=False)
            self._init()

        def _init(self):
            # GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2L)
            # so the residual stream's variance does not grow with depth.
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                elif ".ln" in name or name.startswith("ln_"):
                    nn.init.ones_(p)
                elif name.endswith("proj.weight"):
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))
                else:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, idx, targets):
            t = idx.shape[1]
            x = self.wte(idx) + self.wpe(self.pos[:t])
            for blk in self.blocks:
                x = blk(x)
            x = self.ln_f(x)
            logits = F.linear(x, self.wte.weight)  # head tied to wte
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return GPT()


def loaded_blas():
    """Return (path, core name, threads, ctypes handle) of the OpenBLAS mapped in, if any."""
    import ctypes
    paths = []
    with open("/proc/self/maps") as f:
        for line in f:
            cols = line.split()
            if len(cols) >= 6 and ("blas" in cols[5] or "mkl" in cols[5]) and cols[5] not in paths:
                paths.append(cols[5])
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return path, lib.openblas_get_corename().decode(), lib.openblas_get_num_threads(), lib
        except (OSError, AttributeError):
            continue
    return (paths[0] if paths else None), None, None, None


HUGETLB_TUNABLE = "glibc.malloc.hugetlb=1"


def reexec_with_hugetlb():
    """Restart this script with glibc's THP malloc tunable set, once."""
    tun = os.environ.get("GLIBC_TUNABLES", "")
    if HUGETLB_TUNABLE in tun.split(":"):
        return
    os.environ["GLIBC_TUNABLES"] = tun + ":" + HUGETLB_TUNABLE if tun else HUGETLB_TUNABLE
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, os.path.abspath(__file__)] + sys.argv[1:])


def main(argv):
    cfg = parse_args(argv)
    if cfg.malloc == "hugetlb":
        reexec_with_hugetlb()
    os.environ["OMP_NUM_THREADS"] = str(cfg.threads)
    import torch  # after OMP_NUM_THREADS, see module docstring

    torch.set_num_threads(cfg.threads)
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(cfg.seed)

    padded_vocab = (cfg.vocab + 63) // 64 * 64
    model = build_model(torch, cfg, padded_vocab)
    model.train()
    params = list(model.parameters())
    if any(p.dtype != torch.float32 for p in params):
        raise SystemExit("torch_peer: a parameter is not float32")
    n_params = sum(p.numel() for p in params)

    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=6e-4, betas=(0.9, 0.95), eps=1e-8, foreach=(cfg.foreach == "on"))

    gen = torch.Generator().manual_seed(cfg.seed)
    # Without --bf16 no autocast context is entered at all: the default run is plain float32.
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if cfg.bf16 else contextlib.nullcontext

    def step():
        data = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq + 1), generator=gen)
        x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
        with autocast():
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    blas_path, blas_core, _, blas_lib = loaded_blas()
    if blas_lib is not None:
        # torch.set_num_threads only sizes torch's OpenMP pool; the pthread
        # OpenBLAS keeps its own pool, sized here to the same count.
        blas_lib.openblas_set_num_threads(cfg.threads)
    blas_threads = blas_lib.openblas_get_num_threads() if blas_lib is not None else None

    times = []
    for i in range(cfg.warmup + cfg.steps):
        t0 = time.perf_counter()
        loss = step()
        ms = (time.perf_counter() - t0) * 1e3
        timed = i >= cfg.warmup
        if timed:
            times.append(ms)
        print("step %d%s loss %.4f %.1f ms" % (i, "" if timed else " (warmup)", loss, ms),
              file=sys.stderr, flush=True)
        if not math.isfinite(loss):
            raise SystemExit("torch_peer: loss is not finite at step %d" % i)

    med = statistics.median(times)
    out = {
        "impl": "pytorch",
        "torch": torch.__version__,
        "threads": cfg.threads,
        "layers": cfg.layers,
        "heads": cfg.heads,
        "embd": cfg.embd,
        "seq": cfg.seq,
        "batch": cfg.batch,
        "vocab": cfg.vocab,
        "padded_vocab": padded_vocab,
        "params": n_params,
        "steps": cfg.steps,
        "warmup": cfg.warmup,
        "ms_per_step_median": round(med, 3),
        "ms_per_step_min": round(min(times), 3),
        "tokens_per_s_median": round(cfg.batch * cfg.seq / (med / 1e3), 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "final_loss": round(loss, 4),
        "blas": blas_path,
        "blas_core": blas_core,
        "blas_threads": blas_threads,
        "openblas_coretype_env": os.environ.get("OPENBLAS_CORETYPE"),
        "adamw_foreach": cfg.foreach == "on",
        "autocast": "bf16" if cfg.bf16 else None,
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
