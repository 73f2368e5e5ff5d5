/* Unit tests of the PostgreSQL array literal builder (src/db/pgarray.c). */
#include "db/pgarray.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

static void test_empty(void **state)
{
    (void)state;
    struct qw_pgarray a;
    qw_pgarray_init(&a);
    assert_string_equal(qw_pgarray_finish(&a), "{}");
    qw_pgarray_free(&a);
}

static void test_mixed_elements(void **state)
{
    (void)state;
    struct qw_pgarray a;
    qw_pgarray_init(&a);
    qw_pgarray_text(&a, "plain");
    qw_pgarray_text(&a, NULL);
    qw_pgarray_int(&a, -42);
    qw_pgarray_bool(&a, 1);
    qw_pgarray_bool(&a, 0);
    qw_pgarray_text(&a, "");
    assert_string_equal(qw_pgarray_finish(&a), "{\"plain\",NULL,-42,t,f,\"\"}");
    assert_int_equal(a.count, 6);
    qw_pgarray_free(&a);
}

static void test_escaping(void **state)
{
    (void)state;
    struct qw_pgarray a;
    qw_pgarray_init(&a);
    qw_pgarray_text(&a, "a \"quoted\" \\ back, {brace} NULL");
    assert_string_equal(qw_pgarray_finish(&a), "{\"a \\\"quoted\\\" \\\\ back, {brace} NULL\"}");
    qw_pgarray_free(&a);
}

static void test_row_elements(void **state)
{
    (void)state;
    struct qw_pgarray a;
    qw_pgarray_init(&a);
    qw_pgarray_row_begin(&a);
    qw_pgarray_row_text(&a, "a\"b\\c,(d)");
    qw_pgarray_row_int(&a, -7);
    qw_pgarray_row_null(&a);
    qw_pgarray_row_text(&a, "");
    qw_pgarray_row_text(&a, NULL);
    qw_pgarray_row_bool(&a, 1);
    qw_pgarray_row_end(&a);
    qw_pgarray_row_begin(&a);
    qw_pgarray_row_bool(&a, 0);
    qw_pgarray_row_end(&a);
    /* row level: ("a""b\\c,(d)",-7,,"",,t) with " and \ escaped once more for the array */
    assert_string_equal(qw_pgarray_finish(&a),
                        "{\"(\\\"a\\\\\\\"b\\\\\\\\c,(d)\\\",-7,,\\\"\\\",,t)\",\"(f)\"}");
    assert_int_equal(a.count, 2);
    qw_pgarray_free(&a);
}

static void test_reset_reuses(void **state)
{
    (void)state;
    struct qw_pgarray a;
    qw_pgarray_init(&a);
    for (int i = 0; i < 10000; i++)
        qw_pgarray_int(&a, i);
    const char *big = qw_pgarray_finish(&a);
    assert_non_null(big);
    assert_true(strlen(big) > 40000);
    qw_pgarray_reset(&a);
    qw_pgarray_text(&a, "x");
    assert_string_equal(qw_pgarray_finish(&a), "{\"x\"}");
    assert_int_equal(a.count, 1);
    qw_pgarray_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),        cmocka_unit_test(test_mixed_elements),
        cmocka_unit_test(test_escaping),     cmocka_unit_test(test_row_elements),
        cmocka_unit_test(test_reset_reuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
