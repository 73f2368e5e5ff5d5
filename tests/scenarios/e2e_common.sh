# shellcheck shell=bash
# Shared by the e2e_* scenario tests (sourced, not a test itself), on top of
# lib_scenario.sh: a private PostgreSQL, scabbard-sim and workers in the
# test's directory (workers in E2E_DIR/workers), a generated workload,
# waiting for it to drain, and qw-check over the ledger's event log. The
# directory is removed after a passing run and kept (path printed) after a
# failing one. Needs QUEUER_BIN, SCABBARD_SIM_BIN, QUEUER_GEN_BIN,
# QW_SOURCE_ROOT and QW_BUILD_ROOT (set by meson test); QW_CHECK_BIN
# defaults to the build's tools/qw-check.
for v in QUEUER_BIN SCABBARD_SIM_BIN QUEUER_GEN_BIN QW_SOURCE_ROOT QW_BUILD_ROOT; do
    if [ -z "${!v:-}" ]; then
        echo "$v is not set: run this through 'meson test'" >&2
        exit 1
    fi
done
QW_CHECK_BIN=${QW_CHECK_BIN:-$QW_BUILD_ROOT/tools/qw-check}

# shellcheck source=tests/scenarios/lib_scenario.sh
# shellcheck disable=SC2153 # QW_SOURCE_ROOT comes from the environment (meson test)
. "$QW_SOURCE_ROOT/tests/scenarios/lib_scenario.sh"
set -e

# Test-scale worker settings: short leases, a fast cycle and quick retries.
E2E_WORKER_SETTINGS=(QUEUER_WORKER_LEASE_MS=2000 QUEUER_WORKER_HARD_EXPIRY_MS=6000
                     QUEUER_WORKER_CYCLE_MS=200 QUEUER_DLT_RETRY_BASE_MS=50
                     QUEUER_DLT_RETRY_MAX_MS=1000 QUEUER_DLT_PAUSE_BASE_MS=50
                     QUEUER_DLT_PAUSE_MAX_MS=500 QUEUER_DLT_REQUEST_TIMEOUT_MS=3000
                     QUEUER_DLT_STATUS_WAIT_S=2 QUEUER_LOG_LEVEL=info)

sc_begin "$(basename "$0" .sh)"
E2E_DIR=$SC_DIR
declare -A FIG=()

e2e_fail() { sc_fail "$@"; }
e2e_log() { sc_log "$@"; }

# Asserts "$1 $2 $3" with integers, e.g. e2e_assert "${FIG[posts]}" -eq 500 "POSTs = batches".
e2e_assert() {
    local a=$1 op=$2 b=$3
    shift 3
    test "$a" "$op" "$b" || e2e_fail "$* (got $a, expected $op $b)"
}

# Starts a migrated PostgreSQL in the test directory.
e2e_db() { sc_pg_start; }

# e2e_workload SERVICES BATCHES: generates and enqueues SERVICES x BATCHES.
e2e_workload() {
    sc_gen "$E2E_DIR/workload.tsv" "$1" "$2" 7
    sc_load_tsv "$E2E_DIR/workload.tsv"
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
e2e_drain() { sc_wait_all_final "$1"; }

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

# e2e_drain_three TOTAL SECS: workers w1, w2 and w3 drain the workload of
# TOTAL batches within SECS, then e2e_check; every batch must end Committed
# and qw-check must have seen each one. Sets PER_WORKER (e2e_per_worker).
e2e_drain_three() {
    local w committed
    for w in w1 w2 w3; do
        e2e_worker "$w"
    done
    e2e_drain "$2"
    e2e_log "drained: $(qw_sql "SELECT string_agg(status || '=' || n, ' ')
                                  FROM (SELECT status, count(*) AS n FROM queuer.batches GROUP BY 1) x")"
    # shellcheck disable=SC2034 # read by the scripts
    PER_WORKER=$(e2e_per_worker)
    e2e_check
    committed=$(qw_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'")
    e2e_assert "$committed" -eq "$1" "every batch Committed"
    e2e_assert "${FIG[batches]}" -eq "$1" "qw-check saw every batch"
}

# How many priority-0 batches were Committed when the last priority-10 one
# was (commit times from the history).
e2e_low_done_when_high_done() {
    qw_sql "WITH fin AS (
                SELECT b.priority, h.at FROM queuer.batch_history h
                  JOIN queuer.batches b USING (batch_id) WHERE h.to_status = 'Committed')
            SELECT count(*) FROM fin
             WHERE priority = 0 AND at <= (SELECT max(at) FROM fin WHERE priority = 10)"
}

# Committed batches per worker instance, "w1=170 w2=160 ...".
e2e_per_worker() {
    qw_sql "SELECT string_agg(instance_id || '=' || n, ' ' ORDER BY instance_id)
              FROM (SELECT instance_id, count(*) AS n FROM queuer.batch_history
                     WHERE to_status = 'Committed' GROUP BY 1) x"
}
