#!/usr/bin/env bash
# Priority under a saturated ledger: one ledger node that takes
# 10 ms to answer a submission, and a worker allowed 2 submissions in
# flight, so at most about 200 batches/s reach the ledger. What is scarce
# is, by QW_PRIORITY_SCARCE:
#   channels  dlt.channels = 2 (POSTs in flight per node);
#   capacity  a shared capacity of 2 batches in flight (`queuer capacity
#             set`) with 64 channels: the capacity gate admits
#             POSTs at the same dispatch point, and the ready queue decides
#             who gets the freed units (e2e_priority_capacity.sh).
#   claims    worker.max_claims = 5 with 64 channels: the worker holds 5 of
#             the 70 services at a time, and which free service it claims
#             next decides (migration 0013, e2e_priority_claims.sh).
# 60 services x 6 batches are enqueued at priority 0 and the
# worker starts; then 10 services x 6 at priority 10 (the fourth TSV
# column). Checks:
#   - when the last priority-10 batch is final, at most half of the
#     priority-0 batches are (without priority they would finish together,
#     all at the end);
#   - every batch ends Committed, order kept (qw-check): priority reorders
#     services, never a service's own batches, and aging lets priority 0
#     go on;
#   - `queuer enqueue --priority` stores the priority of a single batch.
. "$(dirname "$0")/e2e_common.sh"

LOW_SERVICES=60
HIGH_SERVICES=10
BATCHES=6
LOW=$((LOW_SERVICES * BATCHES))
HIGH=$((HIGH_SERVICES * BATCHES))

e2e_db
"$QUEUER_GEN_BIN" --services "$LOW_SERVICES" --batches "$BATCHES" --seed 21 --circuit-prefix lowpr \
    >"$E2E_DIR/low.tsv"
"$QUEUER_GEN_BIN" --services "$HIGH_SERVICES" --batches "$BATCHES" --seed 22 --circuit-prefix highp |
    sed 's/$/\t10/' >"$E2E_DIR/high.tsv"
qw_load_tsv "$E2E_DIR/low.tsv" || e2e_fail "loading the priority-0 workload failed"

e2e_log "scarce: ${QW_PRIORITY_SCARCE:-channels}"
qw_sim_start "$E2E_DIR/sim" --commit-delay-ms 20 --node-latency-ms 0:10
case ${QW_PRIORITY_SCARCE:-channels} in
channels) e2e_worker w1 QUEUER_DLT_CHANNELS=2 QUEUER_DLT_PRIORITY_AGING_MS=1000 ;;
capacity)
    "$QUEUER_BIN" capacity set --max-in-flight 2 --partition-size 1 >"$E2E_DIR/capacity.out" 2>&1 ||
        e2e_fail "queuer capacity set failed: $(cat "$E2E_DIR/capacity.out")"
    e2e_worker w1 QUEUER_DLT_CHANNELS=64 QUEUER_DLT_PRIORITY_AGING_MS=1000
    ;;
claims) e2e_worker w1 QUEUER_DLT_CHANNELS=64 QUEUER_WORKER_MAX_CLAIMS=5 QUEUER_DLT_PRIORITY_AGING_MS=1000 ;;
*) e2e_fail "QW_PRIORITY_SCARCE must be channels, capacity or claims" ;;
esac
qw_wait_sql 30 "SELECT count(*) >= 20 FROM queuer.batches WHERE status = 'Committed'" ||
    e2e_fail "the priority-0 load did not start"
qw_load_tsv "$E2E_DIR/high.tsv" || e2e_fail "loading the priority-10 workload failed"
e2e_log "priority 10 enqueued ($(qw_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'") committed so far)"
e2e_assert "$(qw_sql "SELECT count(*) FROM queuer.batches WHERE priority = 10")" -eq "$HIGH" \
    "batches stored with priority 10 (fourth TSV column)"
e2e_drain 120

done_low=$(e2e_low_done_when_high_done)
e2e_log "when the last priority-10 batch was final: $done_low of $LOW priority-0 batches were"

# A single batch keeps the priority it was enqueued with.
"$QUEUER_GEN_BIN" --services 1 --batches 1 --seed 23 --circuit-prefix singl >"$E2E_DIR/one.tsv"
IFS=$'\t' read -r svc id hex <"$E2E_DIR/one.tsv"
python3 -c 'import sys; sys.stdout.buffer.write(bytes.fromhex(sys.argv[1]))' "$hex" >"$E2E_DIR/one.bin"
"$QUEUER_BIN" enqueue --service "$svc" --batch-id "$id" --payload-file "$E2E_DIR/one.bin" \
    --priority -7 >/dev/null || e2e_fail "queuer enqueue --priority -7 failed"
e2e_assert "$(qw_sql "SELECT priority FROM queuer.batches WHERE batch_id = '$id'")" -eq -7 \
    "the priority of a single enqueue"
e2e_drain 30
e2e_check

total=$((LOW + HIGH + 1))
committed=$(qw_sql "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'")
e2e_assert "$committed" -eq "$total" "every batch Committed (priority 0 was not starved)"
e2e_assert "${FIG[batches]}" -eq "$total" "qw-check saw every batch"
e2e_assert "$((done_low * 2))" -le "$LOW" \
    "at most half of priority 0 final when priority 10 was ($done_low of $LOW)"
e2e_log "figures: low_final_at_high_done=$done_low/$LOW posts=${FIG[posts]} 429s=${FIG[posts_429]}" \
    "violations=${FIG[violations]}"
e2e_log "PASS"
