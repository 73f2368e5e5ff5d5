/* Unit tests for the capacity arithmetic (submitter/capacity.h): cost, bucket, gate, AIMD, split.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "submitter/capacity.h"

#include <stdio.h>
#include <string.h>

#define T0 INT64_C(5000000) /* some monotonic ms */

static void test_cost(void **state)
{
    (void)state;
    enum qw_capacity_cost c;
    assert_true(qw_capacity_cost_parse("batch", &c));
    assert_int_equal(c, QW_COST_BATCH);
    assert_true(qw_capacity_cost_parse("transactions", &c));
    assert_int_equal(c, QW_COST_TRANSACTIONS);
    assert_true(qw_capacity_cost_parse("bytes", &c));
    assert_int_equal(c, QW_COST_BYTES);
    assert_false(qw_capacity_cost_parse("Batch", &c));
    assert_false(qw_capacity_cost_parse("", &c));
    assert_false(qw_capacity_cost_parse(NULL, &c));
    assert_string_equal(qw_capacity_cost_name(QW_COST_BYTES), "bytes");
    static const struct {
        enum qw_capacity_cost kind;
        size_t bytes;
        int64_t txns;
        int64_t cost;
    } rows[] = {
        {QW_COST_BATCH, 500, 7, 1},        {QW_COST_TRANSACTIONS, 500, 7, 7},
        {QW_COST_TRANSACTIONS, 500, 0, 1}, {QW_COST_BYTES, 500, 7, 500},
        {QW_COST_BYTES, 0, 7, 1},          {QW_COST_TRANSACTIONS, 10, -3, 1},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int64_t got = qw_capacity_cost_of(rows[i].kind, rows[i].bytes, rows[i].txns);
        if (got != rows[i].cost)
            fail_msg("row %zu: cost %lld, expected %lld", i, (long long)got,
                     (long long)rows[i].cost);
    }
}

/* A bucket of 100/s holds 10 units (100 ms); takes and waits are exact. */
static void test_bucket_table(void **state)
{
    (void)state;
    struct qw_bucket b = {0};
    qw_bucket_set_rate(&b, 100, T0, true);
    assert_int_equal(b.burst_milli, 10000);
    static const struct {
        int64_t at;   /* ms after T0 */
        int64_t cost; /* units asked */
        int64_t wait; /* expected answer: 0 taken, else ms */
    } steps[] = {
        {0, 4, 0},                     /* 10 -> 6 */
        {0, 6, 0},                     /* 6 -> 0 */
        {0, 1, 10},                    /* empty: one unit takes 10 ms at 100/s */
        {5, 1, 5},                     /* half of it came */
        {10, 1, 0},                    /* there */
        {10, 3, 30},                   /* 0 held, 3 missing */
        {1000, 10, 0},                 /* refilled to the burst, not beyond */
        {1000, 1, 10},  {1100, 25, 0}, /* more than the burst: goes when full, into debt */
        {1100, 1, 160},                /* 15 of debt + 1 */
    };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        int64_t w = qw_bucket_take(&b, steps[i].cost, T0 + steps[i].at);
        if (w != steps[i].wait)
            fail_msg("step %zu: wait %lld, expected %lld", i, (long long)w,
                     (long long)steps[i].wait);
    }
}

static void test_bucket_rates(void **state)
{
    (void)state;
    struct qw_bucket b = {0};
    qw_bucket_set_rate(&b, 5, T0, true); /* 0.5 units of burst: rounded up to one unit */
    assert_int_equal(b.burst_milli, 1000);
    assert_int_equal(qw_bucket_take(&b, 1, T0), 0);
    assert_int_equal(qw_bucket_take(&b, 1, T0), 200);
    qw_bucket_set_rate(&b, 0, T0, false);
    assert_int_equal(qw_bucket_take(&b, 1, T0 + 100000), INT64_MAX);
    /* over a long run the bucket lets through rate x time (+ its burst) */
    qw_bucket_set_rate(&b, 950, T0, true);
    int64_t taken = 0;
    for (int64_t t = 0; t < 10000; t++) {
        while (qw_bucket_take(&b, 1, T0 + t) == 0)
            taken++;
    }
    assert_true(taken <= 9500 + 95);
    assert_true(taken >= 9500 - 1);
}

static struct qw_capacity_grant grant(int64_t in_flight, int64_t per_second, int64_t deadline)
{
    return (struct qw_capacity_grant){
        .active = true, .in_flight = in_flight, .per_second = per_second, .deadline_ms = deadline};
}

