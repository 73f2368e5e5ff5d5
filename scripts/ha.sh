#!/usr/bin/env bash
# A PostgreSQL high-availability cluster on this machine for queuer: one etcd
# member and three PostgreSQL 15 nodes managed by Patroni, with synchronous
# replication, all as an unprivileged user, on private loopback ports, under
# one directory (default .cluster/ha/ in the project; QW_HA_DIR overrides).
#
#   scripts/ha.sh up            install what is missing, start etcd and the three
#                               nodes, wait for a primary and a synchronous standby
#   scripts/ha.sh down          stop the nodes and etcd (data is kept; --wipe removes it)
#   scripts/ha.sh status        patronictl list
#   scripts/ha.sh conninfo      the multi-host libpq conninfo for workers (read-write)
#   scripts/ha.sh primary-pids  "PATRONI_PID POSTMASTER_PID" of the current primary
#   scripts/ha.sh sync-pids     the same for the synchronous standby
#   scripts/ha.sh heal          start every node that is down, wait until all have
#                               rejoined (pg_rewind where needed) and a sync standby exists
#   scripts/ha.sh switchover    planned switchover to the synchronous standby; waits
#                               for the new primary and a synchronous standby
#   scripts/ha.sh deps          only install the Debian packages (patroni, etcd-server,
#                               pgbouncer for tests/ha/pgbouncer.sh)
#   scripts/ha.sh wait-primary [SECS]  wait until a primary accepts writes
#
# Replication: Patroni's `synchronous_mode: true` (QW_HA_SYNC=strict for
# synchronous_mode_strict, QW_HA_SYNC=off for asynchronous replication). With
# `true`, Patroni promotes only the synchronous standby, so no failover loses a
# commit that was acknowledged; when no standby is left the primary goes on
# alone instead of stopping every write (strict would block commits then). With
# three nodes one standby can be lost without any change for the queuer.
#
# Timing (DCS settings, fixed at the first `up` of a directory): QW_HA_TTL
# (leader lock TTL, s, default 10), QW_HA_LOOP_WAIT (default 2), QW_HA_RETRY_TIMEOUT
# (default 4); Patroni needs loop_wait + 2 * retry_timeout <= ttl. A lost primary
# is replaced after its leader lock expires: at most ttl seconds after its last
# refresh, plus the promotion. A standby that lost its primary retries the WAL
# stream every wal_retrieve_retry_interval, and a promote request that lands in
# that wait waits it out: 500ms here instead of PostgreSQL's 5 s default.
#
# Passwords are generated at the first `up` and kept in owner-only files;
# `conninfo` names a libpq passfile instead of containing a password. The
# Patroni REST API's write endpoints need the generated API password.
set -euo pipefail

HA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HA_DIR=${QW_HA_DIR:-$HA_ROOT/.cluster/ha}
HA_NODES=(node1 node2 node3)
HA_PG_BIN=${QW_PG_BINDIR:-/usr/lib/postgresql/15/bin}
HA_TTL=${QW_HA_TTL:-10}
HA_LOOP_WAIT=${QW_HA_LOOP_WAIT:-2}
HA_RETRY_TIMEOUT=${QW_HA_RETRY_TIMEOUT:-4}
HA_SYNC=${QW_HA_SYNC:-on}
HA_WAIT_S=${QW_HA_WAIT_S:-120}

ha_log() {
    echo "ha.sh: $*" >&2
}

ha_die() {
    ha_log "$*"
    exit 1
}

# ---- packages ------------------------------------------------------------------

# Installs patroni, etcd-server and pgbouncer when missing (apt-get, as scripts/deps.sh
# does), then makes sure the distribution's own services are neither running
# nor enabled: this script runs its own, as an unprivileged user.
ha_deps() {
    local p missing=() sudo=""
    for p in patroni etcd-server pgbouncer postgresql-15 curl python3; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        [ "$(id -u)" = 0 ] || sudo=sudo
        ha_log "installing ${missing[*]}"
        $sudo mkdir -p /etc/postgresql-common
        [ -f /etc/postgresql-common/createcluster.conf ] ||
            echo "create_main_cluster = false" | $sudo tee /etc/postgresql-common/createcluster.conf >/dev/null
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >&2
    fi
    ha_default_services_off
}

