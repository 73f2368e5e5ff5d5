/* The admin HTTP server on libmicrohttpd; see admin_http.h. */
#include "admin/admin_http.h"
#include "common/clock.h"
#include "common/log.h"

#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/*
 * Slow clients. libmicrohttpd's connection timeout is an idle timeout: a
 * client that sends one header line every few seconds keeps its
 * connection (and, in thread-per-connection mode, a thread) for ever, and
 * a handful of them fill the connection cap so that /healthz goes
 * unanswered. So each connection is also watched here (struct conn_watch,
 * fed by libmicrohttpd's connection and completion notifications):
 *   - a connection that has not delivered a whole request within
 *     ADMIN_REQUEST_DEADLINE_MS of being opened (or of its last answer,
 *     for keep-alive) is shut down by a watchdog thread;
 *   - when a new connection arrives and more than ADMIN_MAX_CONNECTIONS -
 *     ADMIN_PROBE_RESERVE connections are waiting for a request, the one
 *     waiting longest is shut down, so the cap is never reached by idle or
 *     slow clients and a probe always finds a slot and is answered.
 * "Shut down" is shutdown(2) on the connection's socket under watch_mu:
 * its own thread then sees the end of the stream and closes it.
 * libmicrohttpd reports a connection closed (which takes watch_mu) before
 * it closes the socket, so a descriptor is never shut down after reuse.
 * Drops and refusals are logged at warn at most once per ADMIN_WARN_EVERY_MS,
 * with the number of events since the last line.
 */
#define ADMIN_MAX_CONNECTIONS 32       /* concurrent connections; more are refused */
#define ADMIN_PROBE_RESERVE 4          /* slots kept free of connections awaiting a request */
#define ADMIN_REQUEST_DEADLINE_MS 2500 /* a whole request must arrive within this, ms */
#define ADMIN_TIMEOUT_S 10             /* idle timeout while a request is being answered, s */
#define ADMIN_WATCH_PERIOD_MS 250      /* watchdog period, ms */
#define ADMIN_WARN_EVERY_MS 10000      /* at most one warn line per kind this often, ms */
#define ADMIN_WATCH_SLOTS (2 * ADMIN_MAX_CONNECTIONS) /* > cap: closes may lag behind accepts */
#define PING_CACHE_MS 1000 /* a ping result is reused this long, milliseconds */

/* One open connection, as the watchdog sees it. */
struct conn_watch {
    bool used;                /* slot holds an open connection */
    bool in_request;          /* a whole request arrived and is being answered */
    bool shut;                /* already shut down by us */
    int fd;                   /* the connection's socket */
    int64_t waiting_since_ms; /* monotonic ms: opened, or last answer completed */
};

/* A warn line that is written at most once per ADMIN_WARN_EVERY_MS. */
struct rate_limited {
    int64_t last_ms; /* monotonic ms of the last line, 0 = none yet */
    long suppressed; /* events since the last line */
};

struct qw_admin_http {
    struct MHD_Daemon *daemon;   /* the server */
    struct qw_admin_hooks hooks; /* copied at start */
    int port;                    /* bound port */
    pthread_mutex_t ping_mu;     /* guards the three ping fields, held during a ping */
    int64_t ping_at_ms;          /* monotonic time of the cached ping, 0 = none */
    int ping_rc;                 /* its result */
    char ping_msg[200];          /* its error message */

    pthread_mutex_t watch_mu;                   /* guards everything below */
    pthread_cond_t watch_cv;                    /* wakes the watchdog to stop */
    pthread_t watchdog;                         /* runs watchdog_main */
    bool watchdog_started;                      /* watchdog must be joined */
    bool stopping;                              /* the watchdog ends */
    struct conn_watch conns[ADMIN_WATCH_SLOTS]; /* open connections */
    struct rate_limited slow_warn;              /* admin.slow_client lines */
    struct rate_limited mhd_warn;               /* admin.http_error lines */
};

int qw_admin_listen_parse(const char *text, char *host, size_t host_len, int *port, char *why,
                          size_t why_len)
{
    if (!text) {
        snprintf(why, why_len, "no address");
        return -1;
    }
    if (strcmp(text, "off") == 0)
        return 1;
    const char *colon;
    const char *h = text;
    size_t hlen;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':') {
            snprintf(why, why_len, "'%s': expected [address]:port", text);
            return -1;
        }
        h = text + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(text, ':');
        if (!colon || strchr(text, ':') != colon) {
            snprintf(why, why_len, "'%s': expected host:port, [address]:port or off", text);
            return -1;
        }
        hlen = (size_t)(colon - text);
    }
    if (hlen == 0 || hlen >= host_len) {
        snprintf(why, why_len, "'%s': missing or too long host", text);
        return -1;
    }
    const char *p = colon + 1;
    long v = 0;
    if (!*p) {
        snprintf(why, why_len, "'%s': missing port", text);
        return -1;
    }
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || (v = v * 10 + (*p - '0')) > 65535) {
            snprintf(why, why_len, "'%s': port must be a number 0..65535", text);
            return -1;
        }
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = (int)v;
    return 0;
}

