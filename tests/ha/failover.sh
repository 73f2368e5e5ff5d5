#!/usr/bin/env bash
# The failover suite: three workers and a steady feed of batches
# on a Patroni cluster (scripts/ha.sh: etcd + three PostgreSQL 15 nodes,
# synchronous replication, leader TTL 10 s), through the multi-host conninfo
# the workers use as is. Faults, one after the other in one run:
#
#   primary-kill-1   kill -9 of the primary's Patroni and postmaster (the whole
#                    node); the synchronous standby takes over; the node is
#                    healed (pg_rewind) and rejoins as a standby
#   primary-kill-2   the same on the new primary
#   postmaster-crash kill -9 of the primary's postmaster alone: Patroni
#                    restarts it in place (crash recovery), no failover
#   switchover       a planned switchover to the synchronous standby
#   standby-kill     kill -9 of the synchronous standby node; the other standby
#                    becomes synchronous; healed
#
# After the feed stops and everything drained: every batch final, the ledger
# saw each service's batches in creation order, every duplicate POST has a
# recorded reason (qw-check I1-I4 over the simulator's event log), no worker
# died, and per fault at most a handful of warn lines per worker. Measured per
# fault: kill -> a primary accepts writes (the probe), kill -> first worker
# write on it (batch history), and the longest gap in ledger acceptances
# around the fault (by the simulator's own clock, from its event log's line at
# the kill); bounds: 12 s for a node loss, 3 s for the switchover.
#
# A fault during which the wall clock moved more than a second against the
# monotonic one (the host paused the machine or stepped its clock) measures
# that, not the failover: etcd's lease runs on the monotonic clock, the probe on
# the wall clock, and Patroni promoted late after each jump seen. Such a fault
# is reported with its jump, its timings are not judged, and the same fault is
# injected again (three attempts at most, then the suite fails).
#
# Exit 77 (skipped) when the packages (patroni, etcd-server) cannot be
# installed. QW_HA_FIGURES=FILE also writes the figures table to FILE.
# shellcheck source=tests/ha/lib_ha.sh
. "$(dirname "$0")/lib_ha.sh"

HA_SH=$SC_SOURCE_ROOT/scripts/ha.sh
GAP_NODE_LOSS_MS=12000 # target with Patroni's ttl at 10 s
GAP_PLANNED_MS=3000    # planned switchover
WARN_PER_OUTAGE=6      # warn lines per worker per fault ("a handful")
SERVICES=24
FEED_MS=250

ha_require_packages patroni etcd

sc_begin ha_failover
export QW_HA_DIR=$SC_DIR/ha
FEEDER_PID=
PROBE_PID=

# shellcheck disable=SC2317 # called from the EXIT trap
ha_cleanup() {
    local pid
    for pid in "$FEEDER_PID" "$PROBE_PID"; do
        [ -z "$pid" ] || qw_stop_pids 5 "$pid"
    done
    if [ "$SC_EXIT_RC" != 0 ]; then
        "$HA_SH" status 2>/dev/null
        for f in "$QW_HA_DIR"/node*/patroni.log; do
            [ -s "$f" ] && { echo "---- last lines of $f"; grep -v "no action" "$f" | tail -n 15; }
        done
    fi
    qw_workers_stop "$SC_DIR" 2>/dev/null
    "$HA_SH" down >/dev/null 2>&1
}
sc_on_exit ha_cleanup

now_us() {
    date +%s%6N
}

# Lines in the simulator's event log so far (it writes each event at once).
sim_log_lines() {
    wc -l <"$QW_SIM_LOG"
}

# A tab-separated file as aligned columns.
table() {
    awk -F'\t' '{ for (i = 1; i <= NF; i++) { cell[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) }
                  if (NF > nf) nf = NF }
                END { for (r = 1; r <= NR; r++) { line = ""
                      for (i = 1; i <= nf; i++) line = line sprintf("%-" w[i] "s  ", cell[r, i])
                      sub(/ +$/, "", line); print line } }' "$1"
}

# ---- cluster, ledger, workers, feed ---------------------------------------------

sc_log "starting etcd and three Patroni nodes"
"$HA_SH" up >"$SC_DIR/ha-up.out" 2>&1 || { cat "$SC_DIR/ha-up.out"; sc_fail "scripts/ha.sh up failed"; }
CONNINFO=$("$HA_SH" conninfo)
export QW_PG_CONNINFO=$CONNINFO QW_DB_CONNINFO=$CONNINFO QUEUER_DATABASE_CONNINFO=$CONNINFO
"$HA_SH" status
qw_migrate "$SC_DIR/migrate.out" || sc_fail "queuer migrate failed"
sc_install_helpers || sc_fail "cannot install the scenario helper schema"
sc_show "SHOW synchronous_commit" | sed 's/^/   /'

