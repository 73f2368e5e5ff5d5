/* Asynchronous scabbard client on the libcurl multi interface; see dlt_client.h. */
#include "dlt/dlt_client.h"

#include "common/clock.h"
#include "common/log.h"
#include "dlt/dlt_retry_after.h"
#include "dlt/dlt_text.h"
#include "dlt/dlt_url.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define DEFAULT_RETRY_AFTER_MAX_MS 3600000 /* 1 hour */
#define RETRY_AFTER_VALUE_MAX 128          /* bytes of a Retry-After value kept, with the NUL */
#define TCP_KEEPIDLE_S 30L                 /* idle time before TCP keep-alive probes, seconds */
#define TCP_KEEPINTVL_S 10L                /* interval between keep-alive probes, seconds */
/* A kept transfer keeps its body and payload buffers up to this size, bytes. */
#define KEEP_BUFFER_MAX 65536
#define EVENTS_MAX 64 /* socket events taken per epoll_wait() (the rest wait for the next) */

/*
 * One transfer in flight. Owned by the client; after its callback it is
 * kept for the next transfer of the same kind (its easy handle keeps every
 * option but the URL, the timeout and the POST size, and libcurl keeps its
 * own buffers), or freed.
 */
struct qw_dlt_xfer {
    struct qw_dlt_xfer *prev, *next;         /* links in the client's transfer or idle list */
    CURL *easy;                              /* the curl handle of this transfer */
    enum qw_dlt_kind kind;                   /* POST or STATUS */
    int node;                                /* index of the node (base URL) it went to */
    void *user;                              /* the caller's pointer */
    char service_id[QW_SERVICE_ID_LEN + 1];  /* copy of the service_id */
    char *payload;                           /* POST: copy of the request body */
    size_t payload_cap;                      /* POST: bytes allocated for payload */
    size_t payload_len;                      /* POST: bytes in payload */
    size_t payload_sent;                     /* POST: bytes handed to libcurl so far */
    size_t max_body;                         /* response cap, bytes */
    char *body;                              /* response body so far, NUL-terminated */
    size_t body_len;                         /* bytes in body */
    size_t body_cap;                         /* bytes allocated for body */
    bool too_large;                          /* the body cap was hit */
    CURLcode result;                         /* libcurl's result once finished */
    char retry_after[RETRY_AFTER_VALUE_MAX]; /* raw Retry-After value, "" if none */
    char errbuf[CURL_ERROR_SIZE];            /* libcurl's error text */
    int64_t start_us;                        /* monotonic start time, microseconds */
    size_t n_ids;                            /* STATUS: ids asked for */
    size_t ids_cap;                          /* STATUS: entries allocated in the three arrays */
    char (*ids)[QW_BATCH_ID_LEN + 1];        /* STATUS: copies of the ids */
    const char **id_ptrs;                    /* STATUS: pointers into ids */
    struct qw_dlt_status *statuses;          /* STATUS: parsed result, n_ids entries */
};

struct qw_dlt_client {
    CURLM *multi;                    /* the multi handle: transfers and connection cache */
    struct qw_dlt_url_list nodes;    /* the base URLs of opts.base_url, node i = url[i] */
    char *ca_file;                   /* copy of opts.ca_file, NULL = system default */
    struct curl_slist *post_headers; /* headers of a POST (may hold the token) */
    struct curl_slist *get_headers;  /* headers of a GET (may hold the token) */
    long connect_timeout_ms;         /* ms */
    long request_timeout_ms;         /* ms */
    size_t max_response_bytes;       /* bytes */
    int max_in_flight;               /* transfers */
    int64_t retry_after_max_ms;      /* ms */
    char *token;                     /* copy of the bearer token for masking echoes, or NULL;
                                        wiped when freed */
    int in_flight;                   /* transfers started and not yet reported */
    bool in_callback;                /* a result callback is running */
    struct qw_dlt_xfer *head;        /* transfers in flight, newest first */
    int epfd;                        /* epoll set: libcurl's sockets, wakefd, caller_fd */
    int wakefd;                      /* eventfd that qw_dlt_wakeup() writes */
    int caller_fd;                   /* the wake_fd of the last qw_dlt_run() in the set, or -1 */
    int64_t timer_at_ms;             /* when libcurl wants its timeout action, monotonic ms;
                                        -1 = no timer */
    struct qw_dlt_xfer *idle[2];     /* finished transfers kept for reuse, per kind */
    int n_idle;                      /* entries in both idle lists; in_flight + n_idle stays
                                        within max_in_flight */
};

