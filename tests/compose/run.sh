#!/usr/bin/env bash
# The compose suite: docker-compose.yml run for real (scripts/lib/compose.sh,
# the same code as `scripts/cluster.sh compose-up`), with the test override
# tests/compose/docker-compose.test.yml, then faults on containers:
#
#   demo       the header's workload (200 x 20) drained, `run --rm qw-check`;
#              one host is assumed nowhere: distinct container hostnames and
#              addresses, pid 1 in every worker, default instance ids built
#              from the hostname, every admin server on port 9187 at its own
#              address, and a worker whose wall clock is 2 h behind works
#              (leases are on the database clock)
#   kill       SIGKILL of a worker's process (a crash; the restart policy
#              brings it back; `docker kill` itself counts as a manual stop,
#              which the restart policy leaves alone)
#   pause      `docker pause` of a worker past its hard expiry, then unpause:
#              its services are taken over, its late writes are fenced
#   partition  `docker network disconnect` of a worker for 20 s: cut from the
#              database and the ledger; taken over, fenced after reconnect
#   pg-restart `docker restart` of the postgres container
#   kill+partition  one worker killed and another partitioned at once
#
# Each fault is aimed at the worker(s) holding most of the phase's services,
# while the ledger holds their batches pending (so every victim has work in
# flight when it is hit).
#
# Each fault runs under a steady feed of new batches (36 services, one
# batch each every 0.5 s) and ends with every batch final, qw-check clean
# (ledger order = creation order, one pending per service, finals backed by
# the ledger), and for pause/partition no write of the victim at its old
# claim epoch after the takeover. Figures: per fault, how long the
# services it hit stood still (fault -> each one's next commit, the worst),
# how long until the victim worked again, and the drain; and the suite's
# wall time. Exit 77 with "skipped: <reason>" where no engine can run.
#
# Environment: QUEUER_TEST_COMPOSE=0 skips the suite;
# QUEUER_TEST_COMPOSE_PHASES="kill pause ..." runs only those faults (after
# the demo); QW_KEEP=1 keeps the stack and temp directory of a failed run.
#
# Not on the test harness (tests/lib/cluster.sh): PostgreSQL, the ledger
# and the workers are compose services here, started, faulted and removed
# through scripts/lib/compose.sh (the code behind `scripts/cluster.sh
# compose-up`, which this suite exists to test), so none of the harness's
# process functions apply; its PostgreSQL port also moves when the
# container restarts, which its SQL helpers do not follow.
set -euo pipefail

