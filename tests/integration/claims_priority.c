/*
 * Integration: workers claim services by priority (migration
 * 0013, docs/CLAIMS.md "Claiming order"). With fewer claims to give than
 * free services with work, the claims cycle takes the highest head
 * priority first, one priority at a time from a random place within it;
 * the claim row's head_priority follows the service's head batch (its
 * oldest non-final one), not the newest or the highest, also when two
 * sessions change one service at once; two claimers at one priority start
 * at their own places and both commit.
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
#include <sys/wait.h>
#include <unistd.h>

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

/* One batch for each of `n` services named by `kind`, at `priority`. */
static void services(struct fixture *f, char kind, int n, int priority)
{
    char s[32];
    for (int i = 0; i < n; i++) {
        svc(s, sizeof(s), kind, i);
        itest_enqueue_sample_at(f->pg.a, s, f->seed++, priority, NULL);
    }
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

/* head_priority and n_open_nonzero as the batches say they should be, for every service. */
static void assert_heads_exact(struct fixture *f)
{
    assert_int_equal(itest_scalar(f->pg.b,
                                  "SELECT count(*) FROM queuer.service_id_claims c "
                                  "WHERE c.head_priority <> coalesce((SELECT b.priority "
                                  "FROM queuer.batches b WHERE b.service_id = c.service_id "
                                  "AND (b.status IS NULL OR b.status IN ('Pending', "
                                  "'Unknown', 'Delayed')) ORDER BY b.created_at, "
                                  "b.batch_id LIMIT 1), 0) "
                                  "OR c.n_open_nonzero <> (SELECT count(*) "
                                  "FROM queuer.batches b WHERE b.service_id = c.service_id "
                                  "AND b.priority <> 0 AND (b.status IS NULL OR b.status IN "
                                  "('Pending', 'Unknown', 'Delayed')))"),
                     0);
}

/* One claims cycle of w1 as the worker runs it, its fair share capped at `max_claims`. */
static int cycle(struct fixture *f, struct qw_rng *rng, size_t held, int max_claims)
{
    struct qw_claims_result r = {0};
    itest_claims_cycle(f->pg.a, "w1", held, NULL, max_claims, rng, &r);
    int acquired = r.acquired;
    assert_int_equal(r.n_claims, (size_t)acquired);
    qw_claims_result_free(&r);
    return acquired;
}

/* w1's claims at `priority`. */
static int64_t held_at(struct fixture *f, const char *priority)
{
    return scalar(f,
                  "SELECT count(*) FROM queuer.service_id_claims "
                  "WHERE claimant = 'w1' AND head_priority = %s",
                  priority);
}

/*
 * 16 services at priority 0, 4 at 5, 4 at 10, enqueued low first; w1 may
 * hold 6: it takes the four at 10, then two at 5, those two the first in
 * hash order from its random start (wrapping); with room for 10, the
 * other two at 5 and then two at 0. The old claiming (hash order only)
 * took 6 of the 24 wherever its start fell.
 */
static void test_scarce_claims_take_priority_first(void **state)
{
    struct fixture *f = *state;
    /* w1 alone: its fair share is every service with work, capped by max_claims */
    itest_exec(f->pg.a, "DELETE FROM queuer.instances WHERE instance_id = 'w2'");
    services(f, 'l', 16, 0);
    services(f, 'm', 4, 5);
    services(f, 'h', 4, 10);
    assert_heads_exact(f);

    struct qw_rng rng, copy;
    qw_rng_seed(&rng, 42);
    copy = rng;
    char start[16];
    snprintf(start, sizeof(start), "%d", (int32_t)(uint32_t)qw_rng_next(&copy));
    /* the two services at 5 that come first from the start, wrapping */
    int64_t expected = scalar(f,
                              "SELECT count(*) FROM (SELECT service_id FROM "
                              "queuer.service_id_claims WHERE head_priority = 5 "
                              "ORDER BY hashtext(service_id) < %s, hashtext(service_id) "
                              "LIMIT 2) x JOIN queuer.service_id_claims c USING (service_id) "
                              "WHERE c.claimant IS NULL",
                              start);
    assert_int_equal(expected, 2);

    assert_int_equal(cycle(f, &rng, 0, 6), 6);
    assert_int_equal(held_at(f, "10"), 4);
    assert_int_equal(held_at(f, "5"), 2);
    assert_int_equal(held_at(f, "0"), 0);
    assert_int_equal(scalar(f,
                            "SELECT count(*) FROM (SELECT service_id FROM "
                            "queuer.service_id_claims WHERE head_priority = 5 "
                            "ORDER BY hashtext(service_id) < %s, hashtext(service_id) "
                            "LIMIT 2) x JOIN queuer.service_id_claims c USING (service_id) "
                            "WHERE c.claimant = 'w1'",
                            start),
                     2);

    assert_int_equal(cycle(f, &rng, 6, 10), 4);
    assert_int_equal(held_at(f, "10"), 4);
    assert_int_equal(held_at(f, "5"), 4);
    assert_int_equal(held_at(f, "0"), 2);
}

static int64_t head_of(struct fixture *f, const char *service)
{
    return scalar(f, "SELECT head_priority FROM queuer.service_id_claims WHERE service_id = '%s'",
                  service);
}

static void finish(struct fixture *f, const char *batch_id, const char *status)
{
    char sql[320];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.batches SET status = '%s', status_at = now() WHERE batch_id = '%s'",
             status, batch_id);
    itest_exec(f->pg.a, sql);
}

