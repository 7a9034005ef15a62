#!/usr/bin/env bash
# GPU self-test of the runtime verifier. Needs one CUDA GPU, nvcc, cmake,
# addr2line (binutils) and python3 with a CUDA build of torch; no LLVM, no
# network. Fits in 6 minutes on one H200 node, build included.
#
#   runtime-check/gpu-selftest.sh OUTDIR
#
# 1. builds libtorch_tidy_rt.so, torch-tidy-verify and torch-tidy-probe, and
#    the samples against torch.utils.cmake_prefix_path;
# 2. runs the verifier on each seeded-bug sample with its committed
#    <sample>.findings.json: every finding of the seeded check must be
#    CONFIRMED;
# 3. runs each clean twin: it must confirm nothing, neither with its own
#    findings nor with its buggy sibling's findings moved onto it;
# 4. measures the recorder's overhead on the 200-step training loop (loop wall
#    time with the recorder / without, median of 3 each): must be <= 1.05;
# 5. runs torch-tidy-probe.
# Traces, reports, logs and summary.txt go to OUTDIR. Exit 0 = all passed.
set -uo pipefail

OUT=${1:?usage: gpu-selftest.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RC_DIR=$ROOT/runtime-check
JOBS=$(nproc 2>/dev/null || echo 4)
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
FAILED=0
START=$(date +%s)

say() { echo "[$(($(date +%s) - START))s] $*" | tee -a "$SUMMARY"; }
fail() { say "FAIL: $*"; FAILED=1; }
die() { say "FAIL: $*"; say "gpu-selftest: FAILED"; exit 1; }

command -v nvidia-smi >/dev/null && nvidia-smi -L | tee -a "$SUMMARY"
command -v addr2line >/dev/null || die "addr2line (binutils) is required to symbolise stacks"
TORCH_PREFIX=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)') ||
  die "python3 cannot import torch"
python3 -c 'import torch;print("torch", torch.__version__, "cuda", torch.version.cuda)' |
  tee -a "$SUMMARY"

# --- 1. build ---------------------------------------------------------------
say "building runtime-check"
cmake -S "$RC_DIR" -B "$OUT/build-rt" -DCMAKE_BUILD_TYPE=Release \
  -DTORCH_TIDY_RT_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build-rt.log" 2>&1 &&
  cmake --build "$OUT/build-rt" -j "$JOBS" >>"$OUT/build-rt.log" 2>&1 ||
  die "runtime-check build failed (see build-rt.log)"
VERIFY=$OUT/build-rt/bin/torch-tidy-verify
REC=$OUT/build-rt/lib/libtorch_tidy_rt.so
PROBE=$OUT/build-rt/bin/torch-tidy-probe
[ -f "$REC" ] || die "libtorch_tidy_rt.so was not built (CUPTI not found?)"

say "building samples against $TORCH_PREFIX"
cmake -S "$RC_DIR/samples" -B "$OUT/build-samples" -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
  >"$OUT/build-samples.log" 2>&1 &&
  cmake --build "$OUT/build-samples" -j "$JOBS" >>"$OUT/build-samples.log" 2>&1 ||
  die "sample build failed (see build-samples.log)"
BIN=$OUT/build-samples

# --- 2/3. bug samples and clean twins ----------------------------------------
declare -A SEEDED=(
  [pageable_non_blocking]=torch-non-blocking-pageable
  [empty_cache_loop]=torch-empty-cache-in-loop
  [device_mismatch]=torch-device-mismatch
  [d2h_race]=torch-non-blocking-d2h-race
)

# check_report REPORT MODE [CHECK]: MODE=seeded -> every CHECK finding
# CONFIRMED and at least one; MODE=clean -> nothing CONFIRMED.
check_report() {
  python3 - "$@" <<'PY'
import json, sys
path, mode = sys.argv[1], sys.argv[2]
r = json.load(open(path))
for f in r["findings"]:
    print(f"    {f['status']:<13} {f['check']:<30} {f['file']}:{f['line']}  {f['evidence']['text']}")
for o in r["observations"]:
    print(f"    observed      {o['kind']:<30} {o['file'] or '(no user frame)'}:{o['line']}  {o['text']}")
if mode == "seeded":
    seeded = [f for f in r["findings"] if f["check"] == sys.argv[3]]
    if not seeded:
        sys.exit(f"no {sys.argv[3]} finding in the committed findings")
    bad = [f for f in seeded if f["status"] != "CONFIRMED"]
    sys.exit(f"{len(bad)} seeded finding(s) not confirmed" if bad else 0)
confirmed = [f for f in r["findings"] if f["status"] == "CONFIRMED"]
sys.exit(f"clean twin confirmed {len(confirmed)} finding(s)" if confirmed else 0)
PY
}

# run_verify NAME FINDINGS: runs sample NAME under the verifier.
run_verify() {
  local name=$1 findings=$2
  timeout 120 "$VERIFY" --findings "$findings" --recorder "$REC" \
    --trace-dir "$OUT/traces/$name" --report "$OUT/$name.report.json" \
    -- "$BIN/$name" >"$OUT/$name.verify.txt" 2>&1
  local rc=$?
  cat "$OUT/$name.verify.txt" >>"$SUMMARY"
  return $rc
}

