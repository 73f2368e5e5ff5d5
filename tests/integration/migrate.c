/* Integration: `queuer migrate` idempotence and concurrency, schema checks, data moved by
 * a migration. */
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

/*
 * A database at 0036 with stored 'Enqueued' history rows: 0037 moves them
 * into the enqueue log (one row per time and service) and deletes them;
 * the other history rows stay, and queuer.history still shows each
 * batch's Enqueued transition, now from the batch's row.
 */
static void test_enqueued_rows_move_to_the_log(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("migrate_0037", 0);
    struct qw_db *db = itest_connect(conninfo);
    struct qw_error e;
    qw_error_clear(&e);
    assert_int_equal(qw_migrate_apply_to(db, 36, NULL, NULL, &e), QW_OK);
    /* three batches of two services, two of them enqueued in one statement (same at) */
    itest_exec(db, "SET session_replication_role = replica;"
                   "INSERT INTO queuer.batches (batch_id, service_id, payload, created_at) "
                   "SELECT repeat(to_hex(n), 128), s, '\\x0a00', now() - n * interval '1 minute' "
                   "  FROM (VALUES (1, 'migra-aaaaa::0001'), (2, 'migra-aaaaa::0001'),"
                   "               (3, 'migra-aaaaa::0002')) AS v(n, s);"
                   "INSERT INTO queuer.batch_history (batch_id, service_id, to_status, at) "
                   "SELECT batch_id, service_id, 'Enqueued', "
                   "       CASE WHEN service_id LIKE '%1' THEN now() - interval '1 hour' "
                   "            ELSE now() - interval '2 hours' END "
                   "  FROM queuer.batches;"
                   "INSERT INTO queuer.batch_history (batch_id, service_id, to_status) "
                   "SELECT batch_id, service_id, 'Submitting' FROM queuer.batches "
                   " WHERE service_id LIKE '%2';"
                   "RESET session_replication_role");
    int applied = 0;
    assert_int_equal(qw_migrate_apply(db, NULL, &applied, &e), QW_OK);
    assert_int_equal(applied, embedded_migrations() - 36);

    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batch_history "
                                      "WHERE to_status = 'Enqueued'"),
                     0);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batch_history"), 1);
    /* service 1's two rows shared their time: one line of 2 batches an hour old;
     * service 2: one line of 1, two hours old (batches * 1000 + minutes) */
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.enqueue_log"), 2);
    assert_int_equal(itest_scalar(db, "SELECT batches * 1000 + extract(epoch FROM now() - at)::int "
                                      "/ 60 FROM queuer.enqueue_log "
                                      "WHERE service_id = 'migra-aaaaa::0001'"),
                     2060);
    assert_int_equal(itest_scalar(db, "SELECT batches * 1000 + extract(epoch FROM now() - at)::int "
                                      "/ 60 FROM queuer.enqueue_log "
                                      "WHERE service_id = 'migra-aaaaa::0002'"),
                     1120);
    /* the audit still starts with Enqueued for every batch, at its created_at */
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.history h "
                                      "JOIN queuer.batches b USING (batch_id) "
                                      "WHERE h.to_status = 'Enqueued' AND h.id = 0 "
                                      "AND h.at = b.created_at"),
                     3);
    assert_int_equal(itest_scalar(db, "SELECT sum(last_24h) FROM queuer.status_counts "
                                      "WHERE status = 'Enqueued'"),
                     3);
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
        cmocka_unit_test(test_enqueued_rows_move_to_the_log),
        cmocka_unit_test(test_unreachable_database_exit_code),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
