#!/usr/bin/env bash
# Scenario: a worker that was only frozen (SIGSTOP, a paused VM) for longer
# than two leases is replaced by a new process with the same instance_id,
# which registers with a new incarnation and carries on with the claims.
# When the frozen one resumes, its fenced writes name the old incarnation
# and match nothing, and its next lease renewal finds itself superseded:
# it stops posting and exits with status 76 within about a lease. Every
# batch is posted once, in creation order, and no service is held by both.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

SC_LEASE_MS=2000
SC_HARD_MS=6000
SC_CYCLE_MS=500
sc_begin worker_twin_frozen
sc_pg_start
sc_sim_start --commit-delay-ms 20

sc_worker_start w1
sc_wait_registered 15 w1
sc_gen "$SC_DIR/work.tsv" 10 150
sc_load_tsv "$SC_DIR/work.tsv"
sc_wait "w1 is working on every service" 15 \
    "SELECT count(DISTINCT b.service_id) = 10 FROM queuer.batches b WHERE b.status = 'Committed'"
first=$(qw_sql "SELECT incarnation FROM queuer.instances WHERE instance_id = 'w1'")

sc_worker_signal w1 STOP
sc_log "w1 frozen (incarnation $first)"
sleep $((2 * SC_LEASE_MS / 1000 + 1)) # its heartbeat is two leases stale
sc_worker_start w1new QUEUER_WORKER_INSTANCE_ID=w1
sc_wait "a new process registered as w1 with a new incarnation" 15 \
    "SELECT incarnation <> $first FROM queuer.instances WHERE instance_id = 'w1'"
sc_wait "the new w1 posts again" 15 \
    "SELECT count(*) > 0 FROM queuer.batch_history h
      WHERE h.to_status = 'Committed' AND h.at > now() - interval '1 second'"

t_resume=$(sc_db_now)
sc_worker_signal w1 CONT
sc_log "the frozen w1 resumed"
sc_worker_wait_exit w1 $((2 * SC_LEASE_MS / 1000 + 2))
sc_check "the resumed process exits with status 76 (superseded)" 76 "$SC_RC"
sc_check_sql "it exited within a lease and a margin of resuming" t \
    "SELECT clock_timestamp() < '$t_resume'::timestamptz + interval '$((SC_LEASE_MS / 1000 + 3)) s'"
grep -q 'event=instance.superseded' "$SC_DIR/w1.log" ||
    sc_fail "the resumed process did not say it was superseded"
sc_check_sql "its registration is the new one's, still running" t \
    "SELECT incarnation <> $first AND stopped_at IS NULL FROM queuer.instances WHERE instance_id = 'w1'"

sc_wait_all_final 60
sc_sim_log_load
sc_check_sql "no batch reached the ledger twice" 0 \
    "SELECT count(*) FROM scenario.posts WHERE dup"
sc_check_order
sc_worker_stop w1new 15
"${QW_CHECK_BIN:-$SC_BUILD_ROOT/tools/qw-check}" --events "$QW_SIM_LOG" \
    --conninfo "$QW_PG_CONNINFO" >"$SC_DIR/check.out" 2>&1 ||
    { cat "$SC_DIR/check.out" >&2; sc_fail "qw-check found violations"; }
echo "ok: qw-check is clean (every batch final, one in flight per service, creation order)"
