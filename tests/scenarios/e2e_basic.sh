#!/usr/bin/env bash
# End to end without faults: 3 workers drain 50 services x 10 batches through
# scabbard-sim. Every batch ends Committed, qw-check finds no violation of
# I1-I4, every batch is POSTed exactly once (attempts = 1, nothing Delayed or
# Unknown, no 429), and the ledger requests per batch (POSTs + status GETs)
# are reported.
. "$(dirname "$0")/e2e_common.sh"

SERVICES=50
BATCHES=10
TOTAL=$((SERVICES * BATCHES))

e2e_db
e2e_workload "$SERVICES" "$BATCHES"
qw_sim_start "$E2E_DIR/sim" --commit-delay-ms 20
e2e_log "sim at $QW_SIM_URL; starting 3 workers"
e2e_drain_three "$TOTAL" 45

e2e_assert "${FIG[posts]}" -eq "$TOTAL" "exactly one POST per batch"
e2e_assert "${FIG[posts_202]}" -eq "$TOTAL" "every POST accepted"
e2e_assert "${FIG[posts_429]}" -eq 0 "no 429 without faults"
e2e_assert "${FIG[duplicate_posts]}" -eq 0 "no duplicate without faults"
e2e_assert "${FIG[gets]}" -ge "$TOTAL" "at least one status request per batch"
e2e_assert "${FIG[submitting_rows]}" -ge "$TOTAL" "a Submitting row for every batch"
attempts=$(qw_sql "SELECT count(*) FROM queuer.batches WHERE attempts <> 1")
e2e_assert "$attempts" -eq 0 "batches with attempts <> 1"
detours=$(qw_sql "SELECT count(*) FROM queuer.batch_history WHERE to_status IN ('Delayed', 'Unknown')")
e2e_assert "$detours" -eq 0 "Delayed/Unknown transitions without faults"
workers_used=$(qw_sql "SELECT count(DISTINCT instance_id) FROM queuer.batch_history WHERE to_status = 'Committed'")

requests=$((FIG[posts] + FIG[gets]))
per_batch=$(awk -v r="$requests" -v n="$TOTAL" 'BEGIN { printf "%.2f", r / n }')
e2e_log "batches=$TOTAL posts=${FIG[posts]} gets=${FIG[gets]} ledger_requests_per_batch=$per_batch"
e2e_log "committed per worker: $PER_WORKER (workers that committed: $workers_used of 3)"
e2e_log "PASS"
