#!/usr/bin/env bash
# Regenerates docs/report-screenshot.png, the HTML report of examples/ in
# headless Chromium, with the commands of
# test/ecosystem/html-report-browser.test: the driver's JSON of
# train.cpp and eval.cpp (--audit -j1: one parse of the LibTorch headers),
# `torch-tidy report`, scripts/headless_chromium.py at 1280x1800.
#
#   scripts/report-screenshot.sh            # needs build/bin/torch-tidy and chromium
#
# Environment: BUILD_DIR (default: build).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build}
tool="$build/bin/torch-tidy"
[ -x "$tool" ] || { echo "report-screenshot: $tool is not built (scripts/setup.sh)" >&2; exit 2; }

mkdir -p "$build/examples"
sed "s|@EXAMPLES_DIR@|$root/examples|g" examples/compile_commands.json.in \
  >"$build/examples/compile_commands.json"
rc=0
"$tool" --audit -j1 --quiet -p "$build/examples" --format=json >"$build/examples/examples.json" || rc=$?
[ "$rc" -le 1 ] || { echo "report-screenshot: torch-tidy failed (exit $rc)" >&2; exit 2; }
"$tool" report "$build/examples/examples.json" -o "$build/examples/report.html"
python3 scripts/headless_chromium.py screenshot "$build/examples/report.html" \
  docs/report-screenshot.png --size 1280,1800 --no-console
echo "report-screenshot: wrote docs/report-screenshot.png"
