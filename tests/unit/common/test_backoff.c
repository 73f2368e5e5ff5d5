/* Unit tests for the seeded PRNG and the backoff shapes (common/backoff.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/backoff.h"

static void test_ceiling_table(void **state)
{
    static const struct {
        int attempt;      /* exponent */
        int64_t base_ms;  /* base */
        int64_t cap_ms;   /* cap */
        int64_t expected; /* ms */
    } rows[] = {
        {0, 100, 1000, 100},
        {1, 100, 1000, 200},
        {3, 100, 1000, 800},
        {4, 100, 1000, 1000}, /* 1600 capped */
        {200, 100, 1000, 1000},
        {-5, 100, 1000, 100},  /* negative attempt counts as 0 */
        {0, 5000, 1000, 1000}, /* base above cap */
        {0, 0, 1000, 0},
        {7, 100, 0, 0},
        {7, 100, -1, 0},
        {61, 1, INT64_MAX, INT64_C(1) << 61},
        {62, 1, INT64_MAX, INT64_MAX},
        {63, 1, INT64_MAX, INT64_MAX},
        {64, 1, INT64_MAX, INT64_MAX},
        {1000000, 3, INT64_MAX, INT64_MAX},
        {40, 1000, INT64_MAX, INT64_C(1000) << 40},
        {53, 1000, INT64_MAX, INT64_C(1000) << 53}, /* 9.007e18: still fits */
        {54, 1000, INT64_MAX, INT64_MAX},           /* 1000 * 2^54 would overflow */
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int64_t got = qw_backoff_ceiling_ms(rows[i].attempt, rows[i].base_ms, rows[i].cap_ms);
        if (got != rows[i].expected)
            print_error("row %zu: attempt=%d base=%lld cap=%lld\n", i, rows[i].attempt,
                        (long long)rows[i].base_ms, (long long)rows[i].cap_ms);
        assert_int_equal(got, rows[i].expected);
    }
}

static void test_full_jitter_bounds(void **state)
{
    struct qw_rng rng;
    qw_rng_seed(&rng, 42);
    static const int64_t caps[] = {1, 7, 1000, 30000, INT64_MAX};
    for (size_t c = 0; c < sizeof(caps) / sizeof(caps[0]); c++) {
        for (int attempt = 0; attempt <= 200; attempt++) {
            int64_t ceiling = qw_backoff_ceiling_ms(attempt, 3, caps[c]);
            assert_true(ceiling <= caps[c]);
            for (int k = 0; k < 50; k++) {
                int64_t v = qw_backoff_full_jitter(attempt, 3, caps[c], &rng);
                assert_in_range(v, 0, ceiling);
            }
        }
    }
}

static void test_exponential_jitter_bounds(void **state)
{
    struct qw_rng rng;
    qw_rng_seed(&rng, 7);
    static const int64_t caps[] = {1, 7, 1000, 30000, INT64_MAX};
    for (size_t c = 0; c < sizeof(caps) / sizeof(caps[0]); c++) {
        for (int attempt = 0; attempt <= 200; attempt++) {
            int64_t ceiling = qw_backoff_ceiling_ms(attempt, 250, caps[c]);
            for (int k = 0; k < 50; k++) {
                int64_t v = qw_backoff_exponential_jitter(attempt, 250, caps[c], &rng);
                assert_in_range(v, ceiling - ceiling / 2, ceiling);
            }
        }
    }
}

/* Both ends of the range are reachable (inclusive bounds, no off-by-one). */
static void test_jitter_reaches_both_ends(void **state)
{
    struct qw_rng rng;
    qw_rng_seed(&rng, 99);
    int seen_full[5] = {0};
    int seen_exp[9] = {0};
    for (int i = 0; i < 2000; i++) {
        int64_t f = qw_backoff_full_jitter(2, 1, 100, &rng); /* ceiling 4: 0..4 */
        assert_in_range(f, 0, 4);
        seen_full[f]++;
        int64_t e = qw_backoff_exponential_jitter(3, 1, 100, &rng); /* ceiling 8: 4..8 */
        assert_in_range(e, 4, 8);
        seen_exp[e]++;
    }
    for (int v = 0; v <= 4; v++)
        assert_true(seen_full[v] > 0);
    for (int v = 4; v <= 8; v++)
        assert_true(seen_exp[v] > 0);
}

