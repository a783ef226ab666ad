#!/usr/bin/env bash
# Resume is bit-exact: a run killed with SIGKILL at an arbitrary moment (not
# at a checkpoint boundary) and continued with --resume auto gives the same
# loss at every step and the same final weights as a run never interrupted;
# SIGTERM finishes the step, checkpoints and exits 75, and that resume is
# bit-exact too.
set -u
anvil=$1
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1" >&2; fails=$((fails + 1)); }

bible -f "gen1:1-gen50:26" > "$tmp/gen.txt" || { echo "FAIL: bible-kjv is not installed" >&2; exit 1; }
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"
steps=300
args=(--data "$tmp/data" --preset tiny --batch 8 --seq 64 --lr 3e-3 --lr-warmup 10 --steps $steps --no-progress
      --sample-every -1 --seed 9 --threads 2 --ckpt-every 7 --keep-last 2)

"$anvil" train "${args[@]}" --out "$tmp/ref" > /dev/null 2>&1 || bad "reference run failed"

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

# Retention: --keep-last 2 leaves the two newest step folders.
n=$(ls -d "$tmp/ref/ckpt"/step_* | wc -l)
[ "$n" -eq 2 ] && ok "retention keeps 2" || bad "retention left $n checkpoints"

# A resume against a different model is refused with one line.
err=$("$anvil" train "${args[@]}" --layers 3 --out "$tmp/ref" --resume auto 2>&1 >/dev/null | tail -n 1); rc=$?
case "$err" in *error:*) ok "mismatched config refused: $err" ;; *) bad "mismatched config: $err" ;; esac

echo "cli_resume: $fails failure(s)"
[ $fails -eq 0 ]
