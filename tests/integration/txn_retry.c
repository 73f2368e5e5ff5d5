/*
 * Integration: the retrying SERIALIZABLE helper against a real PostgreSQL.
 * Two connections produce a genuine write-skew conflict; the helper must
 * re-run the losing transaction and succeed, acting only on the committed
 * attempt.
 */
#include "itest.h"
#include "db/txn.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

struct skew {
    struct qw_db *other;        /* second connection, interferes on attempt 1 */
    struct qw_txn_stats *stats; /* to see which attempt is running */
    int64_t seen_sum;           /* what the committed attempt read */
    int interfered;             /* the other transaction ran */
};

/* Reads the sum of both rows, writes row `row` = sum + 1. */
static int read_then_write(struct qw_db *db, int row, int64_t *sum, struct qw_error *err)
{
    struct qw_db_res *res = NULL;
    int rc = qw_db_query_sql(db, "SELECT sum(v) FROM skew", 0, NULL, &res, err);
    if (rc != QW_OK)
        return rc;
    *sum = qw_db_res_int(res, 0, 0);
    qw_db_res_free(res);
    char v[32], k[8];
    snprintf(v, sizeof(v), "%lld", (long long)(*sum + 1));
    snprintf(k, sizeof(k), "%d", row);
    const char *params[] = {v, k};
    return qw_db_query_sql(db, "UPDATE skew SET v = $1::int WHERE k = $2::int", 2, params, NULL,
                           err);
}

static int body_a(void *conn, void *arg, struct qw_error *err)
{
    struct skew *s = arg;
    int64_t sum = 0;
    struct qw_db_res *res = NULL;
    int rc = qw_db_query_sql(conn, "SELECT sum(v) FROM skew", 0, NULL, &res, err);
    if (rc != QW_OK)
        return rc;
    sum = qw_db_res_int(res, 0, 0);
    qw_db_res_free(res);
    if (s->stats->attempts == 1) {
        /* B runs to completion between A's read and A's write. */
        int64_t b_sum = 0;
        struct qw_error berr;
        qw_error_clear(&berr);
        assert_int_equal(qw_db_exec(s->other, "BEGIN ISOLATION LEVEL SERIALIZABLE", &berr), 0);
        assert_int_equal(read_then_write(s->other, 2, &b_sum, &berr), 0);
        assert_int_equal(qw_db_exec(s->other, "COMMIT", &berr), 0);
        s->interfered = 1;
    }
    s->seen_sum = sum;
    char v[32];
    snprintf(v, sizeof(v), "%lld", (long long)(sum + 1));
    const char *params[] = {v};
    return qw_db_query_sql(conn, "UPDATE skew SET v = $1::int WHERE k = 1", 1, params, NULL, err);
}

static void test_write_skew_is_retried(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("txn_skew", 0);
    struct qw_db *a = itest_connect(conninfo);
    struct qw_db *b = itest_connect(conninfo);
    itest_exec(a, "CREATE TABLE skew (k int PRIMARY KEY, v int NOT NULL);"
                  "INSERT INTO skew VALUES (1, 0), (2, 0)");

    struct qw_txn_stats stats = {0};
    struct skew s = {.other = b, .stats = &stats};
    struct qw_txn_policy policy = {.max_attempts = 5, .max_ms = 10000};
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_txn_run(&qw_txn_db_ops, a, &policy, body_a, &s, &stats, &err);
    assert_int_equal(rc, QW_OK);
    assert_true(s.interfered);
    /* The first attempt lost to B with 40001 and was re-run from scratch. */
    assert_int_equal(stats.attempts, 2);
    assert_int_equal(stats.serialization_retries, 1);
    /* The committed attempt saw B's write (sum 1) and wrote 2. */
    assert_int_equal(s.seen_sum, 1);
    assert_int_equal(itest_scalar(a, "SELECT v FROM skew WHERE k = 1"), 2);
    assert_int_equal(itest_scalar(a, "SELECT v FROM skew WHERE k = 2"), 1);
    qw_db_close(a);
    qw_db_close(b);
    free(conninfo);
}