int qw_dlt_global_init(void)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return QW_ERR_IO;
    const curl_version_info_data *info = curl_version_info(CURLVERSION_NOW);
    if (!info || info->version_num < 0x074400) /* 7.68.0 */
        return QW_ERR_CONFIG;
    return QW_OK;
}

void qw_dlt_global_cleanup(void)
{
    curl_global_cleanup();
}

/* Overwrites then frees a header list (some entries hold the token). */
static void headers_free(struct curl_slist *list)
{
    for (struct curl_slist *it = list; it; it = it->next) {
        if (it->data)
            explicit_bzero(it->data, strlen(it->data));
    }
    curl_slist_free_all(list);
}

/* Appends `line` to *list; false on allocation failure (the list is kept). */
static bool headers_add(struct curl_slist **list, const char *line)
{
    struct curl_slist *grown = curl_slist_append(*list, line);
    if (!grown)
        return false;
    *list = grown;
    return true;
}

static bool token_valid(const char *token)
{
    for (const char *p = token; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= 0x20 || ch >= 0x7f)
            return false;
    }
    return true;
}

/* Builds the two header lists; the token line is built on the stack and wiped. */
static int headers_build(struct qw_dlt_client *c, const char *token, struct qw_error *err)
{
    bool ok = headers_add(&c->post_headers, "Content-Type: application/octet-stream") &&
              headers_add(&c->post_headers, "Accept: application/json") &&
              headers_add(&c->post_headers, "Expect:") &&
              headers_add(&c->get_headers, "Accept: application/json");
    if (ok && token && *token) {
        static const char prefix[] = "Authorization: Bearer ";
        size_t token_len = strlen(token);
        size_t len = sizeof(prefix) + token_len;
        char *line = malloc(len);
        if (!line)
            return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
        memcpy(line, prefix, sizeof(prefix) - 1);
        memcpy(line + sizeof(prefix) - 1, token, token_len + 1);
        ok = headers_add(&c->post_headers, line) && headers_add(&c->get_headers, line);
        explicit_bzero(line, len);
        free(line);
    }
    return ok ? QW_OK : qw_error_set(err, QW_ERR_NOMEM, "out of memory");
}

/*
 * libcurl's socket callback: keeps the epoll set in step with the sockets
 * and the directions libcurl waits for.
 */
static int on_socket(CURL *easy, curl_socket_t fd, int what, void *arg, void *socketp)
{
    struct qw_dlt_client *c = arg;
    (void)easy;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, fd, NULL); /* fails harmlessly once closed */
        return 0;
    }
    struct epoll_event ev = {
        .events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u),
        .data.fd = fd,
    };
    /*
     * socketp is what curl_multi_assign() gave this socket, and libcurl
     * forgets it with the CURL_POLL_REMOVE: non-NULL means it is in the
     * epoll set. (A pooled connection is removed when it goes idle, so
     * each transfer on it starts with an ADD.)
     */
    int rc = epoll_ctl(c->epfd, socketp ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev);
    if (rc != 0 && errno == (socketp ? ENOENT : EEXIST)) /* the set knew better: the other op */
        rc = epoll_ctl(c->epfd, socketp ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
    if (rc != 0)
        qw_log_warn("dlt.epoll_failed", "errno=%d", errno); /* the transfer's timeout ends it */
    else if (!socketp)
        curl_multi_assign(c->multi, fd, c);
    return 0;
}

/* libcurl's timer callback: when to call it back with CURL_SOCKET_TIMEOUT. */
static int on_timer(CURLM *multi, long timeout_ms, void *arg)
{
    struct qw_dlt_client *c = arg;
    (void)multi;
    c->timer_at_ms = timeout_ms < 0 ? -1 : qw_clock_mono_ms() + timeout_ms;
    return 0;
}

/*
 * The multi handle, driven by socket events (curl_multi_socket_action):
 * each call touches only the transfers whose sockets are ready, where
 * curl_multi_perform() would look at every transfer in flight, with a
 * poll() each.
 */
