#!/usr/bin/env bash
# torch-tidy --audit against run-clang-tidy on a generated LibTorch corpus;
# see bench/audit.py.
#   bench/audit.sh [--libtorch 1.13|2.6|user|all]... [--tus N] [-j J] [--build-dir DIR] [--json FILE] [--skip-overhead]
# One run, and one set of ratios, per LibTorch header set (default 1.13).
exec python3 "$(dirname "${BASH_SOURCE[0]}")/benchlib.py" audit.py "$@"
