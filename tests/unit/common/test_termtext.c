/* Unit tests of src/common/termtext.c: what a terminal would act on is written out. */
#include "common/termtext.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

static void test_escapes(void **state)
{
    (void)state;
    static const struct {
        const char *in;   /* stored text */
        const char *want; /* as shown */
    } cases[] = {
        {"plain text", "plain text"},
        {"", ""},
        {"\x1b[2J\x1b]0;owned\x07", "\\x1b[2J\\x1b]0;owned\\x07"},
        {"two\nlines\r\tx", "two\\nlines\\r\\tx"},
        {"del\x7f", "del\\x7f"},
        {"c1 csi \xc2\x9b"
         "31m",
         "c1 csi \\u009b31m"},
        {"bidi \xe2\x80\xae"
         "txt.exe",
         "bidi \\u202etxt.exe"},
        {"isolate \xe2\x81\xa6x\xe2\x81\xa9", "isolate \\u2066x\\u2069"},
        {"取引が無効です", "取引が無効です"},
        {"nbsp\xc2\xa0ok", "nbsp\xc2\xa0ok"},
        {"bad \x9b byte", "bad \\x9b byte"},
        {"cut \xe5\x8f", "cut \\xe5\\x8f"},
        {"overlong \xc0\xaf", "overlong \\xc0\\xaf"},
        {"surrogate \xed\xa0\x80", "surrogate \\xed\\xa0\\x80"},
        {"emoji \xf0\x9f\x98\x80", "emoji \xf0\x9f\x98\x80"},
        {"back\\slash", "back\\slash"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[128];
        size_t n = qw_termtext_escape(out, sizeof(out), cases[i].in);
        if (strcmp(out, cases[i].want) != 0)
            fail_msg("case %zu:\n got: %s\nwant: %s", i, out, cases[i].want);
        assert_int_equal(n, strlen(out));
        char *dup = qw_termtext_dup(cases[i].in);
        assert_non_null(dup);
        assert_string_equal(dup, cases[i].want);
        free(dup);
    }
    char out[8];
    assert_int_equal(qw_termtext_escape(out, sizeof(out), NULL), 0);
    assert_string_equal(out, "");
}

/* A cut never splits a character or an escape. */
static void test_cut_on_boundaries(void **state)
{
    (void)state;
    char out[6];
    assert_int_equal(qw_termtext_escape(out, sizeof(out),
                                        "ab\x1b"
                                        "cd"),
                     2);
    assert_string_equal(out, "ab");
    assert_int_equal(qw_termtext_escape(out, sizeof(out), "a取引"), 4);
    assert_string_equal(out, "a取");
    char one[1];
    assert_int_equal(qw_termtext_escape(one, sizeof(one), "abc"), 0);
    assert_string_equal(one, "");
}

/* The worst case fits the buffer qw_termtext_dup allocates. */
static void test_dup_worst_case(void **state)
{
    (void)state;
    char in[301];
    memset(in, 0x9b, 300);
    in[300] = '\0';
    char *out = qw_termtext_dup(in);
    assert_non_null(out);
    assert_int_equal(strlen(out), 1200);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_cut_on_boundaries),
        cmocka_unit_test(test_dup_worst_case),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
