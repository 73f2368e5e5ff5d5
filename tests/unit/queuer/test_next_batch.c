/* Unit tests for one-round serial queuing (queuer/next_batch.h): tables and properties. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/backoff.h"
#include "common/err.h"
#include "queuer/next_batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOW INT64_C(1700000000000000) /* us since epoch */
#define AT0 INT64_MIN                 /* row retry_us meaning "retry_at_us = 0" */
#define MAX_ROWS 16
#define ID_LEN 128

/* One input row of a table case, in compact form. */
struct row {
    char service;                /* 'A', 'B', ...: service "circA-xxxxx::svcA" */
    int id;                      /* batch id number: hex digits, zero-padded to 128 */
    int64_t created_us;          /* offset from NOW, us */
    enum qw_batch_status status; /* status */
    bool submitted;              /* submitted flag */
    int64_t retry_us;            /* retry_at offset from NOW, us; AT0 = retry_at 0 (due) */
};

struct table_case {
    const char *name;          /* what the case shows */
    struct row rows[MAX_ROWS]; /* input; ends at the first row with service 0 */
    int expected[MAX_ROWS];    /* expected chosen ids, in output order; ends at 0 */
};

/* Materialised input: strings owned by the fixture. */
struct input {
    struct qw_serial_batch batches[MAX_ROWS]; /* rows */
    char services[MAX_ROWS][32];              /* service id storage */
    char ids[MAX_ROWS][ID_LEN + 1];           /* batch id storage */
    size_t n;                                 /* rows used */
};

static void make_id(char *out, int id)
{
    snprintf(out, ID_LEN + 1, "%0128x", (unsigned)id);
}

static void materialise(const struct table_case *tc, struct input *in)
{
    memset(in, 0, sizeof(*in));
    for (size_t i = 0; i < MAX_ROWS && tc->rows[i].service; i++) {
        const struct row *r = &tc->rows[i];
        snprintf(in->services[i], sizeof(in->services[i]), "circ%c-xxxxx::svc%c", r->service,
                 r->service);
        make_id(in->ids[i], r->id);
        in->batches[i] = (struct qw_serial_batch){
            .service_id = in->services[i],
            .batch_id = in->ids[i],
            .created_at_us = NOW + r->created_us,
            .retry_at_us = r->retry_us == AT0 ? 0 : NOW + r->retry_us,
            .status = r->status,
            .submitted = r->submitted,
        };
        in->n = i + 1;
    }
}

#define N QW_STATUS_NONE
#define P QW_STATUS_PENDING
#define U QW_STATUS_UNKNOWN
#define D QW_STATUS_DELAYED
#define V QW_STATUS_VALID
#define C QW_STATUS_COMMITTED
#define I QW_STATUS_INVALID

