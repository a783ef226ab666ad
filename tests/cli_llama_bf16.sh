#!/usr/bin/env bash
# The Llama family with --dtype bf16 (bf16 matmul inputs, fp32 sums, weights
# and AdamW state), as cli_bf16.sh holds GPT-2: llama-tiny (grouped-query
# attention 4/2, untied) follows the fp32 run's loss curve over 100 steps, and
# really multiplies in bf16 (the first step's loss, before any update, is not
# the fp32 run's); so does --tp 2, which splits the key/value heads. CTest
# runs it once per bf16 kernel (ANVIL_BF16=amx, avx512); skipped (77) where the
# CPU cannot, saying why. The sanitizer pass sets CLI_BF16_STEPS=30: the same
# bounds over a 30-step run.
. "$(dirname "$0")/tools/cli_common.sh"

if ! "$anvil" info | grep -q "^bf16: *yes"; then
  echo "SKIP: $("$anvil" info | sed -n 's/^bf16: *no: //p')"
  exit 77
fi
kernel=$([ "${ANVIL_BF16:-auto}" = avx512 ] && echo bf16 || echo amx)
bible -f "gen1:1-gen50:26" > "$tmp/gen.txt" || { missing "bible-kjv is not installed"; finish; }
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"
steps=${CLI_BF16_STEPS:-100}
args=(--data "$tmp/data" --preset llama-tiny --seq 64 --batch 8 --lr 3e-3 --lr-warmup 20 --steps $steps --no-progress
      --sample-every -1 --seed 7 --val-every $((steps < 50 ? steps : 50)) --val-batches 4)
for d in fp32 bf16; do
  "$anvil" train "${args[@]}" --dtype $d --out "$tmp/$d" > "$tmp/$d.log" 2>&1 || bad "$d run: $(tail -n 1 "$tmp/$d.log")"
done
grep -q "kernels: cpu-avx512-$kernel," "$tmp/bf16.log" && ok "the bf16 run used the $kernel kernels" ||
  bad "the bf16 run did not report the $kernel kernels"

# Measured on this model (Zen 5 with AVX512_BF16, no AMX, 2026-12-06; vdpbf16ps), one process and
# --tp 2 over seeds 7, 1 and 2: the mean |loss difference| over any 10 consecutive steps was at most
# 0.0021 nats (one process, seed 7), the validation losses every 50 steps differed by at most 0.0013
# (--tp 2, seed 1). The bounds are about 3x those. (llama-mini, 3x the cost, measured 0.044 and 0.044 at seed 7 from a loss spike near step 26 at
# this lr, where the runs part: a test of the spike's chaos more than of bf16.) AMX was not measured
# here; its bf16 rounding of the inputs is the same, only the fp32 sums' order differs.
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
sys.exit(0 if window <= 0.0065 and val <= 0.004 and a[steps[0]] != b[steps[0]] else 1)
EOF
}
out=$(follows bf16) && ok "bf16 follows the fp32 loss curve: $out" || bad "bf16 strays from the fp32 loss curve: $out"

if command -v mpirun > /dev/null; then
  if ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" OMP_NUM_THREADS=1 timeout 600 "$anvil" launch -n 2 -- train \
    "${args[@]}" --dtype bf16 --tp 2 --out "$tmp/tp2" > "$tmp/tp2.log" 2>&1; then
    grep -q "^\[rank 0\] kernels: cpu-avx512-$kernel," "$tmp/tp2.log" || bad "tp2 did not report the $kernel kernels"
    out=$(follows tp2) && ok "tp2 in bf16 follows the fp32 loss curve: $out" ||
      bad "tp2 in bf16 strays from the fp32 loss curve: $out"
  else
    bad "tp2 in bf16: $(grep -v '^\[rank [1-9]' "$tmp/tp2.log" | tail -n 2)"
  fi
else
  missing "mpirun is not installed: no tensor parallel bf16 run"
fi
finish
