/*
 * The submitter's plans: what a ledger answer means for a job, as data. A
 * plan (struct qw_plan) says what happened, what the job does next and, when
 * something is to be recorded, the outcome to write (struct qw_outcome, a row
 * of sql/outcomes_record.sql). This file holds the types and the builders
 * both planners use: outcome.h plans POST answers, monitor.h status answers.
 * Pure: no I/O, no clock reads (time is passed in), no logging.
 */
#ifndef QW_SUBMITTER_PLAN_H
#define QW_SUBMITTER_PLAN_H

#include "common/backoff.h"
#include "common/batch.h"
#include "shared/job.h"
#include "submitter/submission.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QW_OUTCOME_TEXT_MAX 256        /* bytes of last_error and detail, with the NUL */
#define QW_OUTCOME_CUT_MAX 201         /* bytes of ledger text quoted inside a longer detail */
#define QW_OUTCOME_NO_RETRY INT64_MIN  /* retry_ms: retry_at NULL */
#define QW_OUTCOME_RETRY_NEVER (-1)    /* retry_ms: retry_at infinity (parked for an operator) */
#define QW_OUTCOME_MAX_CHAINED 32      /* fast-path batches per job before the queuer looks again */
#define QW_OUTCOME_FIRST_POLL_WAIT_S 1 /* long-poll wait, s, before Pending is written */

/** The state the database must show for the write to apply (compare-and-set). */
enum qw_outcome_expect {
    QW_EXPECT_POSTING = 0, /* submitted, no status: our POST in progress */
    QW_EXPECT_PENDING,     /* status Pending */
    QW_EXPECT_INFLIGHT,    /* either of the above (adopted batches) */
};

/** What happens to the job once its outcome is written. */
enum qw_outcome_after {
    QW_AFTER_POLL = 0,      /* recorded Pending: follow its status */
    QW_AFTER_END_FINAL,     /* the batch's turn is over */
    QW_AFTER_END_RETRY,     /* Delayed / Unknown: the queuer resubmits when due */
    QW_AFTER_END_ABANDONED, /* handed back unfinished (before POST, or stopping) */
};

/** One write about one batch (a row of sql/outcomes_record.sql). */
struct qw_outcome {
    enum qw_outcome_expect expect;        /* compare-and-set on the batch */
    enum qw_batch_status status;          /* new status; NONE = none (handed back) */
    bool submitted;                       /* submitted flag after the write */
    int attempts_add;                     /* added to attempts */
    int64_t retry_ms;                     /* retry_at = now() + ms, or QW_OUTCOME_NO_RETRY /
                                             QW_OUTCOME_RETRY_NEVER */
    char last_error[QW_OUTCOME_TEXT_MAX]; /* "" = keep the stored one */
    char detail[QW_OUTCOME_TEXT_MAX];     /* history detail */
    bool posted;                          /* sets last_submitted_at */
    bool go_on;                           /* a final outcome may continue with the
                                             service's next batch (fast path) */
    enum qw_outcome_after after;          /* what happens once it is written */
};

/** The database spelling of `e` ("posting", "pending", "inflight"); NULL when out of range. */
const char *qw_outcome_expect_name(enum qw_outcome_expect e);

/** The settings a plan depends on (from the config), and the moment it is made. */
struct qw_plan_ctx {
    int64_t now_ms;         /* monotonic ms, read by the caller */
    bool stopping;          /* the worker is shutting down */
    int max_attempts;       /* dlt.max_attempts, 0 = unlimited */
    int retry_base_ms;      /* dlt.retry_base_ms */
    int retry_max_ms;       /* dlt.retry_max_ms */
    int pause_base_ms;      /* dlt.pause_base_ms */
    int pause_max_ms;       /* dlt.pause_max_ms */
    int status_wait_s;      /* dlt.status_wait_s */
    int unknown_confirm_ms; /* dlt.unknown_confirm_ms */
    int64_t first_look_ms;  /* a 202: its node's qw_nodes_first_look_ms() */
    bool window_backs_off;  /* a 429's node had a window above its minimum, now shrunk for it:
                               no pause of every submission (unless the ledger asked for one
                               with Retry-After) */
    struct qw_rng *rng;     /* the submitter thread's PRNG (jitter) */
};

/** What happened, for the adapter's counters and log lines. */
enum qw_plan_event {
    QW_EV_NONE = 0,
    QW_EV_POST_ACCEPTED,     /* 202: follow it from when it is likely final */
    QW_EV_POST_BACKPRESSURE, /* 429: Delayed, submissions pause */
    QW_EV_POST_INVALID,      /* 400: Invalid */
    QW_EV_POST_AUTH,         /* 401/403: wait, no attempt burnt */
    QW_EV_POST_RETRY,        /* other failure: Delayed with backoff */
    QW_EV_POST_EXHAUSTED,    /* other failure at dlt.max_attempts: parked */
    QW_EV_POST_UNCERTAIN,    /* no usable answer (timeout, connection lost, a 202 we
                                cannot read): its status is read before anything else */
    QW_EV_ABANDONED,         /* transfer cancelled (shutdown) */
    QW_EV_POLL_FAILED,       /* a status poll failed: poll again after a backoff */
    QW_EV_PENDING,           /* the ledger reports Pending */
    QW_EV_COMMITTED,         /* final: Committed */
    QW_EV_VALID,             /* final: Valid */
    QW_EV_INVALID,           /* final: Invalid (status answer) */
    QW_EV_UNKNOWN_SEEN,      /* Unknown, not yet confirmed: check again later */
    QW_EV_UNKNOWN_ELSEWHERE, /* Unknown from a node that did not take the POST: proves
                                nothing, ask again (where: qw_nodes_poll_route()) */
    QW_EV_UNKNOWN_CONFIRMED, /* Unknown for the whole confirmation delay: resubmit */
};

