#!/usr/bin/env bash
# Scenario: claims a worker acquires itself while it reads all its claims do
# not hold back its surplus. A claims cycle that reads every claim of the
# worker (at start, after a handover NOTIFY, after an outage, every 60th
# cycle) lets the fair share settle for two cycles when it finds claims it
# did not know of, since the others learn of claims handed over to us only
# with our next lease. The list it reads includes the claims acquired in the
# same transaction, and those used to count as handed over too: every such
# cycle that claimed new work then held back every release of surplus for
# two cycles (under W5, workers settled 51-53 s of 60).
#
# Here both workers' cycle is 20 s. w1 holds S services with work, then one
# transaction enqueues S more and sends a handover NOTIFY, so w1's next
# cycle reads all its claims and acquires the S new ones. w2 then joins and
# must hold 2S - share services within 8 s of its registration; with the
# old condition w1 kept its surplus for 2 x 20 s.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

S=20
B=25
SLACK=2
SHARE=$((S + SLACK)) # ceil(2S / 2) + slack
SLOW=("${SC_SLOW_CYCLE[@]}" "QUEUER_WORKER_CLAIM_SLACK=$SLACK")
sc_begin claims_settle
sc_pg_start
sc_sim_start --commit-delay-ms 200

sc_worker_start w1 "${SLOW[@]}"
sc_wait_registered 15 w1
sc_gen "$SC_DIR/first.tsv" $S $B
sc_load_tsv "$SC_DIR/first.tsv"
sc_wait "w1 holds the first $S services" 10 \
    "SELECT count(*) = $S FROM queuer.service_id_claims WHERE claimant = 'w1'"

# S more services, and the handover NOTIFY in the same transaction: w1 hears
# both at COMMIT and its cycle reads all its claims while acquiring them.
sc_gen "$SC_DIR/second.tsv" $S $B 2 qwnew
{
    echo "BEGIN;"
    echo "NOTIFY queuer_work, 'handover';"
    awk -F'\t' '{ printf "SELECT queuer.enqueue_batch('\''%s'\'', '\''%s'\'', decode('\''%s'\'', '\''hex'\''));\n", $1, $2, $3 }' \
        "$SC_DIR/second.tsv"
    echo "COMMIT;"
} >"$SC_DIR/second.sql"
qw_psql -f "$SC_DIR/second.sql" >/dev/null || sc_fail "cannot enqueue the second load"
sc_wait "w1 holds all $((2 * S)) services" 10 \
    "SELECT count(*) = $((2 * S)) FROM queuer.service_id_claims WHERE claimant = 'w1'"
sc_check_sql "w1 has work left for every service when w2 joins" $((2 * S)) \
    "SELECT count(DISTINCT service_id) FROM queuer.batches WHERE status IS NULL"

sc_worker_start w2 "${SLOW[@]}"
sc_wait_registered 15 w2
t_join=$(sc_db_now)
sc_wait "w2 holds 2S - share = $((2 * S - SHARE)) services or more" 8 \
    "SELECT count(*) >= $((2 * S - SHARE)) FROM queuer.service_id_claims WHERE claimant = 'w2'" \
    "SELECT claimant, count(*) FROM queuer.service_id_claims GROUP BY 1 ORDER BY 1"
sc_check_sql "w2 got them within 8 s of joining, before w1's settle of 2 x 20 s would end" t \
    "SELECT clock_timestamp() < '$t_join'::timestamptz + interval '8 seconds'"
sc_show "SELECT claimant, count(*) AS services FROM queuer.service_id_claims GROUP BY 1 ORDER BY 1"

sc_wait "every batch Committed" 60 \
    "SELECT count(*) = 0 FROM queuer.batches WHERE status IS DISTINCT FROM 'Committed'" \
    "SELECT status, count(*) FROM queuer.batches GROUP BY 1"
sc_check_order
sc_worker_stop w2 15
sc_worker_stop w1 15
