/*
 * The grouped outcome write (outcome_writer.h): outcomes wait in a group that
 * is written in one fenced statement when full or a few ms old; then each job
 * goes on (polls, ends, or continues with its service's next batch: the fast
 * path) or, when its write matched nothing, is dropped as lost.
 */
#include "common/log.h"
#include "submitter/submitter_int.h"

#include <stdio.h>

/* Queues `o` for the grouped write; the job waits until it is written. */
void qw_submitter_add_outcome(struct submitter *s, struct qw_job *job, const struct qw_outcome *o)
{
    if (s->n_out == s->cap_out) {
        /* Cannot happen (a job has at most one outcome waiting and the queuer
         * bounds the jobs we own); write what waits before adding more. */
        qw_log_error("outcomes.full", "n=%zu", s->n_out);
        while (s->n_out == s->cap_out) {
            s->flush_retry_at_ms = 0;
            qw_submitter_flush_outcomes(s);
            if (s->n_out == s->cap_out)
                qw_clock_sleep_ms(50);
        }
    }
    if (s->n_out == 0)
        s->first_out_ms = now_ms();
    s->out[s->n_out++] = (struct qw_outcome_item){.job = job, .outcome = *o, .next_row = -1};
    job->sub->state = QW_JOB_RECORDING;
}

/* After a successful write: move each job on, or drop it if its write matched nothing. */
static void apply_outcome(struct submitter *s, const struct qw_outcome_item *item)
{
    struct qw_job *job = item->job;
    if (item->isolated || item->refused)
        qw_log_error("outcome.refused", "service=%s batch=%.16s sqlstate=%s action=%s",
                     job->service_id, job->batch_id, item->sqlstate,
                     item->refused ? "handed_back" : "recorded_plain");
    if (item->rechecked)
        qw_log_info("outcome.recorded_before_reconnect", "service=%s batch=%.16s epoch=%lld",
                    job->service_id, job->batch_id, (long long)job->epoch);
    if (item->refused) {
        /* Nothing could be written: the batch stays as the database shows it
         * and is followed again from there (adopted, or resubmitted). */
        qw_submitter_hand_back(s, job, QW_JOB_END_ABANDONED);
        return;
    }
    if (!item->written) {
        qw_log_info("claim.lost", "service=%s batch=%.16s epoch=%lld action=drop", job->service_id,
                    job->batch_id, (long long)job->epoch);
        qw_submitter_hand_back(s, job, QW_JOB_END_LOST);
        return;
    }
    switch (item->outcome.after) {
    case QW_AFTER_POLL:
        if (s->stopping) {
            qw_submitter_hand_back(s, job, QW_JOB_END_ABANDONED);
            return;
        }
        job->kind = QW_JOB_SUBMIT;
        job->sub->accepted_unrecorded = false;
        job->sub->post_uncertain = false;
        job->adopted_submitting = false;
        qw_submitter_start_poll(s, job, s->cfg->dlt_status_wait_s);
        return;
    case QW_AFTER_END_FINAL:
        /* The statement looked for the service's next batch (go_on) and
         * found none: the queuer need not fetch the service again. */
        job->no_next = item->outcome.go_on && !item->more;
        qw_submitter_hand_back(s, job, QW_JOB_END_FINAL);
        return;
    case QW_AFTER_END_RETRY:
        qw_submitter_hand_back(s, job, QW_JOB_END_RETRY_LATER);
        return;
    case QW_AFTER_END_ABANDONED:
        qw_submitter_hand_back(s, job, QW_JOB_END_ABANDONED);
        return;
    }
}

/*
 * Fast path: the statement that ended the job's batch also marked the
 * service's next batch for submission; the job goes on with it at once,
 * without a trip through the queuer.
 */
static void continue_job(struct submitter *s, struct qw_job *job, const struct qw_next_batch *nb,
                         int64_t checked_ms)
{
    snprintf(job->batch_id, sizeof(job->batch_id), "%s", nb->batch_id);
    job->epoch = nb->epoch;
    job->attempts = nb->attempts;
    job->priority = nb->priority;
    job->avoid_node = -1;
    job->sub->poll_avoid = -1;
    job->sub->unknown_elsewhere = 0;
    job->sub->post_node = -1;
    job->sub->post_node_knew = false;
    job->kind = QW_JOB_SUBMIT;
    job->sub->accepted_unrecorded = false;
    job->sub->post_uncertain = false;
    job->sub->unknown_since_ms = 0;
    job->sub->poll_errors = 0;
    job->adopted_submitting = false;
    job->sub->cost = 0;
    job->sub->cap_waited = false;
    job->sub->chained++;
    /* The statement checked the claim: it is ours for lease_left_ms more,
     * counted from before the statement was sent (a slow flush must not
     * stretch the lease). */
    job->deadline_ms =
        qw_plan_lease_deadline(checked_ms, nb->lease_left_ms, s->cfg->worker_lease_ms);
    if (qw_job_set_payload_hex(job, nb->payload_hex) != QW_OK) {
        /* Cannot decode what the database gave: leave the batch marked; the
         * queuer finds it in flight and follows it (adoption). */
        qw_log_error("batch.payload_unreadable", "service=%s batch=%.16s", job->service_id,
                     job->batch_id);
        qw_submitter_hand_back(s, job, QW_JOB_END_ABANDONED);
        return;
    }
    qw_submitter_make_ready(s, job, now_ms());
    qw_submitter_window_give_back(s, job); /* after its next batch is queued */
}

