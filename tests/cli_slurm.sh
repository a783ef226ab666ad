#!/usr/bin/env bash
# The job service's Slurm backend against a real Slurm: a private munged, slurmctld and three slurmd
# "nodes" n1-n3 on this machine (tests/tools/slurm_cluster.sh), brought up once and stopped by PID
# at the end; one `anvil serve --backend slurm --partition test`, tiny models:
#   - a 2-node x 1-process training job in a run folder whose name holds a blank, '#', quotes, '%j' and
#     a backslash (on sbatch's command line, not in an #SBATCH line): Completed, its log where the
#     daemon reads it, its batch script carrying the sbatch options, its
#     final weights bit-identical to a local `anvil launch -n 2` run of the same command;
#   - a job needing more nodes than the cluster has: Failed at once with sbatch's reason;
#   - a spec with "backend": "local": run on this machine by the same daemon;
#   - the per-node pre-flight health check with n2 made to fail it (ANVIL_HEALTH_FAULT=...@n2): n2
#     excluded with anvil health's reason, a new allocation on n1 and n3, Completed, max_retries 0
#     untouched; with 3 nodes asked, too few are left: Failed with Slurm's reason;
#   - SIGKILL of the rank on n2, by `anvil chaos --schedule "step:110 kill-rank:1, step:150 kill-attempt"`
#     (srun on n2): the history names the fault (rank, pid, node), describe names n2 excluded and why,
#     the history names the first killed rank and its node, the retry is a new batch job with
#     --exclude=n2 that runs on n1 and n3, resumes from the checkpoint; the retry's every process killed
#     (scancel --signal=KILL --full): retried again, no node blamed; the job ends bit-identical; job
#     goodput's parts add up to the wall time within 1% and both faults are priced;
#   - max_runtime_s: the graceful stop through scancel --batch, a checkpoint, Stopped (exit 75);
#   - warm pools: a job with keep_alive_s completes while its batch job holds the allocation
#     (Available); a job of the same shape runs in it (Reused, the same Slurm job ID, no sbatch) and
#     gives it back (Available); a 1-host job gets its own Slurm job; the TTL ends the holder
#     (Terminated, gone from squeue); anvil pool list; the held hosts count in the hosts quota (429);
#     a job in the 600 s pool stopped (checkpoint, exit 75) and one killed after the grace (its
#     ranks frozen): its step alone ends, the pool Available again; anvil quota shows the pool's
#     hosts; anvil pool release ends the pool at once, and a second release is refused (409); a step that
#     exits 0 with another job's completion record (copied in) keeps no pool, and its job is Failed;
#   - a stop while a 2-node job is Launching (a test hook holds its ranks before their handlers; describe
#     says Launching when the stop comes): the stop's SIGUSR1 ends the ranks, Stopped, no node excluded,
#     the history naming the service's stop;
#   - a lost node, four times: kill -9 of the slurmd of rank 0's node and of rank 1's, before and after
#     the first checkpoint (the job's ranks frozen first, so that attempt 1 cannot finish), the last in a
#     warm pool (the pool Terminated, its Slurm job ended); rank 1's after the checkpoint by `anvil chaos
#     host-lost:1` instead (the node's rank frozen, its slurmd killed, and started again by the backend
#     once the job has left the node out; the history names it, goodput prices it): attempt 1 lost
#     (not Completed, whatever srun exited with), the node excluded, the retry waits until the node comes
#     back and its slurmd has ended the orphan (no process of attempt 1 alive once the retry trains),
#     runs on the other two nodes, resumes from the checkpoint, ends bit-identical to the unfaulted job;
#     describe after the end, JSON and text, shows both attempts' Slurm jobs, nodes, states and exits;
#     describe of the running job: its Slurm job ID, state and node list; a stop of a job Slurm cannot
#     start yet (2 of 3 nodes busy): cancelled at once;
#   - describe after the end, of every job: each ended attempt in the final state Slurm ended it in (or,
#     one whose job holds a warm pool, saying so), never RUNNING, and its text line with its step's exit.
# Needs slurm-wlm and munge (scripts/deps.sh --test); without them it says SKIP and exits 77.
. "$(dirname "$0")/tools/cli_common.sh"
. "$(dirname "$0")/tools/slurm_cluster.sh"
why=$(slurm_missing)
[ -n "$why" ] && { echo "SKIP: $why"; exit 77; }
command -v mpirun > /dev/null || { echo "SKIP: mpirun is not installed"; exit 77; }
# The cluster's jobs first (their slurmstepd processes do not carry $tmp in their names), then the rest.
trap 'slurm_down; kill -9 $(jobs -p) 2> /dev/null; pkill -KILL -f "$tmp/" 2> /dev/null; rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
state=$tmp/state

bible -f "gen1:1-gen10:26" > "$tmp/gen.txt" || { echo "FAIL: bible-kjv is not installed" >&2; exit 1; }
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"

t0=$(date +%s.%N)
slurm_up "$tmp/slurm" 3 || { bad "the cluster did not come up: $(tail -n 3 "$tmp"/slurm/log/*)"; finish; }
ok "munged, slurmctld and 3 slurmd up in $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"

"$anvil" serve --init --state "$state" > "$tmp/token" 2> /dev/null || bad "serve --init"
export ANVIL_TOKEN=$(cat "$tmp/token")
"$anvil" serve --state "$state" --port 0 --backend slurm --partition test --stop-grace 20 >> "$tmp/serve.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -s "$state/serve.port" ] && break; sleep 0.05; done
[ -s "$state/serve.port" ] || { bad "the daemon did not start: $(tail -n 1 "$tmp/serve.log")"; finish; }
job() { timeout 180 "$anvil" job --state "$state" "$@"; }
# Open MPI's allocations outlive LeakSanitizer (as in cli_dist.sh): no leak checks in the jobs. A spec
# may not set ASAN_OPTIONS (it can name a program to run): the role does.
asan_off="${ASAN_OPTIONS:-}:detect_leaks=0"
"$anvil" role add all --state "$state" --input-prefix "$tmp" --output-prefix "$tmp" --max-procs 4 --max-runtime-s 0 \
  --env "ASAN_OPTIONS=$asan_off" > /dev/null && "$anvil" role grant all admin --state "$state" > /dev/null ||
  bad "the admin's role"
