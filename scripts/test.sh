#!/usr/bin/env bash
# The whole test suite: the release build, the ASan+UBSan build, then the fuzz
# targets (clang, ASan+UBSan), each fuzzing from its seed corpus for a fixed
# budget (scripts/fuzz.sh runs them longer).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# The cl100k_base and o200k_base rank files (several MB) are not committed:
# they come from the official tiktoken npm package, which the tokenizer test
# is checked against; without them that test fails.
if [ ! -f tests/tok/ranks/cl100k_base.tiktoken ] || [ ! -f tests/tok/ranks/o200k_base.tiktoken ]; then
  tests/tok/gen.sh
fi
scripts/build.sh build
(cd build && ctest --output-on-failure -j 1)
scripts/build.sh build-asan -DANVIL_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j 1)
scripts/build.sh build-fuzz -DCMAKE_C_COMPILER=clang -DANVIL_SANITIZE=ON -DANVIL_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug \
  --target fuzz
(cd build-fuzz && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j 1 -R '^fuzz_')