root=${QW_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${QW_BUILD_ROOT:-$root/build/ci}
QUEUER_BIN=${QUEUER_BIN:-$build/queuer}
QUEUER_GEN_BIN=${QUEUER_GEN_BIN:-$build/tools/queuer-gen}
T0=$SECONDS

log() {
    printf '[compose %4ss] %s\n' "$((SECONDS - T0))" "$*"
}
skip() {
    echo "skipped: $*"
    exit 77
}
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

[ "${QUEUER_TEST_COMPOSE:-1}" != 0 ] || skip "QUEUER_TEST_COMPOSE=0"
for b in "$QUEUER_BIN" "$QUEUER_GEN_BIN"; do
    [ -x "$b" ] || fail "missing $b (build first)"
done
if [ "$(id -u)" != 0 ] && ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
    skip "not root and no Docker engine answers"
fi
command -v psql >/dev/null || fail "psql is not installed (scripts/deps.sh)"

QWK_ROOT=$root
# shellcheck source=scripts/lib/compose.sh
. "$root/scripts/lib/compose.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/qw-compose.XXXXXX")
export QUEUER_COMPOSE_DIR=$work/compose
export QUEUER_COMPOSE_PROJECT=qwtest$$
export QUEUER_COMPOSE_FILES=$root/tests/compose/docker-compose.test.yml
export QUEUER_PG_PORT=0 QUEUER_SIM_PORT=0
# One image per work tree: kept between runs (the build cache), never
# shared by two trees that run the suite at the same time.
QUEUER_IMAGE=queuer:test-$(printf '%s' "$root" | sha1sum | cut -c1-10)
export QUEUER_IMAGE
QWT_FAKETIME_LIB=
for f in /usr/lib/*/faketime/libfaketimeMT.so.1; do
    [ -f "$f" ] && QWT_FAKETIME_LIB=$f
done
[ -n "$QWT_FAKETIME_LIB" ] || fail "libfaketime is not installed (Debian package faketime)"
export QWT_FAKETIME_LIB

PHASES=${QUEUER_TEST_COMPOSE_PHASES:-kill pause partition pg-restart kill+partition}
declare -A FIG=()
FEEDER_PID=
FEEDS=0
FEED_SERVICES=36
UP=0
VICTIMS=()
T_RESUME=

cleanup() {
    local rc=$?
    trap - EXIT
    [ -z "$FEEDER_PID" ] || kill "$FEEDER_PID" 2>/dev/null || true
    if [ "$UP" = 1 ]; then
        if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
            tail -n 3 "$work"/feeder-*.log 2>/dev/null || true
            qwk_compose ps 2>&1 || true
            qwk_compose logs --no-color --tail 15 2>&1 | tail -n 120 || true
        fi
        if [ "$rc" != 0 ] && [ -n "${QW_KEEP:-}" ]; then
            echo "stack kept: QUEUER_COMPOSE_DIR=$QUEUER_COMPOSE_DIR scripts/cluster.sh compose-down"
            exit "$rc"
        fi
        local t=$SECONDS
        qwk_down || rc=1
        log "compose-down took $((SECONDS - t)) s"
        if qwk_engine_answers; then
            local left
            left=$(docker ps -aq --filter "label=com.docker.compose.project=$QWK_PROJECT"
                docker network ls -q --filter "label=com.docker.compose.project=$QWK_PROJECT"
                docker volume ls -q --filter "label=com.docker.compose.project=$QWK_PROJECT")
            [ -z "$left" ] || { echo "FAIL: left behind: $left" >&2; rc=1; }
        fi
    else
        qwk_engine_release "$QUEUER_COMPOSE_PROJECT" 2>/dev/null || true
    fi
    if qwk_engine_ours 2>/dev/null; then
        log "dockerd stays: another stack or test uses it"
    fi
    if [ "$rc" = 0 ] || [ -z "${QW_KEEP:-}" ]; then
        rm -rf "$work"
    else
        echo "files kept in $work"
    fi
    log "wall time $((SECONDS - T0)) s (exit $rc)"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- bring-up -------------------------------------------------------------

t=$SECONDS
qwk_settings
qwk_tools >"$work/tools.log" 2>&1 || skip "cannot install docker.io or a compose tool: $(tail -n 1 "$work/tools.log")"
if ! qwk_engine_acquire "$QUEUER_COMPOSE_PROJECT" 2>"$work/engine.log"; then
    skip "no Docker engine can be started here: $(tail -n 1 "$work/engine.log")"
fi
UP=1
qwk_up || fail "compose-up failed"
FIG[up_s]=$((SECONDS - t))
log "compose-up (engine, images, stack healthy): ${FIG[up_s]} s"

PGPASSWORD=$(sed -n 's/^POSTGRES_PASSWORD=//p' "$QUEUER_SECRETS_DIR/db.env")
export PGPASSWORD QUEUER_DATABASE_PASSWORD=$PGPASSWORD
NET=${QWK_PROJECT}_default

cid() { qwk_compose ps -q "$1"; }
# The published PostgreSQL port changes when the container restarts.
# (No `head` in pipelines: under pipefail an early exit of the reader
# fails the writer with SIGPIPE.)
pg_port() { docker port "$(cid postgres)" 5432/tcp | sed -n '1s/.*://p'; }
pg_port >"$work/db_port"
conninfo() { echo "host=127.0.0.1 port=$(cat "$work/db_port") user=queuer dbname=queuer connect_timeout=3"; }
sql() { psql -X -q -t -A -v ON_ERROR_STOP=1 "$(conninfo)" -c "$1"; }
show() { psql -X -q -P pager=off "$(conninfo)" -c "$1" 2>&1 || true; }

# wait_sql WHAT SECS SQL: polls until SQL returns t.
wait_sql() {
    local what=$1 deadline=$((SECONDS + $2)) out
    while :; do
        out=$(sql "$3" 2>/dev/null || true)
        [ "$out" = t ] && return 0
        [ "$SECONDS" -lt "$deadline" ] || fail "timed out after $2 s waiting for: $what"
        sleep 0.2
    done
}

ALL_FINAL="SELECT count(*) = 0 FROM queuer.batches
            WHERE status IS NULL OR status NOT IN ('Committed', 'Valid', 'Invalid')"
wait_all_final() {
    local t=$SECONDS
    if ! (wait_sql "every batch final" "$1" "$ALL_FINAL"); then
        show "SELECT service_id, coalesce(status, CASE WHEN submitted THEN '(submitting)' ELSE '(new)' END)
                     AS state, count(*) FROM queuer.batches
               WHERE status IS NULL OR status NOT IN ('Committed', 'Valid', 'Invalid')
               GROUP BY 1, 2 ORDER BY 1 LIMIT 20"
        show "SELECT * FROM queuer.service_id_claims c WHERE EXISTS (SELECT 1 FROM queuer.batches b
               WHERE b.service_id = c.service_id AND b.status IS DISTINCT FROM 'Committed') LIMIT 10"
        fail "not every batch became final within $1 s"
    fi
    DRAIN_S=$((SECONDS - t))
}

# qw_check: the documented `run --rm qw-check`; must report no violation.
qw_check() {
    local out
    out=$(qwk_compose run --rm qw-check 2>&1) || {
        echo "$out" >&2
        fail "qw-check found violations or could not run ($1)"
    }
    grep -q 'result: OK' <<<"$out" || { echo "$out" >&2; fail "qw-check did not say OK ($1)"; }
    log "qw-check clean after $1: $(grep -E '^ *final|POST requests' <<<"$out" | tr -s ' ' | tr '\n' ';')"
}

# Helper schema for the fault bookkeeping (qw-check reads only queuer.*).
sql "CREATE SCHEMA compose_test;
     CREATE TABLE compose_test.watch (
         phase text, service_id text, claimant text, old_epoch bigint,
         fault_at timestamptz, taken_at timestamptz, PRIMARY KEY (phase, service_id));"

# ---- the demo workload ------------------------------------------------------

t=$SECONDS
qwk_compose run --rm --entrypoint sh migrate -c \
    'queuer-gen --services 200 --batches 20 | QUEUER_INGEST_HIGH=0 queuer enqueue --tsv -' \
    >"$work/demo-load.log" 2>&1 || { cat "$work/demo-load.log" >&2; fail "loading the demo workload"; }
[ "$(sql "SELECT count(*) FROM queuer.batches")" = 4000 ] || fail "the demo workload is not 4000 batches"
wait_all_final 300
FIG[demo_s]=$((SECONDS - t))
log "demo workload: 4000 batches loaded and final in ${FIG[demo_s]} s"
qw_check demo

# ---- one host assumed nowhere --------------------------------------------------

declare -A HOSTNAME_OF=() ID_OF=() ADDR_OF=()
for w in worker1 worker2 worker3; do
    HOSTNAME_OF[$w]=$(docker inspect -f '{{.Config.Hostname}}' "$(cid $w)")
    ADDR_OF[$w]=$(docker inspect -f "{{(index .NetworkSettings.Networks \"$NET\").IPAddress}}" "$(cid $w)")
    ID_OF[$w]=$(sql "SELECT instance_id FROM queuer.instances WHERE host = '${HOSTNAME_OF[$w]}'
                     AND stopped_at IS NULL ORDER BY started_at DESC LIMIT 1")
    [ -n "${ID_OF[$w]}" ] || fail "$w (host ${HOSTNAME_OF[$w]}) is not registered"
done
[ "$(printf '%s\n' "${ADDR_OF[@]}" | sort -u | wc -l)" = 3 ] || fail "workers share an address: ${ADDR_OF[*]}"
[ "${ID_OF[worker1]}" = worker1 ] || fail "worker1's configured instance id is ${ID_OF[worker1]}"
for w in worker2 worker3; do
    case ${ID_OF[$w]} in
    "${HOSTNAME_OF[$w]}-1-"*) ;;
    *) fail "$w's default instance id ${ID_OF[$w]} is not <its hostname>-1-<random>" ;;
    esac
done
[ "$(sql "SELECT count(DISTINCT host) || '/' || count(*) FILTER (WHERE pid = 1) || '/' || count(*)
            FROM queuer.instances WHERE stopped_at IS NULL")" = 3/3/3 ] ||
    fail "expected 3 live instances on 3 hosts, each pid 1: $(show "SELECT * FROM queuer.instances")"
log "instances: ${ID_OF[worker1]}, ${ID_OF[worker2]}, ${ID_OF[worker3]}: pid 1 on hosts" \
    "${HOSTNAME_OF[*]} at ${ADDR_OF[*]}"

# Every worker's admin server on the same port at its own address, reached
# from another container by the service name.
sim=$(cid scabbard-sim)
for w in worker1 worker2 worker3; do
    metrics=$(docker exec "$sim" bash -c "exec 3<>/dev/tcp/$w/9187 &&
        printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3") || fail "no admin server at $w:9187"
    grep -q "instance_id=\"${ID_OF[$w]}\"" <<<"$metrics" ||
        fail "$w:9187 is not ${ID_OF[$w]}'s admin server"
done
log "admin servers: worker1..3:9187 each answer with their own instance id"

# worker3's wall clock is two hours behind: its log says so, and it did its
# share on the database's clock without losing a claim to its own clock.
docker logs "$(cid worker3)" >"$work/worker3.log" 2>&1
w3ts=$(sed -n '/^ts=/{s/^ts=\([^ ]*\).*/\1/p;q}' "$work/worker3.log")
skew=$(($(date -d "$w3ts" +%s) - $(date -d "$(docker inspect -f '{{.State.StartedAt}}' "$(cid worker3)")" +%s)))
if [ "$skew" -lt -7300 ] || [ "$skew" -gt -7100 ]; then
    fail "worker3's clock is off by $skew s, not about -7200"
