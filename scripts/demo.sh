#!/usr/bin/env bash
# README command 1: the queuer demo. On a fresh Debian 12 machine, as root or a
# user with sudo: installs the packages (scripts/deps.sh), builds a release
# build in build/release, starts a private PostgreSQL under .cluster/, the
# scabbard-sim ledger and W workers (scripts/cluster.sh), enqueues a sample
# workload, shows progress once a second, prints a summary with the invariant
# check (qw-check), looks inside (queuer status, two operator views, one
# batch's history) and stops everything at the end or on Ctrl-C.
#
# usage: scripts/demo.sh [--services N] [--batches K] [--workers W] [--keep]
#   --services N   services in the sample workload (1000)
#   --batches K    batches per service (20)
#   --workers W    queuer run processes (3)
#   --keep         leave the cluster running at the end for inspection
#                  (eval "$(scripts/cluster.sh env)" points queuer at it;
#                  scripts/cluster.sh stop stops it, scripts/cluster.sh clean
#                  also removes .cluster/); Ctrl-C always stops it
# Environment: QWC_BUILD (build directory, build/release), QWC_DIR (.cluster).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

services=1000
batches=20
workers=3
keep=0
while [ $# -gt 0 ]; do
    case $1 in
    --services) services=${2:?--services needs a number}; shift 2 ;;
    --batches) batches=${2:?--batches needs a number}; shift 2 ;;
    --workers) workers=${2:?--workers needs a number}; shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help)
        sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *) echo "demo.sh: unknown option $1 (try --help)" >&2; exit 64 ;;
    esac
done
for n in "$services" "$batches" "$workers"; do
    case $n in
    '' | *[!0-9]* | 0) echo "demo.sh: --services, --batches and --workers take numbers >= 1" >&2; exit 64 ;;
    esac
done

say() { printf '\n== %s\n' "$*"; }
now_us() { echo "${EPOCHREALTIME/./}"; }
# Formats a microsecond duration as seconds with one decimal.
secs() { awk -v us="$1" 'BEGIN { printf "%.1f", us / 1e6 }'; }

say "installing packages (scripts/deps.sh)"
scripts/deps.sh

QWC_BUILD=${QWC_BUILD:-$root/build/release}
QWC_DIR=${QWC_DIR:-$root/.cluster}
say "building ($QWC_BUILD)"
if [ ! -f "$QWC_BUILD/build.ninja" ]; then
    meson setup "$QWC_BUILD" --buildtype=release -Dtests=false >/dev/null
fi
meson compile -C "$QWC_BUILD" >/dev/null
echo "built: $("$QWC_BUILD/queuer" --version 2>/dev/null || echo queuer)"

QUEUER_GEN_BIN=$QWC_BUILD/tools/queuer-gen
QW_CHECK_BIN=$QWC_BUILD/tools/qw-check
# shellcheck source=scripts/cluster.sh
. "$root/scripts/cluster.sh"

stopping=0
# shellcheck disable=SC2317 # runs from the traps below
stop_all() {
    [ "$stopping" = 0 ] || return 0
    stopping=1
    echo
    echo "stopping workers (SIGTERM: they release their claims), scabbard-sim and PostgreSQL ..."
    qwc_stop
    echo "stopped."
}
# shellcheck disable=SC2317
on_exit() {
    local rc=$?
    if [ "$keep" = 1 ] && [ "$rc" = 0 ]; then
        return
    fi
    stop_all
}
trap on_exit EXIT
trap 'echo; echo "interrupted"; stop_all; trap - EXIT; exit 130' INT TERM

say "starting PostgreSQL 15 ($QWC_DIR/pg), scabbard-sim and $workers workers"
qwc_stop # a cluster left running by an earlier --keep
qwc_start --fresh --workers "$workers"
echo "PostgreSQL:   $QW_PG_CONNINFO"
echo "scabbard-sim: $QW_SIM_URL (bearer token required; event log $QW_SIM_LOG)"
echo "workers:      $(for i in $(seq 1 "$workers"); do printf 'w%s ' "$i"; done)(logs in $QWC_DIR/workers/)"

total=$((services * batches))
say "enqueueing $services services x $batches batches = $total batches"
qw_gen "$QWC_DIR/workload.tsv" "$services" "$batches"
t0=$(now_us)
qw_load_tsv "$QWC_DIR/workload.tsv"
t_loaded=$(now_us)
echo "enqueued in $(secs $((t_loaded - t0))) s (ingest back pressure off for this load: QUEUER_INGEST_HIGH=0)"

progress_sql="
SELECT b.done, b.invalid, b.in_flight, b.delayed, b.unknown, b.waiting, coalesce(w.txt, '')
  FROM (SELECT count(*) FILTER (WHERE status IN ('Committed', 'Valid')) AS done,
               count(*) FILTER (WHERE status = 'Invalid') AS invalid,
               count(*) FILTER (WHERE status = 'Pending' OR (submitted AND status IS NULL))
                   AS in_flight,
               count(*) FILTER (WHERE status = 'Delayed') AS delayed,
               count(*) FILTER (WHERE status = 'Unknown') AS unknown,
               count(*) FILTER (WHERE status IS NULL AND NOT submitted) AS waiting
          FROM queuer.batches) b,
       (SELECT string_agg(format('%s %s (%s svc)', i.instance_id, coalesce(h.n, 0), coalesce(c.n, 0)),
                          '  ' ORDER BY i.instance_id) AS txt
          FROM queuer.instances i
          LEFT JOIN (SELECT instance_id, count(*) AS n FROM queuer.batch_history
                      WHERE to_status = 'Committed' GROUP BY 1) h USING (instance_id)
          LEFT JOIN (SELECT claimant AS instance_id, count(*) AS n FROM queuer.service_id_claims
                      WHERE claimant IS NOT NULL GROUP BY 1) c USING (instance_id)
         WHERE i.stopped_at IS NULL) w"

