#!/usr/bin/env bash
# Weir's main job on a machine without Docker:
#   bash docker/local/demo.sh
# Installs what is missing, brings up the local stack (Kafka + Cassandra on the default ports,
# left running for you to explore; stop it with `bash docker/local/stack.sh down`), builds the
# example components and `weir`, applies the topology, starts a worker, runs the `order` saga
# end to end and prints its result and its history, then stops the worker.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
. docker/local/install.sh

started=$(date +%s)
ensure_rust_build_deps
# Every Debian package before anything runs in the background (apt takes one lock).
ensure_java17
ensure_maven
# The stack boots (and, the first time, fetches Kafka and Cassandra) while cargo builds: on a
# fresh machine each takes minutes, and one waits for the network or the JVMs, the other for
# the CPU. Both are waited for before anything runs.
stack_log="$WEIR_CACHE/demo-stack-up.log"
mkdir -p "$WEIR_CACHE"
log "bringing the stack up in the background (log: $stack_log)"
bash docker/local/stack.sh up >"$stack_log" 2>&1 &
stack_pid=$!
eval "$(bash docker/local/stack.sh env)"
export WEIR_BROKERS WEIR_CQL
export WEIR_COMPONENTS_DIR="$WEIR_CACHE/examples"

# The guests' toolchain (Debian packages) first, then the example components build beside
# weir: each has stretches where it keeps one core busy, not two.
bash examples/build.sh --install-only
examples_log="$WEIR_CACHE/demo-examples.log"
log "building the example components in the background (log: $examples_log)"
WEIR_EXAMPLES_OUT="$WEIR_COMPONENTS_DIR" bash examples/build.sh --rust-only >"$examples_log" 2>&1 &
examples_pid=$!
log "building weir"
# The dev profile shares its build with the test suite; dependencies (wasmtime, librdkafka,
# the CQL driver) are optimised in it anyway (see the workspace Cargo.toml).
cargo build -p weir --bins --locked
WEIR="$CARGO_TARGET_DIR/debug/weir"
if ! wait "$examples_pid"; then
  cat "$examples_log" >&2
  die "the example components did not build"
fi

if ! wait "$stack_pid"; then
  cat "$stack_log" >&2
  die "the local stack did not come up"
fi
log "stack up: kafka $WEIR_BROKERS, cassandra $WEIR_CQL"

log "applying the topology (topics and CQL schema)"
"$WEIR" topology apply

log "starting a worker (log: $WEIR_CACHE/demo-worker.log, metrics: http://127.0.0.1:9464/metrics)"
"$WEIR" worker --metrics-addr 127.0.0.1:9464 >"$WEIR_CACHE/demo-worker.log" 2>&1 &
worker=$!
trap 'kill "$worker" 2>/dev/null; wait "$worker" 2>/dev/null || true' EXIT
# Its first take-over (the group joined, each partition's history and state read) takes a few
# seconds on a new deployment: wait for it, so that what follows times the saga, not the start.
log "waiting for the worker to take its partitions over"
ready_by=$(( $(date +%s) + 120 ))
until curl -fsS http://127.0.0.1:9464/metrics 2>/dev/null \
    | awk '$1 == "weir_partitions_owned" && $2 > 0 { found = 1 } END { exit !found }'; do
  if ! kill -0 "$worker" 2>/dev/null; then
    tail -n 30 "$WEIR_CACHE/demo-worker.log" >&2
    die "the worker stopped (log: $WEIR_CACHE/demo-worker.log)"
  fi
  [ "$(date +%s)" -lt "$ready_by" ] || die "the worker owns no partition after 120 s (log: $WEIR_CACHE/demo-worker.log)"
  sleep 0.2
done

order='[{"id":"demo-1","customer":"alice","sku":"widget","quantity":2,"address":"1 Main St"}]'
log "submitting the order saga: weir submit weir-examples:workflows/order.checkout '$order' --follow"
# --follow prints the execution's id, then its history as the store gets it (what `weir
# history` prints: when each step happened, how long each activity ran, how long it all took
# from the submission), then its result.
follow="$WEIR_CACHE/demo-follow.txt"
"$WEIR" submit weir-examples:workflows/order.checkout "$order" --follow --timeout 120 | tee "$follow"
id="$(head -n1 "$follow")"
echo
echo "That was execution $id: its history again with \`weir history $id\`, its page at"
echo "http://127.0.0.1:8080/ui/#/executions/$id after \`weir serve\`."
echo "The demo took $(( $(date +%s) - started )) s."
echo "The stack is still up: Kafka at $WEIR_BROKERS, Cassandra at $WEIR_CQL."
echo "Stop it with:  bash docker/local/stack.sh down"
