#!/usr/bin/env bash
# Shared ledger capacity against a ledger that refuses above a
# node-wide queue and a node-wide rate: scabbard-sim --global-limit 40
# --global-resume 20 --rate 300 (the seed's 30/15 queue over the whole
# node, and a finite rate) and 150 ms per commit, so that both the queue
# and the rate bind. Three workers drain 120 services x 5 batches twice:
#   1. without a capacity: the workers know nothing of each other and the
#      ledger answers 429 (the test asserts it does, or it proves nothing);
#   2. with `queuer capacity set --max-in-flight 36 --per-second 285`: the
#      ledger never holds more than 36 pending batches (checked on the
#      ledger's side: the simulator's high-water mark of its node queue), never
#      refuses for its queue, refuses at most 1% of POSTs for its rate, and
#      the workers' partitions add up to the capacity.
# Both runs: every batch Committed, POSTs in creation order per service.
# Then `capacity clear` lifts the limit within a step, and a lapsed worker's
# partitions are free after its lease. The workers log in as a member of
# queuer_worker (as in production), so every lease statement passes the
# role checks of migration 0009.
. "$(dirname "$0")/lib_scenario.sh"

SERVICES=120
BATCHES=5
TOTAL=$((SERVICES * BATCHES))
SIM_ARGS=(--commit-delay-ms 150 --global-limit 40 --global-resume 20 --rate 300 --queue-high 30
          --queue-low 15)

sc_begin capacity
sc_pg_start
qw_sql "CREATE ROLE cap_worker LOGIN IN ROLE queuer_worker" >/dev/null ||
    sc_fail "cannot create the worker role"

stats() { curl -fsS -m 5 "$QW_SIM_URL/_sim/stats"; }
stat_of() { stats | python3 -c "import json,sys; d=json.load(sys.stdin); print(eval('d' + sys.argv[1]))" "$1"; }

# run NAME SEED: a fresh simulator, a fresh workload, three workers, drained.
run() {
    local name=$1 seed=$2 w
    qw_sim_stop
    rm -f "$SC_DIR/sim/sim.ndjson" # the event log appends: one run each
    sc_sim_start "${SIM_ARGS[@]}"
    sc_gen "$SC_DIR/$name.tsv" "$SERVICES" "$BATCHES" "$seed" "cap$seed"
    qw_sql "TRUNCATE queuer.batch_history, queuer.batches, queuer.service_id_claims,
                     queuer.service_ingest" >/dev/null
    sc_load_tsv "$SC_DIR/$name.tsv"
    for w in w1 w2 w3; do
        sc_worker_start "$name-$w" QUEUER_WORKER_CYCLE_MS=200 \
            QUEUER_DATABASE_CONNINFO="$QW_PG_CONNINFO user=cap_worker application_name=$name-$w"
    done
    sc_wait_all_final 120
    sc_check_sql "$name: every batch Committed" "$TOTAL" \
        "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'"
    sc_check_order
    POSTS=$(stat_of "['posts']['202'] + d['posts']['429']")
    REFUSED_GLOBAL=$(stat_of "['refused']['global']")
    REFUSED_RATE=$(stat_of "['refused']['rate']")
    MAX_PENDING=$(stat_of "['max_queued_total']")
    sc_log "$name: POSTs=$POSTS refused_global=$REFUSED_GLOBAL refused_rate=$REFUSED_RATE max_pending_at_ledger=$MAX_PENDING"
}

# 1. Without capacity the workers overrun the node.
run nocap 11
sc_check_num "without capacity the ledger answers 429 (node queue or rate)" \
    "$((REFUSED_GLOBAL + REFUSED_RATE))" ">" 0
qw_workers_stop "$SC_DIR"

# 2. With capacity: set it while no worker runs, then the same load.
"$QUEUER_BIN" capacity set --max-in-flight 36 --per-second 285 --partition-size 4 \
    >"$SC_DIR/set.out" 2>&1 || { cat "$SC_DIR/set.out"; sc_fail "capacity set failed"; }
