/*
 * What the threads of one `queuer run` process share: the worker struct
 * (read-only config, instance id, stop flag, wake fd, the two handoff
 * queues) and the counters they publish. The shared module, below both
 * threads: the queuer, the submitter and the admin glue include this header,
 * never each other's; run/run.h (the process setup) sits above them. See
 * run/run.h for the threads, their connections and the shutdown order.
 */
#ifndef QW_SHARED_SHARED_H
#define QW_SHARED_SHARED_H

#include "config/config.h"
#include "dlt/dlt_classify.h"
#include "dlt/dlt_url.h"
#include "shared/handoff.h"
#include "shared/job.h"
#include "shared/ops_stats.h"

#include <stdatomic.h>

/** One ledger node as the submitter last published it (submitter/nodes.h); relaxed atomics. */
struct qw_node_stats {
    atomic_int state;             /* enum qw_node_state: 0 up, 1 suspect, 2 down */
    atomic_llong latency_us;      /* latency estimate (EWMA), us; 0 = not measured yet */
    atomic_llong posts_in_flight; /* gauge: its channels in use */
    atomic_llong window;          /* gauge: batches its congestion window allows at once */
    atomic_llong window_used;     /* gauge: batches this worker has at it (posted, not final) */
    atomic_llong first_look_ms;   /* gauge: a batch's first status read goes out this long after
                                     its 202 */
    atomic_llong posts;           /* POSTs started on it */
    atomic_llong polls;           /* status GETs started on it (probes included) */
    atomic_llong failures;        /* requests that failed on it */
    atomic_llong suspect;         /* times it turned suspect */
};

/** Counters and gauges for logs and metrics; written with relaxed atomics. */
struct qw_worker_stats {
    atomic_llong cycles;                /* claims cycles run */
    atomic_llong serialization_retries; /* 40001/40P01 re-runs, all transactions */
    atomic_llong claims_held;           /* gauge: services held now */
    atomic_int live_workers;            /* live instances at the last look at the fair share,
                                           this one included (0 = not looked yet) */
    atomic_llong jobs_busy;             /* gauge: jobs with the submitter now */
    atomic_llong posts_accepted;        /* POST answered 202 */
    atomic_llong posts_backpressure;    /* POST answered 429 */
    atomic_llong posts_invalid;         /* POST answered 400 */
    atomic_llong posts_auth;            /* POST answered 401/403 */
    atomic_llong posts_retry;           /* POST failed otherwise (5xx, network, ...) */
    atomic_llong final_committed;       /* batches seen Committed */
    atomic_llong final_valid;           /* batches seen Valid */
    atomic_llong final_invalid;         /* batches seen Invalid (by status or 400) */
    atomic_llong unknown_confirmed;     /* Unknown confirmed: resubmission follows */
    atomic_llong lost;                  /* fenced writes that matched nothing */
    atomic_llong flushes;               /* grouped outcome statements committed */
    atomic_llong outcomes;              /* outcomes written by them */
    atomic_int paused;                  /* 1 while submissions pause after a 429 or 401/403 */
    atomic_int notify_lost;             /* 1 while LISTEN wake-ups do not arrive (self-test
                                           failed, or the listening connection is lost): the
                                           queuer polls every cycle */
    atomic_llong ledger_failures[2][QW_DLT_FAIL_COUNT]; /* failed exchanges by request
                                                            (0 POST, 1 status) and kind */
    atomic_llong outcomes_failing_since_ms; /* monotonic ms of the first failed outcome write
                                               in a row; 0 = writes succeed */
    atomic_int capacity_set;                /* 1 while a shared capacity is set for the ledger */
    atomic_llong capacity_in_flight;        /* gauge: units in flight this worker holds */
    atomic_llong capacity_per_second;       /* gauge: units per second this worker holds */
    atomic_llong capacity_partitions;       /* gauge: partitions this worker holds */
    atomic_llong capacity_target;           /* gauge: cost units waiting or in flight */
    atomic_llong capacity_waits;            /* POSTs that had to wait for capacity */
    struct qw_ops_stats ops;                /* histograms and gauges for /metrics (ops_stats.h) */
    atomic_llong ready;                     /* gauge: jobs whose POST waits for ledger capacity */
    atomic_int n_nodes;                     /* ledger nodes published in `nodes` */
    struct qw_node_stats nodes[QW_DLT_MAX_NODES]; /* per ledger node, in dlt.url order */
};

struct qw_worker_admin;

struct qw_worker {
    const struct qw_config *cfg; /* read-only after start */
    /* SIGHUP (reload.h): how to re-read the configuration, NULL = unsupported */
    int (*reload_load)(void *ctx, struct qw_config *out, struct qw_error *err);
    void *reload_ctx; /* passed to reload_load */
    /* SIGHUP: re-reads and applies the configuration (run/reload.h); called on the queuer
       thread, which owns `admin`; set by the process before the threads start, NULL = none */
    void (*apply_reload)(struct qw_worker *w);
    atomic_int reload;             /* 1 after SIGHUP until the queuer thread reloads */
    atomic_int pause_base_ms;      /* dlt.pause_base_ms in force (reloadable) */
    atomic_int pause_max_ms;       /* dlt.pause_max_ms in force (reloadable) */
    struct qw_worker_admin *admin; /* admin server or NULL; owned by the queuer thread */
    struct qw_config admin_cfg;    /* shallow copy of *cfg the admin server reads, with
                                      admin_listen owned here (replaced by a reload) */
    char instance_id[80];          /* our claimant id */
    char incarnation[24];          /* our registration's incarnation (decimal), set before the
                                      threads start: the lease and every fenced write name it */
    int64_t posts_from_ms;         /* monotonic ms: no POST before this (our registration
                                      replaced one whose POSTs may still land), 0 = none; set
                                      before the threads start */
    atomic_int posts_abandoned;    /* 1 once a graceful stop's grace ended with POSTs in flight:
                                      their services keep their claims until the hard expiry */
    atomic_int superseded;         /* 1 once a later registration of our instance_id took over:
                                      the process stops at once and exits non-zero */
    atomic_int stop;               /* 0 running, 1 graceful stop requested */
    atomic_int waiting_priority;   /* submitter -> queuer: the highest priority of a batch that
                                      waited for room at a ledger node pushing back since the
                                      queuer last took it (reported with the lease),
                                      QW_PRIORITY_NONE = none */
    atomic_int yield_below;        /* queuer -> submitter: another live worker reported batches
                                      of this priority waiting so; ours below it go one at a
                                      time per node, QW_PRIORITY_NONE = none */
    int wake_fd;                   /* eventfd waking the queuer thread */
    struct qw_handoff *jobs;       /* queuer -> submitter */
    struct qw_handoff *done;       /* submitter -> queuer */
    struct qw_worker_stats stats;  /* shared counters */
};

/**
 * Database options for one of the worker's connections: the configured
 * conninfo and timeouts, plus server-side limits derived from the lease so
 * a frozen worker cannot hold locks other workers wait for (idle in a
 * transaction longer than half a lease ends its session) and a waiting
 * statement gives up instead of stalling a cycle (lock_timeout).
 */
struct qw_db_opts;
void qw_worker_db_opts(const struct qw_config *cfg, const char *app_name, struct qw_db_opts *opts);

/** Wakes the queuer thread (async-signal-safe: a write(2) on wake_fd). */
void qw_worker_wake(struct qw_worker *w);

#endif
