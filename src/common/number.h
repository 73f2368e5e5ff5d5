/*
 * Whole numbers as command-line options take them ("--rate 1500"): strict
 * decimal, within bounds the caller names. Pure functions, no I/O.
 */
#ifndef QW_COMMON_NUMBER_H
#define QW_COMMON_NUMBER_H

#include "common/err.h"

#include <stddef.h>

/**
 * Parses `text`, the value of option `name` (e.g. "--rate"): an optional
 * sign and decimal digits, nothing before or after them (no spaces, no
 * base prefix, no fraction), from `min` to `max`. On success returns QW_OK
 * and sets *out; otherwise (empty, junk, overflow, out of bounds) returns
 * QW_ERR_INVALID, leaves *out alone and writes "NAME must be MIN..MAX"
 * into `why` (may be NULL).
 */
QW_MUST_CHECK int qw_number_parse(const char *name, const char *text, long min, long max, long *out,
                                  char *why, size_t why_len);

#endif
