/*
 * Submitter thread: POST, status monitor and grouped outcome writes.
 *
 * DESIGN. The thread owns a ledger client (libcurl multi), a database
 * connection and every job popped from w->jobs until it hands the job
 * back on w->done. Its loop: take new jobs; start POSTs (unless paused by
 * a 429 or by refused credentials, or the job's lease deadline passed) and
 * status polls that are due; flush recorded outcomes when the group is
 * full or old enough; then wait in qw_dlt_run() for transfers, new jobs
 * (the jobs queue's fd) or the next timer. A POST answered 202 is recorded
 * Pending and then long-polled (one GET per batch, wait=N) until it is
 * final; Unknown after Pending is re-checked after dlt.unknown_confirm_ms
 * before it is recorded (the queuer then resubmits it, with the reason in
 * the history). Every database write is fenced (sql/outcomes_record.sql):
 * a write that matches nothing means the claim was lost, and the job is
 * dropped, never retried.
 */
#include "worker/submitter.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "common/histogram.h"
#include "common/log.h"
#include "db/db.h"
#include "db/outage.h"
#include "db/pgarray.h"
#include "dlt/dlt_client.h"
#include "worker/job.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUTCOME_GROUP_FULL 256 /* flush at once when this many outcomes wait */
#define OUTCOME_GROUP_AGE_MS 2 /* flush a group at most this old */
#define NO_RETRY INT64_MIN     /* retry_at NULL */
#define RETRY_NEVER (-1)       /* retry_at infinity: parked for an operator */
#define MAX_CHAINED 32         /* fast-path batches per job before the queuer looks again */
#define FIRST_POLL_WAIT_S 1    /* long-poll wait, seconds, before Pending is written */

enum after_record {
    AFTER_POLL = 0,      /* recorded Pending: follow its status */
    AFTER_END_FINAL,     /* the batch's turn is over */
    AFTER_END_RETRY,     /* Delayed / Unknown: the queuer resubmits when due */
    AFTER_END_ABANDONED, /* handed back unfinished (before POST, or stopping) */
};

struct outcome {
    struct qw_job *job;      /* the job this outcome is about */
    const char *expect;      /* "posting", "pending" or "inflight" */
    const char *status;      /* new status, "" = none */
    bool submitted;          /* submitted flag after the write */
    int attempts_add;        /* added to attempts */
    int64_t retry_ms;        /* retry_at = now() + ms; NO_RETRY or RETRY_NEVER */
    char last_error[256];    /* "" = keep the stored one */
    char detail[256];        /* history detail */
    bool posted;             /* sets last_submitted_at */
    bool go_on;              /* a final outcome may continue with the service's next batch */
    enum after_record after; /* what happens once it is written */
};

struct submitter {
    struct qw_worker *w;         /* shared state */
    const struct qw_config *cfg; /* read-only */
    struct qw_db *db;            /* owned connection */
    struct qw_dlt_client *dlt;   /* owned ledger client */
    struct qw_rng rng;           /* this thread's PRNG */
    struct qw_outage outage;     /* this connection's outages: log lines, reconnect pacing */
    struct qw_job *waiting;      /* jobs waiting to POST or to poll again */
    struct qw_job *overflow;     /* finished jobs the done queue refused */
    struct outcome *out;         /* outcomes waiting to be written */
    size_t n_out;                /* entries in out */
    size_t cap_out;              /* room in out: one per job we can own */
    int64_t first_out_ms;        /* when the oldest waiting outcome was added */
    int64_t flush_retry_at_ms;   /* after a failed flush: not before this */
    int flush_failures;          /* consecutive failed flushes */
    int64_t pause_until_ms;      /* no POST before this (429 back pressure) */
    int pause_count;             /* consecutive 429s */
    int64_t auth_until_ms;       /* no POST before this (credentials refused) */
    int auth_count;              /* consecutive 401/403 */
    bool stopping;               /* jobs queue closed: shutting down */
    int64_t grace_deadline_ms;   /* stopping: abandon what is left after this */
    int owned;                   /* jobs owned and not yet handed back */
    int posting;                 /* POSTs in flight */
    struct qw_pgarray arr[12];   /* reusable parameter builders */
};

static void flush_outcomes(struct submitter *s);

static int64_t now_ms(void)
{
    return qw_clock_mono_ms();
}

