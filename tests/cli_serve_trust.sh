#!/usr/bin/env bash
# The job service's trust boundary, tried as an attacker would (issue 31): one `anvil serve` on
# 127.0.0.1, a non-admin user alice whose role reads $tmp/data/nlp and writes $tmp/runs/nlp (bob
# holds the role too), and each attack that once got through:
#   - a job without output runs in the daemon's own STATE/runs/<id> (README: the service's own
#     place, not under the role's prefixes), and job submit says so;
#   - env: Open MPI's fork agent (which ran a shell as the daemon's user), OPAL_PREFIX, PMIx's,
#     Slurm's, the loader's, the shell's and AWS's variables: 403 naming the variable, and the fork
#     agent's file never written;
#   - s3:// arguments: outside the role's (absent) S3 prefixes, 403, with AWS_ENDPOINT_URL in env or
#     not; the submitter's listener never contacted;
#   - a bare '..' (from an output at the prefix itself, and from the daemon's run folder) and an
#     operand outside the prefixes: 403, naming the path as given, not where it leads; a command the
#     table cannot parse: 400;
#   - an output reached through a link to a folder whose name holds a newline: 403; --metrics-port 80:
#     403;
#   - a run folder another user's unfinished job writes: 409 without that job's id (the owner's own
#     409 names it);
#   - train --data DIR/'*' (a folder named '*' beside a link to shards outside the role): the job
#     matches DIR/'*''s own shards (none: Failed), not the link's; a checked folder whose train shard
#     is a link out of the role: Failed, the job naming the shard; the same data inside: Completed;
#   - 2000 bad tokens as fast as they go: every one 401, an authenticated client answered within
#     1 s meanwhile, and the audit trail holds 10 of their rows and one counting the other 1990;
#   - a body trickled a byte a second by a token holder: cut off at the request's 10 s deadline;
#   - 300 slow bodies (a token holder's, a byte every 2 s, reopened as soon as the daemon closes
#     them) and then 300 slow connections (a header line every 2 s, never a whole head): an
#     authenticated client answered within 1 s each time (the figures printed);
#   - hook URLs whose user part names another host: refused at start, exit 2;
#   - strict JSON: a NUL in a string (the name, an env key), bytes that are not UTF-8, a key twice
#     inside resources: 400 naming the field, nothing stored;
#   - logs?offset=2^63-1: 200 and nothing, no path of the daemon's; 500 query parameters: an HTTP
#     answer (400) and an audit row; alice's GET /v1/roles names no other user; 1e999 says finite;
#   - a state.db whose tokens or users page is damaged: refused at start, one line naming the table,
#     exit 1, the file as it was found (checked before any write); `serve --backup` copies a running
#     daemon's state, and the copy restores it.
. "$(dirname "$0")/tools/cli_common.sh"
command -v curl > /dev/null || { echo "SKIP: curl is not installed"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
state=$tmp/state
mkdir -p "$tmp/data/nlp" "$tmp/runs/nlp" "$tmp/outside"
printf 'In the beginning.\n' > "$tmp/data/nlp/x.txt"
# A prep folder to train on, and a small training that reads it.
for i in $(seq 300); do printf 'line %d of a text to train on.\n' "$i"; done > "$tmp/text.txt"
"$anvil" prep --out "$tmp/prepped" --delimiter '\n' --val-fraction 0.1 "$tmp/text.txt" > /dev/null 2>&1 || bad "prep"
tiny='"--layers", "1", "--heads", "1", "--embd", "8", "--batch", "1", "--seq", "8", "--steps", "1", "--val-batches", "1",
      "--sample-every", "-1", "--no-progress", "--threads", "1"'

"$anvil" serve --init --state "$state" > "$tmp/token" 2> /dev/null || { bad "serve --init"; finish; }
admin_token=$(cat "$tmp/token")
export ANVIL_TOKEN=$admin_token
start_daemon() { # state folder, log
  rm -f "$1/serve.port"
  "$anvil" serve --state "$1" --port 0 --stop-grace 3 >> "$2" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [ -s "$1/serve.port" ] && break; sleep 0.05; done
  port=$(cat "$1/serve.port" 2> /dev/null) || { bad "the daemon did not start: $(tail -n 1 "$2")"; finish; }
}
start_daemon "$state" "$tmp/serve.log"
admin() { timeout 60 "$anvil" "$1" --state "$state" "${@:2}"; }
alice=$(admin user add alice 2> /dev/null) && bob=$(admin user add bob 2> /dev/null) || bad "user add"
admin role add nlp --input-prefix "$tmp/data/nlp" --output-prefix "$tmp/runs/nlp" --max-procs 2 --max-runtime-s 0 \
  --env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" > /dev/null && admin role grant nlp alice > /dev/null &&
  admin role grant nlp bob > /dev/null || bad "the role"

# `call TOKEN METHOD PATH [BODY]` prints the HTTP status; the answer is in $tmp/answer.
call() {
  local auth=()
  [ "$1" != - ] && auth=(-H "Authorization: Bearer $1")
  curl -s -o "$tmp/answer" -w '%{http_code}' "${auth[@]}" -X "$2" "http://127.0.0.1:$port$3" ${4:+--data-binary "$4"}
}
njobs() { call "$admin_token" GET /v1/jobs > /dev/null && python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['jobs']))" "$tmp/answer"; }
# `refused CODE WHAT BODY`: alice's submission answered CODE, one line of JSON naming WHAT (a regex).
refused() {
  local got
  got=$(call "$alice" POST /v1/jobs "$3")
  if [ "$got" = "$1" ] && [ "$(wc -l < "$tmp/answer")" = 1 ] && grep -q "\"error\":\".*$2" "$tmp/answer"; then
    ok "$1: $(cut -c1-220 "$tmp/answer")"
  else bad "expected $1 naming '$2', got $got: $(cat "$tmp/answer")"; fi
}
# ---- the default run folder: the service's own, whatever the role's output prefixes ----
echo '{"name": "default", "command": ["train", "--synthetic", "--steps", "1", "--sample-every", "-1"]}' > "$tmp/default.json"
ANVIL_TOKEN=$alice timeout 60 "$anvil" job --state "$state" submit "$tmp/default.json" > "$tmp/out" 2> "$tmp/err"
default_id=$(sed -n 's/^submitted job \([0-9]*\) .*/\1/p' "$tmp/out")
if grep -Eq "^submitted job [0-9]+ \(default, role nlp\), run folder $(realpath "$state")/runs/[0-9]+ \(the service's own: the spec gives no output\)$" "$tmp/out"; then
  ok "no output under a role with output prefixes: the service's own run folder, and submit says so"
