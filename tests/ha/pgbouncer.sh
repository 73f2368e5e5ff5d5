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
# Then wake-ups behind the same pool. A worker with database.listen_conninfo
# (a direct connection used only to LISTEN) and everything else through the
# transaction pool: its wake-up self-test passes (queuer.instances says
# delivered), a batch enqueued by an application is POSTed a few
# milliseconds after the enqueue committed (p50 <= 10 ms over 20 batches, a
# 1 s cycle; polling takes half a cycle on average), and when its listening
# session is ended (pg_terminate_backend) it falls back to polling within
# one cycle, logs that once, reconnects and listens again. A worker that
# LISTENs through the transaction pool itself (no listen_conninfo) finds by
# its self-test that nothing is delivered, says so once in the log, in
# /readyz and in queuer.instances, and still submits everything by polling.
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
    [ -z "${APP_KEEP_PID:-}" ] || qw_stop_pids 5 "$APP_KEEP_PID"
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

# ---- wake-ups: LISTEN on a direct connection, everything else through the pool
# (commit timestamps on, to time from the enqueue's commit; PgBouncer opens
# new server connections after the restart)
qw_sql "ALTER SYSTEM SET track_commit_timestamp = on" >/dev/null || sc_fail "ALTER SYSTEM failed"
qw_pg_restart_server || sc_fail "PostgreSQL did not restart"
psql -X -q "host=127.0.0.1 port=$PGB_PORT dbname=pgbouncer user=postgres" -c "RECONNECT queuer" >/dev/null ||
    sc_fail "PgBouncer RECONNECT failed"
WAKE_ENV=("QUEUER_DATABASE_PASSWORD=$PGB_PASSWORD" QUEUER_DATABASE_PREPARED_STATEMENTS=false
          QUEUER_WORKER_CYCLE_MS=1000 QUEUER_WORKER_LEASE_MS=5000 QUEUER_WORKER_HARD_EXPIRY_MS=20000)
sc_worker_start w4 "QUEUER_DATABASE_CONNINFO=$PGB_CONNINFO application_name=w4" \
    "QUEUER_DATABASE_LISTEN_CONNINFO=$QW_PG_CONNINFO application_name=w4-listen" "${WAKE_ENV[@]}"
sc_wait_registered 20 w4
sc_wait "w4 reports its wake-ups delivered" 20 \
    "SELECT notifications = 'delivered' FROM queuer.instances WHERE instance_id = 'w4'"
sc_check_sql "w4 listens on its direct connection only" 1 \
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'w4-listen'"

# enqueue_one FILE LINE: enqueues line LINE of a TSV workload as an
# application does (queuer.enqueue_batch() in autocommit, on the one
# connection it keeps open, straight to PostgreSQL) and waits until the
# ledger got it; sets ENQ_ID to its batch id. A process and a session per
# batch (`queuer enqueue`) would end both inside the few milliseconds
# measured, and on two cores their teardown delays the worker itself; the
# first look at the history waits 50 ms for the same reason.
ENQ_ID=
coproc APP { psql -X -q -A -t -v ON_ERROR_STOP=1 "$QW_PG_CONNINFO application_name=app" 2>&1; }
APP_KEEP_PID=$APP_PID # (bash unsets APP_PID once the session has ended)
enqueue_one() {
    local svc id hex said
    IFS=$'\t' read -r svc id hex < <(sed -n "${2}p" "$1")
    echo "SELECT queuer.enqueue_batch('$svc', '$id', '\\x$hex'::bytea);" >&"${APP[1]}"
    read -r -t 10 said <&"${APP[0]}" || sc_fail "the application's enqueue did not answer"
    [ "$said" = enqueued ] || sc_fail "enqueue_batch said: $said"
    sleep 0.05
    sc_wait "batch $2 posted" 10 \
        "SELECT EXISTS (SELECT 1 FROM queuer.batch_history WHERE batch_id = '$id' AND to_status = 'Submitting')"
    ENQ_ID=$id
}

# Enqueue commit -> POST: from the commit of the enqueue (the commit
# timestamp of its line in queuer.enqueue_log; each service here gets one
# batch, so one line) to the first POST of it in the simulator's event log
# (wall-clock microseconds on the same host).
N_LAT=20
sc_gen "$SC_DIR/lat.tsv" $N_LAT 1 7 wakeu
ids=()
for i in $(seq 1 $N_LAT); do
    enqueue_one "$SC_DIR/lat.tsv" "$i"
    ids+=("'$ENQ_ID'")
    sleep 0.$((RANDOM % 4 + 1)) # at different moments of the 1 s cycle
done
sc_sim_log_load
id_list=$(IFS=,; echo "${ids[*]}")
read -r lat_n lat_p50 lat_p90 lat_max <<<"$(qw_sql "
    SELECT count(*), round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1),
           round(percentile_cont(0.9) WITHIN GROUP (ORDER BY ms)::numeric, 1), round(max(ms)::numeric, 1)
      FROM (SELECT (min((l.ev->>'t')::bigint)
                     - extract(epoch FROM pg_xact_commit_timestamp(e.xmin)) * 1e6) / 1000.0 AS ms
              FROM scenario.simlog l
              JOIN queuer.batches b ON b.batch_id = l.ev->>'batch'
              JOIN queuer.enqueue_log e ON e.service_id = b.service_id
             WHERE l.ev->>'ev' = 'post' AND b.batch_id IN ($id_list)
             GROUP BY b.batch_id, e.xmin) x" | tr '|' ' ')"
