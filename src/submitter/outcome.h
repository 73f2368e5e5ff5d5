/*
 * The submitter's decisions as pure functions: given what we know of a
 * job and the classified answer of the ledger, what to record in the
 * database and what the job does next. No I/O, no clock reads (time is
 * passed in), no logging, no atomics: the submitter (submitter.c) is the
 * adapter that counts, logs and acts on a plan, and the outcome writer
 * (outcome_writer.c) puts the outcomes into the database.
 *
 * The plan types, and the builders both planners use, are in plan.h.
 * Status answers (the status monitor of docs/DESIGN.md §7.2, with the confirmation
 * of Unknown) are planned by qw_monitor_plan() in monitor.h;
 * qw_outcome_plan() dispatches to it.
 */
#ifndef QW_SUBMITTER_OUTCOME_H
#define QW_SUBMITTER_OUTCOME_H

#include "dlt/dlt_client.h"
#include "shared/job.h"
#include "submitter/plan.h"

#include <stdbool.h>
#include <stdint.h>

/** Submitter-wide ledger pause state (429 back pressure, refused credentials). */
struct qw_ledger_pause {
    int64_t pause_until_ms; /* monotonic ms: no POST before this (429) */
    int pause_count;        /* consecutive 429 bursts */
    int64_t auth_until_ms;  /* monotonic ms: no POST before this (401/403) */
    int auth_count;         /* consecutive refusals */
};

/**
 * Plans what to do with the finished ledger transfer `r` about `job`.
 * Reads `job` and `ctx`; updates `pause` (the submitter's pause state) for
 * 429 and 401/403 answers; fills `plan`. Draws from ctx->rng for jitter.
 * Never fails: every answer has a plan.
 */
void qw_outcome_plan(const struct qw_job *job, const struct qw_dlt_result *r,
                     const struct qw_plan_ctx *ctx, struct qw_ledger_pause *pause,
                     struct qw_plan *plan);

/**
 * Whether a failed POST (classified RETRY) may have reached the ledger:
 * no answer arrived (timeout, connection lost after sending, an answer
 * over the size cap) or a 202 whose body could not be used. Such a batch
 * is never resubmitted blindly: its status is read first (on another node
 * when there is one), and Unknown is confirmed as after Pending.
 */
bool qw_plan_post_may_have_landed(const struct qw_dlt_result *r);

#define QW_OUTCOME_GROUP_AGE_MS 2         /* a group of outcomes waits at least this long (ms) */
#define QW_OUTCOME_GROUP_AGE_MAX_MS 20    /* ... and at most this long */
#define QW_OUTCOME_GROUP_FLEET 4          /* workers beyond this many wait in proportion, */
#define QW_OUTCOME_GROUP_FLEET_MAX_MS 200 /* ... at most this long */

/**
 * How long the oldest of a group of outcomes waits before the group is
 * written, given how long the last write took (ms) and how many workers are
 * live (`live`, this one included; 0 = not known): that long, within
 * [QW_OUTCOME_GROUP_AGE_MS, QW_OUTCOME_GROUP_AGE_MAX_MS]. On an idle
 * database a lone outcome waits the minimum; on a busy one a group gathers
 * for as long as writing one costs, so statements per batch fall as the
 * load rises. In a fleet of more than QW_OUTCOME_GROUP_FLEET workers each
 * waits live / QW_OUTCOME_GROUP_FLEET times as long, up to
 * QW_OUTCOME_GROUP_FLEET_MAX_MS: the fleet writes no more outcome statements
 * per second than that many workers would, so adding workers does not add
 * statements for the same batches.
 */
int64_t qw_outcome_group_age_ms(int64_t last_write_ms, int live);

#endif
