#!/usr/bin/env bash
# The local queuer topology as processes: a private PostgreSQL 15 cluster, the
# scabbard-sim ledger and N `queuer run` workers, all under one directory
# (default: .cluster/ in the project). The same topology as docker-compose.yml;
# tests/scenarios/compose_config.sh holds the two in step through `topology`.
#
#   scripts/cluster.sh start [--workers N] [--fresh]   start everything (N = 3)
#   scripts/cluster.sh stop                            stop workers, simulator, PostgreSQL
#   scripts/cluster.sh status                          processes and batch counts
#   scripts/cluster.sh load FILE|-                     enqueue a TSV workload
#   scripts/cluster.sh psql [ARGS...]                  psql on the cluster's database
#   scripts/cluster.sh env                             shell exports to use queuer by hand
#                                                      on the cluster: eval "$(scripts/cluster.sh env)"
#   scripts/cluster.sh clean                           stop, then remove the state directory
#   scripts/cluster.sh topology                        the topology, one key=value a line
#   scripts/cluster.sh compose-secrets [DIR]           env files for docker-compose.yml
#                                                      (default .cluster/compose)
#   scripts/cluster.sh compose-up | compose-down       docker-compose.yml, set up and
#                                                      healthy | removed (scripts/lib/compose.sh)
#   scripts/cluster.sh compose ARGS...                 docker compose ARGS on that stack
#
# Environment: QWC_DIR (state directory), QWC_BUILD (build directory, default
# build/release), QUEUER_BIN / SCABBARD_SIM_BIN (binaries, default from QWC_BUILD).
# As root, PostgreSQL runs as the unprivileged "postgres" user.
#
# The file can also be sourced (scripts/demo.sh): it then only
# defines the qwc_* functions and the topology below.

QWC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
QWC_DIR=${QWC_DIR:-$QWC_ROOT/.cluster}
QWC_BUILD=${QWC_BUILD:-$QWC_ROOT/build/release}

# ---- the topology (docker-compose.yml must match; see `topology`) ----------

QWC_WORKERS_DEFAULT=3
# scabbard-sim behaviour; --token-file, --listen, --port-file and --event-log
# are added per deployment.
QWC_SIM_ARGS=(--commit-delay-ms 20)
# Worker settings that are not per deployment (values equal in docker-compose.yml).
QWC_WORKER_SETTINGS=(QUEUER_WORKER_CYCLE_MS=500 QUEUER_LOG_LEVEL=info)
# Worker settings every deployment sets its own way (names equal in docker-compose.yml).
QWC_WORKER_PER_DEPLOYMENT=(QUEUER_DATABASE_CONNINFO QUEUER_DLT_URL QUEUER_ADMIN_LISTEN
                           QUEUER_WORKER_INSTANCE_ID)
# Secrets, from an owner-only env file, never on a command line.
QWC_WORKER_SECRETS=(QUEUER_DLT_TOKEN)

# shellcheck source=tests/lib/cluster.sh
. "$QWC_ROOT/tests/lib/cluster.sh"

qwc_bins() {
    QUEUER_BIN=${QUEUER_BIN:-$QWC_BUILD/queuer}
    SCABBARD_SIM_BIN=${SCABBARD_SIM_BIN:-$QWC_BUILD/sim/scabbard-sim}
    export QUEUER_BIN SCABBARD_SIM_BIN
    local b
    for b in "$QUEUER_BIN" "$SCABBARD_SIM_BIN"; do
        [ -x "$b" ] || { echo "cluster.sh: $b not found; build first (meson setup $QWC_BUILD)" >&2; return 1; }
    done
}

# Prints N random bytes as hex.
qwc_random_hex() {
    od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'
}

# Creates DIR/dlt_token (the simulator's --token-file) and DIR/ledger.env
# (QUEUER_DLT_TOKEN for the workers), both owner-only, once.
qwc_secrets() {
    local dir=$1
    mkdir -p "$dir"
    chmod 700 "$dir"
    if [ ! -s "$dir/dlt_token" ]; then
        (umask 077 && qwc_random_hex 24 >"$dir/dlt_token")
    fi
    (umask 077 && printf 'QUEUER_DLT_TOKEN=%s\n' "$(cat "$dir/dlt_token")" >"$dir/ledger.env")
}

# Creates the env files docker-compose.yml reads (DIR/db.env, DIR/ledger.env),
# owner-only; existing files are kept.
qwc_compose_secrets() {
    local dir=$1
    mkdir -p "$dir"
    chmod 700 "$dir"
    if [ ! -s "$dir/db.env" ]; then
        local pw
        pw=$(qwc_random_hex 16)
        (umask 077 && printf 'POSTGRES_PASSWORD=%s\nQUEUER_DATABASE_PASSWORD=%s\n' "$pw" "$pw" \
            >"$dir/db.env")
    fi
    if [ ! -s "$dir/ledger.env" ]; then
        (umask 077 && printf 'QUEUER_DLT_TOKEN=%s\n' "$(qwc_random_hex 24)" >"$dir/ledger.env")
    fi
    echo "secrets for docker-compose.yml: $dir/db.env, $dir/ledger.env"
}

