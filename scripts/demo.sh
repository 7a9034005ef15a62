#!/usr/bin/env bash
# Installs what is missing, builds torch-tidy, and audits examples/, a small
# LibTorch training program with one bug per check. Prints the findings and
# writes them as an HTML report, <build>/torch-tidy-report.html.
# Exit status: 0 when the tool ran (findings are the point of the demo),
# non-zero when setup, the build or the tool itself failed.
#
# Environment: BUILD_DIR (default: build); TORCH_TIDY_LIBTORCH (a LibTorch tree
# in the pytorch.org zip layout, instead of the installed headers); other
# variables as scripts/setup.sh.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2
build=${BUILD_DIR:-build}

scripts/setup.sh || { echo "demo: setup failed" >&2; exit 2; }

# The LibTorch headers: TORCH_TIDY_LIBTORCH's tree when set, else Debian's
# 1.13, else the 2.6 headers that setup.sh fetched (scripts/libtorch_sets.py).
if [ -n "${TORCH_TIDY_LIBTORCH:-}" ]; then
  libtorch=libtorch-user
else
  libtorch=$(python3 scripts/libtorch_sets.py --build-dir "$build" list | head -n1)
fi
if [ -z "$libtorch" ] ||
   ! describe=$(python3 scripts/libtorch_sets.py --build-dir "$build" describe "$libtorch"); then
  echo "demo: no LibTorch headers (libtorch-dev, or TORCH_TIDY_LIBTORCH)" >&2
  exit 2
fi
# examples/compile_commands.json.in holds the compile commands (for 1.13)
# with the examples' directory left out; a compile database needs it
# absolute. Another header set gets the same commands with its flags.
db="$build/examples"
[ "$libtorch" = libtorch-1.13 ] || db="$build/examples-$libtorch"
mkdir -p "$db"
if [ "$libtorch" = libtorch-1.13 ]; then
  sed "s|@EXAMPLES_DIR@|$root/examples|g" examples/compile_commands.json.in \
    >"$db/compile_commands.json"
else
  python3 - "$build" "$libtorch" "$root/examples" >"$db/compile_commands.json" <<'PY' || exit 2
import json, sys
sys.path.insert(0, "scripts")
import libtorch_sets
build, name, examples = sys.argv[1:]
flags = libtorch_sets.flags(name, build)
print(json.dumps([{"directory": examples, "file": f,
                   "arguments": ["clang++-19"] + flags + ["-c", f, "-o", f[:-4] + ".o"]}
                  for f in ("train.cpp", "eval.cpp")], indent=2))
PY
fi

files=(examples/train.cpp examples/eval.cpp)
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "== torch-tidy on examples/ (parsing the real LibTorch headers takes a while)" >&2
echo "== LibTorch header set $describe" >&2
start=$(date +%s)
report=
if [ -x "$build/bin/torch-tidy" ]; then
  # --audit: the LibTorch headers are parsed once, into a precompiled header
  # that both files share (-j1 lets them wait for it), and the results are
  # cached, so that the HTML report below costs no second analysis.
  "$build/bin/torch-tidy" --audit -j1 -p "$db" >"$out"
  rc=$?
  # 0: no findings, 1: findings, anything else: the tool failed.
  case $rc in 0|1) status=ok ;; *) status=failed ;; esac
  if [ "$status" = ok ]; then
    report="$(cd "$build" && pwd)/torch-tidy-report.html"
    "$build/bin/torch-tidy" --audit --quiet -p "$db" --format=html >"$report"
    case $? in 0|1) ;; *) echo "demo: writing the HTML report failed" >&2; report= ;; esac
  fi
else
  # The driver is not built: the plugin in clang-tidy gives the same findings.
  echo "(build/bin/torch-tidy not built; using clang-tidy-19 with the plugin)" >&2
  clang-tidy-19 --load="$build/lib/libTorchTidy.so" --checks='-*,torch-*' \
    -p "$db" "${files[@]}" >"$out" 2>/dev/null
  rc=$?
  case $rc in 0) status=ok ;; *) status=failed ;; esac
fi
cat "$out"
elapsed=$(( $(date +%s) - start ))

echo
echo "== findings by check"
if ! grep -o '\[torch-[a-z0-9-]*\]$' "$out" | sort | uniq -c; then
  echo "   (none)"
fi
if [ "$status" != ok ]; then
  echo "demo: torch-tidy failed (exit $rc) after ${elapsed}s" >&2
  exit "$rc"
fi
if [ -n "$report" ]; then
  echo "demo: HTML report: $report"
fi
echo "demo: torch-tidy ran in ${elapsed}s on ${#files[@]} files (exit $rc), LibTorch header set $libtorch"
exit 0
