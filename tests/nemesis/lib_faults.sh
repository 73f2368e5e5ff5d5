# shellcheck shell=bash
# The nemesis's faults (sourced by tests/nemesis/run.sh). Each fault kind
# is one function nm_fault_<kind> that injects the fault, holds it for the
# scheduled duration, ends it, and sets:
#   F_EFFECTIVE  1 when the fault demonstrably happened (a process died or
#                stopped, the server went down, the ledger's counters moved)
#   F_AFFECTED   comma-separated services whose progress I6 measures: the
#                services the victim held when the fault began, or every
#                service for faults of the database or the ledger
#   F_START_US   when the fault was injected (wall clock, microseconds)
#   F_END_US     when the fault ended (wall clock, microseconds): I6
#                measures from here
#   F_NOTE       one line for the record
#   (and nm_await_recovery sets F_RECOVERY_MS and F_TAKEOVER_MS)
# nm_run_fault runs one line of the schedule: it restarts any worker that
# died on its own (counted as a crash), runs the fault, waits for recovery
# (bounded by NM_BOUND_MS) and appends a row to faults.tsv.

NM_CRASHES=0          # workers that exited without being told to
NM_RECOVERY_TIMEOUTS=0

# Services a worker holds now, comma-separated (empty when none or unknown).
nm_held() {
    qw_sql "SELECT coalesce(string_agg(service_id, ',' ORDER BY service_id), '')
              FROM queuer.service_id_claims WHERE claimant = '$1'" 2>/dev/null || true
}

# nm_aim VICTIM: waits (at most 5 s) until the victim holds a service with a
# batch in flight, so the fault lands mid-submission; prints what it holds.
nm_aim() {
    qw_sql "SELECT nemesis.await_in_flight('$1', 5000)" 2>/dev/null || true
}

nm_sleep_ms() {
    sleep "$(awk -v ms="$1" 'BEGIN { printf "%.3f", ms / 1000 }')"
}

# nm_stop_pid PID: SIGSTOP and wait until the kernel shows it stopped.
nm_stop_pid() {
    local pid=$1 i
    kill -STOP "$pid" 2>/dev/null || return 1
    NM_STOPPED_PIDS+=("$pid")
    for i in $(seq 1 100); do
        [ "$(qw_proc_state "$pid")" = T ] && return 0
        sleep 0.01
    done
    return 1
}

nm_cont_pid() {
    local pid=$1 keep=() p
    kill -CONT "$pid" 2>/dev/null
    for p in "${NM_STOPPED_PIDS[@]}"; do
        [ "$p" = "$pid" ] || keep+=("$p")
    done
    NM_STOPPED_PIDS=("${keep[@]}")
}

# Restarts every worker whose process ended although nobody stopped it
# (and gives up when the simulator is gone: nothing could be checked).
nm_check_crashes() {
    local name
    qw_alive "$QW_SIM_PID" || nm_die "scabbard-sim exited: $(tail -3 "$NM_DIR/sim/sim.out")"
    for name in "${NM_WORKERS[@]}"; do
        qw_alive "${NM_PID[$name]}" && continue
        wait "${NM_PID[$name]}" 2>/dev/null
        local rc=$?
        NM_CRASHES=$((NM_CRASHES + 1))
        nm_log "VIOLATION: worker $name (pid ${NM_PID[$name]}) exited by itself with status $rc; restarting it"
        tail -n 5 "$NM_DIR/logs/$name.log" | sed 's/^/    /' | tee -a "$NM_DIR/logs/nemesis.log"
        nm_worker_start "$name"
    done
}

# ---- worker faults -------------------------------------------------------------

# The killed worker comes back under its old instance id (as a supervisor
# with a fixed id restarts it: it continues its own claims at once) when PICK
# is even, and under a new id when it is odd (as with generated ids: its old
# claims must expire and be taken over).
nm_fault_worker_kill9() {
    local victim=$1 dur=$2 pick=$3 target=$4 name
    F_AFFECTED=$(nm_aim "$victim")
    F_START_US=$(nm_now_us)
    {
        kill -KILL "${NM_PID[$victim]}"
        nm_worker_wait_exit "$victim" 10
    } 2>/dev/null # no "Killed" notice from bash
    [ "$NM_RC" = 137 ] && F_EFFECTIVE=1
    name=$victim
    if [ $((pick % 2)) = 1 ]; then
        nm_worker_rename "$victim" "$target"
        name=$NM_NEW_NAME
    fi
    F_NOTE="exit=$NM_RC down_ms=$dur restarted_as=$name"
    nm_sleep_ms "$dur"
    F_END_US=$(nm_now_us)
    nm_worker_start "$name"
}

