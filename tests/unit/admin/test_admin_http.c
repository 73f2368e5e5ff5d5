/*
 * Unit tests: admin HTTP pure helpers (listen parsing, readiness) and the
 * server itself on loopback against fake snapshot/ping hooks (no worker,
 * no database).
 */
#include "admin/admin_http.h"
#include "common/err.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct listen_case {
    const char *text; /* input */
    int result;       /* 1 off, 0 parsed, -1 refused */
    const char *host; /* expected host when parsed */
    int port;         /* expected port when parsed */
};

static const struct listen_case listen_cases[] = {
    {"off", 1, NULL, 0},
    {"127.0.0.1:9187", 0, "127.0.0.1", 9187},
    {"localhost:1", 0, "localhost", 1},
    {"0.0.0.0:65535", 0, "0.0.0.0", 65535},
    {"127.0.0.1:0", 0, "127.0.0.1", 0},
    {"[::1]:9187", 0, "::1", 9187},
    {"[fe80::1%eth0]:80", 0, "fe80::1%eth0", 80},
    {"127.0.0.1:65536", -1, NULL, 0},
    {"127.0.0.1:", -1, NULL, 0},
    {":9187", -1, NULL, 0},
    {"127.0.0.1", -1, NULL, 0},
    {"127.0.0.1:91a", -1, NULL, 0},
    {"127.0.0.1:-1", -1, NULL, 0},
    {"::1:9187", -1, NULL, 0},
    {"[::1]9187", -1, NULL, 0},
    {"[::1]", -1, NULL, 0},
    {"", -1, NULL, 0},
    {"OFF", -1, NULL, 0},
};

static void test_listen_parse_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(listen_cases) / sizeof(listen_cases[0]); i++) {
        const struct listen_case *c = &listen_cases[i];
        char host[64] = "", why[200] = "";
        int port = -7;
        int r = qw_admin_listen_parse(c->text, host, sizeof(host), &port, why, sizeof(why));
        if (r != c->result)
            fail_msg("'%s': %d, want %d (%s)", c->text, r, c->result, why);
        if (r == 0 && (strcmp(host, c->host) != 0 || port != c->port))
            fail_msg("'%s': %s port %d, want %s port %d", c->text, host, port, c->host, c->port);
        if (r < 0 && why[0] == '\0')
            fail_msg("'%s': refused without a reason", c->text);
    }
    char tiny[4], why[100];
    int port;
    assert_int_equal(
        qw_admin_listen_parse("localhost:1", tiny, sizeof(tiny), &port, why, sizeof(why)), -1);
}

struct ready_case {
    int stopping;       /* snapshot.stopping */
    int64_t age_ms;     /* snapshot.last_cycle_age_ms */
    int db_rc;          /* ping result */
    int64_t max_age_ms; /* limit */
    int ready;          /* expected */
    const char *why;    /* expected reason substring */
};

static const struct ready_case ready_cases[] = {
    {0, 100, QW_OK, 5000, 1, "ready"},
    {0, 5000, QW_OK, 5000, 1, "ready"},
    {0, 5001, QW_OK, 5000, 0, "last claims cycle completed 5001 ms ago (limit 5000 ms)"},
    {0, -1, QW_OK, 5000, 0, "no claims cycle completed yet"},
    {0, -1, QW_OK, 0, 1, "ready"},
    {0, 999999, QW_OK, 0, 1, "ready"},
    {0, 100, QW_ERR_DB_CONN, 5000, 0, "database unreachable: connection refused"},
    {1, 100, QW_OK, 5000, 0, "stopping"},
    {1, 100, QW_ERR_DB_CONN, 5000, 0, "stopping"},
};

/* Not ready while outcomes cannot be written (a short blip is tolerated). */
static void test_readiness_outcomes_failing(void **state)
{
    (void)state;
    struct qw_metrics_snapshot s;
    memset(&s, 0, sizeof(s));
    s.last_cycle_age_ms = 100;
    char why[200];
    s.outcomes_failing_ms = QW_ADMIN_OUTCOMES_FAILING_MS;
    assert_int_equal(qw_admin_readiness(&s, QW_OK, "", 5000, why, sizeof(why)), 1);
    s.outcomes_failing_ms = QW_ADMIN_OUTCOMES_FAILING_MS + 1;
    assert_int_equal(qw_admin_readiness(&s, QW_OK, "", 5000, why, sizeof(why)), 0);
    assert_non_null(strstr(why, "outcomes cannot be written"));
}

