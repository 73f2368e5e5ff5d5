/*
 * One-round serial queuing (docs/DESIGN.md §5.1) as a pure function: given the
 * non-final batches of the services this worker has claimed, choose at most
 * one batch per service to submit now, never skipping a service's oldest
 * non-final batch. No I/O, no clock reads (time is passed in), no logging.
 */
#ifndef QW_QUEUER_NEXT_BATCH_H
#define QW_QUEUER_NEXT_BATCH_H

#include "common/batch.h"
#include "common/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/**
 * One non-final batch of a claimed service, as fetched in step 4 of the
 * cycle. The strings are borrowed from the caller and only read.
 */
struct qw_serial_batch {
    const char *service_id;      /* "<circuit>::<service>", NUL-terminated */
    const char *batch_id;        /* header_signature, 128 lowercase hex chars */
    int64_t created_at_us;       /* database created_at, microseconds since the Unix epoch */
    int64_t retry_at_us;         /* DELAYED: earliest resubmission; UNKNOWN: end of the
                                    confirmation delay; us since epoch, 0 = due now */
    enum qw_batch_status status; /* current status */
    bool submitted;              /* true while a submitter holds the batch */
};

/** Optional summary of one queuing round, for logs, metrics and scheduling. */
struct qw_serial_stats {
    size_t services;       /* distinct services seen in the input */
    size_t chosen;         /* batches chosen (= services eligible now) */
    size_t blocked;        /* services with a batch Pending or being submitted */
    size_t waiting;        /* services whose oldest batch waits for its retry_at_us */
    size_t ignored;        /* input rows with a final status (should not be fetched) */
    int64_t next_retry_us; /* earliest retry_at_us among waiting services, us since
                              epoch; 0 when none waits (wake the queuer then) */
};

/**
 * Chooses the batches to submit now (docs/DESIGN.md §5.1).
 *
 * Per service, the batches are ordered by (created_at_us, batch_id) and the
 * oldest one with a non-final status is the only candidate:
 *  - no status and not submitted                  -> chosen;
 *  - UNKNOWN, not submitted, now_us >= retry_at_us -> chosen again;
 *  - DELAYED, not submitted, now_us >= retry_at_us -> chosen again;
 *  - UNKNOWN/DELAYED not yet due                  -> the service waits.
 * A service with any PENDING batch, or any batch with `submitted` set
 * (being submitted), anywhere in its list is blocked. Rows with a final
 * status are ignored; a row with an out-of-range status blocks its service
 * (when in doubt, submit nothing). Input order does not matter.
 *
 * Output: `out` receives the indexes (into `batches`) of the chosen
 * batches, at most one per service, ordered oldest first by
 * (created_at_us, batch_id, service_id); *n_out is their count. `out` must
 * have room for `n` entries.
 *
 * Memory: `scratch` must hold `n` pointers (the function sorts them); pass
 * NULL to have the function allocate them once and free them before it
 * returns. Time O(n log n).
 *
 * Thread-safety: reentrant; `batches` is only read.
 * Errors: QW_ERR_INVALID when a service_id or batch_id is NULL (nothing is
 * chosen), QW_ERR_NOMEM when `scratch` is NULL and allocation fails.
 * `stats` may be NULL.
 */
QW_MUST_CHECK int qw_serial_choose(const struct qw_serial_batch *batches, size_t n, int64_t now_us,
                                   const struct qw_serial_batch **scratch, size_t *out,
                                   size_t *n_out, struct qw_serial_stats *stats);

#endif