ha_default_services_off() {
    local svc sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    for svc in etcd patroni pgbouncer; do
        if [ -d /run/systemd/system ]; then
            $sudo systemctl disable --now "$svc" >/dev/null 2>&1 || true
        elif [ -x "/etc/init.d/$svc" ]; then
            $sudo update-rc.d "$svc" disable >/dev/null 2>&1 || true
            $sudo "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
        fi
    done
}

# ---- users, ports, files ---------------------------------------------------------

# Runs a command as the unprivileged user.
ha_as_user() {
    if [ "$(id -u)" = 0 ]; then
        setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
    else
        "$@"
    fi
}

# ha_spawn PIDFILE LOG CMD...: starts CMD in the background as the unprivileged
# user, detached from our stdin/stdout, and records its own pid (setpriv execs
# CMD, and a simple command in the background is not wrapped in a subshell).
ha_spawn() {
    local pidfile=$1 log=$2
    shift 2
    if [ "$(id -u)" = 0 ]; then
        setpriv --reuid=postgres --regid=postgres --init-groups -- "$@" </dev/null >>"$log" 2>&1 &
    else
        "$@" </dev/null >>"$log" 2>&1 &
    fi
    echo $! >"$pidfile"
}

ha_chown() {
    if [ "$(id -u)" = 0 ]; then
        chown -R postgres: "$@"
    fi
}

# Free loopback ports outside the ephemeral range (so no outgoing connection
# takes one meanwhile), checked by binding them.
ha_free_ports() {
    python3 - "$1" <<'PY'
import random, socket, sys
want, got, held = int(sys.argv[1]), [], []
while len(got) < want:
    port = random.randint(20000, 32000)
    if port in got:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        continue
    held.append(s)
    got.append(port)
print(" ".join(map(str, got)))
PY
}

ha_secret() {
    head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 24
}

# Reads (or, at the first `up`, creates) HA_DIR/cluster.env: ports and passwords.
ha_load_env() {
    if [ ! -f "$HA_DIR/cluster.env" ]; then
        [ "${1:-}" = create ] || ha_die "no cluster in $HA_DIR (run: scripts/ha.sh up)"
        mkdir -p "$HA_DIR"
        local ports
        read -r -a ports <<<"$(ha_free_ports 8)"
        (
            umask 077
            cat >"$HA_DIR/cluster.env" <<ENV
HA_ETCD_CLIENT=${ports[0]}
HA_ETCD_PEER=${ports[1]}
HA_PG_PORTS=(${ports[2]} ${ports[3]} ${ports[4]})
HA_API_PORTS=(${ports[5]} ${ports[6]} ${ports[7]})
HA_PW_SUPER=$(ha_secret)
HA_PW_REPL=$(ha_secret)
HA_PW_REWIND=$(ha_secret)
HA_PW_API=$(ha_secret)
HA_TTL=$HA_TTL
HA_LOOP_WAIT=$HA_LOOP_WAIT
HA_RETRY_TIMEOUT=$HA_RETRY_TIMEOUT
HA_SYNC=$HA_SYNC
ENV
        )
    fi
    # shellcheck source=/dev/null
    . "$HA_DIR/cluster.env"
}

# The server processes must reach their directories.
ha_open_path() {
    [ "$(id -u)" = 0 ] || return 0
    local p=$1
    while [ "$p" != / ]; do
        p=$(dirname "$p")
        chmod o+x "$p" 2>/dev/null || true
    done
}

