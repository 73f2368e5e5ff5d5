/*
 * Durations as operators type and read them: "7d", "12h", "30m", "45s",
 * "2w", or a sum such as "1d12h". Pure functions, no I/O.
 */
#ifndef QW_COMMON_DURATION_H
#define QW_COMMON_DURATION_H

#include "common/err.h"

#include <stddef.h>
#include <stdint.h>

#define QW_DURATION_MAX_S (100LL * 366 * 86400) /* seconds; longer is refused */

/**
 * Parses `text`: one or more <digits><unit> groups, unit s, m, h, d or w,
 * each unit at most once and in decreasing order ("1d12h", not "12h1d"),
 * no signs, spaces or fractions. The total must be > 0 and at most
 * QW_DURATION_MAX_S. On success returns QW_OK and sets *out_s; otherwise
 * QW_ERR_INVALID with a one-line reason in `why` (may be NULL).
 */
QW_MUST_CHECK int qw_duration_parse(const char *text, int64_t *out_s, char *why, size_t why_len);

/**
 * Writes `s` seconds compactly into `buf`: the two largest non-zero units,
 * "45s", "5m12s", "3h2m", "2d4h", "0s"; negative values as "-" plus that.
 */
void qw_duration_format(int64_t s, char *buf, size_t len);

#endif
