#!/usr/bin/env bash
# The Llama family through the binary (mpirun is required for the layouts,
# unless ANVIL_TEST_ALLOW_SKIP=1), on the book of Genesis, with the
# llama-tiny preset (grouped-query attention 4/2, untied) against one process
# with the same global batch (8 sequences of 64 tokens, 20 steps, lr 3e-3):
#   - --tp 2 (the key/value heads split) with and without sequence
#     parallelism, data parallelism, ZeRO-1, ZeRO-2 and ZeRO-3 on 2 ranks,
#     and MiCS (ZeRO-3 in groups of 2 of 4 ranks), per-step loss, gradient
#     norm and final weights within the tolerances below; --pp 2 against one
#     process accumulating the same 4 micro-batches;
#   - a Llama checkpoint resumes across layouts: one process's at --tp 2,
#     ZeRO-3's in one process, the pipeline's at --tp 2, each continuing like
#     the reference, and one process's in one process to the same model file
#     byte for byte;
#   - export then import gives the model's tensors byte for byte, and
#     config.json is LlamaForCausalLM's; train --init from the imported file
#     starts from the run's weights (with a step too small to move them: the
#     run's validation loss and tensors, bit for bit);
#   - sample: the same seed gives the same bytes twice, and from the imported
#     file too, another seed other bytes, and exactly --tokens tokens;
#   - with a tokenizer in Llama 3's format (tests/tok/expected, 1200 ranks and
#     256 specials), prep, a tied llama-mini and export, whose config.json
#     names <|begin_of_text|> and <|end_of_text|> (1200, 1201) and which keeps
#     the tokenizer; its samples decode with the tokenizer the run kept as with
#     the rank file given by hand;
#   - with a GPT-2-style tokenizer (tests/tok/expected, 1200 ids, no
#     beginning-of-text token), export names its end-of-text (1199) and no
#     bos; from a checkpoint, which records no tokenizer, both are null, not
#     ids guessed from the vocabulary's size;
#   - bad shapes exit 78 with one line before training: n_head not divisible
#     by n_kv_head, an odd head dimension, a --tp that does not divide the
#     key/value heads.
. "$(dirname "$0")/tools/cli_common.sh"
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1
mpi_env=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0")

bible -f "gen1:1-gen50:26" > "$tmp/gen.txt" || { missing "bible-kjv is not installed"; finish; }
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/gen.txt" > /dev/null || bad "prep"
common=(--data "$tmp/data" --preset llama-tiny --seq 64 --steps 20 --lr 3e-3 --no-progress --sample-every -1)
# Worst measured over the comparisons here (2026-12-04, AMD EPYC AVX2; the release build on the avx2 and
# generic paths, and the ASan+UBSan build): loss 1.1e-7 (pp2, generic) and gradient norm 8.1e-7 relative
# (pp2, ASan+UBSan), weights 1.1e-5 absolute (pp2, ASan+UBSan). About 3x those:
tol=(3.5e-7 2.5e-6 3.3e-5)

"$anvil" train "${common[@]}" --batch 8 --ckpt-every 10 --out "$tmp/ref" > /dev/null 2> "$tmp/ref.log" ||
  bad "reference run: $(tail -1 "$tmp/ref.log")"
