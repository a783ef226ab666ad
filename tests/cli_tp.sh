#!/usr/bin/env bash
# Tensor parallelism through `anvil launch` (mpirun is required, unless
# ANVIL_TEST_ALLOW_SKIP=1), on the book of Genesis, against one process with
# the same global batch (8 sequences of 64 tokens, 20 steps, lr 3e-3):
#   - --tp 2 on 2 ranks, --tp 4 on 4, --tp 2 --sequence-parallel on 2, and --tp 2 on 4 ranks (two data-parallel
#     replicas of batch 4): per-step loss, gradient norm and final weights
#     within the tolerances below, 3x the worst measured;
#   - checkpoints are sharded: each grid cell's first data-parallel rank
#     writes its blocks of the whole tensors (no model.safetensors or
#     optim.safetensors); the 4-rank (DP 2, TP 2) run's step-10 checkpoint
#     resumes in one process, and a one-process checkpoint resumes at --tp 2
#     (each rank reading only its shard), as does a 2-rank ZeRO-1 one (read
#     piece by piece from its shard files), all continuing like the reference;
#     the manifest records the layout; --init at --tp 2 (each rank reading
#     its pieces of the model file) continues like one process from it;
#   - pipeline stages: --pp 2 (1F1B) on 2 ranks and --pp 2 --tp 2 (GPipe) on
#     4, with 4 micro-batches of 4 x 64 tokens, against one process
#     accumulating the same 4 batches, and --pp 2 --tp 2 --sequence-parallel
#     (1F1B) (their own tolerances: accumulation differs more, as in
#     cli_dist.sh); the --pp 2 checkpoint resumes in one
#     process; the --pp 2 --tp 2 one, (DP, PP, TP) = (1, 2, 2), resumes at
#     (2, 1, 2), at (4, 1, 1) and in one process, and at its own layout ends
#     with the same model, byte for byte, as the uninterrupted run;
#   - ZeRO-1 on the grid's data axis: (DP, PP, TP) = (2, 2, 2) with --zero 1 (8 ranks, 4 micro-batches
#     of 2 x 64 per replica) against the accumulating reference; its step-10 checkpoint (each cell's
#     moments gathered over the data axis) resumes at (2, 1, 2) with ZeRO-1 and in one process; MiCS on the data axis,
#     (4, 1, 2) with --zero 1 --shard-group-size 2, against one process;
#   - layouts that cannot work exit 78 with one line, before any step (--sequence-parallel without
#     --tp, or with a micro-batch whose tokens do not split evenly over the TP ranks among them);
#   - a rank stopped inside a TP group: the watchdog names the group and the
#     rank, exit 76; a stopped pipeline stage: exit 76, naming it.
. "$(dirname "$0")/tools/cli_common.sh"
command -v mpirun > /dev/null || { missing "mpirun is not installed"; finish; }
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1
mpi_env=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0")

bible -f "gen1:1-gen50:26" > "$tmp/gen.txt" || { missing "bible-kjv is not installed"; finish; }
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"
common=(--data "$tmp/data" --preset tiny --seq 64 --steps 20 --lr 3e-3 --no-progress --sample-every -1)
# Worst measured over the comparisons here (2026-12-02, avx512 path): loss 1.44e-7 and gradient norm
# 1.21e-5 relative (tp2), weights 1.88e-5 absolute (tp4); --tp 2 --sequence-parallel within them (1.44e-7,
# 1.13e-5, 1.60e-5). About 3x those:
tol=(5e-7 4e-5 6e-5)

"$anvil" train "${common[@]}" --batch 8 --ckpt-every 10 --out "$tmp/ref" > /dev/null 2> "$tmp/ref.log" ||
  bad "reference run"

