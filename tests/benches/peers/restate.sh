#!/usr/bin/env bash
# Restate peer of Weir's step benchmark: Weir's scenarios (tests/benches/stack.rs) run against
# a local Restate server on this machine, for a side-by-side reading.
#
#   bash tests/benches/peers/restate.sh
#
# Installs the pinned restate-server and TypeScript SDK (restate/package-lock.json) with npm
# into ${WEIR_CACHE:-/var/cache/weir}/peers/restate, once (reused while the lock is
# unchanged); starts restate-server from there, its data in a fresh temporary directory, all
# of its ports on 127.0.0.1 in 26000-26100; starts the `steps` service (restate/service.mjs);
# registers it; runs restate/bench.mjs; stops everything on exit.
#
# stdout: one JSON object per scenario (bench.mjs), stderr: progress and human-readable lines.
#
# Ports (RESTATE_PEER_PORT_BASE, default 26000; each must be free):
#   base+1 fabric (node-to-node, metadata), base+2 admin, base+3 ingress, base+4 the service.
# RESTATE_PEER_KEEP=1 keeps the temporary directory (server and service logs).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src="$here/restate"
cache="${WEIR_CACHE:-/var/cache/weir}/peers/restate"
base=${RESTATE_PEER_PORT_BASE:-26000}
fabric_port=$((base + 1)) admin_port=$((base + 2)) ingress_port=$((base + 3)) service_port=$((base + 4))
admin="http://127.0.0.1:$admin_port"
ingress="http://127.0.0.1:$ingress_port"

say() { echo "restate peer: $*" >&2; }
die() { say "error: $*"; exit 1; }

for tool in node npm curl ss; do
  command -v "$tool" >/dev/null || die "$tool not found"
done
node_major=$(node -p 'process.versions.node.split(".")[0]')
(( node_major >= 20 )) || die "node >= 20 needed, found $(node --version)"
(( base >= 1024 && base + 4 < 32768 )) || die "RESTATE_PEER_PORT_BASE=$base: the ports must lie in 1024..32767"

# Polls CONDITION (a command) every 0.2 s until it succeeds, for at most SECONDS s; fails with
# WHAT when it never does, or when the process PID (if given) has exited.
wait_for() {
  local what=$1 seconds=$2 pid=$3; shift 3
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
      die "$what: the process $pid has exited"
    fi
    (( SECONDS < deadline )) || die "$what: not after ${seconds}s"
    sleep 0.2
  done
}

# --- install (once per lock) ----------------------------------------------------------------
install() {
  mkdir -p "$cache"
  exec 9>"$cache/.install.lock"
  flock 9
  local bin="$cache/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"
  if cmp -s "$src/package-lock.json" "$cache/package-lock.json" \
    && cmp -s "$src/package.json" "$cache/package.json" \
    && [[ -f $cache/.installed && -x $bin ]]; then
    say "reusing the install in $cache"
  else
    say "installing into $cache (npm ci)"
    rm -f "$cache/.installed"
    cp "$src/package.json" "$src/package-lock.json" "$cache/"
    local t0=$SECONDS
    # --ignore-scripts: nothing here needs an install script (a dependency's only one reports
    # analytics).
    (cd "$cache" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2) \
      || die "npm ci failed in $cache"
    [[ -x $bin ]] || die "no restate-server binary after install: $bin (only linux-x64 is wired here)"
    touch "$cache/.installed"
    say "installed in $((SECONDS - t0))s, $(du -sh "$cache/node_modules" | cut -f1)"
  fi
  # The scripts run from beside node_modules so that the SDK resolves.
  cp "$src/service.mjs" "$src/bench.mjs" "$cache/"
  exec 9>&-
  server_bin=$bin
}

install

# --- start ------------------------------------------------------------------------------------
for port in "$fabric_port" "$admin_port" "$ingress_port" "$service_port"; do
  if [[ -n $(ss -Hltn "sport = :$port") ]]; then
    die "port $port is already in use: $(ss -Hltnp "sport = :$port" | tr -s ' ')"
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/weir-restate-peer.XXXXXX")
server_pid="" service_pid="" ok=0
cleanup() {
  local rc=$?
  for pid in $service_pid $server_pid; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in $service_pid $server_pid; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  if (( ok == 0 )); then
    for log in server service; do
      [[ -f $tmp/$log.log ]] && { say "last lines of the $log log:"; tail -n 25 "$tmp/$log.log" >&2; }
    done
  fi
  if [[ ${RESTATE_PEER_KEEP:-0} == 1 ]]; then say "kept $tmp"; else rm -rf "$tmp"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat >"$tmp/restate.toml" <<EOF
node-name = "weir-peer"
cluster-name = "weir-peer"
base-dir = "$tmp/data"
disable-telemetry = true
listen-mode = "tcp"
bind-ip = "127.0.0.1"
bind-port = $fabric_port

[admin]
bind-port = $admin_port

[ingress]
bind-port = $ingress_port
EOF

say "starting restate-server (fabric $fabric_port, admin $admin_port, ingress $ingress_port), data in $tmp/data"
"$server_bin" --no-logo --log-disable-ansi-codes true --config-file "$tmp/restate.toml" >"$tmp/server.log" 2>&1 &
server_pid=$!
wait_for "restate admin health ($admin/health)" 60 "$server_pid" curl -sf "$admin/health"
wait_for "restate ingress health ($ingress/restate/health)" 60 "$server_pid" curl -sf "$ingress/restate/health"

say "starting the steps service on 127.0.0.1:$service_port"
node "$cache/service.mjs" "$service_port" >"$tmp/service.log" 2>&1 &
service_pid=$!
wait_for "service listening on $service_port" 30 "$service_pid" \
  bash -c "[[ -n \$(ss -Hltn 'sport = :$service_port') ]]"

register() {
  curl -sf -X POST "$admin/deployments" -H 'content-type: application/json' \
    -d "{\"uri\":\"http://127.0.0.1:$service_port\"}" >"$tmp/register.json"
}
wait_for "registering the deployment at $admin/deployments" 30 "$server_pid" register
say "registered: $(tr -d '\n' <"$tmp/register.json" | cut -c1-160)"
wait_for "steps.fib through the ingress" 30 "$server_pid" \
  bash -c "[[ \$(curl -sf -X POST '$ingress/steps/fib' -H 'content-type: application/json' -d 10) == 55 ]]"

# Every port (TCP or UDP) the two processes listen on must be one of ours, in base..base+100 (none of
# Restate's defaults 5122, 5123, 8080, 9070, 9071).
listening=$(ss -Hltunp | grep -E "pid=($server_pid|$service_pid)," || true)
ports=$(awk '{ n = split($5, a, ":"); print a[n] }' <<<"$listening" | sort -un | tr '\n' ' ')
say "listening: $ports"
for port in $ports; do
  (( port >= base && port <= base + 100 )) || { echo "$listening" >&2; die "port $port is outside $base-$((base + 100))"; }
done

# --- bench ------------------------------------------------------------------------------------
say "running bench.mjs"
RESTATE_INGRESS="$ingress" RESTATE_SERVER_PID="$server_pid" RESTATE_SERVICE_PID="$service_pid" \
  CLK_TCK="$(getconf CLK_TCK)" node "$cache/bench.mjs" || die "bench.mjs failed"
ok=1
