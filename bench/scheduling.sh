# shellcheck shell=bash
# The scheduling workloads of bench/run.sh: several ledger
# nodes, priority and fairness. Sourced by run.sh after its helpers; each
# run appends "name<TAB>key<TAB>value" lines to $SCHED, which
# scheduling_report prints as the "Nodes, priority, fairness" section.
#
#   WN  three simulator nodes, node 1 answering 150 ms late; 2 workers drain
#       200 services x 80 batches; node 2 is taken down for 5 s once a
#       quarter is final, then brought back. Figures: the slow node's share
#       of POSTs, batches lost, order violations (qw-check), POSTs node 2
#       got after it returned and how soon it was used again.
#   WP  a ledger accepting 300 batches/s: one node that answers a
#       submission after 10 ms and one worker with dlt.channels = 3. 200
#       services x 10 at priority 0 are enqueued and the worker starts, then
#       20 services x 10 at priority 10. Figure: the share of priority-0
#       batches final when the last priority-10 batch is; the same run with
#       the second load at priority 0 is printed for comparison.
#   WF  the same saturated ledger, 100 services x 40 at one priority, one
#       worker. Figure: Jain's fairness index of the services' committed
#       batches between 1 s after the first commit and the moment the first
#       service has nothing left (every service still had work).
#
# The --quick sizes are smaller (the targets are then indicative only).

SCHED=$OUT/scheduling.tsv
: >"$SCHED"

sched_fig() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$SCHED"; }

# sched_nodes_json URL: the simulator's GET /_sim/nodes.
sched_nodes_json() { curl -fsS -m 5 "$1/_sim/nodes"; }

# sched_node_field JSON NODE FIELD
sched_node_field() {
    python3 -c 'import json, sys; print(json.loads(sys.argv[1])[int(sys.argv[2])][sys.argv[3]])' "$@"
}

sched_sql() { psql -X -q -t -A "$DB_CONNINFO" -c "$1"; }

# sched_start NAME: a fresh database with the schema; sets SDIR.
sched_start() {
    SDIR=$WORK/$1
    rm -rf "$SDIR"
    mkdir -p "$SDIR"
    use_cluster on
    new_db "b_${1,,}"
    QUEUER_DATABASE_CONNINFO=$DB_CONNINFO "$QUEUER_BIN" migrate >>"$LOG" 2>&1 || die "migrate failed"
}

# sched_load FILE [--priority N]
sched_load() {
    local f=$1
    shift
    QUEUER_DATABASE_CONNINFO=$DB_CONNINFO QUEUER_INGEST_HIGH=0 "$QUEUER_BIN" enqueue --tsv "$f" "$@" \
        >>"$LOG" 2>&1 || die "enqueue of $f failed"
}

# sched_gen SERVICES BATCHES SEED PREFIX: a workload file; prints its path.
sched_gen() {
    local f=$WORK/s-$4-$1x$2.tsv
    [ -s "$f" ] || "$QUEUER_GEN_BIN" --services "$1" --batches "$2" --seed "$3" --circuit-prefix "$4" >"$f"
    echo "$f"
}

# sched_workers K [VAR=VALUE...]: K workers on the current simulator.
sched_workers() {
    local k=$1 i
    shift
    for i in $(seq 1 "$k"); do
        # shellcheck disable=SC2086 # BENCH_WORKER_ENV is a list of VAR=VALUE words
        QW_DB_CONNINFO=$DB_CONNINFO qw_worker_start "$SDIR" "w$i" ${BENCH_WORKER_ENV:-} "$@"
        RUN_PIDS+=("$(cat "$SDIR/w$i.pid")")
    done
}

sched_stop() {
    qw_workers_stop "$SDIR"
    RUN_PIDS=()
    qw_sim_stop
}

# sched_check NAME: qw-check over the simulator's log; records its violations.
sched_check() {
    local rc=0
    "$BUILD/tools/qw-check" --events "$QW_SIM_LOG" --conninfo "$DB_CONNINFO" --kv "$SDIR/check.kv" \
        >>"$LOG" 2>&1 || rc=$?
    sched_fig "$1" order_violations "$(sed -n 's/^violations=//p' "$SDIR/check.kv" 2>/dev/null || echo "?")"
    [ "$rc" = 0 ] || say "$1: qw-check reported violations (see $SDIR/check.kv)"
}

