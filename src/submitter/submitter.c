/*
 * Submitter thread: POST, status polls and grouped outcome writes; the
 * adapter around the pure decisions of outcome.h and monitor.h (what an
 * answer means) and the outcome writer (outcome_writer.h).
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
 * until capacity is free; dispatch() is the one place a POST starts: it
 * takes the next job while no 429 or 401/403 pause holds and the node
 * chooser (nodes.h) finds an up node with a free channel (dlt.channels
 * POSTs in flight per node), preferring the fastest and least loaded and
 * avoiding the node where the batch's previous POST failed, and the shared
 * capacity, when one is set, admits its cost. The queue's head waits for
 * whichever of these is short, so the highest (aged) priority gets scarce
 * capacity first. A job whose
 * lease deadline passes while it waits is given back (never posted late).
 * Status polls go to any up node (avoiding one where the last poll
 * failed); with no node up they wait for a probe to find one. Nodes that
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
#include "common/backoff.h"
#include "common/clock.h"
#include "common/histogram.h"
#include "common/log.h"
#include "db/db.h"
#include "db/outage.h"
#include "db/txn.h"
#include "db/pgarray.h"
#include "dlt/dlt_client.h"
#include "ingest/batchlist.h"
#include "submitter/capacity.h"
#include "submitter/capacity_lease.h"
#include "shared/job.h"
#include "submitter/submission.h"
#include "submitter/nodes.h"
#include "submitter/outcome.h"
#include "submitter/outcome_writer.h"
#include "submitter/prioq.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUTCOME_GROUP_FULL 256 /* flush at once when this many outcomes wait */
#define OUTCOME_GROUP_AGE_MS 2 /* flush a group at most this old */
#define CAPACITY_LOG_EVERY_MS                                                                      \
    30000 /* a lease step failing in a row is logged when it starts and then at most this          \
             often (a database failover is one line, however many steps its seconds fail) */
#define FAILURE_LOG_EVERY_MS                                                                       \
    1000                   /* at most one ledger.request_failed line per request                   \
                              type and kind this often (the rest are counted) */
#define NOTE_POLL_ERRORS 3 /* failed polls in a row before last_error is noted */
#define PROBE_BASE_MS 100  /* first probe of a suspect node after this, ms */
#define PROBE_MAX_MS 1000  /* probe delay cap, and the probe period of a down node, ms */
#define EXPLORE_MS 1000    /* an up node not measured this long gets the next request, ms */
#define NODES_REPORT_MS                                                                            \
    5000 /* the nodes are written to the database this often (and when a                           \
            node changes state), for `queuer status` */

#define CAPACITY_STEP_MAX_MS                                                                       \
    250 /* while a shared capacity is set, a lease step at least this often (and every             \
           worker.cycle_ms at most), so partitions follow the targets within a fraction of a       \
           second; without one, every worker.cycle_ms (a change is seen within one cycle) */
#define CAPACITY_NO_GRANT_RETRY_MS 50 /* jobs waiting for a grant look again this often */
#define CAPACITY_STEP_SOON_MS 20      /* next step when partitions are free and we want more */

