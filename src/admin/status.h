/*
 * `queuer status`: what the operator views say, gathered into one report
 * (status_load.c, from the database) and rendered as a table or as JSON
 * (status_render.c, pure functions, unit-tested without a database).
 */
#ifndef QW_ADMIN_STATUS_H
#define QW_ADMIN_STATUS_H

#include "admin/snapshot.h"
#include "common/err.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct qw_db;

/** Headline numbers (sql/ops_status_counts.sql). */
struct qw_status_counts {
    int64_t waiting;            /* unfinished, never submitted (or handed back before POST) */
    int64_t submitting;         /* a worker is posting it */
    int64_t pending;            /* accepted by the ledger, not final yet */
    int64_t delayed;            /* Delayed, retry due at retry_at */
    int64_t parked;             /* Delayed for good: dlt.max_attempts used up */
    int64_t unknown;            /* Unknown: resubmission follows */
    int64_t oldest_age_s;       /* seconds since the oldest unfinished batch was created, -1 none */
    int64_t services;           /* services ever enqueued to */
    int64_t services_with_work; /* with at least one unfinished batch */
    int64_t services_claimed;   /* with a live claim */
    int64_t services_unclaimed; /* with work but no live claim */
    int64_t services_blocked;   /* refusing enqueues (ingest back pressure) */
    int64_t stuck;              /* rows of queuer.stuck_batches */
    int64_t submissions_1h;     /* submissions started in the last hour */
    int64_t committed_1h;       /* batches that reached Committed in the last hour */
    int64_t valid_1h;           /* ... Valid */
    int64_t invalid_1h;         /* ... Invalid from the ledger */
    int64_t cancelled_1h;       /* ... cancelled by an operator */
    int64_t submissions_5m;     /* submissions started in the last 5 minutes */
    int64_t committed_5m;       /* Committed in the last 5 minutes */
};

/** One worker instance (sql/ops_status_instances.sql); strings truncated to fit. */
struct qw_status_instance {
    char instance_id[80];     /* worker.instance_id */
    char host[128];           /* host name it registered */
    char version[32];         /* queuer version */
    char state[16];           /* alive | dead | stopped */
    int64_t pid;              /* process id on its host */
    int64_t heartbeat_age_ms; /* milliseconds since its last heartbeat */
    int64_t claims_held;      /* claims with a live lease */
    int64_t claims_lapsed;    /* claims past expiry_1 not freed yet */
    bool capacity;            /* it takes part in a shared capacity (a live target) */
    int64_t cap_target;       /* its target: cost units waiting or in flight */
    int64_t cap_partitions;   /* capacity partitions it leases */
    int64_t cap_in_flight;    /* units in flight it holds; -1 = that kind is not limited */
    int64_t cap_per_second;   /* units a second it holds; -1 = that kind is not limited */
    char notifications[16];   /* LISTEN wake-ups: delivered | not_delivered | off | "" (not
                                 reported) */
};

/** One stuck batch (sql/ops_status_stuck.sql); strings truncated to fit. */
struct qw_status_stuck {
    char batch_id[129];     /* full batch id */
    char service_id[32];    /* its service */
    char state[16];         /* waiting | submitting | Pending | Delayed | parked | Unknown */
    char reasons[128];      /* comma-separated reasons from queuer.stuck_batches */
    char claimant[80];      /* instance holding the service, "" = none */
    char last_error[256];   /* last error, "" = none */
    int64_t attempts;       /* submissions so far */
    int64_t stuck_for_s;    /* seconds since first submitted (or created) */
    int64_t waiting_behind; /* unfinished batches of the service behind it */
};

/** One live worker's view of one ledger node (sql/ops_status_nodes.sql). */
struct qw_status_node {
    char instance_id[80];    /* the worker reporting it */
    int64_t node;            /* index in dlt.url, from 0 */
    char url[256];           /* its base URL */
    char state[16];          /* up | suspect | down */
    int64_t latency_us;      /* moving average of its answer time, us; -1 = not measured */
    int64_t posts_in_flight; /* channels in use */
    int64_t posts;           /* POSTs the worker sent it */
    int64_t failures;        /* requests that failed on it */
    int64_t reported_age_s;  /* seconds since the worker reported this */
    int64_t window;          /* batches its congestion window allows at once; -1 = unknown */
    int64_t window_used;     /* batches the worker has at it (posted, not final); -1 = unknown */
};

struct qw_status_report {
    char at[32];                          /* database time of the report, UTC ISO 8601 */
    struct qw_status_counts counts;       /* headline numbers */
    struct qw_status_instance *instances; /* n_instances entries, owned */
    size_t n_instances;                   /* entries in instances */
    struct qw_status_stuck *stuck;        /* n_stuck entries (the longest stuck), owned */
    size_t n_stuck;                       /* entries in stuck (<= counts.stuck) */
    struct qw_status_node *nodes;         /* n_nodes entries: live workers x ledger nodes */
    size_t n_nodes;                       /* entries in nodes */
    struct qw_status_snapshot snapshot;   /* the oldest snapshot holding back vacuum */
};

/**
 * Fills `r` from the database: counts, up to `max_instances` instances
 * (with the shared capacity each holds, and up to 16 ledger nodes for each live
 * one), the `max_stuck` longest-stuck batches and the oldest snapshot holding
 * back vacuum. Runs six read-only statements on
 * `db` (the caller's connection). On failure `r` is left empty and `err`
 * says why. Free with qw_status_free().
 */
QW_MUST_CHECK int qw_status_load(struct qw_db *db, int max_instances, int max_stuck,
                                 struct qw_status_report *r, struct qw_error *err);

/** Releases what qw_status_load() allocated; the struct may be reused. */
void qw_status_free(struct qw_status_report *r);

/**
 * Renders `r` as the human-readable table `queuer status` prints. Returns
 * a malloc'd string (caller frees) or NULL when out of memory. Pure.
 */
char *qw_status_render_text(const struct qw_status_report *r);

/**
 * Renders `r` as a JSON object (the same data as the table, full batch
 * ids). Returns a new reference (caller json_decref()s) or NULL when out
 * of memory. Pure.
 */
json_t *qw_status_render_json(const struct qw_status_report *r);

/** Rates between two reports, for the --watch screen. */
struct qw_status_rates {
    int known;                 /* bool: a previous report existed (the "now" rates are set) */
    double committed_per_s;    /* batches committed per second since the previous report */
    double submissions_per_s;  /* submissions started per second since then */
    double committed_5m_per_s; /* average over the last 5 minutes */
};

/**
 * Computes `out` from the report `elapsed_ms` before (`prev`, NULL for
 * none) and the current one. Pure.
 */
void qw_status_watch_rates(const struct qw_status_report *prev, const struct qw_status_report *cur,
                           int64_t elapsed_ms, struct qw_status_rates *out);

/**
 * Renders the `queuer status --watch` screen for a terminal of `rows` x
 * `cols` (at least 10 x 40 is assumed): at most rows - 1 lines, none wider
 * than cols, each ending in a newline. `problem` (may be NULL) is shown on
 * the second line (e.g. "database unreachable, retrying"). Returns a
 * malloc'd string or NULL when out of memory. Pure.
 */
char *qw_status_render_watch(const struct qw_status_report *r, const struct qw_status_rates *rates,
                             const char *problem, int rows, int cols);

#endif
