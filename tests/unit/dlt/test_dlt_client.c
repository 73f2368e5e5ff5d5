/*
 * Tests of the asynchronous DLT client against a misbehaving in-process
 * HTTP server (http_stub.c) on 127.0.0.1: outcomes, headers, caps,
 * timeouts, connection reuse, the in-flight limit, wake-ups, cancellation.
 */
#include "dlt/dlt_client.h"

#include "common/clock.h"
#include "common/err.h"
#include "http_stub.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cmocka.h>

#define CONNECT_TIMEOUT_MS 500
#define REQUEST_TIMEOUT_MS 300
#define MAX_BODY 4096
#define SAFETY_MS 10000      /* a test fails rather than hangs when results never come */
#define TIMER_SLACK_US 20000 /* libcurl may fire a timeout a little before our clock says */

#define CIRCUIT "abcde-12345::"

/* What the callback saw. */
struct seen {
    int n;                                  /* callbacks so far */
    struct qw_dlt_result last;              /* copy of the latest result (pointers cleared) */
    char message[QW_DLT_MESSAGE_MAX];       /* its message */
    char service_id[QW_SERVICE_ID_LEN + 1]; /* its service_id */
    struct qw_dlt_status statuses[8];       /* its statuses (first 8) */
    int users[16];                          /* user pointers seen, as ints */
};

struct fixture {
    struct http_stub *stub;       /* the server */
    struct qw_dlt_client *client; /* a client pointed at it */
    char base_url[64];            /* http://127.0.0.1:<port> */
};

static void on_done(const struct qw_dlt_result *r, void *arg)
{
    struct seen *s = arg;
    if (s->n < 16)
        s->users[s->n] = (int)(intptr_t)r->user;
    s->n++;
    s->last = *r;
    snprintf(s->message, sizeof(s->message), "%s", r->message);
    snprintf(s->service_id, sizeof(s->service_id), "%s", r->service_id);
    for (size_t i = 0; i < r->n_statuses && i < 8; i++)
        s->statuses[i] = r->statuses[i];
    s->last.message = NULL;
    s->last.service_id = NULL;
    s->last.statuses = NULL;
}