static bool transient(int rc)
{
    return rc == QW_ERR_DB_CONN || rc == QW_ERR_TIMEOUT || rc == QW_ERR_SERIALIZATION ||
           rc == QW_ERR_OUTCOME_UNKNOWN;
}

/* Writes the waiting outcomes in one fenced statement. */
void qw_submitter_flush_outcomes(struct submitter *s)
{
    if (s->n_out == 0)
        return;
    struct qw_error err;
    qw_error_clear(&err);
    int64_t began_us = qw_clock_mono_us();
    int64_t began_ms = now_ms();
    if (s->stopping) {
        /* A stopping worker takes on no next batch, whatever the outcome
         * planned before the stop: the job ends with its batch and goes back,
         * rather than wait with a batch marked for a POST that never comes. */
        for (size_t i = 0; i < s->n_out; i++)
            s->out[i].outcome.go_on = false;
    }
    int rc = qw_db_ok(s->db) ? QW_OK : qw_db_reconnect(s->db, &err);
    if (rc == QW_OK)
        rc = qw_outcome_writer_write(&s->writer, s->db, s->w->instance_id, s->w->incarnation,
                                     s->out, s->n_out, &err);
    qw_log_debug("outcomes.flushed", "n=%zu rc=%d us=%lld", s->n_out, rc,
                 (long long)(qw_clock_mono_us() - began_us));
    if (rc != QW_OK && !transient(rc)) {
        /* Not a transient failure: say so, and keep retrying (nothing is dropped). */
        qw_log_error("outcomes.failed", "n=%zu sqlstate=%s error=%s", s->n_out, err.sqlstate,
                     qw_log_quote((char[300]){0}, 300, err.msg));
    }
    if (rc == QW_OK && s->flush_uncertain) {
        /* The last attempt may have committed: what it recorded matches
         * nothing now, and must not be taken for a lost claim. */
        rc =
            qw_outcome_writer_recheck(&s->writer, s->db, s->w->instance_id, s->out, s->n_out, &err);
    }
    if (rc == QW_ERR_DB_CONN || rc == QW_ERR_TIMEOUT || rc == QW_ERR_OUTCOME_UNKNOWN)
        s->flush_uncertain = true;
    if (rc != QW_OK) {
        /* /readyz turns not-ready while outcomes cannot be written. */
        long long zero = 0;
        atomic_compare_exchange_strong(&s->w->stats.outcomes_failing_since_ms, &zero, now_ms());
    }
    if (rc == QW_ERR_SERIALIZATION) {
        /* A deadlock or serialization failure: try again after a short
         * jittered pause. */
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
    s->flush_took_ms = now_ms() - began_ms;
    s->flush_uncertain = false;
    atomic_store_explicit(&s->w->stats.outcomes_failing_since_ms, 0, memory_order_relaxed);
    size_t n = s->n_out, rows = 0;
    s->n_out = 0;
    for (size_t i = 0; i < n; i++)
        rows += (size_t)s->out[i].written + (s->out[i].next_row >= 0);
    atomic_fetch_add_explicit(&s->w->stats.flushes, 1, memory_order_relaxed);
    /* rows written: outcomes, and next batches marked on the way */
    atomic_fetch_add_explicit(&s->w->stats.outcomes, (long long)rows, memory_order_relaxed);
    for (size_t i = 0; i < n; i++) {
        const struct qw_outcome_item *item = &s->out[i];
        if (item->skipped)
            continue;
        if (item->written && item->next_row >= 0) {
            struct qw_next_batch nb;
            qw_outcome_writer_next(item, &nb);
            continue_job(s, item->job, &nb, began_ms);
        } else {
            apply_outcome(s, item);
        }
    }
    /* Outcomes whose claim row another transaction held wait for the next
     * group, in order; only they are retried, after a short jittered
     * pause, not the whole group (n_out <= i: nothing is overwritten). */
    for (size_t i = 0; i < n; i++) {
        if (s->out[i].skipped)
            s->out[s->n_out++] = s->out[i];
    }
    if (s->n_out > 0) {
        s->flush_retry_at_ms =
            now_ms() + qw_backoff_full_jitter(s->flush_failures++, 1, 20, &s->rng);
        s->first_out_ms = now_ms();
    } else {
        s->flush_failures = 0;
        s->flush_retry_at_ms = 0;
    }
}

int64_t qw_submitter_group_due_ms(const struct submitter *s)
{
    return s->first_out_ms +
           qw_outcome_group_age_ms(s->flush_took_ms, atomic_load_explicit(&s->w->stats.live_workers,
                                                                          memory_order_relaxed));
}

bool qw_submitter_flush_due(const struct submitter *s, int64_t t)
{
    if (s->n_out == 0 || t < s->flush_retry_at_ms)
        return false;
    return s->n_out >= OUTCOME_GROUP_FULL || t >= qw_submitter_group_due_ms(s) || s->stopping;
}
