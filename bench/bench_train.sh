#!/usr/bin/env bash
# Side-by-side training throughput: anvil vs the PyTorch peer (bench/torch_peer.py),
# same model shapes, same thread count, run back to back in one invocation.
# Prints a markdown table on stdout; progress and per-run logs go to stderr/--out.
#
# usage: bench/bench_train.sh [--anvil PATH] [--steps N] [--steps-big N] [--threads N]
#                             [--quick] [--bf16] [--out DIR]
#   --anvil PATH   anvil binary (default build/anvil)
#   --steps N      timed steps for the 256-token configs (default 5; warmup 2)
#   --steps-big N  timed steps for 124M B=8 T=1024 (default 3; warmup 1)
#   --threads N    OMP_NUM_THREADS for both sides (default 2)
#   --quick        2 timed steps, 1 warmup, skip the B=8 T=1024 config
#   --bf16         also run anvil with --dtype bf16 (needs AVX512_BF16) and the peer under
#                  torch.autocast("cpu", bfloat16); report anvil's bf16/fp32, its MFU against the
#                  bf16 kernel's peak (vdpbf16ps, or AMX's), and anvil bf16 / PyTorch autocast
# ANVIL_ISA in the environment picks anvil's kernel path; GFLOP/s are also given
# as a share of that path's FMA peak, which 'anvil info --gemm-rate' measures.
#   --out DIR      keep raw JSON and logs here (default: a new temp dir)
# Exit status is 1 if any run failed (its cells then read n/a), else 0.
# Cost on 2 cores: the full run takes 10-15 min and the PyTorch peer peaks near
# 17 GB RSS at B=8 T=1024 (12 saved B*H*T*T attention matrices plus logits).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
anvil="$root/build/anvil"
steps=5
steps_big=3
threads=2
quick=0
bf16=0
out=""
py=/usr/bin/python3

die() { echo "bench_train: $*" >&2; exit 2; }
need_int() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 needs a positive integer, got '$2'"; }

