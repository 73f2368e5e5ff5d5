#!/usr/bin/env bash
# Scenario: a Delayed batch is retried by the worker that holds its
# service when it is due, whatever else that worker is doing (draining
# surplus claims after a rebalance, pausing for 429s, running the fast path
# for other services). 4 workers started one after another (so the first
# ones hold more than their fair share and drain the surplus) with the
# nemesis's test-scale lease (3 s) and cycle (300 ms) drain 150 services x
# 12 batches while the ledger answers 6% of POSTs 429 and 4% 5xx at random.
# For every Delayed transition the history says when the batch became due
# ("retry in N ms"); the next transition of that batch (Submitting, by
# whichever worker) must come within a few cycles of that. Prints the wait
# distribution. DELAYED_SEED=N replays the ledger's fault decisions.
. "$(dirname "$0")/e2e_common.sh"

SERVICES=120
BATCHES=40
TOTAL=$((SERVICES * BATCHES))
CYCLE_MS=300
# "A few cycles": the queuer looks at its due retries at least once a cycle;
# two cycles of slack cover a claims transaction and a fetch on a loaded machine.
BOUND_MS=$((3 * CYCLE_MS))
SEED=${DELAYED_SEED:-$(((RANDOM << 15) | RANDOM))}

E2E_WORKER_SETTINGS=(QUEUER_WORKER_LEASE_MS=3000 QUEUER_WORKER_HARD_EXPIRY_MS=9000
                     "QUEUER_WORKER_CYCLE_MS=$CYCLE_MS" QUEUER_DLT_RETRY_BASE_MS=50
                     QUEUER_DLT_RETRY_MAX_MS=400 QUEUER_DLT_PAUSE_BASE_MS=50
                     QUEUER_DLT_PAUSE_MAX_MS=400 QUEUER_DLT_REQUEST_TIMEOUT_MS=2000
                     QUEUER_DLT_STATUS_WAIT_S=1 QUEUER_LOG_LEVEL=info)

e2e_db
e2e_workload "$SERVICES" "$BATCHES"
qw_sim_start "$E2E_DIR/sim" --commit-delay-ms 150 --seed "$SEED" --fault-429 0.06 --fault-5xx 0.04
e2e_log "fault seed $SEED (replay: DELAYED_SEED=$SEED); starting 4 workers 1 s apart"
for w in w1 w2 w3 w4; do
    e2e_worker "$w"
    sleep 1
done
e2e_drain 120

# Every Delayed transition, when it fell due, and when its batch next moved.
waits_sql="
WITH d AS (
    SELECT h.id, h.batch_id, h.instance_id,
           h.at + (substring(h.detail FROM 'retry in ([0-9]+) ms')::bigint
                   * interval '1 millisecond') AS due
      FROM queuer.batch_history h
     WHERE h.to_status = 'Delayed' AND h.detail ~ 'retry in [0-9]+ ms'
), w AS (
    SELECT d.*, (SELECT min(n.at) FROM queuer.batch_history n
                  WHERE n.batch_id = d.batch_id AND n.id > d.id) AS next_at
      FROM d
)
SELECT round(extract(epoch FROM next_at - due) * 1000)::bigint AS wait_ms, instance_id, batch_id
  FROM w"
delayed=$(qw_sql "SELECT count(*) FROM ($waits_sql) x")
stats=$(qw_sql "SELECT coalesce(max(wait_ms), 0), coalesce(percentile_disc(0.5) WITHIN GROUP (ORDER BY wait_ms), 0),
                       coalesce(percentile_disc(0.99) WITHIN GROUP (ORDER BY wait_ms), 0),
                       count(*) FILTER (WHERE wait_ms > $BOUND_MS)
                  FROM ($waits_sql) x")
IFS='|' read -r max_ms p50_ms p99_ms late <<<"$stats"
e2e_log "Delayed transitions: $delayed; wait after due: p50 ${p50_ms} ms, p99 ${p99_ms} ms," \
    "max ${max_ms} ms; over ${BOUND_MS} ms: $late"
if [ "$late" -gt 0 ]; then
    qw_sql "SELECT wait_ms, instance_id, left(batch_id, 16) FROM ($waits_sql) x
             WHERE wait_ms > $BOUND_MS ORDER BY wait_ms DESC LIMIT 10" >&2
fi
e2e_check

committed=$(qw_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'")
e2e_assert "$committed" -eq "$TOTAL" "every batch Committed"
# The faults really happened, or this test proves nothing.
e2e_assert "${FIG[posts_429]}" -gt 0 "429s seen"
e2e_assert "${FIG[posts_other]}" -gt 0 "5xx seen"
e2e_assert "$delayed" -gt 20 "Delayed transitions to measure"
e2e_assert "$late" -eq 0 "Delayed batches retried within ${BOUND_MS} ms of being due (max ${max_ms} ms)"
e2e_log "PASS"