ha_write_configs() {
    local i name dir sync_strict=false sync_mode=true
    case "$HA_SYNC" in
    on) ;;
    strict) sync_strict=true ;;
    off) sync_mode=false ;;
    *) ha_die "QW_HA_SYNC must be on, strict or off, not '$HA_SYNC'" ;;
    esac
    mkdir -p "$HA_DIR/etcd"
    for i in 0 1 2; do
        name=${HA_NODES[$i]}
        dir=$HA_DIR/$name
        mkdir -p "$dir/sock"
        (
            umask 077
            cat >"$dir/patroni.yml" <<YML
# Written by scripts/ha.sh; the dcs section applies at the cluster's bootstrap only.
scope: queuer
namespace: /queuer-ha/
name: $name
log:
  level: INFO
restapi:
  listen: 127.0.0.1:${HA_API_PORTS[$i]}
  connect_address: 127.0.0.1:${HA_API_PORTS[$i]}
  authentication:
    username: patroni
    password: $HA_PW_API
etcd3:
  hosts: 127.0.0.1:$HA_ETCD_CLIENT
bootstrap:
  dcs:
    ttl: $HA_TTL
    loop_wait: $HA_LOOP_WAIT
    retry_timeout: $HA_RETRY_TIMEOUT
    maximum_lag_on_failover: 1048576
    synchronous_mode: $sync_mode
    synchronous_mode_strict: $sync_strict
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
        max_connections: 200
        max_pred_locks_per_transaction: 256
        synchronous_commit: "on"
        wal_retrieve_retry_interval: 500ms
  initdb:
  - encoding: UTF8
  - locale: C.UTF-8
postgresql:
  listen: 127.0.0.1:${HA_PG_PORTS[$i]}
  connect_address: 127.0.0.1:${HA_PG_PORTS[$i]}
  data_dir: $dir/data
  bin_dir: $HA_PG_BIN
  pgpass: $dir/pgpass
  use_unix_socket: true
  authentication:
    superuser:
      username: postgres
      password: $HA_PW_SUPER
    replication:
      username: replicator
      password: $HA_PW_REPL
    rewind:
      username: rewinder
      password: $HA_PW_REWIND
  parameters:
    unix_socket_directories: $dir/sock
    shared_buffers: 128MB
    log_min_messages: warning
    log_line_prefix: '%m [%p] %a '
  pg_hba:
  # the socket directory is the postgres user's alone
  - local all all trust
  - host replication replicator 127.0.0.1/32 scram-sha-256
  - host all all 127.0.0.1/32 scram-sha-256
YML
        )
        chmod 700 "$dir/sock"
    done
    # The client side: a passfile for the workers' conninfo (the caller's own).
    (
        umask 077
        echo "127.0.0.1:*:*:postgres:$HA_PW_SUPER" >"$HA_DIR/pgpass"
    )
    ha_chown "$HA_DIR/etcd" "${HA_NODES[@]/#/$HA_DIR/}"
    chmod 755 "$HA_DIR"
    ha_open_path "$HA_DIR"
}

# ---- processes ---------------------------------------------------------------------

# ha_alive PIDFILE: the process runs. A killed one that its parent has not
# reaped yet (a zombie: kill -0 still succeeds) counts as dead, so heal
# restarts it.
ha_alive() {
    local f=$1 pid state
    [ -f "$f" ] || return 1
    pid=$(cat "$f")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    state=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
    case "$state" in Z* | "") return 1 ;; esac
}

ha_etcd_start() {
    ha_alive "$HA_DIR/etcd/etcd.pid" && return 0
    ha_spawn "$HA_DIR/etcd/etcd.pid" "$HA_DIR/etcd/etcd.log" etcd --name qw-ha --data-dir "$HA_DIR/etcd/data" \
        --listen-client-urls "http://127.0.0.1:$HA_ETCD_CLIENT" \
        --advertise-client-urls "http://127.0.0.1:$HA_ETCD_CLIENT" \
        --listen-peer-urls "http://127.0.0.1:$HA_ETCD_PEER" \
        --initial-advertise-peer-urls "http://127.0.0.1:$HA_ETCD_PEER" \
        --initial-cluster "qw-ha=http://127.0.0.1:$HA_ETCD_PEER" \
        --initial-cluster-state new --initial-cluster-token "qw-ha-$HA_ETCD_PEER" \
        --log-level warn
    local _
    for _ in $(seq 1 100); do
        curl -fsS -m 1 "http://127.0.0.1:$HA_ETCD_CLIENT/health" 2>/dev/null | grep -q '"true"' &&
            return 0
        ha_alive "$HA_DIR/etcd/etcd.pid" || break
        sleep 0.1
    done
    tail -20 "$HA_DIR/etcd/etcd.log" >&2
    ha_die "etcd did not start"
}

