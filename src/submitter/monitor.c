/* The status monitor's pure decisions, Unknown confirmation included; see monitor.h. */
#include "submitter/monitor.h"

#include <stdio.h>
#include <string.h>

#define POLL_ERROR_BASE_MS 50  /* backoff base after a failed status poll */
#define POLL_ERROR_MAX_MS 5000 /* and its cap */
#define ELSEWHERE_POLL_MS 250  /* after another node's Unknown, ask again this much later */

static void plan_final(const struct qw_job *job, enum qw_dlt_status_type type, const char *message,
                       const struct qw_plan_ctx *ctx, struct qw_plan *plan)
{
    switch (type) {
    case QW_DLT_STATUS_COMMITTED:
        qw_plan_status(plan, job, QW_STATUS_COMMITTED, QW_AFTER_END_FINAL,
                       "ledger reports Committed", ctx->now_ms);
        plan->event = QW_EV_COMMITTED;
        break;
    case QW_DLT_STATUS_VALID:
        qw_plan_status(plan, job, QW_STATUS_VALID, QW_AFTER_END_FINAL, "ledger reports Valid",
                       ctx->now_ms);
        plan->event = QW_EV_VALID;
        break;
    default: {
        char cut[QW_OUTCOME_CUT_MAX], what[QW_OUTCOME_TEXT_MAX];
        qw_plan_textf(cut, sizeof(cut), "%s", message);
        qw_plan_textf(what, sizeof(what), "ledger reports Invalid: %s", cut);
        qw_plan_status(plan, job, QW_STATUS_INVALID, QW_AFTER_END_FINAL, what, ctx->now_ms);
        plan->event = QW_EV_INVALID;
        qw_plan_textf(plan->outcome.last_error, sizeof(plan->outcome.last_error), "%s", what);
        break;
    }
    }
    plan->outcome.submitted = true;
    plan->outcome.go_on = qw_plan_may_go_on(job, ctx);
}

/* Unknown from the node that took (or may have taken) the POST: confirmed
 * only once it has lasted dlt.unknown_confirm_ms. */
static void plan_unknown(const struct qw_job *job, int node, const struct qw_plan_ctx *ctx,
                         struct qw_plan *plan)
{
    int64_t t = ctx->now_ms;
    if (job->sub->unknown_since_ms == 0 ||
        t - job->sub->unknown_since_ms < ctx->unknown_confirm_ms) {
        qw_plan_keep(plan, job, QW_EV_UNKNOWN_SEEN, QW_PLAN_POLL_AT);
        if (job->sub->unknown_since_ms == 0)
            plan->unknown_since_ms = t;
        plan->at_ms = plan->unknown_since_ms + ctx->unknown_confirm_ms;
        return;
    }
    char what[QW_OUTCOME_TEXT_MAX];
    long long ms = (long long)(t - job->sub->unknown_since_ms);
    if (job->sub->post_node < 0)
        qw_plan_textf(what, sizeof(what),
                      "ledger node %d reported Unknown for %lld ms (confirmed); resubmission "
                      "follows",
                      node, ms);
    else if (job->sub->post_node_knew)
        qw_plan_textf(what, sizeof(what),
                      "ledger node %d, which had taken the batch, reported Unknown for %lld ms "
                      "(confirmed): it forgot the batch (a restart, or its history overflowed); "
                      "resubmission follows",
                      node, ms);
    else
        qw_plan_textf(what, sizeof(what),
                      "ledger node %d, to which the POST went, reported Unknown for %lld ms "
                      "(confirmed): it never took the batch, or forgot it; resubmission follows",
                      node, ms);
    qw_plan_status(plan, job, QW_STATUS_UNKNOWN, QW_AFTER_END_RETRY, what, t);
    plan->event = QW_EV_UNKNOWN_CONFIRMED;
    plan->unknown_ms = t - job->sub->unknown_since_ms;
    struct qw_outcome *o = &plan->outcome;
    o->submitted = false;
    o->retry_ms = 0;
    snprintf(o->last_error, sizeof(o->last_error), "ledger does not know the batch");
}

void qw_monitor_plan(const struct qw_job *job, const struct qw_dlt_result *r,
                     const struct qw_plan_ctx *ctx, struct qw_plan *plan)
{
    if (r->outcome == QW_DLT_ABANDONED || ctx->stopping) {
        /* The batch stays Pending (or in flight) for the next owner to follow;
         * an acceptance not yet written is written first. */
        if (job->sub->accepted_unrecorded) {
            qw_plan_pending(plan, job, QW_AFTER_END_ABANDONED, ctx->now_ms);
            plan->event = QW_EV_ABANDONED;
        } else {
            qw_plan_keep(plan, job, QW_EV_ABANDONED, QW_PLAN_HAND_BACK);
        }
        return;
    }
    if (r->outcome != QW_DLT_OK || r->n_statuses != 1 || !r->statuses[0].reported) {
        qw_plan_keep(plan, job, QW_EV_POLL_FAILED, QW_PLAN_POLL_AT);
        plan->at_ms =
            ctx->now_ms + qw_backoff_exponential_jitter(job->sub->poll_errors, POLL_ERROR_BASE_MS,
                                                        POLL_ERROR_MAX_MS, ctx->rng);
        plan->poll_errors = job->sub->poll_errors + 1;
        return;
    }
    struct qw_submission sub = *job->sub;
    struct qw_job view = *job;
    view.sub = &sub;
    view.sub->poll_errors = 0;
    const struct qw_dlt_status *ds = &r->statuses[0];
    switch (ds->type) {
    case QW_DLT_STATUS_PENDING:
        view.sub->unknown_since_ms = 0;
        if (view.kind == QW_JOB_ADOPT && view.adopted_submitting) {
            /* An earlier owner's POST was accepted but its Pending never
             * written (it died in between): write it now, or the batch looks
             * mid-submission for its whole life (soft expiry stays off for
             * its service, and the history lacks the step). */
            qw_plan_status(plan, &view, QW_STATUS_PENDING, QW_AFTER_POLL,
                           "ledger reports Pending (adopted: an earlier owner's POST was "
                           "accepted)",
                           ctx->now_ms);
            plan->outcome.expect = QW_EXPECT_POSTING;
            plan->outcome.attempts_add = 1;
            plan->outcome.submitted = true;
            plan->event = QW_EV_PENDING;
            return;
        }
        if (view.sub->accepted_unrecorded || view.sub->post_uncertain) {
            qw_plan_pending(plan, &view, QW_AFTER_POLL, ctx->now_ms);
            plan->event = QW_EV_PENDING;
        } else {
            qw_plan_keep(plan, &view, QW_EV_PENDING, QW_PLAN_POLL);
            plan->wait_s = ctx->status_wait_s;
        }
        return;
    case QW_DLT_STATUS_COMMITTED:
    case QW_DLT_STATUS_VALID:
    case QW_DLT_STATUS_INVALID:
        plan_final(&view, ds->type, ds->message, ctx, plan);
        return;
    case QW_DLT_STATUS_UNKNOWN:
        break;
    }
    if (view.sub->post_node >= 0 && r->node != view.sub->post_node) {
        /* Another node learns a batch only when it commits: its Unknown
         * says nothing about one pending at the POST's node. */
        qw_plan_keep(plan, &view, QW_EV_UNKNOWN_ELSEWHERE, QW_PLAN_POLL_AT);
        plan->at_ms = ctx->now_ms + ELSEWHERE_POLL_MS;
        return;
    }
    plan_unknown(&view, r->node, ctx, plan);
}
