#!/usr/bin/env bash
# Scenario: claims spread over three workers, each service with work held by
# exactly one live worker, and nothing held by a worker that stopped.
#
# The bound. Each worker acquires at most share - held services per cycle
# (src/queuer/claims.c), with its fair share (sql/claims_share.sql)
#     share = ceil(services_with_work / live_instances) + worker.claim_slack,
# and gives back claims above it that have no batch in flight
# (sql/claims_release_idle.sql); with every worker live before the work
# appears, none ever holds more than its share. With
# S = 60 services with work, L = 3 live workers and slack 4 (the default),
# share = 20 + 4 = 24: no worker holds more than 24 <= S/2 = 30, and as all
# 60 are held, the two others hold at most 48, so each holds at least
# 60 - 48 = 12 >= S/6 = 10. After one worker stops (L = 2), share = 34, so
# each of the two holds between 60 - 34 = 26 and 34.
# The batches stay Pending (the ledger's commits take minutes), so the work
# stays and no claim is released for lack of work.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

S=60
SLACK=4
sc_begin worker_spread
sc_pg_start
sc_sim_start --commit-delay-ms 600000

for w in w1 w2 w3; do
    sc_worker_start "$w" QUEUER_WORKER_CLAIM_SLACK=$SLACK
done
# All three must count as live before the work appears: a worker alone
# would compute a share of the whole workload.
sc_wait_registered 15 w1 w2 w3

sc_gen "$SC_DIR/work.tsv" $S 2
sc_load_tsv "$SC_DIR/work.tsv"

sc_wait "all $S services with work claimed, each with a batch Pending" 20 \
    "SELECT count(*) = $S FROM queuer.service_id_claims c
      WHERE c.claimant IS NOT NULL
        AND EXISTS (SELECT 1 FROM queuer.batches b WHERE b.service_id = c.service_id AND b.status = 'Pending')" \
    "SELECT claimant, count(*) FROM queuer.service_id_claims GROUP BY 1 ORDER BY 1"

# A few more cycles of every worker, so any rebalancing has happened.
t0=$(sc_db_now)
sc_wait "three more cycles of every worker" 10 \
    "SELECT bool_and(heartbeat_at > '$t0'::timestamptz + 3 * $SC_CYCLE_MS * interval '1 millisecond')
       FROM queuer.instances WHERE instance_id IN ('w1', 'w2', 'w3')"

sc_show "SELECT claimant, count(*) AS services FROM queuer.service_id_claims GROUP BY 1 ORDER BY 1"
max_share=$(( (S + 2) / 3 + SLACK ))
for w in w1 w2 w3; do
    n=$(qw_sql "SELECT count(*) FROM queuer.service_id_claims WHERE claimant = '$w'")
    sc_check_num "$w holds at least S/6 of the services" "$n" ">=" $((S / 6))
    sc_check_num "$w holds at most S/2 of the services" "$n" "<=" $((S / 2))
    sc_check_num "$w holds at most its fair share" "$n" "<=" $max_share
done
sc_check_sql "every service with work is held by one of the live workers" $S \
    "SELECT count(*) FROM queuer.service_id_claims c
       JOIN queuer.instances i ON i.instance_id = c.claimant AND i.stopped_at IS NULL
      WHERE EXISTS (SELECT 1 FROM queuer.batches b WHERE b.service_id = c.service_id
                      AND (b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed')))"
sc_check_sql "no Pending batch belongs to a service nobody holds" 0 \
    "SELECT count(*) FROM queuer.batches b
       LEFT JOIN queuer.service_id_claims c ON c.service_id = b.service_id
      WHERE b.status = 'Pending' AND c.claimant IS NULL"
sc_sim_log_load
sc_check_sql "the ledger got one POST per service, of its oldest batch" "$S|$S|1" \
    "SELECT count(*), count(DISTINCT service_id), max(pos) FROM scenario.posts"

# One worker stops: its services go to the two others, none stays with it.
sc_worker_stop w3 15
sc_check_sql "w3 is marked stopped" t \
    "SELECT stopped_at IS NOT NULL FROM queuer.instances WHERE instance_id = 'w3'"
sc_wait "all $S services held by w1 and w2" 10 \
    "SELECT count(*) = $S FROM queuer.service_id_claims WHERE claimant IN ('w1', 'w2')" \
    "SELECT claimant, count(*) FROM queuer.service_id_claims GROUP BY 1 ORDER BY 1"
sc_check_sql "no service is held by the stopped worker" 0 \
    "SELECT count(*) FROM queuer.service_id_claims c
       JOIN queuer.instances i ON i.instance_id = c.claimant
      WHERE i.stopped_at IS NOT NULL"
max_share=$(( (S + 1) / 2 + SLACK ))
for w in w1 w2; do
    n=$(qw_sql "SELECT count(*) FROM queuer.service_id_claims WHERE claimant = '$w'")
    sc_check_num "$w holds at most its fair share of two" "$n" "<=" $max_share
    sc_check_num "$w holds at least S minus the other's share" "$n" ">=" $((S - max_share))
done
sc_show "SELECT claimant, count(*) AS services FROM queuer.service_id_claims GROUP BY 1 ORDER BY 1"
sc_sim_log_load
sc_check_sql "adopting the stopped worker's Pending batches posted nothing again" "$S|$S" \
    "SELECT count(*), count(DISTINCT service_id) FROM scenario.posts"