static struct qw_dlt_opts opts_for(const char *base_url)
{
    struct qw_dlt_opts o = {
        .base_url = base_url,
        .token = "s3cret-token",
        .connect_timeout_ms = CONNECT_TIMEOUT_MS,
        .request_timeout_ms = REQUEST_TIMEOUT_MS,
        .max_response_bytes = MAX_BODY,
        .max_in_flight = 4,
        .retry_after_max_ms = 60000,
    };
    return o;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->stub = http_stub_start();
    assert_non_null(f->stub);
    snprintf(f->base_url, sizeof(f->base_url), "http://127.0.0.1:%d/", http_stub_port(f->stub));
    struct qw_dlt_opts o = opts_for(f->base_url);
    struct qw_error err;
    assert_int_equal(qw_dlt_client_new(&f->client, &o, &err), QW_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    qw_dlt_client_free(f->client);
    http_stub_stop(f->stub);
    free(f);
    return 0;
}

/* Runs the client until `want` callbacks were seen; fails after SAFETY_MS. */
static void run_until(struct qw_dlt_client *c, struct seen *s, int want)
{
    int64_t deadline = qw_clock_mono_ms() + SAFETY_MS;
    while (s->n < want) {
        if (qw_clock_mono_ms() > deadline)
            fail_msg("only %d of %d results before the safety deadline", s->n, want);
        int rc = qw_dlt_run(c, 100, -1, on_done, s);
        assert_true(rc >= 0);
    }
    assert_int_equal(qw_dlt_in_flight(c), 0);
}

/* Posts one payload to service `svc` and waits for its result. */
static void post_one(struct fixture *f, const char *svc, struct seen *s)
{
    char sid[32];
    snprintf(sid, sizeof(sid), CIRCUIT "%s", svc);
    int before = s->n;
    assert_int_equal(qw_dlt_post(f->client, 0, sid, "payload", 7, (void *)(intptr_t)42), QW_OK);
    assert_int_equal(qw_dlt_in_flight(f->client), 1);
    run_until(f->client, s, before + 1);
    assert_int_equal(s->last.kind, QW_DLT_KIND_POST);
    assert_int_equal((int)(intptr_t)s->last.user, 42);
    assert_string_equal(s->service_id, sid);
    assert_null(s->last.statuses);
    assert_true(s->last.latency_us > 0);
}

static void test_accepted_and_headers(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    char sid[] = CIRCUIT "a202";
    unsigned char payload[300];
    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (unsigned char)i;
    assert_int_equal(qw_dlt_post(f->client, 0, sid, payload, sizeof(payload), NULL), QW_OK);
    memset(payload, 0, sizeof(payload)); /* the client holds its own copy */
    run_until(f->client, &s, 1);
    assert_int_equal(s.last.outcome, QW_DLT_ACCEPTED);
    assert_int_equal(s.last.http_status, 202);
    assert_int_equal(s.last.transport, QW_DLT_TRANSPORT_OK);
    assert_int_equal(s.last.retry_after_ms, -1);
    assert_non_null(strstr(s.message, "batch_statuses?ids=abc"));

    struct http_stub_request req;
    http_stub_last(f->stub, &req);
    assert_string_equal(req.method, "POST");
    assert_string_equal(req.target, "/scabbard/abcde-12345/a202/batches");
    assert_string_equal(req.authorization, "Bearer s3cret-token");
    assert_string_equal(req.user_agent, "queuer/" QW_VERSION);
    assert_string_equal(req.content_type, "application/octet-stream");
    assert_int_equal(req.body_len, 300);
    for (size_t i = 0; i < 300; i++)
        assert_int_equal(req.body[i], (unsigned char)i);
}

/* A ledger or proxy echoing our credentials never gets them into a message. */
static void test_token_redacted(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    post_one(f, "echo", &s);
    assert_int_equal(s.last.outcome, QW_DLT_RETRY);
    assert_null(strstr(s.message, "s3cret-token"));
    assert_non_null(strstr(s.message, "Authorization:"));
    post_one(f, "ech4", &s);
    assert_int_equal(s.last.outcome, QW_DLT_INVALID);
    assert_null(strstr(s.message, "s3cret-token"));
    assert_non_null(strstr(s.message, "bad batch (client token *"));
}

static void test_backpressure_retry_after(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    post_one(f, "r429", &s);
    assert_int_equal(s.last.outcome, QW_DLT_BACKPRESSURE);
    assert_int_equal(s.last.http_status, 429);
    assert_int_equal(s.last.retry_after_ms, 7000);

    post_one(f, "d429", &s); /* Retry-After as a date long past */
    assert_int_equal(s.last.outcome, QW_DLT_BACKPRESSURE);
    assert_int_equal(s.last.retry_after_ms, 0);
}

static void test_http_errors(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    post_one(f, "e400", &s);
    assert_int_equal(s.last.outcome, QW_DLT_INVALID);
    assert_string_equal(s.message, "bad batch: signature mismatch");

    post_one(f, "a401", &s);
    assert_int_equal(s.last.outcome, QW_DLT_AUTH);
    post_one(f, "a403", &s);
    assert_int_equal(s.last.outcome, QW_DLT_AUTH);
    assert_int_equal(s.last.http_status, 403);

    post_one(f, "e503", &s);
    assert_int_equal(s.last.outcome, QW_DLT_RETRY);
    assert_int_equal(s.last.http_status, 503);
    assert_non_null(strstr(s.message, "down for maintenance"));

    post_one(f, "zzzz", &s); /* the stub answers 404 */
    assert_int_equal(s.last.outcome, QW_DLT_RETRY);
    assert_int_equal(s.last.http_status, 404);

    post_one(f, "nolk", &s); /* 202 without a link */
    assert_int_equal(s.last.outcome, QW_DLT_RETRY);
    assert_int_equal(s.last.http_status, 202);
}

static void test_response_too_large(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    post_one(f, "huge", &s); /* Content-Length above the cap */
    assert_int_equal(s.last.outcome, QW_DLT_RETRY);
    assert_int_equal(s.last.transport, QW_DLT_TRANSPORT_TOO_LARGE);

    post_one(f, "hugc", &s); /* chunked: the write callback cuts it */
    assert_int_equal(s.last.outcome, QW_DLT_RETRY);
    assert_int_equal(s.last.transport, QW_DLT_TRANSPORT_TOO_LARGE);
}

static void test_stall_and_drip_time_out(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    post_one(f, "stal", &s); /* headers, then silence */
    assert_int_equal(s.last.outcome, QW_DLT_RETRY);
    assert_int_equal(s.last.transport, QW_DLT_TRANSPORT_TIMEOUT);
    assert_true(s.last.latency_us >= REQUEST_TIMEOUT_MS * 1000 - TIMER_SLACK_US);

    post_one(f, "drip", &s); /* a byte every 20 ms, forever */
    assert_int_equal(s.last.outcome, QW_DLT_RETRY);
    assert_int_equal(s.last.transport, QW_DLT_TRANSPORT_TIMEOUT);
    assert_true(s.last.latency_us >= REQUEST_TIMEOUT_MS * 1000 - TIMER_SLACK_US);
    assert_true(s.last.latency_us < SAFETY_MS * 1000);
}

static void test_dropped_connections(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    post_one(f, "drop", &s); /* closes mid-body */
    assert_int_equal(s.last.outcome, QW_DLT_RETRY);
    assert_int_equal(s.last.transport, QW_DLT_TRANSPORT_DROPPED);

    post_one(f, "clos", &s); /* closes without a word */
    assert_int_equal(s.last.outcome, QW_DLT_RETRY);
    assert_int_equal(s.last.transport, QW_DLT_TRANSPORT_DROPPED);
    assert_int_equal(s.last.http_status, 0);
}

static void test_connect_refused(void **state)
{
    (void)state;
    /* a port nobody listens on: bind one, note it, close it */
    struct http_stub *gone = http_stub_start();
    assert_non_null(gone);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", http_stub_port(gone));
    http_stub_stop(gone);

    struct qw_dlt_opts o = opts_for(url);
    struct qw_dlt_client *c;
    assert_int_equal(qw_dlt_client_new(&c, &o, NULL), QW_OK);
    struct seen s = {0};
    assert_int_equal(qw_dlt_post(c, 0, CIRCUIT "a202", "x", 1, NULL), QW_OK);
    run_until(c, &s, 1);
    assert_int_equal(s.last.outcome, QW_DLT_RETRY);
    assert_int_equal(s.last.transport, QW_DLT_TRANSPORT_CONNECT);
    assert_int_equal(s.last.http_status, 0);
    qw_dlt_client_free(c);
}

static void test_keep_alive_reuse(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    for (int i = 0; i < 5; i++) {
        post_one(f, "a202", &s);
        assert_int_equal(s.last.outcome, QW_DLT_ACCEPTED);
    }
    post_one(f, "r429", &s);
    post_one(f, "e400", &s);
    assert_int_equal(http_stub_requests(f->stub), 7);
    assert_int_equal(http_stub_connections(f->stub), 1);
}

/*
 * Finished transfers are kept and reused: each new request starts clean,
 * whatever the one before it on the same handle did (a 429 with
 * Retry-After, a status GET with more ids, a body past the cap).
 */
static void test_reused_transfers_start_clean(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    post_one(f, "r429", &s);
    assert_int_equal(s.last.retry_after_ms, 7000);
    post_one(f, "hugc", &s);
    assert_int_equal(s.last.transport, QW_DLT_TRANSPORT_TOO_LARGE);
    post_one(f, "a202", &s);
    assert_int_equal(s.last.outcome, QW_DLT_ACCEPTED);
    assert_int_equal(s.last.transport, QW_DLT_TRANSPORT_OK);
    assert_int_equal(s.last.retry_after_ms, -1);

    char c_id[129], p_id[129];
    memset(c_id, 'c', 128);
    memset(p_id, '1', 128);
    c_id[128] = p_id[128] = '\0';
    const char *ids[] = {c_id, p_id};
    assert_int_equal(qw_dlt_get_statuses(f->client, 0, CIRCUIT "stat", ids, 2, 0, NULL), QW_OK);
    run_until(f->client, &s, 4);
    assert_int_equal(s.last.n_statuses, 2);
    assert_int_equal(s.last.counts.reported, 2);
    assert_int_equal(qw_dlt_get_statuses(f->client, 0, CIRCUIT "stat", ids + 1, 1, 0, NULL), QW_OK);
    run_until(f->client, &s, 5);
    assert_int_equal(s.last.n_statuses, 1);
    assert_string_equal(s.statuses[0].id, p_id);
    assert_int_equal(s.statuses[0].type, QW_DLT_STATUS_PENDING);

    /* a POST after GETs still posts its own body */
    assert_int_equal(qw_dlt_post(f->client, 0, CIRCUIT "a202", "second", 6, NULL), QW_OK);
    run_until(f->client, &s, 6);
    assert_int_equal(s.last.outcome, QW_DLT_ACCEPTED);
    struct http_stub_request req;
    http_stub_last(f->stub, &req);
    assert_string_equal(req.method, "POST");
    assert_int_equal(req.body_len, 6);
    assert_memory_equal(req.body, "second", 6);
}

static void test_concurrent_and_limit(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    /* four at once (the limit), a fifth is refused without starting */
    for (int i = 0; i < 4; i++)
        assert_int_equal(qw_dlt_post(f->client, 0, CIRCUIT "a202", "p", 1, (void *)(intptr_t)i),
                         QW_OK);
    assert_int_equal(qw_dlt_in_flight(f->client), 4);
    assert_int_equal(qw_dlt_post(f->client, 0, CIRCUIT "a202", "p", 1, NULL), QW_ERR_BACKPRESSURE);
    const char *ids[] = {"0000000000000000000000000000000000000000000000000000000000000000"
                         "0000000000000000000000000000000000000000000000000000000000000000"};
    assert_int_equal(qw_dlt_get_statuses(f->client, 0, CIRCUIT "stat", ids, 1, 0, NULL),
                     QW_ERR_BACKPRESSURE);
    run_until(f->client, &s, 4);
    int mask = 0;
    for (int i = 0; i < 4; i++)
        mask |= 1 << s.users[i];
    assert_int_equal(mask, 0xf); /* each transfer reported exactly once */
    assert_int_equal(http_stub_requests(f->stub), 4);
    assert_true(http_stub_connections(f->stub) <= 4);
}

static void test_statuses(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    char c_id[129], p_id[129], e_id[129], f_id[129];
    memset(c_id, 'c', 128);
    memset(p_id, '1', 128);
    memset(e_id, 'e', 128);
    memset(f_id, 'f', 128);
    c_id[128] = p_id[128] = e_id[128] = f_id[128] = '\0';
    const char *ids[] = {c_id, p_id, e_id, f_id};
    assert_int_equal(qw_dlt_get_statuses(f->client, 0, CIRCUIT "stat", ids, 4, 0, (void *)7),
                     QW_OK);
    run_until(f->client, &s, 1);
    assert_int_equal(s.last.kind, QW_DLT_KIND_STATUS);
    assert_int_equal(s.last.outcome, QW_DLT_OK);
    assert_int_equal(s.last.http_status, 200);
    assert_int_equal(s.last.n_statuses, 4);
    assert_int_equal(s.last.counts.reported, 3);
    assert_int_equal(s.last.counts.missing, 1);
    assert_int_equal(s.last.counts.ignored, 1);
    assert_string_equal(s.statuses[0].id, c_id);
    assert_int_equal(s.statuses[0].type, QW_DLT_STATUS_COMMITTED);
    assert_int_equal(s.statuses[1].type, QW_DLT_STATUS_PENDING);
    assert_int_equal(s.statuses[2].type, QW_DLT_STATUS_INVALID);
    assert_string_equal(s.statuses[2].message, "bad txn");
    assert_false(s.statuses[3].reported);

    struct http_stub_request req;
    http_stub_last(f->stub, &req);
    assert_string_equal(req.method, "GET");
    char want[1024];
    snprintf(want, sizeof(want), "/scabbard/abcde-12345/stat/batch_statuses?ids=%s,%s,%s,%s&wait=0",
             c_id, p_id, e_id, f_id);
    assert_string_equal(req.target, want);
    assert_string_equal(req.authorization, "Bearer s3cret-token");

    /* a malformed answer is RETRY with nothing reported */
    assert_int_equal(qw_dlt_get_statuses(f->client, 0, CIRCUIT "sbad", ids, 2, 0, NULL), QW_OK);
    run_until(f->client, &s, 2);
    assert_int_equal(s.last.outcome, QW_DLT_RETRY);
    assert_false(s.statuses[0].reported);
    assert_false(s.statuses[1].reported);
}

static void test_long_poll_gets_wait_on_top(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    char id[129];
    memset(id, 'a', 128);
    id[128] = '\0';
    const char *ids[] = {id};
    /* wait=1: the stalled answer is cut after 1 s + the request timeout, not before */
    assert_int_equal(qw_dlt_get_statuses(f->client, 0, CIRCUIT "stal", ids, 1, 1, NULL), QW_OK);
    run_until(f->client, &s, 1);
    assert_int_equal(s.last.outcome, QW_DLT_RETRY);
    assert_int_equal(s.last.transport, QW_DLT_TRANSPORT_TIMEOUT);
    assert_true(s.last.latency_us >= (1000 + REQUEST_TIMEOUT_MS) * 1000 - TIMER_SLACK_US);
}

static void test_cancel_all(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    char id[129];
    memset(id, 'b', 128);
    id[128] = '\0';
    const char *ids[] = {id};
    assert_int_equal(qw_dlt_post(f->client, 0, CIRCUIT "stal", "p", 1, (void *)1), QW_OK);
    assert_int_equal(qw_dlt_get_statuses(f->client, 0, CIRCUIT "stal", ids, 1, 5, (void *)2),
                     QW_OK);
    /* let both get under way, then give up on them */
    assert_true(qw_dlt_run(f->client, 50, -1, on_done, &s) >= 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(qw_dlt_cancel_all(f->client, on_done, &s), 2);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.last.outcome, QW_DLT_ABANDONED);
    assert_int_equal(s.users[0] + s.users[1], 3);
    assert_int_equal(qw_dlt_in_flight(f->client), 0);
    /* a STATUS abandoned reports its ids as not reported */
    if (s.last.kind == QW_DLT_KIND_STATUS) {
        assert_string_equal(s.statuses[0].id, id);
        assert_false(s.statuses[0].reported);
    }
    /* nothing more arrives for them */
    assert_int_equal(qw_dlt_run(f->client, 0, -1, on_done, &s), 0);
    assert_int_equal(s.n, 2);
    /* and the client still works */
    post_one(f, "a202", &s);
    assert_int_equal(s.last.outcome, QW_DLT_ACCEPTED);
}

static void *wake_from_thread(void *arg)
{
    struct qw_dlt_client *c = arg;
    assert_int_equal(qw_dlt_wakeup(c), QW_OK);
    return NULL;
}

static void test_wakeups(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    /* a readable wake_fd ends the wait at once */
    int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    assert_true(efd >= 0);
    uint64_t one = 1;
    assert_int_equal(write(efd, &one, sizeof(one)), sizeof(one));
    int64_t t0 = qw_clock_mono_ms();
    assert_int_equal(qw_dlt_run(f->client, SAFETY_MS, efd, on_done, &s), 0);
    assert_true(qw_clock_mono_ms() - t0 < SAFETY_MS / 2);
    close(efd);

    /* qw_dlt_wakeup() from another thread ends the (next) wait */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wake_from_thread, f->client), 0);
    pthread_join(t, NULL);
    t0 = qw_clock_mono_ms();
    assert_int_equal(qw_dlt_run(f->client, SAFETY_MS, -1, on_done, &s), 0);
    assert_true(qw_clock_mono_ms() - t0 < SAFETY_MS / 2);
}

