#!/usr/bin/env bash
# The fault run of issue 11, on a private local stack of its own:
#   bash tests/faults/run.sh                       # every scenario, 2,000 executions each
#   bash tests/faults/run.sh kill9 freeze --executions 2000
#   bash tests/faults/run.sh broker-kill --faults 2 --seed 7
# Scenarios: kill9, kill9-dynamic, freeze, broker-kill, cassandra-kill, cassandra-stop (or all);
# every option: `tests/faults/run.sh --help` (the `fault_run` binary, tests/src/bin/fault_run.rs).
#
# Like tests/run.sh it installs what is missing, resets and starts the stack (same variables:
# WEIR_TEST_STACK_DIR, WEIR_TEST_KAFKA_PORT, … — so do not run both at once with the same
# ones), builds the examples, `weir` and `fault_run`, runs the scenarios and stops the stack
# whatever happens. Its own stack because the broker and Cassandra scenarios kill -9 them.
# Takes a few minutes per scenario; prints an account per scenario and a summary table, exits 1
# when an invariant broke. Worker logs stay in $TMPDIR/weir-e2e/<namespace>/ (printed).
# WEIR_FAULTS_STACK_SCRIPT: another copy of docker/local/stack.sh to run the stack with (e.g.
# one whose Cassandra syncs its commit log on every write; see docs/faults.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
. docker/local/install.sh
started=$(date +%s)

# A private stack for the tests: other ports, its own fresh data.
use_test_stack
# The fault run restarts the services it kills with the same script.
export WEIR_FAULTS_STACK_SCRIPT="${WEIR_FAULTS_STACK_SCRIPT:-$ROOT/docker/local/stack.sh}"
STACK_SH="$WEIR_FAULTS_STACK_SCRIPT"

for arg in "$@"; do
  case "$arg" in -h|--help)
    ensure_rust_build_deps
    cargo run -q --locked -p weir-e2e --bin fault_run -- --help; exit 0 ;;
  esac
done

log "installing build and runtime prerequisites"
ensure_rust_build_deps
ensure_java17
resolve_runtime kafka
resolve_runtime cassandra

stop_stack() {
  local rc=$?
  bash "$STACK_SH" down || true
  log "tests/faults/run.sh finished in $(( $(date +%s) - started ))s with exit code $rc"
}
trap stop_stack EXIT

bash "$STACK_SH" reset
bash "$STACK_SH" up >"$WEIR_CACHE/fault-stack-up.log" 2>&1 &
stack_pid=$!

log "building the example WASM components"
bash examples/build.sh --rust-only
log "building weir and fault_run (target dir ${CARGO_TARGET_DIR:-target})"
cargo build --locked -p weir --bins -p weir-e2e --bin fault_run

if ! wait "$stack_pid"; then
  cat "$WEIR_CACHE/fault-stack-up.log" >&2
  die "the local stack did not come up"
fi
log "stack up: kafka $WEIR_BROKERS, cassandra $WEIR_CQL (state in $WEIR_STACK_DIR)"
"${CARGO_TARGET_DIR:-$ROOT/target}/debug/fault_run" "$@"