first=$(grep -m1 '"kind":"train"' "$tmp/ref/metrics.jsonl" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
last=$(grep '"kind":"train"' "$tmp/ref/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
python3 -c "import sys; sys.exit(not float('$last') < 0.8 * float('$first'))" &&
  ok "llama-tiny learns: loss $first at step 1, $last at step 20" || bad "llama-tiny did not learn: $first -> $last"

compare() {
  local ref=$1 name=$2
  if out=$(python3 "$here/tools/compare_runs.py" "$tmp/$ref" "$tmp/$name" --loss-rtol "${tol[0]}" \
    --norm-rtol "${tol[1]}" --weight-atol "${tol[2]}"); then
    ok "$name matches one process: $out"
  else
    bad "$name differs from one process: $out"
  fi
}
# (name, ranks, train options)
run() {
  local name=$1 n=$2
  shift 2
  if ! "${mpi_env[@]}" timeout 120 "$anvil" launch -n "$n" -- train "${common[@]}" "$@" --out "$tmp/$name" \
    > /dev/null 2> "$tmp/$name.log"; then
    bad "$name: the run failed: $(grep -v '^\[rank [1-9]' "$tmp/$name.log" | tail -2)"
    return 1
  fi
}
resume_one() { # name, checkpoint, reference, train options
  local name=$1 ck=$2 ref=$3
  shift 3
  if "$anvil" train "${common[@]}" "$@" --resume "$ck" --out "$tmp/$name" > /dev/null 2> "$tmp/$name.log"; then
    compare "$ref" "$name"
  else
    bad "$name: $(tail -1 "$tmp/$name.log")"
  fi
}

# The same layout resumes bit for bit.
resume_one same "$tmp/ref/ckpt/step_00000010" ref --batch 8
out=$(python3 "$here/tools/st_equal.py" "$tmp/ref/model.safetensors" "$tmp/same/model.safetensors") &&
  ok "resumed at step 10 in one process: the same model file tensors, byte for byte ($out)" ||
  bad "resumed in one process: $out"

if command -v mpirun > /dev/null; then
  run tp2 2 --batch 8 --tp 2 && compare ref tp2
  run tp2_sp 2 --batch 8 --tp 2 --sequence-parallel && compare ref tp2_sp
  run zero3 2 --batch 4 --zero 3 --ckpt-every 10 && compare ref zero3
  # Measured (2026-12-06, Zen 5; the release build on the avx512, avx2 and generic paths, and the
  # ASan+UBSan build): at most loss 1.1e-7 and gradient norm 3.4e-7 relative (ZeRO-1, ZeRO-2 and MiCS,
  # ASan+UBSan), weights 2.7e-6 absolute (MiCS, avx2): inside the tolerances above.
  run dp2 2 --batch 4 && compare ref dp2
  run zero1 2 --batch 4 --zero 1 && compare ref zero1
  run zero2 2 --batch 4 --zero 2 && compare ref zero2
  run mics 4 --batch 2 --zero 3 --shard-group-size 2 && compare ref mics
  run one_to_tp 2 --batch 8 --tp 2 --resume "$tmp/ref/ckpt/step_00000010" && compare ref one_to_tp
  resume_one zero3_to_1 "$tmp/zero3/ckpt/step_00000010" ref --batch 8
  "$anvil" train "${common[@]}" --batch 4 --total-batch-tokens 1024 --out "$tmp/ref_acc" > /dev/null 2>&1 ||
    bad "reference run with accumulation"
  run pp2 2 --batch 4 --total-batch-tokens 1024 --pp 2 --ckpt-every 10 && compare ref_acc pp2
  run pp_to_tp 2 --batch 4 --total-batch-tokens 1024 --tp 2 --resume "$tmp/pp2/ckpt/step_00000010" &&
    compare ref_acc pp_to_tp
  # 4 ranks cannot split llama-tiny's 2 key/value heads.
  "${mpi_env[@]}" timeout 120 "$anvil" launch -n 4 -- train "${common[@]}" --batch 8 --tp 4 > /dev/null \
    2> "$tmp/tp4.log"
  rc=$?
  msg=$(grep -m1 "does not divide" "$tmp/tp4.log")
  [ $rc -eq 78 ] && [[ "$msg" == *"--tp 4 does not divide the model's 2 key/value heads"* ]] &&
    ok "--tp 4: exit 78, '$msg'" || bad "--tp 4: exit $rc, $(tail -2 "$tmp/tp4.log")"
else
  missing "mpirun is not installed: the parallel layouts are not run"
fi

# ---- Hugging Face, sampling ----
if "$anvil" export --model "$tmp/ref" --out "$tmp/hf" > /dev/null && "$anvil" import --hf "$tmp/hf" \
  --out "$tmp/back.safetensors" > /dev/null; then
  out=$(python3 "$here/tools/st_equal.py" "$tmp/ref/model.safetensors" "$tmp/back.safetensors") &&
    ok "export then import: $out" || bad "export then import: $out"
  out=$(python3 - "$tmp/hf" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1] + "/config.json"))
want = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=64, intermediate_size=192,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
            rope_theta=10000, rope_scaling=None, max_position_embeddings=64, tie_word_embeddings=False,
            vocab_size=257, bos_token_id=None, eos_token_id=256)
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
print(f"config.json differs: {bad}" if bad else f"config.json has the {len(want)} fields LlamaForCausalLM needs")
sys.exit(1 if bad else 0)
EOF
  ) && ok "$out" || bad "$out"
