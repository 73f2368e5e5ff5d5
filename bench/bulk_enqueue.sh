#!/usr/bin/env bash
# Bulk enqueue benchmark: 100,000 batches (1,000 services x 100 batches) made
# by queuer-gen, loaded with one `queuer enqueue --tsv FILE`, back pressure
# off for the run (QUEUER_INGEST_HIGH=0). Prints lines/s over the wall time
# of the enqueue command only (generation and setup are not timed) and,
# with the private server, the CPU every PostgreSQL process spent meanwhile
# (the load's backend, autovacuum, the WAL writer): on a shared host the
# CPU moves less than the wall time with the neighbours' load.
#
# The private server is new: its shared memory has never been touched and
# it has no WAL segment to recycle, so a first load also pays for the
# kernel's zeroing of the shared buffers' pages and of every new WAL
# segment. A server that has been running has paid for both. The script
# loads twice and prints both figures: first into a scratch database
# (dropped afterwards, then a checkpoint), which is the first load on a new
# server; then into a new database, which is a load on a running server.
# With QUEUER_DATABASE_CONNINFO there is one load.
#
# usage: bench/bulk_enqueue.sh [BUILD_DIR]        (default: build)
#   SERVICES, BATCHES   workload shape (default 1000 x 100)
#   QUEUER_DATABASE_CONNINFO  use this (empty, migrated or not) database;
#                       otherwise a private PostgreSQL is started in a
#                       temporary directory and removed afterwards
#   QW_PG_FSYNC=on      durable private server (default off, like the tests)
#   SETUP_SQL           statements run after the migrations, before the load
#                       (e.g. other table settings or triggers to compare)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
queuer=$build/queuer
gen=$build/tools/queuer-gen
services=${SERVICES:-1000}
batches=${BATCHES:-100}
for bin in "$queuer" "$gen"; do
    [ -x "$bin" ] || { echo "bulk_enqueue: $bin not built (meson compile -C $build)" >&2; exit 1; }
done
. "$here/lib.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/qwbench.XXXXXX")
started_pg=0
cleanup() {
    if [ "$started_pg" = 1 ]; then qw_pg_stop immediate; fi
    rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${QUEUER_DATABASE_CONNINFO:-}" ]; then
    . "$root/tests/lib/cluster.sh"
    qw_pg_start "$work/pg" >/dev/null
    started_pg=1
    echo "server: private PostgreSQL 15 in $work/pg (fsync=${QW_PG_FSYNC:-off})"
fi

lines=$((services * batches))
"$gen" --services "$services" --batches "$batches" --seed 1 >"$work/load.tsv"
echo "workload: $lines lines, $services services x $batches batches," \
     "$(($(stat -c %s "$work/load.tsv") / 1048576)) MiB of TSV"

# Loads the workload and prints the figures, labelled $1: into a new
# database $2 of the private server (whose CPU is then read too), or
# without $2 into the database of $QUEUER_DATABASE_CONNINFO.
load_once() {
    local label=$1 db=${2:-} pg_data='' c0 c1 t0 t1
    if [ -n "$db" ]; then
        qw_psql -c "CREATE DATABASE $db" >/dev/null
        export QUEUER_DATABASE_CONNINFO="$QW_PG_CONNINFO dbname=$db"
        pg_data=$work/pg/data
    fi
    "$queuer" migrate >/dev/null
    [ -z "${SETUP_SQL:-}" ] ||
        psql -X -q -v ON_ERROR_STOP=1 "$QUEUER_DATABASE_CONNINFO" -c "$SETUP_SQL" >/dev/null
    echo "host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) before the load"
    c0=$([ -z "$pg_data" ] || bench_pg_cpu_ticks "$pg_data")
    t0=$(date +%s.%N)
    QUEUER_INGEST_HIGH=0 "$queuer" enqueue --tsv "$work/load.tsv" >"$work/out" 2>"$work/err" || {
        echo "bulk_enqueue: enqueue failed:" >&2
        cat "$work/out" "$work/err" >&2
        exit 1
    }
    t1=$(date +%s.%N)
    if [ -n "$pg_data" ]; then
        # the load's backend has exited and been reaped (its CPU is then the postmaster's)
        bench_db_idle "$QW_PG_CONNINFO" "$db" 10 || echo "bulk_enqueue: a backend stayed on" >&2
        sleep 0.2
    fi
    c1=$([ -z "$pg_data" ] || bench_pg_cpu_ticks "$pg_data")
    cat "$work/out"
    case "$(cat "$work/out")" in
        "$lines of $lines batch lines enqueued;"*) ;;
        *) echo "bulk_enqueue: expected $lines enqueued" >&2; exit 1 ;;
    esac
    awk -v a="$t0" -v b="$t1" -v n="$lines" -v l="$label" \
        'BEGIN { s = b - a; printf "bulk enqueue (%s): %d lines in %.2f s = %.0f lines/s\n", l, n, s, n / s }'
    [ -z "$pg_data" ] || awk -v t="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" -v n="$lines" \
        'BEGIN { s = t / hz; printf "server CPU: %.2f s = %.1f us per line\n", s, s * 1e6 / n }'
}

if [ "$started_pg" = 1 ]; then
    load_once "first load on a new server" warmup
    qw_psql -c "DROP DATABASE warmup" -c "CHECKPOINT" >/dev/null
    load_once "on a running server" bench
else
    load_once "this database"
fi
