/* Hex encoding and decoding of byte strings (payloads, ids). Pure functions. */
#ifndef QW_COMMON_HEX_H
#define QW_COMMON_HEX_H

#include <stddef.h>
#include <stdint.h>

/**
 * Decodes `len` hex characters from `hex` into `out` (capacity `cap`).
 * Accepts upper- and lower-case digits. Returns the number of bytes written,
 * or -1 when `len` is odd, a character is not hex, or `cap` is too small.
 */
long qw_hex_decode(const char *hex, size_t len, uint8_t *out, size_t cap);

/** Length of the leading run of hex digits (either case) in the `len` bytes of `s`. */
size_t qw_hex_span(const char *s, size_t len);

/** Writes 2*len lower-case hex characters and a NUL into `out` (2*len+1 bytes). */
void qw_hex_encode(const uint8_t *in, size_t len, char *out);

#endif