static const struct table_case cases[] = {
    /* --- the seed's "queue now" list --- */
    {"new batch, nothing else", {{'A', 1, -10, N, false, 0}}, {1}},
    {"Unknown, confirmation over, not submitted", {{'A', 1, -10, U, false, -1}}, {1}},
    {"Unknown with retry_at 0 is due", {{'A', 1, -10, U, false, AT0}}, {1}},
    {"Delayed with retry_at 0 is due", {{'A', 1, -10, D, false, AT0}}, {1}},
    {"Delayed, window expired", {{'A', 1, -10, D, false, -5}}, {1}},
    /* --- the seed's "queue later" list --- */
    {"Delayed, window not expired", {{'A', 1, -10, D, false, 5}}, {0}},
    {"new batch behind a Pending one", {{'A', 1, -10, P, true, 0}, {'A', 2, -5, N, false, 0}}, {0}},
    {"new batch behind a due Unknown one: the Unknown goes",
     {{'A', 1, -10, U, false, 0}, {'A', 2, -5, N, false, 0}},
     {1}},
    {"new batch behind a not-yet-due Unknown one",
     {{'A', 1, -10, U, false, 1}, {'A', 2, -5, N, false, 0}},
     {0}},
    {"new batch behind a due Delayed one: the Delayed goes",
     {{'A', 1, -10, D, false, -1}, {'A', 2, -5, N, false, 0}},
     {1}},
    {"new batch behind a not-yet-due Delayed one",
     {{'A', 1, -10, D, false, 100}, {'A', 2, -5, N, false, 0}},
     {0}},
    /* --- the seed's "don't queue" list --- */
    {"Pending", {{'A', 1, -10, P, true, 0}}, {0}},
    {"Pending without the submitted flag still blocks", {{'A', 1, -10, P, false, 0}}, {0}},
    {"being submitted (submitted, no status)", {{'A', 1, -10, N, true, 0}}, {0}},
    {"final statuses are ignored",
     {{'A', 1, -10, V, true, 0}, {'A', 2, -9, C, true, 0}, {'A', 3, -8, I, true, 0}},
     {0}},
    {"older final batches do not hide the next one",
     {{'A', 1, -10, C, true, 0}, {'A', 2, -9, I, true, 0}, {'A', 3, -8, N, false, 0}},
     {3}},
    /* --- blocking anywhere in the service --- */
    {"a newer Pending batch blocks an older new one",
     {{'A', 1, -10, N, false, 0}, {'A', 2, -5, P, true, 0}},
     {0}},
    {"a newer batch being submitted blocks an older due Unknown",
     {{'A', 1, -10, U, false, 0}, {'A', 2, -5, N, true, 0}},
     {0}},
    {"a submitted Delayed batch is held by a submitter", {{'A', 1, -10, D, true, -5}}, {0}},
    {"a submitted Unknown batch is held by a submitter", {{'A', 1, -10, U, true, 0}}, {0}},
    {"an out-of-range status blocks its service",
     {{'A', 1, -10, N, false, 0}, {'A', 2, -5, (enum qw_batch_status)42, false, 0}},
     {0}},
    /* --- order inside a service --- */
    {"oldest created_at goes first",
     {{'A', 3, -5, N, false, 0}, {'A', 2, -7, N, false, 0}, {'A', 1, -6, N, false, 0}},
     {2}},
    {"created_at tie breaks on batch_id",
     {{'A', 0xb, -5, N, false, 0}, {'A', 0xa, -5, N, false, 0}},
     {0xa}},
    {"created_at tie breaks on batch_id (other input order)",
     {{'A', 0xa, -5, N, false, 0}, {'A', 0xb, -5, N, false, 0}},
     {0xa}},
    {"created_at wins over batch_id",
     {{'A', 0xa, -4, N, false, 0}, {'A', 0xb, -5, N, false, 0}},
     {0xb}},
    /* --- Delayed/Unknown windows at the boundary --- */
    {"Delayed 1us before expiry", {{'A', 1, -10, D, false, 1}}, {0}},
    {"Delayed exactly at expiry", {{'A', 1, -10, D, false, 0}}, {1}},
    {"Delayed 1us after expiry", {{'A', 1, -10, D, false, -1}}, {1}},
    {"Unknown 1us before the confirmation delay ends", {{'A', 1, -10, U, false, 1}}, {0}},
    {"Unknown exactly when the confirmation delay ends", {{'A', 1, -10, U, false, 0}}, {1}},
    {"Unknown 1us after the confirmation delay ends", {{'A', 1, -10, U, false, -1}}, {1}},
    /* --- the seed's flaw: Unknown and Delayed in one service, plus new batches --- */
    {"flaw: due Unknown, due Delayed and new batches: only the oldest goes",
     {{'A', 1, -40, U, false, -1},
      {'A', 2, -30, D, false, -1},
      {'A', 3, -20, N, false, 0},
      {'A', 4, -10, N, false, 0}},
     {1}},
    {"flaw: same, Delayed older: only the Delayed goes",
     {{'A', 4, -10, N, false, 0},
      {'A', 1, -40, D, false, -1},
      {'A', 3, -20, N, false, 0},
      {'A', 2, -30, U, false, -1}},
     {1}},
    {"flaw: oldest Unknown not yet due holds back a due Delayed and new batches",
     {{'A', 1, -40, U, false, 50}, {'A', 2, -30, D, false, -1}, {'A', 3, -20, N, false, 0}},
     {0}},
    {"flaw: oldest Delayed not yet due holds back a due Unknown",
     {{'A', 1, -40, D, false, 50}, {'A', 2, -30, U, false, -1}, {'A', 3, -20, N, false, 0}},
     {0}},
    /* --- several services --- */
    {"one per service, oldest chosen batch first",
     {{'B', 0x21, -50, N, false, 0},
      {'A', 0x11, -10, N, false, 0},
      {'B', 0x22, -40, N, false, 0},
      {'C', 0x31, -30, D, false, -1},
      {'A', 0x12, -5, N, false, 0},
      {'D', 0x41, -60, P, true, 0},
      {'D', 0x42, -55, N, false, 0}},
     {0x21, 0x31, 0x11}},
    {"equal created_at across services: ordered by batch_id",
     {{'A', 0x2, -10, N, false, 0}, {'B', 0x1, -10, N, false, 0}, {'C', 0x3, -10, N, false, 0}},
     {0x1, 0x2, 0x3}},
    {"empty input", {{0}}, {0}},
};