struct submitter {
    struct qw_worker *w;         /* shared state */
    const struct qw_config *cfg; /* read-only */
    struct qw_db *db;            /* owned connection */
    struct qw_dlt_client *dlt;   /* owned ledger client */
    struct qw_rng rng;           /* this thread's PRNG */
    struct qw_outage outage;     /* this connection's outages: log lines, reconnect pacing */
    struct qw_job *timers;       /* jobs waiting for a moment: a poll, a POST after a
                                    401/403 pause (QW_JOB_POLL_WAIT / QW_JOB_WAITING) */
    struct qw_prioq ready;       /* jobs whose POST is due, waiting for capacity */
    int64_t ready_deadline_ms;   /* no ready job's lease deadline is earlier than this */
    struct qw_nodes nodes;       /* the ledger's nodes: states, latency, channels */
    char probe_service[QW_SERVICE_ID_MAX]; /* ids a probe asks about (any batch we were */
    char probe_batch[QW_BATCH_ID_LEN + 1]; /* given; "" = none yet: nothing to probe for) */
    char probe_tag[QW_NODES_MAX];          /* &probe_tag[i] marks node i's probe transfer */
    int64_t nodes_reported_ms;             /* when the nodes were last written to the database */
    uint32_t nodes_reported_states;        /* their states then, 2 bits per node */
    struct qw_pgarray node_params[8];      /* parameters of sql/instance_nodes.sql, reused */
    struct qw_job *overflow;               /* finished jobs the done queue refused */
    struct qw_outcome_item *out;           /* outcomes waiting to be written */
    size_t n_out;                          /* entries in out */
    size_t cap_out;                        /* room in out: one per job we can own */
    int64_t first_out_ms;                  /* when the oldest waiting outcome was added */
    int64_t flush_retry_at_ms;             /* after a failed flush: not before this */
    int flush_failures;                    /* consecutive failed flushes */
    bool flush_uncertain;                  /* a failed flush may have committed (connection lost
                                              or timed out while it ran): re-read before dropping */
    struct qw_ledger_pause pause;          /* 429 and 401/403 pauses */
    bool stopping;                         /* jobs queue closed: shutting down */
    int64_t grace_deadline_ms;             /* stopping: abandon what is left after this */
    int owned;                             /* jobs owned and not yet handed back */
    int posting;                           /* POSTs in flight */
    struct qw_outcome_writer writer;       /* the grouped write */
    int64_t failure_logged_ms[2][QW_DLT_FAIL_COUNT];   /* when ledger.request_failed was last
                                                          logged, per request type (0 POST, 1
                                                          status) and kind */
    long long failures_unlogged[2][QW_DLT_FAIL_COUNT]; /* failures since, not logged */
    struct qw_capacity_gate gate;    /* shared capacity: what a POST may use (capacity.h) */
    struct qw_capacity_lease lease;  /* shared capacity: the partitions held (capacity_lease.h) */
    enum qw_capacity_cost cost_kind; /* dlt.cost */
    struct qw_txn_policy cap_policy; /* retries of the lease step's transaction */
    int64_t cap_next_step_ms;        /* monotonic ms of the next lease step */
    int cap_failures;                /* lease steps failed in a row */
    int64_t cap_logged_ms;           /* monotonic ms a failed step was last logged */
    int64_t target;                  /* cost waiting to POST or in flight, last counted */
    bool cap_refused;                /* the last pass left a POST waiting for capacity */
    int64_t cap_retry_ms;            /* monotonic ms the capacity may admit the next POST */
};

static void flush_outcomes(struct submitter *s);

/* The job's cost against the shared capacity (dlt.cost), computed once per batch. */
static int64_t job_cost(struct submitter *s, struct qw_job *job)
{
    if (job->sub->cost == 0) {
        int64_t txns = 0;
        if (s->cost_kind == QW_COST_TRANSACTIONS && job->payload)
            txns = qw_batchlist_transactions(job->payload, job->payload_len);
        job->sub->cost = qw_capacity_cost_of(s->cost_kind, job->payload_len, txns);
    }
    return job->sub->cost;
}

/* The job's batch left the ledger (or never got in): its units are free again. */
static void capacity_give_back(struct submitter *s, struct qw_job *job)
{
    if (job->sub->cap_taken > 0)
        qw_capacity_give_back(&s->gate, job->sub->cap_taken);
    job->sub->cap_taken = 0;
}

static int64_t now_ms(void)
{
    return qw_clock_mono_ms();
}

static void push_timer(struct submitter *s, struct qw_job *job, enum qw_job_state state,
                       int64_t at_ms)
{
    job->sub->state = state;
    job->sub->next_at_ms = at_ms;
    job->next = s->timers;
    s->timers = job;
}

static struct qw_job *job_of_ready(struct qw_prioq_item *it)
{
    struct qw_submission *sub =
        (struct qw_submission *)(void *)((char *)it - offsetof(struct qw_submission, ready));
    return sub->job;
}

