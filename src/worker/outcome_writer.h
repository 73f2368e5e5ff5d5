/*
 * The grouped outcome write: many batch outcomes in one fenced statement
 * (sql/outcomes_record.sql) and one COMMIT. The outcomes travel as one
 * array of the row type queuer.outcome; the statement answers which were
 * written (the others met a lost claim or an unexpected batch state and
 * must be dropped, never retried) and which services' next batch it
 * marked for submission on the way (the fast path).
 *
 * A writer belongs to the submitter thread; it keeps its parameter buffer
 * and the last result between writes. It does not decide when to write
 * or what a failure means: the caller does (submitter.c).
 */
#ifndef QW_WORKER_OUTCOME_WRITER_H
#define QW_WORKER_OUTCOME_WRITER_H

#include "common/err.h"
#include "db/db.h"
#include "db/pgarray.h"
#include "worker/job.h"
#include "worker/outcome.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** One outcome waiting in the group, and what became of it. */
struct qw_outcome_item {
    struct qw_job *job;        /* the job it is about (owned by the submitter) */
    struct qw_outcome outcome; /* what to write */
    bool written;              /* after a write: the fence and the expected state held */
    int next_row;              /* after a write: the result row of the service's next
                                  batch marked on the way, -1 = none */
};

struct qw_outcome_writer {
    struct qw_pgarray param; /* the queuer.outcome[] literal, reused */
    struct qw_db_res *res;   /* result of the last successful write, owned */
};

/** The service's next batch that a write marked for submission (strings borrowed). */
struct qw_next_batch {
    const char *batch_id;    /* header_signature */
    int64_t epoch;           /* claim epoch the statement checked */
    int attempts;            /* attempts so far */
    const char *payload_hex; /* bytea text form ("\\x...") */
    int64_t lease_left_ms;   /* the claim's lease left, as checked by the statement, ms */
};

/** Initialises an empty writer. */
void qw_outcome_writer_init(struct qw_outcome_writer *w);

/** Frees the writer's buffer and last result. */
void qw_outcome_writer_free(struct qw_outcome_writer *w);

/**
 * Writes the `n` outcomes of `items` on `db` as `instance_id`, in one
 * statement (autocommit). On QW_OK every item's `written` and `next_row`
 * are set and the result is kept for qw_outcome_writer_next() until the
 * next write or qw_outcome_writer_free(). Errors: QW_ERR_INVALID (an
 * outcome with an out-of-range expectation or status: nothing is sent),
 * QW_ERR_NOMEM, or the database's classified error (db.h) with detail in
 * `err`; the items are then untouched. Submitter thread only.
 */
QW_MUST_CHECK int qw_outcome_writer_write(struct qw_outcome_writer *w, struct qw_db *db,
                                          const char *instance_id, struct qw_outcome_item *items,
                                          size_t n, struct qw_error *err);

/** Reads result row `row` (an item's next_row) of the last write. */
void qw_outcome_writer_next(const struct qw_outcome_writer *w, int row, struct qw_next_batch *out);

#endif
