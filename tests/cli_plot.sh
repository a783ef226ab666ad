#!/usr/bin/env bash
# `anvil plot`, checked on its figures' structure (tests/tools/plot_check.py):
#   - three made-up runs (a NaN loss, a resume that wrote steps again, a checkpoint record, two log
#     metrics, validation): the SVG parses, has the panels in order, the legend names the runs, one
#     polyline per curve, each of as many points as its records, every point mapped back through the
#     tick labels to its record's value, the first and last step at the frame's edges;
#   - the PNG of the same runs: a valid PNG of the figure's size, many colours, each run's legend
#     swatch in its colour;
#   - a run of 50000 steps: each curve at most four points per pixel column, its spike and its
#     first and last steps still drawn;
#   - a real run of the trainer (validation, a --metric) plotted the same way, each y axis naming its
#     unit (the log metric's "as logged");
#   - bad input: a missing or empty run, a malformed line (named with its line), bad options; a
#     failed plot leaves an existing figure as it was;
#   - deploy/prometheus/anvil.rules.yml: promtool check rules, and promtool test rules on its
#     synthetic series (anvil.rules.test.yml).
. "$(dirname "$0")/tools/cli_common.sh"
check=$(dirname "$0")/tools/plot_check.py
command -v python3 > /dev/null || { missing "python3 is not installed"; finish; }

python3 "$check" gen "$tmp" || bad "generating the runs"
python3 "$check" expect "$tmp/alpha" "$tmp/beta" "$tmp/gamma" > "$tmp/expected.json" || bad "expected curves"
if err=$("$anvil" plot "$tmp/alpha" "$tmp/beta/" "$tmp/gamma" --out "$tmp/fig.svg" 2>&1) &&
  out=$(python3 "$check" svg "$tmp/fig.svg" "$tmp/expected.json" 2>&1); then ok "svg: $out"
else bad "svg: $err $out"; fi
# Counted by hand: loss and loss by tokens 5 each (3 train, 2 val), lr, norm and tokens/s 3 each,
# acc 2 (alpha, gamma), ppl 1 (gamma).
n=$(grep -c '<polyline' "$tmp/fig.svg")
[ "$n" = 22 ] && ok "svg: 22 polylines" || bad "svg: $n polylines, expected 22"
# The points of the first curve of class $2 in figure $1.
pts() { grep "class=\"curve $2\"" "$1" | head -n 1 | sed 's/.*points="\([^"]*\)".*/\1/' | wc -w; }
# alpha's loss: 40 steps less step 13's NaN; beta's: steps 1..25 once, after its resume.
a=$(pts "$tmp/fig.svg" 'run0 loss') b=$(pts "$tmp/fig.svg" 'run1 loss')
[ "$a" = 39 ] && [ "$b" = 25 ] && ok "svg: the NaN is left out, the resumed steps replaced" ||
  bad "svg: alpha's loss has $a points (39), beta's $b (25)"
grep -q 'alpha: 1 null or non-finite values left out' <<< "$err" && ok "the NaN is reported: $err" || bad "no note of the NaN: $err"
ls "$tmp" | grep -q '\.tmp\.' && bad "a temporary file is left beside the figure: $(ls "$tmp")"