static void run_case(const struct table_case *tc)
{
    struct input in;
    size_t out[MAX_ROWS];
    size_t n_out = 99;
    const struct qw_serial_batch *scratch[MAX_ROWS];

    materialise(tc, &in);
    /* Once with caller scratch, once letting the function allocate. */
    for (int pass = 0; pass < 2; pass++) {
        int rc = qw_serial_choose(in.batches, in.n, NOW, pass ? NULL : scratch, out, &n_out, NULL);
        assert_int_equal(rc, QW_OK);
        size_t n_expected = 0;
        while (n_expected < MAX_ROWS && tc->expected[n_expected])
            n_expected++;
        if (n_out != n_expected)
            print_error("case \"%s\": chose %zu batches, expected %zu\n", tc->name, n_out,
                        n_expected);
        assert_int_equal(n_out, n_expected);
        for (size_t k = 0; k < n_out; k++) {
            char want[ID_LEN + 1];
            make_id(want, tc->expected[k]);
            assert_true(out[k] < in.n);
            if (strcmp(in.batches[out[k]].batch_id, want) != 0)
                print_error("case \"%s\": position %zu chose row %zu\n", tc->name, k, out[k]);
            assert_string_equal(in.batches[out[k]].batch_id, want);
        }
    }
}

static void test_table(void **state)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_case(&cases[i]);
}

/* Every row order of every table case gives the same chosen batches. */
static void test_table_shuffled(void **state)
{
    struct qw_rng rng;
    qw_rng_seed(&rng, 77);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct table_case tc = cases[i];
        size_t n = 0;
        while (n < MAX_ROWS && tc.rows[n].service)
            n++;
        for (int round = 0; round < 50; round++) {
            for (size_t k = n; k > 1; k--) { /* Fisher-Yates */
                size_t j = (size_t)qw_rng_below(&rng, k);
                struct row t = tc.rows[k - 1];
                tc.rows[k - 1] = tc.rows[j];
                tc.rows[j] = t;
            }
            run_case(&tc);
        }
    }
}

static void test_stats(void **state)
{
    static const struct table_case tc = {
        "stats",
        {{'A', 1, -10, N, false, 0},
         {'B', 2, -10, P, true, 0},
         {'C', 3, -10, D, false, 700},
         {'D', 4, -10, U, false, 300},
         {'E', 5, -10, C, true, 0},
         {'E', 6, -5, N, true, 0}},
        {1},
    };
    struct input in;
    size_t out[MAX_ROWS], n_out;
    struct qw_serial_stats st;
    materialise(&tc, &in);
    assert_int_equal(qw_serial_choose(in.batches, in.n, NOW, NULL, out, &n_out, &st), QW_OK);
    assert_int_equal(n_out, 1);
    assert_int_equal(st.services, 5);
    assert_int_equal(st.chosen, 1);
    assert_int_equal(st.blocked, 2);
    assert_int_equal(st.waiting, 2);
    assert_int_equal(st.ignored, 1);
    assert_int_equal(st.next_retry_us, NOW + 300);
}

