#!/usr/bin/env bash
# Priority across workers when the ledger pushes back with 429s only: the
# simulator takes 100 batches/s and refuses the rest, two workers share it.
# 40 services x 15 batches are enqueued at priority 0, the workers start,
# then 10 services x 8 at priority 10: ten chains that alone would want more
# than the ledger takes, held by whichever worker each was given to. Checks:
#   - a worker logs `ledger.yield below_priority=10` (the other worker's
#     priority-10 batches waited for the ledger, and its own priority-0
#     batches then went one at a time; debug level) and, once no batch
#     waits any more, `ledger.yield_ended`;
#   - every batch Committed, in order, each service's once (qw-check);
#   - the share of priority-0 batches final when the last priority-10 one
#     was is printed (bench/ledger_limits.sh's LP measures it at scale).
. "$(dirname "$0")/e2e_common.sh"

LOW=$((40 * 15))
HIGH=$((10 * 8))

e2e_db
qw_gen "$E2E_DIR/low.tsv" 40 15 61 lowpr
qw_gen "$E2E_DIR/high.tsv" 10 8 62 highp
sed -i 's/$/\t10/' "$E2E_DIR/high.tsv"
qw_load_tsv "$E2E_DIR/low.tsv" >/dev/null || e2e_fail "loading the priority-0 workload failed"
qw_sim_start "$E2E_DIR/sim" --rate 100 --seed 1 || e2e_fail "scabbard-sim did not start"
e2e_worker w1 QUEUER_LOG_LEVEL=debug
e2e_worker w2 QUEUER_LOG_LEVEL=debug
qw_wait_sql 30 "SELECT count(*) >= 20 FROM queuer.batches WHERE status = 'Committed'" ||
    e2e_fail "the priority-0 load did not start"
qw_load_tsv "$E2E_DIR/high.tsv" >/dev/null || e2e_fail "loading the priority-10 workload failed"
e2e_drain 120

done_low=$(e2e_low_done_when_high_done)
# the last report of a waiting priority-10 batch reaches the other worker within a renewal
sleep 1
e2e_check

yielded=$(cat "$E2E_DIR"/workers/*.log | grep -c 'event=ledger.yield below_priority=10 ' || true)
ended=$(cat "$E2E_DIR"/workers/*.log | grep -c 'event=ledger.yield_ended' || true)
committed=$(qw_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'")
e2e_assert "$committed" -eq $((LOW + HIGH)) "every batch Committed"
e2e_assert "${FIG[batches]}" -eq $((LOW + HIGH)) "qw-check saw every batch"
e2e_assert "$yielded" -ge 1 "a worker yielded to the other's waiting priority-10 batches"
e2e_assert "$ended" -ge 1 "its yield ended once they no longer waited"
e2e_log "figures: low_final_at_high_done=$done_low/$LOW posts=${FIG[posts]} 429s=${FIG[posts_429]}" \
    "workers_yielding=$yielded"
e2e_log "PASS"
