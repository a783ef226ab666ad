#!/usr/bin/env python3
"""The tables of bench_goodput.sh from what it left in its folder.

    goodput_report.py DIR EVERY "MTBF ..." KINDS MIXED_KINDS STEP_MS

Reads DIR/<run>.goodput.json (anvil job --json goodput), DIR/<run>.cmp (the weights against the
twin's), the runs' metrics.jsonl (the twin's checkpoint costs, each run's checkpoint interval) and
DIR/load, and prints Markdown: one row per run with its ETTR, its parts and the first-order
Young/Daly model beside it, then the loss per fault kind."""
import glob
import json
import os
import statistics
import sys

d, every, mtbfs, kinds, mixed_kinds, step_ms = sys.argv[1:7]
every, step_ms = int(every), float(step_ms)


def load(name):
    path = f"{d}/{name}.goodput.json"
    return json.load(open(path)) if os.path.exists(path) else None


def records(name, kind):
    out = []
    for path in glob.glob(f"{d}/{name}/metrics.jsonl"):
        for line in open(path):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("kind") == kind:
                out.append(r)
    return out


def interval_steps(name):
    """The checkpoint interval the run's trainer used last (auto says it in its log)."""
    chosen = every
    for path in glob.glob(f"{d}/{name}/logs/*.log"):
        for line in open(path, errors="replace"):
            if "(--ckpt-every auto:" in line and line.startswith("checkpoint every "):
                chosen = int(line.split()[2])
    return chosen


twin = load("twin")
ckpts = records("twin", "ckpt")
cost = statistics.median(r["cost_ms"] for r in ckpts) / 1e3 if ckpts else float("nan")
write = statistics.median(r["write_ms"] for r in ckpts) / 1e3 if ckpts else float("nan")
train = records("twin", "train")
step_s = statistics.median(r["ms"] for r in train) / 1e3 if train else step_ms / 1e3
wall0 = twin["wall_s"] - twin["parts"]["queue"]
base = twin["parts"]["productive"] / wall0

runs = [(f"{mode}_{m}", mode, float(m)) for m in mtbfs.split() for mode in ("fixed", "auto")]
faults = {}
for name in [r[0] for r in runs] + ["mixed"]:
    g = load(name)
    for f in (g or {}).get("faults", []):
        faults.setdefault(f["kind"], []).append(f)
kill = [f for k in kinds.split(",") for f in faults.get(k, [])]
restart = statistics.median(f["detection_s"] + f["restart_s"] for f in kill) if kill else float("nan")

loads = [float(line.split()[1]) for line in open(f"{d}/load")] if os.path.exists(f"{d}/load") else []
print(f"load average over the runs: median {statistics.median(loads):.2f}, max {max(loads):.2f}" if loads else "")
print(f"twin: wall {wall0:.1f} s, ETTR {base:.1%} (checkpoint {twin['parts']['checkpoint']:.1f} s, "
      f"eval {twin['parts']['eval']:.1f} s, restart {twin['parts']['restart']:.1f} s); step {step_s * 1e3:.1f} ms; "
      f"a checkpoint costs training C = {cost * 1e3:.0f} ms (median of {len(ckpts)}), writes in {write * 1e3:.0f} ms; "
      f"a kill's detection + restart R = {restart:.2f} s (median of {len(kill)})")
print()
print("| MTBF | interval | faults | ETTR | productive | recomputed | detection | restart | checkpoint | eval |"
      " lost per fault | weights | Young/Daly: optimum interval, ETTR model at this interval / at the optimum |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for name, mode, m in runs:
    g = load(name)
    if not g:
        continue
    p, w = g["parts"], g["wall_s"] - g["parts"]["queue"]
    n = len(g["faults"])
    steps = interval_steps(name)
    tau = steps * step_s
    opt = (2 * cost * m) ** 0.5

    def model(t):
        # Of each MTBF of wall time, R + t/2 is lost to the fault and the rest trains at the twin's rate
        # less the checkpoints' share C/t (the twin's own checkpoints, every EVERY steps, taken out).
        twin_ckpt = cost / (every * step_s)
        return base * (1 + twin_ckpt) / (1 + cost / t) * (1 - (restart + t / 2) / m)

    cmp = open(f"{d}/{name}.cmp").read().strip() if os.path.exists(f"{d}/{name}.cmp") else "?"
    lost = sum(f["lost_s"] for f in g["faults"]) / n if n else 0
    label = f"{steps} steps ({tau:.1f} s)" + (" auto" if mode == "auto" else "")
    print(f"| {m:.0f} s | {label} | {n} | **{g['ettr']:.1%}** | {p['productive']:.0f} s | {p['recomputed']:.1f} s |"
          f" {p['detection']:.1f} s | {p['restart']:.1f} s | {p['checkpoint']:.1f} s | {p['eval']:.1f} s |"
          f" {lost:.2f} s | {cmp} | {opt:.1f} s: {model(tau):.1%} / {model(opt):.1%} |")
print()
print("| fault kind | n | lost per fault: median / worst | detection: median / worst | restart: median / worst |"
      " recomputed: median / worst |")
print("|---|---|---|---|---|---|")
for kind in sorted(faults):
    fs = faults[kind]

    def mw(key):
        v = [f[key] for f in fs]
        return f"{statistics.median(v):.2f} / {max(v):.2f} s"

    print(f"| {kind} | {len(fs)} | {mw('lost_s')} | {mw('detection_s')} | {mw('restart_s')} | {mw('recomputed_s')} |")