# nm_worker_rename OLD TARGET: the next generation's instance id of host
# worker TARGET ("w2" -> "w2.1" -> "w2.2"); registers it in the worker
# lists and sets NM_NEW_NAME (not run in a subshell: it changes the lists).
# The old id's process must be gone.
nm_worker_rename() {
    local old=$1 target=$2 base gen new i
    base=${old%%.*}
    gen=0
    [ "$old" != "$base" ] && gen=${old#*.}
    new="$base.$((gen + 1))"
    NM_HOST_WORKERS[target]=$new
    for i in "${!NM_WORKERS[@]}"; do
        [ "${NM_WORKERS[i]}" = "$old" ] && NM_WORKERS[i]=$new
    done
    # shellcheck disable=SC2004 # associative arrays (lib_cluster.sh): the key is the value of $new
    NM_WMODE[$new]=${NM_WMODE[$old]}
    # shellcheck disable=SC2004
    NM_PID[$new]=${NM_PID[$old]}
    unset "NM_PID[$old]"
    NM_NEW_NAME=$new
}

nm_fault_worker_stop() {
    local victim=$1 dur=$2 pid=${NM_PID[$1]}
    F_AFFECTED=$(nm_aim "$victim")
    F_START_US=$(nm_now_us)
    nm_stop_pid "$pid" && F_EFFECTIVE=1
    nm_sleep_ms "$dur"
    nm_cont_pid "$pid"
    F_END_US=$(nm_now_us)
    F_NOTE="stopped_ms=$dur"
}

# ---- database faults -------------------------------------------------------------

nm_pg_running() {
    qw_as_pg_user "$(qw_pg_bindir)/pg_ctl" -D "$QW_PG_DIR/data" status >/dev/null 2>&1
}

nm_fault_pg_stop() {
    local mode=$1 dur=$2 t0
    F_AFFECTED=$NM_ALL_SERVICES
    t0=$(nm_now_us)
    F_START_US=$t0
    qw_pg_stop "$mode"
    nm_pg_running || F_EFFECTIVE=1
    F_NOTE="mode=$mode stop_ms=$((($(nm_now_us) - t0) / 1000)) down_ms=$dur"
    nm_sleep_ms "$dur"
    qw_pg_server_start || nm_die "PostgreSQL did not start again after -m $mode"
    F_END_US=$(nm_now_us)
}

# Terminates COUNT of the workers' sessions, chosen by PICK among those
# logged in (ordered by pid); aimed at a moment when the first chosen
# session's worker has a batch in flight.
nm_fault_pg_terminate() {
    local count=$1 pick=$2 rows=() i n idx chosen=() killed=0 names=() row name affected=""
    mapfile -t rows < <(qw_sql "SELECT pid || ' ' || application_name FROM pg_stat_activity
                                 WHERE usename = 'qw_nemesis' ORDER BY pid")
    n=${#rows[@]}
    for ((i = 0; i < count && i < n; i++)); do
        idx=$(((pick + i * 7919) % n))
        while [[ " ${chosen[*]} " == *" $idx "* ]]; do
            idx=$(((idx + 1) % n))
        done
        chosen+=("$idx")
    done
    [ "$n" -gt 0 ] && nm_aim "${rows[${chosen[0]}]#* }" >/dev/null
    for idx in "${chosen[@]}"; do
        name=${rows[$idx]#* }
        [[ " ${names[*]} " == *" $name "* ]] || affected="$affected${affected:+,}$(nm_held "$name")"
        names+=("$name")
    done
    F_START_US=$(nm_now_us)
    for idx in "${chosen[@]}"; do
        row=${rows[$idx]}
        [ "$(qw_sql "SELECT pg_terminate_backend(${row%% *})")" = t ] && killed=$((killed + 1))
    done
    F_END_US=$(nm_now_us)
    [ "$killed" -gt 0 ] && F_EFFECTIVE=1
    F_AFFECTED=$(echo "$affected" | tr ',' '\n' | grep -v '^$' | sort -u | paste -sd, -)
    F_NOTE="sessions=$n terminated=$killed of=${names[*]}"
}

nm_fault_pg_backend_stop() {
    local victim=$1 dur=$2 pick=$3 bpid what reader
    F_AFFECTED=$(nm_aim "$victim")
    bpid=$(qw_sql "SELECT nemesis.await_busy_backend('$victim', $pick, 2000)")
    if [ -z "$bpid" ]; then
        F_NOTE="no backend of $victim to stop"
        F_END_US=$(nm_now_us)
        return 0
    fi
    F_START_US=$(nm_now_us)
    nm_stop_pid "$bpid" && F_EFFECTIVE=1
    # What it was running, read beside the stop and given up when the stop
    # ends: a backend stopped while it holds one of PostgreSQL's own locks
    # (the process array's at a commit, a lock table partition's) stalls
    # every session that needs it, a new one even before its first query,
    # until it resumes. The fault must end on time all the same.
    timeout "$(awk -v ms="$dur" 'BEGIN { printf "%.3f", ms / 1000 }')" \
        psql -X -q -t -A "${QW_DB_CONNINFO:-$QW_PG_CONNINFO}" \
        -c "SELECT coalesce(state, '?') || ':' || left(regexp_replace(query, '\s+', ' ', 'g'), 40)
              FROM pg_stat_activity WHERE pid = $bpid" >"$NM_DIR/run/backend_was" 2>/dev/null &
    reader=$!
    nm_sleep_ms "$dur"
    nm_cont_pid "$bpid"
    F_END_US=$(nm_now_us)
    if wait "$reader"; then
        what=$(cat "$NM_DIR/run/backend_was")
    else
        what="no answer while it was stopped"
    fi
    F_NOTE="backend=$bpid stopped_ms=$dur was=\"$what\""
}

# ---- ledger faults -------------------------------------------------------------

# nm_fault_ledger JSON DUR FIELD: sets the fault, holds it, restores the
# baseline; effective when the counter FIELD (1 = 429s, 2 = 5xx, 3 = hangs)
# of /_sim/stats moved meanwhile; 6 = answers the ledger gave normally,
# some of them garbled: any request while the fault lasted).
nm_fault_ledger() {
    local json=$1 dur=$2 field=$3 before after
    F_AFFECTED=$NM_ALL_SERVICES
    before=$(nm_sim_counters | cut -d' ' -f"$field")
    F_START_US=$(nm_now_us)
    nm_sim_faults "$json" >/dev/null || nm_die "the simulator refused $json"
    nm_sleep_ms "$dur"
    nm_sim_baseline
    F_END_US=$(nm_now_us)
    after=$(nm_sim_counters | cut -d' ' -f"$field")
    [ "$after" -gt "$before" ] && F_EFFECTIVE=1
    F_NOTE="$json for ${dur} ms: +$((after - before))"
}

nm_fault_ledger_restart() {
    local before after
    F_AFFECTED=$NM_ALL_SERVICES
    before=$(nm_sim_counters | cut -d' ' -f4)
    F_START_US=$(nm_now_us)
    nm_sim_ctl POST /_sim/restart >/dev/null || nm_die "the simulator refused a restart"
    F_END_US=$(nm_now_us)
    after=$(nm_sim_counters | cut -d' ' -f4)
    [ "$after" -gt "$before" ] && F_EFFECTIVE=1
    F_NOTE="restarts=$after"
}

# ---- network and clock -----------------------------------------------------------

nm_fault_net_partition() {
    local dur=$1 victim=wnet
    F_AFFECTED=$(nm_aim "$victim")
    F_START_US=$(nm_now_us)
    nm_net_cut
    ip link show "$NM_DB_LINK" | grep -q 'state DOWN' && F_EFFECTIVE=1
    nm_sleep_ms "$dur"
    nm_net_heal
    F_END_US=$(nm_now_us)
    F_NOTE="cut_ms=$dur"
}

# The victim is restarted (gracefully) under libfaketime: its wall clock is
# off by hours and all its clocks run at a rate within 5% of real time.
# Effective when its log's timestamps show the offset.
nm_fault_clock_skew() {
    local victim=$1 dur=$2 off=$3 rate=$4 spec real_s logged logged_s held
    spec=$(awk -v o="$off" -v r="$rate" 'BEGIN { printf "%+d x%.3f", o, r / 1000 }')
    nm_worker_stop "$victim"
    [ "$NM_RC" = 0 ] || nm_log "VIOLATION: $victim exited with $NM_RC on SIGTERM before the skew"
    [ "$NM_RC" = 0 ] || NM_CRASHES=$((NM_CRASHES + 1))
    local lines
    lines=$(wc -l <"$NM_DIR/logs/$victim.log")
    real_s=$(date +%s)
    local since
    since=$(qw_sql "SELECT clock_timestamp()")
    nm_worker_start "$victim" "$spec"
    nm_sleep_ms "$dur"
    local wrote
    wrote=$(qw_sql "SELECT count(*) FROM queuer.batch_history WHERE instance_id = '$victim'
                     AND at >= '$since'")
    logged=$(tail -n +$((lines + 2)) "$NM_DIR/logs/$victim.log" | grep -m1 -o '^ts=[^ ]*' | cut -c4-)
    logged_s=$(date -d "$logged" +%s 2>/dev/null || echo 0)
    # effective: its log shows the shifted clock, and it worked meanwhile
    if [ $((logged_s - real_s - off)) -lt 120 ] && [ $((logged_s - real_s - off)) -gt -120 ] &&
        [ "$wrote" -gt 0 ]; then
        F_EFFECTIVE=1
    fi
    held=$(nm_aim "$victim")
    F_AFFECTED=$held
    F_START_US=$(nm_now_us)
    nm_worker_stop "$victim"
    [ "$NM_RC" = 0 ] || nm_log "VIOLATION: skewed $victim exited with $NM_RC on SIGTERM"
    [ "$NM_RC" = 0 ] || NM_CRASHES=$((NM_CRASHES + 1))
    F_END_US=$(nm_now_us)
    nm_worker_start "$victim"
    F_NOTE="faketime=\"$spec\" logged_ts=$logged history_rows=$wrote held=$(echo "$held" | tr ',' '\n' | grep -c .)"
}

# ---- recovery ---------------------------------------------------------------------

# Progress of a service means the ledger took a new batch of it (a POST
# answered 202 that was not a duplicate): only a worker holding a valid
# claim can make that happen. (Commits are no such sign: the ledger commits
# what it already holds whether any worker is alive or not.)
#
# nm_await_recovery OFFSET START_US: waits until every service in F_AFFECTED
# has progressed at or after F_END_US, reading the event log from byte
# OFFSET; sets
#   F_RECOVERY_MS  the latest of those first progress events minus F_END_US
#                  (I6), "-" when nothing was affected, "timeout" after
#                  NM_BOUND_MS
#   F_TAKEOVER_MS  when every affected service progressed during the fault
#                  (from 50 ms after START_US, so a request already on its
#                  way does not count, until F_END_US), the latest of those
#                  minus START_US; "-" otherwise. For a stopped, killed or
#                  cut-off worker this is the takeover of its services by
#                  the others.
#   F_STALL_MS     the longest time during the fault in which the ledger took
#                  no new batch of any service (the whole cluster stood still)
nm_await_recovery() {
    local offset=$1 start=$2 deadline res
    F_RECOVERY_MS=-
    F_TAKEOVER_MS=-
    F_STALL_MS=-
    [ -n "$F_AFFECTED" ] || return 0
    deadline=$(($(nm_now_us) + NM_BOUND_MS * 1000))
    while :; do
        res=$(tail -c +$((offset + 1)) "$QW_SIM_LOG" | awk -v s0="$start" -v e="$F_END_US" \
            -v want="$F_AFFECTED" '
            BEGIN { n = split(want, w, ","); for (i = 1; i <= n; i++) { a[w[i]] = 1; b[w[i]] = 1 }
                    la = n; lb = n; prev = s0 }
            /"ev":"post"/ && /"code":202,"dup":false/ {
                if (!match($0, /"t":[0-9]+/)) next
                t = substr($0, RSTART + 4, RLENGTH - 4) + 0
                if (t >= s0 && t < e) {
                    if (t - prev > stall) stall = t - prev
                    prev = t
                }
                if (!match($0, /"service":"[^"]*"/)) next
                s = substr($0, RSTART + 11, RLENGTH - 12)
                if (t >= s0 + 50000 && t < e && (s in a)) { delete a[s]; la--; if (t > ta) ta = t }
                if (t >= e && (s in b)) {
                    delete b[s]
                    if (t > tb) tb = t
                    if (--lb == 0) {
                        if (e - prev > stall) stall = e - prev
                        printf "%d %s %d\n", (tb - e) / 1000,
                               la == 0 ? sprintf("%d", (ta - s0) / 1000) : "-", stall / 1000
                        exit
                    }
                }
            }')
        if [ -n "$res" ]; then
            read -r F_RECOVERY_MS F_TAKEOVER_MS F_STALL_MS <<<"$res"
            return 0
        fi
        if [ "$(nm_now_us)" -gt "$deadline" ]; then
            F_RECOVERY_MS=timeout
            return 0
        fi
        sleep 0.2
    done
}

# nm_run_fault SEQ KIND TARGET DURATION_MS GAP_MS PICK COUNT RATE SKEW_S SKEW_RATE
nm_run_fault() {
    local seq=$1 kind=$2 target=$3 dur=$4 gap=$5 pick=$6 count=$7 rate=$8 skew_s=$9 skew_rate=${10}
    local victim=- offset
    [ "$target" != - ] && victim=${NM_HOST_WORKERS[$target]}
    [ "$kind" = net-partition ] && victim=wnet
    nm_check_crashes
    F_EFFECTIVE=0 F_AFFECTED="" F_START_US=0 F_END_US=0 F_NOTE=""
    offset=$(stat -c %s "$QW_SIM_LOG")
    case "$kind" in
    worker-kill9) nm_fault_worker_kill9 "$victim" "$dur" "$pick" "$target" ;;
    worker-stop-*) nm_fault_worker_stop "$victim" "$dur" ;;
    pg-immediate) nm_fault_pg_stop immediate "$dur" ;;
    pg-fast) nm_fault_pg_stop fast "$dur" ;;
    pg-terminate) nm_fault_pg_terminate "$count" "$pick" ;;
    pg-backend-stop) nm_fault_pg_backend_stop "$victim" "$dur" "$pick" ;;
    ledger-429) nm_fault_ledger '{"fault-429-burst": "1000:1000"}' "$dur" 1 ;;
    ledger-5xx)
        nm_fault_ledger "{\"fault-5xx\": $(awk -v r="$rate" 'BEGIN { printf "%.3f", r / 1000 }')}" "$dur" 2
        ;;
    ledger-hang)
        nm_fault_ledger "{\"fault-hang\": $(awk -v r="$rate" 'BEGIN { printf "%.3f", r / 1000 }')}" "$dur" 3
        ;;
    ledger-restart) nm_fault_ledger_restart ;;
    ledger-malformed)
        nm_fault_ledger "{\"fault-malformed\": $(awk -v r="$rate" 'BEGIN { printf "%.3f", r / 1000 }')}" "$dur" 6
        ;;
    net-partition) nm_fault_net_partition "$dur" ;;
    clock-skew) nm_fault_clock_skew "$victim" "$dur" "$skew_s" "$skew_rate" ;;
    *) nm_die "unknown fault kind $kind in the schedule" ;;
    esac
    [ "$F_START_US" = 0 ] && F_START_US=$F_END_US
    nm_await_recovery "$offset" "$F_START_US"
    local n_aff=0
    [ -n "$F_AFFECTED" ] && n_aff=$(echo "$F_AFFECTED" | tr ',' '\n' | grep -c .)
    if [ "$F_RECOVERY_MS" = timeout ]; then
        NM_RECOVERY_TIMEOUTS=$((NM_RECOVERY_TIMEOUTS + 1))
        nm_log "VIOLATION (I6): no progress on the affected services within ${NM_BOUND_MS} ms after #$seq $kind"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$seq" "$kind" "$victim" "$F_START_US" \
        "$F_END_US" "$F_EFFECTIVE" "$F_RECOVERY_MS" "$n_aff" "$F_TAKEOVER_MS" "$F_STALL_MS" \
        "$F_NOTE" >>"$NM_DIR/faults.tsv"
    nm_log "#$seq $kind target=$victim effective=$F_EFFECTIVE affected=$n_aff" \
        "recovery_ms=$F_RECOVERY_MS takeover_ms=$F_TAKEOVER_MS stall_ms=$F_STALL_MS $F_NOTE"
    nm_sleep_ms "$gap"
}
