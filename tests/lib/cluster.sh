# shellcheck shell=bash
# The one test and demo harness: shell functions that start and stop a
# private PostgreSQL cluster, the scabbard-sim ledger and `queuer run`
# workers, generate and load workloads, and stop any process in a bounded
# time. Used by the integration tests (with-pg.sh), the scenario and e2e
# tests (tests/scenarios/lib_scenario.sh), the nemesis (tests/nemesis), the
# benchmarks (bench/) and the demo cluster (scripts/cluster.sh). Source it
# from bash; it defines functions only. Binaries come from QUEUER_BIN,
# SCABBARD_SIM_BIN and QUEUER_GEN_BIN.
#
# PostgreSQL (one cluster at a time per shell; QW_PG_DIR names it):
#   qw_pg_start DIR     initdb into DIR/data (once), start it listening on a
#                       unix socket in DIR/sock only; sets QW_PG_DIR,
#                       QW_PG_CONNINFO (superuser "postgres", db "postgres").
#                       QW_PG_FSYNC (off), QW_PG_MAX_CONNECTIONS (200) and
#                       QW_PG_CONF_EXTRA (lines for postgresql.conf) apply at initdb
#   qw_pg_stop [MODE]   pg_ctl stop -m MODE (default fast)
#   qw_pg_restart_server [MODE]  stop and start the same cluster
#   qw_pg_server_start  start the cluster of QW_PG_DIR again after a stop
#   qw_migrate LOG [CONNINFO]    `queuer migrate` (default QW_PG_CONNINFO), output
#                       appended to LOG, its end shown on failure
#   qw_psql ARGS...     psql on the cluster, -X -q -v ON_ERROR_STOP=1
#   qw_sql SQL          one statement, unaligned tuples only (QW_DB_CONNINFO or
#                       QW_PG_CONNINFO)
#   qw_wait_sql SECS SQL  poll until SQL returns 't' (fails after SECS)
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
    QW_PG_DIR=$dir
    QW_PG_CONNINFO="host=$dir/sock port=5432 user=postgres dbname=postgres"
    export QW_PG_DIR QW_PG_CONNINFO
    qw_pg_server_start || {
        tail -20 "$dir/postgres.log" >&2
        return 1
    }
}

# Starts the cluster of QW_PG_DIR (again, after a stop).
qw_pg_server_start() {
    local bindir
    bindir=$(qw_pg_bindir) || return 1
    qw_as_pg_user "$bindir/pg_ctl" -D "$QW_PG_DIR/data" -l "$QW_PG_DIR/postgres.log" -w -t 60 \
        start >/dev/null
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
    qw_as_pg_user "$bindir/pg_ctl" -D "$QW_PG_DIR/data" -m "$mode" -w -t 60 stop >/dev/null &&
        qw_pg_server_start
}

qw_psql() {
    psql -X -q -v ON_ERROR_STOP=1 "$QW_PG_CONNINFO" "$@"
}

qw_migrate() {
    local log=$1 conninfo=${2:-$QW_PG_CONNINFO}
    QUEUER_DATABASE_CONNINFO=$conninfo "${QUEUER_BIN:?}" migrate >>"$log" 2>&1 || {
        tail -n 20 "$log" >&2
        return 1
    }
}

# ---- processes -----------------------------------------------------------
#
#   qw_proc_state PID        the process state letter (R, S, T, Z, ...), "-" when gone
#   qw_alive PID             true while PID runs (a zombie counts as gone)
#   qw_wait_exit PID SECS    wait up to SECS for PID to end; sets QW_RC to its exit
#                            status (a child of this shell; else 127) or "timeout".
#                            Call it directly, not in $(...): a subshell cannot wait
#   qw_stop_pids SECS PID... SIGCONT + SIGTERM, up to SECS for all to exit, then
#                            SIGKILL; reaps our children
#   qw_wait_port_file FILE PID OUT  wait up to 10 s for the server PID (started in
#                            the background, output in OUT) to write its port to
#                            FILE; shows OUT and fails when it dies first
#   qw_free_port             a free TCP port on 127.0.0.1, for a server that
#                            takes no port 0 (the kernel may give it away again)

qw_proc_state() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || {
        echo -
        return 0
    }
    stat=${stat##*) }
    echo "${stat%% *}"
}

qw_alive() {
    local s
    s=$(qw_proc_state "$1")
    [ "$s" != - ] && [ "$s" != Z ]
}

qw_wait_exit() {
    local pid=$1 secs=$2 _
    QW_RC=timeout
    for _ in $(seq 1 $((secs * 20))); do
        qw_alive "$pid" || break
        sleep 0.05
    done
    qw_alive "$pid" && return 0
    QW_RC=0
    { wait "$pid" || QW_RC=$?; } 2>/dev/null # no "Killed" notice from bash
}

qw_stop_pids() {
    local secs=$1 pid _ left
    shift
    for pid in "$@"; do
        kill -CONT "$pid" 2>/dev/null || true
        kill -TERM "$pid" 2>/dev/null || true
    done
    for _ in $(seq 1 $((secs * 20))); do
        left=0
        for pid in "$@"; do
            qw_alive "$pid" && left=1 && break
        done
        [ "$left" = 1 ] || break
        sleep 0.05
    done
    for pid in "$@"; do
        kill -KILL "$pid" 2>/dev/null || true
        { wait "$pid" || true; } 2>/dev/null
    done
}

qw_wait_port_file() {
    local _
    for _ in $(seq 1 200); do
        [ -s "$1" ] && return 0
        if ! qw_alive "$2"; then
            cat "$3" >&2
            return 1
        fi
        sleep 0.05
    done
    echo "cluster.sh: no port in $1 after 10 s" >&2
    return 1
}

