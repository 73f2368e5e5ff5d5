/* Unit tests for the nemesis schedule generator (tests/nemesis/plan.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "plan.h"

#include <string.h>

#define CAP 4096
#define ALL ((1u << QW_NEM_KINDS) - 1)

static struct qw_nem_fault a[CAP];
static struct qw_nem_fault b[CAP];

static struct qw_nem_plan_opts opts(uint64_t seed, int repeat, int count)
{
    return (struct qw_nem_plan_opts){
        .seed = seed,
        .timing = {.lease_ms = 1000, .query_timeout_ms = 2000, .http_timeout_ms = 2000},
        .workers = 3,
        .enabled = ALL,
        .repeat = repeat,
        .count = count,
    };
}

static void test_kind_names_round_trip(void **state)
{
    (void)state;
    for (int k = 0; k < QW_NEM_KINDS; k++) {
        enum qw_nem_kind parsed;
        const char *name = qw_nem_kind_name((enum qw_nem_kind)k);
        assert_int_equal(qw_nem_kind_parse(name, &parsed), 0);
        assert_int_equal(parsed, k);
    }
    enum qw_nem_kind parsed;
    assert_int_equal(qw_nem_kind_parse("worker-kill", &parsed), -1);
    assert_int_equal(qw_nem_kind_parse("", &parsed), -1);
    assert_string_equal(qw_nem_kind_name(QW_NEM_KINDS), "?");
}

static void test_same_seed_same_schedule(void **state)
{
    (void)state;
    static const struct {
        uint64_t seed; /* seed */
        int repeat;    /* repeat mode */
        int count;     /* or count mode */
    } rows[] = {{1, 2, 0}, {42, 0, 500}, {UINT64_MAX, 3, 0}, {0, 0, 1}};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct qw_nem_plan_opts o = opts(rows[i].seed, rows[i].repeat, rows[i].count);
        size_t na = 0, nb = 0;
        memset(a, 0xab, sizeof(a));
        memset(b, 0xcd, sizeof(b));
        assert_int_equal(qw_nem_plan(&o, a, CAP, &na), 0);
        assert_int_equal(qw_nem_plan(&o, b, CAP, &nb), 0);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof(a[0]));
    }
}

static void test_different_seeds_differ(void **state)
{
    (void)state;
    struct qw_nem_plan_opts o1 = opts(1, 2, 0), o2 = opts(2, 2, 0);
    size_t na = 0, nb = 0;
    assert_int_equal(qw_nem_plan(&o1, a, CAP, &na), 0);
    assert_int_equal(qw_nem_plan(&o2, b, CAP, &nb), 0);
    assert_int_equal(na, nb);
    int same_order = 1;
    for (size_t i = 0; i < na; i++)
        same_order &= a[i].kind == b[i].kind;
    assert_false(same_order);
}

/* A seed's schedule must not change between versions: a printed seed replays. */
static void test_schedule_is_pinned(void **state)
{
    (void)state;
    struct qw_nem_plan_opts o = opts(12345, 1, 0);
    size_t n = 0;
    assert_int_equal(qw_nem_plan(&o, a, CAP, &n), 0);
    assert_int_equal(n, QW_NEM_KINDS);
    static const char *const expected[] = {
        "worker-kill9",     "net-partition",    "ledger-429",       "pg-backend-stop",
        "ledger-hang",      "worker-stop-0.5x", "ledger-5xx",       "pg-immediate",
        "pg-fast",          "ledger-restart",   "worker-stop-1.5x", "pg-terminate",
        "ledger-malformed", "worker-stop-5x",   "clock-skew",
    };
    for (size_t i = 0; i < n; i++)
        assert_string_equal(qw_nem_kind_name(a[i].kind), expected[i]);
    assert_int_equal(a[0].duration_ms, 1946);
    assert_int_equal(a[0].pick, 941514219u);
}

static void test_repeat_has_every_enabled_kind_exactly(void **state)
{
    (void)state;
    static const struct {
        unsigned enabled; /* kinds on */
        int repeat;       /* times each */
    } rows[] = {
        {ALL, 1},
        {ALL, 2},
        {ALL & ~(1u << QW_NEM_NET_PARTITION) & ~(1u << QW_NEM_CLOCK_SKEW), 2},
        {1u << QW_NEM_LEDGER_429, 5},
        {(1u << QW_NEM_PG_FAST) | (1u << QW_NEM_WORKER_KILL9), 3},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        struct qw_nem_plan_opts o = opts(7 + r, rows[r].repeat, 0);
        o.enabled = rows[r].enabled;
        size_t n = 0;
        assert_int_equal(qw_nem_plan(&o, a, CAP, &n), 0);
        int seen[QW_NEM_KINDS] = {0};
        for (size_t i = 0; i < n; i++) {
            seen[a[i].kind]++;
            assert_int_equal(a[i].seq, (int)i + 1);
        }
        for (int k = 0; k < QW_NEM_KINDS; k++)
            assert_int_equal(seen[k], (rows[r].enabled & (1u << k)) ? rows[r].repeat : 0);
    }
}

