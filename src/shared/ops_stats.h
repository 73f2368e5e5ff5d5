/*
 * Measurements for operators that the worker threads record and the admin
 * server reads: histograms and the few gauges struct qw_worker_stats does
 * not hold. The worker embeds one struct qw_ops_stats (zero-filled memory
 * is its valid initial state) and passes it to qw_worker_admin_start(). Every
 * field is an atomic: writers use relaxed stores/adds, the admin thread
 * relaxed loads.
 */
#ifndef QW_SHARED_OPS_STATS_H
#define QW_SHARED_OPS_STATS_H

#include "common/histogram.h"

#include <stdatomic.h>

struct qw_ops_stats {
    struct qw_histogram cycle_duration; /* successful claims cycles (heartbeat to queue), us */
    struct qw_histogram ledger_latency; /* ledger POST to its answer, microseconds */
    atomic_llong last_cycle_ok_ms;      /* qw_clock_mono_ms() when the last successful cycle
                                           ended; 0 = none yet */
    atomic_llong delayed;               /* gauge: held services whose oldest batch is Delayed
                                           (parked included), as of the last full fetch */
    atomic_llong vacuum_holders;        /* gauge: snapshots holding back vacuum past the
                                           thresholds, as of the last look (vacuum_watch.h) */
    atomic_llong vacuum_xids_behind;    /* gauge: transactions begun since the oldest one's
                                           snapshot; 0 = none */
    atomic_llong vacuum_open_s;         /* gauge: how long its transaction has been open, s;
                                           -1 = not visible; not read while there is no holder */
};

#endif
