# Sourced after cli_common.sh by the tests of the job service that run one daemon of their own, on the
# state folder $state (set first). serve_start [OPTION...] makes the folder's admin (its token in
# ANVIL_TOKEN), starts `anvil serve --port 0 --stop-grace 3 OPTION...` in the background (its pid in
# $daemon, its output appended to $tmp/serve.log), waits until it listens, and gives the admin the
# role "all", whose jobs read and write under $tmp. job and admin are its clients; field ID KEY...
# prints one field of a job's describe.
job() { timeout 120 "$anvil" job --state "$state" "$@"; }
admin() { timeout 60 "$anvil" "$1" --state "$state" "${@:2}"; }
field() { job --json describe "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)$(printf '["%s"]' "${@:2}"))"; }
serve_start() {
  "$anvil" serve --init --state "$state" > "$tmp/token" 2> /dev/null || bad "serve --init"
  export ANVIL_TOKEN=$(cat "$tmp/token")
  "$anvil" serve --state "$state" --port 0 --stop-grace 3 "$@" >> "$tmp/serve.log" 2>&1 &
  daemon=$!
  for _ in $(seq 200); do [ -s "$state/serve.port" ] && break; sleep 0.05; done
  [ -s "$state/serve.port" ] || { bad "the daemon did not start: $(tail -n 1 "$tmp/serve.log")"; finish; }
  # Open MPI's allocations outlive LeakSanitizer: no leak checks in the jobs (as in cli_serve.sh).
  admin role add all --input-prefix "$tmp" --output-prefix "$tmp" --max-procs 4 --max-runtime-s 0 \
    --env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" > /dev/null && admin role grant all admin > /dev/null ||
    bad "the admin's role"
}
