/* Unit tests of the queuer's service map (src/queuer/svcmap.c). */
#include "queuer/svcmap.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

static void name(char *buf, size_t len, int i)
{
    snprintf(buf, len, "c%04d-xxxxx::%04d", i % 10000, i % 7919);
}

static void test_put_get_del(void **state)
{
    (void)state;
    struct qw_svcmap m;
    assert_int_equal(qw_svcmap_init(&m), 0);
    assert_null(qw_svcmap_get(&m, "a"));
    struct qw_svc *s = qw_svcmap_put(&m, "a");
    assert_non_null(s);
    s->epoch = 7;
    assert_ptr_equal(qw_svcmap_put(&m, "a"), s);
    assert_int_equal(qw_svcmap_get(&m, "a")->epoch, 7);
    assert_int_equal(m.used, 1);
    qw_svcmap_del(&m, "a");
    assert_null(qw_svcmap_get(&m, "a"));
    assert_int_equal(m.used, 0);
    qw_svcmap_del(&m, "a");
    qw_svcmap_free(&m);
}

static void test_busy_count_follows_entries(void **state)
{
    (void)state;
    struct qw_svcmap m;
    qw_svcmap_init(&m);
    struct qw_svc *a = qw_svcmap_put(&m, "a");
    qw_svcmap_set_busy(&m, a, true);
    qw_svcmap_set_busy(&m, a, true);
    assert_int_equal(m.busy, 1);
    struct qw_svc *b = qw_svcmap_put(&m, "b");
    qw_svcmap_set_busy(&m, b, true);
    assert_int_equal(m.busy, 2);
    qw_svcmap_del(&m, "a");
    assert_int_equal(m.busy, 1);
    b = qw_svcmap_get(&m, "b");
    qw_svcmap_set_busy(&m, b, false);
    assert_int_equal(m.busy, 0);
    qw_svcmap_free(&m);
}

static void test_many_with_churn(void **state)
{
    (void)state;
    struct qw_svcmap m;
    qw_svcmap_init(&m);
    char id[QW_SERVICE_ID_MAX];
    enum { N = 20000 };
    for (int i = 0; i < N; i++) {
        name(id, sizeof(id), i);
        struct qw_svc *s = qw_svcmap_put(&m, id);
        assert_non_null(s);
        s->epoch = i;
    }
    assert_int_equal(m.used, N);
    for (int i = 0; i < N; i += 2) {
        name(id, sizeof(id), i);
        qw_svcmap_del(&m, id);
    }
    for (int i = 0; i < N; i++) {
        name(id, sizeof(id), i);
        struct qw_svc *s = qw_svcmap_get(&m, id);
        if (i % 2 == 0) {
            assert_null(s);
        } else {
            assert_non_null(s);
            assert_int_equal(s->epoch, i);
        }
    }
    size_t pos = 0, seen = 0;
    while (qw_svcmap_next(&m, &pos))
        seen++;
    assert_int_equal(seen, N / 2);
    /* Re-inserting after deletes reuses tombstones and keeps lookups right. */
    for (int i = 0; i < N; i += 2) {
        name(id, sizeof(id), i);
        qw_svcmap_put(&m, id)->epoch = -i;
    }
    for (int i = 0; i < N; i += 2) {
        name(id, sizeof(id), i);
        assert_int_equal(qw_svcmap_get(&m, id)->epoch, -i);
    }
    assert_int_equal(m.used, N);
    qw_svcmap_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_del),
        cmocka_unit_test(test_busy_count_follows_entries),
        cmocka_unit_test(test_many_with_churn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