/* The job's POST is due: it waits in the ready queue for capacity. */
static void make_ready(struct submitter *s, struct qw_job *job, int64_t t)
{
    job->sub->state = QW_JOB_WAITING;
    if (qw_prioq_push(&s->ready, &job->sub->ready, job->priority, t) != 0) {
        push_timer(s, job, QW_JOB_WAITING, t + 5); /* no memory for a new level: retry */
        return;
    }
    if (job->deadline_ms < s->ready_deadline_ms)
        s->ready_deadline_ms = job->deadline_ms;
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
static void hand_back(struct submitter *s, struct qw_job *job, enum qw_job_end end)
{
    job->end = end;
    capacity_give_back(s, job);
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

/* Queues `o` for the grouped write; the job waits until it is written. */
static void add_outcome(struct submitter *s, struct qw_job *job, const struct qw_outcome *o)
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
    s->out[s->n_out++] = (struct qw_outcome_item){.job = job, .outcome = *o, .next_row = -1};
    job->sub->state = QW_JOB_RECORDING;
}

static void start_poll(struct submitter *s, struct qw_job *job, int wait_s)
{
    int64_t t = now_ms();
    int node = qw_nodes_pick_poll(&s->nodes, job->sub->poll_avoid, t);
    if (node < 0) {
        /* No node is up: wait until a probe finds one (unpark_polls()). */
        job->sub->parked = true;
        push_timer(s, job, QW_JOB_POLL_WAIT, INT64_MAX);
        return;
    }
    const char *ids[1] = {job->batch_id};
    int rc = qw_dlt_get_statuses(s->dlt, node, job->service_id, ids, 1, wait_s, job);
    if (rc == QW_OK) {
        job->sub->state = QW_JOB_POLLING;
        job->sub->node = node;
        job->sub->poll_wait_s = wait_s;
        qw_nodes_started(&s->nodes, node, QW_NODE_REQ_POLL, t);
        return;
    }
    /* No transfer slot (or a transient failure): try again shortly. */
    push_timer(s, job, QW_JOB_POLL_WAIT, t + 5);
}

/* Starts the job's POST on `node`; false when the client could not start it. */
static bool start_post(struct submitter *s, struct qw_job *job, int node, int64_t t)
{
    int rc = qw_dlt_post(s->dlt, node, job->service_id, job->payload, job->payload_len, job);
    if (rc != QW_OK)
        return false;
    job->sub->state = QW_JOB_POSTING;
    job->sub->node = node;
    job->sub->posted_us = qw_clock_mono_us();
    s->posting++;
    qw_nodes_started(&s->nodes, node, QW_NODE_REQ_POST, t);
    return true;
}

/* A node came back: the polls that waited for one go out now. */
static void unpark_polls(struct submitter *s)
{
    for (struct qw_job *job = s->timers; job; job = job->next) {
        if (job->sub->parked) {
            job->sub->parked = false;
            job->sub->next_at_ms = 0;
        }
    }
}

/* Starts the probes that are due: a status GET (wait=0) of a batch we were given. */
static void run_probes(struct submitter *s, int64_t t)
{
    if (s->stopping || !s->probe_batch[0])
        return;
    int node;
    while ((node = qw_nodes_probe_due(&s->nodes, t)) >= 0) {
        const char *ids[1] = {s->probe_batch};
        if (qw_dlt_get_statuses(s->dlt, node, s->probe_service, ids, 1, 0, &s->probe_tag[node]) !=
            QW_OK)
            return; /* no transfer slot: the next pass tries again */
        qw_nodes_started(&s->nodes, node, QW_NODE_REQ_PROBE, t);
    }
}

/* Logs and counts a node's change of state. */
static void note_node(struct submitter *s, int node, enum qw_node_change change)
{
    if (change == QW_NODE_SAME)
        return;
    const struct qw_node *nd = &s->nodes.node[node];
    const char *url = qw_dlt_node_url(s->dlt, node);
    switch (change) {
    case QW_NODE_BECAME_SUSPECT:
        qw_log_warn("ledger.node_suspect",
                    "node=%d url=%s failures=%d probe_in_ms=%d hint=\"requests go to the other "
                    "nodes until it answers a probe\"",
                    node, url, nd->failures, PROBE_BASE_MS);
        return;
    case QW_NODE_BECAME_DOWN:
        qw_log_error("ledger.node_down", "node=%d url=%s failures=%d probe_every_ms=%d", node, url,
                     nd->failures, PROBE_MAX_MS);
        return;
    case QW_NODE_BECAME_UP:
        qw_log_info("ledger.node_up", "node=%d url=%s latency_us=%lld", node, url,
                    (long long)nd->ewma_us);
        unpark_polls(s);
        return;
    case QW_NODE_SAME:
        return;
    }
}

/*
 * Writes the nodes' state into our instance row (sql/instance_nodes.sql)
 * when a node changed state or NODES_REPORT_MS passed. Best effort: a
 * failure is logged at debug and the next period tries again.
 */
static void report_nodes(struct submitter *s, int64_t t)
{
    uint32_t states = 0;
    for (size_t i = 0; i < s->nodes.n; i++)
        states |= (uint32_t)s->nodes.node[i].state << (2 * i);
    if (s->nodes_reported_ms != 0 && states == s->nodes_reported_states &&
        t - s->nodes_reported_ms < NODES_REPORT_MS)
        return;
    s->nodes_reported_ms = t;
    s->nodes_reported_states = states;
    if (!qw_db_ok(s->db))
        return; /* the next flush reconnects */
    struct qw_pgarray *a = s->node_params;
    for (int k = 0; k < 8; k++)
        qw_pgarray_reset(&a[k]);
    for (size_t i = 0; i < s->nodes.n; i++) {
        const struct qw_node *nd = &s->nodes.node[i];
        qw_pgarray_text(&a[0], qw_dlt_node_url(s->dlt, (int)i));
        qw_pgarray_text(&a[1], qw_node_state_name(nd->state));
        qw_pgarray_int(&a[2], nd->ewma_us);
        qw_pgarray_int(&a[3], nd->posts);
        qw_pgarray_int(&a[4], nd->posts_total);
        qw_pgarray_int(&a[5], nd->polls_total);
        qw_pgarray_int(&a[6], nd->failures_total);
        qw_pgarray_int(&a[7], nd->suspect_total);
    }
    const char *params[9] = {s->w->instance_id};
    for (int k = 0; k < 8; k++) {
        params[k + 1] = qw_pgarray_finish(&a[k]);
        if (!params[k + 1])
            return;
    }
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(s->db, "instance_nodes", 9, params, NULL, &err) != QW_OK)
        qw_log_debug("ledger.nodes_report_failed", "error=%s",
                     qw_log_quote((char[300]){0}, 300, err.msg));
}