fi
w3rows=$(sql "SELECT count(*) FROM queuer.batch_history WHERE instance_id = '${ID_OF[worker3]}'
               AND to_status = 'Committed'")
[ "$w3rows" -gt 0 ] || fail "worker3 (clock -2 h) committed nothing of the demo"
w3lost=$(grep -c 'event=claim.lost' "$work/worker3.log" || true)
[ "$w3lost" = 0 ] || fail "worker3 (clock -2 h) lost $w3lost claims"
log "clocks: worker3 logs ${skew} s off the host, committed $w3rows demo batches, lost no claim"

# ---- faults ---------------------------------------------------------------------

# feeder_start PREFIX [SERVICES]: one new batch for each of SERVICES
# (default 36) services of PREFIX every 0.5 s, in the background, from the
# host through the published port (enqueues refused while PostgreSQL
# restarts are retried in the next round). Where the services go is the
# workers' business: pick() feeds more of them when too few workers hold
# some.
feeder_start() {
    local prefix=$1
    FEED_SERVICES=${2:-36}
    # batch ids follow the seed alone: each feed its own range of seeds
    FEEDS=$((FEEDS + 1))
    (
        trap 'exit 0' TERM
        r=$((FEEDS * 1000000))
        while :; do
            r=$((r + 1))
            "$QUEUER_GEN_BIN" --services "$FEED_SERVICES" --batches 1 --seed "$r" --circuit-prefix "$prefix" |
                QUEUER_DATABASE_CONNINFO="$(conninfo)" QUEUER_INGEST_HIGH=0 \
                    "$QUEUER_BIN" enqueue --tsv - >>"$work/feeder-$prefix.log" 2>&1 || true
            sleep 0.5
        done
    ) &
    FEEDER_PID=$!
}
feeder_stop() {
    kill -TERM "$FEEDER_PID" 2>/dev/null || true
    wait "$FEEDER_PID" 2>/dev/null || true
    FEEDER_PID=
}

# watch_claims PHASE PREFIX FAULT-AT INSTANCE...: records the phase's
# services those instances hold now (all held services without instances),
# for a fault that struck at FAULT-AT (database clock, read before it).
watch_claims() {
    local phase=$1 prefix=$2 fault_at=$3 ids
    shift 3
    ids=$(printf "'%s'," "$@")
    sql "INSERT INTO compose_test.watch (phase, service_id, claimant, old_epoch, fault_at)
         SELECT '$phase', service_id, claimant, claim_epoch, '$fault_at' FROM queuer.service_id_claims
          WHERE service_id LIKE '$prefix-%' AND claimant IS NOT NULL
            ${1:+AND claimant IN (${ids%,})}"
    sql "SELECT count(*) FROM compose_test.watch WHERE phase = '$phase'"
}

# taken_over PHASE: true once every watched service has a new holder: a
# new claimant or epoch, or a new process registered under the old
# claimant's instance_id after the fault (a killed worker1 restarted by its
# policy keeps its fixed id, and its new incarnation holds the claims the
# dead process held, fenced from the old one by the incarnation). Marks
# when each was first seen taken (an upper bound of the takeover).
taken_over() {
    sql "UPDATE compose_test.watch w SET taken_at = now() FROM queuer.service_id_claims c
          WHERE w.phase = '$1' AND w.taken_at IS NULL AND c.service_id = w.service_id
            AND (c.claimant IS DISTINCT FROM w.claimant OR c.claim_epoch <> w.old_epoch
                 OR EXISTS (SELECT 1 FROM queuer.instances i
                             WHERE i.instance_id = c.claimant AND i.started_at > w.fault_at))" >/dev/null
    [ "$(sql "SELECT count(*) FROM compose_test.watch WHERE phase = '$1' AND taken_at IS NULL")" = 0 ]
}

# observe PHASE SECS [all]: polls taken_over for SECS (with "all": until
# every watched service is taken, failing after SECS).
observe() {
    local deadline=$((SECONDS + $2))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if taken_over "$1" && [ "${3:-}" = all ]; then
            return 0
        fi
        sleep 0.2
    done
    [ "${3:-}" != all ] || fail "$1: not every watched service was taken over within $2 s"
}

# sim_ctl PATH: a control request to scabbard-sim through its published port.
sim_ctl() {
    local port reply token
    port=$(docker port "$(cid scabbard-sim)" 8008/tcp | sed -n '1s/.*://p')
    token=$(sed -n 's/^QUEUER_DLT_TOKEN=//p' "$QUEUER_SECRETS_DIR/ledger.env")
    reply=$(exec 3<>"/dev/tcp/127.0.0.1/$port" &&
        printf 'POST %s HTTP/1.0\r\nAuthorization: Bearer %s\r\nContent-Length: 0\r\n\r\n' \
            "$1" "$token" >&3 && head -n 1 <&3) ||
        fail "scabbard-sim control $1: no answer"
    grep -q ' 200 ' <<<"$reply" || fail "scabbard-sim control $1: $reply"
}

# hold PREFIX INSTANCE...: once each instance holds services of the phase,
# the ledger stops committing until each has a batch submitted and not
# final (Pending; or Delayed, once the paused ledger's queue of 30 is full
# and it answers 429), so the fault that follows (then `sim_ctl
# /_sim/resume`) catches every victim with work in flight. (Claims settle
# first: a worker gives back claims above its fair share only on services
# with nothing in flight, which a paused ledger never lets happen.)
hold() {
    local prefix=$1 id
    shift
    for id in "$@"; do
        wait_sql "$id holds $prefix services" 60 \
            "SELECT EXISTS (SELECT 1 FROM queuer.service_id_claims
              WHERE claimant = '$id' AND service_id LIKE '$prefix-%')"
    done
    sim_ctl /_sim/pause
    for id in "$@"; do
        wait_sql "$id holds $prefix services with batches in flight" 60 \
            "SELECT EXISTS (SELECT 1 FROM queuer.service_id_claims c JOIN queuer.batches b USING (service_id)
              WHERE c.claimant = '$id' AND c.service_id LIKE '$prefix-%'
                AND (b.status IN ('Pending', 'Delayed') OR (b.submitted AND b.status IS NULL)))"
    done
}

