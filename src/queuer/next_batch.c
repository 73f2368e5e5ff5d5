/* One-round serial queuing; see next_batch.h. */
#include "queuer/next_batch.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

static int cmp_i64(int64_t a, int64_t b)
{
    return (a > b) - (a < b);
}

/* Groups a service's batches together, oldest first within the service. */
static int cmp_service_order(const void *pa, const void *pb)
{
    const struct qw_serial_batch *a = *(const struct qw_serial_batch *const *)pa;
    const struct qw_serial_batch *b = *(const struct qw_serial_batch *const *)pb;
    int c = strcmp(a->service_id, b->service_id);
    if (c == 0)
        c = cmp_i64(a->created_at_us, b->created_at_us);
    if (c == 0)
        c = strcmp(a->batch_id, b->batch_id);
    if (c == 0) /* the same batch twice: keep the result independent of qsort */
        c = (a > b) - (a < b);
    return c;
}

/* Orders the chosen batches oldest first across services. */
static int cmp_chosen_order(const void *pa, const void *pb)
{
    const struct qw_serial_batch *a = *(const struct qw_serial_batch *const *)pa;
    const struct qw_serial_batch *b = *(const struct qw_serial_batch *const *)pb;
    int c = cmp_i64(a->created_at_us, b->created_at_us);
    if (c == 0)
        c = strcmp(a->batch_id, b->batch_id);
    if (c == 0)
        c = strcmp(a->service_id, b->service_id);
    return c;
}

/* True when a batch in this state means the service has a batch in flight. */
static bool blocks_service(const struct qw_serial_batch *b)
{
    if ((unsigned)b->status >= QW_STATUS_COUNT)
        return true; /* unreadable state: submit nothing for this service */
    return b->status == QW_STATUS_PENDING || b->submitted;
}

/*
 * Decides one service, whose batches are group[0..len) sorted oldest first.
 * Returns the chosen batch or NULL; updates the waiting counters in `st`.
 */
static const struct qw_serial_batch *decide_service(const struct qw_serial_batch *const *group,
                                                    size_t len, int64_t now_us,
                                                    struct qw_serial_stats *st)
{
    const struct qw_serial_batch *oldest = NULL;
    bool blocked = false;

    for (size_t i = 0; i < len; i++) {
        const struct qw_serial_batch *b = group[i];
        if ((unsigned)b->status < QW_STATUS_COUNT && qw_batch_status_is_final(b->status)) {
            st->ignored++;
            continue;
        }
        if (!oldest)
            oldest = b;
        if (blocks_service(b))
            blocked = true;
    }
    if (!oldest)
        return NULL;
    if (blocked) {
        st->blocked++;
        return NULL;
    }
    /* Not blocked: `oldest` is neither Pending nor submitted. */
    if (oldest->status == QW_STATUS_NONE)
        return oldest;
    /* UNKNOWN or DELAYED: resubmit only once its wait is over. */
    if (now_us >= oldest->retry_at_us)
        return oldest;
    st->waiting++;
    if (st->next_retry_us == 0 || oldest->retry_at_us < st->next_retry_us)
        st->next_retry_us = oldest->retry_at_us;
    return NULL;
}

int qw_serial_choose(const struct qw_serial_batch *batches, size_t n, int64_t now_us,
                     const struct qw_serial_batch **scratch, size_t *out, size_t *n_out,
                     struct qw_serial_stats *stats)
{
    struct qw_serial_stats st = {0};
    const struct qw_serial_batch **order = scratch;
    int rc = QW_OK;

    *n_out = 0;
    for (size_t i = 0; i < n; i++) {
        if (!batches[i].service_id || !batches[i].batch_id) {
            rc = QW_ERR_INVALID;
            goto out;
        }
    }
    if (n == 0)
        goto out;
    if (!order) {
        order = malloc(n * sizeof(*order));
        if (!order) {
            rc = QW_ERR_NOMEM;
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++)
        order[i] = &batches[i];
    qsort(order, n, sizeof(*order), cmp_service_order);

    /*
     * Walk the groups. The chosen batch of a group is written back to
     * order[chosen]; chosen <= the group's start, so only slots already
     * read are overwritten.
     */
    size_t chosen = 0;
    for (size_t start = 0; start < n;) {
        size_t end = start + 1;
        while (end < n && strcmp(order[end]->service_id, order[start]->service_id) == 0)
            end++;
        st.services++;
        const struct qw_serial_batch *pick =
            decide_service(order + start, end - start, now_us, &st);
        if (pick)
            order[chosen++] = pick;
        start = end;
    }
    qsort(order, chosen, sizeof(*order), cmp_chosen_order);
    for (size_t i = 0; i < chosen; i++)
        out[i] = (size_t)(order[i] - batches);
    *n_out = chosen;
    st.chosen = chosen;

out:
    if (order != scratch)
        free(order);
    if (stats)
        *stats = st;
    return rc;
}
