/*
 * The queue transaction (fetch, choose and mark in the cycle of docs/DESIGN.md §6.1):
 * fetch the non-final batches of the services we hold, adopt batches in
 * flight that no job of ours follows, choose with the one-round serial
 * algorithm (next_batch.h), and mark the chosen batches submitted, fenced by
 * their claims. Batches named by wake-ups are marked without the fetch:
 * the mark itself leaves out a batch that is not its service's oldest open
 * one or whose service has one in flight, which is what the serial choice
 * would have decided. It runs at READ COMMITTED through the retrying helper
 * (txn.h): every mark is fenced by its claim row (locked FOR SHARE,
 * re-checked at its newest version) and by a compare-and-set on the batch,
 * and the locked claim row names the batch in flight (in_flight), which
 * holds at any isolation level.
 *
 * The transaction only collects; the queuer thread (queuer.c) acts on the
 * result after COMMIT (hands the jobs to the submitter, remembers the
 * services left out for want of room and when the next retry falls due).
 */
#ifndef QW_QUEUER_QUEUE_TXN_H
#define QW_QUEUER_QUEUE_TXN_H

#include "common/err.h"
#include "db/db.h"
#include "db/pgarray.h"
#include "db/txn.h"
#include "shared/job.h"
#include "queuer/backlog.h"
#include "queuer/svcmap.h"

#include <stddef.h>
#include <stdint.h>

/** A batch a wake-up named (a lone enqueue of a service we hold). */
struct qw_queue_named {
    char service_id[QW_SERVICE_ID_MAX];
    char batch_id[QW_BATCH_ID_LEN + 1];
    int64_t epoch; /* the claim's epoch the wake-up named */
};

/** What one queue transaction asks for. */
struct qw_queue_params {
    const char *instance_id;            /* our claimant id */
    const char *incarnation;            /* our registration's incarnation (the marks name it) */
    const char *filter;                 /* text[] literal of the services to fetch, NULL = all
                                           held (ignored when `named` is set) */
    const struct qw_queue_named *named; /* or: batches to mark without a fetch (the mark
                                           leaves out any that is not its service's next);
                                           the caller leaves room for all of them */
    size_t n_named;                     /* entries in named */
    struct qw_svcmap *svcs;             /* the queuer's services: which are usable (read only) */
    int max_in_flight;                  /* jobs the submitter may own at once (dlt.max_in_flight) */
};

/** What it produced; valid only when qw_queue_txn_run() returned QW_OK. */
struct qw_queue_result {
    struct qw_job *jobs;         /* jobs to hand over (list through ->next), owned */
    size_t n_jobs;               /* entries in jobs */
    int64_t next_retry_us;       /* earliest retry_at of a waiting batch (database clock),
                                    0 = none waits */
    int64_t db_now_us;           /* database clock at the fetch */
    struct qw_waiting *overflow; /* chosen services beyond the room we had, in priority
                                    order (ids owned) */
    size_t n_overflow;           /* entries in overflow */
    long long n_delayed;         /* fetched oldest batches that are Delayed */
    bool mark_short;             /* the mark returned fewer batches than it was given (a claim
                                    lost or locked, a batch changed): fetch again soon */
    struct qw_txn_stats stats;   /* attempts and retries of the transaction */
};

/** Reusable buffers of the queue transaction (the mark's array parameters). */
struct qw_queue_bufs {
    struct qw_pgarray arr[4]; /* batch ids, service ids, epochs, statuses seen */
    bool mark_sent;           /* the last attempt sent its mark (arr holds it) */
};

/** Initialises / frees the buffers. */
void qw_queue_bufs_init(struct qw_queue_bufs *b);
void qw_queue_bufs_free(struct qw_queue_bufs *b);

/**
 * Runs the queue transaction on `db` (the calling thread's connection)
 * with `policy` (READ COMMITTED, retried). On QW_OK `out` holds what to
 * act on; free it with qw_queue_result_free(). On failure `out` holds
 * nothing (nothing was committed that needs acting on: a mark that did
 * commit is found again as a batch in flight and adopted).
 */
QW_MUST_CHECK int qw_queue_txn_run(struct qw_db *db, const struct qw_txn_policy *policy,
                                   const struct qw_queue_params *p, struct qw_queue_bufs *bufs,
                                   struct qw_queue_result *out, struct qw_error *err);

/**
 * After qw_queue_txn_run() answered QW_ERR_OUTCOME_UNKNOWN (the connection
 * dropped during COMMIT) with bufs->mark_sent: re-reads by key and epoch
 * which of the marks it tried did commit (sql/batches_marked.sql). Those
 * were never posted; `out` receives SUBMIT jobs for them, to hand over as
 * after a normal queue transaction (nothing else in `out` is set). `db`
 * must be connected. Errors are the database's; `out` is then empty.
 */
QW_MUST_CHECK int qw_queue_recheck_marks(struct qw_db *db, const char *instance_id,
                                         const char *incarnation, const struct qw_queue_bufs *bufs,
                                         struct qw_queue_result *out, struct qw_error *err);

/** Frees the jobs and ids a result still owns; leaves it empty. */
void qw_queue_result_free(struct qw_queue_result *r);

#endif
