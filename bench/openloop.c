/* W5 figures: queuer overhead per batch under an open-loop load; see openloop.h. */
#include "openloop.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

#define ID_MAX 128     /* batch id characters */
#define SERVICE_MAX 40 /* service id characters */
#define NOT_SEEN (-1)  /* a time not (yet) observed */

/* One enqueued batch. */
struct record {
    char id[ID_MAX + 1];           /* batch id */
    char service[SERVICE_MAX + 1]; /* its service */
    int64_t enqueued_us;           /* enqueue committed, epoch us */
    int64_t post_us;               /* first POST at the ledger, NOT_SEEN if none */
    int64_t final_us;              /* first final status, NOT_SEEN if none */
};

struct qw_openloop {
    struct record *rec; /* in enqueue order */
    size_t n;           /* records */
    size_t cap;         /* capacity of rec */
    size_t *by_id;      /* indexes into rec sorted by id; built at the first feed */
};

struct qw_openloop *qw_openloop_new(void)
{
    return calloc(1, sizeof(struct qw_openloop));
}

void qw_openloop_free(struct qw_openloop *ol)
{
    if (!ol)
        return;
    free(ol->rec);
    free(ol->by_id);
    free(ol);
}

int qw_openloop_enqueued(struct qw_openloop *ol, const char *batch_id, const char *service,
                         int64_t t_us)
{
    if (ol->by_id || !batch_id || !service || strlen(batch_id) > ID_MAX ||
        strlen(service) > SERVICE_MAX)
        return QW_ERR_INVALID;
    if (ol->n == ol->cap) {
        size_t cap = ol->cap ? ol->cap * 2 : 4096;
        struct record *grown = realloc(ol->rec, cap * sizeof(*grown));
        if (!grown)
            return QW_ERR_NOMEM;
        ol->rec = grown;
        ol->cap = cap;
    }
    struct record *r = &ol->rec[ol->n++];
    strcpy(r->id, batch_id);
    strcpy(r->service, service);
    r->enqueued_us = t_us;
    r->post_us = NOT_SEEN;
    r->final_us = NOT_SEEN;
    return QW_OK;
}

/* qsort_r comparators over indexes into the record array `ctx`. */
static int cmp_by_id(const void *a, const void *b, void *ctx)
{
    const struct record *rec = ctx;
    return strcmp(rec[*(const size_t *)a].id, rec[*(const size_t *)b].id);
}

/* Service, then enqueue order (the index itself). */
static int cmp_by_service(const void *a, const void *b, void *ctx)
{
    const struct record *rec = ctx;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = strcmp(rec[x].service, rec[y].service);
    return c ? c : (x > y) - (x < y);
}

/* Indexes 0..n-1 of `ol->rec`, sorted with `cmp`; NULL when out of memory. */
static size_t *sorted_indexes(const struct qw_openloop *ol,
                              int (*cmp)(const void *, const void *, void *))
{
    size_t *idx = malloc((ol->n ? ol->n : 1) * sizeof(*idx));
    if (!idx)
        return NULL;
    for (size_t i = 0; i < ol->n; i++)
        idx[i] = i;
    if (ol->n > 0)
        qsort_r(idx, ol->n, sizeof(*idx), cmp, ol->rec);
    return idx;
}

/* The record of batch `id` (binary search over by_id), or NULL. */
static struct record *find(struct qw_openloop *ol, const char *id)
{
    if (!id)
        return NULL;
    size_t lo = 0, hi = ol->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(id, ol->rec[ol->by_id[mid]].id);
        if (c == 0)
            return &ol->rec[ol->by_id[mid]];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

int qw_openloop_feed(struct qw_openloop *ol, const struct qw_simlog_event *ev)
{
    if (!ol->by_id) {
        ol->by_id = sorted_indexes(ol, cmp_by_id);
        if (!ol->by_id)
            return QW_ERR_NOMEM;
    }
    if (ev->kind == QW_SIMLOG_POST) {
        struct record *r = find(ol, ev->batch);
        if (r && r->post_us == NOT_SEEN)
            r->post_us = ev->t_us;
    } else if (ev->kind == QW_SIMLOG_STATUS && ev->to_final && !ev->from_final) {
        struct record *r = find(ol, ev->batch);
        if (r && r->final_us == NOT_SEEN)
            r->final_us = ev->t_us;
    }
    return QW_OK;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sorts `v` and fills `d`. */
static void distribution(int64_t *v, size_t n, struct qw_openloop_dist *d)
{
    d->n = n;
    if (n == 0)
        return;
    qsort(v, n, sizeof(*v), cmp_i64);
    d->p50_us = qw_simlog_percentile(v, n, 50);
    d->p99_us = qw_simlog_percentile(v, n, 99);
    d->max_us = v[n - 1];
}

int qw_openloop_figures(struct qw_openloop *ol, int64_t warmup_us, struct qw_openloop_figures *out)
{
    memset(out, 0, sizeof(*out));
    out->enqueued = ol->n;
    if (ol->n == 0)
        return QW_OK;
    size_t *order = sorted_indexes(ol, cmp_by_service);
    int64_t *all = malloc(ol->n * sizeof(*all));
    int64_t *idle = malloc(ol->n * sizeof(*idle));
    int64_t *next = malloc(ol->n * sizeof(*next));
    if (!order || !all || !idle || !next) {
        free(order);
        free(all);
        free(idle);
        free(next);
        return QW_ERR_NOMEM;
    }
    size_t n_all = 0, n_idle = 0, n_next = 0;
    int64_t from_us = ol->rec[0].enqueued_us + warmup_us;
    for (size_t k = 0; k < ol->n; k++) {
        const struct record *r = &ol->rec[order[k]];
        const struct record *prev = NULL;
        if (k > 0 && strcmp(ol->rec[order[k - 1]].service, r->service) == 0)
            prev = &ol->rec[order[k - 1]];
        if (r->enqueued_us < from_us)
            continue;
        out->measured++;
        if (prev && prev->final_us == NOT_SEEN) {
            out->prev_not_final++;
            continue;
        }
        if (r->post_us == NOT_SEEN) {
            out->not_posted++;
            continue;
        }
        bool waited = prev && prev->final_us > r->enqueued_us;
        int64_t ready = waited ? prev->final_us : r->enqueued_us;
        int64_t us = r->post_us - ready;
        all[n_all++] = us;
        if (waited)
            next[n_next++] = us;
        else
            idle[n_idle++] = us;
    }
    distribution(all, n_all, &out->all);
    distribution(idle, n_idle, &out->idle);
    distribution(next, n_next, &out->next);
    free(order);
    free(all);
    free(idle);
    free(next);
    return QW_OK;
}
