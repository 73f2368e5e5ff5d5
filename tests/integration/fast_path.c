/*
 * Integration: the fast path of sql/outcomes_record.sql. When a batch's
 * turn ends, the same statement marks its service's next batch for
 * submission only where docs/DESIGN.md §5.2 allows it, fenced by the claim.
 */
#include "itest.h"
#include "submitter/outcome_writer.h"
#include "queuer/queue_txn.h"

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
    char *inc;        /* w1's incarnation (the fenced statements name it) */
    char *inc2;       /* w2's */
};

/* Three batches; the first is Pending at the ledger; w1 holds the claim at epoch 7
 * (by the claim's own expiry: w1 and w2 are registered without a lease). */
static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->conninfo = itest_db_create("fast_path", 1);
    f->db = itest_connect(f->conninfo);
    for (int i = 0; i < 3; i++) {
        itest_enqueue_sample(f->db, SVC, 1000 + (uint64_t)i, f->ids[i]);
    }
    itest_exec(f->db, "INSERT INTO queuer.instances (instance_id, host, pid, version) "
                      "VALUES ('w1', 'h', 1, 'v'), ('w2', 'h', 2, 'v')");
    f->inc = itest_incarnation(f->db, "w1");
    f->inc2 = itest_incarnation(f->db, "w2");
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
    free(f->inc);
    free(f->inc2);
    free(f->conninfo);
    free(f);
    return 0;
}

/* Sends `outcomes`, a queuer.outcome[] literal, as w1; returns the result. */
static struct qw_db_res *record_group(struct fixture *f, const char *outcomes)
{
    const char *params[] = {"w1", outcomes, f->inc};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(f->db, "outcomes_record", 3, params, &res, &err) != QW_OK)
        fail_msg("outcomes_record: %s", err.msg);
    return res;
}

/* Records `status` for ids[i], expecting it in state `expect`, at `epoch`. */
static struct qw_db_res *record_batch(struct fixture *f, int i, const char *expect,
                                      const char *status, long epoch, int go_on)
{
    /* one queuer.outcome: batch, service, epoch, expect, status, submitted,
     * attempts_add, retry_ms, last_error, detail, posted, go_on */
    char outcomes[512];
    snprintf(outcomes, sizeof(outcomes), "{\"(%s," SVC ",%ld,%s,%s,t,0,,,\\\"by test\\\",f,%s)\"}",
             f->ids[i], epoch, expect, status, go_on ? "t" : "f");
    return record_group(f, outcomes);
}

/* Records `status` for ids[0], expecting it in state `expect`, at `epoch`. */
static struct qw_db_res *record_expecting(struct fixture *f, const char *expect, const char *status,
                                          long epoch, int go_on)
{
    return record_batch(f, 0, expect, status, epoch, go_on);
}

/* Records `status` for ids[0] (expect pending) at `epoch`; returns the result. */
static struct qw_db_res *record(struct fixture *f, const char *status, long epoch, int go_on)
{
    return record_expecting(f, "pending", status, epoch, go_on);
}

/* Of a result's two rows, the one whose kind (column 0) is `kind`. */
static int row_of_kind(const struct qw_db_res *res, char kind)
{
    return qw_db_res_get(res, 0, 0)[0] == kind ? 0 : 1;
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
    int next = row_of_kind(res, 'n');
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

/*
 * The next batch is the oldest by created_at, then by id: of two batches
 * with the same created_at (enqueue never gives one out; a hand-written
 * INSERT could) the fast path marks the smaller id, and the fetch then
 * sees that one alone, as both the oldest non-final batch and the one in
 * flight.
 */
static void test_next_ties_go_by_id(void **state)
{
    struct fixture *f = *state;
    char sql[512];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET created_at = "
             "(SELECT created_at FROM queuer.batches WHERE batch_id = '%s') "
             "WHERE batch_id = '%s'",
             f->ids[2], f->ids[1]);
    itest_exec(f->db, sql);
    const char *first = strcmp(f->ids[1], f->ids[2]) < 0 ? f->ids[1] : f->ids[2];
    struct qw_db_res *res = record(f, "Committed", 7, 1);
    assert_int_equal(qw_db_res_rows(res), 2);
    int next = row_of_kind(res, 'n');
    assert_string_equal(qw_db_res_get(res, next, 0), "n");
    assert_string_equal(qw_db_res_get(res, next, 1), first);
    qw_db_res_free(res);

    const char *params[] = {"w1", "{" SVC "}"};
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(f->db, "batches_fetch_some", 2, params, &res, &err) != QW_OK)
        fail_msg("batches_fetch_some: %s", err.msg);
    assert_int_equal(qw_db_res_rows(res), 1);
    assert_string_equal(qw_db_res_get(res, 0, 2), first);
    qw_db_res_free(res);
}

