#!/usr/bin/env bash
# The held-xmin soak: K workers drain a W1-sized queue (SERVICES x BATCHES,
# topped up with a new round whenever less than one is left, looked at once
# a second from the ledger's count of batches it committed: counting the
# open batches in the database instead reads every version a held snapshot
# keeps, up to 3 s of a core a count, a load only the held run would carry)
# for SOAK_SECONDS, with `queuer prune` deleting what became final more than
# PRUNE_AGE ago every PRUNE_EVERY_S, once as it is and once while another
# session holds a REPEATABLE READ transaction open for the whole run (its
# snapshot keeps every row version deleted or updated after it began: the
# classic queue-bloat case). Each run gets a new private PostgreSQL and
# scabbard-sim. Every SAMPLE_S it records the batches made final, the open
# backlog, dead and live tuples, and the sizes of the queue tables and
# their indexes; at the end it prints one table per run and the ratio of
# the two throughputs. Not a test; the samples, the prune runs' durations
# and the workers' logs go to OUT.
#
# usage: bench/soak_xmin.sh [BUILD_DIR]        (default: build)
#   SOAK_SECONDS (600), SAMPLE_S (30), WORKERS (4), SERVICES (1000),
#   BATCHES (10), PRUNE_EVERY_S (60), PRUNE_AGE (1m)
#   RUNS         which runs, in order (default "free held")
#   SETUP_SQL    statements run after the migrations (e.g. other table
#                settings, to compare)
#   OUT          where the samples go (default: a new temporary directory)
#   QW_PG_FSYNC=on  durable commits (default off, like the tests)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
soak_s=${SOAK_SECONDS:-600}
sample_s=${SAMPLE_S:-30}
workers=${WORKERS:-4}
services=${SERVICES:-1000}
batches=${BATCHES:-10}
prune_every_s=${PRUNE_EVERY_S:-60}
prune_age=${PRUNE_AGE:-1m}
runs=${RUNS:-free held}
for bin in queuer tools/queuer-gen sim/scabbard-sim; do
    [ -x "$build/$bin" ] || {
        echo "soak_xmin: $build/$bin not built (meson compile -C $build)" >&2
        exit 1
    }
done
export QUEUER_BIN=$build/queuer SCABBARD_SIM_BIN=$build/sim/scabbard-sim
# shellcheck source=tests/lib/cluster.sh
. "$root/tests/lib/cluster.sh"
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/qwsoak.XXXXXX")}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/qwsoakrun.XXXXXX")
chmod 755 "$work"
helpers=()
cleanup() {
    [ "${#helpers[@]}" = 0 ] || kill "${helpers[@]}" 2>/dev/null || true
    qw_stop_all 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
round=0

# Enqueues round $1 of the workload (new batch ids for the same services).
feed_round() {
    "$build/tools/queuer-gen" --services "$services" --batches "$batches" --seed "$((1000 + $1))" \
        >"$work/round.tsv"
    QUEUER_DATABASE_CONNINFO=$db QUEUER_INGEST_HIGH=0 "$QUEUER_BIN" enqueue --tsv "$work/round.tsv" \
        >/dev/null
}

# Non-final batches (the batches_open index's predicate: no scan of the table).
open_batches() {
    psql -X -q -t -A "$db" -c "SELECT count(*) FROM queuer.batches
                               WHERE status IS NULL OR status IN ('Pending', 'Unknown', 'Delayed')"
}

# Batches the ledger committed or found invalid so far (the simulator's
# counters: final in the ledger, so final in the database a moment later).
ledger_final() {
    curl -fsS -m 5 "$QW_SIM_URL/_sim/stats" |
        grep -oE '"(committed|invalid)": *[0-9]+' | awk -F: '{ n += $2 } END { print n + 0 }'
}

# One sample line: seconds, final so far, open, then per table live and dead
# tuples, table (heap and TOAST) and index bytes.
sample() {
    local t=$1 enqueued=$2 open
    open=$(open_batches)
    psql -X -q -t -A -F $'\t' "$db" -c "
        SELECT $t, $enqueued - $open, $open,
               string_agg(format('%s:%s:%s:%s:%s', s.relname, s.n_live_tup, s.n_dead_tup,
                                 pg_table_size(s.relid), pg_indexes_size(s.relid)),
                          ' ' ORDER BY s.relname)
          FROM pg_stat_user_tables s
         WHERE s.schemaname = 'queuer'
           AND s.relname IN ('batches', 'batch_history', 'service_id_claims', 'service_ingest')"
}

# One run: $1 free or held.
soak_run() {
    local mode=$1 dir=$work/$1 t0 now next_sample enqueued=0 open held_pid=""
    QW_PG_FSYNC=${QW_PG_FSYNC:-off} qw_pg_start "$dir/pg" >/dev/null
    qw_psql -c "CREATE DATABASE soak" >/dev/null
    db="$QW_PG_CONNINFO dbname=soak"
    QUEUER_DATABASE_CONNINFO=$db "$QUEUER_BIN" migrate >/dev/null
    [ -z "${SETUP_SQL:-}" ] || psql -X -q -v ON_ERROR_STOP=1 "$db" -c "$SETUP_SQL" >/dev/null
    # the simulator's event log is not read here: it would grow by gigabytes
    mkdir -p "$dir/sim"
    ln -sf /dev/null "$dir/sim/sim.ndjson"
    qw_sim_start "$dir/sim" --commit-delay-ms 20 --seed 1 >/dev/null
    if [ "$mode" = held ]; then
        psql -X -q "$db application_name=soak_holder" >/dev/null 2>&1 <<SQL &
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) FROM queuer.batches;
SELECT pg_sleep($((soak_s + 600)));
COMMIT;
SQL
        held_pid=$!
        helpers+=("$held_pid")
        qw_wait_sql 20 "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                                        WHERE application_name = 'soak_holder'
                                          AND backend_xmin IS NOT NULL)"
    fi
    feed_round "$round"
    round=$((round + 1))
    enqueued=$((services * batches))
    for i in $(seq 1 "$workers"); do
        QW_DB_CONNINFO=$db qw_worker_start "$dir" "w$i"
    done
    t0=$(date +%s)
    next_sample=$((t0 + sample_s))
    printf 't_s\tfinal\topen\ttables (name:live:dead:table_bytes:index_bytes)\n' >"$out/$mode.tsv"
    : >"$out/$mode.prune"
    sample 0 "$enqueued" >>"$out/$mode.tsv"
    # prune on its own schedule, beside the feeding (a slow prune must not
    # starve the workers of work)
    (
        next_prune=$((t0 + prune_every_s))
        while [ "$next_prune" -lt $((t0 + soak_s)) ]; do
            now=$(date +%s)
            [ "$now" -ge "$next_prune" ] || sleep $((next_prune - now))
            now=$(date +%s)
            QUEUER_DATABASE_CONNINFO=$db "$QUEUER_BIN" prune --older-than "$prune_age" >/dev/null
            echo "$((now - t0)) $(($(date +%s) - now))" >>"$out/$mode.prune"
            next_prune=$((next_prune + prune_every_s))
        done
    ) &
    local pruner=$!
    helpers+=("$pruner")
    while :; do
        now=$(date +%s)
        [ "$now" -lt $((t0 + soak_s)) ] || break
        open=$((enqueued - $(ledger_final)))
        if [ "$open" -lt $((services * batches)) ]; then
            feed_round "$round"
            round=$((round + 1))
            enqueued=$((enqueued + services * batches))
        fi
        if [ "$now" -ge "$next_sample" ]; then
            sample $((now - t0)) "$enqueued" >>"$out/$mode.tsv"
            next_sample=$((next_sample + sample_s))
        fi
        sleep 1
    done
    sample $(($(date +%s) - t0)) "$enqueued" >>"$out/$mode.tsv"
    wait "$pruner" || true
    qw_workers_stop "$dir"
    cat "$dir"/w*.log >"$out/$mode.workers.log" 2>/dev/null || true
    if [ -n "$held_pid" ]; then
        psql -X -q "$db" -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                             WHERE application_name = 'soak_holder'" >/dev/null
        wait "$held_pid" 2>/dev/null || true
    fi
    qw_sim_stop
    qw_pg_stop fast
    rm -rf "$dir"
}