int qw_admin_readiness(const struct qw_metrics_snapshot *s, int db_rc, const char *db_msg,
                       int64_t max_cycle_age_ms, char *why, size_t why_len)
{
    if (s->stopping) {
        snprintf(why, why_len, "stopping");
        return 0;
    }
    if (db_rc != QW_OK) {
        snprintf(why, why_len, "database unreachable: %s", db_msg && *db_msg ? db_msg : "?");
        return 0;
    }
    if (s->outcomes_failing_ms > QW_ADMIN_OUTCOMES_FAILING_MS) {
        snprintf(why, why_len, "outcomes cannot be written (failing for %lld ms)",
                 (long long)s->outcomes_failing_ms);
        return 0;
    }
    if (max_cycle_age_ms > 0) {
        if (s->last_cycle_age_ms < 0) {
            snprintf(why, why_len, "no claims cycle completed yet");
            return 0;
        }
        if (s->last_cycle_age_ms > max_cycle_age_ms) {
            snprintf(why, why_len, "last claims cycle completed %lld ms ago (limit %lld ms)",
                     (long long)s->last_cycle_age_ms, (long long)max_cycle_age_ms);
            return 0;
        }
    }
    snprintf(why, why_len, "ready");
    return 1;
}

/* Pings through the hook, at most once per PING_CACHE_MS. */
static int cached_ping(struct qw_admin_http *h, char *msg, size_t msg_len)
{
    if (!h->hooks.db_ping) {
        msg[0] = '\0';
        return QW_OK;
    }
    pthread_mutex_lock(&h->ping_mu);
    int64_t now = qw_clock_mono_ms();
    if (h->ping_at_ms == 0 || now - h->ping_at_ms >= PING_CACHE_MS) {
        struct qw_error err;
        qw_error_clear(&err);
        h->ping_rc = h->hooks.db_ping(h->hooks.ctx, &err);
        snprintf(h->ping_msg, sizeof(h->ping_msg), "%.*s", (int)sizeof(h->ping_msg) - 1,
                 h->ping_rc == QW_OK ? "" : err.msg);
        h->ping_at_ms = qw_clock_mono_ms();
    }
    int rc = h->ping_rc;
    snprintf(msg, msg_len, "%s", h->ping_msg);
    pthread_mutex_unlock(&h->ping_mu);
    return rc;
}

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, char *body,
                               const char *content_type)
{
    if (!body)
        return MHD_NO; /* out of memory: drop the connection */
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static char *text_dup(const char *text)
{
    size_t n = strlen(text);
    char *s = malloc(n + 2);
    if (s) {
        memcpy(s, text, n);
        s[n] = '\n';
        s[n + 1] = '\0';
    }
    return s;
}

static const char *const TEXT_PLAIN = "text/plain; charset=utf-8";

/* ---- slow clients ---- */

/* True when a line is due (and counts the event); *suppressed gets the events skipped before. */
static bool rate_limit_due(struct rate_limited *r, int64_t now_ms, long *suppressed)
{
    if (r->last_ms != 0 && now_ms - r->last_ms < ADMIN_WARN_EVERY_MS) {
        r->suppressed++;
        return false;
    }
    *suppressed = r->suppressed;
    r->suppressed = 0;
    r->last_ms = now_ms;
    return true;
}

/* Shuts `c` down (caller holds watch_mu); `why` names the reason in the log. */
static void conn_shut(struct qw_admin_http *h, struct conn_watch *c, int64_t now_ms,
                      const char *why)
{
    if (c->shut)
        return;
    c->shut = true;
    shutdown(c->fd, SHUT_RDWR);
    long suppressed;
    if (rate_limit_due(&h->slow_warn, now_ms, &suppressed))
        qw_log_warn("admin.slow_client",
                    "action=closed reason=%s waited_ms=%lld deadline_ms=%d "
                    "closed_since_last_line=%ld",
                    why, (long long)(now_ms - c->waiting_since_ms), ADMIN_REQUEST_DEADLINE_MS,
                    suppressed);
}

static void *watchdog_main(void *arg)
{
    struct qw_admin_http *h = arg;
    pthread_mutex_lock(&h->watch_mu);
    while (!h->stopping) {
        int64_t now = qw_clock_mono_ms();
        for (size_t i = 0; i < ADMIN_WATCH_SLOTS; i++) {
            struct conn_watch *c = &h->conns[i];
            if (c->used && !c->in_request && now - c->waiting_since_ms > ADMIN_REQUEST_DEADLINE_MS)
                conn_shut(h, c, now, "request_deadline");
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)ADMIN_WATCH_PERIOD_MS * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&h->watch_cv, &h->watch_mu, &until);
    }
    pthread_mutex_unlock(&h->watch_mu);
    return NULL;
}

