/*
 * Integration: the fast path of sql/outcomes_record.sql. When a batch's
 * turn ends, the same statement marks its service's next batch for
 * submission only where DESIGN §4 allows it, fenced by the claim.
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

#define SVC "fastp-aaaaa::0001"

struct fixture {
    char *conninfo;
    struct qw_db *db;
    char ids[3][129]; /* the service's batches, oldest first */
};

static void enqueue(struct qw_db *db, const char *id, uint64_t seed)
{
    uint8_t *payload = NULL;
    size_t len = 0;
    assert_int_equal(qw_batchlist_sample(id, seed, &payload, &len), 0);
    char *hex = malloc(2 * len + 1);
    qw_hex_encode(payload, len, hex);
    const char *params[] = {SVC, id, hex};
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_db_query_sql(db, "SELECT queuer.enqueue_batch($1, $2, decode($3, 'hex'))", 3,
                             params, NULL, &err);
    if (rc != QW_OK)
        fail_msg("enqueue: %s", err.msg);
    free(hex);
    free(payload);
}

/* Three batches; the first is Pending at the ledger; w1 holds the claim at epoch 7. */
static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->conninfo = itest_db_create("fast_path", 1);
    f->db = itest_connect(f->conninfo);
    for (int i = 0; i < 3; i++) {
        qw_batchlist_sample_id(1000 + (uint64_t)i, f->ids[i]);
        enqueue(f->db, f->ids[i], 1000 + (uint64_t)i);
    }
    itest_exec(f->db, "UPDATE queuer.service_id_claims SET claimant = 'w1', claim_epoch = 7, "
                      "expiry_1 = now() + interval '1 min', expiry_2 = now() + interval '2 min'");
    char sql[512];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET submitted = true, status = 'Pending', attempts = 1 "
             "WHERE batch_id = '%s'",
             f->ids[0]);
    itest_exec(f->db, sql);
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

/* Records `status` for ids[0] (expect pending) at `epoch`; returns the result. */
static struct qw_db_res *record(struct fixture *f, const char *status, long epoch, int go_on)
{
    char ids[160], epochs[32], statuses[32], go[8];
    snprintf(ids, sizeof(ids), "{%s}", f->ids[0]);
    snprintf(epochs, sizeof(epochs), "{%ld}", epoch);
    snprintf(statuses, sizeof(statuses), "{%s}", status);
    snprintf(go, sizeof(go), "{%s}", go_on ? "t" : "f");
    const char *params[] = {"w1",  ids,   "{" SVC "}", epochs,   "{pending}",     statuses,
                            "{t}", "{0}", "{NULL}",    "{\"\"}", "{\"by test\"}", "{f}",
                            go};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(f->db, "outcomes_record", 13, params, &res, &err) != QW_OK)
        fail_msg("outcomes_record: %s", err.msg);
    return res;
}

/* Runs a count query built from a literal format and one batch id. */
#define COUNT(f, fmt, id)                                                                          \
    ({                                                                                             \
        char sql_[512];                                                                            \
        snprintf(sql_, sizeof(sql_), fmt, id);                                                     \
        itest_scalar((f)->db, sql_);                                                               \
    })

static void test_final_marks_the_next_batch(void **state)
{
    struct fixture *f = *state;
    struct qw_db_res *res = record(f, "Committed", 7, 1);
    assert_int_equal(qw_db_res_rows(res), 2);
    int next = qw_db_res_get(res, 0, 0)[0] == 'n' ? 0 : 1;
    assert_string_equal(qw_db_res_get(res, 1 - next, 0), "w");
    assert_string_equal(qw_db_res_get(res, 1 - next, 1), f->ids[0]);
    assert_string_equal(qw_db_res_get(res, next, 0), "n");
    assert_string_equal(qw_db_res_get(res, next, 1), f->ids[1]);
    assert_string_equal(qw_db_res_get(res, next, 2), SVC);
    assert_int_equal(qw_db_res_int(res, next, 3), 7);
    assert_true(strncmp(qw_db_res_get(res, next, 5), "\\x", 2) == 0);
    assert_true(qw_db_res_int(res, next, 6) > 30000); /* lease left, ms */
    qw_db_res_free(res);
    assert_int_equal(COUNT(f,
                           "SELECT count(*) FROM queuer.batches WHERE batch_id = '%s' "
                           "AND submitted AND status IS NULL",
                           f->ids[1]),
                     1);
    assert_int_equal(COUNT(f,
                           "SELECT count(*) FROM queuer.batch_history WHERE batch_id = '%s' "
                           "AND to_status = 'Submitting' AND instance_id = 'w1' "
                           "AND claim_epoch = 7 AND detail = 'first submission'",
                           f->ids[1]),
                     1);
    /* the third stays untouched: one batch in flight per service */
    assert_int_equal(
        COUNT(f, "SELECT count(*) FROM queuer.batches WHERE batch_id = '%s' AND NOT submitted",
              f->ids[2]),
        1);
}

