/*
 * Figures of the open-loop workload W5: the queuer's own overhead per
 * batch, from the moment a batch could go to the ledger to its first POST.
 * Pure logic: the caller feeds the load generator's enqueue records, then
 * the scabbard-sim events in log order; no I/O, no clock reads.
 *
 * A batch b of service s could go at
 *   ready(b) = max(enqueued(b), final(prev))
 * where enqueued(b) is when its enqueue transaction committed (as the
 * generator saw it) and prev is the batch of s enqueued just before b
 * (final(prev) is when the ledger made prev final). Its overhead is
 * post(b) - ready(b), post(b) being the ledger's time of b's first POST.
 * Two kinds, reported apart and together:
 *   - "next":  prev became final after b was enqueued, so b waited in the
 *              queue for its turn: ledger commit of k -> POST of k+1;
 *   - "idle":  b arrived at a service with nothing in flight (no prev, or
 *              prev already final): enqueue -> POST at the head of an idle
 *              service.
 * Batches enqueued before `warmup_us` after the first enqueue are left out
 * (workers are still claiming services then), and so are batches whose
 * prev never became final or that were never posted (counted apart).
 *
 * Thread-safety: a struct qw_openloop is owned by one thread at a time.
 */
#ifndef QW_BENCH_OPENLOOP_H
#define QW_BENCH_OPENLOOP_H

#include "simlog.h"

#include <stddef.h>
#include <stdint.h>

/** Percentiles of one kind of overhead, microseconds. */
struct qw_openloop_dist {
    uint64_t n;     /* samples */
    int64_t p50_us; /* median, nearest rank */
    int64_t p99_us; /* 99th percentile, nearest rank */
    int64_t max_us; /* largest sample */
};

/** W5 figures. */
struct qw_openloop_figures {
    uint64_t enqueued;           /* enqueue records fed */
    uint64_t measured;           /* batches in the figures (after the warm-up) */
    uint64_t not_posted;         /* measured-window batches never posted */
    uint64_t prev_not_final;     /* measured-window batches whose predecessor never ended */
    struct qw_openloop_dist all; /* every measured batch */
    struct qw_openloop_dist idle;
    struct qw_openloop_dist next;
};

struct qw_openloop;

/** Creates an empty accumulator; NULL when out of memory. Free with qw_openloop_free(). */
struct qw_openloop *qw_openloop_new(void);

/** Frees `ol`; NULL is a no-op. */
void qw_openloop_free(struct qw_openloop *ol);

/**
 * Records that `batch_id` of `service` was enqueued at `t_us` (epoch
 * microseconds). Records must come in enqueue order, all before the first
 * qw_openloop_feed(). Returns QW_OK, QW_ERR_INVALID (an id or service too
 * long or missing, or feeding already started) or QW_ERR_NOMEM.
 */
int qw_openloop_enqueued(struct qw_openloop *ol, const char *batch_id, const char *service,
                         int64_t t_us);

/**
 * Feeds one simulator event in log order: a POST sets a known batch's
 * first POST time, a first final status its final time; other events and
 * unknown batches are ignored. Returns QW_OK or QW_ERR_NOMEM.
 */
int qw_openloop_feed(struct qw_openloop *ol, const struct qw_simlog_event *ev);

/** Computes the figures over batches enqueued at least `warmup_us` after the first. */
int qw_openloop_figures(struct qw_openloop *ol, int64_t warmup_us, struct qw_openloop_figures *out);

#endif
