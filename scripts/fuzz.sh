#!/usr/bin/env bash
# Long fuzzing runs: scripts/fuzz.sh [TARGET] [RUNS]
# TARGET: jsonl, chunks, manifest, rankfile, encode, safetensors, shard, jobspec, api, logmetric, trace, heartbeat,
# plot, goodput or accounting (one per folder of tests/fuzz/corpus)
# (default: all of them, one after the other); RUNS: per target (default 1000000).
# Builds the fuzz targets (build-fuzz, as scripts/test.sh does) and runs each
# from its seed corpus with no time limit and a new libFuzzer seed, then
# prints per target the runs, the time and what it found. An input that
# broke a target is kept in build-fuzz/tests/fuzz/crashes/: fix the bug, then
# add the input to tests/fuzz/corpus/<target>/ as a regression input.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()
for d in tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done # one seed folder per target
[ -n "${1:-}" ] && targets=("$1")
runs=${2:-1000000}
scripts/build.sh build-fuzz -DCMAKE_C_COMPILER=clang -DANVIL_SANITIZE=ON -DANVIL_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug --target fuzz
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ANVIL_FUZZ_RUNS=$runs ANVIL_FUZZ_SECONDS=0 ANVIL_FUZZ_SEED=0
status=0
for t in "${targets[@]}"; do
  log=build-fuzz/tests/fuzz/$t.log
  if (cd build-fuzz && ctest -R "^fuzz_$t\$" -V --timeout 0) > "$log" 2>&1; then found="nothing"; else found="FAILED"; status=1; fi
  done_line=$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" | tail -n 1)
  [ "$found" = FAILED ] && found="FAILED: $(grep -m 1 -E '==ERROR|SUMMARY|deadly signal|FAIL' "$log" || true) (log: $log)"
  echo "fuzz_$t: ${done_line:-no summary}; $found"
done
ls build-fuzz/tests/fuzz/crashes 2> /dev/null | sed 's/^/crash input: build-fuzz\/tests\/fuzz\/crashes\//'
exit $status