static void push_waiting(struct submitter *s, struct qw_job *job, enum qw_job_state state,
                         int64_t at_ms)
{
    job->state = state;
    job->next_at_ms = at_ms;
    job->next = s->waiting;
    s->waiting = job;
}

/* Hands a finished job back to the queuer. The done queue is sized so it
 * cannot fill; if it ever refuses, the job waits on the overflow list. */
static void hand_back(struct submitter *s, struct qw_job *job, enum qw_job_end end)
{
    job->end = end;
    job->next = NULL;
    if (end == QW_JOB_END_LOST)
        atomic_fetch_add_explicit(&s->w->stats.lost, 1, memory_order_relaxed);
    if (qw_handoff_push(s->w->done, job) != QW_OK) {
        job->next = s->overflow;
        s->overflow = job;
        return;
    }
    s->owned--;
    qw_worker_wake(s->w);
}

static void retry_overflow(struct submitter *s)
{
    struct qw_job *list = s->overflow;
    s->overflow = NULL;
    while (list) {
        struct qw_job *next = list->next;
        hand_back(s, list, list->end);
        list = next;
    }
}

static struct outcome *add_outcome(struct submitter *s, struct qw_job *job, const char *expect,
                                   const char *status, enum after_record after)
{
    if (s->n_out == s->cap_out) {
        /* Cannot happen (a job has at most one outcome waiting and the queuer
         * bounds the jobs we own); write what waits before adding more. */
        qw_log_error("outcomes.full", "n=%zu", s->n_out);
        while (s->n_out == s->cap_out) {
            s->flush_retry_at_ms = 0;
            flush_outcomes(s);
            if (s->n_out == s->cap_out)
                qw_clock_sleep_ms(50);
        }
    }
    if (s->n_out == 0)
        s->first_out_ms = now_ms();
    struct outcome *o = &s->out[s->n_out++];
    memset(o, 0, sizeof(*o));
    o->job = job;
    o->expect = expect;
    o->status = status;
    o->retry_ms = NO_RETRY;
    o->after = after;
    job->state = QW_JOB_RECORDING;
    return o;
}

/* The state the database shows for a job we follow (compare-and-set). */
static const char *expect_for(const struct qw_job *job)
{
    if (job->kind == QW_JOB_ADOPT)
        return "inflight";
    return job->accepted_unrecorded ? "posting" : "pending";
}

/*
 * A status outcome for a batch whose 202 was not written yet also records
 * the POST: one attempt, last_submitted_at, and the acceptance in the
 * history detail.
 */
static struct outcome *add_status_outcome(struct submitter *s, struct qw_job *job,
                                          const char *status, enum after_record after,
                                          const char *what)
{
    struct outcome *o = add_outcome(s, job, expect_for(job), status, after);
    if (job->accepted_unrecorded) {
        o->attempts_add = 1;
        o->posted = true;
        snprintf(o->detail, sizeof(o->detail),
                 "accepted by the ledger (HTTP 202), then %s after %lld ms", what,
                 (long long)(now_ms() - job->accepted_ms));
    } else {
        snprintf(o->detail, sizeof(o->detail), "%s", what);
    }
    return o;
}

/*
 * Whether a job whose batch is ending may go on with its service's next
 * batch (fast path). Not while stopping, and not forever: after
 * MAX_CHAINED batches it goes back to the queuer, which then applies what
 * only it knows (a claim to drain for rebalancing, a fresh lease deadline).
 */
static bool may_go_on(const struct submitter *s, const struct qw_job *job)
{
    return !s->stopping && job->chained < MAX_CHAINED;
}

/* Records Pending for an accepted batch before we let go of it or wait long. */
static void record_pending(struct submitter *s, struct qw_job *job, enum after_record after)
{
    struct outcome *o = add_status_outcome(s, job, "Pending", after, "ledger reports Pending");
    o->submitted = true;
}

static void start_poll(struct submitter *s, struct qw_job *job, int wait_s)
{
    const char *ids[1] = {job->batch_id};
    int rc = qw_dlt_get_statuses(s->dlt, job->service_id, ids, 1, wait_s, job);
    if (rc == QW_OK) {
        job->state = QW_JOB_POLLING;
        return;
    }
    /* No transfer slot (or a transient failure): try again shortly. */
    push_waiting(s, job, QW_JOB_POLL_WAIT, now_ms() + 5);
}