# A field of a job's JSON (describe --json), e.g. `field 3 backend excluded_nodes`.
field() {
  job --json describe "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)$(printf '["%s"]' "${@:2}"))"
}
# (A reader that stops early, grep -q, ends the printing quietly: SIGPIPE at its default.)
history() { job --json describe "$1" | python3 -c "
import json, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
for e in json.load(sys.stdin)['history']: print(e['status'], e['secondary_status'], e['message'], sep='|')"; }
# The goodput of job $1, which anvil chaos struck: its parts add up to the wall time within 1%, and each
# fault that ended an attempt is priced (detection and restart); prints what each fault cost.
goodput_ok() {
  job --json goodput "$1" | python3 -c "
import json, sys
g = json.load(sys.stdin)
parts, wall = g['parts'], g['wall_s']
assert abs(sum(parts.values()) - wall) <= 0.01 * wall, f'parts {sum(parts.values()):.2f} s against wall {wall:.2f} s'
assert all(v >= 0 for v in parts.values()) and g['faults'], g
assert all(f['detection_s'] > 0 and f['restart_s'] > 0 for f in g['faults']), g['faults']
print(f'parts add up to {sum(parts.values()):.1f} of {wall:.1f} s, ETTR {g[\"ettr\"]:.1%}; ' + '; '.join(
    f'{f[\"kind\"]}{\" \" + f[\"target\"] if f[\"target\"] else \"\"}: detection {f[\"detection_s\"]:.1f} s, restart {f[\"restart_s\"]:.1f} s, '
    f'recomputed {f[\"recomputed_s\"]:.1f} s' for f in g['faults']))"
}
# Waits (up to 60 s) until the run in $1 has a checkpoint at step $2 or later.
wait_ckpt() {
  for _ in $(seq 600); do
    [ "$(sed 's/step_0*//' "$1/ckpt/latest" 2> /dev/null || echo 0)" -ge "$2" ] 2> /dev/null && return 0
    sleep 0.1
  done
  return 1
}
# Enough steps that a rank can be killed after the checkpoint at step 100 (fewer under the sanitizers,
# where a step takes 15 times longer).
steps=${CLI_SLURM_STEPS:-1000}
train=(train --data "$tmp/data" --preset tiny --batch 4 --seq 32 --no-progress --sample-every -1 --seed 9
       --threads 1 --ckpt-every 25 --keep-last 2)
# A spec file for `job submit`: name, run folder, hosts, processes per host, extra fields, steps.
spec() {
  python3 - "$@" "${train[@]}" << 'EOF'
import json, sys
name, out, hosts, pph, extra, steps = sys.argv[1:7]
spec = {"name": name, "output": out, "command": sys.argv[7:] + ["--steps", steps],
        "resources": {"hosts": int(hosts), "procs_per_host": int(pph)},
        "env": {"OMP_NUM_THREADS": "1"}}
extra = json.loads(extra)
spec["env"].update(extra.pop("env", {}))
spec.update(extra)
print(json.dumps(spec))
EOF
}
submit() { spec "$@" > "$tmp/$1.json" && job submit "$tmp/$1.json" | grep -o 'job [0-9]*' | cut -d' ' -f2; }

# ---- 2 nodes x 1 process: Completed, as a local 2-process run ----
# Its run folder's name holds what no #SBATCH line carries (a blank, '#', quotes) and what a file name
# pattern would replace ('%j', a backslash): the log is where the daemon reads it.
two="$tmp/two b#c'd\"e\$f%j\\x"
id=$(submit two "$two" 2 1 '{}' "$steps")
first=$id
job wait "$id" > "$tmp/out"
rc=$?
script=$state/jobs/$id/slurm_1.sh
if [ $rc = 0 ] && [ "$(field "$id" status)" = Completed ] && [ "$(field "$id" backend name)" = slurm ]; then
  ok "2 nodes x 1 process on Slurm, run folder $two: Completed ($(grep -o 'Slurm job [0-9]* on .*' "$two/logs/launcher.log"))"
else bad "2x1 job: exit $rc: $(history "$id"; tail -n 5 "$two/logs/launcher.log")"; fi
for opt in "--partition=test" "--nodes=2" "--ntasks-per-node=1" "--signal=B:USR1@20" "--open-mode=append" "--requeue"; do
  grep -qx "#SBATCH $opt" "$script" || bad "the batch script lacks $opt: $(cat "$script")"
done
grep -q "^srun --mpi=pmix .*--nodes=2 --ntasks-per-node=1 " "$script" && ok "sbatch options and srun --mpi=pmix in $script" ||
  bad "srun line: $(grep srun "$script")"
grep -q "memory (ZeRO-0, shard group 1, 2 replicas)" "$two/logs/launcher.log" &&
  ok "the two ranks trained as one MPI job (2 replicas)" || bad "not one 2-rank job: $(tail -n 5 "$two/logs/launcher.log")"
ASAN_OPTIONS=$asan_off timeout 300 "$anvil" launch -n 2 -- "${train[@]}" --steps "$steps" --out "$tmp/local" > "$tmp/local.log" 2>&1 ||
  bad "the local reference run: $(tail -n 3 "$tmp/local.log")"
slurm_loss=$(grep -o 'final loss [0-9.]*' "$two/logs/launcher.log")
local_loss=$(grep -o 'final loss [0-9.]*' "$tmp/local.log")
[ -n "$slurm_loss" ] && [ "$slurm_loss" = "$local_loss" ] && cmp -s "$two/model.safetensors" "$tmp/local/model.safetensors" &&
  ok "the same $slurm_loss and bit-identical weights as anvil launch -n 2 here" ||
  bad "Slurm run '$slurm_loss' vs local '$local_loss'"

# ---- more nodes than the cluster has: Failed at once, sbatch's reason ----
id=$(submit four "$tmp/four" 4 1 '{}' 10)
job wait "$id" > /dev/null
[ "$(field "$id" status)" = Failed ] && field "$id" failure_reason | grep -q "sbatch --test-only .*node configuration is not available" &&
  ok "4 nodes asked of 3: Failed: $(field "$id" failure_reason | cut -c1-160)" ||
  bad "4 nodes: $(field "$id" status): $(field "$id" failure_reason)"

# ---- "backend": "local" in the spec: this machine, not Slurm ----
id=$(submit here "$tmp/here" 1 1 '{"backend": "local"}' 10)
job wait "$id" > /dev/null
[ "$(field "$id" status)" = Completed ] && [ "$(field "$id" backend name)" = local ] &&
  [ ! -e "$state/jobs/$id/slurm_1.sh" ] && ! grep -q "Slurm job" "$tmp/here/logs/launcher.log" &&
  ok "a spec with \"backend\": \"local\" ran on this machine beside the Slurm jobs: Completed" ||
  bad "local job on the Slurm daemon: $(history "$id"; field "$id" backend)"

# ---- the pre-flight health check per node: n2 fails it (the test hook), is left out before training ----
id=$(submit health "$tmp/health" 2 1 '{"env": {"ANVIL_HEALTH_FAULT": "0:bad-memory@n2"}}' 10)
job wait "$id" > /dev/null
excluded=$(field "$id" backend excluded_nodes)
if [ "$(field "$id" status)" = Completed ] && [ "$(field "$id" attempt)" = 2 ] &&
   history "$id" | grep -q "Retrying (node health)|nodes failed the pre-flight health check" &&
   grep -q "srun --mpi=none --nodes=2 --ntasks-per-node=1 .* health --quick --json" "$state/jobs/$id/slurm_1.sh" &&
   grep -qx "#SBATCH --exclude=n2" "$state/jobs/$id/slurm_2.sh" && [ "$(cat "$state/jobs/$id/nodes_2")" = "n[1,3]" ] &&
   grep -q "anvil: error: a node failed the pre-flight health check" "$tmp/health/logs/launcher.log" &&
   [ "$(sed -n '/attempt 1:/,/attempt 2:/p' "$tmp/health/logs/launcher.log" | grep -c 'memory (ZeRO')" = 0 ]; then
  ok "pre-flight health: n2 failed it, a new allocation on n[1,3] (max_retries 0 spent nothing), Completed"
else bad "pre-flight health: $(history "$id"; field "$id" backend; tail -n 5 "$tmp/health/logs/launcher.log")"; fi
python3 -c "import sys; e = $excluded; sys.exit(not (len(e) == 1 and e[0]['node'] == 'n2' and
  e[0]['why'].startswith('health: unhealthy: rank 0') and 'memory check failed' in e[0]['why']))" &&
  ok "describe: excluded_nodes ${excluded:0:200}" || bad "health excluded_nodes: $excluded"
