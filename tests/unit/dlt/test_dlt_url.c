/* Unit tests for service_id / batch id validation and scabbard URL building. */
#include "dlt/dlt_url.h"

#include "common/err.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#define SID "abcde-12345::a1B2"

/* 128 hex characters built from one repeated digit. */
static void make_id(char out[QW_BATCH_ID_LEN + 1], char digit)
{
    memset(out, digit, QW_BATCH_ID_LEN);
    out[QW_BATCH_ID_LEN] = '\0';
}

static void test_service_id_table(void **state)
{
    (void)state;
    static const struct {
        const char *in; /* service_id */
        int rc;         /* expected result */
    } cases[] = {
        {"abcde-12345::a1B2", QW_OK},
        {"ABCDE-fghij::0000", QW_OK},
        {"abcd-123456::a1b2", QW_ERR_INVALID},  /* dash in the wrong place */
        {"abcde_12345::a1b2", QW_ERR_INVALID},  /* underscore */
        {"abcde-12345:a1b2", QW_ERR_INVALID},   /* one colon */
        {"abcde-12345::a1b", QW_ERR_INVALID},   /* short service */
        {"abcde-12345::a1b23", QW_ERR_INVALID}, /* long service */
        {"abcde-1234::a1b2", QW_ERR_INVALID},   /* short circuit */
        {"abcde-12345::a1/2", QW_ERR_INVALID},  /* slash would escape the path */
        {"abcde-12345::a1%2", QW_ERR_INVALID},
        {"abcde-1234\xc3\xa9::a1b2", QW_ERR_INVALID}, /* non-ASCII */
        {"abcde-12345::", QW_ERR_INVALID},
        {"", QW_ERR_INVALID},
        {"abcde-12345;;a1b2", QW_ERR_INVALID},
        {" abcde-12345::a1b", QW_ERR_INVALID},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct qw_dlt_service_ref ref;
        int rc = qw_dlt_service_id_parse(cases[i].in, &ref);
        if (rc != cases[i].rc)
            fail_msg("service_id \"%s\": rc %d, want %d", cases[i].in, rc, cases[i].rc);
    }
    assert_int_equal(qw_dlt_service_id_parse(NULL, NULL), QW_ERR_INVALID);
    assert_int_equal(qw_dlt_service_id_parse(SID, NULL), QW_OK);

    struct qw_dlt_service_ref ref;
    assert_int_equal(qw_dlt_service_id_parse("ABCDE-fghij::0a0B", &ref), QW_OK);
    assert_string_equal(ref.circuit, "ABCDE-fghij");
    assert_string_equal(ref.service, "0a0B");
}

static void test_batch_id_valid(void **state)
{
    (void)state;
    char id[QW_BATCH_ID_LEN + 2];
    make_id(id, 'a');
    assert_true(qw_dlt_batch_id_valid(id));
    make_id(id, '9');
    assert_true(qw_dlt_batch_id_valid(id));
    make_id(id, 'A'); /* upper case is not how batch ids are stored */
    assert_false(qw_dlt_batch_id_valid(id));
    make_id(id, 'g');
    assert_false(qw_dlt_batch_id_valid(id));
    make_id(id, 'a');
    id[127] = '\0';
    assert_false(qw_dlt_batch_id_valid(id));
    make_id(id, 'a');
    id[128] = 'a';
    id[129] = '\0';
    assert_false(qw_dlt_batch_id_valid(id));
    make_id(id, 'a');
    id[5] = ',';
    assert_false(qw_dlt_batch_id_valid(id));
    assert_false(qw_dlt_batch_id_valid(""));
    assert_false(qw_dlt_batch_id_valid(NULL));
}

