/* Unit tests for the W5 open-loop overhead figures (bench/openloop.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "common/err.h"
#include "openloop.h"

struct enq {
    const char *batch;   /* batch id */
    const char *service; /* its service */
    int64_t t_us;        /* enqueue committed */
};

#define POST(t, s, b)                                                                              \
    {                                                                                              \
        QW_SIMLOG_POST, (t), (s), (b), 202, false, false                                           \
    }
#define FINAL(t, s, b)                                                                             \
    {                                                                                              \
        QW_SIMLOG_STATUS, (t), (s), (b), 0, false, true                                            \
    }
#define COMMITTED(t, s, b)                                                                         \
    {                                                                                              \
        QW_SIMLOG_STATUS, (t), (s), (b), 0, true, true                                             \
    }

static struct qw_openloop *load(const struct enq *e, size_t ne, const struct qw_simlog_event *ev,
                                size_t nev)
{
    struct qw_openloop *ol = qw_openloop_new();
    assert_non_null(ol);
    for (size_t i = 0; i < ne; i++)
        assert_int_equal(qw_openloop_enqueued(ol, e[i].batch, e[i].service, e[i].t_us), QW_OK);
    for (size_t i = 0; i < nev; i++)
        assert_int_equal(qw_openloop_feed(ol, &ev[i]), QW_OK);
    return ol;
}

/*
 * Service A: a1 arrives idle (overhead 2 ms), a2 is enqueued while a1 is
 * in flight and goes 3 ms after a1 is final ("next"), a3 arrives after a2
 * is final (idle again, 1 ms). Service B: b1 idle (4 ms), b2 never posted.
 */
static void test_kinds_and_overheads(void **state)
{
    static const struct enq e[] = {
        {"a1", "A", 1000}, {"b1", "B", 1500},  {"a2", "A", 5000},
        {"b2", "B", 9000}, {"a3", "A", 60000},
    };
    static const struct qw_simlog_event ev[] = {
        POST(3000, "A", "a1"),       /* idle: 3000 - 1000 */
        POST(5500, "B", "b1"),       /* idle: 5500 - 1500 */
        FINAL(23000, "A", "a1"),     /* a2 waited: ready at 23000 */
        FINAL(25500, "B", "b1"),     /* b2 was enqueued before: next, but never posted */
        POST(26000, "A", "a2"),      /* next: 26000 - 23000 */
        POST(26500, "A", "a2"),      /* a repeat POST is not the first */
        FINAL(46000, "A", "a2"),     /* a3 enqueued later: idle */
        COMMITTED(47000, "A", "a2"), /* Valid -> Committed does not end a turn again */
        POST(61000, "A", "a3"),      /* idle: 61000 - 60000 */
        POST(70000, "C", "c1"),      /* unknown batch: ignored */
    };
    struct qw_openloop *ol = load(e, 5, ev, sizeof(ev) / sizeof(ev[0]));
    struct qw_openloop_figures f;
    assert_int_equal(qw_openloop_figures(ol, 0, &f), QW_OK);
    assert_int_equal(f.enqueued, 5);
    assert_int_equal(f.measured, 5);
    assert_int_equal(f.not_posted, 1);
    assert_int_equal(f.prev_not_final, 0);
    assert_int_equal(f.idle.n, 3);
    assert_int_equal(f.idle.p50_us, 2000);
    assert_int_equal(f.idle.max_us, 4000);
    assert_int_equal(f.next.n, 1);
    assert_int_equal(f.next.p50_us, 3000);
    assert_int_equal(f.all.n, 4);
    assert_int_equal(f.all.p50_us, 2000); /* {1000, 2000, 3000, 4000} */
    assert_int_equal(f.all.p99_us, 4000);

    /* a warm-up of 4 ms leaves out a1 and b1 (enqueued at 1000 and 1500 us) */
    assert_int_equal(qw_openloop_figures(ol, 4000, &f), QW_OK);
    assert_int_equal(f.measured, 3);
    assert_int_equal(f.all.n, 2);
    assert_int_equal(f.idle.n, 1);
    assert_int_equal(f.idle.p50_us, 1000);
    assert_int_equal(f.next.p50_us, 3000);
    qw_openloop_free(ol);
}

/* A batch whose predecessor never ended has no defined ready time. */
static void test_predecessor_not_final(void **state)
{
    static const struct enq e[] = {{"a1", "A", 1000}, {"a2", "A", 2000}};
    static const struct qw_simlog_event ev[] = {POST(3000, "A", "a1")};
    struct qw_openloop *ol = load(e, 2, ev, 1);
    struct qw_openloop_figures f;
    assert_int_equal(qw_openloop_figures(ol, 0, &f), QW_OK);
    assert_int_equal(f.measured, 2);
    assert_int_equal(f.prev_not_final, 1);
    assert_int_equal(f.all.n, 1);
    assert_int_equal(f.all.p50_us, 2000);
    qw_openloop_free(ol);
}

static void test_bad_input(void **state)
{
    struct qw_openloop *ol = qw_openloop_new();
    assert_int_equal(qw_openloop_enqueued(ol, NULL, "A", 1), QW_ERR_INVALID);
    char long_id[200];
    for (size_t i = 0; i < sizeof(long_id) - 1; i++)
        long_id[i] = 'a';
    long_id[sizeof(long_id) - 1] = '\0';
    assert_int_equal(qw_openloop_enqueued(ol, long_id, "A", 1), QW_ERR_INVALID);
    struct qw_openloop_figures f;
    assert_int_equal(qw_openloop_figures(ol, 0, &f), QW_OK); /* empty */
    assert_int_equal(f.all.n, 0);
    static const struct qw_simlog_event ev = POST(1, "A", "a1");
    assert_int_equal(qw_openloop_feed(ol, &ev), QW_OK);
    /* enqueue records after the first event are refused */
    assert_int_equal(qw_openloop_enqueued(ol, "a1", "A", 1), QW_ERR_INVALID);
    qw_openloop_free(ol);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds_and_overheads),
        cmocka_unit_test(test_predecessor_not_final),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
