#!/usr/bin/env bash
# `anvil train --metrics-port`: the Prometheus page a run serves, checked by
# the real tools:
#   - promtool check metrics accepts the page of one rank and of two, and the
#     page holds the training families, rank 0 and rank 1's series, and an
#     MFU equal to model FLOP/s over the ranks' measured peaks;
#   - a real Prometheus (Debian's), started here, scrapes the trainer every
#     second; anvil_train_loss queried back through /api/v1/query equals
#     the loss metrics.jsonl holds for the step anvil_train_step says, in
#     the same scrape;
#   - a port already taken is refused with one line naming it;
#   - --metric NAME=REGEX: the number its group captures from each log line
#     is in metrics.jsonl (kind log, equal to the loss the step line printed)
#     and on the page for every rank; a regex that does not compile is
#     refused with PCRE2's offset, one without exactly one group, a bad or
#     repeated name too (exit 2).
. "$(dirname "$0")/tools/cli_common.sh"
export OMP_NUM_THREADS=1
for p in promtool prometheus curl; do
  command -v $p > /dev/null || { missing "$p is not installed (scripts/deps.sh --test)"; finish; }
done
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Waits up to 60 s for $1/metrics.port and a page with a step and every rank's series; sets port.
wait_page() {
  port=""
  for _ in $(seq 600); do
    [ -s "$1/metrics.port" ] && port=$(cat "$1/metrics.port") &&
      curl -sf "http://127.0.0.1:$port/metrics" > "$tmp/page" 2> /dev/null &&
      grep -q "^anvil_rank_step_seconds{rank=\"$2\"}" "$tmp/page" && return 0
    sleep 0.1
  done
  return 1
}
families=(anvil_log_lossx anvil_train_info anvil_train_step anvil_train_loss anvil_train_learning_rate anvil_train_grad_norm
          anvil_train_tokens_total anvil_train_tokens_per_second anvil_train_mfu_ratio anvil_train_step_seconds
          anvil_rank_comm_wait_ratio anvil_rank_resident_memory_bytes anvil_rank_resident_memory_peak_bytes
          anvil_rank_cpu_seconds_total anvil_rank_cpu_utilization_ratio anvil_rank_disk_read_bytes_total
          anvil_rank_disk_written_bytes_total anvil_rank_network_receive_bytes_total anvil_rank_open_fds)
# The page in $tmp/page: promtool, the families, ranks 0..$1-1, and MFU = FLOP/s over the summed peaks.
check_page() {
  local what=$1 ranks=$2 out
  if out=$(promtool check metrics < "$tmp/page" 2>&1); then ok "$what: promtool check metrics accepts the page"
  else bad "$what: promtool check metrics: $out"; fi
  local f missing_f=""
  for f in "${families[@]}"; do grep -q "^# TYPE $f " "$tmp/page" || missing_f+=" $f"; done
  for r in $(seq 0 $((ranks - 1))); do
    grep -q "^anvil_rank_open_fds{rank=\"$r\"}" "$tmp/page" || missing_f+=" rank$r"
  done
  [ -z "$missing_f" ] && ok "$what: every family, ranks 0-$((ranks - 1))" || bad "$what: missing:$missing_f"
  if out=$(python3 - "$tmp/page" << 'EOF'
import sys
v, peaks = {}, 0.0
for line in open(sys.argv[1]):
    if line.startswith("#"): continue
    name, value = line.rsplit(" ", 1)
    v[name] = float(value)
    if name.startswith("anvil_rank_peak_flops_per_second{"): peaks += float(value)
mfu, want = v["anvil_train_mfu_ratio"], v["anvil_train_model_flops_per_second"] / peaks
print(f"mfu {mfu:.4f}, FLOP/s over the summed peaks {want:.4f}")
sys.exit(0 if mfu > 0 and abs(mfu - want) <= 1e-12 * want else 1)
EOF
  ); then ok "$what: $out"; else bad "$what: $out"; fi
}

# ---- one rank, scraped by Prometheus ----
run=$tmp/run
"$anvil" train --synthetic --preset tiny --batch 4 --seq 64 --steps 100000 --no-progress --sample-every -1 \
  --threads 1 --metrics-port 0 --out "$run" --log-every 3 --metric 'lossx=\| loss ([0-9.]+) \|' \
  > /dev/null 2> "$tmp/train.log" &
trainer=$!
if wait_page "$run" 0; then
  check_page "one rank" 1
else
  bad "no metrics page from the trainer: $(tail -n 2 "$tmp/train.log")"
fi

# A second run on the same port: one line naming it.
if [ -n "$port" ]; then
  err=$("$anvil" train --synthetic --steps 2 --metrics-port "$port" --out "$tmp/second" 2>&1 > /dev/null)
  rc=$?
  [ $rc = 1 ] && [ "$(printf '%s\n' "$err" | grep -c 'error:')" = 1 ] &&
    printf '%s\n' "$err" | tail -n 1 | grep -q "metrics-port: cannot listen on 127.0.0.1:$port" &&
    ok "a taken port: $(printf '%s\n' "$err" | tail -n 1)" || bad "a taken port: exit $rc: $err"
fi

if [ -n "$port" ]; then
  pport=$(free_port)
  cat > "$tmp/prometheus.yml" << EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: anvil
    static_configs:
      - targets: ['127.0.0.1:$port']