static void test_base_url_valid(void **state)
{
    (void)state;
    static const struct {
        const char *in; /* base URL */
        int ok;         /* expected validity */
    } cases[] = {
        {"http://127.0.0.1:8008", 1},
        {"https://ledger.example", 1},
        {"HTTP://host/", 1},
        {"http://host/prefix/", 1},
        {"http://[::1]:8008", 1},
        {"ftp://host", 0},
        {"host:8008", 0},
        {"http://", 0},
        {"http:///path", 0},
        {"http://host?x=1", 0},
        {"http://host#frag", 0},
        {"http://user:pw@host", 0},
        {"http://ho st", 0},
        {"http://host\n", 0},
        {"http://h/a?b#c", 0},
        {"http://h:99999", 0},
        {"http://h:0", 0},
        {"http://h:65535/x", 1},
        {"http://h:", 0},
        {"http://h:80x", 0},
        {"http://:80", 0},
        {"http://[::1/x", 0},
        {"http://[]:80", 0},
        {"http://[::1]x", 0},
        {"", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if ((int)qw_dlt_base_url_valid(cases[i].in) != cases[i].ok)
            fail_msg("base url \"%s\": want %d", cases[i].in, cases[i].ok);
    }
    assert_false(qw_dlt_base_url_valid(NULL));
}

/* dlt.url entries tagged with what they serve: which nodes a service goes to. */
static void test_url_route(void **state)
{
    (void)state;
    struct qw_dlt_url_list l;
    assert_int_equal(qw_dlt_url_list_parse("http://a  abcde-12345\tfghij-67890::ab12 ,"
                                           " http://b fghij-67890, http://c",
                                           &l, NULL),
                     QW_OK);
    assert_string_equal(l.url[0], "http://a");
    assert_string_equal(l.serves[0], "abcde-12345 fghij-67890::ab12");
    assert_string_equal(l.serves[1], "fghij-67890");
    assert_null(l.serves[2]);
    static const struct {
        const char *service;
        uint32_t mask;
    } rows[] = {
        {"abcde-12345::zz99", 0x1 | 0x4}, /* a by circuit, c serves all */
        {"fghij-67890::ab12", 0x7},       /* a by service, b by circuit */
        {"fghij-67890::cd34", 0x2 | 0x4}, /* b by circuit */
        {"zzzzz-zzzzz::ab12", 0x4},       /* only c */
        {"abcde-1234x::ab12", 0x4},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint32_t m = qw_dlt_url_list_route(&l, rows[i].service);
        if (m != rows[i].mask)
            fail_msg("%s: mask %#x, want %#x", rows[i].service, m, rows[i].mask);
    }
    qw_dlt_url_list_free(&l);
    /* without an untagged entry, a service nobody names has no node */
    assert_int_equal(qw_dlt_url_list_parse("http://a abcde-12345", &l, NULL), QW_OK);
    assert_int_equal(qw_dlt_url_list_route(&l, "zzzzz-zzzzz::ab12"), 0);
    assert_int_equal(qw_dlt_url_list_route(&l, "abcde-12345::ab12"), 1);
    qw_dlt_url_list_free(&l);
}

/* dlt.url: one URL or several nodes of one ledger, comma-separated. */
static void test_url_list(void **state)
{
    (void)state;
    static const struct {
        const char *in;    /* the list */
        size_t n;          /* URLs when accepted, 0 = refused */
        const char *first; /* the first URL as kept */
        const char *last;  /* the last URL as kept */
        const char *why;   /* substring of the reason when refused */
    } rows[] = {
        {"http://a:8008", 1, "http://a:8008", "http://a:8008", NULL},
        {"http://a:8008,http://b:8008", 2, "http://a:8008", "http://b:8008", NULL},
        {" http://a:1 ,\thttps://b/x/ , http://[::1]:3", 3, "http://a:1", "http://[::1]:3", NULL},
        {"http://a,http://a/", 0, NULL, NULL, "same node URL twice"},
        {"http://a,,http://b", 0, NULL, NULL, "empty entry"},
        {"http://a,", 0, NULL, NULL, "empty entry"},
        {",http://a", 0, NULL, NULL, "empty entry"},
        {"", 0, NULL, NULL, "must be set"},
        {"http://a,ftp://b", 0, NULL, NULL, "http:// or https://"},
        {"http://a,http://b:70000", 0, NULL, NULL, "port"},
        {"http://a,http://u:p@b", 0, NULL, NULL, "credentials"},
        {"http://a b", 0, NULL, NULL, "circuits"},
        {"http://a abcde-12345 fghij-67890::ab12, http://b", 2, "http://a", "http://b", NULL},
        {"http://a abcde-1234", 0, NULL, NULL, "circuits"},
        {"http://a abcde-12345::ab1", 0, NULL, NULL, "circuits"},
        {"http://a abcde-12345,http://a/ fghij-67890", 0, NULL, NULL, "same node URL twice"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct qw_dlt_url_list l;
        const char *why = NULL;
        int rc = qw_dlt_url_list_parse(rows[i].in, &l, &why);
        if ((rc == QW_OK) != (rows[i].n > 0))
            fail_msg("\"%s\": rc %d (%s)", rows[i].in, rc, why ? why : "");
        if (rc != QW_OK) {
            assert_non_null(why);
            if (!strstr(why, rows[i].why))
                fail_msg("\"%s\": reason \"%s\", want \"%s\"", rows[i].in, why, rows[i].why);
            assert_string_equal(qw_dlt_url_list_check(rows[i].in), why);
            continue;
        }
        assert_null(why);
        assert_null(qw_dlt_url_list_check(rows[i].in));
        assert_int_equal(l.n, rows[i].n);
        assert_string_equal(l.url[0], rows[i].first);
        assert_string_equal(l.url[l.n - 1], rows[i].last);
        qw_dlt_url_list_free(&l);
        assert_int_equal(l.n, 0);
    }
    /* 16 nodes at most */
    char many[17 * 24] = "";
    for (int i = 0; i < 17; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%shttp://n%d:1", i ? "," : "",
                 i);
    assert_non_null(strstr(qw_dlt_url_list_check(many), "at most 16"));
    *strrchr(many, ',') = '\0';
    assert_null(qw_dlt_url_list_check(many));
    assert_int_equal(qw_dlt_url_list_parse(NULL, NULL, NULL), QW_ERR_INVALID);
}

static void test_url_batches(void **state)
{
    (void)state;
    static const struct {
        const char *base; /* base URL */
        const char *want; /* expected URL */
    } cases[] = {
        {"http://h:8008", "http://h:8008/scabbard/abcde-12345/a1B2/batches"},
        {"http://h:8008/", "http://h:8008/scabbard/abcde-12345/a1B2/batches"},
        {"http://h:8008///", "http://h:8008/scabbard/abcde-12345/a1B2/batches"},
        {"https://h/node1/", "https://h/node1/scabbard/abcde-12345/a1B2/batches"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[256];
        assert_int_equal(qw_dlt_url_batches(buf, sizeof(buf), cases[i].base, SID), QW_OK);
        assert_string_equal(buf, cases[i].want);
    }

    char buf[256];
    assert_int_equal(qw_dlt_url_batches(buf, sizeof(buf), "http://h", "bad"), QW_ERR_INVALID);
    assert_string_equal(buf, "");
    assert_int_equal(qw_dlt_url_batches(buf, sizeof(buf), "ftp://h", SID), QW_ERR_INVALID);
    assert_int_equal(qw_dlt_url_batches(buf, sizeof(buf), NULL, SID), QW_ERR_INVALID);
}

static void test_url_batches_cap(void **state)
{
    (void)state;
    const char *want = "http://h/scabbard/abcde-12345/a1B2/batches";
    size_t len = strlen(want);
    char buf[128];
    /* exactly enough room (len + NUL) works; one byte less fails cleanly */
    memset(buf, 'X', sizeof(buf));
    assert_int_equal(qw_dlt_url_batches(buf, len + 1, "http://h", SID), QW_OK);
    assert_string_equal(buf, want);
    memset(buf, 'X', sizeof(buf));
    assert_int_equal(qw_dlt_url_batches(buf, len, "http://h", SID), QW_ERR_INVALID);
    assert_string_equal(buf, "");
    assert_int_equal(buf[len], 'X'); /* nothing written past the cap */
    for (size_t cap = 1; cap < len; cap++) {
        memset(buf, 'X', sizeof(buf));
        assert_int_equal(qw_dlt_url_batches(buf, cap, "http://h", SID), QW_ERR_INVALID);
        assert_int_equal(buf[0], '\0');
        assert_int_equal(buf[cap], 'X');
    }
    assert_int_equal(qw_dlt_url_batches(NULL, 0, "http://h", SID), QW_ERR_INVALID);
}

static void test_url_statuses(void **state)
{
    (void)state;
    char a[QW_BATCH_ID_LEN + 1], b[QW_BATCH_ID_LEN + 1];
    make_id(a, 'a');
    make_id(b, '0');
    const char *ids[] = {a, b};
    char want[1024];
    snprintf(want, sizeof(want),
             "http://h/scabbard/abcde-12345/a1B2/batch_statuses?ids=%s,%s&wait=30", a, b);

    char buf[1024];
    assert_int_equal(qw_dlt_url_statuses(buf, sizeof(buf), "http://h/", SID, ids, 2, 30), QW_OK);
    assert_string_equal(buf, want);

    snprintf(want, sizeof(want), "http://h/scabbard/abcde-12345/a1B2/batch_statuses?ids=%s&wait=0",
             a);
    assert_int_equal(qw_dlt_url_statuses(buf, sizeof(buf), "http://h", SID, ids, 1, 0), QW_OK);
    assert_string_equal(buf, want);

    /* exact fit and one short */
    size_t len = strlen(want);
    assert_int_equal(qw_dlt_url_statuses(buf, len + 1, "http://h", SID, ids, 1, 0), QW_OK);
    assert_int_equal(qw_dlt_url_statuses(buf, len, "http://h", SID, ids, 1, 0), QW_ERR_INVALID);
    assert_string_equal(buf, "");
}

static void test_url_statuses_rejects(void **state)
{
    (void)state;
    char a[QW_BATCH_ID_LEN + 1], bad[QW_BATCH_ID_LEN + 1];
    make_id(a, 'a');
    make_id(bad, 'a');
    bad[10] = '&'; /* would inject a query parameter */
    const char *ids[] = {a, bad};
    char buf[1024];
    assert_int_equal(qw_dlt_url_statuses(buf, sizeof(buf), "http://h", SID, ids, 2, 1),
                     QW_ERR_INVALID);
    assert_string_equal(buf, "");
    assert_int_equal(qw_dlt_url_statuses(buf, sizeof(buf), "http://h", SID, ids, 0, 1),
                     QW_ERR_INVALID);
    assert_int_equal(qw_dlt_url_statuses(buf, sizeof(buf), "http://h", SID, NULL, 1, 1),
                     QW_ERR_INVALID);
    assert_int_equal(qw_dlt_url_statuses(buf, sizeof(buf), "http://h", SID, ids, 1, -1),
                     QW_ERR_INVALID);
    assert_int_equal(
        qw_dlt_url_statuses(buf, sizeof(buf), "http://h", SID, ids, 1, QW_DLT_MAX_WAIT_S + 1),
        QW_ERR_INVALID);
    assert_int_equal(
        qw_dlt_url_statuses(buf, sizeof(buf), "http://h", SID, ids, 1, QW_DLT_MAX_WAIT_S), QW_OK);
    assert_int_equal(qw_dlt_url_statuses(buf, sizeof(buf), "http://h", "x::y", ids, 1, 1),
                     QW_ERR_INVALID);
}

static void test_url_statuses_many_ids(void **state)
{
    (void)state;
    enum { N = 100 };
    static char store[N][QW_BATCH_ID_LEN + 1];
    const char *ids[N];
    for (int i = 0; i < N; i++) {
        make_id(store[i], "0123456789abcdef"[i % 16]);
        ids[i] = store[i];
    }
    static char buf[N * (QW_BATCH_ID_LEN + 1) + 128];
    assert_int_equal(qw_dlt_url_statuses(buf, sizeof(buf), "http://h", SID, ids, N, 5), QW_OK);
    size_t len = strlen(buf);
    assert_int_equal(len, strlen("http://h/scabbard/abcde-12345/a1B2/batch_statuses?ids=") +
                              N * QW_BATCH_ID_LEN + (N - 1) + strlen("&wait=5"));
    /* a buffer far too small for 100 ids */
    char small[512];
    assert_int_equal(qw_dlt_url_statuses(small, sizeof(small), "http://h", SID, ids, N, 5),
                     QW_ERR_INVALID);
    assert_string_equal(small, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_service_id_table),
        cmocka_unit_test(test_batch_id_valid),
        cmocka_unit_test(test_base_url_valid),
        cmocka_unit_test(test_url_list),
        cmocka_unit_test(test_url_route),
        cmocka_unit_test(test_url_batches),
        cmocka_unit_test(test_url_batches_cap),
        cmocka_unit_test(test_url_statuses),
        cmocka_unit_test(test_url_statuses_rejects),
        cmocka_unit_test(test_url_statuses_many_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
