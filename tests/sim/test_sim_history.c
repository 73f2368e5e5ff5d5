/*
 * Unit tests for one node's batch history (sim/history.h): upserts, the
 * per-service limit that drops the entry changed longest ago whatever its
 * status, services kept apart, and the restart that forgets everything.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/err.h"
#include "history.h"

#include <stdio.h>

static void test_put_get(void **state)
{
    struct qw_sim_history *h;
    assert_int_equal(qw_sim_history_new(100, &h), QW_OK);
    int64_t t = 0;
    assert_int_equal(qw_sim_history_get(h, 0, "a", &t), QW_SIM_UNKNOWN);
    assert_int_equal(qw_sim_history_put(h, 0, "a", QW_SIM_PENDING, 10), QW_OK);
    assert_int_equal(qw_sim_history_get(h, 0, "a", &t), QW_SIM_PENDING);
    assert_int_equal(t, 10);
    assert_int_equal(qw_sim_history_put(h, 0, "a", QW_SIM_COMMITTED, 20), QW_OK);
    assert_int_equal(qw_sim_history_get(h, 0, "a", &t), QW_SIM_COMMITTED);
    assert_int_equal(t, 20);
    assert_int_equal(qw_sim_history_count(h, 0), 1);
    /* the same id under another service is another batch */
    assert_int_equal(qw_sim_history_get(h, 1, "a", NULL), QW_SIM_UNKNOWN);
    assert_int_equal(qw_sim_history_count(h, 7), 0);
    qw_sim_history_clear(h);
    assert_int_equal(qw_sim_history_get(h, 0, "a", NULL), QW_SIM_UNKNOWN);
    assert_int_equal(qw_sim_history_count(h, 0), 0);
    qw_sim_history_free(h);
}

/* The limit drops the entry changed longest ago, Pending ones included. */
static void test_limit(void **state)
{
    static const struct {
        const char *id; /* put in this order, at time = row index */
        enum qw_sim_status status;
    } puts_[] = {
        {"a", QW_SIM_PENDING}, {"b", QW_SIM_COMMITTED},
        {"c", QW_SIM_PENDING}, {"a", QW_SIM_COMMITTED}, /* a is now the newest change */
        {"d", QW_SIM_PENDING}, /* the fourth entry: b (changed at 1) goes */
        {"e", QW_SIM_PENDING}, /* then c (changed at 2) */
    };
    static const struct {
        const char *id;
        enum qw_sim_status status;
    } after[] = {
        {"a", QW_SIM_COMMITTED}, {"b", QW_SIM_UNKNOWN}, {"c", QW_SIM_UNKNOWN},
        {"d", QW_SIM_PENDING},   {"e", QW_SIM_PENDING},
    };
    struct qw_sim_history *h;
    assert_int_equal(qw_sim_history_new(3, &h), QW_OK);
    for (size_t i = 0; i < sizeof(puts_) / sizeof(puts_[0]); i++) {
        assert_int_equal(qw_sim_history_put(h, 2, puts_[i].id, puts_[i].status, (int64_t)i), QW_OK);
        /* another service's entries never push these out */
        assert_int_equal(qw_sim_history_put(h, 3, puts_[i].id, QW_SIM_PENDING, (int64_t)i), QW_OK);
    }
    for (size_t i = 0; i < sizeof(after) / sizeof(after[0]); i++) {
        if (qw_sim_history_get(h, 2, after[i].id, NULL) != after[i].status)
            print_error("id %s\n", after[i].id);
        assert_int_equal(qw_sim_history_get(h, 2, after[i].id, NULL), after[i].status);
    }
    assert_int_equal(qw_sim_history_count(h, 2), 3);
    assert_int_equal(qw_sim_history_count(h, 3), 3);
    qw_sim_history_free(h);
}

/* Without a limit (0) nothing is dropped, across table growth. */
static void test_unlimited(void **state)
{
    struct qw_sim_history *h;
    assert_int_equal(qw_sim_history_new(0, &h), QW_OK);
    char id[16];
    for (int i = 0; i < 5000; i++) {
        snprintf(id, sizeof(id), "id%d", i);
        assert_int_equal(qw_sim_history_put(h, (size_t)(i % 7), id, QW_SIM_PENDING, i), QW_OK);
    }
    for (int i = 0; i < 5000; i++) {
        snprintf(id, sizeof(id), "id%d", i);
        assert_int_equal(qw_sim_history_get(h, (size_t)(i % 7), id, NULL), QW_SIM_PENDING);
    }
    qw_sim_history_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get),
        cmocka_unit_test(test_limit),
        cmocka_unit_test(test_unlimited),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