static void test_readiness_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(ready_cases) / sizeof(ready_cases[0]); i++) {
        const struct ready_case *c = &ready_cases[i];
        struct qw_metrics_snapshot s;
        memset(&s, 0, sizeof(s));
        s.stopping = c->stopping;
        s.last_cycle_age_ms = c->age_ms;
        char why[200];
        int r =
            qw_admin_readiness(&s, c->db_rc, "connection refused", c->max_age_ms, why, sizeof(why));
        if (r != c->ready || !strstr(why, c->why))
            fail_msg("case %zu: ready=%d why='%s', want %d '%s'", i, r, why, c->ready, c->why);
    }
}

/* ---- the server against fake hooks ---- */

struct fake {
    atomic_int stopping;  /* copied into snapshots */
    atomic_int ping_rc;   /* what the ping returns */
    atomic_int pings;     /* ping calls */
    atomic_int snapshots; /* snapshot calls */
    atomic_int degraded;  /* the detail hook has a note */
    int64_t cycle_age_ms; /* copied into snapshots */
};

static void fake_snapshot(void *ctx, struct qw_metrics_snapshot *out)
{
    struct fake *f = ctx;
    atomic_fetch_add(&f->snapshots, 1);
    out->instance_id = "fake-1";
    out->version = "9.9.9";
    out->claims_held = 40;
    out->posts_backpressure = 3;
    out->paused = 1;
    out->stopping = atomic_load(&f->stopping);
    out->last_cycle_age_ms = f->cycle_age_ms;
    out->cycle_duration.buckets[2] = 4;
    out->cycle_duration.sum_us = 8000;
}

static int fake_ping(void *ctx, struct qw_error *err)
{
    struct fake *f = ctx;
    atomic_fetch_add(&f->pings, 1);
    int rc = atomic_load(&f->ping_rc);
    if (rc != QW_OK)
        qw_error_set(err, rc, "could not connect: boom");
    return rc;
}

struct reply {
    int status;       /* HTTP status, 0 when unreadable */
    char head[2048];  /* status line and headers */
    char body[65536]; /* body, NUL-terminated */
};

/* One request over a fresh connection (HTTP/1.0: the server closes after it). */
static void request(int port, const char *method, const char *path, struct reply *r)
{
    memset(r, 0, sizeof(*r));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        fail_msg("connect to port %d: %s", port, strerror(errno));
    char req[256];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: localhost\r\n\r\n", method, path);
    assert_int_equal(write(fd, req, (size_t)n), n);
    static char buf[sizeof(r->head) + sizeof(r->body)];
    size_t len = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        /* a generous bound so a broken server fails the test instead of hanging it */
        if (poll(&p, 1, 10000) != 1)
            fail_msg("%s %s: no answer", method, path);
        ssize_t got = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    buf[len] = '\0';
    char *sep = strstr(buf, "\r\n\r\n");
    assert_non_null(sep);
    *sep = '\0';
    snprintf(r->head, sizeof(r->head), "%.*s", (int)sizeof(r->head) - 1, buf);
    snprintf(r->body, sizeof(r->body), "%.*s", (int)sizeof(r->body) - 1, sep + 4);
    sscanf(buf, "HTTP/1.%*d %d", &r->status);
}

static struct qw_admin_http *start(struct fake *f, int64_t max_age_ms)
{
    struct qw_admin_hooks hooks = {
        .snapshot = fake_snapshot, .db_ping = fake_ping, .ctx = f, .max_cycle_age_ms = max_age_ms};
    struct qw_admin_http *h = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_admin_http_start(&h, "127.0.0.1:0", &hooks, &err) != QW_OK)
        fail_msg("start: %s", err.msg);
    assert_true(qw_admin_http_port(h) > 0);
    return h;
}

static void test_server_endpoints(void **state)
{
    (void)state;
    static struct fake f;
    memset(&f, 0, sizeof(f));
    f.cycle_age_ms = 200;
    struct qw_admin_http *h = start(&f, 5000);
    int port = qw_admin_http_port(h);
    struct reply r;

    request(port, "GET", "/healthz", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "ok\n");

    request(port, "GET", "/metrics", &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.head, "text/plain; version=0.0.4"));
    assert_non_null(strstr(r.body, "queuer_claims_held 40\n"));
    assert_non_null(strstr(r.body, "queuer_submissions_total{outcome=\"backpressure\"} 3\n"));
    assert_non_null(strstr(r.body, "queuer_ledger_paused 1\n"));
    assert_non_null(
        strstr(r.body, "queuer_build_info{version=\"9.9.9\",instance_id=\"fake-1\"} 1\n"));
    assert_non_null(strstr(r.body, "queuer_cycle_duration_seconds_bucket{le=\"0.0025\"} 4\n"));
    assert_non_null(strstr(r.body, "queuer_cycle_duration_seconds_sum 0.008\n"));

    request(port, "GET", "/readyz", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "ready\n");
    assert_true(atomic_load(&f.pings) >= 1);

    atomic_store(&f.stopping, 1);
    request(port, "GET", "/readyz", &r);
    assert_int_equal(r.status, 503);
    assert_string_equal(r.body, "stopping\n");

    request(port, "HEAD", "/healthz", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "");

    request(port, "POST", "/metrics", &r);
    assert_int_equal(r.status, 405);
    assert_non_null(strstr(r.head, "Allow: GET, HEAD"));

    request(port, "GET", "/nope", &r);
    assert_int_equal(r.status, 404);

    request(port, "GET", "/healthz?x=1", &r); /* the query string is not part of the path */
    assert_int_equal(r.status, 200);
    qw_admin_http_stop(h);
}

