#!/usr/bin/env bash
# Fuzzes one target from its seed corpus:
#   run.sh BINARY SEED_CORPUS CRASH_DIR MAX_LEN
# for a fixed budget: ANVIL_FUZZ_RUNS runs (default 200000) or
# ANVIL_FUZZ_SECONDS seconds (default 30; 0: no limit), whichever comes
# first, with libFuzzer's seed ANVIL_FUZZ_SEED (default 1, so a run repeats;
# 0: a new one each time). The inputs libFuzzer adds go to a scratch folder,
# so the committed corpus is only read and every run starts from the same
# seeds. An input that breaks the target is kept as
# CRASH_DIR/<target>-crash-<sha1> (or -leak-, -timeout-, -oom-): the
# regression input to add to the corpus once fixed. A broken target exits 1:
# libFuzzer's own code for it is 77, which CTest takes for a skip here.
set -euo pipefail
bin=$1 seeds=$2 crashes=$3 max_len=$4
[ -d "$seeds" ] || { echo "run.sh: no seed corpus $seeds" >&2; exit 1; }
mkdir -p "$crashes"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$bin" -error_exitcode=1 -artifact_prefix="$crashes/$(basename "$bin" | sed 's/^fuzz_//')-" -runs="${ANVIL_FUZZ_RUNS:-200000}" \
  -max_total_time="${ANVIL_FUZZ_SECONDS:-30}" -seed="${ANVIL_FUZZ_SEED:-1}" -max_len="$max_len" \
  -print_final_stats=1 "$scratch" "$seeds"
