#!/usr/bin/env bash
# Scenario: graceful shutdown (docs/DESIGN.md §6.3). SIGTERM to one of two workers
# while work is in flight: it exits 0 within worker.shutdown_grace_ms plus
# a margin, gives its claims back at once (the other worker holds them in
# under a second, well before their lease would have run out), its instance
# row is marked stopped, and every batch still ends Committed in order.
# A worker stopped while an outcome waits to be written (its claim row
# locked by another session) writes it and leaves no batch marked for a
# POST it will not make. Then a worker whose ledger hangs (so its shutdown
# would wait out a long grace period) gets a second signal while stopping
# and exits at once.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

# A 3 s lease: a takeover after expiry would take at least 1.5 s (claims are
# renewed at half the lease), so a takeover within 1 s proves the release.
SC_LEASE_MS=3000
SC_HARD_MS=8000
GRACE_MS=2000
MARGIN_MS=3000
sc_begin worker_graceful
sc_pg_start
sc_sim_start --commit-delay-ms 200

sc_worker_start w1 QUEUER_WORKER_SHUTDOWN_GRACE_MS=$GRACE_MS
sc_worker_start w2
sc_wait_registered 15 w1 w2
sc_gen "$SC_DIR/work.tsv" 20 6
sc_load_tsv "$SC_DIR/work.tsv"
IN_FLIGHT="EXISTS (SELECT 1 FROM queuer.batches b WHERE b.service_id = c.service_id
                    AND (b.status = 'Pending' OR (b.submitted AND b.status IS NULL)))"
sc_wait "w1 holds services with batches in flight" 15 \
    "SELECT count(*) >= 3 FROM queuer.service_id_claims c WHERE c.claimant = 'w1' AND $IN_FLIGHT"
# From here the ledger commits nothing until the takeover is measured, so
# the services keep their work however slowly this script runs.
sc_sim_pause
WITH_WORK="EXISTS (SELECT 1 FROM queuer.batches b WHERE b.service_id = c.service_id
                    AND (b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed')))"

n=$(sc_watch_claims graceful "c.claimant = 'w1' AND $WITH_WORK")
sc_takeover_poll_start 10
sc_watch_refresh graceful # w1 renewed meanwhile: its expiries as of the signal
sig_at=$(sc_db_now)
t0=$EPOCHREALTIME
sc_worker_signal w1 TERM
sc_check_num "w1 held services with work at the signal" "$n" ">=" 1
sc_worker_wait_exit w1 $(((GRACE_MS + MARGIN_MS + 999) / 1000))
exit_ms=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }')
sc_check "w1 exits 0 within shutdown_grace_ms + ${MARGIN_MS} ms after SIGTERM" 0 "$SC_RC"
sc_log "w1 exited ${exit_ms} ms after SIGTERM"
sc_check_sql "w1 holds no claim after it exited" 0 \
    "SELECT count(*) FROM queuer.service_id_claims WHERE claimant = 'w1'"
sc_check_sql "w1's instance row is marked stopped" t \
    "SELECT stopped_at IS NOT NULL FROM queuer.instances WHERE instance_id = 'w1'"
sc_wait_log w1 5 'event=worker.stopped released=[1-9]'

sc_takeover_poll_wait
TAKEN=$(sc_taken_at)
sc_show "SELECT count(*) AS services, min($(sc_ms "$TAKEN - '$sig_at'::timestamptz")) AS min_after_signal_ms,
                max($(sc_ms "$TAKEN - '$sig_at'::timestamptz")) AS max_after_signal_ms,
                max($(sc_ms "w.seen_at - '$sig_at'::timestamptz")) AS max_seen_after_signal_ms
           FROM scenario.watch w"
EVIDENCE="SELECT w.service_id, w.old_expiry_1, $TAKEN AS taken_at, w.seen_at, w.new_claimant FROM scenario.watch w"
sc_check_sql "w2 holds every service w1 gave back" 0 \
    "SELECT count(*) FROM scenario.watch w WHERE w.new_claimant <> 'w2'" "$EVIDENCE"
sc_check_sql "each was taken within 1 s of the signal" 0 \
    "SELECT count(*) FROM scenario.watch w WHERE $TAKEN >= '$sig_at'::timestamptz + interval '1 second'" \
    "$EVIDENCE"
sc_check_sql "each was taken before w1's lease on it ran out (released, not expired)" 0 \
    "SELECT count(*) FROM scenario.watch w WHERE $TAKEN >= w.old_expiry_1" "$EVIDENCE"

