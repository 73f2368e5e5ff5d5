/* Unit tests for the simulator's pure ledger core (sim/ledger.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/err.h"
#include "ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000 /* microseconds per millisecond */
#define SVC "abcde-fghij::ab12"
#define SVC2 "abcde-fghij::cd34"

/* One recorded status change. */
struct change {
    char service[QW_SIM_SERVICE_KEY_MAX]; /* service key */
    char batch[64];                       /* batch id */
    enum qw_sim_status from;              /* old status */
    enum qw_sim_status to;                /* new status */
    int64_t at_us;                        /* when it was due */
};

/* Test fixture: a ledger and the changes it reported. */
struct fixture {
    struct qw_sim_ledger *l; /* ledger under test */
    struct change log[256];  /* changes in callback order */
    size_t n;                /* entries in `log` */
};

static void record(void *ctx, const struct qw_sim_service *svc, const char *batch_id, int origin,
                   enum qw_sim_status from, enum qw_sim_status to, int64_t at_us)
{
    struct fixture *f = ctx;
    (void)origin;
    assert_true(f->n < sizeof(f->log) / sizeof(f->log[0]));
    struct change *c = &f->log[f->n++];
    snprintf(c->service, sizeof(c->service), "%s", svc->key);
    snprintf(c->batch, sizeof(c->batch), "%s", batch_id);
    c->from = from;
    c->to = to;
    c->at_us = at_us;
}

static struct qw_sim_ledger_config base_config(void)
{
    struct qw_sim_ledger_config cfg = {
        .queue_high = 30,
        .queue_low = 15,
        .commit_delay_us = 10 * MS,
        .status_memory = 100,
    };
    return cfg;
}

static struct fixture *fixture_new(const struct qw_sim_ledger_config *cfg)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(qw_sim_ledger_new(cfg, record, f, &f->l), QW_OK);
    return f;
}

static void fixture_free(struct fixture *f)
{
    qw_sim_ledger_free(f->l);
    free(f);
}

/* Offers one batch `id` to `key` at `now_us`; returns the result. */
static enum qw_sim_accept_result offer(struct fixture *f, const char *key, const char *id,
                                       int64_t now_us, bool *dup)
{
    struct qw_sim_service *svc = qw_sim_ledger_service(f->l, key, true);
    assert_non_null(svc);
    struct qw_sim_submission sub = {.batch_id = id};
    enum qw_sim_accept_result res;
    bool d = false;
    assert_int_equal(qw_sim_ledger_accept(f->l, svc, &sub, 1, now_us, 0, &d, &res), QW_OK);
    if (dup)
        *dup = d;
    return res;
}

static enum qw_sim_status status_of(struct fixture *f, const char *key, const char *id,
                                    int64_t now_us)
{
    struct qw_sim_status_view v;
    qw_sim_ledger_status(f->l, qw_sim_ledger_service(f->l, key, false), id, now_us, &v);
    return v.status;
}

static size_t queued(struct fixture *f, const char *key)
{
    return qw_sim_ledger_service(f->l, key, true)->queued;
}

static void test_config_checks(void **state)
{
    static const struct {
        size_t high, low, ghigh, glow;
        int expected;
    } rows[] = {
        {30, 15, 0, 0, QW_OK},        {30, 30, 0, 0, QW_OK},  {30, 31, 0, 0, QW_ERR_INVALID},
        {0, 0, 0, 0, QW_ERR_INVALID}, {30, 15, 10, 5, QW_OK}, {30, 15, 5, 10, QW_ERR_INVALID},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct qw_sim_ledger_config cfg = base_config();
        cfg.queue_high = rows[i].high;
        cfg.queue_low = rows[i].low;
        cfg.global_high = rows[i].ghigh;
        cfg.global_low = rows[i].glow;
        struct qw_sim_ledger *l = NULL;
        int rc = qw_sim_ledger_new(&cfg, NULL, NULL, &l);
        if (rc != rows[i].expected)
            print_error("row %zu\n", i);
        assert_int_equal(rc, rows[i].expected);
        qw_sim_ledger_free(l);
    }
}

