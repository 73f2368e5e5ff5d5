/* The simulator's HTTP layer on libmicrohttpd; see http.h. */
#include "http.h"

#include "common/err.h"
#include "common/log.h"
#include "node.h"
#include "payload.h"
#include "render.h"
#include "routes.h"
#include "simclock.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/** Largest request body accepted, bytes; more is answered 413. */
#define BODY_MAX (8u * 1024 * 1024)

struct qw_sim_http {
    struct MHD_Daemon *daemon;          /* the server */
    struct qw_sim_engine *engine;       /* borrowed */
    struct qw_sim_stats *stats;         /* borrowed */
    char *token;                        /* required bearer token, NULL = none */
    int64_t hang_max_us;                /* how long a hung request is held */
    pthread_mutex_t fault_mu;           /* guards the four fields below */
    struct qw_sim_fault_config faults;  /* current fault settings */
    struct qw_sim_prng prng;            /* fault decisions */
    uint64_t seed;                      /* last seed */
    int64_t faults_since_us;            /* when the settings last changed (storm phase) */
    struct qw_sim_node *node;           /* the node served, or NULL */
    struct qw_sim_http_control control; /* the /_sim/nodes routes */
    atomic_bool retired;                /* the node went down: drop every request */
};

/* What a suspended request waits for. */
enum suspend_kind {
    SUSPEND_NONE = 0,
    SUSPEND_SLOW, /* injected delay, then answer normally */
    SUSPEND_HANG, /* never answer; close when woken */
    SUSPEND_POLL, /* long poll on batch statuses */
    SUSPEND_NODE, /* the node's latency: before a status query, or before a held answer */
};

/* One HTTP request, from its first byte to its completion callback. */
struct request {
    struct qw_sim_http *h;              /* the layer */
    struct MHD_Connection *conn;        /* its connection */
    struct qw_sim_route route;          /* parsed method and path */
    char *body;                         /* request body, malloc'd */
    size_t body_len;                    /* bytes in `body` */
    size_t body_cap;                    /* allocated bytes */
    bool too_large;                     /* body exceeded BODY_MAX (rest discarded) */
    bool decided;                       /* `fault` is set */
    struct qw_sim_fault_decision fault; /* injected faults for this request */
    bool slowed;                        /* the injected delay is over */
    enum suspend_kind suspended;        /* non-NONE while suspended (and on resume) */
    struct qw_sim_waiter waiter;        /* handed to the engine while suspended */
    struct qw_sim_id_list ids;          /* status query ids */
    int64_t poll_start_us;              /* when a long poll began */
    bool node_delayed;                  /* the node's latency has been applied */
    bool held;                          /* an answer waits for the node's latency: */
    unsigned held_status;               /* its HTTP status */
    char *held_body;                    /* its body (malloc'd) or NULL */
    size_t held_len;                    /* bytes in held_body */
    const char *held_header;            /* its extra header (static) or NULL */
    const char *held_value;             /* that header's value (static) */
};

/* The index of the node the layer serves (0 without a node). */
static int node_index(const struct qw_sim_http *h)
{
    return h->node ? h->node->index : 0;
}

/* The extra latency of the request's node, ms (0 = none). */
static int64_t node_latency_ms(const struct request *r)
{
    return r->h->node ? atomic_load(&r->h->node->latency_ms) : 0;
}

/* ---- responses --------------------------------------------------------- */

static enum MHD_Result suspend(struct request *r, enum suspend_kind kind, int64_t deadline_us);

/* Queues `status` with `body` (malloc'd, taken over; NULL = empty). A
 * submission's answer on a node with latency is held that long first. */