/* Callback that chains a second POST and checks re-entrancy guards. */
static void on_done_chain(const struct qw_dlt_result *r, void *arg)
{
    struct seen *s = arg;
    struct qw_dlt_client *c = (struct qw_dlt_client *)r->user;
    on_done(r, arg);
    assert_int_equal(qw_dlt_run(c, 0, -1, on_done, s), QW_ERR_INVALID);
    assert_int_equal(qw_dlt_cancel_all(c, on_done, s), QW_ERR_INVALID);
    if (s->n == 1)
        assert_int_equal(qw_dlt_post(c, 0, CIRCUIT "r429", "p", 1, c), QW_OK);
}

static void test_callback_may_start_transfers(void **state)
{
    struct fixture *f = *state;
    struct seen s = {0};
    assert_int_equal(qw_dlt_post(f->client, 0, CIRCUIT "a202", "p", 1, f->client), QW_OK);
    int64_t deadline = qw_clock_mono_ms() + SAFETY_MS;
    while (s.n < 2 && qw_clock_mono_ms() < deadline)
        assert_true(qw_dlt_run(f->client, 100, -1, on_done_chain, &s) >= 0);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.last.outcome, QW_DLT_BACKPRESSURE);
}

static void test_start_rejects_bad_input(void **state)
{
    struct fixture *f = *state;
    char id[129];
    memset(id, 'a', 128);
    id[128] = '\0';
    const char *ids[] = {id, id};
    const char *bad[] = {"xyz"};
    assert_int_equal(qw_dlt_post(f->client, 0, "nope", "p", 1, NULL), QW_ERR_INVALID);
    assert_int_equal(qw_dlt_post(f->client, 0, CIRCUIT "a202", "p", 0, NULL), QW_ERR_INVALID);
    assert_int_equal(qw_dlt_post(f->client, 0, CIRCUIT "a202", NULL, 1, NULL), QW_ERR_INVALID);
    assert_int_equal(qw_dlt_get_statuses(f->client, 0, CIRCUIT "stat", ids, 2, 0, NULL),
                     QW_ERR_INVALID); /* duplicate ids */
    assert_int_equal(qw_dlt_get_statuses(f->client, 0, CIRCUIT "stat", bad, 1, 0, NULL),
                     QW_ERR_INVALID);
    assert_int_equal(qw_dlt_get_statuses(f->client, 0, CIRCUIT "stat", ids, 0, 0, NULL),
                     QW_ERR_INVALID);
    assert_int_equal(qw_dlt_get_statuses(f->client, 0, CIRCUIT "stat", ids, 1, -1, NULL),
                     QW_ERR_INVALID);
    assert_int_equal(
        qw_dlt_get_statuses(f->client, 0, CIRCUIT "stat", ids, 1, QW_DLT_MAX_WAIT_S + 1, NULL),
        QW_ERR_INVALID);
    assert_int_equal(qw_dlt_get_statuses(f->client, 0, "x", ids, 1, 0, NULL), QW_ERR_INVALID);
    assert_int_equal(qw_dlt_in_flight(f->client), 0);
}

