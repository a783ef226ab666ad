#!/usr/bin/env bash
# A single-node Ceph radosgw on 127.0.0.1 for the S3 tests: the real server,
# which checks SigV4 signatures as AWS does.
#
#   radosgw.sh start DIR   brings up a monitor, one OSD (memstore: objects live
#                          in the OSD's memory) and radosgw, all with their data,
#                          logs and sockets under DIR, on free ports; creates an
#                          S3 user and writes DIR/env, to be sourced, with
#                          AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
#                          AWS_REGION and S3_PIDS (the daemons' pids)
#   radosgw.sh stop DIR    stops the daemons it started, by pid
#
# Ceph itself runs with `auth none` (every daemon is on loopback and lives
# only as long as the test); S3 requests are still signed and checked with
# the user's keys. A start fails about once in five (the OSD sees a "wrong
# fsid" while the monitor is still settling), so a failed start is cleaned
# up and tried once more from scratch. Installs its Debian packages when
# they are missing (scripts/deps.sh --test lists them too).
set -euo pipefail
cmd=${1:-} dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: radosgw.sh start|stop DIR" >&2; exit 2; }

stop() {
  [ -f "$dir/pids" ] || return 0
  local pid
  # radosgw first, then the OSD, then the monitor: the reverse of their start.
  for pid in $(tac "$dir/pids"); do kill "$pid" 2> /dev/null || true; done
  for pid in $(tac "$dir/pids"); do
    for _ in $(seq 50); do
      # A zombie counts as gone: PID 1 here may reap slowly.
      local s
      s=$(ps -o stat= -p "$pid" 2> /dev/null || true)
      [ -z "$s" ] || [ "${s:0:1}" = Z ] && break
      sleep 0.1
    done
    kill -9 "$pid" 2> /dev/null || true
  done
  rm -f "$dir/pids"
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi
[ "$cmd" = start ] || { echo "radosgw.sh: unknown command '$cmd'" >&2; exit 2; }

need=()
for p in radosgw ceph-mon ceph-osd; do
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "radosgw.sh: installing ${need[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${need[@]}" > /dev/null
fi

# Three free ports at once (monitor, radosgw, and the start of the OSD's
# range), so that several test scripts can each run their own cluster.
free_ports() {
  python3 - << 'EOF'
import socket
socks = []
for _ in range(3):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

attempt() {
  rm -rf "$dir"
  mkdir -p "$dir"/{mon,osd,run,log,rgw}
  local mon_port rgw_port osd_port fsid osd_uuid conf=$dir/ceph.conf
  read -r mon_port rgw_port osd_port < <(free_ports)
  fsid=$(uuidgen)
  osd_uuid=$(uuidgen)
  cat > "$conf" << EOF
[global]
fsid = $fsid
mon host = v1:127.0.0.1:$mon_port
public addr = 127.0.0.1
ms bind ipv6 = false
ms bind msgr2 = false
ms bind port min = $osd_port
ms bind port max = $((osd_port + 20))
auth cluster required = none
auth service required = none
auth client required = none
osd objectstore = memstore
memstore device bytes = 2147483648
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
osd crush update on start = false
osd class update on start = false
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
pid file = $dir/run/\$name.pid
mon data = $dir/mon/\$cluster-\$id
osd data = $dir/osd/\$cluster-\$id
keyring = $dir/keyring
[client.rgw.test]
rgw frontends = beast endpoint=127.0.0.1:$rgw_port
rgw data = $dir/rgw
rgw dns name = 127.0.0.1
EOF
  : > "$dir/keyring"
  monmaptool --create --addv a "[v1:127.0.0.1:$mon_port]" --fsid "$fsid" "$dir/monmap" > "$dir/log/setup.log" 2>&1
  ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" >> "$dir/log/setup.log" 2>&1
  ceph-mon -c "$conf" -i a -f >> "$dir/log/mon.out" 2>&1 &
  echo $! >> "$dir/pids"
  timeout 60 ceph -c "$conf" osd new "$osd_uuid" > "$dir/osd_id" 2>> "$dir/log/setup.log"
  local id
  id=$(cat "$dir/osd_id")
  # Placed in the CRUSH map here rather than by the OSD as it starts: those
  # commands from a starting OSD are what race with the monitor ("wrong fsid").
  { ceph -c "$conf" osd crush add-bucket local host &&
    ceph -c "$conf" osd crush move local root=default &&
    ceph -c "$conf" osd crush add "osd.$id" 1.0 host=local; } >> "$dir/log/setup.log" 2>&1
  mkdir -p "$dir/osd/ceph-$id"
  ceph-osd -c "$conf" -i "$id" --mkfs --osd-uuid "$osd_uuid" >> "$dir/log/setup.log" 2>&1
  ceph-osd -c "$conf" -i "$id" -f >> "$dir/log/osd.out" 2>&1 &
  echo $! >> "$dir/pids"
  radosgw -c "$conf" -n client.rgw.test -f >> "$dir/log/rgw.out" 2>&1 &
  echo $! >> "$dir/pids"
  # radosgw answers once it has created its pools, which needs the OSD up.
  local up=0
  for _ in $(seq 300); do
    if curl -s -o /dev/null -m 2 "http://127.0.0.1:$rgw_port/"; then up=1; break; fi
    local pid
    for pid in $(cat "$dir/pids"); do
      kill -0 "$pid" 2> /dev/null || { echo "radosgw.sh: daemon $pid exited during the start" >&2; return 1; }
    done
    sleep 0.2
  done
  [ $up = 1 ] || { echo "radosgw.sh: radosgw did not answer on 127.0.0.1:$rgw_port within 60 s" >&2; return 1; }
  local key secret
  key=$(python3 -c 'import secrets; print("AK" + secrets.token_hex(9).upper())')
  secret=$(python3 -c 'import secrets; print(secrets.token_urlsafe(30))')
  timeout 60 radosgw-admin -c "$conf" user create --uid anvil-test --display-name "anvil test" \
    --access-key "$key" --secret-key "$secret" >> "$dir/log/setup.log" 2>&1
  cat > "$dir/env" << EOF
export AWS_ENDPOINT_URL=http://127.0.0.1:$rgw_port
export AWS_ACCESS_KEY_ID=$key
export AWS_SECRET_ACCESS_KEY=$secret
export AWS_REGION=us-east-1
export S3_PIDS="$(tr '\n' ' ' < "$dir/pids")"
EOF
}

for try in 1 2; do
  if (attempt); then
    echo "radosgw.sh: radosgw up at $(grep -o 'http://[^ ]*' "$dir/env") (try $try)" >&2
    exit 0
  fi
  echo "radosgw.sh: start $try failed; last log lines:" >&2
  tail -n 5 "$dir"/log/*.log "$dir"/log/*.out 2> /dev/null | sed 's/^/  /' >&2 || true
  stop
done
echo "radosgw.sh: radosgw did not start twice; logs in $dir/log" >&2
exit 1
