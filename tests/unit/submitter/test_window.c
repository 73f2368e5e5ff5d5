/*
 * Unit tests for a node's congestion window (submitter/window.h): slow
 * start, additive increase only while the window is used and at most every
 * 100 ms, multiplicative
 * decrease on 429, on a POST without an answer and on a node whose recent
 * latency rose, one
 * decrease per round trip, the bounds and the caller's cap. Table-driven:
 * each row is a sequence of steps and the window expected after each.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "submitter/window.h"

#include <math.h>
#include <stdio.h>

enum op {
    END = 0,
    TAKE,       /* a POST starts: n of them */
    GIVE,       /* batches leave the node: n of them */
    ACCEPT,     /* 202 to a POST of the current epoch, latency `us` */
    ACCEPT_OLD, /* 202 to a POST started before the last decrease */
    REFUSE,     /* 429 to a POST of the current epoch */
    REFUSE_OLD, /* 429 to a POST started before the last decrease */
    FAIL,       /* no answer, current epoch */
};

struct step {
    enum op op;
    int n;       /* TAKE/GIVE count */
    int64_t us;  /* ACCEPT latency, -1 = none */
    int cap;     /* cap for this step, 0 = none */
    int64_t now; /* the caller's clock at this step, ms */
    double cwnd; /* expected window after the step */
    int limit;   /* expected limit after the step (under `cap`) */
};

struct row {
    const char *name;
    double max;
    struct step steps[16];
};

static const struct row rows[] = {
    {"slow start: +1 per accepted POST while the window is full",
     64,
     {{TAKE, 4, 0, 0, 0, 4, 4},
      {ACCEPT, 0, 1000, 0, 1, 5, 5},
      {TAKE, 1, 0, 0, 1, 5, 5},
      {ACCEPT, 0, 1000, 0, 2, 6, 6},
      {ACCEPT, 0, 1000, 0, 3, 7, 7}}},
    {"an unused window does not grow",
     64,
     {{TAKE, 1, 0, 0, 0, 4, 4}, {ACCEPT, 0, 1000, 0, 1, 4, 4}, {ACCEPT, 0, 1000, 0, 2, 4, 4}}},
    {"429 shrinks it to 0.7 and ends slow start; then +max(1, 5%) at most every 100 ms",
     64,
     {{TAKE, 8, 0, 0, 0, 4, 4},
      {REFUSE, 0, -1, 0, 0, 2.8, 2},
      {ACCEPT, 0, 1000, 0, 50, 2.8, 2},
      {ACCEPT, 0, 1000, 0, 150, 3.8, 3},
      {ACCEPT, 0, 1000, 0, 200, 3.8, 3},
      {ACCEPT, 0, 1000, 0, 260, 4.8, 4}}},
    {"one decrease per round trip: answers to older POSTs do not shrink again",
     64,
     {{TAKE, 4, 0, 0, 0, 4, 4},
      {REFUSE, 0, -1, 0, 0, 2.8, 2},
      {REFUSE_OLD, 0, -1, 0, 0, 2.8, 2},
      {REFUSE_OLD, 0, -1, 0, 0, 2.8, 2},
      {REFUSE, 0, -1, 0, 0, 1.96, 1}}},
    {"a POST without an answer shrinks like a 429",
     64,
     {{TAKE, 4, 0, 0, 0, 4, 4}, {FAIL, 0, -1, 0, 0, 2.8, 2}}},
    {"never below 1",
     64,
     {{TAKE, 1, 0, 0, 0, 4, 4},
      {REFUSE, 0, -1, 0, 0, 2.8, 2},
      {REFUSE, 0, -1, 0, 0, 1.96, 1},
      {REFUSE, 0, -1, 0, 0, 1.372, 1},
      {REFUSE, 0, -1, 0, 0, 1, 1},
      {REFUSE, 0, -1, 0, 0, 1, 1}}},
    {"a slow node (recent latency over 3 x base + 250 ms) shrinks it to 9/10",
     64,
     {{TAKE, 4, 0, 0, 0, 4, 4},
      {ACCEPT, 0, 10000, 0, 1, 5, 5},
      {ACCEPT, 0, 1000000, 0, 2, 6, 6}, /* 1 s answers: the recent latency climbs (1/8 a */
      {ACCEPT, 0, 1000000, 0, 3, 6, 6}, /* step) faster than the base (1/64), and passes */
      {ACCEPT, 0, 1000000, 0, 4, 6, 6}, /* 3 x base + 250 ms at the sixth */
      {ACCEPT, 0, 1000000, 0, 5, 6, 6},
      {ACCEPT, 0, 1000000, 0, 6, 6, 6},
      {ACCEPT, 0, 1000000, 0, 7, 5.4, 5},
      {ACCEPT_OLD, 0, 1000000, 0, 8, 5.4, 5}, /* the same round trip: no decrease, no growth */
      {END, 0, 0, 0, 0, 0, 0}}},
    {"a slower node is judged by its own base latency",
     64,
     {{TAKE, 4, 0, 0, 0, 4, 4}, {ACCEPT, 0, 150000, 0, 1, 5, 5}, {ACCEPT, 0, 250000, 0, 2, 6, 6}}},
    {"not above max",
     5,
     {{TAKE, 5, 0, 0, 0, 4, 4}, {ACCEPT, 0, 1000, 0, 1, 5, 5}, {ACCEPT, 0, 1000, 0, 2, 5, 5}}},
    {"the cap (a leased share) bounds the limit and the window",
     64,
     {{TAKE, 4, 0, 3, 0, 4, 3},
      {ACCEPT, 0, 1000, 3, 1, 3, 3},
      {ACCEPT, 0, 1000, 3, 2, 3, 3},
      {GIVE, 4, 0, 0, 3, 3, 3}}},
    {"give back frees room; never below 0 in flight",
     64,
     {{TAKE, 4, 0, 0, 0, 4, 4}, {GIVE, 6, 0, 0, 0, 4, 4}, {TAKE, 4, 0, 0, 0, 4, 4}}},
};

