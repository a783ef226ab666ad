#!/usr/bin/python3
"""PyTorch peer for bench/bench_llama_kernels.c: the same ops on the same shapes, as Hugging
Face's modeling_llama computes them in eager PyTorch (the form a user training a Llama on a CPU
gets): LlamaRMSNorm's formula, apply_rotary_pos_emb on the q and k of a packed qkv, silu(gate) *
up, and attention as repeat_kv, q @ k^T / sqrt(d), a causal mask, softmax and @ v (torch 1.13
has no scaled_dot_product_attention; its private CPU one decomposes into the same ops). A
forward is timed with autograd recording, as in training; a backward is autograd.grad of that
forward's output, the graph kept between calls.

    /usr/bin/python3 bench/bench_llama_kernels.py [THREADS]

Prints "shape op ms" lines, the fastest of calls repeated for 0.5 s (at least 5) after 2 untimed
ones, as the C side does.
OMP_NUM_THREADS is set before torch loads (its OpenBLAS reads it once). The driver runs it with
GLIBC_TUNABLES=glibc.malloc.hugetlb=1, as bench/torch_peer.py does and for the same reason: torch
allocates every output afresh, and on this VM each 4 KiB page it faults in costs tens of
microseconds."""
import math
import os
import sys
import time

SHAPES = [("small", 4, 256, 512, 8, 2, 64, 1408), ("1b", 1, 1024, 2048, 32, 8, 64, 8192)]


def timed(fn):
    fn(), fn()
    times, start = [], time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < 0.5 and len(times) < 4096):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else os.cpu_count()
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads")

    def rmsnorm(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))

    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    for name, b, t, c, nh, nkv, hs, h in SHAPES:
        n = b * t
        out = []
        x = torch.randn(n, c, requires_grad=True)
        w = torch.randn(c, requires_grad=True)
        y = rmsnorm(x, w)
        dy = torch.randn_like(y)
        out.append(("rmsnorm_forward", timed(lambda: rmsnorm(x, w))))
        out.append(("rmsnorm_backward", timed(lambda: torch.autograd.grad(y, (x, w), dy, retain_graph=True))))

        qkv = torch.randn(b, t, (nh + 2 * nkv) * hs, requires_grad=True)
        inv = 1.0 / (500000.0 ** (torch.arange(0, hs, 2).float() / hs))
        f = torch.arange(t).float()[:, None] @ inv[None, :]
        emb = torch.cat((f, f), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]

        def rope():
            q, k, v = qkv.split([nh * hs, nkv * hs, nkv * hs], dim=-1)
            q = q.view(b, t, nh, hs).transpose(1, 2)
            k = k.view(b, t, nkv, hs).transpose(1, 2)
            return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

        rq, rk = rope()
        dq, dk = torch.randn_like(rq), torch.randn_like(rk)
        out.append(("rope_forward", timed(rope)))
        out.append(("rope_backward", timed(lambda: torch.autograd.grad((rq, rk), qkv, (dq, dk), retain_graph=True))))

        gu = (2 * torch.randn(n, 2 * h)).requires_grad_(True)
        sw = lambda: torch.nn.functional.silu(gu[:, :h]) * gu[:, h:]
        s = sw()
        ds = torch.randn_like(s)
        out.append(("swiglu_forward", timed(sw)))
        out.append(("swiglu_backward", timed(lambda: torch.autograd.grad(s, gu, ds, retain_graph=True))))

        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)

        def attention():
            q, k, v = qkv.split([nh * hs, nkv * hs, nkv * hs], dim=-1)
            q = q.view(b, t, nh, hs).transpose(1, 2)
            k = k.view(b, t, nkv, hs).transpose(1, 2).repeat_interleave(nh // nkv, dim=1)
            v = v.view(b, t, nkv, hs).transpose(1, 2).repeat_interleave(nh // nkv, dim=1)
            att = ((q @ k.transpose(-2, -1)) / math.sqrt(hs)).masked_fill(mask, float("-inf")).softmax(-1)
            return (att @ v).transpose(1, 2).reshape(b, t, nh * hs)

        a = attention()
        da = torch.randn_like(a)
        out.append(("attention_forward", timed(attention)))
        out.append(("attention_backward", timed(lambda: torch.autograd.grad(a, qkv, da, retain_graph=True))))

        q1 = torch.randn(1, nh, 1, hs)
        kc, vc = torch.randn(1, nkv, t, hs), torch.randn(1, nkv, t, hs)

        def decode():
            with torch.no_grad():
                k = kc.repeat_interleave(nh // nkv, dim=1)
                v = vc.repeat_interleave(nh // nkv, dim=1)
                return ((q1 @ k.transpose(-2, -1)) / math.sqrt(hs)).softmax(-1) @ v

        out.append(("attention_decode", timed(decode)))
        for op, ms in out:
            print(f"{name} {op} {ms:.4f}", flush=True)


if __name__ == "__main__":
    main()