static enum MHD_Result respond(struct request *r, unsigned status, char *body, size_t len,
                               const char *extra_header, const char *extra_value)
{
    int64_t late_ms = node_latency_ms(r);
    if (late_ms > 0 && !r->node_delayed && r->route.kind == QW_SIM_ROUTE_BATCHES) {
        r->node_delayed = true;
        r->held = true;
        r->held_status = status;
        r->held_body = body;
        r->held_len = len;
        r->held_header = extra_header;
        r->held_value = extra_value;
        return suspend(r, SUSPEND_NODE, qw_sim_clock_now_us() + late_ms * 1000);
    }
    struct MHD_Response *resp;
    if (body)
        resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    else
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    if (body)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (extra_header)
        MHD_add_response_header(resp, extra_header, extra_value);
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result respond_json(struct request *r, unsigned status, char *body)
{
    if (!body)
        return respond(r, 500, NULL, 0, NULL, NULL);
    return respond(r, status, body, strlen(body), NULL, NULL);
}

static enum MHD_Result respond_message(struct request *r, unsigned status, const char *text)
{
    return respond_json(r, status, qw_sim_render_message(text));
}

/* respond_message() with one extra header. */
static enum MHD_Result respond_message_hdr(struct request *r, unsigned status, const char *text,
                                           const char *header, const char *value)
{
    char *body = qw_sim_render_message(text);
    if (!body)
        return respond(r, 500, NULL, 0, NULL, NULL);
    return respond(r, status, body, strlen(body), header, value);
}

/* Answers `body` (malloc'd JSON), garbled when the fault says so. */
static enum MHD_Result respond_maybe_garbled(struct request *r, unsigned status, char *body)
{
    if (!body || !r->fault.malformed)
        return respond_json(r, status, body);
    size_t len;
    char *bad = qw_sim_render_mangle(body, strlen(body), r->fault.garble, &len);
    free(body);
    if (!bad)
        return respond(r, 500, NULL, 0, NULL, NULL);
    return respond(r, status, bad, len, NULL, NULL);
}

/* ---- suspension -------------------------------------------------------- */

static void on_wake(struct qw_sim_waiter *w)
{
    struct request *r = w->arg;
    MHD_resume_connection(r->conn);
}

/* Suspends the connection until `deadline_us` or, for a poll, until the
 * listed ids settle. The handler is called again after the wake-up. */
static enum MHD_Result suspend(struct request *r, enum suspend_kind kind, int64_t deadline_us)
{
    r->suspended = kind;
    memset(&r->waiter, 0, sizeof(r->waiter));
    r->waiter.wake = on_wake;
    r->waiter.arg = r;
    r->waiter.deadline_us = deadline_us;
    if (kind == SUSPEND_POLL) {
        r->waiter.node = node_index(r->h);
        r->waiter.start_us = r->poll_start_us;
        r->waiter.service_key = r->route.service_key;
        r->waiter.ids = (const char *const *)r->ids.ids;
        r->waiter.n_ids = r->ids.n;
    }
    /* Suspend before arming: the engine may resume at once. */
    MHD_suspend_connection(r->conn);
    qw_sim_engine_wait(r->h->engine, &r->waiter);
    return MHD_YES;
}

/* ---- faults ------------------------------------------------------------ */

static void decide_faults(struct request *r, bool is_submission)
{
    if (r->decided)
        return;
    struct qw_sim_http *h = r->h;
    int64_t now = qw_sim_clock_now_us();
    pthread_mutex_lock(&h->fault_mu);
    qw_sim_fault_decide(&h->faults, &h->prng, is_submission, (now - h->faults_since_us) / 1000,
                        &r->fault);
    pthread_mutex_unlock(&h->fault_mu);
    r->decided = true;
}

/* ---- auth -------------------------------------------------------------- */

/* Compares in time independent of where the strings differ. */
static bool same_secret(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++)
        diff |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return diff == 0;
}

/* Returns 0 when allowed, else 401 or 403. */
static unsigned check_auth(struct request *r)
{
    if (!r->h->token)
        return 0;
    const char *v =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!v || !*v)
        return 401;
    if (strncasecmp(v, "Bearer ", 7) != 0)
        return 403;
    v += 7;
    while (*v == ' ')
        v++;
    return same_secret(v, r->h->token) ? 0 : 403;
}

