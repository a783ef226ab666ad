#!/usr/bin/env bash
# The optimizer step alone (bench_optim.c) beside PyTorch's clip_grad_norm_ + AdamW
# (torch_optim_peer.py), same N, same thread count; prints a markdown table with the ratio.
# usage: bench/bench_optim.sh [--threads T] [--n N] [--reps R] [--build DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
threads=2 n=123886080 reps=7 build=$here/../build
while (($#)); do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --n) n=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "bench_optim: unknown option $1" >&2; exit 2 ;;
  esac
done
bin=$build/bench/bench_optim
[ -x "$bin" ] || { echo "bench_optim: no $bin (build first, or --build DIR)" >&2; exit 2; }
a=$(OMP_NUM_THREADS=$threads "$bin" --n "$n" --reps "$reps")
# The peer gets glibc's huge-page malloc, as bench/torch_peer.py explains: torch allocates its
# temporaries afresh each step, and without it every step faults them in again.
t=$(OMP_NUM_THREADS=$threads GLIBC_TUNABLES=glibc.malloc.hugetlb=1 /usr/bin/python3 "$here/torch_optim_peer.py" \
  --n "$n" --reps "$reps")
echo "optimizer step, $n parameters, clip active, $threads threads ($(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1 /proc/loadavg))"
/usr/bin/python3 - "$a" "$t" <<'PY'
import json, sys
a, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("| form | ms (median) | GB/s moved | vs anvil |")
print("|---|---:|---:|---:|")
f = a["ms_fused"]
print(f"| anvil: norm pass + AdamW with the clip folded in | {f:.1f} | {a['gbps_fused']:.1f} | 1.00x |")
print(f"| anvil's arithmetic, the clip as its own pass | {a['ms_clip_pass']:.1f} | {a['gbps_clip_pass']:.1f} | {a['ms_clip_pass']/f:.2f}x |")
print(f"| PyTorch {t['torch']}: clip_grad_norm_ + AdamW(foreach=True) | {t['ms_foreach']:.1f} | | {t['ms_foreach']/f:.2f}x |")
print(f"| PyTorch: clip_grad_norm_ + AdamW(foreach=False) | {t['ms_single']:.1f} | | {t['ms_single']/f:.2f}x |")
PY
