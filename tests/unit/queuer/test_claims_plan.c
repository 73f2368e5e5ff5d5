/* Unit tests for the claims decisions (queuer/claims_plan.h), table-driven. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/batch.h"
#include "queuer/claims_plan.h"

#include <stdio.h>
#include <string.h>

#define T0 100000 /* monotonic ms when the cycle starts */

/* A listening worker in the middle of its life: lease renewed 100 ms ago
 * with a 1 s cycle, claims read 3 cycles ago, share known, nothing free. */
static struct qw_claims_state steady(void)
{
    return (struct qw_claims_state){
        .now_ms = T0,
        .lease_deadline_ms = T0 + 20000,
        .lease_renewed_ms = T0 - 100,
        .settle_until_ms = 0,
        .cycle_ms = 1000,
        .listen = true,
        .cycles_since_reconcile = 3,
        .held = 250,
        .reported_held = 250,
        .slack = 4,
        .share = 254,
    };
}

struct plan_case {
    const char *name;                         /* what the case shows */
    void (*change)(struct qw_claims_state *); /* from steady() */
    struct qw_claims_plan want;               /* renew, reconcile, housekeeping, may_release */
};

static void nothing(struct qw_claims_state *s)
{
    (void)s;
}
static void first(struct qw_claims_state *s)
{
    s->lease_deadline_ms = 0;
    s->lease_renewed_ms = 0;
    s->share = 0;
}
static void lapsed(struct qw_claims_state *s)
{
    s->lease_deadline_ms = T0;
}
static void asked(struct qw_claims_state *s)
{
    s->reconcile_asked = true;
}
static void reconcile_due(struct qw_claims_state *s)
{
    s->cycles_since_reconcile = QW_CLAIMS_RECONCILE_EVERY;
}
static void polling(struct qw_claims_state *s)
{
    s->listen = false;
    s->cycles_since_reconcile = 1;
}
static void polling_lapsed(struct qw_claims_state *s)
{
    polling(s);
    lapsed(s);
}
static void woken(struct qw_claims_state *s)
{
    s->woken = true;
}
static void periodic(struct qw_claims_state *s)
{
    s->periodic_housekeeping = true;
}
static void free_work(struct qw_claims_state *s)
{
    s->free_with_work = 12;
}
static void half_cycle(struct qw_claims_state *s)
{
    s->lease_renewed_ms = T0 - 500;
}
static void moved_slack(struct qw_claims_state *s)
{
    s->held = 254; /* moved by 4: the slack, not more */
}
static void moved_more(struct qw_claims_state *s)
{
    s->held = 245; /* moved by 5 */
}
static void settling(struct qw_claims_state *s)
{
    s->settle_until_ms = T0 + 1;
}
static void settled(struct qw_claims_state *s)
{
    s->settle_until_ms = T0;
}

static const struct plan_case plan_cases[] = {
    {"a woken-by-nothing periodic cycle does nothing but look",
     nothing,
     {false, false, false, true}},
    {"the first cycle reads everything and renews", first, {true, true, true, false}},
    {"a lapsed lease: renew and read every claim, release nothing",
     lapsed,
     {true, true, false, false}},
    {"a read asked for (lost connection, '*'): no release meanwhile",
     asked,
     {false, true, false, false}},
    {"the safety-net read every RECONCILE_EVERY cycles: surplus still goes back",
     reconcile_due,
     {false, true, false, true}},
    {"a polling worker reads its claims every cycle and gives its surplus back",
     polling,
     {false, true, false, true}},
    {"a polling worker whose lease may have lapsed releases nothing",
     polling_lapsed,
     {true, true, false, false}},
    {"a notification on the claims channel reads the share", woken, {false, false, true, true}},
    {"periodic housekeeping reads the share", periodic, {false, false, true, true}},
    {"free services with work waiting: look at the share again",
     free_work,
     {false, false, true, true}},
    {"half a cycle after the last renewal: renew", half_cycle, {true, false, false, true}},
    {"a count moved by the slack is not reported early", moved_slack, {false, false, false, true}},
    {"a count moved by more than the slack is reported now",
     moved_more,
     {true, false, false, true}},
    {"no release while the share settles", settling, {false, false, false, false}},
    {"release once it settled", settled, {false, false, false, true}},
};

