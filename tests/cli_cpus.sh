#!/usr/bin/env bash
# One binary for every x86-64 CPU: run under qemu-user emulating an AMD EPYC
# of the first generation (AVX2 and FMA, no AVX-512: the CPU that once
# failed this suite) and a baseline x86-64 CPU (SSE2, no AVX), anvil picks
# the avx2 and the generic path, never executes an instruction the CPU lacks
# (qemu would stop it with SIGILL), trains and checkpoints, and ends with
# exactly the weights of the same run on this machine with that path forced
# through ANVIL_ISA. A path or dtype the CPU cannot run is refused in one
# line.
. "$(dirname "$0")/tools/cli_common.sh"

qemu=$(command -v qemu-x86_64) ||
  { missing "qemu-x86_64 is not installed (scripts/deps.sh --test installs qemu-user)"; finish; }
# TCG prints a warning per CPU feature it cannot emulate; they are not ours.
emu() { local cpu=$1; shift; "$qemu" -cpu "$cpu" "$@" 2> >(grep -v "TCG doesn't support" >&2); }

bible -f "gen1:1-gen10:32" > "$tmp/gen.txt" || { missing "bible-kjv is not installed"; finish; }
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"
args=(--data "$tmp/data" --layers 2 --heads 2 --embd 32 --seq 32 --batch 4 --lr 3e-3 --steps 6 --no-progress
      --sample-every -1 --seed 3 --val-every 3 --val-batches 1 --ckpt-every 3 --threads 2)

for pair in EPYC:avx2 qemu64:generic; do
  cpu=${pair%%:*} path=${pair#*:}
  emu "$cpu" "$anvil" info > "$tmp/$cpu.info" 2> "$tmp/$cpu.err"
  rc=$?
  if [ $rc -eq 0 ] && grep -q "^cpu path:  $path (the best this CPU runs" "$tmp/$cpu.info"; then
    ok "emulated $cpu: anvil info picks the $path path"
  else
    bad "emulated $cpu: anvil info exit $rc: $(grep "cpu path" "$tmp/$cpu.info") $(tail -n 1 "$tmp/$cpu.err")"
  fi
  emu "$cpu" "$anvil" train "${args[@]}" --out "$tmp/emu_$path" > "$tmp/emu_$path.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] && grep -q "kernels: cpu-$path," "$tmp/emu_$path.log" &&
    ok "emulated $cpu: trained 6 steps with checkpoints on the $path path" ||
    bad "emulated $cpu: train exit $rc: $(tail -n 1 "$tmp/emu_$path.log")"
  emu "$cpu" "$anvil" ckpt verify "$tmp/emu_$path" > /dev/null 2>&1 && ok "emulated $cpu: ckpt verify" ||
    bad "emulated $cpu: ckpt verify failed"
  ANVIL_ISA=$path "$anvil" train "${args[@]}" --out "$tmp/native_$path" > /dev/null 2>&1 || bad "native $path run"
  cmp -s "$tmp/emu_$path/model.safetensors" "$tmp/native_$path/model.safetensors" &&
    ok "emulated $cpu and ANVIL_ISA=$path here: identical weights" ||
    bad "emulated $cpu and ANVIL_ISA=$path here: the weights differ"
done

# What the emulated EPYC cannot run is refused up front, naming what it lacks.
out=$(ANVIL_ISA=avx512 emu EPYC "$anvil" info 2>&1)
rc=$?
[ $rc -eq 1 ] && [[ "$out" == *"ANVIL_ISA=avx512: this CPU lacks avx512f"* ]] &&
  ok "emulated EPYC: ANVIL_ISA=avx512 refused" || bad "emulated EPYC: ANVIL_ISA=avx512 gave exit $rc: $out"
# 78: a configuration the CPU cannot run, which no retry mends (core/exit.h).
out=$(emu EPYC "$anvil" train "${args[@]}" --dtype bf16 --out "$tmp/bf16" 2>&1)
rc=$?
[ $rc -eq 78 ] && [[ "$out" == *"AVX512_BF16"* ]] && ok "emulated EPYC: --dtype bf16 refused, naming AVX512_BF16" ||
  bad "emulated EPYC: --dtype bf16 gave exit $rc: $out"
finish
