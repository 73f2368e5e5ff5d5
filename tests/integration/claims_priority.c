/*
 * Integration: free services are picked up by priority (docs/CLAIMS.md
 * "Pickup"). With less room than free services with work, pickup gives the
 * highest head priority first; it gives every live instance at most its
 * room (the fair share less the claims it holds, and at most so many per
 * call), in turns; one worker at a time picks (the one holding the pickup
 * lock), and the other receivers are woken on their own channels. The view
 * queuer.claims shows the head batch's priority live; the claim row's
 * head_priority is the head's when a free service gets work or a claim
 * goes back, and a release skips a claim row another transaction holds.
 */
#include "itest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "queuer/claims.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SVC_FMT "prior-aaaaa::%c%03d"

struct fixture {
    struct itest_pair pg; /* a: the worker w1, or the owner; b: another session (w2) */
    uint64_t seed;        /* next sample seed */
};
_Static_assert(offsetof(struct fixture, pg) == 0, "itest_pair_teardown() frees the fixture");

/* w1 and w2, live: leases of an hour (soft) and two (hard). */
static const struct itest_instance live[] = {
    {"w1", 3600 * 1000, 7200 * 1000},
    {"w2", 3600 * 1000, 7200 * 1000},
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->seed = 7000;
    itest_pair_open(&f->pg, "claims_priority", live, 2);
    *state = f;
    return 0;
}

static void svc(char *out, size_t len, char kind, int i)
{
    snprintf(out, len, SVC_FMT, kind, i);
}

/* Moves every lease into the past (`lapse`) or back: while lapsed, an
 * enqueue gives a free service to nobody (it stays free with work). */
static void leases_lapsed(struct fixture *f, int lapse)
{
    itest_exec(f->pg.a, lapse ? "UPDATE queuer.instances SET lease_1 = lease_1 - interval '1 day'"
                              : "UPDATE queuer.instances SET lease_1 = lease_1 + interval '1 day'");
}

/* One batch for each of `n` services named by `kind`, at `priority`, while
 * no instance is live: they stay free with work, for pickup. */
static void services(struct fixture *f, char kind, int n, int priority)
{
    char s[32];
    leases_lapsed(f, 1);
    for (int i = 0; i < n; i++) {
        svc(s, sizeof(s), kind, i);
        itest_enqueue_sample_at(f->pg.a, s, f->seed++, priority, NULL);
    }
    leases_lapsed(f, 0);
}

