# Shell helpers that start and stop a private PostgreSQL cluster (and, for
# scenario tests, the simulator and workers). Source this file; it defines
# functions only. Requires bash.
#
#   qw_pg_start DIR     initdb into DIR/data (once), start it listening on a
#                       unix socket in DIR/sock only; sets QW_PG_DIR,
#                       QW_PG_CONNINFO (superuser "postgres", db "postgres")
#   qw_pg_stop [MODE]   pg_ctl stop -m MODE (default fast)
#   qw_pg_restart_server [MODE]  stop and start the same cluster
#   qw_psql ARGS...     psql on the cluster, -X -q -v ON_ERROR_STOP=1
#
# PostgreSQL refuses to run as root; when we are root the server runs as the
# unprivileged "postgres" user (created by the postgresql package).

qw_pg_bindir() {
    local d
    for d in "${QW_PG_BINDIR:-}" /usr/lib/postgresql/15/bin; do
        if [ -n "$d" ] && [ -x "$d/pg_ctl" ]; then
            echo "$d"
            return 0
        fi
    done
    echo "cluster.sh: PostgreSQL 15 server binaries not found (apt-get install postgresql-15)" >&2
    return 1
}

qw_as_pg_user() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

qw_pg_start() {
    local dir bindir
    dir=$(realpath -m "$1")
    bindir=$(qw_pg_bindir) || return 1
    mkdir -p "$dir/sock"
    if [ "$(id -u)" = 0 ]; then
        chown postgres: "$dir" "$dir/sock"
        chmod 755 "$dir"
        # the server must be able to reach its directory
        local p="$dir"
        while [ "$p" != / ]; do
            p=$(dirname "$p")
            chmod o+x "$p" 2>/dev/null || true
        done
    fi
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        qw_as_pg_user "$bindir/initdb" -D "$dir/data" -U postgres -A trust --no-sync \
            -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || {
            cat "$dir/initdb.log" >&2
            return 1
        }
        cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$dir/sock'
max_connections = ${QW_PG_MAX_CONNECTIONS:-200}
shared_buffers = 128MB
fsync = ${QW_PG_FSYNC:-off}
synchronous_commit = ${QW_PG_FSYNC:-off}
full_page_writes = ${QW_PG_FSYNC:-off}
max_pred_locks_per_transaction = 256
log_min_messages = warning
log_line_prefix = '%m [%p] %a '
${QW_PG_CONF_EXTRA:-}
CONF
    fi
    qw_as_pg_user "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start \
        >/dev/null || {
        tail -20 "$dir/postgres.log" >&2
        return 1
    }
    QW_PG_DIR=$dir
    QW_PG_CONNINFO="host=$dir/sock port=5432 user=postgres dbname=postgres"
    export QW_PG_DIR QW_PG_CONNINFO
}

qw_pg_stop() {
    local mode=${1:-fast} bindir
    [ -n "${QW_PG_DIR:-}" ] || return 0
    bindir=$(qw_pg_bindir) || return 1
    qw_as_pg_user "$bindir/pg_ctl" -D "$QW_PG_DIR/data" -m "$mode" -w -t 60 stop \
        >/dev/null 2>&1 || true
}

qw_pg_restart_server() {
    local mode=${1:-fast} bindir
    bindir=$(qw_pg_bindir) || return 1
    qw_as_pg_user "$bindir/pg_ctl" -D "$QW_PG_DIR/data" -m "$mode" -w -t 60 stop >/dev/null
    qw_as_pg_user "$bindir/pg_ctl" -D "$QW_PG_DIR/data" -l "$QW_PG_DIR/postgres.log" -w -t 60 \
        start >/dev/null
}

qw_psql() {
    psql -X -q -v ON_ERROR_STOP=1 "$QW_PG_CONNINFO" "$@"
}

# ---- simulator and workers (scenario tests, demo, benchmark) ----
#
#   qw_sim_start DIR [SIM-ARGS...]  start scabbard-sim on a free port; sets
#                                   QW_SIM_URL, QW_SIM_LOG (NDJSON), QW_SIM_PID; with
#                                   more --listen 127.0.0.1:0 in SIM-ARGS (several nodes)
#                                   QW_SIM_URLS lists every node's URL, comma-separated
#                                   (QW_SIM_URL is the first)
#   qw_sim_stop
#   qw_worker_start DIR NAME [VAR=VALUE...]  start `queuer run` as instance NAME
#                                   (env overrides after NAME); log DIR/NAME.log
#   qw_worker_signal DIR NAME SIG   kill -SIG the worker
#   qw_worker_wait DIR NAME [SECS]  wait for it to exit; prints its exit code (call it
#                                   directly, not in $(...): a subshell cannot wait for it)
#   qw_workers_stop DIR             SIGTERM every worker started in DIR, wait
#   qw_wait_sql SECS SQL            poll until SQL returns 't' (fails after SECS)

