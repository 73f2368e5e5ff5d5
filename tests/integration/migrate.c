/* Integration: `queuer migrate` idempotence and concurrency, schema checks. */
#include "itest.h"
#include "common/embedded.h"
#include "db/migrate.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Migrations this binary holds (numbers may have gaps: reserved ones not merged yet). */
static int64_t embedded_migrations(void)
{
    int64_t n = 0;
    while (qw_migrations[n].name)
        n++;
    return n;
}

static int run_migrate(const char *conninfo, char **out, char **err)
{
    char env[1024];
    snprintf(env, sizeof(env), "QUEUER_DATABASE_CONNINFO=%s", conninfo);
    const char *argv[] = {itest_queuer_bin(), "migrate", NULL};
    const char *envv[] = {env, NULL};
    return itest_run(argv, envv, NULL, out, err);
}

static void test_migrate_twice_is_noop(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("migrate_twice", 0);
    char *out = NULL, *err = NULL;
    int rc = run_migrate(conninfo, &out, &err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "applied 0001_schema"));
    free(out);
    free(err);

    rc = run_migrate(conninfo, &out, &err);
    assert_int_equal(rc, 0);
    assert_null(strstr(out, "applied"));
    assert_non_null(strstr(out, "up to date"));
    free(out);
    free(err);

    struct qw_db *db = itest_connect(conninfo);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.schema_migrations"),
                     embedded_migrations());
    int version = -1;
    struct qw_error e;
    qw_error_clear(&e);
    assert_int_equal(qw_migrate_check(db, &version, &e), QW_OK);
    assert_int_equal(version, qw_migrate_latest());
    qw_db_close(db);
    free(conninfo);
}

static void test_concurrent_migrations(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("migrate_conc", 0);
    enum { N = 4 };
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            int rc = run_migrate(conninfo, NULL, NULL);
            _exit(rc);
        }
    }
    for (int i = 0; i < N; i++) {
        int status = 0;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    struct qw_db *db = itest_connect(conninfo);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.schema_migrations"),
                     embedded_migrations());
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.settings"), 1);
    qw_db_close(db);
    free(conninfo);
}

static void test_check_reports_missing_and_old_schema(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("migrate_check", 0);
    struct qw_db *db = itest_connect(conninfo);
    struct qw_error e;
    qw_error_clear(&e);
    int version = -1;
    assert_int_equal(qw_migrate_check(db, &version, &e), QW_ERR_SCHEMA);
    assert_int_equal(version, 0);
    assert_non_null(strstr(e.msg, "queuer migrate"));

    assert_int_equal(qw_migrate_apply(db, NULL, NULL, &e), QW_OK);
    /* Pretend a newer binary migrated this database. */
    itest_exec(db, "INSERT INTO queuer.schema_migrations (version, name) VALUES (9999, 'future')");
    qw_error_clear(&e);
    assert_int_equal(qw_migrate_check(db, &version, &e), QW_ERR_SCHEMA);
    assert_int_equal(version, 9999);
    assert_non_null(strstr(e.msg, "newer"));
    qw_error_clear(&e);
    assert_int_equal(qw_migrate_apply(db, NULL, NULL, &e), QW_ERR_SCHEMA);
    qw_db_close(db);
    free(conninfo);
}

static void test_unreachable_database_exit_code(void **state)
{
    (void)state;
    char *out = NULL, *err = NULL;
    int rc = run_migrate("host=/nonexistent-socket-dir dbname=x connect_timeout=2", &out, &err);
    assert_int_equal(rc, 69);
    assert_non_null(strstr(err, "cannot connect"));
    free(out);
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate_twice_is_noop),
        cmocka_unit_test(test_concurrent_migrations),
        cmocka_unit_test(test_check_reports_missing_and_old_schema),
        cmocka_unit_test(test_unreachable_database_exit_code),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
