/* Unit tests for the bulk enqueue line parser (ingest/tsv.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/err.h"
#include "ingest/tsv.h"

#include <stdio.h>
#include <string.h>

#define SVC "abcde-fghij::klmn"
#define ID                                                                                         \
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"                             \
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void test_lines(void **state)
{
    static const struct {
        const char *line;   /* input */
        int rc;             /* expected result */
        int record;         /* bool: expected a record */
        const char *hex;    /* expected payload hex */
        const char *reason; /* substring of the message */
        int priority;       /* expected priority field, when has_priority */
        bool has_priority;  /* bool: expected a fourth field */
    } rows[] = {
        {SVC "\t" ID "\t0a00\n", QW_OK, 1, "0a00", NULL},
        {SVC "\t" ID "\t0a00", QW_OK, 1, "0a00", NULL},
        {SVC "\t" ID "\t0A0b\r\n", QW_OK, 1, "0A0b", NULL},
        {SVC "\t" ID "\t0a00\t10\n", QW_OK, 1, "0a00", NULL, 10, true},
        {SVC "\t" ID "\t0a00\t-1000\r\n", QW_OK, 1, "0a00", NULL, -1000, true},
        {SVC "\t" ID "\t0a00\t+1000", QW_OK, 1, "0a00", NULL, 1000, true},
        {SVC "\t" ID "\t0a00\t0\n", QW_OK, 1, "0a00", NULL, 0, true},
        {"\n", QW_OK, 0, NULL, NULL},
        {"", QW_OK, 0, NULL, NULL},
        {"\r\n", QW_OK, 0, NULL, NULL},
        {"  \t \n", QW_OK, 0, NULL, NULL},
        {"# a comment\n", QW_OK, 0, NULL, NULL},
        {"   # indented comment\n", QW_OK, 0, NULL, NULL},
        {SVC "\t" ID "\n", QW_ERR_INVALID, 0, NULL, "found 2"},
        {SVC "\t" ID "\t0a00\textra\n", QW_ERR_INVALID, 0, NULL, "priority must be an integer"},
        {SVC "\t" ID "\t0a00\t1001\n", QW_ERR_INVALID, 0, NULL, "from -1000 to 1000"},
        {SVC "\t" ID "\t0a00\t-1001\n", QW_ERR_INVALID, 0, NULL, "from -1000 to 1000"},
        {SVC "\t" ID "\t0a00\t\n", QW_ERR_INVALID, 0, NULL, "priority must be an integer"},
        {SVC "\t" ID "\t0a00\t-\n", QW_ERR_INVALID, 0, NULL, "priority must be an integer"},
        {SVC "\t" ID "\t0a00\t 5\n", QW_ERR_INVALID, 0, NULL, "priority must be an integer"},
        {SVC "\t" ID "\t0a00\t5\textra\n", QW_ERR_INVALID, 0, NULL, "found 5"},
        {SVC " " ID " 0a00\n", QW_ERR_INVALID, 0, NULL, "found 1"},
        {"abcde-fghij::klm\t" ID "\t0a00\n", QW_ERR_INVALID, 0, NULL, "service is 3"},
        {SVC "\tABC\t0a00\n", QW_ERR_INVALID, 0, NULL, "batch_id 'ABC'"},
        {SVC "\t" ID "\t\n", QW_ERR_INVALID, 0, NULL, "payload is empty"},
        {SVC "\t" ID "\t0a0\n", QW_ERR_INVALID, 0, NULL, "odd number of digits (3)"},
        {SVC "\t" ID "\t0a0g\n", QW_ERR_INVALID, 0, NULL, "character 4 is 'g'"},
        {SVC "\t" ID "\t\\x0a00\n", QW_ERR_INVALID, 0, NULL, "character 1 is '\\'"},
        {SVC "\t" ID "\t0a00 \n", QW_ERR_INVALID, 0, NULL, "character 5 is ' '"},
        {SVC "\t" ID "\t0a00\r\r\n", QW_ERR_INVALID, 0, NULL, "byte 0x0d"},
        {SVC "\t" ID "\t0a0000000000\n", QW_ERR_INVALID, 0, NULL, "6 bytes, the limit is 5"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct qw_tsv_record rec;
        struct qw_error err;
        qw_error_clear(&err);
        int rc = qw_tsv_parse(rows[i].line, strlen(rows[i].line), 5, &rec, &err);
        if (rc != rows[i].rc || (rows[i].reason && !strstr(err.msg, rows[i].reason)))
            print_error("row %zu: rc=%d msg='%s'\n", i, rc, err.msg);
        assert_int_equal(rc, rows[i].rc);
        if (rc != QW_OK) {
            assert_non_null(strstr(err.msg, rows[i].reason));
            continue;
        }
        assert_int_equal(rec.kind == QW_TSV_RECORD, rows[i].record);
        if (!rows[i].record)
            continue;
        assert_int_equal(rec.service_id_len, strlen(SVC));
        assert_memory_equal(rec.service_id, SVC, rec.service_id_len);
        assert_int_equal(rec.batch_id_len, 128);
        assert_memory_equal(rec.batch_id, ID, 128);
        assert_int_equal(rec.payload_hex_len, strlen(rows[i].hex));
        assert_memory_equal(rec.payload_hex, rows[i].hex, rec.payload_hex_len);
        assert_int_equal(rec.has_priority, rows[i].has_priority);
        if (rec.has_priority)
            assert_int_equal(rec.priority, rows[i].priority);
    }
}

