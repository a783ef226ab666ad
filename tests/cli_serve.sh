#!/usr/bin/env bash
# The job service end to end: one `anvil serve` on 127.0.0.1 (a port it
# picks, read from serve.port), tiny models, each case a few seconds:
#   - bad specs (malformed JSON, unknown field, negative limit, oversized
#     body) and bad requests: a 4xx with a one-line reason, no job stored,
#     `anvil job` exits 4;
#   - submit, wait: Completed with its history; a usage error is Failed at
#     once, not retried; a llama-tiny job Completed, its model file a Llama's
#     (export writes LlamaForCausalLM);
#   - Completed only with the command's completion record, verified (its model file's size and CRC-32C
#     against a bitwise reference); exit 0 without it (a test hook) retried, then Failed, naming it;
#     describe keeps both attempts (text and JSON); a retry waits (Fencing) while the run lock is held;
#   - a rank SIGKILLed mid-run: retried with --resume auto, Completed, final
#     weights bit-identical to the uninterrupted job's;
#   - retries exhausted: Failed, the reason naming the signal;
#   - a stop request: Stopped after a checkpoint (exit 75);
#   - exit 75 the service did not ask for (SIGUSR1 sent to the rank from outside): a failure, retried
#     (counted in max_retries) with --resume auto, Completed;
#   - max_runtime_s: Stopped (MaxRuntimeExceeded) with a checkpoint, and a
#     resubmission with --resume auto continues from it;
#   - a SIGSTOPped rank: HangDetected, SIGKILL after the grace, a retry, Completed;
#   - kill -9 of the daemon mid-job and a restart: the job is still tracked,
#     re-attached (no new attempt) and Completed;
#   - a configuration error (exit 78): Failed at once, not retried, the reason saying a retry cannot fix it;
#   - --max-running 2: a third job waits Pending (Queued) and starts when one ends;
#   - the heartbeat: a running job's secondary status is its phase (Training);
#   - hooks (a command and a URL, each failing some first attempts): every
#     primary status change of every job delivered once, in order, retried;
#   - GET /metrics: promtool accepts it, and it agrees with the jobs;
#   - the dashboard in headless Chromium: at 1300 px nothing overflows
#     sideways, each rank's log box of a 2-rank job shows its lines or says
#     nothing was logged yet (rank 1's, never an empty bar), a running job's
#     exit code reads "none yet", the facts' heading, /?token= gets the page
#     and a pointer to #token=; the jobs and their statuses (one finished,
#     one running), a finished job's history, curves and logs; no data
#     without a token;
#   - principals: a state without users refused, --init once, 401 for a
#     missing, malformed, wrong or revoked token, 403 for a user on admin
#     endpoints, an ungranted role, paths outside the role ('..', a symbolic
#     link, /a vs /ab), too many processes, a reserved variable; another
#     user's job is 404; a job's environment is the role's, not the daemon's;
#     the audit trail holds all of it and refuses UPDATE and DELETE.
. "$(dirname "$0")/tools/cli_common.sh"
command -v mpirun > /dev/null || { echo "SKIP: mpirun is not installed"; exit 77; }
command -v curl > /dev/null || { echo "SKIP: curl is not installed"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
state=$tmp/state

bible -f "gen1:1-gen10:26" > "$tmp/gen.txt" || { echo "FAIL: bible-kjv is not installed" >&2; exit 1; }
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"

# ---- principals: no users, then --init ----
"$anvil" serve --state "$state" --port 0 2> "$tmp/err"
rc=$?
[ $rc = 1 ] && grep -q "has no users: run 'anvil serve --init" "$tmp/err" && ok "a state without users is refused" ||
  bad "serve without users: exit $rc: $(cat "$tmp/err")"
"$anvil" serve --init --state "$state" > "$tmp/token" 2> "$tmp/err" || bad "serve --init: $(cat "$tmp/err")"
[ "$(wc -l < "$tmp/token")" = 1 ] && grep -Eq '^anv_[0-9a-f]{16}_[0-9a-f]{64}$' "$tmp/token" &&
  ok "serve --init printed one token" || bad "serve --init printed: $(cat "$tmp/token")"
"$anvil" serve --init --state "$state" > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc = 4 ] && [ ! -s "$tmp/out" ] && grep -q "has users already" "$tmp/err" && ok "a second --init is refused" ||
  bad "second --init: exit $rc: $(cat "$tmp/out" "$tmp/err")"
admin_token=$(cat "$tmp/token")
export ANVIL_TOKEN=$admin_token

# The hooks: a command that fails the first attempt of job 3's events, and a URL whose receiver
# answers 503 to the first attempt of job 1's.
cat > "$tmp/hook.sh" << 'EOF'
#!/bin/sh
event=$(cat)
if [ "$ANVIL_JOB_ID" = 3 ] && printf '%s' "$event" | grep -q '"delivery_attempt":1,'; then
  echo "hook: failing job 3's first attempt on purpose" >&2
  exit 1
fi
printf '%s\n' "$event" >> "$HOOK_OUT"
EOF
chmod +x "$tmp/hook.sh"
python3 "$(dirname "$0")/tools/hook_receiver.py" "$tmp/hook_url.jsonl" "$tmp/hook_port" 1 &
receiver=$!
for _ in $(seq 100); do [ -s "$tmp/hook_port" ] && break; sleep 0.05; done

start_daemon() {
  rm -f "$state/serve.port"
  # DAEMON_SECRET must not reach the jobs: only the role's environment does.
  DAEMON_SECRET=leaked HOOK_OUT="$tmp/hook_cmd.jsonl" "$anvil" serve --state "$state" --port 0 --stop-grace 3 \
    --max-running 2 --hook-command "$tmp/hook.sh" --hook-url "http://127.0.0.1:$(cat "$tmp/hook_port")/events" \
    >> "$tmp/serve.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [ -s "$state/serve.port" ] && break; sleep 0.05; done
  port=$(cat "$state/serve.port" 2> /dev/null) ||
    { bad "the daemon did not start: $(tail -n 1 "$tmp/serve.log")"; exit 1; }
}
start_daemon
job() { timeout 120 "$anvil" job --state "$state" "$@"; }
admin() { timeout 60 "$anvil" "$1" --state "$state" "${@:2}"; }
# Open MPI's allocations outlive LeakSanitizer (as in cli_dist.sh): no leak checks in the jobs. A spec
# may not set ASAN_OPTIONS (it can name a program to run): the roles do.
asan_off="${ASAN_OPTIONS:-}:detect_leaks=0"
admin role add all --input-prefix "$tmp" --output-prefix "$tmp" --max-procs 4 --max-runtime-s 0 \
  --env "ASAN_OPTIONS=$asan_off" > /dev/null && admin role grant all admin > /dev/null || bad "the admin's role"
