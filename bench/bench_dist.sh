#!/usr/bin/env bash
# Multi-process figures, printed as markdown tables on stdout (progress on stderr):
#   coll   all-reduce busbw from `anvil health` against bench_allreduce (plain
#          MPI_Allreduce on the main thread, measured the same way), 2 and 4
#          ranks, shared memory and TCP (--mca-tcp), and their ratio per size;
#   scale  tokens/s of `anvil train --synthetic --preset small` on 1, 2 and 4
#          ranks at a fixed global batch (8 x 128 tokens), with the share of the
#          training time waited on communication;
#   mem    peak and current RSS per rank for GPT-2 124M (batch 1, seq 64) on 4
#          ranks under DP, ZeRO-1/2/3 and MiCS (ZeRO-3, groups of 2), against
#          the ZeRO paper's bytes per parameter.
#
# usage: bench/bench_dist.sh [--anvil PATH] [--peer PATH] [--parts coll,scale,mem]
#                            [--max-bytes N] [--iters N] [--out DIR]
#   --anvil PATH     anvil binary (default build/anvil)
#   --peer PATH      bench_allreduce (default: bench/bench_allreduce beside the anvil binary)
#   --parts LIST     which parts (default coll,scale,mem)
#   --max-bytes N    largest all-reduce (default 16777216); --iters N timed calls per size (default 10)
#   --repeats N      runs of each side, alternating; the best run per size is kept (default 2)
#   --out DIR        keep raw output and logs here (default: a new temp dir)
# Cost on 2 cores: about 10 minutes for all three parts.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
anvil="$root/build/anvil"
peer=""
parts="coll,scale,mem"
max_bytes=$((16 << 20))
iters=10
repeats=2
out=""
die() { echo "bench_dist: $*" >&2; exit 2; }
while (($#)); do
    case "$1" in
        --anvil) (($# >= 2)) || die "--anvil needs a path"; anvil=$2; shift 2 ;;
        --peer) (($# >= 2)) || die "--peer needs a path"; peer=$2; shift 2 ;;
        --parts) (($# >= 2)) || die "--parts needs a list"; parts=$2; shift 2 ;;
        --max-bytes) (($# >= 2)) || die "--max-bytes needs a value"; max_bytes=$2; shift 2 ;;
        --iters) (($# >= 2)) || die "--iters needs a value"; iters=$2; shift 2 ;;
        --repeats) (($# >= 2)) || die "--repeats needs a value"; repeats=$2; shift 2 ;;
        --out) (($# >= 2)) || die "--out needs a directory"; out=$2; shift 2 ;;
        -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done
[[ -x "$anvil" ]] || die "no anvil binary at $anvil"
[[ -n "$peer" ]] || peer="$(dirname "$anvil")/bench/bench_allreduce"
command -v mpirun > /dev/null || die "mpirun is not installed"
if [[ -z "$out" ]]; then out=$(mktemp -d /tmp/bench_dist.XXXXXX); fi
mkdir -p "$out" || die "cannot create $out"
py=/usr/bin/python3
status=0
has() { [[ ",$parts," == *",$1,"* ]]; }
launch() { "$anvil" launch --log-dir "$out/logs" "$@"; }

echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores shared with other work; $(date -u '+%Y-%m-%d %H:%M UTC'), load avg $(cut -d' ' -f1-3 /proc/loadavg)."
echo

if has coll; then
    [[ -x "$peer" ]] || die "no bench_allreduce at $peer (build the bench targets)"
    echo "### All-reduce: anvil collectives against plain MPI_Allreduce"
    echo
    echo "In-place float32 sums, one warm-up then $iters timed calls per size, median per rank, slowest rank reported; busbw = algbw·2(n−1)/n. Each side ran $repeats times, alternating with the other; per size the best run is shown (the least disturbed by other work on the shared cores)."
    echo
    echo "| ranks | transport | bytes | anvil µs | anvil busbw GB/s | MPI µs | MPI busbw GB/s | anvil/MPI busbw |"
    echo "|---:|---|---:|---:|---:|---:|---:|---:|"
    for n in 2 4; do
        for net in shm tcp; do
            opt=()
            [[ $net == tcp ]] && opt=(--mca-tcp)
            tag="coll_${n}_$net"
            echo "bench_dist: all-reduce, $n ranks, $net" >&2
            for ((rep = 0; rep < repeats; rep++)); do
                OMP_NUM_THREADS=1 launch -n "$n" "${opt[@]}" -- health --json --mem-mb 16 --gemm-n 128 --slow-factor 0 \
                    --max-bytes "$max_bytes" --iters "$iters" > "$out/$tag.anvil.$rep" 2> "$out/$tag.anvil.$rep.err" ||
                    status=1
                OMP_NUM_THREADS=1 launch -n "$n" "${opt[@]}" --exec "$peer" -- 4096 "$max_bytes" "$iters" \
                    > "$out/$tag.mpi.$rep" 2> "$out/$tag.mpi.$rep.err" || status=1
            done
            "$py" - "$out/$tag" "$repeats" "$n" "$net" <<'EOF' || status=1
import json, sys
tag, repeats = sys.argv[1], int(sys.argv[2])
strip = lambda l: l.split("] ", 1)[1] if l.startswith("[rank 0] {") else None
def best(runs):
    out = {}
    for run in runs:
        for s in run:
            if not s["correct"]:
                raise SystemExit("wrong all-reduce result in %s" % tag)
            if s["bytes"] not in out or s["busbw_gb_s"] > out[s["bytes"]]["busbw_gb_s"]:
                out[s["bytes"]] = s
    return out
a = best(json.loads([strip(l) for l in open("%s.anvil.%d" % (tag, r)) if strip(l)][0])["allreduce"]
         for r in range(repeats))
m = best([json.loads(strip(l)) for l in open("%s.mpi.%d" % (tag, r)) if strip(l)] for r in range(repeats))
for b in sorted(a):
    s, p = a[b], m.get(b)
    if not p:
        print("| %s | %s | %d | missing |" % (sys.argv[3], sys.argv[4], b))
        continue
    print("| %s | %s | %d | %.0f | %.3f | %.0f | %.3f | %.2fx |" % (sys.argv[3], sys.argv[4], b, s["time_us"],
          s["busbw_gb_s"], p["time_us"], p["busbw_gb_s"], s["busbw_gb_s"] / p["busbw_gb_s"]))
EOF
        done
    done
    echo
fi

if has scale; then
    echo "### Scaling: GPT-2 small (30M), global batch 8 x 128 tokens"
    echo
    echo "\`anvil train --synthetic --preset small --seq 128 --steps 8 --warmup 3\`, batch 8/N per rank; OMP_NUM_THREADS unset, so one rank takes both cores and N ranks get max(1, 2/N) threads each (4 ranks oversubscribe the 2 cores)."
    echo
    echo "| ranks | threads/rank | tokens/s (median step) | vs 1 rank | ms/step | communication waited on |"
    echo "|---:|---:|---:|---:|---:|---:|"
    base=""
    for n in 1 2 4; do
        echo "bench_dist: scaling, $n ranks" >&2
        args=(train --synthetic --preset small --seq 128 --batch $((8 / n)) --steps 8 --warmup 3 --no-progress
              --sample-every -1 --val-every 0 --summary-json --out "$out/scale_$n")
        if ((n == 1)); then
            env -u OMP_NUM_THREADS "$anvil" "${args[@]}" > "$out/scale_$n.out" 2> "$out/scale_$n.err" || status=1
        else
            env -u OMP_NUM_THREADS "$anvil" launch --log-dir "$out/logs" -n "$n" -- "${args[@]}" \
                > "$out/scale_$n.out" 2> "$out/scale_$n.err" || status=1
        fi
        row=$("$py" - "$out/scale_$n.out" "$n" "$base" <<'EOF'
import json, sys
lines = [l.split("] ", 1)[-1] for l in open(sys.argv[1]) if "{" in l]
s = json.loads(lines[-1])
base = float(sys.argv[3]) if sys.argv[3] else s["tokens_per_s_median"]
print("%.1f;| %s | %d | %.0f | %.2fx | %.0f | %.1f%% |" % (s["tokens_per_s_median"], sys.argv[2], s["threads"],
      s["tokens_per_s_median"], s["tokens_per_s_median"] / base, s["ms_per_step_median"], 100 * s["comm_wait_share"]))
EOF
        ) || { status=1; echo "| $n | run failed, see $out/scale_$n.err |"; continue; }
        [[ -z "$base" ]] && base=${row%%;*}
        echo "${row#*;}"
    done
    echo
fi

if has mem; then
    echo "### Memory: GPT-2 124M on 4 ranks, batch 1, seq 64, 3 steps"
    echo
    echo "Theory (ZeRO paper, fp32 with Adam): bytes per parameter 16 for DP, 4+4+8/N for ZeRO-1, 4+(4+8)/N for ZeRO-2, 16/N for ZeRO-3, and k in place of N for MiCS groups of k. Peak RSS includes the one-time initialization of the whole model on every rank before it is sharded, and activations, code and MPI buffers; RSS now is after training."
    echo
    echo "| layout | theory MB/rank | model state MB/rank (trainer) | peak RSS MB (max over ranks) | RSS now MB (max over ranks) |"
    echo "|---|---:|---:|---:|---:|"
    common=(train --synthetic --preset gpt2 --batch 1 --seq 64 --steps 3 --warmup 1 --no-progress --sample-every -1
            --val-every 0 --no-health)
    for layout in "DP:0:" "ZeRO-1:1:" "ZeRO-2:2:" "ZeRO-3:3:" "MiCS k=2 (ZeRO-3):3:2"; do
        IFS=: read -r name stage k <<< "$layout"
        echo "bench_dist: memory, $name" >&2
        extra=(--zero "$stage")
        [[ -n "$k" ]] && extra+=(--shard-group-size "$k")
        tag="mem_${stage}_${k:-all}"
        OMP_NUM_THREADS=1 "$anvil" launch --log-dir "$out/logs" -n 4 -- "${common[@]}" "${extra[@]}" --out "$out/$tag" \
            > "$out/$tag.out" 2> "$out/$tag.err" || status=1
        "$py" - "$out/$tag.err" "$name" "$stage" "${k:-4}" <<'EOF' || { status=1; echo "| $name | run failed |"; }
import re, sys
line = [l for l in open(sys.argv[1]) if "memory (ZeRO" in l][0]
ranks = re.findall(r"rank (\d+) (\d+) MB peak RSS, (\d+) MB RSS now, (\d+) MB model state", line)
stage, k, n, P = int(sys.argv[3]), int(sys.argv[4]), 4, 124.48e6
per = {0: 16, 1: 4 + 4 + 8 / k, 2: 4 + 12 / k, 3: 16 / k}[stage]
print("| %s | %.0f | %s | %d | %d |" % (sys.argv[2], per * P / 2**20, "/".join(sorted({r[3] for r in ranks}, key=int)),
      max(int(r[1]) for r in ranks), max(int(r[2]) for r in ranks)))
EOF
    done
    echo
fi
exit $status