/* --priority uses the same rule as the fourth field. */
static void test_priority_parse(void **state)
{
    (void)state;
    static const struct {
        const char *text; /* input */
        int rc;           /* expected result */
        int value;        /* expected value when QW_OK */
    } rows[] = {
        {"0", QW_OK, 0},
        {"7", QW_OK, 7},
        {"-7", QW_OK, -7},
        {"+7", QW_OK, 7},
        {"1000", QW_OK, 1000},
        {"-1000", QW_OK, -1000},
        {"0010", QW_OK, 10},
        {"1001", QW_ERR_INVALID, 0},
        {"-1001", QW_ERR_INVALID, 0},
        {"99999", QW_ERR_INVALID, 0},
        {"", QW_ERR_INVALID, 0},
        {"+", QW_ERR_INVALID, 0},
        {"1e3", QW_ERR_INVALID, 0},
        {"5 ", QW_ERR_INVALID, 0},
        {"--5", QW_ERR_INVALID, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int v = -12345;
        struct qw_error err;
        qw_error_clear(&err);
        int rc = qw_tsv_parse_priority(rows[i].text, strlen(rows[i].text), &v, &err);
        if (rc != rows[i].rc)
            fail_msg("priority '%s': rc %d, want %d", rows[i].text, rc, rows[i].rc);
        if (rc == QW_OK && v != rows[i].value)
            fail_msg("priority '%s': %d, want %d", rows[i].text, v, rows[i].value);
        if (rc != QW_OK)
            assert_non_null(strstr(err.msg, "from -1000 to 1000"));
    }
}

static void test_too_large_flag_and_decode(void **state)
{
    struct qw_tsv_record rec;
    struct qw_error err;
    const char big[] = SVC "\t" ID "\t0011223344556677\n";
    assert_int_equal(qw_tsv_parse(big, strlen(big), 7, &rec, &err), QW_ERR_INVALID);
    assert_true(rec.too_large);
    assert_int_equal(qw_tsv_parse(big, strlen(big), 8, &rec, &err), QW_OK);
    assert_false(rec.too_large);
    uint8_t out[8];
    assert_int_equal(qw_tsv_decode_payload(&rec, out, sizeof(out)), 8);
    static const uint8_t want[] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77};
    assert_memory_equal(out, want, 8);
    assert_int_equal(qw_tsv_decode_payload(&rec, out, 7), -1);
    const char mixed[] = SVC "\t" ID "\tAbCdEf\n";
    assert_int_equal(qw_tsv_parse(mixed, strlen(mixed), 8, &rec, &err), QW_OK);
    assert_int_equal(qw_tsv_decode_payload(&rec, out, sizeof(out)), 3);
    assert_int_equal(out[0], 0xab);
    assert_int_equal(out[1], 0xcd);
    assert_int_equal(out[2], 0xef);
}

static void test_binary_garbage(void **state)
{
    /* embedded NULs and high bytes: rejected with a reason, never a crash */
    const char line[] = "ab\0de-fghij::klmn\t\xff\xfe\t00\n";
    struct qw_tsv_record rec;
    struct qw_error err;
    qw_error_clear(&err);
    assert_int_equal(qw_tsv_parse(line, sizeof(line) - 1, 8, &rec, &err), QW_ERR_INVALID);
    assert_non_null(strstr(err.msg, "character 3 is 0x00"));
    assert_int_equal(rec.kind, QW_TSV_SKIP);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_priority_parse),
        cmocka_unit_test(test_too_large_flag_and_decode),
        cmocka_unit_test(test_binary_garbage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
