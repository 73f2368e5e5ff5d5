/*
 * The status monitor's decisions (docs/DESIGN.md §7.2) as a pure function: what a
 * batch_statuses answer means for a batch we follow. Pending: keep
 * following it (writing Pending first if the 202 is not recorded yet);
 * Committed, Valid, Invalid: record the final status (and let the service
 * go on with its next batch); a failed poll: poll again after a growing
 * delay. Unknown is ambiguous in scabbard (its status memory holds 100
 * entries and is lost on a restart), so a batch first seen Unknown is
 * asked again after dlt.unknown_confirm_ms, and only an Unknown that lasts
 * that long is recorded (the queuer then resubmits it, with the reason in
 * the history). A POST whose answer was lost (post_uncertain) is followed
 * the same way: its status decides, and that POST is recorded with it.
 * No I/O, no clock reads, no logging: the submitter starts
 * the polls and acts on the plan.
 */
#ifndef QW_SUBMITTER_MONITOR_H
#define QW_SUBMITTER_MONITOR_H

#include "dlt/dlt_client.h"
#include "submitter/plan.h"

/**
 * Plans what to do with the status answer `r` (kind QW_DLT_KIND_STATUS,
 * one id asked: the job's batch) for `job`. Fills `plan`; never fails.
 */
void qw_monitor_plan(const struct qw_job *job, const struct qw_dlt_result *r,
                     const struct qw_plan_ctx *ctx, struct qw_plan *plan);

#endif
