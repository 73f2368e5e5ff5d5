/*
 * Integration: the claim design (docs/CLAIMS.md). The count of work
 * (queuer.claims.n_open: service_ingest.n_in - service_id_claims.n_out)
 * stays exact through every kind of write to batches (enqueue, marks,
 * outcomes of every kind with the fast path, operator cancel, delete), and
 * a mark leaves a parked batch alone; pickup takes only free services with
 * work; idle release gives back only services without work and never one
 * whose work arrives while it runs; the surplus release
 * keeps services with a batch mid-submission and says exactly whether each
 * has work; maintenance hands claims over through their holder's lease,
 * per service, with or without work, to the live instances only, a bounded
 * number to each per call; the fair share's plan stays cheap when the
 * statistics of queuer.instances are stale.
 */
#include "itest.h"
#include "common/embedded.h"

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
#define S5 "scale-aaaaa::0005"

struct fixture {
    struct itest_pair pg; /* a: the worker w1, or an application; b: another session */
    char ids[4][129];     /* S1's batches, oldest first */
    uint64_t seed;        /* next sample seed */
    char *inc;            /* w1's incarnation (its fenced statements name it) */
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

/*
 * Enqueues a batch of `svc` while no instance is live (every lease is moved
 * into the past for the statement, in one transaction): a free service
 * stays free, with work, for pickup.
 */
static void enqueue_unassigned(struct fixture *f, const char *svc, char *id_out)
{
    itest_exec(f->pg.a, "BEGIN");
    itest_exec(f->pg.a, "UPDATE queuer.instances SET lease_1 = lease_1 - interval '1 day'");
    enqueue(f, f->pg.a, svc, id_out);
    itest_exec(f->pg.a, "UPDATE queuer.instances SET lease_1 = lease_1 + interval '1 day'");
    itest_exec(f->pg.a, "COMMIT");
}

/* A service without work, its rows as an enqueue creates them (both rows). */
static void idle_service(struct fixture *f, const char *svc)
{
    char sql[256];
    snprintf(sql, sizeof(sql),
             "INSERT INTO queuer.service_ingest (service_id) VALUES ('%s'); "
             "INSERT INTO queuer.service_id_claims (service_id) VALUES ('%s')",
             svc, svc);
    itest_exec(f->pg.a, sql);
}

/* S1 with four batches, S2 with one, S3 with none (a row, no work), all
 * enqueued before w1 and w2 took a lease (of an hour): nobody holds
 * anything; S1 and S2 are free with work. */
static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->seed = 5000;
    itest_pair_open(&f->pg, "claims_scale", live, 2);
    for (int i = 0; i < 4; i++)
        enqueue_unassigned(f, S1, f->ids[i]);
    enqueue_unassigned(f, S2, NULL);
    idle_service(f, S3);
    f->inc = itest_incarnation(f->pg.a, "w1");
    assert_int_equal(itest_scalar(f->pg.a, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant IS NULL AND has_work"),
                     2);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    free(f->inc);
    return itest_pair_teardown(state);
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
    snprintf(sql, sizeof(sql), "SELECT n_open FROM queuer.claims WHERE service_id = '%s'", svc);
    return itest_scalar(f->pg.b, sql);
}

/* The count of work and `submitting` as the batches say they should be, for every service. */
static void assert_counters_exact(struct fixture *f)
{
    assert_int_equal(itest_scalar(f->pg.b,
                                  "SELECT count(*) FROM queuer.claims c "
                                  "JOIN queuer.service_id_claims r USING (service_id) "
                                  "WHERE c.n_open <> (SELECT count(*) FROM queuer.batches b "
                                  "WHERE b.service_id = c.service_id "
                                  "AND queuer.batch_is_work(b.status, b.retry_at)) "
                                  "OR r.submitting <> EXISTS (SELECT 1 FROM queuer.batches b "
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

/* Service `circuit`::<i> without work, held by `who`. */
static void idle_held(struct fixture *f, const char *circuit, int i, const char *who)
{
    char svc[32];
    snprintf(svc, sizeof(svc), "%s::%04d", circuit, i);
    idle_service(f, svc);
    hold(f, svc, who);
}

static int64_t epoch_of(struct fixture *f, const char *svc)
{
    char sql[160];
    snprintf(sql, sizeof(sql),
             "SELECT claim_epoch FROM queuer.service_id_claims WHERE service_id = '%s'", svc);
    return itest_scalar(f->pg.b, sql);
}

/* Marks S1's batch k for w1 (batches_mark), seen in state `seen` ("" =
 * none); returns the rows marked. */
static int mark_seen(struct fixture *f, int k, const char *seen)
{
    char ids[160], epochs[32], seens[32];
    snprintf(ids, sizeof(ids), "{%s}", f->ids[k]);
    snprintf(epochs, sizeof(epochs), "{%lld}", (long long)epoch_of(f, S1));
    snprintf(seens, sizeof(seens), "{\"%s\"}", seen);
    const char *params[] = {"w1", ids, "{" S1 "}", epochs, seens, f->inc};
    return run(f->pg.a, "batches_mark", 6, params);
}

static int mark(struct fixture *f, int k)
{
    return mark_seen(f, k, "");
}

/* Records an outcome for S1's batch k: what the submitter expects of it
 * (posting, pending, inflight), the status written ("" = none), submitted,
 * retry_ms ("" = none, negative = parked) and go_on. */
static int record_as(struct fixture *f, int k, const char *expect, const char *status,
                     const char *submitted, const char *retry_ms, const char *go_on)
{
    /* one queuer.outcome: batch, service, epoch, expect, status ("" = none),
     * submitted, attempts_add, retry_ms, last_error, detail, posted, go_on */
    char outcomes[512];
    snprintf(outcomes, sizeof(outcomes), "{\"(%s," S1 ",%lld,%s,%s,%s,0,%s,,test,f,%s)\"}",
             f->ids[k], (long long)epoch_of(f, S1), expect, status, submitted, retry_ms, go_on);
    const char *params[] = {"w1", outcomes, f->inc};
    return run(f->pg.a, "outcomes_record", 3, params);
}

/* Records `status` for S1's batch k (expected being posted), fast path on. */
static int record(struct fixture *f, int k, const char *status, const char *submitted)
{
    return record_as(f, k, "posting", status, submitted, "", "t");
}

/* Runs operator function `fn` on batch `batch_id` (reason "test") and checks it was done. */
static void act(struct fixture *f, const char *fn, const char *batch_id)
{
    char sql[300];
    snprintf(sql, sizeof(sql), "SELECT outcome FROM queuer.%s('%s', 'test')", fn, batch_id);
    char *outcome = itest_string(f->pg.a, sql);
    assert_string_equal(outcome, "done");
    free(outcome);
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
    act(f, "batch_cancel", f->ids[1]);
    assert_int_equal(n_open(f, S1), 2);
    assert_counters_exact(f);

    /* a batch parked (it used up its attempts) is not work; handed back, it is again */
    char sql[256];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET status = 'Delayed', retry_at = 'infinity' "
             "WHERE batch_id = '%s'",
             f->ids[2]);
    itest_exec(f->pg.a, sql);
    assert_int_equal(n_open(f, S1), 1);
    assert_counters_exact(f);
    snprintf(sql, sizeof(sql), "UPDATE queuer.batches SET retry_at = now() WHERE batch_id = '%s'",
             f->ids[2]);
    itest_exec(f->pg.a, sql);
    assert_int_equal(n_open(f, S1), 2);
    assert_counters_exact(f);

    /* a waiting batch deleted by hand; then more work arrives, for a held
     * service (S1) and for a free one (S3, given to a live instance) */
    snprintf(sql, sizeof(sql), "DELETE FROM queuer.batches WHERE batch_id = '%s'", f->ids[3]);
    itest_exec(f->pg.a, sql);
    assert_int_equal(n_open(f, S1), 1);
    enqueue(f, f->pg.a, S1, NULL);
    enqueue(f, f->pg.a, S3, NULL);
    assert_int_equal(n_open(f, S1), 2);
    assert_int_equal(n_open(f, S3), 1);
    assert_counters_exact(f);
}

/*
 * The count of work and `submitting` follow every kind of outcome the
 * workers write, and a mark leaves a parked batch alone.
 */
static void test_counter_follows_every_outcome(void **state)
{
    struct fixture *f = *state;
    hold(f, S1, "w1");
    assert_int_equal(mark(f, 0), 1);
    assert_int_equal(record_as(f, 0, "posting", "Pending", "t", "", "f"), 1);
    assert_int_equal(n_open(f, S1), 4);
    assert_counters_exact(f);
    /* Committed from Pending; the fast path marks the next batch */
    assert_int_equal(record_as(f, 0, "pending", "Committed", "t", "", "t"), 2);
    assert_int_equal(n_open(f, S1), 3);
    assert_counters_exact(f);
    /* an adopted batch (either state expected) the ledger does not know */
    assert_int_equal(record_as(f, 1, "inflight", "Unknown", "f", "", "f"), 1);
    assert_counters_exact(f);
    assert_int_equal(mark_seen(f, 1, "Unknown"), 1);
    assert_counters_exact(f);
    /* parked: it waits for an operator and is no longer work; a mark
     * leaves it alone */
    assert_int_equal(record_as(f, 1, "posting", "Delayed", "f", "-1", "f"), 1);
    assert_int_equal(n_open(f, S1), 2);
    assert_counters_exact(f);
    assert_int_equal(mark_seen(f, 1, "Delayed"), 0);
    /* nor the next batch of its service, which the parked one holds back */
    assert_int_equal(mark(f, 2), 0);
    /* an operator ends the parked batch (Invalid); then a POST without an
     * answer (still being posted), then handed back unposted: work again,
     * no submission in progress */
    char sql[300];
    snprintf(sql, sizeof(sql), "SELECT outcome FROM queuer.batch_cancel('%s', 'test')", f->ids[1]);
    itest_exec(f->pg.a, sql);
    assert_int_equal(n_open(f, S1), 2);
    assert_counters_exact(f);
    assert_int_equal(mark(f, 2), 1);
    assert_int_equal(record_as(f, 2, "posting", "", "t", "", "f"), 1);
    assert_counters_exact(f);
    assert_int_equal(record_as(f, 2, "posting", "", "f", "", "f"), 1);
    assert_int_equal(n_open(f, S1), 2);
    assert_counters_exact(f);
}

/*
 * An operator's action is counted whatever its session set: with
 * queuer.batches_counted 'on' (the workers' word that their statement keeps
 * the counters itself), a cancel, a retry of the Invalid batch it made and
 * a retry of a parked batch still move the count of work. Each action
 * clears the setting for its own transaction only: the session's is back
 * after each.
 */
static void test_operator_actions_counted_whatever_the_session_set(void **state)
{
    struct fixture *f = *state;
    hold(f, S1, "w1");
    assert_int_equal(mark(f, 0), 1);
    assert_int_equal(record_as(f, 0, "posting", "Delayed", "f", "-1", "f"), 1); /* parked */
    assert_int_equal(n_open(f, S1), 3);
    assert_counters_exact(f);

    itest_exec(f->pg.a, "SET queuer.batches_counted = 'on'");
    act(f, "batch_cancel", f->ids[3]);
    assert_int_equal(n_open(f, S1), 2);
    assert_counters_exact(f);
    act(f, "batch_retry_invalid", f->ids[3]);
    assert_int_equal(n_open(f, S1), 3);
    assert_counters_exact(f);
    act(f, "batch_retry", f->ids[0]);
    assert_int_equal(n_open(f, S1), 4);
    assert_counters_exact(f);
    char *seen = itest_string(f->pg.a, "SELECT current_setting('queuer.batches_counted')");
    assert_string_equal(seen, "on");
    free(seen);
    itest_exec(f->pg.a, "RESET queuer.batches_counted");
}

/*
 * An update by hand of many batches of several services in one statement
 * is counted batch by batch (the trigger fires per row): work made final
 * or parked, work put back, a turn ended and the next started by the same
 * statement (the service still has a batch mid-submission, whichever row
 * is counted first).
 */
static void test_update_of_many_batches_counted(void **state)
{
    struct fixture *f = *state;
    hold(f, S1, "w1");
    assert_int_equal(mark(f, 0), 1);
    assert_counters_exact(f);

    char sql[1024];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET "
             "status = CASE WHEN batch_id = '%s' THEN 'Committed' "
             "WHEN service_id = '" S2 "' THEN 'Invalid' ELSE 'Delayed' END, "
             "retry_at = CASE WHEN service_id = '" S1 "' AND batch_id <> '%s' "
             "THEN 'infinity'::timestamptz END "
             "WHERE batch_id IN ('%s', '%s', '%s') OR service_id = '" S2 "'",
             f->ids[0], f->ids[0], f->ids[0], f->ids[2], f->ids[3]);
    itest_exec(f->pg.a, sql);
    assert_int_equal(n_open(f, S1), 1);
    assert_int_equal(n_open(f, S2), 0);
    assert_counters_exact(f);

    /* the two parked batches back, in one statement */
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET retry_at = now() WHERE batch_id IN ('%s', '%s')", f->ids[2],
             f->ids[3]);
    itest_exec(f->pg.a, sql);
    assert_int_equal(n_open(f, S1), 3);
    assert_counters_exact(f);

    /* batch 1 posted and batch 2 sent with it; then batch 1's turn ends
     * and batch 2's starts in one statement */
    snprintf(sql, sizeof(sql), "UPDATE queuer.batches SET submitted = true WHERE batch_id = '%s'",
             f->ids[1]);
    itest_exec(f->pg.a, sql);
    assert_counters_exact(f);
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET "
             "status = CASE WHEN batch_id = '%s' THEN 'Committed' END, "
             "submitted = true, retry_at = NULL WHERE batch_id IN ('%s', '%s')",
             f->ids[1], f->ids[1], f->ids[2]);
    itest_exec(f->pg.a, sql);
    assert_int_equal(n_open(f, S1), 2);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT submitting::int FROM queuer.service_id_claims "
                                           "WHERE service_id = '" S1 "'"),
                     1);
    assert_counters_exact(f);
}

