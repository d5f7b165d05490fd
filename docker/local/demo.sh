#!/usr/bin/env bash
# Weir's main job on a machine without Docker:
#   bash docker/local/demo.sh
# Installs what is missing, brings up the local stack (Kafka + Cassandra, default ports, left
# running for you to explore; stop it with `docker/local/stack.sh down`), builds `weir`, and
# applies the topology (topics and CQL schema).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
. docker/local/install.sh

ensure_rust_build_deps
bash docker/local/stack.sh up
eval "$(bash docker/local/stack.sh env)"
export WEIR_BROKERS WEIR_CQL

log "building weir"
cargo build --release -p weir --bins --locked
WEIR="$CARGO_TARGET_DIR/release/weir"

log "applying the topology (topics and CQL schema)"
"$WEIR" topology apply

cat <<MSG

The stack is up and the topology applied: Kafka at $WEIR_BROKERS, Cassandra at $WEIR_CQL.
The workflow engine (weir worker / weir submit) is not built yet, so the demo stops here.
Stop the stack with:  bash docker/local/stack.sh down
MSG
