#!/usr/bin/env bash
# Scenario: a worker is killed with SIGKILL; a second worker takes its
# services over exactly when the two-phase lease allows (docs/DESIGN.md §4.1,
# sql/claims_maintain.sql), decided per service:
#  (a) "idle" services, whose batch is Pending at the ledger and none is
#      mid-submission: taken after their expiry_1 and before their expiry_2;
#  (b) services with a batch mid-submission (submitted, no status: the POST
#      hangs at the ledger): taken only after their expiry_2.
# Times are the database's: the expiries are read after the killed worker's
# sessions are gone (so they are final), the takeover time is the acquiring
# transaction's now() (new expiry_1 - lease). Afterwards everything drains
# in order.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

# A 2 s lease leaves at least a second between the kill and the first
# expiry (claims are renewed at half the lease) to record the claims and
# start the poller.
SC_LEASE_MS=2000
SC_HARD_MS=8000
sc_begin worker_kill9
sc_pg_start
sc_sim_start --commit-delay-ms 50
sc_sim_pause # commits wait until the end: batches stay Pending

# The hanging POSTs must outlast the kill, and end before a takeover
# (request timeout < hard expiry - lease: 5.9 s).
sc_worker_start w1 QUEUER_DLT_REQUEST_TIMEOUT_MS=5900 QUEUER_DLT_UNKNOWN_CONFIRM_MS=300
sc_wait_registered 15 w1

# (a) services whose first batch is accepted and stays Pending.
sc_gen "$SC_DIR/idle.tsv" 8 2 1 idlea
IDLE=$(sc_services_sql "$SC_DIR/idle.tsv")
sc_load_tsv "$SC_DIR/idle.tsv"
sc_wait "w1 holds the idle services, each with a batch Pending" 15 \
    "SELECT count(*) = 8 FROM queuer.service_id_claims c
      WHERE c.service_id IN ($IDLE) AND c.claimant = 'w1'
        AND EXISTS (SELECT 1 FROM queuer.batches b WHERE b.service_id = c.service_id AND b.status = 'Pending')"

# (b) services whose first POST hangs: the batch is mid-submission.
sc_sim_faults '{"fault-hang": 1}'
sc_gen "$SC_DIR/hang.tsv" 8 2 2 hangb
HANG=$(sc_services_sql "$SC_DIR/hang.tsv")
sc_load_tsv "$SC_DIR/hang.tsv"
sc_wait "w1 holds the hanging services, each with a batch mid-submission" 15 \
    "SELECT count(*) = 8 FROM queuer.service_id_claims c
      WHERE c.service_id IN ($HANG) AND c.claimant = 'w1'
        AND EXISTS (SELECT 1 FROM queuer.batches b WHERE b.service_id = c.service_id
                       AND b.submitted AND b.status IS NULL)"

# The taker is live before the kill, so only the leases decide.
sc_worker_start w2 QUEUER_DLT_UNKNOWN_CONFIRM_MS=300
sc_wait_registered 15 w2

kill_at=$(sc_db_now)
sc_worker_kill w1
# The ledger answers again at once (w2 must not inherit hanging requests);
# the hanging services' batches stay mid-submission in the database.
sc_sim_faults '{"fault-hang": 0}'
sc_check "w1 died of SIGKILL" 137 "$SC_RC"
sc_wait "w1's database sessions have ended" 10 \
    "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'w1'"

sc_check "w1's idle services are watched" 8 \
    "$(sc_watch_claims idle "c.claimant = 'w1' AND c.service_id IN ($IDLE)")"
sc_check "w1's hanging services are watched" 8 \
    "$(sc_watch_claims submitting "c.claimant = 'w1' AND c.service_id IN ($HANG)")"
sc_takeover_poll_start $((SC_HARD_MS / 1000 + 10))
sc_check_sql "at the kill, no idle service has a batch mid-submission" 0 \
    "SELECT count(*) FROM queuer.batches WHERE service_id IN ($IDLE) AND submitted AND status IS NULL"
sc_check_sql "at the kill, every hanging service has a batch mid-submission" 8 \
    "SELECT count(DISTINCT service_id) FROM queuer.batches
      WHERE service_id IN ($HANG) AND submitted AND status IS NULL"

sc_takeover_poll_wait
TAKEN=$(sc_taken_at)

sc_show_takeover "$kill_at"

EVIDENCE="SELECT w.tag, w.service_id, w.old_expiry_1, w.old_expiry_2, $TAKEN AS taken_at,
                 w.last_unseen_at, w.seen_at, w.new_claimant
            FROM scenario.watch w ORDER BY 1, 2"
sc_check_sql "every watched service was taken by w2, with a higher epoch" 0 \
    "SELECT count(*) FROM scenario.watch w WHERE w.new_claimant <> 'w2' OR w.new_epoch <= w.old_epoch" \
    "$EVIDENCE"
sc_check_sql "(a) no idle service was taken before its expiry_1" 0 \
    "SELECT count(*) FROM scenario.watch w WHERE w.tag = 'idle' AND $TAKEN <= w.old_expiry_1" \
    "$EVIDENCE"
sc_check_sql "(a) every idle service was taken before its expiry_2" 0 \
    "SELECT count(*) FROM scenario.watch w WHERE w.tag = 'idle' AND w.seen_at >= w.old_expiry_2" \
    "$EVIDENCE"
sc_check_sql "(b) no service with a batch mid-submission was taken before its expiry_2" 0 \
    "SELECT count(*) FROM scenario.watch w WHERE w.tag = 'submitting' AND $TAKEN <= w.old_expiry_2" \
    "$EVIDENCE"

# (b) w2 adopts the hanging services' batches and asks for their status
# without a long-poll wait: a node holds a wait on an id it does not know
# for the whole wait (dlt.status_wait_s, 10 s). The ledger took some of the
# hanging POSTs (Pending is recorded) and never saw the others (Unknown is
# confirmed after dlt.unknown_confirm_ms, 300 ms, and the batch goes out
# again); either answer is recorded within seconds of the takeover.
ANSWERED="h.to_status IN ('Pending', 'Unknown') AND h.instance_id = 'w2'"
sc_wait "w2 recorded the ledger's answer for every hanging service's batch" 20 \
    "SELECT count(DISTINCT h.service_id) = 8 FROM queuer.batch_history h
      WHERE h.service_id IN ($HANG) AND $ANSWERED"
ADOPTED="SELECT w.service_id, (array_agg(h.to_status ORDER BY h.id))[1] AS answer,
                $(sc_ms "min(h.at) - $TAKEN") AS answered_after_takeover_ms
           FROM scenario.watch w
           JOIN queuer.batch_history h ON h.service_id = w.service_id AND $ANSWERED
          WHERE w.tag = 'submitting'
          GROUP BY w.service_id, w.new_expiry_1 ORDER BY 1"
sc_show "$ADOPTED"
sc_check_sql "(b) every adopted batch's status was recorded within 5 s of its takeover" 0 \
    "SELECT count(*) FROM ($ADOPTED) a WHERE a.answered_after_takeover_ms > 5000" "$ADOPTED"

sc_log "resuming the ledger's commits"
# Recovery: the ledger commits again; w2 follows the adopted batches (or
# resubmits those the ledger never accepted) and drains everything in order.
sc_sim_resume
sc_wait_all_final 30
sc_check_order
sc_show "SELECT to_status, coalesce(instance_id, '-') AS instance, count(*)
           FROM queuer.batch_history GROUP BY 1, 2 ORDER BY 2, 1"
sc_worker_stop w2 15
