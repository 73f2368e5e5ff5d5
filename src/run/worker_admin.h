/*
 * The admin server of a `queuer run` worker: qw_admin_http over the
 * worker's shared state. It reads only atomics (struct qw_worker_stats,
 * the stop flag, struct qw_ops_stats) and the read-only config, and opens
 * its own short-lived database connection for /readyz, so it never touches
 * the worker threads' connections.
 */
#ifndef QW_RUN_WORKER_ADMIN_H
#define QW_RUN_WORKER_ADMIN_H

#include "common/err.h"
#include "shared/ops_stats.h"

struct qw_config;
struct qw_worker;
struct qw_worker_admin;

/**
 * Starts the admin server on cfg->admin_listen; with "off" nothing starts,
 * *out is NULL and QW_OK is returned. `w` and `ops` (NULL = no histograms,
 * and /readyz does not check cycle age) must outlive the server. /readyz
 * is ready when the worker is not stopping, a fresh connection to the
 * database answers `SELECT 1` within 2 s, and a claims cycle completed
 * within min(worker.lease_ms, 3 * worker.cycle_ms + 2000) ms. Logs
 * event=admin.listening once started. Returns QW_ERR_CONFIG when the
 * address is bad or cannot be bound (message says which and what to do).
 * Call from the thread that starts the worker, before other threads read
 * `out`.
 */
QW_MUST_CHECK int qw_worker_admin_start(const struct qw_config *cfg, struct qw_worker *w,
                                        struct qw_ops_stats *ops, struct qw_worker_admin **out,
                                        struct qw_error *err);

/** Stops the server and frees it; NULL is ignored. */
void qw_worker_admin_stop(struct qw_worker_admin *a);

#endif
