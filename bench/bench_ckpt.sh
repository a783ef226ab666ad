#!/usr/bin/env bash
# What checkpoints cost training, GPT-2 124M (1.5 GB: weights + AdamW m and v), B=4, T=64, synthetic
# data, 2 threads, this build against an older one (the way before direct writes and in-call snapshots):
#   - the median undisturbed step;
#   - a synchronous checkpoint (--ckpt-sync): training waits for all of it (median of the 2nd-4th;
#     the 1st also faults the snapshot's memory in);
#   - asynchronous checkpoints every --every steps (default 30, wider than the old build's background
#     write), --ckpts of them (default 5): the true cost of each, the save call's time plus, over the
#     half interval after it, each step's time above the median of the interval's second half, when
#     the write is done (the "window" figure, computed the same way for both builds from
#     metrics.jsonl; the old build's save call is only a thread start, not timed), and, for this
#     build, the cost the trainer itself reports (its own baseline and overlap, tests/tools/ckpt_costs.py);
#     medians of the 2nd and later, the 1st (which faults the snapshot's memory in) apart;
#   - the disk's own sequential write rate (dd of 1.5 GB, conv=fsync);
#   - bounded stop: SIGTERM at 10%, 50% and 90% into a step, and right after an asynchronous
#     checkpoint's snapshot while its write is in flight, to exit 75;
#   - read: `anvil ckpt verify` after dropping the page cache (as root).
# Prints the machine (CPU model, cores), the load average sampled every 5 s during the run, and a
# Markdown table.
# usage: bench/bench_ckpt.sh [--anvil PATH] [--old PATH | --old-rev REV] [--dir DIR] [--every N]
#        [--ckpts N] [--no-stop]
#   --old-rev REV builds that revision of this repository (git worktree, scripts/build.sh) for the
#   old figures; without --old or --old-rev only this build is measured. --dir: a folder on the
#   disk to measure (default: a new one under /tmp).
# Runtime on an idle 2-core Sapphire Rapids VM: about 6 minutes with --old (plus 1-3 minutes to build
# --old-rev); steps are 0.7 s there, and proportionally longer on a loaded machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
anvil=build/anvil
old=""
old_rev=""
dir=$(mktemp -d /tmp/bench_ckpt.XXXXXX)
every=30
ckpts=5
stop=1
while (($#)); do
  case "$1" in
    --anvil) anvil=$2; shift 2 ;;
    --old) old=$2; shift 2 ;;
    --old-rev) old_rev=$2; shift 2 ;;
    --dir) dir=$2; mkdir -p "$dir"; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --ckpts) ckpts=$2; shift 2 ;;
    --no-stop) stop=0; shift ;;
    *) echo "bench_ckpt: unknown option $1" >&2; exit 2 ;;
  esac
