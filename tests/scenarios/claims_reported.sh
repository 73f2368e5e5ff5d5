#!/usr/bin/env bash
# Scenario: a worker reports a changed claim count at once. Each worker's
# fair share is computed from the claim counts the live workers reported
# with their leases (sql/claims_share.sql). A worker used to report its
# count only with its next lease, a cycle later: when workers started
# together, the others read its 0 after it had claimed its share, computed
# a share half as large and drained half of theirs for nothing (a W1 run
# with 2 workers took 4.9 s instead of 2.2). Now a claims cycle whose
# count moved by more than worker.claim_slack renews the lease with the
# new count at once.
#
# Here the worker's cycle is 20 s, so after its first cycle (at start, no
# work) its next lease is about 20 s away; the load's NOTIFY wakes it to
# claim the S services, and its reported count must follow within a few
# seconds.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

S=40
sc_begin claims_reported
sc_pg_start
sc_sim_start --commit-delay-ms 600000

sc_worker_start w1 "${SC_SLOW_CYCLE[@]}"
sc_wait_registered 15 w1
sc_check_sql "w1 reported no claims before the work" 0 \
    "SELECT claims_held FROM queuer.instances WHERE instance_id = 'w1'"

sc_gen "$SC_DIR/work.tsv" $S 2
sc_load_tsv "$SC_DIR/work.tsv"
t_load=$(sc_db_now)
sc_wait "w1 holds the $S services with work" 10 \
    "SELECT count(*) = $S FROM queuer.service_id_claims WHERE claimant = 'w1'"
sc_wait "w1's reported claim count follows" 5 \
    "SELECT claims_held = $S FROM queuer.instances WHERE instance_id = 'w1'" \
    "SELECT instance_id, claims_held, heartbeat_at FROM queuer.instances"
sc_check_sql "it was reported within 10 s of the load, before the next periodic cycle" t \
    "SELECT heartbeat_at < '$t_load'::timestamptz + interval '10 seconds'
       FROM queuer.instances WHERE instance_id = 'w1'"
