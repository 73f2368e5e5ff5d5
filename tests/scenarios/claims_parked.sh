#!/usr/bin/env bash
# Scenario: parked services do not crowd out live work. Two workers with
# worker.max_claims = 5 (ten claims in all) and dlt.max_attempts = 1. A
# ledger outage (half of all requests answered 5xx; a ledger that fails every
# request is marked down and gets no POSTs, which parks nothing) parks a
# batch of each of at least 20 of 24 services (Delayed, retry_at =
# infinity: it waits for an operator, and so does every later batch of its
# service). Once
# the ledger is back, 20 other services get fresh work: every one of their
# batches is final within 10 s of the ledger's return, although the parked
# services alone are twice what both workers may hold. The parked batches
# stay parked (nobody retries them) and are listed in queuer.stuck_batches
# and by `queuer status`.
. "$(dirname "$0")/lib_scenario.sh"
sc_begin claims_parked

PARKED=20 # at least this many services park, of PARKED_OF
PARKED_OF=24
FRESH=20
FRESH_BATCHES=4

sc_pg_start
sc_sim_start --commit-delay-ms 20
sc_gen "$SC_DIR/parked.tsv" $PARKED_OF 10 41 parkd
sc_gen "$SC_DIR/fresh.tsv" $FRESH $FRESH_BATCHES 42 fresh
PARKED_IN=$(sc_services_sql "$SC_DIR/parked.tsv")
FRESH_IN=$(sc_services_sql "$SC_DIR/fresh.tsv")

for w in w1 w2; do
    sc_worker_start $w QUEUER_WORKER_MAX_CLAIMS=5 QUEUER_DLT_MAX_ATTEMPTS=1
done
sc_wait_registered 20 w1 w2

# ---- the outage parks a batch of every one of the first 20 services
sc_sim_faults '{"fault-5xx": 0.5}'
sc_load_tsv "$SC_DIR/parked.tsv"
sc_wait "a batch of $PARKED services parked" 60 \
    "SELECT count(DISTINCT service_id) >= $PARKED FROM queuer.batches
      WHERE status = 'Delayed' AND retry_at = 'infinity' AND service_id IN ($PARKED_IN)" \
    "SELECT coalesce(status, '(none)') AS status, retry_at = 'infinity' AS parked, count(*)
       FROM queuer.batches GROUP BY 1, 2 ORDER BY 1, 2"
sc_show "SELECT claimant, count(*) AS claims FROM queuer.service_id_claims
          WHERE claimant IS NOT NULL GROUP BY 1 ORDER BY 1"

# ---- the ledger is back; fresh work for 20 other services
sc_sim_faults '{"reset": true}'
back=$(sc_db_now)
qw_sql "CREATE TABLE scenario.parked_then AS
        SELECT batch_id FROM queuer.batches WHERE status = 'Delayed' AND retry_at = 'infinity'" >/dev/null ||
    sc_fail "cannot remember the parked batches"
sc_load_tsv "$SC_DIR/fresh.tsv"
sc_wait "every fresh batch final" 20 \
    "SELECT count(*) = 0 FROM queuer.batches WHERE service_id IN ($FRESH_IN)
        AND (status IS NULL OR status NOT IN ('Committed', 'Valid', 'Invalid'))" \
    "SELECT c.claimant, count(*) FILTER (WHERE c.service_id IN ($PARKED_IN)) AS parked_held,
            count(*) FILTER (WHERE c.service_id IN ($FRESH_IN)) AS fresh_held
       FROM queuer.service_id_claims c WHERE c.claimant IS NOT NULL GROUP BY 1 ORDER BY 1"
last_ms=$(qw_sql "SELECT $(sc_ms "max(h.at) - '$back'::timestamptz")
                    FROM queuer.batch_history h JOIN queuer.batches b USING (batch_id)
                   WHERE b.service_id IN ($FRESH_IN) AND h.to_status IN ('Committed', 'Valid', 'Invalid')")
sc_log "the last of $((FRESH * FRESH_BATCHES)) fresh batches was final ${last_ms} ms after the ledger's return"
sc_check_sql "fresh batches Committed" $((FRESH * FRESH_BATCHES)) \
    "SELECT count(*) FROM queuer.batches WHERE service_id IN ($FRESH_IN) AND status = 'Committed'"
sc_check_num "the last fresh batch final after the ledger's return (ms)" "$last_ms" "<=" 10000

# ---- the parked ones stay parked, and operators see them
sc_check_sql "batches parked when the ledger came back that are not parked now" 0 \
    "SELECT count(*) FROM scenario.parked_then t JOIN queuer.batches b USING (batch_id)
      WHERE NOT (b.status = 'Delayed' AND b.retry_at = 'infinity')"
parked=$(qw_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Delayed' AND retry_at = 'infinity'")
sc_log "$parked services parked"
sc_check_num "services parked" "$parked" ">=" $PARKED
sc_check_sql "nothing behind them was submitted" 0 \
    "SELECT count(*) FROM queuer.batches b JOIN queuer.batches p USING (service_id)
      WHERE p.status = 'Delayed' AND p.retry_at = 'infinity' AND b.service_id IN ($PARKED_IN)
        AND (b.created_at, b.batch_id) > (p.created_at, p.batch_id)
        AND (b.submitted OR b.status IS NOT NULL OR b.attempts > 0)"
sc_check_sql "queuer.stuck_batches lists every parked batch" "$parked" \
    "SELECT count(*) FROM queuer.stuck_batches WHERE state = 'parked' AND service_id IN ($PARKED_IN)"
QUEUER_DATABASE_CONNINFO="$QW_PG_CONNINFO" "$QUEUER_BIN" status --json --stuck 100 >"$SC_DIR/status.json" ||
    sc_fail "queuer status --json failed"
listed=$(python3 -c 'import json, sys
print(sum(s["state"] == "parked" for s in json.load(open(sys.argv[1]))["stuck"]["longest"]))' "$SC_DIR/status.json")
sc_check "queuer status lists the parked batches" "$parked" "$listed"
for w in w1 w2; do
    sc_worker_stop $w 20
done
