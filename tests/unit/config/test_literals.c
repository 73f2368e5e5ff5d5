/* Unit tests of src/config/literals.c: the integer literals libconfig 1.5 would wrap. */
#include "config/literals.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

static int scan(const char *text, struct qw_config_literal *bad)
{
    memset(bad, 0, sizeof(*bad));
    return qw_config_find_wrapping_int(text, strlen(text), NULL, NULL, bad);
}

static void test_fitting_literals_pass(void **state)
{
    (void)state;
    static const char *const clean[] = {
        "a = 2147483647;",
        "a = -2147483648;",
        "a = 0x7FFFFFFF;",
        "a = 4294997296L;",       /* 64-bit: libconfig reads it whole */
        "a = 0xFFFFFFFFFFL;",     /* likewise */
        "a = 1e10; b = 1.5E+20;", /* floats */
        "a = \"4294997296\";",    /* a string */
        "# 4294997296\n// 4294997296\n/* 4294997296\n 99999999999 */ a = 1;",
        "a = \"esc \\\" 4294997296\";", /* an escaped quote does not end the string */
        "x-4294997296 = 1;",            /* part of a name */
        "g = { h = [1, 2, 3]; };",
        "",
    };
    for (size_t i = 0; i < sizeof(clean) / sizeof(clean[0]); i++) {
        struct qw_config_literal bad;
        if (scan(clean[i], &bad) != 0)
            fail_msg("\"%s\": flagged %s at line %d", clean[i], bad.text, bad.line);
    }
}

static void test_wrapping_literals_found(void **state)
{
    (void)state;
    static const struct {
        const char *text;    /* libconfig text */
        int line;            /* expected line */
        const char *section; /* expected top-level group */
        const char *name;    /* expected setting */
        const char *literal; /* expected literal text */
    } cases[] = {
        {"worker = {\n  lease_ms = 4294997296;\n};", 2, "worker", "lease_ms", "4294997296"},
        {"a = 2147483648;", 1, "", "a", "2147483648"},
        {"a = -2147483649;", 1, "", "a", "-2147483649"},
        {"a = +4294967296;", 1, "", "a", "+4294967296"},
        {"i = { high = 0xFFFFFFFF; };", 1, "i", "high", "0xFFFFFFFF"},
        {"i = { high = 0x100007530; };", 1, "i", "high", "0x100007530"},
        {"/* a\nb */ s = { t = { u = 99999999999; }; };", 2, "s", "u", "99999999999"},
        {"s : { l = [ 1, 5000000000 ]; };", 1, "s", "l", "5000000000"},
        {"s = { a = 1; };\nt = {\n b = \"x\";\n c =\n 4294967297;\n};", 5, "t", "c", "4294967297"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct qw_config_literal bad;
        if (scan(cases[i].text, &bad) != 1)
            fail_msg("\"%s\": not flagged", cases[i].text);
        assert_int_equal(bad.line, cases[i].line);
        assert_string_equal(bad.section, cases[i].section);
        assert_string_equal(bad.name, cases[i].name);
        assert_string_equal(bad.text, cases[i].literal);
    }
}

/* Records the @include paths it is called with; stops the scan at "stop". */
static int record_include(const char *path, void *arg)
{
    char *seen = arg;
    strcat(seen, path);
    strcat(seen, ";");
    return strcmp(path, "stop") == 0 ? -3 : 0;
}

static void test_includes_reported(void **state)
{
    (void)state;
    char seen[256] = "";
    struct qw_config_literal bad;
    const char *text = "@include \"a.cfg\"\n  @include \"b/c.cfg\"\nx = \"@include \\\"no\\\"\";\n"
                       "y = 1; @include \"no\"\n";
    assert_int_equal(qw_config_find_wrapping_int(text, strlen(text), record_include, seen, &bad),
                     0);
    assert_string_equal(seen, "a.cfg;b/c.cfg;");
    /* a non-zero result of the callback stops the scan and is returned */
    seen[0] = '\0';
    text = "@include \"stop\"\na = 99999999999;\n";
    assert_int_equal(qw_config_find_wrapping_int(text, strlen(text), record_include, seen, &bad),
                     -3);
    assert_string_equal(seen, "stop;");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fitting_literals_pass),
        cmocka_unit_test(test_wrapping_literals_found),
        cmocka_unit_test(test_includes_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
