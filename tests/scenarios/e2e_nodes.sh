#!/usr/bin/env bash
# Several ledger nodes: scabbard-sim serves one ledger on three
# addresses, node 1 answering 150 ms late; two workers with dlt.url listing
# all three drain 40 services x 100 batches. Mid-run node 0 turns slow (its
# POSTs are accepted but answered 2 s late) and is taken down for 3 s
# (its connections refused or cut: the POSTs in flight lose their answers,
# its long polls end), then comes back. Checks:
#   - every batch Committed; qw-check finds no violation (order kept, one
#     batch in flight per service, every duplicate POST with a reason);
#   - the POSTs that lost their answers were followed by their status on
#     another node and never resent: each such batch reached the ledger
#     exactly once;
#   - the slow node got at most 20% of the POSTs;
#   - the workers saw node 0 suspect, then up again, and sent it POSTs
#     after it came back, without a restart;
#   - `queuer status` (table and --json) shows each worker's view of the
#     three nodes.
. "$(dirname "$0")/e2e_common.sh"

SERVICES=40
BATCHES=100
TOTAL=$((SERVICES * BATCHES))

e2e_db
e2e_workload "$SERVICES" "$BATCHES"
qw_sim_start "$E2E_DIR/sim" --commit-delay-ms 100 --listen 127.0.0.1:0 --listen 127.0.0.1:0 \
    --node-latency-ms 1:150
IFS=, read -r _ _ NODE2 <<<"$QW_SIM_URLS"
[ -n "$NODE2" ] || e2e_fail "the simulator did not report three node addresses ($QW_SIM_URLS)"
e2e_log "ledger nodes: $QW_SIM_URLS (node 1 +150 ms); starting 2 workers"

# The control routes of a node that is down answer nothing: use node 2's.
node_set() {
    curl -fsS -m 5 -X POST --data "$2" "$NODE2/_sim/nodes/$1" >/dev/null ||
        e2e_fail "cannot change node $1 ($2)"
}
# node_posts I: POSTs node I has received so far.
node_posts() {
    curl -fsS -m 5 "$NODE2/_sim/nodes" | python3 -c "import json,sys; print(json.load(sys.stdin)[$1]['posts'])"
}
final_count() {
    qw_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'"
}

for w in w1 w2; do
    e2e_worker "$w" QUEUER_DLT_URL="$QW_SIM_URLS"
done
qw_wait_sql 60 "SELECT count(*) >= $((TOTAL / 10)) FROM queuer.batches WHERE status = 'Committed'" ||
    e2e_fail "a tenth of the batches did not commit within 60 s"

# What every worker reports about the nodes, while they run.
qw_wait_sql 15 "SELECT count(*) = 6 FROM queuer.ledger_nodes" ||
    e2e_fail "the workers did not report their view of the three nodes"
"$QUEUER_BIN" status >"$E2E_DIR/status.txt" 2>&1 || e2e_fail "queuer status failed: $(cat "$E2E_DIR/status.txt")"
grep -q '^ledger nodes' "$E2E_DIR/status.txt" || e2e_fail "queuer status shows no ledger nodes: $(cat "$E2E_DIR/status.txt")"
rows=$(grep -cE "^ *(w1|w2) +[0-2] +http://127\.0\.0\.1:[0-9]+ +up" "$E2E_DIR/status.txt" || true)
e2e_assert "$rows" -eq 6 "queuer status: a line per worker and node, all up"
"$QUEUER_BIN" status --json >"$E2E_DIR/status.json" 2>&1 || e2e_fail "queuer status --json failed"
json_nodes=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(len(d['ledger_nodes']))" \
    "$E2E_DIR/status.json")
e2e_assert "$json_nodes" -eq 6 "queuer status --json: ledger_nodes"

# Node 0 slows down, then goes away with POSTs in flight, then comes back.
e2e_log "node 0: slow, then down for 3 s ($(final_count) of $TOTAL committed)"
# Down as soon as node 0 has taken a POST since it slowed down (its answer
# is then held for 2 s): a fixed pause before the outage sometimes found
# only status polls in flight there, and no POST lost its answer. The hold
# must outlast this loop's polling and node_set under load: with 400 ms,
# the outage came 462 ms after the slowdown in one CI run (curl and python
# per poll), the POST had been answered, and no POST lost its answer.
node_set 0 '{"latency_ms": 2000}'
slow_from=$(node_posts 0)
for _ in $(seq 1 200); do
    [ "$(node_posts 0)" -gt "$slow_from" ] && break
    sleep 0.02
done
[ "$(node_posts 0)" -gt "$slow_from" ] || e2e_fail "node 0 got no POST while slow"
node_set 0 '{"up": false}'
sleep 3
before_up=$(node_posts 0)
node_set 0 '{"up": true, "latency_ms": 0}'
e2e_log "node 0 is back ($(final_count) of $TOTAL committed)"
e2e_assert "$(final_count)" -lt "$TOTAL" "batches left after node 0 came back (the run must outlast the outage)"
e2e_drain 120
after=$(node_posts 0)
slow=$(node_posts 1)
all=$(($(node_posts 0) + slow + $(node_posts 2)))
e2e_log "POSTs per node: 0=$after 1=$slow 2=$(node_posts 2); node 0 after its return: $((after - before_up))"

lost_answers=$(qw_sql "SELECT count(DISTINCT batch_id) FROM queuer.batch_history WHERE detail LIKE 'POST got no answer%'")
qw_sql "SELECT DISTINCT batch_id FROM queuer.batch_history WHERE detail LIKE 'POST got no answer%'" \
    >"$E2E_DIR/lost_answers.txt"
grep -h 'event=ledger.node_suspect node=0\|event=ledger.node_up node=0' "$E2E_DIR"/workers/*.log \
    >"$E2E_DIR/node0.txt" || true
per_worker=$(e2e_per_worker)
e2e_check

committed=$(qw_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'")
e2e_assert "$committed" -eq "$TOTAL" "every batch Committed"
e2e_assert "${FIG[batches]}" -eq "$TOTAL" "qw-check saw every batch"
e2e_assert "$((slow * 100))" -le "$((all * 20))" "the slow node got at most 20% of the POSTs ($slow of $all)"
e2e_assert "$((after - before_up))" -gt 0 "node 0 got POSTs again after it came back"
grep -q 'event=ledger.node_suspect node=0' "$E2E_DIR/node0.txt" ||
    e2e_fail "no worker saw node 0 fail"
grep -q 'event=ledger.node_up node=0' "$E2E_DIR/node0.txt" ||
    e2e_fail "no worker saw node 0 come back"
# The POSTs cut off by the outage: followed by their status, never resent.
e2e_assert "$lost_answers" -gt 0 "POSTs that lost their answer when node 0 went down"
resent=0
while read -r id; do
    n=$(grep -c "\"ev\":\"post\",\"service\":\"[^\"]*\",\"batch\":\"$id\"" "$QW_SIM_LOG" || true)
    [ "$n" = 1 ] || {
        e2e_log "batch ${id:0:16} reached the ledger $n times"
        resent=$((resent + 1))
    }
done <"$E2E_DIR/lost_answers.txt"
e2e_assert "$resent" -eq 0 "batches whose POST lost its answer and were POSTed again"

e2e_log "figures: batches=$TOTAL posts=${FIG[posts]} slow_node_posts=$slow/$all" \
    "node0_after_return=$((after - before_up)) answers_lost=$lost_answers" \
    "duplicates=${FIG[duplicate_batches]} violations=${FIG[violations]}"
e2e_log "committed per worker: $per_worker"
e2e_log "PASS"
