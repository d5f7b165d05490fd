#!/usr/bin/env bash
# The whole test suite, on a machine that may have never seen the project:
#   bash tests/run.sh
# Installs what is missing (Debian packages, Maven artifacts into $WEIR_CACHE), starts a private
# local stack (Kafka + Cassandra on their own ports and data directory, beside any developer
# stack), builds the workspace and the WASM examples, applies the topology, runs every test, and
# stops the stack whatever happens. Arguments are passed to `cargo test` (e.g. a test filter).
#
# Caches (kept between runs, outside the clone): $WEIR_CACHE (default /var/cache/weir) holds the
# Maven repository, the Kafka and Cassandra classpaths, the cargo target dirs and the components.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
. docker/local/install.sh
started=$(date +%s)
# The output of `cargo test`, kept for the table of times printed at the end.
test_output="$WEIR_CACHE/test-output.log"
mkdir -p "$WEIR_CACHE" && rm -f "$test_output"

# A private stack for the tests: other ports, its own fresh data.
use_test_stack

log "installing build and runtime prerequisites"
ensure_rust_build_deps
ensure_java17
# The web UI's browser test (tests/tests/ui_e2e.rs): Debian's Chromium and its WebDriver.
ensure_apt chromium chromium-driver
# tests/lanes.sh lists the test binaries from cargo's JSON messages.
ensure_apt jq
resolve_runtime kafka
resolve_runtime cassandra
# The external activity of the e2e tests (tests/java/TaxService.java): kafka-clients + Avro only.
resolve_runtime external-activity "$ROOT/tests/java/pom.xml"

# The secure stack of the security tests (tests/tests/security_e2e.rs): Kafka with SASL_SSL and
# ACLs, Cassandra with password authentication and TLS, on ports of its own.
secure() { (use_secure_stack; bash docker/local/stack.sh "$@"); }

# Each test binary's time and outcome, slowest first, from the output of `cargo test`.
suite_times() {
  [ -s "$test_output" ] || return 0
  log "test binaries, slowest first (seconds, outcome):"
  awk '/^ *Running /{name=$NF; gsub(/[()]/, "", name); sub(/.*\//, "", name); sub(/-[0-9a-f]+$/, "", name)}
       /^ *Doc-tests /{name="doc-tests " $2}
       /^test result: /{t=$NF; sub(/s$/, "", t); printf "%8.1f  %-8s %s\n", t, ($3=="ok." ? "ok" : "FAILED"), name}' \
    "$test_output" | sort -rn | head -n 40 >&2
}

stop_stack() {
  local rc=$?
  # weir-core's tests, if the run stopped before it waited for them.
  if [ -n "${core_pid:-}" ] && kill -0 "$core_pid" 2>/dev/null; then
    pkill -TERM -P "$core_pid" 2>/dev/null || true
  fi
  suite_times || true
  bash docker/local/stack.sh down || true
  secure down || true
  log "tests/run.sh finished in $(( $(date +%s) - started ))s with exit code $rc"
}
trap stop_stack EXIT

# The stack boots while cargo compiles; both are waited for before any test runs.
bash docker/local/stack.sh reset
bash docker/local/stack.sh up >"$WEIR_CACHE/test-stack-up.log" 2>&1 &
stack_pid=$!
secure reset
secure up >"$WEIR_CACHE/secure-stack-up.log" 2>&1 &
secure_pid=$!
eval "$(secure env)"

# weir-core's own tests are pure (the simulation among them, most of the suite's CPU): with
# no arguments they run optimized, with debug assertions and overflow checks on, in a target
# dir of their own (no lock shared with the other cargo), beside the end-to-end tests, which
# mostly wait on the stack.
core_apart=$([ $# -eq 0 ] && echo 1 || echo 0)
core_output="$WEIR_CACHE/test-output-core.log"
core_rc="$WEIR_CACHE/test-output-core.rc"
rm -f "$core_output" "$core_rc"
core_tests() {
  CARGO_TARGET_DIR="$WEIR_CACHE/target-core-release" \
    CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true \
    cargo test --release --locked --no-fail-fast -p weir-core --features test-util \
    >"$core_output" 2>&1
  echo $? >"$core_rc"
}
# They need nothing else: they build and run from the start, beside everything below.
if [ "$core_apart" = 1 ]; then
  core_tests &
  core_pid=$!
fi

if [ -f examples/build.sh ]; then
  log "building the example WASM components"
  bash examples/build.sh
fi
log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
log "building the workspace (target dir $CARGO_TARGET_DIR)"
if [ "$core_apart" = 1 ]; then
  cargo build --workspace --exclude weir-core --bins --tests --benches --locked
else
  cargo build --workspace --bins --tests --benches --locked
fi

if ! wait "$stack_pid"; then
  cat "$WEIR_CACHE/test-stack-up.log" >&2
  die "the local stack did not come up"
fi
log "stack up: kafka $WEIR_BROKERS, cassandra $WEIR_CQL"
if ! wait "$secure_pid"; then
  cat "$WEIR_CACHE/secure-stack-up.log" >&2
  die "the secure stack did not come up"
fi
log "secure stack up: kafka $WEIR_SECURE_BROKERS, cassandra $WEIR_SECURE_CQL"
"$CARGO_TARGET_DIR/debug/weir" topology apply

log "running the tests"
# Every binary runs even when one fails, so one failure does not hide another.
if [ "$core_apart" = 1 ]; then
  rc=0
  # The rest in parallel lanes (tests/lanes.sh: most of it waits on the stack).
  bash tests/lanes.sh "$test_output" || rc=$?
  log "waiting for weir-core's tests (release)"
  wait "$core_pid" || true
  tee -a "$test_output" <"$core_output"
  core_status="$(cat "$core_rc" 2>/dev/null || echo 1)"
  [ "$core_status" = 0 ] || log "weir-core's tests failed (exit code $core_status)"
  [ "$rc" = 0 ] && [ "$core_status" = 0 ]
else
  cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$test_output"
fi
