/*
 * Integration: partition leases of the shared capacity (worker/capacity_lease.c)
 * against a real PostgreSQL, two or three "workers" each with its own
 * connection, lease state and gate, stepped by hand so every interleaving
 * is the one written here:
 *  - two workers split the partitions by their targets (max-min fair), and
 *    the partitions held never add up to more than the capacity;
 *  - a worker that stops stepping (dead) keeps its partitions until its
 *    lease ends, and the other takes them then, not before;
 *  - reserved capacity is held whatever the target and never goes to
 *    another live worker;
 *  - a partition is given back only once the gate's units in flight fit
 *    in what is kept;
 *  - a new capacity is used only after the old one's partitions are given
 *    back; clearing it lifts the limit.
 */
#include "itest.h"
#include "common/clock.h"
#include "worker/capacity.h"
#include "worker/capacity_lease.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEASE_MS 1000 /* partition lease of the workers under test */

struct worker {
    const char *id;                 /* instance id */
    struct qw_db *db;               /* its connection */
    struct qw_capacity_lease lease; /* its lease state */
    struct qw_capacity_gate gate;   /* its gate */
};

struct fixture {
    char *conninfo;
    struct qw_db *admin; /* sets the capacity, checks the rows */
    struct worker w[3];  /* "a", "b", "c" */
};

static const struct qw_txn_policy policy = {.max_attempts = 5};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    static const char *const ids[3] = {"a", "b", "c"};
    f->conninfo = itest_db_create("capacity_lease", 1);
    f->admin = itest_connect(f->conninfo);
    for (int i = 0; i < 3; i++) {
        struct worker *w = &f->w[i];
        w->id = ids[i];
        w->db = itest_connect(f->conninfo);
        qw_capacity_lease_init(&w->lease, "default", w->id, QW_COST_BATCH, LEASE_MS);
        qw_capacity_gate_init(&w->gate);
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    for (int i = 0; i < 3; i++) {
        qw_capacity_lease_free(&f->w[i].lease);
        qw_db_close(f->w[i].db);
    }
    qw_db_close(f->admin);
    free(f->conninfo);
    free(f);
    return 0;
}

static void step(struct worker *w, int64_t target)
{
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_capacity_lease_step(&w->lease, w->db, &policy, target, &w->gate, &err);
    if (rc != QW_OK)
        fail_msg("step of %s: %s", w->id, err.msg);
}

static int64_t held(struct fixture *f, const char *id)
{
    char sql[200];
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM queuer.capacity_partitions "
             "WHERE holder = '%s' AND expiry > now()",
             id);
    return itest_scalar(f->admin, sql);
}

/* The rows themselves never hand out more than the capacity. */
static void check_sum(struct fixture *f, int64_t max_in_flight)
{
    int64_t sum = itest_scalar(f->admin, "SELECT coalesce(sum(in_flight), 0) FROM "
                                         "queuer.capacity_partitions WHERE expiry > now()");
    if (sum > max_in_flight)
        fail_msg("partitions held add up to %lld > %lld", (long long)sum, (long long)max_in_flight);
}

static void test_nothing_set_is_no_limit(void **state)
{
    struct fixture *f = *state;
    struct worker *a = &f->w[0];
    step(a, 100);
    assert_false(a->lease.set);
    assert_false(a->gate.grant.active);
    int64_t wait;
    for (int i = 0; i < 1000; i++)
        assert_int_equal(qw_capacity_try_take(&a->gate, 1, qw_clock_mono_ms(), &wait),
                         QW_CAP_TAKEN);
    assert_int_equal(itest_scalar(f->admin, "SELECT count(*) FROM queuer.capacity_instances"), 0);
}

/* 10 partitions of 4; targets 30 and 10 need 8 and 3: the split is 7 and 3. */
static void test_split_by_target(void **state)
{
    struct fixture *f = *state;
    struct worker *a = &f->w[0], *b = &f->w[1];
    itest_exec(f->admin, "SELECT queuer.capacity_set('default', 40, 1000, 4, 0)");
    step(a, 30); /* alone: takes its need */
    assert_int_equal(held(f, "a"), 8);
    assert_int_equal(a->gate.grant.in_flight, 32);
    assert_int_equal(a->gate.grant.per_second, 800);
    check_sum(f, 40);
    step(b, 10); /* takes what is free */
    assert_int_equal(held(f, "b"), 2);
    check_sum(f, 40);
    step(a, 30); /* gives back its surplus */
    assert_int_equal(held(f, "a"), 7);
    step(b, 10);
    assert_int_equal(held(f, "b"), 3);
    check_sum(f, 40);
    for (int i = 0; i < 3; i++) {
        step(a, 30);
        step(b, 10);
        check_sum(f, 40);
    }
    assert_int_equal(held(f, "a"), 7);
    assert_int_equal(held(f, "b"), 3);
    assert_int_equal(a->gate.grant.in_flight, 28);
    assert_int_equal(b->gate.grant.in_flight, 12);
    assert_int_equal(a->gate.grant.per_second + b->gate.grant.per_second, 1000);
    /* an idle worker gives its shared partitions back */
    step(b, 0);
    assert_int_equal(held(f, "b"), 0);
    assert_int_equal(b->gate.grant.in_flight, 0);
    int64_t wait;
    assert_int_equal(qw_capacity_try_take(&b->gate, 1, qw_clock_mono_ms(), &wait),
                     QW_CAP_WAIT_GRANT);
    step(a, 30);
    assert_int_equal(held(f, "a"), 8);
}

