#!/usr/bin/env bash
# Signals of `queuer run` as a service manager sends them:
#  - SIGHUP re-reads the configuration file (QUEUER_CONFIG) and applies the
#    reloadable keys at once: log.level (debug lines appear), admin.listen
#    (the admin server moves to the new port, the old one stops answering),
#    dlt.pause_base_ms/pause_max_ms; a changed key that is not reloadable
#    (worker.claim_slack) is logged as needing a restart. The worker keeps
#    running, keeps its claims (same epochs) and its workload finishes.
#  - an admin address that cannot be bound is logged and the server stays on
#    the old one; SIGHUP with a broken file logs config.reload_failed and
#    changes nothing.
#  - SIGTERM still stops it gracefully: exit 0, claims released.
. "$(dirname "$0")/lib_scenario.sh"
sc_begin ops_signals

http_code() { curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1${2:-/healthz}"; }
cfg=$SC_DIR/queuer.cfg
write_cfg() { # LEVEL PORT PAUSE_MAX SLACK
    cat >"$cfg" <<CFG
log = { level = "$1"; };
admin = { listen = "127.0.0.1:$2"; };
dlt = { pause_base_ms = 50; pause_max_ms = $3; };
worker = { claim_slack = $4; };
CFG
}

sc_pg_start
sc_sim_start --commit-delay-ms 200
p1=$(qw_free_port)
p2=$(qw_free_port)
write_cfg info "$p1" 1000 4
sc_gen "$SC_DIR/w.tsv" 10 6 3
# Not sc_worker_start: it sets QUEUER_ADMIN_LISTEN=off and QUEUER_LOG_LEVEL,
# and the environment wins over the file this test reloads.
worker_env=()
for v in "${SC_WORKER_ENV[@]}"; do
    case $v in QUEUER_LOG_LEVEL=*) ;; *) worker_env+=("$v") ;; esac
done
env QUEUER_DATABASE_CONNINFO="$QW_PG_CONNINFO application_name=w1" QUEUER_DLT_URL="$QW_SIM_URL" \
    QUEUER_WORKER_INSTANCE_ID=w1 "${worker_env[@]}" QUEUER_CONFIG="$cfg" \
    "$QUEUER_BIN" run >>"$SC_DIR/w1.log" 2>&1 &
echo $! >"$SC_DIR/w1.pid"
sc_wait_log w1 20 'event=admin.listening'
sc_check "healthz on the first port" 200 "$(http_code "$p1")"
sc_load_tsv "$SC_DIR/w.tsv"
sc_wait "w1 holds every service" 20 "SELECT count(*) = 10 FROM queuer.service_id_claims WHERE claimant = 'w1'"
# The ledger stops answering, so the work stays in flight across the reloads.
sc_sim_pause
claims() {
    qw_sql "SELECT string_agg(service_id || '@' || claim_epoch, ',' ORDER BY service_id)
              FROM queuer.service_id_claims WHERE claimant = 'w1'"
}
claims_before=$(claims)

write_cfg debug "$p2" 2000 9
sc_worker_signal w1 HUP
sc_wait_log w1 10 'event=config.reload signal=SIGHUP applied=3 needs_restart=1'
grep -q 'event=config.reloaded key=log.level value="debug"' "$SC_DIR/w1.log" ||
    sc_fail "log.level was not reloaded"
grep -q "event=config.reloaded key=admin.listen value=\"127.0.0.1:$p2\"" "$SC_DIR/w1.log" ||
    sc_fail "admin.listen was not reloaded"
grep -q 'event=config.reloaded key=dlt.pause_max_ms value=2000' "$SC_DIR/w1.log" ||
    sc_fail "dlt.pause_max_ms was not reloaded"
grep -q 'event=config.needs_restart key=worker.claim_slack new=9' "$SC_DIR/w1.log" ||
    sc_fail "worker.claim_slack was not reported as needing a restart"
sc_wait_log w1 10 'level=debug'
sc_check "healthz on the new port" 200 "$(http_code "$p2")"
sc_check "old port closed" 000 "$(http_code "$p1")"
# /readyz opens a connection from the configuration the server was started with
ready=
for _ in $(seq 1 40); do
    ready=$(http_code "$p2" /readyz)
    [ "$ready" = 200 ] && break
    sleep 0.1
done
sc_check "readyz on the new port" 200 "$ready"
kill -0 "$(cat "$SC_DIR/w1.pid")" || sc_fail "the worker died at SIGHUP"

# An admin address that cannot be bound: logged, and the server stays where it was.
p3=$(qw_free_port)
python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); time.sleep(30)' "$p3" &
holder=$!
for _ in $(seq 1 50); do
    python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' \
        "$p3" 2>/dev/null && break
    sleep 0.1
done
write_cfg debug "$p3" 2000 9
sc_worker_signal w1 HUP
sc_wait_log w1 10 "event=config.reload_admin_failed listen=127.0.0.1:$p3 .* kept=127.0.0.1:$p2"
sc_check "healthz still on the port before" 200 "$(http_code "$p2")"
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

echo 'log = { level = "loud"; };' >"$cfg"
sc_worker_signal w1 HUP
sc_wait_log w1 10 'event=config.reload_failed'
sc_check "healthz still on the new port" 200 "$(http_code "$p2")"

# The claims held before the reloads are the same claims (no epoch moved).
sc_check "claims and epochs kept across SIGHUP" "$claims_before" "$(claims)"
sc_sim_resume
sc_wait "workload committed" 60 "SELECT count(*) = 60 FROM queuer.batches WHERE status = 'Committed'"

sc_worker_signal w1 TERM
sc_worker_wait_exit w1 20
sc_check "exit code after SIGTERM" 0 "$SC_RC"
sc_check_sql "claims released" 0 "SELECT count(*) FROM queuer.service_id_claims WHERE claimant = 'w1'"
sc_log "OK"