static void test_plan_cycle_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(plan_cases) / sizeof(plan_cases[0]); i++) {
        const struct plan_case *c = &plan_cases[i];
        struct qw_claims_state s = steady();
        c->change(&s);
        struct qw_claims_plan got;
        memset(&got, 0xff, sizeof(got));
        qw_claims_plan_cycle(&s, &got);
        if (got.renew != c->want.renew || got.reconcile != c->want.reconcile ||
            got.housekeeping != c->want.housekeeping || got.may_release != c->want.may_release)
            fail_msg("%s: renew/reconcile/housekeeping/may_release = %d%d%d%d, want %d%d%d%d",
                     c->name, got.renew, got.reconcile, got.housekeeping, got.may_release,
                     c->want.renew, c->want.reconcile, c->want.housekeeping, c->want.may_release);
    }
}

struct txn_case {
    const char *name;
    bool acquire;
    int64_t free_with_work;
    bool want;
};

static const struct txn_case txn_cases[] = {
    {"lone batches on kept claims: no claims transaction", true, 0, false},
    {"free services with work to pick up", true, 3, true},
    {"free work, but shutting down (no pickup)", false, 3, false},
};

static void test_txn_due_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(txn_cases) / sizeof(txn_cases[0]); i++) {
        const struct txn_case *c = &txn_cases[i];
        bool got = qw_claims_txn_due(c->acquire, c->free_with_work);
        if (got != c->want)
            fail_msg("%s: %d, want %d", c->name, got, c->want);
    }
}

static void test_surplus_is_the_highest_ids(void **state)
{
    (void)state;
    struct qw_claims_held held[] = {
        {.service_id = "aaaaa-aaaaa::0003"},
        {.service_id = "aaaaa-aaaaa::0001", .busy = true},
        {.service_id = "aaaaa-aaaaa::0005", .busy = true},
        {.service_id = "aaaaa-aaaaa::0002"},
        {.service_id = "aaaaa-aaaaa::0004"},
    };
    /* share 2: 0005 (busy), 0004 and 0003 are surplus; two can go at once */
    assert_int_equal(qw_claims_mark_surplus(held, 5, 2), 2);
    const char *order[] = {"aaaaa-aaaaa::0005", "aaaaa-aaaaa::0004", "aaaaa-aaaaa::0003",
                           "aaaaa-aaaaa::0002", "aaaaa-aaaaa::0001"};
    bool draining[] = {true, true, true, false, false};
    for (int i = 0; i < 5; i++) {
        assert_string_equal(held[i].service_id, order[i]);
        assert_int_equal(held[i].draining, draining[i]);
    }
}

static void test_no_surplus_within_share(void **state)
{
    (void)state;
    struct qw_claims_held held[] = {{.service_id = "aaaaa-aaaaa::0001"},
                                    {.service_id = "aaaaa-aaaaa::0002", .draining = true}};
    assert_int_equal(qw_claims_mark_surplus(held, 2, 2), 0);
    assert_false(held[0].draining);
    assert_false(held[1].draining);
    assert_int_equal(qw_claims_mark_surplus(held, 2, 5), 0);
    assert_int_equal(qw_claims_mark_surplus(NULL, 0, 0), 0);
}

static void test_pickup_again(void **state)
{
    (void)state;
    /* a full step, some to others: again at once */
    assert_true(qw_claims_pickup_again(true, 2000, 500, 2000));
    /* a full step, all to ourselves (nobody else live yet): next cycle */
    assert_false(qw_claims_pickup_again(true, 2000, 2000, 2000));
    /* less than a step: what there was room for was given */
    assert_false(qw_claims_pickup_again(true, 1999, 0, 2000));
    /* another worker holds the pickup lock */
    assert_false(qw_claims_pickup_again(false, 0, 0, 2000));
}

static void test_release_idle_due(void **state)
{
    (void)state;
    assert_true(qw_claims_release_idle_due(5, 5, 3, 0));  /* at the cap, free work waits */
    assert_true(qw_claims_release_idle_due(6, 5, 3, 0));  /* above it */
    assert_false(qw_claims_release_idle_due(4, 5, 3, 0)); /* room left: pickup fills it */
    assert_false(qw_claims_release_idle_due(5, 5, 0, 0)); /* nothing waits: claims are kept */
    assert_false(qw_claims_release_idle_due(0, 0, 3, 0)); /* no share read yet */
    /* the others have room for all that waits: pickup gives it to them */
    assert_false(qw_claims_release_idle_due(5, 5, 3, 3));
    assert_false(qw_claims_release_idle_due(5, 5, 3, 100));
    /* more waits than they have room for: make room here too */
    assert_true(qw_claims_release_idle_due(5, 5, 4, 3));
}