/* Publishes the nodes' state for /metrics (relaxed atomics, read by the admin thread). */
static void publish_nodes(struct submitter *s)
{
    struct qw_worker_stats *st = &s->w->stats;
    for (size_t i = 0; i < s->nodes.n; i++) {
        const struct qw_node *nd = &s->nodes.node[i];
        struct qw_node_stats *ns = &st->nodes[i];
        atomic_store_explicit(&ns->state, (int)nd->state, memory_order_relaxed);
        atomic_store_explicit(&ns->latency_us, nd->ewma_us, memory_order_relaxed);
        atomic_store_explicit(&ns->posts_in_flight, nd->posts, memory_order_relaxed);
        atomic_store_explicit(&ns->posts, nd->posts_total, memory_order_relaxed);
        atomic_store_explicit(&ns->polls, nd->polls_total, memory_order_relaxed);
        atomic_store_explicit(&ns->failures, nd->failures_total, memory_order_relaxed);
        atomic_store_explicit(&ns->suspect, nd->suspect_total, memory_order_relaxed);
    }
    atomic_store_explicit(&st->n_nodes, (int)s->nodes.n, memory_order_relaxed);
    atomic_store_explicit(&st->ready, (long long)qw_prioq_len(&s->ready), memory_order_relaxed);
}

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
    const char *params[] = {s->w->instance_id, job->batch_id, job->service_id, epoch, note};
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_ok(s->db) && qw_db_query(s->db, "batches_note", 5, params, NULL, &err) != QW_OK)
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
        add_outcome(s, job, &p->outcome);
        return;
    case QW_PLAN_POLL:
        start_poll(s, job, p->wait_s);
        return;
    case QW_PLAN_POLL_AT:
        push_timer(s, job, QW_JOB_POLL_WAIT, p->at_ms);
        return;
    case QW_PLAN_POST_AT:
        push_timer(s, job, QW_JOB_WAITING, p->at_ms);
        return;
    case QW_PLAN_HAND_BACK:
        hand_back(s, job, QW_JOB_END_ABANDONED);
        return;
    }
}

static bool is_probe(const struct submitter *s, const void *user)
{
    const char *p = user;
    return p >= s->probe_tag && p < s->probe_tag + QW_NODES_MAX;
}