/* itest_scalar() on the other session of printf-formatted SQL. */
__attribute__((format(printf, 2, 3))) static int64_t scalar(struct fixture *f, const char *fmt, ...)
{
    char sql[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    return itest_scalar(f->pg.b, sql);
}

/* Free services are never marked without work while they have some, and the
 * view's n_open and head_priority are the batches'. */
static void assert_free_work_marked(struct fixture *f)
{
    assert_int_equal(itest_scalar(f->pg.b,
                                  "SELECT count(*) FROM queuer.claims v "
                                  "JOIN queuer.service_id_claims c USING (service_id) "
                                  "WHERE (c.claimant IS NULL AND NOT c.has_work AND v.n_open > 0) "
                                  "OR v.n_open <> (SELECT count(*) FROM queuer.batches b "
                                  "WHERE b.service_id = v.service_id "
                                  "AND queuer.batch_is_work(b.status, b.retry_at)) "
                                  "OR v.head_priority <> coalesce((SELECT b.priority "
                                  "FROM queuer.batches b WHERE b.service_id = v.service_id "
                                  "AND (b.status IS NULL OR b.status IN ('Pending', "
                                  "'Unknown', 'Delayed')) ORDER BY b.created_at, "
                                  "b.batch_id LIMIT 1), 0)"),
                     0);
}

/* One claims cycle of w1 as the worker runs it, its fair share capped at `max_claims`. */
static int cycle(struct fixture *f, size_t held, int max_claims)
{
    struct qw_claims_result r = {0};
    itest_claims_cycle(f->pg.a, "w1", held, NULL, max_claims, &r);
    int acquired = r.acquired;
    assert_int_equal(r.n_claims, (size_t)acquired);
    assert_true(r.picker);
    qw_claims_result_free(&r);
    return acquired;
}

/* w1's claims whose head is at `priority`. */
static int64_t held_at(struct fixture *f, const char *priority)
{
    return scalar(f,
                  "SELECT count(*) FROM queuer.claims WHERE claimant = 'w1' AND head_priority = %s",
                  priority);
}

/* Of the free services at `priority`, how many of the `n` with the highest
 * hash (pickup's order within a priority) `who` holds now. */
static int64_t first_in_hash_order(struct fixture *f, int priority, int n, const char *who)
{
    return scalar(f,
                  "SELECT count(*) FROM (SELECT service_id FROM queuer.claims "
                  "WHERE head_priority = %d ORDER BY hashtext(service_id) DESC LIMIT %d) x "
                  "JOIN queuer.service_id_claims c USING (service_id) WHERE c.claimant = '%s'",
                  priority, n, who);
}

/*
 * 16 services at priority 0, 4 at 5, 4 at 10, enqueued low first while no
 * instance was live; w1 alone may hold 6: it takes the four at 10, then two
 * at 5 (the first two in hash order); with room for 10, the other two at 5
 * and then two at 0.
 */
static void test_scarce_claims_take_priority_first(void **state)
{
    struct fixture *f = *state;
    /* w1 alone: its fair share is every service with work, capped by max_claims */
    itest_exec(f->pg.a, "DELETE FROM queuer.instances WHERE instance_id = 'w2'");
    services(f, 'l', 16, 0);
    services(f, 'm', 4, 5);
    services(f, 'h', 4, 10);
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims "
                               "WHERE claimant IS NULL AND has_work"),
                     24);
    assert_free_work_marked(f);

    assert_int_equal(cycle(f, 0, 6), 6);
    assert_int_equal(held_at(f, "10"), 4);
    assert_int_equal(held_at(f, "5"), 2);
    assert_int_equal(held_at(f, "0"), 0);
    assert_int_equal(first_in_hash_order(f, 5, 2, "w1"), 2);

    assert_int_equal(cycle(f, 6, 10), 4);
    assert_int_equal(held_at(f, "10"), 4);
    assert_int_equal(held_at(f, "5"), 4);
    assert_int_equal(held_at(f, "0"), 2);
    assert_int_equal(first_in_hash_order(f, 0, 2, "w1"), 2);
    assert_free_work_marked(f);
}

static int64_t row_head(struct fixture *f, const char *service)
{
    return scalar(f, "SELECT head_priority FROM queuer.service_id_claims WHERE service_id = '%s'",
                  service);
}

static int64_t view_head(struct fixture *f, const char *service)
{
    return scalar(f, "SELECT head_priority FROM queuer.claims WHERE service_id = '%s'", service);
}

static void batch_sql(struct fixture *f, const char *set, const char *batch_id)
{
    char sql[320];
    snprintf(sql, sizeof(sql), "UPDATE queuer.batches SET %s WHERE batch_id = '%s'", set, batch_id);
    itest_exec(f->pg.a, sql);
}

/* claims_release of `service` by w1; returns the rows released. */
static int release(struct qw_db *db, const char *service)
{
    char list[64];
    snprintf(list, sizeof(list), "{%s}", service);
    const char *params[] = {"w1", list};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(db, "claims_release", 2, params, &res, &err) != QW_OK)
        fail_msg("claims_release: %s", err.msg);
    int rows = qw_db_res_rows(res);
    qw_db_res_free(res);
    return rows;
}