# The table of run $1: throughput per interval, backlog, batches and history.
report() {
    echo "run $1 ($workers workers, ${services}x$batches per round, prune every ${prune_every_s} s" \
         "of batches final ${prune_age} ago):"
    printf '| t s | batches/s | open | batches live / dead | batches table + indexes MB | history live / dead | history table + indexes MB |\n'
    printf '|---|---|---|---|---|---|---|\n'
    awk -F'\t' 'NR > 1 {
        n = split($4, t, " ")
        for (i = 1; i <= n; i++) { split(t[i], f, ":"); live[f[1]] = f[2]; dead[f[1]] = f[3]
                                   heap[f[1]] = f[4]; idx[f[1]] = f[5] }
        rate = (NR > 2 && $1 > pt) ? ($2 - pf) / ($1 - pt) : 0
        printf "| %d | %.0f | %d | %d / %d | %.1f + %.1f | %d / %d | %.1f + %.1f |\n", $1, rate, $3,
               live["batches"], dead["batches"], heap["batches"] / 1048576, idx["batches"] / 1048576,
               live["batch_history"], dead["batch_history"], heap["batch_history"] / 1048576,
               idx["batch_history"] / 1048576
        pt = $1; pf = $2 }' "$out/$1.tsv"
}

# Mean batches/s of run $1 after its first sample interval.
mean_rate() {
    awk -F'\t' 'NR == 3 { t0 = $1; f0 = $2 } NR > 3 { t = $1; f = $2 }
                END { if (t > t0) printf "%.0f", (f - f0) / (t - t0); else print 0 }' "$out/$1.tsv"
}

echo "soak_xmin: $soak_s s per run, samples in $out; machine: $(nproc) CPUs, load average" \
     "$(cut -d' ' -f1-3 /proc/loadavg)"
for mode in $runs; do
    soak_run "$mode"
    report "$mode"
    echo "run $mode: $(mean_rate "$mode") batches/s after the first ${sample_s} s; prune runs" \
         "(started at s: took s): $(awk '{ printf "%s: %s  ", $1, $2 }' "$out/$mode.prune")"
done
if [ -f "$out/free.tsv" ] && [ -f "$out/held.tsv" ]; then
    awk -v a="$(mean_rate free)" -v b="$(mean_rate held)" \
        'BEGIN { if (a > 0) printf "held / free throughput: %.2f\n", b / a }'
fi