static void start_post(struct submitter *s, struct qw_job *job)
{
    int rc = qw_dlt_post(s->dlt, job->service_id, job->payload, job->payload_len, job);
    if (rc == QW_OK) {
        job->state = QW_JOB_POSTING;
        job->posted_us = qw_clock_mono_us();
        s->posting++;
        return;
    }
    push_waiting(s, job, QW_JOB_WAITING, now_ms() + 5);
}

/* Gives a not-yet-posted job back to the database (submitted = false). */
static void requeue(struct submitter *s, struct qw_job *job, const char *why)
{
    struct outcome *o = add_outcome(s, job, "posting", "", AFTER_END_ABANDONED);
    snprintf(o->detail, sizeof(o->detail), "handed back before POST: %s", why);
}

static void on_post_done(struct submitter *s, struct qw_job *job, const struct qw_dlt_result *r)
{
    const struct qw_config *cfg = s->cfg;
    struct qw_worker_stats *st = &s->w->stats;
    s->posting--;
    if (r->outcome != QW_DLT_ABANDONED)
        qw_histogram_observe_us(&s->w->stats.ops.ledger_latency, r->latency_us);
    char quoted[300];
    switch (r->outcome) {
    case QW_DLT_ACCEPTED: {
        atomic_fetch_add_explicit(&st->posts_accepted, 1, memory_order_relaxed);
        s->pause_count = 0;
        s->auth_count = 0;
        /* Follow it at once; Pending is written only if the first answer says so. */
        job->accepted_unrecorded = true;
        job->accepted_ms = now_ms();
        qw_log_debug("batch.accepted", "service=%s batch=%.16s latency_us=%lld", job->service_id,
                     job->batch_id, (long long)r->latency_us);
        if (s->stopping)
            record_pending(s, job, AFTER_END_ABANDONED);
        else
            start_poll(s, job, FIRST_POLL_WAIT_S);
        return;
    }
    case QW_DLT_BACKPRESSURE: {
        atomic_fetch_add_explicit(&st->posts_backpressure, 1, memory_order_relaxed);
        /* Answers to POSTs sent together arrive together: they grow the pause
         * once, not once each. */
        if (now_ms() >= s->pause_until_ms)
            s->pause_count++;
        int64_t pause =
            qw_backoff_pause_429(s->pause_count - 1, cfg->dlt_pause_base_ms, cfg->dlt_pause_max_ms,
                                 r->retry_after_ms > 0 ? r->retry_after_ms : 0, &s->rng);
        int64_t until = now_ms() + pause;
        if (until > s->pause_until_ms) {
            s->pause_until_ms = until;
            atomic_store(&st->paused, 1);
            qw_log_info("ledger.paused", "reason=429 pause_ms=%lld consecutive=%d",
                        (long long)pause, s->pause_count);
        }
        struct outcome *o = add_outcome(s, job, "posting", "Delayed", AFTER_END_RETRY);
        o->retry_ms = pause;
        o->posted = true;
        snprintf(o->last_error, sizeof(o->last_error), "ledger back pressure (HTTP 429)");
        snprintf(o->detail, sizeof(o->detail), "HTTP 429: retry in %lld ms", (long long)pause);
        return;
    }
    case QW_DLT_INVALID: {
        atomic_fetch_add_explicit(&st->posts_invalid, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&st->final_invalid, 1, memory_order_relaxed);
        struct outcome *o = add_outcome(s, job, "posting", "Invalid", AFTER_END_FINAL);
        o->attempts_add = 1;
        o->posted = true;
        o->go_on = may_go_on(s, job);
        snprintf(o->last_error, sizeof(o->last_error), "rejected by the ledger (HTTP 400): %s",
                 r->message ? r->message : "");
        snprintf(o->detail, sizeof(o->detail), "%s", o->last_error);
        qw_log_warn("batch.invalid", "service=%s batch=%.16s message=%s", job->service_id,
                    job->batch_id, qw_log_quote(quoted, sizeof(quoted), r->message));
        return;
    }
    case QW_DLT_AUTH: {
        atomic_fetch_add_explicit(&st->posts_auth, 1, memory_order_relaxed);
        /* Refusals of POSTs sent together count once and are logged once. */
        bool first = now_ms() >= s->auth_until_ms;
        if (first)
            s->auth_until_ms = now_ms() + qw_backoff_ceiling_ms(s->auth_count++, 1000, 60000);
        int64_t pause = s->auth_until_ms - now_ms();
        if (first)
            qw_log_error("ledger.auth_refused",
                         "http_status=%ld pause_ms=%lld hint=\"check dlt.token_file or "
                         "QUEUER_DLT_TOKEN; submissions stop until the ledger accepts it\"",
                         r->http_status, (long long)pause);
        /* Not the batch's fault: no attempt burnt, it waits for the next try. */
        push_waiting(s, job, QW_JOB_WAITING, s->auth_until_ms);
        return;
    }
    case QW_DLT_RETRY:
    case QW_DLT_OK: {
        atomic_fetch_add_explicit(&st->posts_retry, 1, memory_order_relaxed);
        int attempts = job->attempts + 1;
        bool exhausted = cfg->dlt_max_attempts > 0 && attempts >= cfg->dlt_max_attempts;
        struct outcome *o = add_outcome(s, job, "posting", "Delayed", AFTER_END_RETRY);
        o->attempts_add = 1;
        o->posted = true;
        snprintf(o->last_error, sizeof(o->last_error), "POST failed (%s, HTTP %ld): %s",
                 qw_dlt_transport_name(r->transport), r->http_status, r->message ? r->message : "");
        if (exhausted) {
            o->retry_ms = RETRY_NEVER;
            snprintf(o->detail, sizeof(o->detail),
                     "gave up after %d attempts (dlt.max_attempts); parked until an operator "
                     "retries or cancels it",
                     attempts);
            qw_log_error("batch.exhausted", "service=%s batch=%.16s attempts=%d", job->service_id,
                         job->batch_id, attempts);
        } else {
            o->retry_ms = qw_backoff_exponential_jitter(job->attempts, cfg->dlt_retry_base_ms,
                                                        cfg->dlt_retry_max_ms, &s->rng);
            snprintf(o->detail, sizeof(o->detail), "%.200s; retry in %lld ms", o->last_error,
                     (long long)o->retry_ms);
        }
        qw_log_debug("batch.post_failed", "service=%s batch=%.16s http_status=%ld transport=%s",
                     job->service_id, job->batch_id, r->http_status,
                     qw_dlt_transport_name(r->transport));
        return;
    }
    case QW_DLT_ABANDONED:
        hand_back(s, job, QW_JOB_END_ABANDONED);
        return;
    }
}

