#!/usr/bin/env bash
# The job service under load (issue: 200 submissions from 8 concurrent clients and 50 status polls
# a second while 2 jobs run): one `anvil serve --max-running 2` in a temporary state folder, then
# bench_serve.py, which drives its HTTP API and checks that no job was lost or duplicated. Each job
# is a 5-step tiny training run on synthetic tokens through `anvil launch` (mpirun).
# Usage: bench/bench_serve.sh [BUILD_DIR]   (JOBS, CLIENTS and POLLS_PER_S override the load)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
anvil=$(realpath "$build/anvil")
tmp=$(mktemp -d)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
"$anvil" serve --init --state "$tmp/state" > "$tmp/token" 2> /dev/null
export ANVIL_TOKEN=$(cat "$tmp/token")
"$anvil" serve --state "$tmp/state" --port 0 --max-running 2 --stop-grace 5 > "$tmp/serve.log" 2>&1 &
daemon=$!
trap 'kill $daemon 2> /dev/null; wait $daemon 2> /dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do [ -s "$tmp/state/serve.port" ] && break; sleep 0.05; done
"$anvil" role add bench --input-prefix "$tmp" --output-prefix "$tmp" --max-procs 1 --max-runtime-s 0 \
  --state "$tmp/state" > /dev/null
"$anvil" role grant bench admin --state "$tmp/state" > /dev/null
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 bench/bench_serve.py "$(cat "$tmp/state/serve.port")" "$tmp/runs" "${JOBS:-200}" "${CLIENTS:-8}" "${POLLS_PER_S:-50}"
