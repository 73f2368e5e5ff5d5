#!/usr/bin/env bash
# What each part of a batch table's layout costs PostgreSQL on the hot path,
# without queuer's statements: a bare table of batches is taken through the
# two state changes every batch makes (marked, then final), GROUP rows per
# statement, each change an UPDATE plus a history INSERT in one autocommit
# statement, as the workers group them. The layout grows one part at a time
# from the least durable record there can be (bigint keys, no index but the
# primary key) to one shaped like queuer.batches (128-character text keys,
# partial indexes over the state, a payload in the row, the id format
# checks); each step runs on a table of its own in a new database, and the
# CPU per batch of the backend that runs the statements (read from /proc
# before and after them) is printed with the share of heap-only (HOT)
# updates.
# Autovacuum is off for the tables, so that no worker's CPU lands in a step.
# The gaps between the lines say where the hot path's time goes; the
# statements queuer really runs are measured by bench/pg_hot_path.sh.
# Not a test; run it through `heavy --exclusive` when the figures are to be
# compared.
#
# usage: bench/pg_layout.sh [BUILD_DIR]        (default: build)
#   BATCHES   batches per step (default 100000)
#   GROUP     rows per statement (default 100)
#   STEPS     which steps to run, e.g. "1 5 9" (default: all, 1 to 9)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-$here/../build}
batches=${BATCHES:-100000}
group=${GROUP:-100}
steps=${STEPS:-1 2 3 4 5 6 7 8 9}
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_stats_cluster pg_layout "$build" queuer
trap bench_stats_cluster_stop EXIT
q() { psql -X -q -v ON_ERROR_STOP=1 -d "$BENCH_DB" "$@"; }

# The parts, each added to the ones before it (step 9 is step 7 with
# bigint keys).
hist_hash="CREATE INDEX ON m_hist USING hash (batch);"
hist_more="ALTER TABLE m_hist ADD PRIMARY KEY (hid); CREATE INDEX ON m_hist (at);"
open_idx="CREATE INDEX ON m_batches (service_id, created_at) WHERE state IN (0, 1);"
final_idx="CREATE INDEX ON m_batches (at) INCLUDE (state) WHERE state = 2;"
checks="ALTER TABLE m_batches
    ADD CHECK (length(id) = 128 AND id ~ '^[0-9a-f]*\$'),
    ADD CHECK (service_id ~ '^[A-Za-z0-9]{5}-[A-Za-z0-9]{5}::[A-Za-z0-9]{4}\$');"

# Sets KEY, PAYLOAD and PARTS for step $1; prints its name.
step() {
    KEY=text PAYLOAD=0 PARTS=""
    case $1 in
    1) KEY=bigint && echo "bigint keys, heap and primary keys only" ;;
    2) echo "128-character text keys" ;;
    3) PARTS=$hist_hash && echo "+ history: hash index on the batch" ;;
    4) PARTS="$hist_hash $hist_more" && echo "+ history: primary key, time index" ;;
    5) PARTS="$hist_hash $hist_more $open_idx" && echo "+ batches: partial index of open ones" ;;
    6) PARTS="$hist_hash $hist_more $open_idx $final_idx" &&
        echo "+ batches: partial index of final ones" ;;
    7) PAYLOAD=288 PARTS="$hist_hash $hist_more $open_idx $final_idx" &&
        echo "+ 288-byte payload in the row" ;;
    8) PAYLOAD=288 PARTS="$hist_hash $hist_more $open_idx $final_idx $checks" &&
        echo "+ id format checks on the table" ;;
    9) KEY=bigint PAYLOAD=288 PARTS="$hist_hash $hist_more $open_idx $final_idx" &&
        echo "  step 7 with bigint keys" ;;
    *)
        echo "pg_layout: no step $1 (1 to 9)" >&2
        exit 2
        ;;
    esac
}

printf '| step | layout | backend CPU us per batch | HOT updates |\n|---|---|---|---|\n'
for n in $steps; do
    name=$(step "$n")
    step "$n" >/dev/null
    key_of="g"
    [ "$KEY" = bigint ] || key_of="encode(sha512(g::text::bytea), 'hex')"
    q -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS layout" \
        -c "CREATE DATABASE layout" >/dev/null
    db="${BENCH_DB% dbname=bench} dbname=layout"
    psql -X -q -v ON_ERROR_STOP=1 -d "$db" <<SQL
CREATE TABLE m_batches (id $KEY PRIMARY KEY, service_id text COLLATE "C" NOT NULL, payload bytea,
                        created_at timestamptz NOT NULL DEFAULT now(), state smallint NOT NULL,
                        at timestamptz) WITH (fillfactor = 80, autovacuum_enabled = false);
CREATE TABLE m_hist (hid bigserial, batch $KEY NOT NULL, to_state smallint NOT NULL,
                     at timestamptz NOT NULL) WITH (autovacuum_enabled = false);
INSERT INTO m_batches (id, service_id, payload, state, at)
SELECT $key_of, 'abcde-fghij::' || lpad((g % 1000)::text, 4, '0'),
       decode(repeat(md5(g::text), $PAYLOAD / 16), 'hex'), 0, now()
  FROM generate_series(1, $batches) g;
$PARTS
VACUUM ANALYZE m_batches;
-- the statements, prepared before the timing: both changes of every batch
CREATE TABLE m_script AS
SELECT row_number() OVER (ORDER BY s.to_state, s.part) AS n,
       format('WITH u AS (UPDATE m_batches b SET state = %s, at = now()
                 FROM unnest(%L::${KEY}[]) k(id) WHERE b.id = k.id AND b.state = %s RETURNING b.id)
               INSERT INTO m_hist (batch, to_state, at) SELECT u.id, %s, now() FROM u',
              s.to_state, s.ids, s.to_state - 1, s.to_state) AS sql
  FROM (SELECT t.to_state, (g - 1) / $group AS part, array_agg($key_of ORDER BY g) AS ids
          FROM generate_series(1, $batches) g CROSS JOIN (VALUES (1), (2)) t(to_state)
         GROUP BY t.to_state, (g - 1) / $group) s;
SQL
    # the session's own backend, read from /proc while it runs (psql's \!)
    psql -X -q -v ON_ERROR_STOP=1 -d "$db" >/dev/null <<SQL
SELECT pg_backend_pid() AS pid \gset
\setenv BACKEND :pid
\! . $here/lib.sh && bench_cpu_ticks \$BACKEND >$BENCH_WORK/t0
SELECT sql FROM m_script ORDER BY n \gexec
\! . $here/lib.sh && bench_cpu_ticks \$BACKEND >$BENCH_WORK/t1
SQL
    t0=$(cat "$BENCH_WORK/t0") t1=$(cat "$BENCH_WORK/t1")
    hot=$(psql -X -q -t -A -d "$db" -c "SELECT n_tup_hot_upd || ' of ' || n_tup_upd
                                      FROM pg_stat_user_tables WHERE relname = 'm_batches'")
    awk -v n="$n" -v name="$name" -v t=$((t1 - t0)) -v hz="$BENCH_CLK_TCK" -v b="$batches" -v hot="$hot" \
        'BEGIN { printf "| %s | %s | %.1f | %s |\n", n, name, t * 1e6 / hz / b, hot }'
done
