/*
 * The admin server under slow clients ("slow loris"): real sockets against
 * the real server on loopback. Clients that open a request and then send
 * one header line every 1.5 s, never finishing it, and reconnect when
 * dropped, must not keep /healthz from answering (a liveness probe would
 * restart the worker), and each of them is closed within a few seconds.
 * Phase 1: 16 such clients (they filled every slot of the old server).
 * Phase 2: 48, more than the server's connection cap.
 */
#include "admin/admin_http.h"
#include "common/clock.h"
#include "common/err.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_LORIS 48
#define TRICKLE_MS 1500    /* a slow client sends a header line this often */
#define PROBE_EVERY_MS 500 /* a probe starts this often */
#define PROBE_DEADLINE_MS                                                                          \
    2000                    /* a probe must be answered within this (a liveness probe's timeout) */
#define DROP_WITHIN_MS 5000 /* a slow client must be closed by the server within this */

static void snapshot(void *ctx, struct qw_metrics_snapshot *out)
{
    (void)ctx;
    out->instance_id = "loris-test";
    out->version = "0";
    out->last_cycle_age_ms = 10;
}

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

struct loris {
    int port;                  /* server port */
    int n;                     /* clients to keep open */
    atomic_int stop;           /* set by the test to end the attack */
    int fd[MAX_LORIS];         /* open sockets, -1 = none */
    int64_t opened[MAX_LORIS]; /* when each was opened, ms */
    int64_t closed[MAX_LORIS]; /* when each was last closed by the server, ms */
    int dropped;               /* connections the server closed */
    int64_t longest_ms;        /* longest a connection lived before the server closed it */
};

static void loris_open(struct loris *l, int i)
{
    l->fd[i] = connect_to(l->port);
    l->opened[i] = qw_clock_mono_ms();
    if (l->fd[i] >= 0) {
        static const char start[] = "GET /healthz HTTP/1.1\r\nHost: localhost\r\n";
        if (send(l->fd[i], start, sizeof(start) - 1, MSG_NOSIGNAL) < 0) {
            close(l->fd[i]);
            l->fd[i] = -1;
            l->closed[i] = l->opened[i];
        }
    }
}

static void *loris_main(void *arg)
{
    struct loris *l = arg;
    for (int i = 0; i < l->n; i++)
        loris_open(l, i);
    int64_t next_trickle = qw_clock_mono_ms() + TRICKLE_MS;
    while (!atomic_load(&l->stop)) {
        struct pollfd p[MAX_LORIS];
        for (int i = 0; i < l->n; i++)
            p[i] = (struct pollfd){.fd = l->fd[i], .events = POLLIN};
        poll(p, (nfds_t)l->n, 50);
        int64_t now = qw_clock_mono_ms();
        for (int i = 0; i < l->n; i++) {
            if (l->fd[i] < 0) {
                if (now - l->closed[i] >= 50)
                    loris_open(l, i);
                continue;
            }
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[512];
            if (recv(l->fd[i], buf, sizeof(buf), MSG_DONTWAIT) > 0)
                continue; /* an error page: the close follows */
            /* closed by the server: the attacker comes back 50 ms later */
            l->dropped++;
            if (now - l->opened[i] > l->longest_ms)
                l->longest_ms = now - l->opened[i];
            close(l->fd[i]);
            l->fd[i] = -1;
            l->closed[i] = now;
        }
        if (now >= next_trickle) {
            for (int i = 0; i < l->n; i++) {
                if (l->fd[i] >= 0)
                    send(l->fd[i], "X-Slow: 1\r\n", 11, MSG_NOSIGNAL);
            }
            next_trickle = now + TRICKLE_MS;
        }
    }
    for (int i = 0; i < l->n; i++) {
        if (l->fd[i] >= 0) {
            /* still open at the end: it counts if it outlived the bound */
            int64_t age = qw_clock_mono_ms() - l->opened[i];
            if (age > l->longest_ms)
                l->longest_ms = age;
            close(l->fd[i]);
        }
    }
    return NULL;
}

/* GET /healthz on a fresh connection; returns the time to a 200 in ms, or -1. */
static int64_t probe(int port)
{
    int64_t t0 = qw_clock_mono_ms();
    int fd = connect_to(port);
    if (fd < 0)
        return -1;
    static const char req[] = "GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) != (ssize_t)sizeof(req) - 1) {
        close(fd);
        return -1;
    }
    char buf[1024];
    size_t len = 0;
    for (;;) {
        int64_t left = t0 + PROBE_DEADLINE_MS - qw_clock_mono_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) != 1)
            break;
        ssize_t got = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    buf[len] = '\0';
    int64_t took = qw_clock_mono_ms() - t0;
    if (strncmp(buf, "HTTP/1.0 200", 12) != 0 && strncmp(buf, "HTTP/1.1 200", 12) != 0)
        return -1;
    return took;
}

/* Runs `clients` slow clients for `ms` while probing; checks probes and drops. */
static void attack(int port, int clients, int64_t ms)
{
    static struct loris l;
    memset(&l, 0, sizeof(l));
    l.port = port;
    l.n = clients;
    for (int i = 0; i < MAX_LORIS; i++)
        l.fd[i] = -1;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, loris_main, &l), 0);
    usleep(300 * 1000); /* let them occupy the server */
    int64_t end = qw_clock_mono_ms() + ms;
    int probes = 0, failed = 0;
    int64_t worst = 0;
    while (qw_clock_mono_ms() < end) {
        int64_t took = probe(port);
        probes++;
        if (took < 0)
            failed++;
        else if (took > worst)
            worst = took;
        usleep(PROBE_EVERY_MS * 1000);
    }
    atomic_store(&l.stop, 1);
    pthread_join(t, NULL);
    printf("# %d slow clients: %d probes, %d failed, slowest %lld ms; %d drops, longest hold "
           "%lld ms\n",
           clients, probes, failed, (long long)worst, l.dropped, (long long)l.longest_ms);
    if (failed > 0)
        fail_msg("%d of %d /healthz probes got no 200 within %d ms under %d slow clients", failed,
                 probes, PROBE_DEADLINE_MS, clients);
    if (l.dropped < clients)
        fail_msg("only %d drops of %d slow clients", l.dropped, clients);
    if (l.longest_ms > DROP_WITHIN_MS)
        fail_msg("a slow client held a connection for %lld ms (bound %d ms)",
                 (long long)l.longest_ms, DROP_WITHIN_MS);
}

static void test_slow_clients_cannot_starve_probes(void **state)
{
    (void)state;
    struct qw_admin_hooks hooks = {.snapshot = snapshot};
    struct qw_admin_http *h = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_admin_http_start(&h, "127.0.0.1:0", &hooks, &err) != QW_OK)
        fail_msg("start: %s", err.msg);
    int port = qw_admin_http_port(h);
    attack(port, 16, 8000);
    attack(port, MAX_LORIS, 6000);
    /* and afterwards the server is its old self */
    assert_true(probe(port) >= 0);
    qw_admin_http_stop(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_clients_cannot_starve_probes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
