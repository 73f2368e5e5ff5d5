#!/usr/bin/env bash
# Scenario: a report keeps a REPEATABLE READ transaction open next to a
# running worker. The worker runs as a plain member of queuer_worker, which
# may not see how long another role's transaction has been open, so it
# goes by how many transactions began since the snapshot
# (queuer.settings.snapshot_held_xids, 200 here):
#  - before the report, /metrics says nothing holds back vacuum;
#  - once 300 transactions have begun since the report's snapshot, the
#    worker logs db.vacuum_held_back at warn, naming the report's pid and
#    application, and /metrics shows queuer_vacuum_held_back 1 with at
#    least 300 transactions behind and no age (not visible to its role);
#  - while the report stays open the gauges follow it (a later look counts
#    300 more) and the log says nothing more: one line per episode;
#  - after the report ends, the worker logs db.vacuum_released and the
#    gauges are back to 0.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"
sc_begin ops_vacuum_held

# metric NAME: the sample's value in the worker's /metrics (empty when absent)
metric() {
    curl -sS -m 5 "http://127.0.0.1:$PORT/metrics" 2>/dev/null | awk -v k="$1" '$1 == k { print $2 }'
}
# wait_metric NAME OP VALUE SECS: until the sample compares so (numerically)
wait_metric() {
    local v=
    for _ in $(seq 1 $(($4 * 10))); do
        v=$(metric "$1")
        [ -n "$v" ] && awk -v a="$v" -v b="$3" -v op="$2" \
            'BEGIN { exit !((op == ">=" && a >= b) || (op == "==" && a == b)) }' && return 0
        sleep 0.1
    done
    sc_fail "timed out after ${4}s waiting for $1 $2 $3 (last: '$v')"
}
# burn N: N transactions that each take a transaction id, committed one by one
burn() {
    qw_sql "DO \$\$ BEGIN FOR i IN 1..$1 LOOP PERFORM txid_current(); COMMIT; END LOOP; END \$\$" \
        >/dev/null || sc_fail "could not run $1 transactions"
}

sc_pg_start
qw_psql >/dev/null <<'SQL' || sc_fail "cannot create the worker's role"
CREATE ROLE vac_worker LOGIN IN ROLE queuer_worker;
UPDATE queuer.settings SET snapshot_held_xids = 200;
SQL
sc_check_sql "the worker's role may not read other roles' activity in full" f \
    "SELECT pg_has_role('vac_worker', 'pg_read_all_stats', 'MEMBER')"
sc_sim_start --commit-delay-ms 5
PORT=$(qw_free_port)
sc_worker_start w1 QUEUER_ADMIN_LISTEN="127.0.0.1:$PORT" \
    QUEUER_DATABASE_CONNINFO="host=$QW_PG_DIR/sock port=5432 dbname=postgres user=vac_worker application_name=w1"
sc_wait_registered 15 w1
sc_wait_log w1 20 'event=admin.listening'
wait_metric queuer_vacuum_held_back == 0 10
sc_check "nothing holds back vacuum yet: no age" "" "$(metric queuer_vacuum_held_back_seconds)"

sc_helper_open held_report
echo "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM queuer.settings;" >&3
sc_wait "the report holds a snapshot" 10 \
    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                     WHERE application_name = 'held_report' AND backend_xmin IS NOT NULL)"
PID=$(qw_sql "SELECT pid FROM pg_stat_activity WHERE application_name = 'held_report'")
burn 300

# The worker looks every 10 s.
sc_wait_log w1 25 "level=warn .*event=db.vacuum_held_back .*pid=$PID .*application=\"held_report\""
sc_check "/metrics: one snapshot holds back vacuum" 1 "$(metric queuer_vacuum_held_back)"
first=$(metric queuer_vacuum_held_back_xids)
sc_check_num "/metrics: transactions begun since it" "$first" ">=" 300
sc_check "/metrics: its age is not visible to the worker's role" "" \
    "$(metric queuer_vacuum_held_back_seconds)"
burn 300
wait_metric queuer_vacuum_held_back_xids ">=" $((first + 300)) 25
sc_check "a later look of the same episode logs nothing more" 1 \
    "$(grep -c 'event=db.vacuum_held_back' "$SC_DIR/w1.log")"

echo "ROLLBACK;" >&3
sc_helper_close held_report
sc_wait_log w1 25 "level=info .*event=db.vacuum_released .*pid=$PID"
sc_check "/metrics: nothing holds back vacuum after the report ended" 0 \
    "$(metric queuer_vacuum_held_back)"
sc_check "/metrics: no transactions behind" 0 "$(metric queuer_vacuum_held_back_xids)"
sc_check "no look failed" 0 "$(grep -c 'event=db.vacuum_watch_failed' "$SC_DIR/w1.log")"
sc_worker_stop w1 15
sc_log "OK"
