/* Unit tests for how many claims an attempt asks for (worker/claims.h: qw_claims_want). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "worker/claims.h"

struct want_case {
    long share, held;
    int max_changes, attempt;
    long expected;
};

static void test_table(void **state)
{
    (void)state;
    static const struct want_case cases[] = {
        /* W6's ramp-up: a share of 12,500, nothing held, 2,000 a call */
        {12500, 0, 2000, 1, 2000},
        {12500, 0, 2000, 2, 1000},
        {12500, 0, 2000, 3, 500},
        {12500, 0, 2000, 5, 125},
        {12500, 0, 2000, 6, 62},
        {12500, 0, 2000, 7, QW_CLAIMS_MIN_ASK},
        {12500, 0, 2000, 20, QW_CLAIMS_MIN_ASK},
        /* what the share leaves comes first, and is never raised */
        {100, 70, 2000, 1, 30},
        {100, 70, 2000, 9, 30},
        {12500, 12440, 2000, 1, 60},
        {12500, 12440, 2000, 2, QW_CLAIMS_MIN_ASK},
        /* nothing to claim on any attempt */
        {100, 100, 2000, 1, 0},
        {100, 130, 2000, 4, -30},
        /* a small max_changes caps the first attempt */
        {12500, 0, 10, 1, 10},
        {12500, 0, 10, 3, 10},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct want_case *c = &cases[i];
        long got = qw_claims_want(c->share, c->held, c->max_changes, c->attempt);
        if (got != c->expected)
            fail_msg("case %zu (share %ld, held %ld, max %d, attempt %d): %ld, expected %ld", i,
                     c->share, c->held, c->max_changes, c->attempt, got, c->expected);
    }
}

/* Over many inputs: never more than the share leaves or max_changes, never
   more than the attempt before, and at least the floor while the first
   attempt asked for more than it. */
static void test_properties(void **state)
{
    (void)state;
    for (long share = 0; share <= 5000; share += 37)
        for (long held = 0; held <= share + 40; held += 53)
            for (int max = 1; max <= 3000; max += 331) {
                long first = qw_claims_want(share, held, max, 1);
                long prev = first;
                for (int attempt = 1; attempt <= 25; attempt++) {
                    long n = qw_claims_want(share, held, max, attempt);
                    assert_true(n <= share - held);
                    assert_true(n <= max);
                    assert_true(n <= prev);
                    if (first > QW_CLAIMS_MIN_ASK)
                        assert_true(n >= QW_CLAIMS_MIN_ASK);
                    else
                        assert_true(n == first);
                    prev = n;
                }
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_properties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
