/*
 * Integration: the claim design of migration 0008 (docs/CLAIMS.md). The
 * work counter n_open stays exact through every kind of write to batches
 * (enqueue, marks, outcomes with the fast path, operator cancel, delete);
 * claiming takes only free services with work; idle release gives back
 * only services without work and never one whose work arrives while it
 * runs; the surplus release keeps services with a batch mid-submission;
 * maintenance takes claims over through their holder's lease, per service:
 * those with work handed to the live instances, the others freed.
 */
#include "itest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S1 "scale-aaaaa::0001"
#define S2 "scale-aaaaa::0002"
#define S3 "scale-aaaaa::0003"
#define S4 "scale-aaaaa::0004"

struct fixture {
    struct itest_pair pg; /* a: the worker w1, or an application; b: another session */
    char ids[4][129];     /* S1's batches, oldest first */
    uint64_t seed;        /* next sample seed */
};
_Static_assert(offsetof(struct fixture, pg) == 0, "itest_pair_teardown() frees the fixture");

/* w1 and w2, live: leases of an hour (soft) and two (hard). */
static const struct itest_instance live[] = {
    {"w1", 3600 * 1000, 7200 * 1000},
    {"w2", 3600 * 1000, 7200 * 1000},
};

static void enqueue(struct fixture *f, struct qw_db *db, const char *svc, char *id_out)
{
    itest_enqueue_sample(db, svc, f->seed++, id_out);
}

/* S1 with four batches, S2 with one, S3 with none (a row, no work); w1 is
 * a registered instance with a lease of an hour. Nobody holds anything. */
static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->seed = 5000;
    itest_pair_open(&f->pg, "claims_scale", live, 2);
    for (int i = 0; i < 4; i++)
        enqueue(f, f->pg.a, S1, f->ids[i]);
    enqueue(f, f->pg.a, S2, NULL);
    itest_exec(f->pg.a, "INSERT INTO queuer.service_id_claims (service_id) VALUES ('" S3 "')");
    *state = f;
    return 0;
}

/* Runs a prepared statement; returns its rows and frees the result. */
static int run(struct qw_db *db, const char *name, int n, const char *const *params)
{
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(db, name, n, params, &res, &err) != QW_OK)
        fail_msg("%s: %s", name, err.msg);
    int rows = qw_db_res_rows(res);
    qw_db_res_free(res);
    return rows;
}

static int64_t n_open(struct fixture *f, const char *svc)
{
    char sql[160];
    snprintf(sql, sizeof(sql),
             "SELECT n_open FROM queuer.service_id_claims WHERE service_id = '%s'", svc);
    return itest_scalar(f->pg.b, sql);
}

/* The counter as the batches say it should be, for every service. */
static void assert_counters_exact(struct fixture *f)
{
    assert_int_equal(itest_scalar(f->pg.b,
                                  "SELECT count(*) FROM queuer.service_id_claims c "
                                  "WHERE c.n_open <> (SELECT count(*) FROM queuer.batches b "
                                  "WHERE b.service_id = c.service_id AND (b.status IS NULL OR "
                                  "b.status IN ('Pending', 'Unknown', 'Delayed'))) "
                                  "OR c.submitting <> EXISTS (SELECT 1 FROM queuer.batches b "
                                  "WHERE b.service_id = c.service_id AND b.submitted "
                                  "AND b.status IS NULL)"),
                     0);
}

static void hold(struct fixture *f, const char *svc, const char *who)
{
    char sql[256];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.service_id_claims SET claimant = '%s', claim_epoch = claim_epoch + 1, "
             "expiry_1 = now(), expiry_2 = now() WHERE service_id = '%s'",
             who, svc);
    itest_exec(f->pg.a, sql);
}

static int64_t epoch_of(struct fixture *f, const char *svc)
{
    char sql[160];
    snprintf(sql, sizeof(sql),
             "SELECT claim_epoch FROM queuer.service_id_claims WHERE service_id = '%s'", svc);
    return itest_scalar(f->pg.b, sql);
}

/* Marks S1's batch k for w1 (batches_mark); returns the rows marked. */
static int mark(struct fixture *f, int k)
{
    char ids[160], epochs[32];
    snprintf(ids, sizeof(ids), "{%s}", f->ids[k]);
    snprintf(epochs, sizeof(epochs), "{%lld}", (long long)epoch_of(f, S1));
    const char *params[] = {"w1", ids, "{" S1 "}", epochs, "{\"\"}"};
    return run(f->pg.a, "batches_mark", 5, params);
}

