#!/usr/bin/env bash
# The whole test suite: the release build, then the ASan+UBSan build.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
scripts/build.sh build
(cd build && ctest --output-on-failure -j 1)
scripts/build.sh build-asan -DANVIL_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j 1)
