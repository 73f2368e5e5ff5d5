# Shared by the e2e_* scenario tests (sourced, not a test itself): a private
# PostgreSQL, scabbard-sim and workers in a temporary directory, a generated
# workload, waiting for it to drain, and qw-check over the ledger's event log.
# The directory is removed after a passing run and kept (path printed) after
# a failing one. Needs QUEUER_BIN, SCABBARD_SIM_BIN, QUEUER_GEN_BIN,
# QW_SOURCE_ROOT and QW_BUILD_ROOT (set by meson test); QW_CHECK_BIN defaults
# to the build's tools/qw-check.
set -euo pipefail

for v in QUEUER_BIN SCABBARD_SIM_BIN QUEUER_GEN_BIN QW_SOURCE_ROOT QW_BUILD_ROOT; do
    if [ -z "${!v:-}" ]; then
        echo "$v is not set: run this through 'meson test'" >&2
        exit 1
    fi
done
QW_CHECK_BIN=${QW_CHECK_BIN:-$QW_BUILD_ROOT/tools/qw-check}
export QUEUER_BIN SCABBARD_SIM_BIN

# shellcheck source=tests/lib/cluster.sh
. "$QW_SOURCE_ROOT/tests/lib/cluster.sh"
# qwc_load_tsv: the one place that knows how a TSV workload gets loaded.
# shellcheck source=scripts/cluster.sh
. "$QW_SOURCE_ROOT/scripts/cluster.sh"

# Test-scale worker settings: short leases, a fast cycle and quick retries.
E2E_WORKER_SETTINGS=(QUEUER_WORKER_LEASE_MS=2000 QUEUER_WORKER_HARD_EXPIRY_MS=6000
                     QUEUER_WORKER_CYCLE_MS=200 QUEUER_DLT_RETRY_BASE_MS=50
                     QUEUER_DLT_RETRY_MAX_MS=1000 QUEUER_DLT_PAUSE_BASE_MS=50
                     QUEUER_DLT_PAUSE_MAX_MS=500 QUEUER_DLT_REQUEST_TIMEOUT_MS=3000
                     QUEUER_DLT_STATUS_WAIT_S=2 QUEUER_LOG_LEVEL=info)
FINAL_SQL="SELECT count(*) = 0 FROM queuer.batches
            WHERE status IS NULL OR status NOT IN ('Committed', 'Valid', 'Invalid')"

E2E_NAME=$(basename "$0" .sh)
E2E_DIR=$(mktemp -d "${TMPDIR:-/tmp}/qw-$E2E_NAME.XXXXXX")
E2E_START_US=${EPOCHREALTIME/./}
declare -A FIG=()

e2e_cleanup() {
    local rc=$?
    qw_workers_stop "$E2E_DIR/workers" 2>/dev/null || true
    qw_sim_stop 2>/dev/null || true
    qw_pg_stop 2>/dev/null || true
    if [ "$rc" = 0 ]; then
        rm -rf "$E2E_DIR"
    else
        echo "$E2E_NAME: FAILED (exit $rc); logs kept in $E2E_DIR" >&2
        local f
        for f in "$E2E_DIR"/workers/*.log; do
            [ -f "$f" ] || continue
            echo "--- last lines of $f" >&2
            tail -n 15 "$f" >&2
        done
    fi
    exit "$rc"
}
trap e2e_cleanup EXIT

e2e_fail() {
    echo "$E2E_NAME: FAIL: $*" >&2
    exit 1
}

e2e_log() {
    printf '%s: [%5ss] %s\n' "$E2E_NAME" \
        "$(awk -v us=$((${EPOCHREALTIME/./} - E2E_START_US)) 'BEGIN { printf "%.1f", us / 1e6 }')" "$*"
}

# Asserts "$1 $2 $3" with integers, e.g. e2e_assert "${FIG[posts]}" -eq 500 "POSTs = batches".
e2e_assert() {
    local a=$1 op=$2 b=$3
    shift 3
    test "$a" "$op" "$b" || e2e_fail "$* (got $a, expected $op $b)"
}

# Starts a migrated PostgreSQL in the test directory.
e2e_db() {
    qw_pg_start "$E2E_DIR/pg"
    QUEUER_DATABASE_CONNINFO=$QW_PG_CONNINFO
    export QUEUER_DATABASE_CONNINFO
    "$QUEUER_BIN" migrate >"$E2E_DIR/migrate.log" 2>&1 || {
        cat "$E2E_DIR/migrate.log" >&2
        e2e_fail "queuer migrate failed"
    }
}

# e2e_workload SERVICES BATCHES: generates and enqueues SERVICES x BATCHES.
e2e_workload() {
    "$QUEUER_GEN_BIN" --services "$1" --batches "$2" --seed 7 >"$E2E_DIR/workload.tsv"
    qwc_load_tsv "$E2E_DIR/workload.tsv" >"$E2E_DIR/load.log" 2>&1 || {
        cat "$E2E_DIR/load.log" >&2
        e2e_fail "loading the workload failed"
    }
    local n
    n=$(qw_sql "SELECT count(*) FROM queuer.batches")
    e2e_assert "$n" -eq $(($1 * $2)) "batches enqueued"
}

# e2e_worker NAME [VAR=VALUE...]: a worker with the test-scale settings.
e2e_worker() {
    local name=$1
    shift
    qw_worker_start "$E2E_DIR/workers" "$name" "${E2E_WORKER_SETTINGS[@]}" "$@"
}

# e2e_drain SECS: waits until every batch is final; on timeout shows where they are.
e2e_drain() {
    if ! qw_wait_sql "$1" "$FINAL_SQL"; then
        qw_sql "SELECT coalesce(status, CASE WHEN submitted THEN 'submitting' ELSE 'waiting' END),
                       count(*) FROM queuer.batches GROUP BY 1" >&2 || true
        e2e_fail "not every batch became final within $1 s"
    fi
}

# Stops workers and simulator, then runs qw-check; its figures land in FIG[].
# Fails the test when qw-check reports a violation or cannot run, or when a
# worker's log holds a sanitizer report (the ASan and TSan runs).
e2e_check() {
    qw_workers_stop "$E2E_DIR/workers"
    qw_sim_stop
    if grep -lE 'WARNING: ThreadSanitizer|ERROR: AddressSanitizer|runtime error:' \
        "$E2E_DIR"/workers/*.log 2>/dev/null; then
        e2e_fail "sanitizer report in the worker log(s) above"
    fi
    local rc=0
    "$QW_CHECK_BIN" --events "$QW_SIM_LOG" --kv "$E2E_DIR/check.kv" || rc=$?
    [ -f "$E2E_DIR/check.kv" ] || e2e_fail "qw-check produced no figures (exit $rc)"
    local k v
    while IFS='=' read -r k v; do
        FIG[$k]=$v
    done <"$E2E_DIR/check.kv"
    [ "$rc" = 0 ] || e2e_fail "qw-check found ${FIG[violations]:-?} invariant violation(s)"
}

# Committed batches per worker instance, "w1=170 w2=160 ...".
e2e_per_worker() {
    qw_sql "SELECT string_agg(instance_id || '=' || n, ' ' ORDER BY instance_id)
              FROM (SELECT instance_id, count(*) AS n FROM queuer.batch_history
                     WHERE to_status = 'Committed' GROUP BY 1) x"
}
