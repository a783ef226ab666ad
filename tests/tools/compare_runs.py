#!/usr/bin/env python3
"""Compares two anvil run folders: per-step loss and gradient norm from
metrics.jsonl (relative difference) over the steps RUN_B logged, which must
all be in RUN_A (RUN_B may be a run resumed part-way), and every tensor of
model.safetensors (absolute difference). Standard library only, so it runs anywhere the tests
do. Prints the worst differences and exits 1 when one exceeds its tolerance.

usage: compare_runs.py RUN_A RUN_B --loss-rtol X --norm-rtol Y --weight-atol Z"""
import argparse
import array
import json
import struct
import sys


def metrics(run):
    out = {}
    with open(f"{run}/metrics.jsonl") as f:
        for line in f:
            m = json.loads(line)
            if m.get("kind") == "train":
                out[int(m["step"])] = (m["loss"], m["grad_norm"])
    return out


def tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            sys.exit(f"{path}: tensor {name} is {t['dtype']}, expected F32")
        lo, hi = t["data_offsets"]
        out[name] = array.array("f", data[base + lo:base + hi])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--loss-rtol", type=float, required=True)
    ap.add_argument("--norm-rtol", type=float, required=True)
    ap.add_argument("--weight-atol", type=float, required=True)
    args = ap.parse_args()
    ma, mb = metrics(args.a), metrics(args.b)
    if not mb or not set(mb) <= set(ma):
        sys.exit(f"{args.b} logged steps {sorted(mb)[:1]}..{sorted(mb)[-1:]} that {args.a} did not")
    worst_loss = max(abs(ma[s][0] - mb[s][0]) / abs(ma[s][0]) for s in mb)
    worst_norm = max(abs(ma[s][1] - mb[s][1]) / abs(ma[s][1]) for s in mb)
    ta, tb = tensors(f"{args.a}/model.safetensors"), tensors(f"{args.b}/model.safetensors")
    if sorted(ta) != sorted(tb):
        sys.exit("tensor names differ")
    worst_w = 0.0
    for name in ta:
        if len(ta[name]) != len(tb[name]):
            sys.exit(f"tensor {name}: sizes differ")
        worst_w = max(worst_w, max(abs(x - y) for x, y in zip(ta[name], tb[name])))
    print(f"{len(mb)} steps: loss rel diff {worst_loss:.2e}, grad-norm rel diff {worst_norm:.2e}, "
          f"weights max abs diff {worst_w:.2e}")
    if worst_loss > args.loss_rtol or worst_norm > args.norm_rtol or worst_w > args.weight_atol:
        sys.exit(1)


if __name__ == "__main__":
    main()
