#!/usr/bin/env bash
# The hostile suite: one worker against tests/hostile/ledger.py,
# a server standing in for the ledger that answers, mode after mode, what a
# ledger, a proxy in front of it or a broken deployment may send. For each
# mode a fresh workload is enqueued and the test checks what the worker
# recorded and logged while it was attacked, and that every batch still
# ends final: nothing lost, no crash, no wedged outcome group, no secret
# in a log line or a stored text.
#
#   invalid-jp   status answers Invalid with 280 Japanese characters: the
#                text is cut on a character boundary and recorded
#   html503-jp   POSTs answered 503 with a large Japanese HTML page
#   proxy400     POSTs answered by a proxy's HTML "400 Bad Request": a failed
#                attempt logged loudly, never a final Invalid
#   echo-token   error bodies echo the Authorization header: the token never
#                reaches a log line, last_error or the history
#   bad-status   batch_statuses answers truncated, nested 100,000 deep, or
#                over the size cap: counted, logged, noted in last_error
#   huge-post    a 202 with a 4 MiB body (over the cap): a failed attempt
set -euo pipefail
# shellcheck disable=SC2153 # QW_SOURCE_ROOT comes from the environment (meson test)
. "$QW_SOURCE_ROOT/tests/scenarios/e2e_common.sh"

TOKEN=hostile-canary-7f3a9c2e
PY=${PYTHON3:-python3}

e2e_db
mkdir -p "$E2E_DIR/ledger"
"$PY" "$QW_SOURCE_ROOT/tests/hostile/ledger.py" --port-file "$E2E_DIR/ledger/port" --fails 3 \
    >"$E2E_DIR/ledger/out.log" 2>&1 &
LEDGER_PID=$!
qw_wait_port_file "$E2E_DIR/ledger/port" "$LEDGER_PID" "$E2E_DIR/ledger/out.log" ||
    e2e_fail "the hostile ledger did not start"
QW_SIM_URL="http://127.0.0.1:$(cat "$E2E_DIR/ledger/port")"
export QW_SIM_URL
# shellcheck disable=SC2317 # called from the EXIT trap
stop_ledger() { qw_stop_pids 5 "$LEDGER_PID"; }
sc_on_exit stop_ledger

mode() {
    curl -sf -X POST --data "$1" "$QW_SIM_URL/_hostile/mode" >/dev/null || e2e_fail "cannot set mode $1"
}

# load PREFIX SERVICES BATCHES: a workload whose circuits start with PREFIX
# (its own seed, so batch ids never repeat across phases).
SEED=11
load() {
    SEED=$((SEED + 1))
    qw_gen "$E2E_DIR/$1.tsv" "$2" "$3" "$SEED" "$1"
    qw_load_tsv "$E2E_DIR/$1.tsv" >>"$E2E_DIR/load.log" 2>&1 || e2e_fail "loading $1 failed"
}

# final PREFIX SECS: waits until every batch of PREFIX is final.
final() {
    qw_wait_sql "$2" "SELECT count(*) = 0 FROM queuer.batches WHERE service_id LIKE '$1%'
                        AND (status IS NULL OR status NOT IN ('Committed', 'Valid', 'Invalid'))" ||
        e2e_fail "$1: not every batch became final within $2 s: $(qw_sql "SELECT coalesce(status,
                  CASE WHEN submitted THEN 'submitting' ELSE 'waiting' END) || '=' || count(*)
                  FROM queuer.batches WHERE service_id LIKE '$1%' GROUP BY 1")"
}

count() { qw_sql "$1"; }

metric() {
    curl -sf "http://127.0.0.1:$ADMIN_PORT/metrics" |
        awk -v m="$1" '$1 == m { print $2; found = 1 } END { if (!found) print 0 }'
}

# admin.listen takes no port 0: ask the kernel for a free port first.
ADMIN_PORT=$(qw_free_port)
e2e_worker w1 QUEUER_DLT_TOKEN=$TOKEN "QUEUER_ADMIN_LISTEN=127.0.0.1:$ADMIN_PORT" \
    QUEUER_DLT_MAX_RESPONSE_BYTES=1048576
qw_wait_sql 15 "SELECT EXISTS (SELECT 1 FROM queuer.instances WHERE instance_id = 'w1')" ||
    e2e_fail "the worker did not start: $(cat "$E2E_DIR/workers/w1.log")"
grep -q 'event=admin.listening' "$E2E_DIR/workers/w1.log" ||
    e2e_fail "the worker's admin server did not start"
LOG=$E2E_DIR/workers/w1.log

# --- invalid-jp: a status message of 280 Japanese characters
mode invalid-jp
load hjpiv 3 2
final hjpiv 60
e2e_assert "$(count "SELECT count(*) FROM queuer.batches WHERE service_id LIKE 'hjpiv%' AND status = 'Invalid'
                       AND last_error LIKE '%取引が無効です%' AND octet_length(last_error) <= 255")" \
    -eq 6 "invalid-jp: every batch Invalid with the (cut) Japanese message"
