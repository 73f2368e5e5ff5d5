/*
 * Integration: soft expiry never hands over a claim whose service has a
 * batch mid-submission, whatever the isolation levels of the statements
 * racing. Marks and outcomes run at READ COMMITTED; maintenance runs at
 * READ COMMITTED (as the worker runs it) or SERIALIZABLE. SSI does not see
 * the READ COMMITTED writes, so a maintenance deciding from its snapshot
 * alone would take the claim when its snapshot predated the mark's COMMIT
 * and its row lock came after it. These tests force exactly that
 * interleaving with two sessions (the maintenance transaction takes its
 * snapshot with a first statement, as a slow start would) and check the
 * claim stays with its holder until hard expiry, when it goes to the live
 * instance; they also check how the statements keep the claim row's
 * `submitting` in step with the batches.
 */
#include "itest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SVC "softx-aaaaa::0001"
#define LEASE_MS 1000 /* expiry_1 of the claim under test, ms from setup */

struct fixture {
    struct itest_pair pg; /* a: the holder's marks and outcomes; b: another worker's maintenance */
    char ids[3][129];     /* the service's batches, oldest first */
    char *inc;            /* w1's incarnation (its fenced statements name it) */
};
_Static_assert(offsetof(struct fixture, pg) == 0, "itest_pair_teardown() frees the fixture");

/* w1, live: a lease of LEASE_MS (soft) and an hour (hard); w2, the maintaining
 * worker, live for an hour (soft) and two (hard): expired claims go to it. */
static const struct itest_instance live[] = {{"w1", LEASE_MS, 3600 * 1000},
                                             {"w2", 3600 * 1000, 7200 * 1000}};

/* Three batches, none submitted; w1 holds the claim at epoch 3 for LEASE_MS
 * (soft) and an hour (hard), by its own expiries and its instance lease. */
static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    itest_pair_open(&f->pg, "soft_expiry", live, 2);
    for (int i = 0; i < 3; i++) {
        itest_enqueue_sample(f->pg.a, SVC, 3000 + (uint64_t)i, f->ids[i]);
    }
    char sql[256];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.service_id_claims SET claimant = 'w1', claim_epoch = 3, "
             "expiry_1 = now() + interval '%d ms', expiry_2 = now() + interval '1 h'",
             LEASE_MS);
    itest_exec(f->pg.a, sql);
    f->inc = itest_incarnation(f->pg.a, "w1");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    free(f->inc);
    return itest_pair_teardown(state);
}

static void query(struct qw_db *db, const char *name, int n, const char *const *params,
                  int want_rows)
{
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(db, name, n, params, &res, &err) != QW_OK)
        fail_msg("%s: %s", name, err.msg);
    int rows = qw_db_res_rows(res);
    qw_db_res_free(res);
    if (rows != want_rows)
        fail_msg("%s(%s): %d rows, expected %d", name, n > 1 ? params[1] : "", rows, want_rows);
}

/* Marks ids[k] for w1 at epoch 3 (batches_mark, as the queuer does). */
static void mark(struct fixture *f, int k, int want_rows)
{
    char ids[160];
    snprintf(ids, sizeof(ids), "{%s}", f->ids[k]);
    const char *params[] = {"w1", ids, "{" SVC "}", "{3}", "{\"\"}", f->inc};
    query(f->pg.a, "batches_mark", 6, params, want_rows);
}

/* Records `status` (with `submitted` after) for ids[k], expected in state
 * `expect`, may continue with the next batch when `go_on`. */
static void record(struct fixture *f, int k, const char *expect, const char *status,
                   const char *submitted, int go_on, int want_rows)
{
    /* one queuer.outcome: batch, service, epoch, expect, status ("" = none),
     * submitted, attempts_add, retry_ms, last_error, detail, posted, go_on */
    char outcomes[512];
    snprintf(outcomes, sizeof(outcomes), "{\"(%s," SVC ",3,%s,%s,%s,0,,,test,f,%s)\"}", f->ids[k],
             expect, status, submitted, go_on ? "t" : "f");
    const char *params[] = {"w1", outcomes, f->inc};
    query(f->pg.a, "outcomes_record", 3, params, want_rows);
}

