/*
 * Integration: the bulk enqueue path (migration 0011) does not check each
 * payload a second time, and that exemption is confined to it.
 *
 * - a non-superuser enqueuer bulk-loads through the CLI (staging table,
 *   binary COPY, queuer.enqueue_staged()) and the database checks none
 *   of those payloads, while a single enqueue (queuer.enqueue_batch())
 *   checks its payload once;
 * - the rules of migration 0007 hold on that path: the enqueuer may not
 *   set the back-pressure marks for its session, and a conflict does not
 *   name the service that holds the batch id;
 * - every other write path is still checked: a role allowed to insert
 *   into queuer.batches directly, with or without any setting of its own,
 *   queuer.enqueue_rows() and queuer.enqueue_batch();
 * - nobody but the schema owner can act as queuer_loader, which owns
 *   nothing but queuer.enqueue_staged() and queuer.enqueue_batch() (which
 *   checks its payload itself), and the first reads only a
 *   plain staging table (no view, rule, row security or domain of the
 *   caller's runs as queuer_loader);
 * - a non-superuser schema owner can apply the migration.
 */
#include "itest.h"

#include "common/hex.h"
#include "ingest/batchlist.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SVC_A "trust-aaaaa::0001"
#define SVC_B "trust-aaaaa::0002"
#define LINES 200

/* A payload the database must refuse: a BatchList whose only Batch has no signature. */
#define BAD_PAYLOAD "'\\x0a020a00'::bytea"

/* Runs `sql`; returns its SQLSTATE ("" on success). */
static void sql_state(struct qw_db *db, const char *sql, char state[6])
{
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_db_exec(db, sql, &err);
    snprintf(state, 6, "%s", rc == QW_OK ? "" : err.sqlstate);
    if (rc != QW_OK && state[0] == '\0')
        fail_msg("%s failed without a SQLSTATE: %s", sql, err.msg);
}

static void expect_state(struct qw_db *db, const char *sql, const char *want)
{
    char state[6];
    sql_state(db, sql, state);
    if (strcmp(state, want) != 0)
        fail_msg("%s\n  expected SQLSTATE '%s', got '%s'", sql, want, state);
}

/* `conninfo` with `user=role` appended (malloc'd). */
static char *as_role(const char *conninfo, const char *role)
{
    size_t len = strlen(conninfo) + strlen(role) + 8;
    char *c = malloc(len);
    snprintf(c, len, "%s user=%s", conninfo, role);
    return c;
}

static void create_login(struct qw_db *admin, const char *role, const char *in_role)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%s') THEN "
             "CREATE ROLE %s LOGIN%s%s; END IF; END $$",
             role, role, in_role ? " IN ROLE " : "", in_role ? in_role : "");
    itest_exec(admin, sql);
}

/* `n` TSV lines, alternating two services, with distinct ids from `first`. */
static char *tsv_lines(int first, int n)
{
    size_t cap = (size_t)n * 4096;
    char *t = malloc(cap);
    size_t len = 0;
    for (int k = first; k < first + n; k++) {
        char id[129];
        uint8_t *p = NULL;
        size_t plen = 0;
        qw_batchlist_sample_id((uint64_t)k * 104729 + 3, id);
        if (qw_batchlist_sample(id, (uint64_t)k, &p, &plen) != QW_OK)
            fail_msg("sample payload");
        char *hex = malloc(2 * plen + 1);
        qw_hex_encode(p, plen, hex);
        len += (size_t)snprintf(t + len, cap - len, "%s\t%s\t%s\n", k % 2 ? SVC_B : SVC_A, id, hex);
        free(hex);
        free(p);
    }
    return t;
}

/*
 * Payload checks recorded in the database's statistics: calls of
 * queuer.batchlist_defect(), which the payload trigger and
 * queuer.enqueue_batch() run for every payload they check.
 */
static int64_t check_calls(struct qw_db *db)
{
    itest_exec(db, "SELECT pg_stat_clear_snapshot()");
    return itest_scalar(db, "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
                            "WHERE schemaname = 'queuer' AND funcname = 'batchlist_defect'");
}

/* Waits (up to 10 s) until the check's call count reaches `want`; returns the last count. */
static int64_t check_calls_reach(struct qw_db *db, int64_t want)
{
    int64_t got = check_calls(db);
    for (int i = 0; i < 100 && got < want; i++) {
        struct timespec nap = {0, 100 * 1000 * 1000};
        nanosleep(&nap, NULL);
        got = check_calls(db);
    }
    return got;
}

