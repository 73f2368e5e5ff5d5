/*
 * Integration: a service's batch in flight is named on its claim row
 * (queuer.service_id_claims.in_flight, migrations/0043_in_flight_on_claim.sql).
 * The workers' statements keep the name themselves; every other write that
 * moves a batch into or out of flight is followed by a trigger that keeps it
 * and refuses a second batch of the service in flight, also when the first
 * went in flight in a transaction that committed while the write waited.
 */
#include "itest.h"
#include "db/migrate.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SVC "infli-aaaaa::0001"

struct fixture {
    char *conninfo;
    struct qw_db *db;
    char ids[3][129]; /* the service's batches, oldest first */
};

/* hand writes of batch %s: into flight (Pending, or being posted), out of it (final) */
#define TO_PENDING                                                                                 \
    "UPDATE queuer.batches SET submitted = true, status = 'Pending' WHERE batch_id = '%s'"
#define TO_POSTING "UPDATE queuer.batches SET submitted = true, status = NULL WHERE batch_id = '%s'"
/* batch %s out of flight and batch %s into it, in one statement */
#define SWAP                                                                                       \
    "UPDATE queuer.batches SET submitted = NOT submitted, "                                        \
    "status = CASE WHEN status IS NULL THEN 'Pending' END WHERE batch_id IN ('%s', '%s')"
#define TO_FINAL                                                                                   \
    "UPDATE queuer.batches SET submitted = false, status = 'Committed' WHERE batch_id = '%s'"

/* Runs the SQL `fmt` formats; returns its error's SQLSTATE, or "" when it succeeded. */
static const char *try_sqlv(struct fixture *f, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static const char *try_sqlv(struct fixture *f, const char *fmt, va_list ap)
{
    static struct qw_error err;
    char sql[512];
    vsnprintf(sql, sizeof(sql), fmt, ap);
    qw_error_clear(&err);
    if (qw_db_exec(f->db, sql, &err) != QW_OK && err.sqlstate[0] == '\0')
        fail_msg("%s: %s", sql, err.msg);
    return err.sqlstate;
}

__attribute__((format(printf, 2, 3))) static const char *try_sql(struct fixture *f, const char *fmt,
                                                                 ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *state = try_sqlv(f, fmt, ap);
    va_end(ap);
    return state;
}

/* Runs the SQL `fmt` formats, which must succeed. */
__attribute__((format(printf, 2, 3))) static void run_sql(struct fixture *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *state = try_sqlv(f, fmt, ap);
    va_end(ap);
    if (state[0] != '\0')
        fail_msg("refused (%s): %s", state, fmt);
}

/* Three batches of one service; the first is Pending, put there by hand. */
static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->conninfo = itest_db_create("in_flight", 1);
    f->db = itest_connect(f->conninfo);
    for (int i = 0; i < 3; i++)
        itest_enqueue_sample(f->db, SVC, 3000 + (uint64_t)i, f->ids[i]);
    run_sql(f, TO_PENDING, f->ids[0]);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    qw_db_close(f->db);
    free(f->conninfo);
    free(f);
    return 0;
}

/* Which of the batches the claim row names in flight: its index, or -1 for none. */
static int named(struct fixture *f)
{
    char *id = itest_string(f->db, "SELECT coalesce(in_flight, '') FROM queuer.service_id_claims "
                                   "WHERE service_id = '" SVC "'");
    int which = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(id, f->ids[i]) == 0)
            which = i;
    free(id);
    return which;
}

/*
 * A second batch of the service put in flight by hand, Pending or being
 * posted, is refused with the exclusion error while the first is in flight;
 * the refused batch and the name stay as they were.
 */
static void test_second_batch_in_flight_is_refused(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(named(f), 0);
    assert_string_equal(try_sql(f, TO_PENDING, f->ids[1]), "23P01");
    assert_string_equal(try_sql(f, TO_POSTING, f->ids[2]), "23P01");
    assert_int_equal(itest_scalar(f->db, "SELECT count(*) FROM queuer.batches "
                                         "WHERE service_id = '" SVC "' AND NOT submitted "
                                         "AND status IS NULL"),
                     2);
    assert_int_equal(named(f), 0);
    /* the batch in flight itself may move between its two states */
    run_sql(f, TO_POSTING, f->ids[0]);
    assert_int_equal(named(f), 0);
}

/*
 * Hand writes keep the name: a batch leaving flight is no longer named, the
 * next one put in flight is; one statement may end one batch's turn and
 * start another's, whichever row it writes first; a deleted batch in flight
 * is no longer named, and inserting a batch in flight names it or is
 * refused as an update would be.
 */
