#!/usr/bin/env bash
# On one kernel path (CTest runs this once per path, with ANVIL_ISA set), the
# thread count changes no bit: the same run on 1, 2 and 3 threads ends with
# identical weights, and so does a run checkpointed on 2 threads and resumed
# on 1. Exits 77 (skipped) on a path this CPU cannot run.
. "$(dirname "$0")/tools/cli_common.sh"

if ! "$anvil" info > "$tmp/info.txt" 2>&1; then
  grep -q "this CPU lacks" "$tmp/info.txt" && { echo "SKIP: $(cat "$tmp/info.txt")"; exit 77; }
  echo "FAIL: anvil info: $(cat "$tmp/info.txt")" >&2
  exit 1
fi
path=$(sed -n 's/^cpu path: *\([a-z0-9]*\).*/\1/p' "$tmp/info.txt")
echo "kernel path: $path"

bible -f "gen1:1-gen20:18" > "$tmp/gen.txt" || { missing "bible-kjv is not installed"; finish; }
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"
# Big enough that every product is split among threads (M*N*K well past the
# GEMM's serial threshold), the weight gradients cross K blocks (512 rows),
# and the LayerNorm and norm reductions span many chunks.
args=(--data "$tmp/data" --layers 2 --heads 4 --embd 96 --seq 64 --batch 8 --total-batch-tokens 1024
      --lr 3e-3 --steps 24 --no-progress --sample-every -1 --seed 5 --val-every 12 --val-batches 2)

for t in 1 2 3; do
  "$anvil" train "${args[@]}" --threads $t --out "$tmp/t$t" > "$tmp/t$t.log" 2>&1 ||
    bad "$t threads: $(tail -n 1 "$tmp/t$t.log")"
done
grep -q "kernels: cpu-$path, 1 threads" "$tmp/t1.log" && grep -q "kernels: cpu-$path, 3 threads" "$tmp/t3.log" &&
  ok "the runs used path $path on 1 and 3 threads" || bad "the runs did not report path $path and their threads"
for t in 2 3; do
  cmp -s "$tmp/t1/model.safetensors" "$tmp/t$t/model.safetensors" &&
    ok "1 and $t threads: identical weights after 24 steps" || bad "1 and $t threads: the weights differ"
done

# A run on 2 threads checkpoints at step 12; a run on 1 thread resumes from
# that checkpoint.
"$anvil" train "${args[@]}" --threads 2 --ckpt-every 12 --out "$tmp/c" > "$tmp/c.log" 2>&1 ||
  bad "2 threads with checkpoints: $(tail -n 1 "$tmp/c.log")"
"$anvil" train "${args[@]}" --threads 1 --out "$tmp/r" --resume "$tmp/c/ckpt/step_00000012" > "$tmp/r.log" 2>&1 ||
  bad "resume on 1 thread: $(tail -n 1 "$tmp/r.log")"
grep -q "resumed from .*step_00000012" "$tmp/r.log" && ok "checkpointed on 2 threads, resumed on 1 from step 12" ||
  bad "the resume did not start from step 12"
cmp -s "$tmp/t1/model.safetensors" "$tmp/r/model.safetensors" &&
  ok "2 threads, then resumed on 1: identical weights" || bad "the resume on another thread count changed the weights"
finish
