/*
 * The queuer thread: the worker cycle of docs/DESIGN.md §6.1 (maintenance, renew,
 * claim, fetch, queue) on its own database connection, woken by its timer,
 * by LISTEN/NOTIFY when batches are enqueued, and by the submitter when a
 * job of ours ends. See run/run.h for the threads and shutdown.
 */
#ifndef QW_QUEUER_QUEUER_H
#define QW_QUEUER_QUEUER_H

#include "common/err.h"
#include "shared/shared.h"

#include <pthread.h>

/**
 * Runs the queuer loop on the calling thread until w->stop is set, then
 * closes w->jobs, waits for the submitter `thread` to hand every job back
 * and end, releases all claims and marks the instance stopped. `db` is
 * the queuer's connection (owned by the caller, used only by this thread).
 * `listener` (database.listen_conninfo, owned by the caller, used only by
 * this thread), when not NULL, is the connection that LISTENs and is waited
 * on for wake-ups (reconnected when lost); NULL: `db` LISTENs. Returns QW_OK
 * after a clean stop.
 */
struct qw_db;
QW_MUST_CHECK int qw_queuer_run(struct qw_worker *w, struct qw_db *db, struct qw_db *listener,
                                pthread_t submitter, struct qw_error *err);

#endif
