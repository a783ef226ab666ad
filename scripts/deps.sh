#!/usr/bin/env bash
# Installs the Debian packages anvil builds, runs and tests with, when any is
# missing. Needs root (or sudo) only when something must be installed.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-openmp-dev libopenmpi-dev openmpi-bin libcjson-dev libpcre2-dev zlib1g-dev libzstd-dev libsqlite3-dev libmicrohttpd-dev libcurl4-openssl-dev libsodium-dev libcairo2-dev libexpat1-dev bible-kjv bible-kjv-text)
# radosgw, ceph-mon and ceph-osd: the S3 server of the S3 tests (tests/s3/radosgw.sh); uuid-runtime
# gives it uuidgen; chromium loads the job service's dashboard in cli_serve; sqlite3 runs the README's
# salvage of a state database in cli_readme.
# slurm-wlm and munge: the private cluster of cli_slurm (tests/tools/slurm_cluster.sh); iproute2 (ip):
# the simulated hosts of cli_netcut (network namespaces and veth pairs).
[ "${1:-}" = "--test" ] && pkgs+=(clang libclang-rt-14-dev libomp-dev zstd qemu-user strace curl prometheus chromium sqlite3 radosgw ceph-mon ceph-osd uuid-runtime)
[ "${1:-}" = "--test" ] && pkgs+=(slurm-wlm munge iproute2)
# npm fetches the tiktoken reference; a Node.js from elsewhere (NodeSource's
# bundles npm and conflicts with Debian's npm package) serves as well.
[ "${1:-}" = "--test" ] && ! command -v npm > /dev/null && pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
$sudo_cmd apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
