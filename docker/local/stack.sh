#!/usr/bin/env bash
# The local stack for machines without Docker: one Apache Kafka (KRaft, broker+controller) and one
# Apache Cassandra 5.0 node (the CQL store standing in for ScyllaDB), both from Maven Central.
#
#   docker/local/stack.sh up       install what is missing, start both, wait until each answers
#   docker/local/stack.sh down     stop both (by pid; SIGTERM, then SIGKILL after 30 s)
#   docker/local/stack.sh status   what runs, and whether it answers
#   docker/local/stack.sh logs [kafka|cassandra]
#   docker/local/stack.sh reset    down, then wipe the data directories
#   docker/local/stack.sh env      print the variables a worker or a test needs (eval-able)
#
# Environment (defaults in brackets), so that a test run can keep its own stack beside a
# developer's:
#   WEIR_CACHE [/var/cache/weir]             downloads and build output
#   WEIR_STACK_DIR [$WEIR_CACHE/stack]       data, logs and pid files of this stack
#   WEIR_KAFKA_PORT [9092]  WEIR_KAFKA_CONTROLLER_PORT [9093]  WEIR_KAFKA_HEAP [512m]
#   WEIR_CQL_PORT [9042]    WEIR_CASSANDRA_STORAGE_PORT [7000] WEIR_CASSANDRA_JMX_PORT [7199]
#   WEIR_CASSANDRA_HEAP [1G]                 WEIR_STACK_TIMEOUT [240] seconds to wait for readiness
#
# Secure mode, WEIR_STACK_SECURE=1 (`use_secure_stack` in install.sh sets it, with the secure
# stack's dir and ports), for the security tests; same commands:
#   Kafka: clients on SASL_SSL $WEIR_KAFKA_PORT (PLAIN and SCRAM-SHA-512; users and passwords in
#     install.sh), StandardAuthorizer with no ACLs (grant them with docker/local/kafka-acls.sh);
#     a PLAINTEXT inter-broker listener WEIR_KAFKA_INTERNAL_PORT, loopback only, superuser.
#   Cassandra: CQL over TLS only, PasswordAuthenticator; a role weir/weir-secret (SUPERUSER).
#   TLS files (keytool, made once; `reset` wipes them): $WEIR_STACK_DIR/tls, with ca.pem,
#     other-ca.pem (an unrelated CA), client.pem, client-key.pem (mutual TLS).
#   Defaults: WEIR_STACK_DIR [$WEIR_CACHE/secure-stack], WEIR_KAFKA_PORT [19192],
#     WEIR_KAFKA_CONTROLLER_PORT [19193], WEIR_KAFKA_INTERNAL_PORT [19194], WEIR_CQL_PORT [19142],
#     WEIR_CASSANDRA_STORAGE_PORT [17001], WEIR_CASSANDRA_JMX_PORT [17200], WEIR_KAFKA_HEAP [384m],
#     WEIR_CASSANDRA_HEAP [768M].
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/install.sh"

if [ "${WEIR_STACK_SECURE:-0}" = 1 ]; then
  # The defaults of use_secure_stack (install.sh).
  SECURE=1
  STACK_DIR="${WEIR_STACK_DIR:-$WEIR_CACHE/secure-stack}"
  KAFKA_PORT="${WEIR_KAFKA_PORT:-19192}"
  KAFKA_CONTROLLER_PORT="${WEIR_KAFKA_CONTROLLER_PORT:-19193}"
  KAFKA_INTERNAL_PORT="${WEIR_KAFKA_INTERNAL_PORT:-19194}"
  KAFKA_HEAP="${WEIR_KAFKA_HEAP:-384m}"
  CQL_PORT="${WEIR_CQL_PORT:-19142}"
  CASSANDRA_STORAGE_PORT="${WEIR_CASSANDRA_STORAGE_PORT:-17001}"
  CASSANDRA_JMX_PORT="${WEIR_CASSANDRA_JMX_PORT:-17200}"
  CASSANDRA_HEAP="${WEIR_CASSANDRA_HEAP:-768M}"
else
  SECURE=0
  STACK_DIR="${WEIR_STACK_DIR:-$WEIR_CACHE/stack}"
  KAFKA_PORT="${WEIR_KAFKA_PORT:-9092}"
  KAFKA_CONTROLLER_PORT="${WEIR_KAFKA_CONTROLLER_PORT:-9093}"
  KAFKA_HEAP="${WEIR_KAFKA_HEAP:-512m}"
  CQL_PORT="${WEIR_CQL_PORT:-9042}"
  CASSANDRA_STORAGE_PORT="${WEIR_CASSANDRA_STORAGE_PORT:-7000}"
  CASSANDRA_JMX_PORT="${WEIR_CASSANDRA_JMX_PORT:-7199}"
  CASSANDRA_HEAP="${WEIR_CASSANDRA_HEAP:-1G}"
