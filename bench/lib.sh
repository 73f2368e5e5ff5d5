# shellcheck shell=bash disable=SC2034 # the variables set here are read by the scripts that source this file
# Helpers of bench/run.sh: /proc readings (CPU, peak RSS), PostgreSQL
# counters, key=value parsing and the machine description. Source this file
# (bash); it defines functions only.
#
#   bench_kv KEY LINE             value of KEY in a "k=v k=v" line ("" if absent)
#   bench_cpu_ticks PID           utime+stime of PID in clock ticks (0 if gone)
#   bench_cpu_ticks_tree PID      the same plus its reaped children (cutime+cstime)
#                                 plus its live children's utime+stime
#   bench_pg_cpu_ticks DATADIR    bench_cpu_ticks_tree of the cluster's postmaster:
#                                 every PostgreSQL process, live or exited
#   bench_pg_reaped_ticks DATADIR the postmaster's reaped children only
#                                 (cutime+cstime): backends that have exited
#   bench_vmhwm_kb PID            peak resident set (VmHWM) of PID in KiB (0 if gone)
#   bench_db_counter CONNINFO DB COLUMN   a pg_stat_database column of DB
#   bench_db_idle CONNINFO DB SECS        wait until DB has no backend left
#   bench_machine                 one paragraph describing this machine
#   bench_ticks_to_s TICKS        clock ticks as seconds (3 decimals)
#   bench_jain_sql [MORE]         Jain's index, to 4 decimals, of the
#                                 batches each service (x.n) committed from
#                                 1 s after the first commit (w.t0) until the
#                                 first service had nothing left (w.t1), as a
#                                 query; MORE is appended to its select
#                                 expression (e.g. " || ' ' || max(n)")
#   bench_stats_cluster NAME BUILD BIN...   for a one-off measurement: checks
#                                 that each BIN (a path under BUILD) is built,
#                                 starts a private cluster with
#                                 pg_stat_statements (track = all) and
#                                 track_functions in a new directory BENCH_WORK
#                                 and creates database "bench" (conninfo in
#                                 BENCH_DB); bench_stats_cluster_stop stops and
#                                 removes it

BENCH_CLK_TCK=$(getconf CLK_TCK)

bench_kv() {
    local key=$1 line=$2 word
    for word in $line; do
        if [ "${word%%=*}" = "$key" ]; then
            echo "${word#*=}"
            return 0
        fi
    done
    echo ""
}

# Fields of /proc/PID/stat after "(comm) ", which may itself hold spaces;
# split into $1.. they are: $1 state ... $12 utime, $13 stime, $14 cutime,
# $15 cstime (clock ticks).
bench__stat_fields() {
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    echo "${s##*) }"
}

bench_cpu_ticks() {
    local f
    local -a s
    f=$(bench__stat_fields "$1") || {
        echo 0
        return 0
    }
    read -ra s <<<"$f"
    echo $((s[11] + s[12]))
}

bench_cpu_ticks_tree() {
    local pid=$1 f total child
    local -a s kids=()
    f=$(bench__stat_fields "$pid") || {
        echo 0
        return 0
    }
    read -ra s <<<"$f"
    total=$((s[11] + s[12] + s[13] + s[14]))
    # The children files hold space-separated pids and end without a newline.
    read -ra kids < <(cat "/proc/$pid/task/"*/children 2>/dev/null) || true
    for child in "${kids[@]}"; do
        total=$((total + $(bench_cpu_ticks "$child")))
    done
    echo "$total"
}

bench_pg_cpu_ticks() {
    local pid
    pid=$(head -1 "$1/postmaster.pid" 2>/dev/null) || {
        echo 0
        return 0
    }
    bench_cpu_ticks_tree "$pid"
}

bench_pg_reaped_ticks() {
    local pid f
    local -a s
    if ! pid=$(head -1 "$1/postmaster.pid" 2>/dev/null) || ! f=$(bench__stat_fields "$pid"); then
        echo 0
        return 0
    fi
    read -ra s <<<"$f"
    echo $((s[13] + s[14]))
}

bench_vmhwm_kb() {
    local v
    v=$(awk '/^VmHWM:/ { print $2 }' "/proc/$1/status" 2>/dev/null)
    echo "${v:-0}"
}

bench_db_counter() {
    psql -X -q -t -A "$1" -c "SELECT $3 FROM pg_stat_database WHERE datname = '$2'"
}

bench_db_idle() {
    local conninfo=$1 db=$2 secs=$3 n
    for _ in $(seq 1 $((secs * 10))); do
        n=$(psql -X -q -t -A "$conninfo" \
            -c "SELECT count(*) FROM pg_stat_activity WHERE datname = '$db'")
        [ "$n" = 0 ] && return 0
        sleep 0.1
    done
    return 1
}

bench_ticks_to_s() {
    awk -v t="$1" -v hz="$BENCH_CLK_TCK" 'BEGIN { printf "%.3f", t / hz }'
}

bench_machine() {
    local model mem pg node
    model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
    mem=$(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
    pg=$("$(qw_pg_bindir)/postgres" --version 2>/dev/null | awk '{ print $3 }')
    node=$(node --version 2>/dev/null || echo "absent")
    echo "machine: $(nproc) CPUs ($model), $mem RAM, Linux $(uname -r);" \
        "PostgreSQL $pg; Node.js $node; load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

bench_stats_cluster() {
    local name=$1 build=$2 bin
    shift 2
    for bin in "$@"; do
        [ -x "$build/$bin" ] || {
            echo "$name: $build/$bin not built (meson compile -C $build)" >&2
            exit 1
        }
    done
    BENCH_WORK=$(mktemp -d "${TMPDIR:-/tmp}/qw$name.XXXXXX")
    chmod 755 "$BENCH_WORK"
    # shellcheck source=tests/lib/cluster.sh
    . "$(dirname "${BASH_SOURCE[0]}")/../tests/lib/cluster.sh"
    QW_PG_CONF_EXTRA="shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
track_functions = all" qw_pg_start "$BENCH_WORK/pg" >/dev/null
    qw_psql -c "CREATE DATABASE bench" >/dev/null
    BENCH_DB="$QW_PG_CONNINFO dbname=bench"
}

bench_stats_cluster_stop() {
    qw_pg_stop immediate
    rm -rf "$BENCH_WORK"
}

bench_jain_sql() {
    printf '%s\n' "WITH c AS (
              SELECT b.service_id, h.at FROM queuer.batch_history h
                JOIN queuer.batches b USING (batch_id) WHERE h.to_status = 'Committed'),
          w AS (SELECT min(at) + interval '1 second' AS t0,
                       (SELECT min(last) FROM (SELECT max(at) AS last FROM c
                                                GROUP BY service_id) l) AS t1
                  FROM c),
          x AS (SELECT s.service_id, count(c.at) AS n
                  FROM (SELECT DISTINCT service_id FROM c) s
                  LEFT JOIN c ON c.service_id = s.service_id
                             AND c.at > (SELECT t0 FROM w) AND c.at <= (SELECT t1 FROM w)
                 GROUP BY s.service_id)
          SELECT round((sum(n) ^ 2 / (count(*) * sum(n ^ 2)))::numeric, 4)${1:-} FROM x"
}
