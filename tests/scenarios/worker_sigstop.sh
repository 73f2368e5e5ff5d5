#!/usr/bin/env bash
# Scenario: a worker is frozen (SIGSTOP) past the hard expiry of its claims,
# another worker takes its services over (new epoch), then the frozen one is
# resumed (SIGCONT). Fencing (docs/DESIGN.md §4.2) must make every write of the
# resumed worker about those services match nothing: the audit history
# holds no row of it at its old epoch after the takeover, and every batch
# write after the takeover is attributed to another worker. All batches
# still end Committed, and the ledger saw each service's batches in order.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

# A longer lease than the other scenarios leaves room to record the frozen
# worker's claims before they expire.
SC_LEASE_MS=2000
SC_HARD_MS=5000
sc_begin worker_sigstop
sc_pg_start
sc_sim_start --commit-delay-ms 300

sc_worker_start w1
sc_worker_start w2
sc_wait_registered 15 w1 w2
sc_gen "$SC_DIR/work.tsv" 20 5
sc_load_tsv "$SC_DIR/work.tsv"
sc_wait "w1 holds services and has batches in flight" 15 \
    "SELECT count(*) >= 3 AND bool_or(EXISTS (
                SELECT 1 FROM queuer.batches b WHERE b.service_id = c.service_id
                   AND (b.status = 'Pending' OR (b.submitted AND b.status IS NULL))))
       FROM queuer.service_id_claims c WHERE c.claimant = 'w1'"
# The ledger commits nothing while w1 is frozen and taken over, so its
# services keep their work however slowly this script runs; commits
# resume before w1 does, and its status polls then report batches final
# that w2 now owns.
sc_sim_pause

# Freeze w1 outside any transaction: a worker frozen inside one would hold
# row locks on its claims (tests/scenarios/worker_frozen_txn.sh), not this
# scenario. It is frozen right after renewing its claims, so they
# are still valid when we record them; a message already on its way to the
# server is processed within a moment, hence the short settle before the
# look at its sessions, which records its claims in the same statement.
frozen=
for try in $(seq 1 20); do
    sc_wait "w1 renewed its claims a moment ago" 10 \
        "SELECT count(*) > 0 AND min(expiry_1) > now() + $((SC_LEASE_MS * 8 / 10)) * interval '1 millisecond'
           FROM queuer.claims WHERE claimant = 'w1'"
    sc_worker_signal w1 STOP
    sleep 0.1
    frozen=$(qw_sql "WITH busy AS (
                SELECT count(*) AS n, string_agg(state || coalesce(' since ' || xact_start, ''), ', ') AS what
                  FROM pg_stat_activity
                 WHERE application_name = 'w1' AND (state IS DISTINCT FROM 'idle' OR xact_start IS NOT NULL)
            ), ins AS (
                INSERT INTO scenario.watch (tag, service_id, old_claimant, old_epoch, old_expiry_1, old_expiry_2)
                SELECT 'stopped', c.service_id, c.claimant, c.claim_epoch, c.expiry_1, c.expiry_2
                  FROM queuer.claims c, busy
                 WHERE busy.n = 0 AND c.claimant = 'w1'
                RETURNING 1)
            SELECT CASE WHEN busy.n = 0 THEN (SELECT count(*) FROM ins)::text
                        ELSE 'busy: ' || busy.what END FROM busy")
    case "$frozen" in
    busy*) sc_log "try $try: w1 was frozen inside a transaction ($frozen); resuming it" ;;
    *) break ;;
    esac
    sc_worker_signal w1 CONT
    frozen=
done
[ -n "$frozen" ] || sc_fail "could not freeze w1 outside a transaction in 20 tries"
stop_at=$(sc_db_now)
sc_log "w1 frozen (try $try) at $stop_at"
sc_check_num "the frozen worker held services" "$frozen" ">=" 1
sc_takeover_poll_start $((SC_HARD_MS / 1000 + 10))
sc_show "SELECT coalesce(b.status, CASE WHEN b.submitted THEN '(submitting)' ELSE '(new)' END) AS state,
                count(*) AS batches_of_frozen_services
           FROM queuer.batches b JOIN scenario.watch w USING (service_id) GROUP BY 1 ORDER BY 1"

