/*
 * Counters the simulator serves at GET /_sim/stats. Lock-free: every
 * counter is an atomic, bumped from any thread.
 */
#ifndef QW_SIM_STATS_H
#define QW_SIM_STATS_H

#include <jansson.h>
#include <stdatomic.h>

/** Outcomes of a batch submission, counted per request. */
enum qw_sim_post_outcome {
    QW_SIM_POST_202 = 0,
    QW_SIM_POST_400,
    QW_SIM_POST_401,
    QW_SIM_POST_403,
    QW_SIM_POST_404,
    QW_SIM_POST_405,
    QW_SIM_POST_413,
    QW_SIM_POST_429,
    QW_SIM_POST_500,
    QW_SIM_POST_503,
    QW_SIM_POST_DROP,
    QW_SIM_POST_HANG,
    QW_SIM_POST_OUTCOMES /* count */
};

struct qw_sim_stats {
    atomic_ulong posts[QW_SIM_POST_OUTCOMES]; /* submissions by outcome */
    atomic_ulong accepted;                    /* batches newly queued */
    atomic_ulong duplicates;                  /* batches resubmitted while known */
    atomic_ulong committed;                   /* batches that reached Committed */
    atomic_ulong invalid;                     /* batches that reached Invalid */
    atomic_ulong gets;                        /* batch_statuses requests answered (any code) */
    atomic_ulong statuses_served;             /* ids answered in 200 batch_statuses replies */
    atomic_ulong long_polls;                  /* batch_statuses requests that waited */
    atomic_ulong restarts;                    /* ledger wipes (SIGHUP or /_sim/restart) */
    atomic_ulong refused[3];                  /* submissions refused with 429 by the ledger:
                                                 service queue, node queue, node rate */
};

/** Maps an HTTP status to its outcome slot; QW_SIM_POST_OUTCOMES when none fits. */
enum qw_sim_post_outcome qw_sim_stats_outcome(int http_status);

/** The name an outcome has in the stats and the event log ("202", "drop"). */
const char *qw_sim_stats_outcome_name(enum qw_sim_post_outcome outcome);

/** Counts one submission with `outcome` (ignored when out of range). */
void qw_sim_stats_post(struct qw_sim_stats *s, enum qw_sim_post_outcome outcome);

/** Renders the counters as a new JSON object (NULL on allocation failure). */
json_t *qw_sim_stats_to_json(struct qw_sim_stats *s);

#endif
