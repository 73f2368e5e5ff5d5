/*
 * Unit tests for queuer/vacuum_watch.c's decision: which looks at the
 * oldest snapshot holding back vacuum are worth a log line.
 */
#include "queuer/vacuum_watch.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>

static struct qw_status_snapshot holder(const char *kind, int64_t pid, const char *app,
                                        int64_t xids)
{
    struct qw_status_snapshot s = {.holders = 1, .pid = pid, .xids_behind = xids};
    snprintf(s.kind, sizeof(s.kind), "%s", kind);
    snprintf(s.application, sizeof(s.application), "%s", app);
    return s;
}

static void test_change(void **state)
{
    (void)state;
    struct qw_status_snapshot none = {0};
    struct qw_status_snapshot report = holder("session", 4209, "report", 500);
    struct qw_status_snapshot report_later = holder("session", 4209, "report", 90000);
    struct qw_status_snapshot other = holder("session", 4300, "report", 700);
    struct qw_status_snapshot gid_a = holder("prepared", 0, "gid-a", 800);
    struct qw_status_snapshot gid_b = holder("prepared", 0, "gid-b", 800);
    struct qw_status_snapshot slot = holder("replication slot", 0, "gid-a", 800);

    assert_int_equal(qw_vacuum_watch_change(&none, &none), QW_VACUUM_SAME);
    assert_int_equal(qw_vacuum_watch_change(&none, &report), QW_VACUUM_HELD);
    /* the same holder falling further behind is one episode, one line */
    assert_int_equal(qw_vacuum_watch_change(&report, &report_later), QW_VACUUM_SAME);
    report_later.holders = 3; /* more holders, the same oldest */
    assert_int_equal(qw_vacuum_watch_change(&report, &report_later), QW_VACUUM_SAME);
    /* another oldest: by pid, by gid or slot name, by kind */
    assert_int_equal(qw_vacuum_watch_change(&report, &other), QW_VACUUM_HELD);
    assert_int_equal(qw_vacuum_watch_change(&gid_a, &gid_b), QW_VACUUM_HELD);
    assert_int_equal(qw_vacuum_watch_change(&gid_a, &slot), QW_VACUUM_HELD);
    assert_int_equal(qw_vacuum_watch_change(&report, &none), QW_VACUUM_RELEASED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_change),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
