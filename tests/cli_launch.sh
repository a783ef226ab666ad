#!/usr/bin/env bash
# Checks of `anvil launch` with real mpirun runs (Open MPI and its mpicc are
# required, unless ANVIL_TEST_ALLOW_SKIP=1). The ranks run a small shell
# script through --exec, so each can behave by its OMPI_COMM_WORLD_RANK:
#   - 4 ranks on this 2-core machine (oversubscribed): lines on the ranks
#     started, up to all 4 (none with --no-progress); each rank's lines
#     appear exactly once on the launcher's stdout/stderr with its prefix,
#     a line written in two pieces and a 20000-byte line arrive whole, and
#     rank_<R>.log holds exactly that rank's lines; 1000 newlines written at
#     once all arrive (mpirun's own tagged output loses or crashes on them);
#   - a rank exiting 3: the launcher exits 3, names the rank, and no other
#     rank is left running; a rank killed by SIGKILL: one line naming the
#     rank, host and signal, exit 137; every rank exiting 75: exit 75;
#   - SIGTERM to the launcher reaches the ranks as SIGUSR1 (exit 75); a
#     SIGKILLed launcher leaves no mpirun or rank behind;
#   - an anvil subcommand (info, train) as the rank command, with the
#     default log folder <train --out>/logs and a rank's exit 2 passed on;
#   - --mca-tcp: a 3-rank MPI allreduce over TCP (when mpicc exists);
#   - bad input: one-line errors, exit 2 (usage) or 1, nothing started;
#     a host ssh cannot reach (ssh stood in for by a script that fails the
#     same way): one line with ssh's message naming it, exit 1, and ssh was
#     told never to prompt and to give up connecting after 15 s.
. "$(dirname "$0")/tools/cli_common.sh"
command -v mpirun > /dev/null || { missing "mpirun is not installed"; finish; }
# The launcher under a hang guard; nothing here should come near 60 s.
launch() { timeout 60 "$anvil" launch "$@"; }
# Processes still running the rank script (zombies awaiting their reaper do not count).
alive() {
  local n=0 p
  for p in $(pgrep -f "$tmp/rank.sh"); do
    case "$(ps -o stat= -p "$p" 2> /dev/null)" in Z* | "") ;; *) n=$((n + 1)) ;; esac
  done
  echo $n
}
# Waits (bounded) for the rank scripts to be gone.
none_left() {
  for _ in $(seq 100); do [ "$(alive)" = 0 ] && return 0; sleep 0.2; done
  return 1
}

cat > "$tmp/rank.sh" << 'EOF'
#!/bin/sh
r=$OMPI_COMM_WORLD_RANK
case "$1" in
print)
  for i in 1 2 3; do echo "out $r $i"; done
  echo "err $r" >&2
  printf 'part'; sleep 0.3; echo "ial $r"
  echo "env $r ${ANVIL_LAUNCH_TEST:-unset}"
  head -c 20000 /dev/zero | tr '\0' "$r"; echo
  ;;
burst)
  head -c 1000 /dev/zero | tr '\0' '\n'
  echo "done $r"
  ;;
fail)
  if [ "$r" = 2 ]; then sleep 1; echo "rank 2 fails"; exit 3; fi
  while :; do sleep 0.2; done
  ;;
kill)
  if [ "$r" = 1 ]; then sleep 1; kill -9 $$; fi
  while :; do sleep 0.2; done
  ;;
resumable)
  exit 75
  ;;
stop)
  # mpirun kills the others as soon as one rank exits nonzero, so the
  # ranks wait for each other (bounded) before exiting 75.
  trap 'echo "usr1 $r"; touch "$2/usr1_$r"; for _ in $(seq 100); do [ -e "$2/usr1_0" ] && [ -e "$2/usr1_1" ] && break; sleep 0.1; done; exit 75' USR1
  echo "ready $r"
  while :; do sleep 0.1; done
  ;;
esac
EOF
chmod +x "$tmp/rank.sh"

"$anvil" launch --help | grep -q "usage: anvil launch" && ok "--help" || bad "--help"

# ---- 4 ranks, merged output and per-rank logs ----
ANVIL_LAUNCH_TEST=forwarded launch -n 4 --log-dir "$tmp/logs" --exec "$tmp/rank.sh" -- print \
  > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 0 ] && ok "4 ranks on $(nproc) cores exit 0" || bad "4 ranks: exit $rc ($(cat "$tmp/err"))"
