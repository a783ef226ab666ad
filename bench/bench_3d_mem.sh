#!/usr/bin/env bash
# Peak memory per rank under tensor and pipeline parallelism, at a fixed
# model, against one process: GPT-2 124M's shapes (C = 768, 12 heads,
# vocabulary 50257) with 4 layers, 3 synthetic steps of 1 x 64 tokens, in one
# process and at TP 2, TP 4, PP 2 and PP 4 (one data-parallel replica).
# Printed as a markdown table on stdout (progress on stderr): per layout the
# analytic model state per rank (16 bytes per parameter the rank holds:
# weights, gradients, AdamW's two moments; counted here from the shapes), the
# trainer's own figure, and the peak RSS (VmHWM, getrusage) of the largest and
# smallest rank, from the trainer's per-rank memory line.
#
# With --ckpt, each run also saves a checkpoint after step 2 (--ckpt-every 2,
# synchronously), inside the measured peak: the trainer reports its peak before
# the final model file, which is gathered whole.
#
# usage: bench/bench_3d_mem.sh [--anvil PATH] [--out DIR] [--ckpt]
#   --anvil PATH   anvil binary (default build/anvil)
#   --out DIR      keep the logs here (default: a new temp dir)
#   --ckpt         save a checkpoint within the measured steps
# Cost on 2 cores: about a minute.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
anvil="$(dirname "$here")/build/anvil"
out=""
ckpt=()
die() { echo "bench_3d_mem: $*" >&2; exit 2; }
while (($#)); do
    case "$1" in
        --anvil) (($# >= 2)) || die "--anvil needs a path"; anvil=$2; shift 2 ;;
        --out) (($# >= 2)) || die "--out needs a folder"; out=$2; shift 2 ;;
        --ckpt) ckpt=(--ckpt-every 2 --ckpt-sync); shift ;;
        *) die "unknown option $1" ;;
    esac
done
[[ -x "$anvil" ]] || die "no anvil binary at $anvil"
[[ -n "$out" ]] || out=$(mktemp -d)
mkdir -p "$out"
py=$(command -v python3) || die "python3 is required"

L=4
common=(train --synthetic --preset gpt2 --layers "$L" --batch 1 --seq 64 --steps 3 --warmup 1 --no-progress
        --sample-every -1 --val-every 0 --no-health)
status=0
echo "| layout | ranks | analytic model state MB/rank (max) | trainer's model state MB/rank | peak RSS MB (max rank) | peak RSS MB (min rank) |"
echo "|---|---:|---:|---:|---:|---:|"
for layout in "1 process:1:1:1" "TP 2:2:2:1" "TP 4:4:4:1" "PP 2:2:1:2" "PP 4:4:1:4"; do
    IFS=: read -r name n tp pp <<< "$layout"
    echo "bench_3d_mem: $name" >&2
    tag="mem_tp${tp}_pp${pp}"
    [[ ${#ckpt[@]} -eq 0 ]] || rm -rf "$out/run_$tag"
    save=()
    [[ ${#ckpt[@]} -eq 0 ]] || save=("${ckpt[@]}" --out "$out/run_$tag")
    if [[ $n -eq 1 ]]; then
        OMP_NUM_THREADS=1 "$anvil" "${common[@]}" "${save[@]}" --summary-json > "$out/$tag.out" 2> "$out/$tag.err" || status=1
    else
        OMP_NUM_THREADS=1 "$anvil" launch --log-dir "$out/logs" -n "$n" -- "${common[@]}" "${save[@]}" --tp "$tp" --pp "$pp" \
            > "$out/$tag.out" 2> "$out/$tag.err" || status=1
    fi
    "$py" - "$out/$tag.out" "$out/$tag.err" "$name" "$n" "$tp" "$pp" "$L" <<'EOF' || { status=1; echo "| $name | $n | run failed |"; }
import json, re, sys
outf, errf, name, n, tp, pp, L = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:])
V, Vp, C, T = 50257, 50304, 768, 1024
per_layer_split = 3 * C * C + 3 * C + 4 * C * C + 4 * C + C * C + 4 * C * C  # qkv, fc, attproj, fcproj
per_layer_repl = 6 * C  # ln1, ln2 (w, b), attproj and fcproj biases
worst = 0
for s in range(pp):
    l0, l1 = s * L // pp, (s + 1) * L // pp
    first, last = s == 0, s == pp - 1
    split = (l1 - l0) * per_layer_split + (Vp * C if first or last else 0)
    repl = (l1 - l0) * per_layer_repl + (T * C if first else 0) + (2 * C if last else 0)
    worst = max(worst, split // tp + repl)
analytic = 16 * worst / 2**20
if n == 1:
    peak = json.loads(open(outf).read().strip().splitlines()[-1])["peak_rss_mb"]
    print("| %s | 1 | %.0f | - | %.0f | %.0f |" % (name, analytic, peak, peak))
else:
    line = [l for l in open(errf) if "memory (TP" in l][0]
    ranks = re.findall(r"rank (\d+) (\d+) MB peak RSS, (\d+) MB RSS now, (\d+) MB model state", line)
    peaks = [int(r[1]) for r in ranks]
    print("| %s | %d | %.0f | %s | %d | %d |" % (name, n, analytic, "/".join(sorted({r[3] for r in ranks}, key=int)),
          max(peaks), min(peaks)))
EOF
done
exit $status