/*
 * The history row of an outcome names the state the batch left: the one
 * the compare-and-set matched (posting: Submitting, pending: Pending), and
 * for an adopted batch ('inflight', either state) the one it was in.
 */
static void test_history_names_the_state_left(void **state)
{
    struct fixture *f = *state;
    static const struct {
        const char *status; /* the batch's status before the outcome (submitted = true) */
        const char *expect; /* the outcome's expectation */
        const char *from;   /* the from_status it must write */
    } cases[] = {
        {"NULL", "posting", "Submitting"},
        {"'Pending'", "pending", "Pending"},
        {"NULL", "inflight", "Submitting"},
        {"'Pending'", "inflight", "Pending"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char sql[512];
        snprintf(sql, sizeof(sql),
                 "UPDATE queuer.batches SET submitted = true, status = %s WHERE batch_id = '%s'",
                 cases[i].status, f->ids[0]);
        itest_exec(f->db, sql);
        struct qw_db_res *res = record_expecting(f, cases[i].expect, "Unknown", 7, 0);
        assert_int_equal(qw_db_res_rows(res), 1);
        qw_db_res_free(res);
        snprintf(sql, sizeof(sql),
                 "SELECT from_status FROM queuer.batch_history WHERE batch_id = '%s' "
                 "AND to_status = 'Unknown' ORDER BY id DESC LIMIT 1",
                 f->ids[0]);
        char *from = itest_string(f->db, sql);
        if (!from || strcmp(from, cases[i].from) != 0)
            fail_msg("case %zu (%s): from_status %s, expected %s", i, cases[i].expect,
                     from ? from : "(none)", cases[i].from);
        free(from);
    }
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
    /* not due: nothing marked, order kept; the 'm' row says the service has
     * a next batch (its job is not the service's last) */
    assert_int_equal(qw_db_res_rows(res), 2);
    int more = row_of_kind(res, 'm');
    assert_string_equal(qw_db_res_get(res, 1 - more, 0), "w");
    assert_string_equal(qw_db_res_get(res, more, 0), "m");
    assert_string_equal(qw_db_res_get(res, more, 1), f->ids[1]);
    assert_int_equal(qw_db_res_int(res, more, 7), 1); /* the outcome's ord */
    qw_db_res_free(res);
    assert_int_equal(COUNT(f,
                           "SELECT count(*) FROM queuer.batches WHERE batch_id = '%s' "
                           "AND status = 'Delayed' AND NOT submitted",
                           f->ids[1]),
                     1);
}

/*
 * In one group, one outcome's next batch is marked and another's is not
 * due: the group reports the first as 'n' and the second as 'm', each with
 * its own outcome's ord, and nothing for a service with no batch left.
 */
static void test_group_reports_each_next_not_marked(void **state)
{
    struct fixture *f = *state;
    static const char *const svcs[2] = {"fastp-ddddd::0004", "fastp-eeeee::0005"};
    char other[3][129]; /* two batches of the first service, one of the second */
    itest_enqueue_sample(f->db, svcs[0], 4000, other[0]);
    itest_enqueue_sample(f->db, svcs[0], 4001, other[1]);
    itest_enqueue_sample(f->db, svcs[1], 5000, other[2]);
    itest_exec(f->db, "UPDATE queuer.service_id_claims SET claimant = 'w1', claim_epoch = 7, "
                      "expiry_1 = now() + interval '1 min', expiry_2 = now() + interval '2 min'");
    char sql[768];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET submitted = true, status = 'Pending', attempts = 1 "
             "WHERE batch_id IN ('%s', '%s'); "
             "UPDATE queuer.batches SET status = 'Delayed', retry_at = now() + interval '1 h' "
             "WHERE batch_id = '%s'",
             other[0], other[2], other[1]);
    itest_exec(f->db, sql);
    char outcomes[1024];
    snprintf(outcomes, sizeof(outcomes),
             "{\"(%s," SVC ",7,pending,Committed,t,0,,,,f,t)\","
             "\"(%s,%s,7,pending,Committed,t,0,,,,f,t)\","
             "\"(%s,%s,7,pending,Committed,t,0,,,,f,t)\"}",
             f->ids[0], other[0], svcs[0], other[2], svcs[1]);
    struct qw_db_res *res = record_group(f, outcomes);
    int written = 0, next = -1, more = -1;
    for (int r = 0; r < qw_db_res_rows(res); r++) {
        char kind = qw_db_res_get(res, r, 0)[0];
        if (kind == 'w')
            written++;
        else if (kind == 'n' && next < 0)
            next = r;
        else if (kind == 'm' && more < 0)
            more = r;
        else
            fail_msg("unexpected row of kind %c", kind);
    }
    assert_int_equal(written, 3);
    assert_true(next >= 0 && more >= 0);
    assert_string_equal(qw_db_res_get(res, next, 1), f->ids[1]);
    assert_int_equal(qw_db_res_int(res, next, 7), 1);
    assert_string_equal(qw_db_res_get(res, more, 1), other[1]);
    assert_int_equal(qw_db_res_int(res, more, 7), 2);
    qw_db_res_free(res);
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

/* The writer's row literal carries any text: the database stores exactly what was sent. */
static void test_writer_round_trips_text(void **state)
{
    struct fixture *f = *state;
    static const char nasty[] = "a\"b\\c,(d) {e} 'f'; NULL \xe5\x8f\x96\xe5\xbc\x95";
    struct qw_job job = {.kind = QW_JOB_SUBMIT, .epoch = 7};
    snprintf(job.service_id, sizeof(job.service_id), "%s", SVC);
    snprintf(job.batch_id, sizeof(job.batch_id), "%s", f->ids[0]);
    struct qw_outcome_item item = {.job = &job};
    item.outcome = (struct qw_outcome){.expect = QW_EXPECT_PENDING,
                                       .status = QW_STATUS_INVALID,
                                       .submitted = true,
                                       .retry_ms = QW_OUTCOME_NO_RETRY,
                                       .after = QW_AFTER_END_FINAL};
    snprintf(item.outcome.last_error, sizeof(item.outcome.last_error), "%s", nasty);
    snprintf(item.outcome.detail, sizeof(item.outcome.detail), "detail: %s", nasty);
    struct qw_outcome_writer w;
    qw_outcome_writer_init(&w);
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_outcome_writer_write(&w, f->db, "w1", f->inc, &item, 1, &err) != QW_OK)
        fail_msg("write: %s", err.msg);
    assert_true(item.written);
    assert_int_equal(item.next_row, -1);
    qw_outcome_writer_free(&w);
    const char *params[] = {f->ids[0], nasty};
    struct qw_db_res *res = NULL;
    assert_int_equal(
        qw_db_query_sql(f->db,
                        "SELECT (b.last_error = $2)::int, (h.detail = 'detail: ' || $2)::int "
                        "FROM queuer.batches b JOIN queuer.batch_history h USING (batch_id) "
                        "WHERE b.batch_id = $1 AND h.to_status = 'Invalid'",
                        2, params, &res, &err),
        QW_OK);
    assert_int_equal(qw_db_res_rows(res), 1);
    assert_int_equal(qw_db_res_int(res, 0, 0), 1);
    assert_int_equal(qw_db_res_int(res, 0, 1), 1);
    qw_db_res_free(res);
}

