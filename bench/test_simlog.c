/* Unit tests for the benchmark's event-log figures (bench/simlog.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "common/err.h"
#include "simlog.h"

static void test_percentile_table(void **state)
{
    static const int64_t one[] = {7};
    static const int64_t four[] = {1, 2, 3, 4};
    int64_t hundred[100], thousand[1000];
    for (int i = 0; i < 100; i++)
        hundred[i] = i + 1;
    for (int i = 0; i < 1000; i++)
        thousand[i] = i + 1;
    static const int64_t ten[] = {10, 20, 30, 40, 50, 60, 70, 80, 90, 1000};
    const struct {
        const int64_t *v; /* sorted values */
        size_t n;         /* count */
        double p;         /* percentile */
        int64_t expected; /* nearest-rank value */
    } rows[] = {
        {one, 0, 50, 0}, /* empty */
        {one, 1, 50, 7},           {one, 1, 99, 7},           {one, 1, 0, 7},
        {four, 4, 50, 2},          {four, 4, 25, 1},          {four, 4, 26, 2},
        {four, 4, 100, 4},         {four, 4, 150, 4},         {hundred, 100, 50, 50},
        {hundred, 100, 99, 99},    {hundred, 100, 99.5, 100}, {hundred, 100, 1, 1},
        {thousand, 1000, 99, 990}, {thousand, 1000, 50, 500}, {ten, 10, 99, 1000},
        {ten, 10, 90, 90},         {ten, 10, 50, 50},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int64_t got = qw_simlog_percentile(rows[i].v, rows[i].n, rows[i].p);
        if (got != rows[i].expected)
            print_error("row %zu: n=%zu p=%g\n", i, rows[i].n, rows[i].p);
        assert_int_equal(got, rows[i].expected);
    }
}

#define POST(t, s, b, c)                                                                           \
    {                                                                                              \
        QW_SIMLOG_POST, (t), (s), (b), (c), false, false                                           \
    }
#define GET(t, s)                                                                                  \
    {                                                                                              \
        QW_SIMLOG_GET, (t), (s), NULL, 200, false, false                                           \
    }
#define FINAL(t, s, b)                                                                             \
    {                                                                                              \
        QW_SIMLOG_STATUS, (t), (s), (b), 0, false, true                                            \
    }
#define STEP(t, s, b, from_final)                                                                  \
    {                                                                                              \
        QW_SIMLOG_STATUS, (t), (s), (b), 0, (from_final), true                                     \
    }

static void feed_all(struct qw_simlog *log, const struct qw_simlog_event *evs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_int_equal(qw_simlog_feed(log, &evs[i]), QW_OK);
}

/* Two interleaved services, a 429 retry, a duplicate resubmission. */
static void test_turnaround_and_counts(void **state)
{
    static const struct qw_simlog_event evs[] = {
        POST(1000, "A", "a1", 202),
        POST(1500, "B", "b1", 202),
        GET(1600, "A"),
        GET(1700, "B"),
        FINAL(21000, "A", "a1"),
        FINAL(21500, "B", "b1"),
        POST(23000, "A", "a1", 202), /* resubmission of the final batch: no sample */
        POST(24000, "A", "a2", 429), /* first attempt of the successor: 3000 us */
        POST(26500, "B", "b2", 202), /* 5000 us */
        POST(30000, "A", "a2", 202), /* retry: no second sample */
        GET(30100, "A"),
        GET(30200, "B"),
        FINAL(46500, "B", "b2"),
        FINAL(50000, "A", "a2"), /* last batches of their services: no successor */
    };
    struct qw_simlog *log = qw_simlog_new();
    assert_non_null(log);
    feed_all(log, evs, sizeof(evs) / sizeof(evs[0]));
    struct qw_simlog_figures f;
    qw_simlog_figures(log, &f);
    assert_int_equal(f.batches_final, 4);
    assert_int_equal(f.posts, 6);
    assert_int_equal(f.posts_202, 5);
    assert_int_equal(f.posts_429, 1);
    assert_int_equal(f.posts_other, 0);
    assert_int_equal(f.gets, 4);
    assert_int_equal(f.first_post_us, 1000);
    assert_int_equal(f.last_final_us, 50000);
    assert_true(f.span_s > 0.04899 && f.span_s < 0.04901);
    assert_true(f.batches_per_s > 81.6 && f.batches_per_s < 81.7);           /* 4 / 0.049 s */
    assert_true(f.requests_per_batch > 2.49 && f.requests_per_batch < 2.51); /* 10 / 4 */
    assert_int_equal(f.turnarounds, 2);
    assert_int_equal(f.turnaround_p50_us, 3000);
    assert_int_equal(f.turnaround_p99_us, 5000);
    assert_int_equal(f.turnaround_max_us, 5000);
    assert_true(f.turnaround_mean_us > 3999.9 && f.turnaround_mean_us < 4000.1);
    qw_simlog_free(log);
}

