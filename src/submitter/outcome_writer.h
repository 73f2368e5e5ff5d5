/*
 * The grouped outcome write: many batch outcomes in one fenced statement
 * (sql/outcomes_record.sql) and one COMMIT. The outcomes travel as one
 * array of the row type queuer.outcome; the statement answers which were
 * written, which met a claim row another transaction held (`skipped`: the
 * claim is still ours, so they go in the next group), and which services'
 * next batch it marked for submission on the way (the fast path); the
 * others met a lost claim or an unexpected batch state and must be
 * dropped, never retried.
 *
 * A writer belongs to the submitter thread; it keeps its parameter buffer
 * and the last result between writes. It does not decide when to write
 * or what a failure means: the caller does (submitter.c).
 */
#ifndef QW_SUBMITTER_OUTCOME_WRITER_H
#define QW_SUBMITTER_OUTCOME_WRITER_H

#include "common/err.h"
#include "db/db.h"
#include "db/pgarray.h"
#include "shared/job.h"
#include "submitter/plan.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** One outcome waiting in the group, and what became of it. */
struct qw_outcome_item {
    struct qw_job *job;        /* the job it is about (owned by the submitter) */
    struct qw_outcome outcome; /* what to write */
    bool written;              /* after a write: the fence and the expected state held */
    bool skipped;              /* after a write: the claim row was locked by another
                                  transaction; nothing written, the claim still ours: write
                                  it again with the next group */
    bool more;                 /* after a write that went on (go_on): the service's next
                                  batch was found but not marked (not due, or changed) */
    int next_row;              /* after a write: the result row of the service's next
                                  batch marked on the way, -1 = none */
    bool isolated;             /* after a write: the database refused this outcome as it
                                  was; it was written in a plain form (see below) */
    bool refused;              /* ... and refused that too: nothing was written for it */
    bool rechecked;            /* written by an earlier write whose outcome was unknown
                                  (found by qw_outcome_writer_recheck()) */
    char sqlstate[6];          /* isolated/refused: the SQLSTATE of the first refusal */
    struct qw_db_res *res;     /* the result next_row belongs to (owned by the writer) */
};

struct qw_outcome_writer {
    struct qw_pgarray param;     /* the queuer.outcome[] literal, reused */
    struct qw_db_res *res;       /* result of the last group write, owned */
    struct qw_db_res **isolated; /* results of the last write done one outcome at a time */
    size_t n_isolated;           /* entries in isolated */
};

/** The service's next batch that a write marked for submission (strings borrowed). */
struct qw_next_batch {
    const char *batch_id;    /* header_signature */
    int64_t epoch;           /* claim epoch the statement checked */
    int attempts;            /* attempts so far */
    const char *payload_hex; /* bytea text form ("\\x...") */
    int64_t lease_left_ms;   /* the claim's lease left, as checked by the statement, ms */
    int priority;            /* the batch's priority */
};

/** Initialises an empty writer. */
void qw_outcome_writer_init(struct qw_outcome_writer *w);

/** Frees the writer's buffer and last result. */
void qw_outcome_writer_free(struct qw_outcome_writer *w);

/**
 * Writes the `n` outcomes of `items` on `db` as `instance_id` of
 * `incarnation`, in one statement (autocommit). When the database refuses that statement for a
 * reason a retry will not fix (bad data, not a lost connection, a lock or
 * a timeout), the outcomes are written again one by one in one
 * transaction: an outcome refused on its own is written in a plain form
 * (`isolated`: ASCII texts naming the refusal, a bounded retry delay) or,
 * if that is refused too, left out (`refused`), so one bad outcome never
 * holds back the others.
 *
 * On QW_OK every item's `written`, `skipped`, `next_row` (with `res`),
 * `isolated` and `refused` are set; results stay valid for qw_outcome_writer_next() until
 * the next write or qw_outcome_writer_free(). Errors: QW_ERR_INVALID (an
 * outcome with an out-of-range expectation or status: nothing is sent),
 * QW_ERR_NOMEM, or the database's classified, transient error (db.h) with
 * detail in `err`: nothing was written (retry the group later).
 * Submitter thread only.
 */
QW_MUST_CHECK int qw_outcome_writer_write(struct qw_outcome_writer *w, struct qw_db *db,
                                          const char *instance_id, const char *incarnation,
                                          struct qw_outcome_item *items, size_t n,
                                          struct qw_error *err);

/**
 * After a write that matched nothing for some items and followed a write
 * of the same items whose outcome was unknown (the connection dropped
 * while it ran): re-reads by key and epoch which of the not-written items
 * that earlier write recorded, and marks them `written` and `rechecked`
 * (without a next batch: a service's next batch that write may have
 * marked is found again by the queuer). Errors as for a write; the items
 * are then unchanged.
 */
QW_MUST_CHECK int qw_outcome_writer_recheck(struct qw_outcome_writer *w, struct qw_db *db,
                                            const char *instance_id, struct qw_outcome_item *items,
                                            size_t n, struct qw_error *err);

/** Reads the next batch an item's write marked (item->next_row >= 0), from the last write. */
void qw_outcome_writer_next(const struct qw_outcome_item *item, struct qw_next_batch *out);

#endif
