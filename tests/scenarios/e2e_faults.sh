#!/usr/bin/env bash
# End to end with ledger faults: 3 workers drain 50 services x 10 batches while
# scabbard-sim answers 429 in bursts (the last 150 ms of every 400 ms, so every run meets several) and
# fails 5% of requests at random (2.5% 5xx, 2.5% dropped connections, half of
# the dropped POSTs after the ledger took the batch). Every batch still ends
# Committed and qw-check finds no violation of I1-I4: order kept, one batch
# per service pending at the ledger, and every duplicate POST has a recorded
# reason. Prints the 429s seen, retries and duplicates. The fault seed is
# printed; E2E_SEED=N replays a run.
. "$(dirname "$0")/e2e_common.sh"

SERVICES=50
BATCHES=10
TOTAL=$((SERVICES * BATCHES))
SEED=${E2E_SEED:-$(( (RANDOM << 15) | RANDOM ))}

e2e_db
e2e_workload "$SERVICES" "$BATCHES"
qw_sim_start "$E2E_DIR/sim" --commit-delay-ms 20 --seed "$SEED" \
    --fault-429-burst 400:150 --fault-5xx 0.025 --fault-drop 0.025
e2e_log "fault seed $SEED (replay: E2E_SEED=$SEED); sim at $QW_SIM_URL; starting 3 workers"
e2e_drain_three "$TOTAL" 50

# The faults really happened (otherwise this test proves nothing).
e2e_assert "${FIG[posts_429]}" -gt 0 "429s seen (bursts)"
e2e_assert "${FIG[posts_other]}" -gt 0 "5xx / dropped POSTs seen"
e2e_assert "${FIG[posts]}" -gt "$TOTAL" "POSTs beyond one per batch (retries)"
# Every POST after the first has a reason (qw-check I4 checks it per batch; here in total).
e2e_assert "${FIG[resubmit_reasons]}" -ge $((FIG[posts] - TOTAL)) "resubmission reasons >= extra POSTs"
delayed=$(qw_sql "SELECT count(*) FROM queuer.batch_history WHERE to_status = 'Delayed'")
e2e_assert "$delayed" -gt 0 "batches went through Delayed"

e2e_log "fault figures: seed=$SEED batches=$TOTAL posts=${FIG[posts]} 429s=${FIG[posts_429]}" \
    "other_errors=${FIG[posts_other]} retries=${FIG[resubmit_reasons]}" \
    "duplicates=${FIG[duplicate_batches]} (extra acceptances ${FIG[duplicate_posts]})" \
    "gets=${FIG[gets]} violations=${FIG[violations]}"
e2e_log "committed per worker: $PER_WORKER"
e2e_log "PASS"