long_ok=1 merged_ok=1 logs_ok=1
for r in 0 1 2 3; do
  long=$(head -c 20000 /dev/zero | tr '\0' "$r")
  printf 'out %s 1\nout %s 2\nout %s 3\npartial %s\nenv %s forwarded\n%s\n' $r $r $r $r $r "$long" > "$tmp/want_$r"
  while IFS= read -r line; do
    [ "$(grep -cxF "[rank $r] $line" "$tmp/out")" = 1 ] || merged_ok=0
  done < "$tmp/want_$r"
  [ "$(grep -cxF "[rank $r] err $r" "$tmp/err")" = 1 ] || merged_ok=0
  [ "$(grep -c "^\[rank $r\] $r" "$tmp/out")" = 1 ] || long_ok=0
  if [ -f "$tmp/logs/rank_$r.log" ]; then
    grep -vx "err $r" "$tmp/logs/rank_$r.log" | cmp -s - "$tmp/want_$r" || logs_ok=0
    [ "$(grep -cx "err $r" "$tmp/logs/rank_$r.log")" = 1 ] || logs_ok=0
  else
    logs_ok=0
  fi
done
[ $merged_ok = 1 ] && [ "$(wc -l < "$tmp/out")" = 24 ] && [ "$(grep -cv '^\[rank [0-3]\] ' "$tmp/out")" = 0 ] &&
  ok "merged stdout/stderr: each rank line once, prefixed, split lines joined" ||
  bad "merged output: $(head -c 600 "$tmp/out") / $(cat "$tmp/err")"
[ $long_ok = 1 ] && ok "a 20000-byte line arrives whole" || bad "the long line was split or lost"
msg=$(progress_lines "$tmp/err" "anvil launch" 0) && grep -q "^anvil launch: progress done 100% 4/4 ranks started" "$tmp/err" &&
  ok "start-up progress: $msg" || bad "start-up progress: $msg: $(cat "$tmp/err")"
[ $logs_ok = 1 ] && ok "rank_<R>.log holds exactly that rank's lines" || bad "per-rank logs: $(ls "$tmp/logs")"
left=$(ls -A "$tmp/logs" | grep -v -e '^rank_[0-3]\.log$' -e '^mpirun\.log$')
[ -z "$left" ] && ok "mpirun's raw output files are cleaned up" || bad "left in the log folder: $left"

# 1000 newlines in one write: mpirun 4.1.4's --tag-output drops part of such a
# chunk and --xml crashes on it; every one of them must arrive.
launch -n 2 --no-progress --log-dir "$tmp/logs_burst" --exec "$tmp/rank.sh" -- burst > "$tmp/out" 2> "$tmp/err"
rc=$?
! grep -q progress "$tmp/err" && ok "--no-progress: no start-up lines" || bad "--no-progress: $(cat "$tmp/err")"
[ $rc -eq 0 ] && [ "$(grep -cx '\[rank 0\] ' "$tmp/out")" = 1000 ] && [ "$(grep -cx '\[rank 1\] ' "$tmp/out")" = 1000 ] &&
  [ "$(grep -c '^\[rank [01]\] done [01]$' "$tmp/out")" = 2 ] && [ "$(wc -l < "$tmp/logs_burst/rank_1.log")" = 1001 ] &&
  ok "a burst of 1000 empty lines per rank arrives whole" || bad "burst: exit $rc, $(wc -l < "$tmp/out") lines"

# ---- failures ----
launch -n 4 --log-dir "$tmp/logs_fail" --exec "$tmp/rank.sh" -- fail > "$tmp/out" 2> "$tmp/err"
rc=$?
last=$(tail -n 1 "$tmp/err")
[ $rc -eq 3 ] && ok "a rank's exit 3 is the launcher's" || bad "rank exit 3: launcher exit $rc"
case "$last" in *"rank 2"*"status 3"*) ok "failure line: $last" ;; *) bad "failure line: $last" ;; esac
none_left && ok "no rank left running after the failure" || bad "ranks still running: $(pgrep -af "$tmp/rank.sh")"

launch -n 3 --log-dir "$tmp/logs_kill" --exec "$tmp/rank.sh" -- kill > "$tmp/out" 2> "$tmp/err"
rc=$?
last=$(tail -n 1 "$tmp/err")
[ $rc -eq 137 ] && ok "SIGKILLed rank: exit 128+9" || bad "SIGKILLed rank: exit $rc"
case "$last" in *"rank 1 on host "*"signal 9"*) ok "signal line: $last" ;; *) bad "signal line: $last" ;; esac
none_left && ok "no rank left running after the kill" || bad "ranks still running after the kill"

launch -n 2 --log-dir "$tmp/logs_75" --exec "$tmp/rank.sh" -- resumable > /dev/null 2> "$tmp/err"
rc=$?
[ $rc -eq 75 ] && ok "ranks exiting 75 give 75" || bad "exit 75: got $rc ($(cat "$tmp/err"))"

