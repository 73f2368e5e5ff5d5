/* Unit tests for the BatchList payload check and the sample encoder (ingest/batchlist.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/err.h"
#include "ingest/batchlist.h"
#include "pb_mutate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIMIT 1048576 /* the default payload limit, bytes */

static const char ID_A[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
                           "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
static const char ID_B[] = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
                           "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

/* Parts of a hand-built payload; NULL/0 leaves a field out. */
struct spec {
    const char *sig;    /* Batch.header_signature */
    size_t sig_len;     /* bytes of sig (0 = strlen) */
    const char *header; /* Batch.header bytes */
    int transactions;   /* Transactions {header, signature, payload} */
    int batches;        /* copies of the Batch in the BatchList */
    int trace;          /* bool: write trace = true */
    const char *extra;  /* raw bytes appended to the Batch (unknown fields) */
    size_t extra_len;   /* bytes */
};

static void build(struct pb_buf *out, const struct spec *s)
{
    struct pb_buf batch = {.n = 0};
    if (s->header)
        pb_field_str(&batch, 1, s->header);
    if (s->sig)
        pb_field(&batch, 2, s->sig, s->sig_len ? s->sig_len : strlen(s->sig));
    for (int t = 0; t < s->transactions; t++) {
        struct pb_buf txn = {.n = 0};
        pb_field_str(&txn, 1, "txn-header");
        pb_field_str(&txn, 2, ID_B);
        pb_field_str(&txn, 3, "txn-payload");
        pb_field(&batch, 3, txn.d, txn.n);
    }
    if (s->trace) {
        pb_tag(&batch, 4, 0);
        pb_varint(&batch, 1);
    }
    if (s->extra)
        pb_raw(&batch, s->extra, s->extra_len);
    out->n = 0;
    for (int i = 0; i < s->batches; i++)
        pb_field(out, 1, batch.d, batch.n);
}

static enum qw_batchlist_defect check(const uint8_t *p, size_t n, const char *id, size_t limit,
                                      struct qw_error *err)
{
    enum qw_batchlist_defect defect = QW_BATCHLIST_OK;
    qw_error_clear(err);
    int rc = qw_batchlist_check(p, n, id, limit, &defect, err);
    assert_int_equal(rc, defect == QW_BATCHLIST_OK ? QW_OK : QW_ERR_INVALID);
    if (rc != QW_OK)
        assert_true(err->msg[0] != '\0');
    return defect;
}

static void test_table(void **state)
{
    char nul_sig[130];
    memcpy(nul_sig, ID_A, 128);
    nul_sig[128] = '\0';
    nul_sig[129] = 'x';
    char upper_sig[129];
    memcpy(upper_sig, ID_A, 129);
    upper_sig[10] = 'A';
    static const char unknown_field[] = {0x28, 0x05}; /* field 5, varint 5 */
    static const char bad_trace[] = {0x21, 1, 2, 3};  /* field 4, 64-bit, 3 of 8 bytes */
    const struct {
        const char *name;                  /* row label */
        struct spec spec;                  /* payload */
        size_t limit;                      /* bytes */
        enum qw_batchlist_defect expected; /* verdict */
        const char *reason;                /* substring of the message */
    } rows[] = {
        {"valid", {ID_A, 0, "hdr", 1, 1, 0, NULL, 0}, LIMIT, QW_BATCHLIST_OK, NULL},
        {"valid, no transactions",
         {ID_A, 0, "hdr", 0, 1, 0, NULL, 0},
         LIMIT,
         QW_BATCHLIST_OK,
         NULL},
        {"valid, three transactions, trace",
         {ID_A, 0, "hdr", 3, 1, 1, NULL, 0},
         LIMIT,
         QW_BATCHLIST_OK,
         NULL},
        {"unknown field tolerated",
         {ID_A, 0, "hdr", 1, 1, 0, unknown_field, 2},
         LIMIT,
         QW_BATCHLIST_OK,
         NULL},
        {"zero batches", {ID_A, 0, "hdr", 1, 0, 0, NULL, 0}, LIMIT, QW_BATCHLIST_EMPTY, "empty"},
        {"two batches",
         {ID_A, 0, "hdr", 1, 2, 0, NULL, 0},
         LIMIT,
         QW_BATCHLIST_MANY_BATCHES,
         "holds 2 Batches"},
        {"five batches",
         {ID_A, 0, "hdr", 0, 5, 0, NULL, 0},
         LIMIT,
         QW_BATCHLIST_MANY_BATCHES,
         "holds 5 Batches"},
        {"mismatched signature",
         {ID_B, 0, "hdr", 1, 1, 0, NULL, 0},
         LIMIT,
         QW_BATCHLIST_SIGNATURE_MISMATCH,
         "does not equal batch_id"},
        {"no signature",
         {NULL, 0, "hdr", 1, 1, 0, NULL, 0},
         LIMIT,
         QW_BATCHLIST_NO_SIGNATURE,
         "no header_signature"},
        {"signature with a NUL",
         {nul_sig, 130, "hdr", 1, 1, 0, NULL, 0},
         LIMIT,
         QW_BATCHLIST_BAD_SIGNATURE,
         "NUL"},
        {"upper-case signature",
         {upper_sig, 0, "hdr", 1, 1, 0, NULL, 0},
         LIMIT,
         QW_BATCHLIST_BAD_SIGNATURE,
         "upper-case"},
        {"short signature",
         {"abc", 0, "hdr", 1, 1, 0, NULL, 0},
         LIMIT,
         QW_BATCHLIST_BAD_SIGNATURE,
         "not a batch id"},
        {"empty header",
         {ID_A, 0, NULL, 1, 1, 0, NULL, 0},
         LIMIT,
         QW_BATCHLIST_EMPTY_HEADER,
         "header is empty"},
        {"truncated unknown field",
         {ID_A, 0, "hdr", 1, 1, 0, bad_trace, 4},
         LIMIT,
         QW_BATCHLIST_UNDECODABLE,
         "not a protobuf BatchList"},
        {"one byte over the limit",
         {ID_A, 0, "hdr", 1, 1, 0, NULL, 0},
         100,
         QW_BATCHLIST_TOO_LARGE,
         "the limit is 100"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct pb_buf b;
        build(&b, &rows[i].spec);
        struct qw_error err;
        enum qw_batchlist_defect got = check(b.d, b.n, ID_A, rows[i].limit, &err);
        if (got != rows[i].expected || (rows[i].reason && !strstr(err.msg, rows[i].reason)))
            print_error("row '%s': got %s (%s), expected %s\n", rows[i].name,
                        qw_batchlist_defect_name(got), err.msg,
                        qw_batchlist_defect_name(rows[i].expected));
        assert_int_equal(got, rows[i].expected);
        if (rows[i].reason)
            assert_non_null(strstr(err.msg, rows[i].reason));
        assert_int_equal(pb_ref_decide(b.d, b.n, ID_A, rows[i].limit), rows[i].expected);
    }
}

static void test_limit_is_inclusive(void **state)
{
    struct pb_buf b;
    struct spec s = {ID_A, 0, "hdr", 1, 1, 0, NULL, 0};
    build(&b, &s);
    struct qw_error err;
    assert_int_equal(check(b.d, b.n, ID_A, b.n, &err), QW_BATCHLIST_OK);
    assert_int_equal(check(b.d, b.n, ID_A, b.n - 1, &err), QW_BATCHLIST_TOO_LARGE);
}

static void test_malformed(void **state)
{
    static const struct {
        const char *name; /* row label */
        uint8_t bytes[8]; /* payload */
        size_t n;         /* bytes used */
    } rows[] = {
        {"field number 0", {0x02, 0x00}, 2},
        {"group wire type", {0x0b, 0x0c}, 2},
        {"wire type 6", {0x0e, 0x00}, 2},
        {"batches as varint", {0x08, 0x01}, 2},
        {"length past the end", {0x0a, 0x05, 0x00}, 3},
        {"unterminated varint", {0x10, 0x80}, 2},
        {"six-byte tag", {0x8a, 0x80, 0x80, 0x80, 0x80, 0x00}, 6},
        {"garbage", {0xff, 0xff, 0xff, 0xff}, 4},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct qw_error err;
        enum qw_batchlist_defect got = check(rows[i].bytes, rows[i].n, ID_A, LIMIT, &err);
        if (got != QW_BATCHLIST_UNDECODABLE)
            print_error("row '%s': got %s\n", rows[i].name, qw_batchlist_defect_name(got));
        assert_int_equal(got, QW_BATCHLIST_UNDECODABLE);
        assert_int_equal(pb_ref_decide(rows[i].bytes, rows[i].n, ID_A, LIMIT),
                         QW_BATCHLIST_UNDECODABLE);
    }
    struct qw_error err;
    assert_int_equal(check((const uint8_t *)"", 0, ID_A, LIMIT, &err), QW_BATCHLIST_EMPTY);
    /* well-formed, but only an unknown field: no Batch at all */
    static const uint8_t no_batch[] = {0x10, 0x01};
    assert_int_equal(check(no_batch, sizeof(no_batch), ID_A, LIMIT, &err), QW_BATCHLIST_NO_BATCH);
    assert_non_null(strstr(err.msg, "no Batch"));
}

static void test_truncated_at_every_offset(void **state)
{
    uint8_t *payload = NULL;
    size_t len = 0;
    assert_int_equal(qw_batchlist_sample(ID_A, 7, &payload, &len), QW_OK);
    struct qw_error err;
    assert_int_equal(check(payload, len, ID_A, LIMIT, &err), QW_BATCHLIST_OK);
    for (size_t cut = 0; cut < len; cut++) {
        enum qw_batchlist_defect got = check(payload, cut, ID_A, LIMIT, &err);
        if (got == QW_BATCHLIST_OK)
            print_error("prefix of %zu of %zu bytes accepted\n", cut, len);
        assert_int_not_equal(got, QW_BATCHLIST_OK);
        assert_int_equal(got, cut == 0 ? QW_BATCHLIST_EMPTY : QW_BATCHLIST_UNDECODABLE);
    }
    free(payload);
}

static void test_sample(void **state)
{
    uint8_t *a = NULL;
    uint8_t *b = NULL;
    uint8_t *c = NULL;
    size_t na = 0;
    size_t nb = 0;
    size_t nc = 0;
    assert_int_equal(qw_batchlist_sample(ID_A, 1, &a, &na), QW_OK);
    assert_int_equal(qw_batchlist_sample(ID_A, 1, &b, &nb), QW_OK);
    assert_int_equal(qw_batchlist_sample(ID_A, 2, &c, &nc), QW_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    assert_true(na != nc || memcmp(a, c, na) != 0);
    struct qw_error err;
    assert_int_equal(check(a, na, ID_A, LIMIT, &err), QW_BATCHLIST_OK);
    assert_int_equal(check(a, na, ID_B, LIMIT, &err), QW_BATCHLIST_SIGNATURE_MISMATCH);
    assert_true(na > 400 && na < 2000); /* a realistic size, not a toy */
    free(a);
    free(b);
    free(c);

    uint8_t *bad = NULL;
    size_t nbad = 0;
    assert_int_equal(qw_batchlist_sample("ABC", 1, &bad, &nbad), QW_ERR_INVALID);
    assert_null(bad);
}

static void test_sample_ids(void **state)
{
    char x[129];
    char y[129];
    char z[129];
    qw_batchlist_sample_id(5, x);
    qw_batchlist_sample_id(5, y);
    qw_batchlist_sample_id(6, z);
    assert_string_equal(x, y);
    assert_string_not_equal(x, z);
    assert_int_equal(strlen(x), 128);
    assert_int_equal(strspn(x, "0123456789abcdef"), 128);
}

/*
 * Seeded random mutations of valid payloads: the check must never crash
 * (the ASan/UBSan setup runs this too) and must reach the same verdict as
 * the independent reference walker in pb_mutate.h.
 */
static void test_fuzz_against_reference(void **state)
{
    struct qw_rng rng;
    qw_rng_seed(&rng, 20261121);
    int counts[QW_BATCHLIST_EMPTY_HEADER + 1] = {0};
    for (int i = 0; i < 30000; i++) {
        struct pb_buf b;
        if (i % 3 == 0) {
            uint8_t *p = NULL;
            size_t n = 0;
            assert_int_equal(qw_batchlist_sample(ID_A, (uint64_t)i, &p, &n), QW_OK);
            b.n = 0;
            pb_raw(&b, p, n);
            free(p);
        } else {
            struct spec s = {ID_A, 0, "hdr", (int)qw_rng_below(&rng, 3), 1, i % 2, NULL, 0};
            build(&b, &s);
        }
        pb_mutate(&b, &rng);
        size_t limit = i % 50 == 0 ? b.n / 2 : LIMIT;
        enum qw_batchlist_defect expected = pb_ref_decide(b.d, b.n, ID_A, limit);
        struct qw_error err;
        enum qw_batchlist_defect got = check(b.d, b.n, ID_A, limit, &err);
        if (got != expected) {
            print_error("iteration %d: check says %s (%s), reference says %s; payload:", i,
                        qw_batchlist_defect_name(got), err.msg, qw_batchlist_defect_name(expected));
            for (size_t k = 0; k < b.n; k++)
                print_error("%02x", b.d[k]);
            print_error("\n");
        }
        assert_int_equal(got, expected);
        counts[got]++;
    }
    /* the mutations reach every verdict, so the comparison means something */
    assert_true(counts[QW_BATCHLIST_OK] > 100);
    assert_true(counts[QW_BATCHLIST_UNDECODABLE] > 100);
    assert_true(counts[QW_BATCHLIST_SIGNATURE_MISMATCH] > 10);
    assert_true(counts[QW_BATCHLIST_EMPTY] > 0);
    assert_true(counts[QW_BATCHLIST_TOO_LARGE] > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_limit_is_inclusive),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_truncated_at_every_offset),
        cmocka_unit_test(test_sample),
        cmocka_unit_test(test_sample_ids),
        cmocka_unit_test(test_fuzz_against_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
