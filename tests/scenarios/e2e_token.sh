#!/usr/bin/env bash
# End to end with a ledger that requires a bearer token (scabbard-sim
# --token-file). A worker given the wrong token (QUEUER_DLT_TOKEN) says so
# loudly (level=error ledger.auth_refused), burns no attempts (attempts stays
# 0) and gets nothing Pending or Committed. Restarted with the right token
# (QUEUER_DLT_TOKEN) it drains everything; then a second worker that reads the
# token from dlt.token_file (a 0600 file named in its config file) drains a
# second workload. qw-check is clean, and neither token ever appears in a
# worker log.
. "$(dirname "$0")/e2e_common.sh"

SERVICES=20
SERVICES2=10
BATCHES=5
TOTAL=$((SERVICES * BATCHES))

mkdir -p "$E2E_DIR/secrets"
chmod 700 "$E2E_DIR/secrets"
TOKEN="right-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
WRONG="wrong-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
(umask 077 && printf '%s\n' "$TOKEN" >"$E2E_DIR/secrets/token")
cat >"$E2E_DIR/w2.cfg" <<CFG
dlt = {
  token_file = "$E2E_DIR/secrets/token";
};
CFG

e2e_db
e2e_workload "$SERVICES" "$BATCHES"
qw_sim_start "$E2E_DIR/sim" --commit-delay-ms 20 --token-file "$E2E_DIR/secrets/token"
e2e_log "sim at $QW_SIM_URL requires a bearer token; starting w1 with a wrong one"

# ---- a wrong token: loud, no attempt burnt, nothing submitted ---------------
e2e_worker w1 QUEUER_DLT_TOKEN="$WRONG"
refusals() { grep -c 'level=error .*event=ledger.auth_refused' "$E2E_DIR/workers/w1.log" || true; }
for _ in $(seq 1 300); do
    [ "$(refusals)" -ge 1 ] && break
    sleep 0.05
done
e2e_assert "$(refusals)" -ge 1 "w1 logs ledger.auth_refused at level=error"
grep -q 'hint="check dlt.token_file or QUEUER_DLT_TOKEN' "$E2E_DIR/workers/w1.log" ||
    e2e_fail "the auth error does not tell the operator what to check"
e2e_log "w1 refused: $(grep -m1 'event=ledger.auth_refused' "$E2E_DIR/workers/w1.log" | sed 's/.*event=//')"
# Stop it (a clean stop writes every outcome it holds), then look.
qw_worker_signal "$E2E_DIR/workers" w1 TERM
# not in $(...): only this shell can collect the worker's exit status
qw_worker_wait "$E2E_DIR/workers" w1 15 >"$E2E_DIR/w1.rc" || e2e_fail "w1 did not stop on SIGTERM"
e2e_assert "$(cat "$E2E_DIR/w1.rc")" -eq 0 "w1 exit status after SIGTERM"
rm -f "$E2E_DIR/workers/w1.pid"
attempts=$(qw_sql "SELECT coalesce(max(attempts), -1) FROM queuer.batches")
e2e_assert "$attempts" -eq 0 "attempts burnt with a wrong token"
submitted=$(qw_sql "SELECT count(*) FROM queuer.batches WHERE status IS NOT NULL OR submitted")
e2e_assert "$submitted" -eq 0 "batches left with a status or marked submitted by the refused worker"
forbidden=$(grep -c '"ev":"post".*"code":40[13]' "$QW_SIM_LOG" || true)
accepted=$(grep -c '"ev":"post".*"code":202' "$QW_SIM_LOG" || true)
e2e_assert "$forbidden" -ge 1 "POSTs the ledger refused (401/403)"
e2e_assert "$accepted" -eq 0 "POSTs accepted with a wrong token"

# ---- the right token from the environment: w1 drains everything ------------
e2e_log "restarting w1 with the right QUEUER_DLT_TOKEN"
e2e_worker w1 QUEUER_DLT_TOKEN="$TOKEN"
e2e_drain 30
by_w1=$(qw_sql "SELECT count(*) FROM queuer.batch_history WHERE instance_id = 'w1' AND to_status = 'Committed'")
e2e_assert "$by_w1" -eq "$TOTAL" "batches w1 committed after its restart"
qw_worker_signal "$E2E_DIR/workers" w1 TERM
qw_worker_wait "$E2E_DIR/workers" w1 15 >"$E2E_DIR/w1.rc" || e2e_fail "w1 did not stop on SIGTERM"
rm -f "$E2E_DIR/workers/w1.pid"

# ---- the right token from dlt.token_file: w2 drains a second workload -------
e2e_log "second workload ($SERVICES2 services x $BATCHES) for w2, token from dlt.token_file"
sc_gen "$E2E_DIR/workload2.tsv" "$SERVICES2" "$BATCHES" 8 qwtok
sc_load_tsv "$E2E_DIR/workload2.tsv"
e2e_worker w2 QUEUER_CONFIG="$E2E_DIR/w2.cfg"
e2e_drain 30
by_w2=$(qw_sql "SELECT count(*) FROM queuer.batch_history WHERE instance_id = 'w2' AND to_status = 'Committed'")
e2e_assert "$by_w2" -eq $((SERVICES2 * BATCHES)) "batches w2 (dlt.token_file) committed"
e2e_check

ALL=$((TOTAL + SERVICES2 * BATCHES))
committed=$(qw_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'")
e2e_assert "$committed" -eq "$ALL" "every batch Committed"
e2e_assert "${FIG[posts_202]}" -eq "$ALL" "one accepted POST per batch"
attempts=$(qw_sql "SELECT count(*) FROM queuer.batches WHERE attempts <> 1")
e2e_assert "$attempts" -eq 0 "batches with attempts <> 1 (the refused POSTs burnt none)"
if grep -F -l -e "$TOKEN" -e "$WRONG" "$E2E_DIR"/workers/*.log; then
    e2e_fail "a bearer token appears in a worker log"
fi
e2e_log "refused POSTs=$forbidden posts=${FIG[posts]} committed: w1=$by_w1 w2=$by_w2"
e2e_log "PASS"
