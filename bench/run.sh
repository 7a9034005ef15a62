#!/usr/bin/env bash
# The torch-* checks' cost over `clang++-19 -fsyntax-only`; see bench/run.py.
#   bench/run.sh [--libtorch 1.13|2.6|user|all]... [--runs N] [--build-dir DIR] [--json FILE] [TU...]
# One run, and one set of ratios, per LibTorch header set (default 1.13).
exec python3 "$(dirname "${BASH_SOURCE[0]}")/benchlib.py" run.py "$@"
