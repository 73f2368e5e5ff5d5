#!/usr/bin/env bash
# Scenario: a worker hangs *inside* its claims transaction (SIGSTOP while
# its release of surplus claims has updated their rows but not committed;
# a network partition that keeps the TCP session open looks the same to
# the server). Its uncommitted transaction holds row locks on those claims.
# The other worker must keep working (DESIGN: workers keep going "while
# individual workers crash, hang, lose the network"): it keeps its own
# claims (same epoch throughout) and takes the hung worker's services over
# within the hard expiry plus a margin.
#
# How the hang is placed deterministically: w1 starts alone with one
# request in flight at most and no slack, so it holds all 12 services and
# 11 of them wait, with no job out. A helper session holds FOR SHARE on the
# claim row w1 will give back first (the highest service id without a
# batch in flight). When w2 starts, w1's share halves and its surplus is
# released by list (sql/claims_release.sql), whose update waits on the
# helper's lock inside w1's transaction; w1 is frozen while it waits, then
# the helper commits, the update completes on the server, and w1's session
# stays "idle in transaction" with the rows locked.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

sc_begin worker_frozen_txn
sc_pg_start
sc_sim_start --commit-delay-ms 50
sc_sim_pause # batches stay Pending: every service keeps its work

sc_worker_start w1 QUEUER_DLT_MAX_IN_FLIGHT=1 QUEUER_WORKER_CLAIM_SLACK=0
sc_wait_registered 15 w1
sc_gen "$SC_DIR/work.tsv" 12 2
sc_load_tsv "$SC_DIR/work.tsv"
sc_wait "w1 holds every service, one with a batch Pending" 15 \
    "SELECT count(*) = 12 FROM queuer.service_id_claims c
      WHERE c.claimant = 'w1'
        AND EXISTS (SELECT 1 FROM queuer.batches b WHERE b.service_id = c.service_id)" \
    "SELECT claimant, count(*) FROM queuer.service_id_claims GROUP BY 1"
# freeze_inside_txn: one attempt; sets STATE to w1's session state after it
# ("idle in transaction" on success; the release may instead fail with a
# serialization error once the lock is released, and then holds nothing).
freeze_inside_txn() {
    local victim helper
    victim=$(qw_sql "SELECT max(c.service_id) FROM queuer.service_id_claims c
                      WHERE c.claimant = 'w1'
                        AND NOT EXISTS (SELECT 1 FROM queuer.batches b WHERE b.service_id = c.service_id
                                           AND (b.status = 'Pending' OR (b.submitted AND b.status IS NULL)))")
    rm -f "$SC_DIR/helper.fifo"
    mkfifo "$SC_DIR/helper.fifo"
    PGAPPNAME=frozen_helper psql -X -q -v ON_ERROR_STOP=1 "$QW_PG_CONNINFO" <"$SC_DIR/helper.fifo" \
        >"$SC_DIR/helper.out" 2>&1 &
    helper=$!
    exec 3>"$SC_DIR/helper.fifo"
    echo "BEGIN; SELECT service_id FROM queuer.service_id_claims WHERE service_id = '$victim' FOR SHARE;" >&3
    # The lock must be held before w2 starts: w1 gives its surplus back
    # within DRAINED_RELEASE_DELAY_MS of w2's registration.
    sc_wait "the helper holds its lock" 10 \
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'frozen_helper'
                          AND state = 'idle in transaction')"
    # (without the helper's fifo: a worker holding it open would keep the helper waiting)
    [ -n "$W2_STARTED" ] || sc_worker_start w2 QUEUER_WORKER_CLAIM_SLACK=0 3>&-
    W2_STARTED=1
    sc_wait "w1's release waits on the helper's lock" 15 \
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'w1'
                          AND wait_event_type = 'Lock' AND query LIKE '%Gives back the listed claims%')"
    sc_worker_signal w1 STOP
    echo "COMMIT;" >&3
    exec 3>&-
    wait "$helper" || { cat "$SC_DIR/helper.out" >&2; sc_fail "the helper session failed"; }
    sc_wait "w1's release went on once the lock was released" 10 \
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'w1'
                          AND state LIKE 'idle in transaction%')"
    STATE=$(qw_sql "SELECT state FROM pg_stat_activity
                     WHERE application_name = 'w1' AND state LIKE 'idle in transaction%' LIMIT 1")
}

W2_STARTED=
for try in 1 2 3 4 5; do
    freeze_inside_txn
    [ "$STATE" = "idle in transaction" ] && break
    sc_log "try $try: w1's transaction ended as '$STATE'; resuming it and trying again"
    sc_worker_signal w1 CONT
    sc_wait "w1 left its failed transaction" 10 \
        "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'w1'
                              AND state LIKE 'idle in transaction%')"
done
[ "$STATE" = "idle in transaction" ] || sc_fail "could not freeze w1 inside a live transaction in 5 tries"
sc_log "w1 frozen inside its claims transaction"

n=$(sc_watch_claims frozen "c.claimant = 'w1'")
sc_check_num "the frozen worker holds services" "$n" ">=" 1
qw_sql "CREATE TABLE scenario.w2_before AS
        SELECT service_id, claim_epoch FROM queuer.service_id_claims WHERE claimant = 'w2'" >/dev/null
sc_takeover_poll_start $((SC_HARD_MS / 1000 + 6))
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