# A field of a job's JSON (describe --json), e.g. `field 3 status`.
field() {
  job --json describe "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)$(printf '["%s"]' "${@:2}"))"
}
# (A reader that stops early, grep -q, ends the printing quietly: SIGPIPE at its default.)
history() { job --json describe "$1" | python3 -c "
import json, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
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
submit() { job submit "$@"; }
train=(train --data "$tmp/data" --preset tiny --batch 4 --seq 32 --no-progress --sample-every -1 --seed 9
       --threads 1 --ckpt-every 25 --keep-last 2)

# ---- bad input: 4xx, one line, nothing stored ----
post() {
  curl -s -o "$tmp/answer" -w '%{http_code}' -H "Authorization: Bearer $ANVIL_TOKEN" -X POST \
    "http://127.0.0.1:$port/v1/jobs" --data-binary "$1"
}
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
expect_refusal 400 "keep_alive_s: must be <= 86400 (got 86401)" '{"name": "x", "command": ["train"], "keep_alive_s": 86401}'
expect_refusal 400 "backend: 'pbs' is neither local nor slurm" '{"name": "x", "command": ["train"], "backend": "pbs"}'
expect_refusal 400 "backend: this daemon has no slurm backend (it runs local)" \
  '{"name": "x", "command": ["train"], "backend": "slurm"}'
expect_refusal 400 "resources: unknown field 'gpus'" '{"name": "x", "command": ["train"], "resources": {"gpus": 1}}'
expect_refusal 400 "command: --out is not allowed" '{"name": "x", "command": ["train", "--out", "/tmp/x"]}'
expect_refusal 400 "command: unknown option '--no-such-option' (as 'anvil train' parses it)" \
  '{"name": "x", "command": ["train", "--no-such-option"]}'
expect_refusal 400 "channels.train: $tmp/nonexistent" \
  "{\"name\": \"x\", \"command\": [\"train\"], \"channels\": {\"train\": \"$tmp/nonexistent\"}}"
head -c 70000 /dev/zero | tr '\0' ' ' > "$tmp/big.json"
expect_refusal 413 "larger than 65536 bytes" "@$tmp/big.json"
expect_refusal 400 "metric_definitions: .*does not compile: missing closing parenthesis at offset 13" '{"name": "x", "command": ["train"], "metric_definitions": {"l": "loss ([0-9.]+"}}'
expect_refusal 400 "metric_definitions: .*0 capture groups; it needs exactly one" \
  '{"name": "x", "command": ["train"], "metric_definitions": {"l": "loss [0-9.]+"}}'
expect_refusal 400 "metric_definitions: only a train command" \
  '{"name": "x", "command": ["prep"], "metric_definitions": {"l": "loss ([0-9.]+)"}}'
code=$(curl -s -o "$tmp/answer" -w '%{http_code}' -H "Authorization: Bearer $ANVIL_TOKEN" \
  "http://127.0.0.1:$port/v1/jobs/99")
[ "$code" = 404 ] && ok "unknown job: 404 $(cat "$tmp/answer")" || bad "unknown job: $code"
echo '{"name": "x", "command": ["serve"]}' > "$tmp/bad.json"
job submit "$tmp/bad.json" 2> "$tmp/err"
rc=$?
[ $rc = 4 ] && grep -q "not an anvil subcommand a job can run" "$tmp/err" && ok "anvil job: a refusal exits 4" ||
  bad "anvil job submit of a bad spec: exit $rc: $(cat "$tmp/err")"
[ "$(njobs)" = 0 ] && ok "no refused request stored a job" || bad "refused requests stored jobs"

# ---- submit, wait, Completed (also the reference of the retried run below) ----
submit --name ref --output "$tmp/ref" --metric 'tok_s=\| ([0-9]+) tok/s' -- "${train[@]}" --steps 1200 > "$tmp/out" ||
  bad "submit: $(cat "$tmp/out")"
ref=$(grep -o 'job [0-9]*' "$tmp/out" | cut -d' ' -f2)
job wait "$ref" > "$tmp/out"
rc=$?
[ $rc = 0 ] && grep -q "Completed" "$tmp/out" && [ -f "$tmp/ref/model.safetensors" ] && ok "submit, wait: Completed" ||
  bad "submit, wait: exit $rc: $(cat "$tmp/out"; history "$ref")"
[ "$(history "$ref" | cut -d'|' -f1 | uniq | tr '\n' ' ')" = "Pending Starting Running Completed " ] &&
  ok "history: Pending, Starting, Running, Completed" || bad "history: $(history "$ref")"
job logs "$ref" | grep -q '^\[rank 0\] done: 1200 steps' && ok "logs: the launcher's merged log" || bad "logs"
[ "$(grep -c '"kind":"log".*"tok_s":[0-9]' "$tmp/ref/metrics.jsonl")" -ge 100 ] &&
  ok "metric_definitions: the job's tok_s pulled from its log into metrics.jsonl" ||
  bad "metric_definitions: $(grep -m 2 '"kind":"log"' "$tmp/ref/metrics.jsonl")"
history "$ref" | grep -q '^Running|Training|step [0-9]' &&
  grep -q '"phase":"finishing","time"' "$tmp/ref/heartbeat.json" &&
  ok "the heartbeat: Running (Training) while it trained, 'finishing' last" ||
  bad "heartbeat: $(history "$ref"; cat "$tmp/ref/heartbeat.json")"
job logs "$ref" --rank 0 | grep -q '^done: 1200 steps' && ok "logs --rank 0" || bad "logs --rank 0"

# The table parses it (--dtype is free text there); train itself refuses it.
submit --name usage -- train --synthetic --dtype fp16 > /dev/null
job wait 2 > /dev/null
[ $? = 3 ] && [ "$(field 2 status)" = Failed ] && [ "$(field 2 attempt)" = 1 ] &&
  field 2 failure_reason | grep -q "^usage error, not retried (a retry cannot fix it): exit 2: " &&
  ok "a usage error: Failed, not retried: $(field 2 failure_reason | cut -c1-100)" ||
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
 "output": "$tmp/short", "max_runtime_s": 3, "tags": {"case": "runtime"}}
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

