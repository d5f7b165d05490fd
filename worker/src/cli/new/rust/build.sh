#!/usr/bin/env bash
# Builds the components into build/ (the toolchain: toolchain/build-rust.sh).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WEIR_GUESTS_DIR="$HERE" WEIR_EXAMPLES_OUT="$HERE/build" bash "$HERE/toolchain/build-rust.sh" --rust-only
