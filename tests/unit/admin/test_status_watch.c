/* Unit tests: the `queuer status --watch` screen fits its terminal (src/admin/status_watch.c). */
#include "admin/status.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A report with `instances` workers and `stuck` stuck batches (all listed). */
static void make_report(struct qw_status_report *r, size_t instances, size_t stuck)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->at, sizeof(r->at), "2026-11-23T22:00:00.000Z");
    r->counts.waiting = 1234;
    r->counts.submitting = 7;
    r->counts.pending = 5;
    r->counts.parked = (int64_t)stuck;
    r->counts.oldest_age_s = 75;
    r->counts.services = 100;
    r->counts.services_with_work = 90;
    r->counts.services_claimed = 88;
    r->counts.services_unclaimed = 2;
    r->counts.stuck = (int64_t)stuck;
    r->counts.committed_1h = 5000;
    r->counts.committed_5m = 600;
    r->instances = calloc(instances + 1, sizeof(*r->instances));
    r->stuck = calloc(stuck + 1, sizeof(*r->stuck));
    assert_non_null(r->instances);
    assert_non_null(r->stuck);
    for (size_t i = 0; i < instances; i++) {
        snprintf(r->instances[i].instance_id, sizeof(r->instances[i].instance_id),
                 "worker-with-a-long-name-%02zu", i);
        snprintf(r->instances[i].state, sizeof(r->instances[i].state), "%s",
                 i % 5 == 4 ? "dead" : "alive");
        r->instances[i].claims_held = (int64_t)(10 + i);
    }
    r->n_instances = instances;
    for (size_t i = 0; i < stuck; i++) {
        memset(r->stuck[i].batch_id, 'a' + (int)(i % 6), 128);
        snprintf(r->stuck[i].service_id, sizeof(r->stuck[i].service_id), "abcde-%05d::zz%02d",
                 (int)(i % 10000), (int)(i % 100));
        snprintf(r->stuck[i].state, sizeof(r->stuck[i].state), "parked");
        snprintf(r->stuck[i].reasons, sizeof(r->stuck[i].reasons),
                 "parked,many_attempts,delayed_long");
        r->stuck[i].stuck_for_s = 3600 + (int64_t)i;
    }
    r->n_stuck = stuck;
}

/* Counts lines and checks none is wider than cols; returns the line count. */
static int check_fits(const char *screen, int cols)
{
    int lines = 0;
    for (const char *p = screen; *p;) {
        const char *nl = strchr(p, '\n');
        assert_non_null(nl); /* every line ends in a newline */
        if (nl - p > cols)
            fail_msg("line %d is %d columns wide (> %d): %.*s", lines + 1, (int)(nl - p), cols,
                     (int)(nl - p), p);
        lines++;
        p = nl + 1;
    }
    return lines;
}

static void test_fits_terminals(void **state)
{
    (void)state;
    static const struct {
        size_t instances, stuck;
        int rows, cols;
    } cases[] = {
        {3, 0, 24, 80},   {3, 3, 24, 80},    {40, 0, 24, 80}, {0, 50, 24, 80},
        {40, 50, 24, 80}, {40, 50, 50, 120}, {2, 2, 10, 40},  {40, 50, 5, 20},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct qw_status_report r;
        make_report(&r, cases[i].instances, cases[i].stuck);
        struct qw_status_rates rates = {.known = 1, .committed_per_s = 1234.6};
        char *screen = qw_status_render_watch(&r, &rates, NULL, cases[i].rows, cases[i].cols);
        assert_non_null(screen);
        int rows = cases[i].rows < 10 ? 10 : cases[i].rows;
        int cols = cases[i].cols < 40 ? 40 : cases[i].cols;
        int lines = check_fits(screen, cols);
        if (lines > rows - 1)
            fail_msg("case %zu: %d lines on a %d-row screen:\n%s", i, lines, rows, screen);
        assert_non_null(strstr(screen, "in flight"));
        if (rows >= 24) {
            assert_non_null(strstr(screen, "1235/s"));
            assert_non_null(strstr(screen, "waiting         1234"));
            /* what did not fit is counted, never silently dropped */
            if (cases[i].instances > 15)
                assert_non_null(strstr(screen, "more instances"));
            if (cases[i].stuck > 10)
                assert_non_null(strstr(screen, "more\n"));
            if (cases[i].stuck == 0)
                assert_non_null(strstr(screen, "stuck batches: none"));
        }
        free(screen);
        qw_status_free(&r);
    }
}

static void test_small_report_shows_everything(void **state)
{
    (void)state;
    struct qw_status_report r;
    make_report(&r, 3, 2);
    struct qw_status_rates rates = {0};
    char *screen = qw_status_render_watch(&r, &rates, "database unreachable; retrying", 24, 80);
    assert_non_null(screen);
    assert_non_null(strstr(screen, "! database unreachable; retrying"));
    assert_non_null(strstr(screen, "worker-with-a-long-name-02"));
    assert_non_null(strstr(screen, "abcde-00001::zz01"));
    assert_null(strstr(screen, "more"));
    assert_non_null(strstr(screen, "committed          -")); /* no rate before a second report */
    assert_null(strstr(screen, "vacuum"));
    free(screen);
    r.snapshot = (struct qw_status_snapshot){.holders = 1,
                                             .kind = "prepared",
                                             .role = "app",
                                             .application = "tx-17",
                                             .state = "prepared",
                                             .xids_behind = 123456,
                                             .open_s = 3600};
    screen = qw_status_render_watch(&r, &rates, NULL, 24, 200);
    assert_non_null(screen);
    assert_non_null(strstr(screen, "! vacuum held back by prepared (role app, application tx-17, "
                                   "prepared): open 1h, 123456 transactions behind\n"));
    free(screen);
    qw_status_free(&r);
}

static void test_rates(void **state)
{
    (void)state;
    struct qw_status_report a, b;
    make_report(&a, 1, 0);
    make_report(&b, 1, 0);
    b.counts.committed_1h = a.counts.committed_1h + 500;
    struct qw_status_rates r;
    qw_status_watch_rates(&a, &b, 2000, &r);
    assert_true(r.known);
    assert_true(r.committed_per_s > 249.9 && r.committed_per_s < 250.1);
    assert_true(r.committed_5m_per_s > 1.99 && r.committed_5m_per_s < 2.01);
    /* the hour window slid: never a negative rate */
    b.counts.committed_1h = a.counts.committed_1h - 10;
    qw_status_watch_rates(&a, &b, 1000, &r);
    assert_true(r.committed_per_s == 0.0);
    qw_status_watch_rates(NULL, &b, 1000, &r);
    assert_false(r.known);
    qw_status_free(&a);
    qw_status_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fits_terminals),
        cmocka_unit_test(test_small_report_shows_everything),
        cmocka_unit_test(test_rates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