/*
 * A refused outcome is isolated: one outcome the database refuses (here a retry delay
 * beyond what an interval holds, SQLSTATE 22008) must not hold back the
 * group: it is isolated and recorded in a plain form, the others are
 * written, and the write succeeds.
 */
static void test_refused_outcome_is_isolated(void **state)
{
    struct fixture *f = *state;
    struct qw_job job = {.kind = QW_JOB_SUBMIT, .epoch = 7};
    snprintf(job.service_id, sizeof(job.service_id), "%s", SVC);
    snprintf(job.batch_id, sizeof(job.batch_id), "%s", f->ids[0]);
    struct qw_job stale = job;
    stale.epoch = 6; /* a claim we no longer hold: matches nothing */
    struct qw_outcome_item items[2] = {{.job = &stale}, {.job = &job}};
    items[0].outcome = (struct qw_outcome){.expect = QW_EXPECT_PENDING,
                                           .status = QW_STATUS_COMMITTED,
                                           .submitted = true,
                                           .retry_ms = QW_OUTCOME_NO_RETRY,
                                           .after = QW_AFTER_END_FINAL};
    items[1].outcome = (struct qw_outcome){.expect = QW_EXPECT_PENDING,
                                           .status = QW_STATUS_DELAYED,
                                           .retry_ms = INT64_MAX / 2,
                                           .after = QW_AFTER_END_RETRY};
    snprintf(items[1].outcome.detail, sizeof(items[1].outcome.detail), "HTTP 503: retry later");
    struct qw_outcome_writer w;
    qw_outcome_writer_init(&w);
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_outcome_writer_write(&w, f->db, "w1", f->inc, items, 2, &err);
    if (rc != QW_OK)
        fail_msg("the group failed as a whole: %s (SQLSTATE %s)", err.msg, err.sqlstate);
    assert_false(items[0].written);
    assert_false(items[0].isolated);
    assert_true(items[1].written);
    assert_true(items[1].isolated);
    assert_string_equal(items[1].sqlstate, "22008");
    qw_outcome_writer_free(&w);
    assert_int_equal(COUNT(f,
                           "SELECT count(*) FROM queuer.batches WHERE batch_id = '%s' "
                           "AND status = 'Delayed' AND NOT submitted "
                           "AND retry_at < now() + interval '8 days' "
                           "AND last_error LIKE 'outcome refused by the database%%'",
                           f->ids[0]),
                     1);
}