/* "'<svc>', '<batch_id>', '\x<payload>'::bytea" of a new sample batch of `svc` (malloc'd). */
static char *sample_values(struct fixture *f, const char *svc)
{
    char id[129];
    char *hex = itest_sample_hex(f->seed++, id);
    char *v = NULL;
    assert_true(asprintf(&v, "'%s', '%s', '\\x%s'::bytea", svc, id, hex) > 0);
    free(hex);
    return v;
}

/* Stages two new sample batches of `svc` as seq `seq` (priority `pri1`) and seq + 1 (`pri2`). */
static void stage_two(struct fixture *f, const char *svc, int seq, int pri1, int pri2)
{
    char *v1 = sample_values(f, svc), *v2 = sample_values(f, svc), *sql = NULL;
    assert_true(asprintf(&sql, "INSERT INTO queuer_load VALUES (%d, %d, %s, %d), (%d, %d, %s, %d)",
                         seq, seq + 1, v1, pri1, seq + 1, seq + 2, v2, pri2) > 0);
    itest_exec(f->pg.a, sql);
    free(sql);
    free(v2);
    free(v1);
}

static int has_claimant(struct fixture *f, const char *svc)
{
    char sql[160];
    snprintf(sql, sizeof(sql),
             "SELECT (claimant IS NOT NULL)::int FROM queuer.service_id_claims "
             "WHERE service_id = '%s'",
             svc);
    return (int)itest_scalar(f->pg.b, sql);
}

