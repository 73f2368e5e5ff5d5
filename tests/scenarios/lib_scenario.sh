# shellcheck shell=bash
# Shared helpers for the scenario scripts (tests/scenarios/*.sh), on top of
# the harness tests/lib/cluster.sh (processes, PostgreSQL, simulator,
# workloads): a private temporary directory, a trap that always stops what
# the script started, assertions that print expected vs actual, and SQL
# helpers that measure claim takeovers on the database clock. Source it
# from bash; it defines functions and a few variables only, then the script
# calls sc_begin.
#
#   sc_begin NAME                 temp dir SC_DIR, EXIT trap (cleanup + logs on failure)
#   sc_on_exit FUNC               the trap calls FUNC first (what the script started
#                                 itself), with SC_EXIT_RC set to the exit status
#   sc_pg_start                   private PostgreSQL, `queuer migrate`, helper schema
#   sc_sim_start [SIM-ARGS...]    scabbard-sim; sc_sim_pause / sc_sim_resume /
#                                 sc_sim_faults JSON; sc_sim_log_load (event log -> SQL)
#   sc_worker_start NAME [VAR=VALUE...]   `queuer run` as instance NAME with the
#                                 test-scale defaults of SC_WORKER_ENV (overridable)
#   sc_worker_wait_exit NAME SECS sets SC_RC (exit code, or "timeout")
#   sc_worker_stop NAME SECS      SIGTERM; it must exit 0 within SECS
#   sc_gen FILE SERVICES BATCHES [SEED [PREFIX]]   queuer-gen workload
#   sc_load_tsv FILE              enqueue a TSV workload (one transaction, back
#                                 pressure off)
#   sc_check WHAT EXPECTED ACTUAL, sc_check_sql WHAT EXPECTED SQL [EVIDENCE-SQL],
#   sc_check_num WHAT A OP B, sc_wait WHAT SECS SQL [EVIDENCE-SQL], sc_fail MSG
#   sc_watch_claims TAG WHERE     remember the claims matching WHERE (scenario.watch);
#                                 sc_watch_refresh TAG re-reads their expiries
#   sc_takeover_poll_start SECS / sc_takeover_poll_wait   poll (in the background)
#                                 until every watched claim has a new holder
#   sc_show_takeover KILL_AT      how long after the old expiries and KILL_AT the
#                                 watched claims were taken over
#
# Every wait is bounded; nothing here sleeps as a substitute for a condition.

# Variables set here are read by the sourcing scripts.
# shellcheck disable=SC2034

set -u -o pipefail

