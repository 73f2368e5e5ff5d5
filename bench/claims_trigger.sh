#!/usr/bin/env bash
# Micro-benchmark of the batches -> claims statement trigger, before
# (0008's claims_follow_batches and free-work index, put back on top of 0013)
# and after (0013). From the project root, after meson compile -C build:
#   tests/lib/with-pg.sh bench/claims_trigger.sh build
# For each rep, variant (before/after) and priority mix (zero: every batch
# at 0; mixed: every other line at 10): a fresh database, a bulk load of
# 400 services x 24 batches (queuer enqueue --tsv, timed), then it
# finalizes the first 4,800 batches one per transaction (status Committed,
# in creation order round-robin over the services: the trigger runs once
# per batch, and each finalization moves a head), then the other 4,800 in
# 12 transactions of 400 (one per service, like a grouped outcome write),
# both from a procedure that commits after each statement.
set -eu
build=${1:-build}
reps=${REPS:-3}
base=$QW_TEST_CONNINFO
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/tools/queuer-gen" --services 400 --batches 24 --seed 9 >"$work/gen.tsv"
awk -F'\t' 'BEGIN{OFS="\t"} {print $0, 0}' "$work/gen.tsv" >"$work/zero.tsv"
awk -F'\t' 'BEGIN{OFS="\t"} {print $0, (NR % 2) * 10}' "$work/gen.tsv" >"$work/mixed.tsv"
# shellcheck disable=SC2016 # $fn$ is the function's SQL dollar quote, not a shell expansion
old_fn=$(sed -n '/^CREATE FUNCTION queuer.claims_follow_batches/,/^\$fn\$;/p' \
    migrations/0008_claims_scale.sql | sed 's/^CREATE FUNCTION/CREATE OR REPLACE FUNCTION/')
# server side, one transaction per iteration (no client round trips in the figure)
procs="CREATE PROCEDURE public.fin_one(n int) LANGUAGE plpgsql AS \$\$
DECLARE t0 timestamptz := clock_timestamp(); i int;
BEGIN
  FOR i IN 1..n LOOP
    UPDATE queuer.batches SET status = 'Committed', status_at = now()
     WHERE batch_id = (SELECT t.batch_id FROM public.todo t WHERE t.n = (SELECT nextval('public.s')));
    COMMIT;
  END LOOP;
  RAISE NOTICE 'one %', round(extract(epoch FROM clock_timestamp() - t0) * 1e6 / n, 1);
END \$\$;
CREATE PROCEDURE public.fin_group(rounds int) LANGUAGE plpgsql AS \$\$
DECLARE t0 timestamptz := clock_timestamp(); i int; k bigint;
BEGIN
  FOR i IN 1..rounds LOOP
    k := nextval('public.r');
    UPDATE queuer.batches b SET status = 'Committed', status_at = now()
      FROM public.todo t WHERE t.batch_id = b.batch_id AND t.n > (k - 1) * 400 AND t.n <= k * 400;
    COMMIT;
  END LOOP;
  RAISE NOTICE 'group %', round(extract(epoch FROM clock_timestamp() - t0) * 1e6 / (rounds * 400), 1);
END \$\$;"
for rep in $(seq "$reps"); do
    for mix in zero mixed; do
        for variant in before after; do
            db="tb_${variant}_${mix}"
            psql -X -q "$base" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
            ci="${base/dbname=postgres/dbname=$db}"
            QUEUER_DATABASE_CONNINFO="$ci" "$build/queuer" migrate >/dev/null
            if [ "$variant" = before ]; then
                psql -X -q "$ci" -c "$old_fn" -c "DROP INDEX queuer.service_id_claims_free_work" \
                    -c "CREATE INDEX service_id_claims_free_work ON queuer.service_id_claims (hashtext(service_id)) WHERE claimant IS NULL AND has_work"
            fi
            t0=$(date +%s%N)
            QUEUER_DATABASE_CONNINFO="$ci" "$build/queuer" enqueue --tsv "$work/$mix.tsv" >/dev/null
            t1=$(date +%s%N)
            psql -X -q "$ci" -c "CREATE TABLE public.todo AS SELECT row_number() OVER (ORDER BY k, batch_id) AS n, batch_id FROM (SELECT batch_id, row_number() OVER (PARTITION BY service_id ORDER BY created_at, batch_id) AS k FROM queuer.batches) o" \
                -c "CREATE UNIQUE INDEX ON public.todo (n)" -c "CREATE SEQUENCE public.s" \
                -c "CREATE SEQUENCE public.r START 13" -c "VACUUM ANALYZE"
            psql -X -q "$ci" -c "$procs"
            one=$(psql -X -q "$ci" -c "CALL public.fin_one(4800)" 2>&1 | sed -n 's/.*NOTICE:  one //p')
            group=$(psql -X -q "$ci" -c "CALL public.fin_group(12)" 2>&1 | sed -n 's/.*NOTICE:  group //p')
            left=$(psql -X -At "$ci" -c "SELECT count(*) FROM queuer.service_id_claims WHERE n_open <> 0")
            printf 'rep %s %-6s %-6s load %5d ms (9600)  one/txn %s us/batch  400/txn %s us/batch  open-left %s\n' \
                "$rep" "$variant" "$mix" $(((t1 - t0) / 1000000)) "$one" "$group" "$left"
            psql -X -q "$base" -c "DROP DATABASE $db"
        done
    done
done