static int multi_setup(struct qw_dlt_client *c, struct qw_error *err)
{
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    c->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = c->wakefd};
    if (c->epfd < 0 || c->wakefd < 0 || epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->wakefd, &ev) != 0)
        return qw_error_set(err, QW_ERR_IO, "epoll/eventfd: %s", strerror(errno));
    c->multi = curl_multi_init();
    if (!c->multi)
        return qw_error_set(err, QW_ERR_NOMEM, "curl_multi_init failed");
    long max = c->max_in_flight;
    if (curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, max) != CURLM_OK ||
        curl_multi_setopt(c->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, max) != CURLM_OK ||
        curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, max) != CURLM_OK)
        return qw_error_set(err, QW_ERR_IO, "libcurl refused the connection limits");
    if (curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_socket) != CURLM_OK ||
        curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c) != CURLM_OK ||
        curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_timer) != CURLM_OK ||
        curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c) != CURLM_OK)
        return qw_error_set(err, QW_ERR_IO, "libcurl refused the socket callbacks");
    return QW_OK;
}

int qw_dlt_client_new(struct qw_dlt_client **out, const struct qw_dlt_opts *opts,
                      struct qw_error *err)
{
    *out = NULL;
    const char *why = NULL;
    if (!opts || qw_dlt_url_list_parse(opts->base_url, NULL, &why) != QW_OK)
        return qw_error_set(err, QW_ERR_CONFIG,
                            "dlt url must be http(s)://host[:port][/path] without ?, # or @, "
                            "or several such URLs separated by commas: %s",
                            why ? why : "out of memory");
    if (opts->token && !token_valid(opts->token))
        return qw_error_set(err, QW_ERR_CONFIG, "dlt token holds spaces or control characters");
    if (opts->connect_timeout_ms <= 0 || opts->request_timeout_ms <= 0 ||
        opts->max_response_bytes == 0 || opts->max_in_flight < 1 || opts->retry_after_max_ms < 0)
        return qw_error_set(err, QW_ERR_CONFIG, "dlt timeouts, caps and limits must be positive");
    const char *ca = opts->ca_file && *opts->ca_file ? opts->ca_file : NULL;
    if (ca && access(ca, R_OK) != 0)
        return qw_error_set(err, QW_ERR_CONFIG, "dlt CA file %s is not readable", ca);

    struct qw_dlt_client *c = calloc(1, sizeof(*c));
    if (!c)
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    c->epfd = -1;
    c->wakefd = -1;
    c->caller_fd = -1;
    c->timer_at_ms = -1;
    c->connect_timeout_ms = opts->connect_timeout_ms;
    c->request_timeout_ms = opts->request_timeout_ms;
    c->max_response_bytes = opts->max_response_bytes;
    c->max_in_flight = opts->max_in_flight;
    c->retry_after_max_ms =
        opts->retry_after_max_ms > 0 ? opts->retry_after_max_ms : DEFAULT_RETRY_AFTER_MAX_MS;

    int rc;
    bool listed = qw_dlt_url_list_parse(opts->base_url, &c->nodes, NULL) == QW_OK;
    c->ca_file = ca ? strdup(ca) : NULL;
    c->token = opts->token && *opts->token ? strdup(opts->token) : NULL;
    if (!listed || (ca && !c->ca_file) || (opts->token && *opts->token && !c->token)) {
        rc = qw_error_set(err, QW_ERR_NOMEM, "out of memory");
        goto fail;
    }
    rc = headers_build(c, opts->token, err);
    if (rc != QW_OK)
        goto fail;
    rc = multi_setup(c, err);
    if (rc != QW_OK)
        goto fail;
    *out = c;
    return QW_OK;

fail:
    qw_dlt_client_free(c);
    return rc;
}

static void xfer_free(struct qw_dlt_xfer *x)
{
    if (!x)
        return;
    if (x->easy)
        curl_easy_cleanup(x->easy);
    free(x->payload);
    free(x->body);
    free(x->ids);
    free(x->id_ptrs);
    free(x->statuses);
    free(x);
}

static void list_link(struct qw_dlt_client *c, struct qw_dlt_xfer *x)
{
    x->prev = NULL;
    x->next = c->head;
    if (c->head)
        c->head->prev = x;
    c->head = x;
    c->in_flight++;
}

static void list_unlink(struct qw_dlt_client *c, struct qw_dlt_xfer *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        c->head = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->prev = x->next = NULL;
    c->in_flight--;
}

