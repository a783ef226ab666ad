#!/usr/bin/env python3
"""Paper projection of one training step of GPT-2 1.5B on a DP x PP x TP grid
(bench/RESULTS.md, "3D parallelism: a paper projection"). Nothing is run:
every input is an argument, every term a formula below.

  python3 bench/project_3d.py [--intra-gbs 1.2] [--nic-gbs 12.5] [--nic-eff 0.9] ...

Per rank, one step (fp32, 4 bytes per element, as anvil trains):
  compute  = 6 N G T / (world R)                    FLOPs over the per-GPU rate
  tp       = L/PP * (G/DP) * 4 * T*C*4 bytes * 2(TP-1)/TP / intra   4 all-reduces of B*T*C per layer, fwd+bwd
  pp       = m * 2 * b*T*C*4 bytes / intra          per boundary a stage sends and receives (both ways overlap)
  dp       = 2 (N/(TP PP)) 4 bytes (DP-1)/DP / (nic / ranks per host)   ring all-reduce; 8 ranks share the NIC
  bubble   = (compute + tp) (PP-1)/m                the pipeline's fill and drain, m = G/(DP b)
  step     = compute + tp + pp + dp + bubble        no overlap assumed (an upper bound)
"""
import argparse


def project(a, hosts, tp, pp):
    world = hosts * a.per_host
    dp = world // (tp * pp)
    seqs = a.global_batch // dp  # sequences per replica per step
    m = max(seqs // a.micro, 1)
    el = 4
    compute = 6 * a.params * a.global_batch * a.seq / (world * a.tflops * 1e12)
    tp_bytes = a.layers / pp * seqs * 4 * a.seq * a.embd * el
    tp_t = tp_bytes * 2 * (tp - 1) / tp / (a.intra_gbs * 1e9) if tp > 1 else 0.0
    pp_bytes = m * 2 * a.micro * a.seq * a.embd * el if pp > 1 else 0
    pp_t = pp_bytes / (a.intra_gbs * 1e9)
    dp_bytes = 2 * a.params / (tp * pp) * el * (dp - 1) / dp
    nic_per_rank = a.nic_gbs * a.nic_eff * 1e9 / a.per_host
    dp_t = dp_bytes / nic_per_rank if dp > 1 else 0.0
    bubble = (compute + tp_t) * (pp - 1) / m
    step = compute + tp_t + pp_t + dp_t + bubble
    return dict(hosts=hosts, tp=tp, pp=pp, dp=dp, m=m, compute=compute, tp_t=tp_t, pp_t=pp_t, dp_t=dp_t,
                bubble=bubble, step=step)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--params", type=float, default=1.558e9, help="N, GPT-2 1.5B")
    p.add_argument("--layers", type=int, default=48)
    p.add_argument("--embd", type=int, default=1600)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--global-batch", type=int, default=512, help="sequences per step")
    p.add_argument("--micro", type=int, default=1, help="sequences per micro-batch (b)")
    p.add_argument("--per-host", type=int, default=8)
    p.add_argument("--tflops", type=float, default=125.0, help="sustained per-GPU rate, TFLOP/s")
    p.add_argument("--intra-gbs", type=float, default=1.2, help="within-host busbw, GB/s (anvil health, loopback)")
    p.add_argument("--nic-gbs", type=float, default=12.5, help="one host's network line rate, GB/s (100 Gb/s)")
    p.add_argument("--nic-eff", type=float, default=0.9, help="share of the line rate an all-reduce reaches")
    a = p.parse_args()
    print("| hosts | TP | PP | DP | m | compute s | TP s | PP s | DP s | bubble s | step s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for hosts in (8, 64):
        for tp, pp in ((1, 1), (1, 8), (8, 1)):
            r = project(a, hosts, tp, pp)
            print("| {hosts} | {tp} | {pp} | {dp} | {m} | {compute:.3f} | {tp_t:.3f} | {pp_t:.3f} | {dp_t:.3f} | "
                  "{bubble:.3f} | {step:.3f} |".format(**r))


if __name__ == "__main__":
    main()
