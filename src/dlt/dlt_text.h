/* Turning untrusted ledger text into one safe log/database line. Pure function. */
#ifndef QW_DLT_DLT_TEXT_H
#define QW_DLT_DLT_TEXT_H

#include <stddef.h>

/**
 * Copies `len` bytes of untrusted `in` (need not be NUL-terminated) into
 * `out` (capacity `cap` >= 1) as one line of valid UTF-8: control
 * characters (C0, DEL, C1) become a space, runs of spaces collapse to one,
 * leading and trailing spaces are dropped, invalid UTF-8 bytes become '?',
 * and the result is cut at a character boundary to fit `cap - 1` bytes.
 * Always NUL-terminates. Returns the length written.
 */
size_t qw_dlt_text_sanitize(char *out, size_t cap, const char *in, size_t len);

#endif