/* ---- POST batches ------------------------------------------------------ */

static void count_post(struct request *r, int code, const char *fate)
{
    enum qw_sim_post_outcome o =
        fate ? (strcmp(fate, "drop") == 0 ? QW_SIM_POST_DROP : QW_SIM_POST_HANG)
             : qw_sim_stats_outcome(code);
    qw_sim_stats_post(r->h->stats, o);
}

static enum MHD_Result handle_submit(struct request *r)
{
    struct qw_sim_http *h = r->h;
    const char *svc = r->route.service_key;
    if (h->node && !r->decided)
        atomic_fetch_add(&h->node->posts, 1);
    decide_faults(r, true);
    if (r->fault.slow_ms > 0 && !r->slowed)
        return suspend(r, SUSPEND_SLOW, qw_sim_clock_now_us() + r->fault.slow_ms * 1000);

    struct qw_sim_payload payload = {0};
    char why[160] = "";
    int prc = QW_ERR_INVALID;
    if (r->too_large)
        snprintf(why, sizeof(why), "the request body exceeds %u bytes", BODY_MAX);
    else
        prc = qw_sim_payload_decode((const uint8_t *)r->body, r->body_len, &payload, why,
                                    sizeof(why));
    struct qw_sim_post_note note = {.slow_ms = r->slowed ? r->fault.slow_ms : 0};
    enum MHD_Result ret;

    switch (r->fault.action) {
    case QW_SIM_FAULT_DROP:
    case QW_SIM_FAULT_HANG: {
        note.fate = r->fault.action == QW_SIM_FAULT_DROP ? "drop" : "hang";
        enum qw_sim_accept_result res;
        if (r->fault.accept_first && prc == QW_OK)
            qw_sim_engine_submit(h->engine, node_index(h), svc, payload.subs, payload.n, &note,
                                 &res);
        else
            qw_sim_engine_log_post(h->engine, node_index(h), svc, payload.subs, payload.n, 0,
                                   note.fate, &note);
        count_post(r, 0, note.fate);
        if (r->fault.action == QW_SIM_FAULT_DROP)
            ret = MHD_NO;
        else
            ret = suspend(r, SUSPEND_HANG, qw_sim_clock_now_us() + h->hang_max_us);
        goto out;
    }
    case QW_SIM_FAULT_5XX:
    case QW_SIM_FAULT_429:
        note.fault = r->fault.action == QW_SIM_FAULT_5XX ? "5xx" : r->fault.burst ? "burst" : "429";
        qw_sim_engine_log_post(h->engine, node_index(h), svc, payload.subs, payload.n,
                               r->fault.http_status, NULL, &note);
        count_post(r, r->fault.http_status, NULL);
        if (r->fault.action == QW_SIM_FAULT_429)
            ret = respond(r, 429, NULL, 0, NULL, NULL);
        else
            ret = respond_message(r, (unsigned)r->fault.http_status,
                                  "simulated server error (fault injection)");
        goto out;
    case QW_SIM_FAULT_NONE:
        break;
    }

    if (prc != QW_OK) {
        unsigned code = r->too_large ? 413 : prc == QW_ERR_NOMEM ? 500 : 400;
        qw_sim_engine_log_post(h->engine, node_index(h), svc, payload.subs, payload.n, (int)code,
                               NULL, &note);
        count_post(r, (int)code, NULL);
        ret = respond_message(r, code, why);
        goto out;
    }
    enum qw_sim_accept_result res;
    note.malformed = r->fault.malformed;
    if (qw_sim_engine_submit(h->engine, node_index(h), svc, payload.subs, payload.n, &note, &res) !=
        QW_OK) {
        count_post(r, 500, NULL);
        ret = respond_message(r, 500, "out of memory");
        goto out;
    }
    if (res != QW_SIM_ACCEPTED) {
        count_post(r, 429, NULL);
        ret = respond(r, 429, NULL, 0, NULL, NULL);
        goto out;
    }
    count_post(r, 202, NULL);
    ret = respond_maybe_garbled(
        r, 202, qw_sim_render_link(r->route.circuit, r->route.service, payload.subs, payload.n));
out:
    qw_sim_payload_free(&payload);
    return ret;
}