EOF
  prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
    --web.listen-address="127.0.0.1:$pport" > "$tmp/prometheus.log" 2>&1 &
  prom=$!
  # One evaluation time for both queries, so both values come from the same scrape.
  answer=""
  for _ in $(seq 60); do
    now=$(date +%s.%N)
    loss=$(curl -sf "http://127.0.0.1:$pport/api/v1/query" --data-urlencode query=anvil_train_loss \
      --data-urlencode time="$now" 2> /dev/null)
    step=$(curl -sf "http://127.0.0.1:$pport/api/v1/query" --data-urlencode query=anvil_train_step \
      --data-urlencode time="$now" 2> /dev/null)
    case "$loss" in *'"value"'*) answer=yes; break ;; esac
    sleep 1
  done
  kill -TERM $trainer
  wait $trainer
  rc=$?
  [ $rc = 75 ] || bad "the trainer stopped by SIGTERM exited $rc"
  if [ -n "$answer" ] && out=$(python3 - "$loss" "$step" "$run/metrics.jsonl" << 'EOF'
import json, struct, sys
loss, step = json.loads(sys.argv[1]), json.loads(sys.argv[2])
(lt, lv), = [r["value"] for r in loss["data"]["result"]]
(st, sv), = [r["value"] for r in step["data"]["result"]]
assert lt == st, f"loss and step from different scrapes: {lt} vs {st}"
f32 = lambda x: struct.unpack("f", struct.pack("f", float(x)))[0]
logged = [json.loads(l) for l in open(sys.argv[3])]
rec = [r for r in logged if r["kind"] == "train" and r["step"] == int(sv)]
assert rec, f"step {sv} is not in metrics.jsonl"
assert f32(lv) == f32(rec[0]["loss"]), f"Prometheus has {lv} at step {sv}, metrics.jsonl {rec[0]['loss']}"
print(f"step {sv}: loss {lv} from Prometheus, {rec[0]['loss']} in metrics.jsonl")
EOF
  ); then
    ok "Prometheus scraped the trainer: $out"
  else
    bad "Prometheus query: ${out:-no answer within 60 s: $loss $(tail -n 3 "$tmp/prometheus.log")}"
  fi
  kill $prom
  wait $prom 2> /dev/null
fi
# Every log record is the loss its step's line printed (4 decimals), at steps 1, 3, 6, ...
if out=$(python3 - "$run/metrics.jsonl" << 'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
loss = {r["step"]: r["loss"] for r in recs if r["kind"] == "train"}
logs = [r for r in recs if r["kind"] == "log"]
assert len(logs) >= 3, f"{len(logs)} log records"
for r in logs:
    assert r["step"] == 1 or r["step"] % 3 == 0, f"a log record at step {r['step']}"
    assert f"{loss[r['step']]:.4f}" == f"{r['lossx']:.4f}", f"step {r['step']}: lossx {r['lossx']}, loss {loss[r['step']]}"
print(f"{len(logs)} log records, each the step line's loss")
EOF
); then ok "--metric into metrics.jsonl: $out"; else bad "--metric into metrics.jsonl: $out"; fi

usage_error() {
  local what=$1 want=$2 err rc
  shift 2
  err=$("$anvil" train --synthetic --steps 1 "$@" 2>&1 > /dev/null)
  rc=$?
  [ $rc = 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && printf '%s\n' "$err" | grep -qF "$want" &&
    ok "$what: $err" || bad "$what: exit $rc: $err"
}
usage_error "a regex that does not compile" "missing closing parenthesis at offset 13" --metric 'x=loss ([0-9.]+'
usage_error "a regex without a group" "has 0 capture groups" --metric 'x=loss [0-9.]+'
usage_error "a regex with two groups" "has 2 capture groups" --metric 'x=(loss) ([0-9.]+)'
usage_error "a bad name" "metric 'a-b'" --metric 'a-b=([0-9]+)'
usage_error "a name twice" "'x' is defined twice" --metric 'x=(1)' --metric 'x=(2)'

# ---- two ranks: every rank's series on rank 0's page ----
if command -v mpirun > /dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" "$anvil" launch -n 2 -- train --synthetic --preset tiny \
    --batch 4 --seq 64 --steps 100000 --no-progress --sample-every -1 --metrics-port 0 --out "$tmp/run2" \
    --log-every 1 --metric 'lossx=\| loss ([0-9.]+) \|' \
    > /dev/null 2> "$tmp/launch.log" &
  launcher=$!
  if wait_page "$tmp/run2" 1; then
    check_page "two ranks" 2
    # Rank 1 logs nowhere, but its lines are matched all the same.
    grep -q '^anvil_log_lossx{rank="1"}' "$tmp/page" && ok "two ranks: rank 1's log metric is on the page" ||
      bad "two ranks: no anvil_log_lossx for rank 1"
  else
    bad "two ranks: no page with rank 1's series: $(tail -n 2 "$tmp/launch.log")"
  fi
  kill -TERM $launcher
  wait $launcher
  rc=$?
  [ $rc = 75 ] || bad "the launcher stopped by SIGTERM exited $rc: $(tail -n 2 "$tmp/launch.log")"
else
  missing "mpirun is not installed: no two-rank page"
fi
finish
