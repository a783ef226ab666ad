#!/usr/bin/python3
"""PyTorch peer for anvil's Llama training benchmark (bench/bench_llama_train.sh).

A Llama in the eager forms of Hugging Face's modeling_llama (LlamaRMSNorm in
fp32, rotate-half RoPE from cached cos/sin, q/k/v/o projections without
biases, repeat_kv of the key/value heads, the explicit masked softmax of
attention, down(silu(gate(x)) * up(x))), the LM head tied to the embedding or
not, trained on random tokens with anvil's optimizer recipe (AdamW 0.9/0.95,
decay 0.1 on matrices and embeddings, clipping at 1.0), so tokens/s and peak
RSS compare side by side on one machine.

Run it with /usr/bin/python3 (the interpreter that has torch). Per-step times
go to stderr; the last stdout line is one JSON object. The choices torch_peer.py
makes for GPT-2 hold here too (float32 throughout, or with --bf16 the forward
pass under torch.autocast("cpu", dtype=torch.bfloat16) over float32 parameters
and optimizer state; torch 1.13's attention is the explicit matmul form on the
CPU; the vocabulary padded to a multiple of 64 and the loss over the padded
logits; glibc's hugetlb malloc tunable, set by re-executing; OMP_NUM_THREADS
set before torch loads and OpenBLAS's own pool sized to the same thread count).
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

from torch_peer import HUGETLB_TUNABLE, loaded_blas


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--embd", type=int, default=384)
    p.add_argument("--ffn", type=int, default=1024, help="the MLP's hidden width")
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--tied", choices=("yes", "no"), default="yes")
    p.add_argument("--seq", type=int, default=256, help="sequence length")
    p.add_argument("--vocab", type=int, default=50257, help="real vocabulary size (padded to a multiple of 64)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps before the timed ones")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--malloc", choices=("hugetlb", "default"), default="hugetlb")
    p.add_argument("--bf16", action="store_true", help="run the forward pass under CPU bf16 autocast")
    a = p.parse_args(argv)
    if a.embd % a.heads or a.heads % a.kv_heads or (a.embd // a.heads) % 2:
        p.error("--embd must split into --heads of an even size, --heads into --kv-heads groups")
    return a


def build_model(torch, cfg, padded_vocab):
    nn = torch.nn
    F = torch.nn.functional
    C, NH, NKV, T = cfg.embd, cfg.heads, cfg.kv_heads, cfg.seq
    hs = C // NH

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            dtype = x.dtype
            x = x.to(torch.float32)
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
            return self.weight * x.to(dtype)

    def rotate_half(x):
        return torch.cat((-x[..., hs // 2:], x[..., :hs // 2]), dim=-1)

    def repeat_kv(x):
        b, n, t, d = x.shape
        g = NH // NKV
        return x if g == 1 else x[:, :, None, :, :].expand(b, n, g, t, d).reshape(b, n * g, t, d)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(C, NH * hs, bias=False)
            self.k_proj = nn.Linear(C, NKV * hs, bias=False)
            self.v_proj = nn.Linear(C, NKV * hs, bias=False)
            self.o_proj = nn.Linear(NH * hs, C, bias=False)
            self.register_buffer("future", torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1),
                                 persistent=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            q = self.q_proj(x).view(b, t, NH, hs).transpose(1, 2)
            k = self.k_proj(x).view(b, t, NKV, hs).transpose(1, 2)
            v = self.v_proj(x).view(b, t, NKV, hs).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = repeat_kv(k), repeat_kv(v)
            att = (q @ k.transpose(2, 3)) / math.sqrt(hs)
            att = F.softmax(att.masked_fill(self.future[:t, :t], float("-inf")), dim=-1)
            return self.o_proj((att @ v).transpose(1, 2).contiguous().view(b, t, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(C, cfg.ffn, bias=False)
            self.up_proj = nn.Linear(C, cfg.ffn, bias=False)
            self.down_proj = nn.Linear(cfg.ffn, C, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm()
            self.self_attn = Attention()
            self.post_attention_layernorm = RMSNorm()
            self.mlp = MLP()

        def forward(self, x, cos, sin):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(padded_vocab, C)
            self.layers = nn.ModuleList([Layer() for _ in range(cfg.layers)])
            self.norm = RMSNorm()
            self.lm_head = None if cfg.tied == "yes" else nn.Linear(C, padded_vocab, bias=False)
            inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
            freqs = torch.arange(T).float()[:, None] @ inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            self.register_buffer("cos", emb.cos(), persistent=False)
            self.register_buffer("sin", emb.sin(), persistent=False)
            # LlamaPreTrainedModel's init: N(0, 0.02) for linear and embedding weights.
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, idx, targets):
            t = idx.shape[1]
            x = self.embed_tokens(idx)
            cos, sin = self.cos[:t], self.sin[:t]
            for layer in self.layers:
                x = layer(x, cos, sin)
            x = self.norm(x)
            head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
            logits = F.linear(x, head)
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return Llama()


def reexec_with_hugetlb():
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
    import torch  # after OMP_NUM_THREADS (torch_peer.py says why)

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    padded_vocab = (cfg.vocab + 63) // 64 * 64
    model = build_model(torch, cfg, padded_vocab)
    model.train()
    params = list(model.parameters())
    if any(p.dtype != torch.float32 for p in params):
        raise SystemExit("torch_peer_llama: a parameter is not float32")
    opt = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=6e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    gen = torch.Generator().manual_seed(cfg.seed)
    # Without --bf16 no autocast context is entered at all: the default run is plain float32.
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if cfg.bf16 else contextlib.nullcontext

    def step():
        data = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq + 1), generator=gen)
        with autocast():
            loss = model(data[:, :-1].contiguous(), data[:, 1:].contiguous())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    blas_path, blas_core, _, blas_lib = loaded_blas()
    if blas_lib is not None:
        blas_lib.openblas_set_num_threads(cfg.threads)
    times = []
    for i in range(cfg.warmup + cfg.steps):
        t0 = time.perf_counter()
        loss = step()
        ms = (time.perf_counter() - t0) * 1e3
        if i >= cfg.warmup:
            times.append(ms)
        print("step %d%s loss %.4f %.1f ms" % (i, "" if i >= cfg.warmup else " (warmup)", loss, ms),
              file=sys.stderr, flush=True)
        if not math.isfinite(loss):
            raise SystemExit("torch_peer_llama: loss is not finite at step %d" % i)
    med = statistics.median(times)
    print(json.dumps({
        "impl": "pytorch", "model": "llama", "torch": torch.__version__, "threads": cfg.threads,
        "layers": cfg.layers, "heads": cfg.heads, "kv_heads": cfg.kv_heads, "embd": cfg.embd, "ffn": cfg.ffn,
        "tied": cfg.tied == "yes", "seq": cfg.seq, "batch": cfg.batch, "vocab": cfg.vocab,
        "params": sum(p.numel() for p in params), "steps": cfg.steps, "warmup": cfg.warmup,
        "ms_per_step_median": round(med, 3), "ms_per_step_min": round(min(times), 3),
        "tokens_per_s_median": round(cfg.batch * cfg.seq / (med / 1e3), 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "final_loss": round(loss, 4), "blas": blas_path, "blas_core": blas_core,
        "autocast": "bf16" if cfg.bf16 else None, "glibc_tunables": os.environ.get("GLIBC_TUNABLES")}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
