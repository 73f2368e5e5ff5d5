/* Unit tests for the hex codec (src/common/hex.h): every byte value, both cases, bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/hex.h"

#include <string.h>

/* All 256 byte values survive encode + decode; upper case decodes the same. */
static void test_round_trip(void **state)
{
    uint8_t in[256], out[256];
    char hex[513];
    for (int i = 0; i < 256; i++)
        in[i] = (uint8_t)i;
    qw_hex_encode(in, sizeof(in), hex);
    assert_int_equal(strlen(hex), 512);
    assert_int_equal(qw_hex_span(hex, 512), 512);
    assert_int_equal(qw_hex_decode(hex, 512, out, sizeof(out)), 256);
    assert_memory_equal(in, out, sizeof(in));
    for (int i = 0; i < 512; i++)
        if (hex[i] >= 'a')
            hex[i] = (char)(hex[i] - 'a' + 'A');
    memset(out, 0, sizeof(out));
    assert_int_equal(qw_hex_decode(hex, 512, out, sizeof(out)), 256);
    assert_memory_equal(in, out, sizeof(in));
}

/* Every byte that is not a hex digit is refused wherever it stands. */
static void test_bad_input(void **state)
{
    uint8_t out[4];
    int digits = 0;
    for (int c = 0; c < 256; c++) {
        char hex[] = "00a0";
        hex[2] = (char)c;
        int is_digit = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        digits += is_digit;
        assert_int_equal(qw_hex_decode(hex, 4, out, sizeof(out)), is_digit ? 2 : -1);
        assert_int_equal(qw_hex_span(hex, 4), is_digit ? 4 : 2);
    }
    assert_int_equal(digits, 22);
    assert_int_equal(qw_hex_decode("abc", 3, out, sizeof(out)), -1); /* odd */
    assert_int_equal(qw_hex_decode("0011223344", 10, out, 4), -1);   /* no room */
    assert_int_equal(qw_hex_decode("", 0, out, sizeof(out)), 0);     /* empty */
    assert_int_equal(qw_hex_span("0a\tb", 4), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