e2e_assert "$(grep -c 'event=outcomes.failed' "$LOG" || true)" -eq 0 "invalid-jp: no outcome write failed"

# --- html503-jp: 503 with a large non-ASCII HTML page
mode html503-jp
load h503j 3 2
final h503j 90
e2e_assert "$(count "SELECT count(*) FROM queuer.batches WHERE service_id LIKE 'h503j%' AND status = 'Committed'")" \
    -eq 6 "html503-jp: every batch Committed after the 503s"
e2e_assert "$(count "SELECT count(*) FROM queuer.batch_history h JOIN queuer.batches b USING (batch_id)
                      WHERE b.service_id LIKE 'h503j%' AND h.to_status = 'Delayed'
                        AND h.detail LIKE '%サービスは一時的に利用できません%retry in%'")" \
    -gt 0 "html503-jp: the 503 page is in the history, cut on a character boundary"

# --- proxy400: a proxy's HTML 400 is a failed attempt, not a verdict
# Right after the 503 phase: the worker logs at most one
# ledger.request_failed line a second per request type and kind, so the
# 503s' line must not hide the first 400's.
mode proxy400
load hp400 3 2
final hp400 90
e2e_assert "$(count "SELECT count(*) FROM queuer.batches WHERE service_id LIKE 'hp400%' AND status = 'Committed'")" \
    -eq 6 "proxy400: every batch Committed (none made Invalid by the proxy)"
grep -q 'level=error .*event=ledger.request_failed request=post kind=http_4xx.*http_status=400' "$LOG" ||
    e2e_fail "proxy400: the proxy's 400 was not logged loudly"

# --- echo-token: error bodies echoing the Authorization header
mode echo-token
load hecho 3 2
final hecho 90
e2e_assert "$(count "SELECT count(*) FROM queuer.batches WHERE last_error LIKE '%$TOKEN%'")" -eq 0 \
    "echo-token: the token is not in any last_error"
e2e_assert "$(count "SELECT count(*) FROM queuer.batch_history WHERE detail LIKE '%$TOKEN%'")" -eq 0 \
    "echo-token: the token is not in the history"
e2e_assert "$(count "SELECT count(*) FROM queuer.batch_history h JOIN queuer.batches b USING (batch_id)
                      WHERE b.service_id LIKE 'hecho%' AND h.detail LIKE '%Authorization: ***%'")" \
    -gt 0 "echo-token: the echoed header is recorded, masked"

# --- bad-status: malformed, deeply nested and oversized status answers
mode bad-status
load hbads 2 2
final hbads 120
e2e_assert "$(count "SELECT count(*) FROM queuer.batches WHERE service_id LIKE 'hbads%' AND status = 'Committed'")" \
    -eq 4 "bad-status: every batch Committed once the answers are sane"
e2e_assert "$(count "SELECT count(*) FROM queuer.batches WHERE service_id LIKE 'hbads%'
                       AND last_error LIKE 'status poll failed 3 times in a row%'")" \
    -gt 0 "bad-status: the failed polls are noted in last_error"
grep -q 'event=ledger.request_failed request=status kind=malformed' "$LOG" ||
    e2e_fail "bad-status: malformed status answers were not logged"
e2e_assert "$(metric 'queuer_ledger_failures_total{request="status",kind="malformed"}')" -gt 0 \
    "bad-status: malformed answers counted in /metrics"
e2e_assert "$(metric 'queuer_ledger_failures_total{request="status",kind="too_large"}')" -gt 0 \
    "bad-status: oversized answers counted in /metrics"

# --- a 202 with a body over the cap
mode huge-post
load hhuge 2 2
final hhuge 90
e2e_assert "$(count "SELECT count(*) FROM queuer.batches WHERE service_id LIKE 'hhuge%' AND status = 'Committed'")" \
    -eq 4 "huge-post: every batch Committed"
e2e_assert "$(metric 'queuer_ledger_failures_total{request="post",kind="too_large"}')" -gt 0 \
    "huge-post: oversized answers counted in /metrics"

# Still ready (outcomes are written), no secret and no sanitizer report in the log.
curl -sf "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null || e2e_fail "/readyz is not ready at the end"
e2e_assert "$(grep -c "$TOKEN" "$LOG" || true)" -eq 0 "the token never appears in the worker's log"
qw_worker_signal "$E2E_DIR/workers" w1 TERM
qw_worker_wait "$E2E_DIR/workers" w1 30 >"$E2E_DIR/w1.rc" || true
e2e_assert "$(cat "$E2E_DIR/w1.rc")" -eq 0 "the worker stops cleanly (exit 0)"
if grep -qE 'ERROR: (Address|Thread|UndefinedBehavior)Sanitizer|WARNING: ThreadSanitizer|runtime error:' "$LOG"; then
    e2e_fail "sanitizer report in the worker's log"
fi
e2e_log "PASS"
