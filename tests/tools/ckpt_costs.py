#!/usr/bin/env python3
"""Checks the checkpoint cost reports of an uninterrupted anvil run (not their
timing, which depends on the machine, but that they are there and add up):
every checkpoint has one "ckpt" record in RUN/metrics.jsonl and one log line
in LOG; a background checkpoint's cost is the save call's time and the wait
for its write at a later one, plus, over the
cost_steps steps after it, each step's time ("ms" of its "train" record) above
base_ms, and base_ms is the median of the latest 16 steps before it that no
checkpoint overlapped (the first step, a warmup, left out), the sum over the
steps counted as 0 when it is negative (noise, which the line says); a
synchronous one costs its whole save. Standard library only.

usage: ckpt_costs.py RUN LOG --background N --sync M"""
import argparse
import json
import re
import statistics
import sys

# metrics.jsonl prints values with 9 significant digits; sums of a few dozen
# such values agree to far better than this.
RTOL = 1e-6

p = argparse.ArgumentParser()
p.add_argument("run")
p.add_argument("log")
p.add_argument("--background", type=int, required=True)
p.add_argument("--sync", type=int, required=True)
a = p.parse_args()

records = [json.loads(line) for line in open(f"{a.run}/metrics.jsonl")]
step_ms = {r["step"]: r["ms"] for r in records if r["kind"] == "train"}
ckpts = [r for r in records if r["kind"] == "ckpt"]
log = open(a.log, errors="replace").read()
errors = []


def close(x, y):
    return abs(x - y) <= RTOL * max(1.0, abs(x), abs(y))


keys = {"step", "background", "write_ms", "writer_cpu_ms", "call_ms", "waited_ms", "cost_ms", "cost_steps", "base_ms", "sync_ms",
        "sync_step", "cost_pct"}
background = [r for r in ckpts if r.get("background") == 1]
sync = [r for r in ckpts if r.get("background") == 0]
if len(background) != a.background or len(sync) != a.sync:
    errors.append(f"{len(background)} background and {len(sync)} synchronous ckpt records, "
                  f"expected {a.background} and {a.sync}")
overlapped = set()
for r in background:
    overlapped.update(range(r["step"] + 1, r["step"] + 1 + r["cost_steps"]))
for r in ckpts:
    s = r["step"]
    if set(r) - {"kind"} != keys:
        errors.append(f"step {s}: fields {sorted(set(r) - {'kind'})}")
        continue
    if r["background"]:
        before = [step_ms[t] for t in sorted(step_ms) if 1 < t <= s and t not in overlapped][-16:]
        window = [step_ms.get(t) for t in range(s + 1, s + 1 + r["cost_steps"])]
        if r["cost_steps"] < 1 or None in window or not before:
            errors.append(f"step {s}: {r['cost_steps']} steps overlapped, {len(before)} undisturbed before")
            continue
        base = statistics.median(before)
        # Overlapped steps faster than the median are noise: that part counts 0, never below.
        over = sum(window) - r["cost_steps"] * base
        cost = r["call_ms"] + r["waited_ms"] + max(0.0, over)
        if not (close(r["base_ms"], base) and close(r["cost_ms"], cost) and r["sync_step"] == -1 and
                close(r["sync_ms"], r["call_ms"] + r["write_ms"]) and
                close(r["cost_pct"], 100 * r["cost_ms"] / r["sync_ms"]) and r["writer_cpu_ms"] >= 0):
            errors.append(f"step {s}: {r} does not add up (base {base}, cost {cost})")
        # The clamp's clause, required or absent (either where the sum is within rounding of 0).
        clamp = r"(; the steps it overlapped ran \d+ ms under it: noise, counted as 0)"
        clamp += "" if over < -1e-3 else "?" if over <= 1e-3 else "{0}"
        line = (rf"checkpoint \S*step_{s:08d} written in \d+ ms in the background \(writer CPU \d+ ms\); cost to "
                rf"training \+\d+ ms over {r['cost_steps']} steps \(\d+ ms snapshot(, \d+ ms waiting for the write)?; median undisturbed step \d+ "
                rf"ms{clamp}\), [\d.]+% of a synchronous save \(\d+ ms, estimated as this one's snapshot plus write\)")
    else:
        if not (r["cost_ms"] == r["write_ms"] == r["call_ms"] == r["sync_ms"] and r["sync_step"] == s and
                r["cost_steps"] == 0 and r["waited_ms"] == 0 and r["cost_pct"] == 100):
            errors.append(f"step {s}: synchronous record {r}")
        line = rf"checkpoint \S*step_{s:08d} written in \d+ ms \(synchronous: training waited for all of it\)"
    if len(re.findall(line, log)) != 1:
        errors.append(f"step {s}: no single log line matching {line}")
for e in errors:
    print(e)
print(f"{len(background)} background and {len(sync)} synchronous checkpoints: records and log lines "
      f"{'consistent' if not errors else 'WRONG'}")
sys.exit(1 if errors else 0)
