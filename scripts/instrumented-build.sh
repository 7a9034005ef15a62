# Sourced by scripts/fuzz.sh and scripts/sanitize.sh: configures a build of
# our code only, instrumented by clang++-19's sanitizers, in a directory of
# its own (clang, LLVM and clang-tidy-19 come prebuilt).
#
#   configure_instrumented BUILD_DIR CXX RUNTIME_FILE -DOPTION=...
#
# RUNTIME_FILE is a compiler-rt library the build needs (from
# libclang-rt-19-dev); without it this prints one line and returns 2.

configure_instrumented() {
  local build=$1 cxx=$2 runtime=$3
  shift 3
  if ! "$cxx" -print-file-name="$runtime" | grep -q /; then
    echo "error: $cxx has no $runtime; install libclang-rt-19-dev" >&2
    return 2
  fi
  local launcher=()
  if command -v ccache >/dev/null 2>&1; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DCMAKE_CXX_COMPILER="$cxx" -DTORCH_TIDY_ENABLE_RUNTIME_CHECK=OFF \
    "${launcher[@]}" "$@" >/dev/null
}
