#!/usr/bin/env bash
# A ledger that behaves like Splinter scabbard: scabbard-sim with three
# nodes, each answering from its own batch history (a node knows what was
# posted to it; the others learn a batch 500 ms after it commits), waits on
# unknown ids that hang for the whole wait, protocol 2 with a rate limit
# (429s). Two workers drain 30 services x 15 batches over all three nodes.
# Mid-run node 1 hangs for 10 s (every request held unanswered; half the
# POSTs it holds were taken first), and node 2 restarts (it forgets its
# history and the batches it had queued). Checks:
#   - every batch Committed; qw-check finds no violation (creation order at
#     the ledger, one batch in flight per service, every duplicate POST with
#     a recorded reason);
#   - no batch reached the ledger twice except after a node restart, and
#     every such batch has the confirmed Unknown of the node that forgot it
#     in its history;
#   - a status wait is bounded: no long poll was held past dlt.status_wait_s,
#     and no batch was recorded final more than the bound after the ledger
#     committed it (request timeout + status wait + propagation + 3 s
#     margin; node 1 hung for 10 s);
#   - the faults happened: 429s, hung requests on node 1, node 2's restart.
. "$(dirname "$0")/e2e_common.sh"

SERVICES=30
BATCHES=15
TOTAL=$((SERVICES * BATCHES))
TIMEOUT_MS=3000 # QUEUER_DLT_REQUEST_TIMEOUT_MS of E2E_WORKER_SETTINGS
WAIT_S=2        # QUEUER_DLT_STATUS_WAIT_S of E2E_WORKER_SETTINGS
PROPAGATION_MS=500
BOUND_MS=$((TIMEOUT_MS + WAIT_S * 1000 + PROPAGATION_MS + 3000))

e2e_db
e2e_workload "$SERVICES" "$BATCHES"
qw_sim_start "$E2E_DIR/sim" --listen 127.0.0.1:0 --listen 127.0.0.1:0 --commit-delay-ms 50 \
    --propagation-ms "$PROPAGATION_MS" --rate 150 --seed 7
IFS=, read -r NODE0 NODE1 NODE2 <<<"$QW_SIM_URLS"
[ -n "$NODE2" ] || e2e_fail "the simulator did not report three node addresses ($QW_SIM_URLS)"
e2e_log "ledger nodes: $QW_SIM_URLS; starting 2 workers"

