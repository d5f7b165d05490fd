#!/usr/bin/env bash
# Builds the TypeScript examples (examples/ts/{workflows,activities}/*.ts) into components with jco
# (componentize-js, StarlingMonkey), after type-checking each against the TypeScript types jco
# generates from its WIT world (`jco guest-types`). Called by examples/build.sh.
#
# - The toolchain (toolchain/package.json, pinned by toolchain/package-lock.json) is installed
#   with `npm ci` into $WEIR_CACHE/js-toolchain, again only when the lock file changes.
# - `workflows/<name>.ts` and `activities/<name>.ts` build the world `<name>` of
#   examples/wit/worlds.wit into `<name>-ts.wasm`. Workflows get the deterministic WASI
#   (docs/design/deterministic-wasi.md) but no HTTP: they are built with `--disable http
#   --disable fetch-event`. Activities keep everything (fetch() over wasi:http).
# - A component is rebuilt only when its source, the WIT or the toolchain changed (a stamp of
#   their digest beside it).
#
# Environment: WEIR_EXAMPLES_OUT (where components go), WEIR_CACHE (default /var/cache/weir),
# WEIR_TS_DIR (the sources, default this script's directory), WEIR_WIT (default $WEIR_TS_DIR/../wit).
set -euo pipefail

# The sources (workflows/, activities/, tsconfig.json, toolchain/) and the WIT: the examples',
# or those of a `weir new --lang ts` project, which runs a copy of this script.
HERE="$(cd "${WEIR_TS_DIR:-$(dirname "${BASH_SOURCE[0]}")}" && pwd)"
WIT="$(cd "${WEIR_WIT:-$HERE/../wit}" && pwd)"
CACHE="${WEIR_CACHE:-/var/cache/weir}"
OUT="${WEIR_EXAMPLES_OUT:-$CACHE/examples}"
TOOLCHAIN="$CACHE/js-toolchain"

log() { printf 'build-ts: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v node >/dev/null || die "node is required (Node.js 20+)"
command -v npm >/dev/null || die "npm is required"

lock_digest="$(sha256sum "$HERE/toolchain/package-lock.json" | cut -c1-16)"
if [[ "$(cat "$TOOLCHAIN/.lock-digest" 2>/dev/null)" != "$lock_digest" ]]; then
    log "installing the toolchain into $TOOLCHAIN (npm ci)"
    mkdir -p "$TOOLCHAIN"
    cp "$HERE/toolchain/package.json" "$HERE/toolchain/package-lock.json" "$TOOLCHAIN/"
    (cd "$TOOLCHAIN" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    printf '%s\n' "$lock_digest" > "$TOOLCHAIN/.lock-digest"
fi

JCO="$TOOLCHAIN/node_modules/@bytecodealliance/jco/dist/jco.js"
TSC="$TOOLCHAIN/node_modules/.bin/tsc"
[[ -f "$JCO" ]] || die "$JCO missing after install"
WEIR_JCO_SHIMS="$(find "$TOOLCHAIN/node_modules" -path '*/preview2-shim/lib/nodejs/filesystem.js' \
    -o -path '*/preview2-shim/dist/nodejs/filesystem.js' | paste -sd: -)"
export WEIR_JCO_SHIMS
# jco's tools see the whole file system: the WIT's deps may link anywhere (the examples'
# into schemas/).
jco() { WEIR_JCO_PREOPENS=/ node --import "$HERE/toolchain/preopen.mjs" "$JCO" "$@"; }

mkdir -p "$OUT"
wit_digest="$(cd "$WIT" && find -L . -type f -name '*.wit' | sort | xargs cat | sha256sum | cut -c1-16)"
for source in "$HERE"/workflows/*.ts "$HERE"/activities/*.ts; do
    name="$(basename "$source" .ts)"
    features=()
    if [[ "$source" == "$HERE"/workflows/* ]]; then
        features=(--disable http --disable fetch-event)
    fi
    out="$OUT/$name-ts.wasm"
    # Of the contents only, not the paths: a copy of the project builds nothing again.
    stamp="$lock_digest-$wit_digest-$(cat "$source" "$HERE/tsconfig.json" | sha256sum | cut -c1-16)"
    if [[ -f "$out" && "$(cat "$out.stamp" 2>/dev/null)" == "$stamp" ]]; then
        continue
    fi
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    start=$(date +%s)
    # Types of the world, then a type check of the source against them.
    jco guest-types "$WIT" --world-name "$name" -o "$work/types" >/dev/null
    cat > "$work/tsconfig.json" <<JSON
{ "extends": "$HERE/tsconfig.json", "files": ["$source", "$work/types/$name.d.ts"] }
JSON
    "$TSC" -p "$work/tsconfig.json" || die "$name.ts does not type-check against world $name"
    # The bundler reports the WIT imports as unresolved modules: they are, until the
    # component is linked. Its output is shown only if the build fails.
    jco componentize "$source" --wit "$WIT" --world-name "$name" \
        "${features[@]}" -o "$work/$name.wasm" >"$work/build.log" 2>&1 \
        || { cat "$work/build.log" >&2; die "componentize of $name.ts failed"; }
    mv -f "$work/$name.wasm" "$out"
    printf '%s\n' "$stamp" > "$out.stamp"
    rm -rf "$work"
    trap - EXIT
    log "built $out ($(stat -c %s "$out") bytes) in $(( $(date +%s) - start )) s"
done
