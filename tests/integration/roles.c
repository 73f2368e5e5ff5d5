/*
 * Integration: the privileges of the NOLOGIN roles the migration creates,
 * exercised through login roles made for the test. A worker has the DML it
 * needs and nothing else; an operator reads the views and never payloads.
 */
#include "itest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char SAMPLE_BATCH[] =
    "DO $$ DECLARE id text := repeat('ab', 64); BEGIN "
    "PERFORM queuer.enqueue_batch('roles-aaaaa::0001', id, "
    "decode('0a' || '8801' || '0a' || '03' || '686472' || '12' || '8001' || "
    "encode(convert_to(id, 'UTF8'), 'hex'), 'hex')); END $$";

/* Runs `sql`; returns its SQLSTATE ("" on success) in `state`. */
static void try_sql(struct qw_db *db, const char *sql, char state[6])
{
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_db_exec(db, sql, &err);
    snprintf(state, 6, "%s", rc == QW_OK ? "" : err.sqlstate);
    if (rc != QW_OK && state[0] == '\0')
        fail_msg("%s failed without a SQLSTATE: %s", sql, err.msg);
}

static void expect(struct qw_db *db, const char *sql, const char *want)
{
    char state[6];
    try_sql(db, sql, state);
    if (strcmp(state, want) != 0)
        fail_msg("%s\n  expected SQLSTATE '%s', got '%s'", sql, want, state);
}

static void test_worker_and_operator(void **state)
{
    char *conninfo = itest_db_create("roles", 1);
    struct qw_db *admin = itest_connect(conninfo);
    itest_exec(admin,
               "DO $$ BEGIN "
               "IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'itest_worker') THEN "
               "CREATE ROLE itest_worker LOGIN IN ROLE queuer_worker; END IF; "
               "IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'itest_operator') THEN "
               "CREATE ROLE itest_operator LOGIN IN ROLE queuer_operator; END IF; END $$");
    itest_exec(admin, SAMPLE_BATCH);
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.batches"), 1);
    itest_exec(admin, "INSERT INTO queuer.batch_history (batch_id, service_id, to_status) "
                      "VALUES (repeat('ab', 64), 'roles-aaaaa::0001', 'Pending')");

    struct qw_db *worker = itest_connect_as(conninfo, "itest_worker");
    /* no DDL in the schema, no dropping anything */
    expect(worker, "CREATE TABLE queuer.intruder (x int)", "42501");
    expect(worker, "DROP TABLE queuer.batches", "42501");
    expect(worker, "DROP TABLE queuer.batch_history", "42501");
    expect(worker, "DROP VIEW queuer.batch_states", "42501");
    expect(worker, "DROP FUNCTION queuer.enqueue_batch(text, text, bytea, integer)", "42501");
    expect(worker, "ALTER TABLE queuer.batches ADD COLUMN x int", "42501");
    expect(worker, "TRUNCATE queuer.batch_history", "42501");
    /* the history is append-only for it */
    expect(worker, "UPDATE queuer.batch_history SET detail = 'x'", "42501");
    expect(worker, "DELETE FROM queuer.batch_history", "42501");
    /* and it appends only its own transitions at a claim it holds (hostile_roles.c) */
    expect(worker,
           "INSERT INTO queuer.batch_history (batch_id, service_id, to_status) "
           "VALUES (repeat('ab', 64), 'roles-aaaaa::0001', 'Committed')",
           "42501");
    /* it updates batches (statuses), and reads what it needs */
    expect(worker,
           "UPDATE queuer.batches SET status = 'Pending', submitted = true, "
           "attempts = attempts + 1",
           "");
    expect(worker, "SELECT count(*) FROM queuer.batches", "");
    expect(worker, "SELECT count(*) FROM queuer.settings", "");
    /* and what holds back vacuum, which it reports on /metrics and in its log */
    expect(worker, "SELECT * FROM queuer.snapshot_holders", "");
    expect(worker, "DELETE FROM queuer.batches", "42501");
    expect(worker,
           "INSERT INTO queuer.batches (batch_id, service_id, payload, created_at) "
           "VALUES (repeat('cd', 64), 'roles-aaaaa::0001', '\\x00', now())",
           "42501");
    qw_db_close(worker);
    /* the owner's Pending row; the Enqueued transition is the batch's own row */
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.batch_history"), 1);
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.history"), 2);
    assert_int_equal(itest_scalar(admin, "SELECT attempts FROM queuer.batches"), 1);

    struct qw_db *op = itest_connect_as(conninfo, "itest_operator");
    expect(op, "SELECT * FROM queuer.batch_states", "");
    expect(op, "SELECT * FROM queuer.claims", "");
    expect(op, "SELECT * FROM queuer.history", "");
    expect(op, "SELECT * FROM queuer.live_instances", "");
    /* the views carry no payload bytes, and the tables are closed to it */
    expect(op, "SELECT payload FROM queuer.batch_states", "42703");
    expect(op, "SELECT payload FROM queuer.batches", "42501");
    expect(op, "SELECT count(*) FROM queuer.batches", "42501");
    expect(op, "SELECT count(*) FROM queuer.batch_history", "42501");
    expect(op, "UPDATE queuer.batches SET status = NULL", "42501");
    /* nor can it enqueue */
    expect(op, "SELECT queuer.enqueue_batch('roles-aaaaa::0001', repeat('ef', 64), '\\x00')",
           "42501");
    expect(op, "SELECT * FROM queuer.enqueue_rows(ARRAY[]::queuer.enqueue_row[], true)", "42501");
    expect(op, "CREATE TABLE queuer.intruder (x int)", "42501");
    qw_db_close(op);
    qw_db_close(admin);
    free(conninfo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_and_operator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
