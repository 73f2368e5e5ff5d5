#!/usr/bin/env bash
# Scenario: a bulk load (`queuer enqueue --tsv`, one transaction for the
# whole file) runs while a worker posts a stream of batches for five busy
# services. The load brings batches for new services, for a service the
# worker holds while it is idle, and for one of the busy services, S, whose
# earlier batches are being posted meanwhile. It keeps its transaction open
# for seconds and holds the rows of the services it loads until it commits;
# no worker statement about another service needs them, and the batches of
# S it loads come after S's stream anyway. So the other busy services post
# at the same rate while the load runs (within 10%), no statement fails on a
# lock or waits for one longer than a second (log_lock_waits: none in the
# server log), and the held service posts its loaded batches only once the
# load has committed, and soon after.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

# the load: BULK_SERVICES x BULK_BATCHES lines for new services (QW_BULK_BATCHES=10000
# makes it the 1,000,000-line load of bench/PERFORMANCE.md); long enough
# (6-8 s) that the rate while it runs is not a few seconds' noise
BULK_SERVICES=100
BULK_BATCHES=${QW_BULK_BATCHES:-2000}
# the rate before the load is taken over this long: in a steady stream the
# rate over 4 s was 0.92-1.17 times the next 4 s' (see app_txn_open)
WINDOW_S=10
sc_begin app_bulk_load
# A wait past deadlock_timeout (1 s) is logged. The load writes about 2 kB
# of WAL per line: with the default wal_buffers (4 MB at these 128 MB of
# shared buffers) the worker's commits wait for WAL writes while it runs
# (LWLock WALWrite in a fifth of the worker's active samples); 64 MB, as
# docs/OPERATIONS.md advises beside bulk loads, leaves none.
export QW_PG_CONF_EXTRA="log_lock_waits = on
wal_buffers = 64MB"
sc_pg_start
# 50 ms per status: each service posts at most ~20 batches a second. A
# status read is answered at the commit itself (--wait-poll-ms 0): with
# scabbard's 100 ms looks, the first reads that go out before the commit
# (3-6 % of them: the first-read delay steps down until some do,
# src/submitter/nodes.c) cost a look each, and how many fall in a window of
# 90 posts moves its rate by several per cent either way, which says
# nothing about locks
sc_sim_start --commit-delay-ms 50 --wait-poll-ms 0

# busy: five services with a stream of batches for the whole scenario (the
# lines come service by service, so the last 25 are the five last batches
# of each: S's go into the load); held: one service whose first batches are
# final before the load begins (w1 keeps its claim), and whose last five
# come in the load
sc_gen "$SC_DIR/busy_all.tsv" 5 2005 11 busyx
head -10000 "$SC_DIR/busy_all.tsv" >"$SC_DIR/busy.tsv"
S=$(cut -f1 "$SC_DIR/busy.tsv" | head -1)
sc_gen "$SC_DIR/held.tsv" 1 25 22 heldx
head -20 "$SC_DIR/held.tsv" >"$SC_DIR/held_stream.tsv"
H=$(cut -f1 "$SC_DIR/held.tsv" | head -1)
H_LOADED=$(cut -f2 "$SC_DIR/held.tsv" | tail -5 | sed "s/.*/'&'/" | paste -sd, -)
sc_gen "$SC_DIR/bulk.tsv" $BULK_SERVICES "$BULK_BATCHES" 33 bulkx
tail -5 "$SC_DIR/held.tsv" >>"$SC_DIR/bulk.tsv"
tail -25 "$SC_DIR/busy_all.tsv" | awk -F'\t' -v s="$S" '$1 == s' >>"$SC_DIR/bulk.tsv"

sc_worker_start w1
sc_wait_registered 15 w1
sc_load_tsv "$SC_DIR/held_stream.tsv"
sc_load_tsv "$SC_DIR/busy.tsv"
sc_wait "the held service's first batches are committed" 30 \
    "SELECT count(*) = 20 FROM queuer.batches WHERE service_id = '$H' AND status = 'Committed'"
sc_check_sql "w1 holds the held service and the busy services" 6 \
    "SELECT count(*) FROM queuer.service_id_claims WHERE claimant = 'w1'"
# the busy services' steady rate over the last WINDOW_S seconds before the load
sleep $((WINDOW_S + 2))

t_begin=$(sc_db_now)
sc_load_tsv "$SC_DIR/bulk.tsv"
t_end=$(sc_db_now)
load_s=$(qw_sql "SELECT round(extract(epoch FROM '$t_end'::timestamptz - '$t_begin'::timestamptz)::numeric, 2)")
sc_log "the load of $((BULK_SERVICES * BULK_BATCHES + 10)) lines took $load_s s: $(tail -1 "$SC_DIR/enqueue.out")"
sc_check_num "the load kept its transaction open for seconds (s)" "$load_s" ">=" 1
sc_wait "the held service's loaded batches are committed" 30 \
    "SELECT count(*) = 25 FROM queuer.batches WHERE service_id = '$H' AND status = 'Committed'"
sc_worker_stop w1 30

sc_sim_log_load
# POSTs per second over the load and over the WINDOW_S seconds before it
t_before=$(qw_sql "SELECT '$t_begin'::timestamptz - interval '$WINDOW_S s'")
others="LIKE 'busyx%' AND ev->>'service' <> '$S'"
before=$(sc_post_rate "$others" "$t_before" "$t_begin")
during=$(sc_post_rate "$others" "$t_begin" "$t_end")
s_before=$(sc_post_rate "= '$S'" "$t_before" "$t_begin")
s_during=$(sc_post_rate "= '$S'" "$t_begin" "$t_end")
sc_log "POSTs per second of the busy services but S: $before before the load, $during while it ran;" \
    "of S: $s_before and $s_during"
sc_check_num "the busy services but S kept posting before it (POSTs/s)" "$before" ">=" 16
sc_check_sql "their POST rate while the load ran is within 10% of the rate before" t \
    "SELECT $during >= 0.9 * $before"
sc_check_sql "the held service's loaded batches reached the ledger only after the load committed" 0 \
    "SELECT count(*) FROM scenario.simlog l JOIN queuer.batches b ON b.batch_id = l.ev->>'batch'
      WHERE l.ev->>'ev' = 'post' AND b.service_id = '$H'
        AND b.batch_id IN ($H_LOADED)
        AND (l.ev->>'t')::bigint < (extract(epoch FROM '$t_end'::timestamptz) * 1000000)::bigint
                                   - 1000000"
sc_check_sql "... and the first of them within 2 s of the commit" t \
    "SELECT min((l.ev->>'t')::bigint) <= (extract(epoch FROM '$t_end'::timestamptz) * 1000000)::bigint
                                         + 2000000
       FROM scenario.simlog l JOIN queuer.batches b ON b.batch_id = l.ev->>'batch'
      WHERE l.ev->>'ev' = 'post' AND b.batch_id IN ($H_LOADED)"
locks=$(grep -c 'could not obtain lock\|lock timeout\|still waiting for' "$SC_DIR/pg/postgres.log" || true)
sc_check "no statement failed on a lock or waited a second for one" 0 "$locks"
sc_check_order
