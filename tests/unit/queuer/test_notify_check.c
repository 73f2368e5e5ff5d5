/* Unit tests for the wake-up self-test (queuer/notify_check.h), table-driven. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "queuer/notify_check.h"

#include <stdio.h>
#include <string.h>

#define CYCLE_MS 200 /* a self-test expires one cycle after it was sent */

/* One step of a worker's life, applied to the self-test at monotonic `at_ms`. */
enum step_kind {
    SEND,      /* a claims cycle: counted, and a self-test sent when due */
    RECEIVE,   /* the pending self-test's payload arrived */
    LATE,      /* the payload of an earlier (expired or voided) self-test arrived */
    EXPIRE,    /* the expiry check at at_ms */
    LOST,      /* the listening connection was lost */
    BACK,      /* ... and reconnected */
    CYCLES_59, /* 59 claims cycles in which nothing else happened */
    UNSENT,    /* a claims cycle whose self-test, due, could not be sent */
};

struct step {
    enum step_kind kind;
    int64_t at_ms;
    enum qw_notify_check_change want_change; /* what the step returned (SAME for SEND, BACK) */
    bool want_delivering;                    /* after the step */
    bool want_sent;                          /* SEND: a self-test went out */
};

struct check_case {
    const char *name;
    struct step steps[10];
    int n;
};

#define S(kind, at, change, delivering, sent)                                                      \
    {                                                                                              \
        kind, at, QW_NOTIFY_CHECK_##change, delivering, sent                                       \
    }

static const struct check_case cases[] = {
    {"a self-test goes out at start and passes quietly",
     {S(SEND, 0, SAME, true, true), S(RECEIVE, 5, SAME, true, false),
      S(EXPIRE, 500, SAME, true, false)},
     3},
    {"none within a cycle: not delivered, said once",
     {S(SEND, 0, SAME, true, true), S(EXPIRE, CYCLE_MS - 1, SAME, true, false),
      S(EXPIRE, CYCLE_MS, FAILED, false, false), S(EXPIRE, 5000, SAME, false, false)},
     4},
    {"no second test until 60 cycles have passed, then it recovers",
     {S(SEND, 0, SAME, true, true), S(EXPIRE, CYCLE_MS, FAILED, false, false),
      S(SEND, 1000, SAME, false, false), S(CYCLES_59, 0, SAME, false, false),
      S(SEND, 13000, SAME, false, true), S(RECEIVE, 13002, RECOVERED, true, false)},
     6},
    {"a retest that fails again says nothing more",
     {S(SEND, 0, SAME, true, true), S(EXPIRE, CYCLE_MS, FAILED, false, false),
      S(CYCLES_59, 0, SAME, false, false), S(SEND, 13000, SAME, false, true),
      S(EXPIRE, 13000 + CYCLE_MS, SAME, false, false)},
     5},
    {"a late answer to an expired test proves nothing",
     {S(SEND, 0, SAME, true, true), S(EXPIRE, CYCLE_MS, FAILED, false, false),
      S(LATE, 300, SAME, false, false)},
     3},
    {"a lost listener stops delivery at once, said once; back, it tests at once",
     {S(SEND, 0, SAME, true, true), S(RECEIVE, 3, SAME, true, false),
      S(LOST, 50, FAILED, false, false), S(SEND, 200, SAME, false, false),
      S(LOST, 250, SAME, false, false), S(BACK, 400, SAME, false, false),
      S(SEND, 400, SAME, false, true), S(RECEIVE, 402, RECOVERED, true, false)},
     8},
    {"a listener lost with a test pending: the test is void, not a second message",
     {S(SEND, 0, SAME, true, true), S(LOST, 10, FAILED, false, false),
      S(EXPIRE, 5000, SAME, false, false)},
     3},
    {"a test that could not be sent goes out at the next cycle, and is not expired",
     {S(UNSENT, 0, SAME, true, false), S(EXPIRE, 1000, SAME, true, false),
      S(SEND, 1000, SAME, true, true), S(RECEIVE, 1001, SAME, true, false)},
     4},
    {"one test at a time; a reconnect voids the pending one and tests at once",
     {S(SEND, 0, SAME, true, true), S(SEND, 1, SAME, true, false), S(BACK, 2, SAME, true, false),
      S(LATE, 3, SAME, true, false), S(EXPIRE, CYCLE_MS + 1, SAME, true, false),
      S(SEND, CYCLE_MS + 1, SAME, true, true), S(RECEIVE, CYCLE_MS + 2, SAME, true, false),
      S(SEND, CYCLE_MS + 3, SAME, true, false)},
     8},
};

