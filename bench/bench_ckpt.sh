#!/usr/bin/env bash
# Checkpoint cost for GPT-2 124M (1.5 GB: weights + AdamW m and v), in one run:
#   - the disk's own sequential write rate: dd of the same size with conv=fsync;
#   - anvil's synchronous checkpoint: write time = the training stall;
#   - anvil's asynchronous checkpoint: the stall the training thread sees;
#   - read throughput: `anvil ckpt verify` reads every file and checks its CRC32C
#     (after dropping the page cache, so it comes from the disk).
# usage: bench/bench_ckpt.sh [--anvil PATH] [--dir DIR (on the disk to measure)]
set -euo pipefail
anvil=build/anvil
dir=$(mktemp -d /tmp/bench_ckpt.XXXXXX)
while (($#)); do
  case "$1" in
    --anvil) anvil=$2; shift 2 ;;
    --dir) dir=$2; mkdir -p "$dir"; shift 2 ;;
    *) echo "bench_ckpt: unknown option $1" >&2; exit 2 ;;
  esac
done
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
common=(--preset gpt2 --synthetic --batch 4 --seq 256 --no-progress --sample-every -1 --log-every 1)

dd_mb_s=$( { dd if=/dev/zero of="$dir/dd.bin" bs=4M count=375 conv=fsync 2>&1 >/dev/null; } |
  awk '/copied/ { for (i = 1; i <= NF; i++) if ($i ~ /^s,?$/) t = $(i - 1); print 1572864000 / t / 1e6 }')
rm -f "$dir/dd.bin"

"$anvil" train "${common[@]}" --steps 3 --ckpt-every 1 --ckpt-sync --out "$dir/sync" 2> "$dir/sync.log"
"$anvil" train "${common[@]}" --steps 13 --ckpt-every 6 --out "$dir/async" 2> "$dir/async.log"
ck="$dir/sync/ckpt/$(cat "$dir/sync/ckpt/latest")"
bytes=$(du -sb "$ck" | cut -f1)
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
t0=$(date +%s.%N)
"$anvil" ckpt verify "$ck" > /dev/null
verify_s=$(echo "$(date +%s.%N) - $t0" | bc)

sync_ms=$(grep -o 'written in [0-9]* ms (synchronous)' "$dir/sync.log" | awk '{ print $3 }' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
async_stall=$(grep -o 'training stalled [0-9.]* ms' "$dir/async.log" | awk '{ print $3 }' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
all_stalls=$(grep -o 'training stalled [0-9.]* ms' "$dir/async.log" | awk '{ printf "%s%s", sep, $3; sep = ", " }')
async_write=$(grep -o 'written in [0-9]* ms$' "$dir/async.log" | awk '{ print $3 }' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
echo "| measure | value |"
echo "|---|---:|"
echo "| checkpoint size | $((bytes / 1000000)) MB |"
echo "| disk: dd 1.5 GB, conv=fsync | $(printf '%.0f' "$dd_mb_s") MB/s |"
echo "| synchronous checkpoint (= stall), median | $sync_ms ms ($(echo "$bytes / $sync_ms / 1000" | bc) MB/s) |"
echo "| asynchronous: background write, median | $async_write ms |"
echo "| asynchronous: training stall, median | $async_stall ms ($(echo "scale=1; 100 * $async_stall / $sync_ms" | bc)% of synchronous; each: $all_stalls ms) |"
echo "| read: ckpt verify (read + CRC32C every file) | $(printf '%.2f' "$verify_s") s ($(echo "$bytes / $verify_s / 1000000" | bc) MB/s) |"
[ -n "${KEEP:-}" ] || rm -rf "$dir"
