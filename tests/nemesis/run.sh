#!/usr/bin/env bash
# The nemesis: a seeded fault-injection run against a whole queuer cluster
# (private PostgreSQL, scabbard-sim, N workers with test-scale leases, one
# of them in its own network namespace when possible), then a history
# check of invariants I1-I7 after the faults stop and the system drains.
# docs/RELIABILITY.md explains the guarantees, the fault matrix and the
# invariants.
#
#   tests/nemesis/run.sh --short            every fault kind 3 times, seeded (CI; ~3-5 min)
#   tests/nemesis/run.sh --long MINUTES     soak: random faults for MINUTES
#   ... --seed N                            replay a schedule (the seed is always printed)
#
# Options: --repeat N (short: times each kind, default 3), --workers N (host
# workers, default 3), --skip KIND,... (leave kinds out), --only KIND,...
# (just these; `qw-nemesis-plan --list-kinds` names them), --unsafe-db (run
# PostgreSQL without durable commits, to see a crash break I4), --keep (keep the
# run's directory), --build DIR (the meson build directory; default
# $QW_BUILD_ROOT, else ./build). Exit status: 0 no violation, 1 violations,
# 2 the run could not be carried out.
set -u -o pipefail

NM_SOURCE_ROOT=${QW_SOURCE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
NM_BUILD_ROOT=${QW_BUILD_ROOT:-$NM_SOURCE_ROOT/build}
NM_MODE=short
NM_MINUTES=0
NM_SEED=""
NM_REPEAT=3
NM_HOST_N=3
NM_SKIP=""
NM_ONLY=""
NM_PG_DURABLE=on # --unsafe-db: fsync/synchronous_commit off, to show what a crash then does
NM_KEEP=0
NM_BASELINE_DROP=0.01 # share of ledger requests whose connection is dropped, always
NM_DRAIN_S=180

usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
}

while [ $# -gt 0 ]; do
    case "$1" in
    --short) NM_MODE=short ;;
    --long)
        NM_MODE=long
        NM_MINUTES=${2:-}
        shift
        ;;
    --seed)
        NM_SEED=${2:-}
        shift
        ;;
    --repeat)
        NM_REPEAT=${2:-}
        shift
        ;;
    --workers)
        NM_HOST_N=${2:-}
        shift
        ;;
    --skip)
        NM_SKIP=${2:-}
        shift
        ;;
    --only)
        NM_ONLY=${2:-}
        shift
        ;;
    --build)
        NM_BUILD_ROOT=${2:-}
        shift
        ;;
    --keep) NM_KEEP=1 ;;
    --unsafe-db) NM_PG_DURABLE=off ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "run.sh: unknown argument '$1'" >&2
        usage >&2
        exit 2
        ;;
    esac
    shift