static void test_bulk_load_skips_the_trigger(void **state)
{
    char *conninfo = itest_db_create("bulk_trust", 1);
    struct qw_db *admin = itest_connect(conninfo);
    create_login(admin, "itest_bulk_enqueuer", "queuer_enqueuer");
    /* Function statistics for every session of this database (backends
       flush them when they exit). */
    char *dbname = itest_string(admin, "SELECT current_database()");
    char sql[256];
    snprintf(sql, sizeof(sql), "ALTER DATABASE %s SET track_functions = 'pl'", dbname);
    itest_exec(admin, sql);
    free(dbname);

    char *enqueuer = as_role(conninfo, "itest_bulk_enqueuer");
    char conn_env[1024];
    snprintf(conn_env, sizeof(conn_env), "QUEUER_DATABASE_CONNINFO=%s", enqueuer);
    const char *env[] = {conn_env, NULL};
    const char *argv[] = {itest_queuer_bin(), "enqueue", "--tsv", "-", NULL};

    /* An enqueuer may not switch back pressure off for its session on this path either. */
    char *lines = tsv_lines(0, LINES);
    char *out = NULL;
    char *err = NULL;
    const char *marks_env[] = {conn_env, "QUEUER_INGEST_HIGH=0", NULL};
    int rc = itest_run(argv, marks_env, lines, &out, &err);
    if (rc == 0 || !strstr(err, "may not set queuer.ingest_high"))
        fail_msg("session marks as an enqueuer: exit %d: %s", rc, err);
    free(out);
    free(err);
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.batches"), 0);

    /* Back pressure off the owner's way (100 lines a service are over the high mark). */
    itest_exec(admin, "UPDATE queuer.settings SET ingest_high = 0");
    rc = itest_run(argv, env, lines, &out, &err);
    if (rc != 0)
        fail_msg("bulk load as an enqueuer: exit %d: %s", rc, err);
    free(out);
    free(err);
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.batches"), LINES);
    assert_int_equal(itest_scalar(admin, "SELECT sum(batches) FROM queuer.enqueue_log"), LINES);
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.history "
                                         "WHERE to_status = 'Enqueued'"),
                     LINES);

    /* A single enqueue goes through queuer.enqueue_batch(): checked once. */
    char *one = tsv_lines(LINES, 1);
    one[strcspn(one, "\t")] = '\0';
    char *id = one + strlen(one) + 1;
    id[strcspn(id, "\t")] = '\0';
    char *hex = id + strlen(id) + 1;
    hex[strcspn(hex, "\n")] = '\0';
    size_t len = strlen(hex) / 2;
    uint8_t *payload = malloc(len);
    assert_int_equal(qw_hex_decode(hex, strlen(hex), payload, len), (long)len);
    char *path = itest_temp_file("qwtrust", payload, len);
    const char *single[] = {itest_queuer_bin(), "enqueue", "--service", one, "--batch-id", id,
                            "--payload-file",   path,      NULL};
    rc = itest_run(single, env, NULL, NULL, &err);
    if (rc != 0)
        fail_msg("single enqueue: exit %d: %s", rc, err);
    free(err);
    unlink(path);
    free(path);
    free(payload);
    free(one);

    /* The single enqueue's check is counted; the bulk load added none
       (its backend exited before the single enqueue started; a second
       look after a pause catches a late flush). */
    assert_int_equal(check_calls_reach(admin, 1), 1);
    struct timespec pause = {1, 0};
    nanosleep(&pause, NULL);
    assert_int_equal(check_calls(admin), 1);

    /* The same load again: every line is an idempotent duplicate. */
    rc = itest_run(argv, env, lines, &out, NULL);
    assert_int_equal(rc, 0);
    if (!strstr(out, "0 of 200 batch lines enqueued; 200 duplicates"))
        fail_msg("re-run: %s", out);
    free(out);
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.batches"), LINES + 1);

    /* A stored batch id under the other service: a conflict that names no service. */
    char *moved = tsv_lines(0, 1);
    memcpy(moved, SVC_B, strlen(SVC_B));
    rc = itest_run(argv, env, moved, &out, &err);
    if (rc != 65 || !strstr(err, "already enqueued with a different service or payload") ||
        strstr(err, SVC_A))
        fail_msg("conflict: exit %d: %s", rc, err);
    free(out);
    free(err);
    free(moved);
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.batches"), LINES + 1);

    free(lines);
    free(enqueuer);
    qw_db_close(admin);
    free(conninfo);
}

