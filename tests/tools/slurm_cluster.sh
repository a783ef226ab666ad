# Sourced by tests that need a Slurm cluster: a private one on this machine, its daemons started
# by the test and stopped by PID. slurm_up DIR N brings up munged, slurmctld and N slurmd "nodes"
# n1..nN (all on 127.0.0.1, each on a port of its own) with state, logs and sockets under DIR,
# exports SLURM_CONF, and waits until every node is idle; slurm_down stops what slurm_up started.
# Nothing is installed here: slurm_missing says what is absent ("" when all is there).
slurm_pids=()
slurm_conf_path=

slurm_missing() {
  local p
  for p in munged slurmctld slurmd sbatch srun scontrol squeue scancel; do
    command -v "$p" > /dev/null || { echo "$p is not installed (scripts/deps.sh --test installs slurm-wlm munge)"; return; }
  done
  [ -r /etc/munge/munge.key ] || echo "/etc/munge/munge.key is missing (the munge package makes it)"
}

# A TCP port that was free a moment ago.
slurm_free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

slurm_up() { # dir nodes
  local d=$1 n=$2 host i
  host=$(hostname)
  mkdir -p "$d/state" "$d/log"
  for i in $(seq "$n"); do mkdir -p "$d/spool/n$i" "$d/tmpfs/n$i"; done
  # munged refuses a socket folder others may write to.
  chmod 700 "$d"
  munged -F --force -S "$d/munge.sock" --pid-file="$d/munged.pid" --seed-file="$d/munge.seed" \
    --log-file="$d/log/munged.log" --key-file=/etc/munge/munge.key > /dev/null 2>&1 &
  slurm_pids+=($!)
  for _ in $(seq 100); do [ -S "$d/munge.sock" ] && break; sleep 0.05; done
  cat > "$d/slurm.conf" << EOF
ClusterName=anviltest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(slurm_free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge.sock
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=pmix
SlurmdParameters=config_overrides
SlurmdTimeout=10
MessageTimeout=5
KillWait=5
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.%n.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.%n.log
TmpFS=$d/tmpfs/%n
EOF
  for i in $(seq "$n"); do
    echo "NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$(slurm_free_port) CPUs=1 State=UNKNOWN" >> "$d/slurm.conf"
  done
  echo "PartitionName=test Nodes=ALL Default=YES State=UP MaxTime=INFINITE" >> "$d/slurm.conf"
  export SLURM_CONF=$d/slurm.conf
  slurm_conf_path=$SLURM_CONF
  slurmctld -D -i -f "$SLURM_CONF" > "$d/log/slurmctld.out" 2>&1 &
  slurm_pids+=($!)
  for i in $(seq "$n"); do slurm_start_node "$d" "n$i"; done
  for _ in $(seq 200); do
    [ "$(sinfo -h -N -o '%t' 2> /dev/null | grep -c '^idle')" = "$n" ] && return 0
    sleep 0.1
  done
  echo "slurm_up: the nodes did not come up: $(sinfo -N 2>&1 | tr '\n' ' ')" >&2
  return 1
}

# Starts (or restarts) node NAME's slurmd; its PID is in slurm_node_pid[NAME].
declare -A slurm_node_pid
slurm_start_node() { # dir name
  slurmd -D -N "$2" -f "$SLURM_CONF" > "$1/log/slurmd.$2.out" 2>&1 &
  slurm_node_pid[$2]=$!
  slurm_pids+=($!)
}

slurm_down() {
  local p
  # Jobs first, so no slurmd is left waiting on steps.
  [ -n "${SLURM_CONF:-}" ] && scancel --full -u "$(id -un)" 2> /dev/null
  for p in "${slurm_pids[@]}"; do kill "$p" 2> /dev/null; done
  for p in "${slurm_pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
    kill -9 "$p" 2> /dev/null
  done
  slurm_pids=()
  # slurmstepd detaches from slurmd, so a job step can outlive the daemons: what is left of this
  # cluster's jobs is found by its SLURM_CONF and a job ID (or slurmstepd's name) in its environment.
  local e pid
  for e in /proc/[0-9]*/environ; do
    pid=${e#/proc/}
    pid=${pid%/environ}
    grep -qzx "SLURM_CONF=$slurm_conf_path" "$e" 2> /dev/null || continue
    if grep -qz '^SLURM_JOB_ID=' "$e" 2> /dev/null || grep -q '^slurmstepd' "/proc/$pid/cmdline" 2> /dev/null; then
      kill -9 "$pid" 2> /dev/null
    fi
  done
}