sc_sim_resume
sc_wait_all_final 60
sc_check_sql "every batch Committed" 0 \
    "SELECT count(*) FROM queuer.batches WHERE status IS DISTINCT FROM 'Committed'"
sc_check_order
sc_worker_stop w2 $(((5000 + MARGIN_MS) / 1000))

# An outcome still waiting to be written when the stop begins (a helper
# holds the claim row, so the write is put off group after group): w4 writes
# it once the row is free, but takes on no next batch while stopping, so no
# batch is left marked for a POST that never comes.
sc_sim_pause
sc_worker_start w4 QUEUER_LOG_LEVEL=debug
sc_wait_registered 15 w4
sc_gen "$SC_DIR/tail.tsv" 1 3 3 tailc
sc_load_tsv "$SC_DIR/tail.tsv"
TAIL="service_id LIKE 'tailc%'"
sc_wait "w4's first tailc batch is Pending at the ledger" 15 \
    "SELECT count(*) = 1 FROM queuer.batches WHERE $TAIL AND status = 'Pending'"
sc_helper_open claim_lock
echo "BEGIN; SELECT service_id FROM queuer.service_id_claims WHERE $TAIL FOR UPDATE;" >&3
sc_wait "the helper holds the tailc claim row" 10 \
    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'claim_lock'
                      AND state = 'idle in transaction')"
flushes() { grep -c 'event=outcomes.flushed' "$SC_DIR/w4.log" || true; }
before=$(flushes)
sc_sim_resume
# The Committed outcome is put off again and again (the claim row is locked).
for _ in $(seq 1 200); do
    [ "$(flushes)" -ge $((before + 10)) ] && break
    sleep 0.05
done
sc_check_num "w4's group writes while the claim row is locked" "$(flushes)" ">=" $((before + 10))
sc_check_sql "the first tailc batch is still Pending in the database" 1 \
    "SELECT count(*) FROM queuer.batches WHERE $TAIL AND status = 'Pending'"
sc_worker_signal w4 TERM
sc_wait_log w4 10 'event=submitter.stopping'
echo "COMMIT;" >&3
sc_helper_close claim_lock
sc_worker_wait_exit w4 $(((GRACE_MS + MARGIN_MS + 999) / 1000))
sc_check "w4 exits 0 after SIGTERM" 0 "$SC_RC"
TAIL_EVIDENCE="SELECT batch_id, submitted, status, attempts FROM queuer.batches WHERE $TAIL
                ORDER BY created_at"
sc_check_sql "w4 wrote the Committed outcome waiting at the stop" 1 \
    "SELECT count(*) FROM queuer.batches WHERE $TAIL AND status = 'Committed'" "$TAIL_EVIDENCE"
sc_check_sql "no tailc batch is left marked for submission without a POST" 0 \
    "SELECT count(*) FROM queuer.batches WHERE $TAIL AND submitted AND status IS NULL" \
    "$TAIL_EVIDENCE"

# Second signal: w3's POSTs hang, so its graceful stop would wait 60 s.
sc_sim_faults '{"fault-hang": 1}'
sc_worker_start w3 QUEUER_WORKER_SHUTDOWN_GRACE_MS=60000 QUEUER_DLT_REQUEST_TIMEOUT_MS=60000 \
    QUEUER_WORKER_HARD_EXPIRY_MS=70000
sc_wait_registered 15 w3
sc_gen "$SC_DIR/hang.tsv" 3 1 2 hangc
sc_load_tsv "$SC_DIR/hang.tsv"
sc_wait "w3 has a batch mid-submission" 15 \
    "SELECT EXISTS (SELECT 1 FROM queuer.batches b JOIN queuer.service_id_claims c USING (service_id)
                     WHERE c.claimant = 'w3' AND b.submitted AND b.status IS NULL)"
sc_worker_signal w3 TERM
sc_wait_log w3 10 'event=submitter.stopping'
sc_worker_alive w3 || sc_fail "w3 exited on the first signal although a POST was hanging"
echo "ok: w3 is stopping and waits for its hanging POST"
t0=$EPOCHREALTIME
sc_worker_signal w3 TERM
sc_worker_wait_exit w3 5
exit_ms=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }')
[ "$SC_RC" != timeout ] || sc_fail "w3 still runs 5 s after the second signal (grace is 60 s)"
sc_log "w3 exited ${exit_ms} ms after the second signal, exit code $SC_RC"
