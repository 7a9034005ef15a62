#!/usr/bin/env bash
# torch-tidy --audit against run-clang-tidy on a generated LibTorch corpus;
# see bench/audit.py.
#   bench/audit.sh [--tus N] [-j J] [--build-dir DIR] [--json FILE] [--skip-overhead]
exec python3 "$(dirname "${BASH_SOURCE[0]}")/audit.py" "$@"
