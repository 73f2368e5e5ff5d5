/*
 * Unit tests of the submitter's ready queue (src/submitter/prioq.c): priority,
 * aging and round-robin. Table-driven scripts of pushes and pops with the
 * time passed in, then properties checked over long simulated runs
 * (fairness among equals, the bound on how long low priority waits).
 */
#include "submitter/prioq.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#define AGING 1000 /* aging_ms of the scripted cases */
#define MAX_SERVICES 8

/* One service's entry. */
struct svc {
    struct qw_prioq_item item; /* first: item == (struct qw_prioq_item *)svc */
    char name;                 /* 'A'.. */
};

enum op {
    PUSH = 1, /* push `name` with `priority` at `at_ms` */
    POP,      /* pop at `at_ms`, expect `name` ('-' = empty) */
    AGAIN,    /* put the last popped entry back (its start failed) */
    REMOVE,   /* remove `name` */
};

struct step {
    enum op op;
    char name;
    int priority;
    int64_t at_ms;
};

struct script {
    const char *what;
    struct step steps[16];
};

static const struct script scripts[] = {
    {"equal priorities leave in arrival order; one that re-enters goes last (round-robin)",
     {{PUSH, 'A', 0, 0},
      {PUSH, 'B', 0, 1},
      {PUSH, 'C', 0, 2},
      {POP, 'A', 0, 3},
      {PUSH, 'A', 0, 3},
      {POP, 'B', 0, 4},
      {POP, 'C', 0, 5},
      {POP, 'A', 0, 6},
      {POP, '-', 0, 7}}},
    {"higher priority first, whatever the arrival order",
     {{PUSH, 'L', 0, 0},
      {PUSH, 'M', 3, 10},
      {PUSH, 'H', 10, 20},
      {POP, 'H', 0, 20},
      {POP, 'M', 0, 20},
      {POP, 'L', 0, 20}}},
    {"a waiting entry gains a step per aging_ms: it beats later arrivals of higher priority",
     {{PUSH, 'L', 0, 0},
      {PUSH, 'H', 5, 4000},
      {POP, 'H', 0, 4000}, /* ranks: L 4000, H 5000 */
      {PUSH, 'G', 5, 5500},
      {POP, 'L', 0, 5500}, /* ranks: L 5500, G 5000 */
      {POP, 'G', 0, 5500}}},
    {"equal ranks: the one that waited longer",
     {{PUSH, 'L', 0, 0}, {PUSH, 'H', 1, 1000}, {POP, 'L', 0, 1000}, {POP, 'H', 0, 1000}}},
    {"negative priorities rank below 0",
     {{PUSH, 'N', -2, 0}, {PUSH, 'Z', 0, 0}, {POP, 'Z', 0, 0}, {POP, 'N', 0, 0}}},
    {"an entry put back keeps its turn",
     {{PUSH, 'A', 0, 0},
      {PUSH, 'B', 0, 1},
      {POP, 'A', 0, 2},
      {AGAIN, 'A', 0, 2},
      {POP, 'A', 0, 3},
      {POP, 'B', 0, 3}}},
    {"removing from the middle keeps the others' order",
     {{PUSH, 'A', 1, 0},
      {PUSH, 'B', 1, 1},
      {PUSH, 'C', 1, 2},
      {PUSH, 'D', 0, 3},
      {REMOVE, 'B', 0, 4},
      {POP, 'A', 0, 4},
      {POP, 'C', 0, 4},
      {POP, 'D', 0, 4},
      {POP, '-', 0, 4}}},
};

static struct svc *find(struct svc *all, char name)
{
    for (int i = 0; i < MAX_SERVICES; i++) {
        if (all[i].name == name)
            return &all[i];
    }
    for (int i = 0; i < MAX_SERVICES; i++) {
        if (all[i].name == 0) {
            all[i].name = name;
            return &all[i];
        }
    }
    fail_msg("too many services");
    return NULL;
}

static void run_script(const struct script *sc)
{
    struct svc all[MAX_SERVICES];
    memset(all, 0, sizeof(all));
    struct qw_prioq q;
    qw_prioq_init(&q, AGING);
    struct svc *last = NULL;
    size_t queued = 0;
    for (const struct step *st = sc->steps; st->op; st++) {
        switch (st->op) {
        case PUSH:
            assert_int_equal(qw_prioq_push(&q, &find(all, st->name)->item, st->priority, st->at_ms),
                             0);
            queued++;
            break;
        case POP: {
            struct qw_prioq_item *it = qw_prioq_pop(&q, st->at_ms);
            char got = it ? ((struct svc *)(void *)it)->name : '-';
            if (got != st->name)
                fail_msg("%s: pop at %lld gave %c, want %c", sc->what, (long long)st->at_ms, got,
                         st->name);
            if (it) {
                assert_false(it->queued);
                queued--;
            }
            last = (struct svc *)(void *)it;
            break;
        }
        case AGAIN:
            assert_non_null(last);
            assert_int_equal(qw_prioq_push_again(&q, &last->item), 0);
            queued++;
            break;
        case REMOVE:
            qw_prioq_remove(&q, &find(all, st->name)->item);
            qw_prioq_remove(&q, &find(all, st->name)->item); /* twice: a no-op */
            queued--;
            break;
        }
        assert_int_equal(qw_prioq_len(&q), queued);
    }
    qw_prioq_free(&q);
}

static void test_scripts(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(scripts) / sizeof(scripts[0]); i++) {
        print_message("script: %s\n", scripts[i].what);
        run_script(&scripts[i]);
    }
}