SC_SOURCE_ROOT=${QW_SOURCE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
SC_BUILD_ROOT=${QW_BUILD_ROOT:-$SC_SOURCE_ROOT/build}
: "${QUEUER_BIN:=$SC_BUILD_ROOT/queuer}"
: "${SCABBARD_SIM_BIN:=$SC_BUILD_ROOT/sim/scabbard-sim}"
: "${QUEUER_GEN_BIN:=$SC_BUILD_ROOT/tools/queuer-gen}"
export QUEUER_BIN SCABBARD_SIM_BIN QUEUER_GEN_BIN

# shellcheck source=tests/lib/cluster.sh
. "$SC_SOURCE_ROOT/tests/lib/cluster.sh"

# Test-scale worker settings; a scenario may override any of them per worker.
SC_LEASE_MS=1000
SC_HARD_MS=4000
SC_CYCLE_MS=200
SC_WORKER_ENV=()

SC_NAME=
SC_DIR=
SC_RC=
SC_POLLER_PID=
SC_T0=0
SC_ON_EXIT=()
SC_EXIT_RC=

sc_log() {
    printf '[%s %s] %s\n' "$SC_NAME" "$(date +%H:%M:%S.%3N)" "$*"
}

# The wall clock minus the monotonic one (/proc/uptime), in ms: it moves when
# the host pauses the machine or its clock is stepped, and stays put
# otherwise. The simulator stamps its events with the wall clock at its start
# plus monotonic time, so after such a jump its timestamps and the wall
# clock's (date, PostgreSQL's now()) disagree by the jump.
sc_clock_offset_ms() {
    local up
    read -r up _ </proc/uptime
    echo $(($(date +%s%3N) - 10 * 10#${up/./}))
}

# Beyond this many ms between the two clocks, the machine was paused or its
# clock stepped (sc_clock_jump_ms).
SC_CLOCK_JUMP_MS=1000

# sc_clock_jump_ms OFFSET: how far (ms, either way) the clocks moved apart
# since sc_clock_offset_ms printed OFFSET.
sc_clock_jump_ms() {
    local jump=$(($(sc_clock_offset_ms) - $1))
    echo "${jump#-}"
}

# ---- lifecycle --------------------------------------------------------------

sc_begin() {
    SC_NAME=$1
    SC_T0=$SECONDS
    SC_CLOCK0=$(sc_clock_offset_ms)
    for bin in "$QUEUER_BIN" "$SCABBARD_SIM_BIN" "$QUEUER_GEN_BIN"; do
        [ -x "$bin" ] || { echo "$SC_NAME: missing binary $bin (build first)" >&2; exit 1; }
    done
    SC_DIR=$(mktemp -d "${TMPDIR:-/tmp}/qw-$SC_NAME.XXXXXX") || exit 1
    # A POST must end before a claim can be taken over: request timeout <
    # hard expiry - lease (the worker refuses anything else).
    SC_WORKER_ENV=("QUEUER_WORKER_LEASE_MS=$SC_LEASE_MS" "QUEUER_WORKER_HARD_EXPIRY_MS=$SC_HARD_MS"
                   "QUEUER_WORKER_CYCLE_MS=$SC_CYCLE_MS" "QUEUER_LOG_LEVEL=${SC_LOG_LEVEL:-info}"
                   "QUEUER_DLT_REQUEST_TIMEOUT_MS=$((SC_HARD_MS - SC_LEASE_MS - 100))")
    trap sc_cleanup EXIT
    trap 'exit 130' INT TERM
    sc_log "directory $SC_DIR"
}

sc_on_exit() {
    SC_ON_EXIT+=("$1")
}

# Runs the sc_on_exit functions, stops every worker (resuming stopped ones
# first), the simulator and PostgreSQL; on failure prints the tail of every
# log and keeps SC_DIR. Errors here do not end the script early (set +e).
sc_cleanup() {
    local rc=$? f d logs=() fn jump
    trap - EXIT
    set +e
    SC_EXIT_RC=$rc
    jump=$(sc_clock_jump_ms "$SC_CLOCK0")
    [ "$jump" -le "$SC_CLOCK_JUMP_MS" ] ||
        echo "$SC_NAME: the wall clock moved $jump ms against the monotonic clock during this run" \
            "(the host paused the machine or stepped its clock): from then on the simulator's" \
            "timestamps and the wall clock's (date, PostgreSQL's now()) disagree by that much"
    for fn in "${SC_ON_EXIT[@]}"; do
        "$fn"
    done
    qw_stop_all fast
    if [ "$rc" != 0 ]; then
        for d in "${QW_WORKER_DIRS[@]}"; do
            [ "$d" = "$SC_DIR" ] || logs+=("$d"/*.log)
        done
        for f in "$SC_DIR"/*.log "${logs[@]}" "$SC_DIR"/sim/sim.out "$SC_DIR"/pg/postgres.log; do
            [ -s "$f" ] || continue
            echo "---- last lines of $f"
            tail -n 25 "$f"
        done
        echo "$SC_NAME: FAILED (exit $rc) after $((SECONDS - SC_T0)) s; files kept in $SC_DIR"
    else
        echo "$SC_NAME: passed in $((SECONDS - SC_T0)) s"
        [ -n "${QW_KEEP:-}" ] || rm -rf "$SC_DIR"
    fi
    exit "$rc"
}

# ---- assertions -------------------------------------------------------------

sc_fail() {
    echo "FAIL [$SC_NAME]: $*" >&2
    exit 1
}

# sc_check WHAT EXPECTED ACTUAL: string equality.
sc_check() {
    if [ "$2" = "$3" ]; then
        echo "ok: $1 ($3)"
        return 0
    fi
    echo "FAIL: $1" >&2
    echo "  expected: $2" >&2
    echo "  actual:   $3" >&2
    exit 1
}

# sc_check_num WHAT A OP B: numeric comparison (OP one of < <= > >= == !=),
# decimals allowed; a figure that is not a number (empty: nothing measured)
# fails.
sc_check_num() {
    local what=$1 a=$2 op=$3 b=$4
    if awk -v a="$a" -v b="$b" -v op="$op" 'BEGIN {
            num = "^-?[0-9]+([.][0-9]+)?$"
            if (a !~ num || b !~ num) r = 0
            else if (op == "<") r = a < b; else if (op == "<=") r = a <= b
            else if (op == ">") r = a > b; else if (op == ">=") r = a >= b
            else if (op == "==") r = a == b; else if (op == "!=") r = a != b
            else r = 0
            exit !r }' </dev/null; then
        echo "ok: $1 ($a $op $b)"
        return 0
    fi
    echo "FAIL: $what" >&2
    echo "  expected: $a $op $b" >&2
    echo "  actual:   $a vs $b" >&2
    exit 1
}

# sc_check_sql WHAT EXPECTED SQL [EVIDENCE-SQL]: SQL's single value must equal
# EXPECTED; on failure the evidence query (if any) is printed too.
sc_check_sql() {
    local what=$1 expected=$2 sql=$3 evidence=${4:-} actual
    actual=$(qw_sql "$sql" 2>&1)
    if [ "$actual" = "$expected" ]; then
        echo "ok: $what ($actual)"
        return 0
    fi
    echo "FAIL: $what" >&2
    echo "  expected: $expected" >&2
    echo "  actual:   $actual" >&2
    echo "  query:    $sql" >&2
    sc_evidence "$evidence"
    exit 1
}

# sc_wait WHAT SECS SQL [EVIDENCE-SQL]: polls until SQL returns 't'.
sc_wait() {
    local what=$1 secs=$2 sql=$3 evidence=${4:-}
    if qw_wait_sql "$secs" "$sql" 2>/dev/null; then
        return 0
    fi
    echo "FAIL: timed out after ${secs}s waiting for: $what" >&2
    echo "  query: $sql" >&2
    sc_evidence "$evidence"
    exit 1
}

# sc_evidence [SQL]: prints the result of SQL (if any) under "evidence:" on stderr.
sc_evidence() {
    [ -n "${1:-}" ] || return 0
    echo "  evidence:" >&2
    sc_show "$1" | sed 's/^/    /' >&2
}

# sc_wait_log NAME SECS PATTERN [COUNT]: waits until COUNT lines (1 unless
# given) of a worker's log match an extended regex.
sc_wait_log() {
    local name=$1 secs=$2 pattern=$3 count=${4:-1} _ n
    for _ in $(seq 1 $((secs * 20))); do
        n=$(grep -Ec -- "$pattern" "$SC_DIR/$name.log" 2>/dev/null)
        [ "${n:-0}" -ge "$count" ] && return 0
        sleep 0.05
    done
    sc_fail "timed out after ${secs}s waiting for $count lines /$pattern/ in $name.log"
}

# sc_helper_open NAME: a psql session (application_name NAME) that runs what
# the script writes to file descriptor 3, to hold a transaction's locks
# across steps. sc_helper_close NAME: closes it and waits for it to end.
sc_helper_open() {
    rm -f "$SC_DIR/$1.fifo"
    mkfifo "$SC_DIR/$1.fifo"
    PGAPPNAME=$1 psql -X -q -v ON_ERROR_STOP=1 "$QW_PG_CONNINFO" <"$SC_DIR/$1.fifo" \
        >"$SC_DIR/$1.out" 2>&1 &
    SC_HELPER_PID=$!
    exec 3>"$SC_DIR/$1.fifo"
}

sc_helper_close() {
    exec 3>&-
    wait "$SC_HELPER_PID" || {
        cat "$SC_DIR/$1.out" >&2
        sc_fail "the helper session $1 failed"
    }
}

# sc_show SQL: prints a query result as an aligned table (for humans).
sc_show() {
    psql -X -q -P pager=off "${QW_DB_CONNINFO:-$QW_PG_CONNINFO}" -c "$1" 2>&1
}

# ---- PostgreSQL -------------------------------------------------------------

# The `scenario` schema: observation tables and the takeover poller.
sc_install_helpers() {
    qw_psql >/dev/null <<'SQL'
SET client_min_messages = warning;
CREATE SCHEMA IF NOT EXISTS scenario;
-- Claims being watched: the holder and expiries before an event, then the
-- first different holder seen. seen_at is read after the observing
-- statement's snapshot (an upper bound of the takeover's commit);
-- last_unseen_at before the last snapshot that still saw the old holder
-- (a lower bound). taken_at is exact: the acquiring transaction's now(),
-- recovered from the new claim's own expiry_1 (set to now() + lease_ms on
-- acquire, never renewed: the holder's instance lease extends it).
CREATE TABLE IF NOT EXISTS scenario.watch (
    tag            text NOT NULL,
    service_id     text NOT NULL,
    old_claimant   text NOT NULL,
    old_epoch      bigint NOT NULL,
    old_expiry_1   timestamptz NOT NULL,
    old_expiry_2   timestamptz NOT NULL,
    new_claimant   text,
    new_epoch      bigint,
    new_expiry_1   timestamptz,
    last_unseen_at timestamptz,
    seen_at        timestamptz,
    PRIMARY KEY (tag, service_id)
);
CREATE OR REPLACE PROCEDURE scenario.await_takeover(p_timeout_ms integer)
LANGUAGE plpgsql AS $fn$
DECLARE
    deadline timestamptz := clock_timestamp() + p_timeout_ms * interval '1 millisecond';
    t        timestamptz;
    waiting  bigint;
BEGIN
    LOOP
        t := clock_timestamp();
        UPDATE scenario.watch w
           SET new_claimant = c.claimant, new_epoch = c.claim_epoch,
               new_expiry_1 = c.expiry_1, seen_at = clock_timestamp()
          FROM queuer.service_id_claims c
         WHERE w.seen_at IS NULL AND c.service_id = w.service_id
           AND c.claimant IS NOT NULL AND c.claimant <> w.old_claimant;
        UPDATE scenario.watch SET last_unseen_at = t WHERE seen_at IS NULL;
        COMMIT;
        SELECT count(*) INTO waiting FROM scenario.watch WHERE seen_at IS NULL;
        EXIT WHEN waiting = 0 OR clock_timestamp() > deadline;
        PERFORM pg_sleep(0.005);
    END LOOP;
END
$fn$;
-- The simulator's event log, one JSON object per row, in file order.
CREATE TABLE IF NOT EXISTS scenario.simlog_raw (n bigint, line text);
CREATE TABLE IF NOT EXISTS scenario.simlog (n bigint PRIMARY KEY, ev jsonb NOT NULL);
-- Each batch's position in its service (1 = oldest), the order the ledger
-- must see: (created_at, batch_id).
CREATE OR REPLACE VIEW scenario.batch_pos AS
    SELECT b.batch_id, b.service_id,
           row_number() OVER (PARTITION BY b.service_id ORDER BY b.created_at, b.batch_id) AS pos
      FROM queuer.batches b;
-- Every POST the ledger received, with the batch's position in its service.
CREATE OR REPLACE VIEW scenario.posts AS
    SELECT l.n, l.ev->>'service' AS sim_service, l.ev->>'batch' AS batch_id,
           l.ev->>'code' AS code, coalesce((l.ev->>'dup')::boolean, false) AS dup,
           p.service_id, p.pos
      FROM scenario.simlog l
      LEFT JOIN scenario.batch_pos p ON p.batch_id = l.ev->>'batch'
     WHERE l.ev->>'ev' = 'post';
-- POSTs that reached the ledger after a later batch of the same service had
-- already been posted: a violation of per-service order.
CREATE OR REPLACE VIEW scenario.order_violations AS
    SELECT * FROM (
        SELECT q.*, max(q.pos) OVER (PARTITION BY q.service_id ORDER BY q.n
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS later_seen
          FROM scenario.posts q WHERE q.service_id IS NOT NULL) x
     WHERE x.pos < x.later_seen;
SQL
}

sc_pg_start() {
    qw_pg_start "$SC_DIR/pg" || sc_fail "PostgreSQL did not start"
    export QUEUER_DATABASE_CONNINFO="$QW_PG_CONNINFO"
    qw_migrate "$SC_DIR/migrate.out" || sc_fail "queuer migrate failed"
    sc_install_helpers || sc_fail "cannot install the scenario helper schema"
}

# sc_db_now: the database clock as text (timestamptz).
sc_db_now() {
    qw_sql "SELECT clock_timestamp()"
}

# sc_backends_idle NAME: 't' when every session of worker NAME is outside a
# transaction (the worker's connections carry application_name=NAME).
sc_backends_idle() {
    qw_sql "SELECT count(*) = 0 FROM pg_stat_activity
             WHERE application_name = '$1' AND (state IS DISTINCT FROM 'idle' OR xact_start IS NOT NULL)"
}

# ---- simulator --------------------------------------------------------------

sc_sim_start() {
    qw_sim_start "$SC_DIR/sim" "$@" || sc_fail "scabbard-sim did not start"
}

sc_sim_post() {
    curl -fsS -m 5 -X POST -H 'Content-Type: application/json' --data "${2:-{\}}" \
        "$QW_SIM_URL$1" >/dev/null || sc_fail "simulator control POST $1 failed"
}

sc_sim_faults() { sc_sim_post /_sim/faults "$1"; }
sc_sim_pause() { sc_sim_post /_sim/pause; }
sc_sim_resume() { sc_sim_post /_sim/resume; }

# Loads the simulator's NDJSON event log into scenario.simlog (replacing it).
# Each line is numbered first (a table's physical order is not its insert
# order), then read raw (CSV with impossible quote and delimiter
# characters), so JSON escapes pass through untouched.
sc_sim_log_load() {
    awk '{ printf "%d\002%s\n", NR, $0 }' "$QW_SIM_LOG" >"$SC_DIR/simlog.numbered" ||
        sc_fail "cannot read the simulator event log"
    qw_psql >/dev/null <<SQL || sc_fail "cannot load the simulator event log"
TRUNCATE scenario.simlog_raw, scenario.simlog;
\copy scenario.simlog_raw (n, line) FROM '$SC_DIR/simlog.numbered' WITH (FORMAT csv, QUOTE E'\x01', DELIMITER E'\x02')
INSERT INTO scenario.simlog (n, ev) SELECT n, line::jsonb FROM scenario.simlog_raw WHERE line <> '';
SQL
}

# sc_post_rate CONDITION FROM TO: POSTs per second in the loaded simulator
# event log (sc_sim_log_load) between two database times, of the services
# whose id meets CONDITION (SQL after ev->>'service', e.g. "LIKE 'busyx%'").
sc_post_rate() {
    qw_sql "SELECT round(count(*) / extract(epoch FROM '$3'::timestamptz - '$2'::timestamptz), 1)
              FROM scenario.simlog
             WHERE ev->>'ev' = 'post' AND ev->>'service' $1
               AND (ev->>'t')::bigint BETWEEN
                   (extract(epoch FROM '$2'::timestamptz) * 1000000)::bigint
                   AND (extract(epoch FROM '$3'::timestamptz) * 1000000)::bigint"
}

# sc_check_order: loads the event log and checks that, for every service,
# the ledger saw POSTs in creation order (a batch is never posted after a
# later batch of its service was) and that every POST names a known batch.
sc_check_order() {
    sc_sim_log_load
    sc_check_sql "the simulator event log was loaded in its order" 0 \
        "SELECT count(*) FROM (SELECT (ev->>'t')::bigint - lag((ev->>'t')::bigint) OVER (ORDER BY n) AS d
                                 FROM scenario.simlog) x WHERE d < 0"
    sc_check_sql "every POST in the simulator log names an enqueued batch of that service" 0 \
        "SELECT count(*) FROM scenario.posts WHERE service_id IS DISTINCT FROM sim_service" \
        "SELECT n, sim_service, service_id, left(batch_id, 16) AS batch, code FROM scenario.posts
          WHERE service_id IS DISTINCT FROM sim_service LIMIT 10"
    sc_check_sql "POSTs per service reach the ledger in creation order" 0 \
        "SELECT count(*) FROM scenario.order_violations" \
        "SELECT n, service_id, pos, later_seen, code FROM scenario.order_violations LIMIT 10"
    echo "   ($(qw_sql "SELECT count(*) FROM scenario.posts") POSTs checked over \
$(qw_sql "SELECT count(DISTINCT service_id) FROM scenario.posts") services)"
}

# ---- workers ----------------------------------------------------------------

# sc_worker_start NAME [VAR=VALUE...]: each worker's sessions are named
# after it (application_name) so the scripts can see its transactions.
sc_worker_start() {
    local name=$1
    shift
    qw_worker_start "$SC_DIR" "$name" \
        QUEUER_DATABASE_CONNINFO="$QW_PG_CONNINFO application_name=$name" \
        "${SC_WORKER_ENV[@]}" "$@"
}

# sc_worker_signal NAME SIG
sc_worker_signal() {
    qw_worker_signal "$SC_DIR" "$1" "$2"
}

# sc_worker_kill NAME: SIGKILL, then waits for the exit (SC_RC), without
# bash's "Killed" job notice.
sc_worker_kill() {
    {
        sc_worker_signal "$1" KILL
        sc_worker_wait_exit "$1" 10
    } 2>/dev/null
}

sc_worker_pid() {
    qw_worker_pid "$SC_DIR" "$1"
}

sc_worker_alive() {
    kill -0 "$(sc_worker_pid "$1")" 2>/dev/null
}

# sc_wait_registered SECS NAME...: each worker has registered and is live.
sc_wait_registered() {
    local secs=$1 name
    shift
    for name in "$@"; do
        sc_wait "worker $name registered" "$secs" \
            "SELECT EXISTS (SELECT 1 FROM queuer.instances WHERE instance_id = '$name'
                              AND stopped_at IS NULL AND heartbeat_at > now() - interval '1 second')"
    done
}

# sc_worker_stop NAME SECS: SIGTERM; the worker must exit 0 within SECS.
sc_worker_stop() {
    sc_worker_signal "$1" TERM
    sc_worker_wait_exit "$1" "$2"
    sc_check "$1 exits 0 after SIGTERM" 0 "$SC_RC"
}

# sc_worker_wait_exit NAME SECS: waits for the worker to exit; sets SC_RC to
# its exit code or to "timeout". (Runs in this shell: `wait` only works for
# our own children, so this must not be called inside $(...).)
sc_worker_wait_exit() {
    qw_wait_exit "$(sc_worker_pid "$1")" "$2"
    SC_RC=$QW_RC
}

# ---- workloads --------------------------------------------------------------

# Worker settings whose periodic claims cycle is 20 s away (lease and hard
# expiry to match): what such a worker does within a few seconds, a wake-up
# or a returning job made it do: sc_worker_start NAME "${SC_SLOW_CYCLE[@]}".
# shellcheck disable=SC2034 # read by the scenarios
SC_SLOW_CYCLE=(QUEUER_WORKER_CYCLE_MS=20000 QUEUER_WORKER_LEASE_MS=60000
    QUEUER_WORKER_HARD_EXPIRY_MS=120000)

# sc_gen FILE SERVICES BATCHES [SEED [CIRCUIT-PREFIX]]
sc_gen() {
    qw_gen "$@" || sc_fail "queuer-gen failed"
}

# sc_load_tsv FILE: enqueues every line in one transaction (back pressure
# off), so workers see the whole workload at once.
sc_load_tsv() {
    qw_load_tsv "$1" >"$SC_DIR/enqueue.out" 2>&1 || {
        cat "$SC_DIR/enqueue.out" >&2
        sc_fail "queuer enqueue --tsv $1 failed"
    }
}

# sc_app_txn_start LINE SECONDS: an application session (application_name
# app_txn) that enqueues the batch of TSV line LINE (service, batch id,
# payload hex) with queuer.enqueue_batch(), back pressure off, then keeps
# its transaction open for SECONDS; returns once it is open, with the
# session's process in SC_APP_PID (sc_app_txn_end waits for its commit).
sc_app_txn_start() {
    local service batch payload
    IFS=$'\t' read -r service batch payload _ <<<"$1"
    PGAPPNAME=app_txn psql -X -q -v ON_ERROR_STOP=1 "$QW_PG_CONNINFO" >"$SC_DIR/app.out" 2>&1 <<SQL &
SET queuer.ingest_high = 0;
BEGIN;
SELECT queuer.enqueue_batch('$service', '$batch', decode('$payload', 'hex'));
SELECT pg_sleep($2);
COMMIT;
SQL
    SC_APP_PID=$!
    sc_wait "the application's enqueue is done and its transaction open" 10 \
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'app_txn'
                          AND query LIKE '%pg_sleep%' AND state = 'active')"
}

# sc_app_txn_end: waits for the session of sc_app_txn_start to commit.
sc_app_txn_end() {
    wait "$SC_APP_PID" || {
        cat "$SC_DIR/app.out" >&2
        sc_fail "the application's transaction failed"
    }
}

# sc_services_sql FILE: the distinct service ids of a TSV workload as a SQL
# list ('a','b',...), for IN (...).
sc_services_sql() {
    cut -f1 "$1" | sort -u | sed "s/.*/'&'/" | paste -sd, -
}

# ---- claims -----------------------------------------------------------------

# sc_watch_claims TAG WHERE: remembers the current holder, epoch and expiries
# of the claims matching WHERE (on the view queuer.claims c, whose expiries
# are the effective ones: the claim's own or its holder's lease, whichever
# is later); prints how many.
sc_watch_claims() {
    qw_sql "WITH ins AS (
              INSERT INTO scenario.watch (tag, service_id, old_claimant, old_epoch, old_expiry_1, old_expiry_2)
              SELECT '$1', c.service_id, c.claimant, c.claim_epoch, c.expiry_1, c.expiry_2
                FROM queuer.claims c WHERE c.claimant IS NOT NULL AND ($2)
              RETURNING 1)
            SELECT count(*) FROM ins"
}

# sc_watch_refresh TAG: re-reads the epoch and expiries of TAG's claims that
# still have their old holder (after a wait, just before the event).
sc_watch_refresh() {
    qw_sql "UPDATE scenario.watch w
               SET old_epoch = c.claim_epoch, old_expiry_1 = c.expiry_1, old_expiry_2 = c.expiry_2
              FROM queuer.claims c
             WHERE w.tag = '$1' AND w.seen_at IS NULL AND c.service_id = w.service_id
               AND c.claimant = w.old_claimant" >/dev/null
}

# sc_takeover_poll_start SECS: starts the takeover poller in the background
# and returns once it is polling, or has already finished (every watched
# claim had a new holder at its first look: a fast takeover). It stops when
# every watched claim has a new holder, or after SECS. taken_at does not
# depend on it (see scenario.watch); seen_at and last_unseen_at do.
sc_takeover_poll_start() {
    qw_psql -c "CALL scenario.await_takeover($(($1 * 1000)))" >"$SC_DIR/poller.out" 2>&1 &
    SC_POLLER_PID=$!
    local _
    for _ in $(seq 1 200); do
        kill -0 "$SC_POLLER_PID" 2>/dev/null || return 0
        [ "$(qw_sql "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                                     WHERE query LIKE 'CALL scenario.await_takeover%'
                                       AND pid <> pg_backend_pid())")" = t ] && return 0
        sleep 0.05
    done
    sc_fail "timed out after 10s waiting for: the takeover poller runs"
}

# sc_takeover_poll_wait [EVIDENCE-SQL]: waits for the poller, then fails
# (with the claims still waiting, and the evidence query's result) unless
# every watched claim was taken over.
sc_takeover_poll_wait() {
    wait "$SC_POLLER_PID" || {
        cat "$SC_DIR/poller.out" >&2
        sc_fail "the takeover poller failed"
    }
    if [ -n "${1:-}" ] && [ "$(qw_sql "SELECT count(*) FROM scenario.watch WHERE seen_at IS NULL")" != 0 ]; then
        echo "evidence:" >&2
        sc_show "$1" | sed 's/^/    /' >&2
    fi
    sc_check_sql "every watched claim was taken over" 0 \
        "SELECT count(*) FROM scenario.watch WHERE seen_at IS NULL" \
        "SELECT w.tag, w.service_id, w.old_claimant, c.claimant, c.claim_epoch, c.expiry_1, c.expiry_2, now()
           FROM scenario.watch w JOIN queuer.service_id_claims c USING (service_id)
          WHERE w.seen_at IS NULL LIMIT 10"
    # taken_at comes from the new expiry_1; it is exact only if the claim was
    # not renewed before we saw it (renewal waits for half a lease).
    sc_check_sql "takeovers were seen before any renewal (taken_at is exact)" 0 \
        "SELECT count(*) FROM scenario.watch w
          WHERE w.seen_at - (w.new_expiry_1 - $SC_LEASE_MS * interval '1 millisecond')
                >= ($SC_LEASE_MS / 2) * interval '1 millisecond'" \
        "SELECT tag, service_id, new_expiry_1 - $SC_LEASE_MS * interval '1 millisecond' AS taken_at,
                last_unseen_at, seen_at FROM scenario.watch LIMIT 10"
}

# sc_await_takeover SECS: sc_takeover_poll_start and sc_takeover_poll_wait.
sc_await_takeover() {
    sc_takeover_poll_start "$1"
    sc_takeover_poll_wait ""
}

# sc_taken_at: SQL for the exact takeover time of a watched claim (over
# scenario.watch w): the acquiring transaction's now().
sc_taken_at() {
    echo "(w.new_expiry_1 - $SC_LEASE_MS * interval '1 millisecond')"
}

# sc_ms EXPR: SQL for an interval in milliseconds, rounded.
sc_ms() {
    echo "round(extract(epoch FROM ($1)) * 1000)::bigint"
}

# sc_show_takeover KILL_AT: per tag of the watched claims, how long after
# their old expiry_1 and expiry_2 and after KILL_AT (a timestamptz) they
# were taken over, and when the poller saw it at the latest (ms).
sc_show_takeover() {
    local taken
    taken=$(sc_taken_at)
    sc_show "SELECT w.tag, count(*) AS services,
                    min($(sc_ms "$taken - w.old_expiry_1")) AS min_after_expiry_1_ms,
                    max($(sc_ms "$taken - w.old_expiry_1")) AS max_after_expiry_1_ms,
                    min($(sc_ms "$taken - w.old_expiry_2")) AS min_after_expiry_2_ms,
                    max($(sc_ms "$taken - w.old_expiry_2")) AS max_after_expiry_2_ms,
                    min($(sc_ms "$taken - '$1'::timestamptz")) AS min_after_kill_ms,
                    max($(sc_ms "$taken - '$1'::timestamptz")) AS max_after_kill_ms,
                    max($(sc_ms "w.seen_at - '$1'::timestamptz")) AS max_seen_after_kill_ms
               FROM scenario.watch w GROUP BY 1 ORDER BY 1"
}

# sc_wait_all_final SECS: waits until every batch has a final status.
sc_wait_all_final() {
    sc_wait "every batch final" "$1" "$QW_ALL_FINAL_SQL" \
        "SELECT coalesce(status, CASE WHEN submitted THEN '(submitting)' ELSE '(new)' END) AS state,
                count(*) FROM queuer.batches GROUP BY 1 ORDER BY 1"
}
