/* Hex codec; see hex.h. */
#include "common/hex.h"

/*
 * 1 + the value of each byte as a hex digit, 0 for bytes that are not one:
 * one table load per digit (bulk enqueue decodes some 170 MB of hex per
 * 100,000 lines).
 */
static const uint8_t digit_plus_one[256] = {
    ['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
    ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
    ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

size_t qw_hex_span(const char *s, size_t len)
{
    const unsigned char *in = (const unsigned char *)s;
    size_t i = 0;
    while (i < len && digit_plus_one[in[i]])
        i++;
    return i;
}

long qw_hex_decode(const char *hex, size_t len, uint8_t *out, size_t cap)
{
    if (len % 2 != 0 || len / 2 > cap)
        return -1;
    const unsigned char *in = (const unsigned char *)hex;
    unsigned ok = 1;
    for (size_t i = 0; i < len / 2; i++) {
        unsigned hi = digit_plus_one[in[2 * i]];
        unsigned lo = digit_plus_one[in[2 * i + 1]];
        ok &= (hi != 0) & (lo != 0);
        out[i] = (uint8_t)(((hi - 1) << 4) | ((lo - 1) & 0x0f));
    }
    return ok ? (long)(len / 2) : -1;
}

void qw_hex_encode(const uint8_t *in, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 0x0f];
    }
    out[2 * len] = '\0';
}
