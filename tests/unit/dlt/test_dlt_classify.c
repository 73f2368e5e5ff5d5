/* Unit tests for classifying ledger responses (POST and status GET). */
#include "dlt/dlt_client.h"
#include "dlt/dlt_classify.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define LINK_BODY "{\"link\": \"http://h/scabbard/abcde-12345/a1b2/batch_statuses?ids=ab\"}"

static struct qw_dlt_response http(long status, const char *body)
{
    struct qw_dlt_response r = {
        .transport = QW_DLT_TRANSPORT_OK,
        .http_status = status,
        .body = body,
        .body_len = body ? strlen(body) : 0,
    };
    return r;
}

static void test_post_status_table(void **state)
{
    (void)state;
    static const struct {
        long status;              /* HTTP status */
        const char *body;         /* response body */
        enum qw_dlt_outcome want; /* expected outcome */
        const char *msg_contains; /* expected part of the message */
    } cases[] = {
        {202, LINK_BODY, QW_DLT_ACCEPTED, "batch_statuses?ids=ab"},
        {202, "{\"link\": \"x\", \"extra\": [1, 2]}", QW_DLT_ACCEPTED, "x"},
        {202, NULL, QW_DLT_RETRY, "HTTP 202"},
        {202, "", QW_DLT_RETRY, "HTTP 202"},
        {202, "{}", QW_DLT_RETRY, "without a link"},
        {202, "{\"link\": 5}", QW_DLT_RETRY, "without a link"},
        {202, "{\"link\": \"\"}", QW_DLT_RETRY, "without a link"},
        {202, "{\"link\": null}", QW_DLT_RETRY, "without a link"},
        {202, "[\"link\"]", QW_DLT_RETRY, "without a link"},
        {202, "{\"link\": \"x\"", QW_DLT_RETRY, "without a link"}, /* truncated */
        {202, "not json", QW_DLT_RETRY, "not json"},
        {429, NULL, QW_DLT_BACKPRESSURE, "HTTP 429"},
        {429, "slow down", QW_DLT_BACKPRESSURE, "slow down"},
        {400, "{\"message\": \"signature mismatch\"}", QW_DLT_INVALID, "signature mismatch"},
        {400, "{\"message\": \"multi\\nline\\r\\n text\"}", QW_DLT_INVALID, "multi line text"},
        /* a 400 is the ledger's verdict only in scabbard's error shape; anything else
         * (a proxy's HTML page, a TLS port answering plain HTTP) is a failed attempt */
        {400, "plain reason\n", QW_DLT_RETRY, "HTTP 400 not from the ledger: plain reason"},
        {400, "{\"message\": 17}", QW_DLT_RETRY, "HTTP 400 not from the ledger"},
        {400, "{\"error\": \"other shape\"}", QW_DLT_RETRY, "other shape"},
        {400, NULL, QW_DLT_RETRY, "HTTP 400 not from the ledger"},
        {400, "  \r\n ", QW_DLT_RETRY, "HTTP 400 not from the ledger"},
        {400, "<html><body>400 Bad Request</body></html>", QW_DLT_RETRY, "400 Bad Request"},
        {400, "{\"message\": \"\"}", QW_DLT_RETRY, "HTTP 400 not from the ledger"},
        {400, "[{\"message\": \"x\"}]", QW_DLT_RETRY, "HTTP 400 not from the ledger"},
        {401, NULL, QW_DLT_AUTH, "HTTP 401"},
        {403, "forbidden", QW_DLT_AUTH, "forbidden"},
        {404, "no such circuit", QW_DLT_RETRY, "HTTP 404"},
        {500, NULL, QW_DLT_RETRY, "HTTP 500"},
        {502, NULL, QW_DLT_RETRY, "HTTP 502"},
        {503, "maintenance", QW_DLT_RETRY, "maintenance"},
        {504, NULL, QW_DLT_RETRY, "HTTP 504"},
        {200, LINK_BODY, QW_DLT_RETRY, "HTTP 200"}, /* only 202 means accepted */
        {201, LINK_BODY, QW_DLT_RETRY, "HTTP 201"},
        {204, NULL, QW_DLT_RETRY, "HTTP 204"},
        {301, NULL, QW_DLT_RETRY, "HTTP 301"},
        {100, NULL, QW_DLT_RETRY, "HTTP 100"},
        {405, NULL, QW_DLT_RETRY, "HTTP 405"},
        {408, NULL, QW_DLT_RETRY, "HTTP 408"},
        {413, NULL, QW_DLT_RETRY, "HTTP 413"},
        {418, NULL, QW_DLT_RETRY, "HTTP 418"},
        {0, NULL, QW_DLT_RETRY, "HTTP 0"},
        {999, NULL, QW_DLT_RETRY, "HTTP 999"},
        {-1, NULL, QW_DLT_RETRY, "HTTP -1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct qw_dlt_response r = http(cases[i].status, cases[i].body);
        char msg[QW_DLT_MESSAGE_MAX];
        enum qw_dlt_outcome got = qw_dlt_classify_post(&r, msg, sizeof(msg));
        if (got != cases[i].want)
            fail_msg("case %zu (HTTP %ld %s): got %s, want %s", i, cases[i].status,
                     cases[i].body ? cases[i].body : "-", qw_dlt_outcome_name(got),
                     qw_dlt_outcome_name(cases[i].want));
        if (!strstr(msg, cases[i].msg_contains))
            fail_msg("case %zu: message \"%s\" lacks \"%s\"", i, msg, cases[i].msg_contains);
    }
}

static void test_post_transport_errors(void **state)
{
    (void)state;
    static const enum qw_dlt_transport errors[] = {
        QW_DLT_TRANSPORT_CONNECT,   QW_DLT_TRANSPORT_TIMEOUT, QW_DLT_TRANSPORT_DROPPED,
        QW_DLT_TRANSPORT_TOO_LARGE, QW_DLT_TRANSPORT_TLS,     QW_DLT_TRANSPORT_OTHER,
    };
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
        /* whatever status or body came before the failure, a transport error is RETRY */
        static const long statuses[] = {0, 202, 400, 401, 429};
        for (size_t k = 0; k < sizeof(statuses) / sizeof(statuses[0]); k++) {
            struct qw_dlt_response r = http(statuses[k], LINK_BODY);
            r.transport = errors[i];
            r.transport_detail = "Operation timed out\nafter 300 ms";
            char msg[QW_DLT_MESSAGE_MAX];
            assert_int_equal(qw_dlt_classify_post(&r, msg, sizeof(msg)), QW_DLT_RETRY);
            assert_non_null(strstr(msg, qw_dlt_transport_name(errors[i])));
            assert_non_null(strstr(msg, "Operation timed out after 300 ms"));
        }
        struct qw_dlt_response r = http(0, NULL);
        r.transport = errors[i];
        char msg[QW_DLT_MESSAGE_MAX];
        assert_int_equal(qw_dlt_classify_post(&r, msg, sizeof(msg)), QW_DLT_RETRY);
        assert_string_equal(msg, qw_dlt_transport_name(errors[i]));
    }
}

