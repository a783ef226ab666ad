#!/usr/bin/env bash
# The ThreadSanitizer pass (build-tsan): prep's tests, whose worker threads parse JSON lines and
# encode at once (test_data, cli_prep with 2 workers), and the checkpoint writer's
# (test_checkpoint). Any race report fails its test (TSan's exit status 66).
#
# TSan sees only the memory accesses of code compiled with it, so:
#  - clang with LLVM's OpenMP runtime, whose Archer tool tells TSan about OpenMP's barriers
#    (GCC's libgomp hides them and every parallel loop reports races);
#  - cJSON, whose parser writes a global on every call (src/core/json.h), rebuilt with TSan from
#    Debian's source of the installed version and put before the system's copy: against the
#    system's library TSan could not see that race.
# Not part of scripts/test.sh: the build alone takes longer than the 3 minutes a pass may add.
# usage: scripts/tsan.sh [ctest -R regex]   (default: test_data, cli_prep, test_checkpoint)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test
tests="${1:-^(test_data|cli_prep|test_checkpoint)$}"
build=build-tsan
scripts/build.sh "$build" -DCMAKE_C_COMPILER=clang -DANVIL_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug
cj="$PWD/$build/cjson-tsan"
if [ ! -f "$cj/libcjson.so.1" ]; then
  ver=$(dpkg-query -W -f='${Version}' libcjson-dev)
  rm -rf "$cj" && mkdir -p "$cj/apt/lists/partial" "$cj/apt/cache/archives/partial" "$cj/src"
  printf 'deb-src http://deb.debian.org/debian %s main\ndeb-src http://deb.debian.org/debian-security %s-security main\n' \
    bookworm bookworm > "$cj/apt/sources.list"
  apt=(-o Dir::Etc::SourceList="$cj/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
       -o Dir::State::Lists="$cj/apt/lists" -o Dir::Cache="$cj/apt/cache")
  apt-get "${apt[@]}" update -qq
  (cd "$cj/src" && apt-get "${apt[@]}" source -qq --download-only "cjson=$ver" && dpkg-source -x -- *.dsc cjson > /dev/null)
  clang -shared -fPIC -fsanitize=thread -O1 -g "$cj/src/cjson/cJSON.c" -Wl,-soname,libcjson.so.1 -o "$cj/libcjson.so.1"
fi
export LD_LIBRARY_PATH="$cj${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_TOOL_LIBRARIES="$(clang -print-resource-dir)/../../libarcher.so"
# The OpenMP runtime is not built with TSan: what it calls itself (its locks, its allocations) is
# not to be checked, and Archer says so on every start unless told.
export TSAN_OPTIONS="ignore_noninstrumented_modules=1 second_deadlock_stack=1"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
(cd "$build" && ctest --output-on-failure -j 1 -R "$tests")