fi
TIMEOUT="${WEIR_STACK_TIMEOUT:-240}"
HOST=127.0.0.1
TLS_DIR="$STACK_DIR/tls"

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

port_in_use() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

probe() { # probe kafka|cassandra PORT TIMEOUT [PROBE ARGS...]
  local class=KafkaProbe; [ "$1" = cassandra ] && class=CassandraProbe
  "$JAVA17" -Dlog4j2.level=off -Dlogback.configurationFile="$WEIR_LOCAL_DIR/probe-logback.xml" -cp "$WEIR_CACHE/$1-lib/*" "$WEIR_LOCAL_DIR/$class.java" "$HOST" "$2" "$3" "${@:4}"
}

# ensure_tls : secure mode's keys and certificates in $TLS_DIR, made once with the JDK's keytool
# (openssl only turns the client's and the server's PKCS12 keys into PEM). All stores are
# PKCS12, password $WEIR_SECURE_STORE_PASSWORD (install.sh):
#   ca.p12 / ca.pem               the CA (basicConstraints CA:true, critical)
#   server.p12                    key + chain (server <- CA) of Kafka and Cassandra, SAN IP:127.0.0.1, DNS:localhost
#   server.pem, server-key.pem    the same certificate and its key in PEM (the tests' schema registry)
#   truststore.p12                the CA alone, as trusted certificate
#   client.p12 / client.pem, client-key.pem   a client certificate signed by the CA (mutual TLS);
#                                 the key unencrypted PKCS8 PEM
#   other-ca.p12 / other-ca.pem   an unrelated CA that signed nothing the servers use
ensure_tls() {
  local f missing=""
  for f in ca.pem other-ca.pem client.pem client-key.pem server.p12 server.pem server-key.pem truststore.p12; do
    [ -f "$TLS_DIR/$f" ] || missing=1
  done
  [ -z "$missing" ] && return 0
  local kt tmp="$TLS_DIR.tmp" pw="$WEIR_SECURE_STORE_PASSWORD"
  kt="$(dirname "$JAVA17")/keytool"
  [ -x "$kt" ] || die "no keytool beside $JAVA17"
  command -v openssl >/dev/null 2>&1 || ensure_apt openssl
  log "making the secure stack's CA and certificates in $TLS_DIR (keytool)"
  rm -rf "$tmp" && mkdir -p "$tmp"
  (
    set -e
    cd "$tmp"
    k() { "$kt" "$@" -storepass "$pw" >>keytool.log 2>&1 || { cat keytool.log >&2; exit 1; }; }
    newkey() { # newkey STORE ALIAS DNAME [-ext ...]
      k -genkeypair -keystore "$1" -storetype PKCS12 -alias "$2" -dname "$3" \
        -keyalg RSA -keysize 2048 -validity 3650 "${@:4}"
    }
    signed() { # signed STORE ALIAS [-ext ...] : the CA signs ALIAS's key; STORE gets the chain
      k -certreq -keystore "$1" -alias "$2" -file "$2.csr"
      k -gencert -keystore ca.p12 -alias ca -infile "$2.csr" -outfile "$2.pem" -rfc -validity 3650 "${@:3}"
      cat "$2.pem" ca.pem >"$2-chain.pem"
      k -importcert -noprompt -keystore "$1" -alias "$2" -file "$2-chain.pem"
      rm -f "$2.csr" "$2-chain.pem"
    }
    newkey ca.p12 ca "CN=Weir test CA,O=Weir" -ext bc:c -ext KU:c=keyCertSign,cRLSign
    k -exportcert -rfc -keystore ca.p12 -alias ca -file ca.pem
    newkey other-ca.p12 other-ca "CN=Weir test other CA,O=Weir" -ext bc:c -ext KU:c=keyCertSign,cRLSign
    k -exportcert -rfc -keystore other-ca.p12 -alias other-ca -file other-ca.pem
    newkey server.p12 server "CN=localhost,O=Weir"
    signed server.p12 server -ext SAN=IP:127.0.0.1,DNS:localhost \
      -ext KU:c=digitalSignature,keyEncipherment -ext EKU=serverAuth,clientAuth
    openssl pkcs12 -in server.p12 -passin "pass:$pw" -nocerts -nodes 2>>openssl.log \
      | openssl pkey -out server-key.pem 2>>openssl.log || { cat openssl.log >&2; exit 1; }
    grep -q 'BEGIN PRIVATE KEY' server-key.pem || { cat openssl.log >&2; exit 1; }
    chmod 600 server-key.pem
    k -importcert -noprompt -keystore truststore.p12 -storetype PKCS12 -alias ca -file ca.pem
    newkey client.p12 client "CN=weir-client,O=Weir"
    signed client.p12 client -ext KU:c=digitalSignature,keyEncipherment -ext EKU=clientAuth
    openssl pkcs12 -in client.p12 -passin "pass:$pw" -nocerts -nodes 2>>openssl.log \
      | openssl pkey -out client-key.pem 2>>openssl.log || { cat openssl.log >&2; exit 1; }
    grep -q 'BEGIN PRIVATE KEY' client-key.pem || { cat openssl.log >&2; exit 1; }
    chmod 600 client-key.pem
    rm -f keytool.log openssl.log
  ) || die "making the TLS files failed (in $tmp)"
  rm -rf "$TLS_DIR" && mv "$tmp" "$TLS_DIR"
}

