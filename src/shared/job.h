/*
 * A job: one batch travelling from the queuer thread to the submitter
 * thread and back. The queuer allocates it and pushes it onto the handoff
 * queue; from then on the submitter owns it until it pushes it onto the
 * completion queue with `end` set; the queuer then reads and frees it.
 * Exactly one thread owns a job at any time, so it needs no lock; the one
 * thing the queuer writes while the submitter owns the job is the atomic
 * flag `drain` points to, kept outside the struct so that copies of a job
 * (the plans' views) never read it non-atomically. What only the submitter
 * knows about a job lives in its own struct (job->sub), which the queuer
 * never sees.
 */
#ifndef QW_SHARED_JOB_H
#define QW_SHARED_JOB_H

#include "common/batch.h"
#include "common/err.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QW_PRIORITY_NONE INT32_MIN /* "no priority": below every batch's priority */

enum qw_job_kind {
    QW_JOB_SUBMIT = 0, /* marked submitted by the queuer: POST it, then follow it */
    QW_JOB_ADOPT,      /* found in flight (earlier owner or run): follow its status */
};

/** How a job ended, told back to the queuer. */
enum qw_job_end {
    QW_JOB_END_NONE = 0,    /* still running (never seen by the queuer) */
    QW_JOB_END_FINAL,       /* Committed, Valid or Invalid recorded: the service moves on */
    QW_JOB_END_RETRY_LATER, /* Delayed or Unknown recorded: the queuer resubmits when due */
    QW_JOB_END_LOST,        /* a fenced write matched nothing: the claim was lost */
    QW_JOB_END_ABANDONED,   /* stopped without a recorded outcome (shutdown, lease) */
};

struct qw_submission;

struct qw_job {
    enum qw_job_kind kind;              /* what the submitter does with it */
    char service_id[QW_SERVICE_ID_MAX]; /* "<circuit>::<service>" */
    char batch_id[QW_BATCH_ID_LEN + 1]; /* header_signature */
    int64_t epoch;                      /* claim epoch the queuer held when it made the job */
    int attempts;                       /* POSTs recorded before this one */
    int priority;                       /* the batch's priority (higher first) */
    int avoid_node;                     /* node the batch's last POST failed on, -1 = none:
                                           its next POST prefers another node; handed back
                                           to the queuer with the job */
    int64_t deadline_ms;                /* monotonic ms: do not POST after this (lease) */
    uint8_t *payload;                   /* SUBMIT: BatchList bytes, owned; ADOPT: NULL */
    bool adopted_submitting;            /* ADOPT: the database showed it being submitted (no
                                           status): its Pending is still to be recorded */
    size_t payload_len;                 /* bytes in payload */
    atomic_bool *drain;                 /* set by the queuer while the job is out: its service is
                                           above the fair share, so no fast path (the job comes back
                                           once its batch ends, and the claim can be given back);
                                           allocated with the job by qw_job_new(), NULL = never */
    struct qw_submission *sub;          /* the submitter's private state while it owns the job
                                           (submitter/submission.h): allocated when it takes the job,
                                           freed before it hands it back; NULL while the queuer has it */

    /* result, set by the submitter before handing the job back */
    enum qw_job_end end; /* how it ended */
    bool no_next;        /* END_FINAL: the statement that recorded it looked for the
                            service's next batch and found none (what is enqueued later
                            wakes the queuer): no fetch is needed when it comes back */
    struct qw_job *next; /* intrusive list link, owner's use */
};

/**
 * Sets the job's payload from a bytea in PostgreSQL's text form ("\\x" and
 * hex digits), replacing any previous payload. Returns QW_OK, or
 * QW_ERR_INVALID / QW_ERR_NOMEM (the job then has no payload).
 */
QW_MUST_CHECK int qw_job_set_payload_hex(struct qw_job *job, const char *bytea_text);

/** A zeroed job with its drain flag (clear); NULL when out of memory. */
struct qw_job *qw_job_new(void);

/** Frees a job and its payload; NULL is ignored. */
void qw_job_free(struct qw_job *job);

#endif