/* Records `status` for S1's batch k (expected being posted), fast path on. */
static int record(struct fixture *f, int k, const char *status, const char *submitted)
{
    /* one queuer.outcome: batch, service, epoch, expect, status ("" = none),
     * submitted, attempts_add, retry_ms, last_error, detail, posted, go_on */
    char outcomes[512];
    snprintf(outcomes, sizeof(outcomes), "{\"(%s," S1 ",%lld,posting,%s,%s,0,,,test,f,t)\"}",
             f->ids[k], (long long)epoch_of(f, S1), status, submitted);
    const char *params[] = {"w1", outcomes};
    return run(f->pg.a, "outcomes_record", 2, params);
}

static void test_counter_follows_every_write(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(n_open(f, S1), 4);
    assert_int_equal(n_open(f, S2), 1);
    assert_int_equal(n_open(f, S3), 0);
    assert_counters_exact(f);

    hold(f, S1, "w1");
    assert_int_equal(mark(f, 0), 1);
    assert_counters_exact(f);
    assert_int_equal(record(f, 0, "Committed", "t"), 2); /* ends, ids[1] marked */
    assert_int_equal(n_open(f, S1), 3);
    assert_counters_exact(f);
    assert_int_equal(record(f, 1, "Delayed", "f"), 1);
    assert_int_equal(n_open(f, S1), 3);
    assert_counters_exact(f);

    /* an operator cancels the Delayed batch: it is final now */
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT outcome FROM queuer.batch_cancel('%s', 'test')", f->ids[1]);
    char *outcome = itest_string(f->pg.a, sql);
    assert_string_equal(outcome, "done");
    free(outcome);
    assert_int_equal(n_open(f, S1), 2);
    assert_counters_exact(f);

    /* a waiting batch deleted by hand; then more work arrives */
    snprintf(sql, sizeof(sql), "DELETE FROM queuer.batches WHERE batch_id = '%s'", f->ids[3]);
    itest_exec(f->pg.a, sql);
    assert_int_equal(n_open(f, S1), 1);
    enqueue(f, f->pg.a, S1, NULL);
    enqueue(f, f->pg.a, S3, NULL);
    assert_int_equal(n_open(f, S1), 2);
    assert_int_equal(n_open(f, S3), 1);
    assert_counters_exact(f);
}

static void test_acquire_takes_free_services_with_work(void **state)
{
    struct fixture *f = *state;
    hold(f, S2, "w2");
    const char *params[] = {"w1", "10", "30000", "60000", "2147483647", "1000"}; /* wraps */
    assert_int_equal(run(f->pg.a, "claims_acquire", 6, params), 1); /* S1: S2 held, S3 idle */
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant = 'w1' AND service_id = '" S1 "'"),
                     1);
    assert_int_equal(run(f->pg.a, "claims_acquire", 6, params), 0);
}

static void test_release_idle_gives_back_only_idle(void **state)
{
    struct fixture *f = *state;
    hold(f, S1, "w1");
    hold(f, S3, "w1");
    const char *params[] = {"w1", "10"};
    itest_exec(f->pg.a, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    assert_int_equal(run(f->pg.a, "claims_release_idle", 2, params), 1); /* S3 */
    itest_exec(f->pg.a, "COMMIT");
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant = 'w1'"),
                     1);
}

/* Work for an idle service arrives after the release's snapshot: the
 * release must not give it back on what it saw (or must fail and re-run). */
static void test_release_idle_races_enqueue(void **state)
{
    struct fixture *f = *state;
    hold(f, S3, "w1");
    const char *params[] = {"w1", "10"};
    itest_exec(f->pg.a, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    itest_exec(f->pg.a, "SELECT 1"); /* the snapshot: S3 idle */
    enqueue(f, f->pg.b, S3, NULL);
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_db_query(f->pg.a, "claims_release_idle", 2, params, &res, &err);
    if (rc == QW_OK) {
        assert_int_equal(qw_db_res_rows(res), 0);
        qw_db_res_free(res);
        itest_exec(f->pg.a, "COMMIT");
    } else {
        assert_int_equal(rc, QW_ERR_SERIALIZATION);
        itest_exec(f->pg.a, "ROLLBACK");
    }
    assert_int_equal(itest_scalar(f->pg.b,
                                  "SELECT count(*) FROM queuer.service_id_claims WHERE "
                                  "service_id = '" S3 "' AND claimant = 'w1' AND has_work"),
                     1);
}

static void test_release_keeps_mid_submission(void **state)
{
    struct fixture *f = *state;
    hold(f, S1, "w1");
    hold(f, S2, "w1");
    assert_int_equal(mark(f, 0), 1);
    const char *params[] = {"w1", "{" S1 "," S2 "}"};
    assert_int_equal(run(f->pg.a, "claims_release", 2, params), 1); /* S2 only */
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant = 'w1' AND service_id = '" S1 "'"),
                     1);
}

