#!/usr/bin/env bash
# anvil health: in a world of one, and over 4 ranks through `anvil launch`
# (mpirun is required, unless ANVIL_TEST_ALLOW_SKIP=1), on shared memory and
# over TCP:
#   - a healthy job exits 0 and prints the per-rank table and the all-reduce
#     table; in the JSON report every size is exact and busbw/algbw is
#     2(n-1)/n;
#   - each fault of the ANVIL_HEALTH_FAULT test hook (slow-gemm, bad-gemm,
#     bad-allreduce, bad-memory) is named with its rank and host, one line,
#     and the exit status is 1;
#   - --tp 2 on 4 ranks runs the all-reduce within each group of 2 and names
#     each group's bandwidth; a wrong sum in one group is named; --tp 3 on 4
#     ranks is refused;
#   - anvil train on 2 ranks runs the quick check first, is stopped by a
#     wrong all-reduce before its first step, and --no-health skips it.
# The slow factor is lowered (0.1, 0.25 for slow-gemm, whose rank is 20x
# slower) so that noise on shared cores does not name a healthy rank.
. "$(dirname "$0")/tools/cli_common.sh"
host=$(hostname)
small=(--mem-mb 16 --max-bytes 262144 --iters 3 --gemm-n 128)

# The one problem line for rank R of $tmp/err.
names() {
  local r=$1 what=$2
  [ "$(grep -c "unhealthy: rank " "$tmp/err")" -eq 1 ] && grep -q "unhealthy: rank $r ($host) $what" "$tmp/err"
}

if "$anvil" health "${small[@]}" --slow-factor 0.1 > "$tmp/out" 2> "$tmp/err" && grep -q "^healthy: 1 rank" "$tmp/out" &&
  grep -q "busbw GB/s" "$tmp/out"; then
  ok "world of one is healthy"
else
  bad "world of one: $(cat "$tmp/err")"
fi
ANVIL_HEALTH_FAULT=0:bad-gemm "$anvil" health "${small[@]}" --slow-factor 0.1 > /dev/null 2> "$tmp/err"
rc=$?
[ $rc -eq 1 ] && names 0 "GEMM is wrong" && ok "world of one: a wrong GEMM is named" ||
  bad "world of one bad-gemm: exit $rc, $(cat "$tmp/err")"
ANVIL_HEALTH_FAULT=0:bad-memory "$anvil" health "${small[@]}" --slow-factor 0.1 > /dev/null 2> "$tmp/err"
rc=$?
[ $rc -eq 1 ] && names 0 "memory check failed" && ok "world of one: bad memory is named" ||
  bad "world of one bad-memory: exit $rc, $(cat "$tmp/err")"

