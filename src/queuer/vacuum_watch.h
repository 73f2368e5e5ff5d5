/*
 * The worker's look at what holds back vacuum. A transaction left open (a
 * forgotten BEGIN, a long report, a prepared transaction, a standby's slot)
 * keeps every row version made since it began, and each lookup of a busy
 * service then walks more of them: the workers slow down minute by minute
 * while it stays open (docs/OPERATIONS.md, "Table growth and long
 * transactions"). Every QW_VACUUM_WATCH_EVERY_MS the queuer thread reads
 * the oldest snapshot past the thresholds of queuer.snapshot_holders (the
 * line `queuer status` ends with), publishes it as gauges on /metrics and
 * logs when one appears, another becomes the oldest, and when none is left,
 * so alerting on the workers' metrics or logs sees it without an operator
 * running `queuer status`.
 *
 * One struct per queuer thread; zero-filled is its initial state; not
 * thread-safe (the gauges it writes are atomics).
 */
#ifndef QW_QUEUER_VACUUM_WATCH_H
#define QW_QUEUER_VACUUM_WATCH_H

#include "admin/snapshot.h"
#include "db/db.h"
#include "shared/ops_stats.h"

#include <stdbool.h>
#include <stdint.h>

/** How often the queuer thread looks (one read-only statement). */
#define QW_VACUUM_WATCH_EVERY_MS 10000

struct qw_vacuum_watch {
    int64_t due_ms;                 /* monotonic: the next look */
    bool failing;                   /* the last look failed (logged once a run) */
    struct qw_status_snapshot last; /* the oldest holder at the last look; holders 0 = none */
};

enum qw_vacuum_change {
    QW_VACUUM_SAME,     /* as before (none, or the same oldest holder) */
    QW_VACUUM_HELD,     /* a holder appeared, or another one is now the oldest */
    QW_VACUUM_RELEASED, /* none is left */
};

/**
 * What a look changed, from the oldest holder before (`prev`) and now
 * (`cur`). A holder is its kind, pid and application name (a prepared
 * transaction's gid, a slot's name). Pure.
 */
enum qw_vacuum_change qw_vacuum_watch_change(const struct qw_status_snapshot *prev,
                                             const struct qw_status_snapshot *cur);

/**
 * Looks when due at `now_ms` (monotonic), on `db`: publishes the oldest
 * holder to `ops` and logs the change (db.vacuum_held_back at warn,
 * db.vacuum_released at info). A failed look is logged once until one
 * succeeds and is tried again a period later; it never fails the caller
 * (a lost connection is the claims cycle's to notice).
 */
void qw_vacuum_watch_step(struct qw_vacuum_watch *w, struct qw_db *db, struct qw_ops_stats *ops,
                          int64_t now_ms);

#endif