static void test_other_paths_stay_checked(void **state)
{
    char *conninfo = itest_db_create("bulk_trust_paths", 1);
    struct qw_db *admin = itest_connect(conninfo);
    create_login(admin, "itest_direct_writer", NULL);
    itest_exec(admin, "GRANT USAGE ON SCHEMA queuer TO itest_direct_writer");
    itest_exec(admin, "GRANT INSERT, UPDATE ON queuer.batches TO itest_direct_writer");
    /* the trigger calls the check function as the inserting role */
    itest_exec(admin, "GRANT EXECUTE ON FUNCTION queuer.batchlist_defect(bytea, text), "
                      "queuer.batchlist_defect_walk(bytea, text) TO itest_direct_writer");
    char *writer_conninfo = as_role(conninfo, "itest_direct_writer");
    struct qw_db *writer = itest_connect(writer_conninfo);

    char insert[512];
    snprintf(insert, sizeof(insert),
             "INSERT INTO queuer.batches (batch_id, service_id, payload, created_at) "
             "VALUES (repeat('a', 128), '%s', %s, now())",
             SVC_A, BAD_PAYLOAD);
    /* A direct insert is checked ... */
    expect_state(writer, insert, "QU400");
    /* ... whatever the session sets ... */
    expect_state(writer, "SET queuer.payload_checked = 'on'", "");
    expect_state(writer, "SET queuer.trusted = 'on'", "");
    expect_state(writer, insert, "QU400");
    /* ... and it cannot become the loader. */
    expect_state(writer, "SET ROLE queuer_loader", "42501");
    /* Nor call the bulk function (not an enqueuer). */
    expect_state(writer, "SELECT * FROM queuer.enqueue_staged(0, 1, true)", "42501");

    /* The superuser's direct insert is checked too (the exemption is the
       loader's, not the owner's). */
    expect_state(admin, insert, "QU400");

    /* queuer.enqueue_rows() checks every payload it stores. */
    char rows[512];
    snprintf(rows, sizeof(rows),
             "SELECT count(*) FROM queuer.enqueue_rows(ARRAY[ROW(1, '%s', repeat('b', 128), %s)"
             "::queuer.enqueue_row], true) WHERE outcome = 'invalid'",
             SVC_B, BAD_PAYLOAD);
    assert_int_equal(itest_scalar(admin, rows), 1);
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.batches"), 0);
    /* So does queuer.enqueue_batch(), though it runs as queuer_loader. */
    char one[512];
    snprintf(one, sizeof(one), "SELECT queuer.enqueue_batch('%s', repeat('c', 128), %s)", SVC_B,
             BAD_PAYLOAD);
    expect_state(admin, one, "QU400");
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.batches"), 0);

    /* queuer_loader logs in nowhere and owns only the three enqueue functions. */
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM pg_roles "
                                         "WHERE rolname = 'queuer_loader' AND NOT rolcanlogin"),
                     1);
    char *owned = itest_string(admin, "SELECT string_agg(p.oid::regprocedure::text, ',' "
                                      "ORDER BY p.proname) FROM pg_proc p WHERE p.proowner = "
                                      "'queuer_loader'::regrole");
    assert_string_equal(owned, "queuer.enqueue_batch(text,text,bytea,integer),"
                               "queuer.enqueue_rows_unchecked(queuer.enqueue_row[],boolean),"
                               "queuer.enqueue_staged(integer,integer,boolean)");
    free(owned);
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM pg_class c "
                                         "WHERE c.relowner = 'queuer_loader'::regrole"),
                     0);
    /* and it may not create anything in the schema */
    assert_int_equal(itest_scalar(admin, "SELECT has_schema_privilege('queuer_loader', "
                                         "'queuer', 'CREATE')::int"),
                     0);

    qw_db_close(writer);
    free(writer_conninfo);
    qw_db_close(admin);
    free(conninfo);
}

/* Stages `ddl` as the enqueuer and calls the bulk function: it must refuse to read it. */
static void expect_staging_refused(struct qw_db *enq, const char *ddl)
{
    itest_exec(enq, "BEGIN");
    itest_exec(enq, ddl);
    itest_exec(enq, "GRANT SELECT ON pg_temp.queuer_load TO queuer_loader");
    char state[6];
    sql_state(enq, "SELECT * FROM queuer.enqueue_staged(0, 10, true)", state);
    itest_exec(enq, "ROLLBACK");
    if (strcmp(state, "42501") != 0)
        fail_msg("staging %s\n  expected SQLSTATE '42501', got '%s'", ddl, state);
}

