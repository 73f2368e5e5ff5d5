/*
 * Integration: `queuer migrate` by an owner role without CREATEROLE, in a
 * cluster of its own where the queuer group roles do not exist yet: it
 * stops before changing anything and says how to proceed; once an
 * administrator has created the roles, the same role migrates.
 */
#include "itest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int run_migrate(const char *conninfo, char **out, char **err)
{
    char env[1024];
    snprintf(env, sizeof(env), "QUEUER_DATABASE_CONNINFO=%s user=itest_owner", conninfo);
    const char *argv[] = {itest_queuer_bin(), "migrate", NULL};
    const char *envv[] = {env, NULL};
    return itest_run(argv, envv, NULL, out, err);
}

static void test_migrate_without_createrole(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("migrate_roles", 0);
    struct qw_db *admin = itest_connect(conninfo);
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM pg_roles WHERE rolname IN "
                                         "('queuer_worker', 'queuer_operator', 'queuer_enqueuer')"),
                     0);
    itest_exec(admin, "CREATE ROLE itest_owner LOGIN NOCREATEROLE");
    itest_exec(admin, "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I OWNER TO itest_owner', "
                      "current_database()); END $$");

    char *out = NULL, *err = NULL;
    int rc = run_migrate(conninfo, &out, &err);
    if (rc == 0 || !strstr(err, "CREATEROLE") || !strstr(err, "CREATE ROLE queuer_worker NOLOGIN"))
        fail_msg("migrate without CREATEROLE: exit %d\n%s%s", rc, out, err);
    assert_int_equal(rc, 1);
    free(out);
    free(err);
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM pg_namespace "
                                         "WHERE nspname = 'queuer'"),
                     0);

    itest_exec(admin, "CREATE ROLE queuer_worker NOLOGIN; CREATE ROLE queuer_operator NOLOGIN; "
                      "CREATE ROLE queuer_enqueuer NOLOGIN; CREATE ROLE queuer_loader NOLOGIN; "
                      "GRANT queuer_loader TO itest_owner");
    rc = run_migrate(conninfo, &out, &err);
    if (rc != 0)
        fail_msg("migrate with pre-created roles: exit %d\n%s%s", rc, out, err);
    free(out);
    free(err);
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM pg_namespace "
                                         "WHERE nspname = 'queuer' AND nspowner = "
                                         "'itest_owner'::regrole"),
                     1);
    qw_db_close(admin);
    free(conninfo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate_without_createrole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