# stalled_s PHASE T [FROM]: the worst time, over the watched services, from
# FROM (default T) to their first commit after T (waits up to 120 s for
# every one to commit).
stalled_s() {
    wait_sql "every watched service of $1 commits again" 120 \
        "SELECT bool_and(EXISTS (SELECT 1 FROM queuer.batch_history h JOIN queuer.batches b USING (batch_id)
                 WHERE b.service_id = w.service_id AND h.to_status = 'Committed' AND h.at > '$2'))
           FROM compose_test.watch w WHERE w.phase = '$1'"
    sql "SELECT round(extract(epoch FROM max(first) - '${3:-$2}'::timestamptz)::numeric, 1) FROM (
           SELECT (SELECT min(h.at) FROM queuer.batch_history h JOIN queuer.batches b USING (batch_id)
                    WHERE b.service_id = w.service_id AND h.to_status = 'Committed' AND h.at > '$2') AS first
             FROM compose_test.watch w WHERE w.phase = '$1') x"
}

# back_s SERVICE T: seconds from T until the worker of SERVICE runs cycles
# again (a heartbeat after T; call it at once, heartbeats move on).
back_s() {
    local w=$1 since=$2
    wait_sql "$w works again" 90 \
        "SELECT EXISTS (SELECT 1 FROM queuer.instances WHERE host = '${HOSTNAME_OF[$w]}'
                         AND stopped_at IS NULL AND heartbeat_at > '$since'::timestamptz + interval '0.3 s')"
    sql "SELECT round(extract(epoch FROM max(heartbeat_at) - '$since'::timestamptz)::numeric, 1)
           FROM queuer.instances WHERE host = '${HOSTNAME_OF[$w]}' AND stopped_at IS NULL"
}