compare() {
  local ref=$1 name=$2
  if out=$(python3 "$here/tools/compare_runs.py" "$tmp/$ref" "$tmp/$name" --loss-rtol "${tol[0]}" \
    --norm-rtol "${tol[1]}" --weight-atol "${tol[2]}"); then
    ok "$name matches one process: $out"
  else
    bad "$name differs from one process: $out"
  fi
}
# (name, ranks, train options)
run() {
  local name=$1 n=$2
  shift 2
  if ! "${mpi_env[@]}" timeout 120 "$anvil" launch -n "$n" -- train "${common[@]}" "$@" --out "$tmp/$name" \
    > /dev/null 2> "$tmp/$name.log"; then
    bad "$name: the run failed: $(grep -v '^\[rank [1-9]' "$tmp/$name.log" | tail -2)"
    return 1
  fi
}
run tp2 2 --batch 8 --tp 2 && compare ref tp2
run tp4 4 --batch 8 --tp 4 && compare ref tp4
run tp2_sp 2 --batch 8 --tp 2 --sequence-parallel && compare ref tp2_sp
grep -q "model parallel: 2 tensor-parallel ranks (sequence parallel)" "$tmp/tp2_sp.log" &&
  ok "the sequence-parallel run reports it" || bad "no sequence-parallel grid line in the log"
run tp2_dp2 4 --batch 4 --tp 2 --ckpt-every 10 && compare ref tp2_dp2
grep -q "model parallel: 2 tensor-parallel ranks, data parallel over 2" "$tmp/tp2_dp2.log" &&
  ok "the 4-rank run reports its grid" || bad "no grid line in the log"

ck="$tmp/tp2_dp2/ckpt/step_00000010"
if "$anvil" ckpt verify "$ck" > /dev/null && grep -Eq '"tensor_parallel":[[:space:]]*2' "$ck/manifest.json" &&
  [ -f "$ck/shard_0_of_2.safetensors" ] && [ -f "$ck/shard_1_of_2.safetensors" ] &&
  [ ! -e "$ck/model.safetensors" ] && [ ! -e "$ck/optim.safetensors" ]; then
  ok "the TP checkpoint verifies, records tensor_parallel 2 and is two shards, no whole file"
else
  bad "TP checkpoint: $("$anvil" ckpt verify "$ck" 2>&1 | tail -1)"
fi
if "$anvil" train "${common[@]}" --batch 8 --resume "$ck" --out "$tmp/tp_to_1" > /dev/null 2> "$tmp/tp_to_1.log"; then
  compare ref tp_to_1
else
  bad "resuming the TP checkpoint in one process: $(tail -1 "$tmp/tp_to_1.log")"
fi
run one_to_tp 2 --batch 8 --tp 2 --resume "$tmp/ref/ckpt/step_00000010" && compare ref one_to_tp
# --init: each TP rank reads its pieces of the model file; the run continues like one process from it.
# From trained weights with fresh moments, AdamW's first updates (about lr * sign(g)) amplify the
# rounding differences more than from a fresh init: measured (2026-12-02, avx512) loss 1.22e-5,
# gradient norm 4.65e-4 relative, weights 9.07e-5 absolute, the same bits as the build that loaded
# the whole file before sharding it; about 3x those:
tol_run=("${tol[@]}")
tol=(4e-5 1.5e-3 3e-4)
if "$anvil" train "${common[@]}" --batch 8 --init "$tmp/ref/model.safetensors" --out "$tmp/init_1" \
  > /dev/null 2> "$tmp/init_1.log"; then
  run init_tp 2 --batch 8 --tp 2 --init "$tmp/ref/model.safetensors" && compare init_1 init_tp
else
  bad "one process from --init: $(tail -1 "$tmp/init_1.log")"
fi
tol=("${tol_run[@]}")
# A ZeRO-1 checkpoint keeps its moments in shard files: each TP rank reads its pieces from them.
run zero1 2 --batch 4 --zero 1 --ckpt-every 10 &&
  run zero_to_tp 2 --batch 8 --tp 2 --resume "$tmp/zero1/ckpt/step_00000010" && compare ref zero_to_tp

