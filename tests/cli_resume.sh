#!/usr/bin/env bash
# Resume is bit-exact: a run killed with SIGKILL at an arbitrary moment (not
# at a checkpoint boundary) and continued with --resume auto gives the same
# loss at every step and the same final weights as a run never interrupted;
# SIGTERM finishes the step, checkpoints and exits 75, and that resume is
# bit-exact too; so is the resume of a run with shuffled data. Every
# checkpoint reports its cost to training in the log and metrics.jsonl, and
# the figures add up (tools/ckpt_costs.py).
. "$(dirname "$0")/tools/cli_common.sh"

bible -f "gen1:1-gen50:26" > "$tmp/gen.txt" || { missing "bible-kjv is not installed"; finish; }
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"
steps=300
args=(--data "$tmp/data" --preset tiny --batch 8 --seq 64 --lr 3e-3 --lr-warmup 10 --steps $steps --no-progress
      --sample-every -1 --seed 9 --threads 2 --ckpt-every 7 --keep-last 2)

"$anvil" train "${args[@]}" --out "$tmp/ref" > /dev/null 2> "$tmp/ref.log" || bad "reference run failed"
# Steps 7, 14, ..., 294 in the background, 300 (the last) synchronously.
out=$(python3 "$(dirname "$0")/tools/ckpt_costs.py" "$tmp/ref" "$tmp/ref.log" --background 42 --sync 1) &&
  ok "checkpoint costs: $out" || bad "checkpoint costs: $out"

# Loss of every step, keeping the last record of a step that ran twice.
losses() {
  grep '"kind":"train"' "$1/metrics.jsonl" |
    sed 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/' | awk '{ l[$1] = $2 } END { for (s in l) print s, l[s] }' |
    sort -n
}

# Waits (up to 60 s) until the run has a checkpoint and has logged at least
# $2 steps, so the kill lands mid-run however fast the machine is.
wait_progress() {
  for _ in $(seq 6000); do
    [ -f "$1/ckpt/latest" ] && [ "$(grep -c '"kind":"train"' "$1/metrics.jsonl" 2>/dev/null)" -ge "$2" ] && return 0
    sleep 0.01
  done
  return 1
}

# SIGKILL at a random step after the first checkpoint.
"$anvil" train "${args[@]}" --out "$tmp/kill" > "$tmp/kill.log" 2>&1 &
pid=$!
wait_progress "$tmp/kill" $((RANDOM % 150 + 10)) || bad "the run made no progress"
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
killed_at=$(grep -c '"kind":"train"' "$tmp/kill/metrics.jsonl")
"$anvil" train "${args[@]}" --out "$tmp/kill" --resume auto > "$tmp/resume.log" 2>&1 || bad "resume after SIGKILL failed: $(tail -n 1 "$tmp/resume.log")"
grep -q "resumed from" "$tmp/resume.log" || bad "the resumed run did not report its checkpoint"
if [ "$killed_at" -lt $steps ] && [ "$(losses "$tmp/ref" | wc -l)" -eq $steps ] && cmp -s <(losses "$tmp/ref") <(losses "$tmp/kill"); then
  ok "SIGKILL after step $killed_at, resumed from $(grep -o 'step_[0-9]*' "$tmp/resume.log" | head -n 1): $steps identical losses"
else
  bad "SIGKILL after step $killed_at: losses differ from the uninterrupted run"
fi
cmp -s "$tmp/ref/model.safetensors" "$tmp/kill/model.safetensors" && ok "SIGKILL: identical final weights" ||
  bad "SIGKILL: final weights differ"

# SIGTERM: finish the step, checkpoint, exit 75.
"$anvil" train "${args[@]}" --out "$tmp/term" > "$tmp/term.log" 2>&1 &
pid=$!
wait_progress "$tmp/term" $((RANDOM % 150 + 10)) || bad "the run made no progress"
kill -TERM $pid
wait $pid
rc=$?
if [ $rc -eq 75 ] && grep -q "stopped by signal" "$tmp/term.log"; then ok "SIGTERM: exit 75 after a checkpoint"
else bad "SIGTERM: exit $rc: $(tail -n 2 "$tmp/term.log")"; fi
"$anvil" train "${args[@]}" --out "$tmp/term" --resume auto > /dev/null 2>&1 || bad "resume after SIGTERM failed"
cmp -s "$tmp/ref/model.safetensors" "$tmp/term/model.safetensors" && cmp -s <(losses "$tmp/ref") <(losses "$tmp/term") &&
  ok "SIGTERM: identical losses and final weights" || bad "SIGTERM: the resumed run differs"
