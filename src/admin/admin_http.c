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

#define ADMIN_MAX_CONNECTIONS 16 /* concurrent connections; more are refused */
#define ADMIN_TIMEOUT_S 10       /* idle connection timeout, seconds */
#define PING_CACHE_MS 1000       /* a ping result is reused this long, milliseconds */

struct qw_admin_http {
    struct MHD_Daemon *daemon;   /* the server */
    struct qw_admin_hooks hooks; /* copied at start */
    int port;                    /* bound port */
    pthread_mutex_t ping_mu;     /* guards the three ping fields, held during a ping */
    int64_t ping_at_ms;          /* monotonic time of the cached ping, 0 = none */
    int ping_rc;                 /* its result */
    char ping_msg[200];          /* its error message */
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

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    struct qw_admin_http *h = cls;
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
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
        char msg[200] = "", why[300];
        int rc = snap.stopping ? QW_OK : cached_ping(h, msg, sizeof(msg));
        int ready = qw_admin_readiness(&snap, rc, msg, h->hooks.max_cycle_age_ms, why, sizeof(why));
        return respond(conn, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
                       text_dup(ready ? "ready" : why), TEXT_PLAIN);
    }
    return respond(conn, MHD_HTTP_NOT_FOUND, text_dup("not found: try /healthz, /readyz, /metrics"),
                   TEXT_PLAIN);
}

__attribute__((format(printf, 2, 0))) static void on_mhd_error(void *cls, const char *fmt,
                                                               va_list ap)
{
    (void)cls;
    char line[300];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    char quoted[340];
    qw_log_warn("admin.http_error", "error=%s", qw_log_quote(quoted, sizeof(quoted), line));
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
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->daemon =
        MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, h,
                         MHD_OPTION_EXTERNAL_LOGGER, on_mhd_error, h, MHD_OPTION_SOCK_ADDR,
                         ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT, (unsigned)ADMIN_MAX_CONNECTIONS,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)ADMIN_TIMEOUT_S, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->daemon) {
        pthread_mutex_destroy(&h->ping_mu);
        free(h);
        return qw_error_set(err, QW_ERR_IO,
                            "admin.listen %s: cannot listen there (address in use or not "
                            "local?); choose another port or set admin.listen = \"off\"",
                            listen);
    }
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
    MHD_stop_daemon(h->daemon);
    pthread_mutex_destroy(&h->ping_mu);
    free(h);
}
