#!/usr/bin/env bash
# Side-by-side training throughput of the Llama family: anvil's llama-small
# against the PyTorch peer of the same shapes (bench/torch_peer_llama.py), and
# GPT-2's small against its peer (bench/torch_peer.py) for the ratio at the
# same size, same thread count, fp32, on random tokens. The four runs go in
# turn, ROUNDS times (interleaved, so a noisy machine's load falls on all of
# them alike); each run's median step time over its timed steps, then the
# median over the rounds. Prints a markdown table on stdout (with the load
# average before and after); logs and raw JSON go to --out.
#
# usage: bench/bench_llama_train.sh [--anvil PATH] [--rounds N] [--steps N] [--threads N]
#                                   [--batch B] [--seq T] [--bf16] [--out DIR]
#   defaults: build/anvil, 3 rounds, 5 timed steps after 2 warmup ones, 2 threads, B 8, T 256
#   --bf16: each round also runs both models in bf16 (anvil --dtype bf16, the peers' --bf16:
#           the forward under torch.autocast("cpu", dtype=torch.bfloat16)), eight runs in turn,
#           and the table gains bf16 rows. anvil's bf16 needs AVX512_BF16 and its avx512 path;
#           without them one line on stderr says bf16 is skipped and why, and fp32 runs alone.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
anvil="$root/build/anvil"
rounds=3 steps=5 threads=2 batch=8 seq=256 bf16=0 out=""
py=/usr/bin/python3
die() { echo "bench_llama_train: $*" >&2; exit 2; }
while (($#)); do
    case "$1" in
        --anvil) anvil=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --threads) threads=$2; shift 2 ;;
        --batch) batch=$2; shift 2 ;;
        --seq) seq=$2; shift 2 ;;
        --bf16) bf16=1; shift ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done
[[ -x "$anvil" ]] || die "anvil binary '$anvil' not found"
[[ -x "$py" ]] || die "$py not found (the peers need the system python with torch)"
[[ -n "$out" ]] || out=$(mktemp -d /tmp/bench_llama_train.XXXXXX)
mkdir -p "$out" || die "cannot create $out"
export OMP_NUM_THREADS=$threads
warm=2

# anvil's bf16 fails at start up on a CPU without AVX512_BF16 (vdpbf16ps) and off its avx512 path
# (src/kernels/isa.c); ask the same two questions here so that --bf16 costs one line, not failed runs.
if ((bf16)); then
    why=""
    if ! grep -qsw avx512_bf16 /proc/cpuinfo; then
        why="this CPU lacks AVX512_BF16 (no avx512_bf16 flag in /proc/cpuinfo)"
    elif [[ -n "${ANVIL_ISA:-}" && "$ANVIL_ISA" != auto && "$ANVIL_ISA" != avx512 ]]; then
        why="anvil's bf16 runs on its avx512 path only, and ANVIL_ISA=$ANVIL_ISA"
    fi
    if [[ -n "$why" ]]; then
        echo "bench_llama_train: --bf16 skipped: $why; running fp32 only" >&2
        bf16=0
    fi
fi

# The shapes anvil's presets give: llama-small (6 layers, 6 heads over 2 key/value heads, C 384, hidden
# 1024 by Llama's rule, tied, rope_theta 500000) and GPT-2's small (6 layers, 6 heads, C 384).
peer_llama=(--layers 6 --heads 6 --kv-heads 2 --embd 384 --ffn 1024 --rope-theta 500000 --tied yes --vocab 50257)
peer_gpt2=(--layers 6 --heads 6 --embd 384 --vocab 50257)

anvil_run() { # preset, output file, further options (--dtype bf16)
    "$anvil" train --preset "$1" --synthetic --seq "$seq" --batch "$batch" --steps $((warm + steps)) --warmup $warm \
        --threads "$threads" --sample-every -1 --no-progress --summary-json "${@:3}" > "$2" 2> "${2%.json}.log" ||
        echo "bench_llama_train: anvil $1 failed (see ${2%.json}.log)" >&2
}
peer_run() { # script, output file, shape options (and --bf16)
    local script=$1 file=$2
    shift 2
    "$py" "$here/$script" "$@" --seq "$seq" --batch "$batch" --steps "$steps" --warmup $warm --threads "$threads" \
        > "$file" 2> "${file%.json}.log" || echo "bench_llama_train: $script failed (see ${file%.json}.log)" >&2
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$rounds"); do
    echo "bench_llama_train: round $r of $rounds (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    anvil_run llama-small "$out/anvil_llama.$r.json"
    peer_run torch_peer_llama.py "$out/torch_llama.$r.json" "${peer_llama[@]}"
    anvil_run small "$out/anvil_gpt2.$r.json"
    peer_run torch_peer.py "$out/torch_gpt2.$r.json" "${peer_gpt2[@]}"
    if ((bf16)); then
        anvil_run llama-small "$out/anvil_llama_bf16.$r.json" --dtype bf16
        peer_run torch_peer_llama.py "$out/torch_llama_bf16.$r.json" "${peer_llama[@]}" --bf16
        anvil_run small "$out/anvil_gpt2_bf16.$r.json" --dtype bf16
        peer_run torch_peer.py "$out/torch_gpt2_bf16.$r.json" "${peer_gpt2[@]}" --bf16
    fi
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

"$py" - "$out" "$rounds" "$batch" "$seq" "$threads" "$load0" "$load1" "$bf16" <<'EOF'
import json, statistics, sys
out, rounds, B, T, threads, load0, load1 = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
bf16 = sys.argv[8] == "1"

def last_json(path):
    try:
        lines = [l for l in open(path) if l.strip()]
        return json.loads(lines[-1])
    except (OSError, ValueError, IndexError):
        return None

def series(name, key):
    vals = [last_json(f"{out}/{name}.{r}.json") for r in range(1, rounds + 1)]
    return [v[key] for v in vals if v and key in v]

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
dtypes = ("fp32; bf16 rows: anvil --dtype bf16, PyTorch under torch.autocast(\"cpu\", dtype=torch.bfloat16)"
          if bf16 else "fp32")
print(f"{dtypes}, {threads} threads each, B={B} T={T}, {rounds} interleaved rounds; {cpu}; load average "
      f"{load0} before, {load1} after. Raw JSON and logs: {out}")
print()
print("| model | anvil tok/s | PyTorch tok/s | anvil/PyTorch | per-round ratios | anvil / PyTorch params |")
print("|---|---:|---:|---:|---|---:|")
runs = [("llama-small", "anvil_llama", "torch_llama"), ("GPT-2 small", "anvil_gpt2", "torch_gpt2")]
if bf16:
    runs += [(f"{label} bf16", f"{a}_bf16", f"{p}_bf16") for label, a, p in runs]
for label, a, p in runs:
    at, pt = series(a, "tokens_per_s_median"), series(p, "tokens_per_s_median")
    ap, pp = series(a, "params"), series(p, "params")
    if not at or not pt:
        print(f"| {label} | n/a | n/a | n/a | | |")
        continue
    ratios = " ".join(f"{x / y:.2f}" for x, y in zip(at, pt))
    print(f"| {label} | {statistics.median(at):.0f} | {statistics.median(pt):.0f} | "
          f"{statistics.median(at) / statistics.median(pt):.2f}x | {ratios} | "
          f"{ap[0] if ap else 'n/a'} / {pp[0] if pp else 'n/a'} |")
EOF