# MiCS on the data axis: 4 DP replicas of a TP pair, moments sharded within pairs of DP ranks. Measured
# (2026-12-02, avx512): loss 8.5e-8, gradient norm 9.6e-6 relative, weights 1.2e-5 absolute; about 3x:
tol=(2.5e-7 3e-5 3.6e-5)
run mics_dp4_tp2 8 --batch 2 --tp 2 --zero 1 --shard-group-size 2 && compare ref mics_dp4_tp2
grep -q "ZeRO-1 on the data axis: moments sharded over 2 ranks, 2 replicas" "$tmp/mics_dp4_tp2.log" &&
  ok "the MiCS grid run reports its shard groups" || bad "no ZeRO-1 line in the MiCS log"

# Pipelines against one process accumulating the same micro-batches. Worst measured (2026-12-02, avx512):
# loss 2.2e-6 and gradient norm 2.1e-4 relative, weights 9.8e-6 absolute (pp2; pp2_tp2_sp 1.65e-6, 1.55e-4,
# 7.28e-6); about 3x those:
tol=(6.5e-6 6e-4 3e-5)
"$anvil" train "${common[@]}" --batch 4 --total-batch-tokens 1024 --out "$tmp/ref_acc" > /dev/null 2>&1 ||
  bad "reference run with accumulation"
run pp2 2 --batch 4 --total-batch-tokens 1024 --pp 2 --ckpt-every 10 && compare ref_acc pp2
grep -q "1 tensor-parallel ranks x 2 pipeline stages (1F1B, 4 micro-batches)" "$tmp/pp2.log" &&
  ok "the pipeline reports its schedule" || bad "no pipeline line in the log"
run pp2_tp2 4 --batch 4 --total-batch-tokens 1024 --pp 2 --tp 2 --pp-schedule gpipe --ckpt-every 10 &&
  compare ref_acc pp2_tp2
run pp2_tp2_sp 4 --batch 4 --total-batch-tokens 1024 --pp 2 --tp 2 --sequence-parallel && compare ref_acc pp2_tp2_sp
# ZeRO-1 on the data axis of a full grid. Measured (2026-12-02, avx512): loss 2.0e-6, gradient norm
# 1.9e-4 relative, weights 9.0e-6 absolute, within the pipelines' tolerances above.
run zero1_222 8 --batch 2 --total-batch-tokens 1024 --pp 2 --tp 2 --zero 1 --ckpt-every 10 &&
  compare ref_acc zero1_222
# Its checkpoint is the 4 cells' shards: it resumes at (2, 1, 2) with ZeRO-1 and in one process.
ck="$tmp/zero1_222/ckpt/step_00000010"
run zero1_to_dp2_tp2 4 --batch 4 --total-batch-tokens 1024 --tp 2 --zero 1 --resume "$ck" &&
  compare ref_acc zero1_to_dp2_tp2
if "$anvil" train "${common[@]}" --batch 4 --total-batch-tokens 1024 --resume "$ck" --out "$tmp/zero1_to_1" \
  > /dev/null 2> "$tmp/zero1_to_1.log"; then
  compare ref_acc zero1_to_1
else
  bad "resuming the (2, 2, 2) ZeRO-1 checkpoint in one process: $(tail -1 "$tmp/zero1_to_1.log")"
fi
# Resharding: the (DP, PP, TP) = (1, 2, 2) checkpoint, 4 shards that name where each block goes,
# resumes at (2, 1, 2), at (4, 1, 1) and in one process with the same global batch, each continuing
# like ref_acc; at its own layout the arithmetic is the same, so the final model is the same bytes.
ck="$tmp/pp2_tp2/ckpt/step_00000010"
if [ -f "$ck/shard_3_of_4.safetensors" ] && [ ! -e "$ck/model.safetensors" ]; then
  ok "the (1, 2, 2) checkpoint is 4 shards"
else
  bad "the (1, 2, 2) checkpoint: $(ls "$ck" | tr '\n' ' ')"
