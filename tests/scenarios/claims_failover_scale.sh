#!/usr/bin/env bash
# Scenario: failover at scale. 100,000 claimed services and 8
# workers; one is killed with SIGKILL. Its services are taken over by the
# other seven within lease + 2 cycles of the kill, and never before their
# effective expiry_1, except those with a batch mid-submission, which are
# taken only after their hard expiry, never earlier. Times are the
# database's, as in worker_kill9.sh (the kill time is read just before the
# signal, so the bound is if anything tighter); the claims' expiries are
# read after the killed worker's sessions are gone. The survivors run
# maintenance when w1's lease runs out (they see it coming with their own
# lease renewals) and hand its services with work straight to the live
# workers, one row update per service (sql/claims_maintain.sql).
#
# The ledger holds every commit (batches stay Pending once accepted), so
# each worker's in-flight slots fill and every other service just waits,
# claimed. The victim w1 starts last, while POSTs hang: the others give
# their surplus back to it, and its own POSTs stay mid-submission.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

SERVICES=100000
SC_LEASE_MS=8000
SC_HARD_MS=40000
SC_CYCLE_MS=1000
sc_begin claims_failover_scale
sc_pg_start
sc_sim_start --commit-delay-ms 50
sc_sim_pause

for i in 2 3 4 5 6 7 8; do
    sc_worker_start "w$i" QUEUER_DLT_UNKNOWN_CONFIRM_MS=300
done
sc_wait_registered 30 w2 w3 w4 w5 w6 w7 w8

sc_log "generating and loading $SERVICES services"
sc_gen "$SC_DIR/load.tsv" "$SERVICES" 1 7 scale
sc_load_tsv "$SC_DIR/load.tsv"
rm -f "$SC_DIR/load.tsv"
sc_wait "seven workers hold every service" 180 \
    "SELECT count(*) = $SERVICES FROM queuer.service_id_claims WHERE claimant IS NOT NULL" \
    "SELECT claimant, count(*) FROM queuer.service_id_claims GROUP BY 1 ORDER BY 1"

# From now on POSTs hang: only w1 posts (the others' slots are full of
# Pending batches), so its batches stay mid-submission (for its request
# timeout, 30 s, under hard expiry - lease as run requires).
sc_sim_faults '{"fault-hang": 1}'
sc_worker_start w1 QUEUER_DLT_REQUEST_TIMEOUT_MS=30000 QUEUER_DLT_UNKNOWN_CONFIRM_MS=300
sc_wait_registered 15 w1
sc_wait "w1 holds its share, some of it mid-submission, and every service is held" 180 \
    "SELECT count(*) FILTER (WHERE claimant = 'w1') >= $((SERVICES / 8 - 200))
            AND count(*) FILTER (WHERE claimant = 'w1' AND submitting) >= 100
            AND count(*) FILTER (WHERE claimant IS NULL) = 0
       FROM queuer.service_id_claims" \
    "SELECT claimant, count(*), count(*) FILTER (WHERE submitting) AS submitting
       FROM queuer.service_id_claims GROUP BY 1 ORDER BY 1"

kill_at=$(sc_db_now)
sc_worker_kill w1
sc_check "w1 died of SIGKILL" 137 "$SC_RC"
sc_sim_faults '{"fault-hang": 0}'
sc_wait "w1's database sessions have ended" 10 \
    "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'w1'"

IDLE=$(sc_watch_claims idle "c.claimant = 'w1' AND NOT c.submitting")
HANG=$(sc_watch_claims submitting "c.claimant = 'w1' AND c.submitting")
sc_log "watching w1's claims: $IDLE idle, $HANG mid-submission"
sc_check_num "w1 held its share of the services" "$((IDLE + HANG))" ">=" $((SERVICES / 8 - 200))
sc_check_sql "the watched mid-submission services have a batch being submitted" "$HANG" \
    "SELECT count(DISTINCT b.service_id) FROM queuer.batches b JOIN scenario.watch w USING (service_id)
      WHERE w.tag = 'submitting' AND b.submitted AND b.status IS NULL"
sc_takeover_poll_start $((SC_HARD_MS / 1000 + 60))
sc_takeover_poll_wait
TAKEN=$(sc_taken_at)

sc_show_takeover "$kill_at"
sc_show "SELECT new_claimant, count(*) FROM scenario.watch GROUP BY 1 ORDER BY 1"

EVIDENCE="SELECT w.tag, w.service_id, w.old_expiry_1, w.old_expiry_2, $TAKEN AS taken_at,
                 w.seen_at, w.new_claimant
            FROM scenario.watch w ORDER BY $TAKEN - w.old_expiry_1 DESC LIMIT 10"
EVIDENCE_IDLE="SELECT w.service_id, w.old_expiry_1, $TAKEN AS taken_at, w.seen_at, w.new_claimant
                  FROM scenario.watch w WHERE w.tag = 'idle' ORDER BY $TAKEN DESC LIMIT 10"
sc_check_sql "every watched service was taken by a survivor, with a higher epoch" 0 \
    "SELECT count(*) FROM scenario.watch w WHERE w.new_claimant = 'w1' OR w.new_epoch <= w.old_epoch" \
    "$EVIDENCE"
sc_check_sql "no idle service was taken before its expiry_1" 0 \
    "SELECT count(*) FROM scenario.watch w WHERE w.tag = 'idle' AND $TAKEN <= w.old_expiry_1" \
    "$EVIDENCE"
# Checked on seen_at, the poller's first look at the new holder after the
# takeover committed (taken_at is the taking transaction's start).
LATE="SELECT count(*) FROM scenario.watch w
       WHERE w.tag = 'idle'
         AND w.seen_at > '$kill_at'::timestamptz + $((SC_LEASE_MS + 2 * SC_CYCLE_MS)) * interval '1 millisecond'"
sc_check_sql "every idle service was taken (and committed) within lease + 2 cycles of the kill" 0 "$LATE" \
    "$EVIDENCE_IDLE"
sc_check_sql "no service with a batch mid-submission was taken before its expiry_2" 0 \
    "SELECT count(*) FROM scenario.watch w WHERE w.tag = 'submitting' AND $TAKEN <= w.old_expiry_2" \
    "$EVIDENCE"