sc_takeover_poll_wait
sc_wait "the database clock is past every frozen claim's expiry_2" $((SC_HARD_MS / 1000 + 5)) \
    "SELECT now() > max(old_expiry_2) FROM scenario.watch"
TAKEN=$(sc_taken_at)
sc_check_sql "every frozen service was taken by w2 with a higher epoch" 0 \
    "SELECT count(*) FROM scenario.watch w WHERE w.new_claimant <> 'w2' OR w.new_epoch <= w.old_epoch" \
    "SELECT * FROM scenario.watch"

sc_sim_resume
sc_wait "w2 committed batches of the frozen services" 15 \
    "SELECT EXISTS (SELECT 1 FROM queuer.batch_history h JOIN scenario.watch w USING (service_id)
                     WHERE h.instance_id = 'w2' AND h.to_status = 'Committed')"
resume_at=$(sc_db_now)
sc_worker_signal w1 CONT
sc_wait "w1 runs a cycle after SIGCONT" 10 \
    "SELECT heartbeat_at > '$resume_at'::timestamptz FROM queuer.instances WHERE instance_id = 'w1'"
sc_check_sql "w1 holds none of the frozen services at its old epoch" 0 \
    "SELECT count(*) FROM queuer.service_id_claims c JOIN scenario.watch w USING (service_id)
      WHERE c.claimant = 'w1' AND c.claim_epoch = w.old_epoch"
sc_wait_all_final 60

sc_check_sql "no history row of w1 at its old epoch after the takeover" 0 \
    "SELECT count(*) FROM queuer.batch_history h JOIN scenario.watch w USING (service_id)
      WHERE h.instance_id = 'w1' AND h.claim_epoch = w.old_epoch AND h.at >= $TAKEN" \
    "SELECT h.* FROM queuer.batch_history h JOIN scenario.watch w USING (service_id)
      WHERE h.instance_id = 'w1' AND h.claim_epoch = w.old_epoch AND h.at >= $TAKEN LIMIT 10"
sc_check_sql "no history row of w1 at its old epoch after it was frozen" 0 \
    "SELECT count(*) FROM queuer.batch_history h JOIN scenario.watch w USING (service_id)
      WHERE h.instance_id = 'w1' AND h.claim_epoch = w.old_epoch AND h.at > '$stop_at'::timestamptz"
# Every write to a batch sets status_at = now() and appends a history row
# in the same statement (sql/batches_mark.sql, sql/outcomes_record.sql), so
# the last write of each batch is attributed by the row with at = status_at.
# (w1 may legitimately claim some of these services again after SIGCONT,
# at a new epoch.)
sc_check_sql "the last write of each frozen service's batches after the takeover is not w1's at its old epoch" 0 \
    "SELECT count(*) FROM queuer.batches b JOIN scenario.watch w USING (service_id)
      WHERE b.status_at >= $TAKEN
        AND NOT EXISTS (SELECT 1 FROM queuer.batch_history h
                         WHERE h.batch_id = b.batch_id AND h.at = b.status_at
                           AND (h.instance_id, h.claim_epoch) IS DISTINCT FROM ('w1', w.old_epoch))" \
    "SELECT b.batch_id, b.status, b.status_at, h.instance_id, h.claim_epoch, w.old_epoch, h.to_status
       FROM queuer.batches b JOIN scenario.watch w USING (service_id)
       LEFT JOIN queuer.batch_history h ON h.batch_id = b.batch_id AND h.at = b.status_at
      WHERE b.status_at >= $TAKEN ORDER BY b.status_at LIMIT 20"
sc_check_sql "every batch Committed" 0 \
    "SELECT count(*) FROM queuer.batches WHERE status IS DISTINCT FROM 'Committed'"
sc_check_order

for w in w1 w2; do
    sc_worker_stop $w 15
done
sc_log "w1 after SIGCONT: $(grep -c 'event=claim.lost' "$SC_DIR/w1.log") fenced writes matched nothing;" \
    "$(grep -o 'event=worker.summary.*' "$SC_DIR/w1.log")"
