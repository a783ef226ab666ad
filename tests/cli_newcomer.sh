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
#   - the job daemon removes serve.pid (and serve.port) when it stops;
#   - sample says why a sample ended (end-of-text or --tokens), and
#     --ignore-eot goes on past end-of-text;
#   - prep of a text file without --delimiter: its progress lines never read
#     "0 documents | 0 tokens" (they say no document ended yet, and why), and
#     the empty-val note names --delimiter and --jsonl-field;
#   - plot names each panel's y-axis unit;
#   - train --train/--val globs without --vocab take the vocabulary (and the
#     tokenizer) from the prep manifest beside the shards, and without one say
#     which vocabulary is in use;
#   - a resume with another --batch, --seq or --steps warns, naming the old
#     and new values and what changes; the same ones resume silently;
#   - a misspelt option and a misspelt preset both exit 2 (usage), each with
#     the nearest known name suggested.
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
run=$tmp/ck
"$anvil" train "${tiny[@]}" --steps 4 --ckpt-every 2 --out "$run" > /dev/null 2>&1 || bad "training with 2 checkpoints"
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

# ---- MFU's peak, cached per machine ----
cache=$ANVIL_CACHE_DIR/peak.json
rm -rf "$ANVIL_CACHE_DIR"
"$anvil" info > "$tmp/info1" 2>&1 && grep -q "^mfu peak: .* probed now, cached in $cache$" "$tmp/info1" &&
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["format"] == "anvil-peak-cache" and d["peaks"][0]["gflops"] > 0' "$cache" &&
  ok "anvil info probes once and caches the peak in \$ANVIL_CACHE_DIR" ||
  bad "first anvil info: $(grep -i peak "$tmp/info1")"
fig=$(sed -n 's/^mfu peak: *\([0-9.]*\) GFLOP.*fp32.*/\1/p' "$tmp/info1" | head -n 1)
"$anvil" info > "$tmp/info2" 2>&1 && grep -q "^mfu peak: *$fig GFLOP/s fp32 .*from the cache $cache, the best of 1 probe " "$tmp/info2" &&
  ok "a second anvil info reads the same $fig GFLOP/s from the cache" || bad "second anvil info: $(grep -i peak "$tmp/info2")"
echo '{"format": "anvil-peak-cache", "version": 1, "peaks": [' > "$cache"
"$anvil" info > "$tmp/info3" 2>&1 && grep -q "^anvil info: note: ignoring the peak cache $cache: .*; probing again$" "$tmp/info3" &&
  grep -q "probed now, cached in" "$tmp/info3" && python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$cache" &&
  ok "a corrupt cache is ignored with a note and rewritten" || bad "corrupt cache: $(cat "$tmp/info3")"
[ -z "$(find "$ANVIL_CACHE_DIR" -name '*.tmp*')" ] && ok "no temporary file left in the cache folder" ||
  bad "left in the cache folder: $(ls -a "$ANVIL_CACHE_DIR")"
fig=$(sed -n 's/^mfu peak: *\([0-9.]*\) GFLOP.*fp32.*/\1/p' "$tmp/info3" | head -n 1)
"$anvil" train "${tiny[@]}" --steps 100000 --metrics-port 0 --out "$tmp/m" > /dev/null 2> "$tmp/train.log" &
trainer=$!
page=
for _ in $(seq 200); do
  [ -s "$tmp/m/metrics.port" ] && page=$(curl -sf "http://127.0.0.1:$(cat "$tmp/m/metrics.port")/metrics" 2> /dev/null) &&
    printf '%s\n' "$page" | grep -q '^anvil_train_peak_flops_per_second{' && break
  page=
  sleep 0.1
done
kill "$trainer" 2> /dev/null
wait "$trainer" 2> /dev/null
line=$(printf '%s\n' "$page" | grep '^anvil_train_peak_flops_per_second{')
if printf '%s\n' "$line" | grep -q 'source="cache"' && printf '%s\n' "$line" | grep -q "file=\"$cache\"" &&
  python3 -c 'import sys; v = float(sys.argv[1].rsplit(" ", 1)[1]); sys.exit(abs(v - float(sys.argv[2]) * 1e9) > 0.05e9)' \
    "$line" "$fig" &&
  grep -q "^metrics: MFU against a peak of $fig GFLOP/s a rank (.*), from the cache $cache" "$tmp/train.log"; then
  ok "the trainer's /metrics and log give the cached $fig GFLOP/s and its source"
else bad "the trainer's peak: '$line'; log: $(grep 'MFU against' "$tmp/train.log")"; fi

