#!/usr/bin/env bash
# `queuer status --watch` as a person sees it: run in tmux on an 80x24
# terminal while two workers drain a workload whose ledger fails some POSTs
# for a moment (dlt.max_attempts = 1, so those batches park and show as
# stuck), and
# read the screen back with capture-pane:
#  - the screen fits: at most 24 lines, none wider than 80 columns;
#  - it shows in flight, waiting, the committed rate, both instances with
#    their claims, and the stuck (parked) batches;
#  - it refreshes: the time in its first line changes within two seconds;
#  - Ctrl-C ends it with exit 0.
# QW_WATCH_SCREEN_OUT=FILE keeps the screen read mid-drain (for the docs).
# Skips (77) when tmux is not installed (scripts/deps.sh --test installs it).
. "$(dirname "$0")/lib_scenario.sh"
command -v tmux >/dev/null || { echo "ops_status_watch: skipped: tmux is not installed"; exit 77; }
sc_begin ops_status_watch

sock=$SC_DIR/tmux.sock
tmux_() { tmux -S "$sock" "$@"; }
screen() { tmux_ capture-pane -p -t watch; }
# shellcheck disable=SC2317 # called from the EXIT trap
stop_tmux() { tmux_ kill-server 2>/dev/null || true; }
sc_on_exit stop_tmux

sc_pg_start
sc_sim_start --commit-delay-ms 100 --seed 16
sc_gen "$SC_DIR/w.tsv" 40 25 16
sc_load_tsv "$SC_DIR/w.tsv"
sc_worker_start w1 QUEUER_DLT_MAX_ATTEMPTS=1
sc_worker_start w2 QUEUER_DLT_MAX_ATTEMPTS=1
sc_wait_log w1 20 'event=worker.started'
sc_wait_log w2 20 'event=worker.started'
sc_wait "first commits" 20 "SELECT count(*) > 0 FROM queuer.batches WHERE status = 'Committed'"
# Until a POST has failed and parked its batch: 0.2 s of 5 % failures
# often failed only status requests, and the screen then had no stuck batch.
sc_sim_faults '{"fault-5xx": 0.05}'
sc_wait "a batch parked by a failed POST" 20 \
    "SELECT count(*) > 0 FROM queuer.batches WHERE status = 'Delayed' AND retry_at = 'infinity'"
sc_sim_faults '{"reset": true}'

tmux_ -f /dev/null new-session -d -s watch -x 80 -y 24 \
    "env QUEUER_DATABASE_CONNINFO='$QW_PG_CONNINFO' '$QUEUER_BIN' status --watch; echo EXIT=\$?; sleep 60" ||
    sc_fail "tmux did not start"

# Wait (bounded) for a screen showing both workers and a stuck batch (its
# row, not just the word: the retrying line always says "parked N").
parked_row='^ +[0-9a-f]{16} .* parked +[0-9]'
ok=0
for _ in $(seq 1 200); do
    s=$(screen)
    if grep -q 'instances: 2 alive of 2' <<<"$s" && grep -Eq "$parked_row" <<<"$s" &&
        grep -Eq '^committed +[0-9]+/s' <<<"$s" &&
        grep -Eq '^ *w1 +alive' <<<"$s" && grep -Eq '^ *w2 +alive' <<<"$s"; then
        ok=1
        break
    fi
    sleep 0.1
done
[ "$ok" = 1 ] || sc_fail "the watch screen never showed two alive workers, a rate and a parked batch:
$(screen)"
first=$(screen)
[ -z "${QW_WATCH_SCREEN_OUT:-}" ] || printf '%s\n' "$first" >"$QW_WATCH_SCREEN_OUT"
sc_log "screen:"
printf '%s\n' "$first"

lines=$(printf '%s\n' "$first" | wc -l)
sc_check_num "screen lines" "$lines" "<=" 24
widest=$(printf '%s\n' "$first" | awk '{ if (length($0) > w) w = length($0) } END { print w + 0 }')
sc_check_num "widest line" "$widest" "<=" 80
for want in '^queuer status --watch' '^in flight +[0-9]+' '^waiting +[0-9]+' \
    '^committed +' '^services +[0-9]+' '^ *INSTANCE +STATE +HEARTBEAT +CLAIMS' \
    '^stuck batches: [1-9][0-9]*' 'STUCK BATCH +SERVICE +STATE +FOR' "$parked_row"; do
    grep -Eq -- "$want" <<<"$first" || sc_fail "no line matching /$want/ on the screen"
done

# It refreshes: the timestamp of the first line moves on.
t1=$(head -n 1 <<<"$first" | awk '{ print $4 }')
changed=0
for _ in $(seq 1 40); do
    sleep 0.1
    t2=$(screen | head -n 1 | awk '{ print $4 }')
    [ -n "$t2" ] && [ "$t2" != "$t1" ] && { changed=1; break; }
done
[ "$changed" = 1 ] || sc_fail "the screen did not refresh within 4 s (still $t1)"
sc_log "refreshed: $t1 -> $t2"

# Once every service not blocked by a parked batch has drained, keep the screen.
sc_wait "workload drained" 90 "SELECT count(*) = 0 FROM queuer.batches b
    WHERE (b.status IS NULL OR b.status IN ('Pending', 'Unknown')
           OR (b.status = 'Delayed' AND b.retry_at <> 'infinity'))
      AND NOT EXISTS (SELECT 1 FROM queuer.batches p WHERE p.service_id = b.service_id
                         AND p.status = 'Delayed' AND p.retry_at = 'infinity')"
sleep 1.5
sc_log "after the drain:"
screen

tmux_ send-keys -t watch C-c
ended=0
for _ in $(seq 1 50); do
    screen | grep -q '^EXIT=0' && { ended=1; break; }
    sleep 0.1
done
[ "$ended" = 1 ] || sc_fail "Ctrl-C did not end --watch with exit 0:
$(screen)"
sc_log "OK"
