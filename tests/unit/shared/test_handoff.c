/* Unit tests for the bounded handoff queue (shared/handoff.h), including two-thread stress. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/err.h"
#include "shared/handoff.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>

/* Items are small integers carried in the pointer; 0 would be NULL, also allowed. */
#define ITEM(n) ((void *)(uintptr_t)(n))
#define NUM(p) ((uintptr_t)(p))

static struct qw_handoff *make(size_t capacity)
{
    struct qw_handoff *h = NULL;
    struct qw_error err;
    assert_int_equal(qw_handoff_create(&h, capacity, &err), QW_OK);
    assert_non_null(h);
    return h;
}

/* True when the fd polls readable right now (no waiting). */
static bool fd_readable(const struct qw_handoff *h)
{
    struct pollfd pfd = {.fd = qw_handoff_fd(h), .events = POLLIN};
    int n = poll(&pfd, 1, 0);
    assert_true(n >= 0);
    return n == 1 && (pfd.revents & POLLIN);
}

static void test_create_invalid(void **state)
{
    struct qw_handoff *h = ITEM(1);
    struct qw_error err;
    assert_int_equal(qw_handoff_create(&h, 0, &err), QW_ERR_INVALID);
    assert_null(h);
    assert_int_equal(err.rc, QW_ERR_INVALID);
    qw_handoff_destroy(NULL, NULL);
}

static void test_fifo_and_backpressure(void **state)
{
    struct qw_handoff *h = make(3);
    void *item = NULL;
    /* Several laps round the ring. */
    uintptr_t next_in = 1, next_out = 1;
    for (int lap = 0; lap < 5; lap++) {
        while (qw_handoff_len(h) < 3)
            assert_int_equal(qw_handoff_push(h, ITEM(next_in++)), QW_OK);
        /* Full: refused at once, without blocking, and the queue is unchanged. */
        assert_int_equal(qw_handoff_push(h, ITEM(999)), QW_ERR_BACKPRESSURE);
        assert_int_equal(qw_handoff_len(h), 3);
        for (int k = 0; k < 2; k++) {
            assert_int_equal(qw_handoff_pop(h, 0, &item), QW_OK);
            assert_int_equal(NUM(item), next_out++);
        }
    }
    /* NULL is a valid item. */
    assert_int_equal(qw_handoff_pop(h, 0, &item), QW_OK);
    assert_int_equal(NUM(item), next_out++);
    assert_int_equal(qw_handoff_push(h, NULL), QW_OK);
    item = ITEM(5);
    assert_int_equal(qw_handoff_pop(h, 0, &item), QW_OK);
    assert_null(item);
    assert_int_equal(qw_handoff_len(h), 0);
    qw_handoff_destroy(h, NULL);
}

static void test_pop_empty_times_out(void **state)
{
    struct qw_handoff *h = make(4);
    void *item = ITEM(7);
    assert_int_equal(qw_handoff_pop(h, 0, &item), QW_ERR_TIMEOUT);
    assert_int_equal(qw_handoff_pop(h, 5, &item), QW_ERR_TIMEOUT);
    assert_int_equal(NUM(item), 7); /* untouched */
    assert_int_equal(qw_handoff_waiters(h), 0);
    qw_handoff_destroy(h, NULL);
}

static void test_fd_is_level_triggered(void **state)
{
    struct qw_handoff *h = make(4);
    void *item;
    assert_true(qw_handoff_fd(h) >= 0);
    assert_false(fd_readable(h));
    assert_int_equal(qw_handoff_push(h, ITEM(1)), QW_OK);
    assert_true(fd_readable(h));
    assert_int_equal(qw_handoff_push(h, ITEM(2)), QW_OK);
    assert_true(fd_readable(h));
    assert_int_equal(qw_handoff_pop(h, 0, &item), QW_OK);
    assert_true(fd_readable(h)); /* one item left */
    assert_int_equal(qw_handoff_pop(h, 0, &item), QW_OK);
    assert_false(fd_readable(h)); /* drained */
    assert_int_equal(qw_handoff_pop(h, 0, &item), QW_ERR_TIMEOUT);
    assert_false(fd_readable(h));
    assert_int_equal(qw_handoff_push(h, ITEM(3)), QW_OK);
    assert_true(fd_readable(h));
    assert_int_equal(qw_handoff_pop(h, 0, &item), QW_OK);
    assert_false(fd_readable(h));
    /* Closed: readable for good, so a poller notices the shutdown. */
    qw_handoff_close(h);
    assert_true(fd_readable(h));
    assert_int_equal(qw_handoff_pop(h, 0, &item), QW_ERR_SHUTDOWN);
    assert_true(fd_readable(h));
    qw_handoff_destroy(h, NULL);
}