# ---- a configuration error: Failed at once, not retried ----
submit --name badcfg --max-retries 2 -- train --data "$tmp/no-such-data" --preset tiny --no-progress > /dev/null
job wait 10 > /dev/null
[ $? = 3 ] && [ "$(field 10 status)" = Failed ] && [ "$(field 10 attempt)" = 1 ] && [ "$(field 10 exit_code)" = 78 ] &&
  field 10 failure_reason | grep -q "^configuration or input error, not retried (a retry cannot fix it): exit 78: .*no-such-data" &&
  ok "a configuration error (exit 78): Failed, not retried" || bad "configuration error: $(history 10)"

# ---- --max-running 2: the third job waits, then starts when one ends ----
for q in q1 q2 q3; do submit --name $q --output "$tmp/$q" -- "${train[@]}" --steps 100000 > /dev/null; done
wait_steps "$tmp/q1" 30 && wait_steps "$tmp/q2" 30 || bad "the first two queued jobs made no progress"
[ "$(field 13 status)/$(field 13 secondary_status)" = Pending/Queued ] && [ ! -e "$tmp/q3" ] &&
  history 13 | grep -q '^Pending|Queued|waiting: 2 jobs running' &&
  ok "--max-running 2: the third job waits, Pending (Queued)" || bad "queue: $(history 13)"
job stop 11 > /dev/null && job wait 11 > /dev/null
wait_steps "$tmp/q3" 30 && ok "the third job started once the first ended" || bad "the third job did not start: $(history 13)"
job stop 12 > /dev/null && job stop 13 > /dev/null
job wait 12 > /dev/null
job wait 13 > /dev/null
[ "$(field 13 status)" = Stopped ] || bad "queued job 13 did not stop: $(history 13)"

# ---- principals: tokens, admin endpoints, roles and paths, the audit trail ----
# An API call with token $1 (- for none): `call TOKEN METHOD PATH [BODY]` prints the HTTP status,
# the answer is in $tmp/answer.
call() {
  local auth=()
  [ "$1" != - ] && auth=(-H "Authorization: Bearer $1")
  curl -s -o "$tmp/answer" -w '%{http_code}' "${auth[@]}" -X "$2" "http://127.0.0.1:$port$3" ${4:+--data-binary "$4"}
}
# `expect CODE WHAT TOKEN METHOD PATH [BODY]`: the call is answered CODE with a one-line error.
expect() {
  local got
  got=$(call "${@:3}")
  if [ "$got" = "$1" ] && [ "$(wc -l < "$tmp/answer")" = 1 ] && grep -q '"error":' "$tmp/answer"; then
    ok "$2: $got $(cat "$tmp/answer")"
  else bad "$2: expected $1, got $got: $(cat "$tmp/answer")"; fi
}
# ?brief=1: the job's record alone, what pollers ask for; any other value is refused naming the field.
[ "$(call "$admin_token" GET '/v1/jobs/13?brief=1')" = 200 ] && grep -q '"status":"Stopped"' "$tmp/answer" &&
  ! grep -q '"history"' "$tmp/answer" && [ "$(call "$admin_token" GET /v1/jobs/13)" = 200 ] &&
  grep -q '"history"' "$tmp/answer" && ok "GET /v1/jobs/13?brief=1: the status without the history" ||
  bad "brief: $(cat "$tmp/answer")"
expect 400 "brief=2" "$admin_token" GET '/v1/jobs/13?brief=2'
expect 400 "an unknown parameter on a job" "$admin_token" GET '/v1/jobs/13?verbose=1'
njobs_before=$(njobs)
wrong=${admin_token%?}$([ "${admin_token: -1}" = 0 ] && echo 1 || echo 0)
expect 401 "no token" - GET /v1/jobs
expect 401 "a malformed token" not-a-token GET /v1/health
expect 401 "a wrong secret" "$wrong" GET /v1/jobs
expect 401 "a wrong secret on a change" "$wrong" POST /v1/users '{"name": "mallory", "admin": true}'
grep -q 'WWW-Authenticate: Bearer' <(curl -s -i "http://127.0.0.1:$port/v1/health") &&
  ok "401 says WWW-Authenticate: Bearer" || bad "no WWW-Authenticate on a 401"
alice=$(admin user add alice 2> /dev/null) && bob=$(admin user add bob 2> /dev/null) || bad "user add"
extra=$(admin token add alice 2> /dev/null) || bad "token add"
admin token revoke "$(echo "$extra" | cut -c5-20)" | grep -q "revoked token" || bad "token revoke"
expect 401 "a revoked token" "$extra" GET /v1/jobs
expect 409 "revoking the last admin token" "$admin_token" POST "/v1/tokens/$(echo "$admin_token" | cut -c5-20)/revoke"
expect 403 "a user adds a user" "$alice" POST /v1/users '{"name": "mallory", "admin": true}'
expect 403 "a user makes a token" "$alice" POST /v1/tokens '{"user": "bob"}'
expect 403 "a user revokes a token" "$alice" POST "/v1/tokens/$(echo "$admin_token" | cut -c5-20)/revoke"
expect 403 "a user adds a role" "$alice" POST /v1/roles \
  '{"name": "mine", "input_prefixes": ["/"], "output_prefixes": ["/"], "max_procs": 64, "max_runtime_s": 0}'
expect 403 "a user grants a role" "$alice" POST /v1/roles/all/grant '{"user": "alice"}'
expect 403 "a user lists users" "$alice" GET /v1/users
expect 403 "a user reads the audit trail" "$alice" GET /v1/audit
ANVIL_TOKEN=$alice timeout 60 "$anvil" job --state "$state" audit > /dev/null 2> "$tmp/err"
[ $? = 4 ] && ! grep -q "$alice" "$tmp/err" && ok "anvil job audit as a user: exit 4, the token not printed" ||
  bad "job audit as a user: $(cat "$tmp/err")"
expect 400 "a role with an unknown field" "$admin_token" POST /v1/roles \
  '{"name": "x", "input_prefixes": ["/"], "output_prefixes": ["/"], "max_procs": 1, "max_runtime_s": 0, "gpus": 1}'
expect 400 "a role with a negative limit" "$admin_token" POST /v1/roles \
  '{"name": "x", "input_prefixes": ["/"], "output_prefixes": ["/"], "max_procs": 1, "max_runtime_s": -1}'
expect 400 "a role with a relative prefix" "$admin_token" POST /v1/roles \
  '{"name": "x", "input_prefixes": ["data"], "output_prefixes": ["/"], "max_procs": 1, "max_runtime_s": 0}'