/*
 * Every insert path counts what it stores and gives its free services out:
 * queuer.enqueue_rows() and a staged load (queuer.enqueue_staged()), which
 * count their own rows, with live instances and with none, and an insert
 * by hand of several rows, counted row by row (one of them mid-submission).
 */
static void test_every_insert_path_counted(void **state)
{
    struct fixture *f = *state;
    hold(f, S1, "w1");

    /* two batches of a held service and one of a new one */
    char *v1 = sample_values(f, S1), *v2 = sample_values(f, S1), *v3 = sample_values(f, S4);
    char *sql = NULL;
    assert_true(asprintf(&sql,
                         "SELECT count(*) FROM queuer.enqueue_rows(ARRAY[ROW(1, %s)::"
                         "queuer.enqueue_row, ROW(2, %s)::queuer.enqueue_row, ROW(3, %s)::"
                         "queuer.enqueue_row], false)",
                         v1, v2, v3) > 0);
    assert_int_equal(itest_scalar(f->pg.a, sql), 0);
    free(sql);
    free(v3);
    free(v2);
    free(v1);
    assert_int_equal(n_open(f, S1), 6);
    assert_int_equal(n_open(f, S4), 1);
    assert_int_equal(has_claimant(f, S4), 1);
    assert_counters_exact(f);

    /* a staged load of two batches of a free service without work */
    itest_exec(f->pg.a, "CREATE TEMP TABLE queuer_load (seq integer, line_no integer, "
                        "service_id text, batch_id text, payload bytea, priority integer); "
                        "GRANT SELECT ON queuer_load TO queuer_loader");
    stage_two(f, S3, 0, 0, 0);
    assert_int_equal(
        itest_scalar(f->pg.a, "SELECT count(*) FROM queuer.enqueue_staged(0, 2, false)"), 0);
    assert_int_equal(n_open(f, S3), 2);
    assert_int_equal(has_claimant(f, S3), 1);
    assert_counters_exact(f);

    /* one of a new service while no instance is live: free with work, at
     * the priority of its first batch */
    itest_exec(f->pg.a, "BEGIN");
    itest_exec(f->pg.a, "UPDATE queuer.instances SET lease_1 = lease_1 - interval '1 day'");
    stage_two(f, S5, 2, 7, 2);
    assert_int_equal(
        itest_scalar(f->pg.a, "SELECT count(*) FROM queuer.enqueue_staged(2, 4, false)"), 0);
    itest_exec(f->pg.a, "UPDATE queuer.instances SET lease_1 = lease_1 + interval '1 day'");
    itest_exec(f->pg.a, "COMMIT");
    assert_int_equal(n_open(f, S5), 2);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE service_id = '" S5 "' AND claimant IS NULL "
                                           "AND has_work AND head_priority = 7"),
                     1);
    assert_counters_exact(f);

    /* by hand, in one statement: a free service with work (S2) gets two
     * batches, the second mid-submission, and is given out */
    v1 = sample_values(f, S2);
    v2 = sample_values(f, S2);
    assert_true(asprintf(&sql,
                         "INSERT INTO queuer.batches (service_id, batch_id, payload, created_at, "
                         "submitted) VALUES (%s, now(), false), "
                         "(%s, now() + interval '1 microsecond', true)",
                         v1, v2) > 0);
    itest_exec(f->pg.a, sql);
    free(sql);
    free(v2);
    free(v1);
    assert_int_equal(n_open(f, S2), 3);
    assert_int_equal(has_claimant(f, S2), 1);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT submitting::int FROM queuer.service_id_claims "
                                           "WHERE service_id = '" S2 "'"),
                     1);
    assert_counters_exact(f);
}

/* Pickup as w1 runs it alone (slack 0, no cap), giving out at most `max`
 * in all and `each` to each instance; returns the services it gave w1
 * (rows with a service) and checks that it held the pickup lock. */
static int pickup_giving(struct fixture *f, const char *max, const char *each)
{
    const char *params[] = {"w1", max, "30000", "60000", "0", "0", each};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(f->pg.a, "claims_acquire", 7, params, &res, &err) != QW_OK)
        fail_msg("claims_acquire: %s", err.msg);
    int got = 0;
    for (int i = 0; i < qw_db_res_rows(res); i++) {
        assert_string_equal(qw_db_res_get(res, i, 3), "t");
        got += !qw_db_res_isnull(res, i, 0);
    }
    qw_db_res_free(res);
    return got;
}