else bad "the default run folder: $(cat "$tmp/out" "$tmp/err")"; fi
[ -n "$default_id" ] && ANVIL_TOKEN=$alice timeout 120 "$anvil" job --state "$state" wait "$default_id" > /dev/null 2>&1
before=$(njobs)

# ---- env: only what the service documents passes ----
refused 403 "env.OMPI_MCA_orte_fork_agent: not a variable a job may set" \
  "{\"name\": \"fa\", \"command\": [\"prep\", \"$tmp/data/nlp/x.txt\"], \"output\": \"$tmp/runs/nlp/fa\",
    \"env\": {\"OMPI_MCA_orte_fork_agent\": \"/bin/sh -c id>$tmp/outside/PWNED\"}}"
for var in OPAL_PREFIX PMIX_MCA_ptl SLURM_CONF LD_PRELOAD LD_LIBRARY_PATH PATH BASH_ENV ENV SHELL IFS \
           AWS_ENDPOINT_URL AWS_ACCESS_KEY_ID PYTHONPATH; do
  refused 403 "env.$var: not a variable a job may set" "{\"name\": \"e\", \"command\": [\"train\"], \"env\": {\"$var\": \"x\"}}"
done

# ---- s3:// is checked against the role's S3 prefixes; endpoints come from the daemon alone ----
python3 -c "
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def handle_one_request(self):
        open(sys.argv[1], 'a').write('contacted\n')
        return super().handle_one_request()
    def do_HEAD(self): self.send_response(404); self.end_headers()
    do_GET = do_HEAD
    def log_message(self, *a): pass
