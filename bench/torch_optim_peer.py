#!/usr/bin/python3
"""PyTorch peer for bench/bench_optim.c: torch.nn.utils.clip_grad_norm_ and one torch.optim.AdamW
step (foreach, the multi-tensor form, and the single-tensor form) on one parameter of N floats,
with the clip active, the same hyperparameters; medians of reps. One JSON line on stdout.
OMP_NUM_THREADS must be set by the caller: torch reads it once, when it loads."""
import argparse
import json
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=123886080)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    import torch

    i = torch.arange(a.n, dtype=torch.float32)
    out = {"impl": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(), "n": a.n, "reps": a.reps}
    for foreach in (True, False):
        p = torch.nn.Parameter(0.02 * (torch.remainder(i, 201) - 100) / 100)
        g = 1e-3 * (torch.remainder(i, 193) - 96) / 96
        opt = torch.optim.AdamW([p], lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=foreach)
        times = []
        for r in range(a.reps + 1):
            p.grad = g.clone()
            t0 = time.perf_counter()
            torch.nn.utils.clip_grad_norm_([p], 1e-3)
            opt.step()
            if r:
                times.append(time.perf_counter() - t0)
        out["ms_foreach" if foreach else "ms_single"] = round(1e3 * statistics.median(times), 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
