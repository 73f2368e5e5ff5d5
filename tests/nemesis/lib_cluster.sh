# shellcheck shell=bash disable=SC2034 # the variables set here are read by the scripts that source this file
# The nemesis cluster (sourced by tests/nemesis/run.sh): a private
# PostgreSQL with password auth for the workers (canary password) and
# commit timestamps on, scabbard-sim with a canary bearer token, N host
# workers plus, where root and iproute2 allow it, one worker in a network
# namespace of its own, a feeder that keeps every service supplied with
# work, and the cleanup that always undoes all of it.
#
# Everything lives under NM_DIR (a private temporary directory):
#   logs/      every log the run produces (searched for canaries and
#              sanitizer reports)       secrets/  the canaries (0600)
#   pg/        the cluster              sim/      the simulator's files
#   run/       pid files and flags      faults.tsv, plan.txt, check.kv
#
# Test-scale timing (milliseconds unless named otherwise); the I6 bound
# is derived from these in run.sh.
NM_LEASE_MS=1000          # worker.lease_ms
NM_HARD_MS=3000           # worker.hard_expiry_ms
NM_CYCLE_MS=200           # worker.cycle_ms
NM_QUERY_TIMEOUT_MS=2000  # database.query_timeout_ms: the client-side deadline
NM_CONNECT_TIMEOUT_S=2    # database.connect_timeout_s
NM_HTTP_TIMEOUT_MS=1900   # dlt.request_timeout_ms (< hard expiry - lease)
NM_STATUS_WAIT_S=1        # dlt.status_wait_s
NM_UNKNOWN_CONFIRM_MS=500 # dlt.unknown_confirm_ms
NM_RETRY_MAX_MS=1000      # dlt.retry_max_ms
NM_PAUSE_MAX_MS=500       # dlt.pause_max_ms
NM_GRACE_MS=2000          # worker.shutdown_grace_ms
NM_FEED_MS=250            # the feeder enqueues one batch per service this often
NM_SERVICES=16            # services in the workload; with worker.claim_slack = 0 every
                          # worker holds its share (16 / 4 workers), so a fault aimed
                          # at one always hits work
NM_COMMIT_DELAY_MS=50     # the ledger's commit step: batches stay Pending this long
NM_FLUSH_BACKOFF_MS=2000  # the submitter's cap on retrying a failed outcome write (submitter.c)

NM_WORKERS=()        # every worker name, host workers first
NM_HOST_WORKERS=()   # the plan's targets 0..n-1
declare -A NM_PID=() # worker name -> pid of the running process
declare -A NM_WMODE=() # worker name -> plain | netns | skew
NM_NET=0             # 1 when the namespaced worker and its links exist
NM_NET_REASON=""     # why not, when NM_NET=0
NM_FAKETIME_LIB=""   # libfaketime (multithreaded variant), when found
NM_FAKETIME_REASON=""
NM_STOPPED_PIDS=()   # processes we SIGSTOPped and have not resumed yet
NM_FEEDER_PID=""

nm_now_us() {
    echo "${EPOCHREALTIME/./}"
}

nm_log() {
    local line
    line=$(printf '[nemesis %s] %s' "$(date +%H:%M:%S.%3N)" "$*")
    echo "$line"
    [ -n "${NM_DIR:-}" ] && [ -d "$NM_DIR/logs" ] && echo "$line" >>"$NM_DIR/logs/nemesis.log"
    return 0
}

nm_die() {
    nm_log "ERROR: $*" >&2
    exit 2
}

# ---- canaries ------------------------------------------------------------

nm_canaries() {
    mkdir -p "$NM_DIR/secrets"
    chmod 700 "$NM_DIR/secrets"
    NM_DB_PASSWORD="qwCanaryDb$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
    NM_TOKEN="qwCanaryTok$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
    (
        umask 077
        printf '%s\n' "$NM_TOKEN" >"$NM_DIR/secrets/token"
        printf 'Authorization: Bearer %s\n' "$NM_TOKEN" >"$NM_DIR/secrets/auth.header"
    )
}

# ---- network namespace ---------------------------------------------------

