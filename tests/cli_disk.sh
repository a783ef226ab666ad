#!/usr/bin/env bash
# A full disk. Small tmpfs file systems, mounted here and unmounted at exit,
# are filled until ENOSPC by prep, by training with checkpoints (one process,
# and 2 ranks at ZeRO-2 through anvil launch), by export and by the metrics
# file. Each must end with exit 1 and one error line naming the file that did
# not fit, and leave what it finished before intact: prep's shards pass their
# manifest's CRC32Cs (a re-run on a larger disk keeps them and ends like a
# run that never failed), every checkpoint passes `anvil ckpt verify`, and
# `latest` names the newest of them. Mounting needs root; without it the test
# fails, unless ANVIL_TEST_ALLOW_SKIP=1.
. "$(dirname "$0")/tools/cli_common.sh"

mounts=()
at_exit() { for m in "${mounts[@]}"; do umount "$m" 2> /dev/null || umount -l "$m"; done; }
# Mounts a fresh tmpfs of $2 bytes at $tmp/$1.
small_fs() {
  mkdir -p "$tmp/$1" && mount -t tmpfs -o "size=$2" tmpfs "$tmp/$1" 2> "$tmp/mount.err" || return 1
  mounts+=("$tmp/$1")
}
small_fs probe 64k || { missing "cannot mount a tmpfs ($(cat "$tmp/mount.err")): no full-disk test"; finish; }
bible -f "gen1:1-gen50:26" > "$tmp/gen.txt" || { missing "bible-kjv is not installed"; finish; }

# The run failed the way a full disk should: exit 1, and the last line of
# its output an error naming a file under the mount and ENOSPC. (what, rc, log, mount)
full_disk_error() {
  local err
  err=$(tail -n 1 "$3")
  case "$2:$err" in
    1:*"error: "*"$tmp/$4/"*"No space left on device"*) ok "$1: exit 1, $err" ;;
    *) bad "$1: exit $2, last line: $err" ;;
  esac
}
# Every checkpoint folder under run $1 verifies, there are at least $2, no
# temporary folder is left, and latest names the newest.
ckpts_intact() {
  local run=$1 want=$2 n=0 d
  for d in "$run"/ckpt/step_*; do
    [ -d "$d" ] || continue
    case "$d" in *.tmp-*) bad "$run: a temporary checkpoint folder is left: $d"; return ;; esac
    "$anvil" ckpt verify "$d" > /dev/null 2> "$tmp/verify.err" || { bad "$d does not verify: $(cat "$tmp/verify.err")"; return; }
    n=$((n + 1))
  done
  local newest
  newest=$(cd "$run/ckpt" && ls -d step_* 2> /dev/null | sort | tail -n 1)
  if [ "$n" -ge "$want" ] && [ "$(cat "$run/ckpt/latest" 2> /dev/null)" = "$newest" ]; then
    ok "$run: the $n checkpoints written before verify, latest is $newest"
  else
    bad "$run: $n checkpoints (want >= $want), latest '$(cat "$run/ckpt/latest" 2> /dev/null)', newest '$newest'"
  fi
}

# prep: 10 shards of 41 KB do not fit in 160 KB.
popts=(--delimiter '\n' --val-fraction 0.05 --shard-tokens 20000 "$tmp/gen.txt")
"$anvil" prep --out "$tmp/pref" "${popts[@]}" > /dev/null || bad "prep on a large disk"
small_fs p1 160k
"$anvil" prep --out "$tmp/p1/data" "${popts[@]}" > /dev/null 2> "$tmp/p1.log"
full_disk_error "prep" $? "$tmp/p1.log" p1
leftover=$(ls "$tmp/p1/data" | grep -c '\.tmp\.')
kept=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["shards"]))' "$tmp/p1/data/manifest.json")
[ "$leftover" = 0 ] && [ "$kept" -ge 1 ] && ok "prep: $kept shards in the manifest, no temporary file left" ||
  bad "prep: $leftover temporary files, manifest shards '$kept'"