static void on_transfer_done(const struct qw_dlt_result *r, void *arg)
{
    struct submitter *s = arg;
    int64_t t = now_ms();
    enum qw_node_result nr = qw_nodes_classify(r->outcome, r->transport, r->http_status);
    if (is_probe(s, r->user)) {
        note_node(s, r->node,
                  qw_nodes_finished(&s->nodes, r->node, QW_NODE_REQ_PROBE, nr,
                                    nr == QW_NODE_ANSWERED ? r->latency_us : -1, t));
        return;
    }
    struct qw_job *job = r->user;
    bool post = r->kind == QW_DLT_KIND_POST;
    /* Latency samples: POSTs, and status GETs that did not long-poll. */
    int64_t sample =
        nr == QW_NODE_ANSWERED && (post || job->sub->poll_wait_s == 0) ? r->latency_us : -1;
    note_node(s, r->node,
              qw_nodes_finished(&s->nodes, r->node, post ? QW_NODE_REQ_POST : QW_NODE_REQ_POLL, nr,
                                sample, t));
    if (nr == QW_NODE_FAILED)
        job->sub->poll_avoid = r->node; /* its next status read goes elsewhere */
    else if (nr == QW_NODE_ANSWERED && !post)
        job->sub->poll_avoid = -1;
    if (post) {
        s->posting--;
        if (r->outcome != QW_DLT_ABANDONED)
            qw_histogram_observe_us(&s->w->stats.ops.ledger_latency, r->latency_us);
        /* A retried POST prefers another node than the one that failed. */
        if (nr == QW_NODE_FAILED)
            job->avoid_node = r->node;
        else if (nr == QW_NODE_ANSWERED)
            job->avoid_node = -1;
    }
    struct qw_plan_ctx ctx = plan_ctx(s, &s->rng);
    struct qw_plan plan;
    qw_outcome_plan(job, r, &ctx, &s->pause, &plan);
    /* Not at the ledger; but a POST without a usable answer may be: it keeps
     * its units until the status read that follows it says how it ended. */
    if (post && r->outcome != QW_DLT_ACCEPTED && plan.event != QW_EV_POST_UNCERTAIN)
        capacity_give_back(s, job);
    if (plan.event == QW_EV_COMMITTED || plan.event == QW_EV_VALID || plan.event == QW_EV_INVALID ||
        plan.event == QW_EV_UNKNOWN_CONFIRMED)
        capacity_give_back(s, job); /* no longer pending at the ledger */
    if (plan.event == QW_EV_POST_BACKPRESSURE)
        qw_capacity_backpressure(&s->gate, ctx.now_ms);
    note_failure(s, job, r);
    count_and_log(s, job, r, &plan);
    apply_plan(s, job, &plan);
}

/* Gives a not-yet-posted job back to the database (submitted = false). */
static void requeue(struct submitter *s, struct qw_job *job, const char *why)
{
    struct qw_plan plan;
    qw_plan_requeue(&plan, job, why);
    apply_plan(s, job, &plan);
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
        hand_back(s, job, QW_JOB_END_ABANDONED);
        return;
    }
    if (!item->written) {
        qw_log_info("claim.lost", "service=%s batch=%.16s epoch=%lld action=drop", job->service_id,
                    job->batch_id, (long long)job->epoch);
        hand_back(s, job, QW_JOB_END_LOST);
        return;
    }
    switch (item->outcome.after) {
    case QW_AFTER_POLL:
        if (s->stopping) {
            hand_back(s, job, QW_JOB_END_ABANDONED);
            return;
        }
        job->kind = QW_JOB_SUBMIT;
        job->sub->accepted_unrecorded = false;
        job->sub->post_uncertain = false;
        job->adopted_submitting = false;
        start_poll(s, job, s->cfg->dlt_status_wait_s);
        return;
    case QW_AFTER_END_FINAL:
        hand_back(s, job, QW_JOB_END_FINAL);
        return;
    case QW_AFTER_END_RETRY:
        hand_back(s, job, QW_JOB_END_RETRY_LATER);
        return;
    case QW_AFTER_END_ABANDONED:
        hand_back(s, job, QW_JOB_END_ABANDONED);
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
        hand_back(s, job, QW_JOB_END_ABANDONED);
        return;
    }
    make_ready(s, job, now_ms());
}

static bool transient(int rc)
{
    return rc == QW_ERR_DB_CONN || rc == QW_ERR_TIMEOUT || rc == QW_ERR_SERIALIZATION ||
           rc == QW_ERR_OUTCOME_UNKNOWN;
}

/* Writes the waiting outcomes in one fenced statement. */
static void flush_outcomes(struct submitter *s)
{
    if (s->n_out == 0)
        return;
    struct qw_error err;
    qw_error_clear(&err);
    int64_t began_us = qw_clock_mono_us();
    int64_t began_ms = now_ms();
    int rc = qw_db_ok(s->db) ? QW_OK : qw_db_reconnect(s->db, &err);
    if (rc == QW_OK)
        rc = qw_outcome_writer_write(&s->writer, s->db, s->w->instance_id, s->out, s->n_out, &err);
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
        /* A claim row of the group is locked by another transaction (NOWAIT
         * answered 55P03: a claims transaction renewing or taking it over):
         * try again after a short jittered pause. */
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
        if (item->written && item->next_row >= 0) {
            struct qw_next_batch nb;
            qw_outcome_writer_next(item, &nb);
            continue_job(s, item->job, &nb, began_ms);
        } else {
            apply_outcome(s, item);
        }
    }
}