# alice may read $tmp/inputs/a and the corpus, write $tmp/alice; $tmp/inputs/a/escape leads out.
mkdir -p "$tmp/inputs/a/set" "$tmp/inputs/ab" "$tmp/secret" "$tmp/alice"
ln -s "$tmp/secret" "$tmp/inputs/a/escape"
admin role add team --input-prefix "$tmp/inputs/a" --input-prefix "$tmp/data" --output-prefix "$tmp/alice" \
  --max-procs 2 --max-runtime-s 600 --env ROLE_MARK=blue --env "ASAN_OPTIONS=$asan_off" > /dev/null &&
  admin role grant team alice > /dev/null ||
  bad "role add, grant"
spec() { # a spec of alice's: `spec '"channels": {...}, ...'`
  echo "{\"name\": \"a\", \"command\": [\"train\", \"--data\", \"$tmp/data\", \"--preset\", \"tiny\"], $1}"
}
expect 403 "an ungranted role" "$alice" POST /v1/jobs "$(spec '"role": "all"')"
expect 403 "a user without a role" "$bob" POST /v1/jobs "$(spec '"max_retries": 0')"
admin role grant team admin > /dev/null || bad "role grant team admin"
expect 400 "several roles, none named" "$admin_token" POST /v1/jobs "$(spec '"max_retries": 0')"
grep -q "name one of: all, team" "$tmp/answer" || bad "the 400 does not name the roles: $(cat "$tmp/answer")"
expect 403 "a channel outside the prefixes" "$alice" POST /v1/jobs "$(spec "\"channels\": {\"t\": \"$tmp/secret\"}")"
expect 403 "a '..' escape" "$alice" POST /v1/jobs "$(spec "\"channels\": {\"t\": \"$tmp/inputs/a/../ab\"}")"
grep -q "channels.t: $tmp/inputs/a/../ab is outside role team's" "$tmp/answer" ||
  bad "the '..' refusal does not name the path as given: $(cat "$tmp/answer")"
expect 403 "a symbolic link out of the prefix" "$alice" POST /v1/jobs \
  "$(spec "\"channels\": {\"t\": \"$tmp/inputs/a/escape\"}")"
# Where the host's link leads is not the submitter's to learn.
grep -q "$tmp/secret\|resolved" "$tmp/answer" && bad "the refusal says where the link leads: $(cat "$tmp/answer")"
# Lexically inside (/a/ab), but the kernel takes '..' from the link's target: $tmp/ab.
expect 403 "a symbolic link, then '..'" "$alice" POST /v1/jobs \
  "$(spec "\"channels\": {\"t\": \"$tmp/inputs/a/escape/../ab\"}")"
expect 403 "the prefix /a does not admit /ab" "$alice" POST /v1/jobs \
  "$(spec "\"channels\": {\"t\": \"$tmp/inputs/ab\"}")"
expect 403 "an output outside the prefixes" "$alice" POST /v1/jobs "$(spec "\"output\": \"$tmp/alice/../ref\"")"
expect 403 "a command path outside the prefixes" "$alice" POST /v1/jobs \
  "{\"name\": \"a\", \"command\": [\"train\", \"--data\", \"$tmp/inputs/a/escape/x\"]}"
expect 403 "too many processes" "$alice" POST /v1/jobs "$(spec '"resources": {"procs_per_host": 3}')"
expect 403 "a runtime over the role's" "$alice" POST /v1/jobs "$(spec '"max_runtime_s": 601')"
expect 403 "a reserved variable" "$alice" POST /v1/jobs "$(spec '"env": {"LD_PRELOAD": "/tmp/x.so"}')"
expect 400 "an unknown query parameter" "$alice" GET "/v1/jobs?owner=bob"
[ "$(njobs)" = "$njobs_before" ] && ok "no refused request stored a job" || bad "refused requests stored jobs"

# Accepted: paths inside the prefixes (/a admits /a/set, named through a '..' that stays inside);
# the job's environment is the role's. Two ranks, whose logs the dashboard shows below: rank 1
# logs nothing while it trains.
python3 - "$tmp" "${train[@]}" --steps 100000 > "$tmp/alice.json" << 'PY'
import json, sys
tmp = sys.argv[1]
print(json.dumps({"name": "alices", "command": sys.argv[2:], "output": tmp + "/alice/run",
                  "channels": {"set": tmp + "/inputs/a/set/../set"}, "resources": {"procs_per_host": 2},
                  "env": {"ANVIL_S3_MAX_ATTEMPTS": "5"}}))
PY
ANVIL_TOKEN=$alice job submit "$tmp/alice.json" > "$tmp/out" 2> "$tmp/err" || bad "alice's submit: $(cat "$tmp/err")"
mine=$(grep -o 'job [0-9]*' "$tmp/out" | cut -d' ' -f2)
ANVIL_TOKEN=$alice job --json describe "$mine" > "$tmp/mine.json"
python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['spec']; print(s['max_runtime_s'], s['channels']['set'])" \
  "$tmp/mine.json" > "$tmp/out"
[ "$(cat "$tmp/out")" = "600 $tmp/inputs/a/set" ] &&
  ok "accepted under the role: max_runtime_s the role's 600 s, the channel stored resolved" ||
  bad "alice's job: $(cat "$tmp/out")"
wrapper=
for _ in $(seq 600); do
  wrapper=$(pgrep -f "job-run --exit-file $state/jobs/$mine/" | head -n 1)
  [ -n "$wrapper" ] && break
  sleep 0.1
done
tr '\0' '\n' < "/proc/$wrapper/environ" > "$tmp/environ" 2> /dev/null
if grep -qx ROLE_MARK=blue "$tmp/environ" && grep -qx ANVIL_S3_MAX_ATTEMPTS=5 "$tmp/environ" &&
   grep -qx "ANVIL_JOB_ID=$mine" "$tmp/environ" && grep -q '^PATH=' "$tmp/environ" &&
   ! grep -q DAEMON_SECRET "$tmp/environ" && ! grep -q '^ANVIL_TOKEN=' "$tmp/environ"; then
  ok "the job's environment: the role's and the spec's variables, not the daemon's others"
else bad "the job's environment: $(sort "$tmp/environ" | tr '\n' ' ')"; fi
# ---- quotas: refused at once with 429, naming the quota and its figures ----
admin quota set --user alice --running-jobs 1 > /dev/null && admin quota set --role all --procs 1 > /dev/null ||
  bad "quota set"