/* Starts watching a new connection; makes room for probes. Caller holds watch_mu. */
static struct conn_watch *conn_started(struct qw_admin_http *h, int fd)
{
    int64_t now = qw_clock_mono_ms();
    struct conn_watch *slot = NULL, *oldest = NULL;
    int waiting = 0;
    for (size_t i = 0; i < ADMIN_WATCH_SLOTS; i++) {
        struct conn_watch *c = &h->conns[i];
        if (!c->used) {
            if (!slot)
                slot = c;
            continue;
        }
        if (c->in_request || c->shut)
            continue;
        waiting++;
        if (!oldest || c->waiting_since_ms < oldest->waiting_since_ms)
            oldest = c;
    }
    if (oldest && waiting >= ADMIN_MAX_CONNECTIONS - ADMIN_PROBE_RESERVE)
        conn_shut(h, oldest, now, "make_room");
    if (!slot) {
        /* more open connections than slots: cannot happen under the cap; refuse */
        shutdown(fd, SHUT_RDWR);
        return NULL;
    }
    *slot = (struct conn_watch){.used = true, .fd = fd, .waiting_since_ms = now};
    return slot;
}

/* MHD_OPTION_NOTIFY_CONNECTION: a connection opened or closed. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct qw_admin_http *h = cls;
    pthread_mutex_lock(&h->watch_mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = info ? conn_started(h, info->connect_fd) : NULL;
    } else if (*socket_context) {
        struct conn_watch *c = *socket_context;
        c->used = false;
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&h->watch_mu);
}

/* Marks the connection of `conn` as answering (true) or waiting again (false). */
static void conn_set_in_request(struct qw_admin_http *h, struct MHD_Connection *conn,
                                bool in_request)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (!info || !info->socket_context)
        return;
    struct conn_watch *c = info->socket_context;
    pthread_mutex_lock(&h->watch_mu);
    c->in_request = in_request;
    if (!in_request)
        c->waiting_since_ms = qw_clock_mono_ms();
    pthread_mutex_unlock(&h->watch_mu);
}

/* MHD_OPTION_NOTIFY_COMPLETED: a request was answered (or abandoned). */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)con_cls;
    (void)toe;
    conn_set_in_request(cls, conn, false);
}

