#!/usr/bin/env bash
# Behaviour of the tool subcommands beyond --help:
#   - tokenizer encode/decode: files round-trip byte for byte, in decimal and
#     binary form, with a shipped encoding and with a freshly learned one, and
#     the ids match tiktoken's for the gpt2 encoding;
#   - export then import: a Hugging Face folder whose config.json matches the
#     model and whose tensors, read back by import, equal the original bit
#     for bit; train --init from the imported file starts from the same loss;
#   - ckpt inspect and verify on every kind of checkpoint: replicated (sync
#     and async), and sharded across 2 ranks at ZeRO-1 (with whole weights)
#     and ZeRO-3 (shards only), plus export straight from the sharded one.
. "$(dirname "$0")/tools/cli_common.sh"
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1

bible -f "gen1:1-gen10:32" > "$tmp/gen.txt" || { missing "bible-kjv is not installed"; finish; }

# ---- tokenizer round trips ----
ranks=$here/tok/ranks/gpt2.tiktoken
"$anvil" tokenizer encode --ranks "$ranks" --out "$tmp/gen.ids" "$tmp/gen.txt" &&
  "$anvil" tokenizer decode --ranks "$ranks" --out "$tmp/gen.back" "$tmp/gen.ids" || bad "gpt2 encode/decode failed"
cmp -s "$tmp/gen.txt" "$tmp/gen.back" && ok "gpt2: $(wc -w < "$tmp/gen.ids") ids decode to the same $(wc -c < "$tmp/gen.txt") bytes" ||
  bad "gpt2: decoded text differs from the input"
"$anvil" tokenizer encode --ranks "$ranks" --binary "$tmp/gen.txt" > "$tmp/gen.u32" &&
  "$anvil" tokenizer decode --ranks "$ranks" --binary < "$tmp/gen.u32" > "$tmp/gen.back32" || bad "binary encode/decode failed"
if cmp -s "$tmp/gen.txt" "$tmp/gen.back32" &&
   [ "$(od -An -v -tu4 -w4 "$tmp/gen.u32" | tr -s ' \n' ' ' | sed 's/^ //;s/ $//')" = "$(tr -s ' \n' ' ' < "$tmp/gen.ids" | sed 's/^ //;s/ $//')" ]