static void test_count_unreported(void **state)
{
    (void)state;
    assert_false(qw_claims_count_unreported(10, 6, 4));
    assert_true(qw_claims_count_unreported(11, 6, 4));
    assert_true(qw_claims_count_unreported(1, 6, 4));
    assert_true(qw_claims_count_unreported(1, 0, 0));
    assert_false(qw_claims_count_unreported(0, 0, 0));
}

/* 128 hex characters: a batch id as a lone enqueue names it */
#define HEX32 "0123456789abcdef0123456789abcdef"
#define BATCH HEX32 HEX32 HEX32 HEX32

struct item_case {
    const char *payload; /* a notification payload */
    int rc;              /* of the first item */
    const char *service; /* its service, when QW_OK */
    long long epoch;     /* its epoch */
    const char *batch;   /* its batch ("" = none) */
    const char *rest;    /* where the next item starts, NULL after the last */
};

static const struct item_case item_cases[] = {
    {"abcde-fghij::0001:7", QW_OK, "abcde-fghij::0001", 7, "", NULL},
    {"abcde-fghij::0001:12 abcde-fghij::0002:3", QW_OK, "abcde-fghij::0001", 12, "",
     "abcde-fghij::0002:3"},
    {"abcde-fghij::0001:7/" BATCH, QW_OK, "abcde-fghij::0001", 7, BATCH, NULL},
    {"abcde-fghij::0001:7/" BATCH " abcde-fghij::0002:3", QW_OK, "abcde-fghij::0001", 7, BATCH,
     "abcde-fghij::0002:3"},
    {"abcde-fghij::0001:", QW_ERR_INVALID, NULL, 0, NULL, NULL},
    {"abcde-fghij::0001", QW_ERR_INVALID, NULL, 0, NULL, NULL},
    {":5", QW_ERR_INVALID, NULL, 0, NULL, NULL},
    {"abcde-fghij::0001:-1", QW_ERR_INVALID, NULL, 0, NULL, NULL},
    {"abcde-fghij::0001:7x", QW_ERR_INVALID, NULL, 0, NULL, NULL},
    {"abcde-fghij::0001:99999999999999999999999", QW_ERR_INVALID, NULL, 0, NULL, NULL},
    /* a service id longer than the buffer is refused, not cut */
    {"abcde-fghij::0001abcdefghij:7", QW_ERR_INVALID, NULL, 0, NULL, NULL},
    /* a batch id of the wrong length or alphabet, or none after the slash */
    {"abcde-fghij::0001:7/", QW_ERR_INVALID, NULL, 0, NULL, NULL},
    {"abcde-fghij::0001:7/" HEX32, QW_ERR_INVALID, NULL, 0, NULL, NULL},
    {"abcde-fghij::0001:7/" BATCH "0", QW_ERR_INVALID, NULL, 0, NULL, NULL},
    {"abcde-fghij::0001:7/" HEX32 HEX32 HEX32 "0123456789ABCDEF0123456789abcdef", QW_ERR_INVALID,
     NULL, 0, NULL, NULL},
    {"abcde-fghij::0001:/" BATCH, QW_ERR_INVALID, NULL, 0, NULL, NULL},
};

static void test_parse_item_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(item_cases) / sizeof(item_cases[0]); i++) {
        const struct item_case *c = &item_cases[i];
        struct qw_wakeup_item item = {.epoch = -1};
        const char *next = "unset";
        int rc = qw_claims_parse_item(c->payload, &item, &next);
        if (rc != c->rc)
            fail_msg("'%s': rc %d, want %d", c->payload, rc, c->rc);
        if (rc != QW_OK)
            continue;
        assert_string_equal(item.service, c->service);
        assert_int_equal(item.epoch, c->epoch);
        assert_string_equal(item.batch, c->batch);
        if (c->rest)
            assert_string_equal(next, c->rest);
        else
            assert_null(next);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_cycle_table),
        cmocka_unit_test(test_txn_due_table),
        cmocka_unit_test(test_surplus_is_the_highest_ids),
        cmocka_unit_test(test_no_surplus_within_share),
        cmocka_unit_test(test_pickup_again),
        cmocka_unit_test(test_release_idle_due),
        cmocka_unit_test(test_count_unreported),
        cmocka_unit_test(test_parse_item_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