static void test_close_drains_then_shutdown(void **state)
{
    struct qw_handoff *h = make(4);
    void *item;
    assert_int_equal(qw_handoff_push(h, ITEM(1)), QW_OK);
    assert_int_equal(qw_handoff_push(h, ITEM(2)), QW_OK);
    qw_handoff_close(h);
    qw_handoff_close(h); /* idempotent */
    assert_int_equal(qw_handoff_push(h, ITEM(3)), QW_ERR_SHUTDOWN);
    assert_int_equal(qw_handoff_pop(h, -1, &item), QW_OK);
    assert_int_equal(NUM(item), 1);
    assert_true(fd_readable(h));
    assert_int_equal(qw_handoff_pop(h, 0, &item), QW_OK);
    assert_int_equal(NUM(item), 2);
    assert_int_equal(qw_handoff_pop(h, -1, &item), QW_ERR_SHUTDOWN); /* does not block */
    assert_int_equal(qw_handoff_pop(h, 1000, &item), QW_ERR_SHUTDOWN);
    qw_handoff_destroy(h, NULL);
}

static int freed_sum;

static void count_free(void *item)
{
    freed_sum += (int)NUM(item);
}

static void test_destroy_frees_leftovers(void **state)
{
    struct qw_handoff *h = make(3);
    void *item;
    /* Wrap the ring so leftovers straddle the end of the array. */
    assert_int_equal(qw_handoff_push(h, ITEM(100)), QW_OK);
    assert_int_equal(qw_handoff_push(h, ITEM(200)), QW_OK);
    assert_int_equal(qw_handoff_pop(h, 0, &item), QW_OK);
    assert_int_equal(qw_handoff_pop(h, 0, &item), QW_OK);
    assert_int_equal(qw_handoff_push(h, ITEM(1)), QW_OK);
    assert_int_equal(qw_handoff_push(h, ITEM(2)), QW_OK);
    assert_int_equal(qw_handoff_push(h, ITEM(4)), QW_OK);
    freed_sum = 0;
    qw_handoff_destroy(h, count_free);
    assert_int_equal(freed_sum, 7);
}

/* --- threads ------------------------------------------------------------------ */

struct waiter {
    struct qw_handoff *h; /* queue */
    int rc;               /* pop result */
    void *item;           /* popped item */
};

static void *blocking_pop(void *arg)
{
    struct waiter *w = arg;
    w->rc = qw_handoff_pop(w->h, -1, &w->item);
    return NULL;
}

/* Returns once `n` threads are blocked in pop() (a condition, not a sleep). */
static void await_waiters(struct qw_handoff *h, size_t n)
{
    while (qw_handoff_waiters(h) < n)
        sched_yield();
}

static void test_close_wakes_blocked_pop(void **state)
{
    struct qw_handoff *h = make(2);
    struct waiter w[2] = {{.h = h, .rc = 1}, {.h = h, .rc = 1}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, blocking_pop, &w[i]), 0);
    await_waiters(h, 2);
    qw_handoff_close(h);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(w[i].rc, QW_ERR_SHUTDOWN);
    }
    qw_handoff_destroy(h, NULL);
}

static void test_push_wakes_blocked_pop(void **state)
{
    struct qw_handoff *h = make(2);
    struct waiter w = {.h = h, .rc = 1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, blocking_pop, &w), 0);
    await_waiters(h, 1);
    assert_int_equal(qw_handoff_push(h, ITEM(42)), QW_OK);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(w.rc, QW_OK);
    assert_int_equal(NUM(w.item), 42);
    qw_handoff_destroy(h, NULL);
}

#define STRESS_ITEMS 200000

struct stress {
    struct qw_handoff *h; /* queue under test */
    uintptr_t first;      /* first item number this producer sends */
    uintptr_t count;      /* items this producer sends */
    uintptr_t stride;     /* distance between its item numbers */
    size_t refused;       /* BACKPRESSURE answers seen (producer) */
    uintptr_t received;   /* items received (consumer) */
    bool in_order;        /* consumer: every item was the next expected one */
    bool use_fd;          /* consumer waits with poll() on the fd */
    bool spurious;        /* consumer: the fd was readable but the queue was empty */
    int end_rc;           /* consumer: result that ended the loop */
};

/* Pushes first, first+stride, ...; on back pressure yields and offers the same item again. */
static void *producer(void *arg)
{
    struct stress *s = arg;
    for (uintptr_t i = 0; i < s->count; i++) {
        void *item = ITEM(s->first + i * s->stride);
        int rc;
        while ((rc = qw_handoff_push(s->h, item)) == QW_ERR_BACKPRESSURE) {
            s->refused++;
            sched_yield();
        }
        if (rc != QW_OK)
            break;
    }
    return NULL;
}

/* Pops until SHUTDOWN, checking items arrive as 1, 2, 3, ... */
static void *consumer(void *arg)
{
    struct stress *s = arg;
    s->in_order = true;
    for (;;) {
        void *item;
        int rc;
        if (s->use_fd) {
            struct pollfd pfd = {.fd = qw_handoff_fd(s->h), .events = POLLIN};
            if (poll(&pfd, 1, -1) < 0)
                continue;
            rc = qw_handoff_pop(s->h, 0, &item);
            if (rc == QW_ERR_TIMEOUT) {
                s->spurious = true;
                continue;
            }
        } else {
            rc = qw_handoff_pop(s->h, -1, &item);
        }
        if (rc != QW_OK) {
            s->end_rc = rc;
            break;
        }
        s->received++;
        if (NUM(item) != s->received)
            s->in_order = false;
    }
    return NULL;
}