static int pickup(struct fixture *f)
{
    return pickup_giving(f, "10", "1000");
}

/* Pickup gives w1 its room of the free services with work, never a held
 * one (S2, w2's) or one without work (S3); once they are gone it gives
 * nothing. */
static void test_pickup_takes_free_services_with_work(void **state)
{
    struct fixture *f = *state;
    hold(f, S2, "w2");
    /* w1 and w2 live; two claims to share (S2 held, S1 free): one each, and w2 has its one */
    assert_int_equal(pickup(f), 1);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant = 'w1' AND service_id = '" S1 "'"),
                     1);
    assert_int_equal(pickup(f), 0);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant IS NULL AND service_id = '" S3 "'"),
                     1);
}

/* Pickup reads the free services with work only up to what it may give
 * each instance, and counts as many as that as all it may give out, as the
 * fair share does. w2 holds three idle services; S1 and S2 are free with
 * work. Read up to 2, they count as 10: a share of ceil((3 + 10) / 2) = 7
 * leaves both instances room, and the two go one to each, in turns
 * (counted as 2, the share would be 3 and both would go to w1). */
static void test_pickup_counts_a_full_read_as_all_it_may_give(void **state)
{
    struct fixture *f = *state;
    for (int i = 1; i <= 3; i++)
        idle_held(f, "scale-ccccc", i, "w2");
    assert_int_equal(pickup_giving(f, "10", "2"), 1);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant = 'w2'"),
                     4);
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
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE service_id = '" S3 "' AND claimant IS NULL "
                                           "AND NOT has_work"),
                     1);
}

/* Column `col` of claims_share for w1 (slack 2, cap `max_claims`), which
 * says it holds `held` claims (NULL: not known), counting free services
 * with work up to `free_max`, reading them up to `free_read`. */
static int64_t share_column_reading(struct fixture *f, const char *held, const char *max_claims,
                                    int col, const char *free_max, const char *free_read)
{
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    const char *params[] = {"w1", "2", max_claims, "60000", held, free_max, free_read};
    if (qw_db_query(f->pg.a, "claims_share", 7, params, &res, &err) != QW_OK)
        fail_msg("claims_share: %s", err.msg);
    assert_int_equal(qw_db_res_rows(res), 1);
    int64_t v = qw_db_res_int(res, 0, col);
    qw_db_res_free(res);
    return v;
}

static int64_t share_column(struct fixture *f, const char *held, const char *max_claims, int col)
{
    return share_column_reading(f, held, max_claims, col, "1000", "1000");
}

/* claims_share's last column: the room the other live instances have
 * below their share, by the counts they report. */
static int64_t room_elsewhere(struct fixture *f)
{
    return share_column(f, NULL, "0", 5);
}

/* Two services free with work and two live instances: a share of 1 + 2
 * (slack) each. w2 reports 0 claims: room for 3; 2: room for 1; 5: none
 * (never below 0); its cap of 1 with 0 held: room for 1; its lease run
 * out: it is not live and has no room. Our own count never counts. */
static void test_share_reads_the_room_elsewhere(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(room_elsewhere(f), 3);
    itest_exec(f->pg.a, "UPDATE queuer.instances SET claims_held = 2 WHERE instance_id = 'w2'");
    assert_int_equal(room_elsewhere(f), 1);
    itest_exec(f->pg.a, "UPDATE queuer.instances SET claims_held = 5 WHERE instance_id = 'w2'");
    assert_int_equal(room_elsewhere(f), 0);
    itest_exec(f->pg.a, "UPDATE queuer.instances SET claims_held = 0, max_claims = 1 "
                        "WHERE instance_id = 'w2'");
    assert_int_equal(room_elsewhere(f), 1);
    itest_exec(f->pg.a, "UPDATE queuer.instances SET claims_held = 9 WHERE instance_id = 'w1'");
    assert_int_equal(room_elsewhere(f), 1);
    itest_exec(f->pg.a, "UPDATE queuer.instances SET lease_1 = now() - interval '1 s' "
                        "WHERE instance_id = 'w2'");
    assert_int_equal(room_elsewhere(f), 0);
}

/*
 * The share is summed from the reported counts while we hold less than
 * it, and counted through the claimant index when we hold more, or as
 * much with free work waiting, or do not know our count. w2 holds 10
 * claims but reports none (its report lags); w1 holds 6; S1 and S2 are
 * free with work. Saying 2 or 4, w1 is below the share the reports give
 * (4, 5): that share stands. Saying 6 (the reports' share is 6), or
 * nothing, it gets the exact share, ceil((16 + 2) / 2) + 2 = 11, and
 * would give nothing back. With a cap of 5 the share is 5 either way; the
 * services to share tell the two apart.
 */
static void test_share_is_exact_where_it_could_give_back(void **state)
{
    struct fixture *f = *state;
    for (int i = 1; i <= 16; i++)
        idle_held(f, "scale-bbbbb", i, i <= 6 ? "w1" : "w2");
    assert_int_equal(share_column(f, "2", "0", 0), 4);
    assert_int_equal(share_column(f, "4", "0", 0), 5);
    assert_int_equal(share_column(f, "6", "0", 0), 11);
    assert_int_equal(share_column(f, NULL, "0", 0), 11);
    assert_int_equal(share_column(f, "6", "0", 1), 18);
    assert_int_equal(share_column(f, "2", "0", 1), 4);
    assert_int_equal(share_column(f, "5", "5", 0), 5);
    assert_int_equal(share_column(f, "5", "5", 1), 18);
    assert_int_equal(share_column(f, "3", "5", 1), 5);
    /* the free services with work (column 3) are counted up to the bound */
    assert_int_equal(share_column_reading(f, "2", "0", 3, "1000", "1000"), 2);
    assert_int_equal(share_column_reading(f, "2", "0", 3, "1", "1000"), 1);
    /* read up to 1 of them: as many as that count as the whole bound, so
     * the exact share is ceil((16 + 1000) / 2) + 2 */
    assert_int_equal(share_column_reading(f, "2", "0", 3, "1000", "1"), 1000);
    assert_int_equal(share_column_reading(f, NULL, "0", 0, "1000", "1"), 510);
    assert_int_equal(share_column_reading(f, "2", "0", 3, "1000", "3"), 2);
    /* Without free work, holding the reports' share exactly gives nothing
     * back: 5 (the reports' share) stands, 6 is counted (10). */
    itest_exec(f->pg.a, "UPDATE queuer.service_id_claims SET has_work = false "
                        "WHERE claimant IS NULL");
    assert_int_equal(share_column(f, "5", "0", 0), 5);
    assert_int_equal(share_column(f, "6", "0", 0), 10);
    /* An instance whose lease ran out is counted by its claims, not by its
     * last report: w2 reports 40 but holds 10 (maintenance would have handed
     * them over, and its report stays); w1, alone live, saying 6, gets
     * ceil(16 / 1) + 2 = 18 either way, not ceil(46 / 1) + 2. */
    itest_exec(f->pg.a, "UPDATE queuer.instances SET claims_held = 40, "
                        "lease_1 = now() - interval '1 s' WHERE instance_id = 'w2'");
    assert_int_equal(share_column(f, "6", "0", 0), 18);
    assert_int_equal(share_column(f, "6", "0", 1), 16);
}

