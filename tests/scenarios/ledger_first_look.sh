#!/usr/bin/env bash
# Scenario: a batch's first status read goes out when the batch is likely
# final. The simulator looks at a waiting status read every 100 ms from its
# start, as scabbard does, and commits each batch 20 ms after its 202. A
# worker that asked at the 202 would learn of each commit 80 ms late, and a
# service's next batch would wait for that. One worker posts five services
# with 80 batches each: once it has learnt (the first 20 batches of each
# service are left out), the median time from a batch's commit to the answer
# that reports it is under 20 ms, and the ledger still gets one status read
# per batch; the worker shows its delay in /metrics, near the commit delay and
# below a look.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

SERVICES=5
BATCHES=80
sc_begin ledger_first_look
sc_pg_start
sc_sim_start --commit-delay-ms 20 --wait-poll-ms 100
sc_gen "$SC_DIR/w.tsv" $SERVICES $BATCHES 41 first
ADMIN_PORT=$(qw_free_port)
sc_worker_start w1 "QUEUER_ADMIN_LISTEN=127.0.0.1:$ADMIN_PORT"
sc_wait_registered 15 w1
sc_load_tsv "$SC_DIR/w.tsv"
sc_wait "every batch is committed" 120 \
    "SELECT count(*) = $((SERVICES * BATCHES)) FROM queuer.batches WHERE status = 'Committed'"
look=$(curl -fsS -m 5 "http://127.0.0.1:$ADMIN_PORT/metrics" |
    awk '$1 == "queuer_ledger_node_first_look_seconds{node=\"0\"}" { print $2 }')
sc_worker_stop w1 30

sc_sim_log_load
# per batch: its commit in the simulator (status event to Committed) and the
# first answer after it to a status read of its service (one batch of a
# service is in flight at a time, so that answer is about this batch)
qw_psql >/dev/null <<'SQL' || sc_fail "cannot compute the lags"
CREATE TABLE scenario.lag AS
SELECT c.ev->>'service' AS service,
       row_number() OVER (PARTITION BY c.ev->>'service' ORDER BY c.n) AS k,
       ((SELECT min((g.ev->>'t')::bigint) FROM scenario.simlog g
          WHERE g.ev->>'ev' = 'get' AND g.ev->>'service' = c.ev->>'service'
            AND (g.ev->>'t')::bigint >= (c.ev->>'t')::bigint) - (c.ev->>'t')::bigint) / 1000.0
           AS lag_ms
  FROM scenario.simlog c
 WHERE c.ev->>'ev' = 'status' AND c.ev->>'to' = 'Committed';
SQL
median=$(qw_sql "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY lag_ms)::numeric, 1)
                   FROM scenario.lag WHERE k > 20")
late=$(qw_sql "SELECT count(*) FILTER (WHERE lag_ms >= 50) || ' of ' || count(*)
                 FROM scenario.lag WHERE k > 20")
sc_log "commit -> the answer that reports it: median $median ms; $late answers came 50 ms late" \
    "or more; first reads go out $look s after the 202"
sc_check_sql "every commit was reported by a status answer" 0 \
    "SELECT count(*) FROM scenario.lag WHERE lag_ms IS NULL"
sc_check_num "median lag from a commit to its answer (ms)" "$median" "<" 20
sc_check_sql "one status read per batch" t \
    "SELECT count(*) FILTER (WHERE ev->>'ev' = 'get') = count(*) FILTER (WHERE ev->>'ev' = 'post')
       FROM scenario.simlog"
sc_check_num "first reads go out near the commit delay (s)" "${look:-0}" ">" 0.010
sc_check_num "... and before a look (s)" "${look:-1}" "<" 0.100
sc_check_order