# 3 nodes asked, n2 unhealthy: too few left, the job fails with Slurm's reason.
id=$(submit health3 "$tmp/health3" 3 1 '{"env": {"ANVIL_HEALTH_FAULT": "0:bad-memory@n2"}}' 10)
job wait "$id" > /dev/null
[ "$(field "$id" status)" = Failed ] && [ "$(field "$id" attempt)" = 2 ] &&
  field "$id" failure_reason | grep -q "sbatch --test-only .*node configuration is not available" &&
  ok "3 nodes, n2 unhealthy: Failed: $(field "$id" failure_reason | cut -c1-60)...$(field "$id" failure_reason | grep -o 'Requested.*')" ||
  bad "3 nodes with n2 unhealthy: $(history "$id")"

# ---- SIGKILL of the rank on n2 (anvil chaos: kill-rank, through srun on n2): a retry without n2, from the
# checkpoint; then the retry killed whole (kill-attempt): retried again, no node blamed ----
id=$(submit killed "$tmp/killed" 2 1 '{"max_retries": 2}' "$steps")
# Rank 1 runs on the second node of n[1-2]; past step 110 the checkpoint at step 100 is there. The
# kill-attempt waits for the retry's step 150.
timeout 600 "$anvil" chaos --state "$state" "$id" --schedule "step:110 kill-rank:1, step:150 kill-attempt" \
  > "$tmp/chaos.out" 2>&1
rc=$?
history "$id" | grep -q "^Running|Fault|fault injected: kill-rank rank 1 (attempt 1): rank 1 killed (SIGKILL, pid [0-9]* on n2)$" &&
  ok "anvil chaos: $(grep -o 'kill-rank 1: .*' "$tmp/chaos.out")" || bad "kill-rank: $(cat "$tmp/chaos.out"; history "$id")"
history "$id" | grep -q "^Running|Fault|fault injected: kill-attempt (attempt 2): every process of Slurm job [0-9]* killed (scancel --signal=KILL --full)$" &&
  history "$id" | grep -q "Retrying (2/2)|" && [ "$(field "$id" attempt)" = 3 ] &&
  ok "anvil chaos: $(grep -o 'kill-attempt: .*' "$tmp/chaos.out"), retried: $(history "$id" | grep -o 'Retrying (2/2)|.*' | cut -c1-120)" ||
  bad "kill-attempt: $(cat "$tmp/chaos.out"; history "$id")"
gp=$(goodput_ok "$id") && ok "goodput of the kill-rank and the kill-attempt: $gp" || bad "kill-rank goodput: $gp"
excluded=$(field "$id" backend excluded_nodes)
# The attempt's exit is srun's, the highest over the ranks, and the survivor dies of whatever reaches it
# first (SIGPIPE from the dead peer's socket, srun's SIGTERM): the history must name the cause.
if [ $rc = 0 ] && [ "$(field "$id" attempt)" = 3 ] &&
   history "$id" | grep -q "Retrying (1/2)|exit [0-9]* (signal [0-9]*): first on n2: task 1 of attempt 1 .*Killed"; then
  ok "SIGKILLed rank on n2: Retrying (1/2), the history naming it ($(history "$id" | grep -o 'first on n2: task 1')), Completed"
else bad "SIGKILLed rank: exit $rc: $(history "$id"; grep 'srun: ' "$tmp/killed/logs/launcher.log" | head -n 20
  head -c 600 "$state/jobs/$id/"{stopped,killed,end}_1 2> /dev/null)"; fi
python3 -c "import sys; e = $excluded; sys.exit(not (len(e) == 1 and e[0]['node'] == 'n2' and 'Killed' in e[0]['why']))" &&
  ok "describe: excluded_nodes $excluded (none more after the kill-attempt)" || bad "excluded_nodes: $excluded"
grep -qx "#SBATCH --exclude=n2" "$state/jobs/$id/slurm_2.sh" && [ "$(cat "$state/jobs/$id/nodes_2")" = "n[1,3]" ] &&
  ok "the retry was a new batch job with --exclude=n2, on n[1,3]" ||
  bad "retry: $(grep exclude "$state/jobs/$id/slurm_2.sh") on $(cat "$state/jobs/$id/nodes_2")"