static void test_rows(void **state)
{
    (void)state;
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        const struct row *row = &rows[r];
        struct qw_window_policy p = qw_window_policy_default(row->max);
        struct qw_window w;
        qw_window_init(&w, &p);
        uint64_t old_epoch = w.epoch;
        for (size_t i = 0; i < 16 && row->steps[i].op != END; i++) {
            const struct step *s = &row->steps[i];
            uint64_t before = w.epoch;
            switch (s->op) {
            case TAKE:
                for (int k = 0; k < s->n; k++)
                    assert_int_equal(qw_window_take(&w), w.epoch);
                break;
            case GIVE:
                for (int k = 0; k < s->n; k++)
                    qw_window_give_back(&w);
                break;
            case ACCEPT:
                qw_window_answer(&w, &p, QW_WINDOW_ACCEPTED, w.epoch, s->us, s->cap, s->now);
                break;
            case ACCEPT_OLD:
                qw_window_answer(&w, &p, QW_WINDOW_ACCEPTED, old_epoch, s->us, s->cap, s->now);
                break;
            case REFUSE:
                assert_true(
                    qw_window_answer(&w, &p, QW_WINDOW_REFUSED, w.epoch, -1, s->cap, s->now));
                break;
            case REFUSE_OLD:
                assert_false(
                    qw_window_answer(&w, &p, QW_WINDOW_REFUSED, old_epoch, -1, s->cap, s->now));
                break;
            case FAIL:
                assert_true(
                    qw_window_answer(&w, &p, QW_WINDOW_FAILED, w.epoch, -1, s->cap, s->now));
                break;
            case END:
                break;
            }
            if (w.epoch != before)
                old_epoch = before;
            if (fabs(w.cwnd - s->cwnd) > 0.05 || qw_window_limit(&w, s->cap) != s->limit)
                print_error("%s, step %zu: cwnd %.4f limit %d, expected %.4f and %d\n", row->name,
                            i, w.cwnd, qw_window_limit(&w, s->cap), s->cwnd, s->limit);
            assert_true(fabs(w.cwnd - s->cwnd) <= 0.05);
            assert_int_equal(qw_window_limit(&w, s->cap), s->limit);
            assert_true(w.in_flight >= 0);
        }
    }
}