static void on_status_done(struct submitter *s, struct qw_job *job, const struct qw_dlt_result *r)
{
    const struct qw_config *cfg = s->cfg;
    struct qw_worker_stats *st = &s->w->stats;
    if (r->outcome == QW_DLT_ABANDONED || s->stopping) {
        /* The batch stays Pending (or in flight) for the next owner to follow;
         * an acceptance not yet written is written first. */
        if (job->accepted_unrecorded)
            record_pending(s, job, AFTER_END_ABANDONED);
        else
            hand_back(s, job, QW_JOB_END_ABANDONED);
        return;
    }
    if (r->outcome != QW_DLT_OK || r->n_statuses != 1 || !r->statuses[0].reported) {
        int64_t delay = qw_backoff_exponential_jitter(job->poll_errors++, 50, 5000, &s->rng);
        push_waiting(s, job, QW_JOB_POLL_WAIT, now_ms() + delay);
        return;
    }
    job->poll_errors = 0;
    const struct qw_dlt_status *ds = &r->statuses[0];
    char quoted[300];
    switch (ds->type) {
    case QW_DLT_STATUS_PENDING:
        job->unknown_since_ms = 0;
        if (job->accepted_unrecorded)
            record_pending(s, job, AFTER_POLL);
        else
            start_poll(s, job, cfg->dlt_status_wait_s);
        return;
    case QW_DLT_STATUS_COMMITTED:
    case QW_DLT_STATUS_VALID: {
        bool committed = ds->type == QW_DLT_STATUS_COMMITTED;
        atomic_fetch_add_explicit(committed ? &st->final_committed : &st->final_valid, 1,
                                  memory_order_relaxed);
        struct outcome *o =
            add_status_outcome(s, job, committed ? "Committed" : "Valid", AFTER_END_FINAL,
                               committed ? "ledger reports Committed" : "ledger reports Valid");
        o->submitted = true;
        o->go_on = may_go_on(s, job);
        return;
    }
    case QW_DLT_STATUS_INVALID: {
        atomic_fetch_add_explicit(&st->final_invalid, 1, memory_order_relaxed);
        char what[256];
        snprintf(what, sizeof(what), "ledger reports Invalid: %.200s", ds->message);
        struct outcome *o = add_status_outcome(s, job, "Invalid", AFTER_END_FINAL, what);
        o->submitted = true;
        o->go_on = may_go_on(s, job);
        snprintf(o->last_error, sizeof(o->last_error), "%s", what);
        qw_log_warn("batch.invalid", "service=%s batch=%.16s message=%s", job->service_id,
                    job->batch_id, qw_log_quote(quoted, sizeof(quoted), ds->message));
        return;
    }
    case QW_DLT_STATUS_UNKNOWN:
        break;
    }
    /* Unknown: scabbard forgets (status memory of 100, restarts), so confirm first. */
    int64_t t = now_ms();
    if (job->unknown_since_ms == 0) {
        job->unknown_since_ms = t;
        push_waiting(s, job, QW_JOB_POLL_WAIT, t + cfg->dlt_unknown_confirm_ms);
        return;
    }
    if (t - job->unknown_since_ms < cfg->dlt_unknown_confirm_ms) {
        push_waiting(s, job, QW_JOB_POLL_WAIT, job->unknown_since_ms + cfg->dlt_unknown_confirm_ms);
        return;
    }
    atomic_fetch_add_explicit(&st->unknown_confirmed, 1, memory_order_relaxed);
    char what[160];
    snprintf(what, sizeof(what),
             "ledger reported Unknown for %lld ms (confirmed); resubmission follows",
             (long long)(t - job->unknown_since_ms));
    struct outcome *o = add_status_outcome(s, job, "Unknown", AFTER_END_RETRY, what);
    o->submitted = false;
    o->retry_ms = 0;
    snprintf(o->last_error, sizeof(o->last_error), "ledger does not know the batch");
    qw_log_info("batch.unknown", "service=%s batch=%.16s confirmed_after_ms=%lld", job->service_id,
                job->batch_id, (long long)(t - job->unknown_since_ms));
}