static void set_batch(struct fixture *f, int k, const char *assignments)
{
    char sql[512];
    snprintf(sql, sizeof(sql), "UPDATE queuer.batches SET %s WHERE batch_id = '%s'", assignments,
             f->ids[k]);
    itest_exec(f->pg.a, sql);
}

/* Maintenance as another worker runs it. */
static const char *const maintain_params[] = {"w2", "1000", "5000", "10000", "2000", "0"};

static int64_t submitting(struct fixture *f)
{
    return itest_scalar(f->pg.b, "SELECT submitting::int FROM queuer.service_id_claims");
}

/* Waits (on the database clock) until the claim's effective expiry_1 (its
 * own or its holder's lease, whichever is later) has passed. */
static void wait_soft_expiry(struct fixture *f)
{
    for (int i = 0; i < 200; i++) {
        if (itest_scalar(f->pg.b, "SELECT (clock_timestamp() > expiry_1)::int "
                                  "FROM queuer.claims") == 1)
            return;
        usleep(20 * 1000);
    }
    fail_msg("expiry_1 did not pass");
}

/*
 * The race: the holder's statement (already run in an open READ COMMITTED
 * transaction on f->pg.a, before expiry_1) puts a batch mid-submission; the
 * other worker's SERIALIZABLE maintenance takes its snapshot after expiry_1
 * but before the holder's COMMIT, and runs its statement after it. The
 * maintenance must hand over nothing (or fail to serialize and be re-run); a
 * re-run on a fresh snapshot must hand over nothing either, until expiry_2.
 */
static void race_maintenance(struct fixture *f)
{
    wait_soft_expiry(f);
    itest_exec(f->pg.b, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    itest_exec(f->pg.b, "SELECT 1"); /* the snapshot: after expiry_1, before the COMMIT */
    itest_exec(f->pg.a, "COMMIT");

    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_db_query(f->pg.b, "claims_maintain", 6, maintain_params, &res, &err);
    if (rc == QW_OK) {
        int freed = qw_db_res_rows(res);
        qw_db_res_free(res);
        rc = qw_db_exec(f->pg.b, "COMMIT", &err);
        assert_int_equal(rc, QW_OK);
        assert_int_equal(freed, 0);
    } else {
        /* a serialization failure: the claims transaction is re-run */
        assert_int_equal(rc, QW_ERR_SERIALIZATION);
        itest_exec(f->pg.b, "ROLLBACK");
    }
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant = 'w1' AND claim_epoch = 3"),
                     1);

    /* The re-run, on a snapshot that sees the batch mid-submission. */
    itest_exec(f->pg.b, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    query(f->pg.b, "claims_maintain", 6, maintain_params, 0);
    itest_exec(f->pg.b, "COMMIT");
    /* Hard expiry hands it to the live w2, mid-submission or not. */
    itest_exec(f->pg.b, "UPDATE queuer.service_id_claims SET expiry_2 = expiry_1");
    itest_exec(f->pg.b, "UPDATE queuer.instances SET lease_2 = lease_1 WHERE instance_id = 'w1'");
    itest_exec(f->pg.b, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    query(f->pg.b, "claims_maintain", 6, maintain_params, 1);
    itest_exec(f->pg.b, "COMMIT");
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant = 'w2' AND claim_epoch = 4"),
                     1);
}

/* The queuer's mark races soft expiry. */
static void test_mark_races_soft_expiry(void **state)
{
    struct fixture *f = *state;
    itest_exec(f->pg.a, "BEGIN ISOLATION LEVEL READ COMMITTED");
    mark(f, 0, 1);
    race_maintenance(f);
}

/*
 * As the worker runs it: maintenance at READ COMMITTED in a transaction of
 * its own. While the mark's transaction holds the claim row, maintenance
 * skips it; once the mark committed, it reads the row's newest version
 * (submitting) and takes nothing; at hard expiry it goes to the live w2.
 */
static void test_mark_races_soft_expiry_read_committed(void **state)
{
    struct fixture *f = *state;
    itest_exec(f->pg.a, "BEGIN ISOLATION LEVEL READ COMMITTED");
    mark(f, 0, 1);
    wait_soft_expiry(f);
    itest_exec(f->pg.b, "BEGIN ISOLATION LEVEL READ COMMITTED");
    query(f->pg.b, "claims_maintain", 6, maintain_params, 0);
    itest_exec(f->pg.b, "COMMIT");
    itest_exec(f->pg.a, "COMMIT");
    itest_exec(f->pg.b, "BEGIN ISOLATION LEVEL READ COMMITTED");
    query(f->pg.b, "claims_maintain", 6, maintain_params, 0);
    itest_exec(f->pg.b, "COMMIT");
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant = 'w1' AND claim_epoch = 3"),
                     1);
    itest_exec(f->pg.b, "UPDATE queuer.service_id_claims SET expiry_2 = expiry_1");
    itest_exec(f->pg.b, "UPDATE queuer.instances SET lease_2 = lease_1 WHERE instance_id = 'w1'");
    query(f->pg.b, "claims_maintain", 6, maintain_params, 1);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant = 'w2' AND claim_epoch = 4"),
                     1);
}

