#!/usr/bin/env bash
# The torch-* checks' cost over `clang++-19 -fsyntax-only`; see bench/run.py.
#   bench/run.sh [--runs N] [--build-dir DIR] [--json FILE] [TU...]
exec python3 "$(dirname "${BASH_SOURCE[0]}")/run.py" "$@"
