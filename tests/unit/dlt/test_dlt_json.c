/* Unit tests for parsing scabbard batch_statuses answers, hostile ones included. */
#include "dlt/dlt_json.h"

#include "common/err.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Three requested ids: all 'a', all 'b', all 'c'; and an unrequested one, all 'd'. */
static char id_a[129], id_b[129], id_c[129], id_d[129];
static const char *ids3[3] = {id_a, id_b, id_c};

static int setup_ids(void **state)
{
    (void)state;
    memset(id_a, 'a', 128);
    memset(id_b, 'b', 128);
    memset(id_c, 'c', 128);
    memset(id_d, 'd', 128);
    return 0;
}

/* Replaces every "A", "B", "C", "D" token (quoted single capital) with the matching id. */
static char *expand(const char *tmpl)
{
    size_t cap = strlen(tmpl) * 130 + 1;
    char *out = malloc(cap);
    assert_non_null(out);
    size_t pos = 0;
    for (const char *p = tmpl; *p; p++) {
        if (p[0] == '"' && p[1] >= 'A' && p[1] <= 'D' && p[2] == '"') {
            const char *id = p[1] == 'A' ? id_a : p[1] == 'B' ? id_b : p[1] == 'C' ? id_c : id_d;
            pos += (size_t)snprintf(out + pos, cap - pos, "\"%s\"", id);
            p += 2;
        } else {
            out[pos++] = *p;
        }
    }
    out[pos] = '\0';
    return out;
}

/* Parses `tmpl` (after expand) for ids3; returns the rc. */
static int parse3(const char *tmpl, struct qw_dlt_status out[3],
                  struct qw_dlt_status_counts *counts, char *err, size_t err_cap)
{
    char *body = expand(tmpl);
    int rc = qw_dlt_json_parse_statuses(body, strlen(body), ids3, 3, out, counts, err, err_cap);
    free(body);
    return rc;
}

static void test_well_formed(void **state)
{
    (void)state;
    struct qw_dlt_status out[3];
    struct qw_dlt_status_counts counts;
    char err[256];
    int rc = parse3("[{\"id\": \"A\", \"status\": {\"statusType\": \"Committed\", \"message\": []},"
                    "  \"timestamp\": {\"secs_since_epoch\": 1, \"nanos_since_epoch\": 2}},"
                    " {\"id\": \"B\", \"status\": {\"statusType\": \"Invalid\", \"message\": "
                    "   [{\"transaction_id\": \"t1\", \"message\": \"bad\\nsig\"},"
                    "    {\"error_message\": \"second\"}, 7, \"plain\"]}, \"timestamp\": 3},"
                    " {\"id\": \"C\", \"status\": {\"statusType\": \"Pending\"}}]",
                    out, &counts, err, sizeof(err));
    assert_int_equal(rc, QW_OK);
    assert_int_equal(counts.reported, 3);
    assert_int_equal(counts.missing, 0);
    assert_int_equal(counts.ignored, 0);
    assert_string_equal(out[0].id, id_a);
    assert_true(out[0].reported);
    assert_int_equal(out[0].type, QW_DLT_STATUS_COMMITTED);
    assert_string_equal(out[0].message, "");
    assert_int_equal(out[1].type, QW_DLT_STATUS_INVALID);
    assert_string_equal(out[1].message, "bad sig; second; plain");
    assert_int_equal(out[2].type, QW_DLT_STATUS_PENDING);
    assert_true(out[2].reported);
}