s = http.server.HTTPServer(('127.0.0.1', 0), H)
open(sys.argv[2], 'w').write(str(s.server_port))
s.serve_forever()" "$tmp/listener.log" "$tmp/listener_port" &
listener=$!
for _ in $(seq 100); do [ -s "$tmp/listener_port" ] && break; sleep 0.05; done
lport=$(cat "$tmp/listener_port")
refused 403 "env.AWS_ENDPOINT_URL: not a variable a job may set" \
  "{\"name\": \"s3\", \"command\": [\"prep\", \"s3://bucket/doc.txt\"], \"output\": \"$tmp/runs/nlp/s3\",
    \"env\": {\"AWS_ENDPOINT_URL\": \"http://127.0.0.1:$lport\", \"AWS_ACCESS_KEY_ID\": \"k\", \"AWS_SECRET_ACCESS_KEY\": \"s\"}}"
refused 403 "command\[1\]: s3://bucket/doc.txt is outside role nlp's S3 input and output prefixes (none)" \
  "{\"name\": \"s3\", \"command\": [\"prep\", \"s3://bucket/doc.txt\"], \"output\": \"$tmp/runs/nlp/s3\"}"
refused 403 "(--data): s3://bucket/d is outside role nlp's S3" \
  "{\"name\": \"s3\", \"command\": [\"train\", \"--data\", \"s3://bucket/d\"]}"

# ---- the command as its table knows it: a bare '..', operands, what does not parse ----
refused 403 "command\[2\] (--data): $tmp/runs/nlp/.. is outside role nlp's" \
  "{\"name\": \"dd\", \"command\": [\"train\", \"--data\", \"..\"], \"output\": \"$tmp/runs/nlp\"}"
grep -q "resolved" "$tmp/answer" && bad "the refusal says where the path leads: $(cat "$tmp/answer")"
refused 403 "command\[2\] (--data): ..: '..' would leave the job's run folder" \
  "{\"name\": \"dd\", \"command\": [\"train\", \"--data\", \"..\"]}"
refused 403 "command\[1\]: /etc/passwd is outside role nlp's" "{\"name\": \"p\", \"command\": [\"prep\", \"/etc/passwd\"]}"
refused 403 "command\[2\] (--init): $tmp/outside/m.safetensors" \
  "{\"name\": \"i\", \"command\": [\"train\", \"--init\", \"$tmp/outside/m.safetensors\"]}"
refused 400 "command: unknown option '--frobnicate'" "{\"name\": \"u\", \"command\": [\"train\", \"--frobnicate\", \"1\"]}"
refused 400 "command: unexpected argument 'x'" "{\"name\": \"u\", \"command\": [\"train\", \"x\"]}"
refused 400 "'info' is not an anvil subcommand a job can run (train, prep, export)" \
  "{\"name\": \"u\", \"command\": [\"info\"]}"

# ---- strict JSON: 400 naming the field ----
refused 400 'spec: name: a string may not hold \\\\u0000 (NUL)' '{"name": "ab\u0000cd", "command": ["train"]}'
refused 400 'spec: env.OK\\\\u0000LD_PRELOAD: a string may not hold \\\\u0000 (NUL)' \
  '{"name": "n", "command": ["train"], "env": {"OK\u0000LD_PRELOAD": "/x.so"}}'
