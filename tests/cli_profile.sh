#!/usr/bin/env bash
# `anvil train --profile DIR --profile-steps A-B` and `anvil profile summary`,
# on the book of Genesis (a real loader), with a background checkpoint and a
# validation inside the profiled steps:
#   - the trace is JSON (python3's json) with the Trace Event Format's fields
#     on every event (name, ph, ts, dur, pid, tid, cat, args; thread names);
#   - exactly the chosen steps, each as long as metrics.jsonl says, and the
#     ops, loader waits and collectives inside each sum to 90-100% of it;
#   - both passes of every layer in every step, each op carrying its layer
#     and pass; the optimizer; the data loader; the checkpoint snapshot on
#     the training thread and its write on the writer's; the validation;
#   - the summary's top spans and self times equal those python computes
#     from the file;
#   - two ranks: each writes its own file, whose gradient all-reduces carry
#     4 bytes per parameter per step;
#   - bad steps, a file that is not JSON or not a trace: one line, nonzero.
. "$(dirname "$0")/tools/cli_common.sh"
export OMP_NUM_THREADS=1
bible -f "gen1:1-gen20:18" > "$tmp/gen.txt" || { missing "bible-kjv is not installed"; finish; }
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"
common=(--data "$tmp/data" --preset mini --batch 4 --seq 128 --steps 9 --no-progress --sample-every -1 --threads 1)

"$anvil" train "${common[@]}" --total-batch-tokens 1024 --profile "$tmp/prof" --profile-steps 5-7 --ckpt-every 6 \
  --val-every 6 --val-batches 2 --out "$tmp/run" > /dev/null 2> "$tmp/train.log" || bad "train: $(tail -n 1 "$tmp/train.log")"
grep -q "profile: steps 5-7, [0-9]* spans, in $tmp/prof/trace_rank0.json" "$tmp/train.log" &&
  ok "the trainer names the profile" || bad "no profile line in the log: $(cat "$tmp/train.log")"
"$anvil" profile summary "$tmp/prof/trace_rank0.json" --top 5 > "$tmp/summary" 2>&1 || bad "summary: $(cat "$tmp/summary")"

if out=$(python3 - "$tmp/prof/trace_rank0.json" "$tmp/run/metrics.jsonl" "$tmp/summary" << 'EOF'
import json, sys
from collections import defaultdict
trace = json.load(open(sys.argv[1]))
evs = trace["traceEvents"]
num = (int, float)
for i, e in enumerate(evs):
    assert isinstance(e.get("name"), str) and e.get("ph") in ("X", "M"), f"event {i}: {e}"
    assert isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int), f"event {i}: pid/tid {e}"
    assert isinstance(e.get("args"), dict), f"event {i}: args {e}"
    if e["ph"] == "X":
        assert isinstance(e.get("cat"), str), f"event {i}: cat"
        assert isinstance(e.get("ts"), num) and e["ts"] >= 0 and isinstance(e.get("dur"), num) and e["dur"] >= 0, f"event {i}: ts/dur"
    else:
        assert e["name"] in ("process_name", "thread_name") and isinstance(e["args"].get("name"), str), f"event {i}"
