#!/usr/bin/env bash
# The main job: prepares the King James Bible (Debian's bible-kjv) as
# byte-level token shards, trains a small GPT-2 on it for a few minutes,
# reports the validation loss and prints generated text.
set -euo pipefail
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
build/anvil prep --out data/kjv --delimiter $'\n\n' --val-fraction 0.02 data/kjv.txt
# A 4-layer, 128-wide model (0.8M parameters) on 128-byte windows: about
# three minutes on 2 cores, to a validation loss near 1.5 nats per byte.
build/anvil train --data data/kjv --layers 4 --heads 4 --embd 128 --seq 128 --batch 16 \
  --steps "${ANVIL_DEMO_STEPS:-2400}" --lr 4e-3 --lr-warmup 100 --val-every 600 --val-batches 32 \
  --sample-every 0 --sample-tokens 300 --out runs/kjv
build/anvil sample --model runs/kjv/model.safetensors --prompt "And God said" --tokens 300 \
  --temperature 0.8 --top-k 40 --seed 1
