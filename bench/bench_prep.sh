#!/usr/bin/env bash
# anvil prep throughput: MB of text in per second of wall time (prep's own
# figure: reading, splitting, encoding, writing and fsyncing the shards and
# manifests) and per CPU second (user + system, from /usr/bin/time, which a
# loaded machine disturbs less), byte-level and gpt2 BPE, 1 and 2 workers
# interleaved on the same input in the same run, medians of REPS; peak RSS; the
# outputs of 1 and 2 workers must be byte-identical. Last, the time a re-run
# takes to verify every shard's CRC32C and skip the work.
# usage: bench/bench_prep.sh BUILD_DIR [MB] [SHARD_TOKENS]
#   (env: REPS, default 3; MODES, default "bytes gpt2 jsonl-bytes jsonl-gpt2";
#    PEER: another build folder, run interleaved on the same work, with the ratios)
# The corpus is like bench_tokenizer.sh's (the King James Bible, a blank line
# between chapters as in scripts/demo.sh, then the text documents under
# /usr/share/doc), cut to MB; documents are split at blank lines. The jsonl
# modes read the same documents as JSON lines, one {"text": ...} each.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: bench_prep.sh BUILD_DIR [MB] [SHARD_TOKENS]}"
mb="${2:-32}"
shard_tokens="${3:-8000000}"
reps="${REPS:-3}"
modes="${MODES:-bytes gpt2 jsonl-bytes jsonl-gpt2}"
peer="${PEER:-}"
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

jsonl="$work/corpus_${mb}mb.jsonl"
if [ ! -s "$jsonl" ]; then
  /usr/bin/python3 - "$corpus" "$jsonl.tmp" <<'EOF'
import json, sys
docs = open(sys.argv[1], encoding="utf-8").read().split("\n\n")
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for d in docs:
        d = d.replace("\0", "")  # prep refuses a \u0000 escape
        if d:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
EOF
  mv "$jsonl.tmp" "$jsonl"
fi

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# The options and input of a mode.
mode_args() { # mode
  case "$1" in *gpt2) printf '%s\n' --tokenizer "$ranks" ;; esac
  case "$1" in jsonl-*) printf '%s\n' --jsonl-field text "$jsonl" ;; *) printf '%s\n' --delimiter '\n\n' "$corpus" ;; esac
}

run_one() { # anvil mode workers out
  local margs
  mapfile -t margs < <(mode_args "$2")
  rm -rf "$4"
  /usr/bin/time -f '%M %U %S' -o "$work/rss" "$1" prep --out "$4" --workers "$3" \
    --val-fraction 0.01 --shard-tokens "$shard_tokens" "${margs[@]}" > "$work/log" 2> "$work/notes"
  local mbs
  mbs=$(sed -n 's/.* \([0-9.]*\) MB\/s$/\1/p' "$work/log")
  read -r rss user sys < "$work/rss"
  echo "$mbs $rss $(echo "$(stat -c %s "${margs[-1]}") $user $sys" | awk '{ printf "%.1f", $1 / 1e6 / ($2 + $3) }')"
}

same_output() { # dir dir [pattern]: the files of dir matching pattern (default all)
  for f in "$1"/${3:-*}; do cmp -s "$f" "$2/$(basename "$f")" || { echo "FAIL: $1 and $2 differ: $f"; exit 1; }; done
}

# Prints a build's figures for a mode from its runs (files r1, r2: 1 and 2 workers); sets m1 m2 c1 c2.
summarize() { # label mode r1 r2 out
  m1=$(cut -d' ' -f1 "$3" | median)
  m2=$(cut -d' ' -f1 "$4" | median)
  c1=$(cut -d' ' -f3 "$3" | median)
  c2=$(cut -d' ' -f3 "$4" | median)
  local rss1 rss2 shards
  rss1=$(cut -d' ' -f2 "$3" | sort -g | tail -1)
  rss2=$(cut -d' ' -f2 "$4" | sort -g | tail -1)
  shards=$(ls "$5"/*.bin | wc -l)
  printf '%s%-10s  1 worker %7.1f MB/s (runs: %s)  2 workers %7.1f MB/s (runs: %s)  ratio %.2f  peak RSS %d / %d MB  %d shards\n' \
    "$1" "$2" "$m1" "$(cut -d' ' -f1 "$3" | tr '\n' ' ' | sed 's/ $//')" "$m2" \
    "$(cut -d' ' -f1 "$4" | tr '\n' ' ' | sed 's/ $//')" "$(echo "$m2 $m1" | awk '{ print $1 / $2 }')" \
    $((rss1 / 1024)) $((rss2 / 1024)) "$shards"
  printf '%s%-10s  per CPU second: 1 worker %.1f MB/s, 2 workers %.1f MB/s (medians)\n' "$1" "$2" "$c1" "$c2"
}

echo "corpus: $corpus ($(stat -c %s "$corpus") bytes), shards of $shard_tokens tokens, $reps reps, load $(cut -d' ' -f1-3 /proc/loadavg)"
[ -n "$peer" ] && echo "peer: $peer/anvil, run interleaved with $anvil"
for mode in $modes; do
  : > "$work/r1"
  : > "$work/r2"
  : > "$work/p1"
  : > "$work/p2"
  for _ in $(seq 1 "$reps"); do
    run_one "$anvil" "$mode" 1 "$work/out1" >> "$work/r1"
    run_one "$anvil" "$mode" 2 "$work/out2" >> "$work/r2"
    if [ -n "$peer" ]; then
      run_one "$peer/anvil" "$mode" 1 "$work/peer1" >> "$work/p1"
      run_one "$peer/anvil" "$mode" 2 "$work/peer2" >> "$work/p2"
    fi
  done
  same_output "$work/out1" "$work/out2"
  summarize "" "$mode" "$work/r1" "$work/r2" "$work/out1"
  if [ -n "$peer" ]; then
    same_output "$work/out1" "$work/peer2" '*.bin' # the manifest's layout may differ between builds
    read -r w1 w2 u1 u2 <<< "$m1 $m2 $c1 $c2"
    summarize "peer " "$mode" "$work/p1" "$work/p2" "$work/peer1"
    printf '%-10s  this build / peer: wall %.2f (1 worker), %.2f (2 workers); per CPU second %.2f, %.2f\n' "$mode" \
      "$(echo "$w1 $m1" | awk '{ print $1 / $2 }')" "$(echo "$w2 $m2" | awk '{ print $1 / $2 }')" \
      "$(echo "$u1 $c1" | awk '{ print $1 / $2 }')" "$(echo "$u2 $c2" | awk '{ print $1 / $2 }')"
  fi
  # A re-run of a finished prep: every shard's CRC32C checked, nothing written.
  mapfile -t margs < <(mode_args "$mode")
  t0=$(date +%s.%N)
  "$anvil" prep --out "$work/out2" --workers 2 --val-fraction 0.01 --shard-tokens "$shard_tokens" "${margs[@]}" \
    > /dev/null 2> "$work/err"
  t1=$(date +%s.%N)
  grep -q skipped "$work/err" || { echo "FAIL: the re-run did not skip: $(cat "$work/err")"; exit 1; }
  echo "$mode  re-run of the finished output (verify all, skip): $(echo "$t1 $t0" | awk '{ printf "%.2f", $1 - $2 }') s"
done
rm -rf "$work/out1" "$work/out2" "$work/peer1" "$work/peer2"
