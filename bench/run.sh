#!/usr/bin/env bash
# The queuer benchmark: one command that builds a release build, starts a
# private PostgreSQL and scabbard-sim, enqueues each workload, runs K
# `queuer run` workers until every batch is final, and prints a table; the
# same W1 also runs through graphile-worker for a side-by-side ratio.
# bench/PERFORMANCE.md explains every figure.
#
#   bench/run.sh [--quick] [--workload W1,W2,...] [--workers 1,2,4]
#                [--out DIR] [--keep] [--pg-statements]
#
#   --quick        reduced sizes for a CI smoke run (about two minutes)
#   --workload     any of W1 W2 W3 W4 W1F W5 W6 G1 G5 W7 WN WP WF (default: all but
#                  W6, G5 and W7; --quick also leaves out W1F)
#                    W1  1,000 services x 10 batches, K = 1, 2, 4
#                    W2  10,000 services x 3 batches, K = 1, 4
#                    W3  20 services x 500 batches, K = 4
#                    W4  W1 with 20% of POSTs answered 429, K = 4
#                    W1F W1 with K = 4 on a cluster with fsync/synchronous_commit off
#                    W5  open loop: 1,500 batches/s enqueued over 1,000 services
#                        for 60 s while K = 4 workers drain them; the
#                        queuer's own overhead per batch (bench/openloop.h)
#                    W6  100,000 services x 2 batches, K = 8 (W6-k8) and 16 (W6-k16):
#                        the claim cycle at scale (docs/CLAIMS.md)
#                    G1  W1 through graphile-worker
#                    G5  W5's open loop through graphile-worker: one add_job()
#                        per batch, each its own transaction, in the queue named
#                        after its service (compare with BENCH_W5_SINGLE=1)
#                    W7  500 services x 10 against a ledger taking 40 pending
#                        (429 until 20) and 1,000 batches/s, K = 4, without and
#                        with a shared capacity of 36 in flight and 950/s
#                        (bench/capacity.sh)
#                    WN, WP, WF  nodes, priority, fairness (bench/scheduling.sh)
#   --workers      worker counts for every queuer workload (overrides the K above)
#   --out DIR      where results go (default bench/out/<date>-<time>)
#   --keep         keep the PostgreSQL data, simulator event logs and databases
#   --pg-statements  load pg_stat_statements and write each run's costliest
#                  statements to <out>/work/<run>/pg_statements.txt, and its
#                  statements slower than 1 s and lock waits longer than 1 s
#                  to .../pg_slow.log, and samples pg_stat_activity once a
#                  second into .../pg_activity.log (where the database time
#                  goes; adds a little overhead to every figure)
#
# Environment: BENCH_WORKER_ENV="VAR=VALUE ..." extra settings for every
# worker (e.g. QUEUER_WORKER_CYCLE_MS=200); BENCH_GW_PROCS (1),
# BENCH_GW_CONCURRENCY (32), BENCH_GW_LOCAL_QUEUE (64),
# BENCH_GW_COMPLETE_BATCH_MS (0) for graphile-worker; BENCH_SIM_DELAY_MS (20);
# BENCH_ANALYZE: a bench-analyze binary to use instead of the build's;
# BENCH_W5_RATE (1500; --quick 300), BENCH_W5_SECONDS (60; --quick 10),
# BENCH_W5_WARMUP_S (5; --quick 3): the W5 load and the first seconds of it
# left out of its figures; BENCH_W5_SINGLE=1: W5's load calls
# queuer.enqueue_batch() once per batch, each call its own transaction and
# an unnamed statement, as an application does (default: one
# queuer.enqueue_rows() call per 5 ms tick, several batches at high rates);
# BENCH_W5_TICK_MS (5): the tick, for applications that enqueue a few dozen
# batches per call (50 ms at 1,500/s: 75 a call);
# BENCH_WORKER_ROLE (1): workers log in as a member of queuer_worker, as in
# production, whose history rows the database checks; 0: as the superuser
# that owns the schema, which skips those checks.
# BENCH_PG_CONF: extra postgresql.conf lines for the benchmark clusters
# (e.g. "max_pred_locks_per_transaction = 4096", see docs/CLAIMS.md).
# BENCH_SETUP_SQL: statements run in each queuer run's database after the
# migrations and before the load (e.g. another index or table setting, to
# measure a layout with the workers' real statements).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/tests/lib/cluster.sh"
. "$ROOT/bench/lib.sh"
. "$ROOT/bench/capacity.sh"

QUICK=0
WORKLOADS=""
WORKERS=""
OUT=""
KEEP=0
PG_STATEMENTS=0
while [ $# -gt 0 ]; do
    case $1 in
    --quick) QUICK=1 ;;
    --workload | --workloads)
        WORKLOADS=${2:?--workload needs a list}
        shift
        ;;
    --workers)
        WORKERS=${2:?--workers needs a list}
        shift
        ;;
    --out)
        OUT=${2:?--out needs a directory}
        shift
        ;;
    --keep) KEEP=1 ;;
    --pg-statements) PG_STATEMENTS=1 ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "run.sh: unknown argument '$1' (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done

if [ -z "$WORKLOADS" ]; then
    if [ "$QUICK" = 1 ]; then WORKLOADS=W1,W2,W3,W4,W5,G1,WN,WP,WF; else WORKLOADS=W1,W2,W3,W4,W1F,W5,G1,WN,WP,WF; fi
fi
for w in ${WORKLOADS//,/ }; do
    case $w in
    W1 | W2 | W3 | W4 | W1F | W5 | W6 | G1 | G5 | W7 | WN | WP | WF) ;;
    *)
        echo "run.sh: unknown workload '$w' (W1 W2 W3 W4 W1F W5 W6 G1 G5 W7 WN WP WF)" >&2
        exit 2
        ;;
    esac
done
case ,$WORKERS, in
*[!0-9,]*)
    echo "run.sh: --workers takes a list of numbers such as 1,2,4" >&2
    exit 2
    ;;
esac

SIM_DELAY_MS=${BENCH_SIM_DELAY_MS:-20}
GW_PROCS=${BENCH_GW_PROCS:-1}
GW_CONCURRENCY=${BENCH_GW_CONCURRENCY:-32}
GW_LOCAL_QUEUE=${BENCH_GW_LOCAL_QUEUE:-64}
GW_COMPLETE_BATCH_MS=${BENCH_GW_COMPLETE_BATCH_MS:-0}
WORKER_ROLE=${BENCH_WORKER_ROLE:-1}
if [ "$QUICK" = 1 ]; then
    W5_RATE=${BENCH_W5_RATE:-300}
    W5_SECONDS=${BENCH_W5_SECONDS:-10}
    W5_WARMUP_S=${BENCH_W5_WARMUP_S:-3}
else
    W5_RATE=${BENCH_W5_RATE:-1500}
    W5_SECONDS=${BENCH_W5_SECONDS:-60}
    W5_WARMUP_S=${BENCH_W5_WARMUP_S:-5}
fi
W5_SINGLE=${BENCH_W5_SINGLE:-0}
W5_TICK_MS=${BENCH_W5_TICK_MS:-5}
case $W5_TICK_MS in
    '' | *[!0-9]*)
        echo "run.sh: BENCH_W5_TICK_MS must be a number of milliseconds, not '$W5_TICK_MS'" >&2
        exit 2
        ;;
esac
case $W5_SINGLE in
    1) W5_MODE="one queuer.enqueue_batch() call per batch" ;;
    0) W5_MODE="one queuer.enqueue_rows() call per $W5_TICK_MS ms tick" ;;
    *)
        echo "run.sh: BENCH_W5_SINGLE must be 0 or 1, not '$W5_SINGLE'" >&2
        exit 2
        ;;