refused 400 "spec: name: not valid UTF-8" "$(printf '{"name": "caf\xe9", "command": ["train"]}')"
refused 400 "spec: resources.hosts: given twice" '{"name": "d", "command": ["train"], "resources": {"hosts": 1, "hosts": 2}}'
refused 400 "spec: max_runtime_s: must be a finite number" '{"name": "x", "command": ["train"], "max_runtime_s": 1e999}'
# ---- control characters: no path holds one, as given or where its links lead (an #SBATCH line
# cannot carry a newline); --metrics-port below 1024 ----
mkdir -p "$tmp/runs/nlp/a"$'\n'"b" && ln -s "$tmp/runs/nlp/a"$'\n'"b" "$tmp/runs/nlp/nl"
refused 403 "output: $tmp/runs/nlp/nl leads to a path with a control character" \
  "{\"name\": \"nl\", \"command\": [\"train\", \"--synthetic\"], \"output\": \"$tmp/runs/nlp/nl\"}"
refused 403 "command\[2\] (--metrics-port): 80 is a privileged port" \
  '{"name": "m", "command": ["train", "--metrics-port", "80"]}'
[ "$(njobs)" = "$before" ] && ok "no refused submission stored a job" || bad "refused submissions stored jobs"
sleep 2
[ ! -e "$tmp/outside/PWNED" ] && ok "the fork agent never ran" || bad "the fork agent ran: $(cat "$tmp/outside/PWNED")"
[ ! -s "$tmp/listener.log" ] && ok "the submitter's S3 endpoint was never contacted" || bad "the listener was contacted"

# ---- answers: 4xx for the client's faults, no path of the daemon's, an answer to everything ----
cat > "$tmp/ok.json" << EOF
{"name": "ok", "command": ["prep", "x.txt", "--val-fraction", "0"], "output": "$tmp/runs/nlp/ok"}
EOF
mkdir -p "$tmp/runs/nlp/ok"
cp "$tmp/data/nlp/x.txt" "$tmp/runs/nlp/ok/x.txt"
[ "$(call "$alice" POST /v1/jobs "$(cat "$tmp/ok.json")")" = 201 ] || bad "alice's job: $(cat "$tmp/answer")"
id=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['id'])" "$tmp/answer")
# The log must exist: an offset past its end once made pread fail, a 500 naming the log's path.
for _ in $(seq 300); do [ -s "$tmp/runs/nlp/ok/logs/launcher.log" ] && break; sleep 0.1; done
code=$(call "$alice" GET "/v1/jobs/$id/logs?offset=9223372036854775807")
[ "$code" = 200 ] && [ ! -s "$tmp/answer" ] && ok "logs past the end: 200, nothing" ||
  bad "logs?offset=2^63-1: $code $(cat "$tmp/answer")"
q=$(python3 -c "print('&'.join('a%d=1' % i for i in range(500)))")
code=$(call "$alice" GET "/v1/jobs?$q")
[ "$code" = 400 ] && grep -q '"error":"query: 500 parameters, more than any endpoint takes"' "$tmp/answer" &&
  ok "500 query parameters: $code $(cat "$tmp/answer")" || bad "500 query parameters: $code $(cat "$tmp/answer")"
call "$admin_token" GET "/v1/audit?user=alice&limit=1" > /dev/null
python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['audit'][-1]; sys.exit(not (r['result'] == 400 and 'query: 500' in r['detail']))" \
  "$tmp/answer" && ok "... and its audit row" || bad "no audit row for the 500 parameters: $(cat "$tmp/answer")"
[ "$(call "$alice" GET /v1/roles)" = 200 ] &&
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['roles']; sys.exit(not (len(r) == 1 and r[0]['users'] == ['alice']))" \
  "$tmp/answer" && ok "alice's role listing names alice alone" || bad "alice's roles: $(cat "$tmp/answer")"
[ "$(call "$admin_token" GET /v1/roles)" = 200 ] && grep -q '"users":\["alice","bob"\]' "$tmp/answer" &&
  ok "the admin's names both" || bad "admin's roles: $(cat "$tmp/answer")"
grep -q "$state" "$tmp/answer" && bad "an answer names the state folder"