static void test_gate_inactive_takes_everything(void **state)
{
    (void)state;
    struct qw_capacity_gate g;
    qw_capacity_gate_init(&g);
    int64_t wait;
    for (int i = 0; i < 1000; i++)
        assert_int_equal(qw_capacity_try_take(&g, 1000, T0, &wait), QW_CAP_TAKEN);
    assert_int_equal(g.used, 0);
    qw_capacity_backpressure(&g, T0);
    assert_int_equal(g.factor, 1024);
}

static void test_gate_in_flight(void **state)
{
    (void)state;
    struct qw_capacity_gate g;
    qw_capacity_gate_init(&g);
    struct qw_capacity_grant gr = grant(3, QW_CAPACITY_UNLIMITED, T0 + 1000);
    qw_capacity_gate_grant(&g, &gr, T0);
    int64_t wait;
    assert_int_equal(qw_capacity_try_take(&g, 1, T0, &wait), QW_CAP_TAKEN);
    assert_int_equal(qw_capacity_try_take(&g, 2, T0, &wait), QW_CAP_TAKEN);
    assert_int_equal(qw_capacity_try_take(&g, 1, T0, &wait), QW_CAP_WAIT_SLOT);
    assert_int_equal(wait, INT64_MAX);
    qw_capacity_give_back(&g, 2);
    assert_int_equal(qw_capacity_try_take(&g, 3, T0, &wait), QW_CAP_WAIT_SLOT);
    assert_int_equal(qw_capacity_try_take(&g, 2, T0, &wait), QW_CAP_TAKEN);
    qw_capacity_give_back(&g, 3);
    assert_int_equal(g.used, 0);
    /* one batch costing more than the whole grant goes alone */
    assert_int_equal(qw_capacity_try_take(&g, 7, T0, &wait), QW_CAP_TAKEN);
    assert_int_equal(qw_capacity_try_take(&g, 1, T0, &wait), QW_CAP_WAIT_SLOT);
    qw_capacity_give_back(&g, 7);
    /* adopted batches count whatever the limit */
    qw_capacity_force_take(&g, 5);
    assert_int_equal(g.used, 5);
    assert_int_equal(qw_capacity_try_take(&g, 1, T0, &wait), QW_CAP_WAIT_SLOT);
    qw_capacity_give_back(&g, 5);
    /* a smaller grant keeps what is in flight and stops new takes */
    assert_int_equal(qw_capacity_try_take(&g, 3, T0, &wait), QW_CAP_TAKEN);
    gr.in_flight = 1;
    qw_capacity_gate_grant(&g, &gr, T0);
    assert_int_equal(g.used, 3);
    assert_int_equal(qw_capacity_try_take(&g, 1, T0, &wait), QW_CAP_WAIT_SLOT);
    qw_capacity_give_back(&g, 3);
    assert_int_equal(qw_capacity_try_take(&g, 1, T0, &wait), QW_CAP_TAKEN);
}

static void test_gate_deadline_and_empty_grant(void **state)
{
    (void)state;
    struct qw_capacity_gate g;
    qw_capacity_gate_init(&g);
    struct qw_capacity_grant gr = grant(10, 100, T0 + 500);
    qw_capacity_gate_grant(&g, &gr, T0);
    int64_t wait;
    assert_int_equal(qw_capacity_try_take(&g, 1, T0 + 499, &wait), QW_CAP_TAKEN);
    /* the lease behind the grant may have lapsed: nothing more */
    assert_int_equal(qw_capacity_try_take(&g, 1, T0 + 500, &wait), QW_CAP_WAIT_GRANT);
    /* active but nothing held */
    gr = grant(0, 0, T0 + 10000);
    qw_capacity_gate_grant(&g, &gr, T0 + 600);
    assert_int_equal(qw_capacity_try_take(&g, 1, T0 + 600, &wait), QW_CAP_WAIT_GRANT);
    /* cleared: back to taking everything */
    gr.active = false;
    qw_capacity_gate_grant(&g, &gr, T0 + 700);
    assert_int_equal(qw_capacity_try_take(&g, 1, T0 + 700, &wait), QW_CAP_TAKEN);
}

static void test_gate_rate(void **state)
{
    (void)state;
    struct qw_capacity_gate g;
    qw_capacity_gate_init(&g);
    struct qw_capacity_grant gr = grant(QW_CAPACITY_UNLIMITED, 200, INT64_MAX);
    qw_capacity_gate_grant(&g, &gr, T0);
    int64_t wait;
    int taken = 0;
    while (qw_capacity_try_take(&g, 1, T0, &wait) == QW_CAP_TAKEN)
        taken++;
    assert_int_equal(taken, 20); /* 100 ms of 200/s */
    assert_int_equal(qw_capacity_try_take(&g, 1, T0, &wait), QW_CAP_WAIT_RATE);
    assert_int_equal(wait, 5);
    /* one second later: 200 more over the second, never more than the burst at once */
    taken = 0;
    for (int64_t t = 1; t <= 1000; t++) {
        while (qw_capacity_try_take(&g, 1, T0 + t, &wait) == QW_CAP_TAKEN)
            taken++;
    }
    assert_int_equal(taken, 200);
}