void qw_dlt_client_free(struct qw_dlt_client *c)
{
    if (!c)
        return;
    if (c->in_flight > 0)
        qw_log_warn("dlt.client.dropped", "transfers=%d", c->in_flight);
    while (c->head) {
        struct qw_dlt_xfer *x = c->head;
        list_unlink(c, x);
        curl_multi_remove_handle(c->multi, x->easy);
        xfer_free(x);
    }
    for (int kind = 0; kind < 2; kind++) {
        while (c->idle[kind]) {
            struct qw_dlt_xfer *x = c->idle[kind];
            c->idle[kind] = x->next;
            xfer_free(x);
        }
    }
    if (c->multi)
        curl_multi_cleanup(c->multi); /* may still call on_socket: epfd closes after */
    if (c->epfd >= 0)
        close(c->epfd);
    if (c->wakefd >= 0)
        close(c->wakefd);
    headers_free(c->post_headers);
    headers_free(c->get_headers);
    if (c->token) {
        explicit_bzero(c->token, strlen(c->token));
        free(c->token);
    }
    qw_dlt_url_list_free(&c->nodes);
    free(c->ca_file);
    free(c);
}

/* libcurl write callback: appends to the body, aborting the transfer past the cap. */
static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct qw_dlt_xfer *x = arg;
    size_t len = size * nmemb;
    if (len > x->max_body - x->body_len) {
        x->too_large = true;
        return 0; /* anything but len aborts with CURLE_WRITE_ERROR */
    }
    if (x->body_len + len + 1 > x->body_cap) {
        size_t cap = x->body_cap ? x->body_cap : 1024;
        while (cap < x->body_len + len + 1)
            cap *= 2;
        if (cap > x->max_body + 1)
            cap = x->max_body + 1;
        char *grown = realloc(x->body, cap);
        if (!grown)
            return 0;
        x->body = grown;
        x->body_cap = cap;
    }
    memcpy(x->body + x->body_len, data, len);
    x->body_len += len;
    x->body[x->body_len] = '\0';
    return len;
}

/* libcurl header callback: keeps the Retry-After value of the final response. */
static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    struct qw_dlt_xfer *x = arg;
    size_t len = size * nmemb;
    static const char name[] = "Retry-After:";
    const size_t name_len = sizeof(name) - 1;
    if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        x->retry_after[0] = '\0'; /* a new response (after 1xx) starts */
    } else if (len > name_len && (data[0] == 'R' || data[0] == 'r') &&
               strncasecmp(data, name, name_len) == 0) {
        const char *value = data + name_len;
        size_t vlen = len - name_len;
        while (vlen > 0 && (value[vlen - 1] == '\r' || value[vlen - 1] == '\n'))
            vlen--;
        if (vlen >= sizeof(x->retry_after))
            vlen = sizeof(x->retry_after) - 1;
        memcpy(x->retry_after, value, vlen);
        x->retry_after[vlen] = '\0';
    }
    return len;
}

/* Feeds the POST body to libcurl. */
static size_t read_payload(char *buf, size_t size, size_t nitems, void *arg)
{
    struct qw_dlt_xfer *x = arg;
    size_t room = size * nitems;
    size_t left = x->payload_len - x->payload_sent;
    size_t n = left < room ? left : room;
    memcpy(buf, x->payload + x->payload_sent, n);
    x->payload_sent += n;
    return n;
}

/*
 * Refuses to rewind the POST body. libcurl re-sends a request on a new
 * connection when a reused one dies without an answer; for a body already
 * (partly) sent that needs a rewind, and refusing it makes the transfer
 * fail (CURLE_SEND_FAIL_REWIND) instead of silently posting the batch a
 * second time. The failure is then classified RETRY and the resubmission,
 * if any, is decided and recorded by the submitter.
 */
static int refuse_rewind(void *arg, curl_off_t offset, int origin)
{
    (void)arg;
    (void)offset;
    (void)origin;
    return CURL_SEEKFUNC_CANTSEEK;
}

