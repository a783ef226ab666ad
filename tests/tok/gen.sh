#!/usr/bin/env bash
# Regenerates tests/tok/{ranks,expected,cases.bin} from the official tiktoken
# npm package (needs node and npm; node_modules stays out of git).
# real.txt is regenerated only when missing (--real forces it).
set -euo pipefail
cd "$(dirname "$0")"
[ -d node_modules/tiktoken ] || npm ci --no-audit --no-fund >/dev/null
if [ ! -f real.txt ] || [ "${1:-}" = "--real" ]; then
  # About 110 KB of prose: the start of Genesis and of Matthew from Debian's
  # bible-kjv (public domain) and two license texts whose verbatim copying is
  # permitted (modern English with numbers and punctuation).
  { bible -f "gen1:1-gen12:20" "mat1:1-mat6:34"
    cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0; } > real.txt
fi
# The references for the incremental trainer (tests/test_tokenizer.c compares); the llama3 one is
# also the vocabulary gen.js encodes Llama 3's cases with.
node train_ref.js real.txt 1200 expected/train_gpt2_1200.tiktoken
node train_ref.js real.txt 1456 expected/train_llama3_1456.tiktoken llama3
node gen.js