/* Asserts the claimant ("-" for none) of a service. */
static void assert_holder(struct fixture *f, const char *svc, const char *expected)
{
    char sql[200];
    snprintf(sql, sizeof(sql),
             "SELECT coalesce(claimant, '-') FROM queuer.service_id_claims WHERE service_id = '%s'",
             svc);
    char *who = itest_string(f->pg.b, sql);
    assert_string_equal(who, expected);
    free(who);
}

/* The epoch a result lists for `svc`, or -1 when it does not list it. */
static int64_t listed(const struct qw_claim *list, size_t n, const char *svc)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(list[i].service_id, svc) == 0)
            return list[i].epoch;
    }
    return -1;
}

/*
 * One claims transaction gives a surplus claim back (S2) and then, its
 * fair share having grown, takes free services with work again: S3 and
 * S2 itself. S2 is ours after it, at a new epoch: the result lists it as
 * a claim and not as released (the worker applied both, in that order,
 * and forgot a claim it held until its next full read of its claims, a
 * minute later: the services stalled). An idle claim given back (S4)
 * stays released.
 */
static void test_surplus_taken_again_is_held(void **state)
{
    struct fixture *f = *state;
    itest_exec(f->pg.a, "DELETE FROM queuer.instances WHERE instance_id = 'w2'");
    enqueue(f, f->pg.a, S3, NULL);
    itest_exec(f->pg.a, "INSERT INTO queuer.service_id_claims (service_id) VALUES ('" S4 "')");
    hold(f, S1, "w1");
    hold(f, S2, "w1");
    hold(f, S4, "w1");
    /* w1's last lease reported 2 claims with work: with S3 free, its share is 3 */
    itest_exec(f->pg.a, "UPDATE queuer.instances SET claims_held = 2 WHERE instance_id = 'w1'");
    int64_t epoch_s2 = epoch_of(f, S2);

    struct qw_rng rng;
    qw_rng_seed(&rng, 42);
    struct qw_claims_result r = {0};
    itest_claims_cycle(f->pg.a, "w1", 3, "{" S2 "}", 0, &rng, &r);
    assert_int_equal(r.share, 3);
    assert_int_equal(r.acquired, 2);
    assert_int_equal(r.n_claims, 2);
    assert_int_equal(listed(r.claims, r.n_claims, S2), epoch_s2 + 2);
    assert_int_equal(listed(r.claims, r.n_claims, S3), epoch_of(f, S3));
    assert_int_equal(r.n_released, 1);
    assert_string_equal(r.released[0].service_id, S4);
    qw_claims_result_free(&r);
    assert_holder(f, S2, "w1");
    assert_holder(f, S3, "w1");
    assert_holder(f, S4, "-");
}