static void hold_w1(struct fixture *f, const char *service)
{
    char sql[256];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.service_id_claims SET claimant = 'w1', claim_epoch = claim_epoch + 1, "
             "expiry_1 = now(), expiry_2 = now() WHERE service_id = '%s'",
             service);
    itest_exec(f->pg.a, sql);
}

/*
 * The view follows the head batch (the oldest non-final one) through every
 * change: a later batch of higher priority does not raise it; when the head
 * ends, the next batch's priority counts; a final batch made non-final
 * again, an operator's change of the head's priority and a delete move it;
 * no work left is 0. The claim row of a free service takes its head's
 * priority when it gets work (the first batch's, or the batch made
 * non-final again) and, exactly, when its claim goes back.
 */
static void test_head_priority_follows_head(void **state)
{
    struct fixture *f = *state;
    char s[32], b1[129], b2[129], b3[129];
    svc(s, sizeof(s), 'x', 1);

    leases_lapsed(f, 1);
    itest_enqueue_sample_at(f->pg.a, s, f->seed++, 0, b1);
    itest_enqueue_sample_at(f->pg.a, s, f->seed++, 10, b2);
    assert_int_equal(view_head(f, s), 0);
    assert_int_equal(row_head(f, s), 0);
    itest_enqueue_sample_at(f->pg.a, s, f->seed++, 3, b3);
    assert_int_equal(view_head(f, s), 0);
    assert_int_equal(row_head(f, s), 0);
    leases_lapsed(f, 0);
    assert_free_work_marked(f);

    batch_sql(f, "status = 'Committed', status_at = now()", b1);
    assert_int_equal(view_head(f, s), 10);
    batch_sql(f, "status = 'Invalid', status_at = now()", b2);
    assert_int_equal(view_head(f, s), 3);

    /* an operator hands b2 back (final -> not final): it is older than b3 */
    batch_sql(f, "status = NULL", b2);
    assert_int_equal(view_head(f, s), 10);
    batch_sql(f, "priority = -7", b2);
    assert_int_equal(view_head(f, s), -7);
    /* a change of a batch behind the head changes nothing */
    batch_sql(f, "priority = 9", b3);
    assert_int_equal(view_head(f, s), -7);
    assert_free_work_marked(f);

    /* held, then given back: the row says the head exactly */
    hold_w1(f, s);
    assert_int_equal(release(f->pg.a, s), 1);
    assert_int_equal(row_head(f, s), -7);
    assert_int_equal(scalar(f,
                            "SELECT has_work::int FROM queuer.service_id_claims "
                            "WHERE service_id = '%s'",
                            s),
                     1);

    char sql[320];
    snprintf(sql, sizeof(sql), "DELETE FROM queuer.batches WHERE batch_id = '%s'", b2);
    itest_exec(f->pg.a, sql);
    assert_int_equal(view_head(f, s), 9);
    batch_sql(f, "status = 'Valid', status_at = now()", b3);
    assert_int_equal(view_head(f, s), 0);
    assert_int_equal(scalar(f, "SELECT n_open FROM queuer.claims WHERE service_id = '%s'", s), 0);
    /* given back without work: exactly none */
    hold_w1(f, s);
    assert_int_equal(release(f->pg.a, s), 1);
    assert_int_equal(scalar(f,
                            "SELECT count(*) FROM queuer.service_id_claims "
                            "WHERE service_id = '%s' AND NOT has_work AND head_priority = 0",
                            s),
                     1);

    /* free without work, a final batch made non-final again: work, at its priority */
    leases_lapsed(f, 1);
    batch_sql(f, "status = NULL", b3);
    assert_int_equal(row_head(f, s), 9);
    assert_free_work_marked(f);
    batch_sql(f, "status = 'Valid'", b3);
    hold_w1(f, s);
    assert_int_equal(release(f->pg.a, s), 1);
    /* work again by an enqueue: the new head's priority in the same row update */
    itest_enqueue_sample_at(f->pg.a, s, f->seed++, 4, NULL);
    assert_int_equal(row_head(f, s), 4);
    /* a first batch of a new service */
    svc(s, sizeof(s), 'x', 2);
    itest_enqueue_sample_at(f->pg.a, s, f->seed++, 8, NULL);
    assert_int_equal(row_head(f, s), 8);
    leases_lapsed(f, 0);
    assert_free_work_marked(f);
}

