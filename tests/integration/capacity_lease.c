/*
 * Integration: partition leases of the shared capacity (submitter/capacity_lease.c)
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
 *    back; clearing it lifts the limit;
 *  - the workers connect as a member of queuer_worker, so every statement
 *    above passes the role checks of migration 0009, and a worker role
 *    cannot take a live partition, revive a lapsed one, move an epoch or
 *    resize a partition by hand.
 */
#include "itest.h"
#include "common/clock.h"
#include "submitter/capacity.h"
#include "submitter/capacity_lease.h"

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
    itest_exec(f->admin, "DO $$ BEGIN "
                         "IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'itest_capworker') "
                         "THEN CREATE ROLE itest_capworker LOGIN IN ROLE queuer_worker; END IF; "
                         "END $$");
    for (int i = 0; i < 3; i++) {
        struct worker *w = &f->w[i];
        w->id = ids[i];
        w->db = itest_connect_as(f->conninfo, "itest_capworker");
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

/* Runs `sql` on `db` and checks its SQLSTATE ("" = success). */
static void expect(struct qw_db *db, const char *sql, const char *want)
{
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_db_exec(db, sql, &err);
    const char *state = rc == QW_OK ? "" : err.sqlstate;
    if (strcmp(state, want) != 0)
        fail_msg("%s\n  expected SQLSTATE '%s', got '%s' (%s)", sql, want, state, err.msg);
}

/* A worker role keeps the lease life cycle: no takeover of a live lease by hand. */
static void test_worker_role_limits(void **state)
{
    struct fixture *f = *state;
    struct worker *a = &f->w[0], *b = &f->w[1];
    itest_exec(f->admin, "SELECT queuer.capacity_set('default', 40, NULL, 4, 8)");
    step(a, 100);
    assert_int_equal(held(f, "a"), 10);
    struct qw_db *w = b->db;
#define A_LIVE "UPDATE queuer.capacity_partitions SET "
#define WHERE_A " WHERE holder = 'a'"
    /* a's live partitions do not pass straight to b, whatever the epoch */
    expect(w, A_LIVE "holder = 'b', epoch = epoch + 1" WHERE_A, "42501");
    expect(w, A_LIVE "holder = 'b'" WHERE_A, "42501");
    expect(w, A_LIVE "holder = 'b', epoch = epoch + 2" WHERE_A, "42501");
    expect(w, A_LIVE "epoch = epoch - 1" WHERE_A, "42501");
    expect(w, A_LIVE "epoch = 0" WHERE_A, "42501");
    /* nor does a reservation appear, or the sizes change */
    expect(w, A_LIVE "reserved = NOT reserved" WHERE_A, "42501");
    expect(w, A_LIVE "in_flight = in_flight * 10" WHERE_A, "42501");
    expect(w, A_LIVE "per_second = 1" WHERE_A, "42501");
    expect(w, A_LIVE "partition_no = partition_no + 100" WHERE_A, "42501");
    expect(w, A_LIVE "generation = generation + 1" WHERE_A, "42501");
    /* a lease of more than an hour */
    expect(w, A_LIVE "expiry = now() + interval '1 day'" WHERE_A, "42501");
    /* partitions of the current generation stay */
    expect(w, "DELETE FROM queuer.capacity_partitions", "42501");
    /* the capacity itself is the operator's */
    expect(w, "UPDATE queuer.capacity SET max_in_flight = 4000", "42501");
    expect(w,
           "INSERT INTO queuer.capacity_partitions (ledger, generation, partition_no, in_flight) "
           "SELECT ledger, generation, 99, 4 FROM queuer.capacity",
           "42501");
    /* targets: published at now(), live for at most an hour */
    expect(w,
           "INSERT INTO queuer.capacity_instances VALUES ('default', 'z', 1, 'batch', "
           "now() + interval '1 day', now())",
           "42501");
    expect(w,
           "INSERT INTO queuer.capacity_instances VALUES ('default', 'z', 1, 'batch', "
           "now() + interval '1 s', now() - interval '1 day')",
           "42501");
    assert_int_equal(held(f, "a"), 10);
    assert_int_equal(itest_scalar(f->admin, "SELECT max(epoch) FROM queuer.capacity_partitions"),
                     1);
    /* a lapsed lease is not revived without an epoch step */
    itest_exec(f->admin, "UPDATE queuer.capacity_partitions SET expiry = now() - interval '1 s' "
                         "WHERE partition_no = 10");
    expect(w, A_LIVE "expiry = now() + interval '1 min' WHERE partition_no = 10 AND holder = 'a'",
           "42501");
    /* but taken as the statements take it: free or lapsed, epoch + 1 */
    expect(w,
           A_LIVE "holder = 'b', epoch = epoch + 1, expiry = now() + interval '1 min' "
                  "WHERE partition_no = 10",
           "");
    /* renewals and releases as the worker statements make them */
    expect(w, A_LIVE "expiry = now() + interval '1 min'" WHERE_A, "");
    expect(w, A_LIVE "holder = NULL, expiry = NULL, reserved = false, epoch = epoch + 1" WHERE_A,
           "");
    assert_int_equal(held(f, "a"), 0);
    assert_int_equal(held(f, "b"), 1);
#undef A_LIVE
#undef WHERE_A
    /* retiring: an older generation's partitions may go */
    itest_exec(f->admin, "SELECT queuer.capacity_set('default', 20, NULL, 5, 0)");
    expect(w,
           "DELETE FROM queuer.capacity_partitions WHERE generation < "
           "(SELECT generation FROM queuer.capacity)",
           "");
    assert_int_equal(itest_scalar(f->admin, "SELECT count(*) FROM queuer.capacity_partitions"), 4);
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
        cmocka_unit_test_setup_teardown(test_worker_role_limits, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