/* Creates a transfer of `kind` with the options that never change; NULL when out of memory. */
static struct qw_dlt_xfer *xfer_create(struct qw_dlt_client *c, enum qw_dlt_kind kind)
{
    struct qw_dlt_xfer *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->kind = kind;
    x->easy = curl_easy_init();
    if (!x->easy) {
        free(x);
        return NULL;
    }
    CURL *e = x->easy;
    bool ok = curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, TCP_KEEPIDLE_S) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, TCP_KEEPINTVL_S) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_USERAGENT, "queuer/" QW_VERSION) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L) == CURLE_OK &&
              (!c->ca_file || curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file) == CURLE_OK) &&
              curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)c->max_response_bytes) ==
                  CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_WRITEDATA, x) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_HEADERDATA, x) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_PRIVATE, x) == CURLE_OK;
    if (ok && kind == QW_DLT_KIND_POST)
        ok = curl_easy_setopt(e, CURLOPT_POST, 1L) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_READFUNCTION, read_payload) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_READDATA, x) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, refuse_rewind) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_SEEKDATA, x) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->post_headers) == CURLE_OK;
    else if (ok)
        ok = curl_easy_setopt(e, CURLOPT_HTTPGET, 1L) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->get_headers) == CURLE_OK;
    if (!ok) {
        xfer_free(x);
        return NULL;
    }
    return x;
}

/*
 * A transfer of `kind` for a new request: a kept one when there is one, else
 * a new one (freeing a kept one of the other kind when the client already
 * holds max_in_flight handles). Sets what is per request; NULL when out of
 * memory.
 */
static struct qw_dlt_xfer *xfer_obtain(struct qw_dlt_client *c, enum qw_dlt_kind kind, int node,
                                       const char *service_id, void *user, const char *url,
                                       long timeout_ms)
{
    struct qw_dlt_xfer *x = c->idle[kind];
    if (x) {
        c->idle[kind] = x->next;
        c->n_idle--;
        x->next = NULL;
    } else {
        struct qw_dlt_xfer *other = c->idle[!kind];
        if (other && c->in_flight + c->n_idle >= c->max_in_flight) {
            c->idle[!kind] = other->next;
            c->n_idle--;
            xfer_free(other);
        }
        x = xfer_create(c, kind);
        if (!x)
            return NULL;
    }
    x->node = node;
    x->user = user;
    x->max_body = c->max_response_bytes;
    memcpy(x->service_id, service_id, QW_SERVICE_ID_LEN); /* validated by the caller */
    x->service_id[QW_SERVICE_ID_LEN] = '\0';
    x->payload_len = 0;
    x->payload_sent = 0;
    x->body_len = 0;
    if (x->body)
        x->body[0] = '\0';
    x->too_large = false;
    x->result = CURLE_OK;
    x->retry_after[0] = '\0';
    x->errbuf[0] = '\0';
    x->n_ids = 0;
    if (curl_easy_setopt(x->easy, CURLOPT_URL, url) != CURLE_OK ||
        curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, timeout_ms) != CURLE_OK) {
        xfer_free(x);
        return NULL;
    }
    return x;
}

/*
 * Keeps a finished transfer (already off the multi handle and the list) for
 * reuse while the client holds fewer than max_in_flight handles; frees it
 * otherwise. Buffers past KEEP_BUFFER_MAX (a large batch, a large answer)
 * are not kept.
 */
static void xfer_recycle(struct qw_dlt_client *c, struct qw_dlt_xfer *x)
{
    if (c->in_flight + c->n_idle >= c->max_in_flight) {
        xfer_free(x);
        return;
    }
    if (x->body_cap > KEEP_BUFFER_MAX) {
        free(x->body);
        x->body = NULL;
        x->body_cap = 0;
    }
    if (x->payload_cap > KEEP_BUFFER_MAX) {
        free(x->payload);
        x->payload = NULL;
        x->payload_cap = 0;
    }
    x->user = NULL;
    x->prev = NULL;
    x->next = c->idle[x->kind];
    c->idle[x->kind] = x;
    c->n_idle++;
}

/* Hands a prepared transfer to the multi handle; frees it on failure. */
static int xfer_start(struct qw_dlt_client *c, struct qw_dlt_xfer *x)
{
    x->start_us = qw_clock_mono_us();
    if (curl_multi_add_handle(c->multi, x->easy) != CURLM_OK) {
        xfer_free(x);
        return QW_ERR_IO;
    }
    list_link(c, x);
    return QW_OK;
}