static void test_server_not_ready(void **state)
{
    (void)state;
    static struct fake f;
    memset(&f, 0, sizeof(f));
    atomic_store(&f.ping_rc, QW_ERR_DB_CONN);
    f.cycle_age_ms = 200;
    struct qw_admin_http *h = start(&f, 5000);
    struct reply r;
    request(qw_admin_http_port(h), "GET", "/readyz", &r);
    assert_int_equal(r.status, 503);
    assert_string_equal(r.body, "database unreachable: could not connect: boom\n");
    /* /healthz does not depend on the database */
    request(qw_admin_http_port(h), "GET", "/healthz", &r);
    assert_int_equal(r.status, 200);
    qw_admin_http_stop(h);

    memset(&f, 0, sizeof(f));
    f.cycle_age_ms = 60000; /* the worker stopped cycling */
    h = start(&f, 5000);
    request(qw_admin_http_port(h), "GET", "/readyz", &r);
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "last claims cycle completed 60000 ms ago"));
    qw_admin_http_stop(h);
}

static void fake_detail(void *ctx, char *buf, size_t len)
{
    struct fake *f = ctx;
    snprintf(buf, len, "%s", atomic_load(&f->degraded) ? "wake-ups: not delivered" : "");
}

/* The detail hook's note follows the verdict on a line of its own, ready or not. */
static void test_server_detail(void **state)
{
    (void)state;
    static struct fake f;
    memset(&f, 0, sizeof(f));
    f.cycle_age_ms = 200;
    atomic_store(&f.degraded, 1);
    struct qw_admin_hooks hooks = {.snapshot = fake_snapshot,
                                   .db_ping = fake_ping,
                                   .detail = fake_detail,
                                   .ctx = &f,
                                   .max_cycle_age_ms = 5000};
    struct qw_admin_http *h = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_admin_http_start(&h, "127.0.0.1:0", &hooks, &err) != QW_OK)
        fail_msg("start: %s", err.msg);
    struct reply r;
    request(qw_admin_http_port(h), "GET", "/readyz", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "ready\nwake-ups: not delivered\n");
    atomic_store(&f.stopping, 1);
    request(qw_admin_http_port(h), "GET", "/readyz", &r);
    assert_int_equal(r.status, 503);
    assert_string_equal(r.body, "stopping\nwake-ups: not delivered\n");
    atomic_store(&f.degraded, 0); /* no note: the body is the verdict alone */
    request(qw_admin_http_port(h), "GET", "/readyz", &r);
    assert_string_equal(r.body, "stopping\n");
    qw_admin_http_stop(h);
}

static void test_server_refuses_bad_addresses(void **state)
{
    (void)state;
    static struct fake f;
    memset(&f, 0, sizeof(f));
    struct qw_admin_http *h = start(&f, 0);
    char taken[64];
    snprintf(taken, sizeof(taken), "127.0.0.1:%d", qw_admin_http_port(h));
    struct qw_admin_hooks hooks = {.snapshot = fake_snapshot, .ctx = &f};
    struct qw_admin_http *other = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    assert_int_equal(qw_admin_http_start(&other, taken, &hooks, &err), QW_ERR_IO);
    assert_null(other);
    assert_non_null(strstr(err.msg, "admin.listen"));
    qw_admin_http_stop(h);

    assert_int_equal(qw_admin_http_start(&other, "off", &hooks, &err), QW_ERR_CONFIG);
    assert_int_equal(qw_admin_http_start(&other, "nonsense", &hooks, &err), QW_ERR_CONFIG);
    assert_int_equal(qw_admin_http_start(&other, "no-such-host.invalid:80", &hooks, &err),
                     QW_ERR_CONFIG);
    struct qw_admin_hooks none = {0};
    assert_int_equal(qw_admin_http_start(&other, "127.0.0.1:0", &none, &err), QW_ERR_INVALID);
    qw_admin_http_stop(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listen_parse_table),
        cmocka_unit_test(test_readiness_table),
        cmocka_unit_test(test_readiness_outcomes_failing),
        cmocka_unit_test(test_server_endpoints),
        cmocka_unit_test(test_server_not_ready),
        cmocka_unit_test(test_server_detail),
        cmocka_unit_test(test_server_refuses_bad_addresses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