/* A worker that stops stepping keeps its partitions for its lease, no longer. */
static void test_dead_worker_partitions_taken_after_lease(void **state)
{
    struct fixture *f = *state;
    struct worker *a = &f->w[0], *b = &f->w[1];
    itest_exec(f->admin, "SELECT queuer.capacity_set('default', 40, NULL, 4, 0)");
    step(a, 100);
    step(b, 100);
    step(a, 100);
    step(b, 100);
    assert_int_equal(held(f, "a"), 5);
    assert_int_equal(held(f, "b"), 5);
    /* a is dead from here on: remember what it held and until when */
    itest_exec(f->admin, "CREATE TEMP TABLE a_held AS SELECT partition_no, expiry "
                         "FROM queuer.capacity_partitions WHERE holder = 'a'");
    int64_t died_ms = qw_clock_mono_ms();
    int64_t taken_ms = -1;
    while (qw_clock_mono_ms() - died_ms < 3 * LEASE_MS) {
        step(b, 100); /* more work than it holds */
        check_sum(f, 40);
        /* b never holds one of a's partitions while a's lease on it is live */
        if (itest_scalar(f->admin, "SELECT count(*) FROM queuer.capacity_partitions p "
                                   "JOIN a_held h USING (partition_no) "
                                   "WHERE p.holder = 'b' AND now() < h.expiry") != 0)
            fail_msg("b took one of a's partitions before a's lease on it ended");
        if (held(f, "b") == 10) {
            taken_ms = qw_clock_mono_ms() - died_ms;
            break;
        }
        qw_clock_sleep_ms(50);
    }
    if (taken_ms < 0)
        fail_msg("b did not take a's partitions within three leases");
    print_message("b held all 10 partitions %lld ms after a stopped (lease %d ms)\n",
                  (long long)taken_ms, LEASE_MS);
    /* a lease (its instance row and its partitions lapse), then one step of b */
    assert_true(taken_ms <= LEASE_MS + 500);
    assert_int_equal(b->gate.grant.in_flight, 40);
}

/* Reservations: held whatever the target, first, and never shared. */
static void test_reserved_never_shared(void **state)
{
    struct fixture *f = *state;
    struct worker *a = &f->w[0], *b = &f->w[1];
    itest_exec(f->admin, "SELECT queuer.capacity_set('default', 40, NULL, 4, 8)");
    for (int i = 0; i < 5; i++) {
        step(a, 0);   /* idle, but keeps its reservation */
        step(b, 500); /* wants everything */
        check_sum(f, 40);
        assert_int_equal(held(f, "a"), 2);
        assert_int_equal(itest_scalar(f->admin, "SELECT count(*) FROM queuer.capacity_partitions "
                                                "WHERE holder = 'a' AND reserved"),
                         2);
    }
    /* b: its own reservation (2) and the shared pool (10 - 2 x 2) */
    assert_int_equal(held(f, "b"), 8);
    assert_int_equal(a->gate.grant.in_flight, 8);
    assert_int_equal(b->gate.grant.in_flight, 32);
    /* a third worker reserves too: the shared pool shrinks, b gives back */
    struct worker *c = &f->w[2];
    step(c, 0);
    step(b, 500);
    step(c, 0);
    check_sum(f, 40);
    assert_int_equal(held(f, "c"), 2);
    assert_int_equal(held(f, "a"), 2);
    assert_int_equal(held(f, "b"), 6);
}