static bool flush_due(const struct submitter *s, int64_t t)
{
    if (s->n_out == 0 || t < s->flush_retry_at_ms)
        return false;
    return s->n_out >= OUTCOME_GROUP_FULL || t - s->first_out_ms >= OUTCOME_GROUP_AGE_MS ||
           s->stopping;
}

/*
 * The one place that decides whether a POST may start now as far as the
 * shared capacity goes (capacity.h): takes the job's cost from the gate, or
 * leaves the job waiting and says when to look again in *next.
 */
static bool capacity_admits(struct submitter *s, struct qw_job *job, int64_t t, int64_t *next)
{
    if (!s->gate.grant.active)
        return true; /* no capacity set: nothing to count, not even the cost */
    int64_t wait_ms;
    enum qw_capacity_verdict v = qw_capacity_try_take(&s->gate, job_cost(s, job), t, &wait_ms);
    if (v == QW_CAP_TAKEN) {
        job->sub->cap_taken = job->sub->cost;
        job->sub->cap_waited = false;
        return true;
    }
    s->cap_refused = s->cap_refused || v != QW_CAP_WAIT_RATE;
    if (!job->sub->cap_waited) {
        job->sub->cap_waited = true;
        atomic_fetch_add_explicit(&s->w->stats.capacity_waits, 1, memory_order_relaxed);
    }
    /* A freed slot wakes the loop by itself (a transfer ends); a rate or a
     * missing grant needs a timer. */
    int64_t at = v == QW_CAP_WAIT_RATE    ? t + wait_ms
                 : v == QW_CAP_WAIT_GRANT ? t + CAPACITY_NO_GRANT_RETRY_MS
                                          : INT64_MAX;
    if (at < *next)
        *next = at;
    return false;
}

static bool paused(const struct submitter *s, int64_t t)
{
    return t < s->pause.pause_until_ms || t < s->pause.auth_until_ms;
}

/* Gives back the ready jobs whose lease deadline passed (all of them when stopping). */
static void sweep_ready(struct submitter *s, int64_t t)
{
    int64_t earliest = INT64_MAX;
    struct qw_prioq_item *it = qw_prioq_first(&s->ready);
    while (it) {
        struct qw_prioq_item *next = qw_prioq_next(&s->ready, it);
        struct qw_job *job = job_of_ready(it);
        if (s->stopping || t >= job->deadline_ms) {
            qw_prioq_remove(&s->ready, it);
            requeue(s, job, s->stopping ? "worker stopping" : "claim lease may have lapsed");
        } else if (job->deadline_ms < earliest) {
            earliest = job->deadline_ms;
        }
        it = next;
    }
    s->ready_deadline_ms = earliest;
}

/* The cost of every POST waiting (ready or on a timer) plus what is in flight: the target. */
static int64_t capacity_target(struct submitter *s)
{
    int64_t cost = s->gate.used;
    for (struct qw_prioq_item *it = qw_prioq_first(&s->ready); it;
         it = qw_prioq_next(&s->ready, it))
        cost += job_cost(s, job_of_ready(it));
    for (struct qw_job *job = s->timers; job; job = job->next)
        if (job->sub->state == QW_JOB_WAITING)
            cost += job_cost(s, job);
    return cost;
}

/*
 * The dispatch point: the one place a POST starts. The ready queue names
 * the next job (priority with aging, round-robin within a priority); it
 * goes when no pause holds, the node chooser finds an up node with a free
 * channel and the shared capacity admits it (capacity_admits()). What
 * cannot start stays queued, in its turn: the head waits, so scarce
 * capacity of any kind goes to the highest (aged) priority first.
 */
static void dispatch(struct submitter *s, int64_t t)
{
    s->cap_refused = false;
    s->cap_retry_ms = INT64_MAX;
    if (s->stopping || t >= s->ready_deadline_ms)
        sweep_ready(s, t);
    if (!paused(s, t)) {
        if (atomic_load_explicit(&s->w->stats.paused, memory_order_relaxed))
            atomic_store(&s->w->stats.paused, 0);
        struct qw_prioq_item *it;
        while ((it = qw_prioq_peek(&s->ready, t)) != NULL) {
            struct qw_job *job = job_of_ready(it);
            int node = qw_nodes_pick_post(&s->nodes, job->avoid_node, t);
            if (node < 0)
                break; /* no free channel on an up node: a finishing POST frees one */
            if (!capacity_admits(s, job, t, &s->cap_retry_ms))
                break; /* a finishing POST, the rate or the next grant frees some */
            qw_prioq_remove(&s->ready, it);
            if (!start_post(s, job, node, t)) {
                capacity_give_back(s, job);
                if (qw_prioq_push_again(&s->ready, it) != 0)
                    push_timer(s, job, QW_JOB_WAITING, t + 5);
                break; /* no transfer slot: try again when one frees */
            }
        }
    }
    s->target = s->gate.grant.active ? capacity_target(s) : s->gate.used;
}