static void test_invalid_input(void **state)
{
    struct qw_serial_batch b[2] = {
        {.service_id = "abcde-fghij::abcd", .batch_id = "aa", .status = QW_STATUS_NONE},
        {.service_id = NULL, .batch_id = "bb", .status = QW_STATUS_NONE},
    };
    size_t out[2], n_out = 5;
    assert_int_equal(qw_serial_choose(b, 2, NOW, NULL, out, &n_out, NULL), QW_ERR_INVALID);
    assert_int_equal(n_out, 0);
    b[1].service_id = "abcde-fghij::abcd";
    b[1].batch_id = NULL;
    assert_int_equal(qw_serial_choose(b, 2, NOW, NULL, out, &n_out, NULL), QW_ERR_INVALID);
    assert_int_equal(n_out, 0);
    assert_int_equal(qw_serial_choose(b, 0, NOW, NULL, out, &n_out, NULL), QW_OK);
    assert_int_equal(n_out, 0);
}

static void test_status_names(void **state)
{
    static const char *const names[] = {"Pending", "Unknown",   "Delayed",
                                        "Valid",   "Committed", "Invalid"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        enum qw_batch_status s;
        assert_int_equal(qw_batch_status_parse(names[i], &s), 0);
        assert_string_equal(qw_batch_status_name(s), names[i]);
    }
    enum qw_batch_status s = QW_STATUS_PENDING;
    assert_int_equal(qw_batch_status_parse(NULL, &s), 0);
    assert_int_equal(s, QW_STATUS_NONE);
    s = QW_STATUS_PENDING;
    assert_int_equal(qw_batch_status_parse("", &s), 0);
    assert_int_equal(s, QW_STATUS_NONE);
    assert_int_equal(qw_batch_status_parse("PENDING", &s), -1); /* the seed's flaw */
    assert_int_equal(qw_batch_status_parse("Committedx", &s), -1);
    assert_string_equal(qw_batch_status_name((enum qw_batch_status)99), "?");
    assert_true(qw_batch_status_is_final(QW_STATUS_VALID));
    assert_true(qw_batch_status_is_final(QW_STATUS_COMMITTED));
    assert_true(qw_batch_status_is_final(QW_STATUS_INVALID));
    assert_false(qw_batch_status_is_final(QW_STATUS_NONE));
    assert_false(qw_batch_status_is_final(QW_STATUS_PENDING));
    assert_false(qw_batch_status_is_final(QW_STATUS_UNKNOWN));
    assert_false(qw_batch_status_is_final(QW_STATUS_DELAYED));
}

/* --- property test ---------------------------------------------------------- */

#define PROP_SERVICES 3000
#define PROP_MAX_PER_SERVICE 7

/* A random population of services; strings owned here. */
struct population {
    struct qw_serial_batch *batches; /* rows, shuffled */
    char (*services)[24];            /* per service id */
    char (*ids)[ID_LEN + 1];         /* per row batch id */
    size_t *service_of;              /* per row: service number */
    size_t n;                        /* rows */
};