grep -q "resumed from .*step_" "$tmp/killed/logs/launcher.log" && ok "the retry resumed from the checkpoint" ||
  bad "the retry did not resume"
cmp -s "$two/model.safetensors" "$tmp/killed/model.safetensors" &&
  ok "final weights bit-identical to the uninterrupted job's" || bad "final weights differ from the uninterrupted job's"

# ---- max_runtime_s: checkpoint, Stopped ----
# --no-health: the stop must find the trainer's handler in place after 8 s, also on a loaded machine; the
# batch script leaves its own check out too.
train+=(--no-health)
id=$(submit limited "$tmp/limited" 2 1 '{"max_runtime_s": 8}' 1000000)
unset 'train[-1]'
job wait "$id" > /dev/null
grep -qx "#SBATCH --time=1" "$state/jobs/$id/slurm_1.sh" || bad "no --time=1 for 8 s: $(grep time "$state/jobs/$id/slurm_1.sh")"
grep -q " health --quick" "$state/jobs/$id/slurm_1.sh" && bad "a pre-flight check despite --no-health"
if [ "$(field "$id" status)" = Stopped ] && [ "$(field "$id" secondary_status)" = MaxRuntimeExceeded ] &&
   [ "$(field "$id" exit_code)" = 75 ] && [ -f "$tmp/limited/ckpt/latest" ] &&
   grep -q "stopped by signal 10 after step" "$tmp/limited/logs/launcher.log"; then
  ok "max_runtime_s: SIGUSR1 through scancel --batch, checkpoint $(cat "$tmp/limited/ckpt/latest"), Stopped (MaxRuntimeExceeded)"
else bad "max_runtime_s: $(history "$id"; tail -n 4 "$tmp/limited/logs/launcher.log")"; fi

# ---- keep_alive_s: the finished job's allocation held as a warm pool until its TTL, or a release ----
# Pool file of Slurm job $1: its status line's value ("" when none).
pool_status() { sed -n 's/^status=//p' "$state/pools/$1" 2> /dev/null; }
# Waits (up to $2 s) until pool $1 is Terminated and Slurm has forgotten its job or ended it.
wait_pool_gone() {
  local until_s=$(($(date +%s) + $2))
  while [ "$(date +%s)" -lt $until_s ]; do
    [ "$(pool_status "$1")" = Terminated ] && [ -z "$(squeue -h -j "$1" -t PD,R,CG 2> /dev/null)" ] && return 0
    sleep 0.2
  done
  return 1
}
slurm_id_of() { grep -o "anvil: job $1 attempt 1: Slurm job [0-9]*" "$2/logs/launcher.log" | grep -o '[0-9]*$'; }
# 20 s, and only the checks that must come first before the next job: it must reach the pool before the
# TTL, also on a loaded machine (describe's Available is checked after it).
id=$(submit warm "$tmp/warm" 2 1 '{"keep_alive_s": 20}' 10)
job wait "$id" > /dev/null
sid=$(slurm_id_of "$id" "$tmp/warm")
if [ "$(field "$id" status)" = Completed ] && [ "$(pool_status "$sid")" = Available ] &&
   [ "$(squeue -h -j "$sid" -o %T)" = RUNNING ]; then
  ok "keep_alive_s 20: the job Completed while its Slurm job $sid holds the allocation (pool Available)"
else bad "warm pool: $(history "$id"; cat "$state/pools/$sid" 2> /dev/null; squeue -j "$sid" 2>&1)"; fi
grep -q "^#SBATCH --time" "$state/jobs/$id/slurm_1.sh" && bad "--time without max_runtime_s"
creator=$id
id=$(submit reuse "$tmp/reuse" 2 1 '{}' 10)
job wait "$id" > /dev/null
if [ "$(field "$id" status)" = Completed ] && [ "$(field "$id" backend warm_pool_status)" = Reused ] &&
   [ "$(field "$id" backend warm_pool_id)" = "$sid" ] && [ "$(slurm_id_of "$id" "$tmp/reuse")" = "$sid" ] &&
   [ ! -e "$state/jobs/$id/slurm_1.sh" ]; then
  ok "a matching job (2x1) ran in the pool: Reused, Slurm job $sid, no sbatch"
else bad "reuse: $(history "$id"; field "$id" backend; tail -n 3 "$tmp/reuse/logs/launcher.log")"; fi
until_s=$(($(date +%s) + 5))
while [ "$(pool_status "$sid")" != Available ] && [ "$(date +%s)" -lt $until_s ]; do sleep 0.2; done
[ "$(field "$creator" backend warm_pool_status)" = Available ] && ok "the pool Available again after the reusing job" ||
  bad "after reuse: $(cat "$state/pools/$sid")"
id=$(submit other "$tmp/other" 1 1 '{}' 10)
job wait "$id" > /dev/null
osid=$(slurm_id_of "$id" "$tmp/other")
[ "$(field "$id" status)" = Completed ] && [ -n "$osid" ] && [ "$osid" != "$sid" ] && [ -e "$state/jobs/$id/slurm_1.sh" ] &&
  ok "a 1-host job did not use the 2-host pool: its own Slurm job $osid" || bad "non-matching: $(history "$id"; field "$id" backend)"
t_done=$(date +%s.%N)
if wait_pool_gone "$sid" 45; then
  ok "TTL expiry: pool Terminated and Slurm job $sid gone $(python3 -c "print(round($(date +%s.%N) - $t_done, 1))") s later"
else bad "TTL expiry: $(cat "$state/pools/$sid"; squeue -j "$sid" 2>&1)"; fi
[ "$(field "$creator" backend warm_pool_status)" = Terminated ] || bad "describe after expiry: $(field "$creator" backend)"
id=$(submit held "$tmp/held" 2 1 '{"keep_alive_s": 600}' 10)
job wait "$id" > /dev/null
sid=$(slurm_id_of "$id" "$tmp/held")
timeout 60 "$anvil" pool --state "$state" list > "$tmp/pools"
grep -q "^$sid  *Available  *admin  *all  *2  *1  *n\[1-2\]  *$id " "$tmp/pools" && ok "pool list: $(grep "^$sid " "$tmp/pools")" ||
  bad "pool list: $(cat "$tmp/pools")"
