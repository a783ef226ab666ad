#!/usr/bin/env bash
# The job service end to end: one `anvil serve` on 127.0.0.1 (a port it
# picks, read from serve.port), tiny models, each case a few seconds:
#   - bad specs (malformed JSON, unknown field, negative limit, oversized
#     body) and bad requests: a 4xx with a one-line reason, no job stored,
#     `anvil job` exits 4;
#   - submit, wait: Completed with its history; a usage error is Failed at
#     once, not retried;
#   - a rank SIGKILLed mid-run: retried with --resume auto, Completed, final
#     weights bit-identical to the uninterrupted job's;
#   - retries exhausted: Failed, the reason naming the signal;
#   - a stop request: Stopped after a checkpoint (exit 75);
#   - max_runtime_s: Stopped (MaxRuntimeExceeded) with a checkpoint, and a
#     resubmission with --resume auto continues from it;
#   - a SIGSTOPped rank: HangDetected, SIGKILL after the grace, a retry, Completed;
#   - kill -9 of the daemon mid-job and a restart: the job is still tracked,
#     re-attached (no new attempt) and Completed.
. "$(dirname "$0")/tools/cli_common.sh"
command -v mpirun > /dev/null || { echo "SKIP: mpirun is not installed"; exit 77; }
command -v curl > /dev/null || { echo "SKIP: curl is not installed"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
state=$tmp/state

bible -f "gen1:1-gen10:26" > "$tmp/gen.txt" || { echo "FAIL: bible-kjv is not installed" >&2; exit 1; }
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"

start_daemon() {
  rm -f "$state/serve.port"
  "$anvil" serve --state "$state" --port 0 --stop-grace 3 >> "$tmp/serve.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [ -s "$state/serve.port" ] && break; sleep 0.05; done
  port=$(cat "$state/serve.port" 2> /dev/null) ||
    { bad "the daemon did not start: $(tail -n 1 "$tmp/serve.log")"; exit 1; }
}
start_daemon
job() { timeout 120 "$anvil" job --state "$state" "$@"; }
# A field of a job's JSON (describe --json), e.g. `field 3 status`.
field() {
  job --json describe "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)$(printf '["%s"]' "${@:2}"))"
}
history() { job --json describe "$1" | python3 -c "
import json, sys
for e in json.load(sys.stdin)['history']: print(e['status'], e['secondary_status'], e['message'], sep='|')"; }
njobs() { job --json list | python3 -c "import json,sys; print(len(json.load(sys.stdin)['jobs']))"; }
# The training rank of the job whose run folder is $1 (not mpirun, the launcher or the wrapper).
rank_pid() { pgrep -f "^$anvil train .*--out $1( |\$)" | head -n 1; }
# Waits (up to 60 s) until the run in $1 has logged $2 steps and has a checkpoint.
wait_steps() {
  for _ in $(seq 600); do
    [ -f "$1/ckpt/latest" ] && [ "$(grep -c '"kind":"train"' "$1/metrics.jsonl" 2> /dev/null)" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
# Open MPI's allocations outlive LeakSanitizer (as in cli_dist.sh): no leak checks in the jobs.
asan_off="${ASAN_OPTIONS:-}:detect_leaks=0"
submit() { job submit --env "ASAN_OPTIONS=$asan_off" "$@"; }
train=(train --data "$tmp/data" --preset tiny --batch 4 --seq 32 --no-progress --sample-every -1 --seed 9
       --threads 1 --ckpt-every 25 --keep-last 2)

# ---- bad input: 4xx, one line, nothing stored ----
post() { curl -s -o "$tmp/answer" -w '%{http_code}' -X POST "http://127.0.0.1:$port/v1/jobs" --data-binary "$1"; }
expect_refusal() { # code, what, body
  local got
  got=$(post "$3")
  if [ "$got" = "$1" ] && [ "$(wc -l < "$tmp/answer")" = 1 ] &&
     grep -q "\"error\":\"spec: .*$2" "$tmp/answer"; then
    ok "refused with $1: $(cat "$tmp/answer")"
  else bad "expected $1 naming '$2', got $got: $(cat "$tmp/answer")"; fi
}
expect_refusal 400 "malformed JSON" '{"name": "x", "command": ["train"'
expect_refusal 400 "unknown field 'gpus'" '{"name": "x", "command": ["train"], "gpus": 8}'
expect_refusal 400 "max_retries: must be >= 0" '{"name": "x", "command": ["train"], "max_retries": -1}'
expect_refusal 400 "hang_timeout_s: must be >= 0" '{"name": "x", "command": ["train"], "hang_timeout_s": -5}'
expect_refusal 400 "resources: unknown field 'gpus'" '{"name": "x", "command": ["train"], "resources": {"gpus": 1}}'
expect_refusal 400 "command: --out is not allowed" '{"name": "x", "command": ["train", "--out", "/tmp/x"]}'
expect_refusal 400 "channels.train: /nonexistent" \
  '{"name": "x", "command": ["train"], "channels": {"train": "/nonexistent"}}'
head -c 70000 /dev/zero | tr '\0' ' ' > "$tmp/big.json"
expect_refusal 413 "larger than 65536 bytes" "@$tmp/big.json"
code=$(curl -s -o "$tmp/answer" -w '%{http_code}' "http://127.0.0.1:$port/v1/jobs/99")
[ "$code" = 404 ] && ok "unknown job: 404 $(cat "$tmp/answer")" || bad "unknown job: $code"
echo '{"name": "x", "command": ["serve"]}' > "$tmp/bad.json"
job submit "$tmp/bad.json" 2> "$tmp/err"
rc=$?
[ $rc = 4 ] && grep -q "not an anvil subcommand a job can run" "$tmp/err" && ok "anvil job: a refusal exits 4" ||
  bad "anvil job submit of a bad spec: exit $rc: $(cat "$tmp/err")"
[ "$(njobs)" = 0 ] && ok "no refused request stored a job" || bad "refused requests stored jobs"

# ---- submit, wait, Completed (also the reference of the retried run below) ----
submit --name ref --output "$tmp/ref" -- "${train[@]}" --steps 1200 > "$tmp/out" || bad "submit: $(cat "$tmp/out")"
ref=$(grep -o 'job [0-9]*' "$tmp/out" | cut -d' ' -f2)
job wait "$ref" > "$tmp/out"
rc=$?
[ $rc = 0 ] && grep -q "Completed" "$tmp/out" && [ -f "$tmp/ref/model.safetensors" ] && ok "submit, wait: Completed" ||
  bad "submit, wait: exit $rc: $(cat "$tmp/out"; history "$ref")"
[ "$(history "$ref" | cut -d'|' -f1 | uniq | tr '\n' ' ')" = "Pending Starting Running Completed " ] &&
  ok "history: Pending, Starting, Running, Completed" || bad "history: $(history "$ref")"
job logs "$ref" | grep -q '^\[rank 0\] done: 1200 steps' && ok "logs: the launcher's merged log" || bad "logs"
job logs "$ref" --rank 0 | grep -q '^done: 1200 steps' && ok "logs --rank 0" || bad "logs --rank 0"

submit --name usage -- train --no-such-option > /dev/null
job wait 2 > /dev/null
[ $? = 3 ] && [ "$(field 2 status)" = Failed ] && [ "$(field 2 attempt)" = 1 ] &&
  field 2 failure_reason | grep -q "usage error, not retried" && ok "a usage error: Failed, not retried" ||
  bad "usage error: $(field 2 status) $(field 2 failure_reason)"

# ---- a rank killed: retried from its checkpoint, bit-identical ----
submit --name killed --max-retries 2 --output "$tmp/killed" -- "${train[@]}" --steps 1200 > /dev/null
wait_steps "$tmp/killed" 200 || bad "the job made no progress"
kill -9 "$(rank_pid "$tmp/killed")"
job wait 3 > "$tmp/out"
rc=$?
history 3 > "$tmp/history"
if [ $rc = 0 ] && [ "$(field 3 attempt)" = 2 ] &&
   grep -q "Starting|Retrying (1/2)|exit 137 (signal 9)" "$tmp/history"; then
  ok "SIGKILLed rank: retried (Retrying (1/2)), Completed"
else bad "SIGKILLed rank: exit $rc: $(history 3)"; fi
grep -q "resumed from" "$tmp/killed/logs/launcher.log" && ok "the retry resumed from a checkpoint" ||
  bad "the retry did not resume"
cmp -s "$tmp/ref/model.safetensors" "$tmp/killed/model.safetensors" &&
  ok "final weights bit-identical to the uninterrupted job's" || bad "final weights differ"

# ---- retries exhausted ----
submit --name doomed --max-retries 1 --output "$tmp/doomed" -- "${train[@]}" --steps 100000 > /dev/null
pid=
for attempt in 1 2; do
  # The attempt's own rank, once it has trained 30 steps of its own.
  for _ in $(seq 600); do
    new=$(rank_pid "$tmp/doomed")
    [ -n "$new" ] && [ "$new" != "$pid" ] && break
    sleep 0.1
  done
  pid=$new
  steps=$(grep -c '"kind":"train"' "$tmp/doomed/metrics.jsonl" 2> /dev/null)
  wait_steps "$tmp/doomed" $((steps + 30)) || bad "attempt $attempt made no progress"
  kill -9 "$pid"
done
job wait 4 > "$tmp/out"
rc=$?
reason=$(field 4 failure_reason)
[ $rc = 3 ] && [ "$(field 4 status)" = Failed ] &&
  echo "$reason" | grep -q "attempt 2 of 2 failed: exit 137 (signal 9)" &&
  ok "retries exhausted: Failed: $reason" || bad "retries exhausted: exit $rc: $(field 4 status): $reason"

# ---- stop request ----
submit --name stopme --output "$tmp/stopme" -- "${train[@]}" --steps 100000 > /dev/null
wait_steps "$tmp/stopme" 30 || bad "the job to stop made no progress"
job stop 5 | grep -q "job 5: Stopping" || bad "stop did not answer Stopping"
job wait 5 > /dev/null
[ $? = 3 ] && [ "$(field 5 status)" = Stopped ] && [ "$(field 5 exit_code)" = 75 ] &&
  ok "stop: Stopped after a checkpoint (exit 75)" || bad "stop: $(history 5)"

# ---- max runtime, then a resubmission resumes ----
cat > "$tmp/runtime.json" << EOF
{"name": "short", "command": ["train", "--data", "$tmp/data", "--preset", "tiny", "--batch", "4", "--seq", "32",
  "--no-progress", "--sample-every", "-1", "--seed", "9", "--threads", "1", "--ckpt-every", "25", "--steps", "100000"],
 "output": "$tmp/short", "max_runtime_s": 3, "tags": {"case": "runtime"}, "env": {"ASAN_OPTIONS": "$asan_off"}}
EOF
job submit "$tmp/runtime.json" > /dev/null
job wait 6 > "$tmp/out"
if [ "$(field 6 status)" = Stopped ] && [ "$(field 6 secondary_status)" = MaxRuntimeExceeded ] &&
   [ "$(field 6 exit_code)" = 75 ] && [ -f "$tmp/short/ckpt/latest" ]; then
  ok "max_runtime_s: $(cat "$tmp/out"), checkpoint $(cat "$tmp/short/ckpt/latest")"
else bad "max_runtime_s: $(history 6)"; fi
last=$(sed 's/step_0*//' "$tmp/short/ckpt/latest")
submit --name short2 --output "$tmp/short" -- "${train[@]}" --steps $((last + 20)) --resume auto > /dev/null
job wait 7 > /dev/null && grep -q "resumed from" "$tmp/short/logs/launcher.log" &&
  ok "the resubmission resumed from step $last and Completed" || bad "resubmission: $(history 7)"

# ---- a frozen rank: HangDetected, a retry ----
submit --name hang --max-retries 1 --hang-timeout 3 --output "$tmp/hang" -- "${train[@]}" --steps 1500 > /dev/null
wait_steps "$tmp/hang" 50 || bad "the hang job made no progress"
kill -STOP "$(rank_pid "$tmp/hang")"
job wait 8 > /dev/null
rc=$?
history 8 > "$tmp/history"
if [ $rc = 0 ] && grep -q "Stopping|HangDetected|" "$tmp/history" &&
   grep -q "Starting|Retrying (1/1)|HangDetected" "$tmp/history"; then
  ok "SIGSTOPped rank: HangDetected, retried, Completed"
else bad "SIGSTOPped rank: exit $rc: $(history 8)"; fi

# ---- kill -9 of the daemon mid-job, then a restart ----
submit --name survivor --output "$tmp/survivor" -- "${train[@]}" --steps 1500 > /dev/null
wait_steps "$tmp/survivor" 100 || bad "the survivor job made no progress"
kill -9 $daemon
wait $daemon 2> /dev/null
ok "daemon killed with SIGKILL at step $(grep -c '"kind":"train"' "$tmp/survivor/metrics.jsonl")"
sleep 1
start_daemon
job wait 9 > /dev/null
rc=$?
[ $rc = 0 ] && [ "$(field 9 attempt)" = 1 ] && [ -f "$tmp/survivor/model.safetensors" ] &&
  ok "kill -9 of the daemon: the job was re-attached and Completed" || bad "daemon restart: exit $rc: $(history 9)"

job list > "$tmp/out"
[ "$(grep -c . "$tmp/out")" = 10 ] && ok "list: 9 jobs" || bad "list: $(cat "$tmp/out")"
failed=$(job --json list --status Failed |
  python3 -c "import json,sys; print([j['id'] for j in json.load(sys.stdin)['jobs']])")
[ "$failed" = "[2, 4]" ] &&
  ok "list --status Failed" || bad "list --status Failed: $(job --json list --status Failed)"
kill $daemon
wait $daemon
[ $? = 0 ] && ok "SIGTERM: the daemon exits 0" || bad "the daemon did not exit cleanly: $(tail -n 2 "$tmp/serve.log")"
exit $fails