sc_sim_start --commit-delay-ms 20
# Production leases (30 s soft, 180 s hard): a failover shorter than the
# lease changes no claim. A cycle of 500 ms as in scripts/cluster.sh.
SC_WORKER_ENV=(QUEUER_WORKER_CYCLE_MS=500 QUEUER_LOG_LEVEL=info)
for w in w1 w2 w3; do
    sc_worker_start $w
done
sc_wait_registered 20 w1 w2 w3

# One batch per service every FEED_MS, through the same conninfo; an enqueue
# refused during an outage is logged and the next tick goes on.
feeder() {
    local tick=0 file=$SC_DIR/feed.tsv
    while [ ! -e "$SC_DIR/feeder.stop" ]; do
        tick=$((tick + 1))
        qw_gen "$file" $SERVICES 1 $((tick * 7919)) hafov 2>>"$SC_DIR/feeder.log"
        QUEUER_DATABASE_CONNECT_TIMEOUT_S=2 qw_load_tsv "$file" >>"$SC_DIR/feeder.log" 2>&1 ||
            echo "feeder: tick $tick: enqueue failed" >>"$SC_DIR/feeder.log"
        sleep "$(awk -v ms=$FEED_MS 'BEGIN { printf "%.3f", ms / 1000 }')"
    done
}
feeder &
FEEDER_PID=$!

FINAL="SELECT count(*) FROM queuer.batches WHERE status IN ('Committed', 'Valid', 'Invalid')"
sc_wait "the workers are busy (300 batches final)" 60 "SELECT ($FINAL) >= 300"

# ---- faults ---------------------------------------------------------------------

FIGURES=$SC_DIR/figures.tsv
printf 'fault\tprimary_before\tprimary_after\twritable_ms\tfirst_worker_write_ms\tmax_gap_ms\twarn_lines_max\tepochs_back\tclock_jump_ms\tkind\n' >"$FIGURES"

primary_name() {
    "$HA_SH" status 2>/dev/null | awk -F'|' '$4 ~ /Leader/ { gsub(/ /, "", $2); print $2 }'
}

# Polls (in the background) until a primary accepts a write through the
# workers' conninfo; writes the wall-clock time (us) to FILE.
probe_start() {
    rm -f "$1"
    (
        while ! psql -X -q -t -A "$CONNINFO connect_timeout=1" -c "SELECT txid_current()" \
            >/dev/null 2>&1; do
            sleep 0.05
        done
        now_us >"$1"
    ) &
    PROBE_PID=$!
}

log_marks() {
    local w
    for w in w1 w2 w3; do
        wc -l <"$SC_DIR/$w.log"
    done | paste -sd' '
}

# Warn/error lines each worker logged since the marks; prints the largest count.
warn_lines_since() {
    local -a marks
    local i=0 w n max=0
    read -ra marks <<<"$1"
    for w in w1 w2 w3; do
        n=$(tail -n +$((marks[i] + 1)) "$SC_DIR/$w.log" | grep -cE 'level=(warn|error) ')
        tail -n +$((marks[i] + 1)) "$SC_DIR/$w.log" | grep -E 'level=(warn|error) ' |
            sed -E 's/^ts=[^ ]* (level=[a-z]+) instance=([^ ]*) (thread=[^ ]*)? ?(event=[^ ]*).*/\2 \1 \3 \4/' \
                >>"$SC_DIR/warn-lines.txt"
        [ "$n" -gt "$max" ] && max=$n
        i=$((i + 1))
    done
    echo "$max"
}

# Claim rows as "service_id:epoch" pairs: a failover must not take back a
# committed epoch (with synchronous replication the new primary has every
# acknowledged bump), so no epoch may be lower afterwards.
EPOCHS_SQL="SELECT coalesce(string_agg(service_id || ':' || claim_epoch, ',' ORDER BY service_id), '')
              FROM queuer.service_id_claims"
epochs_went_back() {
    qw_sql "SELECT count(*) FROM unnest(string_to_array('$1', ',')) p(pair)
              JOIN queuer.service_id_claims c ON c.service_id = split_part(p.pair, ':', 1)
             WHERE c.claim_epoch < split_part(p.pair, ':', 2)::bigint"
}