/*
 * A release skips a claim row another transaction holds (an outcome of the
 * service in progress: the trigger writes the row's n_out), without
 * waiting; once that committed, the claim goes back with the head the
 * outcome left.
 */
static void test_release_skips_a_claim_row_in_use(void **state)
{
    struct fixture *f = *state;
    char s[32], b1[129], b2[129];
    svc(s, sizeof(s), 'y', 1);
    itest_enqueue_sample_at(f->pg.a, s, f->seed++, 0, b1);
    itest_enqueue_sample_at(f->pg.a, s, f->seed++, 5, b2);
    hold_w1(f, s);

    itest_exec(f->pg.a, "BEGIN");
    batch_sql(f, "status = 'Committed', status_at = now()", b1);
    struct qw_db *w1 = itest_connect(f->pg.conninfo);
    itest_exec(w1, "SET lock_timeout = '5s'");
    assert_int_equal(release(w1, s), 0);
    itest_exec(f->pg.a, "COMMIT");
    assert_int_equal(release(w1, s), 1);
    qw_db_close(w1);
    assert_int_equal(scalar(f,
                            "SELECT count(*) FROM queuer.service_id_claims "
                            "WHERE service_id = '%s' AND claimant IS NULL AND has_work "
                            "AND head_priority = 5",
                            s),
                     1);
}

/* Pickup by `who` (slack 0, no cap, at most `each` to each instance): the
 * rows with a service (given to `who`); *picker says whether it held the
 * pickup lock, *picked how many it gave out in all. */
static int pickup(struct qw_db *db, const char *who, const char *each, bool *picker, int *picked)
{
    const char *params[] = {who, "100", "30000", "60000", "0", "0", each};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(db, "claims_acquire", 7, params, &res, &err) != QW_OK)
        fail_msg("claims_acquire: %s", err.msg);
    int rows = qw_db_res_rows(res), mine = 0;
    assert_true(rows >= 1);
    *picker = strcmp(qw_db_res_get(res, 0, 3), "t") == 0;
    *picked = (int)qw_db_res_int(res, 0, 4);
    for (int i = 0; i < rows; i++)
        mine += !qw_db_res_isnull(res, i, 0);
    qw_db_res_free(res);
    return mine;
}

/* Two idle services held by w2 (no work: claims are kept). */
static void w2_holds_two_idle(struct fixture *f)
{
    itest_exec(f->pg.a, "INSERT INTO queuer.service_ingest (service_id) "
                        "VALUES ('prior-ccccc::0001'), ('prior-ccccc::0002'); "
                        "INSERT INTO queuer.service_id_claims (service_id, claimant, claim_epoch, "
                        "expiry_1, expiry_2) VALUES "
                        "('prior-ccccc::0001', 'w2', 1, now(), now()), "
                        "('prior-ccccc::0002', 'w2', 1, now(), now())");
}

/*
 * Pickup gives every live instance its room, in turns, highest priority
 * first: w2 holds 2 idle claims, 6 services wait (3 at 10, 3 at 0), so the
 * even share is 4: w1 may take 4, w2 2. In turns by priority (w1, w2, w1,
 * w2, w1, w1), w1 gets two at 10 and w2 one; all six go out. w2 is woken
 * on its own channel with its two services and their epochs.
 */