static void on_transfer_done(const struct qw_dlt_result *r, void *arg)
{
    struct submitter *s = arg;
    struct qw_job *job = r->user;
    if (r->kind == QW_DLT_KIND_POST)
        on_post_done(s, job, r);
    else
        on_status_done(s, job, r);
}

/* After a successful write: move each job on, or drop it if its write matched nothing. */
static void apply_outcome(struct submitter *s, struct outcome *o, bool written)
{
    struct qw_job *job = o->job;
    if (!written) {
        qw_log_info("claim.lost", "service=%s batch=%.16s epoch=%lld action=drop", job->service_id,
                    job->batch_id, (long long)job->epoch);
        hand_back(s, job, QW_JOB_END_LOST);
        return;
    }
    switch (o->after) {
    case AFTER_POLL:
        if (s->stopping) {
            hand_back(s, job, QW_JOB_END_ABANDONED);
            return;
        }
        job->kind = QW_JOB_SUBMIT;
        job->accepted_unrecorded = false;
        start_poll(s, job, s->cfg->dlt_status_wait_s);
        return;
    case AFTER_END_FINAL:
        hand_back(s, job, QW_JOB_END_FINAL);
        return;
    case AFTER_END_RETRY:
        hand_back(s, job, QW_JOB_END_RETRY_LATER);
        return;
    case AFTER_END_ABANDONED:
        hand_back(s, job, QW_JOB_END_ABANDONED);
        return;
    }
}

/*
 * Fast path: the statement that ended the job's batch also marked the
 * service's next batch for submission (row `row` of the result); the job
 * goes on with it at once, without a trip through the queuer.
 */