say "progress (once a second; per worker: batches committed (services claimed))"
prev_done=0
prev_t=$t_loaded
last_change=$t_loaded
while :; do
    sleep 1
    row=$(psql -X -q -t -A -F'|' "$QW_PG_CONNINFO" -c "$progress_sql" 2>/dev/null) || continue
    IFS='|' read -r n_done invalid in_flight delayed unknown waiting per_worker <<<"$row"
    t=$(now_us)
    rate=$(awk -v d=$((n_done - prev_done)) -v us=$((t - prev_t)) 'BEGIN { printf "%d", d * 1e6 / us }')
    printf '  %5ss  committed %6d/%d  %5d/s  in flight %4d  delayed %4d  unknown %3d  waiting %6d  | %s\n' \
        "$(secs $((t - t_loaded)))" "$n_done" "$total" "$rate" "$in_flight" "$delayed" "$unknown" \
        "$waiting" "$per_worker"
    [ "$n_done" = "$prev_done" ] || last_change=$t
    prev_done=$n_done
    prev_t=$t
    if [ $((n_done + invalid)) -ge "$total" ]; then
        break
    fi
    if [ $((t - last_change)) -gt 60000000 ]; then
        echo "demo.sh: no batch finished for 60 s; the last worker log lines:" >&2
        tail -n 5 "$QWC_DIR"/workers/*.log >&2
        exit 1
    fi
done
t_done=$(now_us)

say "summary"
# Precise spans on the database clock: the drain runs from the first POST
# (a worker's first Submitting row) to the last batch final; the enqueue
# from the first batch stored to the load's commit.
IFS='|' read -r drain_us first_post_after_us <<<"$(psql -X -q -t -A -F'|' "$QW_PG_CONNINFO" -c "
    SELECT (extract(epoch FROM (SELECT max(status_at) FROM queuer.batches) - s.first) * 1e6)::bigint,
           (extract(epoch FROM s.first - (SELECT min(created_at) FROM queuer.batches)) * 1e6)::bigint
      FROM (SELECT min(at) AS first FROM queuer.history WHERE to_status = 'Submitting') s")"
printf '  batches           %d (%d services x %d), committed %d, invalid %d\n' \
    "$total" "$services" "$batches" "$n_done" "$invalid"
printf '  wall clock        %s s: enqueue %s s, then drain until the last batch was final\n' \
    "$(secs $((t_done - t0)))" "$(secs $((t_loaded - t0)))"
printf '  throughput        %s batches/s with %d workers: %s s from the first POST to the\n' \
    "$(awk -v n="$total" -v us="$drain_us" 'BEGIN { printf "%.0f", n * 1e6 / us }')" "$workers" \
    "$(secs "$drain_us")"
printf '                    last batch final, by the database clock (enqueue time excluded;\n'
printf '                    the first POST came %s s after the first batch was stored)\n' \
    "$(secs "$first_post_after_us")"
echo
check_rc=0
"$QW_CHECK_BIN" --events "$QW_SIM_LOG" || check_rc=$?

say "look inside"
# What an operator sees, on the live cluster (the commands are the point:
# each line starting with $ can be typed as it is after
# eval "$(scripts/cluster.sh env)").
show() {
    printf '\n$ %s\n' "$*"
    "$@" 2>&1 | sed 's/^/  /'
}
first_batch=$(qw_sql "SELECT batch_id FROM queuer.batches ORDER BY created_at, batch_id LIMIT 1")
PATH=$(dirname "$QUEUER_BIN"):$PATH
show queuer status --stuck 3
show psql -X -q -P footer=off "$QW_PG_CONNINFO" -c \
    "SELECT instance_id, state, claims_held FROM queuer.instance_overview ORDER BY 1"
show psql -X -q -P footer=off "$QW_PG_CONNINFO" -c \
    "SELECT minute, enqueued, submissions, accepted, committed FROM queuer.throughput
      WHERE enqueued + submissions + committed > 0 ORDER BY minute"
show queuer batch show "${first_batch:0:16}"
echo
if [ "$keep" = 1 ]; then
    echo "The cluster keeps running (--keep). To use queuer on it by hand:"
else
    echo "Run scripts/demo.sh --keep to leave the cluster running; then, to use queuer on it:"
fi
cat <<HINT
  eval "\$(scripts/cluster.sh env)"   # queuer on PATH, QUEUER_DATABASE_CONNINFO, QUEUER_DLT_URL
  queuer status --watch              # live view, once a second (Ctrl-C ends it)
  scripts/cluster.sh psql            # psql; the views: \\dv queuer.*
  scripts/cluster.sh stop            # stop it; scripts/cluster.sh clean also removes .cluster/
HINT
exit "$check_rc"