qw_sim_start() {
    local dir=$1
    shift
    mkdir -p "$dir"
    rm -f "$dir/sim.port"
    "${SCABBARD_SIM_BIN:?}" --listen 127.0.0.1:0 --port-file "$dir/sim.port" \
        --event-log "$dir/sim.ndjson" "$@" >"$dir/sim.out" 2>&1 &
    QW_SIM_PID=$!
    local i
    for i in $(seq 1 200); do
        [ -s "$dir/sim.port" ] && break
        if ! kill -0 "$QW_SIM_PID" 2>/dev/null; then
            cat "$dir/sim.out" >&2
            return 1
        fi
        sleep 0.05
    done
    [ -s "$dir/sim.port" ] || { echo "scabbard-sim did not start" >&2; return 1; }
    QW_SIM_URLS=$(sed 's|^|http://127.0.0.1:|' "$dir/sim.port" | paste -sd, -)
    QW_SIM_URL=${QW_SIM_URLS%%,*}
    QW_SIM_LOG="$dir/sim.ndjson"
    export QW_SIM_URL QW_SIM_URLS QW_SIM_LOG QW_SIM_PID
}

qw_sim_stop() {
    [ -n "${QW_SIM_PID:-}" ] || return 0
    kill -TERM "$QW_SIM_PID" 2>/dev/null || true
    wait "$QW_SIM_PID" 2>/dev/null || true
    QW_SIM_PID=
}

qw_worker_start() {
    local dir=$1 name=$2
    shift 2
    mkdir -p "$dir"
    env QUEUER_DATABASE_CONNINFO="${QW_DB_CONNINFO:-$QW_PG_CONNINFO}" \
        QUEUER_DLT_URL="${QW_SIM_URL:?}" \
        QUEUER_ADMIN_LISTEN=off \
        QUEUER_WORKER_INSTANCE_ID="$name" \
        "$@" "${QUEUER_BIN:?}" run >>"$dir/$name.log" 2>&1 &
    echo $! >"$dir/$name.pid"
}

qw_worker_signal() {
    local pid
    pid=$(cat "$1/$2.pid")
    kill "-$3" "$pid" 2>/dev/null || true
}

qw_worker_wait() {
    local dir=$1 name=$2 secs=${3:-30} pid i
    pid=$(cat "$dir/$name.pid")
    for i in $(seq 1 $((secs * 20))); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "timeout"
        return 1
    fi
    wait "$pid" 2>/dev/null
    echo $?
}

qw_workers_stop() {
    local dir=$1 f
    for f in "$dir"/*.pid; do
        [ -f "$f" ] || continue
        kill -TERM "$(cat "$f")" 2>/dev/null || true
    done
    for f in "$dir"/*.pid; do
        [ -f "$f" ] || continue
        local pid
        pid=$(cat "$f")
        local i
        for i in $(seq 1 200); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -KILL "$pid" 2>/dev/null || true
        rm -f "$f"
    done
}

qw_wait_sql() {
    local secs=$1 sql=$2 i out
    for i in $(seq 1 $((secs * 10))); do
        out=$(psql -X -q -t -A "${QW_DB_CONNINFO:-$QW_PG_CONNINFO}" -c "$sql" 2>/dev/null || true)
        [ "$out" = "t" ] && return 0
        sleep 0.1
    done
    echo "timed out after ${secs}s waiting for: $sql" >&2
    return 1
}

qw_sql() {
    psql -X -q -t -A -v ON_ERROR_STOP=1 "${QW_DB_CONNINFO:-$QW_PG_CONNINFO}" -c "$1"
}

# ---- additions for the fault-injection suite (tests/nemesis) ----
#
#   qw_pg_server_start          start the cluster of QW_PG_DIR again after a stop
#   qw_pg_hba_prepend LINE...   put pg_hba.conf lines first (first match wins), reload
#   qw_pg_backend_pids APPNAME  pids of the server processes serving that application_name

qw_pg_server_start() {
    local bindir
    bindir=$(qw_pg_bindir) || return 1
    qw_as_pg_user "$bindir/pg_ctl" -D "$QW_PG_DIR/data" -l "$QW_PG_DIR/postgres.log" -w -t 60 \
        start >/dev/null
}

qw_pg_hba_prepend() {
    local hba="$QW_PG_DIR/data/pg_hba.conf" tmp
    tmp=$(mktemp "$QW_PG_DIR/hba.XXXXXX") || return 1
    { printf '%s\n' "$@"; cat "$hba"; } >"$tmp" || return 1
    if [ "$(id -u)" = 0 ]; then
        chown postgres: "$tmp"
    fi
    chmod 600 "$tmp"
    mv "$tmp" "$hba" || return 1
    # the file must parse (a bad line would lock everyone out at the next reload)
    [ "$(qw_sql "SELECT count(*) FROM pg_hba_file_rules WHERE error IS NOT NULL")" = 0 ] || return 1
    # asynchronous: new rules apply once the postmaster has read the file
    [ "$(qw_sql "SELECT pg_reload_conf()")" = t ]
}

qw_pg_backend_pids() {
    qw_sql "SELECT pid FROM pg_stat_activity WHERE application_name = '$1' AND pid <> pg_backend_pid()
             ORDER BY pid"
}