sc_log "enqueue commit -> POST through the pool with a direct listener: n=$lat_n p50=${lat_p50} ms p90=${lat_p90} ms max=${lat_max} ms (cycle 1000 ms; load average $(cut -d' ' -f1-3 /proc/loadavg))"
sc_show "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY m.run_ms)::numeric, 1) AS enqueue_statement_p50_ms,
                round(percentile_cont(0.5) WITHIN GROUP (ORDER BY m.mark_ms)::numeric, 1) AS commit_to_mark_p50_ms,
                round(percentile_cont(0.5) WITHIN GROUP (ORDER BY m.post_ms)::numeric, 1) AS mark_to_post_p50_ms
           FROM (SELECT extract(epoch FROM pg_xact_commit_timestamp(e.xmin) - e.at) * 1000 AS run_ms,
                        extract(epoch FROM s.at - pg_xact_commit_timestamp(e.xmin)) * 1000 AS mark_ms,
                        (min((l.ev->>'t')::bigint) - extract(epoch FROM s.at) * 1e6) / 1000.0 AS post_ms
                   FROM scenario.simlog l
                   JOIN queuer.batches b ON b.batch_id = l.ev->>'batch'
                   JOIN queuer.enqueue_log e ON e.service_id = b.service_id
                   JOIN queuer.batch_history s ON s.batch_id = b.batch_id AND s.to_status = 'Submitting'
                  WHERE l.ev->>'ev' = 'post' AND b.batch_id IN ($id_list)
                  GROUP BY b.batch_id, e.at, e.xmin, s.at) m"
sc_check "batches measured" $N_LAT "$lat_n"
sc_check_num "enqueue commit -> POST p50 (ms)" "$lat_p50" "<=" 10

# The listening session ends: polling within one cycle, said once; then back.
sc_check "w4 logged no failed self-test so far" 0 "$(grep -c 'event=notify.not_delivered' "$SC_DIR/w4.log")"
killed_ms=$(date +%s%3N)
sc_check_sql "the listening session was ended" 1 \
    "SELECT count(pg_terminate_backend(a.pid))
       FROM (SELECT pid FROM pg_stat_activity WHERE application_name = 'w4-listen') a"
sc_wait_log w4 5 'event=notify.not_delivered conn=listener'
line=$(grep -m1 'event=notify.not_delivered' "$SC_DIR/w4.log")
at=$(sed -E 's/^ts=([^ ]+) .*/\1/' <<<"$line")
fallback_ms=$(($(date -d "$at" +%s%3N) - killed_ms))
sc_log "listening session ended: polling after ${fallback_ms} ms: $line"
sc_check_num "fallback to polling after the listener is lost (ms)" "$fallback_ms" "<=" 1000
sc_wait_log w4 10 'event=notify.delivered conn=listener'
sc_wait "w4 listens again" 10 \
    "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'w4-listen'"
sc_check "notify.not_delivered logged once" 1 "$(grep -c 'event=notify.not_delivered' "$SC_DIR/w4.log")"
sc_gen "$SC_DIR/after.tsv" 1 1 8 after
enqueue_one "$SC_DIR/after.tsv" 1
sc_log "a batch enqueued after the listener came back was posted (${ENQ_ID:0:16})"
echo '\q' >&"${APP[1]}"
wait "$APP_KEEP_PID" || sc_fail "the application's session did not end cleanly"
APP_KEEP_PID=
sc_worker_stop w4 20

# ---- LISTEN through the transaction pool itself: the self-test finds it deaf
ADMIN_PORT=$(qw_free_port)
sc_worker_start w5 "QUEUER_DATABASE_CONNINFO=$PGB_CONNINFO application_name=w5" "${WAKE_ENV[@]}" \
    QUEUER_ADMIN_LISTEN="127.0.0.1:$ADMIN_PORT"
sc_wait_registered 20 w5
sc_wait_log w5 10 'event=notify.not_delivered conn=queuer'
sc_wait "w5 reports its wake-ups not delivered" 10 \
    "SELECT notifications = 'not_delivered' FROM queuer.instances WHERE instance_id = 'w5'"
readyz=$(curl -s -m 5 "http://127.0.0.1:$ADMIN_PORT/readyz")
sc_log "/readyz: $(tr '\n' '|' <<<"$readyz")"
grep -q '^wake-ups: not delivered' <<<"$readyz" || sc_fail "/readyz does not say the wake-ups are not delivered"
QUEUER_DATABASE_CONNINFO="$QW_PG_CONNINFO" "$QUEUER_BIN" status >"$SC_DIR/status.txt" ||
    sc_fail "queuer status failed"
grep -q '^wake-ups not delivered (polling): w5$' "$SC_DIR/status.txt" ||
    sc_fail "queuer status does not name w5: $(cat "$SC_DIR/status.txt")"
sc_gen "$SC_DIR/deaf.tsv" 4 3 9 deafw
sc_load_tsv "$SC_DIR/deaf.tsv"
sc_wait_all_final 60
sc_check "notify.not_delivered logged once by w5" 1 "$(grep -c 'event=notify.not_delivered' "$SC_DIR/w5.log")"
sc_worker_stop w5 20
