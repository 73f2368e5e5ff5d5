/* The plan types' builders, shared by the POST and status planners; see plan.h. */
#include "submitter/plan.h"
#include "dlt/dlt_classify.h"
#include "dlt/dlt_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void qw_plan_textf(char *dst, size_t cap, const char *fmt, ...)
{
    char buf[2 * QW_OUTCOME_TEXT_MAX + QW_DLT_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(buf))
        n = (int)sizeof(buf) - 1;
    qw_dlt_text_sanitize(dst, cap, buf, (size_t)n);
}

const char *qw_outcome_expect_name(enum qw_outcome_expect e)
{
    switch (e) {
    case QW_EXPECT_POSTING:
        return "posting";
    case QW_EXPECT_PENDING:
        return "pending";
    case QW_EXPECT_INFLIGHT:
        return "inflight";
    }
    return NULL;
}

void qw_plan_keep(struct qw_plan *plan, const struct qw_job *job, enum qw_plan_event event,
                  enum qw_plan_action action)
{
    memset(plan, 0, sizeof(*plan));
    plan->event = event;
    plan->action = action;
    plan->accepted_unrecorded = job->sub->accepted_unrecorded;
    plan->accepted_ms = job->sub->accepted_ms;
    plan->unknown_since_ms = job->sub->unknown_since_ms;
    plan->poll_errors = job->sub->poll_errors;
    plan->post_uncertain = job->sub->post_uncertain;
    memcpy(plan->post_failure, job->sub->post_failure, sizeof(plan->post_failure));
}

void qw_plan_record(struct qw_plan *plan, const struct qw_job *job, enum qw_outcome_expect expect,
                    enum qw_batch_status status, enum qw_outcome_after after)
{
    qw_plan_keep(plan, job, QW_EV_NONE, QW_PLAN_RECORD);
    struct qw_outcome *o = &plan->outcome;
    o->expect = expect;
    o->status = status;
    o->retry_ms = QW_OUTCOME_NO_RETRY;
    o->after = after;
}

int64_t qw_plan_lease_deadline(int64_t sent_ms, int64_t lease_left_ms, int lease_ms)
{
    return sent_ms + lease_left_ms - lease_ms / 10;
}

int qw_plan_poll_wait_s(const struct qw_job *job, int status_wait_s, bool one_node)
{
    if (job->sub->unknown_since_ms || job->sub->post_uncertain ||
        (job->kind == QW_JOB_ADOPT && job->adopted_submitting && one_node))
        return 0;
    return job->sub->accepted_unrecorded ? QW_OUTCOME_FIRST_POLL_WAIT_S : status_wait_s;
}

bool qw_plan_may_go_on(const struct qw_job *job, const struct qw_plan_ctx *ctx)
{
    /* Not while stopping, not for a service being drained, and not forever:
     * after MAX_CHAINED batches the job goes back to the queuer, which then
     * applies what only it knows (a fresh lease deadline, a share that
     * changed while the job was out). */
    bool drain = job->drain && atomic_load_explicit(job->drain, memory_order_relaxed);
    return !ctx->stopping && !drain && job->sub->chained < QW_OUTCOME_MAX_CHAINED;
}

void qw_plan_status(struct qw_plan *plan, const struct qw_job *job, enum qw_batch_status status,
                    enum qw_outcome_after after, const char *what, int64_t now_ms)
{
    enum qw_outcome_expect expect = QW_EXPECT_INFLIGHT;
    bool unrecorded_post = job->sub->accepted_unrecorded || job->sub->post_uncertain;
    if (job->kind != QW_JOB_ADOPT)
        expect = unrecorded_post ? QW_EXPECT_POSTING : QW_EXPECT_PENDING;
    qw_plan_record(plan, job, expect, status, after);
    struct qw_outcome *o = &plan->outcome;
    if (job->sub->accepted_unrecorded) {
        o->attempts_add = 1;
        o->posted = true;
        qw_plan_textf(o->detail, sizeof(o->detail),
                      "accepted by the ledger (HTTP 202), then %s after %lld ms", what,
                      (long long)(now_ms - job->sub->accepted_ms));
    } else if (job->sub->post_uncertain) {
        o->attempts_add = 1;
        o->posted = true;
        qw_plan_textf(o->detail, sizeof(o->detail), "%s; its status read since: %s",
                      job->sub->post_failure, what);
    } else {
        qw_plan_textf(o->detail, sizeof(o->detail), "%s", what);
    }
}

void qw_plan_pending(struct qw_plan *plan, const struct qw_job *job, enum qw_outcome_after after,
                     int64_t now_ms)
{
    qw_plan_status(plan, job, QW_STATUS_PENDING, after, "ledger reports Pending", now_ms);
    plan->outcome.submitted = true;
}

void qw_plan_requeue(struct qw_plan *plan, const struct qw_job *job, const char *why)
{
    qw_plan_record(plan, job, QW_EXPECT_POSTING, QW_STATUS_NONE, QW_AFTER_END_ABANDONED);
    snprintf(plan->outcome.detail, sizeof(plan->outcome.detail), "handed back before POST: %s",
             why);
}
