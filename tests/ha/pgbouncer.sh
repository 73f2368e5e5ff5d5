#!/usr/bin/env bash
# Workers behind a real PgBouncer in transaction pooling (docs/OPERATIONS.md,
# "Running behind PgBouncer"): three workers, six client connections, one
# pool of two server connections, so every transaction may land on another
# server session. With worker.listen = false (no LISTEN/NOTIFY: it would go
# to whichever client holds the server connection) and
# database.prepared_statements = false (Debian 12 ships PgBouncer 1.18, which
# cannot carry named prepared statements across server connections), every
# batch ends final, in order, duplicates only with a reason (qw-check), and
# PgBouncer really multiplexed the clients. `queuer migrate` and enqueue go
# straight to PostgreSQL (migrate takes a session advisory lock).
#
# Exit 77 (skipped) when pgbouncer cannot be installed.
# shellcheck source=tests/ha/lib_ha.sh
. "$(dirname "$0")/lib_ha.sh"
ha_require_packages pgbouncer

sc_begin pgbouncer_txn
PGB_PID=
# shellcheck disable=SC2317 # called from the EXIT trap
pgb_cleanup() {
    qw_workers_stop "$SC_DIR" 2>/dev/null
    [ -z "$PGB_PID" ] || qw_stop_pids 5 "$PGB_PID"
    if [ "$SC_EXIT_RC" != 0 ] && [ -s "$SC_DIR/pgb/pgbouncer.log" ]; then
        echo "---- last lines of pgbouncer.log"
        tail -n 20 "$SC_DIR/pgb/pgbouncer.log"
    fi
}
sc_on_exit pgb_cleanup

sc_pg_start
sc_sim_start --commit-delay-ms 20

# ---- PgBouncer: transaction pooling, two server connections, SCRAM for clients
PGB_DIR=$SC_DIR/pgb
mkdir -p "$PGB_DIR"
PGB_PORT=$(qw_free_port)
PGB_PASSWORD=$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
(
    umask 077
    echo "\"postgres\" \"$PGB_PASSWORD\"" >"$PGB_DIR/userlist.txt"
    cat >"$PGB_DIR/pgbouncer.ini" <<INI
[databases]
queuer = host=$QW_PG_DIR/sock port=5432 dbname=postgres user=postgres pool_size=2

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGB_PORT
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $PGB_DIR/userlist.txt
admin_users = postgres
pool_mode = transaction
default_pool_size = 2
max_client_conn = 50
logfile = $PGB_DIR/pgbouncer.log
pidfile = $PGB_DIR/pgbouncer.pid
INI
)
if [ "$(id -u)" = 0 ]; then
    chown -R postgres: "$PGB_DIR"
    setpriv --reuid=postgres --regid=postgres --init-groups -- pgbouncer "$PGB_DIR/pgbouncer.ini" \
        </dev/null >>"$PGB_DIR/stdout.log" 2>&1 &
else
    pgbouncer "$PGB_DIR/pgbouncer.ini" </dev/null >>"$PGB_DIR/stdout.log" 2>&1 &
fi
PGB_PID=$!
PGB_CONNINFO="host=127.0.0.1 port=$PGB_PORT dbname=queuer user=postgres"
export PGPASSWORD=$PGB_PASSWORD
for _ in $(seq 1 100); do
    psql -X -q -t -A "$PGB_CONNINFO" -c "SELECT 1" >/dev/null 2>&1 && break
    qw_alive "$PGB_PID" || { cat "$PGB_DIR"/*.log; sc_fail "pgbouncer did not start"; }
    sleep 0.1
done
sc_log "pgbouncer $(pgbouncer --version | head -1) on port $PGB_PORT, pool_mode=transaction, 2 server connections"

# ---- workers through the pool
PGB_ENV=("QUEUER_DATABASE_PASSWORD=$PGB_PASSWORD" QUEUER_WORKER_LISTEN=false QUEUER_WORKER_CLAIM_SLACK=0
         QUEUER_DATABASE_PREPARED_STATEMENTS=false)
for w in w1 w2 w3; do
    sc_worker_start $w "QUEUER_DATABASE_CONNINFO=$PGB_CONNINFO application_name=$w" "${PGB_ENV[@]}"
done
sc_wait_registered 20 w1 w2 w3

S=24
K=25
sc_gen "$SC_DIR/work.tsv" $S $K
sc_load_tsv "$SC_DIR/work.tsv"

# While they work: six clients share at most two server connections.
pools() {
    psql -X -q -A -F'|' "host=127.0.0.1 port=$PGB_PORT dbname=pgbouncer user=postgres" -c "SHOW POOLS" |
        awk -F'|' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                   $c["database"] == "queuer" {
                       print $c["cl_active"] + $c["cl_waiting"],
                             $c["sv_active"] + $c["sv_idle"] + $c["sv_used"] + $c["sv_tested"] + $c["sv_login"] }'
}
sc_wait "a quarter of the batches final" 60 \
    "SELECT count(*) >= $((S * K / 4)) FROM queuer.batches WHERE status = 'Committed'"
read -r clients servers <<<"$(pools)"
sc_check_num "client connections through PgBouncer" "${clients:-0}" ">=" 6
sc_check_num "server connections in the pool" "${servers:-99}" "<=" 2

sc_wait_all_final 120
for w in w1 w2 w3; do
    sc_worker_alive $w || sc_fail "worker $w died"
done
sc_check_sql "every batch Committed" 0 \
    "SELECT count(*) FROM queuer.batches WHERE status IS DISTINCT FROM 'Committed'"
sc_check_sql "every worker wrote history through the pool" 3 \
    "SELECT count(DISTINCT instance_id) FROM queuer.batch_history WHERE instance_id IN ('w1', 'w2', 'w3')"
for w in w1 w2 w3; do
    sc_check "$w logged no error" 0 "$(grep -c 'level=error' "$SC_DIR/$w.log")"
    sc_check "$w logged no failed statement" 0 \
        "$(grep -cE 'event=(cycle|queue)\.failed|event=outcomes\.(retry|failed)' "$SC_DIR/$w.log")"
done
qw_workers_stop "$SC_DIR"
sc_check_order
"${QW_CHECK_BIN:-$SC_BUILD_ROOT/tools/qw-check}" --events "$QW_SIM_LOG" --conninfo "$QW_PG_CONNINFO" \
    --kv "$SC_DIR/check.kv" | sed 's/^/   /'
sc_check "qw-check: no violation of I1-I4" 0 "$(sed -n 's/^violations=//p' "$SC_DIR/check.kv")"
psql -X -q -P pager=off "host=127.0.0.1 port=$PGB_PORT dbname=pgbouncer user=postgres" -c "SHOW STATS" |
    awk 'NR <= 2 || /queuer/' | cut -c1-120 | sed 's/^/   /'
