/* The claims decisions; see claims_plan.h. */
#include "queuer/claims_plan.h"

#include "common/err.h"
#include "common/number.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool qw_claims_count_unreported(size_t held, size_t reported_held, int slack)
{
    size_t moved = held > reported_held ? held - reported_held : reported_held - held;
    return moved > (size_t)(slack > 0 ? slack : 0);
}

void qw_claims_plan_cycle(const struct qw_claims_state *s, struct qw_claims_plan *out)
{
    bool first = s->lease_deadline_ms == 0;
    bool lapsed = s->now_ms >= s->lease_deadline_ms;
    int every = s->listen ? QW_CLAIMS_RECONCILE_EVERY : 1;
    out->reconcile = first || lapsed || s->reconcile_asked || s->cycles_since_reconcile >= every;
    out->housekeeping =
        s->woken || s->periodic_housekeeping || s->share == 0 || s->free_with_work > 0;
    out->renew = lapsed || s->now_ms - s->lease_renewed_ms >= s->cycle_ms / 2 ||
                 qw_claims_count_unreported(s->held, s->reported_held, s->slack);
    /* Surplus goes back by the names in our map: not while the map may be
     * wrong. A routine read of every claim (a polling worker's, every cycle;
     * the safety net's) does not make it so. */
    out->may_release = !first && !lapsed && !s->reconcile_asked && s->now_ms >= s->settle_until_ms;
}

bool qw_claims_txn_due(bool acquire, int64_t free_with_work)
{
    return acquire && free_with_work > 0;
}

bool qw_claims_pickup_again(bool picker, int picked, int acquired, int step)
{
    return picker && picked >= step && picked > acquired;
}

bool qw_claims_release_idle_due(size_t held, int share, int64_t free_with_work,
                                int64_t room_elsewhere)
{
    return free_with_work > room_elsewhere && share > 0 && held >= (size_t)share;
}

static int by_service_id_desc(const void *a, const void *b)
{
    const struct qw_claims_held *x = a, *y = b;
    return strcmp(y->service_id, x->service_id);
}

size_t qw_claims_mark_surplus(struct qw_claims_held *held, size_t n, size_t share)
{
    size_t idle = 0;
    if (n > 1)
        qsort(held, n, sizeof(*held), by_service_id_desc);
    for (size_t i = 0; i < n; i++) {
        held[i].draining = n > share && i < n - share;
        idle += held[i].draining && !held[i].busy;
    }
    return idle;
}

int qw_claims_parse_item(const char *payload, struct qw_wakeup_item *out, const char **next)
{
    const char *end = strchr(payload, ' ');
    size_t item_len = end ? (size_t)(end - payload) : strlen(payload);
    *next = end ? end + 1 : NULL;
    const char *slash = memchr(payload, '/', item_len);
    size_t head_len = slash ? (size_t)(slash - payload) : item_len;
    const char *colon = memrchr(payload, ':', head_len);
    /* (a service id ends in a letter or digit: "a::b" has no epoch) */
    if (!colon || colon == payload || colon[-1] == ':' ||
        (size_t)(colon - payload) >= sizeof(out->service))
        return QW_ERR_INVALID;
    char digits[24];
    size_t n = head_len - (size_t)(colon - payload) - 1;
    if (n == 0 || n >= sizeof(digits))
        return QW_ERR_INVALID;
    memcpy(digits, colon + 1, n);
    digits[n] = '\0';
    long e;
    if (qw_number_parse("epoch", digits, 0, LONG_MAX, &e, NULL, 0) != QW_OK)
        return QW_ERR_INVALID;
    size_t batch_len = slash ? item_len - head_len - 1 : 0;
    if (slash &&
        (batch_len != QW_BATCH_ID_LEN || strspn(slash + 1, "0123456789abcdef") < QW_BATCH_ID_LEN))
        return QW_ERR_INVALID;
    memcpy(out->service, payload, (size_t)(colon - payload));
    out->service[colon - payload] = '\0';
    out->epoch = e;
    memcpy(out->batch, slash ? slash + 1 : "", batch_len);
    out->batch[batch_len] = '\0';
    return QW_OK;
}
