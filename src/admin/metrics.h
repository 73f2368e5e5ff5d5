/*
 * /metrics: a plain snapshot of a worker's counters, gauges and histograms,
 * and a pure renderer of it in the Prometheus text exposition format
 * (version 0.0.4). The renderer does no I/O and reads no clock, so it is
 * unit-tested byte for byte.
 *
 * Metric families (all prefixed queuer_):
 *   build_info{version,instance_id}           gauge, always 1
 *   ledger_failures_total{request,kind}       counter: failed ledger exchanges (post,
 *                                             status) by kind (http_5xx, timeout, ...)
 *   submissions_total{outcome}                counter: accepted, backpressure (429),
 *                                             invalid (400), auth_refused (401/403), failed
 *   batch_statuses_total{status}              counter: Pending, Committed, Valid, Invalid,
 *                                             Unknown (statuses this worker recorded)
 *   in_flight_batches, delayed_services,
 *   claims_held                               gauges
 *   cycles_total, serialization_retries_total,
 *   claims_lost_total, outcome_flushes_total,
 *   outcomes_written_total                    counters
 *   capacity_held{kind}                       gauge: shared capacity held (kind in_flight:
 *                                             cost units in flight; per_second: cost units
 *                                             a second); 0 when no capacity is set
 *   capacity_target                           gauge: cost units waiting to POST or in flight
 *   partitions_held                           gauge: capacity partitions leased
 *   capacity_waits_total                      counter: POSTs that waited for capacity
 *   ledger_paused                             gauge 0/1: submissions paused after a 429
 *   ledger_yield_below_priority               gauge: batches below this priority go one
 *                                             at a time per node, as another worker's wait
 *                                             for the ledger (absent when none)
 *   stopping                                  gauge 0/1: graceful shutdown under way
 *   last_cycle_age_seconds                    gauge (absent before the first cycle)
 *   submit_waiting                            gauge: batches whose POST waits for ledger
 *                                             capacity (channels, pause)
 *   vacuum_held_back                          gauge: snapshots holding back vacuum past
 *                                             the thresholds of queuer.snapshot_holders
 *   vacuum_held_back_xids                     gauge: transactions begun since the oldest
 *                                             one's snapshot (0 when none)
 *   vacuum_held_back_seconds                  gauge: how long the oldest one has been open
 *                                             (absent when none, or not visible)
 *   ledger_node_up{node,url}                  gauge 1 up, 0 suspect or down
 *   ledger_node_state{node,state}             gauge 0/1 per state (up, suspect, down)
 *   ledger_node_latency_seconds{node}         gauge: moving average of answered requests
 *   ledger_node_posts_in_flight{node}         gauge: channels in use
 *   ledger_node_window{node}                  gauge: batches the node's congestion window
 *                                             allows at once
 *   ledger_node_window_used{node}             gauge: batches at the node (posted, not final)
 *   ledger_node_first_look_seconds{node}      gauge: when a batch's first status read goes
 *                                             out after its 202
 *   ledger_node_requests_total{node,request}  counter: post, status (probes included)
 *   ledger_node_failures_total{node}          counter: failed requests
 *   ledger_node_suspect_total{node}           counter: times it turned suspect
 *   cycle_duration_seconds,
 *   ledger_request_duration_seconds           histograms
 */
#ifndef QW_ADMIN_METRICS_H
#define QW_ADMIN_METRICS_H

#include "common/histogram.h"

#include <stddef.h>
#include <stdint.h>

#define QW_METRICS_FAILURES_MAX 32 /* (request, kind) pairs of ledger_failures_total */
#define QW_METRICS_NODES_MAX 16    /* ledger nodes */

/** One ledger node as the worker sees it; url borrowed. */
struct qw_metrics_node {
    const char *url;         /* its base URL (label), may be NULL */
    int state;               /* 0 up, 1 suspect, 2 down */
    int64_t latency_us;      /* moving average of answered requests, us; 0 = none yet */
    int64_t posts_in_flight; /* channels in use */
    int64_t posts;           /* POSTs started */
    int64_t polls;           /* status GETs started (probes included) */
    int64_t failures;        /* failed requests */
    int64_t suspect;         /* times it turned suspect */
    int64_t window;          /* batches its congestion window allows at once */
    int64_t window_used;     /* batches at it now (posted, not yet final) */
    int64_t first_look_ms;   /* a batch's first status read goes out this long after its 202 */
};