static void test_rank(void **state)
{
    (void)state;
    static const struct {
        int priority;
        int64_t waited_ms, aging_ms, rank;
    } rows[] = {
        {0, 0, 1000, 0},
        {0, 2500, 1000, 2500},
        {3, 0, 1000, 3000},
        {-1, 500, 1000, -500},
        {2, -10, 1000, 2000}, /* a clock read earlier than the push counts as no wait */
        {1000, 0, 3600000, 3600000000LL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        assert_int_equal(qw_prioq_rank(rows[i].priority, rows[i].waited_ms, rows[i].aging_ms),
                         rows[i].rank);
    struct qw_prioq q;
    qw_prioq_init(&q, 0); /* < 1 counts as 1 */
    assert_int_equal(q.aging_ms, 1);
    qw_prioq_free(&q);
}

/* Iteration visits every entry once, highest priority first, oldest first within one. */
static void test_iteration(void **state)
{
    (void)state;
    struct svc all[6] = {{.name = 'a'}, {.name = 'b'}, {.name = 'c'},
                         {.name = 'd'}, {.name = 'e'}, {.name = 'f'}};
    static const int prio[6] = {0, 5, 0, -3, 5, 7};
    struct qw_prioq q;
    qw_prioq_init(&q, AGING);
    for (int i = 0; i < 6; i++)
        assert_int_equal(qw_prioq_push(&q, &all[i].item, prio[i], i), 0);
    char seen[7] = {0};
    int n = 0;
    for (struct qw_prioq_item *it = qw_prioq_first(&q); it; it = qw_prioq_next(&q, it))
        seen[n++] = ((struct svc *)(void *)it)->name;
    assert_string_equal(seen, "fbeacd");
    /* remove while iterating (take the next first), emptying a level on the way */
    struct qw_prioq_item *it = qw_prioq_first(&q);
    while (it) {
        struct qw_prioq_item *next = qw_prioq_next(&q, it);
        if (it->priority == 5 || it->priority == -3)
            qw_prioq_remove(&q, it);
        it = next;
    }
    assert_int_equal(qw_prioq_len(&q), 3);
    assert_int_equal(q.n_levels, 2);
    assert_int_equal(((struct svc *)(void *)qw_prioq_pop(&q, 10))->name, 'f');
    qw_prioq_free(&q);
}

/*
 * Round-robin under saturation: N services of one priority, one pop every
 * 10 ms, each popped service re-entering at once (it keeps finding work):
 * every service gets the same number of turns, and never two turns in a
 * row while another waits.
 */
static void test_round_robin_is_fair(void **state)
{
    (void)state;
    enum { N = 7, POPS = 700 };
    struct svc all[N];
    memset(all, 0, sizeof(all));
    struct qw_prioq q;
    qw_prioq_init(&q, AGING);
    for (int i = 0; i < N; i++) {
        all[i].name = (char)('A' + i);
        assert_int_equal(qw_prioq_push(&q, &all[i].item, 0, 0), 0);
    }
    int turns[N] = {0};
    char prev = 0;
    for (int k = 0; k < POPS; k++) {
        int64_t t = 10 * (int64_t)k;
        struct svc *s = (struct svc *)(void *)qw_prioq_pop(&q, t);
        assert_non_null(s);
        assert_int_not_equal(s->name, prev);
        prev = s->name;
        turns[s->name - 'A']++;
        assert_int_equal(qw_prioq_push(&q, &s->item, 0, t), 0);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(turns[i], POPS / N);
    qw_prioq_free(&q);
}

/*
 * Aging bounds starvation: a priority-0 service waits behind a stream of
 * priority-P services that keep re-entering (one pop every 10 ms) for at
 * least P * aging_ms and at most that plus the time one of them waits for
 * its next turn (HIGH pops), then gets its turn.
 */
static void test_low_priority_cannot_starve(void **state)
{
    (void)state;
    static const struct {
        int high;         /* priority of the stream */
        int64_t aging_ms; /* aging */
    } rows[] = {{1, 1000}, {5, 1000}, {10, 200}, {1000, 10}};
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        enum { HIGH = 4 };
        struct svc hi[HIGH], lo = {.name = 'l'};
        memset(hi, 0, sizeof(hi));
        struct qw_prioq q;
        qw_prioq_init(&q, rows[r].aging_ms);
        assert_int_equal(qw_prioq_push(&q, &lo.item, 0, 0), 0);
        for (int i = 0; i < HIGH; i++) {
            hi[i].name = (char)('A' + i);
            assert_int_equal(qw_prioq_push(&q, &hi[i].item, rows[r].high, 0), 0);
        }
        int64_t aged = (int64_t)rows[r].high * rows[r].aging_ms;
        int64_t bound = aged + (HIGH + 1) * 10;
        int64_t served_at = -1;
        for (int64_t t = 0; t <= bound + 1000 && served_at < 0; t += 10) {
            struct svc *s = (struct svc *)(void *)qw_prioq_pop(&q, t);
            assert_non_null(s);
            if (s == &lo)
                served_at = t;
            else
                assert_int_equal(qw_prioq_push(&q, &s->item, rows[r].high, t), 0);
        }
        if (served_at < 0 || served_at > bound)
            fail_msg("priority %d, aging %lld ms: low priority served at %lld ms, bound %lld",
                     rows[r].high, (long long)rows[r].aging_ms, (long long)served_at,
                     (long long)bound);
        /* and not earlier either: priority still means something */
        assert_true(served_at >= aged);
        qw_prioq_free(&q);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scripts),
        cmocka_unit_test(test_rank),
        cmocka_unit_test(test_iteration),
        cmocka_unit_test(test_round_robin_is_fair),
        cmocka_unit_test(test_low_priority_cannot_starve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
