#!/usr/bin/env bash
# Installs what is missing, builds torch-tidy, and runs the whole test suite
# (lit: checks, driver, integration; GoogleTest) through ctest.
# Exit status: 0 when every test passed, non-zero otherwise.
#
# Environment: BUILD_DIR (default: build), CTEST_JOBS (default: 2); other
# variables as scripts/setup.sh.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2
build=${BUILD_DIR:-build}
t0=$(date +%s)

if ! scripts/setup.sh; then
  echo "test: FAILED in setup or build after $(( $(date +%s) - t0 ))s" >&2
  exit 2
fi
t1=$(date +%s)

ctest --test-dir "$build" --output-on-failure --no-tests=error -j"${CTEST_JOBS:-2}"
rc=$?
t2=$(date +%s)

echo
echo "== summary"
echo "setup + build: $(( t1 - t0 ))s"
echo "tests:         $(( t2 - t1 ))s"
if [ "$rc" = 0 ]; then
  echo "test: PASSED"
else
  echo "test: FAILED (ctest exit $rc; the failing tests' output is above)"
fi
exit "$rc"