# A folder name with XML's special characters and a byte that is not UTF-8: escaped, and '?'.
weird=$tmp/$'a&b<c>"d\xff'
cp -r "$tmp/gamma" "$weird"
if "$anvil" plot "$weird" --out "$tmp/weird.svg" 2> /dev/null &&
  legend=$(python3 -c 'import sys, xml.etree.ElementTree as ET
print([t.text for t in ET.parse(sys.argv[1]).getroot() if t.get("class") == "legend"])' "$tmp/weird.svg" 2>&1) &&
  [ "$legend" = "['a&b<c>\"d?']" ]; then ok "a run named a&b<c>\"d and a bad byte: legend $legend"
else bad "a run named a&b<c>\"d and a bad byte: ${legend:-not plotted}"; fi

# Under ASan: fontconfig's own leaks are not anvil's (tests/tools/lsan_fontconfig.supp).
export LSAN_OPTIONS="${LSAN_OPTIONS:-}:suppressions=$(cd "$(dirname "$0")" && pwd)/tools/lsan_fontconfig.supp"
out=
if err=$("$anvil" plot "$tmp/alpha" "$tmp/beta" "$tmp/gamma" --out "$tmp/fig.png" 2>&1) &&
  out=$(python3 "$check" png "$tmp/fig.png" 1200 1320 3 2>&1); then ok "png: $out"
else bad "png: $err $out"; fi

# 50000 steps onto 500 columns: thinned to each column's first, last, least and greatest.
python3 "$check" big "$tmp" 50000
python3 "$check" expect "$tmp/big" > "$tmp/big.json"
start=$(date +%s%N)
if "$anvil" plot "$tmp/big" --out "$tmp/big.svg" && out=$(python3 "$check" svg "$tmp/big.svg" "$tmp/big.json" thinned 2>&1)
then ok "50000 steps in $((($(date +%s%N) - start) / 1000000)) ms: $out"
else bad "50000 steps: $out"; fi

# A real run: 12 steps, validation every 6, a log metric from each log line.
python3 -c "import random; r = random.Random(1); w = 'the quick brown fox jumps over a lazy dog'.split()
print('\n'.join(' '.join(r.choice(w) for _ in range(12)) for _ in range(400)))" > "$tmp/words.txt"
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.2 "$tmp/words.txt" > /dev/null || bad "prep"
if "$anvil" train --data "$tmp/data" --preset tiny --batch 2 --seq 32 --steps 12 --val-every 6 --val-batches 1 \
  --sample-every -1 --no-progress --threads 2 --log-every 1 --out "$tmp/real" \
  --metric 'logged_loss=\| loss ([0-9.]+) \|' > /dev/null 2>&1; then
  python3 "$check" expect "$tmp/real" > "$tmp/real.json"
  if "$anvil" plot "$tmp/real" --out "$tmp/real.svg" && out=$(python3 "$check" svg "$tmp/real.svg" "$tmp/real.json" 2>&1) &&
    [ "$(pts "$tmp/real.svg" 'run0 val_loss')" = 2 ] && [ "$(pts "$tmp/real.svg" 'run0 log')" = 12 ] &&
    grep -q '>logged_loss</text>' "$tmp/real.svg"; then ok "a real run: $out"
  else bad "a real run: $out; val_loss $(pts "$tmp/real.svg" 'run0 val_loss') points (2), logged_loss $(pts "$tmp/real.svg" 'run0 log') (12)"; fi
  # Each y axis names its unit; a log metric's is whatever its regex captured: "as logged".
  units=$(python3 -c 'import sys, xml.etree.ElementTree as ET
print([t.text for t in ET.parse(sys.argv[1]).getroot() if t.get("class") == "ylabel"])' "$tmp/real.svg" 2>&1)
  [ "$units" = "['nats per token', 'nats per token', 'learning rate (no unit)', 'L2 norm (no unit)', 'tokens per second', 'as logged']" ] &&
    ok "a real run's y axes name their units, the log metric's 'as logged'" || bad "a real run's y-axis units: $units"
else
  bad "training the real run"
fi

# Each fails with one line naming the file (and line), exit status $2, and leaves fig.svg as it was.
cp "$tmp/fig.svg" "$tmp/before.svg"
fails_with() {
  local what=$1 status=$2 want=$3; shift 3
  local err rc
  err=$("$anvil" plot "$@" 2>&1 > /dev/null); rc=$?
  if [ $rc -eq "$status" ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && grep -qF -- "$want" <<< "$err" &&
    cmp -s "$tmp/fig.svg" "$tmp/before.svg"; then ok "$what: $err"
  else bad "$what: exit $rc, stderr: $err"; fi
}
mkdir -p "$tmp/empty" "$tmp/ckpt_only" "$tmp/bad"
: > "$tmp/empty/metrics.jsonl"
echo '{"kind":"ckpt","step":5,"write_ms":3}' > "$tmp/ckpt_only/metrics.jsonl"
head -n 2 "$tmp/alpha/metrics.jsonl" > "$tmp/bad/metrics.jsonl"
echo '{"kind":"train","step":3,"loss":4.1' >> "$tmp/bad/metrics.jsonl"
fails_with "a missing run" 1 "$tmp/nothing/metrics.jsonl: cannot open" "$tmp/beta" "$tmp/nothing" --out "$tmp/fig.svg"
fails_with "an empty run" 1 "$tmp/empty/metrics.jsonl: no train, val or log records" "$tmp/empty" --out "$tmp/fig.svg"
fails_with "checkpoint records only" 1 "no train, val or log records" "$tmp/ckpt_only" --out "$tmp/fig.svg"
fails_with "a line cut short" 1 "$tmp/bad/metrics.jsonl:3: not JSON" "$tmp/bad" --out "$tmp/fig.svg"
printf '{"kind":"train","step":1,"loss":4}\n{"kind":"train","step":"2","loss":4}\n' > "$tmp/bad/metrics.jsonl"
fails_with "a step that is a string" 1 "$tmp/bad/metrics.jsonl:2: no numeric \"step\"" "$tmp/bad" --out "$tmp/fig.svg"
printf '{"kind":"val","step":1,"val_loss":"low"}\n' > "$tmp/bad/metrics.jsonl"
fails_with "a value that is a string" 1 "$tmp/bad/metrics.jsonl:1: \"val_loss\" is not a number" "$tmp/bad" --out "$tmp/fig.svg"
printf '{"kind":"log","step":1,"a b":2}\n' > "$tmp/bad/metrics.jsonl"
fails_with "a log metric's bad name" 1 "$tmp/bad/metrics.jsonl:1: \"a b\" is not a log metric's name" "$tmp/bad" --out "$tmp/fig.svg"
printf '[1,2]\n' > "$tmp/bad/metrics.jsonl"
fails_with "not a record" 1 "$tmp/bad/metrics.jsonl:1: not a record" "$tmp/bad" --out "$tmp/fig.svg"
printf '{"kind":"train","step":1} {}\n' > "$tmp/bad/metrics.jsonl"
fails_with "two records on a line" 1 "$tmp/bad/metrics.jsonl:1: text after the record" "$tmp/bad" --out "$tmp/fig.svg"
fails_with "no --out" 2 "needs --out" "$tmp/alpha"
fails_with "no run" 2 "needs at least one RUN_DIR" --out "$tmp/fig.svg"
fails_with "a figure of another kind" 2 "must end in .svg or .png" "$tmp/alpha" --out "$tmp/fig.pdf"
fails_with "an unknown option" 2 "unexpected argument '--frobnicate'" "$tmp/alpha" --frobnicate --out "$tmp/fig.svg"
"$anvil" plot --help | grep -q 'usage: anvil plot RUN_DIR' && ok "--help" || bad "--help"

# The alert rules on the trainer's metrics: valid, and each fires on its synthetic series.
rules=$(dirname "$0")/../deploy/prometheus
if command -v promtool > /dev/null; then
  out=$(promtool check rules "$rules/anvil.rules.yml" 2>&1) && ok "promtool check rules: $(echo $out)" || bad "promtool check rules: $out"
  out=$(cd "$rules" && promtool test rules anvil.rules.test.yml 2>&1) && ok "promtool test rules: $(echo $out)" ||
    bad "promtool test rules: $out"
else
  missing "promtool (Debian's prometheus) is not installed"
fi
finish
