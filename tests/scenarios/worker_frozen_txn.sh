#!/usr/bin/env bash
# Scenario: a worker hangs *inside* its queue transaction (SIGSTOP while
# its mark of a batch waits on a row lock; a network partition that keeps
# the TCP session open looks the same to the server). The mark went out
# with its COMMIT (one pipeline), so once the lock is released the server
# finishes both without the worker: the hung worker leaves nothing locked
# and nothing open. The other worker must keep working (DESIGN: workers
# keep going "while individual workers crash, hang, lose the network"): it
# keeps its own claims (same epoch throughout) and takes the hung worker's
# services over within the hung worker's hard expiry plus a margin, the
# batch marked but never posted included.
#
# How the hang is placed deterministically: w1 and w2 start with one
# request in flight at most and no slack, and the simulator holds every
# batch Pending; 12 services with one batch each are shared between them,
# so each has one batch in flight and the others waiting. A helper session
# holds FOR UPDATE on the waiting batches of w1's services. When the
# simulator lets w1's batch in flight end, w1's next mark
# (sql/batches_mark.sql) locks its claim row and waits on the helper's
# lock inside w1's queue transaction; w1 is frozen while it waits, then the
# helper commits, and the mark and its COMMIT complete on the server. w1
# runs with a 4 s lease, so that a statement of its may wait 1 s for a
# lock (a quarter lease) and the freeze lands within that wait.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

W1_LEASE_MS=4000
W1_HARD_MS=8000

sc_begin worker_frozen_txn
sc_pg_start
sc_sim_start --commit-delay-ms 50
sc_sim_pause # batches stay Pending until the simulator is resumed

sc_worker_start w1 QUEUER_DLT_MAX_IN_FLIGHT=1 QUEUER_WORKER_CLAIM_SLACK=0 \
    QUEUER_WORKER_LEASE_MS=$W1_LEASE_MS QUEUER_WORKER_HARD_EXPIRY_MS=$W1_HARD_MS
sc_worker_start w2 QUEUER_DLT_MAX_IN_FLIGHT=1 QUEUER_WORKER_CLAIM_SLACK=0
sc_wait_registered 15 w1 w2
sc_gen "$SC_DIR/work.tsv" 12 1
sc_load_tsv "$SC_DIR/work.tsv"

# SQL: how many batches of `who`'s services are in flight, or waiting
batches_of() {
    echo "(SELECT count(*) FROM queuer.batches b JOIN queuer.service_id_claims c USING (service_id)
            WHERE c.claimant = '$1' AND $2)"
}
IN_FLIGHT="b.submitted AND (b.status IS NULL OR b.status = 'Pending')"
WAITING="NOT b.submitted AND b.status IS NULL"

# freeze_inside_txn: one attempt; sets STATE to the state and last statement
# of w1's session after it ("idle|COMMIT" on success; the mark may instead
# have given up on the lock first, which skips the COMMIT and leaves the
# transaction aborted, or w1 may have rolled back before the freeze).
freeze_inside_txn() {
    local mark_pid
    sc_wait "w1 and w2 each have a batch in flight, w1 others waiting" 20 \
        "SELECT $(batches_of w1 "$IN_FLIGHT") = 1 AND $(batches_of w2 "$IN_FLIGHT") = 1
                AND $(batches_of w1 "$WAITING") >= 1" \
        "SELECT c.claimant, b.submitted, b.status, count(*)
           FROM queuer.batches b JOIN queuer.service_id_claims c USING (service_id)
          GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
    sc_helper_open frozen_helper
    echo "BEGIN; SELECT b.batch_id FROM queuer.batches b
                   JOIN queuer.service_id_claims c USING (service_id)
                  WHERE c.claimant = 'w1' AND $WAITING FOR UPDATE OF b;" >&3
    sc_wait "the helper holds its locks" 10 \
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'frozen_helper'
                          AND state = 'idle in transaction')"
    # w1's batch in flight ends: its next mark meets the helper's locks
    sc_sim_resume
    sc_wait "w1's mark waits on the helper's lock" 15 \
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'w1'
                          AND wait_event_type = 'Lock' AND query LIKE '%marks the chosen batches%')"
    mark_pid=$(qw_sql "SELECT min(pid) FROM pg_stat_activity WHERE application_name = 'w1'
                         AND query LIKE '%marks the chosen batches%'")
    sc_worker_signal w1 STOP
    sc_sim_pause
    echo "COMMIT;" >&3
    sc_helper_close frozen_helper
    sc_wait "w1's mark went on once the lock was released" 10 \
        "SELECT state <> 'active' FROM pg_stat_activity WHERE pid = '${mark_pid:-0}'"
    STATE=$(qw_sql "SELECT state || '|' || query FROM pg_stat_activity WHERE pid = '${mark_pid:-0}'")
}

for try in 1 2 3 4 5; do
    freeze_inside_txn
    [ "$STATE" = "idle|COMMIT" ] && break
    sc_log "try $try: w1's mark ended as '$STATE'; resuming it and trying again"
    sc_worker_signal w1 CONT
    sc_wait "w1 left its failed transaction" 10 \
        "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'w1'
                              AND state LIKE 'idle in transaction%')"
done
[ "$STATE" = "idle|COMMIT" ] || sc_fail "could not freeze w1 in the middle of a mark that completes in 5 tries"
sc_log "w1 frozen in the middle of its queue transaction; the mark committed without it"
# (FOR SHARE waits for, or here skips, a row held FOR NO KEY UPDATE)
sc_check_sql "the frozen worker holds no claim row locked" t \
    "SELECT (SELECT count(*) FROM queuer.service_id_claims WHERE claimant = 'w1')
            = (SELECT count(*) FROM (SELECT 1 FROM queuer.service_id_claims WHERE claimant = 'w1'
                                       FOR SHARE SKIP LOCKED) x)"
sc_check_sql "the frozen worker has no transaction open" 0 \
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'w1' AND xact_start IS NOT NULL"
sc_check_sql "its mark committed: a batch of its services submitted, not yet posted" t \
    "SELECT $(batches_of w1 "b.submitted AND b.status IS NULL") >= 1"

n=$(sc_watch_claims frozen "c.claimant = 'w1'")
sc_check_num "the frozen worker holds services" "$n" ">=" 1
qw_sql "CREATE TABLE scenario.w2_before AS
        SELECT service_id, claim_epoch FROM queuer.service_id_claims WHERE claimant = 'w2'" >/dev/null
n=$(qw_sql "SELECT count(*) FROM scenario.w2_before")
sc_check_num "w2 holds services of its own" "$n" ">=" 1
sc_takeover_poll_start $((W1_HARD_MS / 1000 + 6))
sc_takeover_poll_wait "SELECT application_name AS worker, state, wait_event_type, wait_event,
                              now() - xact_start AS in_transaction_for, left(query, 40) AS query
                         FROM pg_stat_activity WHERE application_name IN ('w1', 'w2') ORDER BY 1"
sc_check_sql "w2 kept its own claims, at the same epochs, while w1 hung" 0 \
    "SELECT count(*) FROM scenario.w2_before p JOIN queuer.service_id_claims c USING (service_id)
      WHERE c.claimant IS DISTINCT FROM 'w2' OR c.claim_epoch <> p.claim_epoch"
sc_check_sql "w2's heartbeat is current" t \
    "SELECT heartbeat_at > now() - $SC_LEASE_MS * interval '1 millisecond'
       FROM queuer.instances WHERE instance_id = 'w2'"

sc_worker_signal w1 CONT
sc_sim_resume
sc_wait_all_final 30
sc_check_order
for w in w1 w2; do
    sc_worker_stop $w 15
done