static void test_invalid_message_bounded(void **state)
{
    (void)state;
    /* a 100 kB reason is cut to the message cap, as valid UTF-8 without controls */
    size_t n = 100000;
    char *body = malloc(n + 32);
    assert_non_null(body);
    int pos = sprintf(body, "{\"message\": \"");
    for (size_t i = 0; i < n; i += 3)
        memcpy(body + pos + i, i % 2 ? "\xe2\x82\xac" : "\\n\x20", 3);
    strcpy(body + pos + n - n % 3, "\"}");
    struct qw_dlt_response r = http(400, body);
    char msg[QW_DLT_MESSAGE_MAX];
    assert_int_equal(qw_dlt_classify_post(&r, msg, sizeof(msg)), QW_DLT_INVALID);
    assert_true(strlen(msg) <= QW_DLT_MESSAGE_MAX - 1);
    assert_true(strlen(msg) > QW_DLT_MESSAGE_MAX - 8);
    for (const char *p = msg; *p; p++)
        assert_true((unsigned char)*p >= 0x20);
    free(body);

    /* a raw (not scabbard) 400 body is bounded too */
    char raw[3000];
    memset(raw, 'r', sizeof(raw) - 1);
    raw[sizeof(raw) - 1] = '\0';
    r = http(400, raw);
    assert_int_equal(qw_dlt_classify_post(&r, msg, sizeof(msg)), QW_DLT_RETRY);
    assert_int_equal(strlen(msg), QW_DLT_MESSAGE_MAX - 1);

    /* small caps and no buffer at all are safe */
    char tiny[4];
    snprintf(raw, sizeof(raw), "{\"message\": \"rrrrrr\"}");
    r = http(400, raw);
    assert_int_equal(qw_dlt_classify_post(&r, tiny, sizeof(tiny)), QW_DLT_INVALID);
    assert_string_equal(tiny, "rrr");
    assert_int_equal(qw_dlt_classify_post(&r, NULL, 0), QW_DLT_INVALID);
    memset(raw, 'r', sizeof(raw) - 1);
    raw[sizeof(raw) - 1] = '\0';
    r = http(503, raw);
    assert_int_equal(qw_dlt_classify_post(&r, tiny, sizeof(tiny)), QW_DLT_RETRY);
    assert_int_equal(strlen(tiny), 3);
}