int qw_dlt_post(struct qw_dlt_client *c, int node, const char *service_id, const void *payload,
                size_t len, void *user)
{
    if (!payload || len == 0 || node < 0 || (size_t)node >= c->nodes.n ||
        qw_dlt_service_id_parse(service_id, NULL) != QW_OK)
        return QW_ERR_INVALID;
    if (c->in_flight >= c->max_in_flight)
        return QW_ERR_BACKPRESSURE;

    const char *base = c->nodes.url[node];
    size_t url_cap = strlen(base) + 64;
    char *url = malloc(url_cap);
    if (!url)
        return QW_ERR_NOMEM;
    int rc = qw_dlt_url_batches(url, url_cap, base, service_id);
    if (rc != QW_OK) {
        free(url);
        return rc;
    }
    struct qw_dlt_xfer *x =
        xfer_obtain(c, QW_DLT_KIND_POST, node, service_id, user, url, c->request_timeout_ms);
    free(url);
    if (!x)
        return QW_ERR_NOMEM;
    if (len > x->payload_cap) {
        free(x->payload);
        x->payload_cap = 0;
        x->payload = malloc(len);
        if (!x->payload) {
            xfer_free(x);
            return QW_ERR_NOMEM;
        }
        x->payload_cap = len;
    }
    memcpy(x->payload, payload, len);
    x->payload_len = len;
    if (curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len) != CURLE_OK) {
        xfer_free(x);
        return QW_ERR_IO;
    }
    return xfer_start(c, x);
}

int qw_dlt_get_statuses(struct qw_dlt_client *c, int node, const char *service_id,
                        const char *const *ids, size_t n, int wait_s, void *user)
{
    if (!ids || n == 0 || n > QW_DLT_STATUS_MAX_IDS || wait_s < 0 || wait_s > QW_DLT_MAX_WAIT_S ||
        node < 0 || (size_t)node >= c->nodes.n ||
        qw_dlt_service_id_parse(service_id, NULL) != QW_OK)
        return QW_ERR_INVALID;
    for (size_t i = 0; i < n; i++) {
        if (!qw_dlt_batch_id_valid(ids[i]))
            return QW_ERR_INVALID;
        for (size_t j = 0; j < i; j++) {
            if (memcmp(ids[i], ids[j], QW_BATCH_ID_LEN) == 0)
                return QW_ERR_INVALID;
        }
    }
    if (c->in_flight >= c->max_in_flight)
        return QW_ERR_BACKPRESSURE;

    const char *base = c->nodes.url[node];
    size_t url_cap = strlen(base) + 96 + n * (QW_BATCH_ID_LEN + 1);
    char *url = malloc(url_cap);
    if (!url)
        return QW_ERR_NOMEM;
    int rc = qw_dlt_url_statuses(url, url_cap, base, service_id, ids, n, wait_s);
    if (rc != QW_OK) {
        free(url);
        return rc;
    }
    long timeout_ms = c->request_timeout_ms + (long)wait_s * 1000L;
    struct qw_dlt_xfer *x =
        xfer_obtain(c, QW_DLT_KIND_STATUS, node, service_id, user, url, timeout_ms);
    free(url);
    if (!x)
        return QW_ERR_NOMEM;
    if (n > x->ids_cap) {
        free(x->ids);
        free(x->id_ptrs);
        free(x->statuses);
        x->ids_cap = n;
        x->ids = calloc(n, sizeof(*x->ids));
        x->id_ptrs = calloc(n, sizeof(*x->id_ptrs));
        x->statuses = calloc(n, sizeof(*x->statuses));
        if (!x->ids || !x->id_ptrs || !x->statuses) {
            xfer_free(x);
            return QW_ERR_NOMEM;
        }
    }
    x->n_ids = n;
    for (size_t i = 0; i < n; i++) {
        memcpy(x->ids[i], ids[i], QW_BATCH_ID_LEN + 1);
        x->id_ptrs[i] = x->ids[i];
    }
    return xfer_start(c, x);
}

static enum qw_dlt_transport transport_from_curl(CURLcode rc, bool too_large)
{
    if (too_large)
        return QW_DLT_TRANSPORT_TOO_LARGE;
    switch (rc) {
    case CURLE_OK:
        return QW_DLT_TRANSPORT_OK;
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
        return QW_DLT_TRANSPORT_CONNECT;
    case CURLE_OPERATION_TIMEDOUT:
        return QW_DLT_TRANSPORT_TIMEOUT;
    case CURLE_FILESIZE_EXCEEDED:
        return QW_DLT_TRANSPORT_TOO_LARGE;
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_FAIL_REWIND:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return QW_DLT_TRANSPORT_DROPPED;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_USE_SSL_FAILED:
        return QW_DLT_TRANSPORT_TLS;
    default:
        return QW_DLT_TRANSPORT_OTHER;
    }
}

