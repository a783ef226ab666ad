#!/usr/bin/env bash
# anvil's S3 client end to end, against a real S3 server (Ceph radosgw on
# 127.0.0.1, brought up once for the whole script) behind a fault-injecting
# proxy (tools/s3_faultproxy.py) that counts requests by type and in flight; at the end the job
# service, whose roles' jobs get their S3 endpoint and keys from the daemon's --s3-config alone,
# and anvil chaos striking a job's S3 requests through that proxy.
# Usage: cli_s3.sh /path/to/anvil
. "$(dirname "$0")/tools/cli_common.sh"
here=$(cd "$(dirname "$0")" && pwd)
command -v python3 > /dev/null || { missing "python3 is not installed"; finish; }

rgw=$tmp/rgw
at_exit() { bash "$here/s3/radosgw.sh" stop "$rgw"; }
bash "$here/s3/radosgw.sh" start "$rgw" || { bad "radosgw did not start (logs above)"; finish; }
. "$rgw/env"
direct=$AWS_ENDPOINT_URL
python3 "$here/../tools/s3_faultproxy.py" "$direct" "$tmp/proxy_port" &
for _ in $(seq 100); do [ -f "$tmp/proxy_port" ] && break; sleep 0.1; done
[ -f "$tmp/proxy_port" ] || { bad "the fault proxy did not start"; finish; }
export AWS_ENDPOINT_URL=http://127.0.0.1:$(cat "$tmp/proxy_port")
ctl() { curl -sf "$AWS_ENDPOINT_URL/__ctl/$1"; }
# The proxy's count of requests of one type since the last reset.
count() { ctl stats | python3 -c "import json,sys; print(json.load(sys.stdin)['counts'].get('$1', 0))"; }
# A counter from the "s3: requests ..." line that --stats prints.
client_stat() { grep -o " $2=[0-9]*" "$1" | tail -n 1 | cut -d= -f2; }

# The bucket, made with curl's own SigV4 (anvil has no bucket commands).
curl -sf --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -X PUT \
  -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
  "$direct/anvil-test" > /dev/null || { bad "could not create the bucket"; finish; }

head -c 300000 /dev/urandom > "$tmp/small"
# Over two 5 MiB parts: three parts and a short last one.
head -c 12000000 /dev/urandom > "$tmp/big"

# Keys that SigV4 encodes: a dot-dot segment, spaces, unicode, reserved characters.
keys=("dots/../up" "sp ace/a b c" "uni/ünïcødé-😀" "res/q?&=+#%;,@!\$'()*" "tilde~_-.x/.hidden")
i=0
for k in "${keys[@]}"; do
  i=$((i + 1))
  "$anvil" s3 cp "$tmp/small" "s3://anvil-test/$k" 2> "$tmp/err" || { bad "upload of '$k': $(cat "$tmp/err")"; continue; }
  "$anvil" s3 cp "s3://anvil-test/$k" "$tmp/back$i" 2> "$tmp/err" && cmp -s "$tmp/small" "$tmp/back$i" &&
    ok "key '$k' round-trips" || bad "key '$k' did not round-trip: $(cat "$tmp/err")"
done
"$anvil" s3 ls s3://anvil-test/ > "$tmp/ls" 2> "$tmp/err" || bad "ls failed: $(cat "$tmp/err")"
for k in "${keys[@]}"; do
  grep -qxF "      300000 $k" "$tmp/ls" || bad "ls lacks '$k': $(cat "$tmp/ls")"
done
[ "$(wc -l < "$tmp/ls")" = "${#keys[@]}" ] && ok "ls lists the ${#keys[@]} keys as stored" || bad "ls: $(cat "$tmp/ls")"

# Multipart: 12 MB at 5 MiB parts is a create, three parts and a complete.
ctl reset > /dev/null
ANVIL_S3_PART_SIZE=5242880 "$anvil" s3 cp "$tmp/big" s3://anvil-test/mp/big 2> "$tmp/err" || bad "multipart upload: $(cat "$tmp/err")"
[ "$(count PART)" = 3 ] && [ "$(count POST)" = 2 ] && [ "$(count PUT)" = 0 ] && ok "multipart: 3 parts, create and complete" ||
  bad "multipart requests: $(ctl stats)"
"$anvil" s3 cp s3://anvil-test/mp/big "$tmp/big.back" 2> "$tmp/err" && cmp -s "$tmp/big" "$tmp/big.back" &&
  ok "the multipart object reads back byte-identical" || bad "multipart read-back: $(cat "$tmp/err")"

# awscli against the server itself, both ways.
if command -v aws > /dev/null && aws --version > /dev/null 2>&1; then
  awsx() { aws --endpoint-url "$direct" --region "$AWS_REGION" "$@"; }
  awsx s3 cp s3://anvil-test/mp/big "$tmp/big.aws" --quiet 2> "$tmp/err" && cmp -s "$tmp/big" "$tmp/big.aws" &&
    ok "awscli reads what anvil uploaded, byte-identical" || bad "awscli download: $(cat "$tmp/err")"
  awsx s3 cp "$tmp/big" "s3://anvil-test/by aws/ü big" --quiet 2> "$tmp/err" || bad "awscli upload: $(cat "$tmp/err")"
  "$anvil" s3 cp "s3://anvil-test/by aws/ü big" "$tmp/big.fromaws" 2> "$tmp/err" && cmp -s "$tmp/big" "$tmp/big.fromaws" &&
    ok "anvil reads what awscli uploaded, byte-identical" || bad "anvil download of awscli's object: $(cat "$tmp/err")"
else
  missing "awscli (aws) is not installed: the cross-check with awscli is skipped"
fi

# 503 SlowDown three times: retried, counted by the client and seen at the proxy.
ctl reset > /dev/null
ctl "fault?kind=503&n=3" > /dev/null
"$anvil" s3 cp "$tmp/small" s3://anvil-test/retry/a --stats 2> "$tmp/err" && ok "survived 3 x 503 SlowDown" ||
  bad "503s not survived: $(cat "$tmp/err")"
[ "$(client_stat "$tmp/err" retries)" = 3 ] && [ "$(count PUT)" = 4 ] && ok "3 retries counted, 4 PUTs at the proxy" ||
  bad "retries: $(cat "$tmp/err"); proxy $(ctl stats)"