static void test_body_not_nul_terminated(void **state)
{
    (void)state;
    const char buf[] = LINK_BODY "garbage";
    struct qw_dlt_response r = http(202, NULL);
    r.body = buf;
    r.body_len = strlen(LINK_BODY);
    assert_int_equal(qw_dlt_classify_post(&r, NULL, 0), QW_DLT_ACCEPTED);
    r.body_len = strlen(LINK_BODY) - 1;
    assert_int_equal(qw_dlt_classify_post(&r, NULL, 0), QW_DLT_RETRY);
}

static void test_deeply_nested_bodies(void **state)
{
    (void)state;
    size_t depth = 200000;
    char *body = malloc(2 * depth + 1);
    assert_non_null(body);
    memset(body, '[', depth);
    memset(body + depth, ']', depth);
    body[2 * depth] = '\0';
    struct qw_dlt_response r = http(202, body);
    assert_int_equal(qw_dlt_classify_post(&r, NULL, 0), QW_DLT_RETRY);
    r.http_status = 400; /* not scabbard's shape: a failed attempt, not a verdict */
    char msg[QW_DLT_MESSAGE_MAX];
    assert_int_equal(qw_dlt_classify_post(&r, msg, sizeof(msg)), QW_DLT_RETRY);
    free(body);
}

/* Ids for the status GET tests. */
static char sid_a[129], sid_b[129];
static const char *sids[2] = {sid_a, sid_b};

static int setup_ids(void **state)
{
    (void)state;
    memset(sid_a, 'a', 128);
    memset(sid_b, 'b', 128);
    return 0;
}

static void test_status_table(void **state)
{
    (void)state;
    char good[1024];
    snprintf(good, sizeof(good),
             "[{\"id\": \"%s\", \"status\": {\"statusType\": \"Committed\", \"message\": []}}]",
             sid_a);
    static const struct {
        long status;              /* HTTP status */
        int body_good;            /* 1: a well-formed answer; 0: body below */
        const char *body;         /* response body when not good */
        enum qw_dlt_outcome want; /* expected outcome */
    } cases[] = {
        {200, 1, NULL, QW_DLT_OK},
        {200, 0, "[]", QW_DLT_OK},
        {200, 0, "", QW_DLT_RETRY},
        {200, 0, NULL, QW_DLT_RETRY},
        {200, 0, "{}", QW_DLT_RETRY},
        {200, 0, "[{\"id\": ", QW_DLT_RETRY},
        {200, 0, "<html>", QW_DLT_RETRY},
        {401, 1, NULL, QW_DLT_AUTH},
        {403, 0, NULL, QW_DLT_AUTH},
        {400, 0, "{\"message\": \"bad ids\"}", QW_DLT_RETRY}, /* never Invalid for a GET */
        {404, 0, NULL, QW_DLT_RETRY},
        {429, 0, NULL, QW_DLT_RETRY},
        {500, 1, NULL, QW_DLT_RETRY},
        {503, 0, NULL, QW_DLT_RETRY},
        {202, 1, NULL, QW_DLT_RETRY},
        {204, 0, NULL, QW_DLT_RETRY},
        {301, 0, NULL, QW_DLT_RETRY},
        {0, 0, NULL, QW_DLT_RETRY},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct qw_dlt_response r = http(cases[i].status, cases[i].body_good ? good : cases[i].body);
        struct qw_dlt_status out[2];
        struct qw_dlt_status_counts counts = {7, 7, 7};
        char msg[QW_DLT_MESSAGE_MAX];
        enum qw_dlt_outcome got =
            qw_dlt_classify_status(&r, sids, 2, out, &counts, msg, sizeof(msg));
        if (got != cases[i].want)
            fail_msg("case %zu (HTTP %ld): got %s, want %s", i, cases[i].status,
                     qw_dlt_outcome_name(got), qw_dlt_outcome_name(cases[i].want));
        assert_true(msg[0] != '\0');
        assert_string_equal(out[0].id, sid_a);
        assert_string_equal(out[1].id, sid_b);
        assert_false(out[1].reported);
        if (got == QW_DLT_OK) {
            assert_int_equal(counts.reported + counts.missing, 2);
        } else {
            assert_int_equal(counts.reported + counts.missing + counts.ignored, 0);
            assert_false(out[0].reported);
        }
    }
}

