/*
 * One `queuer run` process: its threads, their connections and the
 * shutdown order. What the threads share is in shared/shared.h.
 *
 * DESIGN. Two threads, each owning its own database connection:
 *  - the queuer thread (the process's main thread) runs the cycle of
 *    docs/DESIGN.md §6.1 (heartbeat, claims, fetch, one-round serial choice, fenced
 *    marking) and pushes jobs onto `jobs`; with database.listen_conninfo
 *    it owns a second connection that only LISTENs, and it opens a
 *    short-lived one for its wake-up self-test when its main connection
 *    LISTENs itself (queuer/notify_check.h);
 *  - the submitter thread owns the ledger client; it posts jobs, follows
 *    their status (the status monitor), writes outcomes in grouped fenced
 *    statements, and pushes each finished job onto `done`, then writes
 *    `wake_fd` so the queuer runs again for that service at once.
 * Nothing else is shared: the config is read-only after start, `stop` and
 * the stats are atomics, the queues are the documented handoff type. The
 * admin server (worker_admin.h, libmicrohttpd's thread) only reads the
 * atomics and opens its own short-lived connection for /readyz.
 * Shutdown: a signal sets `stop` and writes `wake_fd`; the queuer stops
 * claiming and closes `jobs`; the submitter finishes POSTs in flight within
 * worker.shutdown_grace_ms, records their outcomes, abandons status polls
 * (their batches stay Pending for the next owner), hands every job back
 * and exits; the queuer joins it, releases all claims and marks the
 * instance stopped. A second signal exits at once.
 * Reload: SIGHUP sets `reload` and writes `wake_fd`; the queuer thread
 * re-reads the configuration (reload.h) and applies the reloadable keys:
 * the log level (an atomic in the log module), the admin server (restarted
 * by the queuer thread, which owns it) and the 429 pause limits (atomics in
 * shared/shared.h, read by the submitter). Other changes are logged as needing a
 * restart; `cfg` itself never changes.
 */
#ifndef QW_RUN_RUN_H
#define QW_RUN_RUN_H

#include "common/err.h"

struct qw_config;

/** How a worker re-reads its configuration at SIGHUP (the same sources as at start). */
struct qw_worker_reload {
    /* Loads a fresh configuration into *out (caller frees); NULL = reload unsupported. */
    int (*load)(void *ctx, struct qw_config *out, struct qw_error *err);
    void *ctx; /* passed to load */
};

/**
 * Runs a worker until a signal stops it: registers the instance, starts
 * the submitter thread, runs the queuer loop on the calling thread, and
 * shuts down as described above. `reload` (copied; may be NULL) says how
 * SIGHUP re-reads the configuration. Returns QW_OK after a clean stop.
 */
QW_MUST_CHECK int qw_worker_run(const struct qw_config *cfg, const struct qw_worker_reload *reload,
                                struct qw_error *err);

#endif
