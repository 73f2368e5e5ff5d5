/*
 * The submitter's private state of one job (struct qw_submission): what the
 * submitter thread knows about a job it owns and the queuer never reads.
 * The submitter allocates it when it takes the job from the jobs queue
 * (job->sub) and frees it before it hands the job back on the done queue,
 * so a job the queuer holds has no submission (job->sub is NULL). Only the
 * submitter thread touches it; it needs no lock.
 */
#ifndef QW_SUBMITTER_SUBMISSION_H
#define QW_SUBMITTER_SUBMISSION_H

#include "shared/job.h"
#include "submitter/prioq.h"

#include <stdbool.h>
#include <stdint.h>

/** Submitter-side progress of a job. */
enum qw_job_state {
    QW_JOB_WAITING = 0, /* not yet posted (paused, or waiting for a transfer slot) */
    QW_JOB_POSTING,     /* POST in flight */
    QW_JOB_RECORDING,   /* outcome waits in the grouped write */
    QW_JOB_POLLING,     /* status long-poll in flight */
    QW_JOB_POLL_WAIT,   /* waiting to poll again (after an error or Unknown) */
};

struct qw_submission {
    struct qw_job *job;         /* the job this is the state of (job->sub points back) */
    enum qw_job_state state;    /* progress */
    struct qw_prioq_item ready; /* entry in the ready queue while its POST waits for capacity */
    int node;                   /* node of the request in flight */
    int poll_avoid;             /* node the batch's last failed request went to, -1 = none
                                   (or a read was answered since) */
    uint32_t unknown_elsewhere; /* nodes other than the POST's that answered Unknown since
                                   its last other answer (bit i = node i): asked last */
    int poll_wait_s;            /* long-poll wait of the poll in flight, seconds */
    bool parked;                /* POLL_WAIT with no node up: waits for one to come back */
    bool post_uncertain;        /* the last POST got no answer (timeout, connection lost):
                                   it may have reached the ledger, so its status is read
                                   (on another node) before anything is resubmitted */
    char post_failure[64];      /* how that POST failed, for the history */
    int64_t next_at_ms;         /* monotonic ms of the next action when waiting */
    int64_t unknown_since_ms;   /* monotonic ms Unknown was first seen, 0 = not */
    int poll_errors;            /* consecutive failed status polls */
    bool accepted_unrecorded;   /* the ledger took our POST (202) but the database still shows
                                   it being submitted: Pending is written only if the batch is
                                   not final by the first status answer (one write saved) */
    int64_t accepted_ms;        /* monotonic ms of that 202 */
    int64_t first_look_ms;      /* its first status read went out this long after the 202 */
    int chained;                /* batches of its service this job went on to without the
                                   queuer (fast path); bounded so the queuer looks again */
    int64_t posted_us;          /* monotonic us the POST was started, for latency */
    int64_t cost;               /* its cost against the shared capacity (dlt.cost); 0 = not
                                   computed yet */
    int64_t cap_taken;          /* units of the in-flight capacity it holds, 0 = none */
    bool cap_waited;            /* it waited for capacity since it last went out (counted once) */
    uint32_t route;             /* the nodes that serve its service (bit i = node i) */
    int post_node;              /* node its last POST went to (took it, or may have), -1 =
                                   none: a batch found in flight, posted by someone else */
    bool post_node_knew;        /* that node acknowledged the batch (202, or Pending) */
    int win_node;               /* node whose window counts the batch, -1 = none */
    uint64_t win_epoch;         /* that window's epoch when the POST started */
};

#endif