holder_job=$id
# A step that exits 0 with a completion record that is not its own keeps no pool: job $first's record, copied
# in while the test hooks hold the trainer before it starts and keep it from writing its own. The supervisor
# fails it too.
id=$(submit foreign "$tmp/foreign" 1 1 \
  '{"keep_alive_s": 600, "env": {"ANVIL_TEST_NO_COMPLETION": "1", "ANVIL_TEST_HOLD_START_S": "5"}}' 10)
for _ in $(seq 600); do [ -n "$(pgrep -f "^$anvil train .*--out $tmp/foreign( |\$)")" ] && break; sleep 0.1; done
cp "$two/completion.json" "$tmp/foreign/completion.json"
job wait "$id" > /dev/null
fsid=$(slurm_id_of "$id" "$tmp/foreign")
if [ "$(field "$id" status)" = Failed ] && [ -n "$fsid" ] && [ ! -e "$state/pools/$fsid" ] &&
   grep -q "anvil job-run: error: .*completion.json is attempt '$first.1''s" "$tmp/foreign/logs/launcher.log" &&
   [ -z "$(squeue -h -j "$fsid" -t PD,R 2> /dev/null)" ]; then
  ok "exit 0 with another job's completion record: no warm pool (Slurm job $fsid ended), Failed"
else bad "foreign record: $(history "$id"; ls "$state/pools"; tail -n 3 "$tmp/foreign/logs/launcher.log")"; fi
# A job in the pool stopped: the trainer's checkpoint, Stopped, the pool Available again.
id=$(submit poolstop "$tmp/poolstop" 2 1 '{}' 1000000)
wait_ckpt "$tmp/poolstop" 25 || bad "the pooled job wrote no checkpoint"
job stop "$id" > /dev/null
job wait "$id" > /dev/null
wait_available() {
  local until_s=$(($(date +%s) + 10))
  while [ "$(field "$holder_job" backend warm_pool_status)" != Available ] && [ "$(date +%s)" -lt $until_s ]; do sleep 0.2; done
}
wait_available
[ "$(field "$id" backend warm_pool_status)" = Reused ] && [ "$(field "$id" status)" = Stopped ] &&
  [ "$(field "$id" exit_code)" = 75 ] && [ "$(field "$holder_job" backend warm_pool_status)" = Available ] &&
  ok "a pooled job stopped: checkpoint, Stopped (exit 75), the pool Available" ||
  bad "pooled stop: $(history "$id"; field "$holder_job" backend)"
# A job in the pool killed (its ranks frozen, so the stop's grace runs out): its step alone ends.
id=$(submit poolkill "$tmp/poolkill" 2 1 '{}' 1000000)
wait_ckpt "$tmp/poolkill" 1 || bad "the pooled job wrote no checkpoint"
frozen=$(pgrep -f "^$anvil train .*--out $tmp/poolkill( |\$)")
kill -STOP $frozen
job stop "$id" > /dev/null
job wait "$id" > /dev/null
wait_available
if [ "$(field "$id" status)" = Stopped ] && [ "$(field "$id" exit_code)" != 75 ] &&
   [ "$(field "$id" backend warm_pool_status)" = Reused ] &&
   [ "$(field "$holder_job" backend warm_pool_status)" = Available ] && [ ! -e "$state/pools/$sid.claim" ] &&
   [ "$(squeue -h -j "$sid" -o %T)" = RUNNING ]; then
  ok "a pooled job killed after the grace: Stopped (exit $(field "$id" exit_code)), Slurm job $sid still holds the pool, Available"
else bad "pooled kill: $(history "$id"; field "$holder_job" backend; ls "$state/pools"; squeue -j "$sid" 2>&1)"; fi
# The 2 held hosts count in the role's hosts quota; a 2x2 job cannot run in that 2x1 pool.
timeout 60 "$anvil" quota --state "$state" set --role all --hosts 3 > /dev/null || bad "quota set"
spec quota "$tmp/quota" 2 2 '{}' 10 > "$tmp/quota.json"
msg=$(job submit "$tmp/quota.json" 2>&1)
rc=$?
[ $rc = 4 ] && [ "$msg" = "anvil job: error: ResourceLimitExceeded: role all: hosts 2 in use (warm pools included) + 2 requested > 3 (HTTP 429)" ] &&
  ok "hosts quota 3 with a 2-host pool held: a 2-host job refused: $msg" || bad "quota with a pool: exit $rc: $msg"
timeout 60 "$anvil" quota --state "$state" > "$tmp/quotas"
grep -q "^role all  *0 / -  *2 (2 warm) / 3 " "$tmp/quotas" &&
  timeout 60 "$anvil" quota --state "$state" --json | python3 -c "
import json, sys
u = json.load(sys.stdin)['quotas'][0]['usage']
sys.exit(not (u['hosts'] == 2 and u['warm_pool_hosts'] == 2))" &&
  ok "anvil quota counts the pool's hosts: $(grep '^role all' "$tmp/quotas" | tr -s ' ')" || bad "quota usage: $(cat "$tmp/quotas")"
timeout 60 "$anvil" quota --state "$state" set --role all > /dev/null || bad "quota removal"
t_rel=$(date +%s.%N)
timeout 60 "$anvil" pool --state "$state" release "$sid" > "$tmp/out" || bad "pool release: $(cat "$tmp/out")"
wait_pool_gone "$sid" 15 && ok "pool release: Terminated, Slurm job $sid gone in $(python3 -c "print(round($(date +%s.%N) - $t_rel, 1))") s" ||
  bad "release: $(cat "$state/pools/$sid"; squeue -j "$sid" 2>&1)"
msg=$(timeout 60 "$anvil" pool --state "$state" release "$sid" 2>&1)
[ $? = 4 ] && [ "$msg" = "anvil pool: error: warm pool $sid has ended already (HTTP 409)" ] && ok "a second release: $msg" || bad "second release: $msg"