/*
 * The outcome fence locks only claims that are ours at the
 * outcome's epoch. A claim row another worker holds and has locked right
 * now (its claims transaction) must not fail the whole group with NOWAIT.
 */
static void test_foreign_locked_claim_does_not_fail_the_group(void **state)
{
    struct fixture *f = *state;
    static const char other_svc[] = "fastp-bbbbb::0002";
    char other_id[129];
    itest_enqueue_sample(f->db, other_svc, 2000, other_id);
    /* w2 took the other service over (epoch 4) and its claims transaction holds the row */
    itest_exec(f->db, "UPDATE queuer.service_id_claims SET claimant = 'w2', claim_epoch = 4, "
                      "expiry_1 = now() + interval '1 min', expiry_2 = now() + interval '2 min' "
                      "WHERE service_id = 'fastp-bbbbb::0002'");
    char sql[512];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET submitted = true, status = 'Pending' WHERE batch_id = '%s'",
             other_id);
    itest_exec(f->db, sql);
    struct qw_db *w2 = itest_connect(f->conninfo);
    itest_exec(w2, "BEGIN");
    itest_exec(w2, "SELECT 1 FROM queuer.service_id_claims WHERE service_id = "
                   "'fastp-bbbbb::0002' FOR UPDATE");

    struct qw_job mine = {.kind = QW_JOB_SUBMIT, .epoch = 7};
    snprintf(mine.service_id, sizeof(mine.service_id), "%s", SVC);
    snprintf(mine.batch_id, sizeof(mine.batch_id), "%s", f->ids[0]);
    struct qw_job lost = {.kind = QW_JOB_SUBMIT, .epoch = 3};
    snprintf(lost.service_id, sizeof(lost.service_id), "%s", other_svc);
    snprintf(lost.batch_id, sizeof(lost.batch_id), "%s", other_id);
    struct qw_outcome committed = {.expect = QW_EXPECT_PENDING,
                                   .status = QW_STATUS_COMMITTED,
                                   .submitted = true,
                                   .retry_ms = QW_OUTCOME_NO_RETRY,
                                   .after = QW_AFTER_END_FINAL};
    struct qw_outcome_item items[2] = {{.job = &mine, .outcome = committed},
                                       {.job = &lost, .outcome = committed}};
    struct qw_outcome_writer w;
    qw_outcome_writer_init(&w);
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_outcome_writer_write(&w, f->db, "w1", f->inc, items, 2, &err);
    itest_exec(w2, "ROLLBACK");
    qw_db_close(w2);
    if (rc != QW_OK)
        fail_msg("a foreign locked claim failed the group: %s (SQLSTATE %s)", err.msg,
                 err.sqlstate);
    assert_true(items[0].written);
    assert_false(items[1].written);
    assert_false(items[1].skipped); /* not ours: dropped, never written again */
    qw_outcome_writer_free(&w);
}