/* 100,000 more claims, held by eight live instances (w3-w8 added). */
static void many_claims(struct fixture *f)
{
    itest_exec(f->pg.a, "INSERT INTO queuer.service_id_claims "
                        "(service_id, claimant, claim_epoch, expiry_1, expiry_2) "
                        "SELECT format('many%s-aaaaa::0001', i), 'w' || (1 + i % 8), 1, "
                        "now() + interval '1 hour', now() + interval '2 hours' "
                        "FROM generate_series(1, 100000) i");
    itest_exec(f->pg.a, "INSERT INTO queuer.instances (instance_id, host, pid, version, lease_1, "
                        "lease_2) SELECT 'w' || i, 'h', i, 'v', now() + interval '1 hour', "
                        "now() + interval '2 hours' FROM generate_series(3, 8) i");
}

/* The fair share's generic plan stays cheap however stale the statistics of
 * queuer.instances are: with 100,000 claims (analysed) and an instances
 * table whose dead row versions fill many pages and that was never
 * analysed, its estimated cost stays below PostgreSQL's jit_above_cost. A
 * count of claims per instance row was costed once per estimated row, and
 * JIT-compiling that plan took seconds at every call. */
static void test_share_plan_stays_cheap_on_stale_statistics(void **state)
{
    struct fixture *f = *state;
    many_claims(f);
    itest_exec(f->pg.a, "ANALYZE queuer.service_id_claims");
    itest_exec(f->pg.a, "DO $$ BEGIN FOR i IN 1..300 LOOP "
                        "UPDATE queuer.instances SET heartbeat_at = now(); END LOOP; END $$");
    assert_true(itest_scalar(f->pg.a, "SELECT pg_relation_size('queuer.instances') / 8192") >= 8);
    assert_int_equal(itest_scalar(f->pg.a, "SELECT reltuples::bigint FROM pg_class "
                                           "WHERE oid = 'queuer.instances'::regclass"),
                     -1);
    const char *text = qw_statement_text("claims_share");
    assert_non_null(text);
    size_t len = strlen(text) + 128;
    char *sql = malloc(len);
    assert_non_null(sql);
    snprintf(sql, len,
             "PREPARE share_plan(text, integer, integer, integer, integer, integer, integer) AS %s",
             text);
    itest_exec(f->pg.a, sql);
    free(sql);
    char *plan = itest_string(f->pg.a, "EXPLAIN (FORMAT JSON) "
                                       "EXECUTE share_plan('w1', 2, 0, 60000, NULL, 20000, 2000)");
    /* (the first cost in the plan is the top node's) */
    const char *cost = strstr(plan, "\"Total Cost\": ");
    assert_non_null(cost);
    double total = strtod(cost + strlen("\"Total Cost\": "), NULL);
    double jit_above = (double)itest_scalar(f->pg.a, "SELECT current_setting('jit_above_cost')"
                                                     "::float8::bigint");
    if (!(total < jit_above))
        fail_msg("the fair share's generic plan costs %.0f, jit_above_cost is %.0f: %s", total,
                 jit_above, plan);
    free(plan);
}

/* One of this transaction's counts on queuer.service_id_claims
 * (pg_stat_xact_user_tables: `what` is a column or a sum of them). The
 * pending counts include earlier transactions not yet reported, so the
 * tests take differences inside one transaction. */
static int64_t claims_xact_stat(struct fixture *f, const char *what)
{
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT %s FROM pg_stat_xact_user_tables "
             "WHERE relid = 'queuer.service_id_claims'::regclass",
             what);
    return itest_scalar(f->pg.a, sql);
}

/* Claim tuples read, by scans of either kind. */
#define CLAIM_READS "seq_tup_read + idx_tup_fetch"

/* Entries of the claim table's primary key read, by index scans of either
 * kind (an insert's check for a conflicting key is not a scan and is not
 * counted). */
#define CLAIM_KEY_READS                                                                            \
    "pg_stat_get_xact_tuples_returned('queuer.service_id_claims_pkey'::regclass)"

/* The change in claims_xact_stat(f, what) that `sql` makes, run in a
 * transaction of its own on connection a. */
static int64_t claims_xact_stat_of(struct fixture *f, const char *what, const char *sql)
{
    itest_exec(f->pg.a, "BEGIN");
    int64_t before = claims_xact_stat(f, what);
    itest_exec(f->pg.a, sql);
    int64_t change = claims_xact_stat(f, what) - before;
    itest_exec(f->pg.a, "COMMIT");
    return change;
}

/* Recording an outcome reads the claim rows of its own services, not every
 * claim: with 100,000 more claims held by eight live instances (and
 * analysed, so plans see them), one outcome with the fast path, and one
 * whose claim moved on, each read a handful of claim rows. */
static void test_outcome_reads_only_its_claims(void **state)
{
    struct fixture *f = *state;
    many_claims(f);
    hold(f, S1, "w1");
    itest_exec(f->pg.a, "ANALYZE queuer.service_id_claims, queuer.instances, queuer.batches");
    assert_int_equal(mark(f, 0), 1);
    itest_exec(f->pg.a, "BEGIN");
    int64_t before = claims_xact_stat(f, CLAIM_READS);
    assert_int_equal(record(f, 0, "Committed", "t"), 2); /* ends, ids[1] marked */
    int64_t read = claims_xact_stat(f, CLAIM_READS) - before;
    itest_exec(f->pg.a, "COMMIT");
    assert_in_range(read, 1, 10);

    /* the claim moves on (w2 takes it) while w1's outcome is on its way:
     * the outcome matches nothing, and finds that out by key too */
    char outcomes[512];
    snprintf(outcomes, sizeof(outcomes), "{\"(%s," S1 ",%lld,posting,Committed,t,0,,,test,f,t)\"}",
             f->ids[1], (long long)epoch_of(f, S1));
    hold(f, S1, "w2");
    const char *params[] = {"w1", outcomes, f->inc};
    itest_exec(f->pg.a, "BEGIN");
    before = claims_xact_stat(f, CLAIM_READS);
    assert_int_equal(run(f->pg.a, "outcomes_record", 3, params), 0);
    read = claims_xact_stat(f, CLAIM_READS) - before;
    itest_exec(f->pg.a, "COMMIT");
    assert_in_range(read, 1, 10);
}

