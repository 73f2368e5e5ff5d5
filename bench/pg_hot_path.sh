#!/usr/bin/env bash
# PostgreSQL's own work per batch on the hot path, without workers or a
# ledger: the real statements sql/batches_mark.sql and sql/outcomes_record.sql
# (generic plans, as the workers run them) drive SERVICES x BATCHES batches
# through one psql session. The head of every service is marked, GROUP per
# statement; then every in-flight batch is recorded Committed, GROUP outcomes
# per statement, each marking its service's next batch (the fast path; with
# FAST_PATH=0 the new heads are marked again instead), until all are final.
# Prints the backend's CPU per batch (the postmaster's reaped
# children, so taken once the session ended), the statements
# (pg_stat_statements: time, buffers, WAL), the PL/pgSQL functions and
# triggers (track_functions) and, for one outcome statement in the middle,
# its EXPLAIN (ANALYZE, BUFFERS, WAL). Not a test; run it through
# `heavy --exclusive` when the figures are to be compared.
#
# usage: bench/pg_hot_path.sh [BUILD_DIR]        (default: build)
#   SERVICES, BATCHES   workload shape (default 1000 x 10)
#   GROUP               batches per statement (default 100; W5's workers
#                       send about 5 to 7)
#   FAST_PATH=0         outcomes do not go on: every batch is marked by
#                       batches_mark.sql (as most are in W5) instead of by the
#                       outcome of its predecessor
#   SQL_DIR             where batches_mark.sql and outcomes_record.sql come
#                       from (default: this tree's sql/), to compare versions
#   SETUP_SQL           statements run after the load, before the timing
#                       (e.g. an older index definition)
#   WORKER_ROLE=1       run the statements as a member of queuer_worker, as
#                       in production, instead of the schema owner (the
#                       history writer check then does its work)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
services=${SERVICES:-1000}
batches=${BATCHES:-10}
group=${GROUP:-100}
case $group in
'' | *[!0-9]* | 0)
    echo "pg_hot_path: GROUP must be a positive number" >&2
    exit 2
    ;;
esac
case ${FAST_PATH:-1} in 0) fast_path=false ;; *) fast_path=true ;; esac
sql_dir=${SQL_DIR:-$root/sql}
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_stats_cluster pg_hot_path "$build" queuer tools/queuer-gen
trap bench_stats_cluster_stop EXIT
work=$BENCH_WORK
db=$BENCH_DB
q() { psql -X -q -v ON_ERROR_STOP=1 -d "$db" "$@"; }

QUEUER_DATABASE_CONNINFO=$db "$build/queuer" migrate >/dev/null
"$build/tools/queuer-gen" --services "$services" --batches "$batches" --seed 1 >"$work/load.tsv"
QUEUER_DATABASE_CONNINFO=$db QUEUER_INGEST_HIGH=0 "$build/queuer" enqueue --tsv "$work/load.tsv" \
    >/dev/null
q <<SQL
CREATE EXTENSION pg_stat_statements;
INSERT INTO queuer.instances (instance_id, host, pid, version, lease_1, lease_2)
VALUES ('w1', 'bench', 1, 'bench', now() + interval '1 hour', now() + interval '2 hours');
UPDATE queuer.service_id_claims SET claimant = 'w1', claim_epoch = 1,
       expiry_1 = now() + interval '1 hour', expiry_2 = now() + interval '2 hours';
${SETUP_SQL:-}
VACUUM ANALYZE;
SQL
user=""
if [ "${WORKER_ROLE:-0}" = 1 ]; then
    q -c "CREATE ROLE bench_worker LOGIN IN ROLE queuer_worker" >/dev/null
    user=" user=bench_worker"
fi

# The session's script: one group of statements per \gexec. An outcome is
# (batch, service, epoch, expect, status, submitted, attempts_add, retry_ms,
# last_error, detail, posted, go_on), see migrations/0004_outcome_type.sql.
outcome="ROW(batch_id, service_id, 1, 'posting', 'Committed', false, 1, NULL, NULL, NULL,
             true, $fast_path)::queuer.outcome"
