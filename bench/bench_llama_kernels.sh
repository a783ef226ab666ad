#!/usr/bin/env bash
# The Llama kernels against PyTorch, side by side on the same shapes and threads:
#   bench/bench_llama_kernels.sh [BUILD_DIR] [THREADS] [RUNS]   (defaults: build, 2, 2)
# Prints a markdown table (ms per call, the fastest of RUNS interleaved runs; PyTorch's time over anvil's) and what share of
# attention's forward and backward the RoPE kernels take, the figure behind not fusing them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
threads=${2:-2}
runs=${3:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# Interleaved: the machine's other load comes and goes, and each op keeps its fastest.
for _ in $(seq "$runs"); do
  OMP_NUM_THREADS=$threads "$build/bench/bench_llama_kernels" "$threads" >> "$tmp/anvil"
  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 /usr/bin/python3 "$here/bench_llama_kernels.py" "$threads" >> "$tmp/torch"
done
/usr/bin/python3 - "$tmp/anvil" "$tmp/torch" <<'PY'
import sys
def read(p):
    head, rows = "", {}
    for line in open(p):
        if line.startswith("#"):
            head = line[1:].strip()
        else:
            shape, op, ms = line.split()
            rows[(shape, op)] = min(float(ms), rows.get((shape, op), float("inf")))
    return head, rows
ha, a = read(sys.argv[1])
ht, t = read(sys.argv[2])
print(f"anvil: {ha}; peer: {ht}\n")
print("| shape | op | anvil ms | PyTorch ms | PyTorch / anvil |")
print("|---|---|---:|---:|---:|")
for k, ms in a.items():
    print(f"| {k[0]} | {k[1]} | {ms:.3f} | {t[k]:.3f} | {t[k] / ms:.1f}x |")
print()
for s in sorted({k[0] for k in a}):
    rope = a[(s, "rope_forward")] + a[(s, "rope_backward")]
    att = a[(s, "attention_forward")] + a[(s, "attention_backward")]
    print(f"{s}: anvil's rope forward + backward is {100 * rope / att:.1f}% of its attention forward + backward")
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