threads = {e["tid"]: e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
X = [e for e in evs if e["ph"] == "X"]
train = [t for t, n in threads.items() if n == "train"]
assert len(train) == 1, f"threads {threads}"
train = train[0]
steps = sorted([e for e in X if e["cat"] == "step"], key=lambda e: e["ts"])
assert len(steps) == 3, f"{len(steps)} steps"
ms = {r["step"]: r["ms"] for r in map(json.loads, open(sys.argv[2])) if r["kind"] == "train"}
layers, accum = 4, 2  # the mini preset; 1024 tokens a step in micro-batches of 4 x 128
for k, st in enumerate(steps):
    n = 5 + k
    # Both are the same interval: the trace to the nanosecond, metrics.jsonl to 9 digits.
    assert abs(st["dur"] / 1e3 - ms[n]) < 1e-5 * ms[n] + 2e-6, f"step {n}: {st['dur'] / 1e3} ms traced, {ms[n]} logged"
    inside = [e for e in X if e["tid"] == train and e is not st and e["ts"] >= st["ts"] and e["ts"] + e["dur"] <= st["ts"] + st["dur"] + 1e-3]
    leaf = sum(e["dur"] for e in inside if e["cat"] in ("op", "data", "comm", "comm_wait"))
    share = leaf / st["dur"]
    assert 0.9 <= share <= 1.0 + 1e-6, f"step {n}: ops, loads and collectives are {share:.3f} of the step"
    for p in ("forward", "backward"):
        got = sorted(e["args"]["layer"] for e in inside if e["name"] == "layer" and e["cat"] == p)
        assert got == sorted(list(range(layers)) * accum), f"step {n}: {p} layers {got}"
    ops = [e for e in inside if e["cat"] == "op" and "layer" in e["args"]]
    assert ops and all(e["args"].get("pass") in ("forward", "backward") for e in ops), f"step {n}: ops without a pass"
    assert {"matmul_forward qkv", "matmul_backward fc_proj", "attention_backward"} <= {e["name"] for e in ops}
    assert sum(e["cat"] == "optimizer" for e in inside) == 1, f"step {n}: optimizer"
    assert sum(e["name"] == "loader wait" for e in inside) == 2, f"step {n}: two micro-batches, two loads"
    print(f"step {n}: {share:.3f} covered", end="; ")
names = [(threads[e["tid"]], e["name"]) for e in X]
for want in [("train", "checkpoint snapshot"), ("ckpt writer", "checkpoint write"), ("train", "validation")]:
    assert want in names, f"no {want[1]} on the {want[0]} thread"
# Self times by python: each span less the spans directly inside it, per thread.
self = defaultdict(float)
for tid in threads:
    stack = []
    for e in sorted((e for e in X if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"])):
        while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= e["ts"]:
            stack.pop()
        if stack:
            p = stack[-1][0]
            stack[-1][1] += min(e["ts"] + e["dur"], p["ts"] + p["dur"]) - e["ts"]
        entry = [e, 0.0]
        stack.append(entry)
        e["_entry"] = entry
    for e in X:
        if e["tid"] == tid:
            self[(tid, e["name"])] += e["dur"] - e["_entry"][1]
top = sorted(((v, n) for (t, n), v in self.items() if t == train), reverse=True)[:5]
lines = open(sys.argv[3]).read().split("\n")
start = [i for i, l in enumerate(lines) if l.startswith("thread train")][0] + 2
for (v, n), line in zip(top, lines[start:start + 5]):
    f = line.split()
    assert abs(float(f[0]) - v / 1e3) < 1.5e-3 and " ".join(f[3:]).startswith(n), f"summary row '{line}', python {n} {v / 1e3:.3f}"
print(f"summary's top 5 match ({top[0][1]} first)")
EOF
); then ok "the trace: $out"; else bad "the trace: $out"; fi

# ---- two ranks: a file each, gradients' bytes ----
if command -v mpirun > /dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  params=$(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" "$anvil" launch -n 2 --log-dir "$tmp/logs" -- train "${common[@]}" \
    --steps 6 --profile "$tmp/prof2" --profile-steps 4-5 --summary-json 2> "$tmp/launch.log" |
    sed -n 's/.*"params":\([0-9]*\).*/\1/p')
  if [ -n "$params" ] && out=$(python3 - "$tmp/prof2" "$params" << 'EOF'
import json, sys
params = int(sys.argv[2])
for r in (0, 1):
    evs = json.load(open(f"{sys.argv[1]}/trace_rank{r}.json"))["traceEvents"]
    assert all(e["pid"] == r for e in evs), f"rank {r}: pid"
    grads = [e for e in evs if e["ph"] == "X" and e["cat"] == "comm" and "gradients of unit" in e["name"]]
    total = sum(e["args"]["bytes"] for e in grads)
    assert total == 2 * 4 * params, f"rank {r}: {total} bytes of gradients in 2 steps, {params} parameters"
    waits = [e for e in evs if e["ph"] == "X" and e["cat"] == "comm_wait"]
    assert waits, f"rank {r}: no waits"
print(f"each rank all-reduced 4 x {params} bytes of gradients a step, in {len(grads)} collectives")
EOF
  ); then ok "two ranks: $out"; else bad "two ranks: ${out:-the run failed: $(tail -n 2 "$tmp/launch.log")}"; fi
else
  missing "mpirun is not installed: no two-rank profile"
fi

# ---- refusals ----
one_line() {
  local what=$1 want_rc=$2 want=$3 err rc
  shift 3
  err=$("$@" 2>&1 > /dev/null)
  rc=$?
  [ $rc = "$want_rc" ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && printf '%s\n' "$err" | grep -qF -- "$want" &&
    ok "$what: $err" || bad "$what: exit $rc: $err"
}
# 78: configurations that cannot work (core/exit.h); 2: a malformed option.
one_line "steps past the run" 78 "--profile-steps 12-14: the run ends at step 9" \
  "$anvil" train "${common[@]}" --profile "$tmp/p3" --profile-steps 12-14
one_line "steps not A-B" 2 "--profile-steps must be A-B" "$anvil" train "${common[@]}" --profile "$tmp/p3" --profile-steps 5
one_line "steps backwards" 78 "1 <= A <= B" "$anvil" train "${common[@]}" --profile "$tmp/p3" --profile-steps 7-5
# A Llama's linear layers are named by its family (model/model.h's anvil_model_linear_role), not by
# GPT-2's shapes: its fused q/k/v and gate/up matmuls, its o and down projections.
"$anvil" train --synthetic --preset llama-tiny --batch 2 --seq 32 --steps 3 --no-progress --sample-every -1 \
  --profile "$tmp/lprof" --profile-steps 2-3 > /dev/null 2>&1 || bad "llama-tiny with --profile"
python3 - "$tmp/lprof/trace_rank0.json" << 'EOF2' > "$tmp/lnames" 2>&1 && ok "llama's linear layers: $(cat "$tmp/lnames")" ||
import json, sys
names = {e["name"] for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("cat") == "op"}
want = {f"matmul_{p} {r}" for p in ("forward", "backward") for r in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")}
assert want <= names, f"missing {sorted(want - names)}"
assert not {"matmul_forward fc", "matmul_forward attn_proj"} & names, "a GPT-2 name on a Llama"
print(", ".join(sorted(n for n in names if n.startswith("matmul_forward "))))
EOF2
  bad "llama's linear layers: $(cat "$tmp/lnames")"
printf '{"traceEvents": [' > "$tmp/cut.json"
one_line "a cut file" 1 "cut.json: not JSON" "$anvil" profile summary "$tmp/cut.json"
printf '{"events": []}' > "$tmp/other.json"
one_line "not a trace" 1 "no \"traceEvents\" array" "$anvil" profile summary "$tmp/other.json"
printf '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": -2, "pid": 0, "tid": 0}]}' > "$tmp/neg.json"
one_line "a negative duration" 1 "event 0 (a): \"dur\" is not a number >= 0" "$anvil" profile summary "$tmp/neg.json"
finish