static void population_make(struct population *p, struct qw_rng *rng)
{
    size_t cap = PROP_SERVICES * PROP_MAX_PER_SERVICE;
    p->batches = calloc(cap, sizeof(*p->batches));
    p->services = calloc(PROP_SERVICES, sizeof(*p->services));
    p->ids = calloc(cap, sizeof(*p->ids));
    p->service_of = calloc(cap, sizeof(*p->service_of));
    assert_non_null(p->batches);
    assert_non_null(p->services);
    assert_non_null(p->ids);
    assert_non_null(p->service_of);
    p->n = 0;
    for (size_t s = 0; s < PROP_SERVICES; s++) {
        snprintf(p->services[s], sizeof(p->services[s]), "c%04zu-abcde::s%03zu", s % 10000,
                 s % 1000);
        size_t k = (size_t)qw_rng_below(rng, PROP_MAX_PER_SERVICE + 1);
        for (size_t j = 0; j < k; j++) {
            size_t i = p->n++;
            /* Few distinct created_at values so ties are common; random ids. */
            snprintf(p->ids[i], ID_LEN + 1, "%016llx%0112llx",
                     (unsigned long long)qw_rng_below(rng, 4),
                     (unsigned long long)qw_rng_next(rng));
            uint64_t dice = qw_rng_below(rng, 100);
            enum qw_batch_status st = dice < 45   ? QW_STATUS_NONE
                                      : dice < 55 ? QW_STATUS_PENDING
                                      : dice < 70 ? QW_STATUS_UNKNOWN
                                      : dice < 85 ? QW_STATUS_DELAYED
                                      : dice < 90 ? QW_STATUS_VALID
                                      : dice < 95 ? QW_STATUS_COMMITTED
                                                  : QW_STATUS_INVALID;
            p->batches[i] = (struct qw_serial_batch){
                .service_id = p->services[s],
                .batch_id = p->ids[i],
                .created_at_us = NOW - (int64_t)qw_rng_below(rng, 6),
                .retry_at_us =
                    qw_rng_below(rng, 4) == 0 ? 0 : NOW + (int64_t)qw_rng_below(rng, 5) - 2,
                .status = st,
                .submitted = qw_rng_below(rng, 100) < (st == QW_STATUS_PENDING ? 90 : 10),
            };
            p->service_of[i] = s;
        }
    }
    /* Shuffle rows (and their service numbers) together. */
    for (size_t k = p->n; k > 1; k--) {
        size_t j = (size_t)qw_rng_below(rng, k);
        struct qw_serial_batch tb = p->batches[k - 1];
        p->batches[k - 1] = p->batches[j];
        p->batches[j] = tb;
        size_t ts = p->service_of[k - 1];
        p->service_of[k - 1] = p->service_of[j];
        p->service_of[j] = ts;
    }
}

static void population_free(struct population *p)
{
    free(p->batches);
    free(p->services);
    free(p->ids);
    free(p->service_of);
}

/* (created_at, batch_id) order, as the model sees it. */
static bool older(const struct qw_serial_batch *a, const struct qw_serial_batch *b)
{
    if (a->created_at_us != b->created_at_us)
        return a->created_at_us < b->created_at_us;
    return strcmp(a->batch_id, b->batch_id) < 0;
}

/*
 * A deliberately naive model of docs/DESIGN.md §5.1, per service, O(n) per service:
 * returns the row to choose or SIZE_MAX. `rows` lists the service's rows.
 */
static size_t model_choose(const struct population *p, const size_t *rows, size_t k)
{
    size_t oldest = SIZE_MAX;
    for (size_t j = 0; j < k; j++) {
        const struct qw_serial_batch *b = &p->batches[rows[j]];
        if (qw_batch_status_is_final(b->status))
            continue;
        if (b->status == QW_STATUS_PENDING || b->submitted)
            return SIZE_MAX;
        if (oldest == SIZE_MAX || older(b, &p->batches[oldest]))
            oldest = rows[j];
    }
    if (oldest == SIZE_MAX)
        return SIZE_MAX;
    const struct qw_serial_batch *o = &p->batches[oldest];
    if (o->status == QW_STATUS_NONE || NOW >= o->retry_at_us)
        return oldest;
    return SIZE_MAX;
}