# fault NAME KIND: injects one fault, waits for recovery, records figures; sets
# FAULT_CLOCK_JUMP_MS.
fault() {
    local name=$1 kind=$2 before after pids marks epochs0 t0 t_writable first_write warn
    local offset0 mark jump
    before=$(primary_name)
    local final0
    final0=$(qw_sql "$FINAL")
    epochs0=$(qw_sql "$EPOCHS_SQL")
    marks=$(log_marks)
    echo "== $name" >>"$SC_DIR/warn-lines.txt"
    case "$kind" in
    node) pids=$("$HA_SH" primary-pids) || sc_fail "$name: no primary" ;;
    postmaster) pids=$("$HA_SH" primary-pids | awk '{ print $2 }') || sc_fail "$name: no primary" ;;
    standby) pids=$("$HA_SH" sync-pids) || sc_fail "$name: no synchronous standby" ;;
    esac
    offset0=$(sc_clock_offset_ms)
    t0=$(now_us)
    mark=$(sim_log_lines)
    if [ "$kind" = switchover ]; then
        sc_log "$name: switchover from $before"
        probe_start "$SC_DIR/$name.writable"
        "$HA_SH" switchover >>"$SC_DIR/ha-ops.out" 2>&1 || sc_fail "$name: switchover failed"
    else
        sc_log "$name: kill -9 $pids ($kind of $before)"
        local -a victims
        read -ra victims <<<"$pids"
        kill -9 "${victims[@]}"
        probe_start "$SC_DIR/$name.writable"
    fi
    wait "$PROBE_PID"
    PROBE_PID=
    t_writable=$(cat "$SC_DIR/$name.writable")
    # Progress on the new primary: more batches final than before the fault.
    sc_wait "$name: the workers carry on (100 more batches final)" 60 "SELECT ($FINAL) >= $final0 + 100"
    first_write=$(qw_sql "SELECT (extract(epoch FROM min(at)) * 1000000)::bigint FROM queuer.batch_history
                           WHERE at > to_timestamp($t0 / 1000000.0)
                             AND instance_id IS NOT NULL")
    # Restarts a killed node (pg_rewind as needed); for the other kinds it only
    # waits until every node streams again and a synchronous standby exists.
    "$HA_SH" heal >>"$SC_DIR/ha-ops.out" 2>&1 || sc_fail "$name: scripts/ha.sh heal failed"
    after=$(primary_name)
    for w in w1 w2 w3; do
        sc_worker_alive $w || sc_fail "$name: worker $w died"
    done
    # Give the last warn lines (db.restored) of slow threads time to appear.
    sc_wait "$name: 50 more batches final" 60 "SELECT ($FINAL) >= $final0 + 150"
    warn=$(warn_lines_since "$marks")
    epochs=$(epochs_went_back "$epochs0")
    jump=$(sc_clock_jump_ms "$offset0")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$before" "$after" \
        $(((t_writable - t0) / 1000)) $(((first_write - t0) / 1000)) "$mark" "$(sim_log_lines)" \
        "$warn" "$epochs" "$jump" "$kind" >>"$SC_DIR/faults.raw"
    sc_log "$name: primary $before -> $after; writable after $(((t_writable - t0) / 1000)) ms, first worker write after $(((first_write - t0) / 1000)) ms; warn lines per worker <= $warn; clock jump $jump ms"
    FAULT_CLOCK_JUMP_MS=$jump
}

# measured_fault NAME KIND: fault NAME KIND, injected again (as NAME-again,
# NAME-again2) while the machine was paused or its clock stepped during it.
measured_fault() {
    local name=$1 kind=$2 attempt
    for attempt in "" -again -again2; do
        fault "$name$attempt" "$kind"
        [ "$FAULT_CLOCK_JUMP_MS" -le "$SC_CLOCK_JUMP_MS" ] && return 0
        sc_log "$name$attempt: the wall clock moved more than $SC_CLOCK_JUMP_MS ms against the monotonic clock (the machine was paused or its clock stepped): the fault's timings are not judged"
    done
    sc_fail "$name: the machine was paused or its clock stepped during each of three attempts; no failover time could be measured"
}

measured_fault primary-kill-1 node
measured_fault primary-kill-2 node
measured_fault postmaster-crash postmaster
measured_fault switchover switchover
measured_fault standby-kill standby

# ---- drain and check --------------------------------------------------------------

touch "$SC_DIR/feeder.stop"
wait "$FEEDER_PID"
FEEDER_PID=
sc_wait_all_final 120
for w in w1 w2 w3; do
    sc_worker_alive $w || sc_fail "worker $w died"
done
qw_workers_stop "$SC_DIR"