write_kafka_config() {
  local dir="$STACK_DIR/kafka"
  mkdir -p "$dir/data"
  {
    cat <<EOF
# Generated by docker/local/stack.sh: one combined KRaft broker+controller for local tests.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$KAFKA_CONTROLLER_PORT
EOF
    if [ "$SECURE" = 1 ]; then kafka_secure_listeners; else cat <<EOF
listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
EOF
    fi
    cat <<EOF
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
log.segment.bytes=67108864
EOF
    if [ "$SECURE" = 1 ]; then kafka_secure_settings; fi
  } >"$dir/server.properties"
  cat >"$dir/log4j2.yaml" <<EOF
Configuration:
  Appenders:
    File:
      name: file
      fileName: "$dir/server.log"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: file
    Logger:
      - name: kafka.request.logger
        level: WARN
      - name: org.apache.kafka.controller
        level: WARN
EOF
}

kafka_secure_listeners() {
  cat <<EOF
# Secure mode. Clients: SASL_SSL only. INTERNAL (inter-broker) and CONTROLLER are PLAINTEXT and
# bound to $HOST only: their principal is User:ANONYMOUS, a superuser below, so nothing but this
# machine may reach them (the readiness probe asks INTERNAL).
listeners=SASL_SSL://$HOST:$KAFKA_PORT,INTERNAL://$HOST:$KAFKA_INTERNAL_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=SASL_SSL://$HOST:$KAFKA_PORT,INTERNAL://$HOST:$KAFKA_INTERNAL_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=INTERNAL
listener.security.protocol.map=SASL_SSL:SASL_SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT
EOF
}

kafka_secure_settings() {
  local pw="$WEIR_SECURE_STORE_PASSWORD" user plain=""
  for user in $WEIR_SECURE_KAFKA_USERS; do plain+=" user_${user%%:*}=\"${user#*:}\""; done
  cat <<EOF
# Secure mode: TLS (server.p12 from ensure_tls); client certificates are requested, not
# required (a client that sends one must have it signed by the CA); SASL PLAIN and
# SCRAM-SHA-512 (SCRAM credentials written at storage format, PLAIN users below).
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS_DIR/server.p12
ssl.keystore.password=$pw
ssl.key.password=$pw
ssl.truststore.type=PKCS12
ssl.truststore.location=$TLS_DIR/truststore.p12
ssl.truststore.password=$pw
listener.name.sasl_ssl.ssl.client.auth=requested
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512
listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required$plain;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
# ACLs (docker/local/kafka-acls.sh grants them); no ACL means denied. User:ANONYMOUS is the
# principal of the loopback-only PLAINTEXT listeners INTERNAL and CONTROLLER.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:ANONYMOUS
EOF
}

