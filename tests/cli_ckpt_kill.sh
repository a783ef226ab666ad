#!/usr/bin/env bash
# SIGKILL while a checkpoint is being written, at points chosen through
# ANVIL_TEST_KILL_IN_CKPT_WRITE=STEP:N (src/ckpt/checkpoint_write.c: the
# process kills itself right after its Nth file written into step STEP's
# checkpoint folder): in one process after the weights and after the
# manifest (before the folder is renamed into place), and at ZeRO-2 on 2
# ranks after the shards and after rank 0's manifest. Each time the
# checkpoint being written is not taken: --resume auto resumes from the one
# before (step 7), and the resumed run ends bit-identical to one never
# interrupted, every step's loss and the final weights.
. "$(dirname "$0")/tools/cli_common.sh"
here=$(cd "$(dirname "$0")" && pwd)

bible -f "gen1:1-gen20:18" > "$tmp/gen.txt" || { missing "bible-kjv is not installed"; finish; }
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"
args=(--data "$tmp/data" --preset tiny --seq 32 --lr 3e-3 --steps 24 --no-progress --sample-every -1 --seed 9
      --threads 1 --ckpt-every 7 --keep-last 5)

# Kills run $2 in step 14's checkpoint after file $3, resumes it, and
# compares it with run $1. The rest is how to start anvil and train's options.
killed_and_resumed() {
  local ref=$1 run=$2 n=$3
  shift 3
  local start=() train=()
  while [ "$1" != train ]; do start+=("$1"); shift; done
  shift
  train=("$@")
  { ANVIL_TEST_KILL_IN_CKPT_WRITE=14:$n "${start[@]}" train "${args[@]}" "${train[@]}" --out "$tmp/$run" \
    > /dev/null 2> "$tmp/$run.kill.log"; } 2> /dev/null # (bash's own "Killed" line too)
  local rc=$? latest half
  latest=$(cat "$tmp/$run/ckpt/latest" 2> /dev/null)
  half=$(cd "$tmp/$run/ckpt" && ls -d step_00000014.tmp-* 2> /dev/null)
  if [ $rc = 137 ] && [ "$latest" = step_00000007 ] && [ -n "$half" ] && [ ! -e "$tmp/$run/ckpt/step_00000014" ]; then
    ok "$run: killed in step 14's checkpoint after file $n (exit 137; $half: $(ls "$tmp/$run/ckpt/$half" | tr '\n' ' '))"
  else
    bad "$run: exit $rc, latest '$latest', step 14 as '$half $(ls "$tmp/$run/ckpt" | tr '\n' ' ')': $(tail -n 2 "$tmp/$run.kill.log")"
  fi
  if ! "${start[@]}" train "${args[@]}" "${train[@]}" --resume auto --out "$tmp/$run" > /dev/null 2> "$tmp/$run.log"; then
    bad "$run: the resumed run failed: $(tail -n 2 "$tmp/$run.log")"
  elif ! grep -q "resumed from .*step_00000007" "$tmp/$run.log"; then
    bad "$run: not resumed from step 7: $(grep resumed "$tmp/$run.log")"
  elif out=$(python3 "$here/tools/compare_runs.py" "$tmp/$ref" "$tmp/$run" --loss-rtol 0 --norm-rtol 0 --weight-atol 0) &&
    cmp -s "$tmp/$ref/model.safetensors" "$tmp/$run/model.safetensors"; then
    ok "$run: resumed from step 7, bit-identical to the uninterrupted run ($out)"
    [ -z "$(cd "$tmp/$run/ckpt" && ls -d ./*.tmp-* 2> /dev/null)" ] && ok "$run: the half-written folder was removed" ||
      bad "$run: left $(ls "$tmp/$run/ckpt")"
  else
    bad "$run: the resumed run differs from the uninterrupted one: $out"
  fi
}

"$anvil" train "${args[@]}" --batch 4 --out "$tmp/ref" > /dev/null 2> "$tmp/ref.log" || bad "reference run"
killed_and_resumed ref weights 1 "$anvil" train --batch 4
killed_and_resumed ref manifest 3 "$anvil" train --batch 4

if command -v mpirun > /dev/null; then
  # Rank 0 writes its shard, the weights and the manifest; rank 1 its shard.
  launch=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" OMP_NUM_THREADS=1 timeout 120 "$anvil" launch -n 2 --)
  "${launch[@]}" train "${args[@]}" --batch 2 --zero 2 --no-health --out "$tmp/ref2" > /dev/null 2> "$tmp/ref2.log" ||
    bad "2-rank reference run: $(tail -n 2 "$tmp/ref2.log")"
  killed_and_resumed ref2 shards 1 "${launch[@]}" train --batch 2 --zero 2 --no-health
  killed_and_resumed ref2 sharded_manifest 3 "${launch[@]}" train --batch 2 --zero 2 --no-health
else
  missing "mpirun is not installed: no sharded run killed in a checkpoint"
fi

finish
