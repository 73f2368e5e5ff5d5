/*
 * Submitter thread: POST, status polls and grouped outcome writes; the
 * adapter around the pure decisions of outcome.h and monitor.h (what an
 * answer means) and the outcome writer (outcome_writer.h). This file runs
 * the thread (its loop, taking and handing back jobs, the timers); the parts
 * it calls, each with the state it keeps, are listed in submitter_int.h.
 *
 * DESIGN. The thread owns a ledger client (libcurl multi), a database
 * connection and every job popped from w->jobs until it hands the job
 * back on w->done. Its loop: take new jobs; flush recorded outcomes when
 * the group is full or old enough; start what is due on the timers
 * (status polls, POSTs after a 401/403 pause) and the probes of nodes that
 * are not up; start POSTs at the dispatch point; then wait in qw_dlt_run()
 * for transfers, new jobs (the jobs queue's fd) or the next timer. With a
 * shared capacity set (capacity.h, capacity_lease.h), a lease step on this
 * thread's connection runs before any POST, at most every worker.cycle_ms.
 *
 * Dispatch. A job whose POST is due waits in the ready queue (prioq.h:
 * priority with aging, round-robin among services of equal priority)
 * until capacity is free; dispatch (dispatch.c) is the one place a POST starts: it
 * takes the next job while no 429 or 401/403 pause holds and the node
 * chooser (nodes.h) finds an up node with a free channel (dlt.channels
 * POSTs in flight per node), preferring the fastest and least loaded and
 * avoiding the node where the batch's previous POST failed, and the shared
 * capacity, when one is set, admits its cost. The queue's head waits for
 * whichever of these is short, so the highest (aged) priority gets scarce
 * capacity first. Across workers: while another live worker reports
 * batches of a higher priority waiting for a node that pushes back, ours of
 * lower priority go one at a time per node, and ours waiting so are
 * reported likewise (both through the lease renewal). A job whose
 * lease deadline passes while it waits is given back (never posted late).
 * Status polls go to the POST's node, or to the other up nodes when it is
 * down or failed the batch's last request and has not answered since
 * (qw_nodes_poll_route() says which first); with no node up they wait for
 * a probe to find one. Nodes that
 * fail turn suspect and are probed (a status GET) until they answer; a
 * POST that got no answer may have reached the ledger and is followed by
 * its status (on another node) before anything is resubmitted.
 *
 * A POST answered 202 is recorded
 * Pending and then long-polled (one GET per batch, wait=N) until it is
 * final; Unknown after Pending is re-checked after dlt.unknown_confirm_ms
 * before it is recorded (the queuer then resubmits it, with the reason in
 * the history). Every database write is fenced (sql/outcomes_record.sql):
 * a write that matches nothing means the claim was lost, and the job is
 * dropped, never retried.
 */
#include "submitter/submitter.h"
#include "common/log.h"
#include "submitter/submitter_int.h"

#include <stdio.h>
#include <stdlib.h>

void qw_submitter_push_timer(struct submitter *s, struct qw_job *job, enum qw_job_state state,
                             int64_t at_ms)
{
    job->sub->state = state;
    job->sub->next_at_ms = at_ms;
    job->next = s->timers;
    s->timers = job;
}

/* Pushes a job that has ended (its submission freed) onto the done queue.
 * The queue is sized so it cannot fill; if it ever refuses, the job waits
 * on the overflow list. */
static void push_done(struct submitter *s, struct qw_job *job)
{
    job->next = NULL;
    if (qw_handoff_push(s->w->done, job) != QW_OK) {
        job->next = s->overflow;
        s->overflow = job;
        return;
    }
    s->owned--;
    qw_worker_wake(s->w);
}

/* Hands a finished job back to the queuer, without its submission. */
void qw_submitter_hand_back(struct submitter *s, struct qw_job *job, enum qw_job_end end)
{
    job->end = end;
    qw_submitter_capacity_give_back(s, job);
    if (end == QW_JOB_END_LOST)
        atomic_fetch_add_explicit(&s->w->stats.lost, 1, memory_order_relaxed);
    free(job->sub);
    job->sub = NULL;
    push_done(s, job);
}

static void retry_overflow(struct submitter *s)
{
    struct qw_job *list = s->overflow;
    s->overflow = NULL;
    while (list) {
        struct qw_job *next = list->next;
        push_done(s, list);
        list = next;
    }
}

/* Whether the job's service may be posted to one of the ledger's nodes only. */
static bool one_node(const struct submitter *s, const struct qw_job *job)
{
    uint32_t route = job->sub->route & qw_nodes_all_mask(&s->nodes);
    return route != 0 && (route & (route - 1)) == 0;
}