static void continue_job(struct submitter *s, struct qw_job *job, const struct qw_db_res *res,
                         int row)
{
    snprintf(job->batch_id, sizeof(job->batch_id), "%s", qw_db_res_get(res, row, 1));
    job->epoch = qw_db_res_int(res, row, 3);
    job->attempts = (int)qw_db_res_int(res, row, 4);
    job->kind = QW_JOB_SUBMIT;
    job->accepted_unrecorded = false;
    job->unknown_since_ms = 0;
    job->poll_errors = 0;
    job->chained++;
    /* The statement checked the claim: it is ours for lease_left_ms more. */
    job->deadline_ms = now_ms() + qw_db_res_int(res, row, 6) - s->cfg->worker_lease_ms / 10;
    if (qw_job_set_payload_hex(job, qw_db_res_get(res, row, 5)) != QW_OK) {
        /* Cannot decode what the database gave: leave the batch marked; the
         * queuer finds it in flight and follows it (adoption). */
        qw_log_error("batch.payload_unreadable", "service=%s batch=%.16s", job->service_id,
                     job->batch_id);
        hand_back(s, job, QW_JOB_END_ABANDONED);
        return;
    }
    push_waiting(s, job, QW_JOB_WAITING, 0);
}

/* Writes the waiting outcomes in one fenced statement. */
static void flush_outcomes(struct submitter *s)
{
    if (s->n_out == 0)
        return;
    for (int i = 0; i < 12; i++)
        qw_pgarray_reset(&s->arr[i]);
    for (size_t i = 0; i < s->n_out; i++) {
        const struct outcome *o = &s->out[i];
        qw_pgarray_text(&s->arr[0], o->job->batch_id);
        qw_pgarray_text(&s->arr[1], o->job->service_id);
        qw_pgarray_int(&s->arr[2], o->job->epoch);
        qw_pgarray_text(&s->arr[3], o->expect);
        qw_pgarray_text(&s->arr[4], o->status);
        qw_pgarray_bool(&s->arr[5], o->submitted);
        qw_pgarray_int(&s->arr[6], o->attempts_add);
        if (o->retry_ms == NO_RETRY)
            qw_pgarray_text(&s->arr[7], NULL);
        else
            qw_pgarray_int(&s->arr[7], o->retry_ms);
        qw_pgarray_text(&s->arr[8], o->last_error);
        qw_pgarray_text(&s->arr[9], o->detail);
        qw_pgarray_bool(&s->arr[10], o->posted);
        qw_pgarray_bool(&s->arr[11], o->go_on);
    }
    const char *params[13] = {s->w->instance_id};
    for (int i = 0; i < 12; i++) {
        params[i + 1] = qw_pgarray_finish(&s->arr[i]);
        if (!params[i + 1]) {
            qw_log_error("outcomes.nomem", "n=%zu", s->n_out);
            s->flush_retry_at_ms = now_ms() + 100;
            return;
        }
    }
    struct qw_error err;
    qw_error_clear(&err);
    struct qw_db_res *res = NULL;
    int64_t began_us = qw_clock_mono_us();
    int rc = qw_db_ok(s->db) ? QW_OK : qw_db_reconnect(s->db, &err);
    if (rc == QW_OK)
        rc = qw_db_query(s->db, "outcomes_record", 13, params, &res, &err);
    qw_log_debug("outcomes.flushed", "n=%zu rc=%d us=%lld", s->n_out, rc,
                 (long long)(qw_clock_mono_us() - began_us));
    if (rc != QW_OK && rc != QW_ERR_DB_CONN && rc != QW_ERR_TIMEOUT && rc != QW_ERR_SERIALIZATION) {
        /* Not a transient failure: say so, and keep retrying (nothing is dropped). */
        qw_log_error("outcomes.failed", "n=%zu sqlstate=%s error=%s", s->n_out, err.sqlstate,
                     qw_log_quote((char[300]){0}, 300, err.msg));
    }
    if (rc == QW_ERR_SERIALIZATION) {
        /* A claim row is being renewed right now (NOWAIT): try again at once. */
        s->flush_retry_at_ms =
            now_ms() + qw_backoff_full_jitter(s->flush_failures++, 1, 20, &s->rng);
        return;
    }
    if (rc != QW_OK && !qw_db_ok(s->db)) {
        /* Part of an outage: logged when it begins and ends, retries paced. */
        s->flush_retry_at_ms =
            now_ms() + qw_outage_note_failure(&s->outage, &err, now_ms(), &s->rng);
        return;
    }
    if (rc != QW_OK) {
        int64_t delay = qw_backoff_full_jitter(s->flush_failures++, 50, 2000, &s->rng);
        if (s->flush_failures == 1 || s->flush_failures % 20 == 0)
            qw_log_warn("outcomes.retry", "n=%zu error=%s retry_ms=%lld", s->n_out,
                        qw_log_quote((char[300]){0}, 300, err.msg), (long long)delay);
        s->flush_retry_at_ms = now_ms() + delay;
        return;
    }
    qw_outage_note_success(&s->outage, now_ms());
    s->flush_failures = 0;
    s->flush_retry_at_ms = 0;
    int rows = qw_db_res_rows(res);
    atomic_fetch_add_explicit(&s->w->stats.flushes, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->w->stats.outcomes, (long long)rows, memory_order_relaxed);
    size_t n = s->n_out;
    s->n_out = 0;
    for (size_t i = 0; i < n; i++) {
        struct outcome *o = &s->out[i];
        bool written = false;
        int next = -1;
        for (int j = 0; j < rows && !written; j++)
            written = qw_db_res_get(res, j, 0)[0] == 'w' &&
                      strcmp(qw_db_res_get(res, j, 1), o->job->batch_id) == 0;
        for (int j = 0; written && o->go_on && j < rows && next < 0; j++) {
            if (qw_db_res_get(res, j, 0)[0] == 'n' &&
                strcmp(qw_db_res_get(res, j, 2), o->job->service_id) == 0)
                next = j;
        }
        if (next >= 0)
            continue_job(s, o->job, res, next);
        else
            apply_outcome(s, o, written);
    }
    qw_db_res_free(res);
}