/* When dispatch() should run again without a transfer finishing (ms), or INT64_MAX. */
static int64_t dispatch_due(const struct submitter *s, int64_t t)
{
    if (qw_prioq_len(&s->ready) == 0)
        return INT64_MAX;
    int64_t due = s->ready_deadline_ms < s->cap_retry_ms ? s->ready_deadline_ms : s->cap_retry_ms;
    if (paused(s, t)) {
        int64_t until = s->pause.pause_until_ms > s->pause.auth_until_ms ? s->pause.pause_until_ms
                                                                         : s->pause.auth_until_ms;
        if (until < due)
            due = until;
    }
    return due;
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
            requeue(s, job, s->stopping ? "worker stopping" : "claim lease may have lapsed");
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
            make_ready(s, job, t);
        else if (s->stopping)
            hand_back(s, job, QW_JOB_END_ABANDONED);
        else
            start_poll(s, job,
                       job->sub->unknown_since_ms || job->sub->post_uncertain
                           ? 0
                           : s->cfg->dlt_status_wait_s);
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
        /* Probes ask about some batch we were given (any answer will do). */
        snprintf(s->probe_service, sizeof(s->probe_service), "%s", job->service_id);
        snprintf(s->probe_batch, sizeof(s->probe_batch), "%s", job->batch_id);
        if (job->kind == QW_JOB_SUBMIT) {
            make_ready(s, job, t);
        } else {
            /* Found in flight at the ledger: it occupies capacity already. */
            if (s->gate.grant.active) {
                job->sub->cap_taken = job_cost(s, job);
                qw_capacity_force_take(&s->gate, job->sub->cap_taken);
            }
            push_timer(s, job, QW_JOB_POLL_WAIT, 0);
        }
    }
    if (rc == QW_ERR_SHUTDOWN && !s->stopping) {
        s->stopping = true;
        s->grace_deadline_ms = now_ms() + s->cfg->worker_shutdown_grace_ms;
        qw_log_info("submitter.stopping", "owned=%d posting=%d", s->owned, s->posting);
    }
}

/* Publishes the capacity gauges for /metrics. */
static void capacity_publish_stats(struct submitter *s)
{
    struct qw_worker_stats *st = &s->w->stats;
    int64_t in_flight, per_second, partitions;
    qw_capacity_lease_totals(&s->lease, &in_flight, &per_second, &partitions);
    atomic_store_explicit(&st->capacity_set, s->lease.set, memory_order_relaxed);
    atomic_store_explicit(&st->capacity_in_flight, in_flight, memory_order_relaxed);
    atomic_store_explicit(&st->capacity_per_second, per_second, memory_order_relaxed);
    atomic_store_explicit(&st->capacity_partitions, partitions, memory_order_relaxed);
    atomic_store_explicit(&st->capacity_target, s->target, memory_order_relaxed);
}

/*
 * The lease step of the shared capacity (capacity_lease.h) on this thread's
 * connection, when due: publishes the target, renews, gives back, takes.
 * A failure keeps the gate's grant until its deadline and tries again soon.
 */