/*
 * A claim row of ours that another transaction has locked (our claims
 * transaction giving it back, an operator action) is skipped, not waited
 * for: its outcome comes back skipped (the claim is still ours: it goes in
 * the next group) and the rest of the group is written at once.
 */
static void test_locked_own_claim_is_skipped(void **state)
{
    struct fixture *f = *state;
    static const char other_svc[] = "fastp-ccccc::0003";
    char other_id[129];
    itest_enqueue_sample(f->db, other_svc, 3000, other_id);
    itest_exec(f->db, "UPDATE queuer.service_id_claims SET claimant = 'w1', claim_epoch = 2, "
                      "expiry_1 = now() + interval '1 min', expiry_2 = now() + interval '2 min' "
                      "WHERE service_id = 'fastp-ccccc::0003'");
    char sql[512];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET submitted = true, status = 'Pending' WHERE batch_id = '%s'",
             other_id);
    itest_exec(f->db, sql);
    struct qw_db *locker = itest_connect(f->conninfo);
    itest_exec(locker, "BEGIN");
    itest_exec(locker, "SELECT 1 FROM queuer.service_id_claims WHERE service_id = "
                       "'fastp-ccccc::0003' FOR UPDATE");
    /* a write that waited for the lock fails here instead of hanging the test */
    itest_exec(f->db, "SET lock_timeout = '5s'");

    struct qw_job mine = {.kind = QW_JOB_SUBMIT, .epoch = 7};
    snprintf(mine.service_id, sizeof(mine.service_id), "%s", SVC);
    snprintf(mine.batch_id, sizeof(mine.batch_id), "%s", f->ids[0]);
    struct qw_job locked = {.kind = QW_JOB_SUBMIT, .epoch = 2};
    snprintf(locked.service_id, sizeof(locked.service_id), "%s", other_svc);
    snprintf(locked.batch_id, sizeof(locked.batch_id), "%s", other_id);
    struct qw_outcome committed = {.expect = QW_EXPECT_PENDING,
                                   .status = QW_STATUS_COMMITTED,
                                   .submitted = true,
                                   .retry_ms = QW_OUTCOME_NO_RETRY,
                                   .after = QW_AFTER_END_FINAL};
    struct qw_outcome_item items[2] = {{.job = &mine, .outcome = committed},
                                       {.job = &locked, .outcome = committed}};
    struct qw_outcome_writer w;
    qw_outcome_writer_init(&w);
    struct qw_error err;
    qw_error_clear(&err);
    int64_t t0 =
        itest_scalar(f->db, "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint");
    int rc = qw_outcome_writer_write(&w, f->db, "w1", f->inc, items, 2, &err);
    int64_t took_ms =
        itest_scalar(f->db, "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint") - t0;
    if (rc != QW_OK)
        fail_msg("a locked claim of ours failed the group: %s (SQLSTATE %s)", err.msg,
                 err.sqlstate);
    assert_true(took_ms < 2000); /* no wait for the lock */
    assert_true(items[0].written);
    assert_false(items[0].skipped);
    assert_false(items[1].written);
    assert_true(items[1].skipped);
    assert_int_equal(
        COUNT(f, "SELECT count(*) FROM queuer.batches WHERE batch_id = '%s' AND status = 'Pending'",
              other_id),
        1);
    assert_int_equal(COUNT(f,
                           "SELECT count(*) FROM queuer.batches WHERE batch_id = '%s' AND status = "
                           "'Committed'",
                           f->ids[0]),
                     1);

    /* the lock gone, the next group writes it */
    itest_exec(locker, "ROLLBACK");
    qw_db_close(locker);
    assert_int_equal(qw_outcome_writer_write(&w, f->db, "w1", f->inc, &items[1], 1, &err), QW_OK);
    assert_true(items[1].written);
    assert_false(items[1].skipped);
    qw_outcome_writer_free(&w);
}