static void test_new_rejects_bad_options(void **state)
{
    (void)state;
    struct qw_dlt_client *c = (struct qw_dlt_client *)(intptr_t)1;
    struct qw_error err;
    struct qw_dlt_opts o = opts_for("http://127.0.0.1:1");

    struct qw_dlt_opts bad = o;
    bad.base_url = "file:///etc/passwd";
    assert_int_equal(qw_dlt_client_new(&c, &bad, &err), QW_ERR_CONFIG);
    assert_null(c);
    bad = o;
    bad.base_url = "http://user:pw@host";
    assert_int_equal(qw_dlt_client_new(&c, &bad, &err), QW_ERR_CONFIG);
    bad = o;
    bad.token = "abc\r\nX-Injected: 1";
    assert_int_equal(qw_dlt_client_new(&c, &bad, &err), QW_ERR_CONFIG);
    assert_null(strstr(err.msg, "abc")); /* the token is not echoed */
    bad = o;
    bad.ca_file = "/nonexistent/ca.pem";
    assert_int_equal(qw_dlt_client_new(&c, &bad, &err), QW_ERR_CONFIG);
    bad = o;
    bad.request_timeout_ms = 0;
    assert_int_equal(qw_dlt_client_new(&c, &bad, &err), QW_ERR_CONFIG);
    bad = o;
    bad.connect_timeout_ms = -1;
    assert_int_equal(qw_dlt_client_new(&c, &bad, &err), QW_ERR_CONFIG);
    bad = o;
    bad.max_response_bytes = 0;
    assert_int_equal(qw_dlt_client_new(&c, &bad, &err), QW_ERR_CONFIG);
    bad = o;
    bad.max_in_flight = 0;
    assert_int_equal(qw_dlt_client_new(&c, &bad, &err), QW_ERR_CONFIG);

    /* no token: no Authorization header at all; free with a transfer in flight is safe */
    struct http_stub *stub = http_stub_start();
    assert_non_null(stub);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", http_stub_port(stub));
    struct qw_dlt_opts plain = opts_for(url);
    plain.token = NULL;
    assert_int_equal(qw_dlt_client_new(&c, &plain, &err), QW_OK);
    struct seen s = {0};
    assert_int_equal(qw_dlt_post(c, 0, CIRCUIT "a202", "p", 1, NULL), QW_OK);
    run_until(c, &s, 1);
    struct http_stub_request req;
    http_stub_last(stub, &req);
    assert_string_equal(req.authorization, "");
    assert_int_equal(qw_dlt_post(c, 0, CIRCUIT "stal", "p", 1, NULL), QW_OK);
    qw_dlt_client_free(c);
    http_stub_stop(stub);
}

static int group_setup(void **state)
{
    (void)state;
    return qw_dlt_global_init() == QW_OK ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    qw_dlt_global_cleanup();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_accepted_and_headers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_token_redacted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backpressure_retry_after, setup, teardown),
        cmocka_unit_test_setup_teardown(test_http_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_response_too_large, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stall_and_drip_time_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dropped_connections, setup, teardown),
        cmocka_unit_test(test_connect_refused),
        cmocka_unit_test_setup_teardown(test_keep_alive_reuse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reused_transfers_start_clean, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_and_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_statuses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_poll_gets_wait_on_top, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_all, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wakeups, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callback_may_start_transfers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_start_rejects_bad_input, setup, teardown),
        cmocka_unit_test(test_new_rejects_bad_options),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