# ---- a run folder another user's unfinished job writes: 409, without naming that job ----
busy="{\"name\": \"busy\", \"command\": [\"train\", \"--synthetic\", \"--steps\", \"1000000\", \"--sample-every\", \"-1\"],
      \"output\": \"$tmp/runs/nlp/busy\"}"
mkdir -p "$tmp/runs/nlp/busy"
[ "$(call "$bob" POST /v1/jobs "$busy")" = 201 ] || bad "bob's job: $(cat "$tmp/answer")"
busy_id=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['id'])" "$tmp/answer")
refused 409 "spec: output: $tmp/runs/nlp/busy is the run folder of another user's job, which has not ended" "$busy"
grep -q "job $busy_id" "$tmp/answer" && bad "alice's 409 names bob's job: $(cat "$tmp/answer")"
[ "$(call "$bob" POST /v1/jobs "$busy")" = 409 ] && grep -q "is the run folder of job $busy_id, which" "$tmp/answer" &&
  ok "bob's own 409 names his job: $(cat "$tmp/answer")" || bad "bob's 409: $(cat "$tmp/answer")"
call "$bob" POST "/v1/jobs/$busy_id/stop" > /dev/null

# ---- a job's data files stay inside its role ----
# --data with a folder named '*': its own shards (none here), not what a wildcard would match (a link
# to shards outside the role).
mkdir -p "$tmp/data/nlp/*" "$tmp/outside/shards" "$tmp/data/nlp/set" "$tmp/data/nlp/good"
cp "$tmp/prepped/"* "$tmp/data/nlp/good/"
cp "$tmp/prepped/manifest.json" "$tmp/data/nlp/*/"
cp "$tmp/prepped/"*.bin "$tmp/outside/shards/"
ln -s "$tmp/outside/shards" "$tmp/data/nlp/lnk"
# A checked folder whose train shard is a link out of the role.
cp "$tmp/prepped/manifest.json" "$tmp/prepped/"val_*.bin "$tmp/data/nlp/set/"
ln -s "$tmp/outside/shards/train_000000.bin" "$tmp/data/nlp/set/train_000000.bin"
data_job() { # name, --data folder: the job's id in $jid
  mkdir -p "$tmp/runs/nlp/$1"
  jid=
  [ "$(call "$alice" POST /v1/jobs "{\"name\": \"$1\", \"command\": [\"train\", \"--data\", \"$2\", $tiny],
        \"output\": \"$tmp/runs/nlp/$1\"}")" = 201 ] || { bad "the $1 job: $(cat "$tmp/answer")"; return; }
  jid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['id'])" "$tmp/answer")
}
data_job star "$tmp/data/nlp/*" && star_id=$jid
data_job linked "$tmp/data/nlp/set" && linked_id=$jid
data_job good "$tmp/data/nlp/good" && good_id=$jid
for j in "star:$star_id:Failed:no files match '$tmp/data/nlp/\\*/train_*.bin'" \
         "linked:$linked_id:Failed:shard $tmp/data/nlp/set/train_000000.bin: leads outside the job's role" \
         "good:$good_id:Completed:"; do
  IFS=: read -r name jid want log <<< "$j"
  [ -n "$jid" ] || continue
  ANVIL_TOKEN=$alice timeout 120 "$anvil" job --state "$state" wait "$jid" > /dev/null 2>&1
  call "$alice" GET "/v1/jobs/$jid" > /dev/null
  status=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['status'])" "$tmp/answer")
  if [ "$status" = "$want" ] && { [ -z "$log" ] || grep -qF "$log" "$tmp/runs/nlp/$name/logs/launcher.log"; }; then
    ok "the $name job: $status${log:+ ($log)}"
  else bad "the $name job: $status, not $want: $(tail -n 3 "$tmp/runs/nlp/$name/logs/launcher.log")"; fi
done

