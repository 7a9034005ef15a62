#!/usr/bin/env bash
# Builds test/fuzz's libFuzzer target (clang++-19, ASan + UBSan) and fuzzes
# the whole pipeline (parse with the mock LibTorch headers, every torch-*
# check) for the given number of seconds, in one process.
#
#   scripts/fuzz.sh 600               # fuzz for 10 minutes
#   scripts/fuzz.sh 0                 # only replay the corpus and regressions
#   scripts/fuzz.sh 600 -max_len=4096 # extra libFuzzer flags
#
# Seeds: the lit test inputs (test/checks/*.cpp, test/driver/Inputs/*.cpp)
# and the committed crashers (test/fuzz/regressions/). The corpus grows in
# $BUILD_DIR/corpus; a crash is written to $BUILD_DIR/artifacts/ and the
# script exits non-zero. To keep a crasher as a regression test, copy it to
# test/fuzz/regressions/<name>.cpp (test/driver/fuzz-regressions.test runs the
# driver on every file there).
#
# Environment: BUILD_DIR (default: build-fuzz), CXX (default: clang++-19).
# Needs libclang-rt-19-dev (libFuzzer and the sanitizer runtimes).
set -euo pipefail

if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh <seconds> [libFuzzer flags...]" >&2
  exit 2
fi
seconds=$1
shift

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-fuzz}
cxx=${CXX:-clang++-19}

# shellcheck source=instrumented-build.sh
source scripts/instrumented-build.sh
configure_instrumented "$build" "$cxx" libclang_rt.fuzzer-x86_64.a \
  -DTORCH_TIDY_ENABLE_FUZZER=ON
cmake --build "$build" --target torch-tidy-fuzzer -j"${JOBS:-2}"

corpus=$build/corpus
seeds=$build/seeds
artifacts=$build/artifacts
mkdir -p "$corpus" "$seeds" "$artifacts"
cp test/checks/*.cpp test/driver/Inputs/*.cpp "$seeds"/
if compgen -G "test/fuzz/regressions/*.cpp" >/dev/null; then
  cp test/fuzz/regressions/*.cpp "$seeds"/
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# -timeout: one input taking longer is a hang and fails like a crash.
flags=(-timeout=30 -rss_limit_mb=4096 -max_len=16384 -print_final_stats=1
       -artifact_prefix="$artifacts/")
if [ "$seconds" = 0 ]; then
  exec "$build/bin/torch-tidy-fuzzer" "${flags[@]}" -runs=0 "$@" "$corpus" "$seeds"
fi
exec "$build/bin/torch-tidy-fuzzer" "${flags[@]}" -max_total_time="$seconds" \
  "$@" "$corpus" "$seeds"