# ---- the job daemon's files at stop ----
state=$tmp/state
"$anvil" serve --init --state "$state" > /dev/null 2> "$tmp/err" || bad "serve --init: $(cat "$tmp/err")"
"$anvil" serve --state "$state" --port 0 2> "$tmp/serve.err" &
daemon=$!
for _ in $(seq 100); do [ -s "$state/serve.port" ] && break; sleep 0.05; done
[ -s "$state/serve.pid" ] || bad "no serve.pid while the daemon runs"
kill -TERM "$daemon"
wait "$daemon"
[ ! -e "$state/serve.pid" ] && [ ! -e "$state/serve.port" ] && ok "serve.pid and serve.port are removed at stop" ||
  bad "left after stop: $(ls "$state")"
"$anvil" serve --state "$state" --backup "$tmp/backups/today/state.db" 2> "$tmp/err" && [ -s "$tmp/backups/today/state.db" ] &&
  ok "serve --backup makes the missing parents" || bad "serve --backup: $(tail -n 1 "$tmp/err")"
# ---- why a sample ended ----
# Short documents (one a line), so the model learns to end them: end-of-text comes within 60 tokens.
for i in $(seq 3000); do echo "In the beginning $i"; done > "$tmp/short.txt"
"$anvil" prep --out "$tmp/short" --delimiter '\n' --val-fraction 0.05 "$tmp/short.txt" > /dev/null 2>&1 &&
  "$anvil" train --data "$tmp/short" --preset tiny --batch 8 --seq 32 --steps 60 --lr 3e-3 --no-progress \
    --sample-every -1 --threads 1 --out "$tmp/short_run" > /dev/null 2>&1 || bad "training on short documents"
"$anvil" sample --model "$tmp/short_run" --prompt "In the" --tokens 60 --temperature 0 > "$tmp/out" 2> "$tmp/err"
rc=$?
n=$(sed -n 's/^anvil sample: sample stopped after \([0-9]*\) of 60 tokens: the model wrote end-of-text (--ignore-eot goes on past it)$/\1/p' "$tmp/err")
[ $rc = 0 ] && [ -n "$n" ] && [ "$n" -lt 60 ] && ok "sample says it stopped at end-of-text after $n of 60 tokens" ||
  bad "sample at end-of-text: exit $rc: $(cat "$tmp/out" "$tmp/err")"
"$anvil" sample --model "$tmp/short_run" --prompt "In the" --tokens 60 --temperature 0 --ignore-eot > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc = 0 ] && [ "$(cat "$tmp/err")" = "anvil sample: sample stopped after 60 tokens: --tokens 60 reached" ] &&
  ok "sample --ignore-eot goes on to --tokens 60" || bad "sample --ignore-eot: exit $rc: $(cat "$tmp/out" "$tmp/err")"
# ---- prep of one long document ----
python3 -c 'import random, sys
random.seed(1)
w = ["the", "and", "of", "to", "in", "that", "he", "shall", "unto", "for"]
open(sys.argv[1], "w").write(" ".join(random.choice(w) for _ in range(4_000_000)))' "$tmp/one.txt"
"$anvil" prep --out "$tmp/one" "$tmp/one.txt" > /dev/null 2> "$tmp/err" || bad "prep of one document: $(cat "$tmp/err")"
if ! grep -q '| 0 documents | 0 tokens' "$tmp/err" &&
  [ "$(grep -c '^prep: progress [0-9]*% .* | no document ended yet (without --delimiter or --jsonl-field, each input is one document) |' "$tmp/err")" -ge 2 ]
then ok "prep's progress says no document ended yet, never '0 documents | 0 tokens'"
else bad "prep's progress lines: $(grep progress "$tmp/err")"; fi
grep -q "^anvil prep: note: no document fell in the val split, so it has no shards: without --delimiter (text) or --jsonl-field (JSON lines) each input file is one document, 1 here$" "$tmp/err" &&
  ok "the empty-val note names --delimiter and --jsonl-field" || bad "the empty-val note: $(grep note "$tmp/err")"
