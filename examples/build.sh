#!/usr/bin/env bash
# Builds every Weir example (examples/workflows/*, examples/activities/*, and unless
# --rust-only the TypeScript and Python ones of examples/ts and examples/python) into a WebAssembly
# component, following ../shared/TOOLCHAIN.md ("Rust guests as WASM components"):
#   - Debian's rustc-web/cargo-web/rust-web-src (nightly features via RUSTC_BOOTSTRAP, std
#     sources for -Zbuild-std) and lld-22's wasm-ld, installed here if missing;
#   - rustup's host toolchain's wasm-component-ld as the linker, which writes a finished
#     component (no `wasm-tools component new` step).
# One cargo invocation builds all guests, so std for wasm32 is compiled once; the target dir
# lives outside the clone and is reused, and the flags never change between runs (a change
# would rebuild std).
#
# Environment:
#   WEIR_GUESTS_DIR       the cargo workspace of guests     (default: this script's directory;
#                         `weir new --lang rust` projects run a copy of this script on theirs)
#   WEIR_EXAMPLES_OUT     where the components are copied   (default $WEIR_CACHE/examples, WEIR_CACHE=/var/cache/weir)
#   WEIR_EXAMPLES_TARGET  cargo target dir for the guests   (default $WEIR_CACHE/examples-target)
#   WASM_COMPONENT_LD     path of wasm-component-ld          (default: found via rustup)
# Options:
#   --install-only        install the toolchain if missing, build nothing
#   --rust-only           only the Rust examples: not the TypeScript (examples/ts/build.sh,
#                         jco from npm) and Python ones (examples/python/build.sh,
#                         componentize-py from PyPI), which the suite tests and the demo
#                         does not need
set -euo pipefail

HERE="$(cd "${WEIR_GUESTS_DIR:-$(dirname "${BASH_SOURCE[0]}")}" && pwd)"
OUT="${WEIR_EXAMPLES_OUT:-${WEIR_CACHE:-/var/cache/weir}/examples}"
TARGET_DIR="${WEIR_EXAMPLES_TARGET:-${WEIR_CACHE:-/var/cache/weir}/examples-target}"
DEB_PACKAGES=(rustc-web cargo-web rust-web-src lld-22)
DEB_RUSTC=/usr/bin/rustc
DEB_CARGO=/usr/bin/cargo
WASM_LD=/usr/lib/llvm-22/bin/wasm-ld

log() { printf 'build-rust: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

install_toolchain() {
    local missing=() p
    for p in "${DEB_PACKAGES[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$p")
        fi
    done
    if ((${#missing[@]} == 0)); then
        return 0
    fi
    log "installing missing Debian packages: ${missing[*]}"
    local sudo=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null || die "need root (or sudo) to install ${missing[*]}"
        sudo=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
}

find_wasm_component_ld() {
    if [[ -n "${WASM_COMPONENT_LD:-}" ]]; then
        [[ -x "$WASM_COMPONENT_LD" ]] || die "WASM_COMPONENT_LD=$WASM_COMPONENT_LD is not executable"
        printf '%s\n' "$WASM_COMPONENT_LD"
        return
    fi
    local rustup_bin="" host sysroot candidate
    if command -v rustup >/dev/null; then
        rustup_bin="$(command -v rustup)"
    elif [[ -x "${CARGO_HOME:-$HOME/.cargo}/bin/rustup" ]]; then
        rustup_bin="${CARGO_HOME:-$HOME/.cargo}/bin/rustup"
    fi
    if [[ -n "$rustup_bin" ]]; then
        local rustup_rustc
        rustup_rustc="$("$rustup_bin" which rustc)"
        sysroot="$(dirname "$(dirname "$rustup_rustc")")"
        host="$("$rustup_rustc" -vV | sed -n 's/^host: //p')"
        candidate="$sysroot/lib/rustlib/$host/bin/wasm-component-ld"
        if [[ -x "$candidate" ]]; then
            printf '%s\n' "$candidate"
            return
        fi
    fi
    # Fallback: any rustup toolchain that ships it, or one on PATH.
    for candidate in "${RUSTUP_HOME:-$HOME/.rustup}"/toolchains/*/lib/rustlib/*/bin/wasm-component-ld; do
        if [[ -x "$candidate" ]]; then
            printf '%s\n' "$candidate"
            return
        fi
    done
    if command -v wasm-component-ld >/dev/null; then
        command -v wasm-component-ld
        return
    fi
    die "wasm-component-ld not found (it ships with rustup's host toolchain; set WASM_COMPONENT_LD)"
}

install_only=0
rust_only=0
for arg in "$@"; do
    case "$arg" in
        --install-only) install_only=1 ;;
        --rust-only) rust_only=1 ;;
        *) die "unknown option $arg (--install-only, --rust-only)" ;;
    esac
done

install_toolchain
[[ -x "$DEB_RUSTC" && -x "$DEB_CARGO" ]] || die "$DEB_RUSTC / $DEB_CARGO missing after install"
[[ -x "$WASM_LD" ]] || die "$WASM_LD missing after install"
if ((install_only)); then
    log "toolchain ready: $("$DEB_RUSTC" --version)"
    exit 0
fi

WCL="$(find_wasm_component_ld)"

# Components = every crate under workflows/ and activities/ (crate name = directory name).
mapfile -t CRATES < <(cd "$HERE" && for d in workflows/*/ activities/*/; do
    [[ -f "$d/Cargo.toml" ]] && basename "$d"; done | sort)
((${#CRATES[@]} > 0)) || die "no example crates found under $HERE"

log "building ${#CRATES[@]} components with $("$DEB_RUSTC" --version) (target dir $TARGET_DIR)"
start=$(date +%s)
# The exact flags of TOOLCHAIN.md; keep them identical between runs.
(
    cd "$HERE"
    RUSTC="$DEB_RUSTC" RUSTC_BOOTSTRAP=1 \
    CARGO_TARGET_DIR="$TARGET_DIR" \
    CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER="$WCL" \
    CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-Clink-arg=--wasm-ld-path=$WASM_LD" \
    "$DEB_CARGO" build --release --target wasm32-unknown-unknown -Zbuild-std=std,panic_abort \
        --workspace
)
log "cargo build took $(( $(date +%s) - start )) s"

mkdir -p "$OUT"
for name in "${CRATES[@]}"; do
    src="$TARGET_DIR/wasm32-unknown-unknown/release/${name//-/_}.wasm"
    [[ -f "$src" ]] || die "expected artefact $src is missing"
    # A component starts with \0asm followed by version 0x0d and layer 0x01 (0d 00 01 00);
    # a core module has 01 00 00 00 there.
    header="$(od -An -tx1 -j4 -N4 "$src" | tr -d ' \n')"
    [[ "$header" == "0d000100" ]] || die "$src is not a component (header bytes 4..8 = $header)"
    cp -f "$src" "$OUT/$name.wasm.tmp"
    mv -f "$OUT/$name.wasm.tmp" "$OUT/$name.wasm"
done
for name in "${CRATES[@]}"; do
    printf '%s\t%s bytes\n' "$OUT/$name.wasm" "$(stat -c %s "$OUT/$name.wasm")"
done

# The same examples in TypeScript and Python (each script installs its pinned toolchain into
# the cache and rebuilds only what changed).
if ((!rust_only)) && [[ -f "$HERE/ts/build.sh" ]]; then
    WEIR_EXAMPLES_OUT="$OUT" bash "$HERE/ts/build.sh"
    WEIR_EXAMPLES_OUT="$OUT" bash "$HERE/python/build.sh"
fi
