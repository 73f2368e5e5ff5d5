#!/usr/bin/env bash
# A ledger that behaves like Splinter scabbard: scabbard-sim with three
# nodes, each answering from its own batch history (a node knows what was
# posted to it; the others learn a batch 500 ms after it commits), waits on
# unknown ids that hang for the whole wait, protocol 2 with a rate limit
# (429s). Two workers drain 30 services x 75 batches over all three nodes.
# Mid-run node 1 hangs for 10 s (every request held unanswered; half the
# POSTs it holds were taken first), and node 2 restarts (it forgets its
# history and the batches it had queued). Checks:
#   - every batch Committed; qw-check finds no violation (creation order at
#     the ledger, one batch in flight per service, every duplicate POST with
#     a recorded reason);
#   - no batch reached the ledger twice except after a node restart, and
#     every such batch has the confirmed Unknown of the node that forgot it
#     in its history;
#   - a status wait is bounded: no long poll was held to a look past
#     dlt.status_wait_s (POLL_HOLD_MS), and no batch waited more than
#     BOUND_MS from its commit at the ledger to the client's verdict on it:
#     its final status recorded, or the Unknown of the node that forgot it
#     recorded as confirmed (its resubmission follows: a new POST, paced by
#     the ledger's back pressure, not by a status wait). Both times are
#     wall-clock times of this machine: the simulator's event log and
#     PostgreSQL's now() when the outcome's statement began;
#   - the faults happened: 429s, hung requests on node 1, node 2's restart.
#
# BOUND_MS is the longest chain from a commit to the verdict that the client
# follows under this schedule (node 1 hangs from H, node 2 restarts at about
# H + 1 s, node 1 answers again at H + 10 s); each term is a variable below:
#   1. batch B was posted to node 2, whose long poll for it waits; B commits
#      and node 2 restarts before its next look answers (WAIT_LOOK_MS): the
#      poll is cut;
#   2. after a failed poll's backoff (POLL_ERROR_BASE_MS) B is read at
#      another node, without a wait: node 0 has not learnt the commit yet
#      (PROPAGATION_MS) and answers Unknown;
#   3. ELSEWHERE_POLL_MS later, node 2 having answered nothing since, B is
#      read at the node not asked yet, node 1: none of its requests has timed
#      out yet, so the client has no reason to avoid it, and the hang holds
#      the read for the request timeout (TIMEOUT_MS);
#   4. after the backoff (POLL_ERROR_BASE_MS) B is read at the node that took
#      its POST, node 2, with a wait (WAIT_S); node 2 forgot B, so the wait
#      runs out (a wait ends at a look, and WAIT_S is a whole number of
#      looks): Unknown;
#   5. that node's Unknown is asked again UNKNOWN_CONFIRM_MS later and is
#      confirmed;
#   6. the outcome is written within OUTCOME_GROUP_AGE_MAX_MS (a group waits
#      as long as the last write took, at most that).
# (The requests' own round trips on the loopback, about a millisecond each,
# are not counted.)
# The other chains are shorter: the same one with B read at node 1 right after
# the cut (a second failed read in a row backs off at most 2 x
# POLL_ERROR_BASE_MS, not ELSEWHERE_POLL_MS); a POST node 1 holds (it commits
# COMMIT_DELAY_MS after node 1 took it), read elsewhere once the POST times
# out, TIMEOUT_MS - COMMIT_DELAY_MS + ELSEWHERE_POLL_MS at most (node 2 may
# have forgotten it, node 0 knows); the first read after a 202 of node 1 that
# the hang holds (its wait is QW_OUTCOME_FIRST_POLL_WAIT_S, 1 s), TIMEOUT_MS +
# 1 s + POLL_ERROR_BASE_MS + ELSEWHERE_POLL_MS - COMMIT_DELAY_MS. The bound
# stays below node 1's 10 s hang: a read that waits out the hang, a status
# wait not bounded, or a batch read again at the hung node after another
# node's Unknown exceeds it.
#
# POLL_HOLD_MS bounds a long poll's hold, the waited_ms of its line in the
# simulator's log: from the start of its wait, after the query's first look,
# to the handler's last look (sim/http.c); the request's arrival, that first
# look and the answer's write are outside it. The terms:
#   - the wait: WAIT_S is the longest wait the client asks (the first read
#     after a 202 waits QW_OUTCOME_FIRST_POLL_WAIT_S, 1 s); a wait that runs
#     out ends at the first look after it, and the looks come every
#     WAIT_LOOK_MS from the start of the wait (sim/README.md), so a wait of
#     WAIT_S, a whole number of looks, ends at the look WAIT_S * 1000 ms in;
#   - the answer at that look: the simulator's ticker wakes then, resumes the
#     request, and a libmicrohttpd thread takes it up and renders the
#     statuses under the engine mutex (sim/engine.c, sim/http.c): two thread
#     wake-ups and a lock, as soon as this machine schedules them. No setting
#     bounds it; it stays far below a look (at most 44 ms measured, on two
#     cores kept busy by a load of 8). As every hold ends at a look counted
#     from the start of the wait, a hold's remainder modulo WAIT_LOOK_MS is
#     this time; the check prints the largest as slowest_answer_ms.
# Every hold the simulator decides ends at a look, so a poll held to a look
# past its wait is held WAIT_LOOK_MS more: the check is that every hold is
# below WAIT_S * 1000 + WAIT_LOOK_MS.
. "$(dirname "$0")/e2e_common.sh"

