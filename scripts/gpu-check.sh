#!/usr/bin/env bash
# Every check that needs a GPU, in one call (a few minutes on one H200):
#   1. what the machine has (GPU, driver, CUDA, torch, the system libraries anvil links);
#   2. the CUDA kernel tests against the CPU backend (tests/test_cuda_kernels.c);
#   3. the kernels' throughput (bench/bench_cuda_kernels.c);
#   4. GPT-2 124M at T=1024 on the GPU, bf16 and fp32: tokens/s and MFU against the H200's 989 TFLOP/s
#      dense bf16 peak (67 TFLOP/s fp32), and PyTorch (bf16 autocast, fused attention and AdamW) on
#      the same GPU, same shapes (bench/torch_peer_gpu.py);
#   5. a small model's loss curve on the GPU (fp32, bf16) against the CPU backend's (fp32), on the
#      repository's own text;
#   6. a GPU checkpoint resumed on the CPU and on the GPU, against the uninterrupted GPU run.
# What it measured goes to $OUT (or /tmp/gpu-check): log.txt, results.txt (the table printed last).
#
# usage: scripts/gpu-check.sh [DIR]
#   DIR  anvil prebuilt: DIR/bin/{anvil,test_cuda_kernels,bench_cuda_kernels} and DIR/lib (the shared
#        libraries they link that the machine may lack); without it, the script builds build-gpu/
#        here with CMake (the machine must then have anvil's build dependencies).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
pre=${1:-}
work=$(mktemp -d /tmp/gpu-check.XXXXXX)
results="$out/results.txt"
: > "$results"
section() { echo; echo "=== $* (at ${SECONDS}s)"; }
result() { echo "$*" | tee -a "$results"; }
py=$(command -v python3)

section "the machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
nvcc --version 2> /dev/null | tail -1
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
head -2 /etc/os-release 2> /dev/null
for l in libmpi.so libcjson.so libpcre2-8.so libsqlite3.so libmicrohttpd.so libcurl.so libsodium.so libcairo.so \
  libexpat.so libzstd.so libz.so libgomp.so libcudart.so libcublasLt.so libnccl.so; do
  printf '  %-18s %s\n' "$l" "$(ldconfig -p | grep -m1 "$l" | awk '{print $NF}')"
done
# cuBLASLt is the machine's own (too large to carry): ldconfig's, CUDA's, or the one PyTorch's wheels bring.
cublas=$(ldconfig -p | grep -m1 'libcublasLt.so.13' | awk '{print $NF}')
if [ -z "$cublas" ]; then
  wheels=$("$py" -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2> /dev/null)/nvidia
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib "$wheels/cublas/lib" "$wheels/cu13/lib"; do
    [ -e "$d/libcublasLt.so.13" ] && cublas="$d/libcublasLt.so.13" && break
  done
fi
echo "  cuBLASLt: ${cublas:-not found}"
if [ -n "$pre" ]; then
  pre=$(cd "$pre" && pwd)
  bin="$pre/bin"
  export LD_LIBRARY_PATH="$pre/lib${cublas:+:$(dirname "$cublas")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  section "build"
  cmake -S "$root" -B "$root/build-gpu" -DCMAKE_BUILD_TYPE=Release -DANVIL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
    > "$out/build.log" 2>&1 && cmake --build "$root/build-gpu" -j "$(nproc)" >> "$out/build.log" 2>&1 ||
    { tail -20 "$out/build.log"; echo "gpu-check: the build failed"; exit 1; }
  bin="$root/build-gpu"
  cp "$root/build-gpu/tests/test_cuda_kernels" "$root/build-gpu/bench/bench_cuda_kernels" "$bin/" 2> /dev/null
fi
missing=$(ldd "$bin/anvil" | grep 'not found')
[ -n "$missing" ] && echo "gpu-check: anvil cannot load: $missing"
anvil="$bin/anvil"
"$anvil" info | grep -E '^(gpu|cpu path)'

section "CUDA kernel tests"
timeout 300 "$bin/test_cuda_kernels" > "$out/test_cuda_kernels.txt" 2>&1
rc=$?
tail -60 "$out/test_cuda_kernels.txt"
result "test_cuda_kernels: exit $rc ($(grep -c FAIL "$out/test_cuda_kernels.txt") failed checks)"

section "kernel throughput"
timeout 240 "$bin/bench_cuda_kernels" 8192 > "$out/bench_cuda_kernels.txt" 2>&1
echo "exit $?"
cat "$out/bench_cuda_kernels.txt"

# jfield FILE KEY: KEY of the JSON object on FILE's last line.
jfield() { "$py" -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]).get(sys.argv[2], "n/a"))' "$1" "$2" 2> /dev/null || echo n/a; }

