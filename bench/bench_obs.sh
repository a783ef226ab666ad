#!/usr/bin/env bash
# What watching a run costs training, end to end: the median step (ms) of the same run, mini preset,
# B=8, T=128, synthetic data, --steps N (default 40; the first 5 are left out), in interleaved rounds
# (default 5) of:
#   - off: this build, nothing on;
#   - metrics: --metrics-port, scraped once a second by curl (Prometheus' default is once in 15 s);
#   - profile: --profile with --profile-steps 2-3, the steps after them (the profiled kernel table
#     still in place, no profile on);
#   - old (with --old PATH or --old-rev REV): a build without the profiling hooks, for what they cost
#     compiled in but off.
# Then bench_obs (bench/bench_obs.c): the same costs measured in process, per step, in microseconds.
# Prints the machine, the load average and a Markdown table of medians and ratios to "off".
# usage: bench/bench_obs.sh [--anvil PATH] [--old PATH | --old-rev REV] [--rounds N] [--steps N]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
anvil=build/anvil
old=""
old_rev=""
rounds=5
steps=40
while (($#)); do
  case "$1" in
    --anvil) anvil=$2; shift 2 ;;
    --old) old=$2; shift 2 ;;
    --old-rev) old_rev=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "bench_obs: unknown option $1" >&2; exit 2 ;;
  esac
done
((steps >= 10 && rounds >= 1)) || { echo "bench_obs: --steps must be >= 10" >&2; exit 2; }
dir=$(mktemp -d /tmp/bench_obs.XXXXXX)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
(while sleep 5; do cut -d' ' -f1 /proc/loadavg; done) > "$dir/load" &
sampler=$!
trap 'kill $sampler 2> /dev/null || true' EXIT
if [ -n "$old_rev" ]; then
  git -C "$here/.." worktree add --detach "$dir/old-src" "$old_rev" > /dev/null 2>&1
  "$dir/old-src/scripts/build.sh" "$dir/old-build" --target anvil_cli
  old=$dir/old-build/anvil
fi
common=(--preset mini --synthetic --batch 8 --seq 128 --steps "$steps" --no-progress --sample-every -1 --log-every 1000)

# The median step time of run folder $1 over steps 6.. (and, for the profile, after its steps).
median_ms() {
  python3 -c "
import json, statistics, sys
ms = [r['ms'] for r in map(json.loads, open(sys.argv[1] + '/metrics.jsonl')) if r['kind'] == 'train' and r['step'] > 5]
print(f'{statistics.median(ms):.3f}')" "$1"
}
run() { # name binary extra-args...
  local name=$1 bin=$2 out=$dir/$1_$r
  shift 2
  "$bin" train "${common[@]}" --out "$out" "$@" > /dev/null 2> "$out.log"
  median_ms "$out" >> "$dir/$name"
}
configs=(off metrics profile)
[ -n "$old" ] && configs+=(old)
for r in $(seq "$rounds"); do
  for c in "${configs[@]}"; do
    case $c in
      off) run off "$anvil" ;;
      old) run old "$old" ;;
      profile) run profile "$anvil" --profile "$dir/prof_$r" --profile-steps 2-3 ;;
      metrics)
        rm -f "$dir/metrics_$r/metrics.port"
        "$anvil" train "${common[@]}" --out "$dir/metrics_$r" --metrics-port 0 > /dev/null 2> "$dir/metrics_$r.log" &
        pid=$!
        (while kill -0 $pid 2> /dev/null; do
           [ -s "$dir/metrics_$r/metrics.port" ] && curl -s "http://127.0.0.1:$(cat "$dir/metrics_$r/metrics.port")/metrics" > /dev/null
           sleep 1
         done) &
        wait $pid
        median_ms "$dir/metrics_$r" >> "$dir/metrics"
        ;;
    esac
  done
done

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, OMP_NUM_THREADS=$OMP_NUM_THREADS; $(date -u +%F)"
echo "load average during the runs: $(sort -n "$dir/load" | awk '{a[NR]=$1} END {print a[1] " to " a[NR] ", median " a[int((NR+1)/2)]}')"
echo
echo "| configuration | median step, ms (median of $rounds runs) | per-run medians | ratio to off |"
echo "|---|---:|---|---:|"
base=$(sort -n "$dir/off" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
for c in "${configs[@]}"; do
  m=$(sort -n "$dir/$c" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "| $c | $m | $(tr '\n' ' ' < "$dir/$c") | $(awk -v a="$m" -v b="$base" 'BEGIN { printf "%.4f", a / b }') |"
done
echo
"$(dirname "$anvil")/bench/bench_obs"