static void test_pickup_gives_each_its_room_in_turns(void **state)
{
    struct fixture *f = *state;
    w2_holds_two_idle(f);
    services(f, 'h', 3, 10);
    services(f, 'l', 3, 0);
    struct qw_db *listener = itest_listen_instance(f->pg.conninfo, "w2");

    bool picker = false;
    int picked = 0;
    assert_int_equal(pickup(f->pg.a, "w1", "1000", &picker, &picked), 4);
    assert_true(picker);
    assert_int_equal(picked, 6);
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims WHERE claimant = "
                               "'w1' AND service_id LIKE 'prior-aaaaa::h%%'"),
                     2);
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims WHERE claimant = "
                               "'w2' AND service_id LIKE 'prior-aaaaa::h%%'"),
                     1);
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims WHERE claimant = "
                               "'w2' AND service_id LIKE 'prior-aaaaa::%%'"),
                     2);

    /* w2's wake-up names its two new services at their epochs */
    char *want =
        itest_string(f->pg.b, "SELECT string_agg(service_id || ':' || claim_epoch, ' ' "
                              "ORDER BY service_id) FROM queuer.service_id_claims "
                              "WHERE claimant = 'w2' AND service_id LIKE 'prior-aaaaa::%'");
    char *got = itest_notifications(listener, 5000);
    char sorted[256];
    /* the payload's order is the statement's: compare as sets of two */
    const char *sp = strchr(got, ' ');
    assert_non_null(sp);
    char first[64], second[64];
    snprintf(first, sizeof(first), "%.*s", (int)(sp - got), got);
    snprintf(second, sizeof(second), "%.*s", (int)strcspn(sp + 1, "\n"), sp + 1);
    assert_string_equal(got + strlen(got) - 1, "\n");
    if (strcmp(first, second) < 0)
        snprintf(sorted, sizeof(sorted), "%s %s", first, second);
    else
        snprintf(sorted, sizeof(sorted), "%s %s", second, first);
    assert_string_equal(sorted, want);
    assert_int_equal(strlen(got), strlen(want) + 1); /* one notification, two items */
    free(want);
    free(got);
    qw_db_close(listener);
}

/* At most `each` per instance in one call, highest priority first: with 1,
 * w1 and w2 get one service at 10 each; the others wait for the next call. */
static void test_pickup_is_bounded_per_receiver(void **state)
{
    struct fixture *f = *state;
    services(f, 'h', 3, 10);
    services(f, 'l', 3, 0);
    bool picker = false;
    int picked = 0;
    assert_int_equal(pickup(f->pg.a, "w1", "1", &picker, &picked), 1);
    assert_int_equal(picked, 2);
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims WHERE claimant IN "
                               "('w1', 'w2') AND service_id LIKE 'prior-aaaaa::h%%'"),
                     2);
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims "
                               "WHERE claimant IS NULL AND has_work"),
                     4);
}

/*
 * One worker at a time picks: while another transaction holds the pickup
 * lock, pickup gives nothing and says so (another worker picks); once it
 * is free, pickup gives out.
 */
static void test_pickup_only_by_the_lock_holder(void **state)
{
    struct fixture *f = *state;
    services(f, 'h', 2, 10);
    itest_exec(f->pg.b, "BEGIN");
    itest_exec(f->pg.b, "SELECT pg_advisory_xact_lock(hashtext('queuer.claims_pickup'))");
    bool picker = true;
    int picked = -1;
    assert_int_equal(pickup(f->pg.a, "w1", "1000", &picker, &picked), 0);
    assert_false(picker);
    assert_int_equal(picked, 0);
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims "
                               "WHERE claimant IS NULL AND has_work"),
                     2);
    itest_exec(f->pg.b, "COMMIT");
    assert_int_equal(pickup(f->pg.a, "w1", "1000", &picker, &picked), 1);
    assert_true(picker);
    assert_int_equal(picked, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_scarce_claims_take_priority_first, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_head_priority_follows_head, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_release_skips_a_claim_row_in_use, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_pickup_gives_each_its_room_in_turns, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_pickup_is_bounded_per_receiver, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_pickup_only_by_the_lock_holder, setup,
                                        itest_pair_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