qw_free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ---- simulator and workers -------------------------------------------------
#
#   qw_sim_start DIR [SIM-ARGS...]  start scabbard-sim on a free port of QW_SIM_HOST
#                                   (127.0.0.1); sets QW_SIM_URL, QW_SIM_LOG (NDJSON
#                                   event log), QW_SIM_PID; its output in DIR/sim.out;
#                                   with more --listen 127.0.0.1:0 in SIM-ARGS (several
#                                   nodes) QW_SIM_URLS lists every node's URL,
#                                   comma-separated (QW_SIM_URL is the first)
#   qw_sim_stop                     stop it (SIGKILL after 5 s)
#   qw_worker_start DIR NAME [VAR=VALUE...]  start `queuer run` as instance NAME
#                                   (env overrides after NAME); log DIR/NAME.log,
#                                   pid DIR/NAME.pid
#   qw_worker_pid DIR NAME          its pid
#   qw_worker_signal DIR NAME SIG   kill -SIG the worker
#   qw_worker_wait DIR NAME [SECS]  wait for it to exit; prints its exit code (call it
#                                   directly, not in $(...): a subshell cannot wait for it)
#   qw_workers_stop DIR             SIGTERM every worker started in DIR, SIGKILL after 10 s
#   qw_stop_all [MODE]              stop every worker this shell started (any DIR),
#                                   the simulator and PostgreSQL (pg_ctl -m MODE, fast)
#
# Workloads:
#   qw_gen FILE SERVICES BATCHES [SEED [CIRCUIT-PREFIX]]  queuer-gen workload (TSV)
#   qw_load_tsv FILE|-              `queuer enqueue --tsv` into the database of
#                                   QUEUER_DATABASE_CONNINFO, back pressure off for the
#                                   load (QUEUER_INGEST_HIGH=0), one transaction
#   QW_ALL_FINAL_SQL                't' when every batch has a final status

QW_WORKER_DIRS=() # every DIR qw_worker_start was given in this shell

qw_sim_start() {
    local dir=$1
    shift
    mkdir -p "$dir"
    rm -f "$dir/sim.port"
    "${SCABBARD_SIM_BIN:?}" --listen "${QW_SIM_HOST:-127.0.0.1}:0" --port-file "$dir/sim.port" \
        --event-log "$dir/sim.ndjson" "$@" >"$dir/sim.out" 2>&1 &
    QW_SIM_PID=$!
    qw_wait_port_file "$dir/sim.port" "$QW_SIM_PID" "$dir/sim.out" || return 1
    QW_SIM_URLS=$(sed "s|^|http://${QW_SIM_HOST:-127.0.0.1}:|" "$dir/sim.port" | paste -sd, -)
    QW_SIM_URL=${QW_SIM_URLS%%,*}
    QW_SIM_LOG="$dir/sim.ndjson"
    export QW_SIM_URL QW_SIM_URLS QW_SIM_LOG QW_SIM_PID
}

qw_sim_stop() {
    [ -n "${QW_SIM_PID:-}" ] || return 0
    qw_stop_pids 5 "$QW_SIM_PID"
    QW_SIM_PID=
}

qw_worker_start() {
    local dir=$1 name=$2 d
    shift 2
    mkdir -p "$dir"
    for d in "${QW_WORKER_DIRS[@]}"; do
        [ "$d" = "$dir" ] && break
    done
    [ "${d:-}" = "$dir" ] || QW_WORKER_DIRS+=("$dir")
    env QUEUER_DATABASE_CONNINFO="${QW_DB_CONNINFO:-$QW_PG_CONNINFO}" \
        QUEUER_DLT_URL="${QW_SIM_URL:?}" \
        QUEUER_ADMIN_LISTEN=off \
        QUEUER_WORKER_INSTANCE_ID="$name" \
        "$@" "${QUEUER_BIN:?}" run >>"$dir/$name.log" 2>&1 &
    echo $! >"$dir/$name.pid"
}

qw_worker_pid() {
    cat "$1/$2.pid"
}

qw_worker_signal() {
    kill "-$3" "$(qw_worker_pid "$1" "$2")" 2>/dev/null || true
}

qw_worker_wait() {
    qw_wait_exit "$(qw_worker_pid "$1" "$2")" "${3:-30}"
    echo "$QW_RC"
    [ "$QW_RC" != timeout ]
}

qw_workers_stop() {
    local dir=$1 f pids=()
    for f in "$dir"/*.pid; do
        [ -f "$f" ] && pids+=("$(cat "$f")")
    done
    [ "${#pids[@]}" = 0 ] || qw_stop_pids 10 "${pids[@]}"
    rm -f "$dir"/*.pid
}

qw_stop_all() {
    local d
    for d in "${QW_WORKER_DIRS[@]}"; do
        qw_workers_stop "$d"
    done
    qw_sim_stop
    qw_pg_stop "${1:-fast}"
}

qw_gen() {
    "${QUEUER_GEN_BIN:?}" --services "$2" --batches "$3" --seed "${4:-1}" \
        --circuit-prefix "${5:-qwgen}" >"$1"
}

qw_load_tsv() {
    QUEUER_INGEST_HIGH=0 "${QUEUER_BIN:?}" enqueue --tsv "$1"
}

# shellcheck disable=SC2034 # read by the suites
QW_ALL_FINAL_SQL="SELECT count(*) = 0 FROM queuer.batches
                   WHERE status IS NULL OR status NOT IN ('Committed', 'Valid', 'Invalid')"

qw_wait_sql() {
    local secs=$1 sql=$2 _ out
    for _ in $(seq 1 $((secs * 10))); do
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
#   qw_pg_hba_prepend LINE...   put pg_hba.conf lines first (first match wins), reload
#   qw_pg_backend_pids APPNAME  pids of the server processes serving that application_name

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