# Records what runs (written after each step of start, so stop finds
# everything even when start was interrupted half-way).
qwc_save_state() {
    cat >"$QWC_DIR/state.env.tmp" <<STATE
QW_PG_DIR='${QW_PG_DIR:-}'
QW_PG_CONNINFO='${QW_PG_CONNINFO:-}'
QW_SIM_URL='${QW_SIM_URL:-}'
QW_SIM_LOG='${QW_SIM_LOG:-}'
QW_SIM_PID='${QW_SIM_PID:-}'
QWC_WORKERS='${1:-0}'
STATE
    mv "$QWC_DIR/state.env.tmp" "$QWC_DIR/state.env"
}

qwc_load_state() {
    [ -f "$QWC_DIR/state.env" ] || return 1
    # shellcheck disable=SC1091
    . "$QWC_DIR/state.env"
    export QW_PG_DIR QW_PG_CONNINFO QW_SIM_URL QW_SIM_LOG QW_SIM_PID QWC_WORKERS
    QUEUER_DATABASE_CONNINFO=$QW_PG_CONNINFO
    export QUEUER_DATABASE_CONNINFO
}

# Starts worker `name` with the topology's settings and the secrets file.
qwc_worker_start() {
    local name=$1
    (
        set -a
        # shellcheck disable=SC1091
        . "$QWC_DIR/secrets/ledger.env"
        set +a
        qw_worker_start "$QWC_DIR/workers" "$name" "${QWC_WORKER_SETTINGS[@]}"
    )
}

# Undoes a start that failed half-way; $1 = 1 when start turned job control on.
qwc_start_failed() {
    [ "$1" = 0 ] || set +m
    echo "cluster.sh: start failed; stopping what was started (logs in $QWC_DIR)" >&2
    qwc_stop
}

qwc_start() {
    local workers=$QWC_WORKERS_DEFAULT fresh=0
    while [ $# -gt 0 ]; do
        case $1 in
        --workers) workers=${2:?--workers needs a number}; shift 2 ;;
        --fresh) fresh=1; shift ;;
        *) echo "cluster.sh start: unknown option $1" >&2; return 64 ;;
        esac
    done
    qwc_bins || return 1
    if qwc_load_state 2>/dev/null; then
        if qwc_alive; then
            echo "cluster.sh: a cluster is already running in $QWC_DIR (scripts/cluster.sh stop)" >&2
            return 1
        fi
        qwc_stop # left over from a run that did not stop cleanly
    fi
    if [ -f "$QWC_DIR/pg/data/postmaster.pid" ] &&
        kill -0 "$(head -n 1 "$QWC_DIR/pg/data/postmaster.pid")" 2>/dev/null; then
        echo "cluster.sh: a PostgreSQL still runs in $QWC_DIR/pg (scripts/cluster.sh stop)" >&2
        return 1
    fi
    if [ "$fresh" = 1 ] && [ -f "$QWC_DIR/.queuer-cluster" ]; then
        # everything a run leaves, but not the compose secrets kept here
        rm -rf "${QWC_DIR:?}"/{pg,sim,workers,secrets} "$QWC_DIR"/{state.env,migrate.log,workload.tsv}
    fi
    mkdir -p "$QWC_DIR"
    touch "$QWC_DIR/.queuer-cluster"
    # Job control puts every process started below in its own process group,
    # so a Ctrl-C at the terminal reaches only the calling script, whose
    # trap stops them in order (workers first, with SIGTERM, once).
    local monitor=1
    case $- in *m*) monitor=0 ;; esac
    [ "$monitor" = 0 ] || set -m
    qwc_secrets "$QWC_DIR/secrets"
    QW_PG_DIR=$QWC_DIR/pg QW_PG_CONNINFO='' QW_SIM_URL='' QW_SIM_LOG='' QW_SIM_PID=''
    qwc_save_state 0 # from here on, stop cleans up whatever got started
    qw_pg_start "$QWC_DIR/pg" || { qwc_start_failed "$monitor"; return 1; }
    qwc_save_state 0
    QUEUER_DATABASE_CONNINFO=$QW_PG_CONNINFO
    export QUEUER_DATABASE_CONNINFO
    qw_migrate "$QWC_DIR/migrate.log" || { qwc_start_failed "$monitor"; return 1; }
    qw_sim_start "$QWC_DIR/sim" "${QWC_SIM_ARGS[@]}" --token-file "$QWC_DIR/secrets/dlt_token" ||
        { qwc_start_failed "$monitor"; return 1; }
    qwc_save_state 0
    local i
    for i in $(seq 1 "$workers"); do
        qwc_worker_start "w$i"
    done
    [ "$monitor" = 0 ] || set +m
    qwc_save_state "$workers"
}

