#!/usr/bin/env bash
# Installs what torch-tidy needs on Debian 12, then configures and builds it.
#
#   scripts/setup.sh            # as root: apt-get installs what is missing
#   BUILD_DIR=build-x scripts/setup.sh
#   scripts/setup.sh --no-build # dependencies (and the SARIF validator) only
#
# Idempotent: packages are checked with `dpkg -s` and `apt-get update` runs
# only when something is missing. Not root and something missing: prints the
# apt-get command and exits 2. Can also be sourced; it then returns instead of
# exiting and leaves the caller's shell options alone.
#
# Environment: BUILD_DIR (default: build), BUILD_TYPE (default: Release),
# JOBS (default: nproc), CI (when "true", a failed SARIF validator install is
# an error instead of a warning).

tt_log() { printf '[setup] %s\n' "$*" >&2; }

tt_missing_packages() {
  local pkgs=(clang-19 clang-tidy-19 clang-tools-19 libclang-19-dev llvm-19-dev
              llvm-19-tools libtorch-dev nlohmann-json3-dev googletest
              libgtest-dev pre-commit cmake ninja-build python3 time libicu72)
  # node and npm may come from elsewhere (nodesource); only fill the gap.
  command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
  command -v npm >/dev/null 2>&1 || pkgs+=(npm)
  local p
  for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || printf '%s\n' "$p"
  done
}

tt_install_packages() {
  local missing
  missing=$(tt_missing_packages | tr '\n' ' ')
  missing=${missing% }
  if [ -z "$missing" ]; then
    tt_log "all Debian packages present"
    return 0
  fi
  local cmd="apt-get update && apt-get install -y --no-install-recommends $missing"
  if [ "$(id -u)" != 0 ]; then
    echo "error: missing packages; run as root: $cmd" >&2
    return 2
  fi
  tt_log "installing: $missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || { echo "error: apt-get update failed" >&2; return 2; }
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null ||
    { echo "error: apt-get install failed: $missing" >&2; return 2; }
}

tt_build() {
  local build=$1 type=$2 jobs=$3
  local log
  log=$(mktemp) || return 1
  tt_log "configuring $build ($type)"
  if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="$type" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "error: cmake configure failed" >&2
    return 1
  fi
  rm -f "$log"
  tt_log "building $build with -j$jobs"
  cmake --build "$build" -j"$jobs" ||
    { echo "error: build failed" >&2; return 1; }
}

# Headless Chromium for the HTML report's browser test (lit feature
# `chromium`). Optional: where it cannot be installed, that test is skipped.
tt_install_browser() {
  command -v chromium >/dev/null 2>&1 && return 0
  if [ "$(id -u)" != 0 ]; then
    tt_log "no chromium: the HTML report's browser test will be skipped (as root: apt-get install chromium)"
    return 0
  fi
  tt_log "installing chromium (the HTML report's browser test)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; } ||
    tt_log "warning: could not install chromium; the HTML report's browser test will be skipped"
  return 0
}

# The SARIF validator used by the driver tests (lit feature `sarif-multitool`).
tt_install_sarif_multitool() {
  local build=$1
  local tool="$build/node_modules/@microsoft/sarif-multitool-linux/Sarif.Multitool"
  if [ ! -f "$tool" ]; then
    tt_log "installing @microsoft/sarif-multitool@5.7.0 into $build/"
    mkdir -p "$build"
    if ! npm install --prefix "$build" --no-audit --no-fund --loglevel=error \
         @microsoft/sarif-multitool@5.7.0 >/dev/null; then
      if [ "${CI:-}" = true ]; then
        echo "error: npm install @microsoft/sarif-multitool@5.7.0 failed" >&2
        return 1
      fi
      tt_log "warning: could not install the SARIF validator; its tests will be skipped"
      return 0
    fi
  fi
  # npm skips the package's install script, which would set this bit.
  [ -f "$tool" ] && chmod u+x "$tool"
  return 0
}

torch_tidy_setup() {
  local build=${BUILD_DIR:-build} type=${BUILD_TYPE:-Release}
  local jobs=${JOBS:-$(nproc)} do_build=1 arg
  for arg in "$@"; do
    case $arg in
      --no-build) do_build=0 ;;
      -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; return 0 ;;
      *) echo "error: unknown option '$arg' (try --help)" >&2; return 2 ;;
    esac
  done
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || return 2
  (
    cd "$root" || exit 2
    tt_install_packages || exit $?
    tt_install_browser
    if [ "$do_build" = 1 ]; then
      tt_build "$build" "$type" "$jobs" || exit $?
    fi
    # After configuring, so that a fresh build dir is created by CMake.
    tt_install_sarif_multitool "$build" || exit $?
  )
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  torch_tidy_setup "$@"
  exit $?
else
  torch_tidy_setup "$@"
fi