/* AIMD: a 429 halves the limits once per hold; they grow back ~5% a second. */
static void test_gate_aimd(void **state)
{
    (void)state;
    struct qw_capacity_gate g;
    qw_capacity_gate_init(&g);
    struct qw_capacity_grant gr = grant(40, 1000, INT64_MAX);
    qw_capacity_gate_grant(&g, &gr, T0);
    assert_int_equal(qw_capacity_in_flight_limit(&g, T0), 40);
    qw_capacity_backpressure(&g, T0);
    assert_int_equal(qw_capacity_in_flight_limit(&g, T0), 20);
    assert_int_equal(qw_capacity_rate_limit(&g, T0), 500);
    qw_capacity_backpressure(&g, T0 + 300); /* same burst of answers */
    assert_int_equal(qw_capacity_in_flight_limit(&g, T0 + 300), 20);
    qw_capacity_backpressure(&g, T0 + 1000);
    assert_int_equal(qw_capacity_in_flight_limit(&g, T0 + 1000), 10);
    for (int i = 0; i < 10; i++)
        qw_capacity_backpressure(&g, T0 + 2000 + 1000 * i);
    assert_int_equal(g.factor, QW_CAPACITY_AIMD_FLOOR);
    int64_t t = T0 + 11000;
    assert_int_equal(qw_capacity_in_flight_limit(&g, t), 40 * QW_CAPACITY_AIMD_FLOOR / 1024);
    /* additive increase: after 10 s about half again, after 20 s all of it */
    int64_t half = qw_capacity_in_flight_limit(&g, t + 10000);
    assert_true(half >= 40 * (64 + 500) / 1024 && half <= 40 * (64 + 520) / 1024);
    assert_int_equal(qw_capacity_in_flight_limit(&g, t + 20000), 40);
    assert_int_equal(g.factor, 1024);
    /* never below one unit while anything is held */
    gr = grant(1, 1, INT64_MAX);
    qw_capacity_gate_grant(&g, &gr, t + 20000);
    qw_capacity_backpressure(&g, t + 20000);
    assert_int_equal(qw_capacity_in_flight_limit(&g, t + 20000), 1);
    assert_int_equal(qw_capacity_rate_limit(&g, t + 20000), 1);
}

