/*
 * The bulk enqueue line format (pure functions):
 *
 *   service_id<TAB>batch_id<TAB>hex(payload)[<TAB>priority]
 *
 * One batch per line. The optional priority is an integer from
 * QW_PRIORITY_MIN to QW_PRIORITY_MAX (higher first); without it the load's
 * default applies. A CRLF line end is tolerated, blank lines and lines
 * whose first non-blank character is '#' are skipped, and the hex may use
 * upper- or lower-case digits. Fields are checked here (the identifier
 * formats, hex syntax and the size limit); the payload's content is checked
 * by qw_batchlist_check() once it is decoded.
 */
#ifndef QW_INGEST_TSV_H
#define QW_INGEST_TSV_H

#include "common/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QW_PRIORITY_MIN (-1000) /* lowest batch priority */
#define QW_PRIORITY_MAX 1000    /* highest batch priority */

/** What a parsed line turned out to be. */
enum qw_tsv_kind {
    QW_TSV_SKIP = 0,   /* blank line or comment: nothing to enqueue */
    QW_TSV_RECORD = 1, /* a batch: the fields below are set */
};

/** One parsed line. The pointers point into the caller's line buffer. */
struct qw_tsv_record {
    enum qw_tsv_kind kind;   /* QW_TSV_RECORD or QW_TSV_SKIP */
    const char *service_id;  /* not NUL-terminated */
    size_t service_id_len;   /* characters (always 16 when valid) */
    const char *batch_id;    /* not NUL-terminated */
    size_t batch_id_len;     /* characters (always 128 when valid) */
    const char *payload_hex; /* hex digits, not NUL-terminated */
    size_t payload_hex_len;  /* characters: twice the payload's bytes */
    int too_large;     /* bool: set (with QW_ERR_INVALID) when the payload is over the limit */
    bool has_priority; /* the line has a fourth field */
    int priority;      /* that field, QW_PRIORITY_MIN..QW_PRIORITY_MAX */
};

/**
 * Parses a priority (optional sign, decimal digits, QW_PRIORITY_MIN..
 * QW_PRIORITY_MAX) of `len` bytes. Returns QW_OK or QW_ERR_INVALID with
 * the reason in `err` (may be NULL).
 */
QW_MUST_CHECK int qw_tsv_parse_priority(const char *text, size_t len, int *out,
                                        struct qw_error *err);

/**
 * Parses the `len` bytes of `line` (with or without its "\n" or "\r\n";
 * may contain any bytes, including NUL). On QW_OK, rec->kind says whether
 * it is a record. Otherwise returns QW_ERR_INVALID with the reason in
 * `err->msg` (without the line number, which the caller adds). A payload
 * longer than `max_payload_bytes` is rejected here, before decoding.
 * Does not modify or keep `line`. Pure and thread-safe.
 */
QW_MUST_CHECK int qw_tsv_parse(const char *line, size_t len, size_t max_payload_bytes,
                               struct qw_tsv_record *rec, struct qw_error *err);

/**
 * Decodes rec->payload_hex into `out` (capacity `cap` >= payload_hex_len/2)
 * after a successful qw_tsv_parse(). Returns the number of bytes written,
 * or -1 if `cap` is too small. Pure and thread-safe.
 */
long qw_tsv_decode_payload(const struct qw_tsv_record *rec, uint8_t *out, size_t cap);

#endif