# The ledger takes at most RATE batches/s, so TOTAL / RATE seconds is the
# shortest the run can take, however fast the workers are: it must outlast
# the faults, which end 11 s after a tenth of the batches committed.
RATE=150
SERVICES=30
BATCHES=75
TOTAL=$((SERVICES * BATCHES))
TIMEOUT_MS=3000        # QUEUER_DLT_REQUEST_TIMEOUT_MS of E2E_WORKER_SETTINGS: a read without a wait
WAIT_S=2               # QUEUER_DLT_STATUS_WAIT_S of E2E_WORKER_SETTINGS
UNKNOWN_CONFIRM_MS=500 # QUEUER_DLT_UNKNOWN_CONFIRM_MS of the workers below
POLL_ERROR_BASE_MS=50  # POLL_ERROR_BASE_MS (src/submitter/monitor.c): after a failed read
ELSEWHERE_POLL_MS=250  # ELSEWHERE_POLL_MS (src/submitter/monitor.c): after another node's Unknown
OUTCOME_GROUP_AGE_MAX_MS=20 # QW_OUTCOME_GROUP_AGE_MAX_MS (src/submitter/outcome.h): an outcome's longest wait
PROPAGATION_MS=500     # --propagation-ms below: when the other nodes learn of a commit
COMMIT_DELAY_MS=50     # --commit-delay-ms below: a batch commits this long after it was taken
WAIT_LOOK_MS=100       # --wait-poll-ms below: a read that waits at a node looks this often
BOUND_MS=$((WAIT_LOOK_MS + POLL_ERROR_BASE_MS + ELSEWHERE_POLL_MS + TIMEOUT_MS + POLL_ERROR_BASE_MS
    + WAIT_S * 1000 + UNKNOWN_CONFIRM_MS + OUTCOME_GROUP_AGE_MAX_MS))
POLL_HOLD_MS=$((WAIT_S * 1000 + WAIT_LOOK_MS))

e2e_db
e2e_workload "$SERVICES" "$BATCHES"
qw_sim_start "$E2E_DIR/sim" --listen 127.0.0.1:0 --listen 127.0.0.1:0 \
    --commit-delay-ms "$COMMIT_DELAY_MS" --propagation-ms "$PROPAGATION_MS" \
    --wait-poll-ms "$WAIT_LOOK_MS" --rate "$RATE" --seed 7
