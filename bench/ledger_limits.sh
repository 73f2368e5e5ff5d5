#!/usr/bin/env bash
# Benchmarks of a ledger whose limits the workers are not told, and two
# reference runs, on a private PostgreSQL and scabbard-sim (per-node
# histories, protocol 2):
#
#   LP  priority under 429-only scarcity: the ledger accepts 300 batches/s
#       and answers 429 to the rest (--rate 300); 200 services x 10 at
#       priority 0 are enqueued, 4 workers start, then 20 services x 10 at
#       priority 10 are enqueued. Figure: the share of priority-0 batches
#       final when the last priority-10 batch is (target <= 10%); beside
#       it the share already final when the first priority-10 batch was,
#       and how long the priority-10 chains took (a chain moves one batch
#       at a time, so the ledger's rate times that long is what the
#       priority-0 batches can take meanwhile without being held back).
#   LC  unconfigured capacity: the ledger takes at most 40 pending batches
#       (429 until it drains to 20) and 1,000 batches/s; 4 workers drain
#       500 services x 10, once without `queuer capacity set` (LC-nocap) and
#       once with `--max-in-flight 36 --per-second 950` (LC-cap). Figures:
#       batches/s, 429s of POSTs, the most batches ever pending at the
#       ledger (targets for LC-nocap: <= 5% 429s, >= 90% of LC-cap's
#       throughput, never more than 40 pending).
#   W1  the plain ledger (20 ms per commit, no limit): 1,000 services x 10,
#       4 workers; batches/s (bench/run.sh's W1-k4, on this build).
#   WF  fairness: 100 services x 40 at one priority, one worker with
#       dlt.channels = 3, a ledger answering each POST 10 ms late (about
#       300 batches/s); Jain's index of the services' committed batches
#       between 1 s after the first commit and the moment the first service
#       has nothing left (bench/run.sh's WF).
#
#   bench/ledger_limits.sh [--build DIR] [--runs LP,LC,W1,WF] [--out DIR] [--sim-args "ARGS"]
#
# --build names a build directory holding queuer, sim/scabbard-sim and
# tools/queuer-gen (default build/release). --sim-args adds simulator
# options to every run: "--wait-poll-ms 0" answers a waiting status query
# at the commit itself, as the simulator did before it modelled scabbard's
# 100 ms looks (the timing the figures of bench/run.sh W7 were taken
# with). Each run prints one line of key=value figures to stdout and to
# <out>/results.txt. LEDGER_LIMITS_LOG_LEVEL sets the workers' log level
# (warn).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build/release
RUNS=LP,LC
OUT=""
SIM_ARGS=()
while [ $# -gt 0 ]; do
    case $1 in
    --build)
        BUILD=$(cd "${2:?--build needs a directory}" && pwd)
        shift
        ;;
    --runs)
        RUNS=${2:?--runs needs a list}
        shift
        ;;
    --out)
        OUT=${2:?--out needs a directory}
        shift
        ;;
    --sim-args)
        read -r -a SIM_ARGS <<<"${2:?--sim-args needs a value}"
        shift
        ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "ledger_limits.sh: unknown argument '$1' (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done

QUEUER_BIN=${QUEUER_BIN:-$BUILD/queuer}
SCABBARD_SIM_BIN=${SCABBARD_SIM_BIN:-$BUILD/sim/scabbard-sim}
QUEUER_GEN_BIN=${QUEUER_GEN_BIN:-$BUILD/tools/queuer-gen}
export QUEUER_BIN SCABBARD_SIM_BIN QUEUER_GEN_BIN
for bin in "$QUEUER_BIN" "$SCABBARD_SIM_BIN" "$QUEUER_GEN_BIN"; do
    [ -x "$bin" ] || {
        echo "ledger_limits.sh: missing $bin (build first)" >&2
        exit 1
    }
done
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/ledger-limits.XXXXXX")}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# shellcheck source=tests/lib/cluster.sh
. "$ROOT/tests/lib/cluster.sh"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
trap 'qw_stop_all immediate >/dev/null 2>&1 || true' EXIT