sc_check_sql "9 partitions adding up to 36 in flight and 285 a second" "9|36|285" \
    "SELECT count(*) || '|' || sum(in_flight) || '|' || sum(per_second)
       FROM queuer.capacity_partitions"
run cap 12
sc_check_sql "the workers are logged in as cap_worker (a queuer_worker member)" t \
    "SELECT count(*) >= 6 FROM pg_stat_activity WHERE usename = 'cap_worker'"
sc_check "no lease step failed (none refused by the role checks)" 0 \
    "$(cat "$SC_DIR"/cap-w*.log | grep -c 'event=capacity.step_failed' || true)"
sc_check_num "with capacity the node queue never passed the capacity" "$MAX_PENDING" "<=" 36
sc_check_num "with capacity no refusal for a full node queue" "$REFUSED_GLOBAL" "==" 0
sc_check_num "with capacity 429s for the rate <= 1% of POSTs" "$((REFUSED_RATE * 100))" "<=" "$POSTS"
sc_check_sql "every worker published its target" 3 \
    "SELECT count(*) FROM queuer.capacity_instance_overview WHERE state = 'live'"
grep -h 'event=capacity.changed' "$SC_DIR"/cap-w*.log | head -3
"$QUEUER_BIN" capacity show --json >"$SC_DIR/show.json" || sc_fail "capacity show failed"
sc_check "capacity show lists the three workers" 3 \
    "$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['ledgers'][0]['instances']))" "$SC_DIR/show.json")"

"$QUEUER_BIN" status --json >"$SC_DIR/status.json" || sc_fail "queuer status failed"
sc_check "queuer status shows the shared capacity of the three workers" 3 \
    "$(python3 -c "import json,sys; print(sum(1 for i in json.load(open(sys.argv[1]))['instances'] if i.get('capacity')))" "$SC_DIR/status.json")"
"$QUEUER_BIN" status | grep -q 'SHARED CAPACITY' || sc_fail "queuer status has no SHARED CAPACITY column"

# 3. A change is picked up within a step: clear lifts the limit.
"$QUEUER_BIN" capacity clear >/dev/null || sc_fail "capacity clear failed"
for w in w1 w2 w3; do
    sc_wait_log "cap-$w" 5 'event=capacity.cleared'
done
sc_log "all workers saw the clear"

# 4. A killed worker's partitions are free after its lease; the others take them.
"$QUEUER_BIN" capacity set --max-in-flight 36 --partition-size 4 >/dev/null ||
    sc_fail "capacity set failed"
sc_gen "$SC_DIR/more.tsv" "$SERVICES" 20 13 cap13
qw_sql "TRUNCATE queuer.batch_history, queuer.batches, queuer.service_id_claims,
                 queuer.service_ingest" >/dev/null
sc_load_tsv "$SC_DIR/more.tsv"
sc_wait "every worker holds partitions" 10 \
    "SELECT count(DISTINCT holder) = 3 FROM queuer.capacity_overview WHERE state = 'held'" \
    "SELECT holder, count(*) FROM queuer.capacity_overview GROUP BY 1"
victim_parts=$(qw_sql "SELECT count(*) FROM queuer.capacity_overview WHERE state = 'held' AND holder = 'cap-w1'")
sc_worker_kill cap-w1
killed_at=$(sc_db_now)
sc_wait "the killed worker's partitions are taken by the others" 15 \
    "SELECT count(*) = 0 FROM queuer.capacity_partitions WHERE holder = 'cap-w1' AND expiry > now()
        AND (SELECT count(*) FROM queuer.capacity_overview WHERE state = 'held') = 9" \
    "SELECT partition_no, state, holder, expiry FROM queuer.capacity_overview ORDER BY 1"
taken_ms=$(qw_sql "SELECT $(sc_ms "clock_timestamp() - '$killed_at'::timestamptz")")
sc_log "cap-w1 held $victim_parts partitions; all 9 held by the others $taken_ms ms after the kill"
sc_check_num "taken over within a lease and a few steps" "$taken_ms" "<=" $((SC_LEASE_MS + 1500))
