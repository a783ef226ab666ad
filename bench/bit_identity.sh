#!/usr/bin/env bash
# Proof that a restructuring changed no output: builds BASE (a commit), then
# runs every case below with that build and with this tree's, and compares
# what each leaves byte for byte: model.safetensors, every tensor file of
# every checkpoint, the losses and validation losses of metrics.jsonl, prep's
# shards and `tokenizer train`'s rank file.
#
# usage: bench/bit_identity.sh BASE [--before PATH] [--after PATH] [--out DIR] [--only REGEX]
#   BASE           the commit before the change (built into DIR/base unless --before names a binary)
#   --before PATH  an anvil binary built from BASE already
#   --after PATH   the binary under test (default build/anvil)
#   --out DIR      keep the runs here (default: a new temp dir, removed unless a case differs)
#   --only REGEX   run only the cases whose names match
# Cases: one process (fp32, and bf16 where the CPU has AVX512_BF16, else
# reported as skipped); 2 ranks DP, ZeRO-1, ZeRO-2, ZeRO-3, 4 ranks MiCS
# (shard groups of 2); TP 2; PP 2 with 1F1B and with GPipe; TP 2 x PP 2;
# sequence parallelism; a resume across layouts (ZeRO-3 on 2 ranks to step
# 10, then TP 2 to step 20); prep's shards; tokenizer train's rank file.
# Prints one line per case (same / DIFFERENT / skipped) and exits 1 when any
# case differs or fails to run.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
die() { echo "bit_identity: $*" >&2; exit 2; }
(($# >= 1)) || die "usage: bench/bit_identity.sh BASE [--before PATH] [--after PATH] [--out DIR] [--only REGEX]"
base=$1
shift
before="" after="$root/build/anvil" out="" only="."
while (($#)); do
  case "$1" in
    --before) before=$2; shift 2 ;;
    --after) after=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) die "unknown option '$1'" ;;
  esac
done
keep=1
[ -n "$out" ] || { out=$(mktemp -d /tmp/bit_identity.XXXXXX); keep=0; }
mkdir -p "$out" || die "cannot create $out"
if [ -z "$before" ]; then
  git -C "$root" rev-parse --verify -q "$base^{commit}" > /dev/null || die "$base is not a commit"
  rm -rf "$out/base" && mkdir -p "$out/base" && git -C "$root" archive "$base" | tar -x -C "$out/base" ||
    die "cannot check out $base"
  echo "building $base ..." >&2
  "$out/base/scripts/build.sh" "$out/base/build" || die "the build of $base failed"
  before="$out/base/build/anvil"
fi
[ -x "$before" ] && [ -x "$after" ] || die "missing binary: $before or $after"
command -v bible > /dev/null || die "bible-kjv is not installed (scripts/deps.sh)"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
py=/usr/bin/python3

bible -f "gen1:1-exo40:38" > "$out/corpus.txt" || die "bible failed"
"$after" prep --out "$out/data" --delimiter '\n' --val-fraction 0.05 --no-progress "$out/corpus.txt" > /dev/null ||
  die "prep of the shared corpus failed"
common=(--data "$out/data" --preset mini --seq 64 --lr 2e-3 --val-every 10 --val-batches 2 --no-progress
  --sample-every -1)

differs=0
# What a run leaves, as "name digest" lines: the model file, every checkpoint tensor file, and the
# loss and validation loss of each metrics.jsonl record in order.
fingerprint() { # run folder
  local d=$1
  (cd "$d" && find . -name '*.safetensors' -type f | LC_ALL=C sort | xargs -r sha256sum)
  "$py" - "$d/metrics.jsonl" << 'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") in ("train", "val"):
        print(r["kind"], r["step"], repr(r.get("loss", r.get("val_loss"))))
EOF
}

# case NAME RANKS [train options...]: the same run with both binaries, then the fingerprints compared.
case_run() {
  local name=$1 n=$2
  shift 2
  [[ "$name" =~ $only ]] || return 0
  local which bin
  for which in before after; do
    bin=$before
    [ "$which" = after ] && bin=$after
    rm -rf "$out/$which/$name"
    mkdir -p "$out/$which"
    local launcher=()
    ((n > 1)) && launcher=(launch -n "$n" --)
    if ! "$bin" "${launcher[@]}" train "${common[@]}" "$@" --out "$out/$which/$name" > "$out/$which/$name.log" 2>&1
    then
      echo "$name: FAILED with $which: $(tail -1 "$out/$which/$name.log")"
      differs=1
      return 1
    fi
    fingerprint "$out/$which/$name" > "$out/$which/$name.sums"
  done
  report "$name" "$out/before/$name.sums" "$out/after/$name.sums"
}

report() { # name before-sums after-sums
  if [ ! -s "$2" ]; then
    echo "$1: FAILED: nothing to compare"
    differs=1
  elif cmp -s "$2" "$3"; then
    echo "$1: same ($(wc -l < "$2") digests and losses)"
  else
    echo "$1: DIFFERENT"
    diff "$2" "$3" | head -5
    differs=1
  fi
}

ck=(--ckpt-every 10)
case_run fp32 1 --batch 4 --steps 20 "${ck[@]}"
if grep -q avx512_bf16 /proc/cpuinfo; then
  case_run bf16 1 --batch 4 --steps 20 --dtype bf16 "${ck[@]}"
else
  echo "bf16: skipped: this CPU has no AVX512_BF16"
fi
case_run dp 2 --batch 4 --steps 20 "${ck[@]}"
for z in 1 2 3; do case_run "zero$z" 2 --batch 4 --steps 20 --zero "$z" "${ck[@]}"; done
case_run mics 4 --batch 2 --steps 20 --zero 1 --shard-group-size 2 "${ck[@]}"
case_run tp2 2 --batch 4 --steps 20 --tp 2 "${ck[@]}"
case_run pp2_1f1b 2 --batch 2 --total-batch-tokens 512 --steps 20 --pp 2 "${ck[@]}"
case_run pp2_gpipe 2 --batch 2 --total-batch-tokens 512 --steps 20 --pp 2 --pp-schedule gpipe "${ck[@]}"
case_run tp2_pp2 4 --batch 2 --total-batch-tokens 256 --steps 20 --tp 2 --pp 2 "${ck[@]}"
case_run sp 2 --batch 4 --steps 20 --tp 2 --sequence-parallel "${ck[@]}"

# A resume across layouts: ZeRO-3 on 2 ranks to step 10, then TP 2 to step 20 from its checkpoint.
if [[ resume =~ $only ]]; then
  for which in before after; do
    bin=$before
    [ "$which" = after ] && bin=$after
    rm -rf "$out/$which/resume"
    "$bin" launch -n 2 -- train "${common[@]}" --batch 4 --steps 10 --zero 3 "${ck[@]}" --out "$out/$which/resume" \
      > "$out/$which/resume.log" 2>&1 &&
      "$bin" launch -n 2 -- train "${common[@]}" --batch 4 --steps 20 --tp 2 "${ck[@]}" --resume auto \
        --out "$out/$which/resume" >> "$out/$which/resume.log" 2>&1 ||
      { echo "resume: FAILED with $which: $(tail -1 "$out/$which/resume.log")"; differs=1; }
    fingerprint "$out/$which/resume" > "$out/$which/resume.sums"
  done
  report resume "$out/before/resume.sums" "$out/after/resume.sums"
fi

# prep's shards (BPE with a trained tokenizer, 2 workers) and the tokenizer's rank file.
if [[ prep =~ $only ]]; then
  for which in before after; do
    bin=$before
    [ "$which" = after ] && bin=$after
    d="$out/$which/prep"
    rm -rf "$d" && mkdir -p "$d"
    "$bin" tokenizer train --vocab-size 1024 --pattern gpt2 --out "$d/tok.tiktoken" --no-progress "$out/corpus.txt" \
      > "$d.log" 2>&1 &&
      "$bin" prep --out "$d/shards" --tokenizer "$d/tok.tiktoken" --workers 2 --shard-tokens 100000 \
        --delimiter '\n' --no-progress "$out/corpus.txt" >> "$d.log" 2>&1 ||
      { echo "prep: FAILED with $which: $(tail -1 "$d.log")"; differs=1; }
    (cd "$d" && find . -type f \( -name '*.bin' -o -name '*.tiktoken' \) | LC_ALL=C sort | xargs -r sha256sum) \
      > "$d.sums"
  done
  report prep "$out/before/prep.sums" "$out/after/prep.sums"
fi

if ((differs)); then
  echo "kept: $out"
  exit 1
fi
((keep)) || rm -rf "$out"
exit 0