say() { echo "ledger_limits: $*" >&2; }
die() {
    say "error: $*"
    exit 1
}

WORKER_ENV=(QUEUER_LOG_LEVEL="${LEDGER_LIMITS_LOG_LEVEL:-warn}" QUEUER_WORKER_CYCLE_MS=200)

qw_pg_start "$OUT/pg" >>"$OUT/pg.log" 2>&1 || die "PostgreSQL did not start (see $OUT/pg.log)"

# fresh_db NAME: a new database with the schema; sets QW_DB_CONNINFO.
fresh_db() {
    # shellcheck disable=SC2153 # QW_PG_CONNINFO is set by qw_pg_start
    QW_DB_CONNINFO=$QW_PG_CONNINFO
    qw_sql "DROP DATABASE IF EXISTS $1" >/dev/null
    qw_sql "CREATE DATABASE $1" >/dev/null
    QW_DB_CONNINFO="${QW_PG_CONNINFO/dbname=postgres/dbname=$1}"
    export QW_DB_CONNINFO
    qw_migrate "$OUT/migrate.log" "$QW_DB_CONNINFO" || die "migrate failed"
}

# load FILE [ENQUEUE-ARGS...]
load() {
    local f=$1
    shift
    QUEUER_DATABASE_CONNINFO=$QW_DB_CONNINFO QUEUER_INGEST_HIGH=0 "$QUEUER_BIN" enqueue --tsv "$f" \
        "$@" >>"$OUT/enqueue.log" 2>&1 || die "enqueue of $f failed"
}

workers() {
    local dir=$1 i
    for i in 1 2 3 4; do
        qw_worker_start "$dir" "w$i" "${WORKER_ENV[@]}"
    done
}

wait_final() {
    qw_wait_sql "$1" "$QW_ALL_FINAL_SQL" || die "not every batch final within $1 s"
}

sim_stat() {
    curl -fsS -m 5 "$QW_SIM_URL/_sim/stats" | python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"
}

figure() {
    echo "$*" | tee -a "$OUT/results.txt"
}

run_priority() {
    local dir=$OUT/LP t0 t1 frac posts refused spread
    mkdir -p "$dir"
    fresh_db b_lp
    qw_gen "$dir/low.tsv" 200 10 41 lowpr
    qw_gen "$dir/high.tsv" 20 10 42 highp
    load "$dir/low.tsv"
    qw_sim_start "$dir/sim" --rate 300 --seed 1 "${SIM_ARGS[@]}" || die "scabbard-sim did not start"
    t0=$(date +%s.%N)
    workers "$dir"
    load "$dir/high.tsv" --priority 10
    wait_final 300
    t1=$(date +%s.%N)
    # the share of priority-0 batches final when the last priority-10 one
    # was, of them those already final when the first priority-10 one was,
    # and how long the priority-10 chains took from their first commit to
    # their last (their ten steps, each a POST, a commit and a status read)
    read -r frac before chains <<<"$(qw_sql "WITH fin AS (
                       SELECT b.service_id LIKE 'highp%' AS high, h.at
                         FROM queuer.batch_history h JOIN queuer.batches b USING (batch_id)
                        WHERE h.to_status = 'Committed'), hi AS (
                       SELECT min(at) AS first, max(at) AS last FROM fin WHERE high)
                   SELECT round(100.0 * count(*) FILTER (WHERE NOT high AND at <= hi.last) / 2000, 1),
                          round(100.0 * count(*) FILTER (WHERE NOT high AND at <= hi.first) / 2000, 1),
                          round(extract(epoch FROM hi.last - hi.first)::numeric, 2)
                     FROM fin, hi GROUP BY hi.first, hi.last" | tr '|' ' ')"
    posts=$(sim_stat 'sum(d["posts"].values())')
    refused=$(sim_stat 'd["posts"]["429"]')
    spread=$(qw_sql "SELECT string_agg(n::text, '/' ORDER BY n DESC) FROM (
                         SELECT count(DISTINCT service_id) AS n FROM queuer.batch_history
                          WHERE to_status = 'Committed' AND service_id LIKE 'highp%'
                          GROUP BY instance_id) x")
    qw_workers_stop "$dir"
    qw_sim_stop
    figure "run=LP low_final_pct_when_high_done=$frac low_final_pct_when_high_began=$before" \
        "high_chains_s=$chains posts=$posts posts_429=$refused high_services_per_worker=$spread" \
        "span_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')"
}

