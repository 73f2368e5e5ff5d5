/* The submitter's ready queue: priority with aging, round-robin within a priority; see prioq.h. */
#include "submitter/prioq.h"

#include <stdlib.h>
#include <string.h>

void qw_prioq_init(struct qw_prioq *q, int64_t aging_ms)
{
    memset(q, 0, sizeof(*q));
    q->aging_ms = aging_ms >= 1 ? aging_ms : 1;
}

void qw_prioq_free(struct qw_prioq *q)
{
    free(q->levels);
    q->levels = NULL;
    q->n_levels = q->cap_levels = q->n = 0;
}

int64_t qw_prioq_rank(int priority, int64_t waited_ms, int64_t aging_ms)
{
    return (int64_t)priority * aging_ms + (waited_ms > 0 ? waited_ms : 0);
}

/* Index of the level of `priority`, or where it would be inserted (*found false). */
static size_t level_find(const struct qw_prioq *q, int priority, bool *found)
{
    size_t lo = 0, hi = q->n_levels;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int p = q->levels[mid].priority;
        if (p == priority) {
            *found = true;
            return mid;
        }
        if (p > priority)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

/* The level of `priority`, created (empty) when missing; NULL when out of memory. */
static struct qw_prioq_level *level_get(struct qw_prioq *q, int priority)
{
    bool found;
    size_t i = level_find(q, priority, &found);
    if (found)
        return &q->levels[i];
    if (q->n_levels == q->cap_levels) {
        size_t cap = q->cap_levels ? q->cap_levels * 2 : 4;
        struct qw_prioq_level *grown = realloc(q->levels, cap * sizeof(*grown));
        if (!grown)
            return NULL;
        q->levels = grown;
        q->cap_levels = cap;
    }
    memmove(&q->levels[i + 1], &q->levels[i], (q->n_levels - i) * sizeof(*q->levels));
    q->levels[i] = (struct qw_prioq_level){.priority = priority};
    q->n_levels++;
    return &q->levels[i];
}

static void level_drop_if_empty(struct qw_prioq *q, struct qw_prioq_level *lv)
{
    if (lv->n > 0)
        return;
    size_t i = (size_t)(lv - q->levels);
    memmove(&q->levels[i], &q->levels[i + 1], (q->n_levels - i - 1) * sizeof(*q->levels));
    q->n_levels--;
}

int qw_prioq_push(struct qw_prioq *q, struct qw_prioq_item *it, int priority, int64_t now_ms)
{
    struct qw_prioq_level *lv = level_get(q, priority);
    if (!lv)
        return -1;
    it->priority = priority;
    it->since_ms = now_ms;
    it->seq = q->seq++;
    it->next = NULL;
    it->prev = lv->tail;
    if (lv->tail)
        lv->tail->next = it;
    else
        lv->head = it;
    lv->tail = it;
    lv->n++;
    q->n++;
    it->queued = true;
    return 0;
}

int qw_prioq_push_again(struct qw_prioq *q, struct qw_prioq_item *it)
{
    struct qw_prioq_level *lv = level_get(q, it->priority);
    if (!lv)
        return -1;
    it->prev = NULL;
    it->next = lv->head;
    if (lv->head)
        lv->head->prev = it;
    else
        lv->tail = it;
    lv->head = it;
    lv->n++;
    q->n++;
    it->queued = true;
    return 0;
}

/* The level whose head leaves next at `now_ms`, or NULL when empty. */
static struct qw_prioq_level *best_level(const struct qw_prioq *q, int64_t now_ms)
{
    struct qw_prioq_level *best = NULL;
    int64_t best_rank = 0;
    for (size_t i = 0; i < q->n_levels; i++) {
        struct qw_prioq_level *lv = &q->levels[i];
        const struct qw_prioq_item *h = lv->head;
        int64_t rank = qw_prioq_rank(h->priority, now_ms - h->since_ms, q->aging_ms);
        if (!best || rank > best_rank ||
            (rank == best_rank &&
             (h->since_ms < best->head->since_ms ||
              (h->since_ms == best->head->since_ms && h->seq < best->head->seq)))) {
            best = lv;
            best_rank = rank;
        }
    }
    return best;
}

struct qw_prioq_item *qw_prioq_peek(const struct qw_prioq *q, int64_t now_ms)
{
    struct qw_prioq_level *lv = best_level(q, now_ms);
    return lv ? lv->head : NULL;
}

void qw_prioq_remove(struct qw_prioq *q, struct qw_prioq_item *it)
{
    if (!it->queued)
        return;
    bool found;
    size_t i = level_find(q, it->priority, &found);
    if (!found)
        return; /* cannot happen: a queued entry's level exists */
    struct qw_prioq_level *lv = &q->levels[i];
    if (it->prev)
        it->prev->next = it->next;
    else
        lv->head = it->next;
    if (it->next)
        it->next->prev = it->prev;
    else
        lv->tail = it->prev;
    it->prev = it->next = NULL;
    it->queued = false;
    lv->n--;
    q->n--;
    level_drop_if_empty(q, lv);
}

struct qw_prioq_item *qw_prioq_pop(struct qw_prioq *q, int64_t now_ms)
{
    struct qw_prioq_item *it = qw_prioq_peek(q, now_ms);
    if (it)
        qw_prioq_remove(q, it);
    return it;
}

size_t qw_prioq_len(const struct qw_prioq *q)
{
    return q->n;
}

struct qw_prioq_item *qw_prioq_first(const struct qw_prioq *q)
{
    return q->n_levels > 0 ? q->levels[0].head : NULL;
}

struct qw_prioq_item *qw_prioq_next(const struct qw_prioq *q, const struct qw_prioq_item *it)
{
    if (it->next)
        return it->next;
    bool found;
    size_t i = level_find(q, it->priority, &found);
    size_t next = found ? i + 1 : i;
    return next < q->n_levels ? q->levels[next].head : NULL;
}
