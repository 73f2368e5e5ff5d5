/* Fixed-bucket atomic histogram; see histogram.h. */
#include "common/histogram.h"

#include <string.h>

const int64_t qw_histogram_bounds_us[QW_HISTOGRAM_BOUNDS] = {
    500,    1000,   2500,    5000,    10000,   25000,    50000,    100000,
    250000, 500000, 1000000, 2500000, 5000000, 10000000, 30000000,
};

int qw_histogram_bucket(int64_t us)
{
    int lo = 0, hi = QW_HISTOGRAM_BOUNDS; /* answer in [lo, hi] */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (us <= qw_histogram_bounds_us[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void qw_histogram_observe_us(struct qw_histogram *h, int64_t us)
{
    if (us < 0)
        us = 0;
    atomic_fetch_add_explicit(&h->buckets[qw_histogram_bucket(us)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, (long long)us, memory_order_relaxed);
}

void qw_histogram_read(const struct qw_histogram *h, struct qw_histogram_snapshot *out)
{
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < QW_HISTOGRAM_BUCKETS; i++) {
        /* C11 declares atomic_load without const; reading does not modify h. */
        out->buckets[i] =
            atomic_load_explicit((atomic_llong *)&h->buckets[i], memory_order_relaxed);
        out->count += out->buckets[i];
    }
    out->sum_us = atomic_load_explicit((atomic_llong *)&h->sum_us, memory_order_relaxed);
}