else
  bad "export or import failed"
fi

# --init: the run's weights, through export and import. An lr of 1e-30 moves no weight in the one step
# (AdamW's update, at most about lr * (1 + weight decay * |w|), is under half an ulp of any |w| above
# 1e-23), so the run ends where the reference did: its validation loss (the same 8 batches) and its
# tensors, bit for bit. A fresh init would be at about 5.5 nats.
val_loss() { grep '"kind":"val"' "$1/metrics.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.e+-]*\).*/\1/'; }
if "$anvil" train "${common[@]}" --batch 8 --steps 1 --lr 1e-30 --init "$tmp/back.safetensors" --out "$tmp/init" \
  > /dev/null 2> "$tmp/init.log"; then
  want=$(val_loss "$tmp/ref") got=$(val_loss "$tmp/init")
  out=$(python3 "$here/tools/st_equal.py" "$tmp/ref/model.safetensors" "$tmp/init/model.safetensors") &&
    [ -n "$want" ] && [ "$got" = "$want" ] &&
    ok "train --init from the imported file: the run's validation loss $got and tensors ($out)" ||
    bad "train --init: validation loss $got, the run's $want; $out"
else
  bad "train --init: $(tail -1 "$tmp/init.log")"
fi

# sample, with --ignore-eot so that each sample is --tokens long (standard error counts them). Same seed,
# same bytes; the imported file samples as the run does.
smp() { # output name, model, seed
  "$anvil" sample --model "$2" --prompt "And God" --tokens 40 --seed "$3" --ignore-eot > "$tmp/$1.txt" \
    2> "$tmp/$1.err" || bad "sample $1: $(tail -1 "$tmp/$1.err")"
}
smp s3 "$tmp/ref" 3
smp s3_again "$tmp/ref" 3
smp s3_back "$tmp/back.safetensors" 3
smp s4 "$tmp/ref" 4
if [ "$(head -c 7 "$tmp/s3.txt")" = "And God" ] && grep -q "stopped after 40 tokens: --tokens 40 reached" "$tmp/s3.err"
then
  ok "sample: the prompt and 40 tokens, '$(head -c 47 "$tmp/s3.txt" | tr -c '[:print:]' '.')'"
else
  bad "sample: $(od -c "$tmp/s3.txt" | head -3) $(cat "$tmp/s3.err")"
fi
cmp -s "$tmp/s3.txt" "$tmp/s3_again.txt" && cmp -s "$tmp/s3.txt" "$tmp/s3_back.txt" &&
  ok "sample: seed 3 gives the same bytes twice, and from the imported file" ||
  bad "sample: seed 3's bytes differ between calls or from the imported file"
cmp -s "$tmp/s3.txt" "$tmp/s4.txt" && bad "sample: seeds 3 and 4 give the same bytes" || ok "sample: seed 4 gives other bytes"

# ---- a tokenizer in Llama 3's format ----
ranks=$here/tok/expected/train_llama3_1456.tiktoken
if "$anvil" prep --out "$tmp/l3data" --tokenizer "$ranks" --pattern llama3 --delimiter '\n' --val-fraction 0.05 \
  "$tmp/gen.txt" > /dev/null &&
  "$anvil" train --data "$tmp/l3data" --preset llama-mini --batch 4 --seq 64 --steps 4 --no-progress \
    --sample-every 4 --sample-tokens 16 --out "$tmp/l3" > /dev/null 2> "$tmp/l3.log" &&
  "$anvil" export --model "$tmp/l3" --out "$tmp/l3hf" > /dev/null; then
  grep -q "^--- sample at step 4 ---" "$tmp/l3.log" && ok "the llama3-tokenized run samples" ||
    bad "no sample in the llama3-tokenized run's log"
  out=$(python3 -c "
import json, sys
c = json.load(open('$tmp/l3hf/config.json'))
got = (c['bos_token_id'], c['eos_token_id'], c['vocab_size'], c['tie_word_embeddings'])
print(got); sys.exit(got != (1200, 1201, 1456, True))") && cmp -s "$ranks" "$tmp/l3hf/tokenizer.tiktoken" &&
    ok "export of the llama3-tokenized run: bos, eos, vocabulary, tied $out, and its tokenizer" ||
    bad "export of the llama3-tokenized run: $out"
  # The tokenizer the run kept decodes its samples: as the rank file given by hand does, not as bytes.
  for how in kept kept_again by_hand; do
    extra=()
    [ $how = by_hand ] && extra=(--tokenizer "$ranks" --pattern llama3)
    "$anvil" sample --model "$tmp/l3" "${extra[@]}" --prompt "And God" --tokens 24 --seed 5 --ignore-eot \
      > "$tmp/l3_$how.txt" 2> "$tmp/l3_$how.err" || bad "sample of the llama3-tokenized run: $(tail -1 "$tmp/l3_$how.err")"
  done
  [ "$(head -c 7 "$tmp/l3_kept.txt")" = "And God" ] && cmp -s "$tmp/l3_kept.txt" "$tmp/l3_kept_again.txt" &&
    cmp -s "$tmp/l3_kept.txt" "$tmp/l3_by_hand.txt" &&
    ok "the llama3-tokenized run samples with its own tokenizer: '$(head -c 60 "$tmp/l3_kept.txt" | tr -c '[:print:]' '.')'" ||
    bad "the llama3-tokenized run's samples: $(head -c 200 "$tmp/l3_kept.txt" "$tmp/l3_by_hand.txt")"
else
  bad "the llama3-tokenized run: $(tail -1 "$tmp/l3.log" 2> /dev/null)"
fi

# ---- a GPT-2-style tokenizer: no beginning-of-text token, end-of-text its last id ----
# From the run folder export takes the ids from the run's tokenizer; a checkpoint records none, and its
# config.json says null rather than Llama 3's places (1200 - 256, 1200 - 255) in this vocabulary.
special_ids() { python3 -c "
import json, sys
c = json.load(open('$1/config.json'))
print((c['bos_token_id'], c['eos_token_id'], c['vocab_size']))"; }
if "$anvil" prep --out "$tmp/g2data" --tokenizer "$here/tok/expected/train_gpt2_1200.tiktoken" --delimiter '\n' \
  --val-fraction 0.05 "$tmp/gen.txt" > /dev/null 2>&1 &&
  "$anvil" train --data "$tmp/g2data" --preset llama-tiny --batch 2 --seq 32 --steps 1 --ckpt-every 1 --no-progress \
    --sample-every -1 --out "$tmp/g2" > /dev/null 2> "$tmp/g2.log" &&
  "$anvil" export --model "$tmp/g2" --out "$tmp/g2hf" > /dev/null 2>&1 &&
  "$anvil" export --model "$tmp/g2/ckpt/step_00000001" --out "$tmp/g2ckhf" > /dev/null 2>&1; then
  got=$(special_ids "$tmp/g2hf")
  [ "$got" = "(None, 1199, 1200)" ] && ok "export with a GPT-2-style tokenizer: bos, eos, vocabulary $got" ||
    bad "export with a GPT-2-style tokenizer: bos, eos, vocabulary $got, want (None, 1199, 1200)"
  got=$(special_ids "$tmp/g2ckhf")
  [ "$got" = "(None, None, 1200)" ] && ok "export of its checkpoint, no tokenizer known: bos, eos, vocabulary $got" ||
    bad "export of its checkpoint: bos, eos, vocabulary $got, want (None, None, 1200)"
else
  bad "the run with a GPT-2-style tokenizer: $(tail -1 "$tmp/g2.log" 2> /dev/null)"
fi

# ---- bad shapes: one line, exit 78, before training ----
expect78() { # what, wanted message, train options
  local what=$1 want=$2
  shift 2
  "$anvil" train --synthetic --preset llama-tiny --steps 1 --no-progress "$@" > /dev/null 2> "$tmp/bad.err"
  local rc=$?
  if [ $rc -eq 78 ] && [ "$(wc -l < "$tmp/bad.err")" -eq 1 ] && grep -qF -- "$want" "$tmp/bad.err"; then
    ok "$what: exit 78, $(cat "$tmp/bad.err")"
  else
    bad "$what: exit $rc, $(cat "$tmp/bad.err")"
  fi
}
expect78 "--heads 3 over 2 key/value heads" "n_head (3) is not divisible by n_kv_head (2)" --heads 3 --embd 66
expect78 "an odd head dimension" "head dimension n_embd/n_head = 9 is odd" --embd 36
finish
