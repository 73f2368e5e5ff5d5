/*
 * What a finished ledger transfer means: the plan (outcome.h, monitor.h) for
 * the job, the counters and log lines of what happened (pauses after a 429 or
 * a 401/403 included), and the job's next step.
 */
#include "common/histogram.h"
#include "common/log.h"
#include "submitter/submitter_int.h"

#include <stdio.h>
#include <string.h>

static struct qw_plan_ctx plan_ctx(const struct submitter *s, struct qw_rng *rng)
{
    const struct qw_config *cfg = s->cfg;
    return (struct qw_plan_ctx){
        .now_ms = now_ms(),
        .stopping = s->stopping,
        .max_attempts = cfg->dlt_max_attempts,
        .retry_base_ms = cfg->dlt_retry_base_ms,
        .retry_max_ms = cfg->dlt_retry_max_ms,
        .pause_base_ms = atomic_load(&s->w->pause_base_ms), /* reloadable (SIGHUP) */
        .pause_max_ms = atomic_load(&s->w->pause_max_ms),
        .status_wait_s = cfg->dlt_status_wait_s,
        .unknown_confirm_ms = cfg->dlt_unknown_confirm_ms,
        .rng = rng,
    };
}

/*
 * Counts a failed ledger exchange by kind (queuer_ledger_failures_total)
 * and logs it at warn, at most once a second per request type and kind
 * with the number of that kind not logged since (so a steady stream of one
 * kind never hides the first of another, e.g. a proxy's 400 after 503s).
 */
static void note_failure(struct submitter *s, const struct qw_job *job,
                         const struct qw_dlt_result *r)
{
    enum qw_dlt_failure kind =
        qw_dlt_failure_kind(r->kind, r->outcome, r->transport, r->http_status);
    if (kind == QW_DLT_FAIL_NONE)
        return;
    int req = r->kind == QW_DLT_KIND_POST ? 0 : 1;
    atomic_fetch_add_explicit(&s->w->stats.ledger_failures[req][kind], 1, memory_order_relaxed);
    int64_t t = now_ms();
    int64_t *logged = &s->failure_logged_ms[req][kind];
    if (*logged != 0 && t - *logged < FAILURE_LOG_EVERY_MS) {
        s->failures_unlogged[req][kind]++;
        return;
    }
    char quoted[600];
    /* A 400 not from the ledger (a proxy, a TLS port answering plain HTTP)
     * means a misconfiguration every POST meets: say so loudly. */
    bool loud = r->kind == QW_DLT_KIND_POST && r->http_status == 400;
    qw_log(loud ? QW_LOG_ERROR : QW_LOG_WARN, "ledger.request_failed",
           "request=%s kind=%s service=%s batch=%.16s http_status=%ld message=%s "
           "not_logged_since=%lld",
           req == 0 ? "post" : "status", qw_dlt_failure_name(kind), job->service_id, job->batch_id,
           r->http_status, qw_log_quote(quoted, sizeof(quoted), r->message),
           s->failures_unlogged[req][kind]);
    *logged = t;
    s->failures_unlogged[req][kind] = 0;
}

/*
 * Notes in the batch's last_error why its status cannot be read (after a
 * few failed polls in a row, and every few after that), so an operator
 * sees more than a batch "submitting" for a long time. Fenced like every
 * write; a failure here changes nothing and is only logged.
 */
static void note_poll_errors(struct submitter *s, const struct qw_job *job,
                             const struct qw_dlt_result *r, int poll_errors)
{
    if (poll_errors < NOTE_POLL_ERRORS || poll_errors % NOTE_POLL_ERRORS != 0)
        return;
    char note[QW_OUTCOME_TEXT_MAX], epoch[24];
    qw_plan_textf(note, sizeof(note), "status poll failed %d times in a row: %s", poll_errors,
                  r->message ? r->message : "");
    snprintf(epoch, sizeof(epoch), "%lld", (long long)job->epoch);
    const char *params[] = {s->w->instance_id, job->batch_id, job->service_id, epoch, note,
                            s->w->incarnation};
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_ok(s->db) && qw_db_query(s->db, "batches_note", 6, params, NULL, &err) != QW_OK)
        qw_log_debug("batch.note_failed", "batch=%.16s error=%s", job->batch_id,
                     qw_log_quote((char[300]){0}, 300, err.msg));
}