static void test_staging_table_is_plain(void **state)
{
    char *conninfo = itest_db_create("bulk_trust_staging", 1);
    struct qw_db *admin = itest_connect(conninfo);
    create_login(admin, "itest_staging_enqueuer", "queuer_enqueuer");
    char *enq_conninfo = as_role(conninfo, "itest_staging_enqueuer");
    struct qw_db *enq = itest_connect(enq_conninfo);
    /* A function of the caller's that would run as queuer_loader if read through. */
    itest_exec(enq, "CREATE FUNCTION pg_temp.who() RETURNS text LANGUAGE sql "
                    "AS 'SELECT current_user::text'");
    expect_staging_refused(enq, "CREATE TEMP VIEW queuer_load AS SELECT 0 AS seq, 1 AS line_no, "
                                "pg_temp.who() AS service_id, repeat('a', 128) AS batch_id, "
                                "'\\x00'::bytea AS payload, 0 AS priority");
    expect_staging_refused(enq, "CREATE TEMP TABLE queuer_load (seq integer, line_no integer, "
                                "service_id text, batch_id text, payload bytea, priority integer); "
                                "ALTER TABLE queuer_load ENABLE ROW LEVEL SECURITY; "
                                "CREATE POLICY p ON queuer_load USING (pg_temp.who() IS NOT NULL)");
    expect_staging_refused(enq, "CREATE TEMP TABLE queuer_load (seq integer, line_no integer, "
                                "service_id text, batch_id text, payload bytea, priority integer); "
                                "CREATE RULE r AS ON UPDATE TO queuer_load DO ALSO "
                                "SELECT pg_temp.who()");
    expect_staging_refused(enq, "CREATE TEMP TABLE queuer_load (seq bigint, line_no integer, "
                                "service_id text, batch_id text, payload bytea, priority integer)");
    expect_staging_refused(
        enq, "CREATE TEMP TABLE queuer_load_parent (seq integer, line_no "
             "integer, service_id text, batch_id text, payload bytea, priority integer); "
             "CREATE TEMP TABLE queuer_load () INHERITS (queuer_load_parent); "
             "CREATE TEMP TABLE queuer_load_child () INHERITS (queuer_load)");
    /* 0011's shape, without the priority column of 0012 */
    expect_staging_refused(enq, "CREATE TEMP TABLE queuer_load (seq integer, line_no integer, "
                                "service_id text, batch_id text, payload bytea)");
    /* no staging table at all */
    char got[6];
    sql_state(enq, "SELECT * FROM queuer.enqueue_staged(0, 10, true)", got);
    assert_string_equal(got, "42501");
    /* the plain table the CLI stages is read (nothing staged: nothing stored) */
    itest_exec(enq, "BEGIN");
    itest_exec(enq,
               "CREATE TEMP TABLE queuer_load (seq integer, line_no integer, service_id "
               "text COLLATE \"C\", batch_id text COLLATE \"C\", payload bytea, priority integer) "
               "ON COMMIT DROP; GRANT SELECT ON queuer_load TO queuer_loader");
    sql_state(enq, "SELECT * FROM queuer.enqueue_staged(0, 10, true)", got);
    itest_exec(enq, "ROLLBACK");
    assert_string_equal(got, "");
    qw_db_close(enq);
    free(enq_conninfo);
    qw_db_close(admin);
    free(conninfo);
}

static void test_non_superuser_owner_migrates(void **state)
{
    struct qw_db *admin = itest_connect(itest_base_conninfo());
    create_login(admin, "itest_schema_owner", NULL);
    itest_exec(admin, "ALTER ROLE itest_schema_owner CREATEROLE");
    char *plain = itest_db_create("bulk_trust_owner", 0);
    char *dbname = NULL;
    {
        struct qw_db *db = itest_connect(plain);
        dbname = itest_string(db, "SELECT current_database()");
        qw_db_close(db);
    }
    char sql[256];
    snprintf(sql, sizeof(sql), "ALTER DATABASE %s OWNER TO itest_schema_owner", dbname);
    itest_exec(admin, sql);

    char *owner = as_role(plain, "itest_schema_owner");
    char conn_env[1024];
    snprintf(conn_env, sizeof(conn_env), "QUEUER_DATABASE_CONNINFO=%s", owner);
    const char *env[] = {conn_env, NULL};
    const char *argv[] = {itest_queuer_bin(), "migrate", NULL};
    char *err = NULL;
    int rc = itest_run(argv, env, NULL, NULL, &err);
    if (rc != 0)
        fail_msg("migrate as a non-superuser owner: exit %d: %s", rc, err);
    free(err);
    struct qw_db *db = itest_connect(plain);
    char *fn_owner = itest_string(db, "SELECT pg_get_userbyid(proowner) FROM pg_proc "
                                      "WHERE proname = 'enqueue_staged'");
    assert_string_equal(fn_owner, "queuer_loader");
    free(fn_owner);
    qw_db_close(db);
    free(owner);
    free(dbname);
    free(plain);
    qw_db_close(admin);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bulk_load_skips_the_trigger),
        cmocka_unit_test(test_other_paths_stay_checked),
        cmocka_unit_test(test_staging_table_is_plain),
        cmocka_unit_test(test_non_superuser_owner_migrates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