/*
 * A lost COMMIT answer is recovered: a write retried after its connection dropped finds the
 * state it set itself; re-read by key and epoch, it counts as written
 * instead of a lost claim.
 */
static void test_recheck_after_unknown_outcome(void **state)
{
    struct fixture *f = *state;
    struct qw_job job = {.kind = QW_JOB_SUBMIT, .epoch = 7};
    snprintf(job.service_id, sizeof(job.service_id), "%s", SVC);
    snprintf(job.batch_id, sizeof(job.batch_id), "%s", f->ids[0]);
    struct qw_outcome_item item = {.job = &job};
    item.outcome = (struct qw_outcome){.expect = QW_EXPECT_PENDING,
                                       .status = QW_STATUS_COMMITTED,
                                       .submitted = true,
                                       .retry_ms = QW_OUTCOME_NO_RETRY,
                                       .go_on = true,
                                       .after = QW_AFTER_END_FINAL};
    struct qw_outcome_writer w;
    qw_outcome_writer_init(&w);
    struct qw_error err;
    qw_error_clear(&err);
    /* the first write commits, but its answer is "lost" */
    assert_int_equal(qw_outcome_writer_write(&w, f->db, "w1", f->inc, &item, 1, &err), QW_OK);
    assert_true(item.written);
    /* the retry matches nothing ... */
    assert_int_equal(qw_outcome_writer_write(&w, f->db, "w1", f->inc, &item, 1, &err), QW_OK);
    assert_false(item.written);
    /* ... and the re-read finds it was ours */
    assert_int_equal(qw_outcome_writer_recheck(&w, f->db, "w1", &item, 1, &err), QW_OK);
    assert_true(item.written);
    assert_true(item.rechecked);
    /* another instance's view of it is not ours */
    item.written = item.rechecked = false;
    assert_int_equal(qw_outcome_writer_recheck(&w, f->db, "w2", &item, 1, &err), QW_OK);
    assert_false(item.written);
    qw_outcome_writer_free(&w);

    /* a mark whose COMMIT answer was lost is found again by key and epoch */
    struct qw_queue_bufs bufs;
    qw_queue_bufs_init(&bufs);
    qw_pgarray_text(&bufs.arr[0], f->ids[1]);
    qw_pgarray_text(&bufs.arr[0], f->ids[2]);
    qw_pgarray_text(&bufs.arr[1], SVC);
    qw_pgarray_text(&bufs.arr[1], SVC);
    qw_pgarray_int(&bufs.arr[2], 7);
    qw_pgarray_int(&bufs.arr[2], 7);
    qw_pgarray_text(&bufs.arr[3], "");
    qw_pgarray_text(&bufs.arr[3], "");
    /* the fast path of the write above marked ids[1] (Submitting by w1 at epoch 7) */
    const char *mark[5] = {"w1", qw_pgarray_finish(&bufs.arr[0]), qw_pgarray_finish(&bufs.arr[1]),
                           qw_pgarray_finish(&bufs.arr[2]), qw_pgarray_finish(&bufs.arr[3])};
    (void)mark; /* the literals stay in bufs, as after a real attempt */
    struct qw_queue_result r;
    assert_int_equal(qw_queue_recheck_marks(f->db, "w1", f->inc, &bufs, &r, &err), QW_OK);
    assert_int_equal(r.n_jobs, 1);
    assert_string_equal(r.jobs->batch_id, f->ids[1]);
    assert_int_equal(r.jobs->kind, QW_JOB_SUBMIT);
    assert_true(r.jobs->payload_len > 0);
    qw_queue_result_free(&r);
    assert_int_equal(qw_queue_recheck_marks(f->db, "w2", f->inc2, &bufs, &r, &err), QW_OK);
    assert_int_equal(r.n_jobs, 0);
    qw_queue_bufs_free(&bufs);
}

