#!/usr/bin/env bash
# Goodput under faults: one training job of the job service (anvil serve, local backend, PROCS ranks
# of the mini preset, 1 thread each; default 1) sized to MINUTES of fault-free training, run
#   - once without faults (the twin: its wall time, its checkpoint cost, its weights);
#   - for each MTBF, struck by `anvil chaos --mtbf MTBF` (random faults of KINDS from a fixed seed, to
#     the job's end), once with a fixed checkpoint interval (--every steps) and once with
#     --ckpt-every auto (told the MTBF with --mtbf, as a user would);
#   - once struck by a mixed schedule (--mixed: one fault of each kind of MIXED_KINDS, in turn, every
#     MIXED_GAP seconds), to price the kinds the ETTR runs leave out (a frozen rank: the hang
#     timeout the service derives from the run).
# Every struck job must end Completed and bit-identical to the twin. Prints, from `anvil job goodput`:
# each run's ETTR and parts, beside the first-order Young/Daly model computed from the measured costs
# (C the twin's median checkpoint cost to training, R the median detection + restart of a fault,
# M the MTBF: the optimal interval sqrt(2CM) and an ETTR of about 1 - sqrt(2C/M) - R/M, the
# fault-free run's own checkpoint and evaluation time aside), and the median and worst loss per
# fault kind split into detection, restart and recompute. The load average, sampled every 5 s, is
# printed beside. On a shared machine, run it under `nice -n -15` with one rank: the job then keeps
# a core to itself.
# usage: bench/bench_goodput.sh [--anvil PATH] [--dir DIR] [--procs P] [--minutes M] [--mtbf "30 60 120"]
#        [--every N] [--kinds K,K] [--mixed-kinds K,K] [--mixed-gap S] [--seed N] [--no-mixed]
# Runtime: about (1 + 2 x MTBFs + 1) x MINUTES / ETTR; with the defaults, 80-90 minutes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
anvil=$here/../build/anvil
dir=""
minutes=10
mtbfs="30 60 120"
every=100
kinds=kill-rank,kill-attempt
mixed_kinds=kill-rank,stop-rank,kill-attempt,host-lost
mixed_gap=30
mixed=1
seed=1
procs=1
while (($#)); do
  case "$1" in
    --anvil) anvil=$(realpath "$2"); shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --procs) procs=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --mtbf) mtbfs=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --kinds) kinds=$2; shift 2 ;;
    --mixed-kinds) mixed_kinds=$2; shift 2 ;;
    --mixed-gap) mixed_gap=$2; shift 2 ;;
    --no-mixed) mixed=0; shift ;;
    --seed) seed=$2; shift 2 ;;
    *) echo "bench_goodput: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$anvil" ] || { echo "bench_goodput: no anvil binary at $anvil (build first, or --anvil)" >&2; exit 2; }
[ -n "$dir" ] || dir=$(mktemp -d /tmp/bench_goodput.XXXXXX)
mkdir -p "$dir"
dir=$(realpath "$dir")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
state=$dir/state
(while sleep 5; do echo "$(date +%s) $(cut -d' ' -f1 /proc/loadavg)"; done) > "$dir/load" &
sampler=$!
daemon=""
trap 'kill $sampler $daemon 2> /dev/null || true' EXIT
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores; anvil at $(git -C "$here" rev-parse --short HEAD)"

bible -f "gen1:1-exo40:38" > "$dir/text.txt"
"$anvil" prep --out "$dir/data" --delimiter '\n' --val-fraction 0.05 "$dir/text.txt" > /dev/null
"$anvil" serve --init --state "$state" > "$dir/token" 2> /dev/null
export ANVIL_TOKEN=$(cat "$dir/token")
"$anvil" serve --state "$state" --port 0 --stop-grace 3 >> "$dir/serve.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -s "$state/serve.port" ] && break; sleep 0.05; done
job() { "$anvil" job --state "$state" "$@"; }
"$anvil" role --state "$state" add all --input-prefix "$dir" --output-prefix "$dir" --max-procs "$procs" --max-runtime-s 0 \
  > /dev/null
"$anvil" role --state "$state" grant all admin > /dev/null

# The step count for MINUTES of training: the median step of a short run of the same job, alone.
common=(train --data "$dir/data" --preset mini --batch 8 --seq 128 --no-progress --sample-every -1 --seed 3
        --threads 1 --keep-last 2)
calib=$(job submit --name calibrate --procs "$procs" --output "$dir/calibrate" -- "${common[@]}" --steps 300 --ckpt-every 0 |
  grep -o 'job [0-9]*' | cut -d' ' -f2)
job wait "$calib" > /dev/null
step_ms=$(grep -o 'median [0-9.]* ms/step' "$dir/calibrate/logs/rank_0.log" | tail -n 1 | cut -d' ' -f2)
steps=$(python3 -c "print(int($minutes * 60e3 / $step_ms) // 100 * 100)")
# Faults are drawn over four times the fault-free time: past any ETTR the runs can fall to.
span=$(python3 -c "print($minutes * 240)")
echo "steps: $steps ($minutes min at the calibration's median $step_ms ms a step)"

# submit NAME EVERY [train options...]: the job's ID.
submit() {
  job submit --name "$1" --procs "$procs" --max-retries 100 --output "$dir/$1" -- "${common[@]}" --steps "$steps" \
    --ckpt-every "$2" "${@:3}" | grep -o 'job [0-9]*' | cut -d' ' -f2
}
# strike NAME ID CHAOS-OPTIONS...: chaos against the job until its end, then its goodput as JSON.
strike() {
  "$anvil" chaos --state "$state" "$2" "${@:3}" > "$dir/$1.chaos" 2>&1 || true
  job wait "$2" > /dev/null || true
  job --json goodput "$2" > "$dir/$1.goodput.json"
  cmp -s "$dir/twin/model.safetensors" "$dir/$1/model.safetensors" && echo same > "$dir/$1.cmp" ||
    echo DIFFERENT > "$dir/$1.cmp"
  echo "$1: $(head -n 1 "$dir/$1.chaos"), weights $(cat "$dir/$1.cmp") ($(date +%T), load $(cut -d' ' -f1 /proc/loadavg))"
}

twin=$(submit twin "$every")
job wait "$twin" > /dev/null
job --json goodput "$twin" > "$dir/twin.goodput.json"
echo "twin: $(job describe "$twin" | grep -m1 -o 'Completed') ($(date +%T))"
for m in $mtbfs; do
  id=$(submit "fixed_$m" "$every")
  strike "fixed_$m" "$id" --mtbf "$m" --duration "$span" --kinds "$kinds" --seed "$seed"
  id=$(submit "auto_$m" auto --mtbf "$m")
  strike "auto_$m" "$id" --mtbf "$m" --duration "$span" --kinds "$kinds" --seed "$seed"
done
if ((mixed)); then
  schedule=$(python3 -c "
k = '$mixed_kinds'.split(',')
print(', '.join(f'{$mixed_gap * (i + 1)}s {k[i % len(k)]}' for i in range(100)))")
  id=$(submit mixed "$every")
  strike mixed "$id" --schedule "$schedule" --seed "$seed"
fi
python3 "$here/goodput_report.py" "$dir" "$every" "$mtbfs" "$kinds" "$mixed_kinds" "$step_ms"
