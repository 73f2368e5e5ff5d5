#!/usr/bin/env bash
# Benchmark of the worker cycle against a private PostgreSQL and the
# scabbard simulator; prints a small table. Not a test: it asserts only
# that each phase reached the state it measures.
#
#   QW_BUILD_ROOT=build-x bench/worker_cycle.sh      (or QUEUER_BIN etc., as for
#                                                    the scenario tests)
#   BENCH_SERVICES=10000   services held by the one worker of phase 1
#   BENCH_SAMPLE_S=10      seconds of cycles sampled in phase 1
#   BENCH_TAKEOVER_S=200   services of phase 2
#   BENCH_LOAD_S=300 BENCH_LOAD_K=20   workload of phase 3 (services x batches)
#
# 1. Cycle time with BENCH_SERVICES claimed services: one worker at
#    log level debug prints `event=claims.done ... us=` (maintain, release,
#    renew, claim: one serializable transaction) and `event=queue.done all=1
#    ... us=` (fetch + serial choice + mark) for every cycle. The ledger's
#    commits take an hour, so every service keeps its work (one batch
#    Pending or waiting behind dlt.max_in_flight).
# 2. Takeover time: after kill -9 of the holder (bounded below by the
#    lease) and after SIGTERM (claims released at once), measured on the
#    database clock like tests/scenarios/worker_kill9.sh.
# 3. Serialization retries per cycle: three workers drain a workload with
#    fast commits; each prints `event=worker.summary ...
#    serialization_retries=N cycles=M` when it stops.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/../tests/scenarios/lib_scenario.sh"

N=${BENCH_SERVICES:-10000}
SAMPLE_S=${BENCH_SAMPLE_S:-10}
TAKEOVER_S=${BENCH_TAKEOVER_S:-200}
LOAD_S=${BENCH_LOAD_S:-300}
LOAD_K=${BENCH_LOAD_K:-20}
SC_LEASE_MS=2000
SC_HARD_MS=6000
SC_CYCLE_MS=200
sc_begin worker_cycle_bench
sc_pg_start
RESULTS="$SC_DIR/results.tsv"
: >"$RESULTS"
result() { printf '%s\t%s\n' "$1" "$2" >>"$RESULTS"; }

# stats FILE: "median / p90 / max (n samples)" of one number per line, in ms.
stats() {
    sort -n "$1" | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "no samples"; exit }
        printf "%.1f / %.1f / %.1f ms (n=%d)", v[int((NR + 1) / 2)] / 1000,
               v[int(NR * 0.9 + 0.999)] / 1000, v[NR] / 1000, NR }'
}

reset_db() {
    qw_stop_phase
    qw_sql "TRUNCATE queuer.batches, queuer.batch_history, queuer.service_id_claims,
                     queuer.instances, queuer.service_ingest, scenario.watch" >/dev/null
}

qw_stop_phase() {
    qw_workers_stop "$SC_DIR" 2>/dev/null
    qw_sim_stop
}

# ---- 1. cycle time with N claimed services ----------------------------------
sc_log "phase 1: one worker, $N services"
sc_sim_start --commit-delay-ms 3600000
sc_gen "$SC_DIR/cycle.tsv" "$N" 1 7 cyclb
sc_load_tsv "$SC_DIR/cycle.tsv"
sc_worker_start c1 QUEUER_LOG_LEVEL=debug QUEUER_WORKER_LEASE_MS=10000 \
    QUEUER_WORKER_HARD_EXPIRY_MS=30000 QUEUER_WORKER_CYCLE_MS=500
sc_wait "c1 holds all $N services" 120 \
    "SELECT count(*) = $N FROM queuer.service_id_claims WHERE claimant = 'c1'"
from=$(wc -l <"$SC_DIR/c1.log")
sleep "$SAMPLE_S" # sampling window: cycles run on their own timer meanwhile
tail -n +"$((from + 1))" "$SC_DIR/c1.log" >"$SC_DIR/c1.sample"
grep "event=claims.done held=$N " "$SC_DIR/c1.sample" | sed -E 's/.* us=([0-9]+).*/\1/' >"$SC_DIR/claims.us"
grep "event=queue.done all=1 " "$SC_DIR/c1.sample" | sed -E 's/.* us=([0-9]+).*/\1/' >"$SC_DIR/queue.us"
result "claims transaction, $N held (median / p90 / max)" "$(stats "$SC_DIR/claims.us")"
result "fetch + queue transaction, $N held" "$(stats "$SC_DIR/queue.us")"
result "  (worker.cycle_ms = 500, lease 10 s, dlt.max_in_flight = 256)" ""