start_kafka() {
  local dir="$STACK_DIR/kafka"
  if pid_alive "$dir/pid"; then log "kafka already running (pid $(cat "$dir/pid"))"; return 0; fi
  port_in_use "$KAFKA_PORT" && die "port $KAFKA_PORT is taken by another process (set WEIR_KAFKA_PORT)"
  if [ "$SECURE" = 1 ] && port_in_use "$KAFKA_INTERNAL_PORT"; then
    die "port $KAFKA_INTERNAL_PORT is taken by another process (set WEIR_KAFKA_INTERNAL_PORT)"
  fi
  write_kafka_config
  local cp="$WEIR_CACHE/kafka-lib/*"
  local version formatted_by
  version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$WEIR_LOCAL_DIR/kafka/pom.xml")"
  if [ -f "$dir/data/meta.properties" ]; then
    formatted_by="$(cat "$dir/formatted-by" 2>/dev/null || echo "an earlier Kafka (4.4.0)")"
    [ "$formatted_by" = "$version" ] || die "the Kafka data in $dir/data was written by $formatted_by; this stack runs Kafka $version (pinned in docker/local/kafka/pom.xml), which may not read it: run 'docker/local/stack.sh reset' (wipes this stack's data)"
    if [ "$SECURE" = 1 ] && [ ! -f "$dir/formatted-secure" ]; then
      die "the Kafka data in $dir/data was formatted without the secure mode's SCRAM users: run 'WEIR_STACK_SECURE=1 docker/local/stack.sh reset' (wipes this stack's data)"
    fi
  fi
  if [ ! -f "$dir/data/meta.properties" ]; then
    local cluster_id
    cluster_id="$("$JAVA17" -cp "$cp" -Dlog4j2.configurationFile="$dir/log4j2.yaml" kafka.tools.StorageTool random-uuid)"
    local scram=() user
    if [ "$SECURE" = 1 ]; then
      for user in $WEIR_SECURE_KAFKA_USERS; do
        scram+=(--add-scram "SCRAM-SHA-512=[name=${user%%:*},password=${user#*:}]")
      done
    fi
    "$JAVA17" -cp "$cp" -Dlog4j2.configurationFile="$dir/log4j2.yaml" kafka.tools.StorageTool \
      format -t "$cluster_id" -c "$dir/server.properties" "${scram[@]}" >"$dir/format.log" 2>&1 \
      || { cat "$dir/format.log" >&2; die "kafka storage format failed"; }
    echo "$version" >"$dir/formatted-by"
    if [ "$SECURE" = 1 ]; then echo "formatted with the secure mode's SCRAM-SHA-512 users" >"$dir/formatted-secure"; fi
  fi
  log "starting kafka on $HOST:$KAFKA_PORT (heap $KAFKA_HEAP, data $dir/data)"
  setsid nohup "$JAVA17" -Xms"$KAFKA_HEAP" -Xmx"$KAFKA_HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$dir/log4j2.yaml" \
    -cp "$cp" kafka.Kafka "$dir/server.properties" >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$dir/pid"
}

write_cassandra_config() {
  local dir="$STACK_DIR/cassandra"
  mkdir -p "$dir/conf" "$dir/data" "$dir/commitlog" "$dir/saved_caches" "$dir/hints" "$dir/cdc_raw"
  cat >"$dir/conf/cassandra.yaml" <<EOF
# Generated by docker/local/stack.sh: one Cassandra 5.0 node on $HOST for local tests.
cluster_name: weir-local
num_tokens: 1
initial_token: 0
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
listen_address: $HOST
rpc_address: $HOST
storage_port: $CASSANDRA_STORAGE_PORT
native_transport_port: $CQL_PORT
start_native_transport: true
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "$HOST:$CASSANDRA_STORAGE_PORT"
data_file_directories:
  - $dir/data
commitlog_directory: $dir/commitlog
saved_caches_directory: $dir/saved_caches
hints_directory: $dir/hints
cdc_raw_directory: $dir/cdc_raw
# A write is acknowledged once it is synced to the commit log: with the default periodic
# sync (every 10 s) a kill -9 of this single node loses writes it had acknowledged, rows the
# materialiser had written and whose checkpoint survived (seen in the fault run). Production
# gets the same from replication (RF 3, quorum writes) or from group/batch sync.
commitlog_sync: batch
commitlog_segment_size: 8MiB
auto_snapshot: false
snapshot_before_compaction: false
# Two cores are shared with Kafka, the worker and the tests.
concurrent_reads: 8
concurrent_writes: 8
concurrent_counter_writes: 8
EOF
  if [ "$SECURE" = 1 ]; then
    local pw="$WEIR_SECURE_STORE_PASSWORD"
    cat >>"$dir/conf/cassandra.yaml" <<EOF
# Secure mode: logins (default superuser cassandra/cassandra; stack.sh adds the role
# $WEIR_SECURE_CQL_USER), no authorisation, CQL over TLS only (server.p12 from ensure_tls; client
# certificates not asked for).
authenticator:
  class_name: org.apache.cassandra.auth.PasswordAuthenticator
authorizer:
  class_name: org.apache.cassandra.auth.AllowAllAuthorizer
client_encryption_options:
  enabled: true
  optional: false
  keystore: $TLS_DIR/server.p12
  keystore_password: $pw
  truststore: $TLS_DIR/truststore.p12
  truststore_password: $pw
  store_type: PKCS12
  require_client_auth: false
EOF
  fi
  cat >"$dir/conf/logback.xml" <<EOF
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>$dir/system.log</file>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
EOF
}