static bool flush_due(const struct submitter *s, int64_t t)
{
    if (s->n_out == 0 || t < s->flush_retry_at_ms)
        return false;
    return s->n_out >= OUTCOME_GROUP_FULL || t - s->first_out_ms >= OUTCOME_GROUP_AGE_MS ||
           s->stopping;
}

/* Starts what is due on the waiting list; returns the next timer (ms) or INT64_MAX. */
static int64_t run_waiting(struct submitter *s, int64_t t)
{
    int64_t next = INT64_MAX;
    bool paused = t < s->pause_until_ms || t < s->auth_until_ms;
    if (!paused && atomic_load(&s->w->stats.paused))
        atomic_store(&s->w->stats.paused, 0);
    struct qw_job **link = &s->waiting;
    while (*link) {
        struct qw_job *job = *link;
        bool is_post = job->state == QW_JOB_WAITING;
        if (is_post && (s->stopping || t >= job->deadline_ms)) {
            *link = job->next;
            requeue(s, job, s->stopping ? "worker stopping" : "claim lease may have lapsed");
            continue;
        }
        int64_t due = job->next_at_ms;
        if (is_post && paused) {
            int64_t until =
                s->pause_until_ms > s->auth_until_ms ? s->pause_until_ms : s->auth_until_ms;
            due = due > until ? due : until;
        }
        if (due > t) {
            if (due < next)
                next = due;
            link = &job->next;
            continue;
        }
        *link = job->next;
        if (is_post)
            start_post(s, job);
        else if (s->stopping)
            hand_back(s, job, QW_JOB_END_ABANDONED);
        else
            start_poll(s, job, job->unknown_since_ms ? 0 : s->cfg->dlt_status_wait_s);
    }
    return next;
}

static void take_jobs(struct submitter *s)
{
    void *item;
    int rc;
    while ((rc = qw_handoff_pop(s->w->jobs, 0, &item)) == QW_OK) {
        struct qw_job *job = item;
        s->owned++;
        job->unknown_since_ms = 0;
        job->poll_errors = 0;
        job->accepted_unrecorded = false;
        if (job->kind == QW_JOB_SUBMIT)
            push_waiting(s, job, QW_JOB_WAITING, 0);
        else
            push_waiting(s, job, QW_JOB_POLL_WAIT, 0);
    }
    if (rc == QW_ERR_SHUTDOWN && !s->stopping) {
        s->stopping = true;
        s->grace_deadline_ms = now_ms() + s->cfg->worker_shutdown_grace_ms;
        qw_log_info("submitter.stopping", "owned=%d posting=%d", s->owned, s->posting);
    }
}

