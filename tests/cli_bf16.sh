#!/usr/bin/env bash
# --dtype bf16 (bf16 matmul inputs, fp32 sums, weights and AdamW state)
# follows the fp32 run's loss curve over 200 steps, and really multiplies in
# bf16 (the first step's loss, before any update, is not the fp32 run's); so do
# --tp 2 and --pp 2 --tp 2 (4 ranks). CTest runs it once per bf16 kernel
# (ANVIL_BF16=amx, avx512); skipped (77) where the CPU cannot, saying why. The sanitizer pass, 20 times slower, sets
# CLI_BF16_STEPS=30: the same bounds over a 30-step run.
. "$(dirname "$0")/tools/cli_common.sh"

if ! "$anvil" info | grep -q "^bf16: *yes"; then
  echo "SKIP: $("$anvil" info | sed -n 's/^bf16: *no: //p')"
  exit 77
fi
kernel=$([ "${ANVIL_BF16:-auto}" = avx512 ] && echo bf16 || echo amx)
bible -f "gen1:1-gen50:26" > "$tmp/gen.txt" || { missing "bible-kjv is not installed"; finish; }
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"
steps=${CLI_BF16_STEPS:-200}
args=(--data "$tmp/data" --layers 4 --heads 4 --embd 128 --seq 128 --batch 8 --lr 3e-3 --lr-warmup 20 --steps $steps
      --no-progress --sample-every -1 --seed 7 --val-every $((steps < 50 ? steps : 50)) --val-batches 4)
for d in fp32 bf16; do
  "$anvil" train "${args[@]}" --dtype $d --out "$tmp/$d" > "$tmp/$d.log" 2>&1 || bad "$d run: $(tail -n 1 "$tmp/$d.log")"
done
grep -q "kernels: cpu-avx512-$kernel," "$tmp/bf16.log" && ok "the bf16 run used the $kernel kernels" ||
  bad "the bf16 run did not report the $kernel kernels"

# Measured on this model (Xeon with AMX and AVX512_BF16, 2026-12-01): the
# mean |loss difference| over any 10 consecutive steps was at most 0.019 nats
# with vdpbf16ps and 0.026 with AMX, and the validation losses every 50 steps
# differed by at most 0.0051 and 0.0060. The bounds are about 3x the larger.
# follows RUN: whether RUN's bf16 curve keeps to the fp32 run's.
follows() {
/usr/bin/python3 - "$tmp/fp32/metrics.jsonl" "$tmp/$1/metrics.jsonl" $steps << 'EOF'
import json, sys
def curves(path):
    train, val = {}, {}
    for line in open(path):
        o = json.loads(line)
        if o["kind"] not in ("train", "val"):
            continue
        (train if o["kind"] == "train" else val)[o["step"]] = o["loss" if o["kind"] == "train" else "val_loss"]
    return train, val
(a, av), (b, bv) = curves(sys.argv[1]), curves(sys.argv[2])
steps = sorted(a)
assert steps == sorted(b) and len(steps) == int(sys.argv[3]), "both runs must log every step"
window = max(sum(abs(a[s] - b[s]) for s in steps[i:i + 10]) / 10 for i in range(0, len(steps) - 9))
val = max(abs(av[s] - bv[s]) for s in av)
print(f"max 10-step mean |diff| {window:.4f}, max val |diff| {val:.4f}, identical steps {sum(a[s] == b[s] for s in steps)}")
sys.exit(0 if window <= 0.075 and val <= 0.018 and a[steps[0]] != b[steps[0]] else 1)
EOF
}
follows bf16 && ok "bf16 follows the fp32 loss curve" || bad "bf16 strays from the fp32 loss curve"

# Tensor and pipeline parallel runs multiply in bf16 too, and keep to the fp32 curve by the same
# bounds. (Against the one-process bf16 run they differ from the first step by as much as fp32 does,
# measured 2.2e-6 relative in the loss and 1.7e-5 in the gradient norm here, 2026-12-03, Zen 5, where
# in fp32 the first step is the same bits; --pp 2 alone gives the same first-step loss bits in bf16
# too, and the kernels agree (test_tp): it comes with the TP split of the row-parallel sums, and grows
# with depth. So they are held to the curve, not to that run.)
if command -v mpirun > /dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  for grid in "tp2 2 --tp 2" "pp2_tp2 4 --pp 2 --tp 2"; do
    set -- $grid
    name=$1 n=$2
    shift 2
    if ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" OMP_NUM_THREADS=1 timeout 600 "$anvil" launch -n "$n" -- train \
      "${args[@]}" --dtype bf16 "$@" --out "$tmp/$name" > "$tmp/$name.log" 2>&1; then
      grep -q "^\[rank 0\] kernels: cpu-avx512-$kernel," "$tmp/$name.log" ||
        bad "$name did not report the $kernel kernels"
      follows "$name" && ok "$name in bf16 follows the fp32 loss curve" || bad "$name in bf16 strays from the fp32 loss curve"
    else
      bad "$name in bf16: $(grep -v '^\[rank [1-9]' "$tmp/$name.log" | tail -n 2)"
    fi
  done
else
  missing "mpirun is not installed: no tensor or pipeline parallel bf16 runs"
fi
finish
