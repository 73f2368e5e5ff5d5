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

/**
 * Masks secrets in untrusted ledger text in place, before anything is
 * parsed, logged or stored: every occurrence of `token` (NULL or "" =
 * none) and the value of every "Authorization:" header line (up to the
 * end of the line, a quote or a '<') become '*', keeping the length, so a
 * ledger or proxy that echoes our request cannot leak the credentials.
 */
void qw_dlt_text_mask_secret(char *buf, size_t len, const char *token);

#endif