/** One sample of queuer_ledger_failures_total; strings borrowed, static. */
struct qw_metrics_failure {
    const char *request; /* "post" or "status" */
    const char *kind;    /* failure kind ("http_5xx", "malformed", ...) */
    int64_t count;       /* failed exchanges of that kind */
};

struct qw_metrics_snapshot {
    const char *instance_id;       /* label value; borrowed, may be NULL */
    const char *version;           /* label value; borrowed, may be NULL */
    int64_t posts_accepted;        /* POST answered 202 */
    int64_t posts_backpressure;    /* POST answered 429 */
    int64_t posts_invalid;         /* POST answered 400 */
    int64_t posts_auth;            /* POST answered 401/403 */
    int64_t posts_failed;          /* POST failed otherwise (5xx, 404, network, timeout) */
    int64_t final_committed;       /* batches this worker saw Committed */
    int64_t final_valid;           /* ... Valid */
    int64_t final_invalid;         /* ... Invalid (by status or by a 400) */
    int64_t unknown_confirmed;     /* ... Unknown, confirmed (resubmission follows) */
    int64_t in_flight;             /* gauge: batches with the submitter now */
    int64_t delayed;               /* gauge: held services whose oldest batch is Delayed */
    int64_t claims_held;           /* gauge: services claimed now */
    int64_t cycles;                /* claims cycles run */
    int64_t serialization_retries; /* 40001/40P01 re-runs */
    int64_t claims_lost;           /* fenced writes that matched nothing */
    int64_t flushes;               /* grouped outcome statements committed */
    int64_t outcomes;              /* outcomes written by them */
    int64_t capacity_in_flight;    /* shared capacity held: cost units in flight */
    int64_t capacity_per_second;   /* shared capacity held: cost units a second */
    int64_t capacity_target;       /* cost units waiting to POST or in flight */
    int64_t partitions_held;       /* capacity partitions leased now */
    int64_t capacity_waits;        /* POSTs that had to wait for capacity */
    int paused;                    /* 1 while submissions pause after a 429 */
    int yielding;                  /* 1 while another worker's batches wait for the ledger */
    int yield_below;               /* ... with this priority: ours below it yield */
    int stopping;                  /* 1 once a graceful stop was requested */
    int64_t last_cycle_age_ms;     /* ms since the last successful cycle; -1 = none yet */
    int64_t outcomes_failing_ms;   /* how long outcome writes have failed in a row, ms;
                                      0 = they succeed */
    struct qw_metrics_failure failures[QW_METRICS_FAILURES_MAX]; /* ledger failures by kind */
    size_t n_failures;                                           /* entries in failures */
    struct qw_histogram_snapshot cycle_duration;                 /* claims cycle durations */
    struct qw_histogram_snapshot ledger_latency;                 /* ledger POST latencies */
    int64_t submit_waiting;     /* gauge: POSTs waiting for capacity */
    int64_t vacuum_holders;     /* gauge: snapshots holding back vacuum past the thresholds */
    int64_t vacuum_xids_behind; /* gauge: transactions begun since the oldest one; 0 = none */
    int64_t vacuum_open_s;      /* how long it has been open, s; -1 = none or not visible */
    struct qw_metrics_node nodes[QW_METRICS_NODES_MAX]; /* ledger nodes, in dlt.url order */
    size_t n_nodes;                                     /* entries in nodes */
};

/**
 * Renders `s` in the Prometheus text format. Returns a malloc'd,
 * NUL-terminated string (caller frees; *len, if not NULL, gets its length)
 * or NULL when out of memory. Pure: no I/O, no clock, no globals.
 */
char *qw_metrics_render(const struct qw_metrics_snapshot *s, size_t *len);

/**
 * Writes `us` microseconds as decimal seconds without trailing zeros
 * ("0.0005", "1", "2.5", "0") into `buf`. Pure.
 */
void qw_metrics_format_seconds(int64_t us, char *buf, size_t len);

#endif