then ok "gpt2: --binary round-trips and holds the same ids as the decimal form"
else bad "gpt2: --binary ids or round trip differ"; fi
# tiktoken's own ids for this text (the official npm package, as in test_tokenizer).
if [ -d "$here/tok/node_modules/tiktoken" ] && command -v node > /dev/null; then
  ref=$(cd "$here/tok" && node -e '
    const { get_encoding } = require("tiktoken");
    const text = require("fs").readFileSync(process.argv[1], "utf8");
    process.stdout.write(Array.from(get_encoding("gpt2").encode(text)).join(" "));' "$tmp/gen.txt")
  [ "$ref" = "$(tr -s ' \n' ' ' < "$tmp/gen.ids" | sed 's/^ //;s/ $//')" ] && ok "gpt2: ids equal tiktoken's" ||
    bad "gpt2: ids differ from tiktoken's"
else missing "tiktoken (tests/tok/node_modules, from tests/tok/gen.sh) or node: ids not compared with tiktoken's"; fi
"$anvil" tokenizer train --vocab-size 400 --out "$tmp/learned.tiktoken" "$tmp/gen.txt" > /dev/null 2> "$tmp/train.err" &&
  "$anvil" tokenizer encode --ranks "$tmp/learned.tiktoken" "$tmp/gen.txt" > "$tmp/l.ids" &&
  "$anvil" tokenizer decode --ranks "$tmp/learned.tiktoken" "$tmp/l.ids" > "$tmp/l.back" || bad "learned tokenizer failed"
nl=$(wc -w < "$tmp/l.ids"); nb=$(wc -c < "$tmp/gen.txt")
if ! cmp -s "$tmp/gen.txt" "$tmp/l.back"; then bad "learned tokenizer: decoded text differs"
elif [ "$nl" -ge "$nb" ]; then bad "learned tokenizer: $nl ids for $nb bytes, no merges used"
else ok "learned 400-id tokenizer: round trip, $nl ids for $nb bytes"; fi
msg=$(progress_lines "$tmp/train.err" "tokenizer train" 8) && grep -q "^tokenizer train: progress done 100% 143/143 merges" "$tmp/train.err" &&
  ok "tokenizer train's progress: $msg" || bad "tokenizer train's progress: $msg: $(cat "$tmp/train.err")"
"$anvil" tokenizer train --no-progress --vocab-size 400 --out "$tmp/quiet.tiktoken" "$tmp/gen.txt" > /dev/null 2> "$tmp/train.err" &&
  ! grep -q progress "$tmp/train.err" && ok "tokenizer train --no-progress prints no progress" ||
  bad "tokenizer train --no-progress: $(cat "$tmp/train.err")"

# ---- export, import, train --init ----
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"
common=(--data "$tmp/data" --preset tiny --batch 4 --seq 64 --lr 3e-3 --no-progress --sample-every -1 --seed 9)
"$anvil" train "${common[@]}" --steps 6 --out "$tmp/run" > /dev/null 2>&1 || bad "training run"
"$anvil" export --model "$tmp/run/model.safetensors" --out "$tmp/hf" > /dev/null &&
  "$anvil" import --hf "$tmp/hf" --out "$tmp/back.safetensors" > /dev/null || bad "export/import failed"
cmp_st() { python3 "$here/tools/st_equal.py" "$@"; }
out=$(python3 - "$tmp/hf/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
want = {"n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 64, "vocab_size": 257}
bad = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
print("config.json: " + ("ok" if not bad else "wrong %s" % bad))
sys.exit(1 if bad else 0)
PY
) && ok "export: $out" || bad "export: $out"
out=$(cmp_st "$tmp/run/model.safetensors" "$tmp/back.safetensors") && ok "export then import: $out" ||
  bad "export then import: $out"
first_loss() { grep '"kind":"train"' "$1/metrics.jsonl" | head -n 1 | grep -o '"loss":[^,]*'; }
"$anvil" train "${common[@]}" --steps 1 --init "$tmp/run/model.safetensors" --out "$tmp/init_a" > /dev/null 2>&1 &&
  "$anvil" train "${common[@]}" --steps 1 --init "$tmp/back.safetensors" --out "$tmp/init_b" > /dev/null 2>&1 ||
  bad "train --init failed"
la=$(first_loss "$tmp/init_a"); lb=$(first_loss "$tmp/init_b")
[ -n "$la" ] && [ "$la" = "$lb" ] && ok "train --init: the imported model starts at the same loss ($la)" ||
  bad "train --init: '$la' vs '$lb'"

# ---- a run folder carries its tokenizer ----
"$anvil" prep --out "$tmp/bpe_data" --delimiter '\n' --val-fraction 0.05 --tokenizer "$tmp/learned.tiktoken" \
  "$tmp/gen.txt" > /dev/null 2>&1 || bad "prep with the learned tokenizer"
"$anvil" train --data "$tmp/bpe_data" --preset tiny --vocab 400 --batch 4 --seq 32 --steps 3 --ckpt-every 3 --no-progress \
  --sample-every -1 --out "$tmp/bpe_run" > /dev/null 2>&1 || bad "training on BPE tokens"
cmp -s "$tmp/learned.tiktoken" "$tmp/bpe_run/tokenizer.tiktoken" && ok "the run folder keeps the rank file" ||
  bad "the run folder lacks the rank file"
for m in "$tmp/bpe_run/model.safetensors" "$tmp/bpe_run"; do
  out=$("$anvil" sample --model "$m" --prompt "And God said" --tokens 8 --seed 1 2>&1)
  [ "${out#And God said}" != "$out" ] && ok "sample --model ${m#$tmp/} --prompt finds the run's tokenizer" ||
    bad "sample --model ${m#$tmp/}: $out"
done
err=$("$anvil" sample --model "$tmp/bpe_run" --tokenizer "$ranks" --prompt "And" --tokens 4 2>&1 >/dev/null)
case "$err" in *"crc32c"*"crc32c"*) ok "a different tokenizer by hand is refused naming both checksums" ;;
  *) bad "a wrong tokenizer by hand: $err" ;; esac
"$anvil" export --model "$tmp/bpe_run" --out "$tmp/bpe_hf" > /dev/null 2> "$tmp/export.err" &&
  cmp -s "$tmp/learned.tiktoken" "$tmp/bpe_hf/tokenizer.tiktoken" && ok "export copies the model's tokenizer" ||
  bad "export did not copy the tokenizer"
# The tiny preset has 28 tensors (2 layers of 12, wte, wpe, ln_f's 2); export counts
# writing the file as one more step, import counts the tensors alone.
msg=$(progress_lines "$tmp/export.err" export 8) && grep -q "^export: progress done 100% 29/29 tensors" "$tmp/export.err" &&
  ok "export's progress: $msg" || bad "export's progress: $msg: $(cat "$tmp/export.err")"