/* Counts and logs what a plan says happened (the adapter side of outcome.h). */
static void count_and_log(struct submitter *s, const struct qw_job *job,
                          const struct qw_dlt_result *r, const struct qw_plan *p)
{
    struct qw_worker_stats *st = &s->w->stats;
    char quoted[300];
    switch (p->event) {
    case QW_EV_POST_ACCEPTED:
        atomic_fetch_add_explicit(&st->posts_accepted, 1, memory_order_relaxed);
        qw_log_debug("batch.accepted", "service=%s batch=%.16s latency_us=%lld", job->service_id,
                     job->batch_id, (long long)r->latency_us);
        return;
    case QW_EV_POST_BACKPRESSURE:
        atomic_fetch_add_explicit(&st->posts_backpressure, 1, memory_order_relaxed);
        if (p->pause_grew) {
            atomic_store(&st->paused, 1);
            qw_log_info("ledger.paused", "reason=429 pause_ms=%lld consecutive=%d",
                        (long long)p->pause_ms, s->pause.pause_count);
        }
        return;
    case QW_EV_POST_INVALID:
        atomic_fetch_add_explicit(&st->posts_invalid, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&st->final_invalid, 1, memory_order_relaxed);
        qw_log_warn("batch.invalid", "service=%s batch=%.16s message=%s", job->service_id,
                    job->batch_id, qw_log_quote(quoted, sizeof(quoted), r->message));
        return;
    case QW_EV_POST_AUTH:
        atomic_fetch_add_explicit(&st->posts_auth, 1, memory_order_relaxed);
        atomic_store(&st->paused, 1); /* submissions pause for refused credentials too */
        if (p->pause_grew)
            qw_log_error("ledger.auth_refused",
                         "http_status=%ld pause_ms=%lld hint=\"check dlt.token_file or "
                         "QUEUER_DLT_TOKEN; submissions stop until the ledger accepts it\"",
                         r->http_status, (long long)p->pause_ms);
        return;
    case QW_EV_POST_UNCERTAIN:
        atomic_fetch_add_explicit(&st->posts_retry, 1, memory_order_relaxed);
        qw_log_info("batch.post_uncertain",
                    "service=%s batch=%.16s node=%d why=\"%s\" action=read_status", job->service_id,
                    job->batch_id, r->node, p->post_failure);
        return;
    case QW_EV_POST_RETRY:
    case QW_EV_POST_EXHAUSTED:
        atomic_fetch_add_explicit(&st->posts_retry, 1, memory_order_relaxed);
        if (p->event == QW_EV_POST_EXHAUSTED)
            qw_log_error("batch.exhausted", "service=%s batch=%.16s attempts=%d", job->service_id,
                         job->batch_id, job->attempts + 1);
        return;
    case QW_EV_COMMITTED:
        atomic_fetch_add_explicit(&st->final_committed, 1, memory_order_relaxed);
        return;
    case QW_EV_VALID:
        atomic_fetch_add_explicit(&st->final_valid, 1, memory_order_relaxed);
        return;
    case QW_EV_INVALID:
        atomic_fetch_add_explicit(&st->final_invalid, 1, memory_order_relaxed);
        qw_log_warn("batch.invalid", "service=%s batch=%.16s message=%s", job->service_id,
                    job->batch_id, qw_log_quote(quoted, sizeof(quoted), r->statuses[0].message));
        return;
    case QW_EV_UNKNOWN_CONFIRMED:
        atomic_fetch_add_explicit(&st->unknown_confirmed, 1, memory_order_relaxed);
        qw_log_info("batch.unknown", "service=%s batch=%.16s confirmed_after_ms=%lld",
                    job->service_id, job->batch_id, (long long)p->unknown_ms);
        return;
    case QW_EV_POLL_FAILED:
        note_poll_errors(s, job, r, p->poll_errors);
        return;
    case QW_EV_NONE:
    case QW_EV_ABANDONED:
    case QW_EV_PENDING:
    case QW_EV_UNKNOWN_SEEN:
    case QW_EV_UNKNOWN_ELSEWHERE:
        return;
    }
}

