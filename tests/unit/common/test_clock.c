/*
 * Unit test of the local clock (src/common/clock.c): lease deadlines use a
 * clock that keeps counting through a suspend, i.e.
 * CLOCK_BOOTTIME. (On a machine that never slept, CLOCK_MONOTONIC reads
 * the same, so this pins the contract rather than reproducing a suspend.)
 */
#include "common/clock.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <time.h>

static int64_t boottime_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void test_local_clock_counts_suspend(void **state)
{
    (void)state;
    int64_t before = boottime_us();
    int64_t ours = qw_clock_mono_us();
    int64_t after = boottime_us();
    assert_in_range(ours, before, after);
    qw_clock_sleep_ms(5);
    assert_true(qw_clock_mono_ms() >= after / 1000 + 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_clock_counts_suspend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