cp -a "$tmp/p1/data" "$tmp/p1again"
"$anvil" prep --out "$tmp/p1again" "${popts[@]}" > /dev/null 2> "$tmp/p1again.log" || bad "prep again on a large disk"
same=1
for f in "$tmp/pref"/*; do cmp -s "$f" "$tmp/p1again/$(basename "$f")" || same=0; done
grep -q "kept $kept shard" "$tmp/p1again.log" && [ $same = 1 ] &&
  ok "prep: the $kept shards pass their checksums and the run finishes like one that never failed" ||
  bad "prep after the full disk: $(cat "$tmp/p1again.log"), same as the reference: $same"

# Training, one process: a tiny model's checkpoint takes 1.4 MB, so the
# third does not fit in 3.5 MB (the metrics file and the lock are small).
targs=(--data "$tmp/pref" --preset tiny --batch 4 --seq 32 --steps 40 --lr 3e-3 --no-progress --sample-every -1
       --seed 5 --threads 1 --ckpt-every 5 --keep-last 100)
small_fs t1 3500k
"$anvil" train "${targs[@]}" --out "$tmp/t1/run" > /dev/null 2> "$tmp/t1.log"
full_disk_error "train, checkpoints" $? "$tmp/t1.log" t1
ckpts_intact "$tmp/t1/run" 2

# The same at ZeRO-2 on 2 ranks: each rank writes its shard of the moments.
# The launcher's last line names the rank that failed, the rank's own line
# above it the file. The launcher's logs go to the large disk: mpirun hands
# it the ranks' output through files there, and on the full disk it has
# nowhere to put them.
if command -v mpirun > /dev/null; then
  small_fs t2 3500k
  env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" OMP_NUM_THREADS=1 timeout 120 "$anvil" launch -n 2 \
    --log-dir "$tmp/t2logs" -- train "${targs[@]}" --batch 2 --zero 2 --no-health --out "$tmp/t2/run" \
    > /dev/null 2> "$tmp/t2.log"
  rc=$?
  last=$(tail -n 1 "$tmp/t2.log")
  rank_err=$(grep "^\[rank [0-9]\] anvil train: error: .*$tmp/t2/.*No space left on device" "$tmp/t2.log" | head -n 1)
  case "$rc:$last" in
    1:"anvil launch: error: rank "[01]" exited with status 1"*) [ -n "$rank_err" ] && ok "train, 2 ranks at ZeRO-2: exit 1, $rank_err; $last" ||
      bad "train, 2 ranks at ZeRO-2: no rank names the file: $(grep error "$tmp/t2.log")" ;;
    *) bad "train, 2 ranks at ZeRO-2: exit $rc, last line: $last" ;;
  esac
  ckpts_intact "$tmp/t2/run" 2
  ls "$tmp/t2/run/ckpt/$(cat "$tmp/t2/run/ckpt/latest")"/shard_1_of_2.safetensors > /dev/null 2>&1 &&
    ok "the sharded checkpoints hold both shards" || bad "no shard files in the sharded checkpoints"
else
  missing "mpirun is not installed: no sharded run on a full disk"
fi

# export: the model file does not fit; nothing half-written is left.
small_fs e1 200k
"$anvil" export --model "$tmp/t1/run/ckpt/$(cat "$tmp/t1/run/ckpt/latest")" --out "$tmp/e1/hf" > /dev/null 2> "$tmp/e1.log"
full_disk_error "export" $? "$tmp/e1.log" e1
[ -z "$(find "$tmp/e1" -type f)" ] && ok "export: no partial file left" || bad "export left $(find "$tmp/e1" -type f)"

# The metrics file, with no checkpoint to fill the disk first: 3 pages of
# it hold about 60 lines, and every line left in it is whole.
small_fs m1 16k
"$anvil" train "${targs[@]}" --steps 200 --ckpt-every 0 --out "$tmp/m1/run" > /dev/null 2> "$tmp/m1.log"
full_disk_error "metrics" $? "$tmp/m1.log" m1
grep -q "metrics.jsonl" "$tmp/m1.log" && python3 - "$tmp/m1/run/metrics.jsonl" <<'EOF' && ok "metrics: every line is whole" || bad "metrics: a broken line, or the error does not name metrics.jsonl"
import json, sys
lines = open(sys.argv[1]).read().split("\n")
assert lines[-1] == "" and len(lines) > 10, lines[-3:]
for l in lines[:-1]:
    json.loads(l)
EOF

finish