/* Classifies a finished transfer and reports it; the caller frees it afterwards. */
static void xfer_report(struct qw_dlt_client *c, struct qw_dlt_xfer *x, qw_dlt_done_fn *cb,
                        void *cb_arg)
{
    char msg[QW_DLT_MESSAGE_MAX];
    long http_status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &http_status);
    /* Before anything reads the body: a ledger or proxy may echo our credentials. */
    qw_dlt_text_mask_secret(x->body, x->body_len, c->token);
    struct qw_dlt_response resp = {
        .transport = transport_from_curl(x->result, x->too_large),
        .transport_detail = x->errbuf[0] ? x->errbuf : curl_easy_strerror(x->result),
        .http_status = http_status,
        .body = x->body,
        .body_len = x->body_len,
    };
    struct qw_dlt_result r = {
        .kind = x->kind,
        .node = x->node,
        .user = x->user,
        .service_id = x->service_id,
        .transport = resp.transport,
        .http_status = http_status,
        .retry_after_ms = -1,
        .message = msg,
    };
    if (x->retry_after[0])
        r.retry_after_ms = qw_dlt_retry_after_ms(x->retry_after, strlen(x->retry_after),
                                                 qw_clock_wall_ms(), c->retry_after_max_ms);
    if (x->kind == QW_DLT_KIND_POST) {
        r.outcome = qw_dlt_classify_post(&resp, msg, sizeof(msg));
    } else {
        r.outcome = qw_dlt_classify_status(&resp, x->id_ptrs, x->n_ids, x->statuses, &r.counts, msg,
                                           sizeof(msg));
        r.statuses = x->statuses;
        r.n_statuses = x->n_ids;
    }
    r.latency_us = qw_clock_mono_us() - x->start_us;
    c->in_callback = true;
    cb(&r, cb_arg);
    c->in_callback = false;
}

/*
 * Moves finished transfers off the multi handle, then reports them (so a
 * callback that starts a transfer never runs inside the info_read loop);
 * returns how many were reported.
 */
static int dispatch_finished(struct qw_dlt_client *c, qw_dlt_done_fn *cb, void *cb_arg)
{
    struct qw_dlt_xfer *done = NULL, **tail = &done;
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(c->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE)
            continue;
        CURL *easy = m->easy_handle;
        CURLcode code = m->data.result; /* m is invalid once the handle is removed */
        char *priv = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
        curl_multi_remove_handle(c->multi, easy);
        struct qw_dlt_xfer *x = (struct qw_dlt_xfer *)(void *)priv;
        if (!x)
            continue;
        list_unlink(c, x);
        x->result = code;
        *tail = x;
        tail = &x->next;
    }
    int reported = 0;
    while (done) {
        struct qw_dlt_xfer *x = done;
        done = x->next;
        xfer_report(c, x, cb, cb_arg);
        xfer_recycle(c, x);
        reported++;
    }
    return reported;
}

/*
 * Puts the caller's wake fd in the epoll set (in place of an earlier one);
 * a syscall only when it changes.
 */
static int watch_caller_fd(struct qw_dlt_client *c, int wake_fd)
{
    if (wake_fd == c->caller_fd)
        return QW_OK;
    if (c->caller_fd >= 0)
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->caller_fd, NULL); /* may be closed already */
    c->caller_fd = -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = wake_fd};
    if (wake_fd >= 0 && epoll_ctl(c->epfd, EPOLL_CTL_ADD, wake_fd, &ev) != 0 && errno != EEXIST)
        return QW_ERR_IO;
    c->caller_fd = wake_fd;
    return QW_OK;
}

/*
 * Waits up to `wait_ms` for events (0: only looks), hands libcurl the ready
 * sockets, then its timeout action when due. Sets *woken when the eventfd
 * or the caller's fd was readable. Returns QW_OK or QW_ERR_IO.
 */
