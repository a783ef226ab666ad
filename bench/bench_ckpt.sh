#!/usr/bin/env bash
# Checkpoint cost for GPT-2 124M (1.5 GB: weights + AdamW m and v), B=4, T=256,
# synthetic data, in one run (about 8 minutes on 2 cores):
#   - the disk's own sequential write rate: dd of the same size with conv=fsync;
#   - anvil's synchronous checkpoint: write time = the training stall;
#   - anvil's asynchronous checkpoint, spaced wider than one background write
#     (--ckpt-every 12, about 40 s unloaded): the stall of each checkpoint, against the
#     target of <= 10% of the synchronous write;
#   - the same spaced 6 steps apart, closer than one background write: each
#     checkpoint then waits for the previous one;
#   - bounded stop: SIGTERM at 10%, 50% and 90% into a step, time from the signal
#     to exit 75 (finish the step, write a checkpoint synchronously), against the
#     120 s a managed service gives between its signal and SIGKILL;
#   - the same SIGTERM while an asynchronous write is still in flight;
#   - read throughput: `anvil ckpt verify` reads every file and checks its CRC32C
#     (after dropping the page cache, so it comes from the disk).
# Prints a Markdown table (medians) and the per-checkpoint figures behind it.
# usage: bench/bench_ckpt.sh [--anvil PATH] [--dir DIR (on the disk to measure)]
#        [--every N (spacing of the spaced run, default 12)] [--no-close (skip the 6-step run)]
# On a loaded machine, where steps take several times longer, a smaller --every
# keeps the same spacing in seconds and the run short.
set -euo pipefail
anvil=build/anvil
dir=$(mktemp -d /tmp/bench_ckpt.XXXXXX)
every=12
close=1
while (($#)); do
  case "$1" in
    --anvil) anvil=$2; shift 2 ;;
    --dir) dir=$2; mkdir -p "$dir"; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --no-close) close=0; shift ;;
    *) echo "bench_ckpt: unknown option $1" >&2; exit 2 ;;
  esac
done
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
common=(--preset gpt2 --synthetic --batch 4 --seq 256 --no-progress --sample-every -1 --log-every 1)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
t_bench=$(date +%s)

median() { sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'; }
list() { awk '{ printf "%s%s", sep, $1; sep = ", " }'; }
now() { date +%s.%N; }
# Waits until file $1 has a line matching $2 (up to 10 minutes).
wait_line() {
  for _ in $(seq 12000); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  echo "bench_ckpt: timed out waiting for '$2' in $1" >&2; return 1
}

dd_mb_s=$( { dd if=/dev/zero of="$dir/dd.bin" bs=4M count=375 conv=fsync 2>&1 >/dev/null; } |
  awk '/copied/ { for (i = 1; i <= NF; i++) if ($i ~ /^s,?$/) t = $(i - 1); print 1572864000 / t / 1e6 }')
rm -f "$dir/dd.bin"

# Synchronous: a checkpoint after each of 3 steps.
"$anvil" train "${common[@]}" --steps 3 --ckpt-every 1 --ckpt-sync --out "$dir/sync" 2> "$dir/sync.log"
ck="$dir/sync/ckpt/$(cat "$dir/sync/ckpt/latest")"
bytes=$(du -sb "$ck" | cut -f1)
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
t0=$(now)
"$anvil" ckpt verify "$ck" > /dev/null
verify_s=$(echo "$(now) - $t0" | bc)
rm -rf "$dir/sync"
sync_all=$(grep -o 'written in [0-9]* ms (synchronous)' "$dir/sync.log" | awk '{ print $3 }')
sync_ms=$(echo "$sync_all" | median)

# Asynchronous, spaced wider than one background write: 3 checkpoints (and a synchronous last one).
"$anvil" train "${common[@]}" --steps $((3 * every + 1)) --ckpt-every $every --out "$dir/spaced" 2> "$dir/spaced.log"
rm -rf "$dir/spaced"
step_ms=$(grep -o 'median [0-9.]* ms/step' "$dir/spaced.log" | awk '{ print $2 }')
spaced_stalls=$(grep -o 'training stalled [0-9.]* ms' "$dir/spaced.log" | awk '{ print $3 }')
spaced_stall=$(echo "$spaced_stalls" | median)
spaced_writes=$(grep -o 'step_000000[0-9]* written in [0-9]* ms$' "$dir/spaced.log" | awk '{ print $4 }')
spaced_write=$(echo "$spaced_writes" | median)
spaced_pct=$(echo "scale=2; 100 * $spaced_stall / $sync_ms" | bc)
met=$(echo "$spaced_stall <= 0.1 * $sync_ms" | bc)

# Asynchronous, 6 steps apart: closer than one background write.
close_stalls="skipped (--no-close)"
if [ $close = 1 ]; then
  "$anvil" train "${common[@]}" --steps 13 --ckpt-every 6 --out "$dir/close" 2> "$dir/close.log"
  rm -rf "$dir/close"
  close_stalls="$(grep -o 'training stalled [0-9.]* ms' "$dir/close.log" | awk '{ print $3 }' | list) ms"
fi

# Bounded stop: SIGTERM at a fraction of a step after step 2 is logged. --ckpt-every is set (never due)
# because without a checkpoint option the run has no checkpointer and stops without writing one.
stop_s=() stop_write=()
for frac in 0.1 0.5 0.9; do
  log="$dir/stop_$frac.log"
  "$anvil" train "${common[@]}" --steps 1000 --ckpt-every 1000000 --out "$dir/stop" 2> "$log" &
  pid=$!
  wait_line "$log" '^step     2/'
  sleep "$(echo "$frac * $step_ms / 1000" | bc -l)"
  kill -TERM $pid
  t0=$(now)
  rc=0; wait $pid || rc=$?
  stop_s+=("$(printf '%.1f' "$(echo "$(now) - $t0" | bc)")")
  [ $rc -eq 75 ] || { echo "bench_ckpt: SIGTERM run exited $rc: $(tail -n 1 "$log")" >&2; exit 1; }
  stop_write+=("$(grep -o 'written in [0-9]* ms (synchronous)' "$log" | awk '{ print $3 }' || true)")
  rm -rf "$dir/stop"
done
stop_med=$(printf '%s\n' "${stop_s[@]}" | median)
stop_max=$(printf '%s\n' "${stop_s[@]}" | sort -n | tail -n 1)

# SIGTERM right after an asynchronous checkpoint's snapshot, while its write runs in the background.
log="$dir/inflight.log"
"$anvil" train "${common[@]}" --steps 1000 --ckpt-every 3 --out "$dir/inflight" 2> "$log" &
pid=$!
wait_line "$log" 'checkpoint step 3: snapshot taken'
kill -TERM $pid
t0=$(now)
rc=0; wait $pid || rc=$?
inflight_s=$(printf '%.1f' "$(echo "$(now) - $t0" | bc)")
inflight_dirs=$(cd "$dir/inflight/ckpt" && ls -d step_* | list || true)
inflight_bg=$(grep -o 'step_00000003 written in [0-9]* ms$' "$log" | awk '{ print $4 }' || true)
inflight_sync=$(grep -o 'written in [0-9]* ms (synchronous)' "$log" | awk '{ print $3 }' || true)
rm -rf "$dir/inflight"

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
echo "| measure | value |"
echo "|---|---:|"
echo "| checkpoint size | $((bytes / 1000000)) MB |"
echo "| training step (median of $((3 * every))) | $step_ms ms |"
echo "| disk: dd 1.5 GB, conv=fsync | $(printf '%.0f' "$dd_mb_s") MB/s |"
echo "| synchronous checkpoint (= stall), median of 3 | $sync_ms ms ($(echo "$bytes / $sync_ms / 1000" | bc) MB/s) |"
echo "| async, every $every steps: stall, median of $(echo "$spaced_stalls" | wc -l) | $spaced_stall ms ($spaced_pct% of synchronous; target <= 10%: $([ "$met" = 1 ] && echo met || echo NOT met)) |"
echo "| async, every $every steps: background write, median | $spaced_write ms |"
echo "| async, every 6 steps: stall of each | $close_stalls |"
echo "| SIGTERM to exit 75, at 10/50/90% of a step: median (max) | $stop_med s ($stop_max s); each: $(printf '%s\n' "${stop_s[@]}" | list) s, of which synchronous write $(printf '%s\n' "${stop_write[@]}" | list) ms |"
echo "| SIGTERM with an async write in flight: to exit 75 | $inflight_s s (waited for step 3's background write, $inflight_bg ms in all, then wrote step 4 synchronously, $inflight_sync ms; exit $rc; left $inflight_dirs) |"
echo "| read: ckpt verify (read + CRC32C every file) | $(printf '%.2f' "$verify_s") s ($(echo "$bytes / $verify_s / 1000000" | bc) MB/s) |"
echo
echo "async every $every steps, each stall: $(echo "$spaced_stalls" | list) ms; each background write: $(echo "$spaced_writes" | list) ms"
echo "synchronous writes: $(echo "$sync_all" | list) ms"
echo "load average before: $load_before, after: $load_after; bench wall time $(($(date +%s) - t_bench)) s"
[ -n "${KEEP:-}" ] || rm -rf "$dir"