/* ---- requests ---- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    struct qw_admin_http *h = cls;
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    if (!*con_cls) {
        /* first call of this request: its headers are complete */
        *con_cls = h;
        conn_set_in_request(h, conn, true);
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, text_dup("method not allowed"),
                       TEXT_PLAIN);
    if (strcmp(url, "/healthz") == 0)
        return respond(conn, MHD_HTTP_OK, text_dup("ok"), TEXT_PLAIN);
    bool metrics = strcmp(url, "/metrics") == 0;
    if (metrics || strcmp(url, "/readyz") == 0) {
        struct qw_metrics_snapshot snap;
        memset(&snap, 0, sizeof(snap));
        snap.last_cycle_age_ms = -1;
        h->hooks.snapshot(h->hooks.ctx, &snap);
        if (metrics)
            return respond(conn, MHD_HTTP_OK, qw_metrics_render(&snap, NULL),
                           "text/plain; version=0.0.4; charset=utf-8");
        char msg[200] = "", why[300], note[300] = "", body[620];
        int rc = snap.stopping ? QW_OK : cached_ping(h, msg, sizeof(msg));
        int ready = qw_admin_readiness(&snap, rc, msg, h->hooks.max_cycle_age_ms, why, sizeof(why));
        if (h->hooks.detail)
            h->hooks.detail(h->hooks.ctx, note, sizeof(note));
        snprintf(body, sizeof(body), "%s%s%s", ready ? "ready" : why, note[0] ? "\n" : "", note);
        return respond(conn, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, text_dup(body),
                       TEXT_PLAIN);
    }
    return respond(conn, MHD_HTTP_NOT_FOUND, text_dup("not found: try /healthz, /readyz, /metrics"),
                   TEXT_PLAIN);
}

__attribute__((format(printf, 2, 0))) static void on_mhd_error(void *cls, const char *fmt,
                                                               va_list ap)
{
    struct qw_admin_http *h = cls;
    long suppressed;
    pthread_mutex_lock(&h->watch_mu);
    bool due = rate_limit_due(&h->mhd_warn, qw_clock_mono_ms(), &suppressed);
    pthread_mutex_unlock(&h->watch_mu);
    if (!due)
        return;
    char line[300];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    char quoted[340];
    qw_log_warn("admin.http_error", "error=%s errors_since_last_line=%ld",
                qw_log_quote(quoted, sizeof(quoted), line), suppressed);
}

static void admin_free(struct qw_admin_http *h)
{
    pthread_cond_destroy(&h->watch_cv);
    pthread_mutex_destroy(&h->watch_mu);
    pthread_mutex_destroy(&h->ping_mu);
    free(h);
}

int qw_admin_http_start(struct qw_admin_http **out, const char *listen,
                        const struct qw_admin_hooks *hooks, struct qw_error *err)
{
    *out = NULL;
    char host[256], why[300];
    int port = 0;
    int r = qw_admin_listen_parse(listen, host, sizeof(host), &port, why, sizeof(why));
    if (r != 0)
        return qw_error_set(err, QW_ERR_CONFIG, "admin.listen %s",
                            r > 0 ? "is off: nothing to start" : why);
    if (!hooks || !hooks->snapshot)
        return qw_error_set(err, QW_ERR_INVALID, "admin server needs a snapshot hook");

    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int gai = getaddrinfo(host, portstr, &hints, &ai);
    if (gai != 0 || !ai)
        return qw_error_set(err, QW_ERR_CONFIG, "admin.listen %s: cannot resolve '%s': %s", listen,
                            host, gai_strerror(gai));

    struct qw_admin_http *h = calloc(1, sizeof(*h));
    if (!h) {
        freeaddrinfo(ai);
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }
    h->hooks = *hooks;
    pthread_mutex_init(&h->ping_mu, NULL);
    pthread_mutex_init(&h->watch_mu, NULL);
    pthread_cond_init(&h->watch_cv, NULL);
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->daemon = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_error,
        h, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)ADMIN_MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)ADMIN_TIMEOUT_S,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        h, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->daemon) {
        admin_free(h);
        return qw_error_set(err, QW_ERR_IO,
                            "admin.listen %s: cannot listen there (address in use or not "
                            "local?); choose another port or set admin.listen = \"off\"",
                            listen);
    }
    if (pthread_create(&h->watchdog, NULL, watchdog_main, h) != 0) {
        qw_admin_http_stop(h);
        return qw_error_set(err, QW_ERR_NOMEM, "admin server: cannot start its watchdog thread");
    }
    h->watchdog_started = true;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? (int)info->port : port;
    *out = h;
    return QW_OK;
}

int qw_admin_http_port(const struct qw_admin_http *h)
{
    return h ? h->port : 0;
}

void qw_admin_http_stop(struct qw_admin_http *h)
{
    if (!h)
        return;
    if (h->watchdog_started) {
        pthread_mutex_lock(&h->watch_mu);
        h->stopping = true;
        pthread_cond_signal(&h->watch_cv);
        pthread_mutex_unlock(&h->watch_mu);
        pthread_join(h->watchdog, NULL);
    }
    MHD_stop_daemon(h->daemon);
    admin_free(h);
}
