#!/usr/bin/env bash
# The language server's time from didSave to publishDiagnostics against the
# pre-commit hook on the same file, warm; see bench/lsp.py.
#   bench/lsp.sh [--libtorch 1.13|2.6|user|all]... [--runs N] [--build-dir DIR] [--json FILE] [TU]
exec python3 "$(dirname "${BASH_SOURCE[0]}")/benchlib.py" lsp.py "$@"
