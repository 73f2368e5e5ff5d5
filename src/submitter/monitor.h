/*
 * The status monitor's decisions (docs/DESIGN.md §7.2) as a pure function: what a
 * batch_statuses answer means for a batch we follow. Pending: keep
 * following it (writing Pending first if the 202 is not recorded yet);
 * Committed, Valid, Invalid: record the final status (and let the service
 * go on with its next batch); a failed poll: poll again after a growing
 * delay. Unknown is ambiguous in scabbard: each node answers from its own
 * batch history, which holds what was posted to that node and, on the
 * other nodes, only what has committed; it keeps 100 entries per service
 * and is lost on a restart. So only the node that took (or may have taken)
 * the batch's POST can confirm it: an Unknown from another node is asked
 * again (QW_EV_UNKNOWN_ELSEWHERE). An Unknown from the POST's node (or
 * from any node, for a batch found in flight whose POST we did not send)
 * is asked again after dlt.unknown_confirm_ms, and only an Unknown that
 * lasts that long is recorded, saying which node forgot it and whether it
 * had acknowledged it (the queuer then resubmits it, with the reason in
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