static int body_fail(void *conn, void *arg, struct qw_error *err)
{
    (void)arg;
    return qw_db_query_sql(conn, "SELECT 1/0", 0, NULL, NULL, err);
}

static void test_other_errors_roll_back_and_return(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("txn_fail", 0);
    struct qw_db *a = itest_connect(conninfo);
    struct qw_txn_stats stats = {0};
    struct qw_txn_policy policy = {.max_attempts = 5, .max_ms = 10000};
    struct qw_error err;
    qw_error_clear(&err);
    assert_int_equal(qw_txn_run(&qw_txn_db_ops, a, &policy, body_fail, NULL, &stats, &err),
                     QW_ERR_DB);
    assert_string_equal(err.sqlstate, "22012");
    assert_int_equal(stats.attempts, 1);
    /* The connection is usable afterwards: the transaction was rolled back. */
    assert_int_equal(itest_scalar(a, "SELECT 41 + 1"), 42);
    qw_db_close(a);
    free(conninfo);
}

/*
 * BEGIN goes out with the body's first statement (qw_db_begin): that
 * statement must still run inside the transaction, at its isolation level,
 * whichever call sends it.
 */
struct first_call {
    bool simple;        /* the first statement goes through qw_db_exec() */
    char isolation[32]; /* what the body's second statement read */
};

static int body_insert_then_fail(void *conn, void *arg, struct qw_error *err)
{
    struct first_call *f = arg;
    int rc = f->simple ? qw_db_exec(conn, "INSERT INTO kept VALUES (1)", err)
                       : qw_db_query_sql(conn, "INSERT INTO kept VALUES (1)", 0, NULL, NULL, err);
    if (rc != QW_OK)
        return rc;
    struct qw_db_res *res = NULL;
    rc = qw_db_query_sql(conn, "SELECT current_setting('transaction_isolation')", 0, NULL, &res,
                         err);
    if (rc != QW_OK)
        return rc;
    snprintf(f->isolation, sizeof(f->isolation), "%s", qw_db_res_get(res, 0, 0));
    qw_db_res_free(res);
    return qw_db_query_sql(conn, "SELECT 1/0", 0, NULL, NULL, err);
}

static void test_first_statement_is_inside_the_transaction(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("txn_first", 0);
    struct qw_db *a = itest_connect(conninfo);
    itest_exec(a, "CREATE TABLE kept (k int)");
    struct qw_txn_policy policy = {.max_attempts = 1,
                                   .begin_sql = "BEGIN ISOLATION LEVEL REPEATABLE READ"};
    for (int simple = 0; simple <= 1; simple++) {
        struct first_call f = {.simple = simple};
        struct qw_error err;
        qw_error_clear(&err);
        assert_int_equal(
            qw_txn_run(&qw_txn_db_ops, a, &policy, body_insert_then_fail, &f, NULL, &err),
            QW_ERR_DB);
        assert_string_equal(err.sqlstate, "22012");
        assert_string_equal(f.isolation, "repeatable read");
        /* Rolled back with the rest: the insert was not a transaction of its own. */
        assert_int_equal(itest_scalar(a, "SELECT count(*) FROM kept"), 0);
    }
    qw_db_close(a);
    free(conninfo);
}

/*
 * The last statement sent with COMMIT (qw_txn_query_commit): one round trip
 * for both; COMMIT's own outcome is what qw_txn_run() answers; an error of
 * the statement itself leaves nothing committed.
 */
struct last_call {
    struct qw_db *other;  /* looks from outside the transaction */
    const char *prelude;  /* run before the last statement, or NULL */
    const char *incarn;   /* the last statement's bigint parameter */
    int64_t seen_outside; /* rows `other` saw right after the last statement */
    int rows;             /* rows the last statement returned */
};

