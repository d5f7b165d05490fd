#!/usr/bin/env bash
# Idempotent installers shared by the local stack, the demo and the test runner.
# Source it: `. docker/local/install.sh`. Every function is a no-op when its tool is present.
#
# Everything downloaded is cached outside the clone, under $WEIR_CACHE (default /var/cache/weir):
#   m2/             Maven repository (Kafka and Cassandra jars)
#   kafka-lib/      Kafka broker runtime classpath      cassandra-lib/  Cassandra runtime classpath
#   target/         cargo target dir of the workspace   examples/       built WASM components
#   external-activity-lib/  classpath of the tests' external activity (tests/java/pom.xml)

WEIR_CACHE="${WEIR_CACHE:-/var/cache/weir}"
export WEIR_CACHE
WEIR_LOCAL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# The private stack of the test runner and the fault run: its own data and ports (below
# 32768), set by the WEIR_TEST_* variables, beside any developer stack.
use_test_stack() {
  export WEIR_STACK_DIR="${WEIR_TEST_STACK_DIR:-$WEIR_CACHE/test-stack}"
  export WEIR_KAFKA_PORT="${WEIR_TEST_KAFKA_PORT:-19092}"
  export WEIR_KAFKA_CONTROLLER_PORT="${WEIR_TEST_KAFKA_CONTROLLER_PORT:-19093}"
  export WEIR_CQL_PORT="${WEIR_TEST_CQL_PORT:-19042}"
  export WEIR_CASSANDRA_STORAGE_PORT="${WEIR_TEST_CASSANDRA_STORAGE_PORT:-17000}"
  export WEIR_CASSANDRA_JMX_PORT="${WEIR_TEST_CASSANDRA_JMX_PORT:-17199}"
  export WEIR_BROKERS="127.0.0.1:$WEIR_KAFKA_PORT"
  export WEIR_CQL="127.0.0.1:$WEIR_CQL_PORT"
}

# The secure stack of the security tests (stack.sh with WEIR_STACK_SECURE=1): Kafka with SASL_SSL
# (PLAIN and SCRAM-SHA-512) and ACLs, Cassandra with TLS and passwords; its own data, TLS files
# and ports (below 32768), set by the WEIR_SECURE_* variables, beside the other two stacks.
# Exports the WEIR_SECURE_* addresses that `stack.sh env` prints; not WEIR_BROKERS / WEIR_CQL.
use_secure_stack() {
  export WEIR_STACK_SECURE=1
  export WEIR_STACK_DIR="${WEIR_SECURE_STACK_DIR:-$WEIR_CACHE/secure-stack}"
  export WEIR_KAFKA_PORT="${WEIR_SECURE_KAFKA_PORT:-19192}"
  export WEIR_KAFKA_CONTROLLER_PORT="${WEIR_SECURE_KAFKA_CONTROLLER_PORT:-19193}"
  export WEIR_KAFKA_INTERNAL_PORT="${WEIR_SECURE_KAFKA_INTERNAL_PORT:-19194}"
  export WEIR_CQL_PORT="${WEIR_SECURE_CQL_PORT:-19142}"
  export WEIR_CASSANDRA_STORAGE_PORT="${WEIR_SECURE_CASSANDRA_STORAGE_PORT:-17001}"
  export WEIR_CASSANDRA_JMX_PORT="${WEIR_SECURE_CASSANDRA_JMX_PORT:-17200}"
  export WEIR_KAFKA_HEAP="${WEIR_SECURE_KAFKA_HEAP:-384m}"
  export WEIR_CASSANDRA_HEAP="${WEIR_SECURE_CASSANDRA_HEAP:-768M}"
  export WEIR_SECURE_BROKERS="127.0.0.1:$WEIR_KAFKA_PORT"
  export WEIR_SECURE_BROKERS_INTERNAL="127.0.0.1:$WEIR_KAFKA_INTERNAL_PORT"
  export WEIR_SECURE_CQL="127.0.0.1:$WEIR_CQL_PORT"
  export WEIR_SECURE_TLS_DIR="$WEIR_STACK_DIR/tls"
}

