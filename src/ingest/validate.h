/*
 * Format checks for the two identifiers of a batch (pure functions).
 *
 *   service_id  <circuit>::<service>, circuit [A-Za-z0-9]{5}-[A-Za-z0-9]{5},
 *               service [A-Za-z0-9]{4}  (Splinter ids, as Grid spells them)
 *   batch_id    the batch's header_signature: exactly 128 lower-case hex
 *
 * The same rules are CHECK constraints on queuer.batches; checking them in
 * the client first gives every bad line a precise reason before anything
 * reaches the database.
 */
#ifndef QW_INGEST_VALIDATE_H
#define QW_INGEST_VALIDATE_H

#include "common/batch.h"
#include "common/err.h"

#include <stddef.h>

/**
 * Checks that the `len` bytes at `s` (need not be NUL-terminated; may hold
 * any bytes) form a service_id. Returns QW_OK, or QW_ERR_INVALID with
 * `err->msg` naming the first defect and its 1-based character position.
 * Pure and thread-safe; `err` may be NULL.
 */
QW_MUST_CHECK int qw_validate_service_id(const char *s, size_t len, struct qw_error *err);

/**
 * Checks that the `len` bytes at `s` form a batch_id (128 lower-case hex
 * characters). Returns QW_OK, or QW_ERR_INVALID with `err->msg` naming the
 * defect (length, or the first bad character and its position; upper-case
 * hex is called out as such). Pure and thread-safe; `err` may be NULL.
 */
QW_MUST_CHECK int qw_validate_batch_id(const char *s, size_t len, struct qw_error *err);

/**
 * Renders up to `len` bytes of untrusted `s` for a message: printable ASCII
 * as is, anything else as '?', cut to fit `cap` (with "..." when cut).
 * Returns `buf`. Pure and thread-safe.
 */
const char *qw_validate_printable(const char *s, size_t len, char *buf, size_t cap);

#endif
