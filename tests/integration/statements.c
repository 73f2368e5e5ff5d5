/* Integration: every embedded runtime statement prepares against a freshly migrated
 * database, and a worker's sessions plan them generically without JIT. */
#include "itest.h"
#include "common/embedded.h"
#include "config/config.h"
#include "shared/shared.h"

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

/* A worker's sessions plan our statements once (generic plans) and never
 * JIT-compile them: with JIT on, a generic plan whose estimate for a small,
 * often-updated table ran high was compiled at every call, for seconds. */
static void test_worker_sessions_plan_generic_without_jit(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("statements_settings", 1);
    struct qw_config cfg;
    assert_int_equal(qw_config_defaults(&cfg), QW_OK);
    struct qw_db_opts opts;
    qw_worker_db_opts(&cfg, "queuer-worker", &opts);
    opts.conninfo = conninfo;
    struct qw_db *db = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_connect(&db, &opts, &err) != QW_OK)
        fail_msg("connect %s: %s", conninfo, err.msg);
    struct qw_db_res *res = NULL;
    int rc =
        qw_db_query_sql(db, "SELECT current_setting('jit'), current_setting('plan_cache_mode')", 0,
                        NULL, &res, &err);
    if (rc != QW_OK)
        fail_msg("reading the session settings: %s", err.msg);
    assert_string_equal(qw_db_res_get(res, 0, 0), "off");
    assert_string_equal(qw_db_res_get(res, 0, 1), "force_generic_plan");
    qw_db_res_free(res);
    qw_db_close(db);
    qw_config_free(&cfg);
    free(conninfo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_statement_prepares),
        cmocka_unit_test(test_worker_sessions_plan_generic_without_jit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