static int body_last_commits(void *conn, void *arg, struct qw_error *err)
{
    struct last_call *c = arg;
    int rc = c->prelude ? qw_db_query_sql(conn, c->prelude, 0, NULL, NULL, err) : QW_OK;
    if (rc != QW_OK)
        return rc;
    /* (an embedded statement that marks nothing when given no batches) */
    const char *mark[6] = {"w1", "{}", "{}", "{}", "{}", c->incarn};
    struct qw_db_res *res = NULL;
    rc = qw_txn_query_commit(conn, "batches_mark", 6, mark, &res, err);
    if (rc != QW_OK)
        return rc;
    c->rows = qw_db_res_rows(res);
    qw_db_res_free(res);
    c->seen_outside = itest_scalar(c->other, "SELECT count(*) FROM kept");
    return QW_OK;
}

static void test_last_statement_takes_commit_along(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("txn_last", 1);
    struct qw_db *a = itest_connect(conninfo);
    struct qw_db *b = itest_connect(conninfo);
    itest_exec(a, "CREATE TABLE kept (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)");
    itest_exec(a, "GRANT ALL ON kept TO PUBLIC");
    struct qw_txn_policy policy = {.max_attempts = 3,
                                   .begin_sql = "BEGIN ISOLATION LEVEL READ COMMITTED"};
    struct qw_txn_stats stats;
    struct qw_error err;

    /* Committed by the time the statement's rows are in. */
    struct last_call ok = {.other = b, .prelude = "INSERT INTO kept VALUES (1)", .incarn = "1"};
    qw_error_clear(&err);
    assert_int_equal(qw_txn_run(&qw_txn_db_ops, a, &policy, body_last_commits, &ok, &stats, &err),
                     QW_OK);
    assert_int_equal(ok.rows, 0);
    assert_int_equal(ok.seen_outside, 1);
    assert_int_equal(stats.attempts, 1);

    /* The statement fails: COMMIT is skipped, the insert before it rolled back. */
    struct last_call bad = {.other = b, .prelude = "INSERT INTO kept VALUES (2)", .incarn = "x"};
    qw_error_clear(&err);
    assert_int_equal(qw_txn_run(&qw_txn_db_ops, a, &policy, body_last_commits, &bad, &stats, &err),
                     QW_ERR_DB);
    assert_string_equal(err.sqlstate, "22P02");
    assert_int_equal(itest_scalar(b, "SELECT count(*) FROM kept"), 1);

    /* COMMIT fails (a deferred unique check): its error is the answer. */
    struct last_call late = {.other = b, .prelude = "INSERT INTO kept VALUES (1)", .incarn = "1"};
    qw_error_clear(&err);
    assert_int_equal(qw_txn_run(&qw_txn_db_ops, a, &policy, body_last_commits, &late, &stats, &err),
                     QW_ERR_DB);
    assert_string_equal(err.sqlstate, "23505");
    assert_int_equal(late.seen_outside, 1);
    assert_int_equal(itest_scalar(b, "SELECT count(*) FROM kept"), 1);

    /* The connection serves the next transaction. */
    assert_int_equal(itest_scalar(a, "SELECT 41 + 1"), 42);

    /* As the only statement: on a new connection (prepared first, BEGIN
     * alone), then where it is prepared (BEGIN in the same pipeline). */
    struct qw_db *fresh = itest_connect(conninfo);
    struct qw_db *on[2] = {fresh, a};
    for (int i = 0; i < 2; i++) {
        struct last_call only = {.other = b, .incarn = "1", .rows = -1};
        qw_error_clear(&err);
        assert_int_equal(
            qw_txn_run(&qw_txn_db_ops, on[i], &policy, body_last_commits, &only, &stats, &err),
            QW_OK);
        assert_int_equal(only.rows, 0);
        assert_int_equal(stats.attempts, 1);
        assert_int_equal(itest_scalar(on[i], "SELECT 41 + 1"), 42);
    }
    qw_db_close(fresh);
    qw_db_close(b);
    qw_db_close(a);
    free(conninfo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_skew_is_retried),
        cmocka_unit_test(test_other_errors_roll_back_and_return),
        cmocka_unit_test(test_first_statement_is_inside_the_transaction),
        cmocka_unit_test(test_last_statement_takes_commit_along),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
