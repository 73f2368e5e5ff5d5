#!/usr/bin/env bash
# PostgreSQL's cost of the application's enqueue path, queuer.enqueue_rows()
# or, with SINGLE=1, queuer.enqueue_batch() (the SQL functions; bulk
# `queuer enqueue --tsv` is bench/bulk_enqueue.sh): bench-load, W5's
# open-loop load generator, enqueues RATE batches/s over SERVICES services
# for LOAD_SECONDS into a private cluster, one call per 5 ms tick (SINGLE=1:
# one call per batch), with no workers, so every batch stays waiting and
# back pressure (high mark 30, the default) counts each service's backlog.
# Prints what bench-load achieved, the CPU per call and per batch of the
# load's own backend (read from /proc by bench-load) and of all backends
# (the postmaster's reaped children, taken once the session ended: with the
# ANALYZE runs and autovacuum), the statements inside the function
# (pg_stat_statements, track = all) and the functions (track_functions).
# Not a test; run it through `heavy --exclusive` when the figures are to be
# compared.
#
# usage: bench/enqueue_sql.sh [BUILD_DIR]        (default: build/release)
#   RATE, SERVICES, LOAD_SECONDS   the load (default 1500, 1000, 6)
#   ANALYZE_EVERY_S           ANALYZE the queue tables every so many seconds
#                             during the load, as bench/run.sh does in W5
#                             (default 1; 0 = only once, before the load,
#                             when the tables are empty: the plans a fresh
#                             database starts with)
#   SETUP_SQL                 statements run after the migrations, before the
#                             load (e.g. another version of a function)
#   SINGLE=1                  one queuer.enqueue_batch() call per batch, each an
#                             unnamed statement (as most drivers send them)
#   PREPARED=1                with SINGLE=1: through a prepared statement
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build/release}
rate=${RATE:-1500}
services=${SERVICES:-1000}
seconds=${LOAD_SECONDS:-6}
analyze_every=${ANALYZE_EVERY_S:-1}
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_stats_cluster enqueue_sql "$build" queuer bench/bench-load
analyzer=
trap '[ -z "$analyzer" ] || kill "$analyzer" 2>/dev/null; bench_stats_cluster_stop' EXIT
work=$BENCH_WORK
db=$BENCH_DB
q() { psql -X -q -v ON_ERROR_STOP=1 -d "$db" "$@"; }

QUEUER_DATABASE_CONNINFO=$db "$build/queuer" migrate >/dev/null
q -c "CREATE EXTENSION pg_stat_statements"
[ -z "${SETUP_SQL:-}" ] || q -c "$SETUP_SQL" >/dev/null
q -c "ANALYZE"
q -c "SELECT pg_stat_statements_reset(), pg_stat_reset()" >/dev/null
if [ "$analyze_every" != 0 ]; then
    (
        while sleep "$analyze_every"; do
            q -c "ANALYZE queuer.batches, queuer.service_ingest, queuer.service_id_claims"
        done
    ) &
    analyzer=$!
fi
c0=$(bench_pg_reaped_ticks "$QW_PG_DIR/data")
mode=()
[ "${SINGLE:-0}" != 1 ] || mode+=(--single)
[ "${SINGLE:-0}" != 1 ] || [ "${PREPARED:-0}" != 1 ] || mode+=(--prepared)
QUEUER_DATABASE_CONNINFO=$db "$build/bench/bench-load" --rate "$rate" --services "$services" \
    --seconds "$seconds" --out "$work/enqueue.tsv" "${mode[@]}" >"$work/load.out"
sleep 0.3 # the load's backend has exited and been reaped
c1=$(bench_pg_reaped_ticks "$QW_PG_DIR/data")
if [ -n "$analyzer" ]; then
    kill "$analyzer" 2>/dev/null || true
    wait "$analyzer" 2>/dev/null || true
    analyzer=
fi
load=$(cat "$work/load.out")
calls=$(bench_kv load_calls "$load")
batches=$(bench_kv load_batches "$load")

echo "enqueue_sql: $rate batches/s offered over $services services for $seconds s, no workers," \
     "ANALYZE every ${analyze_every} s (0: once, before the load), calls: ${mode[*]:-rows per tick}"
echo "bench-load: $load"
# (the ANALYZE runs are other backends, reaped as well: their share is in
# the statement table below)
own=$(bench_kv load_backend_cpu_s "$load")
awk -v t=$((c1 - c0)) -v hz="$BENCH_CLK_TCK" -v c="$calls" -v b="$batches" -v own="$own" 'BEGIN {
    printf "load backend CPU: %.2f s = %.3f ms per enqueue call, %.1f us per batch\n",
           own, own * 1e3 / c, own * 1e6 / b
    printf "all backends CPU: %.2f s = %.3f ms per enqueue call, %.1f us per batch\n",
           t / hz, t / hz * 1e3 / c, t / hz * 1e6 / b }'
q <<'SQL'
SELECT calls, round(total_exec_time::numeric, 1) AS total_ms,
       round(mean_exec_time::numeric, 3) AS mean_ms, plans,
       round((shared_blks_hit + shared_blks_read)::numeric / calls, 1) AS buffers_per_call,
       left(regexp_replace(query, '\s+', ' ', 'g'), 60) AS statement
  FROM pg_stat_statements
 WHERE calls > 1
 ORDER BY total_exec_time DESC LIMIT 14;
SELECT funcname AS function, calls, round(self_time::numeric, 1) AS self_ms,
       round((self_time / nullif(calls, 0))::numeric * 1e3, 1) AS self_us_per_call
  FROM pg_stat_user_functions WHERE calls > 1 ORDER BY self_time DESC LIMIT 6;
SQL