static void run_stress(size_t capacity, bool use_fd)
{
    struct qw_handoff *h = make(capacity);
    struct stress prod = {.h = h, .first = 1, .count = STRESS_ITEMS, .stride = 1};
    struct stress cons = {.h = h, .use_fd = use_fd};
    pthread_t tp, tc;
    assert_int_equal(pthread_create(&tc, NULL, consumer, &cons), 0);
    assert_int_equal(pthread_create(&tp, NULL, producer, &prod), 0);
    assert_int_equal(pthread_join(tp, NULL), 0);
    qw_handoff_close(h); /* everything is pushed; the consumer drains, then stops */
    assert_int_equal(pthread_join(tc, NULL), 0);
    assert_int_equal(cons.end_rc, QW_ERR_SHUTDOWN);
    assert_int_equal(cons.received, STRESS_ITEMS);
    assert_true(cons.in_order);
    assert_false(cons.spurious);
    assert_int_equal(qw_handoff_len(h), 0);
    qw_handoff_destroy(h, NULL);
}

static void test_stress_two_threads_small_ring(void **state)
{
    run_stress(8, false);
}

static void test_stress_two_threads_poll_fd(void **state)
{
    run_stress(64, true);
}

/* Several producers and consumers: every item arrives exactly once. */
#define MULTI_PRODUCERS 3
#define MULTI_CONSUMERS 3
#define MULTI_PER_PRODUCER 50000

struct collector {
    struct qw_handoff *h; /* queue under test */
    unsigned char *seen;  /* per item number: times received (shared, disjoint writes) */
    size_t received;      /* items this consumer took */
    bool bad;             /* an item out of range or received twice */
};

static void *collecting_consumer(void *arg)
{
    struct collector *c = arg;
    void *item;
    while (qw_handoff_pop(c->h, -1, &item) == QW_OK) {
        uintptr_t n = NUM(item);
        if (n >= MULTI_PRODUCERS * MULTI_PER_PRODUCER) {
            c->bad = true;
            continue;
        }
        /* Each number is pushed once, so only one consumer ever writes this byte. */
        if (c->seen[n]++ != 0)
            c->bad = true;
        c->received++;
    }
    return NULL;
}

static void test_stress_many_threads_exactly_once(void **state)
{
    struct qw_handoff *h = make(16);
    unsigned char *seen = calloc(MULTI_PRODUCERS * MULTI_PER_PRODUCER, 1);
    assert_non_null(seen);
    struct stress prod[MULTI_PRODUCERS];
    struct collector cons[MULTI_CONSUMERS];
    pthread_t tp[MULTI_PRODUCERS], tc[MULTI_CONSUMERS];
    for (int i = 0; i < MULTI_CONSUMERS; i++) {
        cons[i] = (struct collector){.h = h, .seen = seen};
        assert_int_equal(pthread_create(&tc[i], NULL, collecting_consumer, &cons[i]), 0);
    }
    for (int i = 0; i < MULTI_PRODUCERS; i++) {
        prod[i] = (struct stress){
            .h = h, .first = (uintptr_t)i, .count = MULTI_PER_PRODUCER, .stride = MULTI_PRODUCERS};
        assert_int_equal(pthread_create(&tp[i], NULL, producer, &prod[i]), 0);
    }
    for (int i = 0; i < MULTI_PRODUCERS; i++)
        assert_int_equal(pthread_join(tp[i], NULL), 0);
    qw_handoff_close(h);
    size_t total = 0;
    for (int i = 0; i < MULTI_CONSUMERS; i++) {
        assert_int_equal(pthread_join(tc[i], NULL), 0);
        assert_false(cons[i].bad);
        total += cons[i].received;
    }
    assert_int_equal(total, MULTI_PRODUCERS * MULTI_PER_PRODUCER);
    for (size_t n = 0; n < MULTI_PRODUCERS * MULTI_PER_PRODUCER; n++)
        assert_int_equal(seen[n], 1);
    free(seen);
    qw_handoff_destroy(h, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_invalid),
        cmocka_unit_test(test_fifo_and_backpressure),
        cmocka_unit_test(test_pop_empty_times_out),
        cmocka_unit_test(test_fd_is_level_triggered),
        cmocka_unit_test(test_close_drains_then_shutdown),
        cmocka_unit_test(test_destroy_frees_leftovers),
        cmocka_unit_test(test_close_wakes_blocked_pop),
        cmocka_unit_test(test_push_wakes_blocked_pop),
        cmocka_unit_test(test_stress_two_threads_small_ring),
        cmocka_unit_test(test_stress_two_threads_poll_fd),
        cmocka_unit_test(test_stress_many_threads_exactly_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
