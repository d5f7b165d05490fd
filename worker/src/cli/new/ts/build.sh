#!/usr/bin/env bash
# Builds the components into build/ (the toolchain: toolchain/build-ts.sh).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WEIR_TS_DIR="$HERE" WEIR_WIT="$HERE/wit" WEIR_EXAMPLES_OUT="$HERE/build" bash "$HERE/toolchain/build-ts.sh"