# Creates a namespace with two veth links to the host: one to the database
# address, one to the simulator's, so cutting the first partitions the
# namespaced worker from PostgreSQL only. Sets NM_NET=1, or NM_NET_REASON.
nm_net_setup() {
    if [ "$(id -u)" != 0 ]; then
        NM_NET_REASON="not root: cannot create a network namespace"
        return 0
    fi
    if ! command -v ip >/dev/null; then
        NM_NET_REASON="iproute2 (ip) is not installed"
        return 0
    fi
    # Namespaces and links left by a nemesis that was killed outright
    # (named after its pid, which is gone) are removed first.
    local ns pid
    for ns in $(ip netns list 2>/dev/null | grep -o '^qwnem[0-9]*'); do
        pid=${ns#qwnem}
        kill -0 "$pid" 2>/dev/null && continue
        ip link del "qn${pid}d" 2>/dev/null
        ip link del "qn${pid}s" 2>/dev/null
        ip netns del "$ns" 2>/dev/null
    done
    local x
    x=$(($$ % 200 + 20))
    while ip -o addr show 2>/dev/null | grep -q "198\.18\.$x\."; do
        x=$((x % 250 + 1))
    done
    # 198.18.0.0/15 is reserved for network tests (RFC 2544); both links are ours.
    NM_NS="qwnem$$"
    NM_DB_LINK="qn$$d"
    NM_SIM_LINK="qn$$s"
    NM_DB_ADDR="198.18.$x.1"
    NM_DB_PEER="198.18.$x.2"
    NM_SIM_ADDR="198.18.$x.5"
    NM_SIM_PEER="198.18.$x.6"
    local err="$NM_DIR/logs/netns.log"
    if ip netns add "$NM_NS" 2>>"$err" &&
        ip link add "$NM_DB_LINK" type veth peer name "${NM_DB_LINK}n" 2>>"$err" &&
        ip link add "$NM_SIM_LINK" type veth peer name "${NM_SIM_LINK}n" 2>>"$err" &&
        ip link set "${NM_DB_LINK}n" netns "$NM_NS" 2>>"$err" &&
        ip link set "${NM_SIM_LINK}n" netns "$NM_NS" 2>>"$err" &&
        ip addr add "$NM_DB_ADDR/30" dev "$NM_DB_LINK" 2>>"$err" &&
        ip addr add "$NM_SIM_ADDR/30" dev "$NM_SIM_LINK" 2>>"$err" &&
        ip link set "$NM_DB_LINK" up 2>>"$err" &&
        ip link set "$NM_SIM_LINK" up 2>>"$err" &&
        ip netns exec "$NM_NS" ip addr add "$NM_DB_PEER/30" dev "${NM_DB_LINK}n" 2>>"$err" &&
        ip netns exec "$NM_NS" ip addr add "$NM_SIM_PEER/30" dev "${NM_SIM_LINK}n" 2>>"$err" &&
        ip netns exec "$NM_NS" ip link set "${NM_DB_LINK}n" up 2>>"$err" &&
        ip netns exec "$NM_NS" ip link set "${NM_SIM_LINK}n" up 2>>"$err" &&
        ip netns exec "$NM_NS" ip link set lo up 2>>"$err"; then
        NM_NET=1
        nm_log "network namespace $NM_NS: database at $NM_DB_ADDR, simulator at $NM_SIM_ADDR"
    else
        NM_NET_REASON="cannot build the namespace and veth links: $(tail -1 "$err")"
        nm_net_teardown
    fi
}

nm_net_teardown() {
    [ -n "${NM_NS:-}" ] || return 0
    ip link del "$NM_DB_LINK" 2>/dev/null
    ip link del "$NM_SIM_LINK" 2>/dev/null
    ip netns del "$NM_NS" 2>/dev/null
    NM_NS=""
    return 0
}

# nm_net_cut / nm_net_heal: the database link goes down / up (both
# directions: the namespace side loses its carrier, packets vanish, TCP
# sessions stay open and silent, new connections time out).
nm_net_cut() {
    ip link set "$NM_DB_LINK" down
}

nm_net_heal() {
    ip link set "$NM_DB_LINK" up
}

# ---- libfaketime -----------------------------------------------------------

nm_faketime_setup() {
    local f
    for f in /usr/lib/*/faketime/libfaketimeMT.so.1 /usr/lib/faketime/libfaketimeMT.so.1; do
        if [ -f "$f" ]; then
            NM_FAKETIME_LIB=$f
            break
        fi
    done
    if [ -z "$NM_FAKETIME_LIB" ]; then
        NM_FAKETIME_REASON="libfaketime is not installed (Debian package faketime)"
        return 0
    fi
    # It must really move this program's clock: a probe run of the CLI.
    local out
    out=$(env LD_PRELOAD="$NM_FAKETIME_LIB" FAKETIME="-7200" ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" \
        date +%s 2>&1)
    if ! [ "$out" -lt $(($(date +%s) - 3600)) ] 2>/dev/null; then
        NM_FAKETIME_REASON="libfaketime does not shift the clock here ($out)"
        NM_FAKETIME_LIB=""
    fi
}

# ---- PostgreSQL --------------------------------------------------------------

# The cluster: commit timestamps on (I5), TCP on the namespace's database
# address when there is one; the workers log in as qw_nemesis with the
# canary password (scram-sha-256), everything else stays trust.
nm_pg_setup() {
    local extra="track_commit_timestamp = on"
    [ "$NM_NET" = 1 ] && extra="$extra
listen_addresses = '$NM_DB_ADDR'"
    # Durable commits (fsync, synchronous_commit, full pages): the nemesis
    # crashes the server, and a crash must not take back a COMMIT a worker
    # has acted on. (With synchronous_commit = off it does: a batch marked,
    # posted and then forgotten is posted again with no recorded reason, and
    # I4 reports it.)
    QW_PG_FSYNC=${NM_PG_DURABLE:-on} QW_PG_CONF_EXTRA=$extra qw_pg_start "$NM_DIR/pg" || nm_die "PostgreSQL did not start"
    ln -sf "$NM_DIR/pg/postgres.log" "$NM_DIR/logs/postgres.log"
    export QUEUER_DATABASE_CONNINFO="$QW_PG_CONNINFO"
    qw_migrate "$NM_DIR/logs/migrate.log" || nm_die "queuer migrate failed"
    qw_psql -f "$NM_SOURCE_ROOT/tests/nemesis/schema.sql" >"$NM_DIR/logs/schema.log" 2>&1 ||
        nm_die "cannot install the nemesis schema ($(cat "$NM_DIR/logs/schema.log"))"
    # The password travels on stdin, never on a command line or in a log.
    printf "SET log_statement = 'none';\nCREATE ROLE qw_nemesis LOGIN PASSWORD '%s' IN ROLE queuer_worker;\n" \
        "$NM_DB_PASSWORD" | qw_psql >/dev/null || nm_die "cannot create the workers' role"
    local lines=("local all qw_nemesis scram-sha-256")
    [ "$NM_NET" = 1 ] && lines+=("host all qw_nemesis $NM_DB_PEER/32 scram-sha-256")
    qw_pg_hba_prepend "${lines[@]}" || nm_die "cannot configure pg_hba.conf"
    # The password is really needed: once the server has read the new rules,
    # the workers' role is refused without it.
    for _ in $(seq 1 100); do
        PGPASSWORD='' psql -X -w -q -t -A "host=$QW_PG_DIR/sock user=qw_nemesis dbname=postgres" \
            -c "SELECT 1" >/dev/null 2>&1 || return 0
        sleep 0.05
    done
    nm_die "qw_nemesis still logs in without a password: the canary would prove nothing"
}

# The workers' conninfo (no password in it: that comes from the environment).
nm_worker_conninfo() {
    local name=$1
    if [ "${NM_WMODE[$name]}" = netns ]; then
        echo "host=$NM_DB_ADDR port=5432 user=qw_nemesis dbname=postgres application_name=$name"
    else
        echo "host=$QW_PG_DIR/sock port=5432 user=qw_nemesis dbname=postgres application_name=$name"
    fi
}

# ---- simulator ---------------------------------------------------------------

nm_sim_setup() {
    local listen=127.0.0.1
    [ "$NM_NET" = 1 ] && listen=$NM_SIM_ADDR
    QW_SIM_HOST=$listen qw_sim_start "$NM_DIR/sim" --token-file "$NM_DIR/secrets/token" \
        --seed "$NM_SEED" --commit-delay-ms "$NM_COMMIT_DELAY_MS" --hang-max-ms $((NM_HTTP_TIMEOUT_MS * 3)) \
        --threads 4 || nm_die "scabbard-sim did not start"
    # The token is really needed: without it the ledger refuses.
    local code
    code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$QW_SIM_URL/_sim/stats")
    [ "$code" = 401 ] || nm_die "the simulator answered $code without a token, expected 401"
    nm_sim_faults '{"reset": true}' >/dev/null
}

# nm_sim_ctl METHOD PATH [JSON]: a control request with the token; prints the body.
nm_sim_ctl() {
    local method=$1 path=$2 body=${3:-}
    if [ "$method" = GET ]; then
        curl -fsS -m 5 -H "@$NM_DIR/secrets/auth.header" "$QW_SIM_URL$path"
    else
        curl -fsS -m 5 -X POST -H "@$NM_DIR/secrets/auth.header" \
            -H 'Content-Type: application/json' --data "${body:-{\}}" "$QW_SIM_URL$path"
    fi
}

nm_sim_faults() {
    nm_sim_ctl POST /_sim/faults "$1"
}

# The baseline faults every run has between scheduled faults: a few dropped
# connections, half of them after the ledger took the batch, so duplicates
# and their recorded reasons are exercised all the time.
nm_sim_baseline() {
    nm_sim_faults "{\"reset\": true, \"fault-drop\": $NM_BASELINE_DROP}" >/dev/null
}

# nm_sim_counters: "posts_429 posts_5xx posts_hang restarts committed answered"
# from /_sim/stats (answered: POSTs answered 202 plus status GETs served).
nm_sim_counters() {
    nm_sim_ctl GET /_sim/stats | python3 -c '
import json, sys
d = json.load(sys.stdin)
p = d["posts"]
print(p.get("429", 0), p.get("500", 0) + p.get("503", 0), p.get("hang", 0),
      d.get("restarts", 0), d.get("committed", 0), p.get("202", 0) + d.get("gets", 0))'
}

# ---- workers -------------------------------------------------------------------

nm_worker_env() {
    local name=$1
    echo QUEUER_DATABASE_CONNINFO="$(nm_worker_conninfo "$name")"
    cat <<ENV
QUEUER_DATABASE_PASSWORD=$NM_DB_PASSWORD
QUEUER_DATABASE_QUERY_TIMEOUT_MS=$NM_QUERY_TIMEOUT_MS
QUEUER_DATABASE_CONNECT_TIMEOUT_S=$NM_CONNECT_TIMEOUT_S
QUEUER_DLT_URL=$QW_SIM_URL
QUEUER_DLT_TOKEN_FILE=$NM_DIR/secrets/token
QUEUER_DLT_REQUEST_TIMEOUT_MS=$NM_HTTP_TIMEOUT_MS
QUEUER_DLT_CONNECT_TIMEOUT_MS=1000
QUEUER_DLT_STATUS_WAIT_S=$NM_STATUS_WAIT_S
QUEUER_DLT_UNKNOWN_CONFIRM_MS=$NM_UNKNOWN_CONFIRM_MS
QUEUER_DLT_RETRY_BASE_MS=50
QUEUER_DLT_RETRY_MAX_MS=$NM_RETRY_MAX_MS
QUEUER_DLT_PAUSE_BASE_MS=50
QUEUER_DLT_PAUSE_MAX_MS=$NM_PAUSE_MAX_MS
QUEUER_WORKER_INSTANCE_ID=$name
QUEUER_WORKER_LEASE_MS=$NM_LEASE_MS
QUEUER_WORKER_HARD_EXPIRY_MS=$NM_HARD_MS
QUEUER_WORKER_CYCLE_MS=$NM_CYCLE_MS
QUEUER_WORKER_SHUTDOWN_GRACE_MS=$NM_GRACE_MS
QUEUER_WORKER_CLAIM_SLACK=0
QUEUER_ADMIN_LISTEN=off
QUEUER_LOG_LEVEL=info
ENV
}

# nm_worker_start NAME [FAKETIME-SPEC]: starts `queuer run` as instance NAME
# (in the namespace for a netns worker; under libfaketime with a spec) and
# waits until it has registered. Its log is appended to logs/NAME.log.
nm_worker_start() {
    local name=$1 skew=${2:-} prefix=() envs=()
    mapfile -t envs < <(nm_worker_env "$name")
    if [ "${NM_WMODE[$name]}" = netns ]; then
        prefix=(ip netns exec "$NM_NS")
    fi
    if [ -n "$skew" ]; then
        # ASan must not insist on being first in the library list for this one.
        envs+=("LD_PRELOAD=$NM_FAKETIME_LIB" "FAKETIME=$skew"
               "ASAN_OPTIONS=${ASAN_OPTIONS:-}:verify_asan_link_order=0")
    fi
    echo "### nemesis: start $(date -u +%FT%T.%3NZ) ${skew:+faketime=\"$skew\"}" >>"$NM_DIR/logs/$name.log"
    "${prefix[@]}" env "${envs[@]}" "$QUEUER_BIN" run >>"$NM_DIR/logs/$name.log" 2>&1 &
    NM_PID[$name]=$!
    echo "${NM_PID[$name]}" >"$NM_DIR/run/$name.pid"
    qw_wait_sql 30 "SELECT EXISTS (SELECT 1 FROM queuer.instances WHERE instance_id = '$name'
                      AND pid = ${NM_PID[$name]} AND stopped_at IS NULL)" 2>/dev/null ||
        nm_log "warning: worker $name (pid ${NM_PID[$name]}) did not register within 30 s"
}

# nm_worker_wait_exit NAME SECS: waits for the worker's process to end; sets
# NM_RC to its exit status (or "timeout").
nm_worker_wait_exit() {
    qw_wait_exit "${NM_PID[$1]}" "$2"
    NM_RC=$QW_RC
}

# nm_worker_stop NAME: SIGTERM, then waits (grace + margin); SIGKILL after that.
nm_worker_stop() {
    local name=$1 pid=${NM_PID[$1]}
    kill -CONT "$pid" 2>/dev/null
    kill -TERM "$pid" 2>/dev/null
    nm_worker_wait_exit "$name" $((NM_GRACE_MS / 1000 + 15))
    if [ "$NM_RC" = timeout ]; then
        kill -KILL "$pid" 2>/dev/null
        nm_worker_wait_exit "$name" 5
        NM_RC="timeout (killed)"
    fi
}

# ---- feeder --------------------------------------------------------------------

# Enqueues one batch for every service every NM_FEED_MS until run/feeder.stop
# exists, through the CLI as the database superuser (a refused or failed
# enqueue during a database outage is logged and the next tick goes on).
nm_feeder() {
    local tick=0 file="$NM_DIR/run/feed.tsv"
    while [ ! -e "$NM_DIR/run/feeder.stop" ]; do
        tick=$((tick + 1))
        qw_gen "$file" "$NM_SERVICES" 1 $((NM_SEED * 7919 + tick)) nemes 2>>"$NM_DIR/logs/feeder.log"
        if ! QUEUER_DATABASE_CONNINFO="$QW_PG_CONNINFO" QUEUER_DATABASE_CONNECT_TIMEOUT_S=2 \
            qw_load_tsv "$file" >>"$NM_DIR/logs/feeder.log" 2>&1; then
            echo "feeder: tick $tick: enqueue failed" >>"$NM_DIR/logs/feeder.log"
        fi
        sleep "$(awk -v ms="$NM_FEED_MS" 'BEGIN { printf "%.3f", ms / 1000 }')"
    done
}

nm_feeder_start() {
    rm -f "$NM_DIR/run/feeder.stop"
    nm_feeder &
    NM_FEEDER_PID=$!
}

nm_feeder_stop() {
    [ -n "$NM_FEEDER_PID" ] || return 0
    touch "$NM_DIR/run/feeder.stop"
    wait "$NM_FEEDER_PID" 2>/dev/null
    NM_FEEDER_PID=""
}

# ---- cleanup -------------------------------------------------------------------

# Resumes everything we stopped, stops workers, feeder, simulator and
# PostgreSQL, removes the namespace; keeps NM_DIR on failure or --keep.
nm_cleanup() {
    local rc=$? pid
    trap - EXIT
    for pid in "${NM_STOPPED_PIDS[@]}"; do
        kill -CONT "$pid" 2>/dev/null
    done
    [ -n "$NM_FEEDER_PID" ] && touch "$NM_DIR/run/feeder.stop" && kill "$NM_FEEDER_PID" 2>/dev/null
    [ "${#NM_PID[@]}" = 0 ] || qw_stop_pids 5 "${NM_PID[@]}"
    wait "$NM_FEEDER_PID" 2>/dev/null
    { qw_sim_stop; } 2>/dev/null
    qw_pg_stop immediate 2>/dev/null
    [ "$NM_NET" = 1 ] && [ -n "${NM_DB_LINK:-}" ] && ip link set "$NM_DB_LINK" up 2>/dev/null
    nm_net_teardown
    if [ "$rc" != 0 ] || [ "$NM_KEEP" = 1 ]; then
        echo "nemesis: files kept in $NM_DIR (exit $rc)"
    else
        rm -rf "$NM_DIR"
    fi
    exit "$rc"
}