/* A delete of final batches (what the prune deletes) reads no claim row:
 * nothing on it changes, so the counters' trigger leaves the services out
 * before it looks their rows up (behind a held snapshot each look reads
 * every version of the row). A delete that takes work away still counts. */
static void test_delete_of_final_batches_reads_no_claim_row(void **state)
{
    struct fixture *f = *state;
    hold(f, S1, "w1");
    assert_int_equal(mark(f, 0), 1);
    assert_int_equal(record(f, 0, "Committed", "t"), 2); /* ends, ids[1] marked */
    char sql[512];
    snprintf(sql, sizeof(sql), "DELETE FROM queuer.batches WHERE batch_id = '%s'", f->ids[0]);
    assert_int_equal(claims_xact_stat_of(f, CLAIM_READS, sql), 0);
    assert_int_equal(n_open(f, S1), 3);
    assert_counters_exact(f);

    /* the batch being posted and a waiting one, deleted by hand */
    snprintf(sql, sizeof(sql), "DELETE FROM queuer.batches WHERE batch_id IN ('%s', '%s')",
             f->ids[1], f->ids[2]);
    itest_exec(f->pg.a, sql);
    assert_int_equal(n_open(f, S1), 1);
    assert_counters_exact(f);
}

/* Claim rows keep room on their pages for their new versions: a thousand
 * rows, each written three times (as its worker writes it for each batch)
 * while the versions cannot be removed yet (one transaction here; a held
 * snapshot in use), are updated heap-only, so each row keeps the one index
 * entry its lookups read. */
static void test_claim_row_versions_stay_on_their_page(void **state)
{
    struct fixture *f = *state;
    itest_exec(f->pg.a, "INSERT INTO queuer.service_id_claims (service_id, in_flight) "
                        "SELECT format('room-%s', i), repeat('a', 128) "
                        "FROM generate_series(1, 1000) i");
    itest_exec(f->pg.a, "BEGIN");
    int64_t updated = -claims_xact_stat(f, "n_tup_upd");
    int64_t heap_only = -claims_xact_stat(f, "n_tup_hot_upd");
    for (int round = 0; round < 3; round++)
        itest_exec(f->pg.a, "UPDATE queuer.service_id_claims "
                            "SET n_out = n_out + 1, in_flight = md5(in_flight) || repeat('b', 96) "
                            "WHERE service_id LIKE 'room-%'");
    updated += claims_xact_stat(f, "n_tup_upd");
    heap_only += claims_xact_stat(f, "n_tup_hot_upd");
    itest_exec(f->pg.a, "COMMIT");
    assert_int_equal(updated, 3000);
    assert_true(heap_only * 10 >= updated * 9);
}

/* Behind a snapshot held open, S1's claim row is written 800 times: every
 * version stays, and those that left their page each have an entry in the
 * primary key (here: at least ten, read by a lookup by equality). The mark,
 * the outcome with the fast path, and a load's hand-out of work to S1
 * still read a handful of entries each: their lookups take the newest
 * version first and stop at it (with 100,000 more claims, analysed, as the
 * plans of a queue in use see the table). */
static void test_claim_lookups_stop_at_the_newest_version(void **state)
{
    struct fixture *f = *state;
    many_claims(f);
    hold(f, S1, "w1");
    itest_exec(f->pg.a, "ANALYZE queuer.service_id_claims, queuer.instances, queuer.batches");
    itest_exec(f->pg.b, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE service_id = '" S1 "'"),
                     1);
    for (int i = 0; i < 800; i++) /* (a transaction each: versions the snapshot could see) */
        itest_exec(f->pg.a, "UPDATE queuer.service_id_claims SET head_priority = head_priority "
                            "WHERE service_id = '" S1 "'");
    assert_true(claims_xact_stat_of(f, CLAIM_KEY_READS,
                                    "SET LOCAL enable_seqscan = off; "
                                    "SELECT count(*) FROM queuer.service_id_claims "
                                    "WHERE service_id = '" S1 "'") >= 10);

    itest_exec(f->pg.a, "BEGIN");
    int64_t before = claims_xact_stat(f, CLAIM_KEY_READS);
    assert_int_equal(mark(f, 0), 1);
    int64_t marked = claims_xact_stat(f, CLAIM_KEY_READS) - before;
    itest_exec(f->pg.a, "COMMIT");
    itest_exec(f->pg.a, "BEGIN");
    before = claims_xact_stat(f, CLAIM_KEY_READS);
    assert_int_equal(record(f, 0, "Committed", "t"), 2); /* ends, ids[1] marked */
    int64_t recorded = claims_xact_stat(f, CLAIM_KEY_READS) - before;
    itest_exec(f->pg.a, "COMMIT");
    /* what a load does for each service it gave batches */
    int64_t given = claims_xact_stat_of(f, CLAIM_KEY_READS,
                                        "SELECT queuer.claims_give_work('{" S1 "}', '{0}')");
    itest_exec(f->pg.b, "COMMIT");
    assert_in_range(marked, 1, 4);
    assert_in_range(recorded, 1, 4);
    assert_in_range(given, 1, 4);
    assert_int_equal(n_open(f, S1), 3);
    assert_counters_exact(f);
}

/* A service whose head is parked (Delayed, retry_at = infinity) counts as
 * idle though batches wait behind it: they cannot move until an operator
 * acts, so the claim goes back without work when free services with work
 * wait. A head that is only Delayed (due later) keeps it. */
static void test_release_idle_gives_back_a_parked_head(void **state)
{
    struct fixture *f = *state;
    hold(f, S1, "w1");
    const char *params[] = {"w1", "10"};
    char sql[256];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET status = 'Delayed', retry_at = now() + interval '1 hour' "
             "WHERE batch_id = '%s'",
             f->ids[0]);
    itest_exec(f->pg.a, sql);
    assert_int_equal(run(f->pg.a, "claims_release_idle", 2, params), 0);
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET retry_at = 'infinity' WHERE batch_id = '%s'", f->ids[0]);
    itest_exec(f->pg.a, sql);
    assert_int_equal(n_open(f, S1), 3); /* the three behind it are still counted */
    itest_exec(f->pg.a, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    assert_int_equal(run(f->pg.a, "claims_release_idle", 2, params), 1);
    itest_exec(f->pg.a, "COMMIT");
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE service_id = '" S1 "' AND claimant IS NULL "
                                           "AND NOT has_work"),
                     1);
    assert_counters_exact(f);
}

