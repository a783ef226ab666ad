#!/usr/bin/env bash
# Training from S3 against training from local shards, at the same config:
# tokens/s (the trainer's median over the steps after its warm-up) of each,
# interleaved REPS times, and the S3 requests the run made. The S3 server is
# a loopback Ceph radosgw (tests/s3/radosgw.sh), started here and stopped at
# the end; the data is the King James Bible, byte-level, written by
# `anvil prep --out s3://` and by `anvil prep` locally.
# usage: bench/bench_s3.sh BUILD_DIR   (env: REPS, default 3; STEPS, default 60; PRESET, default small)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: bench_s3.sh BUILD_DIR}"
anvil="$build/anvil"
reps="${REPS:-3}" steps="${STEPS:-60}" preset="${PRESET:-small}"
work=$(mktemp -d)
trap 'bash "$root/tests/s3/radosgw.sh" stop "$work/rgw"; rm -rf "$work"' EXIT
bash "$root/tests/s3/radosgw.sh" start "$work/rgw"
. "$work/rgw/env"
curl -sf --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -X PUT \
  -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
  "$AWS_ENDPOINT_URL/bench" > /dev/null
bible -f "gen1:1-rev22:21" > "$work/kjv.txt"
"$anvil" prep --out "$work/data" --delimiter '\n' --val-fraction 0.01 --no-progress "$work/kjv.txt" > /dev/null
"$anvil" prep --out s3://bench/kjv --delimiter '\n' --val-fraction 0.01 --no-progress "$work/kjv.txt" > /dev/null
args=(--preset "$preset" --batch 8 --seq 256 --steps "$steps" --val-every 0 --val-batches 1 --sample-every -1
      --no-progress --seed 1)
tps() { sed -n 's/.*median [0-9.]* ms\/step, \([0-9]*\) tok\/s.*/\1/p' "$1"; }
local_all="" s3_all=""
for r in $(seq "$reps"); do
  "$anvil" train --data "$work/data" "${args[@]}" > /dev/null 2> "$work/local.log"
  "$anvil" train --data s3://bench/kjv "${args[@]}" > /dev/null 2> "$work/s3.log"
  l=$(tps "$work/local.log") s=$(tps "$work/s3.log")
  echo "rep $r: local $l tok/s, s3 $s tok/s"
  local_all+="$l " s3_all+="$s "
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
l=$(echo "$local_all" | median) s=$(echo "$s3_all" | median)
echo "median: local $l tok/s, s3 $s tok/s, s3/local $(awk -v a="$s" -v b="$l" 'BEGIN {printf "%.3f", a / b}')"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
