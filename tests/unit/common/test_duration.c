/* Unit tests: operator duration parsing and formatting (src/common/duration.c). */
#include "common/duration.h"
#include "common/err.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

struct parse_case {
    const char *text;   /* input */
    int rc;             /* expected result */
    int64_t seconds;    /* expected value when QW_OK */
    const char *reason; /* substring of the message when refused */
};

static const struct parse_case parse_cases[] = {
    {"7d", QW_OK, 7 * 86400, NULL},
    {"12h", QW_OK, 12 * 3600, NULL},
    {"30m", QW_OK, 1800, NULL},
    {"45s", QW_OK, 45, NULL},
    {"2w", QW_OK, 14 * 86400, NULL},
    {"1d12h", QW_OK, 86400 + 12 * 3600, NULL},
    {"1w2d3h4m5s", QW_OK, 7 * 86400 + 2 * 86400 + 3 * 3600 + 4 * 60 + 5, NULL},
    {"90m", QW_OK, 5400, NULL},
    {"007d", QW_OK, 7 * 86400, NULL},
    {"1s", QW_OK, 1, NULL},
    {"36600d", QW_OK, 36600LL * 86400, NULL},
    {"", QW_ERR_INVALID, 0, "empty"},
    {"7", QW_ERR_INVALID, 0, "missing unit"},
    {"d", QW_ERR_INVALID, 0, "expected a number"},
    {"7x", QW_ERR_INVALID, 0, "unknown unit"},
    {"7D", QW_ERR_INVALID, 0, "unknown unit"},
    {"-7d", QW_ERR_INVALID, 0, "expected a number"},
    {"+7d", QW_ERR_INVALID, 0, "expected a number"},
    {"7 d", QW_ERR_INVALID, 0, "unknown unit"},
    {" 7d", QW_ERR_INVALID, 0, "expected a number"},
    {"7d ", QW_ERR_INVALID, 0, "expected a number"},
    {"1.5h", QW_ERR_INVALID, 0, "unknown unit"},
    {"0d", QW_ERR_INVALID, 0, "longer than zero"},
    {"0s0m", QW_ERR_INVALID, 0, "largest to smallest"},
    {"12h1d", QW_ERR_INVALID, 0, "largest to smallest"},
    {"1h1h", QW_ERR_INVALID, 0, "largest to smallest"},
    {"36700d", QW_ERR_INVALID, 0, "too long"},
    {"99999999999999999999s", QW_ERR_INVALID, 0, "too long"},
    {"5300w", QW_ERR_INVALID, 0, "too long"},
    {"5000w", QW_OK, 5000LL * 7 * 86400, NULL},
};

static void test_parse_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(parse_cases) / sizeof(parse_cases[0]); i++) {
        const struct parse_case *c = &parse_cases[i];
        int64_t out = -1;
        char why[200] = "";
        int rc = qw_duration_parse(c->text, &out, why, sizeof(why));
        if (rc != c->rc)
            fail_msg("'%s': rc %d, want %d (%s)", c->text, rc, c->rc, why);
        if (rc == QW_OK && out != c->seconds)
            fail_msg("'%s': %lld s, want %lld", c->text, (long long)out, (long long)c->seconds);
        if (rc != QW_OK) {
            if (out != -1)
                fail_msg("'%s': output written on failure", c->text);
            if (!strstr(why, c->reason))
                fail_msg("'%s': reason '%s' lacks '%s'", c->text, why, c->reason);
        }
    }
}

static void test_parse_null_and_no_reason_buffer(void **state)
{
    (void)state;
    int64_t out = 0;
    assert_int_equal(qw_duration_parse(NULL, &out, NULL, 0), QW_ERR_INVALID);
    assert_int_equal(qw_duration_parse("x", &out, NULL, 0), QW_ERR_INVALID);
}

struct format_case {
    int64_t seconds;  /* input */
    const char *text; /* expected */
};

static const struct format_case format_cases[] = {
    {0, "0s"},      {1, "1s"},        {59, "59s"},      {60, "1m"},      {61, "1m1s"},
    {312, "5m12s"}, {3600, "1h"},     {3660, "1h1m"},   {3601, "1h"},    {10920, "3h2m"},
    {86400, "1d"},  {187200, "2d4h"}, {1296000, "15d"}, {-75, "-1m15s"}, {50000, "13h53m"},
};

static void test_format_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(format_cases) / sizeof(format_cases[0]); i++) {
        char buf[32];
        qw_duration_format(format_cases[i].seconds, buf, sizeof(buf));
        if (strcmp(buf, format_cases[i].text) != 0)
            fail_msg("%lld s: '%s', want '%s'", (long long)format_cases[i].seconds, buf,
                     format_cases[i].text);
    }
}

static void test_format_truncates_safely(void **state)
{
    (void)state;
    char buf[4];
    qw_duration_format(187200, buf, sizeof(buf));
    assert_string_equal(buf, "2d4");
    qw_duration_format(5, buf, 0); /* must not write */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_table),
        cmocka_unit_test(test_parse_null_and_no_reason_buffer),
        cmocka_unit_test(test_format_table),
        cmocka_unit_test(test_format_truncates_safely),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
