#!/usr/bin/env bash
# Scenario: wake-ups. An idle worker whose cycle is long (5 s) submits a
# newly enqueued batch within milliseconds because enqueue NOTIFYs; with
# worker.listen = false (transaction poolers) it still submits it, but on
# its next cycle. Latency = history 'Submitting' time - the batch's
# created_at (its Enqueued in queuer.history), both on the database clock. And a worker that pickup gives hundreds of
# claims (named in its notifications) fetches them at once, not at its
# next full fetch five long cycles later.
. "$(dirname "$0")/lib_scenario.sh"
sc_begin wakeup

sc_pg_start
sc_sim_start --commit-delay-ms 5
sc_gen "$SC_DIR/w.tsv" 6 1 7

# Enqueues line N of the workload and waits until it is submitted; prints ms.
enqueue_and_measure() {
    local line=$1 secs=$2 id
    sed -n "${line}p" "$SC_DIR/w.tsv" >"$SC_DIR/one.tsv"
    id=$(cut -f2 "$SC_DIR/one.tsv")
    QUEUER_DATABASE_CONNINFO="$QW_PG_CONNINFO" QUEUER_INGEST_HIGH=0 \
        "$QUEUER_BIN" enqueue --tsv "$SC_DIR/one.tsv" >/dev/null || sc_fail "enqueue failed"
    sc_wait "batch $line submitted" "$secs" \
        "SELECT count(*) = 1 FROM queuer.batch_history WHERE batch_id = '$id' AND to_status = 'Submitting'"
    qw_sql "SELECT round(extract(epoch FROM s.at - e.at) * 1000)::int
              FROM queuer.batch_history s JOIN queuer.history e USING (batch_id)
             WHERE s.batch_id = '$id' AND s.to_status = 'Submitting' AND e.to_status = 'Enqueued'"
}

# Listening worker with a 5 s cycle: three enqueues at different moments of
# its cycle; each must be submitted far sooner than a cycle.
sc_worker_start w1 QUEUER_WORKER_CYCLE_MS=5000 QUEUER_WORKER_LEASE_MS=20000 \
    QUEUER_WORKER_HARD_EXPIRY_MS=60000
sc_wait_registered 10 w1
for line in 1 2 3; do
    ms=$(enqueue_and_measure "$line" 10)
    sc_log "listening worker: enqueue -> submit ${ms} ms"
    sc_check_num "wake-up latency (ms) is far below the 5000 ms cycle" "$ms" "<" 1000
    sleep 0.$((line * 3))
done
sc_worker_signal w1 TERM
sc_worker_wait_exit w1 20
sc_check "listening worker exit code" 0 "$SC_RC"

# Polling worker (listen off): still submits, within a cycle.
sc_worker_start w2 QUEUER_WORKER_LISTEN=false QUEUER_WORKER_CYCLE_MS=1500 \
    QUEUER_WORKER_LEASE_MS=20000 QUEUER_WORKER_HARD_EXPIRY_MS=60000
sc_wait_registered 10 w2
ms=$(enqueue_and_measure 4 10)
sc_log "polling worker: enqueue -> submit ${ms} ms (cycle 1500 ms)"
sc_check_num "polling worker submits within a cycle plus margin (ms)" "$ms" "<" 3000
sc_wait "everything final" 20 \
    "SELECT count(*) = 0 FROM queuer.batches WHERE status IS DISTINCT FROM 'Committed'"

# Pickup of hundreds. w3 (20 s cycles: its next full fetch is minutes
# away) is idle and live when 600 services with work appear that nobody
# holds (enqueued while its lease read as run out, so the enqueue gives
# them to no one; w3 is stopped meanwhile, so no lease renewal of its own
# comes between). w4 starts and picks up for both, 300 each: w3 is told
# their names and must fetch its 300 at once.
sc_worker_stop w2 20
sc_gen "$SC_DIR/pick.tsv" 600 1 11 qwpik
sc_worker_start w3 "${SC_SLOW_CYCLE[@]}" QUEUER_LOG_LEVEL=debug
sc_wait_registered 10 w3
# w3 registers, then runs its first claims cycle and a second one that its
# own joining NOTIFY wakes; stopped before either has run, it would run it
# on SIGCONT and pick the 600 up itself.
sc_wait_log w3 10 'event=claims\.done' 2
sc_worker_signal w3 STOP
# (a statement w3 sent before it stopped, a lease renewal say, still runs
# to its end: the lease is moved once none is running)
sc_wait "w3 stopped between statements" 10 \
    "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity
                         WHERE application_name = 'w3' AND state = 'active')"
qw_sql "UPDATE queuer.instances SET lease_1 = now() - interval '1 second' WHERE instance_id = 'w3'"
sc_load_tsv "$SC_DIR/pick.tsv"
sc_check_sql "the 600 services are free with work" 600 \
    "SELECT count(*) FROM queuer.service_id_claims WHERE claimant IS NULL AND has_work" \
    "SELECT claimant, has_work, count(*) FROM queuer.service_id_claims GROUP BY 1, 2"
qw_sql "UPDATE queuer.instances SET lease_1 = now() + interval '60 seconds' WHERE instance_id = 'w3'"
sc_worker_signal w3 CONT
sc_worker_start w4 QUEUER_WORKER_CYCLE_MS=500
sc_wait "every picked-up batch committed, w3's as well" 15 \
    "SELECT count(*) = 0 FROM queuer.batches WHERE status IS DISTINCT FROM 'Committed'"
sc_check_sql "w3 was given claims by pickup and submitted their batches" t \
    "SELECT count(*) >= 100 FROM queuer.batch_history
      WHERE to_status = 'Submitting' AND instance_id = 'w3'"
sc_worker_stop w3 20
sc_worker_stop w4 20