# The secure stack's fixed test credentials (test values only; stack.sh and kafka-acls.sh read
# them from here). Kafka users, each with both SCRAM-SHA-512 and PLAIN, as name:password:
WEIR_SECURE_KAFKA_USERS="admin:admin-secret worker:worker-secret client:client-secret intruder:intruder-secret"
# Cassandra: the default superuser cassandra/cassandra, and the role stack.sh creates
# (LOGIN, SUPERUSER) after start:
WEIR_SECURE_CQL_USER=weir WEIR_SECURE_CQL_PASSWORD=weir-secret
# The password of every PKCS12 store (and key) in $WEIR_STACK_DIR/tls:
WEIR_SECURE_STORE_PASSWORD=weir-store-secret

log() { printf '[weir %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

_apt_updated=""
# ensure_apt PACKAGE... : installs the Debian packages that are not installed yet.
ensure_apt() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "missing Debian packages ${missing[*]}: run as root or install them"
  if [ -z "$_apt_updated" ]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    _apt_updated=1
  fi
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# ensure_java17 : exports JAVA17 (path of a Java 17 `java`). Kafka 4 needs 17+, Cassandra 5.0 11 or 17.
ensure_java17() {
  local candidate
  for candidate in "${JAVA17:-}" /usr/lib/jvm/java-17-openjdk-amd64/bin/java /usr/lib/jvm/java-17-openjdk-arm64/bin/java; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then export JAVA17="$candidate"; return 0; fi
  done
  ensure_apt openjdk-17-jdk-headless
  JAVA17="$(ls /usr/lib/jvm/java-17-openjdk-*/bin/java | head -n1)"
  [ -x "$JAVA17" ] || die "Java 17 not found after installing openjdk-17-jdk-headless"
  export JAVA17
}

ensure_maven() {
  command -v mvn >/dev/null 2>&1 || ensure_apt maven
}

# resolve_runtime NAME [POM] : copies the runtime classpath described by POM (default
# docker/local/NAME/pom.xml) into $WEIR_CACHE/NAME-lib. Re-resolves only when the pom changes (its
# checksum is kept beside the jars).
resolve_runtime() {
  local name="$1" pom="${2:-$WEIR_LOCAL_DIR/$1/pom.xml}" dest="$WEIR_CACHE/$1-lib"
  local sum; sum="$(sha256sum "$pom" | cut -d' ' -f1)"
  if [ -f "$dest/.pom.sha256" ] && [ "$(cat "$dest/.pom.sha256")" = "$sum" ]; then return 0; fi
  ensure_java17
  ensure_maven
  log "resolving $name from Maven Central into $dest (cached in $WEIR_CACHE/m2)"
  rm -rf "$dest.tmp"
  JAVA_HOME="$(dirname "$(dirname "$JAVA17")")" mvn -B -q -f "$pom" \
    -Dmaven.repo.local="$WEIR_CACHE/m2" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$dest.tmp" >"$WEIR_CACHE/mvn-$name.log" 2>&1 \
    || { tail -n 30 "$WEIR_CACHE/mvn-$name.log" >&2; die "Maven could not resolve $name (log: $WEIR_CACHE/mvn-$name.log)"; }
  echo "$sum" >"$dest.tmp/.pom.sha256"
  rm -rf "$dest" && mv "$dest.tmp" "$dest"
}

# ensure_rust_build_deps : what cargo needs to build the workspace (librdkafka is built from
# source by rdkafka-sys; zlib and zstd are linked from Debian).
ensure_rust_build_deps() {
  ensure_apt build-essential cmake pkg-config zlib1g-dev libssl-dev libsasl2-dev libzstd-dev curl ca-certificates
  if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
      export PATH="$HOME/.cargo/bin:$PATH"
    else
      # Debian's newest Rust toolchain; rustup cannot download toolchains on the machines we target.
      ensure_apt rustc-web cargo-web
    fi
  fi
  command -v cargo >/dev/null 2>&1 || die "no cargo on PATH after installation"
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$WEIR_CACHE/target}"
  mkdir -p "$CARGO_TARGET_DIR"
}
