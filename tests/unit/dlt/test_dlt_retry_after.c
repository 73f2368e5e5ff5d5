/* Unit tests for Retry-After parsing: delta-seconds, HTTP-dates, garbage. */
#include "dlt/dlt_retry_after.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#define NOW_MS INT64_C(1795269600000) /* 2026-11-21T14:00:00Z (a Saturday) */
#define HOUR_MS INT64_C(3600000)

static void test_table(void **state)
{
    (void)state;
    static const struct {
        const char *in; /* header value */
        int64_t now_ms; /* "now", ms since the epoch */
        int64_t max_ms; /* clamp */
        int64_t want;   /* expected delay or -1 */
    } cases[] = {
        /* delta-seconds */
        {"120", NOW_MS, HOUR_MS, 120000},
        {"  5\t", NOW_MS, HOUR_MS, 5000},
        {"0", NOW_MS, HOUR_MS, 0},
        {"007", NOW_MS, HOUR_MS, 7000},
        {"3600", NOW_MS, HOUR_MS, HOUR_MS},
        {"3601", NOW_MS, HOUR_MS, HOUR_MS},
        {"99999999999999999999999999999999", NOW_MS, HOUR_MS, HOUR_MS},
        {"99999999999999999999999999999999", NOW_MS, INT64_MAX, INT64_MAX / 1000 * 1000},
        {"5", NOW_MS, 0, 0},
        /* garbage */
        {"", NOW_MS, HOUR_MS, -1},
        {"   ", NOW_MS, HOUR_MS, -1},
        {"-5", NOW_MS, HOUR_MS, -1},
        {"+5", NOW_MS, HOUR_MS, -1},
        {"1.5", NOW_MS, HOUR_MS, -1},
        {"5s", NOW_MS, HOUR_MS, -1},
        {"5 6", NOW_MS, HOUR_MS, -1},
        {"abc", NOW_MS, HOUR_MS, -1},
        {"0x10", NOW_MS, HOUR_MS, -1},
        {"\xff\xfe", NOW_MS, HOUR_MS, -1},
        {"5", NOW_MS, -1, -1}, /* a negative clamp is a caller error */
        /* IMF-fixdate */
        {"Sat, 21 Nov 2026 14:00:30 GMT", NOW_MS, HOUR_MS, 30000},
        {"Sat, 21 Nov 2026 14:00:30 GMT", NOW_MS + 500, HOUR_MS, 29500},
        {"Sat, 21 Nov 2026 13:59:00 GMT", NOW_MS, HOUR_MS, 0},
        {"Sun, 06 Nov 1994 08:49:37 GMT", NOW_MS, HOUR_MS, 0},
        {"Sun, 06 Nov 1994 08:49:37 GMT", INT64_C(784111777000) - 1000, HOUR_MS, 1000},
        {"Sat, 21 Nov 2026 15:00:00 GMT", NOW_MS, 600000, 600000},
        {"Sun, 22 Nov 2026 14:00:00 GMT", NOW_MS, INT64_MAX, 86400000},
        {"Fri, 01 Jan 2027 00:00:00 GMT", NOW_MS, INT64_MAX, INT64_C(1798761600000) - NOW_MS},
        {"Thu, 29 Feb 2024 00:00:00 GMT", NOW_MS, HOUR_MS, 0},
        {"Sat, 21 Nov 2026 14:00:60 GMT", NOW_MS, HOUR_MS, 59000}, /* leap second */
        {"  Sat, 21 Nov 2026 14:00:30 GMT  ", NOW_MS, HOUR_MS, 30000},
        /* impossible or malformed dates */
        {"Sat, 31 Nov 2026 14:00:30 GMT", NOW_MS, HOUR_MS, -1},
        {"Sun, 29 Feb 2026 14:00:30 GMT", NOW_MS, HOUR_MS, -1},
        {"Sat, 00 Nov 2026 14:00:30 GMT", NOW_MS, HOUR_MS, -1},
        {"Sat, 21 Nov 2026 24:00:00 GMT", NOW_MS, HOUR_MS, -1},
        {"Sat, 21 Nov 2026 14:60:00 GMT", NOW_MS, HOUR_MS, -1},
        {"Sat, 21 Nov 2026 14:00:61 GMT", NOW_MS, HOUR_MS, -1},
        {"Sat, 21 Xyz 2026 14:00:30 GMT", NOW_MS, HOUR_MS, -1},
        {"Sat, 21 Nov 2026 14:00:30 UTC", NOW_MS, HOUR_MS, -1},
        {"Sat, 21 Nov 2026 14:00:30 GMT junk", NOW_MS, HOUR_MS, -1},
        {"Sat, 21 Nov 2026 14:00:30", NOW_MS, HOUR_MS, -1},
        {"Sat 21 Nov 2026 14:00:30 GMT", NOW_MS, HOUR_MS, -1},
        {"Sat, 1 Nov 2026 14:00:30 GMT", NOW_MS, HOUR_MS, -1},
        {"sat, 21 Nov 2026 14:00:30 GMT", NOW_MS, HOUR_MS, -1},
        {"Sat, 21 Nov 26 14:00:30 GMT", NOW_MS, HOUR_MS, -1},
        {"Sat, 21 Nov 2026 14:0:30 GMT", NOW_MS, HOUR_MS, -1},
        {"Sat,", NOW_MS, HOUR_MS, -1},
        {"Saturday", NOW_MS, HOUR_MS, -1},
        /* obsolete RFC 850 form: two-digit year, at most 50 years ahead */
        {"Saturday, 21-Nov-26 14:00:10 GMT", NOW_MS, HOUR_MS, 10000},
        {"Sunday, 06-Nov-94 08:49:37 GMT", NOW_MS, HOUR_MS, 0},
        {"Saturday, 01-Jan-77 00:00:00 GMT", NOW_MS, HOUR_MS, 0}, /* 2077 is > 50 years on: 1977 */
        {"Wednesday, 01-Jan-76 00:00:00 GMT", NOW_MS, INT64_MAX,
         INT64_C(3345062400000) - NOW_MS}, /* 2076 is exactly 50 years on: kept */
        {"Saturday, 21-Nov-2026 14:00:10 GMT", NOW_MS, HOUR_MS, -1},
        {"Saturday, 21 Nov 26 14:00:10 GMT", NOW_MS, HOUR_MS, -1},
        /* obsolete asctime form */
        {"Sat Nov 21 14:00:20 2026", NOW_MS, HOUR_MS, 20000},
        {"Sun Nov 22 14:00:00 2026", NOW_MS, INT64_MAX, 86400000},
        {"Sun Nov  1 14:00:00 2026", NOW_MS, HOUR_MS, 0},
        {"Sun Nov 1 14:00:00 2026", NOW_MS, HOUR_MS, -1},
        {"Sat Nov 21 14:00:20 2026 GMT", NOW_MS, HOUR_MS, -1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t got = qw_dlt_retry_after_ms(cases[i].in, strlen(cases[i].in), cases[i].now_ms,
                                            cases[i].max_ms);
        if (got != cases[i].want)
            fail_msg("\"%s\": got %lld, want %lld", cases[i].in, (long long)got,
                     (long long)cases[i].want);
    }
}

static void test_length_bounded(void **state)
{
    (void)state;
    /* only `len` bytes are read: no NUL terminator needed */
    const char buf[] = {'1', '2', '3', '4', '5'};
    assert_int_equal(qw_dlt_retry_after_ms(buf, 2, NOW_MS, HOUR_MS), 12000);
    assert_int_equal(qw_dlt_retry_after_ms(buf, 0, NOW_MS, HOUR_MS), -1);
    const char *date = "Sat, 21 Nov 2026 14:00:30 GMTXXXX";
    assert_int_equal(qw_dlt_retry_after_ms(date, strlen(date) - 4, NOW_MS, HOUR_MS), 30000);
    assert_int_equal(qw_dlt_retry_after_ms(date, strlen(date) - 5, NOW_MS, HOUR_MS), -1);
    assert_int_equal(qw_dlt_retry_after_ms(NULL, 5, NOW_MS, HOUR_MS), -1);
}

static void test_extreme_now(void **state)
{
    (void)state;
    const char *date = "Sat, 21 Nov 2026 14:00:30 GMT";
    /* no overflow whatever "now" is */
    assert_int_equal(qw_dlt_retry_after_ms(date, strlen(date), INT64_MAX, HOUR_MS), -1);
    assert_int_equal(qw_dlt_retry_after_ms(date, strlen(date), INT64_MIN, HOUR_MS), -1);
    assert_int_equal(qw_dlt_retry_after_ms(date, strlen(date), 0, HOUR_MS), HOUR_MS);
    assert_int_equal(qw_dlt_retry_after_ms("7", 1, INT64_MIN, HOUR_MS), 7000);
    const char *old = "Thursday, 01-Jan-70 00:00:00 GMT";
    assert_int_equal(qw_dlt_retry_after_ms(old, strlen(old), 0, HOUR_MS), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_length_bounded),
        cmocka_unit_test(test_extreme_now),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