# ---- a lost node: a slurmd killed (kill -9) under a 2-host job, on the node of rank 0 or of rank 1, before
# or after the first checkpoint. srun then ends (exit 0, or a status) while that node's rank lives on: the
# attempt is lost, not Completed; Slurm's word (the job requeued, the node DOWN) leaves the node out; the
# retry waits until no process of attempt 1 can write the run folder (the node comes back, with the orphan
# still there, and its slurmd ends it), runs on the other two nodes, resumes from the checkpoint if there
# is one, and ends bit-identical to the unfaulted job. The ranks are frozen first, so that attempt 1 cannot
# finish before Slurm sees the node down. ----
# The live processes of Slurm job $1 (their environment names it).
job_procs() {
  local e p
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}
    p=${p%/environ}
    grep -qzx "SLURM_JOB_ID=$1" "$e" 2> /dev/null || continue
    case "$(ps -o stat= -p "$p" 2> /dev/null)" in "" | Z*) ;; *) echo "$p" ;; esac
  done
}
# The node of rank $2 of the run in $1.
node_of_rank() {
  local p
  for p in $(pgrep -f "^$anvil train .*--out $1( |\$)"); do
    tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "PMIX_RANK=$2" || continue
    tr '\0' '\n' < "/proc/$p/environ" | sed -n 's/^SLURMD_NODENAME=//p'
    return
  done
}
# Waits (up to 60 s) until every node is idle again.
wait_idle() {
  for _ in $(seq 300); do
    [ "$(sinfo -h -N -o '%t' 2> /dev/null | grep -c '^idle$')" = 3 ] && return 0
    sleep 0.2
  done
  return 1
}
# Waits (up to 300 s) until the retry of the run in $1 trains: a heartbeat in training from a process not in $2,
# or the retry's completion record (a short retry may have finished already; each attempt starts without one).
wait_retry_trains() {
  local hb until_s=$(($(date +%s) + 300))
  while [ "$(date +%s)" -lt $until_s ]; do
    grep -qs '"attempt": *"[0-9]*\.2"' "$1/completion.json" && return 0
    hb=$(python3 -c "import json,sys; h=json.load(open(sys.argv[1])); print(h['pid'], h['phase'])" "$1/heartbeat.json" 2> /dev/null)
    [ "${hb#* }" = training ] && ! grep -qw "${hb%% *}" <<< "$2" && return 0
    sleep 0.2
  done
  return 1
}
lost_node() { # name, the rank whose node dies, before|after the first checkpoint, [warm: in a warm pool], [chaos]
  local name=$1 rank=$2 when=$3 warm=${4:-} chaos=${5:-} run=$tmp/$1 id sid victim pids t_kill left rest pool handle
  local chaos_pid slurmd killed
  if [ -n "$warm" ]; then
    pool=$(submit "${name}_pool" "$tmp/${name}_pool" 2 1 '{"keep_alive_s": 600}' 10)
    job wait "$pool" > /dev/null
    pool=$(slurm_id_of "$pool" "$tmp/${name}_pool")
    [ "$(pool_status "$pool")" = Available ] || { bad "$name: no warm pool: $(cat "$state/pools/$pool")"; return; }
  fi
  [ "$when" = before ] && train+=(--ckpt-every 500)
  id=$(submit "$name" "$run" 2 1 '{"max_retries": 2}' "$lost_steps")
  [ "$when" = before ] && { unset 'train[-1]'; unset 'train[-1]'; }
  if [ "$when" = after ]; then wait_ckpt "$run" 25 || bad "$name: no checkpoint: $(tail -n 3 "$run/logs/launcher.log")"
  else for _ in $(seq 600); do grep -q '"kind":"train"' "$run/metrics.jsonl" 2> /dev/null && break; sleep 0.1; done; fi
  kill -STOP $(pgrep -f "^$anvil train .*--out $run( |\$)")
  sid=$(slurm_id_of "$id" "$run")
  if [ -n "$warm" ]; then
    grep -q "anvil: job $id attempt 1: Slurm job $pool on .* (warm pool)" "$run/logs/launcher.log" ||
      bad "$name: attempt 1 did not run in warm pool $pool: $(grep "job $id attempt 1" "$run/logs/launcher.log")"
  fi
  victim=$(node_of_rank "$run" "$rank")
  pids=$(job_procs "$sid")
  [ "$when" = before ] && [ -e "$run/ckpt/latest" ] && bad "$name: a checkpoint before the node was lost"
  [ -n "$victim" ] && [ -n "$pids" ] || { bad "$name: no rank $rank or no processes of Slurm job $sid"; return; }
  if [ "$name" = lost_r0_after ]; then
    job --json describe "$id" > "$tmp/describe.json"
    python3 -c "
import json, sys
b = json.load(open(sys.argv[1]))['backend']
sys.exit(not (b['slurm_job_id'] == sys.argv[2] and b['state'] == 'RUNNING' and b['node_list'] == 'n[1-2]'))" \
      "$tmp/describe.json" "$sid" &&
      ok "describe while running: $(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['backend'])" "$tmp/describe.json")" ||
      bad "describe while running: $(cat "$tmp/describe.json")"
    pending_stop
  fi
  t_kill=$(date +%s)
  killed=${slurm_node_pid[$victim]}
  if [ -n "$chaos" ]; then
    # The backend freezes the node's ranks (frozen already: the job of 300 steps at a few ms each would end
    # before a fault asked for now lands) and kills its slurmd; it starts the slurmd again once the job has
    # left the node out. Rank r's node is host r of the 2x1 job.
    timeout 600 "$anvil" chaos --state "$state" "$id" --schedule "0s host-lost:$rank" > "$tmp/chaos.out" 2>&1 &
    chaos_pid=$!
  else kill -9 "${slurm_node_pid[$victim]}"; fi
  for _ in $(seq 450); do [ "$(field "$id" attempt)" = 2 ] && break; sleep 0.2; done
  [ "$(field "$id" attempt)" = 2 ] || { bad "$name: attempt 1 never ended: $(history "$id")"; return; }
  # The node comes back with attempt 1's rank on it (frozen): its slurmd ends it once a registration of
  # the node lists the rank's step. The first one, at its start, does not always: the next comes when
  # slurmctld asks for it, every 20 pings (seen 150 to 300 s later). After 15 s a reconfigure stands in for
  # that request, which the fence, waiting on the rank's locks, cannot tell from it.
  if [ -z "$chaos" ]; then slurm_start_node "$tmp/slurm" "$victim"
  else
    # Back once its pid file names a live slurmd other than the killed one (kept for slurm_down).
    for _ in $(seq 300); do
      slurmd=$(cat "$tmp/slurm/slurmd.$victim.pid" 2> /dev/null)
      [ -n "$slurmd" ] && [ "$slurmd" != "$killed" ] && kill -0 "$slurmd" 2> /dev/null && break
      sleep 0.2
    done
    [ "$slurmd" != "$killed" ] && kill -0 "$slurmd" 2> /dev/null &&
      ok "$name: chaos started $victim's slurmd again (pid $slurmd) $(($(date +%s) - t_kill)) s after the fault, once the job left it out" ||
      bad "$name: $victim's slurmd did not come back: $(cat "$tmp/chaos.out")"
    slurm_node_pid[$victim]=$slurmd
    slurm_pids+=("$slurmd")
  fi
  local t_back=$(date +%s) asked=""
  while [ $(($(date +%s) - t_back)) -lt 15 ] && [ -n "$(job_procs "$sid")" ]; do sleep 0.5; done
  if [ -n "$(job_procs "$sid")" ]; then scontrol reconfigure > /dev/null 2>&1; asked=", after a reconfigure"; fi
  wait_retry_trains "$run" "$pids" || bad "$name: the retry did not train: $(history "$id"; squeue -a -o '%i %T %N %r'
    sinfo -N -o '%N %T %E')"
  left=$(job_procs "$sid")
  [ -z "$left" ] && ok "$name: rank $rank's node $victim lost $when the first checkpoint: no process of attempt 1 (Slurm job $sid) alive once the retry trains$asked" ||
    bad "$name: processes of attempt 1 alive while the retry trains: $(ps -o pid,stat,args -p "$(echo $left | tr ' ' ,)")"
  job wait "$id" > /dev/null
  if [ -n "$chaos" ]; then
    wait "$chaos_pid" && history "$id" | grep -q "^Running|Fault|fault injected: host-lost host $rank (attempt 1): host $rank ($victim) lost: rank(s) $rank to $rank frozen (SIGSTOP, pid(s) [0-9]* there), its slurmd (pid $killed) killed (SIGKILL)" &&
      ok "$name: anvil chaos: $(grep -m1 -o 'host-lost .*' "$tmp/chaos.out" | cut -c1-160)" ||
      bad "$name: chaos: $(cat "$tmp/chaos.out"; history "$id" | grep Fault)"
    gp=$(goodput_ok "$id") && ok "$name: goodput: $gp" || bad "$name: goodput: $gp"
  fi
  rest=$(cat "$state/jobs/$id/nodes_2" 2> /dev/null)
  excluded=$(field "$id" backend excluded_nodes)
  if [ "$(field "$id" status)" = Completed ] && [ "$(field "$id" attempt)" = 2 ] &&
     grep -q "^Starting|Retrying (1/2)|lost: .*node failure: Slurm job $sid " <<< "$(history "$id")" &&
     grep -qx "#SBATCH --exclude=$victim" "$state/jobs/$id/slurm_2.sh" && ! grep -q "$victim" <<< "$(scontrol show hostnames "$(cat "$state/jobs/$id/nodes_2")")" &&
     python3 -c "import sys; e = $excluded; sys.exit(not (len(e) == 1 and e[0]['node'] == '$victim' and e[0]['attempt'] == 1))"; then
    ok "$name: attempt 1 lost, $victim excluded, Completed on $rest after a retry ($(($(date +%s) - t_kill)) s after the kill)"
  else bad "$name: $(history "$id"; echo "$excluded")"; fi
  if [ -n "$warm" ]; then
    [ "$(pool_status "$pool")" = Terminated ] && [ -z "$(squeue -h -j "$pool" -t PD,R,CG 2> /dev/null)" ] &&
      ok "$name: the warm pool that lost $victim: Terminated, its Slurm job $pool ended" ||
      bad "$name: the pool after its node was lost: $(cat "$state/pools/$pool"; squeue -j "$pool" 2>&1)"
  fi
  if [ "$when" = after ]; then
    sed -n "/attempt 2:/,\$p" "$run/logs/launcher.log" | grep -q "resumed from .*step_" &&
      ok "$name: the retry resumed from the checkpoint" || bad "$name: the retry did not resume"
  fi
  cmp -s "$tmp/lost_ref/model.safetensors" "$run/model.safetensors" &&
    ok "$name: final weights bit-identical to the unfaulted run's" || bad "$name: final weights differ"
  job --json describe "$id" > "$tmp/describe.json"
  job describe "$id" > "$tmp/describe.txt"
  python3 - "$tmp/describe.json" "$sid" "$(cat "$state/jobs/$id/nodes_2")" "$victim" << 'PY' > "$tmp/out"