# SIGTERM to the launcher: the ranks get SIGUSR1 (a graceful stop) and their 75 comes back.
"$anvil" launch -n 2 --log-dir "$tmp/logs_stop" --exec "$tmp/rank.sh" -- stop "$tmp" > "$tmp/out" 2> "$tmp/err" &
pid=$!
(exec > /dev/null 2>&1; sleep 60; kill -KILL $pid) &
guard=$!
for _ in $(seq 150); do
  [ "$(cat "$tmp"/logs_stop/rank_*.log 2> /dev/null | grep -c '^ready')" = 2 ] && break
  sleep 0.2
done
kill -TERM $pid
wait $pid
rc=$?
kill $guard 2> /dev/null
[ $rc -eq 75 ] && [ "$(grep -c '^\[rank [01]\] usr1' "$tmp/out")" = 2 ] && ok "SIGTERM reaches the ranks as SIGUSR1, exit 75" ||
  bad "SIGTERM to the launcher: exit $rc, $(cat "$tmp/out")"

# The launcher SIGKILLed: mpirun, and through it the ranks, go too.
"$anvil" launch -n 2 --log-dir "$tmp/logs_orphan" --exec "$tmp/rank.sh" -- stop "$tmp/orphan" > /dev/null 2>&1 &
pid=$!
for _ in $(seq 150); do
  [ "$(cat "$tmp"/logs_orphan/rank_*.log 2> /dev/null | grep -c '^ready')" = 2 ] && break
  sleep 0.2
done
{ kill -KILL $pid; wait $pid; } 2> /dev/null
none_left && ok "a SIGKILLed launcher leaves no mpirun or rank behind" ||
  bad "left behind by a SIGKILLed launcher: $(pgrep -af "$tmp/rank.sh")"

# ---- anvil subcommands as the rank command ----
launch -n 2 --log-dir "$tmp/logs_info" -- info > "$tmp/out" 2> /dev/null
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '^\[rank 0\] tiny ' "$tmp/out")" = 1 ] && [ "$(grep -c '^\[rank 1\] tiny ' "$tmp/out")" = 1 ] &&
  ok "anvil info on 2 ranks" || bad "anvil info on 2 ranks: exit $rc"
# (A rank that gets as far as training initializes MPI: that is cli_dist's business.)
launch -n 2 -- train --frobnicate --out "$tmp/run" > /dev/null 2>&1
rc=$?
[ $rc -eq 2 ] && ok "a rank's usage error (2) is the launcher's" || bad "rank usage error: launcher exit $rc"
grep -q "unknown option '--frobnicate'" "$tmp/run/logs/rank_0.log" 2> /dev/null && ok "train --out DIR logs to DIR/logs" ||
  bad "no $tmp/run/logs/rank_0.log naming the bad option"

# ---- --mca-tcp: real MPI traffic over TCP ----
launch -n 2 --mca-tcp --log-dir "$tmp/logs_tcp" --exec /bin/sh -- -c 'echo "btl=$OMPI_MCA_btl pml=$OMPI_MCA_pml"' \
  > "$tmp/out" 2> /dev/null
[ "$(grep -c 'btl=tcp,self pml=ob1' "$tmp/out")" = 2 ] && ok "--mca-tcp sets btl tcp,self and pml ob1" ||
  bad "--mca-tcp: $(cat "$tmp/out")"
if ! command -v mpicc > /dev/null; then
  missing "mpicc is not installed: no allreduce over TCP"
else
  cat > "$tmp/allreduce.c" << 'EOF'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, sum = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int mine = rank + 1;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("sum %d of %d\n", sum, size);
    MPI_Finalize();
    return 0;
}
EOF
  if mpicc -o "$tmp/allreduce" "$tmp/allreduce.c" 2> "$tmp/err"; then
    launch -n 3 --mca-tcp --log-dir "$tmp/logs_tcp2" --exec "$tmp/allreduce" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && [ "$(grep -c '^\[rank [012]\] sum 6 of 3$' "$tmp/out")" = 3 ] && ok "allreduce over TCP on 3 ranks" ||
      bad "allreduce over TCP: exit $rc, $(cat "$tmp/out" "$tmp/err")"
  else
    bad "mpicc cannot build the allreduce check: $(head -n 3 "$tmp/err")"
  fi
fi