start_cassandra() {
  local dir="$STACK_DIR/cassandra"
  if pid_alive "$dir/pid"; then log "cassandra already running (pid $(cat "$dir/pid"))"; return 0; fi
  port_in_use "$CQL_PORT" && die "port $CQL_PORT is taken by another process (set WEIR_CQL_PORT)"
  write_cassandra_config
  local lib="$WEIR_CACHE/cassandra-lib"
  local jamm; jamm="$(ls "$lib"/jamm-*.jar | head -n1)"
  log "starting cassandra on $HOST:$CQL_PORT (heap $CASSANDRA_HEAP, data $dir)"
  # The --add-exports/--add-opens list is the one of Cassandra's own conf/jvm17-server.options.
  # Out of heap, the node stops (its dump and system.log say why) instead of timing requests out.
  setsid nohup "$JAVA17" -Xms"$CASSANDRA_HEAP" -Xmx"$CASSANDRA_HEAP" -Xss256k -XX:+UseG1GC \
    -XX:+HeapDumpOnOutOfMemoryError -XX:HeapDumpPath="$dir" -XX:+ExitOnOutOfMemoryError \
    -javaagent:"$jamm" -Djdk.attach.allowAttachSelf=true \
    --add-exports java.base/jdk.internal.misc=ALL-UNNAMED \
    --add-exports java.base/jdk.internal.ref=ALL-UNNAMED \
    --add-exports java.base/sun.nio.ch=ALL-UNNAMED \
    --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED \
    --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED \
    --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED \
    --add-exports java.sql/java.sql=ALL-UNNAMED \
    --add-exports java.base/java.lang.ref=ALL-UNNAMED \
    --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED \
    --add-opens java.base/java.lang.module=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.loader=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.ref=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.math=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.module=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED \
    --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED \
    --add-opens java.base/sun.nio.ch=ALL-UNNAMED \
    --add-opens java.base/java.io=ALL-UNNAMED \
    --add-opens java.base/java.nio=ALL-UNNAMED \
    --add-opens java.base/java.util.concurrent=ALL-UNNAMED \
    --add-opens java.base/java.util=ALL-UNNAMED \
    --add-opens java.base/java.util.concurrent.atomic=ALL-UNNAMED \
    --add-opens java.base/java.lang=ALL-UNNAMED \
    --add-opens java.base/java.math=ALL-UNNAMED \
    --add-opens java.base/java.lang.reflect=ALL-UNNAMED \
    --add-opens java.base/java.net=ALL-UNNAMED \
    -Dcassandra.config="file://$dir/conf/cassandra.yaml" \
    -Dlogback.configurationFile="$dir/conf/logback.xml" \
    -Dcassandra.logdir="$dir" -Dcassandra.storagedir="$dir" \
    -Dcassandra-foreground=yes \
    -Dcassandra.jmx.local.port="$CASSANDRA_JMX_PORT" \
    -Dcassandra.skip_wait_for_gossip_to_settle=0 -Dcassandra.ring_delay_ms=0 \
    -Dcassandra.initial_token=0 -Dcassandra.superuser_setup_delay_ms=0 \
    -cp "$dir/conf:$lib/*" org.apache.cassandra.service.CassandraDaemon \
    >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$dir/pid"
}

