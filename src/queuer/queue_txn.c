/* The queue transaction: fetch, adopt, choose, mark; see queue_txn.h. */
#include "queuer/queue_txn.h"
#include "queuer/next_batch.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One fetched row, with its strings owned by the fetch result. */
struct fetched {
    const char *service_id; /* from the result */
    int64_t epoch;          /* claim epoch */
    int attempts;           /* attempts so far */
    bool draining;          /* the service is being drained (no new work) */
    int priority;           /* the batch's priority */
};

/* The transaction's argument: inputs, outputs and buffers. */
struct queue_txn {
    const struct qw_queue_params *p; /* inputs */
    struct qw_queue_result *out;     /* collected, reset on every attempt */
    struct qw_queue_bufs *bufs;      /* reusable parameter builders */
};

static void free_job_list(struct qw_job *list)
{
    while (list) {
        struct qw_job *next = list->next;
        qw_job_free(list);
        list = next;
    }
}

void qw_queue_result_free(struct qw_queue_result *r)
{
    free_job_list(r->jobs);
    qw_waiting_free(r->overflow, r->n_overflow);
    r->jobs = NULL;
    r->n_jobs = 0;
    r->overflow = NULL;
    r->n_overflow = 0;
    r->next_retry_us = 0;
    r->n_delayed = 0;
}

void qw_queue_bufs_init(struct qw_queue_bufs *b)
{
    for (int i = 0; i < 4; i++)
        qw_pgarray_init(&b->arr[i]);
}

void qw_queue_bufs_free(struct qw_queue_bufs *b)
{
    for (int i = 0; i < 4; i++)
        qw_pgarray_free(&b->arr[i]);
}

static struct qw_job *new_job(enum qw_job_kind kind, const char *service_id, const char *batch_id,
                              int64_t epoch, int attempts, int priority)
{
    struct qw_job *job = qw_job_new();
    if (!job)
        return NULL;
    job->kind = kind;
    snprintf(job->service_id, sizeof(job->service_id), "%s", service_id);
    snprintf(job->batch_id, sizeof(job->batch_id), "%s", batch_id);
    job->epoch = epoch;
    job->attempts = attempts;
    job->priority = priority;
    job->avoid_node = -1;
    return job;
}

/* One chosen batch while ordering them by priority. */
struct ranked {
    size_t idx; /* its input row */
    int priority;
    size_t pos; /* its place in the serial choice (keeps that order among equals) */
};