/* ---- GET batch_statuses ------------------------------------------------ */

static enum MHD_Result answer_statuses(struct request *r, char *body, int64_t waited_ms)
{
    atomic_fetch_add(&r->h->stats->gets, 1);
    atomic_fetch_add(&r->h->stats->statuses_served, r->ids.n);
    qw_sim_engine_log_get(r->h->engine, node_index(r->h), r->route.service_key, r->ids.n, 200, NULL,
                          waited_ms);
    return respond_maybe_garbled(r, 200, body);
}

static enum MHD_Result handle_statuses(struct request *r)
{
    struct qw_sim_http *h = r->h;
    const char *svc = r->route.service_key;
    int64_t late_ms = node_latency_ms(r);
    if (late_ms > 0 && !r->node_delayed) {
        r->node_delayed = true;
        return suspend(r, SUSPEND_NODE, qw_sim_clock_now_us() + late_ms * 1000);
    }
    if (h->node && !r->decided)
        atomic_fetch_add(&h->node->gets, 1);
    decide_faults(r, false);
    if (r->fault.slow_ms > 0 && !r->slowed)
        return suspend(r, SUSPEND_SLOW, qw_sim_clock_now_us() + r->fault.slow_ms * 1000);

    const char *ids_text = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "ids");
    size_t n_hint = 0;
    if (ids_text && *ids_text) {
        n_hint = 1;
        for (const char *p = ids_text; *p; p++)
            n_hint += *p == ',';
    }
    switch (r->fault.action) {
    case QW_SIM_FAULT_DROP:
        atomic_fetch_add(&h->stats->gets, 1);
        qw_sim_engine_log_get(h->engine, node_index(h), svc, n_hint, 0, "drop", 0);
        return MHD_NO;
    case QW_SIM_FAULT_HANG:
        atomic_fetch_add(&h->stats->gets, 1);
        qw_sim_engine_log_get(h->engine, node_index(h), svc, n_hint, 0, "hang", 0);
        return suspend(r, SUSPEND_HANG, qw_sim_clock_now_us() + h->hang_max_us);
    case QW_SIM_FAULT_5XX:
        atomic_fetch_add(&h->stats->gets, 1);
        qw_sim_engine_log_get(h->engine, node_index(h), svc, n_hint, r->fault.http_status, NULL, 0);
        return respond_message(r, (unsigned)r->fault.http_status,
                               "simulated server error (fault injection)");
    case QW_SIM_FAULT_429:
    case QW_SIM_FAULT_NONE:
        break;
    }

    char why[160];
    int64_t wait_ms =
        qw_sim_wait_parse(MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "wait"));
    /* A long poll resumed while the daemon stops is answered and then
     * handed to the handler once more, which dispatches it again: the ids
     * of the earlier call go first. */
    qw_sim_ids_free(&r->ids);
    if (qw_sim_ids_parse(ids_text, &r->ids, why, sizeof(why)) != QW_OK) {
        atomic_fetch_add(&h->stats->gets, 1);
        qw_sim_engine_log_get(h->engine, node_index(h), svc, n_hint, 400, NULL, 0);
        return respond_message(r, 400, why);
    }
    bool settled;
    char *body = qw_sim_engine_render_statuses(h->engine, node_index(h), svc,
                                               (const char *const *)r->ids.ids, r->ids.n, &settled);
    if (settled || wait_ms == 0 || !body)
        return answer_statuses(r, body, 0);
    free(body);
    atomic_fetch_add(&h->stats->long_polls, 1);
    r->poll_start_us = qw_sim_clock_now_us();
    return suspend(r, SUSPEND_POLL, r->poll_start_us + wait_ms * 1000);
}