static void test_status_ok_detail(void **state)
{
    (void)state;
    char body[1024];
    snprintf(body, sizeof(body),
             "[{\"id\": \"%s\", \"status\": {\"statusType\": \"Invalid\", \"message\": "
             "[{\"message\": \"bad\"}]}}]",
             sid_b);
    struct qw_dlt_response r = http(200, body);
    struct qw_dlt_status out[2];
    struct qw_dlt_status_counts counts;
    char msg[QW_DLT_MESSAGE_MAX];
    assert_int_equal(qw_dlt_classify_status(&r, sids, 2, out, &counts, msg, sizeof(msg)),
                     QW_DLT_OK);
    assert_false(out[0].reported);
    assert_true(out[1].reported);
    assert_int_equal(out[1].type, QW_DLT_STATUS_INVALID);
    assert_string_equal(out[1].message, "bad");
    assert_int_equal(counts.reported, 1);
    assert_int_equal(counts.missing, 1);
    assert_string_equal(msg, "reported=1 missing=1 ignored=0");
}

static void test_status_transport_errors(void **state)
{
    (void)state;
    for (int t = QW_DLT_TRANSPORT_CONNECT; t <= QW_DLT_TRANSPORT_OTHER; t++) {
        char body[1024];
        snprintf(body, sizeof(body), "[{\"id\": \"%s\", \"status\": {\"statusType\": \"Valid\"}}]",
                 sid_a);
        struct qw_dlt_response r = http(200, body);
        r.transport = (enum qw_dlt_transport)t;
        struct qw_dlt_status out[2];
        char msg[QW_DLT_MESSAGE_MAX];
        assert_int_equal(qw_dlt_classify_status(&r, sids, 2, out, NULL, msg, sizeof(msg)),
                         QW_DLT_RETRY);
        assert_false(out[0].reported);
        assert_string_equal(msg, qw_dlt_transport_name((enum qw_dlt_transport)t));
    }
}