/* Carries out a plan: the job's new state, then its next step. */
static void apply_plan(struct submitter *s, struct qw_job *job, const struct qw_plan *p)
{
    job->sub->accepted_unrecorded = p->accepted_unrecorded;
    job->sub->accepted_ms = p->accepted_ms;
    job->sub->unknown_since_ms = p->unknown_since_ms;
    job->sub->poll_errors = p->poll_errors;
    job->sub->post_uncertain = p->post_uncertain;
    memcpy(job->sub->post_failure, p->post_failure, sizeof(job->sub->post_failure));
    switch (p->action) {
    case QW_PLAN_RECORD:
        qw_submitter_add_outcome(s, job, &p->outcome);
        return;
    case QW_PLAN_POLL:
        qw_submitter_start_poll(s, job, p->wait_s);
        return;
    case QW_PLAN_POLL_AT:
        qw_submitter_push_timer(s, job, QW_JOB_POLL_WAIT, p->at_ms);
        return;
    case QW_PLAN_POST_AT:
        qw_submitter_push_timer(s, job, QW_JOB_WAITING, p->at_ms);
        return;
    case QW_PLAN_HAND_BACK:
        qw_submitter_hand_back(s, job, QW_JOB_END_ABANDONED);
        return;
    }
}

/*
 * Tells the window of the POST's node how the POST ended (window.h).
 * Returns true for a 429 the window backs off for: it was above its
 * minimum, so its shrinking is the response and no pause is needed.
 */
static bool window_answer(struct submitter *s, struct qw_job *job, const struct qw_dlt_result *r,
                          enum qw_node_result nr)
{
    int node = job->sub->win_node;
    if (node < 0 || r->outcome == QW_DLT_ABANDONED)
        return false;
    struct qw_window *w = &s->nodes.node[node].win;
    int cap = qw_submitter_window_cap(s);
    enum qw_window_answer a = r->outcome == QW_DLT_ACCEPTED       ? QW_WINDOW_ACCEPTED
                              : r->outcome == QW_DLT_BACKPRESSURE ? QW_WINDOW_REFUSED
                              : nr == QW_NODE_FAILED              ? QW_WINDOW_FAILED
                                                                  : QW_WINDOW_ACCEPTED;
    if (a == QW_WINDOW_ACCEPTED && r->outcome != QW_DLT_ACCEPTED)
        return false; /* 400, 401/403: says nothing about the node's load */
    bool above_min = w->cwnd > s->nodes.policy.window.min;
    if (qw_window_answer(w, &s->nodes.policy.window, a, job->sub->win_epoch,
                         a == QW_WINDOW_ACCEPTED ? r->latency_us : -1, cap, now_ms()))
        qw_log_debug("ledger.window_shrunk", "node=%d window=%d reason=%s", node,
                     qw_window_limit(w, cap),
                     a == QW_WINDOW_REFUSED  ? "429"
                     : a == QW_WINDOW_FAILED ? "no_answer"
                                             : "latency");
    return a == QW_WINDOW_REFUSED && above_min;
}

/*
 * A status read was answered. Unknown from a node other than the POST's
 * proves nothing (it has not learnt the commit yet, or it forgot it): the
 * next reads ask the other nodes before it, and still keep away from a node
 * that failed the batch (qw_nodes_poll_route()), so neither a node that
 * forgot the batch nor one that hangs is asked again while another may
 * know. Any other answer clears both.
 */
static void note_read_answer(struct qw_submission *sub, int node, enum qw_plan_event event)
{
    if (event == QW_EV_UNKNOWN_ELSEWHERE) {
        sub->unknown_elsewhere |= UINT32_C(1) << node;
        return;
    }
    sub->poll_avoid = -1;
    sub->unknown_elsewhere = 0;
}

/* Whether a status answer said the batch is final (Committed, Valid, Invalid). */
static bool reports_final(enum qw_plan_event event)
{
    return event == QW_EV_COMMITTED || event == QW_EV_VALID || event == QW_EV_INVALID;
}

static bool is_probe(const struct submitter *s, const void *user)
{
    const char *p = user;
    return p >= s->probe_tag && p < s->probe_tag + QW_NODES_MAX;
}