sed "s|$tmp/alice/run|$tmp/alice/run2|" "$tmp/alice.json" > "$tmp/alice2.json"
ANVIL_TOKEN=$alice job submit "$tmp/alice2.json" > /dev/null 2> "$tmp/err"
rc=$?
[ $rc = 4 ] && grep -q "ResourceLimitExceeded: user alice: running_jobs 1 in use + 1 requested > 1" "$tmp/err" &&
  ok "quota: alice's second job refused: $(cat "$tmp/err")" || bad "alice's quota: exit $rc: $(cat "$tmp/err")"
expect 429 "ResourceLimitExceeded: role all: procs 0 in use + 2 requested > 1" "$admin_token" POST /v1/jobs \
  "{\"name\": \"wide\", \"role\": \"all\", \"command\": [\"train\"], \"resources\": {\"procs_per_host\": 2}}"
grep -q '"error":"ResourceLimitExceeded: role all: procs 0 in use + 2 requested > 1"' "$tmp/answer" ||
  bad "the role's quota: $(cat "$tmp/answer")"
ANVIL_TOKEN=$alice admin quota > "$tmp/out" 2>&1
grep -q "^user alice  *1 / 1 " "$tmp/out" && ! grep -q "role all" "$tmp/out" &&
  ok "anvil quota: alice sees her own quota and its usage, not the role she lacks" || bad "anvil quota: $(cat "$tmp/out")"
admin quota set --user alice > /dev/null && admin quota set --role all > /dev/null || bad "quota removal"
[ "$(admin quota --json | python3 -c "import json,sys; print(len(json.load(sys.stdin)['quotas']))")" = 0 ] &&
  ok "quota set without limits removes it" || bad "quotas left: $(admin quota)"
expect 404 "another user's job (describe)" "$bob" GET "/v1/jobs/$mine"
expect 404 "another user's job (stop)" "$bob" POST "/v1/jobs/$mine/stop"
expect 404 "another user's job (logs)" "$bob" GET "/v1/jobs/$mine/logs"
[ "$(ANVIL_TOKEN=$bob job --json list | python3 -c "import json,sys; print(len(json.load(sys.stdin)['jobs']))")" = 0 ] &&
  ok "a user lists only their own jobs" || bad "bob sees jobs"
[ "$(call "$admin_token" GET "/v1/jobs/$mine")" = 200 ] && ok "an admin sees every job" || bad "admin describe"
# ---- the dashboard, in a real browser, while alice's job runs ----
dom() { timeout 60 chromium --headless --no-sandbox --disable-gpu --virtual-time-budget=5000 --dump-dom "$1" 2> /dev/null; }
if command -v chromium > /dev/null; then
  dom "http://127.0.0.1:$port/#token=$admin_token&job=1" > "$tmp/dom.html"
  python3 - "$tmp/dom.html" "$mine" "$(njobs)" > "$tmp/out" << 'PY'
import re, sys
dom, mine, njobs = open(sys.argv[1]).read(), sys.argv[2], int(sys.argv[3])
rows = re.findall(r'<tr class="job[^"]*" data-id="(\d+)">(.*?)</tr>', dom)
status = {i: re.search(r'class="status (\w+)"', r).group(1) for i, r in rows}
loss = re.search(r'<polyline class="curve run0 loss"[^>]*points="([^"]*)"', dom)
checks = {
    "every job listed": len(rows) == njobs,
    "the finished job 1 Completed": status.get("1") == "Completed",
    "alice's job Running": status.get(mine) == "Running",
    "job 1's loss curve has its 1200 points": loss is not None and len(loss.group(1).split()) == 1200,
    "its history shown": dom.count('<td class="status Completed">Completed</td>') >= 2,
    "its last log lines": "done: 1200 steps" in dom,
}
for name, good in checks.items():
    print(("ok " if good else "BAD ") + name)
PY
  grep -q BAD "$tmp/out" && bad "dashboard: $(grep BAD "$tmp/out" | tr '\n' ' ')" ||
    ok "dashboard (headless Chromium): the jobs with their statuses, job 1's history, curves of 1200 points and log"
  dom "http://127.0.0.1:$port/" > "$tmp/dom.html"
  ! grep -q 'data-id=' "$tmp/dom.html" && grep -q 'enter an API token' "$tmp/dom.html" &&
    ok "dashboard without a token: no data, a prompt for one" || bad "dashboard without a token shows data"
  # Layout, read through the DevTools protocol at 1300 px: nothing wider than the window, no table
  # scrolled sideways in its section, and what a job's detail says.
  chromium --headless --no-sandbox --disable-gpu --window-size=1300,900 --remote-debugging-port=0 \
    --user-data-dir="$tmp/chromium" about:blank > /dev/null 2>&1 &
  browser=$!
  for _ in $(seq 200); do [ -s "$tmp/chromium/DevToolsActivePort" ] && break; sleep 0.1; done
  layout='(async () => {
    for (let i = 0; i < 100 && !document.querySelector("#logs div"); i++) await new Promise(r => setTimeout(r, 100));
    const wide = [...document.querySelectorAll("section, .scroll")].filter(e => e.scrollWidth > e.clientWidth)
      .map(e => (e.id || e.className || e.tagName) + " " + e.scrollWidth + ">" + e.clientWidth);
    const facts = Object.fromEntries([...document.querySelectorAll("#facts tr")].map(r => [r.cells[0].textContent, r.cells[1].textContent]));
    return JSON.stringify({window: innerWidth, page: document.documentElement.scrollWidth, wide,
      headings: [...document.querySelectorAll("h2")].map(h => h.textContent), exit: facts["exit code"],
      empty_logs: [...document.querySelectorAll("#logs pre")].filter(p => !p.textContent).length,
      logs: [...document.querySelectorAll("#logs > div")].map(h => ({rank: h.textContent,
        box: h.nextElementSibling.tagName.toLowerCase() + "." + h.nextElementSibling.className,
        text: h.nextElementSibling.textContent, height: h.nextElementSibling.getBoundingClientRect().height})),
      hint: document.getElementById("hint").hidden ? "" : document.getElementById("hint").textContent,
      rows: document.querySelectorAll("#jobs tr").length, address: location.href});
  })()'
  cdp=$(head -n 1 "$tmp/chromium/DevToolsActivePort" 2> /dev/null)
  for job in 1 "$mine"; do
    python3 tools/cdp_eval.py "$cdp" "http://127.0.0.1:$port/#token=$admin_token&job=$job" "$layout" > "$tmp/layout.json" 2>&1
    # Rank 1's log, read after the page was: empty now, it was empty when the page read it.
    rank1=$(cat "$tmp/alice/run/logs/rank_1.log" 2> /dev/null | wc -c)
    python3 - "$tmp/layout.json" "$job" "$mine" "$rank1" > "$tmp/out" 2>&1 << 'PY'