/* Work for an idle service arrives after the release's snapshot: the
 * release must not give it back on what it saw (or must fail and re-run).
 * An enqueue still open (its ingest row locked) keeps it too. */
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
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.claims WHERE "
                                           "service_id = '" S3 "' AND claimant = 'w1' "
                                           "AND n_open = 1"),
                     1);

    /* S2 idle again (its batch final), held by w1; an enqueue of it is open */
    itest_exec(f->pg.a, "UPDATE queuer.batches SET status = 'Committed' "
                        "WHERE service_id = '" S2 "'");
    hold(f, S2, "w1");
    itest_exec(f->pg.b, "BEGIN");
    enqueue(f, f->pg.b, S2, NULL);
    itest_exec(f->pg.a, "SET lock_timeout = '5s'");
    assert_int_equal(run(f->pg.a, "claims_release_idle", 2, params), 0);
    itest_exec(f->pg.b, "COMMIT");
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.claims WHERE "
                                           "service_id = '" S2 "' AND claimant = 'w1' "
                                           "AND n_open = 1"),
                     1);
}

/* The surplus release keeps a service mid-submission, and the row it frees
 * says exactly whether the service has work and the priority of its head. */
static void test_release_keeps_mid_submission(void **state)
{
    struct fixture *f = *state;
    hold(f, S1, "w1");
    hold(f, S2, "w1");
    hold(f, S3, "w1");
    assert_int_equal(mark(f, 0), 1);
    itest_exec(f->pg.a, "UPDATE queuer.batches SET priority = 6 WHERE service_id = '" S2 "'");
    /* stale values in the held rows, which nothing keeps while held */
    itest_exec(f->pg.a, "UPDATE queuer.service_id_claims SET has_work = (service_id = '" S3 "'), "
                        "head_priority = 1");
    const char *params[] = {"w1", "{" S1 "," S2 "," S3 "}"};
    assert_int_equal(run(f->pg.a, "claims_release", 2, params), 2); /* S2, S3 */
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant = 'w1' AND service_id = '" S1 "'"),
                     1);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE service_id = '" S2 "' AND claimant IS NULL "
                                           "AND has_work AND head_priority = 6"),
                     1);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE service_id = '" S3 "' AND claimant IS NULL "
                                           "AND NOT has_work AND head_priority = 0"),
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
 * One claims transaction gives a surplus claim back (S2) and then picks up
 * free services with work for the fair share: S3 and S2 itself. S2 is ours
 * after it, at a new epoch: the result lists it as a claim and not as
 * released (applied in that order, the worker would forget a claim it
 * holds until its next full read of its claims, and the service would
 * stall). An idle claim (S4) is kept: claims stay when their work runs
 * out.
 */
static void test_surplus_taken_again_is_held(void **state)
{
    struct fixture *f = *state;
    itest_exec(f->pg.a, "DELETE FROM queuer.instances WHERE instance_id = 'w2'");
    enqueue_unassigned(f, S3, NULL);
    idle_service(f, S4);
    hold(f, S1, "w1");
    hold(f, S2, "w1");
    hold(f, S4, "w1");
    int64_t epoch_s2 = epoch_of(f, S2);

    struct qw_claims_result r = {0};
    itest_claims_cycle(f->pg.a, "w1", 3, "{" S2 "}", 0, &r);
    /* w1 alone: its three claims and S3 free with work */
    assert_int_equal(r.share, 4);
    assert_true(r.picker);
    assert_int_equal(r.acquired, 2);
    assert_int_equal(r.n_claims, 2);
    assert_int_equal(listed(r.claims, r.n_claims, S2), epoch_s2 + 2);
    assert_int_equal(listed(r.claims, r.n_claims, S3), epoch_of(f, S3));
    assert_int_equal(r.n_released, 0);
    qw_claims_result_free(&r);
    assert_holder(f, S1, "w1");
    assert_holder(f, S2, "w1");
    assert_holder(f, S3, "w1");
    assert_holder(f, S4, "w1");
}

static void test_maintenance_follows_the_holders_lease(void **state)
{
    struct fixture *f = *state;
    hold(f, S1, "w1");
    hold(f, S2, "w1");
    hold(f, S3, "w1");
    assert_int_equal(mark(f, 0), 1); /* S1 mid-submission */
    int64_t epoch_s2 = epoch_of(f, S2);
    int64_t epoch_s3 = epoch_of(f, S3);
    /* w1 gone (below), w2 live: w2 maintains, with a lease of 5 s */
    const char *params[] = {"w2", "1000", "5000", "10000", "2000", "0"};
    /* the claims' own expiries have passed, w1's lease has not */
    assert_int_equal(run(f->pg.b, "claims_maintain", 6, params), 0);
    /* soft expiry of w1's lease: S2 (work) and S3 (no work: claims are kept
     * when their work runs out) go to the live w2, S1 (mid-submission) stays */
    itest_exec(f->pg.b, "UPDATE queuer.instances SET lease_1 = now() - interval '1 s' "
                        "WHERE instance_id = 'w1'");
    assert_int_equal(run(f->pg.b, "claims_maintain", 6, params), 2);
    assert_holder(f, S1, "w1");
    assert_holder(f, S2, "w2");
    assert_holder(f, S3, "w2");
    assert_int_equal(epoch_of(f, S2), epoch_s2 + 1);
    assert_int_equal(epoch_of(f, S3), epoch_s3 + 1);
    assert_int_equal(itest_scalar(f->pg.b,
                                  "SELECT count(*) FROM queuer.claims WHERE service_id IN ('" S2
                                  "', '" S3 "') AND expiry_1 > now() + interval '4 s' "
                                  "AND expiry_2 > now() + interval '9 s'"),
                     2);
    /* the held claims of w1 no longer pass its fences */
    assert_int_equal(record(f, 0, "Committed", "t"), 0);
    /* hard expiry: S1 goes too, to the live w2 (its batch is followed up there) */
    itest_exec(f->pg.b, "UPDATE queuer.instances SET lease_2 = now() - interval '1 s' "
                        "WHERE instance_id = 'w1'");
    assert_int_equal(run(f->pg.b, "claims_maintain", 6, params), 1);
    assert_holder(f, S1, "w2");
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE claimant = 'w1'"),
                     0);
}

/* With no live instance (every lease ran out), expired claims stay with
 * their holder: they go to the first instance whose lease runs again. */