# Connections reset mid-body twice: each GET after a reset asks for the bytes from where the last
# one broke off (an RST drops what the client had not read yet, so the proxy sends some twice),
# and the client takes in the object's bytes exactly once.
ctl reset > /dev/null
ctl "fault?kind=reset&n=2" > /dev/null
"$anvil" s3 cp s3://anvil-test/mp/big "$tmp/big.reset" --stats 2> "$tmp/err" && cmp -s "$tmp/big" "$tmp/big.reset" &&
  ok "survived 2 resets mid-body, byte-identical" || bad "resets: $(cat "$tmp/err")"
ranges=$(ctl stats | python3 -c "import json,sys; print(' '.join(r.split('=')[1].split('-')[0] for r in json.load(sys.stdin)['ranges']))")
read -r r1 r2 r3 <<< "$ranges"
[ "$(client_stat "$tmp/err" retries)" = 2 ] && [ "$(client_stat "$tmp/err" bytes_down)" = 12000000 ] &&
  [ "$r1" = 0 ] && [ "${r2:-0}" -gt 0 ] && [ "${r3:-0}" -gt "${r2:-0}" ] &&
  ok "2 retries counted; GETs from bytes $r1, $r2, $r3; 12000000 bytes taken in" ||
  bad "resume: $(cat "$tmp/err"); proxy $(ctl stats)"

# Retries stop at the limit.
ctl reset > /dev/null
ctl "fault?kind=503&n=50" > /dev/null
ANVIL_S3_MAX_ATTEMPTS=3 "$anvil" s3 cp "$tmp/small" s3://anvil-test/retry/b 2> "$tmp/err"
rc=$?
[ $rc = 1 ] && grep -q "SlowDown.*gave up after 3 attempts" "$tmp/err" && [ "$(count PUT)" = 3 ] &&
  ok "503s without end: 3 attempts, then one line and exit 1" || bad "limit: rc $rc, $(cat "$tmp/err"), $(ctl stats)"
ctl reset > /dev/null