usage() {
  local what=$1 want_rc=$2 want=$3
  shift 3
  "$@" > /dev/null 2> "$tmp/err"
  local rc=$?
  if [ $rc -eq "$want_rc" ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q -- "$want" "$tmp/err"; then
    ok "$what: exit $rc, one line"
  else
    bad "$what: exit $rc, $(cat "$tmp/err")"
  fi
}
usage "slow factor out of range" 2 "slow-factor must be in" "$anvil" health --slow-factor 1.5
usage "max below min" 2 "below --min-bytes" "$anvil" health --min-bytes 8192 --max-bytes 4096
usage "unknown option" 2 "unknown option" "$anvil" health --frobnicate 1
usage "bad fault kind" 1 "unknown kind 'melt'" env ANVIL_HEALTH_FAULT=1:melt "$anvil" health
usage "bad fault rank" 1 "expected RANK:KIND" env ANVIL_HEALTH_FAULT=x:bad-gemm "$anvil" health

command -v mpirun > /dev/null || { missing "mpirun is not installed: only the world-of-one checks ran"; finish; }
# Leak checks stay off for the multi-process runs under ASan: Open MPI
# unloads its components before LeakSanitizer runs (see cli_dist.sh).
mpi_env=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" OMP_NUM_THREADS=1)
launch() { "${mpi_env[@]}" timeout 120 "$anvil" launch --log-dir "$tmp/logs" "${launch_opts[@]}" "$@"; }

# A healthy job: exit 0, both tables, and busbw = algbw * 2(n-1)/n exactly.
healthy() {
  local n=$1 label=$2
  if launch -n "$n" -- health "${small[@]}" --slow-factor 0.1 > "$tmp/out" 2> "$tmp/err" &&
    grep -q "^\[rank 0\] healthy: $n ranks" "$tmp/out" && grep -q "busbw GB/s" "$tmp/out" &&
    [ "$(grep -c "^\[rank 0\] *[0-9]* *$host " "$tmp/out")" -eq "$n" ]; then
    ok "$label: $n ranks healthy, table printed"
  else
    bad "$label: $n ranks: $(tail -3 "$tmp/out") $(tail -3 "$tmp/err")"
  fi
  launch -n "$n" -- health "${small[@]}" --slow-factor 0.1 --json > "$tmp/json" 2> "$tmp/err"
  if out=$(sed -n 's/^\[rank 0\] //p' "$tmp/json" | python3 -c '
import json, sys
r = json.load(sys.stdin)
n = r["ranks"]
sizes = r["allreduce"]
assert r["healthy"] and n == int(sys.argv[1]), r
assert [s["bytes"] for s in sizes] == [4096, 16384, 65536, 262144], sizes
for s in sizes:
    assert s["correct"] and s["algbw_gb_s"] > 0, s
    # cJSON prints doubles that read back exactly and this repeats the C expression: only a print rounding to allow.
    assert abs(s["busbw_gb_s"] - s["algbw_gb_s"] * 2 * (n - 1) / n) <= 1e-9 * s["busbw_gb_s"], s
assert all(k["gemm_ok"] and k["gemm_error_over_bound"] <= 1 and k["memory_ok"] for k in r["per_rank"])
print("%d sizes, busbw at 256 KB %.3f GB/s" % (len(sizes), sizes[-1]["busbw_gb_s"]))
' "$n" 2>&1); then
    ok "$label: JSON report: $out"
  else
    bad "$label: JSON report: $out"
  fi
}
# A fault on rank R: exit 1 and exactly one line naming rank R and this host.
fault() {
  local n=$1 f=$2 r=$3 what=$4 label=$5 factor=${6:-0.1}
  ANVIL_HEALTH_FAULT="$r:$f" launch -n "$n" -- health "${small[@]}" --slow-factor "$factor" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  sed -n 's/^\[rank 0\] //p' "$tmp/out" "$tmp/err" > "$tmp/err0"
  mv "$tmp/err0" "$tmp/err"
  if [ $rc -eq 1 ] && names "$r" "$what"; then
    ok "$label: $f on rank $r named: $(grep "unhealthy" "$tmp/err")"
  else
    bad "$label: $f on rank $r: exit $rc, $(grep -v "^ *[0-9]" "$tmp/err" | tail -3)"
  fi
}

launch_opts=()
healthy 4 "shared memory"
fault 4 slow-gemm 2 "GEMM [0-9.]* GFLOP/s is 0.[0-9]*x the median" "shared memory" 0.25
fault 4 bad-gemm 1 "GEMM is wrong" "shared memory"
fault 4 bad-allreduce 3 "all-reduce result is wrong" "shared memory"
fault 4 bad-memory 0 "memory check failed" "shared memory"
launch_opts=(--mca-tcp)
healthy 3 "TCP"
fault 3 bad-allreduce 2 "all-reduce result is wrong" "TCP"
launch_opts=()

# Per TP group: 4 ranks as two groups of 2, each named with its ranks and bandwidth, every sum exact
# (a wrong one in group 1 is named); groups that do not divide the world are refused.
if launch -n 4 -- health "${small[@]}" --slow-factor 0.1 --tp 2 > "$tmp/out" 2> "$tmp/err" &&
  grep -q "^\[rank 0\] tp group 0 (ranks 0-1): all-reduce of [0-9]* bytes busbw [0-9.]* GB/s" "$tmp/out" &&
  grep -q "^\[rank 0\] tp group 1 (ranks 2-3): all-reduce of" "$tmp/out"; then
  ok "--tp 2: each TP group's all-reduce bandwidth"
else
  bad "--tp 2: $(tail -3 "$tmp/out") $(tail -2 "$tmp/err")"
fi
ANVIL_HEALTH_FAULT=3:bad-allreduce launch -n 4 -- health "${small[@]}" --tp 2 > /dev/null 2> "$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "rank 3 ($host) all-reduce result is wrong" "$tmp/err" &&
  ok "--tp 2: a wrong sum in TP group 1 is named" || bad "--tp 2 with a fault: exit $rc, $(tail -2 "$tmp/err")"
launch -n 4 -- health "${small[@]}" --tp 3 > /dev/null 2> "$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "tp 3 does not divide the 4 ranks" "$tmp/err" && ok "--tp 3 on 4 ranks is refused" ||
  bad "--tp 3 on 4 ranks: exit $rc, $(tail -2 "$tmp/err")"

# Before training: the quick check runs on 2 ranks, a wrong all-reduce stops
# the job before any step, and --no-health skips the check.
train=(train --synthetic --preset tiny --seq 32 --batch 2 --steps 2 --no-progress --sample-every -1 --val-every 0)
if launch -n 2 -- "${train[@]}" --out "$tmp/run1" > /dev/null 2> "$tmp/err" &&
  grep -q "^\[rank 0\] health: 2 ranks ok" "$tmp/err"; then
  ok "train on 2 ranks runs the quick check"
else
  bad "train with the check: $(tail -3 "$tmp/err")"
fi
ANVIL_HEALTH_FAULT=1:bad-allreduce launch -n 2 -- "${train[@]}" --out "$tmp/run2" > /dev/null 2> "$tmp/err"
rc=$?
if [ $rc -eq 1 ] && grep -q "unhealthy: rank 1 ($host) all-reduce result is wrong" "$tmp/err" &&
  grep -q "health check before training failed" "$tmp/err" && ! grep -q "step " "$tmp/err"; then
  ok "train stops before its first step on a failed check"
else
  bad "train with a fault: exit $rc, $(tail -3 "$tmp/err")"
fi
if ANVIL_HEALTH_FAULT=1:bad-allreduce launch -n 2 -- "${train[@]}" --no-health --out "$tmp/run3" > /dev/null \
  2> "$tmp/err" && ! grep -q "health" "$tmp/err"; then
  ok "--no-health skips the check"
else
  bad "--no-health: $(tail -3 "$tmp/err")"
fi

finish