static void test_need(void **state)
{
    (void)state;
    static const struct {
        int64_t target, reserved, unit, need;
    } rows[] = {
        {0, 0, 4, 0}, {1, 0, 4, 1}, {4, 0, 4, 1}, {5, 0, 4, 2}, {125, 0, 4, 32},
        {8, 8, 4, 0}, {9, 8, 4, 1}, {3, 8, 4, 0}, {5, 0, 0, 5}, {-2, 0, 1, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        assert_int_equal(qw_capacity_need(rows[i].target, rows[i].reserved, rows[i].unit),
                         rows[i].need);
}

static void test_allot_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int64_t n_shared;
        size_t n;
        int64_t needs[6];
        int64_t shares[6];
        int64_t left;
    } rows[] = {
        {"one takes what it needs", 9, 1, {4}, {4}, 5},
        {"one wants more than all", 9, 1, {32}, {9}, 0},
        {"even split, remainder to the first", 9, 4, {32, 32, 32, 32}, {3, 2, 2, 2}, 0},
        {"by target: the small one is met first", 9, 2, {2, 30}, {2, 7}, 0},
        {"two split by target", 10, 2, {3, 30}, {3, 7}, 0},
        {"idle ones get nothing", 9, 3, {0, 30, 0}, {0, 9, 0}, 0},
        {"all met, some left", 9, 3, {1, 2, 3}, {1, 2, 3}, 3},
        {"fewer partitions than instances", 2, 4, {5, 5, 5, 5}, {1, 1, 0, 0}, 0},
        {"what one does not need goes to the others", 12, 3, {1, 10, 10}, {1, 6, 5}, 0},
        {"nothing to split", 0, 2, {3, 3}, {0, 0}, 0},
        {"negative pool counts as none", -3, 2, {3, 3}, {0, 0}, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int64_t out[6];
        int64_t left = qw_capacity_allot(rows[i].n_shared, rows[i].needs, rows[i].n, out);
        int64_t sum = 0;
        for (size_t k = 0; k < rows[i].n; k++) {
            sum += out[k];
            if (out[k] != rows[i].shares[k])
                fail_msg("%s: share[%zu] = %lld, expected %lld", rows[i].name, k, (long long)out[k],
                         (long long)rows[i].shares[k]);
            assert_true(out[k] <= rows[i].needs[k]);
        }
        assert_int_equal(left, rows[i].left);
        assert_true(sum + left == (rows[i].n_shared > 0 ? rows[i].n_shared : 0));
    }
}

/* Whatever the needs, the split never hands out more than there is. */
static void test_allot_never_exceeds(void **state)
{
    (void)state;
    uint64_t x = 88172645463325252ull;
    for (int round = 0; round < 2000; round++) {
        int64_t needs[6], out[6];
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t n = 1 + x % 6;
        int64_t pool = (int64_t)(x >> 8) % 40;
        int64_t total_need = 0;
        for (size_t k = 0; k < n; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            needs[k] = (int64_t)(x % 20);
            total_need += needs[k];
        }
        int64_t left = qw_capacity_allot(pool, needs, n, out);
        int64_t sum = 0;
        for (size_t k = 0; k < n; k++)
            sum += out[k];
        assert_true(sum <= pool);
        assert_int_equal(sum + left, pool);
        assert_int_equal(sum, total_need < pool ? total_need : pool);
    }
}

static void test_plan_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int64_t partitions, reserved_each, live;
        int64_t needs[4];
        size_t me;
        int64_t held_reserved, held_shared, free_partitions;
        int64_t allot, acq_res, acq_shared, release;
    } rows[] = {
        {"alone, takes its need", 9, 0, 1, {4}, 0, 0, 0, 9, 4, 0, 4, 0},
        {"alone, takes all", 9, 0, 1, {40}, 0, 0, 0, 9, 9, 0, 9, 0},
        {"second worker arrives: the first gives back", 9, 0, 2, {40, 40}, 0, 0, 9, 0, 5, 0, 0, 4},
        {"second worker: takes only what is free", 9, 0, 2, {40, 40}, 1, 0, 0, 0, 4, 0, 0, 0},
        {"second worker: then its share", 9, 0, 2, {40, 40}, 1, 0, 0, 4, 4, 0, 4, 0},
        {"idle: gives everything shared back", 9, 0, 2, {0, 40}, 0, 0, 5, 0, 0, 0, 0, 5},
        {"reservation first, whatever the target", 9, 2, 2, {0, 40}, 0, 0, 0, 9, 0, 2, 0, 0},
        {"reservation never given back", 9, 2, 2, {0, 40}, 0, 2, 0, 0, 0, 0, 0, 0},
        {"reservations shrink the shared pool", 9, 2, 2, {40, 40}, 1, 2, 0, 5, 2, 0, 2, 0},
        {"reservation short of free partitions", 4, 2, 3, {1, 1, 1}, 2, 0, 0, 1, 0, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int64_t shares[4];
        struct qw_capacity_view v = {
            .partitions = rows[i].partitions,
            .reserved_each = rows[i].reserved_each,
            .live = rows[i].live,
            .needs = rows[i].needs,
            .shares = shares,
            .me = rows[i].me,
            .held_reserved = rows[i].held_reserved,
            .held_shared = rows[i].held_shared,
            .free_partitions = rows[i].free_partitions,
        };
        struct qw_capacity_plan p;
        qw_capacity_plan(&v, &p);
        if (p.allot != rows[i].allot || p.acquire_reserved != rows[i].acq_res ||
            p.acquire_shared != rows[i].acq_shared || p.release_shared != rows[i].release)
            fail_msg("%s: allot %lld acquire_reserved %lld acquire_shared %lld release %lld; "
                     "expected %lld %lld %lld %lld",
                     rows[i].name, (long long)p.allot, (long long)p.acquire_reserved,
                     (long long)p.acquire_shared, (long long)p.release_shared,
                     (long long)rows[i].allot, (long long)rows[i].acq_res,
                     (long long)rows[i].acq_shared, (long long)rows[i].release);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cost),
        cmocka_unit_test(test_bucket_table),
        cmocka_unit_test(test_bucket_rates),
        cmocka_unit_test(test_gate_inactive_takes_everything),
        cmocka_unit_test(test_gate_in_flight),
        cmocka_unit_test(test_gate_deadline_and_empty_grant),
        cmocka_unit_test(test_gate_rate),
        cmocka_unit_test(test_gate_aimd),
        cmocka_unit_test(test_need),
        cmocka_unit_test(test_allot_table),
        cmocka_unit_test(test_allot_never_exceeds),
        cmocka_unit_test(test_plan_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
