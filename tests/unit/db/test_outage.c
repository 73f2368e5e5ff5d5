/* Unit tests of the outage tracker's state machine (src/db/outage.c). */
#include "db/outage.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>

static void test_outage_begins_once_and_ends_with_its_duration(void **state)
{
    (void)state;
    struct qw_outage o;
    struct qw_rng rng;
    qw_rng_seed(&rng, 1);
    qw_outage_init(&o, "queuer");
    assert_int_equal(qw_outage_ok(&o, 500), QW_OUTAGE_QUIET);
    assert_int_equal(qw_outage_fail(&o, 1000, &rng), QW_OUTAGE_BEGAN);
    /* every further failure within the first reminder period is quiet */
    int64_t t = 1000;
    for (int i = 0; i < 40; i++) {
        t = o.retry_at_ms;
        assert_int_equal(qw_outage_fail(&o, t, &rng), QW_OUTAGE_QUIET);
    }
    assert_true(t - 1000 < QW_OUTAGE_REMIND_MS);
    assert_int_equal(qw_outage_ok(&o, 10500), QW_OUTAGE_ENDED);
    assert_int_equal(o.last_ms, 9500);
    assert_int_equal(o.last_failures, 41);
    assert_int_equal(qw_outage_ok(&o, 10600), QW_OUTAGE_QUIET);
    /* the next failure is a new outage */
    assert_int_equal(qw_outage_fail(&o, 20000, &rng), QW_OUTAGE_BEGAN);
}

static void test_reconnects_back_off_within_the_bounds(void **state)
{
    (void)state;
    struct qw_outage o;
    struct qw_rng rng;
    qw_rng_seed(&rng, 42);
    qw_outage_init(&o, "submitter");
    int64_t t = 0;
    int64_t prev_ceiling = 0;
    for (int i = 0; i < 200; i++) {
        qw_outage_fail(&o, t, &rng);
        int64_t wait = o.retry_at_ms - t;
        int64_t ceiling = qw_backoff_ceiling_ms(i, QW_OUTAGE_RETRY_BASE_MS, QW_OUTAGE_RETRY_MAX_MS);
        if (wait < ceiling - ceiling / 2 || wait > ceiling) {
            fprintf(stderr, "attempt %d: wait %lld outside [%lld, %lld]\n", i, (long long)wait,
                    (long long)(ceiling - ceiling / 2), (long long)ceiling);
            fail();
        }
        assert_true(ceiling >= prev_ceiling);
        prev_ceiling = ceiling;
        assert_false(qw_outage_retry_due(&o, t));
        assert_false(qw_outage_retry_due(&o, o.retry_at_ms - 1));
        assert_true(qw_outage_retry_due(&o, o.retry_at_ms));
        t = o.retry_at_ms;
    }
    assert_int_equal(prev_ceiling, QW_OUTAGE_RETRY_MAX_MS);
    /* after a success the backoff starts from the bottom again */
    qw_outage_ok(&o, t);
    assert_true(qw_outage_retry_due(&o, t));
    qw_outage_fail(&o, t, &rng);
    assert_true(o.retry_at_ms - t <= QW_OUTAGE_RETRY_BASE_MS);
}

/* A long outage: reminders after 30 s, then at doubling gaps up to 10 min. */
static void test_reminders_thin_out(void **state)
{
    (void)state;
    struct qw_outage o;
    struct qw_rng rng;
    qw_rng_seed(&rng, 7);
    qw_outage_init(&o, "queuer");
    int64_t reminders[16];
    int n = 0;
    assert_int_equal(qw_outage_fail(&o, 0, &rng), QW_OUTAGE_BEGAN);
    for (int64_t t = 100; t <= 3600 * 1000; t += 100) {
        enum qw_outage_event ev = qw_outage_fail(&o, t, &rng);
        assert_int_not_equal(ev, QW_OUTAGE_BEGAN);
        assert_int_not_equal(ev, QW_OUTAGE_ENDED);
        if (ev == QW_OUTAGE_STILL) {
            assert_true(n < 16);
            reminders[n++] = t;
        }
    }
    /* 30 s, +60, +120, +240, +480, then every 600 s: 9 lines in an hour */
    assert_int_equal(n, 9);
    assert_int_equal(reminders[0], 30000);
    assert_int_equal(reminders[1], 90000);
    assert_int_equal(reminders[2], 210000);
    assert_int_equal(reminders[3], 450000);
    assert_int_equal(reminders[4], 930000);
    assert_int_equal(reminders[5], 1530000);
    assert_int_equal(reminders[8], 3330000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outage_begins_once_and_ends_with_its_duration),
        cmocka_unit_test(test_reconnects_back_off_within_the_bounds),
        cmocka_unit_test(test_reminders_thin_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
