# shellcheck shell=bash disable=SC2034 # the variables set here are read by the scripts that source this file
# The nemesis's checks after the faults stop (sourced by run.sh): drain,
# stop, then
#   I1-I4  qw-check over the simulator's event log and the database
#   I5     claim epochs only grow, and no write by a stale owner landed
#          (nemesis.i5 in schema.sql: claim-change log vs commit timestamps)
#   I6     progress after every fault within NM_BOUND_MS (measured per fault
#          by nm_await_recovery; summed up here)
#   I7     no canary secret in any log, no sanitizer report
# and the figures table. Results land in NM_RES[] (name -> number).

declare -A NM_RES=()

# Waits for every batch to become final; the workers keep running.
nm_drain() {
    local secs=$1
    if qw_wait_sql "$secs" "SELECT count(*) = 0 FROM queuer.batches
                             WHERE status IS NULL OR status NOT IN ('Committed', 'Valid', 'Invalid')" \
        2>/dev/null; then
        NM_RES[drained]=1
    else
        NM_RES[drained]=0
        nm_log "not every batch is final after ${secs} s of draining:"
        qw_sql "SELECT coalesce(status, CASE WHEN submitted THEN '(submitting)' ELSE '(new)' END)
                       || ' ' || count(*) FROM queuer.batches GROUP BY 1" | sed 's/^/    /'
    fi
}

# Stops every worker with SIGTERM; each must exit 0 within its grace.
nm_stop_workers() {
    local name
    NM_RES[bad_exits]=0
    for name in "${NM_WORKERS[@]}"; do
        nm_worker_stop "$name"
        if [ "$NM_RC" != 0 ]; then
            NM_RES[bad_exits]=$((NM_RES[bad_exits] + 1))
            nm_log "VIOLATION: worker $name exited with status $NM_RC on SIGTERM"
        fi
    done
}

nm_check_ledger() {
    local rc=0 k v
    "$QW_CHECK_BIN" --events "$QW_SIM_LOG" --kv "$NM_DIR/check.kv" --conninfo "$QW_PG_CONNINFO" \
        >"$NM_DIR/logs/qw-check.out" 2>&1 || rc=$?
    NM_RES[qw_check_rc]=$rc
    if [ ! -s "$NM_DIR/check.kv" ]; then
        nm_log "qw-check produced no figures (exit $rc):"
        sed 's/^/    /' "$NM_DIR/logs/qw-check.out"
        return 0
    fi
    while IFS='=' read -r k v; do
        NM_RES[check_$k]=$v
    done <"$NM_DIR/check.kv"
    grep 'violated' "$NM_DIR/logs/qw-check.out" | head -20 | sed 's/^/    /'
}

nm_check_i5() {
    local name v meaning
    NM_RES[i5]=0
    while IFS='|' read -r name v meaning; do
        [ -n "$name" ] || continue
        NM_RES[i5_$name]=$v
        NM_RES[i5]=$((NM_RES[i5] + v))
        [ "$v" = 0 ] || nm_log "VIOLATION (I5 $name): $v: $meaning"
    done < <(qw_sql "SELECT name, violations, meaning FROM nemesis.i5")
    if [ "${NM_RES[i5_no_stale_write]:-0}" != 0 ]; then
        psql -X -q -P pager=off "$QW_PG_CONNINFO" -c \
            "SELECT id, service_id, instance_id AS writer, claim_epoch AS epoch, to_status,
                    txn_start, committed_at, next_holder, late_by
               FROM nemesis.stale_writes ORDER BY late_by DESC LIMIT 10" | sed 's/^/    /'
    fi
    NM_RES[claim_changes]=$(qw_sql "SELECT count(*) FROM nemesis.claim_log WHERE old_epoch IS NOT NULL")
    NM_RES[worker_writes]=$(qw_sql "SELECT count(*) FROM nemesis.worker_writes")
}

