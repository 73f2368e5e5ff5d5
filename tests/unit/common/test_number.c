/* Unit tests: strict whole-number option values (src/common/number.c). */
#include "common/err.h"
#include "common/number.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <string.h>

struct parse_case {
    const char *text; /* input */
    long min, max;    /* bounds */
    int rc;           /* expected result */
    long value;       /* expected value when QW_OK */
};

static const struct parse_case parse_cases[] = {
    /* plain values, the bounds themselves, a sign, leading zeros */
    {"1500", 1, 1000000, QW_OK, 1500},
    {"1", 1, 1000000, QW_OK, 1},
    {"1000000", 1, 1000000, QW_OK, 1000000},
    {"0", 0, 10, QW_OK, 0},
    {"-5", -10, 10, QW_OK, -5},
    {"+7", 1, 10, QW_OK, 7},
    {"007", 1, 10, QW_OK, 7},
    /* below / above the allowed range */
    {"0", 1, 1000000, QW_ERR_INVALID, 0},
    {"-5", 1, 1000000, QW_ERR_INVALID, 0},
    {"1000001", 1, 1000000, QW_ERR_INVALID, 0},
    {"-11", -10, 10, QW_ERR_INVALID, 0},
    /* empty, and a sign alone */
    {"", 0, 10, QW_ERR_INVALID, 0},
    {"-", 0, 10, QW_ERR_INVALID, 0},
    {"+", 0, 10, QW_ERR_INVALID, 0},
    /* leading junk */
    {"x5", 0, 10, QW_ERR_INVALID, 0},
    {" 5", 0, 10, QW_ERR_INVALID, 0},
    {"\t5", 0, 10, QW_ERR_INVALID, 0},
    {"--5", -10, 10, QW_ERR_INVALID, 0},
    /* trailing junk, fractions, exponents, base prefixes */
    {"5x", 0, 10, QW_ERR_INVALID, 0},
    {"5 ", 0, 10, QW_ERR_INVALID, 0},
    {"5\n", 0, 10, QW_ERR_INVALID, 0},
    {"1.5", 0, 10, QW_ERR_INVALID, 0},
    {"1e3", 0, 10000, QW_ERR_INVALID, 0},
    {"0x10", 0, 100, QW_ERR_INVALID, 0},
    /* overflow of long, with bounds that would take any long */
    {"99999999999999999999", LONG_MIN, LONG_MAX, QW_ERR_INVALID, 0},
    {"-99999999999999999999", LONG_MIN, LONG_MAX, QW_ERR_INVALID, 0},
};

static void test_parse_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(parse_cases) / sizeof(parse_cases[0]); i++) {
        const struct parse_case *c = &parse_cases[i];
        long out = -12345;
        char why[100] = "";
        int rc = qw_number_parse("--n", c->text, c->min, c->max, &out, why, sizeof(why));
        if (rc != c->rc)
            fail_msg("'%s' in %ld..%ld: rc %d, want %d (%s)", c->text, c->min, c->max, rc, c->rc,
                     why);
        if (rc == QW_OK && out != c->value)
            fail_msg("'%s': %ld, want %ld", c->text, out, c->value);
        if (rc != QW_OK && out != -12345)
            fail_msg("'%s': output written on failure", c->text);
        if (rc == QW_OK && why[0] != '\0')
            fail_msg("'%s': reason '%s' written on success", c->text, why);
    }
}

/* The extremes of long are values like any other; one past them overflows. */
static void test_long_extremes(void **state)
{
    (void)state;
    char text[32];
    long out = 0;
    snprintf(text, sizeof(text), "%ld", LONG_MAX);
    assert_int_equal(qw_number_parse("--n", text, LONG_MIN, LONG_MAX, &out, NULL, 0), QW_OK);
    assert_true(out == LONG_MAX);
    snprintf(text, sizeof(text), "%ld", LONG_MIN);
    assert_int_equal(qw_number_parse("--n", text, LONG_MIN, LONG_MAX, &out, NULL, 0), QW_OK);
    assert_true(out == LONG_MIN);
    assert_int_equal(
        qw_number_parse("--n", "9223372036854775808", LONG_MIN, LONG_MAX, &out, NULL, 0),
        QW_ERR_INVALID);
    assert_int_equal(
        qw_number_parse("--n", "-9223372036854775809", LONG_MIN, LONG_MAX, &out, NULL, 0),
        QW_ERR_INVALID);
}

/* The message names the option and what it takes, whatever was wrong. */
static void test_error_text(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "abc", "5x", " 5", "0", "1000001", "99999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        long out = 0;
        char why[100] = "";
        assert_int_equal(qw_number_parse("--rate", bad[i], 1, 1000000, &out, why, sizeof(why)),
                         QW_ERR_INVALID);
        assert_string_equal(why, "--rate must be 1..1000000");
    }
    char why[100] = "";
    long out = 0;
    assert_int_equal(qw_number_parse("--pause", "x", -5, 5, &out, why, sizeof(why)),
                     QW_ERR_INVALID);
    assert_string_equal(why, "--pause must be -5..5");
}

/* No reason buffer, a short one, and no text at all are all safe. */
static void test_reason_buffers_and_null(void **state)
{
    (void)state;
    long out = 3;
    assert_int_equal(qw_number_parse("--n", "x", 0, 10, &out, NULL, 0), QW_ERR_INVALID);
    assert_int_equal(qw_number_parse("--n", NULL, 0, 10, &out, NULL, 0), QW_ERR_INVALID);
    assert_int_equal(out, 3);
    char why[8];
    memset(why, 'z', sizeof(why));
    assert_int_equal(qw_number_parse("--rate", "x", 1, 1000000, &out, why, sizeof(why)),
                     QW_ERR_INVALID);
    assert_string_equal(why, "--rate ");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_table),
        cmocka_unit_test(test_long_extremes),
        cmocka_unit_test(test_error_text),
        cmocka_unit_test(test_reason_buffers_and_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