static void test_count_mode_uses_enabled_kinds_only(void **state)
{
    (void)state;
    struct qw_nem_plan_opts o = opts(99, 0, 2000);
    o.enabled = (1u << QW_NEM_WORKER_STOP_5) | (1u << QW_NEM_LEDGER_RESTART);
    size_t n = 0;
    assert_int_equal(qw_nem_plan(&o, a, CAP, &n), 0);
    assert_int_equal(n, 2000);
    int seen[QW_NEM_KINDS] = {0};
    for (size_t i = 0; i < n; i++)
        seen[a[i].kind]++;
    assert_true(seen[QW_NEM_WORKER_STOP_5] > 800);
    assert_true(seen[QW_NEM_LEDGER_RESTART] > 800);
    assert_int_equal(seen[QW_NEM_WORKER_STOP_5] + seen[QW_NEM_LEDGER_RESTART], 2000);
}

/* Every duration follows from the timing settings, for many seeds. */
static void test_durations_follow_the_timing(void **state)
{
    (void)state;
    struct qw_nem_plan_opts o = opts(5, 0, 3000);
    const int L = o.timing.lease_ms, Q = o.timing.query_timeout_ms, T = o.timing.http_timeout_ms;
    size_t n = 0;
    assert_int_equal(qw_nem_plan(&o, a, CAP, &n), 0);
    for (size_t i = 0; i < n; i++) {
        const struct qw_nem_fault *f = &a[i];
        assert_in_range(f->gap_ms, 0, L);
        if (qw_nem_kind_has_target(f->kind))
            assert_in_range(f->target, 0, o.workers - 1);
        else
            assert_int_equal(f->target, -1);
        switch (f->kind) {
        case QW_NEM_WORKER_KILL9:
            assert_in_range(f->duration_ms, 0, 2 * L);
            break;
        case QW_NEM_WORKER_STOP_05:
            assert_int_equal(f->duration_ms, L / 2);
            break;
        case QW_NEM_WORKER_STOP_15:
            assert_int_equal(f->duration_ms, 3 * L / 2);
            break;
        case QW_NEM_WORKER_STOP_5:
            assert_int_equal(f->duration_ms, 5 * L);
            break;
        case QW_NEM_PG_IMMEDIATE:
        case QW_NEM_PG_FAST:
            assert_in_range(f->duration_ms, 200, 200 + 2 * L);
            break;
        case QW_NEM_PG_TERMINATE:
            assert_int_equal(f->duration_ms, 0);
            assert_in_range(f->count, 1, 3);
            break;
        case QW_NEM_PG_BACKEND_STOP:
            assert_in_range(f->duration_ms, Q + Q / 4, 2 * Q); /* past the deadline */
            break;
        case QW_NEM_LEDGER_429:
            assert_in_range(f->duration_ms, 2 * L, 5 * L);
            break;
        case QW_NEM_LEDGER_5XX:
            assert_in_range(f->duration_ms, 2 * L, 5 * L);
            assert_in_range(f->rate_permille, 300, 800);
            break;
        case QW_NEM_LEDGER_HANG:
            assert_in_range(f->duration_ms, T + T / 4, 2 * T); /* past the HTTP timeout */
            assert_in_range(f->rate_permille, 300, 800);
            break;
        case QW_NEM_LEDGER_RESTART:
            assert_int_equal(f->duration_ms, 0);
            break;
        case QW_NEM_LEDGER_MALFORMED:
            assert_in_range(f->duration_ms, 2 * L, 5 * L);
            assert_in_range(f->rate_permille, 300, 800);
            break;
        case QW_NEM_NET_PARTITION:
            assert_in_range(f->duration_ms, L / 2, 6 * L);
            break;
        case QW_NEM_CLOCK_SKEW:
            assert_in_range(f->duration_ms, 5 * L, 10 * L);
            assert_in_range(f->skew_offset_s < 0 ? -f->skew_offset_s : f->skew_offset_s, 600, 7200);
            assert_in_range(f->skew_rate_permille, 950, 1050);
            break;
        case QW_NEM_KINDS:
            fail();
        }
    }
}

static void test_invalid_options_are_refused(void **state)
{
    (void)state;
    struct qw_nem_plan_opts base = opts(1, 1, 0);
    struct qw_nem_plan_opts rows[7];
    for (int i = 0; i < 7; i++)
        rows[i] = base;
    rows[0].enabled = 0;
    rows[1].workers = 0;
    rows[2].timing.lease_ms = 0;
    rows[3].timing.query_timeout_ms = -1;
    rows[4].timing.http_timeout_ms = 0;
    rows[5].repeat = -1;
    rows[6].enabled = 1u << QW_NEM_KINDS; /* no known kind */
    for (int i = 0; i < 7; i++) {
        size_t n = 99;
        assert_int_equal(qw_nem_plan(&rows[i], a, CAP, &n), -1);
        assert_int_equal(n, 0);
    }
    size_t n = 0;
    assert_int_equal(qw_nem_plan(&base, a, QW_NEM_KINDS - 1, &n), -1); /* no room */
    assert_int_equal(qw_nem_plan(&base, a, QW_NEM_KINDS, &n), 0);
    assert_int_equal(n, QW_NEM_KINDS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kind_names_round_trip),
        cmocka_unit_test(test_same_seed_same_schedule),
        cmocka_unit_test(test_different_seeds_differ),
        cmocka_unit_test(test_schedule_is_pinned),
        cmocka_unit_test(test_repeat_has_every_enabled_kind_exactly),
        cmocka_unit_test(test_count_mode_uses_enabled_kinds_only),
        cmocka_unit_test(test_durations_follow_the_timing),
        cmocka_unit_test(test_invalid_options_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