/* The fast path (a Pending batch ends, the next is marked) races soft expiry. */
static void test_fast_path_races_soft_expiry(void **state)
{
    struct fixture *f = *state;
    set_batch(f, 0, "submitted = true, status = 'Pending', attempts = 1");
    itest_exec(f->pg.a, "BEGIN ISOLATION LEVEL READ COMMITTED");
    record(f, 0, "pending", "Committed", "t", 1, 2); /* written + next marked */
    race_maintenance(f);
}

/* Without a batch mid-submission, soft expiry hands the claim to the live w2. */
static void test_soft_expiry_hands_over_without_submission(void **state)
{
    struct fixture *f = *state;
    set_batch(f, 0, "submitted = true, status = 'Pending', attempts = 1");
    wait_soft_expiry(f);
    itest_exec(f->pg.b, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    query(f->pg.b, "claims_maintain", 6, maintain_params, 1);
    itest_exec(f->pg.b, "COMMIT");
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant = 'w2' AND claim_epoch = 4"),
                     1);
}

/* `submitting` follows the batches through every kind of write. */
static void test_submitting_follows_the_batches(void **state)
{
    struct fixture *f = *state;
    itest_exec(f->pg.a, "UPDATE queuer.instances SET lease_1 = now() + interval '1 h', "
                        "lease_2 = now() + interval '2 h'");
    assert_int_equal(submitting(f), 0);
    mark(f, 0, 1);
    assert_int_equal(submitting(f), 1);
    record(f, 0, "posting", "Pending", "t", 1, 1); /* accepted: no longer mid-submission */
    assert_int_equal(submitting(f), 0);
    record(f, 0, "pending", "Committed", "t", 1, 2); /* ends, ids[1] marked */
    assert_int_equal(submitting(f), 1);
    record(f, 1, "posting", "Committed", "t", 0, 1); /* ends, nothing marked */
    assert_int_equal(submitting(f), 0);
    mark(f, 2, 1);
    assert_int_equal(submitting(f), 1);
    record(f, 2, "posting", "", "f", 0, 1); /* handed back before its POST */
    assert_int_equal(submitting(f), 0);
    mark(f, 2, 1);
    record(f, 2, "posting", "Delayed", "f", 0, 1);
    assert_int_equal(submitting(f), 0);
    /* a stale epoch writes nothing, not even the flag */
    set_batch(f, 2, "status = NULL, retry_at = NULL");
    mark(f, 2, 1);
    itest_exec(f->pg.a, "UPDATE queuer.service_id_claims SET claim_epoch = 4");
    record(f, 2, "posting", "Committed", "t", 0, 0);
    assert_int_equal(submitting(f), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_mark_races_soft_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mark_races_soft_expiry_read_committed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fast_path_races_soft_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_soft_expiry_hands_over_without_submission, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_submitting_follows_the_batches, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
