#!/bin/sh
# Regenerates <sample>.findings.json beside each sample with the real static
# analyser: build/bin/torch-tidy --format=json, on the LibTorch headers from
# Debian's libtorch-dev. Run it from anywhere after building torch-tidy; commit
# the results (the GPU machine has no LLVM, so it cannot produce them).
#
#   runtime-check/samples/regen-findings.sh [path/to/torch-tidy]
#
# File paths in the output are made relative to the repository root, so the
# verifier can match them by suffix to the absolute paths in a trace.
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TIDY=${1:-$ROOT/build/bin/torch-tidy}
[ -x "$TIDY" ] || { echo "regen-findings: $TIDY not built" >&2; exit 2; }

cd "$ROOT"
FLAGS="-std=c++17 -isystem /usr/include/torch/csrc/api/include -isystem test/shim -isystem /usr/local/cuda/include"

for src in runtime-check/samples/*.cpp; do
  out="${src%.cpp}.findings.json"
  # torch-tidy exits non-zero when it reports findings; only a missing or
  # malformed JSON document is an error here.
  # shellcheck disable=SC2086
  "$TIDY" --format=json "$src" -- $FLAGS > "$out.tmp" || true
  python3 - "$out.tmp" "$out" "$ROOT" <<'PY'
import json, os, sys
src, dst, root = sys.argv[1], sys.argv[2], sys.argv[3]
with open(src) as f:
    doc = json.load(f)
findings = doc["findings"] if isinstance(doc, dict) else doc
def rel(p):
    if p and os.path.isabs(p):
        p = os.path.relpath(os.path.realpath(p), root)
    return os.path.normpath(p) if p else p
for f in findings:
    f["file"] = rel(f.get("file"))
    for n in f.get("notes", []):
        n["file"] = rel(n.get("file"))
with open(dst, "w") as f:
    json.dump({"version": 1, "findings": findings}, f, indent=2)
    f.write("\n")
print(f"{dst}: {len(findings)} finding(s): " +
      ", ".join(sorted({x['check'] for x in findings})) if findings else f"{dst}: no findings")
PY
  rm -f "$out.tmp"
done