static void test_no_next_without_go_on(void **state)
{
    struct fixture *f = *state;
    struct qw_db_res *res = record(f, "Committed", 7, 0);
    assert_int_equal(qw_db_res_rows(res), 1);
    qw_db_res_free(res);
    assert_int_equal(COUNT(f,
                           "SELECT count(*) FROM queuer.batches WHERE submitted AND "
                           "status IS NULL AND batch_id <> '%s'",
                           f->ids[0]),
                     0);
}

static void test_next_delayed_only_when_due(void **state)
{
    struct fixture *f = *state;
    char sql[512];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET status = 'Delayed', retry_at = now() + interval '1 h', "
             "last_error = 'HTTP 503' WHERE batch_id = '%s'",
             f->ids[1]);
    itest_exec(f->db, sql);
    struct qw_db_res *res = record(f, "Committed", 7, 1);
    assert_int_equal(qw_db_res_rows(res), 1); /* not due: nothing marked, order kept */
    qw_db_res_free(res);
    assert_int_equal(COUNT(f,
                           "SELECT count(*) FROM queuer.batches WHERE batch_id = '%s' "
                           "AND status = 'Delayed' AND NOT submitted",
                           f->ids[1]),
                     1);
}

static void test_next_delayed_due_is_retried(void **state)
{
    struct fixture *f = *state;
    char sql[512];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET status = 'Delayed', retry_at = now() - interval '1 s', "
             "attempts = 2, last_error = 'HTTP 503' WHERE batch_id = '%s'",
             f->ids[1]);
    itest_exec(f->db, sql);
    struct qw_db_res *res = record(f, "Committed", 7, 1);
    assert_int_equal(qw_db_res_rows(res), 2);
    qw_db_res_free(res);
    assert_int_equal(COUNT(f,
                           "SELECT count(*) FROM queuer.batch_history WHERE batch_id = '%s' "
                           "AND to_status = 'Submitting' AND from_status = 'Delayed' "
                           "AND detail = 'retry after delay: HTTP 503'",
                           f->ids[1]),
                     1);
}

static void test_not_final_marks_nothing(void **state)
{
    struct fixture *f = *state;
    struct qw_db_res *res = record(f, "Unknown", 7, 1);
    assert_int_equal(qw_db_res_rows(res), 1);
    qw_db_res_free(res);
    assert_int_equal(COUNT(f,
                           "SELECT count(*) FROM queuer.batches WHERE submitted AND "
                           "status IS NULL AND batch_id <> '%s'",
                           f->ids[0]),
                     0);
}

static void test_stale_epoch_writes_nothing(void **state)
{
    struct fixture *f = *state;
    struct qw_db_res *res = record(f, "Committed", 6, 1);
    assert_int_equal(qw_db_res_rows(res), 0);
    qw_db_res_free(res);
    assert_int_equal(
        COUNT(f, "SELECT count(*) FROM queuer.batches WHERE batch_id = '%s' AND status = 'Pending'",
              f->ids[0]),
        1);
    assert_int_equal(itest_scalar(f->db, "SELECT count(*) FROM queuer.batch_history "
                                         "WHERE instance_id = 'w1'"),
                     0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_final_marks_the_next_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_next_without_go_on, setup, teardown),
        cmocka_unit_test_setup_teardown(test_next_delayed_only_when_due, setup, teardown),
        cmocka_unit_test_setup_teardown(test_next_delayed_due_is_retried, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_final_marks_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_epoch_writes_nothing, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