static void capacity_step(struct submitter *s, int64_t t)
{
    if (t < s->cap_next_step_ms || s->stopping)
        return;
    struct qw_error err;
    qw_error_clear(&err);
    bool was_set = s->lease.set;
    int rc = qw_db_ok(s->db) ? QW_OK : qw_db_reconnect(s->db, &err);
    if (rc == QW_OK)
        rc = qw_capacity_lease_step(&s->lease, s->db, &s->cap_policy, s->target, &s->gate, &err);
    int64_t period = s->cfg->worker_cycle_ms;
    if (s->lease.set && period > CAPACITY_STEP_MAX_MS)
        period = CAPACITY_STEP_MAX_MS;
    if (rc != QW_OK) {
        if (s->cap_failures++ == 0 || t - s->cap_logged_ms >= CAPACITY_LOG_EVERY_MS) {
            s->cap_logged_ms = t;
            qw_log_warn("capacity.step_failed", "ledger=%s failures=%d sqlstate=%s error=%s",
                        s->cfg->dlt_ledger, s->cap_failures, err.sqlstate,
                        qw_log_quote((char[300]){0}, 300, err.msg));
        }
        s->cap_next_step_ms =
            now_ms() + qw_backoff_full_jitter(s->cap_failures, 50, period, &s->rng);
        return;
    }
    s->cap_failures = 0;
    s->cap_next_step_ms = now_ms() + period;
    const struct qw_capacity_lease *l = &s->lease;
    if (was_set != l->set)
        qw_log_info(l->set ? "capacity.set" : "capacity.cleared",
                    "ledger=%s generation=%lld partitions=%lld partition_size=%lld "
                    "reserved=%lld cost=%s",
                    s->cfg->dlt_ledger, (long long)l->generation, (long long)l->partitions,
                    (long long)l->partition_size, (long long)l->reserved_units,
                    qw_capacity_cost_name(s->cost_kind));
    if (l->acquired || l->released) {
        int64_t in_flight, per_second, partitions;
        qw_capacity_lease_totals(l, &in_flight, &per_second, &partitions);
        qw_log_info("capacity.changed",
                    "ledger=%s partitions=%lld acquired=%d released=%d in_flight=%lld "
                    "per_second=%lld target=%lld share=%lld live=%lld",
                    s->cfg->dlt_ledger, (long long)partitions, l->acquired, l->released,
                    (long long)in_flight, (long long)per_second, (long long)s->target,
                    (long long)l->allot, (long long)l->live);
    }
    capacity_publish_stats(s);
}

/* Stopping: gives every partition back at once (others take them in their next step). */
static void capacity_release(struct submitter *s)
{
    if (!s->lease.set)
        return;
    struct qw_error err;
    qw_error_clear(&err);
    int released = 0;
    int rc = qw_db_ok(s->db) ? QW_OK : qw_db_reconnect(s->db, &err);
    if (rc == QW_OK)
        rc = qw_capacity_lease_release_all(s->db, s->w->instance_id, &released, &err);
    if (rc != QW_OK)
        qw_log_warn("capacity.release_failed", "error=%s",
                    qw_log_quote((char[300]){0}, 300, err.msg));
    else
        qw_log_info("capacity.released", "partitions=%d", released);
}

static void submitter_loop(struct submitter *s)
{
    for (;;) {
        take_jobs(s);
        int64_t t = now_ms();
        if (s->stopping && (s->posting == 0 || t >= s->grace_deadline_ms)) {
            /* POSTs are done (or out of time): abandon polls, record, hand back. */
            qw_dlt_cancel_all(s->dlt, on_transfer_done, s);
            sweep_ready(s, t);
            run_timers(s, t);
            struct qw_job *job;
            while ((job = s->timers) != NULL) {
                s->timers = job->next;
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
            capacity_release(s);
            return;
        }
        /* Write first: a written outcome may hand the job its service's next
         * batch (fast path), which dispatch() then posts at once. */
        if (flush_due(s, t))
            flush_outcomes(s);
        if (s->overflow)
            retry_overflow(s);
        t = now_ms();
        /* The lease step before any POST: with a capacity set, nothing goes
         * out before the first grant. */
        capacity_step(s, t);
        int64_t next = run_timers(s, t);
        run_probes(s, t);
        dispatch(s, t);
        publish_nodes(s);
        report_nodes(s, t);
        if (s->gate.grant.active) {
            atomic_store_explicit(&s->w->stats.capacity_target, s->target, memory_order_relaxed);
            /* Wanting more while partitions are free: the next step soon. */
            if (s->lease.free_partitions > 0 && s->cap_refused &&
                s->cap_next_step_ms > t + CAPACITY_STEP_SOON_MS)
                s->cap_next_step_ms = t + CAPACITY_STEP_SOON_MS;
        }
        int64_t probe = qw_nodes_next_probe_ms(&s->nodes);
        int64_t again = dispatch_due(s, t);
        if (probe < next)
            next = probe;
        if (again < next)
            next = again;
        if (s->cap_next_step_ms < next)
            next = s->cap_next_step_ms;
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

static void submitter_free(struct submitter *s)
{
    qw_dlt_client_free(s->dlt);
    qw_prioq_free(&s->ready);
    for (int k = 0; k < 8; k++)
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
    for (int k = 0; k < 8; k++)
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