/** What the job does next. */
enum qw_plan_action {
    QW_PLAN_RECORD = 0, /* write `outcome` (the job waits in the group), then outcome.after */
    QW_PLAN_POLL,       /* start a status poll now with `wait_s` */
    QW_PLAN_POLL_AT,    /* poll again at `at_ms` (with `wait_s`) */
    QW_PLAN_POST_AT,    /* POST again at `at_ms` */
    QW_PLAN_HAND_BACK,  /* hand the job back unfinished, nothing to write */
};

/** The decision about one ledger answer. */
struct qw_plan {
    enum qw_plan_action action; /* what the job does next */
    enum qw_plan_event event;   /* what happened */
    struct qw_outcome outcome;  /* QW_PLAN_RECORD: what to write */
    int64_t at_ms;              /* POLL_AT / POST_AT: monotonic ms */
    int wait_s;                 /* POLL / POLL_AT: long-poll wait, seconds */
    int64_t pause_ms;           /* BACKPRESSURE / AUTH: length of the pause, ms */
    bool pause_grew;            /* BACKPRESSURE: the pause was extended (log it);
                                   AUTH: the first refusal of a burst (log it) */
    int64_t unknown_ms;         /* UNKNOWN_CONFIRMED: how long it read Unknown, ms */
    /* The job's new submitter-private state (copied back by the adapter). */
    bool accepted_unrecorded; /* see struct qw_submission */
    int64_t accepted_ms;      /* see struct qw_submission */
    int64_t unknown_since_ms; /* see struct qw_submission */
    int poll_errors;          /* see struct qw_submission */
    bool post_uncertain;      /* see struct qw_submission */
    char post_failure[64];    /* see struct qw_submission */
};

/**
 * Starts `plan` with `event` and `action` and the job's private state as
 * it is (so a plan that changes nothing leaves the job as it was).
 */
void qw_plan_keep(struct qw_plan *plan, const struct qw_job *job, enum qw_plan_event event,
                  enum qw_plan_action action);

/**
 * Starts `plan` as a RECORD of `status` expecting `expect`, copying the
 * job's private state into it; used by the planners and for the outcomes
 * the submitter decides without a ledger answer (below).
 */
void qw_plan_record(struct qw_plan *plan, const struct qw_job *job, enum qw_outcome_expect expect,
                    enum qw_batch_status status, enum qw_outcome_after after);

/**
 * A status outcome for `job`: expects what the database shows for it, and
 * when the job's POST was not yet written (a 202, or a POST whose answer
 * was lost) also records that POST (one attempt, last_submitted_at, what
 * happened to it in the history detail).
 */
void qw_plan_status(struct qw_plan *plan, const struct qw_job *job, enum qw_batch_status status,
                    enum qw_outcome_after after, const char *what, int64_t now_ms);

/** Records Pending for an accepted batch, then `after`. */
void qw_plan_pending(struct qw_plan *plan, const struct qw_job *job, enum qw_outcome_after after,
                     int64_t now_ms);

/** Gives a job that was never posted back to the database (submitted = false). */
void qw_plan_requeue(struct qw_plan *plan, const struct qw_job *job, const char *why);

/**
 * Formats into `dst` (capacity `cap`) as one line of valid UTF-8, cut on a
 * character boundary (never inside one: PostgreSQL refuses a broken
 * sequence, SQLSTATE 22021, and with it a whole group of outcomes).
 */
void qw_plan_textf(char *dst, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/**
 * The moment (ms, the caller's clock) until which a claim is surely ours,
 * after a statement that checked it reported `lease_left_ms` left: counted
 * from `sent_ms`, read BEFORE the statement was sent (the lease may have
 * been read at any moment while it ran), less a tenth of the lease as a
 * safety margin.
 */
int64_t qw_plan_lease_deadline(int64_t sent_ms, int64_t lease_left_ms, int lease_ms);

/**
 * The long-poll wait (s) of a status poll started from the timers:
 * `status_wait_s` (dlt.status_wait_s) for a batch the ledger took, none
 * where the ledger may never have seen the batch (an Unknown being
 * confirmed, a POST whose answer was lost), and a short one before an
 * accepted batch's Pending is written. An adopted batch the database shows
 * mid-submission is asked about without a wait when its service has one
 * ledger node (`one_node`), the node any earlier POST went to: a node
 * holds a wait on an id it does not know for the whole wait. With several,
 * the earlier POST's node is not known and another node learns the batch
 * only once it commits, so the wait stays.
 */
int qw_plan_poll_wait_s(const struct qw_job *job, int status_wait_s, bool one_node);

/** Whether a job whose batch ends may go on with its service's next batch (fast path). */
bool qw_plan_may_go_on(const struct qw_job *job, const struct qw_plan_ctx *ctx);

#endif
