#!/usr/bin/env bash
# Kafka ACLs on the secure stack (docker/local/stack.sh with WEIR_STACK_SECURE=1), by role:
#
#   docker/local/kafka-acls.sh grant ROLE PRINCIPAL NAMESPACE    e.g. grant worker User:worker t1
#   docker/local/kafka-acls.sh revoke ROLE PRINCIPAL NAMESPACE   removes what grant adds
#   docker/local/kafka-acls.sh list                              every ACL of the cluster
#
# ROLE is worker, client or external (the table below); NAMESPACE is the one a Weir deployment
# runs in: its topics are <namespace>.weir.*, its consumer groups and transactional ids
# <namespace>.<something>. Granting twice is harmless (Kafka keeps one of each ACL).
# Connects as the secure stack's admin (SCRAM-SHA-512 over SASL_SSL, trusting its CA) through the
# Admin client (docker/local/KafkaAcls.java; the jars have no AclCommand). The broker and the CA
# are those of `stack.sh env` for the secure stack: WEIR_SECURE_BROKERS and WEIR_SECURE_TLS_DIR
# if set, else the secure stack's defaults (use_secure_stack in install.sh).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/install.sh"

# The ACLs of each role: every one ALLOW, for PRINCIPAL, from any host; <ns> is NAMESPACE.
ACL_TABLE='
# role     resource         pattern   name    operations
worker     Topic            PREFIXED  <ns>.   READ,WRITE,DESCRIBE
worker     Group            PREFIXED  <ns>.   READ,DESCRIBE
worker     TransactionalId  PREFIXED  <ns>.   WRITE,DESCRIBE
client     Topic            PREFIXED  <ns>.   WRITE,READ,DESCRIBE
client     Group            PREFIXED  <ns>.   READ,DESCRIBE
external   Topic            PREFIXED  <ns>.   READ,WRITE,DESCRIBE
external   Group            PREFIXED  <ns>.   READ,DESCRIBE
external   TransactionalId  PREFIXED  <ns>.   WRITE,DESCRIBE
'

usage() { sed -n '2,14p' "$0" >&2; exit 2; }

# acl_specs ROLE NAMESPACE : the role's rows as KafkaAcls.java specs, TYPE:PATTERN:OPS:NAME.
acl_specs() {
  local role type pattern name ops
  while read -r role type pattern name ops; do
    [ "$role" = "$1" ] || continue
    printf '%s\n' "$type:$pattern:$ops:${name//<ns>/$2}"
  done <<<"$ACL_TABLE"
}

acls() { # acls ARGS... : KafkaAcls.java as the secure stack's admin
  if [ -z "${WEIR_SECURE_BROKERS:-}" ] || [ -z "${WEIR_SECURE_TLS_DIR:-}" ]; then
    [ "${WEIR_STACK_SECURE:-}" = 1 ] || use_secure_stack
    eval "$(bash "$WEIR_LOCAL_DIR/stack.sh" env)"
  fi
  [ -f "$WEIR_SECURE_TLS_DIR/ca.pem" ] || die "no $WEIR_SECURE_TLS_DIR/ca.pem: is the secure stack up? (. docker/local/install.sh; use_secure_stack; docker/local/stack.sh up)"
  local admin; admin="$(tr ' ' '\n' <<<"$WEIR_SECURE_KAFKA_USERS" | grep '^admin:')"
  ensure_java17
  "$JAVA17" -Dlog4j2.level=off -cp "$WEIR_CACHE/kafka-lib/*" "$WEIR_LOCAL_DIR/KafkaAcls.java" \
    "$WEIR_SECURE_BROKERS" "$WEIR_SECURE_TLS_DIR/ca.pem" "${admin%%:*}" "${admin#*:}" "$@"
}

case "${1:-}" in
  grant|revoke)
    [ $# -eq 4 ] || usage
    action="$1" role="$2" principal="$3" ns="$4"
    case "$role" in worker|client|external) ;; *) die "unknown role '$role' (worker, client or external)" ;; esac
    [[ "$principal" == *:?* ]] || die "PRINCIPAL is TYPE:NAME, e.g. User:worker (got '$principal')"
    [[ "$ns" =~ ^[A-Za-z0-9._-]+$ ]] || die "NAMESPACE must be a non-empty Kafka name ([A-Za-z0-9._-]), got '$ns'"
    mapfile -t specs < <(acl_specs "$role" "$ns")
    acls "$action" "$principal" "${specs[@]}" ;;
  list) [ $# -eq 1 ] || usage; acls list ;;
  *) usage ;;
esac
