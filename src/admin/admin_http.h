/*
 * The admin HTTP server: /healthz, /readyz and /metrics on libmicrohttpd.
 *
 * DESIGN. The server knows nothing about workers: it gets its data through
 * struct qw_admin_hooks (a metrics snapshot and a database ping), so it is
 * tested against fakes. libmicrohttpd runs one listening thread plus one
 * thread per connection (at most ADMIN_MAX_CONNECTIONS); the hooks are
 * called on those threads and must be thread-safe. A watchdog thread
 * closes connections that do not deliver a whole request in time and keeps
 * slots free for probes (admin_http.c explains how), so slow clients
 * cannot keep /healthz unanswered. The /readyz ping
 * result is cached for a second under a mutex, so probes cannot open
 * connections faster than that.
 *
 *   GET /healthz  200 "ok": the process is alive and serving.
 *   GET /readyz   200 "ready", or 503 with the reason: stopping, database
 *                 unreachable, no recent claims cycle; then, on a line of
 *                 its own, the detail hook's note when it has one.
 *   GET /metrics  200, Prometheus text format 0.0.4 (see metrics.h).
 * Other paths are 404; methods other than GET and HEAD are 405.
 */
#ifndef QW_ADMIN_ADMIN_HTTP_H
#define QW_ADMIN_ADMIN_HTTP_H

#define QW_ADMIN_OUTCOMES_FAILING_MS 2000 /* /readyz: outcome writes failing longer than this */

#include "admin/metrics.h"
#include "common/err.h"

#include <stddef.h>
#include <stdint.h>

struct qw_admin_hooks {
    /** Fills `out` with current values (required). Called on server threads. */
    void (*snapshot)(void *ctx, struct qw_metrics_snapshot *out);
    /** Returns QW_OK when the database answers (optional; NULL = not checked). */
    int (*db_ping)(void *ctx, struct qw_error *err);
    /** Writes into `buf` what /readyz adds on a line of its own: a degraded
     *  state that does not make the worker unready; "" = nothing (optional). */
    void (*detail)(void *ctx, char *buf, size_t len);
    void *ctx;                /* passed to the hooks */
    int64_t max_cycle_age_ms; /* /readyz wants a cycle at most this old; <= 0 = not checked */
};

/**
 * Parses an admin.listen value: "off" (returns 1), or "host:port" /
 * "[v6-address]:port" with port 0..65535 (returns 0 and fills `host` and
 * *port; 0 = any free port). Returns -1 with a reason in `why` otherwise.
 * Pure.
 */
int qw_admin_listen_parse(const char *text, char *host, size_t host_len, int *port, char *why,
                          size_t why_len);

/**
 * Decides /readyz from a snapshot, the ping result (`db_rc`, with
 * `db_msg` its message or NULL) and the cycle age limit. Returns 1 when
 * ready; otherwise 0 with the reason in `why`. Pure.
 */
int qw_admin_readiness(const struct qw_metrics_snapshot *s, int db_rc, const char *db_msg,
                       int64_t max_cycle_age_ms, char *why, size_t why_len);

struct qw_admin_http;

/**
 * Starts serving on `listen` (as parsed by qw_admin_listen_parse(); "off"
 * is refused here). `hooks` is copied; its ctx must outlive the server.
 * Returns QW_OK with *out set, QW_ERR_CONFIG for a bad address,
 * QW_ERR_IO when the address cannot be bound (e.g. in use).
 */
QW_MUST_CHECK int qw_admin_http_start(struct qw_admin_http **out, const char *listen,
                                      const struct qw_admin_hooks *hooks, struct qw_error *err);

/** The port the server listens on (useful when started on port 0). */
int qw_admin_http_port(const struct qw_admin_http *h);

/** Stops the server, waiting for requests in progress; NULL is ignored. */
void qw_admin_http_stop(struct qw_admin_http *h);

#endif
