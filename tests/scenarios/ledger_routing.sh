#!/usr/bin/env bash
# Routing by dlt.url tags: two simulated scabbard nodes, each running the
# services of one circuit only (--node-hosts; any other service's routes
# answer 404, as on a Splinter node that does not run that service), and a
# dlt.url that names which circuit each node serves. Two workers drain
# 10 services x 10 batches of each circuit. Checks: every batch Committed,
# qw-check clean, and every POST and status query went to the node that
# runs its service (no 404 at all).
. "$(dirname "$0")/e2e_common.sh"

SERVICES=10
BATCHES=10
TOTAL=$((2 * SERVICES * BATCHES))

e2e_db
sc_gen "$E2E_DIR/a.tsv" "$SERVICES" "$BATCHES" 11 route
sc_gen "$E2E_DIR/b.tsv" "$SERVICES" "$BATCHES" 12 other
sc_load_tsv "$E2E_DIR/a.tsv"
sc_load_tsv "$E2E_DIR/b.tsv"
qw_sim_start "$E2E_DIR/sim" --listen 127.0.0.1:0 --commit-delay-ms 20 \
    --node-hosts 0:route-00000 --node-hosts 1:other-00000
IFS=, read -r NODE0 NODE1 <<<"$QW_SIM_URLS"
[ -n "$NODE1" ] || e2e_fail "the simulator did not report two node addresses ($QW_SIM_URLS)"
URLS="$NODE1 other-00000, $NODE0 route-00000"
e2e_log "dlt.url = \"$URLS\""
for w in w1 w2; do
    e2e_worker "$w" QUEUER_DLT_URL="$URLS"
done
e2e_drain 60
e2e_check

committed=$(qw_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'")
e2e_assert "$committed" -eq "$TOTAL" "every batch Committed"
e2e_assert "${FIG[batches]}" -eq "$TOTAL" "qw-check saw every batch"
python3 - "$QW_SIM_LOG" >"$E2E_DIR/routes.txt" <<'EOF' || e2e_fail "routing: $(cat "$E2E_DIR/routes.txt")"
import json, sys
want = {"route-00000": 0, "other-00000": 1}
seen = {"post": 0, "get": 0}
bad = []
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["ev"] not in seen:
        continue
    if e.get("code") == 404:
        bad.append("%s answered 404 on node %s: %s" % (e["ev"], e.get("node"), e.get("service")))
        continue
    circuit = (e.get("service") or "").split("::")[0]
    if circuit in want:
        seen[e["ev"]] += 1
        if e.get("node") != want[circuit]:
            bad.append("%s of %s went to node %s" % (e["ev"], e["service"], e.get("node")))
print("posts=%d gets=%d misrouted=%d" % (seen["post"], seen["get"], len(bad)))
for m in bad[:10]:
    print(m)
sys.exit(1 if bad or not seen["post"] or not seen["get"] else 0)
EOF
e2e_log "routing: $(head -1 "$E2E_DIR/routes.txt")"
e2e_log "PASS"
