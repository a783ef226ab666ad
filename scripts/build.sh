#!/usr/bin/env bash
# Configures and builds one variant: scripts/build.sh DIR [extra cmake args].
set -euo pipefail
dir=$1
shift
cmake -S "$(dirname "$0")/.." -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)" >/dev/null
