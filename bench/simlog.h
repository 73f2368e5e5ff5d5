/*
 * Benchmark figures from a scabbard-sim event log: throughput, ledger
 * requests and per-service turnaround. Pure logic: the caller parses each
 * NDJSON line into a struct qw_simlog_event and feeds it in log order; no
 * I/O, no clock reads, no logging here, so it is unit-tested on tables.
 *
 * Turnaround overhead of a service is the time from the moment the ledger
 * made batch k final (the "t" of its status event) to the first POST of a
 * different batch of the same service (batch k+1), whatever that POST's
 * answer was. It is what the queue adds on top of the ledger's own delay.
 *
 * Thread-safety: a struct qw_simlog is owned by one thread at a time.
 */
#ifndef QW_BENCH_SIMLOG_H
#define QW_BENCH_SIMLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** What kind of line an event is. */
enum qw_simlog_kind {
    QW_SIMLOG_OTHER = 0, /* restart, pause, ...: ignored */
    QW_SIMLOG_POST,      /* one batch of a batch submission (any answer) */
    QW_SIMLOG_GET,       /* one batch_statuses request */
    QW_SIMLOG_STATUS,    /* a ledger-side status transition */
};

/** One event line, as the caller parsed it; strings are borrowed for the call. */
struct qw_simlog_event {
    enum qw_simlog_kind kind; /* line type ("ev") */
    int64_t t_us;             /* "t": microseconds since the epoch */
    const char *service;      /* "service", "circuit::service"; NULL if absent */
    const char *batch;        /* "batch" id; NULL if absent */
    int code;                 /* HTTP status of a POST/GET; 0 for drop/hang or absent */
    bool from_final;          /* STATUS: "from" was Committed, Valid or Invalid */
    bool to_final;            /* STATUS: "to" is Committed, Valid or Invalid */
};

/** Figures over a whole log. Times in microseconds, rates per second. */
struct qw_simlog_figures {
    uint64_t batches_final;    /* batches that became final (first final status each) */
    uint64_t posts;            /* POST lines: batch submissions, any answer */
    uint64_t posts_202;        /* ... answered 202 Accepted */
    uint64_t posts_429;        /* ... answered 429 (fault or queue full) */
    uint64_t posts_other;      /* ... any other answer, drops and hangs */
    uint64_t gets;             /* batch_statuses requests */
    int64_t first_post_us;     /* "t" of the first POST; 0 if none */
    int64_t last_final_us;     /* "t" of the last status event that made a batch final */
    double span_s;             /* last_final_us - first_post_us, seconds */
    double batches_per_s;      /* batches_final / span_s; 0 when span_s <= 0 */
    double requests_per_batch; /* (posts + gets) / batches_final; 0 when none */
    uint64_t turnarounds;      /* samples of turnaround overhead */
    int64_t turnaround_p50_us; /* median, nearest rank */
    int64_t turnaround_p99_us; /* 99th percentile, nearest rank */
    int64_t turnaround_max_us; /* largest sample */
    double turnaround_mean_us; /* arithmetic mean */
};

struct qw_simlog;

/**
 * Creates an empty accumulator. Returns NULL when out of memory. The caller
 * owns it and frees it with qw_simlog_free().
 */
struct qw_simlog *qw_simlog_new(void);

/** Frees `log` and everything it holds. NULL is a no-op. */
void qw_simlog_free(struct qw_simlog *log);

/**
 * Feeds one event. Events must come in log order ("t" never decreasing).
 * Returns QW_OK, QW_ERR_INVALID when a POST or STATUS line lacks its
 * service or batch, or QW_ERR_NOMEM (the accumulator stays usable but the
 * event was not counted).
 */
int qw_simlog_feed(struct qw_simlog *log, const struct qw_simlog_event *ev);

/** Batches that became final so far (cheap; for waiting on a growing log). */
uint64_t qw_simlog_batches_final(const struct qw_simlog *log);

/**
 * Computes the figures from everything fed so far into `out`. Sorts the
 * turnaround samples in place; feeding more afterwards is allowed.
 */
void qw_simlog_figures(struct qw_simlog *log, struct qw_simlog_figures *out);

/**
 * Nearest-rank percentile of `n` values sorted ascending: the value at rank
 * ceil(p/100 * n) (1-based), so p50 of {1,2,3,4} is 2 and p99 of 100 values
 * is the 99th. `p` is clamped to (0, 100]; returns 0 when `n` is 0.
 */
int64_t qw_simlog_percentile(const int64_t *sorted, size_t n, double p);

#endif