# restarted_s SERVICE RESTARTS KILLED-AT: seconds from KILLED-AT (host
# clock, date +%s.%N) until the container of SERVICE was started again by
# its restart policy (its restart count above RESTARTS).
restarted_s() {
    local w=$1 before=$2 at=$3 deadline=$((SECONDS + 90)) count status started
    while :; do
        read -r count status started < <(docker inspect \
            -f '{{.RestartCount}} {{.State.Status}} {{.State.StartedAt}}' "$(cid "$w")")
        if [ "$count" -gt "$before" ] && [ "$status" = running ]; then
            awk -v a="$(date -d "$started" +%s.%N)" -v b="$at" 'BEGIN { printf "%.1f\n", a - b }'
            return 0
        fi
        [ "$SECONDS" -lt "$deadline" ] ||
            fail "$w was not restarted by its restart policy (restarts $count, $status since $started)"
        sleep 0.2
    done
}

# refresh_ids: each worker's current instance id (a restarted worker with
# the default id has a new one).
refresh_ids() {
    local w
    for w in worker1 worker2 worker3; do
        ID_OF[$w]=$(sql "SELECT instance_id FROM queuer.instances WHERE host = '${HOSTNAME_OF[$w]}'
                          AND stopped_at IS NULL ORDER BY started_at DESC LIMIT 1")
    done
}

# pick PREFIX N: sets VICTIMS to the N workers (service names) that hold
# the most services of the phase, most first, once N workers hold some.
# (Which worker gets which services is the workers' business; a fault is
# aimed where the work is.)
pick() {
    local prefix=$1 n=$2 id w holders deadline=$((SECONDS + 90)) widen=$((SECONDS + 15))
    # Claims are kept, and an enqueue gives a new service to a live worker
    # below an even share of all claims: a worker that lost its claims in
    # an earlier fault receives every new service until it holds its
    # share, however long that takes. Until N workers hold some of the
    # phase's services at once, the feeder doubles its services every
    # 15 s (new services go to the others once that worker is at its
    # share); read until N holders are seen at once, within 90 s.
    while [ "$SECONDS" -lt "$deadline" ]; do
        if [ "$SECONDS" -ge "$widen" ] && [ "$FEED_SERVICES" -lt 576 ]; then
            feeder_stop
            feeder_start "$prefix" $((FEED_SERVICES * 2))
            log "$prefix: fewer than $n workers hold its services; feeding $FEED_SERVICES services"
            widen=$((SECONDS + 15))
        fi
        refresh_ids
        holders=$(sql "SELECT claimant FROM queuer.service_id_claims
                        WHERE service_id LIKE '$prefix-%' AND claimant IS NOT NULL
                        GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT $n")
        VICTIMS=()
        for id in $holders; do
            for w in worker1 worker2 worker3; do
                [ "${ID_OF[$w]}" != "$id" ] || VICTIMS+=("$w")
            done
        done
        [ "${#VICTIMS[@]}" = "$n" ] && return 0
        sleep 0.2
    done
    fail "no moment in 90 s when $n workers known by their containers held $prefix services" \
        "(last holders: ${holders:-none})"
}

# fenced PHASE VICTIM-ID RESUMED: no write of the victim at its old epoch
# on a watched service after the takeover, nor after it resumed.
fenced() {
    local bad
    bad=$(sql "SELECT count(*) FROM queuer.batch_history h JOIN queuer.batches b USING (batch_id)
                JOIN compose_test.watch w ON w.service_id = b.service_id AND w.phase = '$1'
               WHERE h.instance_id = '$2' AND h.claim_epoch = w.old_epoch
                 AND (h.at >= w.taken_at OR h.at >= '$3'::timestamptz)")
    [ "$bad" = 0 ] || {
        show "SELECT h.*, w.taken_at FROM queuer.batch_history h JOIN queuer.batches b USING (batch_id)
                JOIN compose_test.watch w ON w.service_id = b.service_id AND w.phase = '$1'
               WHERE h.instance_id = '$2' AND h.claim_epoch = w.old_epoch
                 AND (h.at >= w.taken_at OR h.at >= '$3'::timestamptz) LIMIT 10"
        fail "$1: $bad late writes of $2 at its old epoch were not fenced"
    }
}

now() { sql "SELECT now()"; }
host_pid() { docker inspect -f '{{.State.Pid}}' "$(cid "$1")"; }

# phase_end PHASE: the feed stops, every batch ends final, qw-check is clean.
phase_end() {
    sleep 3
    feeder_stop
    wait_all_final 180
    FIG[$1.drain_s]=$DRAIN_S
    qwk_wait_healthy 90 || fail "$1: the stack is not healthy again"
    qw_check "$1"
}

# -- kill: a worker's process dies (as in a crash); its restart policy restarts it
fault_kill() {
    local n restarts killed_at t_fault w
    feeder_start fkill
    pick fkill 1
    w=${VICTIMS[0]}
    hold fkill "${ID_OF[$w]}"
    restarts=$(docker inspect -f '{{.RestartCount}}' "$(cid "$w")")
    t_fault=$(now)
    killed_at=$(date +%s.%N)
    kill -KILL "$(host_pid "$w")"
    n=$(watch_claims kill fkill "$t_fault" "${ID_OF[$w]}")
    sim_ctl /_sim/resume
    log "kill: SIGKILL to $w's process (${ID_OF[$w]}, $n services held)"
    FIG[kill.back_s]=$(restarted_s "$w" "$restarts" "$killed_at")
    FIG[kill.stall_s]=$(stalled_s kill "$t_fault")
    log "kill: $w restarted by its policy ${FIG[kill.back_s]} s after the kill;" \
        "its services stood still at most ${FIG[kill.stall_s]} s"
    phase_end kill
}

# -- pause: a worker frozen past its hard expiry, then resumed: fenced
fault_pause() {
    local n t_fault t_resume w victim
    feeder_start fpaus
    pick fpaus 1
    w=${VICTIMS[0]} victim=${ID_OF[${VICTIMS[0]}]}
    hold fpaus "$victim"
    docker pause "$(cid "$w")" >/dev/null
    t_fault=$(now)
    n=$(watch_claims pause fpaus "$t_fault" "$victim")
    sim_ctl /_sim/resume
    log "pause: $w ($victim) paused holding $n services"
    observe pause 60 all
    wait_sql "the hard expiry has passed" 30 "SELECT now() > '$t_fault'::timestamptz + interval '7 s'"
    t_resume=$(now)
    docker unpause "$(cid "$w")" >/dev/null
    FIG[pause.back_s]=$(back_s "$w" "$t_resume")
    FIG[pause.stall_s]=$(stalled_s pause "$t_fault")
    log "pause: $n services taken over; unpaused after $(sql "SELECT round(extract(epoch FROM
        '$t_resume'::timestamptz - '$t_fault')::numeric, 1)") s; works again ${FIG[pause.back_s]} s later"
    phase_end pause
    fenced pause "$victim" "$t_resume"
    log "pause: no late write of $victim at its old epoch;" \
        "$(docker logs --since "$(date -d "$t_resume" +%s)" "$(cid "$w")" 2>&1 |
            grep -c 'event=claim.lost' || true) claim.lost events after unpause"
}

# reconnect_after PHASE SECS SERVICE...: watches the takeovers for SECS
# (and until every watched service is taken), then puts those workers back
# on the network; sets T_RESUME.
reconnect_after() {
    local phase=$1 secs=$2 w
    shift 2
    observe "$phase" "$secs"
    observe "$phase" 10 all
    T_RESUME=$(now)
    for w in "$@"; do
        docker network connect --alias "$w" "$NET" "$(cid "$w")"
    done
}

# -- partition: a worker off the network for 20 s
fault_partition() {
    local n t_fault w victim
    feeder_start fpart
    pick fpart 1
    w=${VICTIMS[0]} victim=${ID_OF[${VICTIMS[0]}]}
    hold fpart "$victim"
    docker network disconnect "$NET" "$(cid "$w")"
    t_fault=$(now)
    n=$(watch_claims partition fpart "$t_fault" "$victim")
    sim_ctl /_sim/resume
    log "partition: $w ($victim) disconnected holding $n services"
    reconnect_after partition 20 "$w"
    FIG[partition.back_s]=$(back_s "$w" "$T_RESUME")
    FIG[partition.stall_s]=$(stalled_s partition "$t_fault")
    log "partition: reconnected after 20 s; works again ${FIG[partition.back_s]} s later"
    phase_end partition
    fenced partition "$victim" "$T_RESUME"
}

# -- pg-restart: the database goes away and comes back
fault_pg_restart() {
    local n t_fault t_resume t w b ids=()
    feeder_start fpgrs
    pick fpgrs 1
    for w in worker1 worker2 worker3; do
        [ "$(sql "SELECT count(*) FROM queuer.service_id_claims WHERE claimant = '${ID_OF[$w]}'
                   AND service_id LIKE 'fpgrs-%'")" = 0 ] || ids+=("${ID_OF[$w]}")
    done
    hold fpgrs "${ids[@]}"
    n=$(watch_claims pg-restart fpgrs "$(now)")
    sim_ctl /_sim/resume
    t_fault=$(now)
    t=$SECONDS
    docker restart -t 10 "$(cid postgres)" >/dev/null
    log "pg-restart: docker restart returned after $((SECONDS - t)) s"
    pg_port >"$work/db_port"
    wait_sql "postgres answers again" 60 "SELECT true"
    t_resume=$(now)
    log "pg-restart: postgres answers again $(sql "SELECT round(extract(epoch FROM
        '$t_resume'::timestamptz - '$t_fault')::numeric, 1)") s after the restart began" \
        "($n services held by ${#ids[@]} workers)"
    FIG[pg-restart.back_s]=0
    for w in worker1 worker2 worker3; do
        b=$(back_s $w "$t_fault")
        FIG[pg-restart.back_s]=$(awk -v a="$b" -v m="${FIG[pg-restart.back_s]}" 'BEGIN { print (a > m) ? a : m }')
    done
    # commits may still land in the moment before the server stops: the
    # stall runs from the restart command to each service's first commit
    # after the server is back
    FIG[pg-restart.stall_s]=$(stalled_s pg-restart "$t_resume" "$t_fault")
    phase_end pg-restart
}

# -- kill+partition: one worker dies and another is cut off, at once
fault_kill_partition() {
    local n restarts killed_at t_fault killed cut victim back2
    feeder_start ftwo1
    pick ftwo1 2
    killed=${VICTIMS[0]} cut=${VICTIMS[1]} victim=${ID_OF[${VICTIMS[1]}]}
    hold ftwo1 "${ID_OF[$killed]}" "$victim"
    restarts=$(docker inspect -f '{{.RestartCount}}' "$(cid "$killed")")
    t_fault=$(now)
    killed_at=$(date +%s.%N)
    kill -KILL "$(host_pid "$killed")"
    docker network disconnect "$NET" "$(cid "$cut")"
    n=$(watch_claims kill+partition ftwo1 "$t_fault" "${ID_OF[$killed]}" "$victim")
    sim_ctl /_sim/resume
    log "kill+partition: $killed killed, $cut disconnected ($n services held)"
    reconnect_after kill+partition 20 "$cut"
    FIG[kill+partition.back_s]=$(back_s "$cut" "$T_RESUME")
    back2=$(restarted_s "$killed" "$restarts" "$killed_at")
    FIG[kill+partition.stall_s]=$(stalled_s kill+partition "$t_fault")
    log "kill+partition: $killed back after $back2 s, $cut reconnected after 20 s" \
        "and working ${FIG[kill+partition.back_s]} s later"
    phase_end kill+partition
    fenced kill+partition "$victim" "$T_RESUME"
}

for f in $PHASES; do
    case $f in
    kill) fault_kill ;;
    pause) fault_pause ;;
    partition) fault_partition ;;
    pg-restart) fault_pg_restart ;;
    kill+partition) fault_kill_partition ;;
    *) fail "unknown phase $f (QUEUER_TEST_COMPOSE_PHASES)" ;;
    esac
done

sql "SELECT count(*) FROM queuer.batches" >"$work/total"
echo
echo "compose suite figures ($(cat "$work/total") batches; seconds, database clock):"
printf '%-16s %16s %14s %8s\n' fault "services stalled" "victim back" drain
for f in $PHASES; do
    printf '%-16s %16s %14s %8s\n' "$f" "${FIG[$f.stall_s]}" "${FIG[$f.back_s]}" "${FIG[$f.drain_s]}"
done
echo "compose-up ${FIG[up_s]} s, demo ${FIG[demo_s]} s"