void qw_submitter_on_transfer_done(const struct qw_dlt_result *r, void *arg)
{
    struct submitter *s = arg;
    int64_t t = now_ms();
    enum qw_node_result nr = qw_nodes_classify(r->outcome, r->transport, r->http_status);
    if (is_probe(s, r->user)) {
        qw_submitter_note_node(s, r->node,
                               qw_nodes_finished(&s->nodes, r->node, QW_NODE_REQ_PROBE, nr,
                                                 nr == QW_NODE_ANSWERED ? r->latency_us : -1, t));
        return;
    }
    struct qw_job *job = r->user;
    bool post = r->kind == QW_DLT_KIND_POST;
    /* Latency samples: POSTs, and status GETs that did not long-poll. */
    int64_t sample =
        nr == QW_NODE_ANSWERED && (post || job->sub->poll_wait_s == 0) ? r->latency_us : -1;
    qw_submitter_note_node(s, r->node,
                           qw_nodes_finished(&s->nodes, r->node,
                                             post ? QW_NODE_REQ_POST : QW_NODE_REQ_POLL, nr, sample,
                                             t));
    if (nr == QW_NODE_FAILED)
        job->sub->poll_avoid = r->node; /* its next status read goes elsewhere */
    bool backs_off = false;
    if (post) {
        s->posting--;
        if (r->outcome != QW_DLT_ABANDONED)
            qw_histogram_observe_us(&s->w->stats.ops.ledger_latency, r->latency_us);
        backs_off = window_answer(s, job, r, nr);
        /* A retried POST prefers another node than the one that failed. */
        if (nr == QW_NODE_FAILED)
            job->avoid_node = r->node;
        else if (nr == QW_NODE_ANSWERED)
            job->avoid_node = -1;
    }
    /* the first status read since the POST's 202, with a wait, on its node */
    bool first_read = !post && nr == QW_NODE_ANSWERED && job->sub->accepted_unrecorded &&
                      r->node == job->sub->post_node && job->sub->poll_wait_s > 0;
    struct qw_plan_ctx ctx = plan_ctx(s, &s->rng);
    ctx.window_backs_off = backs_off;
    if (post)
        ctx.first_look_ms = qw_nodes_first_look_ms(&s->nodes, r->node);
    struct qw_plan plan;
    qw_outcome_plan(job, r, &ctx, &s->pause, &plan);
    if (first_read && (reports_final(plan.event) || plan.event == QW_EV_PENDING))
        qw_nodes_note_first_look(&s->nodes, r->node, job->sub->first_look_ms, r->latency_us,
                                 reports_final(plan.event), t);
    if (post && plan.event == QW_EV_POST_ACCEPTED)
        job->sub->first_look_ms = ctx.first_look_ms;
    if (nr == QW_NODE_ANSWERED && !post)
        note_read_answer(job->sub, r->node, plan.event);
    if (r->node == job->sub->post_node &&
        (plan.event == QW_EV_POST_ACCEPTED || plan.event == QW_EV_PENDING))
        job->sub->post_node_knew = true; /* its Unknown now means it forgot the batch */
    /* Not at the ledger; but a POST without a usable answer may be: it keeps
     * its units until the status read that follows it says how it ended. */
    if (post && r->outcome != QW_DLT_ACCEPTED && plan.event != QW_EV_POST_UNCERTAIN)
        qw_submitter_capacity_give_back(s, job);
    if (reports_final(plan.event) || plan.event == QW_EV_UNKNOWN_CONFIRMED)
        qw_submitter_units_give_back(s, job); /* no longer pending at the ledger; its place in
                                                 the window frees once the outcome is written */
    if (plan.event == QW_EV_POST_BACKPRESSURE)
        qw_capacity_backpressure(&s->gate, ctx.now_ms);
    note_failure(s, job, r);
    count_and_log(s, job, r, &plan);
    apply_plan(s, job, &plan);
}

/* Gives a not-yet-posted job back to the database (submitted = false). */
void qw_submitter_requeue(struct submitter *s, struct qw_job *job, const char *why)
{
    struct qw_plan plan;
    qw_plan_requeue(&plan, job, why);
    apply_plan(s, job, &plan);
}
