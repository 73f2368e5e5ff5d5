# shellcheck shell=bash disable=SC2034 # the variables set here are read by the scripts that source this file
# W7 of bench/run.sh: shared ledger capacity. Source this file
# (bash) from run.sh; it defines variables and functions only and uses
# run.sh's own (run_queuer, say, QUEUER_BIN, DB_CONNINFO, RESULTS, ...).
#
# The ledger takes at most 40 pending batches over the whole node (429
# until it drains to 20: scabbard-sim --global-limit 40 --global-resume 20)
# and 1,000 batches a second (--rate 1000); 4 workers drain 500 services x
# 10 batches, first without a shared capacity (W7-nocap), then with
# `queuer capacity set --max-in-flight 36 --per-second 950` (W7-cap).
# Targets for W7-cap: 429s <= 1% of POSTs, >= 800 batches/s, never more
# than 40 pending at the ledger, every batch final in order.
#
#   w7_sim_args                  simulator options of both runs
#   w7_capacity RUN              before the workers start: sets (or leaves
#                                unset) the capacity of run RUN
#   w7_after_drain DIR           while the simulator still runs: its stats
#   w7_order_violations DIR TSV  POSTs that reached the ledger after a later
#                                batch of their service (0 = in order)
#   w7_report                    the W7 lines of the report

W7_SIM_ARGS=(--global-limit 40 --global-resume 20 --rate 1000)
W7_CAPACITY=(--max-in-flight 36 --per-second 950)

w7_capacity() {
    case $1 in
    W7-cap*)
        QUEUER_DATABASE_CONNINFO=$DB_CONNINFO "$QUEUER_BIN" capacity set "${W7_CAPACITY[@]}" \
            >>"$LOG" 2>&1 || die "queuer capacity set failed"
        ;;
    esac
}

# The simulator's counters at the end of a run (max_queued_total, refusals).
w7_after_drain() {
    curl -fsS -m 5 "$QW_SIM_URL/_sim/stats" >"$1/sim_stats.json" 2>>"$LOG" || true
}

# Order at the ledger: the TSV lists each service's batches in creation
# order (queuer-gen, loaded in file order); every POST line of the event log
# must name a batch no earlier than the latest one its service already
# posted.
w7_order_violations() {
    awk -F'\t' 'FNR == NR { pos[$2] = ++n[$1]; next }
        /"ev":"post"/ {
            if (!match($0, /"service":"[^"]*"/)) next
            s = substr($0, RSTART + 11, RLENGTH - 12)
            if (!match($0, /"batch":"[^"]*"/)) next
            b = substr($0, RSTART + 9, RLENGTH - 10)
            p = pos[b]
            if (p == "") { bad++; next }
            if (p < last[s]) bad++
            if (p > last[s]) last[s] = p
        }
        END { print bad + 0 }' "$2" "$1/sim.ndjson"
}

# Prints the W7 block of the report from $RESULTS and each run's files.
w7_report() {
    local run dir stats max_q refused_g refused_r order line
    grep -q '^W7-' "$RESULTS" || return 0
    echo
    echo "W7, shared ledger capacity: ledger at most 40 pending (429 until 20) and 1,000 batches/s; 4 workers;"
    echo "500 services x 10; W7-cap: \`queuer capacity set ${W7_CAPACITY[*]}\`"
    echo
    echo "| run | batches/s | POSTs | 429s | 429s of POSTs | refused: node queue / rate | most pending at the ledger | order violations | status |"
    echo "|---|---|---|---|---|---|---|---|---|"
    while IFS= read -r run; do
        # the header row and this run's row, read by column name (RESULTS_AWK, run.sh)
        line=$(awk -F'\t' -v r="$run" 'NR == 1 { print } '"$RESULTS_AWK"'c("run") == r { print }' "$RESULTS")
        dir=$WORK/$run
        stats=$(cat "$dir/sim_stats.json" 2>/dev/null || echo '{}')
        max_q=$(echo "$stats" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("max_queued_total", "-"))' 2>/dev/null || echo -)
        refused_g=$(echo "$stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["refused"]["global"])' 2>/dev/null || echo -)
        refused_r=$(echo "$stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["refused"]["rate"])' 2>/dev/null || echo -)
        order=$(cat "$dir/order_violations" 2>/dev/null || echo -)
        echo "$line" | awk -F'\t' -v q="$max_q" -v g="$refused_g" -v r="$refused_r" -v o="$order" \
            "$RESULTS_AWK"'{
            posts = c("posts"); p429 = c("posts_429")
            printf "| %s | %s | %s | %s | %.2f%% | %s / %s | %s | %s | %s |\n",
                c("run"), c("batches_per_s"), posts, p429, (posts > 0 ? 100 * p429 / posts : 0),
                g, r, q, o, c("status") }'
        if [[ $run == W7-cap* ]]; then
            W7_CAP_LINE=$(echo "$line" | awk -F'\t' -v q="$max_q" -v o="$order" "$RESULTS_AWK"'{
                print c("batches_per_s"), c("posts"), c("posts_429"), q, o, c("status"),
                    c("batches"), c("services") * c("batches_per_service") }')
        fi
    done < <(awk -F'\t' "$RESULTS_AWK"'c("run") ~ /^W7-/ { print c("run") }' "$RESULTS")
    [ -n "${W7_CAP_LINE:-}" ] || return 0
    echo "$W7_CAP_LINE" | awk '{
        bps = $1; posts = $2; p429 = $3; q = $4; o = $5; st = $6; n = $7; want = $8
        v = "met"
        printf "\nTargets (W7-cap):\n"
        printf "- 429s <= 1%% of POSTs: %.2f%% (%s)\n", (posts > 0 ? 100 * p429 / posts : 0), (posts > 0 && p429 * 100 <= posts) ? "met" : "MISSED"
        printf "- >= 800 batches/s: %s (%s)\n", bps, (bps >= 800 ? "met" : "MISSED")
        printf "- never more than 40 pending at the ledger: at most %s (%s)\n", q, (q != "-" && q <= 40) ? "met" : "MISSED"
        printf "- every batch final in order: %s of %s final, %s order violations (%s)\n", n, want, o, (st == "ok" && n == want && o == 0) ? "met" : "MISSED"
    }'
}