static void test_hand_writes_keep_the_name(void **state)
{
    struct fixture *f = *state;
    run_sql(f, TO_FINAL, f->ids[0]);
    assert_int_equal(named(f), -1);
    run_sql(f, TO_PENDING, f->ids[1]);
    assert_int_equal(named(f), 1);
    /* both orders of the rows within one statement */
    run_sql(f, SWAP, f->ids[1], f->ids[2]);
    assert_int_equal(named(f), 2);
    run_sql(f, SWAP, f->ids[2], f->ids[1]);
    assert_int_equal(named(f), 1);
    /* a delete and an insert by hand, of a batch in flight */
    run_sql(f,
            "CREATE TEMP TABLE saved AS SELECT * FROM queuer.batches WHERE batch_id = '%s';"
            "DELETE FROM queuer.batches WHERE batch_id = '%s'",
            f->ids[1], f->ids[1]);
    assert_int_equal(named(f), -1);
    run_sql(f, TO_PENDING, f->ids[2]);
    assert_string_equal(try_sql(f, "INSERT INTO queuer.batches SELECT * FROM saved"), "23P01");
    assert_int_equal(named(f), 2);
    run_sql(f, TO_FINAL, f->ids[2]);
    run_sql(f, "INSERT INTO queuer.batches SELECT * FROM saved");
    assert_int_equal(named(f), 1);
}

struct waiter {
    const char *conninfo;
    const char *id;
    char sqlstate[6];
};

/* Puts the waiter's batch in flight on a connection of its own. */
static void *put_in_flight(void *arg)
{
    struct waiter *w = arg;
    struct qw_db *db = itest_connect(w->conninfo);
    itest_exec(db, "SET application_name = 'in-flight-waiter'");
    char sql[256];
    snprintf(sql, sizeof(sql), TO_PENDING, w->id);
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_exec(db, sql, &err) != QW_OK)
        memcpy(w->sqlstate, err.sqlstate, sizeof(w->sqlstate));
    qw_db_close(db);
    return NULL;
}

/*
 * A write that waits for the claim row while another transaction ends the
 * batch in flight and puts the next one in flight sees that next one once
 * the other commits, and is refused: the name is read under the lock, and
 * the named batch in a snapshot taken after it.
 */
static void test_waiting_write_sees_the_batch_put_in_flight(void **state)
{
    struct fixture *f = *state;
    itest_exec(f->db, "BEGIN");
    run_sql(f, TO_FINAL, f->ids[0]);
    run_sql(f, TO_PENDING, f->ids[1]);
    struct waiter w = {.conninfo = f->conninfo, .id = f->ids[2]};
    pthread_t t;
    pthread_create(&t, NULL, put_in_flight, &w);
    struct qw_db *watch = itest_connect(f->conninfo);
    int waited = 0;
    for (int i = 0; i < 6000 && !waited; i++) {
        waited = itest_scalar(watch, "SELECT count(*) FROM pg_stat_activity WHERE "
                                     "application_name = 'in-flight-waiter' AND "
                                     "wait_event_type = 'Lock'") > 0;
        nanosleep(&(struct timespec){.tv_nsec = 5 * 1000 * 1000}, NULL);
    }
    qw_db_close(watch);
    itest_exec(f->db, "COMMIT");
    pthread_join(t, NULL);
    assert_true(waited);
    assert_string_equal(w.sqlstate, "23P01");
    assert_int_equal(named(f), 1);
    assert_int_equal(itest_scalar(f->db, "SELECT count(*) FROM queuer.batches "
                                         "WHERE service_id = '" SVC "' AND (status = 'Pending' "
                                         "OR (submitted AND status IS NULL))"),
                     1);
}

/*
 * A database at 0042 with batches in flight: 0043 names each on its
 * service's claim row (creating a missing row), and names nothing for a
 * service with none in flight.
 */
static void test_migration_names_the_batches_in_flight(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("in_flight_0043", 0);
    struct qw_db *db = itest_connect(conninfo);
    struct qw_error e;
    qw_error_clear(&e);
    assert_int_equal(qw_migrate_apply_to(db, 42, NULL, NULL, &e), QW_OK);
    /* without triggers: no claim rows; one batch in flight in each of two services */
    itest_exec(db, "SET session_replication_role = replica;"
                   "INSERT INTO queuer.batches (batch_id, service_id, payload, created_at, "
                   "                            submitted, status) "
                   "SELECT repeat(to_hex(n), 128), s, '\\x0a00', now(), sub, st "
                   "  FROM (VALUES (1, 'migra-aaaaa::0001', true, 'Pending'),"
                   "               (2, 'migra-aaaaa::0001', false, NULL),"
                   "               (3, 'migra-aaaaa::0002', true, NULL),"
                   "               (4, 'migra-aaaaa::0003', false, 'Committed')) "
                   "       AS v(n, s, sub, st);"
                   "RESET session_replication_role");
    assert_int_equal(qw_migrate_apply(db, NULL, NULL, &e), QW_OK);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.service_id_claims c "
                                      "JOIN queuer.batches b ON b.batch_id = c.in_flight "
                                      "AND b.service_id = c.service_id "
                                      "WHERE b.batch_id IN (repeat('1', 128), repeat('3', 128))"),
                     2);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.service_id_claims "
                                      "WHERE in_flight IS NOT NULL"),
                     2);
    qw_db_close(db);
    free(conninfo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_second_batch_in_flight_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hand_writes_keep_the_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_waiting_write_sees_the_batch_put_in_flight, setup,
                                        teardown),
        cmocka_unit_test(test_migration_names_the_batches_in_flight),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