/* Pending -> Valid -> Committed: the turn ends at Valid, and the batch counts once. */
static void test_valid_step_counts_once(void **state)
{
    static const struct qw_simlog_event evs[] = {
        POST(0, "A", "a1", 202),
        STEP(10000, "A", "a1", false), /* Pending -> Valid */
        STEP(20000, "A", "a1", true),  /* Valid -> Committed */
        POST(10700, "A", "a2", 202),
        {QW_SIMLOG_STATUS, 10800, "A", "a2", 0, false, false}, /* to a non-final status */
        STEP(30000, "A", "a2", false),
    };
    struct qw_simlog *log = qw_simlog_new();
    assert_non_null(log);
    feed_all(log, evs, sizeof(evs) / sizeof(evs[0]));
    struct qw_simlog_figures f;
    qw_simlog_figures(log, &f);
    assert_int_equal(f.batches_final, 2);
    assert_int_equal(f.turnarounds, 1);
    assert_int_equal(f.turnaround_p50_us, 700);
    assert_int_equal(f.last_final_us, 30000);
    qw_simlog_free(log);
}

/* Many services force the table to grow; every service keeps its own turn. */
static void test_many_services(void **state)
{
    struct qw_simlog *log = qw_simlog_new();
    assert_non_null(log);
    enum { N = 5000 };
    char names[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "c::%04d", i);
        struct qw_simlog_event post = POST(i, names[i], "x1", 202);
        assert_int_equal(qw_simlog_feed(log, &post), QW_OK);
    }
    for (int i = 0; i < N; i++) {
        struct qw_simlog_event fin = FINAL(100000 + i, names[i], "x1");
        assert_int_equal(qw_simlog_feed(log, &fin), QW_OK);
    }
    for (int i = 0; i < N; i++) {
        /* service i waits (i + 1) * 10 us */
        struct qw_simlog_event post = POST(100000 + i + (i + 1) * 10, names[i], "x2", 202);
        assert_int_equal(qw_simlog_feed(log, &post), QW_OK);
    }
    struct qw_simlog_figures f;
    qw_simlog_figures(log, &f);
    assert_int_equal(f.turnarounds, N);
    assert_int_equal(f.turnaround_p50_us, 2500 * 10);
    assert_int_equal(f.turnaround_p99_us, 4950 * 10);
    assert_int_equal(f.turnaround_max_us, N * 10);
    qw_simlog_free(log);
}

static void test_rejects_incomplete_lines(void **state)
{
    struct qw_simlog *log = qw_simlog_new();
    assert_non_null(log);
    struct qw_simlog_event no_batch = POST(1, "A", NULL, 202);
    struct qw_simlog_event no_service = FINAL(2, NULL, "a1");
    struct qw_simlog_event other = {QW_SIMLOG_OTHER, 3, NULL, NULL, 0, false, false};
    assert_int_equal(qw_simlog_feed(log, &no_batch), QW_ERR_INVALID);
    assert_int_equal(qw_simlog_feed(log, &no_service), QW_ERR_INVALID);
    assert_int_equal(qw_simlog_feed(log, &other), QW_OK);
    struct qw_simlog_figures f;
    qw_simlog_figures(log, &f);
    assert_int_equal(f.posts, 0);
    assert_int_equal(f.batches_final, 0);
    assert_true(f.batches_per_s == 0 && f.requests_per_batch == 0);
    qw_simlog_free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentile_table),
        cmocka_unit_test(test_turnaround_and_counts),
        cmocka_unit_test(test_valid_step_counts_once),
        cmocka_unit_test(test_many_services),
        cmocka_unit_test(test_rejects_incomplete_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
