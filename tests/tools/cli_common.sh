# Sourced by the tests/cli_*.sh scripts (which get the anvil binary as $1):
# the binary, a scratch folder removed at exit (after killing any process
# still running from it, and running the script's at_exit, which may undo
# what the script set up there; ANVIL_TEST_KEEP=1 keeps it, to read a failed
# case's logs), the ok/bad reporting, what to do when a
# reference is missing, and the exit status.
set -u
anvil=$1
tmp=$(mktemp -d)
at_exit() { :; }
# Debian's python3 (scripts/deps.sh installs it, with numpy and torch), not a pyenv shim that may come
# first on PATH: the shim costs 0.1 s a call, and these scripts call python3 hundreds of times.
[ -x /usr/bin/python3 ] && python3() { /usr/bin/python3 "$@"; }
keep_or_remove() {
  if [ -n "${ANVIL_TEST_KEEP:-}" ]; then echo "kept the scratch folder $tmp" >&2; else rm -rf "$tmp"; fi
}
trap 'kill -9 $(jobs -p) 2> /dev/null; pkill -KILL -f "$tmp/" 2> /dev/null; at_exit; keep_or_remove' EXIT
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1" >&2; fails=$((fails + 1)); }
skips=0
# A program or file the test needs is missing: a failure, unless the user
# allows skips with ANVIL_TEST_ALLOW_SKIP=1; then it says what is skipped and
# the test exits 77 (CTest's skip). The caller skips that part.
missing() {
  if [ "${ANVIL_TEST_ALLOW_SKIP:-}" = 1 ]; then
    echo "SKIP: $1"
    skips=$((skips + 1))
  else
    bad "$1 (ANVIL_TEST_ALLOW_SKIP=1 skips it)"
  fi
}
# Checks the progress lines "WHAT: progress [done ]P% D/T ..." in FILE (what a
# long command prints when standard error is not a terminal): at least MIN
# periodic ones, percentages and counts that never go down, and one final
# "done" line at 100% after them. Prints what it saw, or why it fails.
progress_lines() { # file what min
  awk -v what="$2: progress " -v min="$3" '
    index($0, what) == 1 {
      rest = substr($0, length(what) + 1)
      if (fin) { print "a progress line after the final one: " $0; bad = 1; exit }
      fin = sub(/^done /, "", rest)
      split(rest, f, " "); pct = f[1] + 0; split(f[2], c, "/"); d = c[1] + 0
      if (f[1] !~ /^[0-9]+%$/ || pct > 100 || pct < lastp || d < lastd) { print "figures go down or are malformed: " $0; bad = 1; exit }
      lastp = pct; lastd = d
      if (fin && pct != 100) { print "the final line is not at 100%: " $0; bad = 1; exit }
      if (!fin) n++
    }
    END {
      if (bad) exit 1
      if (!fin) { print "no final progress line"; exit 1 }
      if (n < min) { print n " periodic progress lines, want at least " min; exit 1 }
      print n + 0 " periodic progress lines, then " lastp "% " d " done"
    }' "$1"
}
# Ends the test: exit 1 when a check failed, else 77 when a part was skipped, else 0.
finish() {
  local name
  name=$(basename "$0" .sh)
  if [ $fails -gt 0 ]; then
    echo "$name: $fails check(s) failed" >&2
    exit 1
  fi
  [ $skips -gt 0 ] && { echo "$name: $skips part(s) skipped, the rest passed"; exit 77; }
  echo "$name: all checks passed"
  exit 0
}
