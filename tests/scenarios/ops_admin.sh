#!/usr/bin/env bash
# The admin endpoints of a running worker, the operator commands next to
# it, and prune while it works.
#
#  - /healthz answers 200 at once; /readyz turns 200 after the first cycle.
#  - 16 slow clients trickling header lines do not keep /healthz from
#    answering within 2 s; the worker closes them (admin.slow_client).
#  - After a workload with injected 429s drains, /metrics is well-formed
#    Prometheus text and its counters match what happened: batches
#    Committed, POSTs accepted, and exactly as many backpressure outcomes as
#    the simulator's event log shows 429 answers; the histograms observed
#    cycles and POSTs.
#  - `queuer status` (table and --json) shows the live worker and its claims.
#  - `queuer prune --older-than 1s` runs in a loop while a second workload is
#    processed: every batch still ends Committed, no worker error.
#  - With PostgreSQL stopped /readyz says "database unreachable" (503) while
#    /healthz stays 200; after a restart /readyz is 200 again.
#  - A second worker asking for the same admin port refuses to start (78).
. "$(dirname "$0")/lib_scenario.sh"
sc_begin ops_admin

get() { curl -sS -m 5 -o "$SC_DIR/body" -w '%{http_code}' "http://127.0.0.1:$PORT$1" 2>/dev/null; }
body() { cat "$SC_DIR/body"; }
# metric NAME{LABELS}: the sample's value (empty when absent)
metric() { awk -v k="$1" '$1 == k { print $2 }' "$SC_DIR/metrics"; }
wait_http() { # PATH CODE SECS
    local code=
    for _ in $(seq 1 $(($3 * 10))); do
        code=$(get "$1")
        [ "$code" = "$2" ] && return 0
        sleep 0.1
    done
    sc_fail "GET $1: $code, waited ${3}s for $2 ($(body 2>/dev/null))"
}

sc_pg_start
sc_sim_start --commit-delay-ms 5 --fault-429 0.2 --seed 7
PORT=$(qw_free_port)
sc_worker_start w1 QUEUER_ADMIN_LISTEN="127.0.0.1:$PORT" QUEUER_DLT_PAUSE_BASE_MS=5 \
    QUEUER_DLT_PAUSE_MAX_MS=50
sc_wait_log w1 20 'event=worker.started'
sc_wait_log w1 20 'event=admin.listening'

sc_check "GET /healthz" 200 "$(get /healthz)"
sc_check "/healthz body" ok "$(body)"
wait_http /readyz 200 10
sc_check "/readyz body" ready "$(body)"

# Slow clients: 16 connections that send a header line every 3 s and never
# finish their request (reconnecting when dropped) must not keep /healthz
# from answering within 2 s; the worker closes them and says so at warn.
python3 - "$PORT" <<'PY' || sc_fail "slow clients kept /healthz from answering"
import socket, sys, time, urllib.request
port = int(sys.argv[1])
def slow():
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    return s
socks = [slow() for _ in range(16)]
end = time.time() + 10
next_line = time.time() + 3
probes = fails = 0
while time.time() < end:
    if time.time() >= next_line:
        for i, s in enumerate(socks):
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                socks[i] = slow()
        next_line = time.time() + 3
    probes += 1
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            fails += r.status != 200
    except Exception:
        fails += 1
    time.sleep(1)
print(f"slow clients: {probes} /healthz probes, {fails} failed")
sys.exit(1 if fails else 0)
PY
sc_check "slow clients logged" 1 "$(grep -c -m1 'event=admin.slow_client' "$SC_DIR/w1.log")"

sc_gen "$SC_DIR/w.tsv" 5 10 11 admin
sc_load_tsv "$SC_DIR/w.tsv"
sc_wait_all_final 60
sc_check_sql "first workload Committed" 50 "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'"

sc_check "GET /metrics" 200 "$(get /metrics)"
cp "$SC_DIR/body" "$SC_DIR/metrics"
bad=$(grep -v '^#' "$SC_DIR/metrics" |
      grep -Evc '^[a-z_:][a-z0-9_:]*(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[0-9.e+]+$' || true)
sc_check "malformed sample lines in /metrics" 0 "$bad"
grep -q "^queuer_build_info{version=\"[^\"]*\",instance_id=\"w1\"} 1$" "$SC_DIR/metrics" ||
    sc_fail "no build_info for w1"
sc_check_num "Committed counted" "$(metric 'queuer_batch_statuses_total{status="Committed"}')" ">=" 50
sc_check_num "accepted POSTs" "$(metric 'queuer_submissions_total{outcome="accepted"}')" ">=" 50
got429=$(grep -c '"ev":"post".*"code":429' "$QW_SIM_LOG" || true)
sc_check_num "429s injected by the simulator" "$got429" ">" 0
sc_check "backpressure outcomes = 429s in the simulator log" "$got429" \
    "$(metric 'queuer_submissions_total{outcome="backpressure"}')"