# A finished run resumed again: nothing to train, said so, the weights untouched.
"$anvil" train "${args[@]}" --out "$tmp/term" --resume auto > /dev/null 2> "$tmp/again.log" &&
  grep -q "^done: nothing to train, the run was at step $steps of $steps already$" "$tmp/again.log" &&
  cmp -s "$tmp/ref/model.safetensors" "$tmp/term/model.safetensors" && ok "a finished run resumed: $(tail -n 1 "$tmp/again.log")" ||
  bad "a finished run resumed: $(tail -n 1 "$tmp/again.log")"

# Shuffled data (--shuffle): a small corpus of 26 batches an epoch, so the run
# wraps four times and every continuation crosses a wrap into a new order; a
# run killed with SIGKILL and resumed matches an uninterrupted shuffled run.
bible -f "gen1:1-gen4:26" > "$tmp/small.txt"
"$anvil" prep --out "$tmp/small" --delimiter '\n' --val-fraction 0.05 "$tmp/small.txt" > /dev/null || bad "prep small"
ssteps=120
sargs=(--data "$tmp/small" --preset tiny --batch 8 --seq 64 --lr 3e-3 --lr-warmup 10 --steps $ssteps --no-progress
       --sample-every -1 --seed 9 --threads 2 --ckpt-every 7 --keep-last 2)
"$anvil" train "${sargs[@]}" --out "$tmp/sorted" > /dev/null 2>&1 || bad "unshuffled small run failed"
"$anvil" train "${sargs[@]}" --shuffle --out "$tmp/sref" > /dev/null 2>&1 || bad "shuffled reference run failed"
cmp -s <(losses "$tmp/sorted") <(losses "$tmp/sref") && bad "--shuffle did not change the losses" ||
  ok "--shuffle changes the data order"
grep -q '"shuffled":	true' "$tmp/sref/ckpt/$(cat "$tmp/sref/ckpt/latest")/manifest.json" &&
  grep -q '"shuffle_seed":	"9"' "$tmp/sref/ckpt/$(cat "$tmp/sref/ckpt/latest")/manifest.json" &&
  ok "the checkpoint records the shuffled order and its seed" || bad "the manifest lacks the shuffled order"
"$anvil" train "${sargs[@]}" --shuffle --out "$tmp/skill" > "$tmp/skill.log" 2>&1 &
pid=$!
wait_progress "$tmp/skill" $((RANDOM % 90 + 10)) || bad "the shuffled run made no progress"
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
killed_at=$(grep -c '"kind":"train"' "$tmp/skill/metrics.jsonl")
"$anvil" train "${sargs[@]}" --shuffle --out "$tmp/skill" --resume auto > "$tmp/sresume.log" 2>&1 ||
  bad "shuffled resume failed: $(tail -n 1 "$tmp/sresume.log")"
if [ "$killed_at" -lt $ssteps ] && [ "$(losses "$tmp/sref" | wc -l)" -eq $ssteps ] &&
   cmp -s <(losses "$tmp/sref") <(losses "$tmp/skill") && cmp -s "$tmp/sref/model.safetensors" "$tmp/skill/model.safetensors"; then
  ok "shuffled: SIGKILL after step $killed_at, resumed from $(grep -o 'step_[0-9]*' "$tmp/sresume.log" | head -n 1): identical losses and final weights"
else
  bad "shuffled: SIGKILL after step $killed_at: the resumed run differs from the uninterrupted one"
fi
# Resuming a shuffled run without --shuffle would read other batches: refused in one line, exit 78
# (an input that cannot work, which the job service does not retry).
"$anvil" train "${sargs[@]}" --out "$tmp/skill" --resume auto > /dev/null 2> "$tmp/mismatch.log"; rc=$?
err=$(tail -n 1 "$tmp/mismatch.log")
case "$rc:$err" in 78:*error:*"shuffled with seed 9"*"in order"*) ok "order mismatch refused: $err" ;;
  *) bad "order mismatch: exit $rc: $err" ;; esac

# Retention: --keep-last 2 leaves the two newest step folders.
n=$(ls -d "$tmp/ref/ckpt"/step_* | wc -l)
[ "$n" -eq 2 ] && ok "retention keeps 2" || bad "retention left $n checkpoints"

# A resume against a different model is refused with one line, exit 78.
"$anvil" train "${args[@]}" --layers 3 --out "$tmp/ref" --resume auto > /dev/null 2> "$tmp/config.log"; rc=$?
err=$(tail -n 1 "$tmp/config.log")
case "$rc:$err" in 78:"anvil train: error: "*"model config differs: n_layer is 2"*) ok "mismatched config refused: $err" ;;
  *) bad "mismatched config: exit $rc: $err" ;; esac

finish