/* Starts what is due on the timers; returns the next timer (ms) or INT64_MAX. */
static int64_t run_timers(struct submitter *s, int64_t t)
{
    int64_t next = INT64_MAX;
    struct qw_job **link = &s->timers;
    while (*link) {
        struct qw_job *job = *link;
        bool is_post = job->sub->state == QW_JOB_WAITING;
        if (is_post && (s->stopping || t >= job->deadline_ms)) {
            *link = job->next;
            qw_submitter_requeue(s, job,
                                 s->stopping ? "worker stopping" : "claim lease may have lapsed");
            continue;
        }
        if (job->sub->next_at_ms > t) {
            if (job->sub->next_at_ms < next)
                next = job->sub->next_at_ms;
            link = &job->next;
            continue;
        }
        *link = job->next;
        if (is_post)
            qw_submitter_make_ready(s, job, t);
        else if (s->stopping)
            qw_submitter_hand_back(s, job, QW_JOB_END_ABANDONED);
        else
            qw_submitter_start_poll(
                s, job, qw_plan_poll_wait_s(job, s->cfg->dlt_status_wait_s, one_node(s, job)));
    }
    return next;
}

static void take_jobs(struct submitter *s)
{
    void *item;
    int rc;
    int64_t t = now_ms();
    while ((rc = qw_handoff_pop(s->w->jobs, 0, &item)) == QW_OK) {
        struct qw_job *job = item;
        s->owned++;
        job->sub = calloc(1, sizeof(*job->sub));
        if (!job->sub) {
            /* Nothing was done with it: the queuer offers its batch again. */
            qw_log_error("submitter.no_memory", "service=%s batch=%.16s", job->service_id,
                         job->batch_id);
            job->end = QW_JOB_END_ABANDONED;
            push_done(s, job);
            continue;
        }
        job->sub->job = job;
        job->sub->node = -1;
        job->sub->poll_avoid = -1;
        job->sub->post_node = -1;
        job->sub->win_node = -1;
        /* A service no dlt.url entry names goes to every node: the ledger's
         * 404 then says why it cannot be posted (recorded with the batch). */
        job->sub->route = qw_dlt_route(s->dlt, job->service_id);
        if (job->sub->route == 0)
            job->sub->route = QW_NODES_ALL;
        /* Probes ask about some batch we were given (any answer will do). */
        snprintf(s->probe_service, sizeof(s->probe_service), "%s", job->service_id);
        snprintf(s->probe_batch, sizeof(s->probe_batch), "%s", job->batch_id);
        if (job->kind == QW_JOB_SUBMIT) {
            qw_submitter_make_ready(s, job, t);
        } else {
            /* Found in flight at the ledger: it occupies capacity already. */
            if (s->gate.grant.active) {
                job->sub->cap_taken = qw_submitter_job_cost(s, job);
                qw_capacity_force_take(&s->gate, job->sub->cap_taken);
            }
            qw_submitter_push_timer(s, job, QW_JOB_POLL_WAIT, 0);
        }
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
            if (s->posting > 0) {
                atomic_store(&s->w->posts_abandoned, 1);
                qw_log_warn("submitter.posts_abandoned",
                            "posting=%d grace_ms=%d hint=\"their services keep their claims "
                            "until the hard expiry: a POST may still reach the ledger\"",
                            s->posting, s->cfg->worker_shutdown_grace_ms);
            }
            if (qw_dlt_cancel_all(s->dlt, qw_submitter_on_transfer_done, s) < 0)
                qw_log_error("submitter.cancel_failed", "posting=%d", s->posting);
            qw_submitter_sweep_ready(s, t);
            run_timers(s, t);
            struct qw_job *job;
            while ((job = s->timers) != NULL) {
                s->timers = job->next;
                qw_submitter_hand_back(s, job, QW_JOB_END_ABANDONED);
            }
            for (int tries = 0; s->n_out > 0 && tries < 20; tries++) {
                qw_submitter_flush_outcomes(s);
                if (s->n_out > 0)
                    qw_clock_sleep_ms(50);
            }
            for (size_t i = 0; i < s->n_out; i++)
                qw_submitter_hand_back(s, s->out[i].job, QW_JOB_END_ABANDONED);
            s->n_out = 0;
            retry_overflow(s);
            qw_submitter_capacity_release(s);
            return;
        }
        /* Write first: a written outcome may hand the job its service's next
         * batch (fast path), which qw_submitter_dispatch() then posts at once. */
        if (qw_submitter_flush_due(s, t))
            qw_submitter_flush_outcomes(s);
        if (s->overflow)
            retry_overflow(s);
        t = now_ms();
        /* The lease step before any POST: with a capacity set, nothing goes
         * out before the first grant. */
        qw_submitter_capacity_step(s, t);
        int64_t next = run_timers(s, t);
        qw_submitter_run_probes(s, t);
        qw_submitter_dispatch(s, t);
        qw_submitter_publish_nodes(s);
        qw_submitter_report_nodes(s, t);
        if (s->gate.grant.active) {
            atomic_store_explicit(&s->w->stats.capacity_target, s->target, memory_order_relaxed);
            /* Wanting more while partitions are free: the next step soon. */
            if (s->lease.free_partitions > 0 && s->cap_refused &&
                s->cap_next_step_ms > t + CAPACITY_STEP_SOON_MS)
                s->cap_next_step_ms = t + CAPACITY_STEP_SOON_MS;
        }
        int64_t probe = qw_nodes_next_probe_ms(&s->nodes);
        int64_t again = qw_submitter_dispatch_due(s, t);
        if (probe < next)
            next = probe;
        if (again < next)
            next = again;
        if (s->cap_next_step_ms < next)
            next = s->cap_next_step_ms;
        int64_t timeout = next == INT64_MAX ? 1000 : next - t;
        if (s->n_out > 0) {
            int64_t due =
                s->flush_retry_at_ms > t ? s->flush_retry_at_ms : qw_submitter_group_due_ms(s);
            if (due - t < timeout)
                timeout = due - t;
        }
        if (s->stopping && s->grace_deadline_ms - t < timeout)
            timeout = s->grace_deadline_ms - t;
        if (timeout < 0)
            timeout = 0;
        if (timeout > 1000)
            timeout = 1000;
        if (qw_dlt_run(s->dlt, (int)timeout, qw_handoff_fd(s->w->jobs),
                       qw_submitter_on_transfer_done, s) < 0)
            qw_clock_sleep_ms(10);
    }
}