import json, sys
try:
    l = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit(open(sys.argv[1]).read())
running = sys.argv[2] == sys.argv[3]
shown = lambda b: b["height"] > 0 and (b["box"] == "pre.log" and b["text"] != "" or
                                       b["box"] == "p.muted log-empty" and b["text"] == "nothing logged yet")
checks = {
    "a window 1300 px wide": l["window"] == 1300,
    "the page no wider than the window": l["page"] <= l["window"],
    "no section or table scrolled sideways": not l["wide"],
    "the facts under 'Run, limits and command', no 'Metrics' heading": "Run, limits and command" in l["headings"]
        and "Metrics" not in l["headings"],
    "no empty log box": l["empty_logs"] == 0,
    "a log box per rank: " + str([b["rank"] for b in l["logs"]]):
        [b["rank"] for b in l["logs"]] == (["rank 0", "rank 1"] if running else ["rank 0"]),
    "each rank's box shows its lines or says nothing was logged yet": all(shown(b) for b in l["logs"]),
    "rank 1, with nothing logged, says so": not running or sys.argv[4] != "0"
        or l["logs"][1:] and l["logs"][1]["text"] == "nothing logged yet",
    "the exit code: " + str(l["exit"]): l["exit"] == ("none yet: running" if running else "0"),
}
bad = [name for name, good in checks.items() if not good]
print("BAD " + "; ".join(bad) + ": " + json.dumps(l) if bad else "ok")
PY
    [ "$(cat "$tmp/out")" = ok ] &&
      ok "dashboard at 1300 px, job $job: nothing overflows; facts, exit code and each rank's log box shown right" ||
      bad "dashboard at 1300 px, job $job: $(cat "$tmp/out")"
  done
  # A token after '?': the page (not a JSON 401), the token used, and a pointer to '#token='.
  [ "$(curl -s -o /dev/null -w '%{http_code} %{content_type}' "http://127.0.0.1:$port/?token=$admin_token")" = \
    "200 text/html; charset=utf-8" ] && ok "GET /?token=... answers the page" || bad "GET /?token=... is not the page"
  python3 tools/cdp_eval.py "$cdp" "http://127.0.0.1:$port/?token=$admin_token" "$layout" > "$tmp/layout.json" 2>&1
  python3 -c 'import json, sys; l = json.load(open(sys.argv[1]))
sys.exit(not (l["rows"] > 0 and "/#token=" in l["hint"] and "?" not in l["address"]))' "$tmp/layout.json" 2> /dev/null &&
    ok "/?token=...: the jobs shown, the address cleaned, and a pointer to #token=" ||
    bad "/?token=... in a browser: $(cat "$tmp/layout.json")"
  kill "$browser" 2> /dev/null
  wait "$browser" 2> /dev/null
else missing "chromium is not installed: the dashboard is not loaded"; fi

ANVIL_TOKEN=$alice job stop "$mine" > /dev/null && ANVIL_TOKEN=$alice job wait "$mine" > /dev/null
[ $? = 3 ] && [ "$(field "$mine" status)" = Stopped ] && ok "alice stops her job" || bad "alice's stop: $(history "$mine")"

# The audit trail: every refusal and change above, with who and which token.
admin_id=$(echo "$admin_token" | cut -c5-20) alice_id=$(echo "$alice" | cut -c5-20)
job --json audit --limit 1000 > "$tmp/audit.json"
python3 - "$tmp/audit.json" "$alice_id" "$admin_id" "$mine" > "$tmp/out" << 'PY'
import collections, json, sys
rows = json.load(open(sys.argv[1]))["audit"]
alice_id, admin_id, mine = sys.argv[2], sys.argv[3], sys.argv[4]
count = collections.Counter((r["user"], r["action"], r["result"]) for r in rows)
checks = {
    "401s with no user": count[("", "auth", 401)] >= 5,
    "alice's refused submits": count[("alice", "job.submit", 403)] == 11,
    "alice's 403s on admin endpoints": sum(count[("alice", a, 403)] for a in
        ("user.add", "token.add", "token.revoke", "role.add", "role.grant", "user.list", "audit.list")) == 8,
    "bob's 404s": count[("bob", "job.get", 404)] == 1 and count[("bob", "job.stop", 404)] == 1,
    "alice's submit and stop": any(r["action"] == "job.submit" and r["result"] == 201 and r["target"] == "job " + mine
                                   and r["token_id"] == alice_id for r in rows)
                               and count[("alice", "job.stop", 202)] == 1,
    "the admin's changes": count[("admin", "user.add", 201)] == 2 and count[("admin", "token.revoke", 200)] == 1
                           and count[("admin", "token.revoke", 409)] == 1
                           and all(r["token_id"] == admin_id for r in rows if r["user"] == "admin"
                                   and r["action"] != "serve.init"),
    "the escape named as given": any("/inputs/a/escape is outside role team's" in r["detail"] for r in rows
                                     if r["user"] == "alice" and r["result"] == 403),
    "no token in the trail": not any(len(v) > 40 and v.startswith("anv_") for r in rows for v in r.values()
                                     if isinstance(v, str)),
}
for name, good in checks.items():
    print(("ok " if good else "BAD ") + name)
PY
grep -q BAD "$tmp/out" && bad "audit trail: $(grep BAD "$tmp/out" | tr '\n' ' ')" ||
  ok "the audit trail holds every refusal and change ($(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['audit']))" "$tmp/audit.json") entries)"
python3 - "$state/state.db" > "$tmp/out" 2>&1 << 'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for sql in ("UPDATE audit SET result = 200", "DELETE FROM audit"):
    try:
        db.execute(sql)
        print("allowed: " + sql)
    except sqlite3.DatabaseError as e:
        print("refused: " + str(e))
PY
[ "$(grep -c 'refused: the audit trail is append-only' "$tmp/out")" = 2 ] &&
  ok "the audit table refuses UPDATE and DELETE" || bad "audit table: $(cat "$tmp/out")"
# ---- GET /metrics: the service in Prometheus's format, for admins ----
[ "$(call "$alice" GET /metrics)" = 403 ] && ok "/metrics: 403 for a user who is not an admin" ||
  bad "/metrics for alice: $(cat "$tmp/answer")"
if [ "$(call "$admin_token" GET /metrics)" = 200 ]; then
  cp "$tmp/answer" "$tmp/metrics.txt"
  promtool check metrics < "$tmp/metrics.txt" > "$tmp/promtool.out" 2>&1 && ok "/metrics: promtool accepts the page" ||
    bad "promtool check metrics: $(head -n 3 "$tmp/promtool.out")"
  job --json list > "$tmp/list.json"
  python3 - "$tmp/metrics.txt" "$tmp/list.json" "$tmp/ref/metrics.jsonl" > "$tmp/out" << 'PY'