# ---- plot's y-axis units ----
"$anvil" plot "$tmp/short_run" --out "$tmp/units.svg" 2> "$tmp/err" &&
  units=$(python3 -c 'import sys, xml.etree.ElementTree as ET
print([t.text for t in ET.parse(sys.argv[1]).getroot() if t.get("class") == "ylabel"])' "$tmp/units.svg" 2>&1) &&
  [ "$units" = "['nats per token', 'nats per token', 'learning rate (no unit)', 'L2 norm (no unit)', 'tokens per second']" ] &&
  ok "plot's y axes name their units: $units" || bad "plot's y-axis units: ${units:-$(cat "$tmp/err")}"
# ---- --train/--val globs and the vocabulary ----
"$anvil" tokenizer train --vocab-size 400 --out "$tmp/400.tiktoken" "$tmp/short.txt" > /dev/null 2>&1 &&
  "$anvil" prep --out "$tmp/bpe" --delimiter '\n' --val-fraction 0.05 --tokenizer "$tmp/400.tiktoken" "$tmp/short.txt" \
    > /dev/null 2>&1 || bad "prep with a 400-id tokenizer"
glob=(--train "$tmp/bpe/train_*.bin" --val "$tmp/bpe/val_*.bin" --batch 2 --seq 16 --steps 2 --no-progress --sample-every -1 --threads 1)
"$anvil" train "${glob[@]}" --out "$tmp/globrun" > /dev/null 2> "$tmp/err" &&
  grep -q "^model: .* vocab 400 " "$tmp/err" && cmp -s "$tmp/400.tiktoken" "$tmp/globrun/tokenizer.tiktoken" &&
  ok "--train/--val globs take vocab 400 and the tokenizer from the manifest beside them" ||
  bad "--train globs beside a manifest: $(grep -E '^model:|error' "$tmp/err")"
mkdir "$tmp/bare" && cp "$tmp/short/"*.bin "$tmp/bare/"
"$anvil" train --train "$tmp/bare/train_*.bin" --batch 2 --seq 16 --steps 2 --no-progress --sample-every -1 --threads 1 \
  > /dev/null 2> "$tmp/err" &&
  grep -q "^anvil train: note: no manifest.json beside --train's shards: the vocabulary is 257, the preset's; give --vocab N for a tokenizer of N ids$" "$tmp/err" &&
  ok "--train shards without a manifest: a note names the vocabulary in use" || bad "--train without a manifest: $(cat "$tmp/err")"
# ---- resume with other shapes ----
rr=(--synthetic --no-progress --sample-every -1 --threads 1 --ckpt-every 2 --out "$tmp/rr")
"$anvil" train "${rr[@]}" --steps 4 --batch 2 --seq 16 > /dev/null 2>&1 || bad "the run to resume"
"$anvil" train "${rr[@]}" --steps 6 --batch 2 --seq 16 --resume "$tmp/rr/ckpt/step_00000002" > /dev/null 2> "$tmp/err" &&
  grep -q "^resumed from" "$tmp/err" && [ "$(grep -c warning "$tmp/err")" = 1 ] &&
  grep -q "^warning: resuming with --steps 6 where the checkpoint's run had 4: the run now ends at step 6, and the learning-rate schedule" "$tmp/err" &&
  ok "a resume with --steps 6 instead of 4 warns of the schedule" || bad "resume with --steps: $(grep -E 'resum|warn' "$tmp/err")"
"$anvil" train "${rr[@]}" --steps 8 --batch 4 --seq 32 --resume auto > /dev/null 2> "$tmp/err" &&
  grep -q "^warning: resuming with --batch 4 where the checkpoint's run had 2: each step now reads 4 sequences instead of 2" "$tmp/err" &&
  grep -q "^warning: resuming with --seq 32 where the checkpoint's run had 16: sequences of 32 tokens instead of 16" "$tmp/err" &&
  grep -q "^warning: resuming with --steps 8 where the checkpoint's run had 6" "$tmp/err" &&
  ok "a resume with another --batch, --seq and --steps warns of each" || bad "resume with --batch/--seq: $(grep -E 'resum|warn' "$tmp/err")"
"$anvil" train "${tiny[@]}" --steps 4 --ckpt-every 2 --out "$tmp/rr2" > /dev/null 2>&1 || bad "a second run to resume"
"$anvil" train "${tiny[@]}" --steps 4 --ckpt-every 2 --out "$tmp/rr2" --resume "$tmp/rr2/ckpt/step_00000002" \
  > /dev/null 2> "$tmp/err" &&
  grep -q "^resumed from" "$tmp/err" && ! grep -q warning "$tmp/err" && ok "the same shapes resume without a warning" ||
  bad "resume with the same shapes: $(grep -E 'resum|warn' "$tmp/err")"
# ---- misspelt options and presets ----
for c in "--val-evry 5|unknown option '--val-evry' (did you mean --val-every?)" \
         "--preset smal|model: unknown preset 'smal' (did you mean small? known: "; do
  # shellcheck disable=SC2086 # the words before | are the options
  "$anvil" train --synthetic ${c%%|*} > /dev/null 2> "$tmp/err"
  rc=$?
  [ $rc = 2 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -qF "anvil train: error: ${c#*|}" "$tmp/err" &&
    ok "train ${c%%|*}: exit 2, $(cat "$tmp/err")" || bad "train ${c%%|*}: exit $rc: $(cat "$tmp/err")"
done
finish
