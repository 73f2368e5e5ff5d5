/* Benchmark figures from a scabbard-sim event log; see simlog.h. */
#include "simlog.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

/* What we remember about one service between its events. */
struct service_slot {
    char *key;          /* "circuit::service", owned; NULL = empty slot */
    char *final_batch;  /* id of the batch that became final last, owned */
    int64_t final_us;   /* when it became final */
    bool awaiting_next; /* a final batch whose successor has not been posted yet */
};

struct qw_simlog {
    struct service_slot *slots; /* open-addressing table, `cap` slots */
    size_t cap;                 /* power of two */
    size_t used;                /* occupied slots */
    int64_t *samples;           /* turnaround samples, microseconds */
    size_t n_samples;           /* samples stored */
    size_t cap_samples;         /* capacity of `samples` */
    struct qw_simlog_figures f; /* counters filled while feeding */
};

/* FNV-1a, 64 bit. */
static uint64_t hash_key(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static struct service_slot *probe(struct service_slot *slots, size_t cap, const char *key)
{
    size_t i = (size_t)hash_key(key) & (cap - 1);
    while (slots[i].key && strcmp(slots[i].key, key) != 0)
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static int grow(struct qw_simlog *log)
{
    size_t cap = log->cap ? log->cap * 2 : 1024;
    struct service_slot *slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return QW_ERR_NOMEM;
    for (size_t i = 0; i < log->cap; i++) {
        if (log->slots[i].key)
            *probe(slots, cap, log->slots[i].key) = log->slots[i];
    }
    free(log->slots);
    log->slots = slots;
    log->cap = cap;
    return QW_OK;
}

/* Finds or inserts the slot of `key`; NULL when out of memory. */
static struct service_slot *service(struct qw_simlog *log, const char *key)
{
    if ((log->used + 1) * 2 > log->cap && grow(log) != QW_OK)
        return NULL;
    struct service_slot *s = probe(log->slots, log->cap, key);
    if (!s->key) {
        s->key = strdup(key);
        if (!s->key)
            return NULL;
        log->used++;
    }
    return s;
}

static int add_sample(struct qw_simlog *log, int64_t us)
{
    if (log->n_samples == log->cap_samples) {
        size_t cap = log->cap_samples ? log->cap_samples * 2 : 4096;
        int64_t *p = realloc(log->samples, cap * sizeof(*p));
        if (!p)
            return QW_ERR_NOMEM;
        log->samples = p;
        log->cap_samples = cap;
    }
    log->samples[log->n_samples++] = us;
    return QW_OK;
}

struct qw_simlog *qw_simlog_new(void)
{
    return calloc(1, sizeof(struct qw_simlog));
}

void qw_simlog_free(struct qw_simlog *log)
{
    if (!log)
        return;
    for (size_t i = 0; i < log->cap; i++) {
        free(log->slots[i].key);
        free(log->slots[i].final_batch);
    }
    free(log->slots);
    free(log->samples);
    free(log);
}

static int feed_post(struct qw_simlog *log, const struct qw_simlog_event *ev)
{
    if (!ev->service || !ev->batch)
        return QW_ERR_INVALID;
    struct service_slot *s = service(log, ev->service);
    if (!s)
        return QW_ERR_NOMEM;
    log->f.posts++;
    if (ev->code == 202)
        log->f.posts_202++;
    else if (ev->code == 429)
        log->f.posts_429++;
    else
        log->f.posts_other++;
    if (log->f.posts == 1)
        log->f.first_post_us = ev->t_us;
    /* A resubmission of the batch that just became final is not its successor. */
    if (s->awaiting_next && strcmp(s->final_batch, ev->batch) != 0) {
        if (add_sample(log, ev->t_us - s->final_us) != QW_OK)
            return QW_ERR_NOMEM;
        s->awaiting_next = false;
    }
    return QW_OK;
}

static int feed_status(struct qw_simlog *log, const struct qw_simlog_event *ev)
{
    if (!ev->service || !ev->batch)
        return QW_ERR_INVALID;
    /* Pending -> Valid -> Committed: only the first final status ends a turn. */
    if (!ev->to_final || ev->from_final)
        return QW_OK;
    struct service_slot *s = service(log, ev->service);
    if (!s)
        return QW_ERR_NOMEM;
    char *id = strdup(ev->batch);
    if (!id)
        return QW_ERR_NOMEM;
    free(s->final_batch);
    s->final_batch = id;
    s->final_us = ev->t_us;
    s->awaiting_next = true;
    log->f.batches_final++;
    log->f.last_final_us = ev->t_us;
    return QW_OK;
}

int qw_simlog_feed(struct qw_simlog *log, const struct qw_simlog_event *ev)
{
    switch (ev->kind) {
    case QW_SIMLOG_POST:
        return feed_post(log, ev);
    case QW_SIMLOG_GET:
        log->f.gets++;
        return QW_OK;
    case QW_SIMLOG_STATUS:
        return feed_status(log, ev);
    case QW_SIMLOG_OTHER:
        break;
    }
    return QW_OK;
}

uint64_t qw_simlog_batches_final(const struct qw_simlog *log)
{
    return log->f.batches_final;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int64_t qw_simlog_percentile(const int64_t *sorted, size_t n, double p)
{
    if (n == 0)
        return 0;
    if (p > 100.0)
        p = 100.0;
    /* rank = ceil(p * n / 100), with a little slack so 99 * 100 / 100 is 99, not 100 */
    double x = p * (double)n / 100.0;
    size_t rank = (size_t)x;
    if ((double)rank < x - 1e-9)
        rank++;
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return sorted[rank - 1];
}

void qw_simlog_figures(struct qw_simlog *log, struct qw_simlog_figures *out)
{
    *out = log->f;
    if (out->batches_final > 0 && out->posts > 0)
        out->span_s = (double)(out->last_final_us - out->first_post_us) / 1e6;
    if (out->span_s > 0)
        out->batches_per_s = (double)out->batches_final / out->span_s;
    if (out->batches_final > 0)
        out->requests_per_batch = (double)(out->posts + out->gets) / (double)out->batches_final;
    if (log->n_samples > 0) /* qsort's base may not be NULL, even for 0 items */
        qsort(log->samples, log->n_samples, sizeof(*log->samples), cmp_i64);
    out->turnarounds = log->n_samples;
    out->turnaround_p50_us = qw_simlog_percentile(log->samples, log->n_samples, 50);
    out->turnaround_p99_us = qw_simlog_percentile(log->samples, log->n_samples, 99);
    out->turnaround_max_us = log->n_samples ? log->samples[log->n_samples - 1] : 0;
    double sum = 0;
    for (size_t i = 0; i < log->n_samples; i++)
        sum += (double)log->samples[i];
    out->turnaround_mean_us = log->n_samples ? sum / (double)log->n_samples : 0;
}
