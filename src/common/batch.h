/*
 * The vocabulary every layer shares about a batch: the lengths of its two
 * identifiers and its status as stored in the database. Pure; the format
 * checks of the identifiers are in ingest/validate.h (with reasons) and
 * dlt/dlt_url.h (yes/no, before a URL is built).
 *
 *   service_id  <circuit>::<service>, circuit [A-Za-z0-9]{5}-[A-Za-z0-9]{5},
 *               service [A-Za-z0-9]{4}  (Splinter ids, as Grid spells them)
 *   batch_id    the batch's header_signature: exactly 128 lower-case hex
 */
#ifndef QW_COMMON_BATCH_H
#define QW_COMMON_BATCH_H

#include <stdbool.h>

#define QW_CIRCUIT_LEN 11    /* characters in a circuit id, "abcde-fghij" */
#define QW_SERVICE_LEN 4     /* characters in a service name, "a1b2" */
#define QW_SERVICE_ID_LEN 17 /* characters in "abcde-fghij::a1b2" */
#define QW_SERVICE_ID_MAX 24 /* bytes of a service_id buffer, with its NUL */
#define QW_BATCH_ID_LEN 128  /* hex characters of a batch_id */

/**
 * A batch's status as scabbard and Grid spell it; NONE = never submitted.
 * VALID, COMMITTED and INVALID are final: they end a batch's turn.
 */
enum qw_batch_status {
    QW_STATUS_NONE = 0,
    QW_STATUS_PENDING,
    QW_STATUS_UNKNOWN,
    QW_STATUS_DELAYED,
    QW_STATUS_VALID,
    QW_STATUS_COMMITTED,
    QW_STATUS_INVALID,
};

#define QW_STATUS_COUNT (QW_STATUS_INVALID + 1) /* values above are out of range */

/**
 * Parses a status as stored in the database ("Pending", ...; NULL or ""
 * = NONE). Returns 0, or -1 for text that is not a status (case matters:
 * docs/DESIGN.md §3.2, statuses, fixes the spelling).
 */
int qw_batch_status_parse(const char *text, enum qw_batch_status *out);

/** The database spelling of `status` ("" for NONE, "?" for out-of-range values). */
const char *qw_batch_status_name(enum qw_batch_status status);

/** True for VALID, COMMITTED and INVALID. */
bool qw_batch_status_is_final(enum qw_batch_status status);

#endif