done
((every >= 4 && ckpts >= 2)) || { echo "bench_ckpt: --every must be >= 4 and --ckpts >= 2" >&2; exit 2; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
common=(--preset gpt2 --synthetic --batch 4 --seq 64 --no-progress --sample-every -1 --log-every 1)
t_bench=$(date +%s)
(while sleep 5; do cut -d' ' -f1 /proc/loadavg; done) > "$dir/load" &
sampler=$!
trap 'kill $sampler 2> /dev/null || true' EXIT

if [ -n "$old_rev" ]; then
  git -C "$here/.." worktree add --detach "$dir/old-src" "$old_rev" > /dev/null 2>&1
  "$dir/old-src/scripts/build.sh" "$dir/old-build" --target anvil_cli
  old=$dir/old-build/anvil
fi

median() { sort -n | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else if (NR) print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
list() { awk '{ printf "%s%s", sep, $1; sep = ", " }'; }
now() { date +%s.%N; }
# Waits until file $1 has a line matching $2 (up to 20 minutes).
wait_line() {
  for _ in $(seq 24000); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  echo "bench_ckpt: timed out waiting for '$2' in $1" >&2; return 1
}

dd_mb_s=$( { dd if=/dev/zero of="$dir/dd.bin" bs=4M count=375 conv=fsync 2>&1 >/dev/null; } |
  awk '/copied/ { for (i = 1; i <= NF; i++) if ($i ~ /^s,?$/) t = $(i - 1); print 1572864000 / t / 1e6 }')
rm -f "$dir/dd.bin"

# Synchronous: a checkpoint after each of 4 steps; prints the median of the 2nd-4th, then all of them.
sync_ckpt() {
  "$1" train "${common[@]}" --steps 4 --ckpt-every 1 --ckpt-sync --out "$dir/$2" 2> "$dir/$2.log"
  rm -rf "$dir/$2"
  local all
  all=$(grep -o 'written in [0-9]* ms (synchronous' "$dir/$2.log" | awk '{ print $3 }')
  echo "$(echo "$all" | tail -n +2 | median) $(echo "$all" | list | tr -d ' ')"
}

# Asynchronous: checkpoints every $every steps, the last one synchronous; prints, over the background
# ones: the median undisturbed step, the window cost (2nd and later: median; then the 1st), and for
# this build the trainer's reported cost (median, 1st) and the writer's CPU time (median).
async_ckpt() {
  "$1" train "${common[@]}" --steps $(((ckpts + 1) * every)) --ckpt-every "$every" --out "$dir/$2" 2> "$dir/$2.log"
  cp "$dir/$2/metrics.jsonl" "$dir/$2.metrics"
  rm -rf "$dir/$2"
  python3 - "$dir/$2.metrics" "$every" << 'EOF'
import json, statistics as st, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
every = int(sys.argv[2])
ms = {r["step"]: r["ms"] for r in recs if r["kind"] == "train"}
bg = {r["step"]: r for r in recs if r["kind"] == "ckpt" and r["background"]}
window, bases, reported, cpu = [], [], [], []
for s in range(every, max(ms), every):
    if s + every not in ms:
        break
    half = every // 2
    base = st.median(ms[t] for t in range(s + half + 1, s + every + 1))
    r = bg.get(s, {})
    window.append(r.get("call_ms", 0) + r.get("waited_ms", 0) + sum(ms[t] - base for t in range(s + 1, s + half + 1)))
    bases.append(base)
    if r:
        reported.append(r["cost_ms"])
        cpu.append(r["writer_cpu_ms"])
fmt = lambda v: "%.0f" % v
print(fmt(st.median(bases)), fmt(st.median(window[1:])), fmt(window[0]), ",".join(map(fmt, window)),
      fmt(st.median(reported[1:])) if reported else "-", fmt(reported[0]) if reported else "-",
      ",".join(map(fmt, reported)) if reported else "-", fmt(st.median(cpu)) if cpu else "-")
EOF
}

read -r new_sync new_sync_all <<< "$(sync_ckpt "$anvil" new_sync)"
read -r new_base new_win new_win1 new_win_all new_rep new_rep1 new_rep_all new_cpu <<< "$(async_ckpt "$anvil" new_async)"
new_write=$(grep -o 'written in [0-9]* ms in the background' "$dir/new_async.log" | awk '{ print $3 }' | median)
if [ -n "$old" ]; then
  read -r old_sync old_sync_all <<< "$(sync_ckpt "$old" old_sync)"
  read -r old_base old_win old_win1 old_win_all _ _ _ _ <<< "$(async_ckpt "$old" old_async)"
  old_write=$(grep -o 'step_[0-9]* written in [0-9]* ms$' "$dir/old_async.log" | awk '{ print $4 }' | median)
fi

# Bounded stop: SIGTERM at a fraction of a step after step 2 is logged. --ckpt-every is set (never due)
# because without a checkpoint option the run has no checkpointer and stops without writing one.
stop_s=() stop_write=()
if [ $stop = 1 ]; then
  for frac in 0.1 0.5 0.9; do
    log="$dir/stop_$frac.log"
    "$anvil" train "${common[@]}" --steps 1000 --ckpt-every 1000000 --out "$dir/stop" 2> "$log" &
    pid=$!
    wait_line "$log" '^step     2/'
    sleep "$(echo "$frac * $new_base / 1000" | bc -l)"
    kill -TERM $pid
    t0=$(now)
    rc=0; wait $pid || rc=$?
    stop_s+=("$(printf '%.1f' "$(echo "$(now) - $t0" | bc)")")
    [ $rc -eq 75 ] || { echo "bench_ckpt: SIGTERM run exited $rc: $(tail -n 1 "$log")" >&2; exit 1; }
    stop_write+=("$(grep -o 'written in [0-9]* ms (synchronous' "$log" | awk '{ print $3 }' || true)")
    rm -rf "$dir/stop"
  done
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
  inflight_bg=$(grep -o 'step_00000003 written in [0-9]* ms' "$log" | awk '{ print $4 }' || true)
  inflight_sync=$(grep -o 'written in [0-9]* ms (synchronous' "$log" | awk '{ print $3 }' || true)
  rm -rf "$dir/inflight"
fi

# Read: a checkpoint verified from the disk.
"$anvil" train "${common[@]}" --steps 1 --ckpt-every 1 --out "$dir/read" 2> /dev/null
ck="$dir/read/ckpt/$(cat "$dir/read/ckpt/latest")"
bytes=$(du -sb "$ck" | cut -f1)
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
t0=$(now)
"$anvil" ckpt verify "$ck" > /dev/null
verify_s=$(echo "$(now) - $t0" | bc)
rm -rf "$dir/read"

kill $sampler 2> /dev/null || true
pct() { echo "scale=1; 100 * $1 / $2" | bc; }
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, OMP_NUM_THREADS=$OMP_NUM_THREADS;" \
  "load average (1 min) sampled every 5 s: min $(sort -n "$dir/load" | head -n 1)," \
  "median $(median < "$dir/load"), max $(sort -n "$dir/load" | tail -n 1)"
echo
if [ -n "$old" ]; then
  echo "| measure | old ($old${old_rev:+, $old_rev}) | this build |"
  echo "|---|---:|---:|"
  echo "| median undisturbed step | $old_base ms | $new_base ms |"
  echo "| synchronous checkpoint (training waits for all of it), median of 2nd-4th | $old_sync ms | $new_sync ms |"
  echo "| async, every $every steps: true cost per checkpoint (window), median of 2nd-${ckpts}th | $old_win ms | $new_win ms |"
  echo "| ... as % of the same build's synchronous checkpoint | $(pct "$old_win" "$old_sync")% | $(pct "$new_win" "$new_sync")% |"
  echo "| ... as % of the old synchronous checkpoint | $(pct "$old_win" "$old_sync")% | $(pct "$new_win" "$old_sync")% |"
  echo "| async: the 1st checkpoint (faults the snapshot's memory in) | $old_win1 ms | $new_win1 ms |"
  echo "| async: cost as the trainer reports it, median of 2nd-${ckpts}th (1st) | - | $new_rep ms ($new_rep1 ms) |"
  echo "| async: background write, median | $old_write ms | $new_write ms (writer CPU $new_cpu ms) |"
  echo "| new vs old: true cost per checkpoint | | $(echo "scale=3; $new_win / $old_win" | bc)x |"
else
  echo "| measure | this build |"
  echo "|---|---:|"
  echo "| median undisturbed step | $new_base ms |"
  echo "| synchronous checkpoint (training waits for all of it), median of 2nd-4th | $new_sync ms |"
  echo "| async, every $every steps: true cost per checkpoint (window), median of 2nd-${ckpts}th | $new_win ms ($(pct "$new_win" "$new_sync")% of synchronous) |"
  echo "| async: the 1st checkpoint (faults the snapshot's memory in) | $new_win1 ms |"
  echo "| async: cost as the trainer reports it, median of 2nd-${ckpts}th (1st) | $new_rep ms ($new_rep1 ms) |"
  echo "| async: background write, median | $new_write ms (writer CPU $new_cpu ms) |"
fi
echo "| checkpoint size; disk: dd 1.5 GB, conv=fsync | $((bytes / 1000000)) MB; $(printf '%.0f' "$dd_mb_s") MB/s |"
if [ $stop = 1 ]; then
  echo "| SIGTERM to exit 75, at 10/50/90% of a step: each | $(printf '%s\n' "${stop_s[@]}" | list) s, of which synchronous write $(printf '%s\n' "${stop_write[@]}" | list) ms |"
  echo "| SIGTERM with an async write in flight: to exit 75 | $inflight_s s (step 3's background write ${inflight_bg:-?} ms, then step 4 synchronously ${inflight_sync:-?} ms; exit $rc; left $inflight_dirs) |"
fi
echo "| read: ckpt verify (read + CRC32C every file) | $(printf '%.2f' "$verify_s") s ($(echo "$bytes / $verify_s / 1000000" | bc) MB/s) |"
echo
echo "this build: synchronous $new_sync_all ms; async window costs $new_win_all ms; reported $new_rep_all ms"
[ -z "$old" ] || echo "old: synchronous $old_sync_all ms; async window costs $old_win_all ms"
echo "bench wall time $(($(date +%s) - t_bench)) s"
if [ -n "$old_rev" ]; then git -C "$here/.." worktree remove --force "$dir/old-src" > /dev/null 2>&1 || true; fi
[ -n "${KEEP:-}" ] || rm -rf "$dir"