# ---- bad input: one line, the right status, nothing started ----
expect() { # expect STATUS NAME PATTERN -- launcher args
  local want=$1 name=$2 pat=$3
  shift 4
  (cd "$tmp" && timeout 60 "$anvil" launch "$@" > "$tmp/out" 2> "$tmp/err")
  local rc=$?
  if [ $rc -eq "$want" ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q -- "$pat" "$tmp/err" && [ ! -s "$tmp/out" ]; then
    ok "$name: $(cat "$tmp/err")"
  else
    bad "$name: exit $rc (want $want), stderr: $(cat "$tmp/err")"
  fi
}
expect 2 "no -n" "-n N is required" -- -- info
expect 2 "-n 0" "-n" -- -n 0 -- info
expect 2 "-n not a number" "-n" -- -n four -- info
expect 2 "no command" "no command" -- -n 2
expect 2 "empty command" "no command" -- -n 2 --
expect 2 "command without --" "after '--'" -- -n 2 info
expect 2 "unknown option" "unknown option" -- -n 2 --frobnicate -- info
expect 2 "empty --log-dir" "--log-dir" -- -n 2 --log-dir "" -- info
expect 2 "host without slots" "'a:'" -- -n 2 --hosts a:,b:2 -- info
expect 2 "zero slots" "'b:0'" -- -n 2 --hosts a:2,b:0 -- info
expect 2 "empty host entry" "entry 2" -- -n 2 --hosts a:2,,b:1 -- info
expect 2 "slots not a number" "'a:x'" -- -n 2 --hosts a:x -- info
expect 2 "more ranks than slots" "more than the 3 slots" -- -n 4 --hosts localhost:2,127.0.0.1:1 -- info
expect 2 "launch inside launch" "launch" -- -n 2 -- launch -n 2 -- info
expect 1 "unresolvable host" "nosuchhost.invalid" -- -n 2 --hosts localhost:1,nosuchhost.invalid:2 -- info
# 127.0.0.2 is this machine but not to Open MPI, so it asks ssh; in its place, a script that notes the options
# it is given, then fails as ssh fails to reach a host without a server.
cat > "$tmp/ssh" << 'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do
  case $1 in
  -x) shift ;;
  -o) echo "$2" >> "${0%/*}/ssh_options"; shift 2 ;;
  *) break ;;
  esac
done
echo "ssh: connect to host $1 port 22: Connection refused" >&2
exit 255
EOF
chmod +x "$tmp/ssh"
OMPI_MCA_plm_rsh_agent="$tmp/ssh" launch -n 2 --hosts 127.0.0.2:2 --log-dir "$tmp/logs_ssh" -- info > /dev/null 2> "$tmp/err"
rc=$?
last=$(tail -n 1 "$tmp/err")
want="anvil launch: error: could not start Open MPI on the remote hosts: ssh: connect to host 127.0.0.2 port 22:"
[ $rc -eq 1 ] && [ "$last" = "$want Connection refused" ] && ok "unreachable host: $last" ||
  bad "unreachable host: exit $rc, $(cat "$tmp/err")"
grep -qx "BatchMode=yes" "$tmp/ssh_options" && grep -qx "ConnectTimeout=15" "$tmp/ssh_options" &&
  ok "ssh is told never to prompt and to give up connecting after 15 s" ||
  bad "ssh options: $(cat "$tmp/ssh_options" 2> /dev/null)"
env PATH=/nonexistent "$anvil" launch -n 2 -- info > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 1 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q "mpirun not found" "$tmp/err" && ok "mpirun missing: $(cat "$tmp/err")" ||
  bad "mpirun missing: exit $rc, $(cat "$tmp/err")"
[ ! -e "$tmp/anvil-logs" ] && ok "no log folder made for rejected input" || bad "rejected input made $tmp/anvil-logs"

# A GPU trains in one process until collectives between GPUs exist: 2 ranks on --device cuda are refused
# by every rank before any device is opened (exit 78), in a build with CUDA; a build without it says so.
# The ranks exit before MPI_Finalize, so LeakSanitizer would report Open MPI's allocations and turn 78 into 1.
env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" "$anvil" launch -n 2 --log-dir "$tmp/cudalogs" -- train --device cuda --synthetic --preset tiny --steps 1 \
  --no-progress > "$tmp/out" 2> "$tmp/err"
rc=$?
if grep -q "built without CUDA" "$tmp/err"; then
  [ $rc -ne 0 ] && ok "--device cuda on 2 ranks: this build has no CUDA: $(grep -m1 "built without" "$tmp/err")" ||
    bad "--device cuda without CUDA: exit 0"
else
  [ $rc -eq 78 ] && [ "$(grep -c "trains in one process (2 here): collectives between GPUs (NCCL)" "$tmp/err")" = 2 ] &&
    ok "--device cuda on 2 ranks refused by each, exit 78" || bad "--device cuda on 2 ranks: exit $rc, $(cat "$tmp/err")"
fi

finish