fi
run grid_to_grid 4 --batch 4 --total-batch-tokens 1024 --pp 2 --tp 2 --pp-schedule gpipe --resume "$ck" &&
  if cmp -s "$tmp/pp2_tp2/model.safetensors" "$tmp/grid_to_grid/model.safetensors"; then
    ok "resumed at its own layout, the (1, 2, 2) run ends bit-identical"
  else
    bad "resumed at its own layout, the (1, 2, 2) run ends with a different model"
  fi
# --resume auto on 4 ranks checks the newest checkpoint together, each rank checksumming the files
# dealt to it (largest first, each to the rank with the fewest bytes so far): a byte flipped in rank
# 3's file makes every rank skip to step 10, and the run ends as the uninterrupted one, byte for byte.
cp -r "$tmp/pp2_tp2" "$tmp/skip_bad" && rm "$tmp/skip_bad/model.safetensors"
newest="$tmp/skip_bad/ckpt/$(cat "$tmp/skip_bad/ckpt/latest")"
victim=$(python3 - "$newest/manifest.json" << 'PY'
import json, sys
files = json.load(open(sys.argv[1]))["files"]
load, part = [0] * 4, {}
for f in sorted(files, key=lambda f: -f["bytes"]):
    p = load.index(min(load))
    part[f["name"]], load[p] = p, load[p] + f["bytes"]
print(next(n for n, p in part.items() if p == 3))
PY
)
python3 -c "
import sys; f = open(sys.argv[1], 'r+b'); f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 1]))" \
  "$newest/$victim" || bad "could not flip a byte of $newest/$victim"
run skip_bad 4 --batch 4 --total-batch-tokens 1024 --pp 2 --tp 2 --pp-schedule gpipe --ckpt-every 10 --resume auto &&
  if grep -q "skipping corrupt checkpoint $(basename "$newest"): .*$victim: checksum mismatch .*(rank 3's check)" \
    "$tmp/skip_bad.log" && grep -q "resumed from .*step_00000010" "$tmp/skip_bad.log" &&
    cmp -s "$tmp/pp2_tp2/model.safetensors" "$tmp/skip_bad/model.safetensors"; then
    ok "a byte flipped in $victim: rank 3 found it, all 4 ranks resumed from step 10, the same final model"
  else
    bad "a checkpoint bad in rank 3's part: $(grep -v '^\[rank [1-9]' "$tmp/skip_bad.log" | grep -m3 'skipping\|resumed\|error')"
  fi
run grid_to_dp2_tp2 4 --batch 4 --total-batch-tokens 1024 --tp 2 --resume "$ck" && compare ref_acc grid_to_dp2_tp2
run grid_to_dp4 4 --batch 4 --total-batch-tokens 1024 --resume "$ck" && compare ref_acc grid_to_dp4
if "$anvil" train "${common[@]}" --batch 4 --total-batch-tokens 1024 --resume "$ck" --out "$tmp/grid_to_1" \
  > /dev/null 2> "$tmp/grid_to_1.log"; then
  compare ref_acc grid_to_1
else
  bad "resuming the (1, 2, 2) checkpoint in one process: $(tail -1 "$tmp/grid_to_1.log")"
fi
ck="$tmp/pp2/ckpt/step_00000010"
if grep -Eq '"pipeline_parallel":[[:space:]]*2' "$ck/manifest.json" &&
  "$anvil" train "${common[@]}" --batch 4 --total-batch-tokens 1024 --resume "$ck" --out "$tmp/pp_to_1" \
    > /dev/null 2> "$tmp/pp_to_1.log"; then
  compare ref_acc pp_to_1
else
  bad "resuming the pipeline checkpoint in one process: $(tail -1 "$tmp/pp_to_1.log" 2> /dev/null)"
fi

