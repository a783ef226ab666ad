#!/usr/bin/env bash
# The main job: trains a BPE tokenizer on the King James Bible (Debian's
# bible-kjv), prepares it as token shards, trains a small GPT-2 on them for a
# few minutes, reports the validation loss (also in bits per byte, which does
# not depend on the tokenizer) and prints generated text.
# ANVIL_DEMO_FAMILY=llama does the same with a Llama: a tokenizer in Llama 3's
# format (its 256 specials after the ranks; prep puts each document between
# <|begin_of_text|> and <|end_of_text|>), the llama-mini preset (4 layers of
# 128, 4 heads over 2 key/value heads, tied), and a Hugging Face export of it.
set -euo pipefail
family=${ANVIL_DEMO_FAMILY:-gpt2}
case "$family" in
  gpt2 | llama) ;;
  *) echo "demo: ANVIL_DEMO_FAMILY must be gpt2 or llama, not '$family'" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
mkdir -p data runs
# One verse per line ("Ge1:1 In the beginning..."); a blank line between
# chapters makes each chapter a document, so the val split is whole chapters.
if [ ! -s data/kjv.txt ]; then
  bible -f "gen1:1-rev22:21" |
    awk '{ split($1, ref, ":"); if (NR > 1 && ref[1] != chapter) print ""; chapter = ref[1]; print }' \
    > data/kjv.txt.tmp
  mv data/kjv.txt.tmp data/kjv.txt
fi
# 4096 ids: about 3.8 bytes of this text per token. Training is deterministic,
# so a re-run writes the same file and prep below finds its shards done.
if [ "$family" = llama ]; then
  pattern=llama3 data=data/kjv-llama run=runs/kjv-llama
  model=(--preset llama-mini)
else
  pattern=gpt2 data=data/kjv run=runs/kjv
  model=(--layers 4 --heads 4 --embd 128)
fi
build/anvil tokenizer train --vocab-size 4096 --pattern "$pattern" --out "$data.tiktoken" data/kjv.txt
build/anvil prep --out "$data" --tokenizer "$data.tiktoken" --pattern "$pattern" --delimiter $'\n\n' \
  --val-fraction 0.02 --workers 2 data/kjv.txt
# A 4-layer, 128-wide model (1.3M parameters, a third of them the 4096-row
# embedding) on windows of 128 tokens (about 480 bytes). Samples decode
# through the tokenizer copied into the data folder.
model+=(--data "$data" --seq 128 --batch 16)
# Training gets about 3 minutes whatever the CPU: 12 probe steps time this
# machine, then the run takes as many steps as fit (300 to 1800; the
# schedule needs the count up front). ANVIL_DEMO_STEPS sets it instead.
steps=${ANVIL_DEMO_STEPS:-}
if [ -z "$steps" ]; then
  ms=$(build/anvil train "${model[@]}" --steps 12 --warmup 2 --val-every 12 --val-batches 1 --sample-every -1 \
         --no-progress --summary-json 2> /dev/null | tail -n 1 | sed -n 's/.*"ms_per_step_median": *\([0-9.]*\).*/\1/p')
  steps=$(awk -v ms="${ms:-100}" 'BEGIN { s = int(180000 / ms / 50) * 50; print (s < 300 ? 300 : (s > 1800 ? 1800 : s)) }')
  echo "demo: ${ms:-?} ms per step here: training for $steps steps"
fi
build/anvil train "${model[@]}" --steps "$steps" --lr 4e-3 --lr-warmup 100 --val-every $((steps / 4)) \
  --val-batches 16 --sample-every 0 --sample-tokens 100 --out "$run"
build/anvil sample --model "$run/model.safetensors" --data "$data" --prompt "And God said" --tokens 100 \
  --temperature 0.8 --top-k 40 --seed 1
if [ "$family" = llama ]; then
  # A LlamaForCausalLM folder (config.json, model.safetensors) with the tokenizer beside it.
  build/anvil export --model "$run" --out "$run/hf"
fi