/* Batches commit one per delay, in acceptance order, pipelined. */
static void test_commit_order_and_pipelining(void **state)
{
    struct qw_sim_ledger_config cfg = base_config();
    struct fixture *f = fixture_new(&cfg);
    assert_int_equal(offer(f, SVC, "a", 0, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(offer(f, SVC, "b", 1 * MS, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(offer(f, SVC, "c", 2 * MS, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(qw_sim_ledger_next_due_us(f->l), 10 * MS);
    assert_int_equal(qw_sim_ledger_advance(f->l, 25 * MS), 2);
    assert_int_equal(f->n, 2);
    assert_string_equal(f->log[0].batch, "a");
    assert_int_equal(f->log[0].at_us, 10 * MS);
    assert_int_equal(f->log[0].from, QW_SIM_PENDING);
    assert_int_equal(f->log[0].to, QW_SIM_COMMITTED);
    assert_string_equal(f->log[1].batch, "b");
    assert_int_equal(f->log[1].at_us, 20 * MS); /* after a, not b's accept + delay */
    assert_int_equal(status_of(f, SVC, "c", 25 * MS), QW_SIM_PENDING);
    assert_int_equal(status_of(f, SVC, "c", 30 * MS), QW_SIM_COMMITTED);
    assert_int_equal(f->log[2].at_us, 30 * MS);
    /* An idle service starts again from the accept time. */
    assert_int_equal(offer(f, SVC, "d", 100 * MS, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(qw_sim_ledger_next_due_us(f->l), 110 * MS);
    /* Time never goes backwards: an earlier now is clamped. */
    assert_int_equal(qw_sim_ledger_advance(f->l, 50 * MS), 0);
    assert_int_equal(status_of(f, SVC, "d", 0), QW_SIM_PENDING);
    struct qw_sim_status_view v;
    qw_sim_ledger_peek(f->l, qw_sim_ledger_service(f->l, SVC, false), "a", &v);
    assert_int_equal(v.changed_us, 10 * MS);
    assert_true(v.settled);
    fixture_free(f);
}

/* Services commit independently and interleave in time order. */
static void test_services_interleave(void **state)
{
    struct qw_sim_ledger_config cfg = base_config();
    struct fixture *f = fixture_new(&cfg);
    offer(f, SVC, "a1", 0, NULL);
    offer(f, SVC, "a2", 0, NULL);
    offer(f, SVC2, "b1", 5 * MS, NULL);
    qw_sim_ledger_advance(f->l, 100 * MS);
    assert_int_equal(f->n, 3);
    static const char *const order[] = {"a1", "b1", "a2"};
    static const int64_t at[] = {10 * MS, 15 * MS, 20 * MS};
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(f->log[i].batch, order[i]);
        assert_int_equal(f->log[i].at_us, at[i]);
    }
    assert_int_equal(qw_sim_ledger_next_due_us(f->l), INT64_MAX);
    fixture_free(f);
}

/* 429 from 30 queued until fewer than 15 are queued. */
static void test_hysteresis_30_15(void **state)
{
    struct qw_sim_ledger_config cfg = base_config();
    cfg.commit_delay_us = 1 * MS;
    struct fixture *f = fixture_new(&cfg);
    char id[16];
    int64_t now = 0; /* all accepted at t=0: batch k commits at k ms */
    for (int i = 0; i < 30; i++) {
        snprintf(id, sizeof(id), "b%d", i);
        assert_int_equal(offer(f, SVC, id, now, NULL), QW_SIM_ACCEPTED);
    }
    assert_int_equal(queued(f, SVC), 30);
    /* Table: time of the attempt -> queued then -> expected result. */
    static const struct {
        int64_t now_ms;
        size_t queued;
        enum qw_sim_accept_result expected;
    } rows[] = {
        {0, 30, QW_SIM_REFUSED_SERVICE},  /* reached high */
        {1, 29, QW_SIM_REFUSED_SERVICE},  /* still throttled */
        {15, 15, QW_SIM_REFUSED_SERVICE}, /* at low: not below it */
        {16, 14, QW_SIM_ACCEPTED},        /* below low: accepts (now 15 queued) */
        {16, 15, QW_SIM_ACCEPTED},        /* below high, not throttled */
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        qw_sim_ledger_advance(f->l, rows[i].now_ms * MS);
        if (queued(f, SVC) != rows[i].queued)
            print_error("row %zu: queued %zu\n", i, queued(f, SVC));
        assert_int_equal(queued(f, SVC), rows[i].queued);
        snprintf(id, sizeof(id), "x%zu", i);
        assert_int_equal(offer(f, SVC, id, rows[i].now_ms * MS, NULL), rows[i].expected);
    }
    /* Refusal changes nothing: "x0".."x2" are unknown. */
    assert_int_equal(status_of(f, SVC, "x0", 16 * MS), QW_SIM_UNKNOWN);
    assert_int_equal(status_of(f, SVC, "x3", 16 * MS), QW_SIM_PENDING);
    fixture_free(f);

    /* Another service is not affected by one service's back pressure. */
    f = fixture_new(&cfg);
    for (int i = 0; i < 31; i++) {
        snprintf(id, sizeof(id), "b%d", i);
        offer(f, SVC, id, 0, NULL);
    }
    assert_int_equal(offer(f, SVC2, "other", 0, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(qw_sim_ledger_service(f->l, SVC, false)->max_queued, 30);
    fixture_free(f);
}

static void test_global_limit(void **state)
{
    struct qw_sim_ledger_config cfg = base_config();
    cfg.global_high = 4;
    cfg.global_low = 2;
    cfg.commit_delay_us = 1 * MS;
    struct fixture *f = fixture_new(&cfg);
    assert_int_equal(offer(f, SVC, "a1", 0, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(offer(f, SVC, "a2", 0, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(offer(f, SVC2, "b1", 0, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(offer(f, SVC2, "b2", 0, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(offer(f, SVC2, "b3", 0, NULL), QW_SIM_REFUSED_GLOBAL);
    assert_int_equal(offer(f, SVC, "a3", 0, NULL), QW_SIM_REFUSED_GLOBAL);
    /* a1 and b1 commit at 1 ms: 2 queued, not below 2. */
    assert_int_equal(offer(f, SVC, "a3", 1 * MS, NULL), QW_SIM_REFUSED_GLOBAL);
    /* a2 and b2 commit at 2 ms: 0 queued. */
    assert_int_equal(offer(f, SVC, "a3", 2 * MS, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(qw_sim_ledger_queued_total(f->l), 1);
    fixture_free(f);
}

/* --global-limit/--global-resume: the most ever queued at once over the node is kept. */
static void test_global_max_queued(void **state)
{
    struct qw_sim_ledger_config cfg = base_config();
    cfg.global_high = 3;
    cfg.global_low = 1;
    cfg.commit_delay_us = 1 * MS;
    struct fixture *f = fixture_new(&cfg);
    assert_int_equal(offer(f, SVC, "a1", 0, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(offer(f, SVC2, "b1", 0, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(offer(f, SVC, "a2", 0, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(offer(f, SVC2, "b2", 0, NULL), QW_SIM_REFUSED_GLOBAL);
    assert_int_equal(qw_sim_ledger_max_queued_total(f->l), 3);
    assert_int_equal(offer(f, SVC2, "b2", 5 * MS, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(qw_sim_ledger_queued_total(f->l), 1);
    assert_int_equal(qw_sim_ledger_max_queued_total(f->l), 3);
    fixture_free(f);
}

/* --rate: at most R batches a second over the node, BURST at once; refusals cost nothing. */
static void test_rate(void **state)
{
    struct qw_sim_ledger_config cfg = base_config();
    cfg.rate = 100; /* burst: a tenth, 10 batches */
    cfg.queue_high = 1000;
    cfg.queue_low = 500;
    struct fixture *f = fixture_new(&cfg);
    char id[16];
    int accepted = 0;
    for (int i = 0; i < 30; i++) {
        snprintf(id, sizeof(id), "r%d", i);
        accepted += offer(f, SVC, id, 1 * MS, NULL) == QW_SIM_ACCEPTED;
    }
    assert_int_equal(accepted, 10);
    snprintf(id, sizeof(id), "late");
    assert_int_equal(offer(f, SVC2, id, 1 * MS, NULL), QW_SIM_REFUSED_RATE);
    /* 10 ms bring one batch back */
    assert_int_equal(offer(f, SVC2, id, 11 * MS, NULL), QW_SIM_ACCEPTED);
    assert_int_equal(offer(f, SVC2, "late2", 11 * MS, NULL), QW_SIM_REFUSED_RATE);
    /* over two more seconds: 200 more, never more */
    accepted = 0;
    for (int t = 12; t <= 2011; t++) {
        snprintf(id, sizeof(id), "s%d", t);
        accepted += offer(f, SVC, id, t * MS, NULL) == QW_SIM_ACCEPTED;
    }
    assert_true(accepted >= 199 && accepted <= 201);
    fixture_free(f);
}

/* Only the last N finalized batches are remembered; queued ones always. */
static void test_status_memory(void **state)
{
    struct qw_sim_ledger_config cfg = base_config();
    cfg.status_memory = 2;
    struct fixture *f = fixture_new(&cfg);
    static const char *const ids[] = {"m0", "m1", "m2", "m3", "m4"};
    for (size_t i = 0; i < 5; i++)
        offer(f, SVC, ids[i], 0, NULL);
    /* All queued: all known, whatever the memory size. */
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(status_of(f, SVC, ids[i], 0), QW_SIM_PENDING);
    /* m0..m2 final (3 > 2): m0 forgotten. */
    qw_sim_ledger_advance(f->l, 30 * MS);
    static const enum qw_sim_status after3[] = {QW_SIM_UNKNOWN, QW_SIM_COMMITTED, QW_SIM_COMMITTED,
                                                QW_SIM_PENDING, QW_SIM_PENDING};
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(status_of(f, SVC, ids[i], 30 * MS), after3[i]);
    qw_sim_ledger_advance(f->l, 50 * MS);
    static const enum qw_sim_status after5[] = {QW_SIM_UNKNOWN, QW_SIM_UNKNOWN, QW_SIM_UNKNOWN,
                                                QW_SIM_COMMITTED, QW_SIM_COMMITTED};
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(status_of(f, SVC, ids[i], 50 * MS), after5[i]);
    /* Memory is per service. */
    offer(f, SVC2, "z", 50 * MS, NULL);
    qw_sim_ledger_advance(f->l, 100 * MS);
    assert_int_equal(status_of(f, SVC, "m4", 100 * MS), QW_SIM_COMMITTED);
    assert_int_equal(status_of(f, SVC2, "z", 100 * MS), QW_SIM_COMMITTED);
    fixture_free(f);

    /* 0 = unlimited */
    cfg.status_memory = 0;
    f = fixture_new(&cfg);
    char id[16];
    for (int i = 0; i < 500; i++) {
        snprintf(id, sizeof(id), "u%d", i);
        offer(f, SVC, id, 0, NULL);
        qw_sim_ledger_advance(f->l, (int64_t)(i + 1) * 10 * MS);
        f->n = 0; /* only the statuses matter here */
    }
    assert_int_equal(status_of(f, SVC, "u0", 10000 * MS), QW_SIM_COMMITTED);
    fixture_free(f);
}

static void test_valid_step(void **state)
{
    struct qw_sim_ledger_config cfg = base_config();
    cfg.valid_step = true;
    struct fixture *f = fixture_new(&cfg);
    offer(f, SVC, "v1", 0, NULL);
    offer(f, SVC, "v2", 0, NULL);
    static const struct {
        int64_t at_ms;
        enum qw_sim_status v1, v2;
        bool v1_settled;
    } rows[] = {
        {9, QW_SIM_PENDING, QW_SIM_PENDING, false},     {10, QW_SIM_VALID, QW_SIM_PENDING, false},
        {20, QW_SIM_COMMITTED, QW_SIM_PENDING, true},   {30, QW_SIM_COMMITTED, QW_SIM_VALID, true},
        {40, QW_SIM_COMMITTED, QW_SIM_COMMITTED, true},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct qw_sim_status_view v;
        qw_sim_ledger_status(f->l, qw_sim_ledger_service(f->l, SVC, false), "v1",
                             rows[i].at_ms * MS, &v);
        assert_int_equal(v.status, rows[i].v1);
        assert_int_equal(v.settled, rows[i].v1_settled);
        assert_int_equal(status_of(f, SVC, "v2", rows[i].at_ms * MS), rows[i].v2);
    }
    /* Valid counts as queued until committed. */
    assert_int_equal(f->n, 4);
    assert_int_equal(f->log[0].from, QW_SIM_PENDING);
    assert_int_equal(f->log[0].to, QW_SIM_VALID);
    assert_int_equal(f->log[1].from, QW_SIM_VALID);
    assert_int_equal(f->log[1].to, QW_SIM_COMMITTED);
    fixture_free(f);
}

static void test_invalid_prefix(void **state)
{
    static const bool steps[] = {false, true};
    for (size_t s = 0; s < 2; s++) {
        struct qw_sim_ledger_config cfg = base_config();
        cfg.invalid_prefix = "dead";
        cfg.valid_step = steps[s];
        struct fixture *f = fixture_new(&cfg);
        struct qw_sim_service *svc = qw_sim_ledger_service(f->l, SVC, true);
        struct qw_sim_submission subs[] = {
            {.batch_id = "deadbeef", .first_txn_id = "t1"},
            {.batch_id = "beefdead"},
            {.batch_id = "deadcafe"},
        };
        enum qw_sim_accept_result res;
        assert_int_equal(qw_sim_ledger_accept(f->l, svc, subs, 3, 0, 0, NULL, &res), QW_OK);
        assert_int_equal(res, QW_SIM_ACCEPTED);
        qw_sim_ledger_advance(f->l, 1000 * MS);
        struct qw_sim_status_view v;
        qw_sim_ledger_peek(f->l, svc, "deadbeef", &v);
        assert_int_equal(v.status, QW_SIM_INVALID);
        assert_non_null(v.message);
        assert_string_equal(v.txn_id, "t1");
        assert_true(v.settled);
        qw_sim_ledger_peek(f->l, svc, "deadcafe", &v);
        assert_int_equal(v.status, QW_SIM_INVALID);
        assert_string_equal(v.txn_id, "deadcafe"); /* no transaction: the batch id */
        qw_sim_ledger_peek(f->l, svc, "beefdead", &v);
        assert_int_equal(v.status, QW_SIM_COMMITTED);
        assert_null(v.message);
        /* The invalid batch goes straight from Pending to Invalid in one step. */
        assert_int_equal(f->log[0].from, QW_SIM_PENDING);
        assert_int_equal(f->log[0].to, QW_SIM_INVALID);
        assert_int_equal(f->log[0].at_us, 10 * MS);
        fixture_free(f);
    }
}

static void test_duplicates(void **state)
{
    struct qw_sim_ledger_config cfg = base_config();
    cfg.status_memory = 1;
    struct fixture *f = fixture_new(&cfg);
    bool dup;
    assert_int_equal(offer(f, SVC, "d1", 0, &dup), QW_SIM_ACCEPTED);
    assert_false(dup);
    assert_int_equal(offer(f, SVC, "d1", 5 * MS, &dup), QW_SIM_ACCEPTED);
    assert_true(dup);
    assert_int_equal(queued(f, SVC), 1);
    /* Its schedule is unchanged by the resubmission. */
    assert_int_equal(qw_sim_ledger_next_due_us(f->l), 10 * MS);
    assert_int_equal(status_of(f, SVC, "d1", 10 * MS), QW_SIM_COMMITTED);
    /* Still remembered: a duplicate, still Committed. */
    assert_int_equal(offer(f, SVC, "d1", 11 * MS, &dup), QW_SIM_ACCEPTED);
    assert_true(dup);
    assert_int_equal(status_of(f, SVC, "d1", 11 * MS), QW_SIM_COMMITTED);
    /* The same id in another service is a different batch. */
    assert_int_equal(offer(f, SVC2, "d1", 11 * MS, &dup), QW_SIM_ACCEPTED);
    assert_false(dup);
    /* Forgotten after d2 is final (memory 1): accepted anew. */
    offer(f, SVC, "d2", 11 * MS, NULL);
    qw_sim_ledger_advance(f->l, 100 * MS);
    assert_int_equal(status_of(f, SVC, "d1", 100 * MS), QW_SIM_UNKNOWN);
    assert_int_equal(offer(f, SVC, "d1", 100 * MS, &dup), QW_SIM_ACCEPTED);
    assert_false(dup);
    assert_int_equal(status_of(f, SVC, "d1", 100 * MS), QW_SIM_PENDING);
    fixture_free(f);

    /* Within one list the second copy is the duplicate. */
    f = fixture_new(&cfg);
    struct qw_sim_service *svc = qw_sim_ledger_service(f->l, SVC, true);
    struct qw_sim_submission subs[] = {{.batch_id = "x"}, {.batch_id = "y"}, {.batch_id = "x"}};
    bool dups[3];
    enum qw_sim_accept_result res;
    assert_int_equal(qw_sim_ledger_accept(f->l, svc, subs, 3, 0, 0, dups, &res), QW_OK);
    assert_false(dups[0]);
    assert_false(dups[1]);
    assert_true(dups[2]);
    assert_int_equal(svc->queued, 2);
    fixture_free(f);
}

static void test_restart_wipes(void **state)
{
    struct qw_sim_ledger_config cfg = base_config();
    cfg.queue_high = 2;
    cfg.queue_low = 1;
    struct fixture *f = fixture_new(&cfg);
    offer(f, SVC, "r1", 0, NULL);
    offer(f, SVC, "r2", 0, NULL);
    assert_int_equal(offer(f, SVC, "r3", 0, NULL), QW_SIM_REFUSED_SERVICE);
    qw_sim_ledger_advance(f->l, 10 * MS); /* r1 committed */
    size_t changes = f->n;
    qw_sim_ledger_restart(f->l, 11 * MS);
    assert_int_equal(f->n, changes); /* no callbacks */
    assert_int_equal(status_of(f, SVC, "r1", 11 * MS), QW_SIM_UNKNOWN);
    assert_int_equal(status_of(f, SVC, "r2", 11 * MS), QW_SIM_UNKNOWN);
    assert_int_equal(queued(f, SVC), 0);
    assert_int_equal(qw_sim_ledger_queued_total(f->l), 0);
    assert_int_equal(qw_sim_ledger_next_due_us(f->l), INT64_MAX);
    /* Back pressure is gone and nothing fires for the wiped batches. */
    bool dup;
    assert_int_equal(offer(f, SVC, "r1", 12 * MS, &dup), QW_SIM_ACCEPTED);
    assert_false(dup);
    qw_sim_ledger_advance(f->l, 1000 * MS);
    assert_int_equal(f->n, changes + 1);
    assert_string_equal(f->log[changes].batch, "r1");
    assert_int_equal(f->log[changes].at_us, 22 * MS);
    /* The high-water mark survives. */
    assert_int_equal(qw_sim_ledger_service(f->l, SVC, false)->max_queued, 2);
    fixture_free(f);
}

static void test_pause_resume(void **state)
{
    struct qw_sim_ledger_config cfg = base_config();
    cfg.valid_step = true;
    struct fixture *f = fixture_new(&cfg);
    offer(f, SVC, "p1", 0, NULL);
    offer(f, SVC, "p2", 0, NULL);
    qw_sim_ledger_advance(f->l, 10 * MS); /* p1 Valid */
    qw_sim_ledger_set_paused(f->l, true, 10 * MS);
    assert_true(qw_sim_ledger_paused(f->l));
    assert_int_equal(qw_sim_ledger_next_due_us(f->l), INT64_MAX);
    size_t before = f->n;
    assert_int_equal(qw_sim_ledger_advance(f->l, 500 * MS), 0);
    assert_int_equal(f->n, before);
    assert_int_equal(offer(f, SVC, "p3", 500 * MS, NULL), QW_SIM_ACCEPTED);
    qw_sim_ledger_set_paused(f->l, false, 1000 * MS);
    /* From the resume: p1 (Valid) commits one step later, p2 and p3 two steps each. */
    assert_int_equal(qw_sim_ledger_next_due_us(f->l), 1010 * MS);
    qw_sim_ledger_advance(f->l, 2000 * MS);
    static const struct {
        const char *batch;
        enum qw_sim_status to;
        int64_t at_ms;
    } rows[] = {
        {"p1", QW_SIM_COMMITTED, 1010}, {"p2", QW_SIM_VALID, 1020},
        {"p2", QW_SIM_COMMITTED, 1030}, {"p3", QW_SIM_VALID, 1040},
        {"p3", QW_SIM_COMMITTED, 1050},
    };
    assert_int_equal(f->n - before, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(f->log[before + i].batch, rows[i].batch);
        assert_int_equal(f->log[before + i].to, rows[i].to);
        assert_int_equal(f->log[before + i].at_us, rows[i].at_ms * MS);
    }
    fixture_free(f);
}

/* Many services keep the due heap consistent (commit times never out of order). */
static void test_many_services_time_order(void **state)
{
    struct qw_sim_ledger_config cfg = base_config();
    cfg.commit_delay_us = 7 * MS;
    struct fixture *f = fixture_new(&cfg);
    char key[QW_SIM_SERVICE_KEY_MAX], id[16];
    int64_t now = 0;
    for (int round = 0; round < 3; round++) {
        for (int s = 0; s < 60; s++) {
            snprintf(key, sizeof(key), "abcde-fghij::s%03d", s);
            snprintf(id, sizeof(id), "r%ds%d", round, s);
            offer(f, key, id, now, NULL);
            now += (s * 7919) % 3 * MS;
        }
    }
    while (qw_sim_ledger_next_due_us(f->l) != INT64_MAX) {
        f->n = 0;
        qw_sim_ledger_advance(f->l, qw_sim_ledger_next_due_us(f->l) + 3 * MS);
        for (size_t i = 1; i < f->n; i++)
            assert_true(f->log[i - 1].at_us <= f->log[i].at_us);
    }
    assert_int_equal(qw_sim_ledger_queued_total(f->l), 0);
    fixture_free(f);
}

/* Offers `id` to `key` at `now_us` as taken by node `origin`; returns the result. */
static enum qw_sim_accept_result offer_from(struct fixture *f, const char *key, const char *id,
                                            int64_t now_us, int origin)
{
    struct qw_sim_service *svc = qw_sim_ledger_service(f->l, key, true);
    struct qw_sim_submission sub = {.batch_id = id};
    enum qw_sim_accept_result res;
    assert_int_equal(qw_sim_ledger_accept(f->l, svc, &sub, 1, now_us, origin, NULL, &res), QW_OK);
    return res;
}

/* A node restart takes back what that node had queued; the rest keeps its schedule. */
static void test_drop_origin(void **state)
{
    struct qw_sim_ledger_config cfg = base_config();
    struct fixture *f = fixture_new(&cfg);
    static const struct {
        const char *key;
        const char *id;
        int origin;
        enum qw_sim_status after; /* once everything left is due */
    } rows[] = {
        {"aaaaa-aaaaa::s1", "a1", 0, QW_SIM_COMMITTED},
        {"aaaaa-aaaaa::s1", "a2", 1, QW_SIM_UNKNOWN},
        {"aaaaa-aaaaa::s1", "a3", 0, QW_SIM_COMMITTED},
        {"bbbbb-bbbbb::s2", "b1", 1, QW_SIM_UNKNOWN},
        {"bbbbb-bbbbb::s2", "b2", 2, QW_SIM_COMMITTED},
        {"ccccc-ccccc::s3", "c1", 1, QW_SIM_UNKNOWN},
    };
    size_t n = sizeof(rows) / sizeof(rows[0]);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(offer_from(f, rows[i].key, rows[i].id, 0, rows[i].origin),
                         QW_SIM_ACCEPTED);
    assert_int_equal(qw_sim_ledger_queued_total(f->l), 6);
    assert_int_equal(qw_sim_ledger_drop_origin(f->l, 1, 1 * MS), 3);
    assert_int_equal(qw_sim_ledger_queued_total(f->l), 3);
    assert_int_equal(queued(f, "ccccc-ccccc::s3"), 0);
    assert_int_equal(qw_sim_ledger_drop_origin(f->l, 1, 1 * MS), 0);
    for (size_t i = 0; i < n; i++) {
        enum qw_sim_status st = status_of(f, rows[i].key, rows[i].id, 1000 * MS);
        if (st != rows[i].after)
            print_error("row %zu: %s\n", i, qw_sim_status_name(st));
        assert_int_equal(st, rows[i].after);
    }
    /* the changes of what was left, in order, and none of what was dropped */
    assert_int_equal(f->n, 3);
    assert_string_equal(f->log[0].batch, "a1");
    assert_string_equal(f->log[1].batch, "b2");
    assert_string_equal(f->log[2].batch, "a3");
    fixture_free(f);
}

/* Protocol 1: nothing is refused, however full the queues or the rate. */
static void test_never_refuse(void **state)
{
    struct qw_sim_ledger_config cfg = base_config();
    cfg.never_refuse = true;
    cfg.global_high = 5;
    cfg.global_low = 2;
    cfg.rate = 1;
    struct fixture *f = fixture_new(&cfg);
    char id[16];
    for (int i = 0; i < 100; i++) {
        snprintf(id, sizeof(id), "n%d", i);
        assert_int_equal(offer_from(f, "aaaaa-aaaaa::s1", id, 0, 0), QW_SIM_ACCEPTED);
    }
    assert_int_equal(queued(f, "aaaaa-aaaaa::s1"), 100);
    fixture_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_checks),
        cmocka_unit_test(test_commit_order_and_pipelining),
        cmocka_unit_test(test_services_interleave),
        cmocka_unit_test(test_hysteresis_30_15),
        cmocka_unit_test(test_global_limit),
        cmocka_unit_test(test_global_max_queued),
        cmocka_unit_test(test_rate),
        cmocka_unit_test(test_status_memory),
        cmocka_unit_test(test_valid_step),
        cmocka_unit_test(test_invalid_prefix),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_restart_wipes),
        cmocka_unit_test(test_pause_resume),
        cmocka_unit_test(test_many_services_time_order),
        cmocka_unit_test(test_drop_origin),
        cmocka_unit_test(test_never_refuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
