#!/usr/bin/env bash
# anvil prep throughput: MB of text in per second of wall time (prep's own
# figure: reading, splitting, encoding, writing and fsyncing the shards and
# manifests) and per CPU second (user + system, from /usr/bin/time, which a
# loaded machine disturbs less), byte-level and gpt2 BPE, 1 and 2 workers
# interleaved on the same input in the same run, medians of REPS; peak RSS; the
# outputs of 1 and 2 workers must be byte-identical. Last, the time a re-run
# takes to verify every shard's CRC32C and skip the work.
# usage: bench/bench_prep.sh BUILD_DIR [MB] [SHARD_TOKENS]   (env: REPS, default 3)
# The corpus is like bench_tokenizer.sh's (the King James Bible, a blank line
# between chapters as in scripts/demo.sh, then the text documents under
# /usr/share/doc), cut to MB; documents are split at blank lines.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: bench_prep.sh BUILD_DIR [MB] [SHARD_TOKENS]}"
mb="${2:-32}"
shard_tokens="${3:-8000000}"
reps="${REPS:-3}"
anvil="$build/anvil"
ranks="$root/tests/tok/ranks/gpt2.tiktoken"
[ -f "$ranks" ] || "$root/tests/tok/gen.sh"
work="${TMPDIR:-/tmp}/anvil_prep_bench"
mkdir -p "$work"
corpus="$work/corpus_${mb}mb.txt"
valid_utf8() { /usr/bin/python3 -c 'import sys; sys.stdout.buffer.write(sys.stdin.buffer.read().decode("utf-8", "ignore").encode())'; }
if [ ! -s "$corpus" ]; then
  { bible -f "gen1:1-rev22:21" |
      awk '{ split($1, ref, ":"); if (NR > 1 && ref[1] != chapter) print ""; chapter = ref[1]; print }'
    find /usr/share/doc -type f \( -name "*.gz" -o -name "*.txt" -o -name "README*" -o -name "NEWS*" -o -name "*.md" \) \
      ! -name "copyright*" -print0 | sort -z | xargs -0 zcat -f 2>/dev/null; } |
    valid_utf8 | head -c $((mb * 1000000)) > "$corpus.tmp"
  mv "$corpus.tmp" "$corpus"
fi

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

run_one() { # mode workers out
  local tokargs=()
  [ "$1" = gpt2 ] && tokargs=(--tokenizer "$ranks")
  rm -rf "$3"
  /usr/bin/time -f '%M %U %S' -o "$work/rss" "$anvil" prep --out "$3" "${tokargs[@]}" --workers "$2" \
    --delimiter '\n\n' --val-fraction 0.01 --shard-tokens "$shard_tokens" "$corpus" > "$work/log"
  local mbs
  mbs=$(sed -n 's/.* \([0-9.]*\) MB\/s$/\1/p' "$work/log")
  read -r rss user sys < "$work/rss"
  echo "$mbs $rss $(echo "$mb $user $sys" | awk '{ printf "%.1f", $1 / ($2 + $3) }')"
}

echo "corpus: $corpus ($(stat -c %s "$corpus") bytes), shards of $shard_tokens tokens, $reps reps, load $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in bytes gpt2; do
  : > "$work/r1"
  : > "$work/r2"
  for _ in $(seq 1 "$reps"); do
    run_one "$mode" 1 "$work/out1" >> "$work/r1"
    run_one "$mode" 2 "$work/out2" >> "$work/r2"
  done
  for f in "$work/out1"/*; do cmp -s "$f" "$work/out2/$(basename "$f")" || { echo "FAIL: 1 and 2 workers differ: $f"; exit 1; }; done
  m1=$(cut -d' ' -f1 "$work/r1" | median)
  m2=$(cut -d' ' -f1 "$work/r2" | median)
  c1=$(cut -d' ' -f3 "$work/r1" | median)
  c2=$(cut -d' ' -f3 "$work/r2" | median)
  rss1=$(cut -d' ' -f2 "$work/r1" | sort -g | tail -1)
  rss2=$(cut -d' ' -f2 "$work/r2" | sort -g | tail -1)
  shards=$(ls "$work/out1"/*.bin | wc -l)
  printf '%-5s  1 worker %7.1f MB/s (runs: %s)  2 workers %7.1f MB/s (runs: %s)  ratio %.2f  peak RSS %d / %d MB  %d shards\n' \
    "$mode" "$m1" "$(cut -d' ' -f1 "$work/r1" | tr '\n' ' ' | sed 's/ $//')" "$m2" \
    "$(cut -d' ' -f1 "$work/r2" | tr '\n' ' ' | sed 's/ $//')" "$(echo "$m2 $m1" | awk '{ print $1 / $2 }')" \
    $((rss1 / 1024)) $((rss2 / 1024)) "$shards"
  printf '%-5s  per CPU second: 1 worker %.1f MB/s, 2 workers %.1f MB/s (medians)\n' "$mode" "$c1" "$c2"
  # A re-run of a finished prep: every shard's CRC32C checked, nothing written.
  tokargs=()
  [ "$mode" = gpt2 ] && tokargs=(--tokenizer "$ranks")
  t0=$(date +%s.%N)
  "$anvil" prep --out "$work/out2" "${tokargs[@]}" --workers 2 --delimiter '\n\n' --val-fraction 0.01 \
    --shard-tokens "$shard_tokens" "$corpus" > /dev/null 2> "$work/err"
  t1=$(date +%s.%N)
  grep -q skipped "$work/err" || { echo "FAIL: the re-run did not skip: $(cat "$work/err")"; exit 1; }
  echo "$mode  re-run of the finished output (verify all, skip): $(echo "$t1 $t0" | awk '{ printf "%.2f", $1 - $2 }') s"
done
rm -rf "$work/out1" "$work/out2"
