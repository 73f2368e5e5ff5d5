/* The submitter's pure decisions about POST answers; see outcome.h. */
#include "submitter/outcome.h"
#include "submitter/monitor.h"

#include <stdio.h>

static void plan_accepted(struct qw_job *view, const struct qw_plan_ctx *ctx,
                          struct qw_ledger_pause *pause, struct qw_plan *plan)
{
    pause->pause_count = 0;
    pause->auth_count = 0;
    /* Follow it when it is likely final (nodes.h); Pending is written only
     * if the first answer says so. */
    view->sub->accepted_unrecorded = true;
    view->sub->accepted_ms = ctx->now_ms;
    if (ctx->stopping) {
        qw_plan_pending(plan, view, QW_AFTER_END_ABANDONED, ctx->now_ms);
    } else {
        qw_plan_keep(plan, view, QW_EV_NONE,
                     ctx->first_look_ms > 0 ? QW_PLAN_POLL_AT : QW_PLAN_POLL);
        plan->at_ms = ctx->now_ms + ctx->first_look_ms;
        plan->wait_s = QW_OUTCOME_FIRST_POLL_WAIT_S;
    }
    plan->event = QW_EV_POST_ACCEPTED;
}

static void plan_backpressure(const struct qw_job *view, const struct qw_dlt_result *r,
                              const struct qw_plan_ctx *ctx, struct qw_ledger_pause *pause,
                              struct qw_plan *plan)
{
    if (ctx->window_backs_off && r->retry_after_ms <= 0) {
        /* The node's window shrank for it: that is the response; the other
         * POSTs (and the other nodes) go on, and the batch is due again at
         * once: the smaller window, not a delay, spaces its next POST, and
         * it waits for it in the ready queue in its priority's turn. */
        qw_plan_record(plan, view, QW_EXPECT_POSTING, QW_STATUS_DELAYED, QW_AFTER_END_RETRY);
        plan->event = QW_EV_POST_BACKPRESSURE;
        struct qw_outcome *o = &plan->outcome;
        o->retry_ms = 0;
        o->posted = true;
        snprintf(o->last_error, sizeof(o->last_error), "ledger back pressure (HTTP 429)");
        snprintf(o->detail, sizeof(o->detail),
                 "HTTP 429: the node's window shrank; due again at once");
        return;
    }
    /* Answers to POSTs sent together arrive together: they grow the pause
     * once, not once each. */
    if (ctx->now_ms >= pause->pause_until_ms)
        pause->pause_count++;
    int64_t ms = qw_backoff_pause_429(pause->pause_count - 1, ctx->pause_base_ms, ctx->pause_max_ms,
                                      r->retry_after_ms > 0 ? r->retry_after_ms : 0, ctx->rng);
    bool grew = ctx->now_ms + ms > pause->pause_until_ms;
    if (grew)
        pause->pause_until_ms = ctx->now_ms + ms;
    qw_plan_record(plan, view, QW_EXPECT_POSTING, QW_STATUS_DELAYED, QW_AFTER_END_RETRY);
    plan->event = QW_EV_POST_BACKPRESSURE;
    plan->pause_ms = ms;
    plan->pause_grew = grew;
    struct qw_outcome *o = &plan->outcome;
    o->retry_ms = ms;
    o->posted = true;
    snprintf(o->last_error, sizeof(o->last_error), "ledger back pressure (HTTP 429)");
    snprintf(o->detail, sizeof(o->detail), "HTTP 429: retry in %lld ms", (long long)ms);
}

static void plan_invalid(const struct qw_job *view, const struct qw_dlt_result *r,
                         const struct qw_plan_ctx *ctx, struct qw_plan *plan)
{
    qw_plan_record(plan, view, QW_EXPECT_POSTING, QW_STATUS_INVALID, QW_AFTER_END_FINAL);
    plan->event = QW_EV_POST_INVALID;
    struct qw_outcome *o = &plan->outcome;
    o->attempts_add = 1;
    o->posted = true;
    o->go_on = qw_plan_may_go_on(view, ctx);
    qw_plan_textf(o->last_error, sizeof(o->last_error), "rejected by the ledger (HTTP 400): %s",
                  r->message ? r->message : "");
    qw_plan_textf(o->detail, sizeof(o->detail), "%s", o->last_error);
}

static void plan_auth(const struct qw_job *view, const struct qw_plan_ctx *ctx,
                      struct qw_ledger_pause *pause, struct qw_plan *plan)
{
    /* Refusals of POSTs sent together count once and are logged once. */
    bool first = ctx->now_ms >= pause->auth_until_ms;
    if (first)
        pause->auth_until_ms =
            ctx->now_ms + qw_backoff_ceiling_ms(pause->auth_count++, 1000, 60000);
    qw_plan_keep(plan, view, QW_EV_POST_AUTH, QW_PLAN_POST_AT);
    plan->pause_grew = first;
    plan->pause_ms = pause->auth_until_ms - ctx->now_ms;
    /* Not the batch's fault: no attempt burnt, it waits for the next try. */
    plan->at_ms = pause->auth_until_ms;
}

int64_t qw_outcome_group_age_ms(int64_t last_write_ms, int live)
{
    int64_t age = last_write_ms < QW_OUTCOME_GROUP_AGE_MS       ? QW_OUTCOME_GROUP_AGE_MS
                  : last_write_ms > QW_OUTCOME_GROUP_AGE_MAX_MS ? QW_OUTCOME_GROUP_AGE_MAX_MS
                                                                : last_write_ms;
    if (live <= QW_OUTCOME_GROUP_FLEET)
        return age;
    age = age * live / QW_OUTCOME_GROUP_FLEET;
    return age > QW_OUTCOME_GROUP_FLEET_MAX_MS ? QW_OUTCOME_GROUP_FLEET_MAX_MS : age;
}