/* Units in flight are never stranded: a release waits until the gate drains. */
static void test_release_waits_for_in_flight(void **state)
{
    struct fixture *f = *state;
    struct worker *a = &f->w[0];
    itest_exec(f->admin, "SELECT queuer.capacity_set('default', 16, NULL, 4, 0)");
    step(a, 16);
    assert_int_equal(held(f, "a"), 4);
    int64_t wait;
    for (int i = 0; i < 16; i++)
        assert_int_equal(qw_capacity_try_take(&a->gate, 1, qw_clock_mono_ms(), &wait),
                         QW_CAP_TAKEN);
    step(a, 16 - 10); /* needs 2 now, but 16 units are in flight */
    assert_true(a->lease.deferred);
    assert_int_equal(held(f, "a"), 4);            /* still ours in the database */
    assert_int_equal(a->gate.grant.in_flight, 8); /* but no longer used for new POSTs */
    assert_int_equal(qw_capacity_try_take(&a->gate, 1, qw_clock_mono_ms(), &wait),
                     QW_CAP_WAIT_SLOT);
    qw_capacity_give_back(&a->gate, 8);
    step(a, 6);
    assert_false(a->lease.deferred);
    assert_int_equal(held(f, "a"), 2);
}

/* A new capacity is used once the old one's partitions are given back. */
static void test_change_and_clear(void **state)
{
    struct fixture *f = *state;
    struct worker *a = &f->w[0], *b = &f->w[1];
    itest_exec(f->admin, "SELECT queuer.capacity_set('default', 40, NULL, 4, 0)");
    step(a, 100);
    assert_int_equal(held(f, "a"), 10);
    itest_exec(f->admin, "SELECT queuer.capacity_set('default', 20, NULL, 5, 0)");
    step(b, 100); /* a still holds the old capacity: nothing for b yet */
    assert_int_equal(held(f, "b"), 0);
    assert_int_equal(b->gate.grant.in_flight, 0);
    step(a, 100); /* a gives the old one back (nothing in flight) and takes new */
    assert_int_equal(itest_scalar(f->admin, "SELECT count(*) FROM queuer.capacity_partitions "
                                            "WHERE generation < (SELECT generation FROM "
                                            "queuer.capacity)"),
                     0);
    step(b, 100);
    step(a, 100);
    step(b, 100);
    check_sum(f, 20);
    assert_int_equal(held(f, "a") + held(f, "b"), 4);
    assert_int_equal(a->gate.grant.in_flight + b->gate.grant.in_flight, 20);
    itest_exec(f->admin, "SELECT queuer.capacity_clear('default')");
    step(a, 100);
    assert_false(a->gate.grant.active);
    assert_int_equal(itest_scalar(f->admin, "SELECT count(*) FROM queuer.capacity_partitions"), 0);
    /* and the stop path gives everything back at once */
    itest_exec(f->admin, "SELECT queuer.capacity_set('default', 40, NULL, 4, 0)");
    step(a, 100);
    assert_int_equal(held(f, "a"), 10);
    int released = 0;
    struct qw_error err;
    qw_error_clear(&err);
    assert_int_equal(qw_capacity_lease_release_all(a->db, "a", &released, &err), QW_OK);
    assert_int_equal(released, 10);
    assert_int_equal(held(f, "a"), 0);
}

/* The database refuses capacities that make no sense. */
static void test_set_refuses_bad_values(void **state)
{
    struct fixture *f = *state;
    static const char *const bad[] = {
        "SELECT queuer.capacity_set('default', NULL, NULL, NULL, 0)",
        "SELECT queuer.capacity_set('default', 0, NULL, NULL, 0)",
        "SELECT queuer.capacity_set('default', 40, NULL, 4, 6)",
        "SELECT queuer.capacity_set('default', 40, NULL, 4, 44)",
        "SELECT queuer.capacity_set('default', 100000, NULL, 1, 0)",
        "SELECT queuer.capacity_set('bad name', 40, NULL, 4, 0)",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct qw_error err;
        qw_error_clear(&err);
        if (qw_db_exec(f->admin, bad[i], &err) == QW_OK)
            fail_msg("accepted: %s", bad[i]);
    }
    /* default partition size: 1/32 of the limit; the rate adds up exactly */
    itest_exec(f->admin, "SELECT queuer.capacity_set('default', 36, 950)");
    assert_int_equal(itest_scalar(f->admin, "SELECT partition_size FROM queuer.capacity"), 2);
    assert_int_equal(
        itest_scalar(f->admin, "SELECT sum(per_second) FROM queuer.capacity_partitions"), 950);
    assert_int_equal(
        itest_scalar(f->admin, "SELECT sum(in_flight) FROM queuer.capacity_partitions"), 36);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nothing_set_is_no_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_by_target, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_worker_partitions_taken_after_lease, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reserved_never_shared, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_waits_for_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_change_and_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_refuses_bad_values, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
