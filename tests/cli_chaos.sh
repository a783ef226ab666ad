#!/usr/bin/env bash
# anvil chaos and the goodput accounting against a real `anvil serve` (one daemon for the script):
#   - a 2-rank training job struck, on a fixed schedule with a fixed seed, by every fault kind the
#     local backend and the client carry out: a rank killed, a rank frozen (caught by the hang
#     timeout derived from the run, the job giving none), a host lost, the whole attempt killed, the
#     run folder's file system filled while a checkpoint is written (a tmpfs of its own; root), and
#     the daemon killed with SIGKILL and started again; it ends Completed with a model.safetensors
#     byte-identical to the same job's without faults;
#   - the history names each fault and the retry after it; job goodput's parts add up to the wall
#     time within 1%, each fault that ended an attempt is priced, and /metrics exports the parts;
#   - bad schedules and requests: one-line refusals naming the event or field, exit 2; a non-admin
#     may not inject faults (403).
. "$(dirname "$0")/tools/cli_common.sh"
. "$(dirname "$0")/tools/cli_service.sh"
command -v mpirun > /dev/null || { missing "mpirun is not installed"; finish; }
command -v curl > /dev/null || { missing "curl is not installed"; finish; }
command -v bible > /dev/null || { missing "bible-kjv is not installed"; finish; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
state=$tmp/state
mounts=()
# Unmounted at exit, unless the scratch folder is kept (ANVIL_TEST_KEEP) to read a failed case's run.
at_exit() { [ -n "${ANVIL_TEST_KEEP:-}" ] || for m in "${mounts[@]}"; do umount "$m" 2> /dev/null || umount -l "$m"; done; }

bible -f "gen1:1-gen50:26" > "$tmp/gen.txt"
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"
serve_start

# The events strike at 26ths of the steps (100, 250, ... of 1300); the sanitizers' build runs half the
# steps (tests/CMakeLists.txt), each several times slower, so the events stand as far apart in time.
steps=${CLI_CHAOS_STEPS:-1300}
at() { echo "step:$((steps * $1 / 26))"; }
# The run folder of the struck job on a small file system of its own, for disk-full.
disk_kinds=", $(at 14) disk-full"
mkdir -p "$tmp/small"
if mount -t tmpfs -o size=48m tmpfs "$tmp/small" 2> "$tmp/mount.err"; then
  mounts+=("$tmp/small")
else
  missing "cannot mount a tmpfs ($(cat "$tmp/mount.err")): no disk-full fault"
  disk_kinds=""
fi
# Steps of about 10 ms on this machine, so that the chaos client (polling every 20 ms) strikes each
# event within a few steps of its own, long before the next one's.
train=(train --data "$tmp/data" --preset tiny --batch 8 --seq 64 --no-progress --sample-every -1 --seed 9
       --threads 1 --ckpt-every 20 --keep-last 2 --steps "$steps")
submit() { job submit --name "$1" --procs 2 --max-retries 8 --output "$2" -- "${train[@]}" | grep -o 'job [0-9]*' |
  cut -d' ' -f2; }
twin=$(submit twin "$tmp/twin")
timeout 300 "$anvil" job --state "$state" wait "$twin" > /dev/null || bad "the unfaulted twin: $(field "$twin" failure_reason)"

# ---- the struck job ----
id=$(submit struck "$tmp/small/run")
# A step event strikes once the attempt then running has trained that step (one resumed past it: at its
# first step). The events leave a third of the steps to the end: the client has been seen to strike 250
# steps (2 s) late in the release build.
schedule="$(at 2) kill-rank, $(at 5) stop-rank, $(at 8) host-lost:0, $(at 11) kill-attempt$disk_kinds, $(at 17) daemon-kill"
timeout 600 "$anvil" chaos --state "$state" "$id" --seed 7 --schedule "$schedule" > "$tmp/chaos.out" 2> "$tmp/chaos.err"
rc=$?
[ $rc = 0 ] && [ "$(field "$id" status)" = Completed ] && ok "the struck job Completed (chaos exit 0)" ||
  bad "chaos exit $rc, job $(field "$id" status): $(cat "$tmp/chaos.err"; tail -n 5 "$tmp/chaos.out")"
cmp -s "$tmp/twin/model.safetensors" "$tmp/small/run/model.safetensors" &&
  ok "its model.safetensors is byte-identical to the unfaulted twin's" || bad "the struck job's model differs"

# Each fault in the history, and the retry after each that ended an attempt.
job --json describe "$id" > "$tmp/describe.json"
for kind in kill-rank stop-rank host-lost kill-attempt ${disk_kinds:+disk-full} daemon-kill; do
  python3 -c "
import json, sys
h = json.load(open('$tmp/describe.json'))['history']
sys.exit(not any(e['secondary_status'] == 'Fault' and e['message'].startswith('fault injected: $kind') for e in h))" &&
    ok "the history names $kind" || bad "no $kind in the history"
done
retries=$(python3 -c "
import json; h = json.load(open('$tmp/describe.json'))['history']
print(sum(1 for e in h if e['secondary_status'].startswith('Retrying')))")
want=4
[ -n "$disk_kinds" ] && want=5
[ "$retries" = "$want" ] && ok "$retries retries, one after each fault that ended an attempt" ||
  bad "$retries retries, want $want"
python3 -c "
import json, sys
h = json.load(open('$tmp/describe.json'))['history']
sys.exit(not any(e['secondary_status'] == 'HangDetected' and 'the hang timeout derived from the run' in e['message']
                 for e in h))" &&
  ok "the frozen rank was caught by the derived hang timeout" || bad "no derived hang detection in the history"

# The accounting: its parts add up to the wall time; each fault that ended an attempt is priced.
job --json goodput "$id" > "$tmp/goodput.json"
python3 - "$tmp/goodput.json" << 'EOF' > "$tmp/gp.out" 2>&1 && ok "goodput: $(cat "$tmp/gp.out")" || bad "goodput: $(cat "$tmp/gp.out")"
import json, sys
g = json.load(open(sys.argv[1]))
parts, wall = g["parts"], g["wall_s"]
assert abs(sum(parts.values()) - wall) <= 0.01 * wall, f"parts {sum(parts.values()):.2f} s against wall {wall:.2f} s"
assert all(v >= 0 for v in parts.values()), parts
assert 0 < g["ettr"] < 1 and abs(g["ettr"] - parts["productive"] / (wall - parts["queue"])) < 1e-9, g["ettr"]
ended = [f for f in g["faults"] if f["kind"] != "daemon-kill"]
assert all(f["detection_s"] > 0 and f["restart_s"] > 0 for f in ended), ended
span_sum = sum(s["t1"] - s["t0"] for s in g["spans"])
# Each stretch's ends are Unix times less the submission's, so each may be off by a float's rounding.
assert abs(span_sum - wall) < 1e-3 + 1e-4 * wall, f"spans {span_sum} against wall {wall}"
print(f"parts add up to {sum(parts.values()):.1f} of {wall:.1f} s, ETTR {g['ettr']:.1%}, "
      f"{len(ended)} faults priced, lost {sum(f['lost_s'] for f in ended):.1f} s")
EOF
job goodput "$id" > "$tmp/goodput.txt"
grep -q "^job $id: wall .* ETTR" "$tmp/goodput.txt" && grep -q "^  productive" "$tmp/goodput.txt" &&
  grep -q "kill-rank rank .* lost .* = detection" "$tmp/goodput.txt" && ok "job goodput prints the table" ||
  bad "job goodput: $(cat "$tmp/goodput.txt")"
curl -s "http://127.0.0.1:$(cat "$state/serve.port")/metrics" -H "Authorization: Bearer $ANVIL_TOKEN" > "$tmp/metrics"
grep -q "^anvil_job_goodput_seconds{job_id=\"$id\",name=\"struck\",part=\"productive\"} " "$tmp/metrics" &&
  grep -q "^anvil_job_ettr{job_id=\"$id\",name=\"struck\"} 0\." "$tmp/metrics" && ok "/metrics exports the goodput" ||
  bad "/metrics: $(grep goodput "$tmp/metrics" | head -3)"

# ---- refusals ----
"$anvil" chaos --state "$state" "$id" --schedule "5s kill-rnak" > /dev/null 2> "$tmp/err"
rc=$?
[ $rc = 2 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q "event 1: unknown fault 'kill-rnak'" "$tmp/err" &&
  ok "a bad schedule: $(cat "$tmp/err")" || bad "bad schedule: exit $rc, $(cat "$tmp/err")"
"$anvil" chaos --state "$state" "$id" --mtbf 30 --kinds kill-rank,nope > /dev/null 2> "$tmp/err"
rc=$?
[ $rc = 2 ] && grep -q -- "--kinds: unknown fault 'nope'" "$tmp/err" && ok "bad --kinds: $(cat "$tmp/err")" ||
  bad "bad --kinds: exit $rc, $(cat "$tmp/err")"
fault() {
  curl -s -o "$tmp/answer" -w '%{http_code}' -H "Authorization: Bearer ${2:-$ANVIL_TOKEN}" -X POST \
    "http://127.0.0.1:$(cat "$state/serve.port")/v1/jobs/$id/faults" --data-binary "$1"
}
code=$(fault '{"kind":"kill-rank"}')
[ "$code" = 400 ] && grep -q 'target: required for kill-rank' "$tmp/answer" && ok "a rank fault without a target: 400" ||
  bad "no target: $code $(cat "$tmp/answer")"
code=$(fault '{"kind":"kill-rank","target":5}')
[ "$code" = 400 ] && grep -q 'a rank index in \[0, 2)' "$tmp/answer" && ok "a rank the job has not: 400" ||
  bad "rank 5: $code $(cat "$tmp/answer")"
code=$(fault '{"kind":"kill-attempt"}')
[ "$code" = 409 ] && grep -q 'no running attempt' "$tmp/answer" && ok "a fault into an ended job: 409" ||
  bad "ended job: $code $(cat "$tmp/answer")"
bob=$(admin user add bob 2> /dev/null) && admin role grant all bob > /dev/null || bad "user add"
id=$(ANVIL_TOKEN=$bob job submit --name bobs --output "$tmp/bobs" -- "${train[@]}" | grep -o 'job [0-9]*' | cut -d' ' -f2)
code=$(fault '{"kind":"kill-attempt"}' "$bob")
[ "$code" = 403 ] && ok "a non-admin may not inject faults (403)" || bad "non-admin: $code $(cat "$tmp/answer")"
finish