wait_ready() { # wait_ready kafka|cassandra PORT [PROBE ARGS...]
  local name="$1" dir="$STACK_DIR/$1"
  if ! probe "$name" "$2" "$TIMEOUT" "${@:3}"; then
    log "$name did not become ready in ${TIMEOUT}s; last lines of its log:"
    tail -n 40 "$dir"/*.log >&2 || true
    return 1
  fi
  pid_alive "$dir/pid" || { log "$name exited"; tail -n 40 "$dir"/*.log >&2; return 1; }
}

stop_one() { # stop_one kafka|cassandra
  local pidfile="$STACK_DIR/$1/pid"
  if ! pid_alive "$pidfile"; then rm -f "$pidfile"; return 0; fi
  local pid; pid="$(cat "$pidfile")"
  log "stopping $1 (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then
    log "$1 did not stop in 30 s, killing it"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -f "$pidfile"
}

cmd_up() {
  ensure_java17
  resolve_runtime kafka
  resolve_runtime cassandra
  mkdir -p "$STACK_DIR"
  [ "$SECURE" = 1 ] && ensure_tls
  # Cassandra starts slowest: launch it first, then Kafka, then wait for both.
  start_cassandra
  start_kafka
  if [ "$SECURE" = 1 ]; then
    # Kafka: asked on the loopback PLAINTEXT listener (a superuser's). Cassandra: over TLS as the
    # default superuser, which then makes (or mends) the role of the tests.
    local role="$WEIR_SECURE_CQL_USER WITH PASSWORD = '$WEIR_SECURE_CQL_PASSWORD' AND LOGIN = true AND SUPERUSER = true"
    wait_ready kafka "$KAFKA_INTERNAL_PORT"
    wait_ready cassandra "$CQL_PORT" "$TLS_DIR/ca.pem" cassandra cassandra \
      "CREATE ROLE IF NOT EXISTS $role" "ALTER ROLE $role"
    log "secure stack up: kafka SASL_SSL $HOST:$KAFKA_PORT (internal PLAINTEXT $HOST:$KAFKA_INTERNAL_PORT), cassandra TLS $HOST:$CQL_PORT, TLS files in $TLS_DIR (state in $STACK_DIR)"
    return 0
  fi
  wait_ready kafka "$KAFKA_PORT"
  wait_ready cassandra "$CQL_PORT"
  log "stack up: kafka $HOST:$KAFKA_PORT, cassandra $HOST:$CQL_PORT (state in $STACK_DIR)"
}

cmd_status() {
  ensure_java17
  local rc=0 name port
  local secure_args=()
  for name in kafka cassandra; do
    port=$KAFKA_PORT; [ "$name" = cassandra ] && port=$CQL_PORT
    if [ "$SECURE" = 1 ]; then
      # As in cmd_up; Cassandra as the tests' role.
      secure_args=()
      [ "$name" = kafka ] && port=$KAFKA_INTERNAL_PORT
      [ "$name" = cassandra ] && secure_args=("$TLS_DIR/ca.pem" "$WEIR_SECURE_CQL_USER" "$WEIR_SECURE_CQL_PASSWORD")
    fi
    if pid_alive "$STACK_DIR/$name/pid"; then
      printf '%-10s running pid %s, ' "$name" "$(cat "$STACK_DIR/$name/pid")"
      probe "$name" "$port" 5 "${secure_args[@]}" || rc=1
    else
      printf '%-10s stopped\n' "$name"; rc=1
    fi
  done
  return $rc
}

case "${1:-}" in
  up) cmd_up ;;
  down) stop_one kafka; stop_one cassandra ;;
  status) cmd_status ;;
  logs)
    case "${2:-all}" in
      kafka) tail -n 200 "$STACK_DIR/kafka/server.log" ;;
      cassandra) tail -n 200 "$STACK_DIR/cassandra/system.log" ;;
      *) tail -n 100 "$STACK_DIR/kafka/server.log" "$STACK_DIR/cassandra/system.log" ;;
    esac ;;
  reset)
    stop_one kafka; stop_one cassandra; rm -rf "$STACK_DIR/kafka" "$STACK_DIR/cassandra"
    if [ "$SECURE" = 1 ]; then rm -rf "$TLS_DIR" "$TLS_DIR.tmp"; fi ;;
  env)
    if [ "$SECURE" = 1 ]; then
      echo "export WEIR_SECURE_BROKERS=$HOST:$KAFKA_PORT"
      echo "export WEIR_SECURE_BROKERS_INTERNAL=$HOST:$KAFKA_INTERNAL_PORT"
      echo "export WEIR_SECURE_CQL=$HOST:$CQL_PORT"
      echo "export WEIR_SECURE_TLS_DIR=$TLS_DIR"
    else
      echo "export WEIR_BROKERS=$HOST:$KAFKA_PORT"
      echo "export WEIR_CQL=$HOST:$CQL_PORT"
    fi ;;
  *) sed -n '2,31p' "$0"; exit 2 ;;
esac