/* ---- control routes ---------------------------------------------------- */

static char *faults_body(struct qw_sim_http *h)
{
    pthread_mutex_lock(&h->fault_mu);
    json_t *o = qw_sim_fault_to_json(&h->faults);
    uint64_t seed = h->seed;
    pthread_mutex_unlock(&h->fault_mu);
    if (!o)
        return NULL;
    char seed_text[24];
    snprintf(seed_text, sizeof(seed_text), "%llu", (unsigned long long)seed);
    json_object_set_new(o, "seed", json_string(seed_text));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static enum MHD_Result handle_faults_post(struct request *r)
{
    struct qw_sim_http *h = r->h;
    json_error_t jerr;
    json_t *changes = r->body ? json_loadb(r->body, r->body_len, 0, &jerr) : NULL;
    if (!changes)
        return respond_message(r, 400, "body must be a JSON object");
    char why[160] = "";
    uint64_t seed = 0;
    bool seed_set = false;
    pthread_mutex_lock(&h->fault_mu);
    int rc = qw_sim_fault_apply_json(&h->faults, changes, &seed, &seed_set, why, sizeof(why));
    if (rc == QW_OK) {
        h->faults_since_us = qw_sim_clock_now_us();
        if (seed_set) {
            h->seed = seed;
            qw_sim_prng_seed(&h->prng, seed);
        }
    }
    pthread_mutex_unlock(&h->fault_mu);
    json_decref(changes);
    if (rc != QW_OK)
        return respond_message(r, 400, why);
    char *body = faults_body(h);
    qw_log_info("sim.faults.changed", "faults=%s", body ? body : "?");
    return respond_json(r, 200, body);
}

static enum MHD_Result handle_control(struct request *r)
{
    struct qw_sim_http *h = r->h;
    switch (r->route.kind) {
    case QW_SIM_ROUTE_RESTART:
        qw_sim_engine_restart(h->engine, "http");
        return respond_json(r, 200, strdup("{\"restarted\":true}"));
    case QW_SIM_ROUTE_PAUSE:
    case QW_SIM_ROUTE_RESUME: {
        bool paused = r->route.kind == QW_SIM_ROUTE_PAUSE;
        qw_sim_engine_set_paused(h->engine, paused);
        return respond_json(r, 200, strdup(paused ? "{\"paused\":true}" : "{\"paused\":false}"));
    }
    case QW_SIM_ROUTE_FAULTS:
        return handle_faults_post(r);
    case QW_SIM_ROUTE_NODES:
        return respond_json(r, 200,
                            h->control.render ? h->control.render(h->control.ctx) : strdup("[]"));
    case QW_SIM_ROUTE_NODE: {
        char why[160] = "no such node";
        json_error_t jerr;
        json_t *change = r->body ? json_loadb(r->body, r->body_len, 0, &jerr) : NULL;
        int rc = h->control.apply && change
                     ? h->control.apply(h->control.ctx, r->route.node, change, why, sizeof(why))
                     : QW_ERR_INVALID;
        if (!change)
            snprintf(why, sizeof(why), "body must be a JSON object");
        json_decref(change);
        if (rc != QW_OK)
            return respond_message(r, rc == QW_ERR_NOMEM ? 500 : 400, why);
        return respond_json(r, 200, h->control.render(h->control.ctx));
    }
    case QW_SIM_ROUTE_STATS: {
        json_t *o = qw_sim_stats_to_json(h->stats);
        if (!o || qw_sim_engine_stats_json(h->engine, o) != QW_OK) {
            json_decref(o);
            return respond_message(r, 500, "out of memory");
        }
        char *s = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        return respond_json(r, 200, s);
    }
    default:
        return respond_message(r, 404, "not found");
    }
}

/* ---- dispatch ---------------------------------------------------------- */

static enum MHD_Result dispatch(struct request *r, const char *method)
{
    bool is_post = strcmp(method, "POST") == 0;
    if (r->route.kind == QW_SIM_ROUTE_NOT_FOUND) {
        if (is_post) {
            qw_sim_engine_log_post(r->h->engine, node_index(r->h), NULL, NULL, 0, 404, NULL, NULL);
            count_post(r, 404, NULL);
        }
        return respond_message(r, 404, "not found");
    }
    if (!r->route.method_allowed) {
        if (r->route.kind == QW_SIM_ROUTE_BATCHES) {
            qw_sim_engine_log_post(r->h->engine, node_index(r->h), r->route.service_key, NULL, 0,
                                   405, NULL, NULL);
            count_post(r, 405, NULL);
        }
        return respond_message_hdr(r, 405, "method not allowed", MHD_HTTP_HEADER_ALLOW,
                                   r->route.allow);
    }
    unsigned denied = check_auth(r);
    if (denied) {
        const char *why = denied == 401 ? "missing bearer token" : "wrong bearer token";
        if (r->route.kind == QW_SIM_ROUTE_BATCHES) {
            /* Name the batches in the log when the body can be read. */
            struct qw_sim_payload payload = {0};
            char ignored[160];
            if (!r->too_large)
                qw_sim_payload_decode((const uint8_t *)r->body, r->body_len, &payload, ignored,
                                      sizeof(ignored));
            qw_sim_engine_log_post(r->h->engine, node_index(r->h), r->route.service_key,
                                   payload.subs, payload.n, (int)denied, NULL, NULL);
            qw_sim_payload_free(&payload);
            count_post(r, (int)denied, NULL);
        }
        return respond_message_hdr(
            r, denied, why, denied == 401 ? MHD_HTTP_HEADER_WWW_AUTHENTICATE : NULL, "Bearer");
    }
    if (qw_sim_route_is_control(r->route.kind)) {
        if (r->route.kind == QW_SIM_ROUTE_FAULTS && !is_post)
            return respond_json(r, 200, faults_body(r->h));
        return handle_control(r);
    }
    if (r->h->node && !qw_sim_node_hosts(r->h->node, r->route.service_key)) {
        /* The service does not run on this node: splinterd has no such endpoint. */
        if (r->route.kind == QW_SIM_ROUTE_BATCHES) {
            qw_sim_engine_log_post(r->h->engine, node_index(r->h), r->route.service_key, NULL, 0,
                                   404, NULL, NULL);
            count_post(r, 404, NULL);
        }
        return respond_message(r, 404, "no such service on this node");
    }
    if (r->route.kind == QW_SIM_ROUTE_BATCHES)
        return handle_submit(r);
    return handle_statuses(r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    struct request *r = *con_cls;
    struct qw_sim_http *layer = cls;
    if (atomic_load(&layer->retired))
        return MHD_NO; /* the node is down: the connection is closed */
    if (!r) {
        r = calloc(1, sizeof(*r));
        if (!r)
            return MHD_NO;
        r->h = cls;
        r->conn = conn;
        qw_sim_route_parse(method, url, &r->route);
        *con_cls = r;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->too_large || r->body_len + n > BODY_MAX) {
            r->too_large = true;
            return MHD_YES;
        }
        if (r->body_len + n + 1 > r->body_cap) {
            size_t cap = r->body_cap ? r->body_cap : 1024;
            while (cap < r->body_len + n + 1)
                cap *= 2;
            char *nb = realloc(r->body, cap);
            if (!nb)
                return MHD_NO;
            r->body = nb;
            r->body_cap = cap;
        }
        memcpy(r->body + r->body_len, upload_data, n);
        r->body_len += n;
        r->body[r->body_len] = '\0';
        return MHD_YES;
    }
    if (r->suspended != SUSPEND_NONE) {
        enum suspend_kind kind = r->suspended;
        r->suspended = SUSPEND_NONE;
        switch (kind) {
        case SUSPEND_HANG:
            return MHD_NO;
        case SUSPEND_POLL: {
            bool settled;
            char *body =
                qw_sim_engine_render_statuses(r->h->engine, node_index(r->h), r->route.service_key,
                                              (const char *const *)r->ids.ids, r->ids.n, &settled);
            return answer_statuses(r, body, (qw_sim_clock_now_us() - r->poll_start_us) / 1000);
        }
        case SUSPEND_NODE:
            if (r->held) {
                r->held = false;
                char *body = r->held_body;
                r->held_body = NULL;
                return respond(r, r->held_status, body, r->held_len, r->held_header, r->held_value);
            }
            break;
        case SUSPEND_SLOW:
        case SUSPEND_NONE:
            r->slowed = true;
            break;
        }
    }
    return dispatch(r, method);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct request *r = *con_cls;
    if (!r)
        return;
    qw_sim_engine_cancel(r->h->engine, &r->waiter);
    qw_sim_ids_free(&r->ids);
    free(r->held_body);
    free(r->body);
    free(r);
    *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    char quoted[600];
    /* Closing a connection on purpose (drop and hang faults) makes
     * libmicrohttpd report an "internal error"; that is expected noise. */
    enum qw_log_level level =
        strstr(msg, "Application reported internal error") ? QW_LOG_DEBUG : QW_LOG_WARN;
    qw_log(level, "sim.http.mhd", "msg=%s", qw_log_quote(quoted, sizeof(quoted), msg));
}

/* ---- lifecycle --------------------------------------------------------- */

int qw_sim_http_start(const struct qw_sim_http_config *cfg, struct qw_sim_http **out)
{
    *out = NULL;
    struct qw_sim_http *h = calloc(1, sizeof(*h));
    if (!h) {
        close(cfg->listen_fd);
        return QW_ERR_NOMEM;
    }
    h->engine = cfg->engine;
    h->stats = cfg->stats;
    h->hang_max_us = cfg->hang_max_ms * 1000;
    h->faults = cfg->faults;
    h->seed = cfg->seed;
    h->faults_since_us = qw_sim_clock_now_us();
    h->node = cfg->node;
    h->control = cfg->control;
    qw_sim_prng_seed(&h->prng, cfg->seed);
    pthread_mutex_init(&h->fault_mu, NULL);
    if (cfg->token && !(h->token = strdup(cfg->token))) {
        qw_sim_http_stop(h);
        close(cfg->listen_fd);
        return QW_ERR_NOMEM;
    }
    /* MHD_USE_ITC: a node that goes down quiesces its daemon (qw_sim_http_retire). */
    unsigned flags =
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | MHD_USE_ITC;
    h->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,
        MHD_OPTION_LISTEN_SOCKET, cfg->listen_fd, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)(cfg->threads > 1 ? cfg->threads : 0), MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)8192, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 * 1024), MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, h, MHD_OPTION_END);
    if (!h->daemon) {
        qw_sim_http_stop(h);
        close(cfg->listen_fd);
        return QW_ERR_IO;
    }
    *out = h;
    return QW_OK;
}

/* Waiters of requests served by the layer `ctx`. */
static bool served_by(const struct qw_sim_waiter *w, void *ctx)
{
    const struct request *r = w->arg;
    return w->wake == on_wake && r && r->h == ctx;
}

void qw_sim_http_retire(struct qw_sim_http *h)
{
    if (atomic_exchange(&h->retired, true))
        return;
    MHD_socket fd = MHD_quiesce_daemon(h->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    size_t woken = qw_sim_engine_wake_where(h->engine, served_by, h);
    qw_log_info("sim.node.retired", "node=%d suspended_requests_dropped=%zu",
                h->node ? h->node->index : -1, woken);
}

void qw_sim_http_stop(struct qw_sim_http *h)
{
    if (!h)
        return;
    if (h->daemon)
        MHD_stop_daemon(h->daemon);
    pthread_mutex_destroy(&h->fault_mu);
    free(h->token);
    free(h);
}
