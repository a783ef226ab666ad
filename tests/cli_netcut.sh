#!/usr/bin/env bash
# anvil chaos net-cut against a real `anvil serve --sim-hosts 2` (one daemon for the script; root):
#   - a job of 2 simulated hosts x 1 rank runs each rank in its host's network namespace, Open MPI
#     over TCP between the hosts' 10.x addresses (ss inside a namespace sees the connection), so the
#     test cannot pass over loopback;
#   - the same job struck by net-cut of host 1: the ranks stall in a collective, the hang timeout
#     derived from the run fires, the attempt is killed and retried from its last checkpoint with the
#     link up again; it ends Completed with a model.safetensors byte-identical to the unfaulted
#     twin's, the history names the fault and the retry, and job goodput prices the fault;
#   - net-cut into a job of 1 host (which runs as without simulated hosts) is refused in one line,
#     and a job of more hosts than the daemon simulates fails naming --sim-hosts;
#   - the daemon's stop removes its namespaces and links.
. "$(dirname "$0")/tools/cli_common.sh"
. "$(dirname "$0")/tools/cli_service.sh"
command -v mpirun > /dev/null || { missing "mpirun is not installed"; finish; }
command -v curl > /dev/null || { missing "curl is not installed"; finish; }
command -v bible > /dev/null || { missing "bible-kjv is not installed"; finish; }
[ "$(id -u)" = 0 ] || { missing "not root: simulated hosts are network namespaces"; finish; }
probe=anvil-probe-$$
ip netns add "$probe" 2> "$tmp/netns.err" && ip netns del "$probe" ||
  { missing "ip netns is not usable here: $(head -n 1 "$tmp/netns.err")"; finish; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
state=$tmp/state

bible -f "gen1:1-gen50:26" > "$tmp/gen.txt"
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"
# The daemon's hosts, from its line "2 simulated host(s) made: network namespaces anvil-T-0 to
# anvil-T-1 on 10.X.Y.0/24": their names' prefix anvil-T.
prefix_of() { grep -o 'namespaces anvil-[0-9a-f]*-0' "$tmp/serve.log" 2> /dev/null | sed 's/namespaces //; s/-0$//'; }
# The daemon removes its hosts when it stops; one killed with the test (a failed case) leaves them.
at_exit() {
  local p
  p=$(prefix_of)
  [ -n "$p" ] || return 0
  for ns in $(ip netns list | grep -o "^$p-[0-9]*"); do ip netns del "$ns"; done
  for l in $(ls /sys/class/net | grep "^av${p#anvil-}"); do ip link del "$l"; done
}
serve_start --sim-hosts 2
prefix=$(prefix_of)
[ -n "$prefix" ] && ip netns list | grep -q "^$prefix-1" && ok "the daemon made 2 simulated hosts: $(grep -o 'network.*' "$tmp/serve.log")" ||
  { bad "no simulated hosts: $(cat "$tmp/serve.log")"; finish; }

# Steps of about 10 ms in a release build; under the sanitizers, on a loaded machine, they have been
# seen to take a second: fewer of them there, the cut still after a checkpoint and well before the end.
steps=400 cut=60
ldd "$anvil" | grep -q libasan && steps=100 cut=40
train=(train --data "$tmp/data" --preset tiny --batch 8 --seq 64 --no-progress --sample-every -1 --seed 9
       --threads 1 --ckpt-every 20 --keep-last 2 --steps "$steps")
# submit NAME OUTPUT HOSTS [STEPS]: a job of HOSTS x 1 rank, through a spec (job submit has no --hosts).
submit() {
  python3 - "$1" "$2" "$3" "${4:-$steps}" "${train[@]}" > "$tmp/spec.json" << 'EOF'
import json, sys
name, out, hosts, steps, cmd = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
cmd[cmd.index("--steps") + 1] = steps
print(json.dumps({"name": name, "output": out, "max_retries": 4, "command": cmd,
                  "resources": {"hosts": hosts, "procs_per_host": 1}}))
EOF
  job submit "$tmp/spec.json" | grep -o 'job [0-9]*' | cut -d' ' -f2
}
# Waits (120 s at most) until the run folder $1 has a heartbeat past step 0.
await_training() {
  for _ in $(seq 1200); do
    python3 -c "import json,sys; sys.exit(json.load(open('$1/heartbeat.json'))['step'] < 1)" 2> /dev/null && return 0
    sleep 0.1
  done
  return 1
}

# ---- the twin: the ranks in the namespaces, TCP between the hosts ----
twin=$(submit twin "$tmp/twin" 2)
await_training "$tmp/twin" || bad "the twin never trained: $(field "$twin" status)"
job --json describe "$twin" > "$tmp/twin.json"
read -r ns0 addr0 ns1 addr1 < <(python3 -c "
import json; h = json.load(open('$tmp/twin.json'))['backend']['sim_hosts']
print(' '.join(x for e in h for x in (e['netns'], e['address'])))")
[ "$ns0" = "$prefix-0" ] && [ "$ns1" = "$prefix-1" ] && ok "describe names the job's hosts: $ns0 $addr0, $ns1 $addr1" ||
  bad "describe's sim_hosts: $(python3 -c "import json; print(json.load(open('$tmp/twin.json'))['backend'])")"
for k in 0 1; do
  ns=$([ $k = 0 ] && echo "$ns0" || echo "$ns1")
  rank=$(for pid in $(ip netns pids "$ns"); do tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null; done |
    sed -n 's/^OMPI_COMM_WORLD_RANK=//p' | sort -u | tr '\n' ' ')
  [ "$rank" = "$k " ] && ok "rank $k runs in $ns, and no other rank" || bad "ranks in $ns: '$rank', want $k"
done
ip netns exec "$ns0" ss -tn state established > "$tmp/ss.txt"
grep -q "$addr0:[0-9]* *$addr1:[0-9]*" "$tmp/ss.txt" &&
  ok "TCP between the hosts: $(grep -m 1 "$addr0:[0-9]* *$addr1:" "$tmp/ss.txt" | tr -s ' ')" ||
  bad "no TCP between $addr0 and $addr1 in $ns0: $(cat "$tmp/ss.txt")"
timeout 900 "$anvil" job --state "$state" wait "$twin" > /dev/null || bad "the unfaulted twin: $(field "$twin" failure_reason)"

# ---- the struck job: host 1 cut off ----
id=$(submit struck "$tmp/run" 2)
t0=$(date +%s.%N)
timeout 900 "$anvil" chaos --state "$state" "$id" --schedule "step:$cut net-cut:1" > "$tmp/chaos.out" 2> "$tmp/chaos.err"
rc=$?
[ $rc = 0 ] && [ "$(field "$id" status)" = Completed ] &&
  ok "the struck job Completed (chaos exit 0, $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s)" ||
  bad "chaos exit $rc, job $(field "$id" status): $(cat "$tmp/chaos.err"; tail -n 5 "$tmp/chaos.out")"
cmp -s "$tmp/twin/model.safetensors" "$tmp/run/model.safetensors" &&
  ok "its model.safetensors is byte-identical to the unfaulted twin's" || bad "the struck job's model differs"
job --json describe "$id" > "$tmp/describe.json"
python3 - "$tmp/describe.json" << 'EOF' > "$tmp/h.out" 2>&1 && ok "history: $(cat "$tmp/h.out")" || bad "history: $(cat "$tmp/h.out")"
import json, sys
h = json.load(open(sys.argv[1]))["history"]
cut = [e for e in h if e["secondary_status"] == "Fault" and e["message"].startswith("fault injected: net-cut host 1")]
hang = [e for e in h if e["secondary_status"] == "HangDetected" and "the hang timeout derived from the run" in e["message"]]
retry = [e for e in h if e["secondary_status"].startswith("Retrying")]
assert len(cut) == 1 and "cut off the network" in cut[0]["message"], [e["message"] for e in h]
assert len(hang) == 1 and hang[0]["at"] > cut[0]["at"], [e["message"] for e in h]
assert len(retry) == 1 and retry[0]["at"] > hang[0]["at"], [e["secondary_status"] for e in h]
print(f"the cut, caught by the derived hang timeout {hang[0]['at'] - cut[0]['at']:.1f} s later, "
      f"then {len(retry)} retry ({retry[0]['message'][:60]})")
EOF
link=$(python3 -c "
import json; print(json.load(open('$tmp/describe.json'))['attempts'][0]['sim_hosts'][1]['link'])")
ip -o link show "$link" | grep -q '[<,]UP[,>]' && [ ! -e "$state/jobs/$id/netcut_1" ] &&
  ok "host 1's link $link is up again" || bad "link $link: $(ip -o link show "$link")"
job --json goodput "$id" > "$tmp/goodput.json"
python3 - "$tmp/goodput.json" << 'EOF' > "$tmp/gp.out" 2>&1 && ok "goodput: $(cat "$tmp/gp.out")" || bad "goodput: $(cat "$tmp/gp.out")"
import json, sys
g = json.load(open(sys.argv[1]))
parts, wall = g["parts"], g["wall_s"]
assert abs(sum(parts.values()) - wall) <= 0.01 * wall, f"parts {sum(parts.values()):.2f} s against wall {wall:.2f} s"
f = [f for f in g["faults"] if f["kind"] == "net-cut"]
assert len(f) == 1 and f[0]["detection_s"] > 0 and f[0]["restart_s"] > 0, g["faults"]
f = f[0]
print(f"net-cut priced: lost {f['lost_s']:.1f} s = detection {f['detection_s']:.1f} + restart {f['restart_s']:.1f} "
      f"+ recomputed {f['recomputed_s']:.1f}; ETTR {g['ettr']:.1%}")
EOF
job goodput "$id" | grep -q "net-cut host 1 .* lost .* = detection" && ok "job goodput prints the net-cut's cost" ||
  bad "job goodput: $(job goodput "$id")"

# ---- refusals ----
one=$(submit one "$tmp/one" 1 100000)
await_training "$tmp/one" || bad "the 1-host job never trained: $(field "$one" status)"
[ "$(field "$one" backend | grep -c sim_hosts)" = 0 ] || bad "a 1-host job on simulated hosts"
timeout 60 "$anvil" chaos --state "$state" "$one" --schedule "0s net-cut" --no-wait > /dev/null 2> "$tmp/err"
rc=$?
[ $rc = 4 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q "does not run on simulated hosts.*(HTTP 422)" "$tmp/err" &&
  ok "net-cut into a 1-host job: $(cat "$tmp/err")" || bad "net-cut of a 1-host job: exit $rc, $(cat "$tmp/err")"
job stop "$one" > /dev/null
three=$(submit three "$tmp/three" 3)
timeout 60 "$anvil" job --state "$state" wait "$three" > /dev/null
field "$three" failure_reason | grep -q "resources.hosts is 3, more than the 2 simulated hosts of this daemon" &&
  ok "3 hosts of 2: $(field "$three" failure_reason)" || bad "3 hosts: $(field "$three" status) $(field "$three" failure_reason)"
timeout 60 "$anvil" job --state "$state" wait "$one" > /dev/null

# ---- the daemon's stop removes the hosts ----
kill "$daemon" && wait "$daemon"
left=$( (ip netns list; ip -o link show) | grep -c "$prefix\|av${prefix#anvil-}")
[ "$left" = 0 ] && ok "the daemon's stop removed its namespaces and links" || bad "$left namespace(s) or link(s) left"
finish
