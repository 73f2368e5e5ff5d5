#!/usr/bin/env bash
# What one NOTIFY costs PostgreSQL for each LISTENing session in the
# database, whichever channel it listens on. From the project root:
#   tests/lib/with-pg.sh bench/notify_fanout.sh
# For each count of listeners in LISTENERS (idle psql sessions, each on a
# channel of its own, as a worker listens on queuer_i<incarnation>), one
# session sends NOTIFYS notifications, one per transaction, on a channel
# nobody listens on. It prints the database's commits per NOTIFY (read
# once the listeners have exited: a backend reports its counts when it
# next runs a command or exits, and an idle listener does neither) and
# PostgreSQL's CPU per NOTIFY (every process of the cluster, listeners
# still running). PostgreSQL 15 signals every listener of the database
# that has not read the queue's head, and a signalled idle backend reads
# the new entries in a transaction of its own, so each listener adds a
# commit per NOTIFY.
set -euo pipefail
here=$(dirname "$0")
. "$here/lib.sh"
base=${QW_TEST_CONNINFO:?run inside tests/lib/with-pg.sh}
pgdir=${QW_TEST_PGDIR:?run inside tests/lib/with-pg.sh}
n_notify=${NOTIFYS:-2000}
hz=$(getconf CLK_TCK)
psql -X -q "$base" -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS fanout" \
    -c "CREATE DATABASE fanout"
db=${base/dbname=postgres/dbname=fanout}

commits() {
    psql -X -q -t -A "$base" -c "SELECT pg_stat_force_next_flush()" \
        -c "SELECT xact_commit FROM pg_stat_database WHERE datname = 'fanout'" | tail -1
}

listeners_now() {
    psql -X -q -t -A "$base" -c "SELECT count(*) FROM pg_stat_activity
        WHERE datname = 'fanout' AND query LIKE 'LISTEN %'"
}

echo "| listeners | commits per NOTIFY | PostgreSQL CPU ms per NOTIFY |"
echo "|---|---|---|"
for n in ${LISTENERS:-0 4 16}; do
    pids=()
    for i in $(seq 1 "$n"); do
        # idle until its stdin closes: LISTEN, then nothing more to read
        (sleep 3600 | (echo "LISTEN fanout_$i;" && cat) | psql -X -q "$db" >/dev/null) 2>/dev/null &
        pids+=("$!")
    done
    for _ in $(seq 1 100); do
        [ "$(listeners_now)" = "$n" ] && break
        sleep 0.1
    done
    c0=$(commits)
    t0=$(bench_pg_cpu_ticks "$pgdir/data")
    for _ in $(seq 1 "$n_notify"); do echo "NOTIFY fanout_nobody;"; done | psql -X -q "$db"
    sleep 1 # the listeners read what came last
    t1=$(bench_pg_cpu_ticks "$pgdir/data")
    for p in "${pids[@]}"; do pkill -P "$p" sleep 2>/dev/null || true; done
    for _ in $(seq 1 100); do
        [ "$(listeners_now)" = 0 ] && break
        sleep 0.1
    done
    wait
    c1=$(commits)
    awk -v n="$n" -v c="$((c1 - c0))" -v t="$((t1 - t0))" -v k="$n_notify" -v hz="$hz" \
        'BEGIN { printf "| %d | %.2f | %.4f |\n", n, c / k, t * 1000 / hz / k }'
done
