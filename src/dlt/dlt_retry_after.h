/* Parsing of the HTTP Retry-After header (RFC 7231 §7.1.3). Pure function. */
#ifndef QW_DLT_DLT_RETRY_AFTER_H
#define QW_DLT_DLT_RETRY_AFTER_H

#include <stddef.h>
#include <stdint.h>

/**
 * Converts a Retry-After field value into a delay in milliseconds.
 *
 * `value` holds `len` bytes (need not be NUL-terminated; surrounding
 * spaces and tabs are ignored). Accepted forms: delta-seconds (1*DIGIT,
 * any size: large values saturate) and an HTTP-date in IMF-fixdate form
 * ("Sun, 06 Nov 1994 08:49:37 GMT"), plus the two obsolete forms RFC 7231
 * asks recipients to accept (RFC 850 "Sunday, 06-Nov-94 08:49:37 GMT" and
 * asctime "Sun Nov  6 08:49:37 1994"). A date is measured from
 * `now_unix_ms` (milliseconds since the Unix epoch, passed in by the
 * caller); a date in the past gives 0.
 *
 * Returns the delay clamped to [0, max_ms] (max_ms >= 0), or -1 when the
 * value is absent (NULL or empty) or not one of the forms above (garbage,
 * negative numbers, fractions, impossible dates).
 */
int64_t qw_dlt_retry_after_ms(const char *value, size_t len, int64_t now_unix_ms, int64_t max_ms);

#endif