committed() { qw_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'"; }
post_json() {
    curl -fsS -m 5 -X POST --data "$2" "$1" >/dev/null || e2e_fail "POST $1 $2 failed"
}

for w in w1 w2; do
    e2e_worker "$w" QUEUER_DLT_URL="$QW_SIM_URLS" QUEUER_DLT_UNKNOWN_CONFIRM_MS=500
done
qw_wait_sql 30 "SELECT count(*) >= $((TOTAL / 10)) FROM queuer.batches WHERE status = 'Committed'" ||
    e2e_fail "a tenth of the batches did not commit within 30 s"

e2e_log "node 1 hangs for 10 s ($(committed) of $TOTAL committed)"
post_json "$NODE1/_sim/faults" '{"fault-hang": 1}'
sleep 1
e2e_log "node 2 restarts ($(committed) of $TOTAL committed)"
post_json "$NODE0/_sim/nodes/2" '{"restart": true}'
sleep 9
post_json "$NODE1/_sim/faults" '{"reset": true}'
e2e_log "node 1 answers again ($(committed) of $TOTAL committed)"
e2e_assert "$(committed)" -lt "$TOTAL" "batches left when node 1 answered again (the run must outlast the faults)"
e2e_drain 60

# Every batch's final record against the ledger's commit, before the check
# stops PostgreSQL's users (the simulator's log stays).
qw_sql "SELECT batch_id, (extract(epoch FROM max(at)) * 1000000)::bigint
          FROM queuer.batch_history WHERE to_status = 'Committed' GROUP BY batch_id" \
    >"$E2E_DIR/recorded.txt"
qw_sql "SELECT batch_id FROM queuer.batch_history
         WHERE to_status = 'Unknown' AND detail LIKE '%reported Unknown for % ms (confirmed)%'" \
    >"$E2E_DIR/unknown_confirmed.txt"
e2e_check

e2e_assert "$(committed)" -eq "$TOTAL" "every batch Committed"
e2e_assert "${FIG[batches]}" -eq "$TOTAL" "qw-check saw every batch"
e2e_assert "${FIG[posts_429]}" -gt 0 "429s from the ledger"

# The ledger's side, from its event log.
python3 - "$QW_SIM_LOG" "$E2E_DIR/recorded.txt" "$E2E_DIR/unknown_confirmed.txt" "$WAIT_S" \
    "$BOUND_MS" >"$E2E_DIR/ledger_side.txt" <<'EOF' || e2e_fail "ledger-side checks: $(cat "$E2E_DIR/ledger_side.txt")"
import json, sys
log, recorded_file, unknown_file, wait_s, bound_ms = sys.argv[1:6]
wait_s, bound_ms = int(wait_s), int(bound_ms)
taken = {}        # batch -> times the ledger took it (202, or a lost answer it accepted)
restarts = []     # times of node restarts
dropped = 0       # batches the restarted node had queued (lost)
hung_gets = 0
longest_wait = 0
committed_at = {} # batch -> first commit time, us
bad = []
for line in open(log):
    e = json.loads(line)
    ev = e["ev"]
    if ev == "post" and e.get("batch") and (e["code"] == 202 or e.get("accepted")):
        taken.setdefault(e["batch"], []).append(e["t"])
    elif ev == "restart" and e.get("why") == "node":
        restarts.append(e["t"])
        dropped = e.get("dropped", 0)
    elif ev == "get":
        if e["code"] == "hang" and e.get("node") == 1:
            hung_gets += 1
        longest_wait = max(longest_wait, e.get("waited_ms", 0))
    elif ev == "status" and e["to"] == "Committed":
        committed_at.setdefault(e["batch"], e["t"])
unknown = set(l.strip() for l in open(unknown_file) if l.strip())
twice = 0
for b, ts in taken.items():
    for first, again in zip(ts, ts[1:]):
        twice += 1
        if not any(first < r < again for r in restarts):
            bad.append("batch %s reached the ledger again without a node restart in between" % b[:16])
        if b not in unknown:
            bad.append("batch %s reached the ledger again without a confirmed Unknown recorded" % b[:16])
lags = []
for line in open(recorded_file):
    b, at = line.strip().split("|")
    if b in committed_at:
        lags.append(((int(at) - committed_at[b]) // 1000, b))
worst = max(lags) if lags else (0, "")
if not restarts:
    bad.append("node 2 never restarted")
if not unknown:
    bad.append("no Unknown was confirmed: the restart made no node forget a batch in flight")
if hung_gets == 0:
    bad.append("no status query hung on node 1")
if longest_wait > wait_s * 1000 + 300:
    bad.append("a long poll was held %d ms, past the %d s wait" % (longest_wait, wait_s))
if worst[0] > bound_ms:
    bad.append("batch %s was recorded final %d ms after the ledger committed it (bound %d ms)"
               % (worst[1][:16], worst[0], bound_ms))
print("posted_again=%d restarts=%d dropped=%d unknown_confirmed=%d hung_gets=%d "
      "longest_wait_ms=%d worst_lag_ms=%d bound_ms=%d"
      % (twice, len(restarts), dropped, len(unknown), hung_gets, longest_wait, worst[0], bound_ms))
for m in bad[:10]:
    print(m)
sys.exit(1 if bad else 0)
EOF
e2e_log "ledger side: $(head -1 "$E2E_DIR/ledger_side.txt")"
e2e_log "figures: batches=$TOTAL posts=${FIG[posts]} 429s=${FIG[posts_429]}" \
    "duplicates=${FIG[duplicate_batches]} reasons=${FIG[resubmit_reasons]} violations=${FIG[violations]}"
e2e_log "PASS"