in_flight="FROM queuer.batches WHERE submitted AND status IS NULL"
# every service's oldest batch not yet submitted, GROUP per statement
mark_heads="SELECT format('EXECUTE mark(%L, %L, %L, %L, %L, %s)', 'w1', array_agg(batch_id),
              array_agg(service_id), array_agg(1::bigint), array_agg(''::text), :incarnation)
  FROM (SELECT service_id, batch_id, (row_number() OVER (ORDER BY service_id) - 1) / $group AS g
          FROM (SELECT DISTINCT ON (service_id) service_id, batch_id FROM queuer.batches
                 WHERE status IS NULL AND NOT submitted ORDER BY service_id, created_at) h) f
 GROUP BY g \\gexec"
{
    echo "SET plan_cache_mode = force_generic_plan; SET jit = off;"
    echo "SELECT incarnation FROM queuer.instances WHERE instance_id = 'w1' \\gset"
    echo "PREPARE mark(text, text[], text[], bigint[], text[], bigint) AS $(cat "$sql_dir/batches_mark.sql");"
    echo "PREPARE rec(text, queuer.outcome[], bigint) AS $(cat "$sql_dir/outcomes_record.sql");"
    for round in $(seq 1 "$batches"); do
        if [ "$round" = 1 ] || [ "$fast_path" = false ]; then echo "$mark_heads"; fi
        if [ "$round" = $(((batches + 1) / 2)) ]; then
            cat <<SQL
\o $work/explain.txt
SELECT format('EXPLAIN (ANALYZE, BUFFERS, WAL) EXECUTE rec(%L, %L, %s)', 'w1', array_agg($outcome),
              :incarnation)
  FROM (SELECT batch_id, service_id $in_flight ORDER BY service_id LIMIT $group) f \gexec
\o
SQL
        fi
        cat <<SQL
SELECT format('EXECUTE rec(%L, %L, %s)', 'w1', array_agg($outcome), :incarnation)
  FROM (SELECT batch_id, service_id, (row_number() OVER (ORDER BY service_id) - 1) / $group AS g
          $in_flight) f
 GROUP BY g \gexec
SQL
    done
} >"$work/run.sql"

q -c "SELECT pg_stat_statements_reset(), pg_stat_reset()" >/dev/null
c0=$(bench_pg_reaped_ticks "$QW_PG_DIR/data")
psql -X -q -v ON_ERROR_STOP=1 -d "$db$user" -f "$work/run.sql" >/dev/null
sleep 0.3 # the backend has exited and been reaped
c1=$(bench_pg_reaped_ticks "$QW_PG_DIR/data")
n=$(q -At -c "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'")
total=$((services * batches))
[ "$n" = "$total" ] || { echo "pg_hot_path: $n of $total batches Committed" >&2; exit 1; }

echo "pg_hot_path: $total batches marked and Committed ($services services x $batches, $group per statement)," \
     "statements from $sql_dir${WORKER_ROLE:+, WORKER_ROLE=$WORKER_ROLE}"
awk -v t=$((c1 - c0)) -v hz="$BENCH_CLK_TCK" -v n="$total" 'BEGIN {
    printf "backend CPU: %.2f s = %.1f us per batch (with the driver'"'"'s own SELECTs)\n",
           t / hz, t / hz * 1e6 / n }'
q <<'SQL'
SELECT round(total_exec_time::numeric, 1) AS total_ms, calls, rows,
       shared_blks_hit + shared_blks_read AS buffers, wal_bytes,
       left(regexp_replace(query, '\s+', ' ', 'g'), 50) AS statement
  FROM pg_stat_statements
 WHERE query LIKE 'PREPARE%' OR query LIKE '%service_id_claims%'
 ORDER BY total_exec_time DESC LIMIT 6;
SELECT funcname AS function, calls, round(self_time::numeric, 1) AS self_ms
  FROM pg_stat_user_functions ORDER BY self_time DESC LIMIT 5;
SQL
grep -E "^ +(CTE |->  (Update|Insert|LockRows))|Trigger|Execution" "$work/explain.txt" |
    sed -E 's/\(cost=[^)]*\) //; s/^ +//'
