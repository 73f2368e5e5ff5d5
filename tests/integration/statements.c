/* Integration: every embedded runtime statement prepares against a freshly migrated database. */
#include "itest.h"
#include "common/embedded.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_every_statement_prepares(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("statements", 1);
    struct qw_db *db = itest_connect(conninfo);
    int n = 0;
    for (const struct qw_embedded *s = qw_statements; s->name; s++, n++) {
        /* PREPARE checks syntax, names and types without running anything. */
        struct qw_error err;
        qw_error_clear(&err);
        int rc;
        size_t len = strlen(s->text) + 64;
        char *sql = malloc(len);
        snprintf(sql, len, "PREPARE check_%d AS %s", n, s->text);
        rc = qw_db_exec(db, sql, &err);
        if (rc != QW_OK)
            fail_msg("statement %s does not prepare: %s", s->name, err.msg);
        free(sql);
    }
    assert_true(n > 5);
    qw_db_close(db);
    free(conninfo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_statement_prepares),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