# Layouts that cannot work: exit 78, one line, before the health check or any step.
refuse() {
  local what=$1 want=$2 n=$3
  shift 3
  "${mpi_env[@]}" timeout 60 "$anvil" launch -n "$n" --log-dir "$tmp/logs" -- train "${common[@]}" --batch 2 "$@" \
    > /dev/null 2> "$tmp/refuse.log"
  local rc=$?
  if [ $rc -eq 78 ] && grep -q -e "$want" "$tmp/refuse.log" && ! grep -q "step \|health:" "$tmp/refuse.log"; then
    ok "$what: exit 78"
  else
    bad "$what: exit $rc, $(tail -2 "$tmp/refuse.log")"
  fi
}
refuse "world not divisible by --tp" "3 ranks cannot be divided into --tp 2" 3 --tp 2
refuse "heads not divisible by --tp" "does not divide the model's 4 attention heads" 3 --tp 3
refuse "--tp with ZeRO-2" "--zero 2 does not combine with --tp or --pp" 2 --tp 2 --zero 2
refuse "shard group not dividing the data axis" "--shard-group-size 4 does not divide the 2 data-parallel ranks" 4 \
  --tp 2 --zero 1 --shard-group-size 4
refuse "more stages than layers" "--pp 4 makes more pipeline stages than the model's 2 layers" 4 --pp 4
refuse "--sequence-parallel without --tp" "--sequence-parallel needs --tp 2 or more" 2 --sequence-parallel
refuse "tokens not divisible by --tp under SP" "batch\*seq (1\*63 = 63 tokens) is not divisible by --tp 2" 2 --tp 2 \
  --sequence-parallel --batch 1 --seq 63

# A rank stopped in a TP group: the watchdog names the group and the rank. 2 ranks, one TP group, so
# the peer waits in a TP collective, unless the stop lands in the microseconds between the step's
# last TP all-reduce and its world-wide agreement, when it names 'world' instead: then once more.
hang() {
  rm -rf "$tmp/hang"
  "${mpi_env[@]}" timeout 120 "$anvil" launch -n 2 -- train --data "$tmp/data" --preset tiny --seq 64 --batch 2 \
    --steps 1000000 --no-progress --log-every 1 --sample-every -1 --collective-timeout 3 --out "$tmp/hang" "$@" \
    > /dev/null 2> "$tmp/hang.log" &
  local job=$! victim= p
  for _ in $(seq 300); do grep -q "^\[rank 0\] step" "$tmp/hang.log" 2> /dev/null && break; sleep 0.1; done
  for p in $(pgrep -f "train.*$tmp/hang"); do
    tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
  done
  [ -n "$victim" ] || { kill $job; return 2; }
  kill -STOP "$victim"
  wait $job
  hang_rc=$?
  kill -CONT "$victim" 2> /dev/null
  [ $hang_rc -eq 76 ] && grep -q "from rank 1" "$tmp/hang.log"
}
if { hang --tp 2 && grep -q "in group 'tp group 0'" "$tmp/hang.log"; } ||
  { grep -q "in group 'world'" "$tmp/hang.log" && hang --tp 2 && grep -q "in group 'tp group 0'" "$tmp/hang.log"; }; then
  ok "rank 1 stopped: the watchdog names tp group 0 and rank 1, exit 76"
else
  bad "stopped rank: exit ${hang_rc:-none}, $(grep -i "timeout\|no answer" "$tmp/hang.log" | head -2)"
fi
# The last of 2 pipeline stages stopped: the first waits for it point to point (or in a collective of
# the step) and the job stops with exit 76, naming rank 1.
if hang --pp 2 --total-batch-tokens 256; then
  ok "last stage stopped: exit 76, $(grep -o "timeout on rank 0.*rank 1[^;]*" "$tmp/hang.log" | head -1)"
else
  bad "stopped stage: exit ${hang_rc:-none}, $(grep -i "timeout\|no answer" "$tmp/hang.log" | head -2); log ends: $(tail -3 "$tmp/hang.log" | tr '\n' '|')"
fi

finish
