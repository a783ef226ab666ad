#!/usr/bin/env bash
# The start latency of a job on the Slurm backend against the local one: from `anvil job submit` to
# the run's first training step in metrics.jsonl, a tiny 2-process job, REPS times each (median
# printed), on a private cluster of 2 slurmd "nodes" on this machine (tests/tools/slurm_cluster.sh).
# Also the cluster's bring-up time. Usage: bench/bench_slurm.sh BUILD_DIR [REPS]
set -u
build=$(cd "$1" && pwd)
reps=${2:-5}
anvil=$build/anvil
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tests/tools/slurm_cluster.sh"
why=$(slurm_missing)
[ -n "$why" ] && { echo "bench_slurm: $why" >&2; exit 1; }
tmp=$(mktemp -d)
daemons=()
trap 'for p in "${daemons[@]}"; do kill "$p" 2> /dev/null; done; slurm_down; rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
bible -f "gen1:1-gen10:26" > "$tmp/gen.txt"
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null

t0=$(date +%s.%N)
slurm_up "$tmp/slurm" 2 || exit 1
echo "cluster up (munged, slurmctld, 2 slurmd, nodes idle): $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s"

start_daemon() { # name, extra serve options
  local state=$tmp/$1
  "$anvil" serve --init --state "$state" > "$state.token" 2> /dev/null
  ANVIL_TOKEN=$(cat "$state.token") "$anvil" serve --state "$state" --port 0 "${@:2}" > "$state.log" 2>&1 &
  daemons+=($!)
  for _ in $(seq 100); do [ -s "$state/serve.port" ] && break; sleep 0.05; done
  ANVIL_TOKEN=$(cat "$state.token") "$anvil" role add all --state "$state" --input-prefix "$tmp" --output-prefix "$tmp" \
    --max-procs 4 --max-runtime-s 0 > /dev/null
  ANVIL_TOKEN=$(cat "$state.token") "$anvil" role grant all admin --state "$state" > /dev/null
}
start_daemon local
start_daemon slurm --backend slurm --partition test

# Seconds from submit to the first training step of one job: hosts x procs per host.
latency() { # backend, run, hosts, procs_per_host[, keep_alive_s]
  local state=$tmp/$1 out=$tmp/$2 t
  cat > "$tmp/$2.json" << EOF
{"name": "$2", "output": "$out", "resources": {"hosts": $3, "procs_per_host": $4}, "env": {"OMP_NUM_THREADS": "1"},
 "keep_alive_s": ${5:-0},
 "command": ["train", "--data", "$tmp/data", "--preset", "tiny", "--batch", "4", "--seq", "32", "--no-progress",
             "--sample-every", "-1", "--threads", "1", "--steps", "20"]}
EOF
  t=$(date +%s.%N)
  ANVIL_TOKEN=$(cat "$state.token") "$anvil" job --state "$state" submit "$tmp/$2.json" > /dev/null
  for _ in $(seq 3000); do grep -q '"kind":"train"' "$out/metrics.jsonl" 2> /dev/null && break; sleep 0.01; done
  python3 -c "print(round($(date +%s.%N) - $t, 3))"
  ANVIL_TOKEN=$(cat "$state.token") timeout 120 "$anvil" job --state "$state" wait "$(ls "$state/jobs" | sort -n | tail -n 1)" > /dev/null
}
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for backend in local slurm; do
  hosts=1 pph=2
  [ "$backend" = slurm ] && hosts=2 pph=1
  for r in $(seq "$reps"); do latency "$backend" "$backend$r" "$hosts" "$pph"; done > "$tmp/$backend.times"
  echo "$backend ($hosts host(s) x $pph): submit to first step, median of $reps: $(median < "$tmp/$backend.times") s" \
       "(all: $(tr '\n' ' ' < "$tmp/$backend.times"))"
done
# Warm: one job leaves its allocation held (keep_alive_s), then each job of the same shape runs in it.
latency slurm warm0 2 1 300 > /dev/null
for r in $(seq "$reps"); do latency slurm "warm$r" 2 1; done > "$tmp/warm.times"
grep -q "(warm pool)" "$tmp/warm$reps/logs/launcher.log" || echo "bench_slurm: the last warm job did not reuse the pool" >&2
echo "slurm warm pool (2 hosts x 1): submit to first step, median of $reps: $(median < "$tmp/warm.times") s" \
     "(all: $(tr '\n' ' ' < "$tmp/warm.times"))"