static void test_maintenance_follows_the_holders_lease(void **state)
{
    struct fixture *f = *state;
    hold(f, S1, "w1");
    hold(f, S2, "w1");
    hold(f, S3, "w1");
    assert_int_equal(mark(f, 0), 1); /* S1 mid-submission */
    int64_t epoch_s2 = epoch_of(f, S2);
    /* w1 gone (below), w2 live: w2 maintains, with a lease of 5 s */
    const char *params[] = {"w2", "1000", "5000", "10000", "2000"};
    /* the claims' own expiries have passed, w1's lease has not */
    assert_int_equal(run(f->pg.b, "claims_maintain", 5, params), 0);
    /* soft expiry of w1's lease: S2 (work) is handed to the live w2, S3
     * (no work) is freed, S1 (mid-submission) stays */
    itest_exec(f->pg.b, "UPDATE queuer.instances SET lease_1 = now() - interval '1 s' "
                        "WHERE instance_id = 'w1'");
    assert_int_equal(run(f->pg.b, "claims_maintain", 5, params), 2);
    assert_holder(f, S1, "w1");
    assert_holder(f, S2, "w2");
    assert_holder(f, S3, "-");
    assert_int_equal(epoch_of(f, S2), epoch_s2 + 1);
    assert_int_equal(itest_scalar(f->pg.b,
                                  "SELECT count(*) FROM queuer.claims WHERE service_id = '" S2
                                  "' AND expiry_1 > now() + interval '4 s' "
                                  "AND expiry_2 > now() + interval '9 s'"),
                     1);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE service_id = '" S3 "' AND expiry_1 IS NULL "
                                           "AND expiry_2 IS NULL"),
                     1);
    /* the held claims of w1 no longer pass its fences */
    assert_int_equal(record(f, 0, "Committed", "t"), 0);
    /* hard expiry: S1 goes too, to the live w2 (its batch is followed up there) */
    itest_exec(f->pg.b, "UPDATE queuer.instances SET lease_2 = now() - interval '1 s' "
                        "WHERE instance_id = 'w1'");
    assert_int_equal(run(f->pg.b, "claims_maintain", 5, params), 1);
    assert_holder(f, S1, "w2");
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant = 'w1'"),
                     0);
}

/* With no live instance (every lease ran out), expired claims are freed. */
static void test_maintenance_frees_when_none_is_live(void **state)
{
    struct fixture *f = *state;
    hold(f, S2, "w1");
    itest_exec(f->pg.b, "UPDATE queuer.instances SET lease_1 = now() - interval '1 s'");
    const char *params[] = {"w2", "1000", "5000", "10000", "2000"};
    assert_int_equal(run(f->pg.b, "claims_maintain", 5, params), 1);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant IS NOT NULL"),
                     0);
}

/* w1 holds 200 services with work (sprea-...) and its lease runs out. */
static void w1_dies_holding_200(struct fixture *f)
{
    char svc[32];
    for (int i = 0; i < 200; i++) {
        snprintf(svc, sizeof(svc), "sprea-aaaaa::%04d", i);
        enqueue(f, f->pg.a, svc, NULL);
        hold(f, svc, "w1");
    }
    itest_exec(f->pg.b, "UPDATE queuer.instances SET lease_1 = now() - interval '1 s' "
                        "WHERE instance_id = 'w1'");
}

/* The handed-over claims are spread over the live instances by service. */
static void test_maintenance_spreads_over_the_live(void **state)
{
    struct fixture *f = *state;
    itest_exec(f->pg.a, "INSERT INTO queuer.instances (instance_id, host, pid, version, lease_1, "
                        "lease_2) VALUES ('w3', 'h', 3, 'v', now() + interval '1 h', "
                        "now() + interval '2 h')");
    w1_dies_holding_200(f);
    const char *params[] = {"w2", "1000", "5000", "10000", "2000"};
    assert_int_equal(run(f->pg.b, "claims_maintain", 5, params), 200);
    int64_t w2 = itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                       "WHERE service_id LIKE 'sprea-%' AND claimant = 'w2'");
    int64_t w3 = itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                       "WHERE service_id LIKE 'sprea-%' AND claimant = 'w3'");
    assert_int_equal(w2 + w3, 200);
    assert_true(w2 >= 70 && w3 >= 70);
}

/* At most so many to each receiver in one step; the rest are freed. */
static void test_maintenance_hands_each_a_bounded_number(void **state)
{
    struct fixture *f = *state;
    w1_dies_holding_200(f);
    const char *params[] = {"w2", "1000", "5000", "10000", "50"};
    assert_int_equal(run(f->pg.b, "claims_maintain", 5, params), 200);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE service_id LIKE 'sprea-%' AND claimant = 'w2'"),
                     50);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE service_id LIKE 'sprea-%' AND claimant IS NULL "
                                           "AND has_work"),
                     150);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_counter_follows_every_write, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_acquire_takes_free_services_with_work, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_release_idle_gives_back_only_idle, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_release_idle_races_enqueue, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_release_keeps_mid_submission, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_surplus_taken_again_is_held, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_maintenance_follows_the_holders_lease, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_maintenance_frees_when_none_is_live, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_maintenance_spreads_over_the_live, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_maintenance_hands_each_a_bounded_number, setup,
                                        itest_pair_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