section "GPT-2 124M, T=1024, on the GPU"
for dt in bf16 fp32; do
  b=16
  [ $dt = fp32 ] && b=8
  timeout 300 "$anvil" train --synthetic --preset gpt2 --batch $b --seq 1024 --steps 12 --dtype $dt --device cuda \
    --no-progress --sample-every -1 --summary-json > "$work/gpt2_$dt.json" 2> "$work/gpt2_$dt.log"
  rc=$?
  tail -4 "$work/gpt2_$dt.log"
  cp "$work/gpt2_$dt.log" "$out/"
  gf=$(jfield "$work/gpt2_$dt.json" gflops_median)
  peak=989
  [ $dt = fp32 ] && peak=67
  mfu=$("$py" -c "print('%.1f%%' % (100 * float('$gf') / 1e3 / $peak))" 2> /dev/null || echo n/a)
  result "anvil gpt2 $dt B=$b T=1024: exit $rc, $(jfield "$work/gpt2_$dt.json" tokens_per_s_median) tok/s, \
$(jfield "$work/gpt2_$dt.json" ms_per_step_median) ms/step, $gf GFLOP/s, MFU $mfu of $peak TFLOP/s"
done
timeout 300 "$py" "$root/bench/torch_peer_gpu.py" --batch 16 --seq 1024 --steps 10 > "$work/torch.json" \
  2> "$work/torch.log"
rc=$?
tail -2 "$work/torch.log"
result "torch gpt2 bf16 autocast B=16 T=1024: exit $rc, $(jfield "$work/torch.json" tokens_per_s) tok/s, \
$(jfield "$work/torch.json" ms_per_step_median) ms/step, $(jfield "$work/torch.json" tflops) TFLOP/s ($(jfield "$work/torch.json" torch))"

section "loss curves: GPU against CPU"
"$anvil" prep --out "$work/data" --delimiter '\n\n' --val-fraction 0.05 --no-progress "$root"/*.md "$root"/docs/*.md \
  > /dev/null 2>&1 || echo "gpu-check: prep failed"
common=(--data "$work/data" --preset mini --batch 16 --seq 128 --lr 2e-3 --no-progress --sample-every -1 --val-every 20)
train() { # name, then train options
  local name=$1
  shift
  timeout 300 "$anvil" train "${common[@]}" "$@" --out "$work/$name" > "$work/$name.log" 2>&1 ||
    { echo "gpu-check: $name failed: $(tail -2 "$work/$name.log")"; }
}
OMP_NUM_THREADS=$(nproc) train cpu --steps 60
train gpu --steps 60 --device cuda
train gpu16 --steps 60 --device cuda --dtype bf16
compare() { # a b what
  "$py" - "$work/$1/metrics.jsonl" "$work/$2/metrics.jsonl" "$3" << 'EOF' 2>&1 | tee -a "$results"
import json, sys
def losses(p, kind):
    out = {}
    for line in open(p):
        r = json.loads(line)
        if r.get("kind") == kind: out[r["step"]] = r["loss" if kind == "train" else "val_loss"]
    return out
try:
    a, b = losses(sys.argv[1], "train"), losses(sys.argv[2], "train")
    va, vb = losses(sys.argv[1], "val"), losses(sys.argv[2], "val")
    steps = sorted(set(a) & set(b))
    d = [abs(a[s] - b[s]) / abs(a[s]) for s in steps]
    same = sum(a[s] == b[s] for s in steps)
    print(f"{sys.argv[3]}: {len(steps)} steps, first loss {a[steps[0]]:.6f} vs {b[steps[0]]:.6f}, "
          f"last {a[steps[-1]]:.6f} vs {b[steps[-1]]:.6f}, max rel diff {max(d):.3g}, "
          f"mean of the last 10 {sum(d[-10:]) / 10:.3g}, bit-identical steps {same}; "
          f"val {[round(va[s], 5) for s in sorted(va)]} vs {[round(vb[s], 5) for s in sorted(vb)]}")
except Exception as e:
    print(f"{sys.argv[3]}: cannot compare: {e}")
EOF
}
compare cpu gpu "mini fp32, CPU vs GPU"
compare cpu gpu16 "mini, CPU fp32 vs GPU bf16"

section "a GPU checkpoint resumed on the CPU and on the GPU"
train gpu_full --steps 60 --device cuda --ckpt-every 30
for where in cpu gpu; do
  mkdir -p "$work/resume_$where/ckpt"
  cp -r "$work/gpu_full/ckpt/step_00000030" "$work/resume_$where/ckpt/"
  echo step_00000030 > "$work/resume_$where/ckpt/latest"
done
OMP_NUM_THREADS=$(nproc) train resume_cpu --steps 60 --ckpt-every 30 --resume auto
train resume_gpu --steps 60 --ckpt-every 30 --resume auto --device cuda
grep -h '^resumed' "$work"/resume_*.log
compare gpu_full resume_cpu "steps 31-60 resumed on the CPU vs the uninterrupted GPU run"
compare gpu_full resume_gpu "steps 31-60 resumed on the GPU vs the uninterrupted GPU run"
cmp -s "$work/gpu_full/model.safetensors" "$work/resume_gpu/model.safetensors" &&
  result "the GPU resume's model.safetensors is byte-identical to the uninterrupted run's" ||
  result "the GPU resume's model.safetensors differs from the uninterrupted run's"
cp "$work"/*.log "$out/" 2> /dev/null

section "results"
cat "$results"
rm -rf "$work"