static void submitter_loop(struct submitter *s)
{
    for (;;) {
        take_jobs(s);
        int64_t t = now_ms();
        if (s->stopping && (s->posting == 0 || t >= s->grace_deadline_ms)) {
            /* POSTs are done (or out of time): abandon polls, record, hand back. */
            qw_dlt_cancel_all(s->dlt, on_transfer_done, s);
            run_waiting(s, t);
            struct qw_job *job;
            while ((job = s->waiting) != NULL) {
                s->waiting = job->next;
                hand_back(s, job, QW_JOB_END_ABANDONED);
            }
            for (int tries = 0; s->n_out > 0 && tries < 20; tries++) {
                flush_outcomes(s);
                if (s->n_out > 0)
                    qw_clock_sleep_ms(50);
            }
            for (size_t i = 0; i < s->n_out; i++)
                hand_back(s, s->out[i].job, QW_JOB_END_ABANDONED);
            s->n_out = 0;
            retry_overflow(s);
            return;
        }
        /* Write first: a written outcome may hand the job its service's next
         * batch (fast path), which run_waiting() then posts at once. */
        if (flush_due(s, t))
            flush_outcomes(s);
        if (s->overflow)
            retry_overflow(s);
        t = now_ms();
        int64_t next = run_waiting(s, t);
        int64_t timeout = next == INT64_MAX ? 1000 : next - t;
        if (s->n_out > 0) {
            int64_t f = s->flush_retry_at_ms > t ? s->flush_retry_at_ms - t
                                                 : s->first_out_ms + OUTCOME_GROUP_AGE_MS - t;
            if (f < timeout)
                timeout = f;
        }
        if (s->stopping && s->grace_deadline_ms - t < timeout)
            timeout = s->grace_deadline_ms - t;
        if (timeout < 0)
            timeout = 0;
        if (timeout > 1000)
            timeout = 1000;
        if (qw_dlt_run(s->dlt, (int)timeout, qw_handoff_fd(s->w->jobs), on_transfer_done, s) < 0)
            qw_clock_sleep_ms(10);
    }
}

static void *submitter_main(void *arg)
{
    struct submitter *s = arg;
    qw_log_set_thread("submitter");
    submitter_loop(s);
    qw_log_info("submitter.stopped", "outcomes_pending=%zu", s->n_out);
    qw_dlt_client_free(s->dlt);
    qw_db_close(s->db);
    for (int i = 0; i < 12; i++)
        qw_pgarray_free(&s->arr[i]);
    free(s->out);
    free(s);
    return NULL;
}

int qw_submitter_start(struct qw_worker *w, pthread_t *thread, struct qw_error *err)
{
    const struct qw_config *cfg = w->cfg;
    struct submitter *s = calloc(1, sizeof(*s));
    if (!s)
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    s->w = w;
    s->cfg = cfg;
    s->cap_out = (size_t)cfg->dlt_max_in_flight + (size_t)cfg->worker_queue_capacity + 16;
    s->out = calloc(s->cap_out, sizeof(*s->out));
    for (int i = 0; i < 12; i++)
        qw_pgarray_init(&s->arr[i]);
    qw_rng_seed(&s->rng, (uint64_t)qw_clock_mono_us() ^ 0x5bd1e995u);
    qw_outage_init(&s->outage, "submitter");
    struct qw_db_opts dbo;
    qw_worker_db_opts(cfg, "queuer-submitter", &dbo);
    int rc = s->out ? qw_db_connect(&s->db, &dbo, err) : QW_ERR_NOMEM;
    if (rc == QW_OK) {
        struct qw_dlt_opts o = {
            .base_url = cfg->dlt_url,
            .token = cfg->dlt_token,
            .ca_file = cfg->dlt_ca_file,
            .connect_timeout_ms = cfg->dlt_connect_timeout_ms,
            .request_timeout_ms = cfg->dlt_request_timeout_ms,
            .max_response_bytes = (size_t)cfg->dlt_max_response_bytes,
            .max_in_flight = cfg->dlt_max_in_flight,
        };
        rc = qw_dlt_client_new(&s->dlt, &o, err);
    }
    if (rc == QW_OK && pthread_create(thread, NULL, submitter_main, s) != 0)
        rc = qw_error_set(err, QW_ERR_IO, "cannot start the submitter thread");
    if (rc != QW_OK) {
        qw_dlt_client_free(s->dlt);
        qw_db_close(s->db);
        for (int i = 0; i < 12; i++)
            qw_pgarray_free(&s->arr[i]);
        free(s->out);
        free(s);
    }
    return rc;
}
