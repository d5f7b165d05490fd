#!/usr/bin/env bash
# Builds the Python examples (examples/python/{workflows,activities}/<name>/app.py) into
# components with
# componentize-py (CPython). Called by examples/build.sh.
#
# - componentize-py, pinned in requirements.txt, is installed into a virtualenv at
#   $WEIR_CACHE/py-toolchain, again only when requirements.txt changes.
# - `workflows/<name>/app.py` and `activities/<name>/app.py` build the world `<name>` of
#   examples/wit/worlds.wit into `<name>-py.wasm`. CPython imports WASI (clocks, random, cli,
#   io, filesystem, sockets), which workflows get deterministically
#   (docs/design/deterministic-wasi.md) and activities as they are, with wasi:http.
# - A component is rebuilt only when its sources, the WIT or the toolchain changed (a stamp of
#   their digest beside it).
#
# Environment: WEIR_EXAMPLES_OUT (where components go), WEIR_CACHE (default /var/cache/weir),
# WEIR_PY_DIR (the sources, default this script's directory), WEIR_WIT (default $WEIR_PY_DIR/../wit).
set -euo pipefail

# The sources (workflows/, activities/, requirements.txt) and the WIT: the examples', or those
# of a `weir new --lang python` project, which runs a copy of this script.
HERE="$(cd "${WEIR_PY_DIR:-$(dirname "${BASH_SOURCE[0]}")}" && pwd)"
WIT="$(cd "${WEIR_WIT:-$HERE/../wit}" && pwd)"
CACHE="${WEIR_CACHE:-/var/cache/weir}"
OUT="${WEIR_EXAMPLES_OUT:-$CACHE/examples}"
VENV="$CACHE/py-toolchain"

log() { printf 'build-python: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v python3 >/dev/null || die "python3 is required (3.10+)"

req_digest="$(sha256sum "$HERE/requirements.txt" | cut -c1-16)"
if [[ "$(cat "$VENV/.requirements-digest" 2>/dev/null)" != "$req_digest" ]]; then
    log "installing the toolchain into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$HERE/requirements.txt"
    printf '%s\n' "$req_digest" > "$VENV/.requirements-digest"
fi
CPY="$VENV/bin/componentize-py"
[[ -x "$CPY" ]] || die "$CPY missing after install"

mkdir -p "$OUT"
wit_digest="$(cd "$WIT" && find -L . -type f -name '*.wit' | sort | xargs cat | sha256sum | cut -c1-16)"
for dir in "$HERE"/workflows/*/ "$HERE"/activities/*/; do
    name="$(basename "$dir")"
    [[ -f "$dir/app.py" ]] || continue
    out="$OUT/$name-py.wasm"
    # Of the contents and relative names only: a copy of the project builds nothing again.
    stamp="$req_digest-$wit_digest-$(cd "$dir" && find . -name '*.py' | sort | xargs sha256sum | sha256sum | cut -c1-16)"
    if [[ -f "$out" && "$(cat "$out.stamp" 2>/dev/null)" == "$stamp" ]]; then
        continue
    fi
    start=$(date +%s)
    "$CPY" -d "$WIT" -w "$name" componentize app -p "$dir" -o "$out.tmp" >"$out.log" 2>&1 \
        || { cat "$out.log" >&2; die "componentize-py of $name failed"; }
    mv -f "$out.tmp" "$out"
    rm -f "$out.log"
    printf '%s\n' "$stamp" > "$out.stamp"
    log "built $out ($(stat -c %s "$out") bytes) in $(( $(date +%s) - start )) s"
done