esac
OUT=${OUT:-$ROOT/bench/out/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$OUT/work
mkdir -p "$WORK"
RESULTS=$OUT/results.tsv
LOG=$OUT/run.log
: >"$LOG"

say() { echo "bench: $*" | tee -a "$LOG" >&2; }
die() {
    say "error: $*"
    exit 1
}

# ---- build ------------------------------------------------------------------

BUILD=$ROOT/build/release
build_release() {
    if [ ! -f "$BUILD/build.ninja" ]; then
        say "meson setup $BUILD (release)"
        meson setup "$BUILD" "$ROOT" --buildtype=release -Dtests=false >>"$LOG" 2>&1 ||
            die "meson setup failed (see $LOG)"
    fi
    say "building $BUILD"
    meson compile -C "$BUILD" >>"$LOG" 2>&1 || die "build failed (see $LOG)"
}
build_release
QUEUER_BIN=$BUILD/queuer
SCABBARD_SIM_BIN=$BUILD/sim/scabbard-sim
QUEUER_GEN_BIN=$BUILD/tools/queuer-gen
LOADGEN=$BUILD/bench/bench-load
ANALYZE=${BENCH_ANALYZE:-$BUILD/bench/bench-analyze}
export QUEUER_BIN SCABBARD_SIM_BIN
[ -x "$ANALYZE" ] || die "$ANALYZE is missing: the top-level meson.build needs subdir('bench')"

case ,$WORKLOADS, in
*,G1,* | *,G5,*)
    command -v node >/dev/null || die "Node.js is needed for G1 and G5 (graphile-worker) and is not installed; run without them (--workload W1,W2,W3,W4) or install nodejs"
    NODE_MAJOR=$(node --version | sed 's/^v\([0-9]*\).*/\1/')
    [ "$NODE_MAJOR" -ge 18 ] || die "Node.js >= 18 is needed for G1 and G5 (found $(node --version))"
    GW_DIR=$ROOT/bench/graphile
    if [ ! -f "$GW_DIR/node_modules/.package-lock.json" ] ||
        [ "$GW_DIR/package-lock.json" -nt "$GW_DIR/node_modules/.package-lock.json" ]; then
        say "npm ci in $GW_DIR"
        (cd "$GW_DIR" && npm ci --no-audit --no-fund --loglevel=error) >>"$LOG" 2>&1 ||
            die "npm ci failed (see $LOG)"
    fi
    ;;
esac

# ---- clusters and cleanup -----------------------------------------------------

PG_ON_DIR=$WORK/pg-fsync-on
PG_OFF_DIR=$WORK/pg-fsync-off
STARTED_PG=()
RUN_PIDS=()
ACTIVITY_PID=""