static void test_every_status_type(void **state)
{
    (void)state;
    static const struct {
        const char *name;             /* statusType */
        enum qw_dlt_status_type want; /* parsed */
        bool final;                   /* ends the batch's turn */
    } cases[] = {
        {"Unknown", QW_DLT_STATUS_UNKNOWN, false}, {"Pending", QW_DLT_STATUS_PENDING, false},
        {"Valid", QW_DLT_STATUS_VALID, true},      {"Committed", QW_DLT_STATUS_COMMITTED, true},
        {"Invalid", QW_DLT_STATUS_INVALID, true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char tmpl[256];
        snprintf(tmpl, sizeof(tmpl),
                 "[{\"id\": \"A\", \"status\": {\"statusType\": \"%s\", \"message\": []}}]",
                 cases[i].name);
        struct qw_dlt_status out[3];
        assert_int_equal(parse3(tmpl, out, NULL, NULL, 0), QW_OK);
        assert_int_equal(out[0].type, cases[i].want);
        assert_string_equal(qw_dlt_status_type_name(cases[i].want), cases[i].name);
        assert_int_equal(qw_dlt_status_type_final(cases[i].want), cases[i].final);
    }
}

static void test_missing_and_ignored(void **state)
{
    (void)state;
    struct qw_dlt_status out[3];
    struct qw_dlt_status_counts counts;
    /* B is missing; D was never asked for */
    int rc = parse3("[{\"id\": \"D\", \"status\": {\"statusType\": \"Committed\"}},"
                    " {\"id\": \"C\", \"status\": {\"statusType\": \"Valid\"}},"
                    " {\"id\": \"A\", \"status\": {\"statusType\": \"Unknown\"}}]",
                    out, &counts, NULL, 0);
    assert_int_equal(rc, QW_OK);
    assert_int_equal(counts.reported, 2);
    assert_int_equal(counts.missing, 1);
    assert_int_equal(counts.ignored, 1);
    assert_true(out[0].reported);
    assert_int_equal(out[0].type, QW_DLT_STATUS_UNKNOWN);
    assert_false(out[1].reported); /* not invented */
    assert_string_equal(out[1].id, id_b);
    assert_true(out[2].reported);
    assert_int_equal(out[2].type, QW_DLT_STATUS_VALID);

    /* an empty answer: everything missing */
    assert_int_equal(parse3("[]", out, &counts, NULL, 0), QW_OK);
    assert_int_equal(counts.missing, 3);
    assert_int_equal(counts.reported, 0);
    for (int i = 0; i < 3; i++)
        assert_false(out[i].reported);
}

/* Every malformed answer: QW_ERR_INVALID, a reason, nothing reported, counts zero. */
static void test_malformed_table(void **state)
{
    (void)state;
    static const char *const cases[] = {
        "",
        "   ",
        "[",
        "[{\"id\": \"A\", \"status\": {\"statusType\": \"Pending\"}}", /* truncated */
        "[{\"id\": \"A\", \"status\": {\"statusType\": \"Pend",        /* cut in a string */
        "{\"id\": \"A\"}",                                             /* object, not array */
        "\"text\"",
        "42",
        "null",
        "[1]",
        "[null]",
        "[[]]",
        "[{}]",
        "[{\"id\": 5, \"status\": {\"statusType\": \"Pending\"}}]",
        "[{\"id\": null, \"status\": {\"statusType\": \"Pending\"}}]",
        "[{\"id\": \"A\"}]",
        "[{\"id\": \"A\", \"status\": \"Pending\"}]",
        "[{\"id\": \"A\", \"status\": {}}]",
        "[{\"id\": \"A\", \"status\": {\"statusType\": 1}}]",
        "[{\"id\": \"A\", \"status\": {\"statusType\": \"pending\"}}]", /* case matters */
        "[{\"id\": \"A\", \"status\": {\"statusType\": \"Delayed\"}}]", /* ours, not scabbard's */
        "[{\"id\": \"A\", \"status\": {\"statusType\": \"Bogus\\u0007\"}}]",
        "[{\"id\": \"A\", \"status\": {\"statusType\": \"Pending\", \"message\": 3}}]",
        "[{\"id\": \"A\", \"status\": {\"statusType\": \"Pending\", \"message\": {}}}]",
        "[{\"id\": \"xyz\", \"status\": {\"statusType\": \"Pending\"}}]", /* not hex */
        "[{\"id\": \"A\", \"status\": {\"statusType\": \"Pending\"}},"
        " {\"id\": \"A\", \"status\": {\"statusType\": \"Committed\"}}]", /* duplicate */
        "[{\"id\": \"A\", \"status\": {\"statusType\": \"Pending\"}},"
        " {\"id\": \"A\", \"status\": {\"statusType\": \"Pending\"}}]", /* duplicate, same */
        "[{\"id\": \"A\", \"id\": \"B\", \"status\": {\"statusType\": \"Pending\"}}]", /* dup key */
        "[{\"id\": \"A\", \"status\": {\"statusType\": \"Pending\"}}] trailing",
        "[{\"id\": \"A\", \"status\": {\"statusType\": \"Pending\"}}][]",
        "[{'id': 'A'}]",
        "\xef\xbb\xbf[]", /* BOM */
        "[\"\xff\"]",     /* invalid UTF-8 */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct qw_dlt_status out[3];
        struct qw_dlt_status_counts counts = {9, 9, 9};
        char err[256] = "";
        int rc = parse3(cases[i], out, &counts, err, sizeof(err));
        if (rc != QW_ERR_INVALID)
            fail_msg("case %zu (%s): rc %d, want QW_ERR_INVALID", i, cases[i], rc);
        if (err[0] == '\0')
            fail_msg("case %zu: no reason given", i);
        assert_int_equal(counts.reported + counts.missing + counts.ignored, 0);
        for (int k = 0; k < 3; k++) {
            assert_false(out[k].reported);
            assert_string_equal(out[k].id, ids3[k]);
        }
    }
}

static void test_id_shapes(void **state)
{
    (void)state;
    /* upper-case hex, 127 and 129 characters: all refused */
    char upper[129], short_id[128], long_id[130];
    memset(upper, 'A', 128);
    upper[128] = '\0';
    memset(short_id, 'a', 127);
    short_id[127] = '\0';
    memset(long_id, 'a', 129);
    long_id[129] = '\0';
    const char *bad[] = {upper, short_id, long_id};
    for (size_t i = 0; i < 3; i++) {
        char body[512];
        snprintf(body, sizeof(body),
                 "[{\"id\": \"%s\", \"status\": {\"statusType\": \"Pending\"}}]", bad[i]);
        struct qw_dlt_status out[3];
        assert_int_equal(
            qw_dlt_json_parse_statuses(body, strlen(body), ids3, 3, out, NULL, NULL, 0),
            QW_ERR_INVALID);
    }
    /* an id with an escaped NUL inside is refused by the parser */
    char body[512];
    snprintf(body, sizeof(body), "[{\"id\": \"%.64s\\u0000%.63s\", \"status\": {}}]", id_a, id_a);
    struct qw_dlt_status out[3];
    assert_int_equal(qw_dlt_json_parse_statuses(body, strlen(body), ids3, 3, out, NULL, NULL, 0),
                     QW_ERR_INVALID);
}

static void test_unicode_message(void **state)
{
    (void)state;
    struct qw_dlt_status out[3];
    int rc = parse3("[{\"id\": \"A\", \"status\": {\"statusType\": \"Invalid\", \"message\": "
                    "[\"caf\\u00e9 \\u20ac \\ud83d\\ude00\", \"tab\\there\\u001b[0m\"]}}]",
                    out, NULL, NULL, 0);
    assert_int_equal(rc, QW_OK);
    assert_string_equal(out[0].message, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80; tab here [0m");
    /* a lone surrogate escape is not valid JSON text */
    rc = parse3("[{\"id\": \"A\", \"status\": {\"statusType\": \"Invalid\", \"message\": "
                "[\"\\ud800\"]}}]",
                out, NULL, NULL, 0);
    assert_int_equal(rc, QW_ERR_INVALID);
    /* a string message is accepted too */
    rc = parse3("[{\"id\": \"A\", \"status\": {\"statusType\": \"Invalid\", \"message\": \"no\"}}]",
                out, NULL, NULL, 0);
    assert_int_equal(rc, QW_OK);
    assert_string_equal(out[0].message, "no");
}

static void test_long_message_truncated(void **state)
{
    (void)state;
    size_t n = 5000;
    char *tmpl = malloc(n + 200);
    assert_non_null(tmpl);
    int pos = sprintf(tmpl, "[{\"id\": \"A\", \"status\": {\"statusType\": \"Invalid\", "
                            "\"message\": [\"");
    memset(tmpl + pos, 'm', n);
    strcpy(tmpl + pos + n, "\", \"x\"]}}]");
    struct qw_dlt_status out[3];
    assert_int_equal(parse3(tmpl, out, NULL, NULL, 0), QW_OK);
    assert_int_equal(strlen(out[0].message), QW_DLT_STATUS_MESSAGE_MAX - 1);
    free(tmpl);
}

static void test_deep_nesting(void **state)
{
    (void)state;
    struct qw_dlt_status out[3];
    char err[256];
    /* 100000 levels: refused before jansson sees it */
    size_t depth = 100000;
    char *body = malloc(2 * depth);
    assert_non_null(body);
    memset(body, '[', depth);
    memset(body + depth, ']', depth);
    assert_int_equal(
        qw_dlt_json_parse_statuses(body, 2 * depth, ids3, 3, out, NULL, err, sizeof(err)),
        QW_ERR_INVALID);
    assert_non_null(strstr(err, "nested"));
    /* unbalanced opening brackets only */
    assert_int_equal(qw_dlt_json_parse_statuses(body, depth, ids3, 3, out, NULL, err, sizeof(err)),
                     QW_ERR_INVALID);
    free(body);

    /* brackets inside strings do not count as nesting */
    char tmpl[1024];
    snprintf(tmpl, sizeof(tmpl),
             "[{\"id\": \"A\", \"status\": {\"statusType\": \"Invalid\", \"message\": "
             "[\"%s\\\"[[[[\"]}}]",
             "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[");
    assert_int_equal(parse3(tmpl, out, NULL, err, sizeof(err)), QW_OK);

    /* nesting in an ignored field at the limit is fine; one more is not */
    char deep[512];
    int pos = sprintf(deep, "[{\"id\": \"A\", \"status\": {\"statusType\": \"Pending\"}, "
                            "\"timestamp\": ");
    int inner = QW_DLT_JSON_MAX_DEPTH - 2; /* the array and the entry object are 2 levels */
    for (int i = 0; i < inner; i++)
        deep[pos++] = '[';
    for (int i = 0; i < inner; i++)
        deep[pos++] = ']';
    strcpy(deep + pos, "}]");
    assert_int_equal(parse3(deep, out, NULL, NULL, 0), QW_OK);
    pos = sprintf(deep, "[{\"id\": \"A\", \"status\": {\"statusType\": \"Pending\"}, "
                        "\"timestamp\": ");
    for (int i = 0; i < inner + 1; i++)
        deep[pos++] = '[';
    for (int i = 0; i < inner + 1; i++)
        deep[pos++] = ']';
    strcpy(deep + pos, "}]");
    assert_int_equal(parse3(deep, out, NULL, NULL, 0), QW_ERR_INVALID);
}

static void test_huge_array(void **state)
{
    (void)state;
    struct qw_dlt_status out[3];
    char err[256];
    size_t n = QW_DLT_STATUS_MAX_ENTRIES + 1;
    char *body = malloc(n * 2 + 2);
    assert_non_null(body);
    size_t pos = 0;
    body[pos++] = '[';
    for (size_t i = 0; i < n; i++) {
        body[pos++] = '0';
        body[pos++] = ',';
    }
    body[pos - 1] = ']';
    assert_int_equal(qw_dlt_json_parse_statuses(body, pos, ids3, 3, out, NULL, err, sizeof(err)),
                     QW_ERR_INVALID);
    assert_non_null(strstr(err, "entries"));
    free(body);

    /* many ignored entries below the cap are fine and counted */
    size_t m = 2000;
    size_t entry_len = 200;
    body = malloc(m * entry_len + 16);
    assert_non_null(body);
    pos = 0;
    body[pos++] = '[';
    for (size_t i = 0; i < m; i++)
        pos += (size_t)sprintf(body + pos, "%s{\"id\": \"%s\", \"status\": 0}", i ? "," : "", id_d);
    body[pos++] = ']';
    struct qw_dlt_status_counts counts;
    assert_int_equal(qw_dlt_json_parse_statuses(body, pos, ids3, 3, out, &counts, NULL, 0), QW_OK);
    assert_int_equal(counts.ignored, m);
    assert_int_equal(counts.missing, 3);
    free(body);
}

static void test_not_nul_terminated(void **state)
{
    (void)state;
    char *body = expand("[{\"id\": \"A\", \"status\": {\"statusType\": \"Valid\"}}]XXXX");
    size_t len = strlen(body) - 4;
    struct qw_dlt_status out[3];
    assert_int_equal(qw_dlt_json_parse_statuses(body, len, ids3, 3, out, NULL, NULL, 0), QW_OK);
    assert_int_equal(out[0].type, QW_DLT_STATUS_VALID);
    /* one byte short is truncated */
    assert_int_equal(qw_dlt_json_parse_statuses(body, len - 1, ids3, 3, out, NULL, NULL, 0),
                     QW_ERR_INVALID);
    free(body);
}

static void test_bad_requests(void **state)
{
    (void)state;
    struct qw_dlt_status out[3];
    const char *body = "[]";
    const char *dup[] = {id_a, id_b, id_a};
    const char *bad[] = {id_a, "nothex", id_c};
    char err[128];
    assert_int_equal(qw_dlt_json_parse_statuses(body, 2, dup, 3, out, NULL, err, sizeof(err)),
                     QW_ERR_INVALID);
    assert_non_null(strstr(err, "twice"));
    assert_int_equal(qw_dlt_json_parse_statuses(body, 2, bad, 3, out, NULL, NULL, 0),
                     QW_ERR_INVALID);
    assert_int_equal(qw_dlt_json_parse_statuses(body, 2, ids3, 0, out, NULL, NULL, 0),
                     QW_ERR_INVALID);
    assert_int_equal(qw_dlt_json_parse_statuses(body, 2, NULL, 3, out, NULL, NULL, 0),
                     QW_ERR_INVALID);
    assert_int_equal(qw_dlt_json_parse_statuses(NULL, 0, ids3, 3, out, NULL, NULL, 0),
                     QW_ERR_INVALID);
    assert_int_equal(
        qw_dlt_json_parse_statuses(body, 2, ids3, QW_DLT_STATUS_MAX_IDS + 1, out, NULL, NULL, 0),
        QW_ERR_INVALID);
}

static void test_max_ids(void **state)
{
    (void)state;
    size_t n = QW_DLT_STATUS_MAX_IDS;
    char(*store)[129] = calloc(n, 129);
    const char **ids = calloc(n, sizeof(*ids));
    struct qw_dlt_status *out = calloc(n, sizeof(*out));
    char *body = malloc(n * 200 + 16);
    assert_true(store && ids && out && body);
    size_t pos = 0;
    body[pos++] = '[';
    for (size_t i = 0; i < n; i++) {
        snprintf(store[i], 129, "%0128zx", i * 7919);
        ids[i] = store[i];
        if (i % 2 == 0)
            pos += (size_t)sprintf(body + pos,
                                   "%s{\"id\": \"%s\", \"status\": {\"statusType\": \"Valid\"}}",
                                   i ? "," : "", store[i]);
    }
    body[pos++] = ']';
    struct qw_dlt_status_counts counts;
    assert_int_equal(qw_dlt_json_parse_statuses(body, pos, ids, n, out, &counts, NULL, 0), QW_OK);
    assert_int_equal(counts.reported, n / 2);
    assert_int_equal(counts.missing, n - n / 2);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(out[i].reported, i % 2 == 0);
        assert_string_equal(out[i].id, store[i]);
    }
    free(store);
    free(ids);
    free(out);
    free(body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_well_formed),
        cmocka_unit_test(test_every_status_type),
        cmocka_unit_test(test_missing_and_ignored),
        cmocka_unit_test(test_malformed_table),
        cmocka_unit_test(test_id_shapes),
        cmocka_unit_test(test_unicode_message),
        cmocka_unit_test(test_long_message_truncated),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_huge_array),
        cmocka_unit_test(test_not_nul_terminated),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_max_ids),
    };
    return cmocka_run_group_tests(tests, setup_ids, NULL);
}