# A wrong secret: one line naming the bucket, key and S3 code, exit 1, one request, no secret shown.
AWS_SECRET_ACCESS_KEY=not-the-secret-42 "$anvil" s3 cp "$tmp/small" s3://anvil-test/x/y 2> "$tmp/err"
rc=$?
[ $rc = 1 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q "s3://anvil-test/x/y: HTTP 403 SignatureDoesNotMatch" "$tmp/err" &&
  ok "wrong secret: one line, exit 1" || bad "wrong secret: rc $rc, $(cat "$tmp/err")"
[ "$(count PUT)" = 1 ] && ok "wrong secret: one request, no retry" || bad "wrong secret retried: $(ctl stats)"
grep -q "not-the-secret-42\|$AWS_SECRET_ACCESS_KEY" "$tmp/err" && bad "a secret was printed" || ok "no secret printed"
"$anvil" s3 cp s3://anvil-test/no/such "$tmp/none" 2> "$tmp/err"
rc=$?
[ $rc = 1 ] && grep -q "s3://anvil-test/no/such: no such object" "$tmp/err" && ok "a missing object: one line, exit 1" ||
  bad "missing object: rc $rc, $(cat "$tmp/err")"

# Credentials from a profile of the AWS files, region from the config file.
printf '[other]\naws_access_key_id = nope\n[t]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
  "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" > "$tmp/credentials"
printf '[profile t]\nregion = %s\n' "$AWS_REGION" > "$tmp/config"
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_REGION AWS_PROFILE=t AWS_SHARED_CREDENTIALS_FILE="$tmp/credentials" \
  AWS_CONFIG_FILE="$tmp/config" "$anvil" s3 ls s3://anvil-test/mp/ > "$tmp/ls" 2> "$tmp/err" && grep -q " mp/big$" "$tmp/ls" &&
  ok "credentials from profile t of the credentials file" || bad "profile: $(cat "$tmp/err")"
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME="$tmp/nohome" "$anvil" s3 ls s3://anvil-test 2> "$tmp/err"
rc=$?
[ $rc = 78 ] && grep -q "no credentials" "$tmp/err" && ok "no credentials: exit 78" || bad "no credentials: rc $rc, $(cat "$tmp/err")"

# rm, then the key is gone.
"$anvil" s3 rm "s3://anvil-test/sp ace/a b c" 2> "$tmp/err" && ! "$anvil" s3 ls "s3://anvil-test/sp ace" | grep -q . &&
  ok "rm removes the object" || bad "rm: $(cat "$tmp/err")"

# export and import through s3://: the same bytes as through local folders.
for i in $(seq 400); do echo "line $i of a small corpus for the export check, $((i * 7919 % 1000))"; done > "$tmp/corpus.txt"
"$anvil" prep --out "$tmp/data" --delimiter '\n' --val-fraction 0.05 "$tmp/corpus.txt" > /dev/null 2>&1 &&
  "$anvil" train --data "$tmp/data" --preset tiny --batch 4 --seq 64 --steps 2 --no-progress --sample-every -1 \
    --out "$tmp/run" > /dev/null 2>&1 || bad "could not train the model for the export check"
"$anvil" export --model "$tmp/run/model.safetensors" --out "$tmp/hf" --no-progress > /dev/null &&
  "$anvil" import --hf "$tmp/hf" --out "$tmp/back.safetensors" --no-progress > /dev/null || bad "local export/import failed"
"$anvil" export --model "$tmp/run/model.safetensors" --out s3://anvil-test/hf/tiny --no-progress > /dev/null 2> "$tmp/err" &&
  "$anvil" import --hf s3://anvil-test/hf/tiny --out s3://anvil-test/models/tiny.safetensors --no-progress > /dev/null 2>> "$tmp/err" &&
  "$anvil" export --model s3://anvil-test/models/tiny.safetensors --out "$tmp/hf_s3" --no-progress > /dev/null 2>> "$tmp/err" &&
  "$anvil" s3 cp s3://anvil-test/models/tiny.safetensors "$tmp/back_s3.safetensors" 2>> "$tmp/err" ||
  bad "export/import through s3:// failed: $(cat "$tmp/err")"
cmp -s "$tmp/back.safetensors" "$tmp/back_s3.safetensors" && cmp -s "$tmp/hf/model.safetensors" "$tmp/hf_s3/model.safetensors" &&
  cmp -s "$tmp/hf/config.json" "$tmp/hf_s3/config.json" && ok "export/import through s3:// give the local route's bytes" ||
  bad "export/import through s3:// differ from the local route"

# ---- data from S3 ----
# prep reads its inputs from S3 (one compressed), and gives the shards of the same inputs read locally.
gzip -c "$tmp/corpus.txt" > "$tmp/corpus.txt.gz"
head -n 50 "$tmp/corpus.txt" > "$tmp/corpus2.txt"
AWS_ENDPOINT_URL=$direct "$anvil" s3 cp "$tmp/corpus.txt.gz" s3://anvil-test/raw/corpus.txt.gz 2> /dev/null &&
  AWS_ENDPOINT_URL=$direct "$anvil" s3 cp "$tmp/corpus2.txt" "s3://anvil-test/raw/two words.txt" 2> /dev/null ||
  bad "could not upload prep's inputs"
"$anvil" prep --out "$tmp/prep_local" --delimiter '\n' --no-progress "$tmp/corpus.txt.gz" "$tmp/corpus2.txt" > /dev/null 2>&1 &&
  "$anvil" prep --out "$tmp/prep_s3in" --delimiter '\n' --no-progress s3://anvil-test/raw/corpus.txt.gz \
    "s3://anvil-test/raw/two words.txt" > "$tmp/prep.out" 2> "$tmp/err" &&
  cmp -s "$tmp/prep_local/train_000000.bin" "$tmp/prep_s3in/train_000000.bin" &&
  cmp -s "$tmp/prep_local/val_000000.bin" "$tmp/prep_s3in/val_000000.bin" &&
  grep -q '"path":[[:space:]]*"s3://anvil-test/raw/two words.txt"' "$tmp/prep_s3in/manifest.json" &&
  ok "prep from s3:// inputs (one gzip): the local inputs' shards, the URIs in the manifest" ||
  bad "prep from S3 inputs: $(cat "$tmp/err")"
"$anvil" prep --out "$tmp/prep_none" --no-progress s3://anvil-test/raw/absent.txt > /dev/null 2> "$tmp/err"
rc=$?
[ $rc = 1 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q "s3://anvil-test/raw/absent.txt" "$tmp/err" &&
  ok "prep from a missing s3:// input: one line naming it, exit $rc" || bad "missing S3 input: rc $rc, $(cat "$tmp/err")"

# prep writes to S3; training from there gives the local run's losses and model, bit for bit.
"$anvil" prep --out s3://anvil-test/ds --delimiter '\n' --val-fraction 0.05 --no-progress "$tmp/corpus.txt" > "$tmp/prep.out" 2> "$tmp/err" &&
  grep -q "wrote s3://anvil-test/ds/manifest.json" "$tmp/prep.out" || bad "prep --out s3://: $(cat "$tmp/err")"
"$anvil" s3 ls s3://anvil-test/ds/ > "$tmp/ls" 2>&1
[ "$(awk '{print $2}' "$tmp/ls" | tr '\n' ' ')" = "ds/manifest.json ds/train_000000.bin ds/val_000000.bin " ] &&
  ok "prep --out s3:// wrote the shards and the manifest" || bad "prep to S3 wrote: $(cat "$tmp/ls")"
train_args=(--preset tiny --batch 4 --seq 64 --steps 8 --val-every 4 --no-progress --sample-every -1 --seed 9)
"$anvil" train --data "$tmp/data" "${train_args[@]}" --out "$tmp/run_local" > /dev/null 2>&1 || bad "local training failed"
"$anvil" train --data s3://anvil-test/ds "${train_args[@]}" --out "$tmp/run_s3" > /dev/null 2> "$tmp/err" ||
  bad "training from S3 failed: $(cat "$tmp/err")"
losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl" | tr '\n' ' '; }
[ -n "$(losses "$tmp/run_local")" ] && [ "$(losses "$tmp/run_local")" = "$(losses "$tmp/run_s3")" ] &&
  cmp -s "$tmp/run_local/model.safetensors" "$tmp/run_s3/model.safetensors" &&
  ok "train --data s3://: the same $(losses "$tmp/run_s3" | wc -w) losses and model bytes as from local shards" ||
  bad "training from S3 differs: $(losses "$tmp/run_local") vs $(losses "$tmp/run_s3")"

# Resuming mid-run from a checkpoint, with the shards on S3, lands on the same model.
"$anvil" train --data s3://anvil-test/ds "${train_args[@]}" --ckpt-every 4 --out "$tmp/run_s3r" > /dev/null 2>&1 &&
  rm -rf "$tmp/run_s3r/ckpt/step_00000008" "$tmp/run_s3r/model.safetensors" &&
  echo step_00000004 > "$tmp/run_s3r/ckpt/latest" &&
  "$anvil" train --data s3://anvil-test/ds "${train_args[@]}" --ckpt-every 4 --out "$tmp/run_s3r" --resume auto > /dev/null 2> "$tmp/err" &&
  cmp -s "$tmp/run_local/model.safetensors" "$tmp/run_s3r/model.safetensors" &&
  ok "a run from S3 resumed at step 4 ends with the local run's model" || bad "resume from S3: $(cat "$tmp/err")"
grep -q '"layout":[[:space:]]*"contiguous"' "$tmp/run_s3r/ckpt/step_00000004/manifest.json" &&
  ok "shards on S3 are read in the contiguous layout by default (the checkpoint's loader state says so)" ||
  bad "layout of the run from S3: $(grep -o '"layout":[^,]*' "$tmp/run_s3r/ckpt/step_00000004/manifest.json")"
grep -q '"kind":"s3","step":8,"get":[1-9]' "$tmp/run_s3/metrics.jsonl" && ! grep -q '"kind":"s3"' "$tmp/run_local/metrics.jsonl" &&
  ok "metrics.jsonl has the S3 requests of the run from S3" || bad "no s3 record: $(grep s3 "$tmp/run_s3/metrics.jsonl")"
# The /metrics page of a run from S3 that checkpoints to S3: the requests, bytes, retries and
# latency of both clients, read while it trains (then it is killed).
"$anvil" train --data s3://anvil-test/ds "${train_args[@]}" --steps 100000 --ckpt-every 1 --ckpt-uri s3://anvil-test/prom \
  --metrics-port 0 --out "$tmp/run_prom" > /dev/null 2> "$tmp/prom.err" &
pid=$!
page=
for _ in $(seq 300); do
  if [ -s "$tmp/run_prom/metrics.port" ] &&
    page=$(curl -sf "http://127.0.0.1:$(cat "$tmp/run_prom/metrics.port")/metrics" 2> /dev/null) &&
    grep -q '^anvil_s3_requests_total{client="checkpoint",op="put"} [1-9]' <<< "$page"; then
    break
  fi
  page=
  sleep 0.1
done
kill -9 $pid 2> /dev/null
wait $pid 2> /dev/null
s3line() { grep "^$1" <<< "$page" | head -n 1; }
[ -n "$page" ] && grep -q '^anvil_s3_requests_total{client="data",op="get"} [1-9]' <<< "$page" &&
  grep -q '^anvil_s3_requests_total{client="data",op="list"} 1$' <<< "$page" &&
  grep -q '^anvil_s3_bytes_total{client="data",direction="down"} [1-9]' <<< "$page" &&
  grep -q '^anvil_s3_bytes_total{client="checkpoint",direction="up"} [1-9]' <<< "$page" &&
  grep -q '^anvil_s3_retries_total{client="data"} 0$' <<< "$page" &&
  grep -q '^anvil_s3_request_latency_seconds{client="data",quantile="0.99"} 0\.[0-9]' <<< "$page" &&
  ok "/metrics while training from S3: $(s3line 'anvil_s3_requests_total{client="data",op="get"}'), $(s3line 'anvil_s3_requests_total{client="checkpoint",op="put"}')" ||
  bad "/metrics of a run from S3: $(grep anvil_s3 <<< "$page" | tr '\n' ' ') $(cat "$tmp/prom.err")"

# Request discipline, counted at the proxy, on two 32 MiB shards read for one epoch through the
# loader (with its prefetch, which reads the next epoch's first blocks too).
probe=${LOADER_PROBE:-}
if [ -n "$probe" ] && [ -x "$probe" ]; then
  "$probe" write "$tmp/shards" 2 16776704 || bad "could not write the shards"
  for f in "$tmp/shards"/*.bin; do
    AWS_ENDPOINT_URL=$direct "$anvil" s3 cp "$f" "s3://anvil-test/shards/$(basename "$f")" 2> "$tmp/err" || bad "upload: $(cat "$tmp/err")"
  done
  want=$("$probe" read "$tmp/shards/train_*.bin" 8 1024 16 4 | head -n 1)
  # Prints "GETS PEAK GETS_PER_GIB SIZES", the sizes of the GETs' ranges in MiB.
  discipline() {
    ctl stats | python3 -c '
import json, sys
s = json.load(sys.stdin)
gets = s["counts"].get("GET", 0)
sizes = sorted({(int(b) - int(a) + 1) >> 20 for a, b in (r.split("=")[1].split("-") for r in s["ranges"])})
print(gets, s["peak"], round(gets * 2**30 / s["bytes_down"], 2), ",".join(map(str, sizes)))'
  }
  ctl reset > /dev/null
  got=$("$probe" read "s3://anvil-test/shards/train_*.bin" 8 1024 16 4 2> "$tmp/err" | head -n 1)
  [ -n "$want" ] && [ "$got" = "$want" ] && ok "an epoch from S3 reads the local shards' tokens ($got)" ||
    bad "loader from S3: '$got', want '$want': $(cat "$tmp/err")"
  read -r gets peak per_gib sizes <<< "$(discipline)"
  python3 -c "import sys; sys.exit(not ($per_gib <= 64 and $peak <= 4 and '$sizes' == '16'))" &&
    ok "16 MiB ranges: $gets GETs, $per_gib GETs per GiB (at most 64), peak $peak in flight (at most 4)" ||
    bad "discipline at 16 MiB: $gets GETs, $per_gib per GiB, peak $peak, range sizes $sizes MiB"
  ctl reset > /dev/null
  got=$("$probe" read "s3://anvil-test/shards/train_*.bin" 8 1024 4 3 2> "$tmp/err" | head -n 1)
  read -r gets peak per_gib sizes <<< "$(discipline)"
  [ "$got" = "$want" ] && python3 -c "import sys; sys.exit(not ($per_gib <= 256 and $peak <= 3 and '$sizes' == '4'))" &&
    ok "4 MiB ranges, 3 in flight: the same tokens, $gets GETs ($per_gib per GiB), peak $peak in flight (at most 3)" ||
    bad "discipline at 4 MiB: '$got', $gets GETs, $per_gib per GiB, peak $peak, sizes $sizes: $(cat "$tmp/err")"
  "$probe" read "s3://anvil-test/shards/train_*.bin" 8 1024 2 4 > /dev/null 2> "$tmp/err"
  rc=$?
  [ $rc = 1 ] && grep -q "at least 4194304" "$tmp/err" && ok "ranges under 4 MiB are refused" ||
    bad "a 2 MiB range: rc $rc, $(cat "$tmp/err")"
  # Faults while the loader streams: the same tokens, the retries counted.
  ctl reset > /dev/null
  ctl "fault?kind=reset&n=2" > /dev/null
  ctl "fault?kind=503&n=3&type=GET" > /dev/null
  "$probe" read "s3://anvil-test/shards/train_*.bin" 8 1024 16 4 > "$tmp/probe.out" 2> "$tmp/err"
  [ "$(head -n 1 "$tmp/probe.out")" = "$want" ] && [ "$(client_stat "$tmp/probe.out" retries)" -ge 5 ] &&
    ok "2 resets and 3 x 503 while streaming: the same tokens, $(client_stat "$tmp/probe.out" retries) retries counted" ||
    bad "faults while streaming: $(cat "$tmp/probe.out" "$tmp/err")"
  # Rank 3 of 8 for one epoch: the same tokens from S3 as locally in either layout; strided, the rank
  # reads a slice of every global batch and so GETs every block of both shards (two of 16 MiB each)
  # and the next epoch's first (and the one after it, read ahead, when the probe's close does not
  # stop that first): 5 or 6. Contiguous, only the blocks of its own stretch (8 MiB at the end of
  # shard 0: the header's block 0, then block 1) and, when the prefetch of the next epoch's first
  # batch (the next stretch, across the shard's end) runs before the probe closes, shard 1's
  # blocks 0 and 1 (read ahead): 2 to 4.
  for layout in strided contiguous; do
    want=$("$probe" read "$tmp/shards/train_*.bin" 8 1024 16 4 $layout 3 8 | head -n 1)
    ctl reset > /dev/null
    got=$("$probe" read "s3://anvil-test/shards/train_*.bin" 8 1024 16 4 $layout 3 8 2> "$tmp/err" | head -n 1)
    [ -n "$want" ] && [ "$got" = "$want" ] || bad "rank 3 of 8, $layout, from S3: '$got', want '$want': $(cat "$tmp/err")"
    printf -v "gets_$layout" %s "$(count GET)"
  done
  [ "$gets_contiguous" -le 4 ] && [ "$gets_strided" -ge 5 ] &&
    ok "rank 3 of 8: the local tokens in both layouts; $gets_contiguous GETs contiguous, $gets_strided strided" ||
    bad "rank 3 of 8: $gets_contiguous GETs contiguous (at most 4), $gets_strided strided (at least 5)"
  ctl reset > /dev/null
else
  bad "LOADER_PROBE is not set to tests/tools/loader_probe (CTest sets it)"
fi

# Checkpoints to S3. A run uploading each checkpoint while PUTs are held 300 ms at the proxy is
# killed (-9) once step 4's upload has begun (objects of step 4 on S3, its index not); the local
# folder is deleted; --resume auto then downloads step 2, the newest checkpoint whose index exists,
# and the run ends with the uninterrupted run's model bytes.
ck=s3://anvil-test/ck
ck_args=("${train_args[@]}" --ckpt-every 2 --keep-last 2 --ckpt-uri "$ck" --ckpt-prefixes 4)
s3keys() { AWS_ENDPOINT_URL=$direct "$anvil" s3 ls "$ck/" 2> /dev/null | awk '{print $2}'; }
# The same listing by curl straight from radosgw (first 1000 keys): the kill below must land within
# the 300 ms that step 4's index PUT is held, and an ASan build of anvil takes about that to start.
s3keys_now() {
  curl -sf --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
    "$direct/anvil-test?list-type=2&prefix=ck%2F" | grep -o '<Key>[^<]*</Key>' | sed 's/<[^>]*>//g'
}
ctl reset > /dev/null
ctl "fault?kind=slow&n=1000&ms=300&type=PUT" > /dev/null
"$anvil" train --data "$tmp/data" "${ck_args[@]}" --out "$tmp/run_ck" > /dev/null 2> "$tmp/ck.err" &
pid=$!
for _ in $(seq 600); do
  keys=$(s3keys_now)
  grep -q '^ck/[0-9a-f][0-9a-f]/step_00000004/' <<< "$keys" && ! grep -q '^ck/step_00000004/' <<< "$keys" && break
  keys=
  sleep 0.05
done
kill -9 $pid 2> /dev/null
wait $pid 2> /dev/null
ctl reset > /dev/null
[ -n "$keys" ] && grep -qx 'ck/step_00000002/manifest.json' <<< "$keys" &&
  ok "killed -9 with step 4's objects uploading ($(grep -c step_00000004/ <<< "$keys") up, no index) after step 2's index" ||
  bad "the kill did not land in step 4's upload: $(tr '\n' ' ' <<< "$(s3keys)") $(cat "$tmp/ck.err")"
[ -d "$tmp/run_ck/ckpt/upload-step_00000004-host_0" ] || bad "the killed run left no staging folder: $(ls "$tmp/run_ck/ckpt")"
# The run folder goes, all but the staging folders a killed upload and a killed download leave.
find "$tmp/run_ck" -mindepth 1 -maxdepth 2 ! -path '*/ckpt' ! -name 'upload-step_*' -exec rm -rf {} +
mkdir -p "$tmp/run_ck/ckpt/download-step_00000006" && touch "$tmp/run_ck/ckpt/download-step_00000006/model.safetensors"
"$anvil" train --data "$tmp/data" "${ck_args[@]}" --out "$tmp/run_ck" --resume auto > /dev/null 2> "$tmp/err" &&
  grep -q "resumed from .*step_00000002 (step 2)" "$tmp/err" &&
  cmp -s "$tmp/run_local/model.safetensors" "$tmp/run_ck/model.safetensors" &&
  ok "resume auto from S3: step 2 downloaded, the final model equals the uninterrupted run's" ||
  bad "resume from S3 checkpoints: $(cat "$tmp/err")"
left=$(ls "$tmp/run_ck/ckpt" | grep -e '^upload-step_' -e '^download-step_')
[ -z "$left" ] && ok "the staging folders of the killed run are gone" || bad "staging folders left: $left"
# Retention: exactly the two newest indexes, and only their objects, spread over prefixes.
keys=$(s3keys)
idx=$(grep -c '^ck/step_[0-9]*/manifest.json$' <<< "$keys")
stray=$(grep -v -e 'step_00000006/' -e 'step_00000008/' <<< "$keys" | grep -c .)
hh=$(grep -o '^ck/[0-9a-f][0-9a-f]/' <<< "$keys" | sort -u | wc -l)
[ "$idx" = 2 ] && grep -qx 'ck/step_00000008/manifest.json' <<< "$keys" && [ "$stray" = 0 ] && [ "$hh" -ge 2 ] &&
  ok "keep-last 2 on S3: the indexes of steps 6 and 8 and their objects only, over $hh prefixes" ||
  bad "retention on S3: $idx indexes, $stray stray keys, $hh prefixes: $(tr '\n' ' ' <<< "$keys")"
# A flipped byte in an object: the download is refused with one line naming the key.
obj=$(grep '/step_00000008/model' <<< "$keys" | head -n 1)
[ -n "$obj" ] || obj=$(grep '^ck/[0-9a-f][0-9a-f]/step_00000008/' <<< "$keys" | head -n 1)
AWS_ENDPOINT_URL=$direct "$anvil" s3 cp "s3://anvil-test/$obj" "$tmp/obj" 2> /dev/null &&
  printf '\x5a' | dd of="$tmp/obj" bs=1 seek=100 conv=notrunc status=none &&
  AWS_ENDPOINT_URL=$direct "$anvil" s3 cp "$tmp/obj" "s3://anvil-test/$obj" 2> /dev/null || bad "could not corrupt $obj"
"$anvil" train --data "$tmp/data" "${ck_args[@]}" --out "$tmp/run_bad" --resume auto > /dev/null 2> "$tmp/err"
rc=$?
[ $rc != 0 ] && [ "$(grep -c "s3://anvil-test/$obj: CRC-32C" "$tmp/err")" = 1 ] && [ ! -d "$tmp/run_bad/ckpt/step_00000008" ] &&
  ok "a corrupted object is refused (exit $rc): $(grep CRC "$tmp/err")" || bad "corrupted object: rc $rc, $(cat "$tmp/err")"

# One uploader per host: 2 ranks with ZeRO-1 write a shard each, simulated as 2 hosts (the
# ANVIL_HOST_KEY test hook). Each host's uploader PUTs its own shard (once: rank 0 leaves rank 1's
# to rank 1's host) and host b's marker lists exactly that shard; rank 0 PUTs the index last, after
# every object of the step and the marker. Then the run folder goes, and with step 8's index
# deleted (step 8 no longer exists on S3; its objects and another run's marker remain),
# --resume auto downloads step 4 and ends with the first run's model bytes: the resumed run's rank
# 0 waits for its own run's marker of step 8, not the stale one.
if command -v mpirun > /dev/null; then
  hk=s3://anvil-test/hk
  hk_launch=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" OMP_NUM_THREADS=1 ANVIL_HOST_KEY=a,b timeout 120
    "$anvil" launch -n 2 --)
  hk_args=("${train_args[@]}" --batch 2 --zero 1 --no-health --ckpt-every 4 --keep-last 2 --ckpt-uri "$hk" --ckpt-prefixes 4)
  ctl reset > /dev/null
  "${hk_launch[@]}" train --data "$tmp/data" "${hk_args[@]}" --out "$tmp/run_hk" > /dev/null 2> "$tmp/hk.err" ||
    bad "2-rank run uploading per host: $(tail -n 3 "$tmp/hk.err")"
  ctl stats > "$tmp/hk.stats"
  # Prints the PUTs per shard file per step, then whether step 8's index came after its other PUTs.
  order=$(python3 -c '
import collections, json, sys
puts = json.load(open(sys.argv[1]))["puts"]
n = collections.Counter(p[p.index("step_"):] for p in puts if "/shard_" in p)
last = max(i for i, p in enumerate(puts) if "step_00000008/" in p)
print(" ".join(f"{k}:{v}" for k, v in sorted(n.items())), puts[last].endswith("/hk/step_00000008/manifest.json"))' "$tmp/hk.stats")
  [ "$order" = "step_00000004/shard_0_of_2.safetensors:1 step_00000004/shard_1_of_2.safetensors:1 step_00000008/shard_0_of_2.safetensors:1 step_00000008/shard_1_of_2.safetensors:1 True" ] &&
    ok "one uploader per host: each shard PUT once per step, the index last ($order)" ||
    bad "per-host uploads: $order; $(cat "$tmp/hk.stats")"
  AWS_ENDPOINT_URL=$direct "$anvil" s3 cp "$hk/step_00000008/hosts/rank_00001.json" "$tmp/marker.json" 2> "$tmp/err" &&
    python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))
sys.exit(not (m["host"] == "b" and [o["name"] for o in m["objects"]] == ["shard_1_of_2.safetensors"]))' "$tmp/marker.json" &&
    ok "host b's marker lists its uploader's one object, shard 1" || bad "host b's marker: $(cat "$tmp/marker.json" "$tmp/err")"
  keys=$(AWS_ENDPOINT_URL=$direct "$anvil" s3 ls "$hk/" 2> /dev/null | awk '{print $2}')
  [ "$(grep -c '/hosts/' <<< "$keys")" = 2 ] && cp "$tmp/run_hk/model.safetensors" "$tmp/hk_model" &&
    AWS_ENDPOINT_URL=$direct "$anvil" s3 rm "$hk/step_00000008/manifest.json" 2> /dev/null && rm -rf "$tmp/run_hk" &&
    "${hk_launch[@]}" train --data "$tmp/data" "${hk_args[@]}" --keep-last 1 --out "$tmp/run_hk" --resume auto > /dev/null 2> "$tmp/err" &&
    grep -q "resumed from .*step_00000004 (step 4)" "$tmp/err" && cmp -s "$tmp/hk_model" "$tmp/run_hk/model.safetensors" &&
    ok "2 hosts: resumed from S3 at step 4, the first run's model bytes" || bad "2-host resume from S3: $(cat "$tmp/err")"
  # The resumed run keeps the last 1: step 8 committed anew, step 4's index, objects and marker gone.
  keys=$(AWS_ENDPOINT_URL=$direct "$anvil" s3 ls "$hk/" 2> /dev/null | awk '{print $2}')
  grep -qx 'hk/step_00000008/manifest.json' <<< "$keys" && grep -qx 'hk/step_00000008/hosts/rank_00001.json' <<< "$keys" &&
    [ "$(grep -c step_00000004 <<< "$keys")" = 0 ] && [ "$(grep -c . <<< "$keys")" = 6 ] &&
    ok "keep-last 1 on S3 after the 2-host resume: step 8's 4 objects, marker and index only" ||
    bad "retention with markers: $(tr '\n' ' ' <<< "$keys")"
  # Host b's shard PUTs answered 503 until its uploader gives up: its marker says it failed, rank
  # 0 puts no index for the step and says so on one line, and the run exits 1.
  ctl reset > /dev/null
  ctl "fault?kind=503&n=1000&type=PUT&key=/shard_1_of_2" > /dev/null
  ANVIL_S3_MAX_ATTEMPTS=2 "${hk_launch[@]}" train --data "$tmp/data" "${hk_args[@]}" --steps 4 --ckpt-uri s3://anvil-test/hkf \
    --out "$tmp/run_hkf" > /dev/null 2> "$tmp/err"
  rc=$?
  ctl reset > /dev/null
  [ $rc = 1 ] && [ "$(grep -c 'not committed to s3://anvil-test/hkf: host b (uploader rank 1) failed to upload' "$tmp/err")" = 1 ] &&
    ! AWS_ENDPOINT_URL=$direct "$anvil" s3 ls s3://anvil-test/hkf/ 2> /dev/null | grep -q ' hkf/step_00000004/manifest.json$' &&
    ok "host b failed to upload: no index, one line, exit 1" || bad "a failed host: rc $rc, $(cat "$tmp/err")"
else
  missing "mpirun is not installed: no run with one uploader per host"
fi

# anvil chaos's S3 faults on a job of the service (the daemon below) that trains from the shards on
# S3 and uploads its checkpoints there: a twin without faults, then the same job struck by a 503
# SlowDown storm armed before it starts (its first requests: the shards' listing and reads) and by
# connections reset once step 60 is trained (the next transfers: step 100's checkpoint uploads; the
# shards, smaller than a read block, are not read again). The client's retries absorb both: the
# job Completes in one attempt with the twin's model bytes, each fault is in its history and
# priced as a stall, and the proxy's own counts show the faults were answered.
s3_chaos() {
  svc role add s3c --input-prefix s3://anvil-test/ds --output-prefix "$tmp/runs" --output-prefix s3://anvil-test/svc \
    --max-procs 1 --max-runtime-s 0 --env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" > /dev/null &&
    svc role grant s3c admin > /dev/null || bad "role s3c"
  local args=(train --data s3://anvil-test/ds --preset tiny --batch 4 --seq 64 --steps 200 --ckpt-every 50
    --no-progress --sample-every -1 --seed 9 --threads 1)
  local twin id rc
  sjob() { ANVIL_TOKEN=$serve_token timeout 300 "$anvil" job --state "$st" "$@"; }
  twin=$(sjob submit --role s3c --name twin --output "$tmp/runs/twin" -- "${args[@]}" --ckpt-uri s3://anvil-test/svc/twin |
    grep -o 'job [0-9]*' | cut -d' ' -f2)
  sjob wait "$twin" > /dev/null 2>&1 || bad "the unfaulted twin: $(tail -n 3 "$tmp/runs/twin/logs/launcher.log")"
  svc chaos "$twin" --schedule "1s s3-503" > /dev/null 2> "$tmp/err"
  rc=$?
  [ $rc = 2 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q -- "--s3-proxy" "$tmp/err" &&
    ok "S3 faults without --s3-proxy: $(cat "$tmp/err")" || bad "no --s3-proxy: rc $rc, $(cat "$tmp/err")"
  svc chaos "$twin" --schedule "1s s3-reset" --s3-proxy http://127.0.0.1:9 > /dev/null 2> "$tmp/err"
  rc=$?
  [ $rc = 1 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q -- "--s3-proxy: http://127.0.0.1:9/__ctl/stats" "$tmp/err" &&
    ok "a proxy that does not answer: $(cat "$tmp/err")" || bad "unreachable --s3-proxy: rc $rc, $(cat "$tmp/err")"
  ctl reset > /dev/null
  id=$(sjob submit --role s3c --name struck --output "$tmp/runs/struck" -- "${args[@]}" --ckpt-uri s3://anvil-test/svc/struck |
    grep -o 'job [0-9]*' | cut -d' ' -f2)
  ANVIL_TOKEN=$serve_token timeout 300 "$anvil" chaos --state "$st" "$id" --s3-proxy "$AWS_ENDPOINT_URL/" \
    --schedule "0s s3-503:5, step:60 s3-reset:2" > "$tmp/chaos.out" 2> "$tmp/err"
  rc=$?
  ctl stats > "$tmp/chaos.stats"
  ctl reset > /dev/null
  [ $rc = 0 ] && cmp -s "$tmp/runs/twin/model.safetensors" "$tmp/runs/struck/model.safetensors" &&
    ok "struck by s3-503 and s3-reset: Completed, the twin's model bytes" ||
    bad "chaos with S3 faults: rc $rc, $(cat "$tmp/err" "$tmp/chaos.out")"
  sjob --json describe "$id" > "$tmp/struck.json"
  sjob --json goodput "$id" > "$tmp/struck_gp.json"
  python3 - "$tmp/chaos.stats" "$tmp/struck.json" "$tmp/struck_gp.json" << 'EOF' > "$tmp/gp.out" 2>&1 &&
import json, sys
s, j, g = (json.load(open(p)) for p in sys.argv[1:])
f = {x["kind"]: x["struck"] for x in s["faults"]}
assert s["struck"] == {"503": 5, "reset": 2}, s["struck"]
assert set(f["503"]) & {"GET", "LIST", "HEAD"} and set(f["reset"]) & {"PUT", "PART"}, f
print(f"the proxy answered 5 x 503 ({f['503']}) and reset 2 transfers ({f['reset']});")
for kind in ("s3-503", "s3-reset"):
    assert any(e["secondary_status"] == "Fault" and e["message"].startswith(f"fault injected: {kind} (attempt 1): ")
               and "S3 requests through" in e["message"] for e in j["history"]), f"no {kind} in the history"
faults = g["faults"]
assert [x["kind"] for x in faults] == ["s3-503", "s3-reset"] and len(g["attempts"]) == 1, (faults, g["attempts"])
assert all(x["detection_s"] == 0 and x["restart_s"] == 0 and x["lost_s"] == x["stall_s"] >= 0 for x in faults), faults
print("the history names both; one attempt; goodput prices them as stalls: "
      + ", ".join(f"{x['kind']} {x['stall_s']:.2f} s" for x in faults) + f", ETTR {g['ettr']:.1%}")
EOF
    ok "$(tr '\n' ' ' < "$tmp/gp.out")" || bad "S3 faults at the proxy, in the history and goodput: $(cat "$tmp/gp.out")"
  # A storm longer than the client's attempts (2, by the spec's env) fails a checkpoint upload (step
  # 150's) and with it the attempt; the service retries it from its last checkpoint, and the job
  # still ends with the twin's model bytes. Goodput prices the storm as the fault that ended attempt 1.
  ctl reset > /dev/null
  id=$(sjob submit --role s3c --name exhaust --max-retries 2 --env ANVIL_S3_MAX_ATTEMPTS=2 --output "$tmp/runs/exhaust" -- \
    "${args[@]}" --ckpt-uri s3://anvil-test/svc/exhaust | grep -o 'job [0-9]*' | cut -d' ' -f2)
  ANVIL_TOKEN=$serve_token timeout 300 "$anvil" chaos --state "$st" "$id" --s3-proxy "$AWS_ENDPOINT_URL" \
    --schedule "step:120 s3-503:4" > "$tmp/chaos.out" 2> "$tmp/err"
  rc=$?
  ctl reset > /dev/null
  sjob --json goodput "$id" > "$tmp/exhaust_gp.json"
  [ $rc = 0 ] && cmp -s "$tmp/runs/twin/model.safetensors" "$tmp/runs/exhaust/model.safetensors" &&
    python3 - "$tmp/exhaust_gp.json" << 'EOF' > "$tmp/gp.out" 2>&1 && ok "$(cat "$tmp/gp.out")" ||
import json, sys
g = json.load(open(sys.argv[1]))
f = g["faults"]
assert len(g["attempts"]) == 2 and [x["kind"] for x in f] == ["s3-503"] and f[0]["attempt"] == 1, (g["attempts"], f)
assert f[0]["detection_s"] > 0 and f[0]["restart_s"] > 0 and f[0]["stall_s"] == 0, f
print(f"a storm the retries did not absorb failed attempt 1; the retry Completed with the twin's model bytes;"
      f" goodput: lost {f[0]['lost_s']:.2f} s = detection {f[0]['detection_s']:.2f} + recomputed"
      f" {f[0]['recomputed_s']:.2f} + restart {f[0]['restart_s']:.2f}")
EOF
    bad "a storm past the retries: rc $rc, $(cat "$tmp/err" "$tmp/chaos.out" "$tmp/gp.out" 2> /dev/null)"
}

# ---- the job service: object storage belongs to the role ----
# A role's jobs get the endpoint and keys of its section of the daemon's --s3-config, and nothing of
# the daemon's own AWS variables (this script's); a spec names neither an endpoint nor a key, nor an
# object outside the role's s3:// prefixes.
if command -v mpirun > /dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  st=$tmp/serve
  serve_token=$("$anvil" serve --init --state "$st" 2> /dev/null) || bad "serve --init"
  # Role s3c is s3_chaos's.
  for r in s3r s3c; do
    printf '[%s]\nendpoint_url = %s\nregion = %s\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
      "$r" "$AWS_ENDPOINT_URL" "$AWS_REGION" "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY"
  done > "$tmp/s3roles.ini"
  chmod 644 "$tmp/s3roles.ini"
  "$anvil" serve --state "$st" --port 0 --s3-config "$tmp/s3roles.ini" > /dev/null 2> "$tmp/err"
  [ $? = 1 ] && grep -q "holds credentials, so others may not read it (chmod 600" "$tmp/err" &&
    ok "--s3-config readable by others: refused" || bad "--s3-config mode 644: $(cat "$tmp/err")"
  chmod 600 "$tmp/s3roles.ini"
  "$anvil" serve --state "$st" --port 0 --s3-config "$tmp/s3roles.ini" >> "$tmp/serve.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [ -s "$st/serve.port" ] && break; sleep 0.05; done
  svc() { ANVIL_TOKEN=$serve_token timeout 120 "$anvil" "$@" --state "$st"; }
  for r in s3r nos3; do
    svc role add "$r" --input-prefix s3://anvil-test/raw --input-prefix "$tmp" --output-prefix "$tmp/runs" \
      --max-procs 1 --max-runtime-s 0 --env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" > /dev/null &&
      svc role grant "$r" admin > /dev/null || bad "role $r"
  done
  "$anvil" prep --out "$tmp/prep_one" --delimiter '\n' --no-progress "$tmp/corpus.txt.gz" > /dev/null 2>&1 ||
    bad "local prep of the corpus"
  ctl reset > /dev/null
  ANVIL_TOKEN=$serve_token timeout 120 "$anvil" job --state "$st" submit --role s3r --name s3in --output "$tmp/runs/s3in" -- \
    prep s3://anvil-test/raw/corpus.txt.gz --delimiter '\n' --no-progress > /dev/null 2> "$tmp/err" || bad "submit: $(cat "$tmp/err")"
  ANVIL_TOKEN=$serve_token timeout 120 "$anvil" job --state "$st" wait 1 > "$tmp/out" 2>&1 &&
    cmp -s "$tmp/prep_one/train_000000.bin" "$tmp/runs/s3in/train_000000.bin" && [ "$(count GET)" -ge 1 ] &&
    ok "a job of role s3r read s3:// through the role's endpoint and keys ($(count GET) GET at the proxy): the local shards" ||
    bad "role s3r's job: $(cat "$tmp/out"; tail -n 3 "$tmp/runs/s3in/logs/launcher.log")"
  ANVIL_TOKEN=$serve_token timeout 120 "$anvil" job --state "$st" submit --role nos3 --name nos3 --output "$tmp/runs/nos3" -- \
    prep s3://anvil-test/raw/corpus.txt.gz --no-progress > /dev/null 2> "$tmp/err" || bad "submit: $(cat "$tmp/err")"
  ANVIL_TOKEN=$serve_token timeout 120 "$anvil" job --state "$st" wait 2 > /dev/null 2>&1
  ANVIL_TOKEN=$serve_token timeout 60 "$anvil" job --state "$st" --json describe 2 > "$tmp/nos3.json"
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(not (j['status'] == 'Failed' and 'no credentials' in j['failure_reason']))" \
    "$tmp/nos3.json" && ok "role nos3 has no section: its job has no credentials, not the daemon's" ||
    bad "role nos3's job: $(cat "$tmp/nos3.json")"
  port=$(cat "$st/serve.port")
  post() { curl -s -o "$tmp/answer" -w '%{http_code}' -H "Authorization: Bearer $serve_token" -X POST \
             "http://127.0.0.1:$port/v1/jobs" --data-binary "$1"; }
  [ "$(post '{"name": "x", "role": "s3r", "command": ["prep", "s3://anvil-test/mp/big"]}')" = 403 ] &&
    grep -q "s3://anvil-test/mp/big is outside role s3r's S3 input and output prefixes (s3://anvil-test/raw)" "$tmp/answer" &&
    ok "an object outside the role's S3 prefixes: 403 $(cat "$tmp/answer")" || bad "outside the S3 prefixes: $(cat "$tmp/answer")"
  [ "$(post '{"name": "x", "role": "s3r", "command": ["prep", "s3://anvil-test/raw/corpus.txt.gz"],
              "env": {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}}')" = 403 ] && grep -q "env.AWS_ENDPOINT_URL" "$tmp/answer" &&
    ok "an endpoint in the spec: 403" || bad "endpoint in the spec: $(cat "$tmp/answer")"
  s3_chaos
  kill $daemon
  wait $daemon
else
  missing "mpirun is not installed: no job of the service reads S3"
fi

finish