import collections, json, re, sys
samples = {}
for line in open(sys.argv[1]):
    m = re.match(r'^([a-z_]+)(\{.*\})? (\S+)$', line.strip())
    if m:
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        samples.setdefault(m.group(1), []).append((labels, float(m.group(3))))
def one(metric, **want):
    got = [v for l, v in samples.get(metric, []) if all(l.get(k) == str(w) for k, w in want.items())]
    return got[0] if len(got) == 1 else None
jobs = json.load(open(sys.argv[2]))["jobs"]
by_status = collections.Counter(j["status"] for j in jobs)
last = [json.loads(l) for l in open(sys.argv[3]) if '"kind":"train"' in l][-1]
checks = {
    "jobs by status": all(one("anvil_serve_jobs", status=s) == by_status.get(s, 0)
                          for s in ("Pending", "Running", "Completed", "Failed", "Stopped")),
    "submissions": one("anvil_serve_submissions_total") == len(jobs),
    "retries (jobs 3, 4 and 8)": one("anvil_serve_retries_total") == 3,
    "hangs (job 8)": one("anvil_serve_hangs_total") == 1,
    "job 1's info": one("anvil_job_info", job_id=1, name="ref", status="Completed") == 1,
    "job 1's last loss": one("anvil_job_train_loss", job_id=1, name="ref") == last["loss"],
    "job 1's step": one("anvil_job_step", job_id=1, name="ref") == 1200,
    "submit latencies": one("anvil_serve_api_request_seconds_count", action="job.submit") >= len(jobs),
    "refusals counted": one("anvil_serve_api_requests_total", action="metrics", code=403) == 1,
}
for name, good in checks.items():
    print(("ok " if good else "BAD ") + name)
PY
  # The page's loss is read from metrics.jsonl's text and printed exactly: compared for equality.
  grep -q BAD "$tmp/out" && bad "/metrics: $(grep BAD "$tmp/out" | tr '\n' ' ')" ||
    ok "/metrics: jobs by status, counters, each job's info, step and last loss, request latencies"
else bad "/metrics for the admin: $(cat "$tmp/answer")"; fi

# ---- Completed is the command's word, not its exit status ----
# Job 1's history says its completion record was verified: the step and target, and the model file's size
# and CRC-32C, which agree with the file's as a bitwise CRC-32C of Python's reads it.
python3 - "$tmp/ref/model.safetensors" "$(history 1 | grep '^Completed|')" << 'PY' > "$tmp/out"
import os, re, sys
path, line = sys.argv[1], sys.argv[2]
table = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    table.append(c)
crc = 0xFFFFFFFF
for b in open(path, "rb").read():
    crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
want = f"model.safetensors {os.path.getsize(path)} bytes, CRC-32C {crc ^ 0xFFFFFFFF:08x}"
m = re.search(r"exit 0: train finished \(its completion record verified: step 1200 of 1200, (.*)\)$", line)
print("ok" if m and m.group(1) == want else f"BAD: {line!r} vs {want!r}")
PY
[ "$(cat "$tmp/out")" = ok ] && ok "Completed: $(history 1 | grep '^Completed|' | cut -d'|' -f3 | cut -c1-150)" ||
  bad "job 1's completion: $(cat "$tmp/out")"
# A job whose command ends with exit 0 without its word (the test hook stands in for a lost node's ranks,
# whose launcher exits 0 while they have not finished): a failure, retried, then Failed with the cause.
submit --name noword --role all --max-retries 1 --output "$tmp/noword" --env ANVIL_TEST_NO_COMPLETION=1 -- \
  "${train[@]}" --steps 30 > "$tmp/out" 2>&1 || bad "submit: $(cat "$tmp/out")"
noword=$(grep -o 'job [0-9]*' "$tmp/out" | cut -d' ' -f2)
job wait "$noword" > /dev/null
rc=$?
reason=$(field "$noword" failure_reason)
why="exit 0, but not the command's word that it finished: $tmp/noword/completion.json is missing"
if [ $rc = 3 ] && [ "$(field "$noword" status)" = Failed ] && [ "$(field "$noword" attempt)" = 2 ] &&
   [ "$reason" = "attempt 2 of 2 failed: $why: the command never said it finished" ] &&
   history "$noword" | grep -qF "Starting|Retrying (1/1)|$why" && [ -f "$tmp/noword/model.safetensors" ]; then
  ok "exit 0 without the completion record: retried, then Failed: $reason"
else bad "exit 0 without a record: exit $rc: $(history "$noword")"; fi
job --json describe "$noword" | python3 -c "
import json, sys
a = json.load(sys.stdin)['attempts']
sys.exit(not (len(a) == 2 and [x['exit_code'] for x in a] == [0, 0] and all(x['backend'] == 'local' and
    'completion.json is missing' in x['outcome'] and x['ended_at'] >= x['started_at'] > 0 for x in a)))" &&
  ok "describe --json keeps both attempts: exit 0 each, the outcome naming the missing record" ||
  bad "attempts: $(job --json describe "$noword" | python3 -c "import json,sys; print(json.load(sys.stdin)['attempts'])")"
job describe "$noword" > "$tmp/out"
[ "$(grep -c "^  [12]  local  session [0-9]* ([0-9]* live processes), started .*, ended .*, exit 0$" "$tmp/out")" = 2 ] &&
  ok "describe (text): both attempts, their sessions and exits" || bad "describe text: $(cat "$tmp/out")"

# A retry waits while the run folder's lock is held (here by flock(1), standing in for a process of an
# earlier attempt that is still alive), and starts once it is free. Attempt 1 is refused the folder.
mkdir -p "$tmp/fenced"
# -o: flock itself holds the lock (its sleep does not inherit it), so ending flock frees it.
flock -o "$tmp/fenced/lock" sleep 600 &
holder=$!
submit --name fenced --role all --max-retries 1 --output "$tmp/fenced" -- "${train[@]}" --steps 30 > "$tmp/out" 2>&1 ||
  bad "submit: $(cat "$tmp/out")"