while (($#)); do
    case "$1" in
        --anvil) (($# >= 2)) || die "--anvil needs a path"; anvil=$2; shift 2 ;;
        --steps) (($# >= 2)) || die "--steps needs a value"; need_int "$1" "$2"; steps=$2; shift 2 ;;
        --steps-big) (($# >= 2)) || die "--steps-big needs a value"; need_int "$1" "$2"; steps_big=$2; shift 2 ;;
        --threads) (($# >= 2)) || die "--threads needs a value"; need_int "$1" "$2"; threads=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        --out) (($# >= 2)) || die "--out needs a directory"; out=$2; shift 2 ;;
        --bf16) bf16=1; shift ;;
        -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done

[[ -x "$py" ]] || die "$py not found (the peer needs the system python with torch)"
if [[ -z "$out" ]]; then out=$(mktemp -d /tmp/bench_train.XXXXXX); fi
mkdir -p "$out" || die "cannot create $out"

warm=2
warm_big=1
if ((quick)); then steps=2; warm=1; fi

export OMP_NUM_THREADS=$threads

# jget FILE KEY: KEY of the JSON object on FILE's last non-empty line, or nothing.
jget() {
    "$py" - "$1" "$2" <<'EOF' 2>/dev/null
import json, sys
try:
    lines = [l for l in open(sys.argv[1]) if l.strip()]
    v = json.loads(lines[-1])[sys.argv[2]]
except Exception:
    sys.exit(0)
if v is not None:
    print(v)
EOF
}

# fmt VALUE DIGITS: fixed-point number, or n/a when VALUE is empty.
fmt() { if [[ -n "$1" ]]; then printf "%.${2}f" "$1"; else printf "n/a"; fi; }

# pct FRACTION: percentage, or n/a when FRACTION is empty.
pct() {
    if [[ -n "$1" ]]; then "$py" -c 'import sys; print("%.0f%%" % (100 * float(sys.argv[1])))' "$1"; else printf "n/a"; fi
}

# div A B: A/B, or nothing if either is missing or B is zero.
div() {
    [[ -n "$1" && -n "$2" ]] || return 0
    "$py" -c 'import sys; a, b = map(float, sys.argv[1:]); print(a / b) if b else None' "$1" "$2"
}

failed=0
anvil_ok=1
if [[ ! -x "$anvil" ]]; then
    echo "bench_train: anvil binary '$anvil' not found; anvil cells will read n/a" >&2
    anvil_ok=0
    failed=1
fi

sgemm=""
peak=""
path=""
bf16_kernel=""
if ((anvil_ok)); then
    if OMP_NUM_THREADS=$threads "$anvil" info --gemm-rate >"$out/gemm_rate.json" 2>"$out/gemm_rate.log"; then
        sgemm=$(jget "$out/gemm_rate.json" sgemm_gflops)
        peak=$(jget "$out/gemm_rate.json" fma_peak_gflops)
        path=$(jget "$out/gemm_rate.json" path)
        bf16_kernel=$(jget "$out/gemm_rate.json" bf16_kernel)
    fi
    [[ -n "$peak" ]] || { echo "bench_train: '$anvil info --gemm-rate' gave no fma_peak_gflops (see $out/gemm_rate.log)" >&2; failed=1; }
fi

# anvil_run NAME DTYPE L H C V T B W S: one anvil run, its summary JSON in $out/NAME.DTYPE.json.
anvil_run() {
    local name=$1 dtype=$2 L=$3 H=$4 C=$5 V=$6 T=$7 B=$8 W=$9 S=${10} extra=()
    # fp32 is the default: older builds, measured for comparison, lack --dtype.
    [[ $dtype == fp32 ]] || extra=(--dtype "$dtype")
    echo "bench_train: [$name] anvil $dtype ($W warmup + $S steps)..." >&2
    # anvil's --steps counts all steps and --warmup leaves the first W out of
    # its medians, so W+S gives the same S timed steps as the peer.
    if ! "$anvil" train --layers "$L" --heads "$H" --embd "$C" --vocab "$V" --block "$T" --seq "$T" \
            --batch "$B" --steps "$((W + S))" --warmup "$W" --threads "$threads" --synthetic "${extra[@]}" \
            --sample-every -1 --no-progress --summary-json \
            >"$out/$name.$dtype.json" 2>"$out/$name.$dtype.log"; then
        echo "bench_train: [$name] anvil $dtype failed (see $out/$name.$dtype.log)" >&2
        failed=1
    fi
}

# name layers heads embd vocab seq batch warmup steps
configs=("124M_B4_T64 12 12 768 50257 64 4 $warm $steps" "124M_B4_T256 12 12 768 50257 256 4 $warm $steps")
((quick)) || configs+=("124M_B8_T1024 12 12 768 50257 1024 8 $warm_big $steps_big")
configs+=("small_L6_B8_T256 6 6 384 50257 256 8 $warm $steps")

rows=()
for cfg in "${configs[@]}"; do
    read -r name L H C V T B W S <<<"$cfg"
    label="L$L H$H C$C V$V B=$B T=$T"
    a_json="$out/$name.fp32.json"
    b_json="$out/$name.bf16.json"
    p_json="$out/$name.pytorch.json"
    pb_json="$out/$name.pytorch_bf16.json"
    : >"$a_json"
    : >"$b_json"
    : >"$p_json"
    : >"$pb_json"

    if ((anvil_ok)); then
        anvil_run "$name" fp32 "$L" "$H" "$C" "$V" "$T" "$B" "$W" "$S"
        ((bf16)) && anvil_run "$name" bf16 "$L" "$H" "$C" "$V" "$T" "$B" "$W" "$S"
    fi

    echo "bench_train: [$name] pytorch ($W warmup + $S steps)..." >&2
    if ! "$py" "$here/torch_peer.py" --layers "$L" --heads "$H" --embd "$C" --vocab "$V" \
            --seq "$T" --batch "$B" --steps "$S" --warmup "$W" --threads "$threads" \
            >"$p_json" 2>"$out/$name.pytorch.log"; then
        echo "bench_train: [$name] pytorch failed (see $out/$name.pytorch.log)" >&2
        failed=1
    fi
    if ((bf16)); then
        echo "bench_train: [$name] pytorch bf16 autocast ($W warmup + $S steps)..." >&2
        if ! "$py" "$here/torch_peer.py" --layers "$L" --heads "$H" --embd "$C" --vocab "$V" \
                --seq "$T" --batch "$B" --steps "$S" --warmup "$W" --threads "$threads" --bf16 \
                >"$pb_json" 2>"$out/$name.pytorch_bf16.log"; then
            echo "bench_train: [$name] pytorch bf16 failed (see $out/$name.pytorch_bf16.log)" >&2
            failed=1
        fi
    fi

    a_tps=$(jget "$a_json" tokens_per_s_median)
    p_tps=$(jget "$p_json" tokens_per_s_median)
    a_rss=$(jget "$a_json" peak_rss_mb)
    p_rss=$(jget "$p_json" peak_rss_mb)
    a_gf=$(jget "$a_json" gflops_median)
    a_ms=$(jget "$a_json" ms_per_step_median)
    p_ms=$(jget "$p_json" ms_per_step_median)
    ratio=$(div "$a_tps" "$p_tps")
    a_frac=$(div "$a_gf" "$peak")
    # Both sides do the same FLOPs per token, so PyTorch's rate follows from anvil's.
    p_gf=""
    [[ -n "$a_gf" && -n "$ratio" ]] && p_gf=$(div "$a_gf" "$ratio")
    p_frac=$(div "$p_gf" "$peak")
    row="| $label | $(fmt "$a_tps" 0) | $(fmt "$p_tps" 0) | $(fmt "$ratio" 2)${ratio:+x} | $(fmt "$a_ms" 0) / $(fmt "$p_ms" 0) | $(fmt "$a_rss" 0) | $(fmt "$p_rss" 0) | $(fmt "$a_gf" 1) ($(pct "$a_frac")) | $(pct "$p_frac") |"
    if ((bf16)); then
        b_tps=$(jget "$b_json" tokens_per_s_median)
        b_ratio=$(div "$b_tps" "$a_tps")
        b_mfu=$(jget "$b_json" mfu_median)
        [[ "$b_mfu" == -1* ]] && b_mfu=""
        pb_tps=$(jget "$pb_json" tokens_per_s_median)
        pb_ratio=$(div "$b_tps" "$pb_tps")
        row+=" $(fmt "$b_tps" 0) | $(fmt "$b_ratio" 2)${b_ratio:+x} | $(pct "$b_mfu") | $(fmt "$pb_tps" 0) | $(fmt "$pb_ratio" 2)${pb_ratio:+x} |"
    fi
    rows+=("$row")
done

blas=$(jget "$out/124M_B4_T256.pytorch.json" blas)
blas_core=$(jget "$out/124M_B4_T256.pytorch.json" blas_core)
torch_ver=$(jget "$out/124M_B4_T256.pytorch.json" torch)
tunables=$(jget "$out/124M_B4_T256.pytorch.json" glibc_tunables)

echo "Training throughput, $threads threads each ($(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load avg at end: $(cut -d' ' -f1-3 /proc/loadavg))."
echo "anvil: $anvil, kernel path ${path:-n/a}; FMA peak $(fmt "$peak" 1) GFLOP/s, 2048^3 SGEMM $(fmt "$sgemm" 1) GFLOP/s (anvil info --gemm-rate). PyTorch ${torch_ver:-n/a}, BLAS ${blas:-n/a} (core ${blas_core:-n/a}, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}), GLIBC_TUNABLES=${tunables:-unset}."
echo "Medians of timed steps: warmup $warm + $steps steps at T=64 and T=256$( ((quick)) || echo ", warmup $warm_big + $steps_big at T=1024"). Raw JSON and logs: $out"
echo
head="| config | anvil tok/s | pytorch tok/s | anvil/pytorch | ms/step anvil / pytorch | anvil peak RSS MB | pytorch peak RSS MB | anvil GFLOP/s (of FMA peak) | pytorch of FMA peak |"
rule="|---|---:|---:|---:|---:|---:|---:|---:|---:|"
((bf16)) && head+=" anvil bf16 tok/s | bf16/fp32 | anvil bf16 MFU (${bf16_kernel:-n/a} peak) | pytorch autocast tok/s | anvil bf16/pytorch autocast |" &&
    rule+="---:|---:|---:|---:|---:|"
echo "$head"
echo "$rule"
printf '%s\n' "${rows[@]}"
exit "$failed"
