#!/usr/bin/env bash
# Scenario: a second live process with the same worker.instance_id
# is refused (it would share claimant and epoch, so fencing could not tell
# the two apart), while a worker restarted on the same host after a crash
# (kill -9) takes its id over at once.
. "$(dirname "$0")/e2e_common.sh"

e2e_db
e2e_workload 10 5
qw_sim_start "$E2E_DIR/sim" --commit-delay-ms 20
e2e_worker w1
qw_wait_sql 15 "SELECT EXISTS (SELECT 1 FROM queuer.instances WHERE instance_id = 'w1'
                                  AND stopped_at IS NULL)" || e2e_fail "w1 did not register"

# The twin: same instance id, another process.
e2e_worker twin QUEUER_WORKER_INSTANCE_ID=w1
# (qw_worker_wait must run in this shell to wait for its child)
qw_worker_wait "$E2E_DIR/workers" twin 20 >"$E2E_DIR/twin.rc" || true
rc=$(cat "$E2E_DIR/twin.rc")
e2e_log "the twin exited with $rc"
e2e_assert "$rc" -eq 78 "a second live w1 is refused (exit 78, configuration)"
grep -q "is in use by a live worker" "$E2E_DIR/workers/twin.log" ||
    e2e_fail "the twin's refusal does not say why: $(cat "$E2E_DIR/workers/twin.log")"
kill -0 "$(cat "$E2E_DIR/workers/w1.pid")" || e2e_fail "w1 died"
e2e_drain 60

# A crash and an immediate restart on this host: the id is taken over.
qw_worker_signal "$E2E_DIR/workers" w1 KILL
qw_worker_wait "$E2E_DIR/workers" w1 10 >/dev/null || true
rm -f "$E2E_DIR/workers/w1.pid"
e2e_worker w1
qw_wait_sql 15 "SELECT EXISTS (SELECT 1 FROM queuer.instances WHERE instance_id = 'w1'
                                  AND stopped_at IS NULL AND started_at > now() - interval '15 s'
                                  AND heartbeat_at > started_at)" ||
    e2e_fail "the restarted w1 did not register: $(tail -5 "$E2E_DIR/workers/w1.log")"
grep -q "event=instance.taken_over" "$E2E_DIR/workers/w1.log" ||
    e2e_fail "the restarted w1 did not say it took over its id"
"$QUEUER_GEN_BIN" --services 3 --batches 2 --seed 8 --circuit-prefix again >"$E2E_DIR/again.tsv"
qw_load_tsv "$E2E_DIR/again.tsv" >"$E2E_DIR/load2.log" 2>&1 || e2e_fail "loading more work failed"
e2e_drain 60
e2e_log "PASS"