# ---- a flood of bad tokens: a few audit rows and a count, and the others still answered ----
audit_max() { python3 -c "import sqlite3,sys; print(sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True).execute('SELECT COALESCE(MAX(id), 0) FROM audit').fetchone()[0])" "$state/state.db"; }
first=$(audit_max)
python3 - "$port" "$tmp/flood" << 'PY' &
import socket, sys, threading
port, out, n, answers = int(sys.argv[1]), sys.argv[2], 2000, []
def worker(k):
    for _ in range(k):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer anv_not_a_token\r\n\r\n")
        got = b""
        while chunk := s.recv(4096):
            got += chunk
        answers.append(got.split(b" ", 2)[1] if got.startswith(b"HTTP/1.1 ") else b"none")
        s.close()
threads = [threading.Thread(target=worker, args=(n // 8,)) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
open(out, "w").write(f"{len(answers)} {answers.count(b'401')}\n")
PY
flood=$!
worst=0 fails_flood=0
for _ in $(seq 10); do
  t=$(curl -s -o /dev/null -m 5 -w '%{http_code} %{time_total}' -H "Authorization: Bearer $alice" "http://127.0.0.1:$port/v1/health")
  [ "${t%% *}" = 200 ] || fails_flood=$((fails_flood + 1))
  worst=$(python3 -c "print(max(float('$worst'), float('${t#* }')))")
  sleep 0.1
done
wait $flood
read -r sent unauthorized < "$tmp/flood"
python3 -c "import sys; sys.exit(not ($fails_flood == 0 and $worst < 1.0))" &&
  ok "during $sent bad-token requests ($unauthorized answered 401): 10 of 10 authenticated requests answered, the slowest in $worst s" ||
  bad "during the flood: $fails_flood of 10 requests unanswered, the slowest $worst s"

# ---- a body trickled a byte a second: cut off by the request's deadline (10 s) ----
python3 - "$port" "$alice" << 'PY' > "$tmp/trickle"
import socket, sys, time
port, token = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port))
t0 = time.time()
s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() + b"\r\nContent-Length: 100\r\n\r\n")
s.settimeout(1)
while time.time() - t0 < 16:
    try:
        s.sendall(b" ")
        if s.recv(4096) == b"":
            break
    except socket.timeout:
        continue
    except OSError:
        break
print(f"{time.time() - t0:.1f}")
PY
python3 -c "import sys; sys.exit(not 9.5 <= float(sys.argv[1]) <= 13)" "$(cat "$tmp/trickle")" &&
  ok "a body trickled a byte a second: closed after $(cat "$tmp/trickle") s" ||
  bad "a body trickled a byte a second: closed after $(cat "$tmp/trickle") s, not at the 10 s deadline"

# The flood's rows: at most 10 a 10 s window from 127.0.0.1, then one row counting the rest.
for _ in $(seq 60); do
  python3 - "$state/state.db" "$first" "$sent" << 'PY' > "$tmp/rows" && break
import re, sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
rows = db.execute("SELECT target, detail FROM audit WHERE id > ? AND action = 'auth'", (int(sys.argv[2]),)).fetchall()
counted = [int(m.group(1)) for t, d in rows if t == "127.0.0.1" and (m := re.match(r"(\d+) more unauthenticated requests from 127\.0\.0\.1 ", d))]
single = len(rows) - len(counted)
print(f"{single} {len(counted)} {sum(counted)}")
sys.exit(not (counted and single + sum(counted) == int(sys.argv[3])))
PY
  sleep 0.25
done
read -r single summaries counted < "$tmp/rows"
[ "$single" -le 20 ] && [ "$summaries" -ge 1 ] && [ $((single + counted)) = "$sent" ] &&
  ok "$sent bad tokens: $single audit rows of their own and $summaries counting the other $counted" ||
  bad "the flood's audit rows: $single single, $summaries summaries counting $counted, of $sent"