"$anvil" import --hf "$tmp/bpe_hf" --out "$tmp/bpe_back.safetensors" > /dev/null 2> "$tmp/import.err" &&
  msg=$(progress_lines "$tmp/import.err" import 8) && ok "import's progress: $msg" ||
  bad "import's progress: $msg: $(cat "$tmp/import.err")"
for c in "export --model $tmp/bpe_run --out $tmp/bpe_hf2" "import --hf $tmp/bpe_hf --out $tmp/bpe_back2.safetensors"; do
  # shellcheck disable=SC2086 # the words of c are the command's
  "$anvil" $c --no-progress > /dev/null 2> "$tmp/quiet.err" && [ ! -s "$tmp/quiet.err" ] &&
    ok "${c%% *} --no-progress prints nothing on stderr" || bad "${c%% *} --no-progress: $(cat "$tmp/quiet.err")"
done
"$anvil" ckpt verify "$tmp/bpe_run" > /dev/null 2> "$tmp/verify.err" && msg=$(progress_lines "$tmp/verify.err" "ckpt verify" 1) &&
  ok "ckpt verify's progress: $msg" || bad "ckpt verify's progress: $msg: $(cat "$tmp/verify.err")"
"$anvil" ckpt verify --no-progress "$tmp/bpe_run" > /dev/null 2> "$tmp/verify.err" && [ ! -s "$tmp/verify.err" ] &&
  ok "ckpt verify --no-progress prints nothing on stderr" || bad "ckpt verify --no-progress: $(cat "$tmp/verify.err")"
"$anvil" ckpt inspect "$tmp/bpe_run" | grep -Eq '^tokenizer +gpt2 crc32c [0-9a-f]{8}$' &&
  ok "the checkpoint manifest names the tokenizer" || bad "ckpt inspect: $("$anvil" ckpt inspect "$tmp/bpe_run" | grep tokenizer)"

# ---- ckpt inspect / verify on every kind ----
inspect_ok() { # name dir pattern...
  local name=$1 dir=$2; shift 2
  local text; text=$("$anvil" ckpt inspect "$dir" 2>&1) || { bad "$name: inspect failed: $text"; return; }
  for p in "$@"; do
    printf '%s\n' "$text" | grep -Eq "$p" || { bad "$name: inspect lacks /$p/: $text"; return; }
  done
  "$anvil" ckpt verify "$dir" > /dev/null 2>&1 && ok "$name: inspect shows $*; verify passes" || bad "$name: verify failed"
}
"$anvil" train "${common[@]}" --steps 4 --ckpt-every 2 --out "$tmp/async" > /dev/null 2>&1 || bad "async checkpoint run"
"$anvil" train "${common[@]}" --steps 4 --ckpt-every 2 --ckpt-sync --out "$tmp/sync" > /dev/null 2>&1 ||
  bad "sync checkpoint run"
inspect_ok "replicated, async" "$tmp/async" '^step +4$' 'zero_stage 0' 'optim.safetensors'
inspect_ok "replicated, sync, one step folder" "$tmp/sync/ckpt/step_00000002" '^step +2$' 'model.safetensors'
if command -v mpirun > /dev/null; then
  mpi_env=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0")
  for z in 1 3; do
    "${mpi_env[@]}" timeout 120 "$anvil" launch -n 2 -- train "${common[@]}" --batch 2 --steps 4 --ckpt-every 4 --zero $z \
      --out "$tmp/zero$z" > /dev/null 2>&1 || bad "2-rank ZeRO-$z run"
  done
  inspect_ok "sharded ZeRO-1" "$tmp/zero1" 'world 2' 'zero_stage 1' 'shard_0_of_2' 'model.safetensors'
  inspect_ok "sharded ZeRO-3" "$tmp/zero3" 'world 2' 'zero_stage 3' 'shard_1_of_2'
  "$anvil" export --model "$tmp/zero3/ckpt/step_00000004" --out "$tmp/hf3" > /dev/null 2>&1 &&
    "$anvil" import --hf "$tmp/hf3" --out "$tmp/back3.safetensors" > /dev/null 2>&1 || bad "export from ZeRO-3 failed"
  out=$(cmp_st "$tmp/zero3/model.safetensors" "$tmp/back3.safetensors") &&
    ok "export from a ZeRO-3 checkpoint equals the run's final weights: $out" || bad "export from ZeRO-3: $out"
else missing "mpirun (openmpi-bin): sharded checkpoints not inspected"; fi

finish