# ---- 2. takeover after kill -9 and after SIGTERM -----------------------------
reset_db
sc_log "phase 2: takeover of $TAKEOVER_S services"
sc_sim_start --commit-delay-ms 50
sc_sim_pause
sc_worker_start k1
sc_wait_registered 15 k1
sc_gen "$SC_DIR/takeover.tsv" "$TAKEOVER_S" 1 8 takeo
sc_load_tsv "$SC_DIR/takeover.tsv"
sc_wait "k1 holds every service, each with a batch Pending" 60 \
    "SELECT count(*) = $TAKEOVER_S FROM queuer.service_id_claims c WHERE c.claimant = 'k1'
        AND EXISTS (SELECT 1 FROM queuer.batches b WHERE b.service_id = c.service_id AND b.status = 'Pending')"
sc_worker_start k2
sc_wait_registered 15 k2
sc_wait "k1 renewed its claims a moment ago" 10 \
    "SELECT min(expiry_1) > now() + $((SC_LEASE_MS * 8 / 10)) * interval '1 millisecond'
       FROM queuer.service_id_claims WHERE claimant = 'k1'"
kill_at=$(sc_db_now)
sc_worker_kill k1
sc_wait "k1's sessions have ended" 10 \
    "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'k1'"
sc_watch_claims kill "c.claimant = 'k1'" >/dev/null
sc_await_takeover $((SC_HARD_MS / 1000 + 10)) >/dev/null
TAKEN=$(sc_taken_at)
result "takeover after kill -9, from the kill (min / median / max)" "$(qw_sql \
    "SELECT format('%s / %s / %s ms', min(d), percentile_disc(0.5) WITHIN GROUP (ORDER BY d), max(d))
       FROM (SELECT $(sc_ms "$TAKEN - '$kill_at'::timestamptz") AS d FROM scenario.watch w WHERE tag = 'kill') x")"
result "  ... after the claim's expiry_1 (lease ${SC_LEASE_MS} ms, cycle ${SC_CYCLE_MS} ms)" "$(qw_sql \
    "SELECT format('%s / %s / %s ms', min(d), percentile_disc(0.5) WITHIN GROUP (ORDER BY d), max(d))
       FROM (SELECT $(sc_ms "$TAKEN - w.old_expiry_1") AS d FROM scenario.watch w WHERE tag = 'kill') x")"

sc_worker_start k3
sc_wait_registered 15 k3
sc_watch_claims term "c.claimant = 'k2'" >/dev/null
sc_takeover_poll_start 10 >/dev/null
sig_at=$(sc_db_now)
sc_worker_signal k2 TERM
sc_takeover_poll_wait >/dev/null
sc_worker_wait_exit k2 15
result "takeover after SIGTERM, from the signal (min / median / max)" "$(qw_sql \
    "SELECT format('%s / %s / %s ms', min(d), percentile_disc(0.5) WITHIN GROUP (ORDER BY d), max(d))
       FROM (SELECT $(sc_ms "$TAKEN - '$sig_at'::timestamptz") AS d FROM scenario.watch w WHERE tag = 'term') x")"
result "  (SIGTERM: exit code $SC_RC)" ""

# ---- 3. serialization retries per cycle under three workers ------------------
reset_db
sc_log "phase 3: three workers drain $LOAD_S services x $LOAD_K batches"
sc_sim_start --commit-delay-ms 20
for w in s1 s2 s3; do
    sc_worker_start $w
done
sc_wait_registered 15 s1 s2 s3
sc_gen "$SC_DIR/load.tsv" "$LOAD_S" "$LOAD_K" 9 loads
t0=$EPOCHREALTIME
sc_load_tsv "$SC_DIR/load.tsv"
sc_wait_all_final 300
t1=$EPOCHREALTIME
for w in s1 s2 s3; do
    sc_worker_signal $w TERM
    sc_worker_wait_exit $w 15
done
result "drain $((LOAD_S * LOAD_K)) batches with 3 workers (20 ms commits)" \
    "$(awk -v a="$t0" -v b="$t1" -v n=$((LOAD_S * LOAD_K)) 'BEGIN { printf "%.1f s (%.0f batches/s)", b - a, n / (b - a) }')"
for w in s1 s2 s3; do
    line=$(grep -o 'event=worker.summary.*' "$SC_DIR/$w.log")
    retries=$(sed -E 's/.*serialization_retries=([0-9]+).*/\1/' <<<"$line")
    cycles=$(sed -E 's/.* cycles=([0-9]+).*/\1/' <<<"$line")
    result "serialization retries per cycle, $w" \
        "$(awk -v r="$retries" -v c="$cycles" 'BEGIN { printf "%.3f (%d retries / %d cycles)", c ? r / c : 0, r, c }')"
done

echo
echo "worker cycle benchmark ($(nproc) CPUs, PostgreSQL fsync ${QW_PG_FSYNC:-off})"
awk -F'\t' '{ printf "  %-62s %s\n", $1, $2 }' "$RESULTS"
