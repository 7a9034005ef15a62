#!/usr/bin/env bash
# Builds torch-tidy with AddressSanitizer and UndefinedBehaviorSanitizer
# (clang++-19, -DTORCH_TIDY_SANITIZE=address,undefined) and runs the lit and
# GoogleTest suites on it.
#
#   scripts/sanitize.sh                 # everything
#   scripts/sanitize.sh --filter driver # only the lit tests matching a regex
#
# Only our code is instrumented: clang, LLVM and clang-tidy-19 come prebuilt.
# The lit tests run the plugin inside clang-tidy-19 through a wrapper that
# preloads the ASan runtime (build-asan/bin/clang-tidy-preloaded); leaks are
# checked in torch-tidy and the unit tests, not inside clang-tidy, which frees
# nothing at exit by design. Any sanitizer report fails the test
# (-fno-sanitize-recover=all). runtime-check/ is left out: it is not part of
# the analyser.
#
# Environment: BUILD_DIR (default: build-asan), CXX (default: clang++-19),
# JOBS (default: 2). Needs libclang-rt-19-dev.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2
build=${BUILD_DIR:-build-asan}
cxx=${CXX:-clang++-19}
filter=()
case ${1:-} in
  --filter) filter=(--filter "$2") ;;
  "") ;;
  *) echo "usage: scripts/sanitize.sh [--filter <regex>]" >&2; exit 2 ;;
esac

# shellcheck source=instrumented-build.sh
source scripts/instrumented-build.sh
configure_instrumented "$build" "$cxx" libclang_rt.asan-x86_64.so \
  -DTORCH_TIDY_SANITIZE=address,undefined || exit 2
cmake --build "$build" -j"${JOBS:-2}" --target TorchTidy torch-tidy TorchTidyUnitTests ||
  exit 2

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
rc=0
python3 /usr/lib/llvm-19/build/utils/lit/lit.py -sv "${filter[@]}" "$build/test" || rc=1
if [ ${#filter[@]} -eq 0 ]; then
  "$build/bin/TorchTidyUnitTests" --gtest_brief=1 || rc=1
fi
if [ "$rc" = 0 ]; then
  echo "sanitize: PASSED (lit and gtest under ASan+UBSan)"
else
  echo "sanitize: FAILED"
fi
exit "$rc"
