# Sourced by the tests/cli_*.sh scripts (which get the anvil binary as $1):
# the binary, a scratch folder removed at exit (after killing any process
# still running from it), and the ok/bad reporting whose count is the exit
# status.
set -u
anvil=$1
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2> /dev/null; pkill -KILL -f "$tmp/" 2> /dev/null; rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1" >&2; fails=$((fails + 1)); }