IFS=, read -r NODE0 NODE1 NODE2 <<<"$QW_SIM_URLS"
[ -n "$NODE2" ] || e2e_fail "the simulator did not report three node addresses ($QW_SIM_URLS)"
e2e_log "ledger nodes: $QW_SIM_URLS; starting 2 workers"

committed() { qw_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'"; }
post_json() {
    curl -fsS -m 5 -X POST --data "$2" "$1" >/dev/null || e2e_fail "POST $1 $2 failed"
}

for w in w1 w2; do
    e2e_worker "$w" QUEUER_DLT_URL="$QW_SIM_URLS" \
        QUEUER_DLT_UNKNOWN_CONFIRM_MS="$UNKNOWN_CONFIRM_MS"
done
qw_wait_sql 30 "SELECT count(*) >= $((TOTAL / 10)) FROM queuer.batches WHERE status = 'Committed'" ||
    e2e_fail "a tenth of the batches did not commit within 30 s"

e2e_log "node 1 hangs for 10 s ($(committed) of $TOTAL committed)"
post_json "$NODE1/_sim/faults" '{"fault-hang": 1}'
sleep 1
e2e_log "node 2 restarts ($(committed) of $TOTAL committed)"
post_json "$NODE0/_sim/nodes/2" '{"restart": true}'
sleep 9
post_json "$NODE1/_sim/faults" '{"reset": true}'
e2e_log "node 1 answers again ($(committed) of $TOTAL committed)"
e2e_assert "$(committed)" -lt "$TOTAL" "batches left when node 1 answered again (the run must outlast the faults)"
e2e_drain 60

# Every verdict recorded (a final status, or a confirmed Unknown), to set
# against the ledger's commits, before the check stops PostgreSQL's users
# (the simulator's log stays).
qw_sql "SELECT batch_id, to_status, (extract(epoch FROM at) * 1000000)::bigint
          FROM queuer.batch_history WHERE to_status IN ('Committed', 'Unknown') ORDER BY at" \
    >"$E2E_DIR/verdicts.txt"
qw_sql "SELECT batch_id FROM queuer.batch_history
         WHERE to_status = 'Unknown' AND detail LIKE '%reported Unknown for % ms (confirmed)%'" \
    >"$E2E_DIR/unknown_confirmed.txt"
e2e_check

e2e_assert "$(committed)" -eq "$TOTAL" "every batch Committed"
e2e_assert "${FIG[batches]}" -eq "$TOTAL" "qw-check saw every batch"
e2e_assert "${FIG[posts_429]}" -gt 0 "429s from the ledger"

# The ledger's side, from its event log.
python3 - "$QW_SIM_LOG" "$E2E_DIR/verdicts.txt" "$E2E_DIR/unknown_confirmed.txt" "$POLL_HOLD_MS" \
    "$WAIT_LOOK_MS" "$BOUND_MS" >"$E2E_DIR/ledger_side.txt" <<'EOF' || e2e_fail "ledger-side checks: $(cat "$E2E_DIR/ledger_side.txt")"
import json, sys
log, verdicts_file, unknown_file, poll_hold_ms, look_ms, bound_ms = sys.argv[1:7]
poll_hold_ms, look_ms, bound_ms = int(poll_hold_ms), int(look_ms), int(bound_ms)
taken = {}        # batch -> times the ledger took it (202, or a lost answer it accepted)
restarts = []     # times of node restarts
hung_from = None  # time of the first request node 1 held (its hang began)
dropped = 0       # batches the restarted node had queued (lost)
hung_gets = 0
longest_wait = 0
slowest_answer = 0 # ms from the look that ended a long poll to its answer
committed_at = {} # batch -> first commit time, us
bad = []
for line in open(log):
    e = json.loads(line)
    ev = e["ev"]
    if e.get("code") == "hang" and e.get("node") == 1 and hung_from is None:
        hung_from = e["t"]
    if ev == "post" and e.get("batch") and (e["code"] == 202 or e.get("accepted")):
        taken.setdefault(e["batch"], []).append(e["t"])
    elif ev == "restart" and e.get("why") == "node":
        restarts.append(e["t"])
        dropped = e.get("dropped", 0)
    elif ev == "get":
        if e["code"] == "hang" and e.get("node") == 1:
            hung_gets += 1
        longest_wait = max(longest_wait, e.get("waited_ms", 0))
        slowest_answer = max(slowest_answer, e.get("waited_ms", 0) % look_ms)
    elif ev == "status" and e["to"] == "Committed":
        committed_at.setdefault(e["batch"], e["t"])
unknown = set(l.strip() for l in open(unknown_file) if l.strip())
twice = 0
for b, ts in taken.items():
    for first, again in zip(ts, ts[1:]):
        twice += 1
        if not any(first < r < again for r in restarts):
            bad.append("batch %s reached the ledger again without a node restart in between" % b[:16])
        if b not in unknown:
            bad.append("batch %s reached the ledger again without a confirmed Unknown recorded" % b[:16])
verdicts = {}     # batch -> [(time, status)] recorded, in time order
for line in open(verdicts_file):
    b, status, at = line.strip().split("|")
    verdicts.setdefault(b, []).append((int(at), status))
lags = []         # (ms from the commit to the first verdict after it, batch, that verdict)
for b, c in committed_at.items():
    after = [v for v in verdicts.get(b, []) if v[0] >= c]
    if not after:
        bad.append("batch %s: no verdict recorded after the ledger committed it" % b[:16])
        continue
    lags.append(((after[0][0] - c) // 1000, b, after[0][1]))
worst = max(lags) if lags else (0, "", "")
if not restarts:
    bad.append("node 2 never restarted")
if not unknown:
    bad.append("no Unknown was confirmed: the restart made no node forget a batch in flight")
if hung_gets == 0:
    bad.append("no status query hung on node 1")
if longest_wait >= poll_hold_ms:
    bad.append("a long poll was held %d ms, a look past the longest wait (bound %d ms)"
               % (longest_wait, poll_hold_ms))
if worst[0] > bound_ms:
    bad.append("batch %s was recorded %s %d ms after the ledger committed it (bound %d ms)"
               % (worst[1][:16], worst[2], worst[0], bound_ms))
print("posted_again=%d restarts=%d dropped=%d unknown_confirmed=%d hung_gets=%d "
      "longest_wait_ms=%d slowest_answer_ms=%d poll_hold_ms=%d worst_lag_ms=%d bound_ms=%d"
      % (twice, len(restarts), dropped, len(unknown), hung_gets, longest_wait, slowest_answer,
         poll_hold_ms, worst[0], bound_ms))
if lags:
    # What the slowest verdict was made of: its commit and its restart
    # against the hang's start; its final status comes after a resubmission
    # when the verdict was an Unknown.
    def ms(t):
        return (t - hung_from) // 1000 if hung_from else 0
    finals = [v[0] for v in verdicts[worst[1]] if v[1] == "Committed"]
    print("slowest verdict: batch %s committed at hang%+d ms (node 2 restarted at hang%+d ms), "
          "recorded %s %d ms later, its final status %d ms later"
          % (worst[1][:16], ms(committed_at[worst[1]]), ms(restarts[0]) if restarts else 0,
             worst[2], worst[0], (max(finals) - committed_at[worst[1]]) // 1000 if finals else -1))
for m in bad[:10]:
    print(m)
sys.exit(1 if bad else 0)
EOF
e2e_log "ledger side: $(head -1 "$E2E_DIR/ledger_side.txt")"
e2e_log "$(sed -n 2p "$E2E_DIR/ledger_side.txt")"
e2e_log "figures: batches=$TOTAL posts=${FIG[posts]} 429s=${FIG[posts_429]}" \
    "duplicates=${FIG[duplicate_batches]} reasons=${FIG[resubmit_reasons]} violations=${FIG[violations]}"
e2e_log "PASS"
