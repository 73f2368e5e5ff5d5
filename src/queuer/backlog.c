/* The queuer's backlog; see backlog.h. */
#include "queuer/backlog.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

void qw_waiting_free(struct qw_waiting *w, size_t n)
{
    for (size_t i = 0; w && i < n; i++)
        free(w[i].service_id);
    free(w);
}

void qw_backlog_init(struct qw_backlog *b)
{
    memset(b, 0, sizeof(*b));
}

void qw_backlog_free(struct qw_backlog *b)
{
    qw_waiting_free(b->items, b->n);
    qw_backlog_init(b);
}

size_t qw_backlog_waiting(const struct qw_backlog *b)
{
    return b->n - b->head;
}

void qw_backlog_replace(struct qw_backlog *b, struct qw_waiting *w, size_t n)
{
    qw_backlog_free(b);
    b->items = w;
    b->n = w ? n : 0;
}

int qw_backlog_add(struct qw_backlog *b, struct qw_waiting *w, size_t n)
{
    if (n == 0) {
        free(w);
        return QW_OK;
    }
    size_t keep = qw_backlog_waiting(b);
    struct qw_waiting *merged = malloc((keep + n) * sizeof(*merged));
    if (!merged)
        return QW_ERR_NOMEM;
    /* A stable merge of two lists in priority order: on equal priority the
     * entry that waited already goes first. */
    const struct qw_waiting *old = b->items + b->head;
    size_t i = 0, j = 0, k = 0;
    while (i < keep || j < n) {
        if (j == n || (i < keep && old[i].priority >= w[j].priority))
            merged[k++] = old[i++];
        else
            merged[k++] = w[j++];
    }
    for (size_t s = 0; s < b->head; s++)
        free(b->items[s].service_id);
    free(b->items);
    free(w);
    b->items = merged;
    b->n = keep + n;
    b->head = 0;
    return QW_OK;
}

const char *qw_backlog_next(struct qw_backlog *b)
{
    return b->head < b->n ? b->items[b->head++].service_id : NULL;
}
