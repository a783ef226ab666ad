#!/usr/bin/env bash
# Tokenizer benchmarks, anvil vs the official tiktoken npm package (WASM
# build of tiktoken's Rust core), same text, same run:
#   1. encoding MB/s on one thread for gpt2, cl100k_base, o200k_base, and
#      anvil on 2 threads (text cut at line starts; ids must match);
#   2. training a 32k vocabulary on a ~100 MB corpus.
# usage: bench/bench_tokenizer.sh BUILD_DIR [ENCODE_MB] [TRAIN_MB]   (env: REPS, ANVIL_BIN)
# Needs tests/tok/gen.sh to have run (rank files, node_modules). The corpus is
# the King James Bible (bible-kjv) followed by the text documents under
# /usr/share/doc (changelogs, NEWS, READMEs; no license files), valid UTF-8.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: bench_tokenizer.sh BUILD_DIR [ENCODE_MB] [TRAIN_MB]}"
enc_mb="${2:-16}"
train_mb="${3:-100}"
reps="${REPS:-5}"
tok="$root/tests/tok"
[ -d "$tok/node_modules/tiktoken" ] && [ -f "$tok/ranks/o200k_base.tiktoken" ] || "$tok/gen.sh"
work="${TMPDIR:-/tmp}/anvil_tok_bench"
mkdir -p "$work"
corpus="$work/corpus.txt"
# Drops ill-formed UTF-8 (iconv lets code points past U+10FFFF through, which
# tiktoken-npm would see as U+FFFD and so count differently).
valid_utf8() { /usr/bin/python3 -c 'import sys; sys.stdout.buffer.write(sys.stdin.buffer.read().decode("utf-8", "ignore").encode())'; }
if [ ! -s "$corpus" ] || [ "$(stat -c %s "$corpus")" -lt $((train_mb * 1000000)) ]; then
  { bible -f "gen1:1-rev22:21"
    find /usr/share/doc -type f \( -name "*.gz" -o -name "*.txt" -o -name "README*" -o -name "NEWS*" -o -name "*.md" \) \
      ! -name "copyright*" -print0 | sort -z | xargs -0 zcat -f 2>/dev/null; } |
    valid_utf8 | head -c $((train_mb * 1000000)) > "$corpus"
fi
head -c $((enc_mb * 1000000)) "$corpus" | valid_utf8 > "$work/encode.txt"
echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); text: $(stat -c %s "$work/encode.txt") bytes"

for enc in gpt2 cl100k_base o200k_base; do
  "$build/bench/bench_tokenizer" "$tok/ranks/$enc.tiktoken" "$enc" "$work/encode.txt" "$reps" 2 | tee "$work/anvil_$enc.json"
  (cd "$tok" && node - "$enc" "$work/encode.txt" "$reps" <<'JS') | tee "$work/peer_$enc.json"
const fs = require('fs');
const { get_encoding } = require('tiktoken');
const [enc, file, reps] = process.argv.slice(2);
const text = fs.readFileSync(file, 'utf8');
const bytes = fs.statSync(file).size;
const t = get_encoding(enc);
const ts = [];
let n = 0;
for (let r = 0; r < Number(reps); r++) {
  const t0 = process.hrtime.bigint();
  n = t.encode_ordinary(text).length;
  ts.push(Number(process.hrtime.bigint() - t0) / 1e9);
}
ts.sort((a, b) => a - b);
const s = ts[Math.floor(ts.length / 2)];
console.log(JSON.stringify({ impl: 'tiktoken-npm', encoding: enc, threads: 1, bytes, tokens: n, seconds: +s.toFixed(4),
  mb_per_s: +(bytes / s / 1e6).toFixed(2) }));
JS
  python3 - "$work/anvil_$enc.json" "$work/peer_$enc.json" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
p = json.loads(open(sys.argv[2]).read())
one, two = a[0], a[1]
assert one["tokens"] == p["tokens"], f"token counts differ: anvil {one['tokens']} vs tiktoken {p['tokens']}"
print(f"RESULT {one['encoding']}: anvil {one['mb_per_s']:.1f} MB/s (1 thread), {two['mb_per_s']:.1f} MB/s (2 threads, "
      f"x{two['mb_per_s'] / one['mb_per_s']:.2f}); tiktoken-npm {p['mb_per_s']:.1f} MB/s; ratio {one['mb_per_s'] / p['mb_per_s']:.2f}")
PY
done

echo "training a 32768-token vocabulary on $(stat -c %s "$corpus") bytes (gpt2 pattern)"
/usr/bin/time -f "train: %e s wall, %M KB max RSS" "${ANVIL_BIN:-$build/anvil}" tokenizer train --vocab-size 32768 --pattern gpt2 \
  --out "$work/trained32k.tiktoken" "$corpus"
"$build/bench/bench_tokenizer" "$work/trained32k.tiktoken" gpt2 "$work/encode.txt" 1 2 | head -1
