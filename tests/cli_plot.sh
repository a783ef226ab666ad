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
#   - the goodput timeline (--goodput) of tests/fixtures/goodput_fault.json, made by hand (the
#     queue, two attempts, a rank killed in the first, a loss curve): a band per attempt and one
#     for the queue, each span two pixels wide or more in its row and its part's colour, the
#     fault's line and label, the legend's parts with their seconds and shares, the ETTR in the
#     title, the loss polylines' points and the attempts' boundaries, all mapped back through the
#     tick labels (plot_check.py timeline); its PNG; a real job's goodput (the fuzz seed); --job
#     from a stand-in for the daemon; bad files refused in one line naming the file and field;
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

# The goodput timeline, counted by hand too: bands for the queue and attempts 1 and 2, the fault's
# label, the legend's parts, two loss polylines (one per attempt) of 15 and 17 points.
fixture=$(cd "$(dirname "$0")" && pwd)/fixtures/goodput_fault.json
if err=$("$anvil" plot --goodput "$fixture" --out "$tmp/tl.svg" 2>&1) &&
  out=$(python3 "$check" timeline "$tmp/tl.svg" "$fixture" 2>&1); then ok "goodput timeline: $out"
else bad "goodput timeline: $err $out"; fi
n=$(grep -c 'class="band row' "$tmp/tl.svg")
loss_points=$(grep '<polyline class="curve"' "$tmp/tl.svg" | sed 's/.*points="\([^"]*\)".*/\1/' | wc -w)
grep -q '>kill-rank rank 1</text>' "$tmp/tl.svg" && [ "$n" = 3 ] &&
  grep -q '>productive 67.0 s (67.0%)</text>' "$tmp/tl.svg" && grep -q '>recomputed 9.0 s (9.0%)</text>' "$tmp/tl.svg" &&
  grep -q '>queue 2.0 s (2.0%)</text>' "$tmp/tl.svg" && grep -q 'ETTR 68.4%' "$tmp/tl.svg" &&
  [ "$loss_points" = 32 ] && [ "$(grep -c '<polyline class="curve"' "$tmp/tl.svg")" = 2 ] &&
  ok "goodput timeline: 3 bands, the fault's label, the parts' seconds, 2 loss polylines of 32 points" ||
  bad "goodput timeline: $n bands, $loss_points loss points: $(grep -E 'mark-label|legend|curve' "$tmp/tl.svg")"
out=
if err=$("$anvil" plot --goodput "$fixture" --out "$tmp/tl.png" 2>&1) &&
  out=$(python3 "$check" timeline-png "$tmp/tl.png" "$tmp/tl.svg" 2>&1); then ok "goodput png: $out"
else bad "goodput png: $err $out"; fi
real=$(cd "$(dirname "$0")" && pwd)/fuzz/corpus/goodput/kill_rank.json
if err=$("$anvil" plot --goodput "$real" --out "$tmp/real_tl.svg" 2>&1) &&
  out=$(python3 "$check" timeline "$tmp/real_tl.svg" "$real" 2>&1); then ok "a real job's goodput: $out"
else bad "a real job's goodput: $err $out"; fi