# 300 connections that each open with the first argument's bytes and send the second's every 2 s for 16 s,
# reopened as soon as the daemon closes them; meanwhile 20 authenticated requests, 0.5 s apart. Sets closed
# (how many the daemon closed), fails_slow and worst (the slowest answer's seconds).
slow_clients() {
  rm -f "$tmp/slow" "$tmp/slow.up"
  python3 - "$port" "$tmp/slow" "$1" "$2" << 'PY' &
import socket, sys, time
port, out = int(sys.argv[1]), sys.argv[2]
first, trickle = (a.encode().decode("unicode_escape").encode() for a in sys.argv[3:5])
closed, until = 0, time.time() + 16
def opened():
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=1)
        s.sendall(first)
        s.setblocking(False)
        return s
    except OSError:
        return None
socks = [opened() for _ in range(300)]
open(out + ".up", "w").write("300\n")
while time.time() < until:
    for i, s in enumerate(socks):
        try:
            if s is None:
                raise ConnectionError
            s.sendall(trickle)
            if s.recv(1, socket.MSG_PEEK) == b"":
                raise ConnectionError
        except BlockingIOError:
            continue
        except OSError:
            if s is not None:
                closed += 1
                s.close()
            socks[i] = opened()
    time.sleep(2)
open(out, "w").write(f"{closed}\n")
PY
  local slow=$! t
  for _ in $(seq 200); do [ -s "$tmp/slow.up" ] && break; sleep 0.05; done
  sleep 1
  worst=0 fails_slow=0
  for _ in $(seq 20); do
    t=$(curl -s -o /dev/null -m 5 -w '%{http_code} %{time_total}' -H "Authorization: Bearer $alice" \
          "http://127.0.0.1:$port/v1/health")
    [ "${t%% *}" = 200 ] || fails_slow=$((fails_slow + 1))
    worst=$(python3 -c "print(max(float('$worst'), float('${t#* }')))")
    sleep 0.5
  done
  wait $slow
  closed=$(cat "$tmp/slow" 2> /dev/null || echo 0)
}

# ---- 300 slow bodies from a token holder: an authenticated client is still answered within 1 s ----
slow_clients "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $alice\r\nContent-Length: 1000\r\n\r\n{" " "
python3 -c "import sys; sys.exit(not ($fails_slow == 0 and $worst < 1.0))" &&
  ok "300 slow bodies: 20 of 20 authenticated requests answered, the slowest in $worst s; the daemon closed $closed slow ones" ||
  bad "300 slow bodies: $fails_slow of 20 requests unanswered, the slowest $worst s (closed $closed)"

# ---- 300 slow connections: an authenticated client is still answered within 1 s ----
slow_clients "GET /v1/jobs HTTP/1.1\r\nHost: x\r\n" "X-Slow: 1\r\n"
python3 -c "import sys; sys.exit(not ($fails_slow == 0 and $worst < 1.0))" &&
  ok "300 slow connections: 20 of 20 authenticated requests answered, the slowest in $worst s; the daemon closed $closed slow ones" ||
  bad "300 slow connections: $fails_slow of 20 requests unanswered, the slowest $worst s (closed $closed)"
[ "$closed" -ge 300 ] && ok "every slow connection was closed by the head deadline or evicted" ||
  bad "only $closed slow connections were closed"

# ---- hook URLs: libcurl's parse, loopback hosts only, no user part ----
for url in "http://localhost:junk@127.0.0.1:$lport/x" "http://localhost:80@example.invalid/" \
           "http://127.0.0.1@example.invalid/" "https://127.0.0.1/" "http://example.invalid/"; do
  "$anvil" serve --state "$tmp/nostate" --port 0 --hook-url "$url" > /dev/null 2> "$tmp/err"
  rc=$?
  [ $rc = 2 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q "hook URL" "$tmp/err" && ok "hook URL refused: $(cat "$tmp/err")" ||
    bad "hook URL $url: exit $rc: $(cat "$tmp/err")"
done

# ---- the state: a backup of the running daemon, damage refused at start, the backup restores ----
"$anvil" serve --state "$state" --backup "$tmp/backup.db" 2> "$tmp/err" && [ -s "$tmp/backup.db" ] &&
  ok "serve --backup while the daemon runs: $(cat "$tmp/err")" || bad "serve --backup: $(cat "$tmp/err")"
kill $daemon
wait $daemon
for table in tokens users; do
  mkdir -p "$tmp/damaged_$table"
  cp "$tmp/backup.db" "$tmp/damaged_$table/state.db"
  python3 - "$tmp/damaged_$table/state.db" "$table" << 'PY'
import sqlite3, sys
path, table = sys.argv[1], sys.argv[2]
db = sqlite3.connect(path)
root = db.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,)).fetchone()[0]
size = db.execute("PRAGMA page_size").fetchone()[0]
db.close()
with open(path, "r+b") as f:  # the first cell's offset in the table's root page points past the page
    f.seek((root - 1) * size + 8)
    f.write(b"\xff\x7f\xff\x7f")