import json, sys
j = json.load(open(sys.argv[1]))
a, sid, nodes2, victim = j["attempts"], sys.argv[2], sys.argv[3], sys.argv[4]
finals = ("COMPLETED", "CANCELLED", "FAILED", "NODE_FAIL", "TIMEOUT", "unknown to Slurm (ended)")
ok = (len(a) == 2 and a[0]["slurm_job_id"] == sid and a[0]["node_list"] == "n[1-2]" and a[0]["exit_code"] == -1
      and a[0]["state"] in finals and "node failure" in a[0]["outcome"] and [e["node"] for e in a[0]["excluded_nodes"]] == [victim]
      and a[1]["slurm_job_id"] not in ("", sid) and a[1]["node_list"] == nodes2 and a[1]["state"] == "COMPLETED"
      and a[1]["exit_code"] == 0 and a[1]["excluded_nodes"] == [] and j["backend"]["slurm_job_id"] == a[1]["slurm_job_id"])
print("ok" if ok else "BAD " + json.dumps(a))
PY
  handle=
  [ -n "$warm" ] && handle=" (handle $sid:[0-9]*)"
  [ "$(cat "$tmp/out")" = ok ] && grep -q "^  1  slurm  Slurm job $sid$handle on n\[1-2\], Slurm state " "$tmp/describe.txt" &&
    grep -q "^  2  slurm  Slurm job [0-9]* on $(cat "$state/jobs/$id/nodes_2" | sed 's/[][]/\\&/g'), Slurm state COMPLETED" "$tmp/describe.txt" &&
    ok "$name: describe after the end, JSON and text: both attempts' Slurm jobs, nodes, states and exits" ||
    bad "$name: describe: $(cat "$tmp/out"; grep -A3 '^attempts:' "$tmp/describe.txt")"
  wait_idle || bad "$name: the nodes did not come back: $(sinfo -N 2>&1 | tr '\n' ' ')"
}
# A stop of a job Slurm cannot start yet (3 nodes, 2 of them busy): cancelled at once.
pending_stop() {
  local pending reason t_stop took
  pending=$(submit pending "$tmp/pending" 3 1 '{}' 10)
  local until_s=$(($(date +%s) + 60))
  while [ "$(field "$pending" backend state 2> /dev/null)" != PENDING ] && [ "$(date +%s)" -lt $until_s ]; do sleep 0.2; done
  reason=$(field "$pending" backend reason 2> /dev/null)
  t_stop=$(date +%s.%N)
  job stop "$pending" > /dev/null
  job wait "$pending" > /dev/null
  took=$(python3 -c "print(round($(date +%s.%N) - $t_stop, 1))")
  [ "$(field "$pending" status)" = Stopped ] && [ ! -e "$state/jobs/$pending/nodes_1" ] &&
    python3 -c "import sys; sys.exit(not $took < 5)" &&
    ok "a stop of a job pending in Slurm ($reason): cancelled, Stopped in $took s (the grace is 20 s)" ||
    bad "pending stop: $took s: $(history "$pending" | tr '\n' ' '; tail -n 5 "$tmp/serve.log")"
}
wait_idle || bad "the nodes are not idle: $(sinfo -N 2>&1 | tr '\n' ' ')"
# ---- a stop while the job is Launching: anvil's own signal blames no node ----
# The test hook holds both ranks before the trainer sets its handlers or writes a heartbeat (--no-health: no
# check before them), so the job is Launching when the stop comes, and the stop's SIGUSR1 ends the ranks.
train+=(--no-health)
id=$(submit launching "$tmp/launching" 2 1 '{"env": {"ANVIL_TEST_HOLD_START_S": "300"}}' "$steps")
unset 'train[-1]'
for _ in $(seq 600); do
  [ "$(pgrep -fc "^$anvil train .*--out $tmp/launching( |\$)")" = 2 ] && [ "$(field "$id" secondary_status)" = Launching ] &&
    break
  sleep 0.1