# I7: the canaries appear in no file the run wrote (the secrets directory
# and the database's data files aside), and no sanitizer reported anything.
nm_check_i7() {
    local files=()
    mapfile -t files < <(find "$NM_DIR" \( -path "$NM_DIR/secrets" -o -path "$NM_DIR/pg/data" \) -prune \
        -o -type f -print)
    files+=("$NM_DIR/pg/postgres.log")
    NM_RES[i7_files]=${#files[@]}
    NM_RES[i7_secrets]=$(grep -l -F -e "$NM_DB_PASSWORD" -e "$NM_TOKEN" "${files[@]}" 2>/dev/null | wc -l)
    NM_RES[i7_sanitizer]=$(grep -l -E 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:' \
        "${files[@]}" 2>/dev/null | wc -l)
    if [ "${NM_RES[i7_secrets]}" != 0 ]; then
        nm_log "VIOLATION (I7): a canary secret appears in:"
        grep -l -F -e "$NM_DB_PASSWORD" -e "$NM_TOKEN" "${files[@]}" | sed 's/^/    /'
    fi
    if [ "${NM_RES[i7_sanitizer]}" != 0 ]; then
        nm_log "VIOLATION (I7): sanitizer reports in:"
        grep -n -E 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:' "${files[@]}" |
            head -20 | sed 's/^/    /'
    fi
}

# Per kind from faults.tsv: injected, effective, max recovery, timeouts,
# faults with progress during the fault and the slowest of those, and the
# longest standstill of the whole cluster during one.
nm_kind_rows() {
    awk -F'\t' '
        function upd(arr, k, v) { if (!(k in arr) || v + 0 > arr[k]) arr[k] = v + 0 }
        { n[$2]++; if ($6 == 1) eff[$2]++
          if ($7 == "timeout") to[$2]++
          else if ($7 != "-") upd(mx, $2, $7)
          if ($9 != "-") { tk[$2]++; upd(mt, $2, $9) }
          if ($10 != "-") upd(ms, $2, $10) }
        END { for (k in n) printf "%s %d %d %s %d %d %s %s\n", k, n[k], eff[k] + 0,
                                   (k in mx) ? mx[k] : "-", to[k] + 0, tk[k] + 0,
                                   (k in mt) ? mt[k] : "-", (k in ms) ? ms[k] : "-" }' \
        "$NM_DIR/faults.tsv" | sort
}

# Prints the figures table; returns the number of violations found.
nm_report() {
    local kind inj eff mx to tk mt st total_inj=0 max_rec=0 ineffective=0
    echo
    echo "nemesis figures: seed $NM_SEED, $NM_MODE_TEXT, $(( (SECONDS - NM_T0) / 60 ))m$(( (SECONDS - NM_T0) % 60 ))s"
    printf '  %-18s %8s %9s %13s %8s %13s %14s\n' "fault kind" injected effective "max recov ms" \
        timeouts "during fault" "max stall ms"
    while read -r kind inj eff mx to tk mt st; do
        printf '  %-18s %8d %9d %13s %8d %13s %14s\n' "$kind" "$inj" "$eff" "$mx" "$to" \
            "$([ "$tk" = 0 ] && echo - || echo "$tk in ${mt}ms")" "$st"
        total_inj=$((total_inj + inj))
        [ "$mx" != - ] && [ "$mx" -gt "$max_rec" ] && max_rec=$mx
        [ "$eff" = 0 ] && ineffective=$((ineffective + 1))
    done < <(nm_kind_rows)
    local skipped
    for skipped in "${NM_SKIPPED[@]}"; do
        printf '  %-18s %8s %9s %13s %8s %13s %14s  skipped: %s\n' "${skipped%%:*}" - - - - - - \
            "${skipped#*:}"
    done
    printf '  %-18s %8d\n' "all faults" "$total_inj"
    local batches=${NM_RES[check_batches]:-?} final=${NM_RES[check_final]:-?}
    echo "  batches processed (final / enqueued)         $final / $batches"
    echo "  POSTs: total ${NM_RES[check_posts]:-?}, 202 ${NM_RES[check_posts_202]:-?}, 429 ${NM_RES[check_posts_429]:-?}," \
        "other errors ${NM_RES[check_posts_other]:-?}; ledger restarts ${NM_RES[check_restarts]:-?}"
    echo "  duplicates: batches the ledger took twice+    ${NM_RES[check_duplicate_batches]:-?}" \
        "(extra acceptances ${NM_RES[check_duplicate_posts]:-?}; resubmission reasons recorded ${NM_RES[check_resubmit_reasons]:-?})"
    echo "  claim holder/epoch changes                    ${NM_RES[claim_changes]:-?}" \
        "(worker history rows checked ${NM_RES[worker_writes]:-?})"
    echo "  max recovery after a fault                    ${max_rec} ms (bound ${NM_BOUND_MS} ms; progress ="
    echo "    the ledger takes a new batch of every affected service; 'during fault': faults in"
    echo "    which every affected service progressed before the fault ended, and the slowest in ms:"
    echo "    for a stopped, killed or cut-off worker, the takeover by the others; 'max stall': the"
    echo "    longest time during a fault in which the ledger took no new batch of any service)"
    local v1=${NM_RES[check_violations_i1]:-?} v2=${NM_RES[check_violations_i2]:-?}
    local v3=${NM_RES[check_violations_i3]:-?} v4=${NM_RES[check_violations_i4]:-?}
    echo "  violations"
    echo "    I1 every batch final                        $v1"
    echo "    I2 one batch per service at the ledger      $v2"
    echo "    I3 ledger order = creation order            $v3"
    echo "    I4 every duplicate POST has a reason        $v4"
    echo "    I5 epochs grow, no stale write landed       ${NM_RES[i5]:-?}" \
        "(epochs_only_grow ${NM_RES[i5_epochs_only_grow]:-?}, epoch_per_holder ${NM_RES[i5_epoch_per_holder]:-?}," \
        "writer_held_epoch ${NM_RES[i5_writer_held_epoch]:-?}, no_stale_write ${NM_RES[i5_no_stale_write]:-?})"
    echo "    I6 progress within the bound after a fault  $NM_RECOVERY_TIMEOUTS"
    echo "    I7 secrets in logs / sanitizer reports      ${NM_RES[i7_secrets]:-?} / ${NM_RES[i7_sanitizer]:-?} (${NM_RES[i7_files]:-?} files searched)"
    echo "    workers that died or exited badly           $((NM_CRASHES + ${NM_RES[bad_exits]:-0}))"
    echo "    fault kinds never effective                 $ineffective"
    local bad=0 x
    for x in "$v1" "$v2" "$v3" "$v4" "${NM_RES[i5]:-?}" "$NM_RECOVERY_TIMEOUTS" \
        "${NM_RES[i7_secrets]:-?}" "${NM_RES[i7_sanitizer]:-?}" "$NM_CRASHES" "${NM_RES[bad_exits]:-?}"; do
        if [[ "$x" =~ ^[0-9]+$ ]]; then
            bad=$((bad + x))
        else
            bad=$((bad + 1)) # a check that could not run counts as failed
        fi
    done
    [ "${NM_RES[qw_check_rc]:-2}" = 2 ] && bad=$((bad + 1))
    [ "${NM_RES[drained]:-0}" = 1 ] || bad=$((bad + 1))
    if [ "$NM_REQUIRE_EFFECTIVE" = 1 ]; then
        bad=$((bad + ineffective))
    fi
    NM_VIOLATIONS=$bad
    if [ "$bad" = 0 ]; then
        echo "  result: OK, no violations"
    else
        echo "  result: FAILED, $bad violation(s)"
    fi
}