/*
 * The claim row follows the head batch: a new service takes its first
 * batch's priority; a later batch of higher priority does not raise it
 * (order within a service is creation order); when the head ends, the
 * next batch's priority counts; a final batch made non-final again, an
 * operator's change of the head's priority and a delete move it too; no
 * work left is 0.
 */
static void test_head_priority_follows_head(void **state)
{
    struct fixture *f = *state;
    char s[32], b1[129], b2[129], b3[129];
    svc(s, sizeof(s), 'x', 1);

    itest_enqueue_sample_at(f->pg.a, s, f->seed++, 0, b1);
    itest_enqueue_sample_at(f->pg.a, s, f->seed++, 10, b2);
    assert_int_equal(head_of(f, s), 0);
    itest_enqueue_sample_at(f->pg.a, s, f->seed++, 3, b3);
    assert_int_equal(head_of(f, s), 0);

    assert_heads_exact(f);
    finish(f, b1, "Committed");
    assert_int_equal(head_of(f, s), 10);
    finish(f, b2, "Invalid");
    assert_int_equal(head_of(f, s), 3);

    /* an operator hands b2 back (final -> not final): it is older than b3 */
    char sql[320];
    snprintf(sql, sizeof(sql), "UPDATE queuer.batches SET status = NULL WHERE batch_id = '%s'", b2);
    itest_exec(f->pg.a, sql);
    assert_int_equal(head_of(f, s), 10);
    snprintf(sql, sizeof(sql), "UPDATE queuer.batches SET priority = -7 WHERE batch_id = '%s'", b2);
    itest_exec(f->pg.a, sql);
    assert_int_equal(head_of(f, s), -7);
    assert_heads_exact(f);
    /* a change of a batch behind the head changes nothing */
    snprintf(sql, sizeof(sql), "UPDATE queuer.batches SET priority = 9 WHERE batch_id = '%s'", b3);
    itest_exec(f->pg.a, sql);
    assert_int_equal(head_of(f, s), -7);

    snprintf(sql, sizeof(sql), "DELETE FROM queuer.batches WHERE batch_id = '%s'", b2);
    itest_exec(f->pg.a, sql);
    assert_int_equal(head_of(f, s), 9);
    finish(f, b3, "Valid");
    assert_int_equal(head_of(f, s), 0);
    assert_int_equal(
        scalar(f, "SELECT n_open FROM queuer.service_id_claims WHERE service_id = '%s'", s), 0);

    /* work again: the new head's priority in the same row update */
    itest_enqueue_sample_at(f->pg.a, s, f->seed++, 4, NULL);
    assert_int_equal(head_of(f, s), 4);
    /* a first batch of a new service */
    svc(s, sizeof(s), 'x', 2);
    itest_enqueue_sample_at(f->pg.a, s, f->seed++, 8, NULL);
    assert_int_equal(head_of(f, s), 8);
    assert_heads_exact(f);
}

/* Runs `sql` in a new session of a child process; returns its pid (exit 0: it committed). */
static pid_t exec_in_child(struct fixture *f, const char *sql)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct qw_db *db = itest_connect(f->pg.conninfo);
        struct qw_error err;
        qw_error_clear(&err);
        int rc = qw_db_exec(db, sql, &err);
        if (rc != QW_OK)
            fprintf(stderr, "child: %s\n", err.msg);
        qw_db_close(db);
        _exit(rc == QW_OK ? 0 : 1);
    }
    return pid;
}

/*
 * Two writers of one service at once, READ COMMITTED: A ends the head (b1,
 * priority 0) and holds its transaction open; B raises the next batch (b2)
 * from 5 to 9 and waits for the claim row A's trigger locked. When A
 * commits, B's probe must see both changes: 9. A probe that ran before B
 * had the row lock (in the statement that locks it) sees b1 still open
 * and writes 0.
 */