done
launching="$(field "$id" status) ($(field "$id" secondary_status))"
job stop "$id" > /dev/null
job wait "$id" > /dev/null
excluded=$(field "$id" backend excluded_nodes)
signalled=$(sed -n "/^anvil: job $id attempt 1:/,\$p" "$tmp/launching/logs/launcher.log" | grep -c ': User defined signal 1$')
if [ "$launching" = "Running (Launching)" ] && [ "$(field "$id" status)" = Stopped ] && [ "$excluded" = "[]" ] &&
   [ "$signalled" -ge 1 ] && history "$id" | grep -q "^Stopping||stop requested$" &&
   history "$id" | grep -q "^Stopped||stopped without a checkpoint$" && ! grep -q "ended by a signal" <<< "$(history "$id")"; then
  ok "a stop in $launching: the stop's SIGUSR1 ended $signalled rank(s) (srun: User defined signal 1), Stopped (exit $(field "$id" exit_code)), no node excluded"
else bad "stop while launching ($launching, $signalled ranks signalled): $excluded: $(history "$id"; tail -n 4 "$tmp/launching/logs/launcher.log")"; fi

wait_idle || bad "the nodes are not idle after the stop"
# The unfaulted run they must match, here as `anvil launch -n 2` (the first case above shows it equal to a
# Slurm job's): fewer steps than that case, since each lost node's retry trains most of them again.
lost_steps=$((steps * 3 / 10))
ASAN_OPTIONS=$asan_off timeout 300 "$anvil" launch -n 2 -- "${train[@]}" --steps "$lost_steps" --out "$tmp/lost_ref" \
  > "$tmp/lost_ref.log" 2>&1 || bad "the lost nodes' reference run: $(tail -n 3 "$tmp/lost_ref.log")"
lost_node lost_r0_after 0 after
lost_node lost_r1_after 1 after "" chaos
lost_node lost_r0_before 0 before
lost_node lost_r1_before 1 before warm

# ---- describe after the end: every ended attempt of every job keeps the state Slurm ended it in (one whose
# Slurm job runs on as a warm pool says so), never a state of the moment (RUNNING, PENDING, REQUEUED), and
# the text shows what the JSON has of each attempt, its step's exit included ----
# The JSON straight from the API (one process: the client under ASan takes a second a call), the text from
# anvil job describe.
python3 - "$anvil" "$state" << 'PY' > "$tmp/out"
import json, os, re, subprocess, sys, urllib.request
anvil, state = sys.argv[1:3]
port = open(state + "/serve.port").read().strip()
def get(path):
    req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path),
                                 headers={"Authorization": "Bearer " + os.environ["ANVIL_TOKEN"]})
    return json.load(urllib.request.urlopen(req, timeout=60))
finals = ("COMPLETED", "CANCELLED", "FAILED", "NODE_FAIL", "TIMEOUT", "unknown to Slurm (ended)")
pooled = "RUNNING, holding the warm pool (the attempt's step ended)"
checked, wrong = 0, []
for listed in get("/v1/jobs")["jobs"]:
    j = get("/v1/jobs/%d" % listed["id"])
    text = subprocess.run([anvil, "job", "--state", state, "describe", str(j["id"])], capture_output=True, text=True,
                          timeout=180).stdout
    in_pool = j["spec"].get("keep_alive_s", 0) > 0 or j["backend"].get("warm_pool_status") == "Reused"
    for a in j["attempts"]:
        if a["backend"] != "slurm" or not a["ended_at"]:
            continue
        checked += 1
        line = re.search(r"^  %d  slurm  .*$" % a["attempt"], text, re.M)
        line = line.group(0) if line else ""
        state_ok = a.get("state") in finals or (a.get("state") == pooled and in_pool)
        text_ok = (", Slurm state %s" % a.get("state")) in line and (
            "step_exit" not in a or line.endswith(", step exit %d" % a["step_exit"]))
        if not (state_ok and text_ok):
            wrong.append("job %d attempt %d: %r / %r" % (j["id"], a["attempt"], a.get("state"), line))
print("ok %d" % checked if checked and not wrong else "BAD " + "; ".join(wrong))
PY
grep -q "^ok [0-9]" "$tmp/out" &&
  ok "describe after the end, JSON and text: $(cut -d' ' -f2 "$tmp/out") Slurm attempts, each in the state Slurm ended it in, with its step's exit" ||
  bad "describe after the end: $(cat "$tmp/out")"

# The daemon stops on SIGTERM (under ASan, with its leak check).
kill "$daemon"
wait "$daemon"
rc=$?
[ $rc = 0 ] && ok "the daemon stopped on SIGTERM" || bad "the daemon exited $rc on SIGTERM: $(tail -n 5 "$tmp/serve.log")"
finish