fenced=$(grep -o 'job [0-9]*' "$tmp/out" | cut -d' ' -f2)
for _ in $(seq 600); do [ "$(field "$fenced" secondary_status)" = Fencing ] && break; sleep 0.1; done
sleep 1
[ "$(field "$fenced" status)/$(field "$fenced" secondary_status)/$(field "$fenced" attempt)" = Starting/Fencing/2 ] &&
  grep -qF "Starting|Fencing|attempt 2 waits until no process of attempt 1 can write the run folder: $tmp/fenced/lock is held by" \
    <<< "$(history "$fenced")" && ok "a retry waits while the run lock is held: Starting (Fencing)" ||
  bad "fence: $(history "$fenced")"
kill $(pgrep -P "$holder") "$holder"
wait "$holder" 2> /dev/null
job wait "$fenced" > /dev/null
[ "$(field "$fenced" status)" = Completed ] && [ "$(field "$fenced" attempt)" = 2 ] &&
  ok "... and starts once it is free: Completed" || bad "after the fence: $(history "$fenced")"

# ---- a Llama job: the service runs the family as it runs GPT-2 ----
submit --name llama --role all --output "$tmp/llama" -- train --data "$tmp/data" --preset llama-tiny --batch 4 --seq 32 \
  --no-progress --sample-every -1 --seed 9 --threads 1 --steps 20 > "$tmp/out" 2>&1 || bad "submit: $(cat "$tmp/out")"
llama=$(grep -o 'job [0-9]*' "$tmp/out" | cut -d' ' -f2)
job wait "$llama" > /dev/null
rc=$?
arch=$("$anvil" export --model "$tmp/llama" --out "$tmp/llama_hf" > /dev/null 2>&1 &&
  python3 -c "import json; print(json.load(open('$tmp/llama_hf/config.json'))['architectures'][0])")
[ $rc = 0 ] && [ "$(field "$llama" status)" = Completed ] && [ "$arch" = LlamaForCausalLM ] &&
  history "$llama" | grep -q "^Completed|.*completion record verified: step 20 of 20" &&
  ok "a llama-tiny job: Completed, its completion record verified, and its model exports as $arch" ||
  bad "the llama-tiny job: exit $rc, model '$arch': $(history "$llama")"

# A stop the service did not ask for (the trainer's checkpoint-and-stop, SIGUSR1, sent to the rank from
# outside, as a preemption would): exit 75 is no stop request, but a failure, retried from the checkpoint.
submit --name outside --role all --max-retries 1 --output "$tmp/outside" -- "${train[@]}" --steps 600 > "$tmp/out" 2>&1 ||
  bad "submit: $(cat "$tmp/out")"
outside=$(grep -o 'job [0-9]*' "$tmp/out" | cut -d' ' -f2)
wait_steps "$tmp/outside" 30 || bad "the job to signal made no progress"
kill -USR1 "$(rank_pid "$tmp/outside")"
job wait "$outside" > /dev/null
rc=$?
if [ $rc = 0 ] && [ "$(field "$outside" attempt)" = 2 ] &&
   history "$outside" | grep -q "^Starting|Retrying (1/1)|exit 75: stopped by a signal the service did not send" &&
   ! history "$outside" | grep -q "^Stopped|" &&
   grep -q "resumed from .*step_" "$tmp/outside/logs/launcher.log"; then
  ok "exit 75 without a stop request: Retrying (1/1) ($(history "$outside" | grep -o 'stopped by a signal the service did not send')), resumed, Completed"
else bad "unrequested exit 75: exit $rc: $(history "$outside")"; fi

# ---- hooks: every primary status change of every job, once each, in order, by both hooks ----
# `hooks_check`: prints what is still wrong (nothing once every delivery is in).
hooks_check() {
  job --json list | python3 -c "import json,sys; print(' '.join(str(j['id']) for j in json.load(sys.stdin)['jobs']))" |
    tr ' ' '\n' | while read -r id; do job --json describe "$id"; done > "$tmp/described.jsonl"
  python3 - "$tmp/described.jsonl" "$tmp/hook_cmd.jsonl" "$tmp/hook_url.jsonl" << 'PY'
import json, sys
text, jobs, at = open(sys.argv[1]).read(), [], 0
while text[at:].strip():
    job, at = json.JSONDecoder().raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
    jobs.append(job)
def events(path):
    try:
        return [json.loads(line) for line in open(path)]
    except FileNotFoundError:
        return []
cmd, url = events(sys.argv[2]), events(sys.argv[3])
for kind, got in (("command", cmd), ("url", url)):
    ids = [e["event_id"] for e in got]
    if len(ids) != len(set(ids)):
        print(f"{kind}: an event delivered twice")
    for j in jobs:
        h = j["history"]
        changes = [e["status"] for i, e in enumerate(h) if i == 0 or e["status"] != h[i - 1]["status"]]
        mine = [e["status"] for e in sorted(got, key=lambda e: e["event_id"]) if e["job_id"] == j["id"]]
        if mine != changes:
            print(f"{kind}: job {j['id']}: delivered {mine}, its status changes {changes}")
        rows = [d for d in j["hooks"] if d["hook"] == kind]
        if len(rows) != len(changes) or any(not d["delivered_at"] for d in rows):
            print(f"{kind}: job {j['id']}: describe's deliveries {rows}")
        want = 2 if (kind, j["id"]) in (("command", 3), ("url", 1)) else 1
        if any(d["attempts"] != want for d in rows):
            print(f"{kind}: job {j['id']}: attempts {[d['attempts'] for d in rows]}, expected {want} each")
for e in url:
    if e["header_id"] != str(e["event_id"]) or e["job"]["id"] != e["job_id"]:
        print(f"url: event {e['event_id']}: header {e['header_id']}, job {e['job']['id']}")
PY
}
for _ in $(seq 150); do [ -z "$(hooks_check)" ] && break; sleep 0.2; done
problems=$(hooks_check)
[ -z "$problems" ] &&
  ok "hooks: $(grep -c . "$tmp/hook_cmd.jsonl") status changes of $(njobs) jobs, each delivered once and in order by the command and the URL, failed first attempts retried" ||
  bad "hooks: $problems"
grep -q "failing job 3's first attempt on purpose" "$state/hooks.log" &&
  grep -q "hook URL: job 1 Pending (event [0-9]*): answered HTTP 503; attempt 1 of 8, next in 1 s" "$tmp/serve.log" &&
  ok "hooks: the command's output in hooks.log, failed attempts logged" || bad "hooks' logs: $(grep hook "$tmp/serve.log" | head -n 3)"

kill $daemon
wait $daemon
[ $? = 0 ] && ok "SIGTERM: the daemon exits 0" || bad "the daemon did not exit cleanly: $(tail -n 2 "$tmp/serve.log")"
kill $receiver
exit $fails
