/* Unit tests for the service_id and batch_id format checks (ingest/validate.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/err.h"
#include "ingest/validate.h"

#include <string.h>

static void test_service_ids(void **state)
{
    static const struct {
        const char *id;     /* input (NUL-terminated; `len` overrides when set) */
        size_t len;         /* bytes, 0 = strlen */
        int ok;             /* bool: expected verdict */
        const char *reason; /* substring of the message */
    } rows[] = {
        {"abcde-fghij::klmn", 0, 1, NULL},
        {"ABCDE-01234::Z9z9", 0, 1, NULL},
        {"00000-00000::0000", 0, 1, NULL},
        {"", 0, 0, "is empty"},
        {"abcde-fghij:klmn", 0, 0, "no '::'"},
        {"abcdefghijklmn", 0, 0, "no '::'"},
        {"abcd-fghij::klmn", 0, 0, "circuit is 10 characters, expected 11"},
        {"abcdef-fghij::klmn", 0, 0, "circuit is 12 characters"},
        {"abcde_fghij::klmn", 0, 0, "character 6 is '_', expected '-'"},
        {"ab!de-fghij::klmn", 0, 0, "character 3 is '!', expected a letter or digit"},
        {"abcde-fghij::klm", 0, 0, "service is 3 characters, expected 4"},
        {"abcde-fghij::klmno", 0, 0, "service is 5 characters"},
        {"abcde-fghij::kl-n", 0, 0, "character 16 is '-'"},
        {"abcde-fghij::kl n", 0, 0, "character 16 is ' '"},
        {"abcde-fgh\xc3\xa9::klmn", 0, 0, "character 10 is 0xc3"},
        {"abcde-fghi\xc3::klmn", 0, 0, "character 11 is 0xc3"},
        {"abcde-fghij::kl\0n", 17, 0, "character 16 is 0x00"},
        {"abcde-fghij::::mn", 0, 0, "character 14 is ':'"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct qw_error err;
        qw_error_clear(&err);
        size_t len = rows[i].len ? rows[i].len : strlen(rows[i].id);
        int rc = qw_validate_service_id(rows[i].id, len, &err);
        int ok = rc == QW_OK;
        if (ok != rows[i].ok || (rows[i].reason && !strstr(err.msg, rows[i].reason)))
            print_error("row %zu '%s': rc=%d msg='%s'\n", i, rows[i].id, rc, err.msg);
        assert_int_equal(ok, rows[i].ok);
        if (!ok) {
            assert_int_equal(rc, QW_ERR_INVALID);
            assert_int_equal(err.rc, QW_ERR_INVALID);
            assert_non_null(strstr(err.msg, rows[i].reason));
        }
    }
    /* a NULL error sink is allowed */
    assert_int_equal(qw_validate_service_id("x", 1, NULL), QW_ERR_INVALID);
}

static void test_batch_ids(void **state)
{
    char good[129];
    for (int i = 0; i < 128; i++)
        good[i] = "0123456789abcdef"[i % 16];
    good[128] = '\0';
    char upper[129];
    memcpy(upper, good, sizeof(upper));
    upper[20] = 'C';
    char bad[129];
    memcpy(bad, good, sizeof(bad));
    bad[127] = 'g';
    char longer[131];
    memcpy(longer, good, 128);
    memcpy(longer + 128, "ab", 3);
    const struct {
        const char *id;     /* input */
        int ok;             /* bool: expected verdict */
        const char *reason; /* substring of the message */
    } rows[] = {
        {good, 1, NULL},
        {"", 0, "is empty"},
        {"abc", 0, "is 3 characters, expected 128"},
        {longer, 0, "is 130 characters, expected 128"},
        {upper, 0, "character 21 is upper-case 'C'"},
        {bad, 0, "character 128 is 'g', not a hex digit"},
        {"12 4", 0, "character 3 is ' '"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct qw_error err;
        qw_error_clear(&err);
        int rc = qw_validate_batch_id(rows[i].id, strlen(rows[i].id), &err);
        int ok = rc == QW_OK;
        if (ok != rows[i].ok || (rows[i].reason && !strstr(err.msg, rows[i].reason)))
            print_error("row %zu: rc=%d msg='%s'\n", i, rc, err.msg);
        assert_int_equal(ok, rows[i].ok);
        if (!ok)
            assert_non_null(strstr(err.msg, rows[i].reason));
    }
    /* the length counts, not a NUL: 128 good characters of a longer buffer */
    assert_int_equal(qw_validate_batch_id(longer, 128, NULL), QW_OK);
}

static void test_printable(void **state)
{
    char buf[8];
    assert_string_equal(qw_validate_printable("ab\tc", 4, buf, sizeof(buf)), "ab?c");
    assert_string_equal(qw_validate_printable("abcdefghij", 10, buf, sizeof(buf)), "abcd...");
    assert_string_equal(qw_validate_printable("abcdefg", 7, buf, sizeof(buf)), "abcdefg");
    char tiny[2];
    assert_string_equal(qw_validate_printable("xyz", 3, tiny, sizeof(tiny)), "x");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_service_ids),
        cmocka_unit_test(test_batch_ids),
        cmocka_unit_test(test_printable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