static void test_property_random_services(void **state)
{
    for (uint64_t seed = 1; seed <= 5; seed++) {
        struct qw_rng rng;
        struct population p;
        qw_rng_seed(&rng, seed);
        population_make(&p, &rng);

        size_t *out = calloc(p.n, sizeof(*out));
        size_t *chosen_of = malloc(PROP_SERVICES * sizeof(*chosen_of));
        size_t *rows = malloc(p.n * sizeof(*rows));
        assert_non_null(out);
        assert_non_null(chosen_of);
        assert_non_null(rows);
        size_t n_out;
        assert_int_equal(qw_serial_choose(p.batches, p.n, NOW, NULL, out, &n_out, NULL), QW_OK);

        /* (a) at most one per service */
        for (size_t s = 0; s < PROP_SERVICES; s++)
            chosen_of[s] = SIZE_MAX;
        for (size_t k = 0; k < n_out; k++) {
            size_t s = p.service_of[out[k]];
            assert_int_equal(chosen_of[s], SIZE_MAX);
            chosen_of[s] = out[k];
        }
        size_t total_chosen = 0;
        for (size_t s = 0; s < PROP_SERVICES; s++) {
            size_t k = 0;
            for (size_t i = 0; i < p.n; i++)
                if (p.service_of[i] == s)
                    rows[k++] = i;
            size_t c = chosen_of[s];
            if (c != SIZE_MAX) {
                total_chosen++;
                const struct qw_serial_batch *cb = &p.batches[c];
                assert_false(qw_batch_status_is_final(cb->status));
                assert_false(cb->submitted);
                for (size_t j = 0; j < k; j++) {
                    const struct qw_serial_batch *b = &p.batches[rows[j]];
                    if (qw_batch_status_is_final(b->status))
                        continue;
                    /* (b) the chosen batch is the oldest non-final of its service */
                    assert_true(rows[j] == c || older(cb, b));
                    /* (c) no Pending or being-submitted batch in a chosen service */
                    assert_int_not_equal(b->status, QW_STATUS_PENDING);
                    assert_false(b->submitted);
                }
            }
            /* and nothing eligible is left out: the naive model agrees */
            assert_int_equal(c, model_choose(&p, rows, k));
        }
        assert_int_equal(total_chosen, n_out);
        /* Output order: oldest first. */
        for (size_t k = 1; k < n_out; k++)
            assert_false(older(&p.batches[out[k]], &p.batches[out[k - 1]]));
        assert_true(n_out > PROP_SERVICES / 10); /* the population exercises choosing */

        free(out);
        free(chosen_of);
        free(rows);
        population_free(&p);
    }
}

/* The same population in two different orders chooses the same batches in the same order. */
static void test_property_shuffle_invariant(void **state)
{
    struct qw_rng rng;
    struct population p;
    qw_rng_seed(&rng, 4242);
    population_make(&p, &rng);
    size_t *out1 = calloc(p.n, sizeof(*out1));
    size_t *out2 = calloc(p.n, sizeof(*out2));
    char(*ids1)[ID_LEN + 1] = calloc(p.n, sizeof(*ids1));
    assert_non_null(out1);
    assert_non_null(out2);
    assert_non_null(ids1);
    size_t n1, n2;
    assert_int_equal(qw_serial_choose(p.batches, p.n, NOW, NULL, out1, &n1, NULL), QW_OK);
    for (size_t k = 0; k < n1; k++)
        memcpy(ids1[k], p.batches[out1[k]].batch_id, ID_LEN + 1);
    for (size_t k = p.n; k > 1; k--) {
        size_t j = (size_t)qw_rng_below(&rng, k);
        struct qw_serial_batch t = p.batches[k - 1];
        p.batches[k - 1] = p.batches[j];
        p.batches[j] = t;
    }
    assert_int_equal(qw_serial_choose(p.batches, p.n, NOW, NULL, out2, &n2, NULL), QW_OK);
    assert_int_equal(n1, n2);
    for (size_t k = 0; k < n2; k++)
        assert_string_equal(p.batches[out2[k]].batch_id, ids1[k]);
    free(out1);
    free(out2);
    free(ids1);
    population_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_table_shuffled),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_invalid_input),
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_property_random_services),
        cmocka_unit_test(test_property_shuffle_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