static void test_concurrent_writers_leave_head_exact(void **state)
{
    struct fixture *f = *state;
    char s[32], b1[129], b2[129], sql[320];
    svc(s, sizeof(s), 'y', 1);
    itest_enqueue_sample_at(f->pg.a, s, f->seed++, 0, b1);
    itest_enqueue_sample_at(f->pg.a, s, f->seed++, 5, b2);
    assert_int_equal(head_of(f, s), 0);

    itest_exec(f->pg.a, "BEGIN");
    finish(f, b1, "Committed");
    snprintf(sql, sizeof(sql), "UPDATE queuer.batches SET priority = 9 WHERE batch_id = '%s'", b2);
    pid_t child = exec_in_child(f, sql);
    int waited_ms = 0;
    while (itest_scalar(f->pg.b,
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND wait_event_type = 'Lock'") < 1) {
        assert_true(waited_ms < 10000);
        usleep(10000);
        waited_ms += 10;
    }
    itest_exec(f->pg.a, "COMMIT");
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(head_of(f, s), 9);
    assert_heads_exact(f);
}

/* The services claims_acquire takes from `start` at priority 0, as an array literal. */
static char *expected_from(struct fixture *f, const char *start, int n)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "SELECT array_agg(service_id ORDER BY service_id)::text FROM (SELECT service_id "
             "FROM queuer.service_id_claims WHERE claimant IS NULL AND has_work "
             "ORDER BY hashtext(service_id) < %s, hashtext(service_id) LIMIT %d) x",
             start, n);
    return itest_string(f->pg.b, sql);
}

static char *claimed_by(struct fixture *f, const char *who)
{
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT array_agg(service_id ORDER BY service_id)::text "
             "FROM queuer.service_id_claims WHERE claimant = '%s'",
             who);
    return itest_string(f->pg.b, sql);
}

static void acquire(struct qw_db *db, const char *who, const char *start, int expect_rows)
{
    const char *params[] = {who, "5", "30000", "60000", start, "1000"};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(db, "claims_acquire", 6, params, &res, &err) != QW_OK)
        fail_msg("claims_acquire: %s", err.msg);
    assert_int_equal(qw_db_res_rows(res), expect_rows);
    qw_db_res_free(res);
}

/* claims_acquire for w1 at most at `level`: rows taken, and the next level
 * it names (INT32_MIN for NULL), the same in every row. */
static int acquire_at(struct fixture *f, const char *level, int *next)
{
    const char *params[] = {"w1", "5", "30000", "60000", "0", level};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(f->pg.a, "claims_acquire", 6, params, &res, &err) != QW_OK)
        fail_msg("claims_acquire: %s", err.msg);
    int rows = qw_db_res_rows(res);
    for (int i = 0; i < rows; i++) {
        int n = qw_db_res_isnull(res, i, 3) ? INT32_MIN : (int)qw_db_res_int(res, i, 3);
        if (i > 0)
            assert_int_equal(n, *next);
        *next = n;
    }
    qw_db_res_free(res);
    return rows;
}

/*
 * Each claims call names the next lower priority with free work, so the
 * worker calls again only where there is one: two services at 10 and one
 * at -3 (none at 5 or 0) take two calls, 10 then -3, and the second names
 * no lower one (it used to take a third call, which found nothing).
 */
static void test_acquire_names_next_level(void **state)
{
    struct fixture *f = *state;
    services(f, 'h', 2, 10);
    services(f, 'n', 1, -3);
    int next = 0;
    assert_int_equal(acquire_at(f, "1000", &next), 2);
    assert_int_equal(next, -3);
    assert_int_equal(acquire_at(f, "-3", &next), 1);
    assert_int_equal(next, INT32_MIN);
    assert_int_equal(held_at(f, "10"), 2);
    assert_int_equal(held_at(f, "-3"), 1);
}

/*
 * Two claimers at one priority, in SERIALIZABLE transactions open at the
 * same time: each takes the five services that follow its own start in
 * hash order, and both commit (no false serialization failure). 5,000
 * free services with work (claim rows written directly: only claiming is
 * under test), so that, as in a real table, the claimers' rows lie on
 * different heap and index pages (with a few dozen rows on one page, any
 * two claimers share a page lock and conflict, the old claiming as well).
 */
static void test_equal_priority_claimers_spread(void **state)
{
    struct fixture *f = *state;
    itest_exec(f->pg.a, "INSERT INTO queuer.service_id_claims (service_id, n_open) "
                        "SELECT format('prior-bbbbb::%s', lpad(to_hex(i), 4, '0')), 1 "
                        "FROM generate_series(1, 5000) i");
    itest_exec(f->pg.a, "ANALYZE queuer.service_id_claims");
    const char *start_a = "0", *start_b = "-1073741824";
    char *want_a = expected_from(f, start_a, 5);
    char *want_b = expected_from(f, start_b, 5);
    assert_string_not_equal(want_a, want_b);

    struct qw_db *b = itest_connect(f->pg.conninfo);
    itest_exec(f->pg.a, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    itest_exec(b, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    acquire(f->pg.a, "w1", start_a, 5);
    acquire(b, "w2", start_b, 5);
    itest_exec(f->pg.a, "COMMIT");
    itest_exec(b, "COMMIT");
    qw_db_close(b);

    char *got_a = claimed_by(f, "w1");
    char *got_b = claimed_by(f, "w2");
    assert_string_equal(got_a, want_a);
    assert_string_equal(got_b, want_b);
    free(want_a);
    free(want_b);
    free(got_a);
    free(got_b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_scarce_claims_take_priority_first, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_head_priority_follows_head, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_writers_leave_head_exact, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_equal_priority_claimers_spread, setup,
                                        itest_pair_teardown),
        cmocka_unit_test_setup_teardown(test_acquire_names_next_level, setup, itest_pair_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