ha_node_start() {
    local name=$1 dir=$HA_DIR/$1
    ha_alive "$dir/patroni.pid" && return 0
    ha_spawn "$dir/patroni.pid" "$dir/patroni.log" patroni "$dir/patroni.yml"
}

# ha_api_code NODE-INDEX PATH: the HTTP status of a Patroni REST GET.
ha_api_code() {
    curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:${HA_API_PORTS[$1]}$2" 2>/dev/null || true
}

# ha_role_index CHECK: the index of the first node whose Patroni answers 200
# to GET /CHECK (primary, sync, replica), or fails.
ha_role_index() {
    local i
    for i in 0 1 2; do
        if [ "$(ha_api_code "$i" "/$1")" = 200 ]; then
            echo "$i"
            return 0
        fi
    done
    return 1
}

ha_primary_index() {
    ha_role_index primary
}

ha_sync_index() {
    ha_role_index sync
}

ha_conninfo() {
    local hosts ports
    hosts=127.0.0.1,127.0.0.1,127.0.0.1
    ports=$(IFS=,; echo "${HA_PG_PORTS[*]}")
    echo "host=$hosts port=$ports user=postgres dbname=postgres target_session_attrs=read-write passfile=$HA_DIR/pgpass connect_timeout=2"
}

# True when the primary accepts a write through the workers' conninfo.
ha_writable() {
    psql -X -q -t -A "$(ha_conninfo)" -c "SELECT txid_current() > 0" 2>/dev/null | grep -q '^t$'
}

# ha_wait WHAT SECS CMD...: polls CMD every 0.2 s.
ha_wait() {
    local what=$1 secs=$2 _
    shift 2
    for _ in $(seq 1 $((secs * 5))); do
        "$@" && return 0
        sleep 0.2
    done
    ha_log "timed out after ${secs}s waiting for $what"
    return 1
}

ha_has_primary_and_sync() {
    [ "$HA_SYNC" = off ] && { ha_primary_index >/dev/null && ha_writable; return; }
    ha_primary_index >/dev/null && ha_sync_index >/dev/null && ha_writable
}

# Every node runs: the primary, and the others as replicas streaming from it.
ha_all_joined() {
    local i p
    p=$(ha_primary_index) || return 1
    for i in 0 1 2; do
        [ "$i" = "$p" ] && continue
        [ "$(ha_api_code "$i" /replica)" = 200 ] || return 1
    done
    [ "$(ha_streaming_count "$p")" = 2 ] || return 1
    ha_has_primary_and_sync
}

ha_streaming_count() {
    psql -X -q -t -A "host=127.0.0.1 port=${HA_PG_PORTS[$1]} user=postgres dbname=postgres passfile=$HA_DIR/pgpass connect_timeout=2" \
        -c "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'" 2>/dev/null || echo 0
}

ha_status() {
    ha_as_user patronictl -c "$HA_DIR/${HA_NODES[0]}/patroni.yml" list 2>&1 || true
}

# ---- commands ------------------------------------------------------------------------

cmd_up() {
    ha_deps
    ha_load_env create
    ha_write_configs
    ha_etcd_start
    local n
    for n in "${HA_NODES[@]}"; do
        ha_node_start "$n"
    done
    if ! ha_wait "a primary and a synchronous standby" "$HA_WAIT_S" ha_has_primary_and_sync; then
        ha_status >&2
        for n in "${HA_NODES[@]}"; do
            echo "---- $n/patroni.log" >&2
            tail -15 "$HA_DIR/$n/patroni.log" >&2
        done
        exit 1
    fi
    ha_log "up: primary ${HA_NODES[$(ha_primary_index)]}; conninfo: $(ha_conninfo)"
}