static void test_maintenance_waits_for_a_live_instance(void **state)
{
    struct fixture *f = *state;
    hold(f, S2, "w1");
    itest_exec(f->pg.b, "UPDATE queuer.instances SET lease_1 = now() - interval '1 s'");
    const char *params[] = {"w2", "1000", "5000", "10000", "2000", "0"};
    assert_int_equal(run(f->pg.b, "claims_maintain", 6, params), 0);
    assert_holder(f, S2, "w1");
    itest_exec(f->pg.b, "UPDATE queuer.instances SET lease_1 = now() + interval '1 min' "
                        "WHERE instance_id = 'w2'");
    assert_int_equal(run(f->pg.b, "claims_maintain", 6, params), 1);
    assert_holder(f, S2, "w2");
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

/* w3 joins as a live instance (it runs nothing unless a test does). */
static void w3_lives(struct fixture *f)
{
    itest_exec(f->pg.a, "INSERT INTO queuer.instances (instance_id, host, pid, version, lease_1, "
                        "lease_2) VALUES ('w3', 'h', 3, 'v', now() + interval '1 h', "
                        "now() + interval '2 h')");
}

static int64_t sprea_held_by(struct fixture *f, const char *who)
{
    char sql[160];
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM queuer.service_id_claims WHERE service_id LIKE 'sprea-%%' "
             "AND claimant = '%s'",
             who);
    return itest_scalar(f->pg.b, sql);
}

/* The handed-over claims are spread over the live instances by service. */
static void test_maintenance_spreads_over_the_live(void **state)
{
    struct fixture *f = *state;
    w3_lives(f);
    w1_dies_holding_200(f);
    const char *params[] = {"w2", "1000", "5000", "10000", "2000", "0"};
    assert_int_equal(run(f->pg.b, "claims_maintain", 6, params), 200);
    int64_t w2 = sprea_held_by(f, "w2");
    int64_t w3 = sprea_held_by(f, "w3");
    assert_int_equal(w2 + w3, 200);
    assert_true(w2 >= 70 && w3 >= 70);
}

/*
 * Before the grace runs out each live instance takes only the claims that
 * hash to it; after it, anyone hands the rest to their receivers.
 */
static void test_maintenance_takes_its_own_part_first(void **state)
{
    struct fixture *f = *state;
    w3_lives(f);
    w1_dies_holding_200(f);
    const char *within_grace[] = {"w2", "1000", "5000", "10000", "2000", "3600000"};
    int own = run(f->pg.b, "claims_maintain", 6, within_grace);
    assert_true(own >= 70 && own <= 130);
    assert_int_equal(sprea_held_by(f, "w2"), own);
    assert_int_equal(sprea_held_by(f, "w3"), 0);
    assert_int_equal(run(f->pg.b, "claims_maintain", 6, within_grace), 0);
    const char *past_grace[] = {"w2", "1000", "5000", "10000", "2000", "0"};
    assert_int_equal(run(f->pg.b, "claims_maintain", 6, past_grace), 200 - own);
    assert_int_equal(sprea_held_by(f, "w3"), 200 - own);
    assert_int_equal(sprea_held_by(f, "w1"), 0);
}

/*
 * Two live instances take a lapsed holder's claims at the same time, each
 * its own part: the second neither waits for the first's transaction nor
 * skips the holder it has locked.
 */
static void test_maintenance_takers_run_together(void **state)
{
    struct fixture *f = *state;
    w3_lives(f);
    w1_dies_holding_200(f);
    struct qw_db *w3 = itest_connect(f->pg.conninfo);
    itest_exec(w3, "BEGIN");
    const char *w3_params[] = {"w3", "1000", "5000", "10000", "2000", "3600000"};
    int by_w3 = run(w3, "claims_maintain", 6, w3_params);
    assert_true(by_w3 >= 70 && by_w3 <= 130);
    itest_exec(f->pg.b, "SET lock_timeout = '5s'");
    const char *w2_params[] = {"w2", "1000", "5000", "10000", "2000", "3600000"};
    assert_int_equal(run(f->pg.b, "claims_maintain", 6, w2_params), 200 - by_w3);
    itest_exec(w3, "COMMIT");
    qw_db_close(w3);
    assert_int_equal(sprea_held_by(f, "w2"), 200 - by_w3);
    assert_int_equal(sprea_held_by(f, "w3"), by_w3);
    assert_int_equal(sprea_held_by(f, "w1"), 0);
}

/* At most so many to each receiver in one call; the rest wait, still the
 * lapsed holder's, for the next call. */
static void test_maintenance_hands_each_a_bounded_number(void **state)
{
    struct fixture *f = *state;
    w1_dies_holding_200(f);
    const char *params[] = {"w2", "1000", "5000", "10000", "50", "0"};
    assert_int_equal(run(f->pg.b, "claims_maintain", 6, params), 50);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE service_id LIKE 'sprea-%' AND claimant = 'w2'"),
                     50);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE service_id LIKE 'sprea-%' AND claimant = 'w1'"),
                     150);
    assert_int_equal(run(f->pg.b, "claims_maintain", 6, params), 50);
    assert_int_equal(itest_scalar(f->pg.b, "SELECT count(*) FROM queuer.service_id_claims "
                                           "WHERE service_id LIKE 'sprea-%' AND claimant = 'w2'"),
                     100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_counter_follows_every_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_counter_follows_every_outcome, setup, teardown),
        cmocka_unit_test_setup_teardown(test_operator_actions_counted_whatever_the_session_set,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_update_of_many_batches_counted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_insert_path_counted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pickup_takes_free_services_with_work, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pickup_counts_a_full_read_as_all_it_may_give, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_release_idle_gives_back_only_idle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_share_reads_the_room_elsewhere, setup, teardown),
        cmocka_unit_test_setup_teardown(test_share_is_exact_where_it_could_give_back, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_share_plan_stays_cheap_on_stale_statistics, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_outcome_reads_only_its_claims, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_of_final_batches_reads_no_claim_row, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_claim_row_versions_stay_on_their_page, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_claim_lookups_stop_at_the_newest_version, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_release_idle_gives_back_a_parked_head, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_release_idle_races_enqueue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_keeps_mid_submission, setup, teardown),
        cmocka_unit_test_setup_teardown(test_surplus_taken_again_is_held, setup, teardown),
        cmocka_unit_test_setup_teardown(test_maintenance_follows_the_holders_lease, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_maintenance_waits_for_a_live_instance, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_maintenance_spreads_over_the_live, setup, teardown),
        cmocka_unit_test_setup_teardown(test_maintenance_takes_its_own_part_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_maintenance_takers_run_together, setup, teardown),
        cmocka_unit_test_setup_teardown(test_maintenance_hands_each_a_bounded_number, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
