#!/usr/bin/env bash
# Configures and builds one variant: scripts/build.sh DIR [extra cmake args] [--target T]
# (everything, or only target T).
set -euo pipefail
dir=$1
shift
target=()
if [ $# -ge 2 ] && [ "${*: -2:1}" = --target ]; then
  target=(--target "${*: -1}")
  set -- "${@:1:$#-2}"
fi
cmake -S "$(dirname "$0")/.." -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)" "${target[@]}" >/dev/null