static void submitter_free(struct submitter *s)
{
    qw_dlt_client_free(s->dlt);
    qw_prioq_free(&s->ready);
    for (int k = 0; k < NODE_PARAMS; k++)
        qw_pgarray_free(&s->node_params[k]);
    qw_db_close(s->db);
    qw_outcome_writer_free(&s->writer);
    qw_capacity_lease_free(&s->lease);
    free(s->out);
    free(s);
}

static void *submitter_main(void *arg)
{
    struct submitter *s = arg;
    qw_log_set_thread("submitter");
    submitter_loop(s);
    qw_log_info("submitter.stopped", "outcomes_pending=%zu", s->n_out);
    submitter_free(s);
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
    qw_prioq_init(&s->ready, cfg->dlt_priority_aging_ms);
    for (int k = 0; k < NODE_PARAMS; k++)
        qw_pgarray_init(&s->node_params[k]);
    s->ready_deadline_ms = INT64_MAX;
    s->cap_out = (size_t)cfg->dlt_max_in_flight + (size_t)cfg->worker_queue_capacity + 16;
    s->out = calloc(s->cap_out, sizeof(*s->out));
    qw_outcome_writer_init(&s->writer);
    qw_rng_seed(&s->rng, (uint64_t)qw_clock_mono_us() ^ 0x5bd1e995u);
    qw_outage_init(&s->outage, "submitter");
    qw_capacity_gate_init(&s->gate);
    if (!qw_capacity_cost_parse(cfg->dlt_cost, &s->cost_kind))
        s->cost_kind = QW_COST_BATCH; /* config.c refuses anything else */
    qw_capacity_lease_init(&s->lease, cfg->dlt_ledger, w->instance_id, s->cost_kind,
                           cfg->worker_lease_ms);
    s->cap_policy = (struct qw_txn_policy){
        .max_attempts = cfg->worker_txn_max_attempts,
        .max_ms = cfg->worker_txn_max_ms,
        .backoff_base_ms = cfg->worker_txn_backoff_base_ms,
        .backoff_max_ms = cfg->worker_txn_backoff_max_ms,
        .rng = &s->rng,
    };
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
    if (rc == QW_OK) {
        struct qw_nodes_policy np = {
            .channels = cfg->dlt_channels,
            .probe_base_ms = PROBE_BASE_MS,
            .probe_max_ms = PROBE_MAX_MS,
            .explore_ms = EXPLORE_MS,
            .window = qw_window_policy_default(cfg->dlt_max_in_flight),
        };
        qw_nodes_init(&s->nodes, (size_t)qw_dlt_nodes(s->dlt), &np, now_ms());
        qw_log_info("ledger.nodes", "n=%d channels=%d priority_aging_ms=%d", qw_dlt_nodes(s->dlt),
                    cfg->dlt_channels, cfg->dlt_priority_aging_ms);
    }
    if (rc == QW_OK && pthread_create(thread, NULL, submitter_main, s) != 0)
        rc = qw_error_set(err, QW_ERR_IO, "cannot start the submitter thread");
    if (rc != QW_OK)
        submitter_free(s);
    return rc;
}