run_nodes() {
    local s=200 b=80 k=2 total t0 json p0 p1 p2 down_at up_at back_ms posts2_up i
    [ "$QUICK" = 0 ] || b=30
    total=$((s * b))
    sched_start WN
    sched_load "$(sched_gen "$s" "$b" 31 nodes)"
    say "WN: $s services x $b batches, $k workers, 3 ledger nodes (node 1 +150 ms), node 2 down for 5 s"
    start_sim "$SDIR" --listen 127.0.0.1:0 --listen 127.0.0.1:0 --node-latency-ms 1:150
    local url0=${QW_SIM_URLS%%,*}
    sched_workers "$k" QUEUER_DLT_URL="$QW_SIM_URLS"
    t0=$(date +%s.%N)
    QW_DB_CONNINFO=$DB_CONNINFO qw_wait_sql 300 \
        "SELECT count(*) >= $((total / 4)) FROM queuer.batches WHERE status = 'Committed'" \
        2>>"$LOG" || die "WN: a quarter of the batches did not commit"
    curl -fsS -m 5 -X POST --data '{"up": false}' "$url0/_sim/nodes/2" >/dev/null || die "WN: node 2 down"
    down_at=$(sched_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'")
    sleep 5
    curl -fsS -m 5 -X POST --data '{"up": true}' "$url0/_sim/nodes/2" >/dev/null || die "WN: node 2 up"
    up_at=$(sched_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'")
    posts2_up=$(sched_node_field "$(sched_nodes_json "$url0")" 2 posts)
    back_ms=-1
    for i in $(seq 1 100); do
        if [ "$(sched_node_field "$(sched_nodes_json "$url0")" 2 posts)" -gt "$posts2_up" ]; then
            back_ms=$((i * 50))
            break
        fi
        sleep 0.05
    done
    wait_all_final "$total" "NOT EXISTS (SELECT 1 FROM queuer.batches WHERE status IS NULL OR status NOT IN ('Committed','Valid','Invalid'))" 600
    json=$(sched_nodes_json "$url0")
    p0=$(sched_node_field "$json" 0 posts)
    p1=$(sched_node_field "$json" 1 posts)
    p2=$(sched_node_field "$json" 2 posts)
    sched_fig WN batches "$total"
    sched_fig WN status "$RUN_STATUS"
    sched_fig WN span_s "$(elapsed_since "$t0")"
    sched_fig WN posts_per_node "$p0/$p1/$p2"
    sched_fig WN slow_node_share_pct "$(awk -v a="$p1" -v t="$((p0 + p1 + p2))" 'BEGIN { printf "%.2f", 100 * a / t }')"
    sched_fig WN committed_when_down "$down_at"
    sched_fig WN committed_when_up "$up_at"
    sched_fig WN node2_posts_after_return "$((p2 - posts2_up))"
    sched_fig WN node2_used_again_within_ms "$back_ms"
    sched_fig WN lost "$((total - $(sched_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'")))"
    sched_fig WN answers_lost_then_read \
        "$(sched_sql "SELECT count(DISTINCT batch_id) FROM queuer.batch_history WHERE detail LIKE 'POST got no answer%'")"
    sched_stop
    sched_check WN
    drop_db
}

# run_priority NAME HIGH_PRIORITY: the WP run with the second load at HIGH_PRIORITY.
run_priority() {
    local name=$1 high=$2 s0=200 s1=20 b=10 total frac t0
    [ "$QUICK" = 0 ] || s0=100
    total=$(((s0 + s1) * b))
    sched_start "$name"
    local low hi
    low=$(sched_gen "$s0" "$b" 41 lowpr)
    hi=$(sched_gen "$s1" "$b" 42 highp)
    sched_load "$low"
    say "$name: $s0 x $b at priority 0, then $s1 x $b at priority $high; ledger 300/s (10 ms per submission, 3 channels), 1 worker"
    start_sim "$SDIR" --node-latency-ms 0:10
    sched_workers 1 QUEUER_DLT_CHANNELS=3
    t0=$(date +%s.%N)
    sched_load "$hi" --priority "$high"
    wait_all_final "$total" "NOT EXISTS (SELECT 1 FROM queuer.batches WHERE status IS NULL OR status NOT IN ('Committed','Valid','Invalid'))" 600
    frac=$(sched_sql "WITH fin AS (
                          SELECT b.service_id LIKE 'highp%' AS high, h.at
                            FROM queuer.batch_history h JOIN queuer.batches b USING (batch_id)
                           WHERE h.to_status = 'Committed')
                      SELECT round(100.0 * count(*) FILTER (WHERE NOT high
                                   AND at <= (SELECT max(at) FROM fin WHERE high)) / $((s0 * b)), 1)
                        FROM fin")
    sched_fig "$name" batches "$total"
    sched_fig "$name" status "$RUN_STATUS"
    sched_fig "$name" span_s "$(elapsed_since "$t0")"
    sched_fig "$name" low_final_pct_when_high_done "$frac"
    sched_stop
    sched_check "$name"
    drop_db
}

