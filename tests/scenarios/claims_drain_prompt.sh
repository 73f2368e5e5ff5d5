#!/usr/bin/env bash
# Scenario: a worker that joins gets its fair share within a second or two,
# not a claims cycle later. When a second worker registers, the first one
# (woken by the NOTIFY of the registration) marks its claims above the new
# fair share as draining: it queues no new batch for them, and gives each
# back once its batch in flight has ended. That release used to wait for
# the first worker's next periodic claims cycle, so the newcomer idled for
# up to worker.cycle_ms while the drained services waited too (with 4
# workers starting together, W1 ran at 4,900-6,300 batches/s, below 2
# workers). Now a claims cycle gives the drained claims back 20 ms after
# they fall idle.
#
# Here both workers' cycle is 20 s: w1 claims the S services with work on
# the load's NOTIFY, w2 joins, and w2 must hold S - share of them (share =
# ceil(S/2) + slack) within 8 s of its registration, well before w1's next
# periodic cycle. Every batch must then reach the ledger in order and end
# Committed.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

S=40
B=25
SLACK=4
SHARE=$(((S + 1) / 2 + SLACK))
SLOW=("${SC_SLOW_CYCLE[@]}" "QUEUER_WORKER_CLAIM_SLACK=$SLACK")
sc_begin claims_drain_prompt
sc_pg_start
sc_sim_start --commit-delay-ms 200

sc_worker_start w1 "${SLOW[@]}"
sc_wait_registered 15 w1
sc_gen "$SC_DIR/work.tsv" $S $B
sc_load_tsv "$SC_DIR/work.tsv"
sc_wait "w1 holds the $S services with work" 10 \
    "SELECT count(*) = $S FROM queuer.service_id_claims WHERE claimant = 'w1'"
sc_check_sql "w1 has work left for every service when w2 joins" $S \
    "SELECT count(DISTINCT service_id) FROM queuer.batches WHERE status IS NULL"

sc_worker_start w2 "${SLOW[@]}"
sc_wait_registered 15 w2
t_join=$(sc_db_now)
sc_wait "w2 holds S - share = $((S - SHARE)) services or more" 8 \
    "SELECT count(*) >= $((S - SHARE)) FROM queuer.service_id_claims WHERE claimant = 'w2'" \
    "SELECT claimant, count(*) FROM queuer.service_id_claims GROUP BY 1 ORDER BY 1"
sc_check_sql "w2 got them within 8 s of joining, before w1's next periodic cycle (20 s)" t \
    "SELECT clock_timestamp() < '$t_join'::timestamptz + interval '8 seconds'"
sc_check_sql "w1 kept no more than its share" t \
    "SELECT count(*) <= $SHARE FROM queuer.service_id_claims WHERE claimant = 'w1'"
sc_show "SELECT claimant, count(*) AS services FROM queuer.service_id_claims GROUP BY 1 ORDER BY 1"

sc_wait "every batch Committed" 60 \
    "SELECT count(*) = 0 FROM queuer.batches WHERE status IS DISTINCT FROM 'Committed'" \
    "SELECT status, count(*) FROM queuer.batches GROUP BY 1"
sc_check_sql "w2 committed batches of its own" t \
    "SELECT count(*) >= $(((S - SHARE) * 5)) FROM queuer.batch_history
      WHERE to_status = 'Committed' AND instance_id = 'w2'"
sc_check_order
sc_worker_stop w2 15
sc_worker_stop w1 15