/* Every failed exchange has a kind for /metrics and the log. */
static void test_failure_kinds(void **state)
{
    (void)state;
    static const struct {
        enum qw_dlt_kind kind;
        enum qw_dlt_outcome outcome;
        enum qw_dlt_transport transport;
        long http_status;
        enum qw_dlt_failure want;
    } cases[] = {
        {QW_DLT_KIND_POST, QW_DLT_ACCEPTED, QW_DLT_TRANSPORT_OK, 202, QW_DLT_FAIL_NONE},
        {QW_DLT_KIND_STATUS, QW_DLT_OK, QW_DLT_TRANSPORT_OK, 200, QW_DLT_FAIL_NONE},
        {QW_DLT_KIND_POST, QW_DLT_ABANDONED, QW_DLT_TRANSPORT_OTHER, 0, QW_DLT_FAIL_NONE},
        {QW_DLT_KIND_POST, QW_DLT_BACKPRESSURE, QW_DLT_TRANSPORT_OK, 429, QW_DLT_FAIL_BACKPRESSURE},
        {QW_DLT_KIND_POST, QW_DLT_INVALID, QW_DLT_TRANSPORT_OK, 400, QW_DLT_FAIL_REJECTED},
        {QW_DLT_KIND_POST, QW_DLT_AUTH, QW_DLT_TRANSPORT_OK, 403, QW_DLT_FAIL_AUTH},
        {QW_DLT_KIND_POST, QW_DLT_RETRY, QW_DLT_TRANSPORT_OK, 400, QW_DLT_FAIL_HTTP_4XX},
        {QW_DLT_KIND_POST, QW_DLT_RETRY, QW_DLT_TRANSPORT_OK, 404, QW_DLT_FAIL_HTTP_4XX},
        {QW_DLT_KIND_POST, QW_DLT_RETRY, QW_DLT_TRANSPORT_OK, 503, QW_DLT_FAIL_HTTP_5XX},
        {QW_DLT_KIND_POST, QW_DLT_RETRY, QW_DLT_TRANSPORT_OK, 202, QW_DLT_FAIL_MALFORMED},
        {QW_DLT_KIND_STATUS, QW_DLT_RETRY, QW_DLT_TRANSPORT_OK, 200, QW_DLT_FAIL_MALFORMED},
        {QW_DLT_KIND_STATUS, QW_DLT_RETRY, QW_DLT_TRANSPORT_OK, 302, QW_DLT_FAIL_HTTP_OTHER},
        {QW_DLT_KIND_STATUS, QW_DLT_RETRY, QW_DLT_TRANSPORT_TOO_LARGE, 200, QW_DLT_FAIL_TOO_LARGE},
        {QW_DLT_KIND_STATUS, QW_DLT_RETRY, QW_DLT_TRANSPORT_TIMEOUT, 0, QW_DLT_FAIL_TIMEOUT},
        {QW_DLT_KIND_POST, QW_DLT_RETRY, QW_DLT_TRANSPORT_CONNECT, 0, QW_DLT_FAIL_CONNECT},
        {QW_DLT_KIND_POST, QW_DLT_RETRY, QW_DLT_TRANSPORT_DROPPED, 0, QW_DLT_FAIL_DROPPED},
        {QW_DLT_KIND_POST, QW_DLT_RETRY, QW_DLT_TRANSPORT_TLS, 0, QW_DLT_FAIL_TLS},
        {QW_DLT_KIND_POST, QW_DLT_RETRY, QW_DLT_TRANSPORT_OTHER, 0, QW_DLT_FAIL_TRANSPORT},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum qw_dlt_failure got = qw_dlt_failure_kind(cases[i].kind, cases[i].outcome,
                                                      cases[i].transport, cases[i].http_status);
        if (got != cases[i].want)
            fail_msg("case %zu: got %s, want %s", i, qw_dlt_failure_name(got),
                     qw_dlt_failure_name(cases[i].want));
    }
    for (int k = 0; k < QW_DLT_FAIL_COUNT; k++)
        assert_string_not_equal(qw_dlt_failure_name((enum qw_dlt_failure)k), "?");
}

static void test_names(void **state)
{
    (void)state;
    for (int o = QW_DLT_ACCEPTED; o <= QW_DLT_ABANDONED; o++)
        assert_string_not_equal(qw_dlt_outcome_name((enum qw_dlt_outcome)o), "?");
    for (int t = QW_DLT_TRANSPORT_OK; t <= QW_DLT_TRANSPORT_OTHER; t++)
        assert_string_not_equal(qw_dlt_transport_name((enum qw_dlt_transport)t), "?");
    assert_string_equal(qw_dlt_outcome_name((enum qw_dlt_outcome)99), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_post_status_table),
        cmocka_unit_test(test_post_transport_errors),
        cmocka_unit_test(test_invalid_message_bounded),
        cmocka_unit_test(test_body_not_nul_terminated),
        cmocka_unit_test(test_deeply_nested_bodies),
        cmocka_unit_test(test_status_table),
        cmocka_unit_test(test_status_ok_detail),
        cmocka_unit_test(test_status_transport_errors),
        cmocka_unit_test(test_failure_kinds),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, setup_ids, NULL);
}