run_fairness() {
    local s=100 b=40 total jain
    [ "$QUICK" = 0 ] || b=15
    total=$((s * b))
    sched_start WF
    sched_load "$(sched_gen "$s" "$b" 51 fairs)"
    say "WF: $s services x $b batches at one priority; ledger 300/s (10 ms per submission, 3 channels), 1 worker"
    start_sim "$SDIR" --node-latency-ms 0:10
    sched_workers 1 QUEUER_DLT_CHANNELS=3
    wait_all_final "$total" "NOT EXISTS (SELECT 1 FROM queuer.batches WHERE status IS NULL OR status NOT IN ('Committed','Valid','Invalid'))" 600
    # Per service, batches committed in the window where every service had work.
    jain=$(sched_sql "$(bench_jain_sql " || ' ' ||
        round(extract(epoch FROM (SELECT t1 - t0 FROM w))::numeric, 1) || ' ' ||
        min(n) || '/' || max(n)")")
    sched_fig WF batches "$total"
    sched_fig WF status "$RUN_STATUS"
    sched_fig WF jain_index "${jain%% *}"
    jain=${jain#* }
    sched_fig WF window_s "${jain%% *}"
    sched_fig WF min_max_per_service "${jain#* }"
    sched_stop
    sched_check WF
    drop_db
}

# Prints the section of table.md (nothing when no scheduling workload ran).
scheduling_report() {
    [ -s "$SCHED" ] || return 0
    echo
    echo "Nodes, priority, fairness (bench/scheduling.sh):"
    echo
    echo "| run | figure | value |"
    echo "|---|---|---|"
    awk -F'\t' '{ printf "| %s | %s | %s |\n", $1, $2, $3 }' "$SCHED"
    awk -F'\t' -v quick="$QUICK" 'function verdict(ok) { return ok ? "met" : "MISSED" }
        { v[$1 "." $2] = $3 }
        END {
            print "\nTargets: nodes, priority, fairness" (quick ? ", indicative only: --quick sizes" : "") ":"
            if (("WN.slow_node_share_pct") in v)
                printf "- three nodes, one 150 ms slower: slow node %s%% of POSTs (%s); node 2 down 5 s: %s lost, %s order violations, used again after its return: %s POSTs, within %s ms (%s)\n",
                    v["WN.slow_node_share_pct"], verdict(v["WN.slow_node_share_pct"] <= 20),
                    v["WN.lost"], v["WN.order_violations"], v["WN.node2_posts_after_return"],
                    v["WN.node2_used_again_within_ms"],
                    verdict(v["WN.lost"] == 0 && v["WN.order_violations"] == 0 && v["WN.node2_posts_after_return"] > 0)
            if (("WP.low_final_pct_when_high_done") in v)
                printf "- 300 batches/s ledger, 200x10 at priority 0 then 20x10 at 10: %s%% of priority 0 final when priority 10 was (%s; the same run without priority: %s%%)\n",
                    v["WP.low_final_pct_when_high_done"], verdict(v["WP.low_final_pct_when_high_done"] <= 30),
                    (("WP0.low_final_pct_when_high_done") in v) ? v["WP0.low_final_pct_when_high_done"] : "-"
            if (("WF.jain_index") in v)
                printf "- equal priority under saturation: Jain index %s (%s)\n", v["WF.jain_index"],
                    verdict(v["WF.jain_index"] >= 0.95)
        }' "$SCHED"
}