static int by_priority_desc(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/*
 * Orders the chosen batches by priority, highest first (the serial
 * choice's order among equals), so that when there is room for only some,
 * higher priorities are handed over first and the rest wait in that order.
 * Returns QW_ERR_NOMEM when it cannot sort (the order is then unchanged).
 */
static int rank_by_priority(const struct fetched *meta, size_t *chosen, size_t n)
{
    bool mixed = false;
    for (size_t i = 1; i < n && !mixed; i++)
        mixed = meta[chosen[i]].priority != meta[chosen[0]].priority;
    if (!mixed)
        return QW_OK;
    struct ranked *r = malloc(n * sizeof(*r));
    if (!r)
        return QW_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        r[i] = (struct ranked){chosen[i], meta[chosen[i]].priority, i};
    qsort(r, n, sizeof(*r), by_priority_desc);
    for (size_t i = 0; i < n; i++)
        chosen[i] = r[i].idx;
    free(r);
    return QW_OK;
}

/*
 * The service's entry if we hold it at `epoch` and no job of it is out.
 * A draining service is usable too: it takes no new batch (see
 * keep_for_draining()), but a batch of it in flight is followed and a
 * Delayed or Unknown batch is retried when due. Skipping those left such
 * services with nobody to retry them until the surplus was released.
 */
static struct qw_svc *usable(struct qw_svcmap *svcs, const char *service_id, int64_t epoch)
{
    struct qw_svc *s = qw_svcmap_get(svcs, service_id);
    if (!s || !s->held || s->busy || s->epoch != epoch)
        return NULL;
    return s;
}

/*
 * Drops from `chosen` the first submissions of draining services: a
 * draining service finishes the turn of the batch it started (a retry of a
 * Delayed or Unknown batch) but starts no new one, so it goes idle and is
 * released. Returns the new count; the order is kept.
 */
static size_t keep_for_draining(const struct qw_serial_batch *in, const struct fetched *meta,
                                size_t *chosen, size_t n_chosen)
{
    size_t k = 0;
    for (size_t i = 0; i < n_chosen; i++) {
        size_t c = chosen[i];
        if (meta[c].draining && in[c].status == QW_STATUS_NONE)
            continue;
        chosen[k++] = c;
    }
    return k;
}

/* Adds a SUBMIT job to `t` for every row of a mark (batch, service, epoch, attempts, payload,
 * priority). */
static int jobs_from_marked(const struct qw_db_res *marked, struct qw_queue_result *t,
                            struct qw_error *err)
{
    for (int i = 0; i < qw_db_res_rows(marked); i++) {
        struct qw_job *job =
            new_job(QW_JOB_SUBMIT, qw_db_res_get(marked, i, 1), qw_db_res_get(marked, i, 0),
                    qw_db_res_int(marked, i, 2), (int)qw_db_res_int(marked, i, 3),
                    (int)qw_db_res_int(marked, i, 5));
        if (job && qw_job_set_payload_hex(job, qw_db_res_get(marked, i, 4)) != QW_OK)
            job->payload_len = 0;
        if (!job || job->payload_len == 0) {
            qw_job_free(job);
            return qw_error_set(err, QW_ERR_NOMEM, "cannot decode a payload");
        }
        job->next = t->jobs;
        t->jobs = job;
        t->n_jobs++;
    }
    return QW_OK;
}

/* Adds one batch to the mark's array parameters (batch, service, epoch, status seen). */
static void add_to_mark(struct qw_pgarray *arr, const char *batch_id, const char *service_id,
                        int64_t epoch, const char *seen)
{
    qw_pgarray_text(&arr[0], batch_id);
    qw_pgarray_text(&arr[1], service_id);
    qw_pgarray_int(&arr[2], epoch);
    qw_pgarray_text(&arr[3], seen);
}

/*
 * Marks the `n` batches in the mark's array parameters, as the
 * transaction's last statement (COMMIT goes with it), and adds a job for
 * each batch marked.
 */
static int mark_and_collect(struct qw_db *db, struct queue_txn *txn, size_t n, struct qw_error *err)
{
    struct qw_pgarray *arr = txn->bufs->arr;
    const char *mark[6] = {txn->p->instance_id,        qw_pgarray_finish(&arr[0]),
                           qw_pgarray_finish(&arr[1]), qw_pgarray_finish(&arr[2]),
                           qw_pgarray_finish(&arr[3]), txn->p->incarnation};
    if (!mark[1] || !mark[2] || !mark[3] || !mark[4])
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    struct qw_db_res *marked = NULL;
    txn->bufs->mark_sent = true;
    int rc = qw_txn_query_commit(db, "batches_mark", 6, mark, &marked, err);
    if (rc != QW_OK)
        return rc;
    txn->out->mark_short = (size_t)qw_db_res_rows(marked) < n;
    rc = jobs_from_marked(marked, txn->out, err);
    qw_db_res_free(marked);
    return rc;
}

/*
 * The batches named by wake-ups, marked without a fetch: each is its
 * service's first submission of a new batch, so a draining service's is
 * left out (as keep_for_draining() does), and so is a service we no
 * longer hold at the wake-up's epoch or whose job is out. The mark leaves
 * out a batch that is not its service's next; the caller fetches those.
 */
static int mark_named(struct qw_db *db, struct queue_txn *txn, struct qw_error *err)
{
    const struct qw_queue_params *p = txn->p;
    struct qw_pgarray *arr = txn->bufs->arr;
    for (int i = 0; i < 4; i++)
        qw_pgarray_reset(&arr[i]);
    size_t n = 0;
    for (size_t i = 0; i < p->n_named; i++) {
        const struct qw_queue_named *b = &p->named[i];
        const struct qw_svc *s = usable(p->svcs, b->service_id, b->epoch);
        if (!s || s->draining)
            continue;
        add_to_mark(arr, b->batch_id, b->service_id, b->epoch, "");
        n++;
    }
    return n > 0 ? mark_and_collect(db, txn, n, err) : QW_OK;
}

static int queue_body(void *conn, void *arg, struct qw_error *err)
{
    struct qw_db *db = conn;
    struct queue_txn *txn = arg;
    const struct qw_queue_params *p = txn->p;
    struct qw_queue_result *t = txn->out;
    /* Re-run from scratch on every attempt. */
    qw_queue_result_free(t);
    txn->bufs->mark_sent = false;
    if (p->named)
        return mark_named(db, txn, err);

    const char *params[] = {p->instance_id, p->filter};
    struct qw_db_res *res = NULL;
    int rc = p->filter ? qw_db_query(db, "batches_fetch_some", 2, params, &res, err)
                       : qw_db_query(db, "batches_fetch", 1, params, &res, err);
    if (rc != QW_OK)
        return rc;
    int n = qw_db_res_rows(res);
    struct qw_serial_batch *in = calloc((size_t)n + 1, sizeof(*in));
    struct fetched *meta = calloc((size_t)n + 1, sizeof(*meta));
    size_t *chosen = calloc((size_t)n + 1, sizeof(*chosen));
    if (!in || !meta || !chosen) {
        rc = qw_error_set(err, QW_ERR_NOMEM, "out of memory");
        goto out;
    }
    size_t m = 0;
    for (int i = 0; i < n; i++) {
        const char *svc = qw_db_res_get(res, i, 0);
        int64_t epoch = qw_db_res_int(res, i, 1);
        const struct qw_svc *held = usable(p->svcs, svc, epoch);
        if (!held)
            continue;
        enum qw_batch_status status;
        if (qw_batch_status_parse(qw_db_res_get(res, i, 5), &status) != 0)
            status = (enum qw_batch_status)99; /* blocks the service */
        if (status == QW_STATUS_DELAYED)
            t->n_delayed++;
        in[m] = (struct qw_serial_batch){
            .service_id = svc,
            .batch_id = qw_db_res_get(res, i, 2),
            .created_at_us = qw_db_res_int(res, i, 3),
            .submitted = qw_db_res_get(res, i, 4)[0] == 't',
            .status = status,
            .retry_at_us = qw_db_res_int(res, i, 6),
        };
        meta[m] = (struct fetched){svc, epoch, (int)qw_db_res_int(res, i, 7), held->draining,
                                   (int)qw_db_res_int(res, i, 9)};
        m++;
        t->db_now_us = qw_db_res_int(res, i, 8);
    }

    /* Batches in flight that no job of ours follows: adopt them. */
    long room = (long)p->max_in_flight - (long)p->svcs->busy;
    for (size_t i = 0; i < m && room > 0; i++) {
        bool in_flight = (in[i].submitted && in[i].status == QW_STATUS_NONE) ||
                         in[i].status == QW_STATUS_PENDING;
        if (!in_flight)
            continue;
        struct qw_job *job = new_job(QW_JOB_ADOPT, in[i].service_id, in[i].batch_id, meta[i].epoch,
                                     meta[i].attempts, meta[i].priority);
        if (!job) {
            rc = qw_error_set(err, QW_ERR_NOMEM, "out of memory");
            goto out;
        }
        job->adopted_submitting = in[i].submitted && in[i].status == QW_STATUS_NONE;
        job->next = t->jobs;
        t->jobs = job;
        t->n_jobs++;
        room--;
    }

    size_t n_chosen = 0;
    struct qw_serial_stats stats;
    rc = qw_serial_choose(in, m, t->db_now_us, NULL, chosen, &n_chosen, &stats);
    if (rc != QW_OK) {
        rc = qw_error_set(err, rc, "serial queuing failed");
        goto out;
    }
    t->next_retry_us = stats.next_retry_us;
    n_chosen = keep_for_draining(in, meta, chosen, n_chosen);
    if (rank_by_priority(meta, chosen, n_chosen) != QW_OK) {
        rc = qw_error_set(err, QW_ERR_NOMEM, "out of memory");
        goto out;
    }
    size_t fit = (size_t)(room > 0 ? room : 0);
    if (n_chosen > fit) {
        /* No room for all: remember the rest, to start as jobs come back. */
        t->overflow = calloc(n_chosen - fit, sizeof(*t->overflow));
        for (size_t i = fit; t->overflow && i < n_chosen; i++) {
            struct qw_waiting *w = &t->overflow[t->n_overflow];
            w->service_id = strdup(in[chosen[i]].service_id);
            w->priority = meta[chosen[i]].priority;
            if (w->service_id)
                t->n_overflow++;
        }
        n_chosen = fit;
    }
    if (n_chosen == 0)
        goto out;

    struct qw_pgarray *arr = txn->bufs->arr;
    for (int i = 0; i < 4; i++)
        qw_pgarray_reset(&arr[i]);
    for (size_t i = 0; i < n_chosen; i++) {
        const struct qw_serial_batch *b = &in[chosen[i]];
        add_to_mark(arr, b->batch_id, b->service_id, meta[chosen[i]].epoch,
                    qw_batch_status_name(b->status));
    }
    rc = mark_and_collect(db, txn, n_chosen, err);
out:
    free(in);
    free(meta);
    free(chosen);
    qw_db_res_free(res);
    return rc;
}

int qw_queue_recheck_marks(struct qw_db *db, const char *instance_id, const char *incarnation,
                           const struct qw_queue_bufs *bufs, struct qw_queue_result *out,
                           struct qw_error *err)
{
    memset(out, 0, sizeof(*out));
    const char *params[5] = {instance_id, bufs->arr[0].buf, bufs->arr[1].buf, bufs->arr[2].buf,
                             incarnation};
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "batches_marked", 5, params, &res, err);
    if (rc == QW_OK)
        rc = jobs_from_marked(res, out, err);
    qw_db_res_free(res);
    if (rc != QW_OK)
        qw_queue_result_free(out);
    return rc;
}

int qw_queue_txn_run(struct qw_db *db, const struct qw_txn_policy *policy,
                     const struct qw_queue_params *p, struct qw_queue_bufs *bufs,
                     struct qw_queue_result *out, struct qw_error *err)
{
    memset(out, 0, sizeof(*out));
    struct queue_txn txn = {.p = p, .out = out, .bufs = bufs};
    int rc = qw_txn_run(&qw_txn_db_ops, db, policy, queue_body, &txn, &out->stats, err);
    if (rc != QW_OK) {
        struct qw_txn_stats st = out->stats;
        qw_queue_result_free(out);
        out->stats = st;
    }
    return rc;
}