static void test_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct check_case *tc = &cases[i];
        struct qw_notify_check c;
        qw_notify_check_init(&c);
        uint64_t expired = 0;
        for (int k = 0; k < tc->n; k++) {
            const struct step *st = &tc->steps[k];
            enum qw_notify_check_change got = QW_NOTIFY_CHECK_SAME;
            bool sent = false;
            switch (st->kind) {
            case SEND:
                qw_notify_check_cycle(&c);
                if (qw_notify_check_send_due(&c)) {
                    sent = true;
                    uint64_t next = qw_notify_check_next(&c);
                    qw_notify_check_sent(&c, st->at_ms);
                    assert_int_equal(c.token, next);
                }
                break;
            case RECEIVE:
                got = qw_notify_check_received(&c, c.token);
                break;
            case LATE:
                got = qw_notify_check_received(&c, expired);
                break;
            case EXPIRE:
                expired = c.token ? c.token : expired;
                got = qw_notify_check_expire(&c, st->at_ms, CYCLE_MS);
                break;
            case LOST:
                got = qw_notify_check_listener_lost(&c);
                break;
            case BACK:
                expired = c.token ? c.token : expired; /* voided, if pending */
                qw_notify_check_listener_back(&c);
                break;
            case UNSENT:
                qw_notify_check_cycle(&c);
                assert_true(qw_notify_check_send_due(&c)); /* due, but not recorded */
                break;
            case CYCLES_59:
                for (int n = 0; n < 59; n++)
                    qw_notify_check_cycle(&c);
                break;
            }
            if (got != st->want_change || c.delivering != st->want_delivering ||
                sent != st->want_sent)
                fail_msg("%s, step %d: change %d (want %d), delivering %d (want %d), sent %d "
                         "(want %d)",
                         tc->name, k, got, st->want_change, c.delivering, st->want_delivering, sent,
                         st->want_sent);
        }
    }
}

static void test_deadline(void **state)
{
    (void)state;
    struct qw_notify_check c;
    qw_notify_check_init(&c);
    assert_int_equal(qw_notify_check_deadline(&c, CYCLE_MS), INT64_MAX);
    qw_notify_check_sent(&c, 1000);
    assert_int_equal(qw_notify_check_deadline(&c, CYCLE_MS), 1000 + CYCLE_MS);
}

struct parse_case {
    const char *payload;
    bool want_selftest;
    uint64_t want_token;
};

static void test_parse(void **state)
{
    (void)state;
    static const struct parse_case pc[] = {
        {QW_NOTIFY_CHECK_PREFIX "1", true, 1},
        {QW_NOTIFY_CHECK_PREFIX "18446744073709551615", true, UINT64_MAX},
        {QW_NOTIFY_CHECK_PREFIX "", true, 0},
        {QW_NOTIFY_CHECK_PREFIX "12x", true, 0},
        {QW_NOTIFY_CHECK_PREFIX "-3", true, 0},
        {"abcde-fghij::0001:7", false, 0},
        {"*", false, 0},
        {"", false, 0},
        {"selftest:1", false, 0},
    };
    for (size_t i = 0; i < sizeof(pc) / sizeof(pc[0]); i++) {
        uint64_t token = 99;
        bool got = qw_notify_check_parse(pc[i].payload, &token);
        if (got != pc[i].want_selftest || (got && token != pc[i].want_token))
            fail_msg("'%s': self-test %d (want %d), token %llu (want %llu)", pc[i].payload, got,
                     pc[i].want_selftest, (unsigned long long)token,
                     (unsigned long long)pc[i].want_token);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