cmd_down() {
    [ -f "$HA_DIR/cluster.env" ] || return 0
    ha_load_env
    local n f pid _
    for n in "${HA_NODES[@]}"; do
        f=$HA_DIR/$n/patroni.pid
        ha_alive "$f" && kill -TERM "$(cat "$f")" 2>/dev/null
    done
    # Patroni stops its PostgreSQL on SIGTERM; a node whose Patroni was killed
    # may have left one running.
    for n in "${HA_NODES[@]}"; do
        f=$HA_DIR/$n/patroni.pid
        for _ in $(seq 1 300); do
            ha_alive "$f" || break
            sleep 0.1
        done
        ha_alive "$f" && kill -KILL "$(cat "$f")" 2>/dev/null
        if [ -f "$HA_DIR/$n/data/postmaster.pid" ]; then
            pid=$(head -1 "$HA_DIR/$n/data/postmaster.pid")
            if kill -0 "$pid" 2>/dev/null; then
                ha_as_user "$HA_PG_BIN/pg_ctl" -D "$HA_DIR/$n/data" -m fast -w -t 30 stop \
                    >/dev/null 2>&1 || kill -KILL "$pid" 2>/dev/null || true
            fi
        fi
        rm -f "$f"
    done
    f=$HA_DIR/etcd/etcd.pid
    if ha_alive "$f"; then
        pid=$(cat "$f")
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
    if [ "${1:-}" = --wipe ]; then
        rm -rf "$HA_DIR"
    fi
}

# cmd_node_pids primary|sync: "PATRONI_PID POSTMASTER_PID" of that node.
cmd_node_pids() {
    ha_load_env
    local i dir
    if [ "$1" = primary ]; then
        i=$(ha_primary_index) || ha_die "no primary"
    else
        i=$(ha_sync_index) || ha_die "no synchronous standby"
    fi
    dir=$HA_DIR/${HA_NODES[$i]}
    echo "$(cat "$dir/patroni.pid") $(head -1 "$dir/data/postmaster.pid")"
}

cmd_heal() {
    ha_load_env
    ha_etcd_start
    local n
    for n in "${HA_NODES[@]}"; do
        if ! ha_alive "$HA_DIR/$n/patroni.pid"; then
            ha_log "starting $n"
            ha_node_start "$n"
        fi
    done
    ha_wait "every node to rejoin" "$HA_WAIT_S" ha_all_joined || {
        ha_status >&2
        exit 1
    }
}

cmd_switchover() {
    ha_load_env
    local p c code
    p=$(ha_primary_index) || ha_die "no primary to switch over from"
    c=$(ha_sync_index) || ha_die "no synchronous standby to switch over to"
    code=$(curl -s -o "$HA_DIR/switchover.out" -w '%{http_code}' -m 60 -u "patroni:$HA_PW_API" \
        -H 'Content-Type: application/json' \
        -d "{\"leader\": \"${HA_NODES[$p]}\", \"candidate\": \"${HA_NODES[$c]}\"}" \
        "http://127.0.0.1:${HA_API_PORTS[$p]}/switchover") || true
    [ "$code" = 200 ] || ha_die "switchover refused (HTTP $code): $(cat "$HA_DIR/switchover.out")"
    ha_wait "the new primary and a synchronous standby" "$HA_WAIT_S" ha_has_primary_and_sync ||
        exit 1
    ha_log "switchover: ${HA_NODES[$p]} -> ${HA_NODES[$(ha_primary_index)]}"
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down "${2:-}" ;;
status)
    ha_load_env
    ha_status
    ;;
conninfo)
    ha_load_env
    ha_conninfo
    ;;
primary-pids) cmd_node_pids primary ;;
sync-pids) cmd_node_pids sync ;;
heal) cmd_heal ;;
switchover) cmd_switchover ;;
deps) ha_deps ;;
wait-primary)
    ha_load_env
    ha_wait "a writable primary" "${2:-$HA_WAIT_S}" ha_writable
    ;;
-h | --help | help | "")
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    [ -n "${1:-}" ]
    ;;
*)
    ha_log "unknown command '$1' (see scripts/ha.sh --help)"
    exit 64
    ;;
esac
