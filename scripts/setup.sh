#!/usr/bin/env bash
# Installs what torch-tidy needs on Debian 12, fetches the LibTorch 2.6
# headers into $BUILD_DIR/libtorch-2.6 (unpacked, not installed), then
# configures and builds torch-tidy.
#
#   scripts/setup.sh            # as root: apt-get installs what is missing
#   BUILD_DIR=build-x scripts/setup.sh
#   scripts/setup.sh --no-build # dependencies, LibTorch 2.6 headers, SARIF validator
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
              libgtest-dev pre-commit cmake ninja-build python3 time libicu72
              libc++-19-dev neovim)
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

# The LibTorch 2.6 headers (lit feature libtorch-2.6): Debian 13 (trixie)'s
# libtorch-dev 2.6.0, downloaded from the mirror of this machine's own apt
# sources with a private apt state (nothing is installed, the machine's apt
# configuration and state are left alone) and unpacked into
# $build/libtorch-2.6/include, the layout of the pytorch.org zip. A manifest
# of the headers' digests is checked on every run; a damaged tree is fetched
# again. No network: a note, and the tests on these headers are skipped.

# The main Debian archive's URI in this machine's apt sources (deb822
# debian.sources, else sources.list), e.g. http://deb.debian.org/debian.
tt_debian_mirror() {
  local uri="" f=/etc/apt/sources.list.d/debian.sources
  if [ -r "$f" ]; then
    uri=$(awk 'BEGIN { RS = ""; FS = "\n" }
      { for (i = 1; i <= NF; i++) if ($i ~ /^URIs:/) {
          split(substr($i, 6), u, " ")
          if (u[1] !~ /security/) { print u[1]; exit } } }' "$f")
  fi
  if [ -z "$uri" ] && [ -r /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" { opt = 0
      for (i = 2; i <= NF; i++) {
        if ($i ~ /^\[/) opt = 1
        if (opt) { if ($i ~ /\]$/) opt = 0; continue }
        if ($i !~ /security/) { print $i; exit }
        break } }' /etc/apt/sources.list)
  fi
  [ -n "$uri" ] && printf '%s\n' "${uri%/}"
}

tt_libtorch26_valid() {
  local dest=$1
  [ -f "$dest/MANIFEST.sha256" ] &&
    [ -f "$dest/include/torch/csrc/api/include/torch/torch.h" ] &&
    (cd "$dest" && sha256sum --check --quiet --strict MANIFEST.sha256 >/dev/null 2>&1)
}

tt_fetch_libtorch26() {
  local build=$1 dest="$1/libtorch-2.6"
  if tt_libtorch26_valid "$dest"; then
    tt_log "LibTorch 2.6 headers present ($dest)"
    return 0
  fi
  [ -e "$dest" ] && tt_log "LibTorch 2.6 headers in $dest are incomplete or changed; fetching them again"
  rm -rf "$dest"
  local skip="note: LibTorch 2.6 headers not fetched; the tests on them (lit feature libtorch-2.6) are skipped"
  local mirror
  if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null ||
     ! mirror=$(tt_debian_mirror); then
    tt_log "$skip (no apt, dpkg-deb or Debian mirror in the apt sources)"
    return 0
  fi
  local work
  work=$(mktemp -d) || return 1
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/deb" \
           "$work/parts"
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  echo "deb [signed-by=$keyring] $mirror trixie main" >"$work/sources.list"
  local apt=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts="$work/parts"
             -o Dir::Etc::preferences=/dev/null -o Dir::Etc::preferencesparts="$work/parts"
             -o Dir::State::Lists="$work/lists" -o Dir::State::status=/dev/null
             -o Dir::Cache="$work/cache" -o Acquire::Languages=none
             -o Acquire::Retries=0 -o Acquire::http::Timeout=20
             -o Acquire::https::Timeout=20 -o APT::Get::List-Cleanup=false)
  # As root, apt downloads as the _apt user: let it write there.
  [ "$(id -u)" = 0 ] && id _apt >/dev/null 2>&1 && chown -R _apt "$work"
  local deb="" version=""
  if apt-get "${apt[@]}" -qq update >"$work/log" 2>&1 &&
     version=$(apt-cache "${apt[@]}" show --no-all-versions libtorch-dev 2>>"$work/log" |
               sed -n 's/^Version: //p' | head -n1) &&
     case $version in
       2.6.*) true ;;
       "") echo "no libtorch-dev in trixie's package index" >>"$work/log"; false ;;
       *) echo "trixie has libtorch-dev $version, not 2.6" >>"$work/log"; false ;;
     esac &&
     (cd "$work/deb" && apt-get "${apt[@]}" -qq download "libtorch-dev=$version") >>"$work/log" 2>&1; then
    deb=$(ls "$work"/deb/libtorch-dev_*.deb 2>/dev/null | head -n1)
  fi
  if [ -z "$deb" ] || ! dpkg-deb -x "$deb" "$work/root" 2>>"$work/log" ||
     [ ! -f "$work/root/usr/include/torch/csrc/api/include/torch/torch.h" ]; then
    tt_log "$skip: the download from $mirror (trixie) failed (no network?):"
    sed 's/^/[setup]   /' "$work/log" | tail -n 5 >&2
    rm -rf "$work"
    return 0
  fi
  mkdir -p "$dest.tmp" && rm -rf "$dest.tmp"/* &&
    mv "$work/root/usr/include" "$dest.tmp/include" &&
    echo "Debian trixie libtorch-dev $version, $(basename "$deb")" >"$dest.tmp/SOURCE" &&
    (cd "$dest.tmp" && find include -type f -print0 | sort -z |
       xargs -0 sha256sum >MANIFEST.sha256) &&
    mv "$dest.tmp" "$dest"
  local rc=$?
  rm -rf "$work" "$dest.tmp"
  [ "$rc" = 0 ] || { echo "error: could not unpack the LibTorch 2.6 headers into $dest" >&2; return 1; }
  tt_log "LibTorch 2.6 headers: libtorch-dev $version unpacked into $dest"
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
      -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; return 0 ;;
      *) echo "error: unknown option '$arg' (try --help)" >&2; return 2 ;;
    esac
  done
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || return 2
  (
    cd "$root" || exit 2
    tt_install_packages || exit $?
    tt_install_browser
    tt_fetch_libtorch26 "$build" || exit $?
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