/* An expectation the statement does not know is an error, not the widest check. */
static void test_unknown_expectation_is_refused(void **state)
{
    struct fixture *f = *state;
    char outcomes[512];
    snprintf(outcomes, sizeof(outcomes), "{\"(%s," SVC ",7,anything,Committed,t,0,,,,f,f)\"}",
             f->ids[0]);
    const char *params[] = {"w1", outcomes, f->inc};
    struct qw_error err;
    qw_error_clear(&err);
    assert_int_equal(qw_db_query(f->db, "outcomes_record", 3, params, NULL, &err), QW_ERR_DB);
    assert_string_equal(err.sqlstate, "22P02"); /* invalid input value for enum */
    assert_int_equal(
        COUNT(f, "SELECT count(*) FROM queuer.batches WHERE batch_id = '%s' AND status = 'Pending'",
              f->ids[0]),
        1);
    /* and the writer refuses an out-of-range expectation before sending anything */
    struct qw_job job = {.epoch = 7};
    snprintf(job.service_id, sizeof(job.service_id), "%s", SVC);
    snprintf(job.batch_id, sizeof(job.batch_id), "%s", f->ids[0]);
    struct qw_outcome_item item = {.job = &job};
    item.outcome.expect = (enum qw_outcome_expect)42;
    struct qw_outcome_writer w;
    qw_outcome_writer_init(&w);
    assert_int_equal(qw_outcome_writer_write(&w, f->db, "w1", f->inc, &item, 1, &err),
                     QW_ERR_INVALID);
    qw_outcome_writer_free(&w);
}

/* Whether the claim row's open_from is the created_at of `id`. */
static int open_from_is(struct fixture *f, const char *id)
{
    return (int)COUNT(f,
                      "SELECT count(*) FROM queuer.service_id_claims c JOIN queuer.batches b "
                      "ON b.service_id = c.service_id WHERE b.batch_id = '%s' "
                      "AND c.open_from = b.created_at",
                      id);
}

/* Whether the claim row has no open_from (no bound: the looks start at the first batch). */
static int open_from_is_null(struct fixture *f)
{
    return (int)itest_scalar(
        f->db, "SELECT count(*) FROM queuer.service_id_claims WHERE open_from IS NULL");
}

/* Records Committed for ids[i], marked for submission by the fast path (expect posting). */
static struct qw_db_res *record_committed(struct fixture *f, int i)
{
    return record_batch(f, i, "posting", "Committed", 7, 1);
}

/*
 * A turn that ends moves the service's open_from to the next open batch
 * it found, and to the batch that ended when none is left; the next look
 * starts there.
 */
static void test_open_from_follows_the_turns(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(open_from_is_null(f), 1);
    qw_db_res_free(record(f, "Committed", 7, 1));
    assert_int_equal(open_from_is(f, f->ids[1]), 1);
    qw_db_res_free(record_committed(f, 1));
    assert_int_equal(open_from_is(f, f->ids[2]), 1);
    struct qw_db_res *res = record_committed(f, 2);
    assert_int_equal(qw_db_res_rows(res), 1); /* written; no next batch */
    qw_db_res_free(res);
    assert_int_equal(open_from_is(f, f->ids[2]), 1);
}

/*
 * A final batch made open again (an operator's retry of an Invalid batch)
 * clears open_from in the same transaction, so the next turn that ends
 * looks from the service's first batch, finds the reopened one as its
 * oldest open batch and marks it, not the younger one behind it, and sets
 * the bound to it again.
 */
static void test_reopened_batch_is_found(void **state)
{
    struct fixture *f = *state;
    qw_db_res_free(record(f, "Invalid", 7, 1));
    assert_int_equal(open_from_is(f, f->ids[1]), 1);
    char sql[512];
    snprintf(sql, sizeof(sql), "SELECT outcome FROM queuer.batch_retry_invalid('%s', 'by test')",
             f->ids[0]);
    char *outcome = itest_string(f->db, sql);
    assert_string_equal(outcome, "done");
    free(outcome);
    assert_int_equal(open_from_is_null(f), 1);
    struct qw_db_res *res = record_committed(f, 1);
    int next = row_of_kind(res, 'n');
    assert_string_equal(qw_db_res_get(res, next, 0), "n");
    assert_string_equal(qw_db_res_get(res, next, 1), f->ids[0]);
    qw_db_res_free(res);
    assert_int_equal(open_from_is(f, f->ids[0]), 1);
    /* and the younger one still waits for its turn */
    assert_int_equal(
        COUNT(f, "SELECT count(*) FROM queuer.batches WHERE batch_id = '%s' AND NOT submitted",
              f->ids[2]),
        1);
}