sc_check_order
"${QW_CHECK_BIN:-$SC_BUILD_ROOT/tools/qw-check}" --events "$QW_SIM_LOG" --conninfo "$CONNINFO" \
    --kv "$SC_DIR/check.kv" | sed 's/^/   /'
sc_check "qw-check: no violation of I1-I4 (every batch final and backed by the ledger, one at a time, in order, duplicates with reasons)" \
    0 "$(sed -n 's/^violations=//p' "$SC_DIR/check.kv")"

# The longest gap between two acceptances (202, not a duplicate) around each
# fault: from the last acceptance logged before the kill to the first one after
# it, both by the simulator's clock; and the longest gap of the whole run,
# leaving out faults during which the machine was paused or its clock stepped.
ACCEPTS="SELECT n, (ev->>'t')::bigint AS t FROM scenario.simlog
          WHERE ev->>'ev' = 'post' AND ev->>'code' = '202' AND NOT coalesce((ev->>'dup')::boolean, false)"
JUMPED="(0::bigint, 0::bigint)"
while IFS=$'\t' read -r name before after writable first mark mark_end warn epochs jump kind; do
    gap=$(qw_sql "SELECT ((SELECT min(t) FROM ($ACCEPTS) a WHERE n > $mark)
                        - (SELECT max(t) FROM ($ACCEPTS) a WHERE n <= $mark)) / 1000")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$before" "$after" "$writable" "$first" "$gap" \
        "$warn" "$epochs" "$jump" "$kind" >>"$FIGURES"
    [ "$jump" -le "$SC_CLOCK_JUMP_MS" ] || JUMPED="$JUMPED, ($mark, $mark_end)"
done <"$SC_DIR/faults.raw"
LONGEST=$(qw_sql "SELECT max(d) / 1000 FROM (SELECT n, t - lag(t) OVER (ORDER BY n) AS d FROM ($ACCEPTS) a) x
                   WHERE NOT EXISTS (SELECT FROM (VALUES $JUMPED) s(m, e) WHERE x.n > s.m AND x.n <= s.e)")

echo
echo "failover figures (ms; Patroni ttl ${QW_HA_TTL:-10} s, loop_wait ${QW_HA_LOOP_WAIT:-2} s, synchronous_mode ${QW_HA_SYNC:-on}):"
table "$FIGURES" | sed 's/^/   /'
echo "   longest gap in ledger acceptances over the whole run: $LONGEST ms"
echo "   batches: $(qw_sql "SELECT count(*) FROM queuer.batches"), duplicates: $(sed -n 's/^duplicate_batches=//p' "$SC_DIR/check.kv") batches taken twice, resubmission reasons: $(sed -n 's/^resubmit_reasons=//p' "$SC_DIR/check.kv")"
echo "   warn lines per fault (count, worker, line):"
awk 'function flush() { for (i = 1; i <= k; i++) printf "       %2d %s\n", n[order[i]], order[i]; k = 0; delete n }
     /^==/ { flush(); print "     " $0; next }
     { if (!($0 in n)) order[++k] = $0; n[$0]++ }
     END { flush() }' "$SC_DIR/warn-lines.txt"
if [ -n "${QW_HA_FIGURES:-}" ]; then
    { table "$FIGURES"; echo "longest gap in ledger acceptances over the whole run: $LONGEST ms"; } >"$QW_HA_FIGURES"
fi

while IFS=$'\t' read -r name before after writable first gap warn epochs jump kind; do
    [ "$name" = fault ] && continue
    case "$kind" in
    switchover) bound=$GAP_PLANNED_MS ;;
    *) bound=$GAP_NODE_LOSS_MS ;;
    esac
    if [ "$jump" -le "$SC_CLOCK_JUMP_MS" ]; then
        sc_check_num "$name: longest ledger acceptance gap (ms) within the bound" "$gap" "<=" "$bound"
    else
        echo "not judged: $name: longest ledger acceptance gap $gap ms (clock jump $jump ms: the machine was paused or its clock stepped)"
    fi
    sc_check_num "$name: warn lines per worker" "$warn" "<=" "$WARN_PER_OUTAGE"
    sc_check "$name: no claim epoch went back" 0 "$epochs"
    case "$kind" in
    node | switchover)
        [ "$before" != "$after" ] || sc_fail "$name: the primary did not change ($before)" ;;
    postmaster | standby)
        sc_check "$name: the primary stayed" "$before" "$after" ;;
    esac
done <"$FIGURES"
sc_check_num "longest ledger acceptance gap of the whole run (ms)" "$LONGEST" "<=" "$GAP_NODE_LOSS_MS"