run_capacity() {
    local name=$1 dir=$OUT/$1 t0 t1 posts refused maxq bps
    mkdir -p "$dir"
    fresh_db "b_$(echo "${name,,}" | tr - _)"
    [ -s "$OUT/lc.tsv" ] || qw_gen "$OUT/lc.tsv" 500 10 7 capac
    load "$OUT/lc.tsv"
    if [ "$name" = LC-cap ]; then
        QUEUER_DATABASE_CONNINFO=$QW_DB_CONNINFO "$QUEUER_BIN" capacity set --max-in-flight 36 \
            --per-second 950 >>"$dir/capacity.log" 2>&1 || die "capacity set failed"
    fi
    qw_sim_start "$dir/sim" --global-limit 40 --global-resume 20 --rate 1000 --seed 1 \
        "${SIM_ARGS[@]}" ||
        die "scabbard-sim did not start"
    t0=$(date +%s.%N)
    workers "$dir"
    wait_final 300
    t1=$(date +%s.%N)
    posts=$(sim_stat 'sum(d["posts"].values())')
    refused=$(sim_stat 'd["posts"]["429"]')
    maxq=$(sim_stat 'd["max_queued_total"]')
    qw_workers_stop "$dir"
    qw_sim_stop
    bps=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", 5000 / (b - a) }')
    figure "run=$name batches_per_s=$bps posts=$posts posts_429=$refused" \
        "pct_429=$(awk -v r="$refused" -v p="$posts" 'BEGIN { printf "%.2f", (p > 0 ? 100 * r / p : 0) }')" \
        "max_pending=$maxq"
}

run_w1() {
    local dir=$OUT/W1 t0 t1
    mkdir -p "$dir"
    fresh_db b_w1
    [ -s "$OUT/w1.tsv" ] || qw_gen "$OUT/w1.tsv" 1000 10 1 wonep
    load "$OUT/w1.tsv"
    qw_sim_start "$dir/sim" --seed 1 "${SIM_ARGS[@]}" || die "scabbard-sim did not start"
    t0=$(date +%s.%N)
    workers "$dir"
    wait_final 300
    t1=$(date +%s.%N)
    qw_workers_stop "$dir"
    qw_sim_stop
    figure "run=W1 batches_per_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", 10000 / (b - a) }')"
}

run_fairness() {
    local dir=$OUT/WF jain
    mkdir -p "$dir"
    fresh_db b_wf
    [ -s "$OUT/wf.tsv" ] || qw_gen "$OUT/wf.tsv" 100 40 51 fairs
    load "$OUT/wf.tsv"
    qw_sim_start "$dir/sim" --node-latency-ms 0:10 --seed 1 "${SIM_ARGS[@]}" ||
        die "scabbard-sim did not start"
    qw_worker_start "$dir" w1 "${WORKER_ENV[@]}" QUEUER_DLT_CHANNELS=3
    wait_final 300
    jain=$(qw_sql "$(bench_jain_sql)")
    qw_workers_stop "$dir"
    qw_sim_stop
    figure "run=WF jain_index=$jain"
}

for run in ${RUNS//,/ }; do
    case $run in
    LP) run_priority ;;
    LC)
        run_capacity LC-nocap
        run_capacity LC-cap
        ;;
    LC-nocap | LC-cap) run_capacity "$run" ;;
    W1) run_w1 ;;
    WF) run_fairness ;;
    *) die "unknown run '$run' (LP, LC, LC-nocap, LC-cap, W1, WF)" ;;
    esac
done
say "results in $OUT/results.txt"
