/*
 * A fixed-bucket latency histogram with atomic counters, for durations the
 * worker threads measure (claims cycle, ledger POST) and /metrics reports.
 *
 * Every histogram uses the same bucket bounds (qw_histogram_bounds_us:
 * 0.5 ms .. 30 s, plus +Inf), so a zero-filled struct is a valid empty
 * histogram and no set-up is needed. Observing is wait-free: one relaxed
 * fetch-add on a bucket and one on the sum. Reading takes a snapshot that
 * may straddle concurrent observations by a few counts; the snapshot's
 * count is the sum of its buckets, so it is always self-consistent, as
 * Prometheus requires.
 */
#ifndef QW_COMMON_HISTOGRAM_H
#define QW_COMMON_HISTOGRAM_H

#include <stdatomic.h>
#include <stdint.h>

#define QW_HISTOGRAM_BOUNDS 15                         /* finite upper bounds */
#define QW_HISTOGRAM_BUCKETS (QW_HISTOGRAM_BOUNDS + 1) /* plus +Inf */

/** Upper bounds (inclusive) of the finite buckets, microseconds, ascending. */
extern const int64_t qw_histogram_bounds_us[QW_HISTOGRAM_BOUNDS];

struct qw_histogram {
    atomic_llong buckets[QW_HISTOGRAM_BUCKETS]; /* observations per bucket (not cumulative) */
    atomic_llong sum_us;                        /* sum of observed values, microseconds */
};

/** A plain copy of a histogram at one moment. */
struct qw_histogram_snapshot {
    int64_t buckets[QW_HISTOGRAM_BUCKETS]; /* observations per bucket (not cumulative) */
    int64_t count;                         /* sum of buckets */
    int64_t sum_us;                        /* sum of observed values, microseconds */
};

/**
 * Records one duration of `us` microseconds (negative counts as 0).
 * Thread-safe and wait-free; any number of threads may observe at once.
 */
void qw_histogram_observe_us(struct qw_histogram *h, int64_t us);

/** Copies `h` into `out`. Thread-safe against concurrent observers. */
void qw_histogram_read(const struct qw_histogram *h, struct qw_histogram_snapshot *out);

/** Index of the bucket `us` falls in (0..QW_HISTOGRAM_BOUNDS). Pure. */
int qw_histogram_bucket(int64_t us);

#endif