static void test_admits_and_counters(void **state)
{
    (void)state;
    struct qw_window_policy p = qw_window_policy_default(64);
    struct qw_window w;
    qw_window_init(&w, &p);
    for (int i = 0; i < 4; i++) {
        assert_true(qw_window_admits(&w, 0));
        qw_window_take(&w);
    }
    assert_false(qw_window_admits(&w, 0));
    assert_false(qw_window_admits(&w, 2));
    qw_window_give_back(&w);
    assert_true(qw_window_admits(&w, 0));
    assert_false(qw_window_admits(&w, 3));
    qw_window_answer(&w, &p, QW_WINDOW_REFUSED, w.epoch, -1, 0, 0);
    qw_window_answer(&w, &p, QW_WINDOW_FAILED, w.epoch, -1, 0, 0);
    qw_window_answer(&w, &p, QW_WINDOW_ACCEPTED, w.epoch, 1000, 0, 0);
    /* a node that turned slow: a few slow answers move the recent latency past the mark */
    for (int i = 0; i < 10 && w.cuts_latency == 0; i++)
        qw_window_answer(&w, &p, QW_WINDOW_ACCEPTED, w.epoch, 900000, 0, 0);
    assert_int_equal(w.cuts_refused, 1);
    assert_int_equal(w.cuts_failed, 1);
    assert_int_equal(w.cuts_latency, 1);
    assert_int_equal(w.epoch, 3);
    /* after slow start a large window grows by 5% a step */
    p = qw_window_policy_default(64);
    p.initial = 40;
    qw_window_init(&w, &p);
    for (int i = 0; i < 40; i++)
        qw_window_take(&w);
    assert_true(qw_window_answer(&w, &p, QW_WINDOW_REFUSED, w.epoch, -1, 0, 0));
    assert_true(fabs(w.cwnd - 28.0) < 0.01);
    qw_window_answer(&w, &p, QW_WINDOW_ACCEPTED, w.epoch, 1000, 0, 200);
    assert_true(fabs(w.cwnd - 29.4) < 0.01);
    /* a restart (the node came back) returns to the initial window in slow start; the
     * batches at the node stay counted and older answers do not shrink it */
    p = qw_window_policy_default(64);
    qw_window_init(&w, &p);
    qw_window_take(&w);
    uint64_t before = qw_window_take(&w);
    qw_window_answer(&w, &p, QW_WINDOW_FAILED, before, -1, 0, 0);
    qw_window_answer(&w, &p, QW_WINDOW_FAILED, w.epoch, -1, 0, 0);
    assert_true(w.cwnd < 2.0);
    qw_window_restart(&w, &p);
    assert_true(fabs(w.cwnd - 4.0) < 0.01);
    assert_int_equal(w.in_flight, 2);
    assert_false(qw_window_answer(&w, &p, QW_WINDOW_REFUSED, before, -1, 0, 0));
    assert_true(fabs(w.cwnd - 4.0) < 0.01);
    qw_window_take(&w);
    qw_window_take(&w);
    qw_window_answer(&w, &p, QW_WINDOW_ACCEPTED, w.epoch, 1000, 0, 0);
    assert_true(fabs(w.cwnd - 5.0) < 0.01); /* slow start again */
    /* a small max: the initial window is the max */
    p = qw_window_policy_default(2);
    qw_window_init(&w, &p);
    assert_int_equal(qw_window_limit(&w, 0), 2);
}

/* A batch below another worker's waiting priority goes one at a time per node; others keep
 * the cap they had (none, or the shared capacity's). */
static void test_yield_cap(void **state)
{
    (void)state;
    static const struct {
        int cap, priority, yield_below, want;
    } cases[] = {
        {0, 0, INT32_MIN, 0}, /* nobody waits: no cap */
        {5, 0, INT32_MIN, 5}, /* nobody waits: the shared capacity's cap */
        {0, 0, 10, 1},        /* below a waiting priority: one at a time */
        {5, -3, 0, 1},        /* ... under a cap too */
        {0, 10, 10, 0},       /* the waiting priority itself: its own window */
        {0, 20, 10, 0},       /* above it */
        {0, -1000, -999, 1},  /* the lowest priorities compare alike */
        {0, 1000, INT32_MIN, 0},
    };
    struct qw_window_policy p = qw_window_policy_default(64);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int cap = qw_window_yield_cap(cases[i].cap, cases[i].priority, cases[i].yield_below);
        assert_int_equal(cap, cases[i].want);
        /* a window with room for many admits one batch under the yield cap, not two */
        struct qw_window w;
        qw_window_init(&w, &p);
        w.cwnd = 20;
        qw_window_take(&w);
        assert_int_equal(qw_window_admits(&w, cap), cases[i].want != 1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_admits_and_counters),
        cmocka_unit_test(test_yield_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
