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
#     operand outside the prefixes: 403; a command the table cannot parse: 400;
#   - 300 slow connections (a header line every 2 s, never a whole head, reopened as soon as the
#     daemon closes them): an authenticated client answered within 1 s each time (the figure printed);
#   - hook URLs whose user part names another host: refused at start, exit 2;
#   - strict JSON: a NUL in a string (the name, an env key), bytes that are not UTF-8, a key twice
#     inside resources: 400 naming the field, nothing stored;
#   - logs?offset=2^63-1: 200 and nothing, no path of the daemon's; 500 query parameters: an HTTP
#     answer (400) and an audit row; alice's GET /v1/roles names no other user; 1e999 says finite;
#   - a state.db whose tokens or users page is damaged: refused at start, one line naming the table,
#     exit 1; `serve --backup` copies a running daemon's state, and the copy restores it.
. "$(dirname "$0")/tools/cli_common.sh"
command -v curl > /dev/null || { echo "SKIP: curl is not installed"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
state=$tmp/state
mkdir -p "$tmp/data/nlp" "$tmp/runs/nlp" "$tmp/outside"
printf 'In the beginning.\n' > "$tmp/data/nlp/x.txt"

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

# ---- 300 slow connections: an authenticated client is still answered within 1 s ----
python3 - "$port" "$tmp/slow" << 'PY' &
import socket, sys, time
port, out = int(sys.argv[1]), sys.argv[2]
closed, until = 0, time.time() + 16
def opened():
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=1)
        s.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n")
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
            s.sendall(b"X-Slow: 1\r\n")
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
slow=$!
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
  "$anvil" serve --state "$tmp/damaged_$table" --port 0 > /dev/null 2> "$tmp/err"
  rc=$?
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