posts=$(grep -c '"ev":"post"' "$QW_SIM_LOG" || true)
sc_check "POST latencies observed = POSTs the simulator answered" "$posts" \
    "$(metric 'queuer_ledger_request_duration_seconds_count')"
sc_check_num "cycles observed" "$(metric 'queuer_cycle_duration_seconds_count')" ">" 0
sc_check "+Inf bucket = count" "$(metric 'queuer_cycle_duration_seconds_count')" \
    "$(metric 'queuer_cycle_duration_seconds_bucket{le="+Inf"}')"
for m in queuer_claims_held queuer_in_flight_batches queuer_delayed_services queuer_ledger_paused \
    queuer_serialization_retries_total queuer_last_cycle_age_seconds; do
    [ -n "$(metric "$m")" ] || sc_fail "/metrics lacks $m"
done
echo "---- /metrics excerpt"
grep -E '^queuer_(submissions_total|batch_statuses_total|claims_held|in_flight|ledger_paused|cycle_duration_seconds_(count|sum))' \
    "$SC_DIR/metrics"

"$QUEUER_BIN" status >"$SC_DIR/status.out" 2>&1 || sc_fail "queuer status: $(cat "$SC_DIR/status.out")"
echo "---- queuer status"
cat "$SC_DIR/status.out"
"$QUEUER_BIN" status --json >"$SC_DIR/status.json" || sc_fail "queuer status --json failed"
sc_check "w1 in status --json" alive \
    "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print([i["state"] for i in d["instances"] if i["instance_id"] == "w1"][0])' "$SC_DIR/status.json")"

# prune in a loop while a second workload runs
# long enough (5 x 60 batches) that several prune runs overlap the work
sc_gen "$SC_DIR/w2.tsv" 5 60 12 adprn
sc_load_tsv "$SC_DIR/w2.tsv"
prunes=0
for _ in $(seq 1 600); do
    "$QUEUER_BIN" prune --older-than 1s --batch-size 5 >>"$SC_DIR/prune.out" 2>&1 ||
        sc_fail "prune failed while the worker ran: $(tail -3 "$SC_DIR/prune.out")"
    prunes=$((prunes + 1))
    [ "$(qw_sql "SELECT count(*) FROM queuer.batches WHERE status IS NULL OR status NOT IN ('Committed', 'Valid', 'Invalid')")" = 0 ] && break
    sleep 0.1
done
sc_wait_all_final 60
sc_check_num "prune runs while the worker worked" "$prunes" ">" 1
sc_check_sql "no batch ended other than Committed" 0 \
    "SELECT count(*) FROM queuer.batches WHERE status <> 'Committed'"
sc_check_num "batches pruned meanwhile" \
    "$(awk '{ for (i = 1; i < NF; i++) if ($i == "removed") n += $(i + 1) } END { print n + 0 }' "$SC_DIR/prune.out")" ">" 0
sc_check_sql "every remaining batch kept its Submitting history row" 0 \
    "SELECT count(*) FROM queuer.batches b WHERE NOT EXISTS (SELECT 1 FROM queuer.batch_history h
       WHERE h.batch_id = b.batch_id AND h.to_status = 'Submitting')"
sc_check "worker errors while prune ran" 0 "$(grep -c 'level=error' "$SC_DIR/w1.log" || true)"

# the database goes away and comes back
qw_pg_stop fast
sc_check "GET /healthz with the database down" 200 "$(get /healthz)"
wait_http /readyz 503 15
case "$(body)" in
"database unreachable"* | "last claims cycle"*) echo "ok: /readyz says: $(body)" ;;
*) sc_fail "unexpected /readyz body: $(body)" ;;
esac
qw_pg_start "$SC_DIR/pg" || sc_fail "PostgreSQL did not restart"
wait_http /readyz 200 30

# a second worker on the same port
sc_worker_start w2 QUEUER_ADMIN_LISTEN="127.0.0.1:$PORT"
sc_worker_wait_exit w2 20
sc_check "second worker on the same admin port exits" 78 "$SC_RC"
grep -q 'admin.listen' "$SC_DIR/w2.log" || sc_fail "w2 does not name admin.listen: $(tail -3 "$SC_DIR/w2.log")"

sc_worker_signal w1 TERM
sc_worker_wait_exit w1 20
sc_check "w1 exit status" 0 "$SC_RC"
sc_check "admin port closed after exit" 000 "$(get /healthz)"