done
for v in NM_REPEAT NM_HOST_N; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: ${v#NM_} must be a positive integer" >&2; exit 2; }
done
if [ "$NM_MODE" = long ] && ! [[ "$NM_MINUTES" =~ ^[1-9][0-9]*$ ]]; then
    echo "run.sh: --long needs a number of minutes" >&2
    exit 2
fi
if [ -n "$NM_SEED" ] && ! [[ "$NM_SEED" =~ ^[0-9]{1,15}$ ]]; then
    echo "run.sh: --seed must be a decimal number of at most 15 digits" >&2
    exit 2
fi
[ -n "$NM_SEED" ] || NM_SEED=$(((RANDOM << 30) | (RANDOM << 15) | RANDOM))

: "${QUEUER_BIN:=$NM_BUILD_ROOT/queuer}"
: "${SCABBARD_SIM_BIN:=$NM_BUILD_ROOT/sim/scabbard-sim}"
: "${QUEUER_GEN_BIN:=$NM_BUILD_ROOT/tools/queuer-gen}"
: "${QW_CHECK_BIN:=$NM_BUILD_ROOT/tools/qw-check}"
: "${QW_NEMESIS_PLAN_BIN:=$NM_BUILD_ROOT/tests/nemesis/qw-nemesis-plan}"
export QUEUER_BIN SCABBARD_SIM_BIN QUEUER_GEN_BIN
for bin in "$QUEUER_BIN" "$SCABBARD_SIM_BIN" "$QUEUER_GEN_BIN" "$QW_CHECK_BIN" "$QW_NEMESIS_PLAN_BIN"; do
    [ -x "$bin" ] || { echo "run.sh: missing $bin (build first, or pass --build DIR)" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "run.sh: python3 is needed (JSON of /_sim/stats)" >&2; exit 2; }
if [ -n "$NM_ONLY" ]; then
    for k in $(echo "$NM_ONLY" | tr ',' ' '); do
        "$QW_NEMESIS_PLAN_BIN" --list-kinds | grep -qx -- "$k" || { echo "run.sh: unknown kind '$k'" >&2; exit 2; }
    done
    NM_SKIP=$("$QW_NEMESIS_PLAN_BIN" --list-kinds | grep -vxF -f <(echo "$NM_ONLY" | tr ',' '\n') | paste -sd, -)
fi

# shellcheck source=tests/lib/cluster.sh
. "$NM_SOURCE_ROOT/tests/lib/cluster.sh"
# shellcheck source=tests/nemesis/lib_cluster.sh
. "$NM_SOURCE_ROOT/tests/nemesis/lib_cluster.sh"
# shellcheck source=tests/nemesis/lib_faults.sh
. "$NM_SOURCE_ROOT/tests/nemesis/lib_faults.sh"
# shellcheck source=tests/nemesis/lib_checks.sh
. "$NM_SOURCE_ROOT/tests/nemesis/lib_checks.sh"

NM_T0=$SECONDS
NM_DIR=$(mktemp -d "${TMPDIR:-/tmp}/qw-nemesis.XXXXXX") || exit 2
mkdir -p "$NM_DIR/logs" "$NM_DIR/run"
: >"$NM_DIR/faults.tsv"
trap nm_cleanup EXIT
trap 'exit 130' INT TERM

# I6 bound: from a fault's end, the slowest path back to a commit of an
# affected service is: the dead owner's hard expiry, a statement stuck until
# the client-side deadline, a POST stuck until the HTTP timeout, the Unknown
# confirmation, the longest retry and 429 pause, the submitter's outcome-write
# backoff, two claim cycles, one status long poll and one feed period; plus
# a fixed 5 s margin for a loaded 2-core machine (sanitizer builds included).
NM_BOUND_MS=$((NM_HARD_MS + NM_QUERY_TIMEOUT_MS + NM_HTTP_TIMEOUT_MS + NM_UNKNOWN_CONFIRM_MS +
    NM_RETRY_MAX_MS + NM_PAUSE_MAX_MS + NM_FLUSH_BACKOFF_MS + 2 * NM_CYCLE_MS +
    NM_STATUS_WAIT_S * 1000 + NM_FEED_MS + 5000))

if [ "$NM_MODE" = short ]; then
    NM_MODE_TEXT="short (every kind x$NM_REPEAT)"
    NM_REQUIRE_EFFECTIVE=1
else
    NM_MODE_TEXT="long ($NM_MINUTES min)"
    NM_REQUIRE_EFFECTIVE=0
fi
if [ "$NM_MODE" = short ]; then
    replay="tests/nemesis/run.sh --short --repeat $NM_REPEAT --workers $NM_HOST_N"
else
    replay="tests/nemesis/run.sh --long $NM_MINUTES --workers $NM_HOST_N"
fi
nm_log "seed $NM_SEED, $NM_MODE_TEXT; replay: $replay --seed $NM_SEED${NM_SKIP:+ --skip $NM_SKIP}"
nm_log "directory $NM_DIR; I6 bound ${NM_BOUND_MS} ms"

# ---- the cluster ---------------------------------------------------------------

NM_SKIPPED=()
skip_list=$NM_SKIP
nm_canaries
nm_net_setup
if [ "$NM_NET" != 1 ]; then
    NM_SKIPPED+=("net-partition:$NM_NET_REASON")
    skip_list="$skip_list${skip_list:+,}net-partition"
    nm_log "net-partition skipped: $NM_NET_REASON"
fi
nm_faketime_setup
if [ -z "$NM_FAKETIME_LIB" ]; then
    NM_SKIPPED+=("clock-skew:$NM_FAKETIME_REASON")
    skip_list="$skip_list${skip_list:+,}clock-skew"
    nm_log "clock-skew skipped: $NM_FAKETIME_REASON"
fi
nm_pg_setup
nm_sim_setup
nm_sim_baseline

for i in $(seq 1 "$NM_HOST_N"); do
    NM_HOST_WORKERS+=("w$i")
    NM_WORKERS+=("w$i")
    NM_WMODE[w$i]=plain
done
if [ "$NM_NET" = 1 ]; then
    NM_WORKERS+=(wnet)
    NM_WMODE[wnet]=netns
fi

"$QUEUER_GEN_BIN" --services "$NM_SERVICES" --batches 1 --circuit-prefix nemes --seed 1 \
    >"$NM_DIR/run/services.tsv"
NM_ALL_SERVICES=$(cut -f1 "$NM_DIR/run/services.tsv" | sort -u | paste -sd, -)
nm_feeder_start
for name in "${NM_WORKERS[@]}"; do
    nm_worker_start "$name"
done
[ "$(qw_sql "SELECT count(*) FROM pg_stat_activity WHERE usename = 'qw_nemesis'")" -gt 0 ] ||
    nm_die "no worker session logged in as qw_nemesis (the password canary is not in use)"
qw_wait_sql 60 "SELECT count(DISTINCT service_id) = $NM_SERVICES FROM queuer.batches
                 WHERE status = 'Committed'" 2>/dev/null ||
    nm_die "the cluster did not commit a batch of every service within 60 s"
nm_log "cluster up: workers ${NM_WORKERS[*]}, $NM_SERVICES services fed every ${NM_FEED_MS} ms"

# ---- the schedule ----------------------------------------------------------------

plan_args=(--seed "$NM_SEED" --lease-ms "$NM_LEASE_MS" --query-timeout-ms "$NM_QUERY_TIMEOUT_MS"
           --http-timeout-ms "$NM_HTTP_TIMEOUT_MS" --workers "$NM_HOST_N")
[ -n "$skip_list" ] && plan_args+=(--skip "$skip_list")
if [ "$NM_MODE" = short ]; then
    plan_args+=(--repeat "$NM_REPEAT")
else
    plan_args+=(--count $((NM_MINUTES * 60))) # more than can run: the clock ends the soak
fi
"$QW_NEMESIS_PLAN_BIN" "${plan_args[@]}" >"$NM_DIR/plan.txt" || nm_die "qw-nemesis-plan failed"
nm_log "schedule: $(grep -vc '^#' "$NM_DIR/plan.txt") faults (plan.txt)"

deadline=$((SECONDS + NM_MINUTES * 60))
while read -r -u 3 seq kind target dur gap pick count rate skew_s skew_rate; do
    [[ "$seq" == \#* ]] && continue
    if [ "$NM_MODE" = long ] && [ "$SECONDS" -ge "$deadline" ]; then
        break
    fi
    nm_run_fault "$seq" "$kind" "$target" "$dur" "$gap" "$pick" "$count" "$rate" "$skew_s" "$skew_rate"
done 3<"$NM_DIR/plan.txt"
nm_check_crashes

# ---- drain and check -------------------------------------------------------------

nm_log "faults over; draining"
nm_feeder_stop
nm_drain "$NM_DRAIN_S"
nm_stop_workers
qw_sim_stop
nm_check_ledger
nm_check_i5
nm_check_i7
nm_report >"$NM_DIR/report.txt"
cat "$NM_DIR/report.txt" >>"$NM_DIR/logs/nemesis.log"
cat "$NM_DIR/report.txt"
if [ "$NM_VIOLATIONS" != 0 ]; then
    NM_KEEP=1
    echo "nemesis: 0 passed, 1 failed (seed $NM_SEED; replay: $replay --seed $NM_SEED)"
    exit 1
fi
echo "nemesis: 1 passed, 0 failed"
exit 0