for bug in pageable_non_blocking empty_cache_loop device_mismatch d2h_race; do
  check=${SEEDED[$bug]}
  for name in "$bug" "${bug}_clean"; do
    [ -f "$RC_DIR/samples/$name.findings.json" ] ||
      { fail "$name.findings.json missing: run runtime-check/samples/regen-findings.sh"; continue 2; }
  done
  say "sample $bug (seeded: $check)"
  run_verify "$bug" "$RC_DIR/samples/$bug.findings.json"
  rc=$?
  if [ $rc -eq 2 ] || [ $rc -eq 5 ] || [ $rc -ge 124 ]; then
    fail "$bug: verifier exit $rc"
  else
    check_report "$OUT/$bug.report.json" seeded "$check" 2>&1 | tee -a "$SUMMARY"
    [ "${PIPESTATUS[0]}" -eq 0 ] || fail "$bug: seeded finding not confirmed"
  fi

  clean=${bug}_clean
  say "clean twin $clean"
  run_verify "$clean" "$RC_DIR/samples/$clean.findings.json"
  rc=$?
  if [ $rc -eq 2 ] || [ $rc -eq 5 ] || [ $rc -ge 124 ]; then
    fail "$clean: verifier exit $rc"
    continue
  fi
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(r.get("program_status",1))' \
    "$OUT/$clean.report.json" || fail "$clean: the program itself failed"
  check_report "$OUT/$clean.report.json" clean 2>&1 | tee -a "$SUMMARY"
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail "$clean: confirmed a finding"
  # The bug's findings moved onto the twin (same line numbers): nothing there.
  python3 - "$RC_DIR/samples/$bug.findings.json" "$OUT/$clean.moved-findings.json" "$bug" "$clean" <<'PY'
import json, os, sys
doc = json.load(open(sys.argv[1]))
fs = doc["findings"] if isinstance(doc, dict) else doc
def move(p):
    d, b = os.path.split(p or "")
    return os.path.join(d, sys.argv[4] + ".cpp") if b == sys.argv[3] + ".cpp" else p
for f in fs:
    f["file"] = move(f["file"])
    for n in f.get("notes", []):
        n["file"] = move(n["file"])
json.dump({"version": 1, "findings": fs}, open(sys.argv[2], "w"), indent=1)
PY
  traces=()
  for t in "$OUT/traces/$clean"/trace.*.jsonl; do traces+=(--trace "$t"); done
  "$VERIFY" --findings "$OUT/$clean.moved-findings.json" "${traces[@]}" \
    --report "$OUT/$clean.moved.report.json" >"$OUT/$clean.moved.verify.txt" 2>&1
  say "clean twin $clean with $bug's findings"
  check_report "$OUT/$clean.moved.report.json" clean 2>&1 | tee -a "$SUMMARY"
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail "$clean: confirmed a finding moved from $bug"
done

# --- 4. overhead --------------------------------------------------------------
say "recorder overhead on the 200-step training loop"
loop_ms() { sed -n 's/^loop_ms=\([0-9.]*\).*/\1/p' "$1"; }
base=() rec=()
for i in 1 2 3; do
  timeout 120 "$BIN/train_loop" 200 >"$OUT/overhead.base.$i.txt" 2>&1 ||
    fail "train_loop (no recorder) run $i failed"
  base+=("$(loop_ms "$OUT/overhead.base.$i.txt")")
  LD_PRELOAD=$REC CUDA_INJECTION64_PATH=$REC TORCH_TIDY_TRACE=$OUT/traces/overhead.$i.%p.jsonl \
    timeout 120 "$BIN/train_loop" 200 >"$OUT/overhead.rec.$i.txt" 2>&1 ||
    fail "train_loop (recorder) run $i failed"
  rec+=("$(loop_ms "$OUT/overhead.rec.$i.txt")")
done
python3 - "${base[*]}" "${rec[*]}" <<'PY' 2>&1 | tee -a "$SUMMARY"
import statistics, sys
try:
    b = [float(x) for x in sys.argv[1].split()]
    r = [float(x) for x in sys.argv[2].split()]
except ValueError:
    sys.exit("could not read loop_ms from the runs")
mb, mr = statistics.median(b), statistics.median(r)
ratio = mr / mb
print(f"  loop ms without recorder {b} median {mb:.1f}")
print(f"  loop ms with recorder    {r} median {mr:.1f}")
print(f"  overhead ratio {ratio:.3f} ({(ratio - 1) * 100:+.1f}%), limit 1.050")
sys.exit(0 if ratio <= 1.05 else 1)
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "recorder overhead above 5% (or unreadable)"
ls "$OUT"/traces/overhead.*.jsonl >/dev/null 2>&1 || fail "recorded training loop left no trace"

# --- 5. probe -----------------------------------------------------------------
say "torch-tidy-probe"
timeout 120 "$PROBE" --json "$OUT/probe.json" 2>&1 | tee "$OUT/probe.txt" | tee -a "$SUMMARY"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "torch-tidy-probe failed"

if [ $FAILED -eq 0 ]; then
  say "gpu-selftest: PASSED"
else
  say "gpu-selftest: FAILED"
fi
exit $FAILED