cleanup() {
    local d
    # workers first, while PostgreSQL and the simulator are still there for
    # their graceful shutdown; qw_stop_pids ends with SIGKILL for any that hang
    [ "${#RUN_PIDS[@]}" = 0 ] || qw_stop_pids 20 "${RUN_PIDS[@]}"
    [ -z "$ACTIVITY_PID" ] || qw_stop_pids 20 "$ACTIVITY_PID"
    qw_sim_stop
    for d in "${STARTED_PG[@]}"; do
        QW_PG_DIR=$d qw_pg_stop fast
    done
    if [ "$KEEP" = 0 ]; then
        rm -rf "$PG_ON_DIR" "$PG_OFF_DIR"
        find "$WORK" -name 'sim.ndjson' -delete 2>/dev/null || true
        rm -f "$WORK"/*.tsv
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts the cluster for durability mode $1 (on|off) once; sets PG_DIR, PG_ADMIN.
use_cluster() {
    local dir
    if [ "$1" = on ]; then dir=$PG_ON_DIR; else dir=$PG_OFF_DIR; fi
    if [ ! -f "$dir/data/postmaster.pid" ]; then
        say "starting PostgreSQL in $dir (fsync, synchronous_commit, full_page_writes = $1)"
        local extra=${BENCH_PG_CONF:-}
        [ "$PG_STATEMENTS" = 0 ] || extra="$extra
shared_preload_libraries = 'pg_stat_statements'
log_min_duration_statement = 1000
log_lock_waits = on"
        QW_PG_FSYNC=$1 QW_PG_CONF_EXTRA=$extra qw_pg_start "$dir" || die "PostgreSQL did not start"
        STARTED_PG+=("$dir")
    fi
    PG_DIR=$dir
    PG_ADMIN="host=$dir/sock port=5432 user=postgres dbname=postgres"
    if [ "$PG_STATEMENTS" = 1 ]; then
        psql -X -q "$PG_ADMIN" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >>"$LOG" 2>&1 ||
            die "pg_stat_statements is not available"
    fi
}

# With --pg-statements: forget what earlier runs did.
statements_reset() {
    [ "$PG_STATEMENTS" = 1 ] || return 0
    psql -X -q "$PG_ADMIN" -c "SELECT pg_stat_statements_reset()" >/dev/null
    PG_LOG_OFFSET=$(stat -c %s "$PG_DIR/postgres.log")
}

# With --pg-statements: samples what the run's backends are doing, once a
# second, into $1 until statements_dump stops it.
activity_start() {
    [ "$PG_STATEMENTS" = 1 ] || return 0
    local out=$1
    while :; do
        psql -X -q -t -A -F ' | ' "$PG_ADMIN" -c "SELECT to_char(clock_timestamp(), 'HH24:MI:SS.MS'),
            pid, application_name, state, coalesce(wait_event_type || ':' || wait_event, '-'),
            round(extract(epoch FROM clock_timestamp() - query_start)::numeric * 1000), left(regexp_replace(query, '\s+', ' ', 'g'), 120)
            FROM pg_stat_activity WHERE datname = '$DB' AND state <> 'idle' AND pid <> pg_backend_pid()" \
            >>"$out" 2>/dev/null || true
        sleep 1
    done &
    ACTIVITY_PID=$!
}

# With --pg-statements: the run's statements by total execution time into $1.
statements_dump() {
    [ "$PG_STATEMENTS" = 1 ] || return 0
    [ -z "${ACTIVITY_PID:-}" ] || qw_stop_pids 20 "$ACTIVITY_PID"
    ACTIVITY_PID=""
    tail -c +$((PG_LOG_OFFSET + 1)) "$PG_DIR/postgres.log" | grep -A3 'duration:\|still waiting' \
        >"$(dirname "$1")/pg_slow.log" || true
    psql -X -q "$PG_ADMIN" -P pager=off >"$1" 2>&1 <<SQL
SELECT round(total_exec_time::numeric, 1) AS total_ms, calls, rows,
       round((total_exec_time / calls)::numeric, 3) AS mean_ms,
       shared_blks_hit + shared_blks_read AS blocks,
       regexp_replace(left(query, 160), '\s+', ' ', 'g') AS query
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$DB')
ORDER BY total_exec_time DESC
LIMIT 25;
SQL
}

# ---- workloads ----------------------------------------------------------------

# Prints "services batches" of a workload in this mode.
workload_size() {
    if [ "$QUICK" = 1 ]; then
        case $1 in
        W1 | W4 | W1F | G1) echo "200 5" ;;
        W5 | G5) echo "200 -" ;;
        W2) echo "2000 2" ;;
        W3) echo "5 20" ;;
        W6) echo "10000 2" ;;
        W7) echo "100 5" ;;
        esac
    else
        case $1 in
        W1 | W4 | W1F | G1) echo "1000 10" ;;
        W5 | G5) echo "1000 -" ;;
        W2) echo "10000 3" ;;
        W3) echo "20 500" ;;
        W6) echo "100000 2" ;;
        W7) echo "500 10" ;;
        esac
    fi
}

workload_workers() {
    if [ -n "$WORKERS" ]; then
        echo "${WORKERS//,/ }"
        return
    fi
    case $1 in
    W1) if [ "$QUICK" = 1 ]; then echo "1 4"; else echo "1 2 4"; fi ;;
    W2) if [ "$QUICK" = 1 ]; then echo "4"; else echo "1 4"; fi ;;
    W6) if [ "$QUICK" = 1 ]; then echo "8"; else echo "8 16"; fi ;;
    *) echo "4" ;;
    esac
}

# Writes the TSV of a size once; prints its path.
workload_tsv() {
    local f=$WORK/w-$1x$2.tsv
    [ -s "$f" ] || qw_gen "$f" "$1" "$2"
    echo "$f"
}

# Longest wait for one run: generous, so only a stuck run hits it.
run_timeout_s() { echo $((120 + $1 / 20)); }

SIM_PID_OF_RUN=""
start_sim() {
    local dir=$1
    shift
    qw_sim_start "$dir" --commit-delay-ms "$SIM_DELAY_MS" --seed 1 "$@" ||
        die "scabbard-sim did not start"
    SIM_PID_OF_RUN=$QW_SIM_PID
}

# Snapshot of the cluster's and the simulator's CPU ticks before a run.
snap_before() {
    PG_T0=$(bench_pg_cpu_ticks "$PG_DIR/data")
    SIM_T0=$(bench_cpu_ticks "$SIM_PID_OF_RUN")
    XC0=$(bench_db_counter "$PG_ADMIN" "$DB" xact_commit)
    XR0=$(bench_db_counter "$PG_ADMIN" "$DB" xact_rollback)
    SEQ0=$(seq_scans)
}

# "claims batches": sequential scans of queuer.service_id_claims and
# queuer.batches so far (pg_stat_user_tables; 0 0 before the schema exists).
seq_scans() {
    psql -X -q -t -A -F ' ' "$DB_CONNINFO" -c "SELECT
        coalesce(sum(seq_scan) FILTER (WHERE relname = 'service_id_claims'), 0),
        coalesce(sum(seq_scan) FILTER (WHERE relname = 'batches'), 0)
        FROM pg_stat_user_tables WHERE schemaname = 'queuer'"
}

snap_after() {
    PG_T1=$(bench_pg_cpu_ticks "$PG_DIR/data")
    SIM_T1=$(bench_cpu_ticks "$SIM_PID_OF_RUN")
}

# Waits until the simulator has finalised $1 batches, then until the
# database agrees ($2 is an SQL condition). Counts the commits its own SQL
# polls cause in HARNESS_XACTS so they can be taken out of the commit count:
# two per psql call in PostgreSQL 15 (the connection start-up reads the
# catalogs in a transaction of its own, then the SELECT).
wait_all_final() {
    local n=$1 cond=$2 secs=$3 i out
    HARNESS_XACTS=0
    RUN_STATUS=ok
    # in the background, so that a SIGTERM to this script is acted on at once
    "$ANALYZE" --wait-final "$n" --timeout-s "$secs" "$QW_SIM_LOG" 2>>"$LOG" &
    local follower=$!
    RUN_PIDS+=("$follower")
    if ! wait "$follower"; then
        RUN_STATUS=timeout
        return 0
    fi
    for i in $(seq 1 300); do
        out=$(psql -X -q -t -A "$DB_CONNINFO" -c "SELECT $cond" 2>>"$LOG" || true)
        HARNESS_XACTS=$((HARNESS_XACTS + 2))
        [ "$out" = t ] && return 0
        sleep 0.1
    done
    RUN_STATUS="db-not-final"
}

# Fills the per-process columns from PIDs in "$@" (at the end snapshot).
collect_procs() {
    local pid t kb
    PROC_TICKS=0
    RSS_LIST=""
    RSS_MAX=0
    for pid in "$@"; do
        t=$(bench_cpu_ticks "$pid")
        kb=$(bench_vmhwm_kb "$pid")
        PROC_TICKS=$((PROC_TICKS + t))
        RSS_LIST="$RSS_LIST${RSS_LIST:+/}$(awk -v k="$kb" 'BEGIN { printf "%.1f", k / 1024 }')"
        if [ "$kb" -gt "$RSS_MAX" ]; then RSS_MAX=$kb; fi
    done
}

# Waits until no backend is connected to $DB any more. A backend leaves
# pg_stat_activity a moment before it flushes its counters at exit, hence
# the short pause after.
db_settle() {
    bench_db_idle "$PG_ADMIN" "$DB" 30 || say "$DB: backends still connected; commit count may be off"
    sleep 0.3
}

new_db() {
    DB=$1
    DB_CONNINFO="host=$PG_DIR/sock port=5432 user=postgres dbname=$DB"
    psql -X -q "$PG_ADMIN" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >>"$LOG" 2>&1 ||
        die "cannot create database $DB"
}

drop_db() {
    [ "$KEEP" = 1 ] && return 0
    psql -X -q "$PG_ADMIN" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >>"$LOG" 2>&1 || true
}

# The columns of $RESULTS, one row per run under a header row of these
# names. record() fills them by name and the report reads them by name
# (RESULTS_AWK), so a column can be added or moved without renumbering.
RESULT_COLUMNS=(
    run workload k fsync services batches_per_service status batches batches_per_s
    p50_ms p99_ms max_ms commits_per_batch rollbacks_per_batch requests_per_batch
    posts posts_429 gets rss_max_mb rss_list_mb
    cpu_workers_per_1k cpu_pg_per_1k cpu_sim_per_1k cpu_pg_enqueue_per_1k span_s enqueue_s
    ser_retries flushes outcomes cycles warnings load1
    claims_txns claims_txn_p50_ms claims_txn_p99_ms claims_ser_failures_per_txn cycle_p99_ms
    seq_scans_claims seq_scans_batches cycle_failed
    w5_p50_ms w5_p99_ms w5_max_ms w5_idle w5_idle_p50_ms w5_idle_p99_ms
    w5_next w5_next_p50_ms w5_next_p99_ms w5_measured load_rate load_refused load_max_late_ms
)
(
    IFS=$'\t'
    echo "${RESULT_COLUMNS[*]}"
) >"$RESULTS"

# Prepended to an awk program reading $RESULTS (awk -F'\t'): takes the
# header row and defines c("name"), the field of that name in the current
# row; an unknown name stops awk with an error rather than read another field.
# shellcheck disable=SC2016 # awk's $i and $(...), not the shell's
RESULTS_AWK='NR == 1 { for (i = 1; i <= NF; i++) column[$i] = i; next }
function c(name) {
    if (!(name in column)) {
        printf "bench: results.tsv has no column %s\n", name >"/dev/stderr"
        exit 2
    }
    return $(column[name])
}
'

# Appends one result row. $1 name, $2 workload, $3 K, $4 fsync, $5 services,
# $6 batches/service, $7 enqueue seconds, $8 worker summary sums ("" for G1),
# $9 warning and error lines in the workers' logs, $10 the claim-cycle
# figures (claims_figures; "" for G1). W5 runs set ANALYZE_ARGS
# (bench-analyze's --enqueue-log form) and LOAD_FIG (bench-load's summary).
ANALYZE_ARGS=()
LOAD_FIG=""
record() {
    local name=$1 wl=$2 k=$3 fsync=$4 s=$5 b=$6 enq=$7 sums=$8 warnings=$9 claims=${10} fig w5
    fig=$("$ANALYZE" "${ANALYZE_ARGS[@]}" "$QW_SIM_LOG" 2>>"$LOG") || true
    w5=$(printf '%s\n' "$fig" | sed -n 2p)
    fig=$(printf '%s\n' "$fig" | sed -n 1p)
    local batches xc xr
    batches=$(bench_kv batches "$fig")
    batches=${batches:-0}
    xc=$(($(bench_db_counter "$PG_ADMIN" "$DB" xact_commit) - XC0 - HARNESS_XACTS))
    xr=$(($(bench_db_counter "$PG_ADMIN" "$DB" xact_rollback) - XR0))
    awk -v OFS='\t' -v name="$name" -v wl="$wl" -v k="$k" -v fs="$fsync" -v s="$s" -v b="$b" \
        -v st="$RUN_STATUS" -v n="$batches" -v bps="$(bench_kv batches_per_s "$fig")" \
        -v p50="$(bench_kv turnaround_p50_ms "$fig")" -v p99="$(bench_kv turnaround_p99_ms "$fig")" \
        -v pmax="$(bench_kv turnaround_max_ms "$fig")" -v xc="$xc" -v xr="$xr" \
        -v rpb="$(bench_kv requests_per_batch "$fig")" -v posts="$(bench_kv posts "$fig")" \
        -v p429="$(bench_kv posts_429 "$fig")" -v gets="$(bench_kv gets "$fig")" \
        -v rss="$RSS_MAX" -v rsslist="$RSS_LIST" -v wt="$PROC_TICKS" \
        -v pgt="$((PG_T1 - PG_T0))" -v simt="$((SIM_T1 - SIM_T0))" -v hz="$BENCH_CLK_TCK" \
        -v span="$(bench_kv span_s "$fig")" -v enq="$enq" -v sums="$sums" -v warn="$warnings" -v load1="$RUN_LOAD1" \
        -v claims="$claims" -v w5="$w5" -v lf="$LOAD_FIG" -v columns="${RESULT_COLUMNS[*]}" '
        function kv(line, key,   i, n, w) {
            n = split(line, w, " ")
            for (i = 1; i <= n; i++) if (index(w[i], key "=") == 1) return substr(w[i], length(key) + 2)
            return "-"
        }
        BEGIN {
            split(sums, a, " ")
            if (split(claims, cl, " ") != 8) for (i = 1; i <= 8; i++) cl[i] = "-"
            per = n > 0 ? 1000 / n : 0
            v["run"] = name; v["workload"] = wl; v["k"] = k; v["fsync"] = fs
            v["services"] = s; v["batches_per_service"] = b; v["status"] = st
            v["batches"] = n; v["batches_per_s"] = bps
            v["p50_ms"] = p50; v["p99_ms"] = p99; v["max_ms"] = pmax
            v["commits_per_batch"] = n > 0 ? sprintf("%.2f", xc / n) : "-"
            v["rollbacks_per_batch"] = n > 0 ? sprintf("%.3f", xr / n) : "-"
            v["requests_per_batch"] = rpb; v["posts"] = posts; v["posts_429"] = p429; v["gets"] = gets
            v["rss_max_mb"] = sprintf("%.1f", rss / 1024); v["rss_list_mb"] = rsslist
            v["cpu_workers_per_1k"] = sprintf("%.3f", wt / hz * per)
            v["cpu_pg_per_1k"] = sprintf("%.3f", pgt / hz * per)
            v["cpu_sim_per_1k"] = sprintf("%.3f", simt / hz * per)
            # W5: the CPU of the load generator backend (its enqueue calls and their triggers)
            lc = kv(lf, "load_backend_cpu_s")
            v["cpu_pg_enqueue_per_1k"] = lc == "-" || lc < 0 ? "-" : sprintf("%.3f", lc * per)
            v["span_s"] = span; v["enqueue_s"] = enq
            v["ser_retries"] = sums == "" ? "-" : a[1]; v["flushes"] = sums == "" ? "-" : a[2]
            v["outcomes"] = sums == "" ? "-" : a[3]; v["cycles"] = sums == "" ? "-" : a[4]
            v["warnings"] = warn; v["load1"] = load1
            v["claims_txns"] = cl[1]; v["claims_txn_p50_ms"] = cl[2]; v["claims_txn_p99_ms"] = cl[3]
            v["claims_ser_failures_per_txn"] = cl[4]; v["cycle_p99_ms"] = cl[5]
            v["seq_scans_claims"] = cl[6]; v["seq_scans_batches"] = cl[7]; v["cycle_failed"] = cl[8]
            nw = split("w5_p50_ms w5_p99_ms w5_max_ms w5_idle w5_idle_p50_ms w5_idle_p99_ms " \
                       "w5_next w5_next_p50_ms w5_next_p99_ms w5_measured", w5keys, " ")
            for (i = 1; i <= nw; i++) v[w5keys[i]] = kv(w5, w5keys[i])
            v["load_rate"] = kv(lf, "load_rate"); v["load_refused"] = kv(lf, "load_refused")
            v["load_max_late_ms"] = kv(lf, "load_max_late_ms")
            ncol = split(columns, col, " ")
            for (i = 1; i <= ncol; i++) {
                if (!(col[i] in v)) {
                    printf "bench: record() has no value for column %s\n", col[i] >"/dev/stderr"
                    exit 2
                }
                printf "%s%s", v[col[i]], i < ncol ? OFS : ORS
                delete v[col[i]]
            }
            for (key in v) {
                printf "bench: record() sets %s, which is not a column\n", key >"/dev/stderr"
                exit 2
            }
        }' >>"$RESULTS"
    say "$name: $(awk -F'\t' "$RESULTS_AWK"'END { print c("status"), c("batches"), c("batches_per_s"),
        c("p50_ms"), c("p99_ms"), c("max_ms"), c("commits_per_batch") }' "$RESULTS")"
}

# The claim cycle of a run, from the workers' claims.summary lines in
# $1/w*.log and the sequential-scan counters: "claims transactions, their
# p50 and p99 ms (worst worker), serialization failures per claims
# transaction, cycle p99 ms (worst worker), sequential scans of
# service_id_claims and of batches during the run, cycle.failed lines".
claims_figures() {
    local dir=$1 seq1
    seq1=$(seq_scans)
    cat "$dir"/w*.log | awk -v seq0="$SEQ0" -v seq1="$seq1" '
        function kv(k,   i, n, w) {
            n = split($0, w, " ")
            for (i = 1; i <= n; i++) if (index(w[i], k "=") == 1) return substr(w[i], length(k) + 2) + 0
            return 0
        }
        /event=claims.summary/ {
            txns += kv("txns"); ser += kv("serialization_failures")
            if (kv("txn_p50_ms") > p50) p50 = kv("txn_p50_ms")
            if (kv("txn_p99_ms") > p99) p99 = kv("txn_p99_ms")
            if (kv("cycle_p99_ms") > cp99) cp99 = kv("cycle_p99_ms")
        }
        /event=cycle.failed/ { failed++ }
        END {
            split(seq0, a, " "); split(seq1, b, " ")
            printf "%d %.1f %.1f %s %.1f %d %d %d\n", txns, p50, p99,
                (txns > 0 ? sprintf("%.4f", ser / txns) : "-"), cp99, b[1] - a[1], b[2] - a[2], failed
        }'
}

elapsed_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

# W5 starts from an empty database, whose statistics (taken by the VACUUM
# ANALYZE before the run) say every table is empty; the plans made from them
# scan queuer.batches whole for each enqueued row (17 ms per enqueue call
# after a thousand rows, so the load could not keep its rate). A production
# database has statistics of a full table: autovacuum takes them, but only
# every autovacuum_naptime (1 min), as long as the whole run. This stands in
# for it: ANALYZE of the tables $3 (those the enqueue and the claim cycle
# read), 1 s into the load and then every 5 s until process $1 ends; it
# writes how many it ran (each one psql call, two commits) to $2.
w5_analyze_while() {
    local pid=$1 out=$2 tables=$3 n=0 tick=0
    while kill -0 "$pid" 2>/dev/null; do
        if [ $((tick % 25)) = 5 ]; then # 1 s in, then every 5 s
            psql -X -q "$DB_CONNINFO" -c "ANALYZE $tables" >>"$LOG" 2>&1 || true
            n=$((n + 1))
        fi
        tick=$((tick + 1))
        sleep 0.2
    done
    echo "$n" >"$out"
}

# The open load of W5 and G5, a second after the workers started: bench-load
# at W5's rate over $2 services for W5's duration (its further arguments
# after $3), with the ANALYZE of tables $3 beside it; its enqueue log and
# figures in run directory $1. Sets LOAD_FIG and ANALYZE_ARGS.
w5_load() {
    local dir=$1 s=$2 tables=$3 load_pid
    shift 3
    sleep 1
    QUEUER_DATABASE_CONNINFO=$DB_CONNINFO "$LOADGEN" --rate "$W5_RATE" --services "$s" \
        --seconds "$W5_SECONDS" "$@" --out "$dir/enqueue.tsv" >"$dir/load.out" 2>>"$LOG" &
    load_pid=$!
    RUN_PIDS+=("$load_pid")
    w5_analyze_while "$load_pid" "$dir/analyze.count" "$tables" &
    RUN_PIDS+=("$!")
    wait "$load_pid" || die "bench-load failed (see $LOG)"
    wait "${RUN_PIDS[-1]}" || true
    LOAD_FIG=$(tail -1 "$dir/load.out")
    ANALYZE_ARGS=(--enqueue-log "$dir/enqueue.tsv" --warmup-s "$W5_WARMUP_S")
}

# One queuer run: $1 workload, $2 K, $3 fsync mode, sim args after; the
# run is named $RUN_NAME when set, else <workload>-k<K>.
run_queuer() {
    local wl=$1 k=$2 fsync=$3
    shift 3
    local s b name dir tsv="" t0 enq i pids=() f sums line n
    read -r s b <<<"$(workload_size "$wl")"
    name=${RUN_NAME:-$wl-k$k}
    dir=$WORK/$name
    rm -rf "$dir"
    mkdir -p "$dir"
    use_cluster "$fsync"
    local db=${name//-/_}
    new_db "b_${db,,}"
    qw_migrate "$LOG" "$DB_CONNINFO" || die "migrate failed"
    [ -z "${BENCH_SETUP_SQL:-}" ] ||
        psql -X -q -v ON_ERROR_STOP=1 "$DB_CONNINFO" -c "$BENCH_SETUP_SQL" >>"$LOG" 2>&1 ||
        die "BENCH_SETUP_SQL failed (see $LOG)"
    w7_capacity "$name"
    if [ "$wl" = W5 ]; then
        say "$name: $W5_RATE batches/s over $s services for $W5_SECONDS s, $k worker(s), fsync=$fsync $*"
        enq=-
        n=0
    else
        tsv=$(workload_tsv "$s" "$b")
        say "$name: $s services x $b batches, $k worker(s), fsync=$fsync $*"
        t0=$(date +%s.%N)
        QUEUER_DATABASE_CONNINFO=$DB_CONNINFO qw_load_tsv "$tsv" >>"$LOG" 2>&1 || die "enqueue failed"
        enq=$(elapsed_since "$t0")
        n=$((s * b))
    fi
    psql -X -q "$DB_CONNINFO" -c "VACUUM ANALYZE" -c "CHECKPOINT" >>"$LOG" 2>&1
    db_settle
    statements_reset
    start_sim "$dir" "$@"
    RUN_LOAD1=$(cut -d' ' -f1 /proc/loadavg)
    snap_before
    local worker_conninfo=$DB_CONNINFO
    if [ "$WORKER_ROLE" = 1 ]; then
        psql -X -q "$PG_ADMIN" -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'qw_bench_worker') THEN CREATE ROLE qw_bench_worker LOGIN IN ROLE queuer_worker; END IF; END \$\$" >>"$LOG" 2>&1 ||
            die "cannot create the worker role"
        worker_conninfo=${DB_CONNINFO/user=postgres/user=qw_bench_worker}
    fi
    for i in $(seq 1 "$k"); do
        # shellcheck disable=SC2086 # BENCH_WORKER_ENV is a list of VAR=VALUE words
        QW_DB_CONNINFO=$worker_conninfo qw_worker_start "$dir" "w$i" ${BENCH_WORKER_ENV:-}
        pids+=("$(cat "$dir/w$i.pid")")
        RUN_PIDS+=("${pids[-1]}")
    done
    activity_start "$dir/pg_activity.log"
    if [ "$wl" = W5 ]; then
        # the open-loop load, once the workers are up; it runs W5_SECONDS
        local mode=(--tick-ms "$W5_TICK_MS")
        [ "$W5_SINGLE" != 1 ] || mode=(--single)
        w5_load "$dir" "$s" "queuer.batches, queuer.service_ingest, queuer.service_id_claims" \
            "${mode[@]}"
        n=$(bench_kv load_batches "$LOAD_FIG")
    fi
    # (the predicate of the batches_open index: no sequential scan of its own)
    wait_all_final "$n" \
        "NOT EXISTS (SELECT 1 FROM queuer.batches WHERE status IS NULL OR status IN ('Pending', 'Unknown', 'Delayed'))" \
        "$(run_timeout_s "$n")"
    # W5: the load's own transactions are not the workers' (one per enqueue
    # call, three for its connection: start-up and two SETs), nor are the
    # ANALYZEs
    [ "$wl" != W5 ] || HARNESS_XACTS=$((HARNESS_XACTS + 2 * $(cat "$dir/analyze.count") +
        $(bench_kv load_calls "$LOAD_FIG") + 3))
    snap_after
    w7_after_drain "$dir"
    collect_procs "${pids[@]}"
    qw_workers_stop "$dir"
    RUN_PIDS=()
    db_settle
    # worker.summary sums: serialization_retries flushes outcomes cycles
    sums="0 0 0 0"
    for f in "$dir"/w*.log; do
        line=$(grep 'event=worker.summary' "$f" | tail -1 || true)
        [ -n "$line" ] || continue
        sums=$(awk -v s="$sums" -v r="$(bench_kv serialization_retries "$line")" \
            -v fl="$(bench_kv flushes "$line")" -v o="$(bench_kv outcomes "$line")" \
            -v c="$(bench_kv cycles "$line")" \
            'BEGIN { split(s, a, " "); print a[1] + r, a[2] + fl, a[3] + o, a[4] + c }')
    done
    qw_sim_stop
    [ "$wl" != W7 ] || w7_order_violations "$dir" "$tsv" >"$dir/order_violations"
    record "$name" "$wl" "$k" "$fsync" "$s" "$b" "$enq" "$sums" \
        "$(cat "$dir"/w*.log | grep -c 'level=warn\|level=error' || true)" "$(claims_figures "$dir")"
    ANALYZE_ARGS=()
    LOAD_FIG=""
    statements_dump "$dir/pg_statements.txt"
    drop_db
}

# graphile-worker's part of G1 and G5. Prepares run directory $1 and a
# database $2 with graphile-worker's schema; sets GW_URL.
gw_prepare() {
    rm -rf "$1"
    mkdir -p "$1"
    use_cluster on
    new_db "$2"
    GW_URL="postgres://postgres@/$DB?host=$PG_DIR/sock&port=5432"
    (cd "$GW_DIR" && GW_DATABASE_URL=$GW_URL node driver.mjs migrate) >>"$LOG" 2>&1 ||
        die "graphile-worker migration failed (see $LOG)"
}

# Starts the simulator and GW_PROCS graphile-worker processes for run
# directory $1 (their logs gw<i>.log there, their pids in GW_PIDS) and takes
# the before snapshot.
gw_start() {
    local dir=$1 i
    start_sim "$dir"
    RUN_LOAD1=$(cut -d' ' -f1 /proc/loadavg)
    snap_before
    GW_PIDS=()
    for i in $(seq 1 "$GW_PROCS"); do
        (cd "$GW_DIR" && exec env GW_DATABASE_URL="$GW_URL" GW_SIM_URL="$QW_SIM_URL" \
            GW_CONCURRENCY="$GW_CONCURRENCY" GW_LOCAL_QUEUE="$GW_LOCAL_QUEUE" \
            GW_COMPLETE_BATCH_MS="$GW_COMPLETE_BATCH_MS" node driver.mjs run) \
            >"$dir/gw$i.log" 2>&1 &
        GW_PIDS+=("$!")
        RUN_PIDS+=("$!")
    done
    activity_start "$dir/pg_activity.log"
}

# Waits until $4 jobs are done, stops graphile-worker and records run $2 of
# directory $1 ($3 services, batches per service $5, enqueue seconds $6);
# $7 commits of the harness's own to leave out of the count.
gw_finish() {
    local dir=$1 name=$2 s=$3 n=$4 b=$5 enq=$6 harness=$7
    wait_all_final "$n" "NOT EXISTS (SELECT 1 FROM graphile_worker._private_jobs)" \
        "$(run_timeout_s "$n")"
    HARNESS_XACTS=$((HARNESS_XACTS + harness))
    snap_after
    collect_procs "${GW_PIDS[@]}"
    qw_stop_pids 20 "${GW_PIDS[@]}"
    RUN_PIDS=()
    db_settle
    qw_sim_stop
    record "$name" "$name" "${GW_PROCS}x$GW_CONCURRENCY" on "$s" "$b" "$enq" "" \
        "$(cat "$dir"/gw*.log | grep -c 'level=warning\|level=error' || true)" ""
    ANALYZE_ARGS=()
    LOAD_FIG=""
    statements_dump "$dir/pg_statements.txt"
    drop_db
}

# W1 through graphile-worker.
run_graphile() {
    local s b dir=$WORK/G1 tsv t0 enq
    read -r s b <<<"$(workload_size G1)"
    gw_prepare "$dir" b_g1
    tsv=$(workload_tsv "$s" "$b")
    say "G1: $s services x $b batches through graphile-worker: $GW_PROCS process(es) x" \
        "$GW_CONCURRENCY jobs, localQueue $GW_LOCAL_QUEUE, completeJobBatchDelay $GW_COMPLETE_BATCH_MS"
    t0=$(date +%s.%N)
    # One job per batch in the queue named after its service, in file order:
    # run_at grows by 1 us per line, so each queue's jobs run in that order
    # whatever ids the insert assigns.
    psql -X -q -v ON_ERROR_STOP=1 "$DB_CONNINFO" >>"$LOG" 2>&1 <<SQL || die "adding graphile jobs failed"
CREATE TEMP TABLE load (seq bigserial, service_id text, batch_id text, payload_hex text);
\copy load (service_id, batch_id, payload_hex) FROM '$tsv'
SELECT count(*) FROM graphile_worker.add_jobs(
  (SELECT array_agg(ROW('submit_batch',
        json_build_object('service_id', service_id, 'batch_id', batch_id, 'payload_hex', payload_hex),
        service_id, now() - interval '1 hour' + seq * interval '1 microsecond',
        NULL, NULL, NULL, NULL)::graphile_worker.job_spec ORDER BY seq)
   FROM load));
SQL
    enq=$(elapsed_since "$t0")
    psql -X -q "$DB_CONNINFO" -c "VACUUM ANALYZE" -c "CHECKPOINT" >>"$LOG" 2>&1
    db_settle
    statements_reset
    gw_start "$dir"
    gw_finish "$dir" G1 "$s" $((s * b)) "$b" "$enq" 0
}

# W5's open loop through graphile-worker: bench-load --graphile adds one job
# per batch (graphile_worker.add_job() in the queue named after its
# service, each call its own transaction), with the same rate, services,
# duration and warm-up as W5, and the same ANALYZE of the tables the jobs
# go to while it runs.
run_graphile_open() {
    local s b dir=$WORK/G5 n
    read -r s b <<<"$(workload_size G5)"
    gw_prepare "$dir" b_g5
    say "G5: $W5_RATE batches/s over $s services for $W5_SECONDS s through graphile-worker:" \
        "$GW_PROCS process(es) x $GW_CONCURRENCY jobs, one add_job() per batch"
    psql -X -q "$DB_CONNINFO" -c "VACUUM ANALYZE" -c "CHECKPOINT" >>"$LOG" 2>&1
    db_settle
    statements_reset
    gw_start "$dir"
    w5_load "$dir" "$s" "graphile_worker._private_jobs, graphile_worker._private_job_queues" \
        --graphile
    n=$(bench_kv load_batches "$LOAD_FIG")
    # (the load's transactions and the ANALYZEs, as for W5)
    gw_finish "$dir" G5 "$s" "$n" "$b" - \
        $((2 * $(cat "$dir/analyze.count") + $(bench_kv load_calls "$LOAD_FIG") + 3))
}

# WN, WP, WF: several nodes, priority, fairness.
. "$ROOT/bench/scheduling.sh"

# ---- main -----------------------------------------------------------------------

MACHINE_BEFORE=$(bench_machine)
say "$MACHINE_BEFORE"
say "results in $OUT"
START_S=$(date +%s)
for wl in ${WORKLOADS//,/ }; do
    case $wl in
    W1 | W2 | W3)
        for k in $(workload_workers "$wl"); do run_queuer "$wl" "$k" on; done
        ;;
    W4)
        for k in $(workload_workers W4); do run_queuer W4 "$k" on --fault-429 0.2; done
        ;;
    W1F)
        for k in $(workload_workers W1F); do run_queuer W1F "$k" off; done
        ;;
    W5)
        for k in $(workload_workers W5); do run_queuer W5 "$k" on; done
        ;;
    W6)
        for k in $(workload_workers W6); do run_queuer W6 "$k" on; done
        ;;
    G1) run_graphile ;;
    G5) run_graphile_open ;;
    W7)
        for k in $(workload_workers W7); do
            RUN_NAME=W7-nocap-k$k run_queuer W7 "$k" on "${W7_SIM_ARGS[@]}"
            RUN_NAME=W7-cap-k$k run_queuer W7 "$k" on "${W7_SIM_ARGS[@]}"
        done
        ;;
    WN) run_nodes ;;
    WP)
        run_priority WP 10
        run_priority WP0 0
        ;;
    WF) run_fairness ;;
    esac
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report -----------------------------------------------------------------------

{
    echo "## queuer benchmark $(date -u +%Y-%m-%dT%H:%MZ)$([ "$QUICK" = 1 ] && echo " (--quick: reduced sizes, not comparable to the full table)")"
    echo
    echo "$MACHINE_BEFORE; after the runs: load average $LOAD_AFTER; took $(($(date +%s) - START_S)) s"
    echo "queuer binary sha256 $(sha256sum "$QUEUER_BIN" | cut -c1-12); sim commit delay ${SIM_DELAY_MS} ms; PostgreSQL fsync, synchronous_commit and full_page_writes on (W1F: off); workers log in as $([ "$WORKER_ROLE" = 1 ] && echo "a member of queuer_worker" || echo "the schema owner")${BENCH_WORKER_ENV:+; worker settings: $BENCH_WORKER_ENV}${BENCH_PG_CONF:+; PostgreSQL settings: $(echo "$BENCH_PG_CONF" | paste -sd';' -)}${BENCH_SETUP_SQL:+; after the migrations: $BENCH_SETUP_SQL}"
    echo
    echo "| run | services x batches | workers | batches/s | turnaround p50 / p99 ms | DB commits/batch | ledger requests/batch | worker RSS peak MB | CPU s/1k batches: workers / PostgreSQL / sim (total) |"
    echo "|---|---|---|---|---|---|---|---|---|"
    awk -F'\t' "$RESULTS_AWK"'NR > 1 {
        st = c("status") == "ok" ? "" : " (" c("status") ")"
        printf "| %s%s | %s x %s | %s | %s | %s / %s | %s | %s | %s | %s / %s / %s (%.3f) |\n",
            c("run"), st, c("services"), c("batches_per_service"), c("k"), c("batches_per_s"), c("p50_ms"), c("p99_ms"), c("commits_per_batch"), c("requests_per_batch"), c("rss_max_mb"), c("cpu_workers_per_1k"), c("cpu_pg_per_1k"), c("cpu_sim_per_1k"), c("cpu_workers_per_1k") + c("cpu_pg_per_1k") + c("cpu_sim_per_1k")
    }' "$RESULTS"
    echo
    echo "| run | batches | span s | POSTs (429) | GETs | turnaround max ms | rollbacks/batch | worker RSS MB each | serialization retries | outcome flushes | outcomes | cycles | worker warnings | enqueue s | load before |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    awk -F'\t' "$RESULTS_AWK"'NR > 1 {
        printf "| %s | %s | %s | %s (%s) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
            c("run"), c("batches"), c("span_s"), c("posts"), c("posts_429"), c("gets"), c("max_ms"), c("rollbacks_per_batch"), c("rss_list_mb"), c("ser_retries"), c("flushes"), c("outcomes"), c("cycles"), c("warnings"), c("enqueue_s"), c("load1")
    }' "$RESULTS"
    echo
    echo "Claim cycle (claims transaction and cycle percentiles: the worst worker's; sequential scans: pg_stat_user_tables during the run):"
    echo
    echo "| run | claims transactions | claims txn p50 / p99 ms | serialization failures per claims txn | cycle p99 ms | seq scans service_id_claims / batches | cycle.failed |"
    echo "|---|---|---|---|---|---|---|"
    awk -F'\t' "$RESULTS_AWK"'NR > 1 && c("workload") != "G1" && c("workload") != "G5" {
        printf "| %s | %s | %s / %s | %s | %s | %s / %s | %s |\n", c("run"), c("claims_txns"), c("claims_txn_p50_ms"), c("claims_txn_p99_ms"), c("claims_ser_failures_per_txn"), c("cycle_p99_ms"), c("seq_scans_claims"), c("seq_scans_batches"), c("cycle_failed")
    }' "$RESULTS"
    if awk -F'\t' "$RESULTS_AWK"'NR > 1 && (c("workload") == "W5" || c("workload") == "G5") { found = 1 } END { exit !found }' "$RESULTS"; then
        echo
        echo "W5, open loop (${W5_RATE} batches/s offered for ${W5_SECONDS} s; the first ${W5_WARMUP_S} s left out): the queuer's own overhead per batch (G5: graphile-worker's), from when a batch could go (its enqueue committed, or its predecessor final at the ledger) to its first POST"
        echo
        echo "| run | services | workers | offered / achieved batches/s | batches measured | overhead p50 / p99 / max ms | idle head of a service: n, p50 / p99 ms | next after a commit: n, p50 / p99 ms | refused (back pressure) | load generator late, max ms |"
        echo "|---|---|---|---|---|---|---|---|---|---|"
        awk -F'\t' -v rate="$W5_RATE" "$RESULTS_AWK"'NR > 1 && (c("workload") == "W5" || c("workload") == "G5") {
            st = c("status") == "ok" ? "" : " (" c("status") ")"
            printf "| %s%s | %s | %s | %s / %s | %s | %s / %s / %s | %s, %s / %s | %s, %s / %s | %s | %s |\n",
                c("run"), st, c("services"), c("k"), rate, c("load_rate"), c("w5_measured"), c("w5_p50_ms"), c("w5_p99_ms"), c("w5_max_ms"), c("w5_idle"), c("w5_idle_p50_ms"), c("w5_idle_p99_ms"), c("w5_next"), c("w5_next_p50_ms"), c("w5_next_p99_ms"), c("load_refused"), c("load_max_late_ms")
        }' "$RESULTS"
        echo
        echo "W5, what a batch costs besides its enqueue call ($W5_MODE; G5: one graphile_worker.add_job() call per batch): the load backend's CPU is the enqueue's; commits exclude the load's and the harness's"
        echo
        echo "| run | CPU ms/batch: workers + PostgreSQL besides the enqueue (+ sim) | enqueue calls' PostgreSQL CPU ms/batch | claims transactions per batch | commits per batch besides the enqueue's |"
        echo "|---|---|---|---|---|"
        awk -F'\t' "$RESULTS_AWK"'NR > 1 && (c("workload") == "W5" || c("workload") == "G5") {
            e = c("cpu_pg_enqueue_per_1k")
            besides = e == "-" ? "-" : sprintf("%.3f", c("cpu_workers_per_1k") + c("cpu_pg_per_1k") - e)
            ctx = c("batches") > 0 && c("claims_txns") != "-" ? sprintf("%.3f", c("claims_txns") / c("batches")) : "-"
            printf "| %s | %s (+ %s) | %s | %s | %s |\n", c("run"), besides, c("cpu_sim_per_1k"), e, ctx, c("commits_per_batch")
        }' "$RESULTS"
        awk -F'\t' -v mode="$W5_MODE" "$RESULTS_AWK"'NR > 1 && c("cpu_pg_enqueue_per_1k") != "-" {
            besides = c("cpu_workers_per_1k") + c("cpu_pg_per_1k") - c("cpu_pg_enqueue_per_1k")
            if (c("workload") == "W5" && q == "") { q = besides; qrun = c("run"); qp99 = c("w5_p99_ms") }
            if (c("workload") == "G5") { g = besides; gp99 = c("w5_p99_ms") }
        }
        END {
            if (q != "" && g != "" && q > 0)
                printf "\nW5, side by side: CPU ms per batch besides the enqueue calls, queuer (%s, %s) %.3f, graphile-worker (one add_job() per batch) %.3f: %.1fx; overhead p99 %s and %s ms\n",
                    qrun, mode, q, g, g / q, qp99, gp99
        }' "$RESULTS"
    fi
    awk -F'\t' -v procs="$GW_PROCS" -v conc="$GW_CONCURRENCY" -v lq="$GW_LOCAL_QUEUE" \
        -v cb="$GW_COMPLETE_BATCH_MS" "$RESULTS_AWK"'NR > 1 {
            if (c("run") == "W1-k4") q = c("batches_per_s")
            if (c("run") == "G1") g = c("batches_per_s")
        }
        END {
            if (q != "" && g != "" && g > 0)
                printf "\nW1, side by side: queuer (4 workers) %s batches/s, graphile-worker 0.18 (%s process x %s concurrent jobs, localQueue %s, completeJobBatchDelay %s) %s batches/s: ratio %.1fx\n",
                    q, procs, conc, lq, cb, g, q / g
        }' "$RESULTS"
    # The targets, each checked on the rows it is about.
    awk -F'\t' -v quick="$QUICK" "$RESULTS_AWK"'function verdict(ok) { return ok ? "met" : "MISSED" }
        NR > 1 {
            if (c("run") == "W1-k4") { w1 = c("batches_per_s"); p50 = c("p50_ms"); p99 = c("p99_ms") }
            if (c("run") == "G1") g = c("batches_per_s")
            if (c("run") == "W2-k1") rss10k = c("rss_max_mb")
            if (c("workload") != "G1" && c("workload") != "G5") {
                if (c("commits_per_batch") != "-" && (c("commits_per_batch") + 0 > cmax || cmax == "")) cmax = c("commits_per_batch") + 0
                if (c("rss_max_mb") + 0 > rssmax) rssmax = c("rss_max_mb") + 0
                if (c("workload") != "W4" && c("workload") != "W7") { nreq++; if (c("requests_per_batch") + 0 != 2) badreq = badreq " " c("run") "=" c("requests_per_batch") }
            }
        }
        END {
            print "\nTargets: drain rate, turnaround, commits, requests, memory" (quick ? ", indicative only: --quick sizes are not the workloads the targets name" : "") ":"
            if (w1 != "") printf "- W1 with 4 workers >= 8,000 batches/s: %s (%s)\n", w1, verdict(w1 >= 8000)
            if (w1 != "" && g > 0) printf "- >= 8x tuned graphile-worker in the same run: %.1fx (%s)\n", w1 / g, verdict(w1 / g >= 8)
            if (w1 != "") printf "- turnaround overhead p50 <= 5 ms, p99 <= 50 ms (W1, 4 workers): %s / %s ms (%s)\n", p50, p99, verdict(p50 <= 5 && p99 <= 50)
            if (cmax != "") printf "- <= 1 database commit per batch: worst run %.2f (%s)\n", cmax, verdict(cmax <= 1)
            if (nreq > 0) printf "- exactly 2 ledger requests per batch without faults: %s (%s)\n", badreq == "" ? "all runs 2.000" : "off in" badreq, verdict(badreq == "")
            if (rss10k != "") printf "- RSS <= 50 MB per worker with 10,000 claimed services (W2, 1 worker): %s MB (%s)\n", rss10k, verdict(rss10k <= 50)
            else if (rssmax > 0) printf "- RSS <= 50 MB per worker: largest %.1f MB (W2 with 1 worker, the 10,000-claim case, did not run)\n", rssmax
        }' "$RESULTS"
    awk -F'\t' -v quick="$QUICK" "$RESULTS_AWK"'function verdict(ok) { return ok ? "met" : "MISSED" }
        NR > 1 {
            if (c("run") == "W6-k8") { w8 = c("batches_per_s"); rss8 = c("rss_max_mb"); ser8 = c("claims_ser_failures_per_txn"); ctx8 = c("claims_txn_p99_ms"); fail8 = c("cycle_failed") }
            if (c("run") == "W6-k16") w16 = c("batches_per_s")
            if (c("run") == "W1-k1") w1k1 = c("batches_per_s")
            if (c("run") == "W1-k4") w1k4 = c("batches_per_s")
        }
        END {
            if (w8 == "" && w16 == "" && (w1k1 == "" || w1k4 == "")) exit
            print "\nTargets: claims at scale" (quick ? ", indicative only: --quick sizes are not the workloads the targets name" : "") ":"
            if (w8 != "") {
                printf "- W6, 8 workers, >= 6,000 batches/s: %s (%s)\n", w8, verdict(w8 >= 6000)
                printf "- claims-transaction serialization failures <= 1 per 100 claims transactions: %s (%s)\n", ser8, verdict(ser8 != "-" && ser8 <= 0.01)
                printf "- claims transaction p99 <= 200 ms: %s (%s)\n", ctx8, verdict(ctx8 != "-" && ctx8 <= 200)
                printf "- worker RSS <= 64 MB: %s MB (%s)\n", rss8, verdict(rss8 <= 64)
                printf "- no cycle.failed warnings: %s (%s)\n", fail8, verdict(fail8 == 0)
            }
            if (w8 != "" && w16 != "") printf "- W6 with 16 workers no worse than with 8: %s vs %s (%s)\n", w16, w8, verdict(w16 >= w8)
            if (w1k1 != "" && w1k4 != "") printf "- W1 with 4 workers >= W1 with 1 worker: %s vs %s (%s)\n", w1k4, w1k1, verdict(w1k4 >= w1k1)
        }' "$RESULTS"
    awk -F'\t' -v quick="$QUICK" "$RESULTS_AWK"'function verdict(ok) { return ok ? "met" : "MISSED" }
        NR > 1 {
            if (c("run") == "W1-k1") w1k1 = c("batches_per_s")
            if (c("run") == "W1-k2") w1k2 = c("batches_per_s")
            if (c("run") == "W1-k4") { w1 = c("batches_per_s"); cw = c("cpu_workers_per_1k"); cp = c("cpu_pg_per_1k"); cs = c("cpu_sim_per_1k") }
            if (c("workload") == "W5" && w5run == "") {
                w5p50 = c("w5_p50_ms"); w5p99 = c("w5_p99_ms"); w5run = c("run")
                w5e = c("cpu_pg_enqueue_per_1k"); w5cpu = c("cpu_workers_per_1k") + c("cpu_pg_per_1k") - w5e
                w5ctx = c("batches") > 0 && c("claims_txns") != "-" ? c("claims_txns") / c("batches") : "-"
                w5com = c("commits_per_batch")
            }
        }
        END {
            if (w1 == "" && w5run == "") exit
            print "\nTargets: scaling with workers, CPU per batch, open-loop overhead" (quick ? ", indicative only: --quick sizes are not the workloads the targets name" : "") ":"
            if (w1 != "") printf "- W1 with 4 workers no slower than 6,000 batches/s: %s (%s)\n", w1, verdict(w1 >= 6000)
            if (w1 != "" && w1k2 != "" && w1k1 != "") printf "- W1: 4 workers >= 2 workers >= 1 worker: %s / %s / %s (%s)\n", w1, w1k2, w1k1, verdict(w1 >= w1k2 && w1k2 >= w1k1)
            if (w1 != "") printf "- total CPU per batch <= 0.3 ms (W1, 4 workers): %.3f ms = workers %s + PostgreSQL %s + sim %s (%s)\n", cw + cp + cs, cw, cp, cs, verdict(cw + cp + cs <= 0.3)
            if (w5run != "") printf "- W5 queuer overhead p50 <= 5 ms, p99 <= 50 ms (%s): %s / %s ms (%s)\n", w5run, w5p50, w5p99, verdict(w5p50 != "-" && w5p50 <= 5 && w5p99 <= 50)
            if (w5run != "" && w5e != "-") printf "- W5 CPU of the workers and PostgreSQL besides the enqueue calls <= 0.6 ms per batch (%s): %.3f ms (%s)\n", w5run, w5cpu, verdict(w5cpu <= 0.6)
            if (w5run != "" && w5ctx != "-") printf "- W5 <= 0.05 claims transactions per batch (%s): %.3f (%s)\n", w5run, w5ctx, verdict(w5ctx <= 0.05)
            if (w5run != "" && w5com != "-") printf "- W5 <= 3 commits per batch besides the enqueue'"'"'s (%s): %s (%s)\n", w5run, w5com, verdict(w5com <= 3)
        }' "$RESULTS"
    w7_report
    scheduling_report
} >"$OUT/table.md"
cat "$OUT/table.md"
say "table: $OUT/table.md, raw figures: $RESULTS"
# A run that never drained fails the command (what a CI smoke run checks).
FAILED=$(awk -F'\t' "$RESULTS_AWK"'NR > 1 && c("status") != "ok" { printf "%s%s (%s)", sep, c("run"), c("status"); sep = ", " }' "$RESULTS")
[ -z "$FAILED" ] || die "not every batch became final in: $FAILED"
