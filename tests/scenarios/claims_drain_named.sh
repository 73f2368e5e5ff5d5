#!/usr/bin/env bash
# Scenario: a drained service that gets work while its give-back waits for
# the enqueue goes to a worker with room at once, not a claims cycle later.
# When a worker above its fair share drains a service, it queues nothing
# more for it and gives it back once it is idle; the give-back skips a
# service whose ingest row an enqueue holds (given back then, its new batch
# would wait for the next full fetch). Here an application enqueues a batch
# of S, the service w1 drains first (the highest id), and keeps its
# transaction open while w2 joins; w1 gives back every surplus claim but S.
# The commit names S to w1, its holder, which must give it back (with work)
# at once, and S's batch must be committed by w2 within 2 s, long before
# w1's next periodic cycle (20 s). Waiting for that cycle instead, at
# 1,500 batches/s over 1,000 services with 75 batches per insert (W5), up
# to three batches in 37,000 waited 0.2-1.0 s (worker.cycle_ms 1 s).
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

N=40
SLACK=2
SHARE=$(((N + 1) / 2 + SLACK))
OPEN_S=10
SLOW=("${SC_SLOW_CYCLE[@]}" "QUEUER_WORKER_CLAIM_SLACK=$SLACK")
sc_begin claims_drain_named
sc_pg_start
sc_sim_start --commit-delay-ms 20

sc_worker_start w1 "${SLOW[@]}"
sc_wait_registered 15 w1
# one batch for each of N services (w1 claims them all and keeps the
# claims once they are idle), and a second batch of the last one, S
sc_gen "$SC_DIR/all.tsv" $N 2 5 drnmx
awk -F'\t' '!seen[$1]++' "$SC_DIR/all.tsv" >"$SC_DIR/first.tsv"
S=$(cut -f1 "$SC_DIR/first.tsv" | LC_ALL=C sort | tail -1)
awk -F'\t' -v s="$S" '$1 == s' "$SC_DIR/all.tsv" | tail -1 >"$SC_DIR/late.tsv"
LATE=$(cut -f2 "$SC_DIR/late.tsv")
sc_load_tsv "$SC_DIR/first.tsv"
sc_wait "w1 holds the $N services, and their batches are committed" 30 \
    "SELECT count(*) = $N FROM queuer.service_id_claims WHERE claimant = 'w1'
        AND NOT EXISTS (SELECT 1 FROM queuer.batches WHERE status IS DISTINCT FROM 'Committed')"

# The application's transaction: S's next batch, then open for OPEN_S s.
sc_app_txn_start "$(cat "$SC_DIR/late.tsv")" "$OPEN_S"

sc_worker_start w2 "${SLOW[@]}"
sc_wait_registered 15 w2
sc_wait "w1 gave back its surplus but S" $((OPEN_S - 4)) \
    "SELECT count(*) = $((SHARE + 1)) FROM queuer.service_id_claims WHERE claimant = 'w1'" \
    "SELECT claimant, count(*) FROM queuer.service_id_claims GROUP BY 1 ORDER BY 1"
sc_check_sql "w1 still holds S, which the open transaction keeps it from giving back" w1 \
    "SELECT claimant FROM queuer.service_id_claims WHERE service_id = '$S'"

sc_app_txn_end
t_commit=$(sc_db_now)
sc_wait "S's batch is committed after the application's commit" 10 \
    "SELECT EXISTS (SELECT 1 FROM queuer.batches WHERE batch_id = '$LATE' AND status = 'Committed')"
sc_check_sql "... within 2 s of it, not at w1's next periodic cycle (20 s)" t \
    "SELECT status_at < '$t_commit'::timestamptz + interval '2 seconds'
       FROM queuer.batches WHERE batch_id = '$LATE'"
sc_check_sql "w2 posted it" w2 \
    "SELECT instance_id FROM queuer.batch_history WHERE batch_id = '$LATE' AND to_status = 'Submitting'"
sc_check_sql "S is now w2's" 1 \
    "SELECT count(*) FROM queuer.service_id_claims WHERE service_id = '$S' AND claimant = 'w2'"
sc_check_order
sc_worker_stop w2 15
sc_worker_stop w1 15