# True when a process of the cluster in the loaded state is still running.
qwc_alive() {
    local f
    [ -f "$QW_PG_DIR/data/postmaster.pid" ] && return 0
    qw_alive "${QW_SIM_PID:-0}" && return 0
    for f in "$QWC_DIR"/workers/*.pid; do
        [ -f "$f" ] && qw_alive "$(cat "$f")" && return 0
    done
    return 1
}

# Stops what the state file names (on a failed or interrupted start too).
qwc_stop() {
    qw_workers_stop "$QWC_DIR/workers"
    qwc_load_state || return 0
    qw_sim_stop
    qw_pg_stop
    rm -f "$QWC_DIR/state.env"
}

qwc_status() {
    qwc_load_state || { echo "no cluster running in $QWC_DIR"; return 1; }
    local f
    echo "PostgreSQL: $QW_PG_CONNINFO"
    echo "scabbard-sim: $QW_SIM_URL (pid $QW_SIM_PID$(kill -0 "$QW_SIM_PID" 2>/dev/null || echo ', gone'))"
    for f in "$QWC_DIR"/workers/*.pid; do
        [ -f "$f" ] || continue
        local pid
        pid=$(cat "$f")
        echo "worker $(basename "$f" .pid): pid $pid$(kill -0 "$pid" 2>/dev/null || echo ', gone')"
    done
    qw_psql -c "SELECT coalesce(status, CASE WHEN submitted THEN 'submitting' ELSE 'waiting' END)
                       AS status, count(*) FROM queuer.batches GROUP BY 1 ORDER BY 1"
}

# Prints the exports that point `queuer` at the running cluster.
qwc_env() {
    qwc_load_state || { echo "no cluster running in $QWC_DIR (scripts/cluster.sh start)" >&2; return 1; }
    qwc_bins || return 1
    local q="'"
    echo "# queuer on PATH, talking to the cluster in $QWC_DIR"
    echo "export PATH=$q$(dirname "$QUEUER_BIN")$q:\"\$PATH\""
    echo "export QUEUER_DATABASE_CONNINFO=$q$QW_PG_CONNINFO$q"
    echo "export QUEUER_DLT_URL=$q$QW_SIM_URL$q"
    echo "export QUEUER_DLT_TOKEN_FILE=$q$QWC_DIR/secrets/dlt_token$q"
}

# Stops the cluster and removes its directory (only one this script made).
qwc_clean() {
    qwc_stop
    if [ ! -d "$QWC_DIR" ]; then
        echo "nothing to clean: $QWC_DIR does not exist"
        return 0
    fi
    if [ ! -f "$QWC_DIR/.queuer-cluster" ]; then
        echo "cluster.sh: $QWC_DIR was not made by cluster.sh; not removing it" >&2
        return 1
    fi
    rm -rf "${QWC_DIR:?}"
    echo "removed $QWC_DIR (database, logs, secrets, workload)"
}

qwc_topology() {
    echo "workers=$QWC_WORKERS_DEFAULT"
    echo "postgres_major=15"
    local a
    for a in "${QWC_SIM_ARGS[@]}" --token-file "<path>" --event-log "<path>"; do
        echo "sim_arg=$a"
    done
    for a in "${QWC_WORKER_SETTINGS[@]}"; do
        echo "worker_setting=$a"
    done
    for a in "${QWC_WORKER_PER_DEPLOYMENT[@]}"; do
        echo "worker_deployment=$a"
    done
    for a in "${QWC_WORKER_SECRETS[@]}"; do
        echo "worker_secret=$a"
    done
}

qwc_main() {
    set -euo pipefail
    local cmd=${1:-help}
    [ $# -eq 0 ] || shift
    case $cmd in
    start)
        qwc_start "$@"
        qwc_load_state
        echo "started in $QWC_DIR: PostgreSQL ($QW_PG_CONNINFO), scabbard-sim ($QW_SIM_URL)," \
            "$QWC_WORKERS worker$([ "$QWC_WORKERS" = 1 ] || echo s); to use queuer on it: eval \"\$(scripts/cluster.sh env)\""
        ;;
    stop) qwc_stop ;;
    status) qwc_status ;;
    load)
        qwc_bins
        qwc_load_state || { echo "no cluster running in $QWC_DIR" >&2; exit 1; }
        qw_load_tsv "${1:?load needs a TSV file or -}"
        ;;
    psql)
        qwc_load_state || { echo "no cluster running in $QWC_DIR" >&2; exit 1; }
        exec psql -X "$QW_PG_CONNINFO" "$@"
        ;;
    env) qwc_env ;;
    clean) qwc_clean ;;
    topology) qwc_topology ;;
    compose-secrets) qwc_compose_secrets "${1:-$QWC_DIR/compose}" ;;
    compose-up | compose-down | compose)
        # shellcheck source=scripts/lib/compose.sh
        . "$QWC_ROOT/scripts/lib/compose.sh"
        qwk_main "$cmd" "$@"
        ;;
    help | -h | --help) sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
    *) echo "cluster.sh: unknown command $cmd (try --help)" >&2; exit 64 ;;
    esac
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    qwc_main "$@"
fi