/* Whether the claim row names ids[i] in flight (i = -1: names none). */
static int in_flight_is(struct fixture *f, int i)
{
    return (int)COUNT(f,
                      "SELECT count(*) FROM queuer.service_id_claims "
                      "WHERE in_flight IS NOT DISTINCT FROM nullif('%s', '')",
                      i < 0 ? "" : f->ids[i]);
}

/*
 * The outcome statement keeps the claim row's in_flight: it names the
 * next batch when a turn ends and the fast path marks it, keeps naming a
 * batch that stays in flight (Pending), and names none once the batch
 * leaves flight with nothing marked after it.
 */
static void test_in_flight_follows_the_turns(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(in_flight_is(f, 0), 1);
    qw_db_res_free(record(f, "Committed", 7, 1));
    assert_int_equal(in_flight_is(f, 1), 1);
    qw_db_res_free(record_batch(f, 1, "posting", "Pending", 7, 1));
    assert_int_equal(in_flight_is(f, 1), 1);
    qw_db_res_free(record_batch(f, 1, "pending", "Unknown", 7, 1));
    assert_int_equal(in_flight_is(f, -1), 1);
}

/*
 * A turn that ends does not mark the next batch while the claim row names
 * another batch in flight than the one whose turn ended: it reports the
 * next batch as not marked and leaves the name alone.
 */
static void test_next_waits_for_another_batch_named_in_flight(void **state)
{
    struct fixture *f = *state;
    char sql[256];
    snprintf(sql, sizeof(sql), "UPDATE queuer.service_id_claims SET in_flight = '%s'", f->ids[2]);
    itest_exec(f->db, sql);
    struct qw_db_res *res = record(f, "Committed", 7, 1);
    assert_int_equal(qw_db_res_rows(res), 2);
    int more = row_of_kind(res, 'm');
    assert_string_equal(qw_db_res_get(res, more, 0), "m");
    assert_string_equal(qw_db_res_get(res, more, 1), f->ids[1]);
    qw_db_res_free(res);
    assert_int_equal(in_flight_is(f, 2), 1);
    assert_int_equal(
        COUNT(f, "SELECT count(*) FROM queuer.batches WHERE batch_id = '%s' AND NOT submitted",
              f->ids[1]),
        1);
}

/* Marks ids[i] as w1 at epoch 7, seen without a status; returns the rows marked. */
static int mark(struct fixture *f, int i)
{
    return itest_mark(f->db, "w1", f->inc, SVC, f->ids[i], 7, "");
}

/*
 * The mark leaves a service's oldest open batch alone while the claim row
 * names a younger one in flight (a final batch made open again while the
 * next one was out), and marks it, naming it, once that one has ended.
 */
static void test_mark_waits_for_the_batch_named_in_flight(void **state)
{
    struct fixture *f = *state;
    qw_db_res_free(record(f, "Invalid", 7, 1)); /* ids[1] marked, named */
    char sql[256];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET status = NULL, submitted = false WHERE batch_id = '%s'",
             f->ids[0]);
    itest_exec(f->db, sql);
    assert_int_equal(mark(f, 0), 0);
    assert_int_equal(in_flight_is(f, 1), 1);
    qw_db_res_free(record_batch(f, 1, "posting", "Committed", 7, 0));
    assert_int_equal(in_flight_is(f, -1), 1);
    assert_int_equal(mark(f, 0), 1);
    assert_int_equal(in_flight_is(f, 0), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_final_marks_the_next_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_next_ties_go_by_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_history_names_the_state_left, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_next_without_go_on, setup, teardown),
        cmocka_unit_test_setup_teardown(test_next_delayed_only_when_due, setup, teardown),
        cmocka_unit_test_setup_teardown(test_next_delayed_due_is_retried, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_reports_each_next_not_marked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_final_marks_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_epoch_writes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_round_trips_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_expectation_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_outcome_is_isolated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recheck_after_unknown_outcome, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_locked_claim_does_not_fail_the_group, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_locked_own_claim_is_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_from_follows_the_turns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopened_batch_is_found, setup, teardown),
        cmocka_unit_test_setup_teardown(test_in_flight_follows_the_turns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_next_waits_for_another_batch_named_in_flight, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_mark_waits_for_the_batch_named_in_flight, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
