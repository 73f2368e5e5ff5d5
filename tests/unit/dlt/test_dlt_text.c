/* Unit tests for sanitising untrusted ledger text into one safe line. */
#include "dlt/dlt_text.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static void test_table(void **state)
{
    (void)state;
    static const struct {
        const char *in;   /* input (NUL-terminated here for convenience) */
        size_t cap;       /* output capacity */
        const char *want; /* expected output */
    } cases[] = {
        {"plain text", 64, "plain text"},
        {"", 64, ""},
        {"  lead and trail  ", 64, "lead and trail"},
        {"line1\nline2\r\n\tline3", 64, "line1 line2 line3"},
        {"a\x01\x02\x1b[31mb", 64, "a [31mb"}, /* ESC is a control: no terminal tricks */
        {"many     spaces", 64, "many spaces"},
        {"del\x7f"
         "char",
         64, "del char"},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 64,
         "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
        {"c1\xc2\x85"
         "ctl",
         64, "c1 ctl"}, /* U+0085 NEL is a C1 control */
        {"bad\xff\xfe"
         "bytes",
         64, "bad??bytes"},
        {"overlong\xc0\xaf", 64, "overlong??"},
        {"surrogate\xed\xa0\x80", 64, "surrogate???"},
        {"cut\xe2\x82", 64, "cut??"},                   /* truncated sequence */
        {"too big\xf4\x90\x80\x80", 64, "too big????"}, /* above U+10FFFF */
        {"abcdef", 4, "abc"},
        {"ab\xc3\xa9", 4, "ab"}, /* never split a character */
        {"ab\xc3\xa9", 5, "ab\xc3\xa9"},
        {"a b", 3, "a"}, /* no trailing space after a cut */
        {"anything", 1, ""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[64];
        memset(out, 'X', sizeof(out));
        size_t n = qw_dlt_text_sanitize(out, cases[i].cap, cases[i].in, strlen(cases[i].in));
        if (strcmp(out, cases[i].want) != 0)
            fail_msg("case %zu: got \"%s\", want \"%s\"", i, out, cases[i].want);
        assert_int_equal(n, strlen(out));
        assert_true(n < cases[i].cap);
    }
}

static void test_embedded_nul_and_length(void **state)
{
    (void)state;
    const char in[] = {'a', '\0', 'b', 'c'};
    char out[16];
    assert_int_equal(qw_dlt_text_sanitize(out, sizeof(out), in, sizeof(in)), 4);
    assert_string_equal(out, "a bc");
    assert_int_equal(qw_dlt_text_sanitize(out, sizeof(out), in, 1), 1);
    assert_string_equal(out, "a");
    assert_int_equal(qw_dlt_text_sanitize(out, sizeof(out), NULL, 5), 0);
    assert_string_equal(out, "");
    assert_int_equal(qw_dlt_text_sanitize(out, 0, "x", 1), 0);
}

static void test_long_input_fills_cap(void **state)
{
    (void)state;
    char in[5000];
    memset(in, 'z', sizeof(in));
    char out[512];
    assert_int_equal(qw_dlt_text_sanitize(out, sizeof(out), in, sizeof(in)), 511);
    assert_int_equal(strlen(out), 511);
}

/* The token and any Authorization header value are masked in place. */
static void test_mask_secret(void **state)
{
    (void)state;
    char buf[] = "x tok3n y Authorization: Bearer tok3n\r\nauthorization:basic QWxh\"z tok3";
    qw_dlt_text_mask_secret(buf, strlen(buf), "tok3n");
    assert_string_equal(
        buf, "x ***** y Authorization: ************\r\nauthorization:**********\"z tok3");
    char none[] = "nothing here";
    qw_dlt_text_mask_secret(none, strlen(none), NULL);
    qw_dlt_text_mask_secret(none, strlen(none), "");
    assert_string_equal(none, "nothing here");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mask_secret),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_embedded_nul_and_length),
        cmocka_unit_test(test_long_input_fills_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