/*
 * Means over 10k samples. Uniform[0, 1000] has mean 500 and standard
 * deviation ~289, so the sample mean's deviation is ~2.9: +-25 is wide
 * enough never to flake and tight enough to catch a wrong shape (e.g. a
 * jitter that ignores the attempt, or one stuck at the ceiling).
 */
static void test_jitter_means(void **state)
{
    struct qw_rng rng;
    qw_rng_seed(&rng, 2024);
    const int n = 10000;
    double full = 0, expo = 0;
    for (int i = 0; i < n; i++) {
        full += (double)qw_backoff_full_jitter(20, 10, 1000, &rng);
        expo += (double)qw_backoff_exponential_jitter(20, 10, 1000, &rng);
    }
    full /= n;
    expo /= n;
    assert_true(full > 475.0 && full < 525.0);
    assert_true(expo > 725.0 && expo < 775.0);
}

static void test_rng_determinism(void **state)
{
    struct qw_rng a, b, c;
    qw_rng_seed(&a, 12345);
    qw_rng_seed(&b, 12345);
    qw_rng_seed(&c, 12346);
    int differ = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t va = qw_rng_next(&a);
        assert_int_equal(va, qw_rng_next(&b));
        differ += va != qw_rng_next(&c);
    }
    assert_true(differ > 990);

    /* The jitter functions are deterministic per seed too. */
    qw_rng_seed(&a, 5);
    qw_rng_seed(&b, 5);
    for (int i = 0; i < 200; i++)
        assert_int_equal(qw_backoff_full_jitter(i, 2, 200, &a),
                         qw_backoff_full_jitter(i, 2, 200, &b));
}

static void test_rng_zero_seed_and_known_value(void **state)
{
    struct qw_rng rng;
    qw_rng_seed(&rng, 0);
    /* First splitmix64 output for seed 0 (published reference value). */
    assert_int_equal(qw_rng_next(&rng), UINT64_C(0xe220a8397b1dcdaf));
    assert_true(qw_rng_next(&rng) != 0);
}

static void test_rng_below(void **state)
{
    struct qw_rng rng;
    qw_rng_seed(&rng, 3);
    assert_int_equal(qw_rng_below(&rng, 0), 0);
    assert_int_equal(qw_rng_below(&rng, 1), 0);
    int counts[6] = {0};
    const int n = 60000;
    for (int i = 0; i < n; i++) {
        uint64_t v = qw_rng_below(&rng, 6);
        assert_true(v < 6);
        counts[v]++;
    }
    for (int v = 0; v < 6; v++)
        assert_in_range(counts[v], 9000, 11000); /* expected 10000, sd ~91 */
    /* Huge bounds stay in range. */
    for (int i = 0; i < 1000; i++)
        assert_true(qw_rng_below(&rng, UINT64_C(0x8000000000000001)) <=
                    UINT64_C(0x8000000000000000));
}

static void test_pause_429(void **state)
{
    struct qw_rng rng;
    qw_rng_seed(&rng, 11);
    for (int i = 0; i < 500; i++) {
        /* No Retry-After: the exponential-jitter shape. */
        int64_t p = qw_backoff_pause_429(2, 500, 60000, 0, &rng); /* ceiling 2000 */
        assert_in_range(p, 1000, 2000);
        /* Retry-After above the jitter wins... */
        assert_int_equal(qw_backoff_pause_429(0, 500, 60000, 10000, &rng), 10000);
        /* ...but never beyond the cap. */
        assert_int_equal(qw_backoff_pause_429(0, 500, 60000, 3600000, &rng), 60000);
        /* Retry-After below the jitter does not shorten it. */
        p = qw_backoff_pause_429(3, 500, 60000, 1, &rng); /* ceiling 4000 */
        assert_in_range(p, 2000, 4000);
        /* Far into a 429 storm the pause sits at the cap. */
        p = qw_backoff_pause_429(1000, 500, 60000, 0, &rng);
        assert_in_range(p, 30000, 60000);
    }
    assert_int_equal(qw_backoff_pause_429(3, 500, 0, 5000, &rng), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ceiling_table),
        cmocka_unit_test(test_full_jitter_bounds),
        cmocka_unit_test(test_exponential_jitter_bounds),
        cmocka_unit_test(test_jitter_reaches_both_ends),
        cmocka_unit_test(test_jitter_means),
        cmocka_unit_test(test_rng_determinism),
        cmocka_unit_test(test_rng_zero_seed_and_known_value),
        cmocka_unit_test(test_rng_below),
        cmocka_unit_test(test_pause_429),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
