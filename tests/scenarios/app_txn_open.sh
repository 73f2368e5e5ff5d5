#!/usr/bin/env bash
# Scenario: an application enqueues inside its own transaction and keeps it
# open (BEGIN; SELECT queuer.enqueue_batch(S0, ...); ... 15 s ...; COMMIT).
# Enqueueing inside a business transaction must be harmless: the worker
# that holds S0 and five other services, all with a stream of work, keeps
# posting the others at the same rate while the transaction is open, and
# S0's new batch waits only for that commit. The enqueue holds S0's ingest row (creation order)
# until it commits; no worker statement about another service needs it,
# and no fenced write fails or waits because of it (no lock errors in the
# server log).
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

OPEN_S=15 # how long the application keeps its transaction open
# The POST rate is compared over the whole time the transaction is open and
# over as long before it. (Over 4 s the busy services' rate alone varied
# between 0.92 and 1.17 times the 4 s before it, where nothing changed;
# over 15 s between 0.95 and 1.05.)
WINDOW_S=$OPEN_S
sc_begin app_txn_open
sc_pg_start
# 50 ms per status: each service posts at most ~20 batches a second
sc_sim_start --commit-delay-ms 50

sc_worker_start w1
sc_wait_registered 15 w1
# S1..S5: a steady stream of batches for the whole scenario; S0: a shorter
# one, final before the application begins (w1 keeps all six claims), so
# that the application's batch waits for its commit and nothing else
sc_gen "$SC_DIR/busy.tsv" 5 800 11 busyx
sc_gen "$SC_DIR/s0.tsv" 1 201 22 appxx
head -200 "$SC_DIR/s0.tsv" >"$SC_DIR/s0_stream.tsv"
tail -1 "$SC_DIR/s0.tsv" >"$SC_DIR/s0_late.tsv"
S0=$(cut -f1 "$SC_DIR/s0.tsv" | head -1)
LATE=$(cut -f2 "$SC_DIR/s0_late.tsv")
sc_load_tsv "$SC_DIR/s0_stream.tsv"
sc_load_tsv "$SC_DIR/busy.tsv"
sc_wait "w1 holds S0 and the busy services" 20 \
    "SELECT count(*) = 6 FROM queuer.service_id_claims WHERE claimant = 'w1'"

sleep $((WINDOW_S + 1)) # the busy services post at their steady rate by now
sc_wait "S0's stream is committed" 60 \
    "SELECT count(*) = 200 FROM queuer.batches WHERE service_id = '$S0' AND status = 'Committed'"

# The application's transaction: enqueue S0's next batch, then stay open.
# (back pressure off: S0 has a long backlog on purpose)
t_begin=$(sc_db_now)
sc_app_txn_start "$(cat "$SC_DIR/s0_late.tsv")" "$OPEN_S"
sc_app_txn_end
t_commit=$(sc_db_now)
sc_wait "S0's batch is posted after the commit" 10 \
    "SELECT EXISTS (SELECT 1 FROM queuer.batches WHERE batch_id = '$LATE' AND status = 'Committed')"
sc_wait_all_final 120

sc_sim_log_load
# POSTs of the busy services per second, in a window ending at the
# application's BEGIN and over the open transaction (WINDOW_S seconds before
# its commit)
rate() {
    local from
    from=$(qw_sql "SELECT '$1'::timestamptz - interval '$WINDOW_S s'")
    sc_post_rate "LIKE 'busyx%'" "$from" "$1"
}
before=$(rate "$t_begin")
during=$(rate "$t_commit")
sc_log "busy services' POSTs per second: $before before the transaction, $during while it was open"
sc_check_num "the busy services kept posting before it (POSTs/s)" "$before" ">=" 20
sc_check_sql "their POST rate while it was open is within 10% of the rate before" t \
    "SELECT $during >= 0.9 * $before"
sc_check_sql "S0's batch reached the ledger only after the application committed" 0 \
    "SELECT count(*) FROM scenario.simlog
      WHERE ev->>'ev' = 'post' AND ev->>'batch' = '$LATE'
        AND (ev->>'t')::bigint < (extract(epoch FROM '$t_commit'::timestamptz) * 1000000)::bigint
                                 - 1000000"
sc_check_sql "... and within 2 s of the commit" t \
    "SELECT min((ev->>'t')::bigint) <= (extract(epoch FROM '$t_commit'::timestamptz) * 1000000)::bigint
                                       + 2000000
       FROM scenario.simlog WHERE ev->>'ev' = 'post' AND ev->>'batch' = '$LATE'"
locks=$(grep -c 'could not obtain lock\|lock timeout' "$SC_DIR/pg/postgres.log" || true)
sc_check "no statement failed or timed out on a lock" 0 "$locks"
sc_check_order
sc_worker_stop w1 15
