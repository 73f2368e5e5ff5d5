#!/usr/bin/env bash
# Scenario: after a lost connection a worker reads all its claims again.
# While its connection is down the worker can miss what changed its claims:
# the wake-up of an enqueue or a handover that gave it a service (sent on
# its own channel, to nobody while it is disconnected), or the outcome of a
# claims transaction whose COMMIT it never heard back. A claim the
# database gives it that it does not know of is nobody's work: no other
# worker may take it while the worker's lease runs, and the worker
# fetches only the services it knows it holds, so waiting for its periodic
# full read (every 60 cycles) would stall the service.
#
# Here the worker is stopped (SIGSTOP) and its database sessions are ended;
# a service then gets a batch (the enqueue gives it to the worker, whose
# lease runs, and its wake-up reaches no one) and the claim is moved to the
# worker again at a new epoch behind its back. The worker is resumed. With
# a 500 ms cycle the periodic read would come after 30 s; the batch must be
# final within 10 s.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

sc_begin claims_reconnect
sc_pg_start
sc_sim_start

sc_worker_start w1 QUEUER_WORKER_CYCLE_MS=500 QUEUER_WORKER_LEASE_MS=30000 \
    QUEUER_WORKER_HARD_EXPIRY_MS=60000 QUEUER_LOG_LEVEL=debug
sc_wait_registered 15 w1
# past its start-up cycles (its first reads every claim it holds, and its
# own joining NOTIFY wakes a second): frozen before them, it would read
# the claim below without the reconnect this is about
sc_wait_log w1 10 'event=claims\.done' 2

sc_gen "$SC_DIR/work.tsv" 1 1
svc=$(cut -f1 "$SC_DIR/work.tsv")
sc_worker_signal w1 STOP
sc_check_num "w1's database sessions ended" \
    "$(qw_sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE application_name = 'w1'")" ">=" 1
sc_wait "w1's sessions are gone" 10 \
    "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'w1')"
sc_load_tsv "$SC_DIR/work.tsv"
sc_check_sql "the service's claim goes to w1 behind its back, at a new epoch" 1 \
    "WITH c AS (UPDATE queuer.service_id_claims
                   SET claimant = 'w1', claim_epoch = claim_epoch + 1,
                       expiry_1 = now() + interval '1 hour', expiry_2 = now() + interval '2 hours'
                 WHERE service_id = '$svc' RETURNING 1)
     SELECT count(*) FROM c"
sc_worker_signal w1 CONT
sc_wait "w1 served the claim it did not know of" 10 "$QW_ALL_FINAL_SQL" \
    "SELECT c.claimant, c.claim_epoch, b.status, b.submitted
       FROM queuer.service_id_claims c JOIN queuer.batches b USING (service_id)"
sc_check_sql "the batch was committed" Committed \
    "SELECT status FROM queuer.batches WHERE service_id = '$svc'"
sc_worker_stop w1 15