PY
  cp "$tmp/damaged_$table/state.db" "$tmp/damaged_$table/as_found.db"
  "$anvil" serve --state "$tmp/damaged_$table" --port 0 > /dev/null 2> "$tmp/err"
  rc=$?
  cmp -s "$tmp/damaged_$table/state.db" "$tmp/damaged_$table/as_found.db" && [ ! -e "$tmp/damaged_$table/state.db-wal" ] &&
    ok "damaged $table: the refused start wrote nothing to state.db" ||
    bad "damaged $table: the refused start changed state.db (the check must come before any write)"
  [ $rc = 1 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q "is damaged: .*(in table $table)" "$tmp/err" &&
    grep -q "restore it from a backup" "$tmp/err" && ok "damaged $table: exit 1, $(cat "$tmp/err")" ||
    bad "damaged $table page: exit $rc: $(cat "$tmp/err")"
  "$anvil" serve --state "$tmp/damaged_$table" --backup "$tmp/again.db" 2> "$tmp/err"
  [ $? = 1 ] && grep -q "not backed up" "$tmp/err" && ok "a damaged state is not backed up" ||
    bad "backup of a damaged state: $(cat "$tmp/err")"
done
# Salvaged without a backup, as README says: what .dump reads of the damaged tokens page, a sound
# database the daemon takes.
if command -v sqlite3 > /dev/null; then
  (cd "$tmp/damaged_tokens" && sqlite3 state.db .dump 2> /dev/null | sed 's/^ROLLBACK; -- due to errors$/COMMIT;/' > salvage.sql &&
    sqlite3 recovered.db < salvage.sql 2> /dev/null &&
    [ "$(sqlite3 recovered.db 'PRAGMA integrity_check')" = ok ] && mv state.db state.db.damaged &&
    rm -f state.db-wal state.db-shm && mv recovered.db state.db) || bad "the salvage of README's steps failed"
  start_daemon "$tmp/damaged_tokens" "$tmp/salvaged.log"
  # The tokens on the damaged page are gone with it; the users, on sound pages, are back.
  [ "$(sqlite3 "$tmp/damaged_tokens/state.db" 'SELECT name FROM users ORDER BY name' | tr '\n' ' ')" = "admin alice bob " ] &&
    ok "salvaged with .dump: the daemon starts on it, the users are back" || bad "the salvaged state lacks users"
  kill $daemon
  wait $daemon
else missing "sqlite3 (the shell) is not installed: README's salvage is not tried"; fi
# Restored as README says: the copy in place of state.db, its -wal and -shm gone.
rm -f "$tmp/damaged_users/state.db-wal" "$tmp/damaged_users/state.db-shm"
cp "$tmp/backup.db" "$tmp/damaged_users/state.db"
start_daemon "$tmp/damaged_users" "$tmp/restored.log"
[ "$(call "$alice" GET "/v1/jobs/$id")" = 200 ] && ok "the backup restores: alice's token and job are back" ||
  bad "restored state: $(cat "$tmp/answer")"
kill $daemon $listener
wait $daemon
wait $listener 2> /dev/null
finish