# --job: the goodput from the job service, here a stand-in that answers job 7 to its token only.
python3 - "$fixture" "$tmp/port" << 'EOF' &
import http.server, os, sys
body = open(sys.argv[1], "rb").read()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        known = self.path == "/v1/jobs/7/goodput" and self.headers.get("Authorization") == "Bearer anv_stand_in"
        data = body if known else b'{"error":"job not found"}'
        self.send_response(200 if known else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
open(sys.argv[2] + ".tmp", "w").write(str(server.server_address[1]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
server.serve_forever()
EOF
stand_in=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
url=http://127.0.0.1:$(cat "$tmp/port")
if err=$(ANVIL_TOKEN=anv_stand_in "$anvil" plot --job 7 --url "$url" --out "$tmp/job.svg" 2>&1) &&
  out=$(python3 "$check" timeline "$tmp/job.svg" "$fixture" 2>&1) && grep -q '>job 7: ETTR 68.4%' "$tmp/job.svg"
then ok "--job 7 --url: $out"
else bad "--job 7 --url: $err $out"; fi
err=$(ANVIL_TOKEN=anv_stand_in "$anvil" plot --job 8 --url "$url" --out "$tmp/job8.svg" 2>&1)
rc=$?
[ $rc = 4 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && grep -q 'job not found (HTTP 404)' <<< "$err" &&
  [ ! -e "$tmp/job8.svg" ] && ok "--job of an unknown job: exit 4, $err" || bad "--job 8: exit $rc: $err"
kill "$stand_in"

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
# A goodput file that is not one: one line naming the file and the field.
gp=$tmp/gp
mkdir -p "$gp"
mutate() { # name, a Python statement on g (the fixture's JSON)
  python3 -c "import json, sys; g = json.load(open(sys.argv[1])); $2; json.dump(g, open(sys.argv[2], 'w'))" \
    "$fixture" "$gp/$1.json"
}
printf '{"submitted_at": 1700000000, "wall_s":' > "$gp/cut.json"
fails_with "goodput: not JSON" 1 "$gp/cut.json: not JSON: malformed JSON near byte" --goodput "$gp/cut.json" \
  --out "$tmp/fig.svg"
printf '[1, 2]' > "$gp/array.json"
fails_with "goodput: not an object" 1 "$gp/array.json: not a goodput object" --goodput "$gp/array.json" \
  --out "$tmp/fig.svg"
printf '{}\n{}\n' > "$gp/two.json"
fails_with "goodput: two values" 1 "$gp/two.json: text after the JSON value" --goodput "$gp/two.json" --out "$tmp/fig.svg"
mutate no_submitted 'del g["submitted_at"]'
fails_with "goodput: no submitted_at" 1 "$gp/no_submitted.json: submitted_at: missing" \
  --goodput "$gp/no_submitted.json" --out "$tmp/fig.svg"
mutate wall_string 'g["wall_s"] = "100"'
fails_with "goodput: a string for a number" 1 "$gp/wall_string.json: wall_s: not a number" \
  --goodput "$gp/wall_string.json" --out "$tmp/fig.svg"
mutate part_missing 'del g["parts"]["eval"]'
fails_with "goodput: a part missing" 1 "$gp/part_missing.json: parts.eval: missing" \
  --goodput "$gp/part_missing.json" --out "$tmp/fig.svg"
mutate span_string 'g["spans"][3]["t0"] = "25"'
fails_with "goodput: a span's time a string" 1 "$gp/span_string.json: spans[3].t0: not a number" \
  --goodput "$gp/span_string.json" --out "$tmp/fig.svg"
mutate span_back 'g["spans"][3]["t1"] = 1'
fails_with "goodput: a span that ends before it starts" 1 "$gp/span_back.json: spans[3].t1: 1 is not a number in [25," \
  --goodput "$gp/span_back.json" --out "$tmp/fig.svg"
mutate spans_object 'g["spans"] = {}'
fails_with "goodput: spans not an array" 1 "$gp/spans_object.json: spans: not an array" \
  --goodput "$gp/spans_object.json" --out "$tmp/fig.svg"
mutate span_part 'g["spans"][0]["part"] = "lunch"'
fails_with "goodput: an unknown part" 1 "$gp/span_part.json: spans[0]: part: missing, or not one of productive" \
  --goodput "$gp/span_part.json" --out "$tmp/fig.svg"
mutate span_attempt 'g["spans"][1]["attempt"] = 9'
fails_with "goodput: a span of no attempt listed" 1 "$gp/span_attempt.json: spans[1]: attempt 9 is not in attempts" \
  --goodput "$gp/span_attempt.json" --out "$tmp/fig.svg"
mutate attempt_twice 'g["attempts"][1]["attempt"] = 1'
fails_with "goodput: an attempt twice" 1 "$gp/attempt_twice.json: attempts: attempt 1 given twice" \
  --goodput "$gp/attempt_twice.json" --out "$tmp/fig.svg"
mutate fault_kind 'g["faults"][0]["kind"] = 3'
fails_with "goodput: a fault's kind a number" 1 "$gp/fault_kind.json: faults[0]: kind: not a string" \
  --goodput "$gp/fault_kind.json" --out "$tmp/fig.svg"
mutate loss_pair 'g["loss"][2] = [1, 2, 3]'
fails_with "goodput: a loss point of three" 1 "$gp/loss_pair.json: loss[2]: not a [seconds, loss] pair of numbers" \
  --goodput "$gp/loss_pair.json" --out "$tmp/fig.svg"
mutate loss_huge 'g["loss"] = [[1, 2]] * 200001'
fails_with "goodput: a loss curve too long" 1 "$gp/loss_huge.json: loss: more than 200000 entries" \
  --goodput "$gp/loss_huge.json" --out "$tmp/fig.svg"
fails_with "goodput: a missing file" 1 "$gp/none.json: cannot open" --goodput "$gp/none.json" --out "$tmp/fig.svg"
fails_with "goodput and a run" 2 "draws RUN_DIRs, --goodput FILE or --job ID: give one" "$tmp/alpha" \
  --goodput "$fixture" --out "$tmp/fig.svg"
fails_with "--state without --job" 2 "--state goes with --job" --goodput "$fixture" --state "$tmp" --out "$tmp/fig.svg"
fails_with "--job of no number" 2 "--job takes a job ID, not 'seven'" --job seven --out "$tmp/fig.svg"
fails_with "goodput: no --out" 2 "needs --out" --goodput "$fixture"
ANVIL_TOKEN=anv_x fails_with "--job: no daemon" 1 "(is anvil serve running?)" --job 7 --url http://127.0.0.1:9 \
  --out "$tmp/fig.svg"
"$anvil" plot --help | grep -q 'usage: anvil plot RUN_DIR' && "$anvil" plot --help | grep -q -- '--goodput FILE.json' &&
  ok "--help" || bad "--help"

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
