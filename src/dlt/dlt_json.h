/*
 * Parsing of scabbard's batch_statuses answer:
 *   [{"id": "<hex>", "status": {"statusType": "Pending", "message": [...]}, "timestamp": ...}]
 * into a caller-provided array parallel to the ids that were asked for.
 * Pure function (uses jansson, no I/O); hostile input yields an error,
 * never a crash or an invented status.
 */
#ifndef QW_DLT_DLT_JSON_H
#define QW_DLT_DLT_JSON_H

#include "common/err.h"
#include "dlt/dlt_url.h"

#include <stdbool.h>
#include <stddef.h>

#define QW_DLT_STATUS_MESSAGE_MAX 256   /* bytes of qw_dlt_status.message, with the NUL */
#define QW_DLT_STATUS_MAX_IDS 1000      /* ids per status request */
#define QW_DLT_STATUS_MAX_ENTRIES 10000 /* entries an answer may hold before it is refused */
#define QW_DLT_JSON_MAX_DEPTH 32        /* nesting of arrays/objects an answer may use */

/** A batch status as scabbard spells it (statusType). */
enum qw_dlt_status_type {
    QW_DLT_STATUS_UNKNOWN = 0, /* "Unknown": the ledger does not (or no longer) know the batch */
    QW_DLT_STATUS_PENDING,     /* "Pending": queued, not yet executed */
    QW_DLT_STATUS_VALID,       /* "Valid": executed, not yet committed (final for us) */
    QW_DLT_STATUS_COMMITTED,   /* "Committed": in the ledger (final) */
    QW_DLT_STATUS_INVALID,     /* "Invalid": rejected (final); message says why */
};

/** Status of one requested batch id. */
struct qw_dlt_status {
    char id[QW_BATCH_ID_LEN + 1];            /* the requested id */
    bool reported;                           /* false: the answer did not mention this id */
    enum qw_dlt_status_type type;            /* meaningful only when reported */
    char message[QW_DLT_STATUS_MESSAGE_MAX]; /* sanitised text of "message", may be "" */
};

/** What an answer held compared with the request. */
struct qw_dlt_status_counts {
    size_t reported; /* requested ids the answer reported */
    size_t missing;  /* requested ids absent from the answer */
    size_t ignored;  /* entries for ids that were not requested */
};

/** scabbard's spelling of `type` ("Unknown", "Pending", ...); static, never NULL. */
const char *qw_dlt_status_type_name(enum qw_dlt_status_type type);

/** True when `type` ends a batch's turn (Valid, Committed, Invalid). */
bool qw_dlt_status_type_final(enum qw_dlt_status_type type);

/**
 * Parses a batch_statuses answer (`body`, `len` bytes, not necessarily
 * NUL-terminated) for the `n` requested `ids` (1..QW_DLT_STATUS_MAX_IDS,
 * distinct, each valid per qw_dlt_batch_id_valid()).
 *
 * Fills `out[0..n-1]` (caller-provided) parallel to `ids`: an id the
 * answer reported gets reported=true, its type and message; an id it did
 * not mention gets reported=false. Entries for ids not requested are
 * skipped and counted in `counts->ignored` (`counts` may be NULL).
 *
 * Returns QW_OK, or QW_ERR_INVALID when the request is bad or the answer
 * is malformed: not JSON, truncated, nested deeper than
 * QW_DLT_JSON_MAX_DEPTH, not an array, more than QW_DLT_STATUS_MAX_ENTRIES
 * entries, an entry of the wrong shape or type, an id that is not 128
 * lower-case hex characters, an unknown statusType, or a requested id
 * reported twice. On error every out[i] is "not reported", counts are
 * zero, and `err` (capacity `err_cap`, may be NULL) says what was wrong.
 */
QW_MUST_CHECK int qw_dlt_json_parse_statuses(const char *body, size_t len, const char *const *ids,
                                             size_t n, struct qw_dlt_status *out,
                                             struct qw_dlt_status_counts *counts, char *err,
                                             size_t err_cap);

#endif