bool qw_plan_post_may_have_landed(const struct qw_dlt_result *r)
{
    if (r->kind != QW_DLT_KIND_POST || r->outcome != QW_DLT_RETRY)
        return false;
    switch (r->transport) {
    case QW_DLT_TRANSPORT_TIMEOUT:
    case QW_DLT_TRANSPORT_DROPPED:
    case QW_DLT_TRANSPORT_TOO_LARGE:
    case QW_DLT_TRANSPORT_OTHER:
        return true;
    case QW_DLT_TRANSPORT_OK:
        return r->http_status == 202;
    case QW_DLT_TRANSPORT_CONNECT:
    case QW_DLT_TRANSPORT_TLS:
        return false;
    }
    return true;
}

/* No usable answer: read the batch's status now (wait=0) before deciding. */
static void plan_uncertain(const struct qw_job *view, const struct qw_dlt_result *r,
                           const struct qw_plan_ctx *ctx, struct qw_plan *plan)
{
    if (ctx->stopping) {
        /* It stays "being submitted": the next owner adopts it and reads
         * its status before anything is resubmitted. */
        qw_plan_keep(plan, view, QW_EV_ABANDONED, QW_PLAN_HAND_BACK);
        return;
    }
    qw_plan_keep(plan, view, QW_EV_POST_UNCERTAIN, QW_PLAN_POLL);
    plan->wait_s = 0;
    plan->post_uncertain = true;
    plan->unknown_since_ms = 0;
    plan->poll_errors = 0;
    if (r->transport == QW_DLT_TRANSPORT_OK)
        qw_plan_textf(plan->post_failure, sizeof(plan->post_failure),
                      "POST answered HTTP %ld without a usable body", r->http_status);
    else
        qw_plan_textf(plan->post_failure, sizeof(plan->post_failure), "POST got no answer (%s)",
                      qw_dlt_transport_name(r->transport));
}

static void plan_retry(const struct qw_job *view, const struct qw_dlt_result *r,
                       const struct qw_plan_ctx *ctx, struct qw_plan *plan)
{
    int attempts = view->attempts + 1;
    bool exhausted = ctx->max_attempts > 0 && attempts >= ctx->max_attempts;
    qw_plan_record(plan, view, QW_EXPECT_POSTING, QW_STATUS_DELAYED, QW_AFTER_END_RETRY);
    plan->event = exhausted ? QW_EV_POST_EXHAUSTED : QW_EV_POST_RETRY;
    struct qw_outcome *o = &plan->outcome;
    o->attempts_add = 1;
    o->posted = true;
    qw_plan_textf(o->last_error, sizeof(o->last_error), "POST failed (%s, HTTP %ld): %s",
                  qw_dlt_transport_name(r->transport), r->http_status,
                  r->message ? r->message : "");
    if (exhausted) {
        o->retry_ms = QW_OUTCOME_RETRY_NEVER;
        snprintf(o->detail, sizeof(o->detail),
                 "gave up after %d attempts (dlt.max_attempts); parked until an operator "
                 "retries or cancels it",
                 attempts);
    } else {
        o->retry_ms = qw_backoff_exponential_jitter(view->attempts, ctx->retry_base_ms,
                                                    ctx->retry_max_ms, ctx->rng);
        char cut[QW_OUTCOME_CUT_MAX];
        qw_plan_textf(cut, sizeof(cut), "%s", o->last_error);
        qw_plan_textf(o->detail, sizeof(o->detail), "%s; retry in %lld ms", cut,
                      (long long)o->retry_ms);
    }
}

static void plan_post(const struct qw_job *job, const struct qw_dlt_result *r,
                      const struct qw_plan_ctx *ctx, struct qw_ledger_pause *pause,
                      struct qw_plan *plan)
{
    /* A copy of the job and its submission, changed as the answer says. */
    struct qw_submission sub = *job->sub;
    struct qw_job view = *job;
    view.sub = &sub;
    switch (r->outcome) {
    case QW_DLT_ACCEPTED:
        plan_accepted(&view, ctx, pause, plan);
        return;
    case QW_DLT_BACKPRESSURE:
        plan_backpressure(&view, r, ctx, pause, plan);
        return;
    case QW_DLT_INVALID:
        plan_invalid(&view, r, ctx, plan);
        return;
    case QW_DLT_AUTH:
        plan_auth(&view, ctx, pause, plan);
        return;
    case QW_DLT_RETRY:
    case QW_DLT_OK:
        if (qw_plan_post_may_have_landed(r))
            plan_uncertain(&view, r, ctx, plan);
        else
            plan_retry(&view, r, ctx, plan);
        return;
    case QW_DLT_ABANDONED:
        break;
    }
    qw_plan_keep(plan, &view, QW_EV_ABANDONED, QW_PLAN_HAND_BACK);
}

void qw_outcome_plan(const struct qw_job *job, const struct qw_dlt_result *r,
                     const struct qw_plan_ctx *ctx, struct qw_ledger_pause *pause,
                     struct qw_plan *plan)
{
    if (r->kind == QW_DLT_KIND_POST)
        plan_post(job, r, ctx, pause, plan);
    else
        qw_monitor_plan(job, r, ctx, plan);
}