static int step(struct qw_dlt_client *c, int wait_ms, bool *woken)
{
    struct epoll_event ev[EVENTS_MAX];
    int n = epoll_wait(c->epfd, ev, EVENTS_MAX, wait_ms);
    if (n < 0 && errno != EINTR)
        return QW_ERR_IO;
    int running = 0;
    for (int i = 0; i < n; i++) {
        int fd = ev[i].data.fd;
        if (fd == c->wakefd || fd == c->caller_fd) {
            uint64_t v;
            if (fd == c->wakefd && read(c->wakefd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                return QW_ERR_IO;
            *woken = true;
            continue;
        }
        /* as curl_multi_perform() reads poll(): an error or hang-up wakes both ways */
        uint32_t e = ev[i].events;
        int mask = ((e & (EPOLLIN | EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_IN : 0) |
                   ((e & (EPOLLOUT | EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_OUT : 0);
        if (curl_multi_socket_action(c->multi, fd, mask, &running) != CURLM_OK)
            return QW_ERR_IO;
    }
    if (c->timer_at_ms >= 0 && qw_clock_mono_ms() >= c->timer_at_ms) {
        c->timer_at_ms = -1;
        if (curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running) != CURLM_OK)
            return QW_ERR_IO;
    }
    return QW_OK;
}

int qw_dlt_run(struct qw_dlt_client *c, int timeout_ms, int wake_fd, qw_dlt_done_fn *cb,
               void *cb_arg)
{
    if (c->in_callback)
        return QW_ERR_INVALID;
    if (watch_caller_fd(c, wake_fd) != QW_OK)
        return QW_ERR_IO;
    bool woken = false;
    if (step(c, 0, &woken) != QW_OK)
        return QW_ERR_IO;
    int reported = dispatch_finished(c, cb, cb_arg);
    if (reported > 0 || timeout_ms <= 0 || woken)
        return reported;

    int wait_ms = timeout_ms;
    if (c->timer_at_ms >= 0) {
        int64_t left = c->timer_at_ms - qw_clock_mono_ms();
        if (left < wait_ms)
            wait_ms = left > 0 ? (int)left : 0;
    }
    if (step(c, wait_ms, &woken) != QW_OK)
        return QW_ERR_IO;
    return dispatch_finished(c, cb, cb_arg);
}

int qw_dlt_wakeup(struct qw_dlt_client *c)
{
    uint64_t one = 1;
    return write(c->wakefd, &one, sizeof(one)) == (ssize_t)sizeof(one) || errno == EAGAIN
               ? QW_OK
               : QW_ERR_IO;
}

int qw_dlt_in_flight(const struct qw_dlt_client *c)
{
    return c->in_flight;
}

uint32_t qw_dlt_route(const struct qw_dlt_client *c, const char *service_id)
{
    return qw_dlt_url_list_route(&c->nodes, service_id);
}

int qw_dlt_nodes(const struct qw_dlt_client *c)
{
    return (int)c->nodes.n;
}

const char *qw_dlt_node_url(const struct qw_dlt_client *c, int node)
{
    return node >= 0 && (size_t)node < c->nodes.n ? c->nodes.url[node] : NULL;
}

int qw_dlt_cancel_all(struct qw_dlt_client *c, qw_dlt_done_fn *cb, void *cb_arg)
{
    if (c->in_callback)
        return QW_ERR_INVALID;
    /* Detach the current list so transfers started by the callback survive. */
    struct qw_dlt_xfer *list = c->head;
    c->head = NULL;
    int reported = 0;
    while (list) {
        struct qw_dlt_xfer *x = list;
        list = x->next;
        c->in_flight--;
        curl_multi_remove_handle(c->multi, x->easy);
        struct qw_dlt_result r = {
            .kind = x->kind,
            .node = x->node,
            .user = x->user,
            .service_id = x->service_id,
            .outcome = QW_DLT_ABANDONED,
            .transport = QW_DLT_TRANSPORT_OTHER,
            .retry_after_ms = -1,
            .latency_us = qw_clock_mono_us() - x->start_us,
            .message = "abandoned before the ledger answered",
            .statuses = x->statuses,
            .n_statuses = x->n_ids,
        };
        if (x->statuses) {
            /* Nothing was reported: say so rather than leave zeroed ids. */
            for (size_t i = 0; i < x->n_ids; i++) {
                memset(&x->statuses[i], 0, sizeof(x->statuses[i]));
                memcpy(x->statuses[i].id, x->ids[i], QW_BATCH_ID_LEN + 1);
            }
        }
        c->in_callback = true;
        cb(&r, cb_arg);
        c->in_callback = false;
        xfer_free(x);
        reported++;
    }
    return reported;
}
