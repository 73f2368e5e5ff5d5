/*
 * Unit tests of the submitter's pure decisions (src/submitter/outcome.c and
 * src/submitter/monitor.c): one table row per (job state, ledger answer) with
 * the outcome to write and the next action expected. No database, no
 * ledger, no clock.
 */
#include "submitter/monitor.h"
#include "submitter/outcome.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#define NOW 100000   /* ctx.now_ms */
#define CONFIRM 2000 /* ctx.unknown_confirm_ms */
#define NONE (-2)    /* "do not check" for at_ms */
#define NR QW_OUTCOME_NO_RETRY

struct row {
    const char *name;
    /* the ledger's answer */
    enum qw_dlt_kind kind;
    enum qw_dlt_outcome outcome;
    enum qw_dlt_transport transport;
    long http_status;
    int64_t retry_after_ms;       /* -1 = none (written as 0 in the table: see check_row) */
    bool reported;                /* STATUS: the answer reported the batch */
    enum qw_dlt_status_type type; /* STATUS: its status */
    /* the job and the submitter */
    enum qw_job_kind job_kind;
    bool accepted_unrecorded;
    bool post_uncertain;
    bool adopted_submitting;
    int attempts;
    int chained;
    bool drain; /* the queuer drains the job's service */
    int64_t unknown_since_ms;
    bool stopping;
    int max_attempts;
    int post_node;         /* the node the job's POST went to (-1 = found in flight) */
    int answer_node;       /* the node that answered */
    bool post_node_knew;   /* that node acknowledged the batch */
    bool window_backs_off; /* the 429's node shrank its window for it */
    int64_t first_look_ms; /* a 202: its node's delay of the first status read */
    /* expected */
    enum qw_plan_action action;
    enum qw_plan_event event;
    enum qw_batch_status status;
    enum qw_outcome_expect expect;
    enum qw_outcome_after after;
    int attempts_add;
    bool posted;
    bool submitted;
    bool go_on;
    int64_t retry_lo, retry_hi; /* retry_ms within [lo, hi] */
    bool check_at;              /* check at_ms */
    int64_t at_ms;              /* POLL_AT / POST_AT time */
    bool plan_uncertain;        /* the plan's post_uncertain */
    bool check_wait;            /* check wait_s */
    int wait_s;                 /* POLL / POLL_AT wait */
    const char *detail_has;     /* REC: a substring of the history detail, NULL = any */
};

#define POST QW_DLT_KIND_POST
#define STATUS QW_DLT_KIND_STATUS
#define REC QW_PLAN_RECORD

static const struct row rows[] = {
    /* POST answers */
    {.name = "202 follows at once while the node's delay is 0",
     .kind = POST,
     .outcome = QW_DLT_ACCEPTED,
     .http_status = 202,
     .job_kind = QW_JOB_SUBMIT,
     .action = QW_PLAN_POLL,
     .event = QW_EV_POST_ACCEPTED,
     .check_wait = true,
     .wait_s = QW_OUTCOME_FIRST_POLL_WAIT_S},
    {.name = "202 follows when the batch is likely final",
     .kind = POST,
     .outcome = QW_DLT_ACCEPTED,
     .http_status = 202,
     .job_kind = QW_JOB_SUBMIT,
     .first_look_ms = 23,
     .action = QW_PLAN_POLL_AT,
     .event = QW_EV_POST_ACCEPTED,
     .check_at = true,
     .at_ms = NOW + 23,
     .check_wait = true,
     .wait_s = QW_OUTCOME_FIRST_POLL_WAIT_S},
    {.name = "202 while stopping records Pending",
     .kind = POST,
     .outcome = QW_DLT_ACCEPTED,
     .http_status = 202,
     .job_kind = QW_JOB_SUBMIT,
     .stopping = true,
     .action = REC,
     .event = QW_EV_POST_ACCEPTED,
     .status = QW_STATUS_PENDING,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_END_ABANDONED,
     .attempts_add = 1,
     .posted = true,
     .submitted = true,
     .retry_lo = NR,
     .retry_hi = NR},
    {.name = "429 is Delayed for the pause",
     .kind = POST,
     .outcome = QW_DLT_BACKPRESSURE,
     .http_status = 429,
     .job_kind = QW_JOB_SUBMIT,
     .attempts = 3,
     .action = REC,
     .event = QW_EV_POST_BACKPRESSURE,
     .status = QW_STATUS_DELAYED,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_END_RETRY,
     .posted = true,
     .retry_lo = 25,
     .retry_hi = 50},
    {.name = "429 honours Retry-After up to the cap",
     .kind = POST,
     .outcome = QW_DLT_BACKPRESSURE,
     .http_status = 429,
     .retry_after_ms = 300,
     .job_kind = QW_JOB_SUBMIT,
     .action = REC,
     .event = QW_EV_POST_BACKPRESSURE,
     .status = QW_STATUS_DELAYED,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_END_RETRY,
     .posted = true,
     .retry_lo = 300,
     .retry_hi = 500},
    {.name = "400 is final Invalid and goes on",
     .kind = POST,
     .outcome = QW_DLT_INVALID,
     .http_status = 400,
     .job_kind = QW_JOB_SUBMIT,
     .action = REC,
     .event = QW_EV_POST_INVALID,
     .status = QW_STATUS_INVALID,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_END_FINAL,
     .attempts_add = 1,
     .posted = true,
     .go_on = true,
     .retry_lo = NR,
     .retry_hi = NR},
    {.name = "400 after the chain limit does not go on",
     .kind = POST,
     .outcome = QW_DLT_INVALID,
     .http_status = 400,
     .job_kind = QW_JOB_SUBMIT,
     .chained = QW_OUTCOME_MAX_CHAINED,
     .action = REC,
     .event = QW_EV_POST_INVALID,
     .status = QW_STATUS_INVALID,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_END_FINAL,
     .attempts_add = 1,
     .posted = true,
     .retry_lo = NR,
     .retry_hi = NR},
    {.name = "401 waits, burns no attempt",
     .kind = POST,
     .outcome = QW_DLT_AUTH,
     .http_status = 401,
     .job_kind = QW_JOB_SUBMIT,
     .attempts = 2,
     .action = QW_PLAN_POST_AT,
     .event = QW_EV_POST_AUTH,
     .check_at = true,
     .at_ms = NOW + 1000},
    {.name = "500 is Delayed with backoff",
     .kind = POST,
     .outcome = QW_DLT_RETRY,
     .http_status = 500,
     .job_kind = QW_JOB_SUBMIT,
     .attempts = 2,
     .action = REC,
     .event = QW_EV_POST_RETRY,
     .status = QW_STATUS_DELAYED,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_END_RETRY,
     .attempts_add = 1,
     .posted = true,
     .retry_lo = 200,
     .retry_hi = 400},
    {.name = "500 at max_attempts parks the batch",
     .kind = POST,
     .outcome = QW_DLT_RETRY,
     .http_status = 500,
     .job_kind = QW_JOB_SUBMIT,
     .attempts = 4,
     .max_attempts = 5,
     .action = REC,
     .event = QW_EV_POST_EXHAUSTED,
     .status = QW_STATUS_DELAYED,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_END_RETRY,
     .attempts_add = 1,
     .posted = true,
     .retry_lo = QW_OUTCOME_RETRY_NEVER,
     .retry_hi = QW_OUTCOME_RETRY_NEVER},
    /* a POST whose answer was lost may have reached the ledger: read its status first */
    {.name = "dropped connection: status read now, nothing recorded, nothing resent",
     .kind = POST,
     .outcome = QW_DLT_RETRY,
     .transport = QW_DLT_TRANSPORT_DROPPED,
     .job_kind = QW_JOB_SUBMIT,
     .attempts = 2,
     .action = QW_PLAN_POLL,
     .event = QW_EV_POST_UNCERTAIN,
     .plan_uncertain = true,
     .check_wait = true,
     .wait_s = 0},
    {.name = "timeout: status read now",
     .kind = POST,
     .outcome = QW_DLT_RETRY,
     .transport = QW_DLT_TRANSPORT_TIMEOUT,
     .job_kind = QW_JOB_SUBMIT,
     .action = QW_PLAN_POLL,
     .event = QW_EV_POST_UNCERTAIN,
     .plan_uncertain = true},
    {.name = "202 with an unreadable body: status read now",
     .kind = POST,
     .outcome = QW_DLT_RETRY,
     .http_status = 202,
     .job_kind = QW_JOB_SUBMIT,
     .action = QW_PLAN_POLL,
     .event = QW_EV_POST_UNCERTAIN,
     .plan_uncertain = true},
    {.name = "answer over the size cap: status read now",
     .kind = POST,
     .outcome = QW_DLT_RETRY,
     .transport = QW_DLT_TRANSPORT_TOO_LARGE,
     .http_status = 202,
     .job_kind = QW_JOB_SUBMIT,
     .action = QW_PLAN_POLL,
     .event = QW_EV_POST_UNCERTAIN,
     .plan_uncertain = true},
    {.name = "connection refused never reached the ledger: Delayed",
     .kind = POST,
     .outcome = QW_DLT_RETRY,
     .transport = QW_DLT_TRANSPORT_CONNECT,
     .job_kind = QW_JOB_SUBMIT,
     .attempts = 2,
     .action = REC,
     .event = QW_EV_POST_RETRY,
     .status = QW_STATUS_DELAYED,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_END_RETRY,
     .attempts_add = 1,
     .posted = true,
     .retry_lo = 200,
     .retry_hi = 400},
    {.name = "dropped while stopping: handed back for the next owner to read",
     .kind = POST,
     .outcome = QW_DLT_RETRY,
     .transport = QW_DLT_TRANSPORT_DROPPED,
     .job_kind = QW_JOB_SUBMIT,
     .stopping = true,
     .action = QW_PLAN_HAND_BACK,
     .event = QW_EV_ABANDONED},
    {.name = "uncertain POST read Pending: that POST is recorded with it",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_PENDING,
     .job_kind = QW_JOB_SUBMIT,
     .post_uncertain = true,
     .action = REC,
     .event = QW_EV_PENDING,
     .status = QW_STATUS_PENDING,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_POLL,
     .attempts_add = 1,
     .posted = true,
     .submitted = true,
     .retry_lo = NR,
     .retry_hi = NR,
     .plan_uncertain = true},
    {.name = "uncertain POST read Committed: final, with that POST",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_COMMITTED,
     .job_kind = QW_JOB_SUBMIT,
     .post_uncertain = true,
     .action = REC,
     .event = QW_EV_COMMITTED,
     .status = QW_STATUS_COMMITTED,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_END_FINAL,
     .attempts_add = 1,
     .posted = true,
     .submitted = true,
     .go_on = true,
     .retry_lo = NR,
     .retry_hi = NR,
     .plan_uncertain = true},
    {.name = "uncertain POST read Unknown: confirmed later, not resent now",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_UNKNOWN,
     .job_kind = QW_JOB_SUBMIT,
     .post_uncertain = true,
     .action = QW_PLAN_POLL_AT,
     .event = QW_EV_UNKNOWN_SEEN,
     .check_at = true,
     .at_ms = NOW + CONFIRM,
     .plan_uncertain = true},
    {.name = "uncertain POST Unknown for the whole delay: Unknown with that POST, resubmitted",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_UNKNOWN,
     .job_kind = QW_JOB_SUBMIT,
     .post_uncertain = true,
     .unknown_since_ms = NOW - CONFIRM,
     .action = REC,
     .event = QW_EV_UNKNOWN_CONFIRMED,
     .status = QW_STATUS_UNKNOWN,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_END_RETRY,
     .attempts_add = 1,
     .posted = true,
     .retry_lo = 0,
     .retry_hi = 0,
     .plan_uncertain = true},
    {.name = "uncertain POST, status poll failed: read again later",
     .kind = STATUS,
     .outcome = QW_DLT_RETRY,
     .transport = QW_DLT_TRANSPORT_CONNECT,
     .job_kind = QW_JOB_SUBMIT,
     .post_uncertain = true,
     .action = QW_PLAN_POLL_AT,
     .event = QW_EV_POLL_FAILED,
     .plan_uncertain = true},
    {.name = "uncertain POST, status read abandoned at shutdown: handed back unwritten",
     .kind = STATUS,
     .outcome = QW_DLT_ABANDONED,
     .job_kind = QW_JOB_SUBMIT,
     .post_uncertain = true,
     .stopping = true,
     .action = QW_PLAN_HAND_BACK,
     .event = QW_EV_ABANDONED,
     .plan_uncertain = true},
    {.name = "cancelled POST is handed back",
     .kind = POST,
     .outcome = QW_DLT_ABANDONED,
     .job_kind = QW_JOB_SUBMIT,
     .stopping = true,
     .action = QW_PLAN_HAND_BACK,
     .event = QW_EV_ABANDONED},
    /* status answers */
    {.name = "Pending after an unrecorded 202 is written",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_PENDING,
     .job_kind = QW_JOB_SUBMIT,
     .accepted_unrecorded = true,
     .action = REC,
     .event = QW_EV_PENDING,
     .status = QW_STATUS_PENDING,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_POLL,
     .attempts_add = 1,
     .posted = true,
     .submitted = true,
     .retry_lo = NR,
     .retry_hi = NR},
    /* an adopted batch the database shows mid-submission gets its Pending */
    {.name = "Pending of an adopted batch still submitting is recorded",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_PENDING,
     .job_kind = QW_JOB_ADOPT,
     .adopted_submitting = true,
     .action = REC,
     .event = QW_EV_PENDING,
     .status = QW_STATUS_PENDING,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_POLL,
     .attempts_add = 1,
     .submitted = true,
     .retry_lo = NR,
     .retry_hi = NR},
    {.name = "Pending of an adopted batch already Pending: poll on",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_PENDING,
     .job_kind = QW_JOB_ADOPT,
     .action = QW_PLAN_POLL,
     .event = QW_EV_PENDING},
    {.name = "Pending already recorded: poll on",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_PENDING,
     .job_kind = QW_JOB_SUBMIT,
     .action = QW_PLAN_POLL,
     .event = QW_EV_PENDING},
    {.name = "Committed of an adopted batch",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_COMMITTED,
     .job_kind = QW_JOB_ADOPT,
     .action = REC,
     .event = QW_EV_COMMITTED,
     .status = QW_STATUS_COMMITTED,
     .expect = QW_EXPECT_INFLIGHT,
     .after = QW_AFTER_END_FINAL,
     .submitted = true,
     .go_on = true,
     .retry_lo = NR,
     .retry_hi = NR},
    {.name = "Committed at the first answer records the POST",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_COMMITTED,
     .job_kind = QW_JOB_SUBMIT,
     .accepted_unrecorded = true,
     .action = REC,
     .event = QW_EV_COMMITTED,
     .status = QW_STATUS_COMMITTED,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_END_FINAL,
     .attempts_add = 1,
     .posted = true,
     .submitted = true,
     .go_on = true,
     .retry_lo = NR,
     .retry_hi = NR},
    {.name = "Committed of a draining service's batch does not go on",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_COMMITTED,
     .job_kind = QW_JOB_SUBMIT,
     .drain = true,
     .action = REC,
     .event = QW_EV_COMMITTED,
     .status = QW_STATUS_COMMITTED,
     .expect = QW_EXPECT_PENDING,
     .after = QW_AFTER_END_FINAL,
     .submitted = true,
     .retry_lo = NR,
     .retry_hi = NR},
    {.name = "Valid of a Pending batch",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_VALID,
     .job_kind = QW_JOB_SUBMIT,
     .action = REC,
     .event = QW_EV_VALID,
     .status = QW_STATUS_VALID,
     .expect = QW_EXPECT_PENDING,
     .after = QW_AFTER_END_FINAL,
     .submitted = true,
     .go_on = true,
     .retry_lo = NR,
     .retry_hi = NR},
    {.name = "Invalid by status",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_INVALID,
     .job_kind = QW_JOB_SUBMIT,
     .action = REC,
     .event = QW_EV_INVALID,
     .status = QW_STATUS_INVALID,
     .expect = QW_EXPECT_PENDING,
     .after = QW_AFTER_END_FINAL,
     .submitted = true,
     .go_on = true,
     .retry_lo = NR,
     .retry_hi = NR},
    {.name = "Unknown first seen: ask again later",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_UNKNOWN,
     .job_kind = QW_JOB_SUBMIT,
     .action = QW_PLAN_POLL_AT,
     .event = QW_EV_UNKNOWN_SEEN,
     .check_at = true,
     .at_ms = NOW + CONFIRM},
    {.name = "Unknown within the confirmation delay",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_UNKNOWN,
     .job_kind = QW_JOB_SUBMIT,
     .unknown_since_ms = NOW - 500,
     .action = QW_PLAN_POLL_AT,
     .event = QW_EV_UNKNOWN_SEEN,
     .check_at = true,
     .at_ms = NOW - 500 + CONFIRM},
    {.name = "Unknown confirmed: recorded for resubmission",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_UNKNOWN,
     .job_kind = QW_JOB_SUBMIT,
     .unknown_since_ms = NOW - CONFIRM,
     .action = REC,
     .event = QW_EV_UNKNOWN_CONFIRMED,
     .status = QW_STATUS_UNKNOWN,
     .expect = QW_EXPECT_PENDING,
     .after = QW_AFTER_END_RETRY},
    {.name = "Unknown from a node that did not take the POST proves nothing: ask again",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_UNKNOWN,
     .job_kind = QW_JOB_SUBMIT,
     .post_node = 1,
     .answer_node = 2,
     .unknown_since_ms = NOW - CONFIRM,
     .action = QW_PLAN_POLL_AT,
     .event = QW_EV_UNKNOWN_ELSEWHERE,
     .check_at = true,
     .at_ms = NOW + 250},
    {.name = "Unknown confirmed by the node that had taken the batch: it forgot it",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_UNKNOWN,
     .job_kind = QW_JOB_SUBMIT,
     .post_node = 2,
     .answer_node = 2,
     .post_node_knew = true,
     .unknown_since_ms = NOW - CONFIRM,
     .action = REC,
     .event = QW_EV_UNKNOWN_CONFIRMED,
     .status = QW_STATUS_UNKNOWN,
     .expect = QW_EXPECT_PENDING,
     .after = QW_AFTER_END_RETRY,
     .detail_has = "node 2, which had taken the batch, reported Unknown for 2000 ms"},
    {.name = "Unknown confirmed by the node the POST went to, never acknowledged",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_UNKNOWN,
     .job_kind = QW_JOB_SUBMIT,
     .post_node = 1,
     .answer_node = 1,
     .unknown_since_ms = NOW - CONFIRM,
     .action = REC,
     .event = QW_EV_UNKNOWN_CONFIRMED,
     .status = QW_STATUS_UNKNOWN,
     .expect = QW_EXPECT_PENDING,
     .after = QW_AFTER_END_RETRY,
     .detail_has = "node 1, to which the POST went, reported Unknown"},
    {.name = "Unknown of a batch found in flight: any node confirms",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_UNKNOWN,
     .job_kind = QW_JOB_ADOPT,
     .post_node = -1,
     .answer_node = 3,
     .unknown_since_ms = NOW - CONFIRM,
     .action = REC,
     .event = QW_EV_UNKNOWN_CONFIRMED,
     .status = QW_STATUS_UNKNOWN,
     .expect = QW_EXPECT_INFLIGHT,
     .after = QW_AFTER_END_RETRY,
     .detail_has = "node 3 reported Unknown"},
    {.name = "429 a node's window backs off for: Delayed, due again at once, no pause",
     .kind = POST,
     .outcome = QW_DLT_BACKPRESSURE,
     .http_status = 429,
     .job_kind = QW_JOB_SUBMIT,
     .window_backs_off = true,
     .action = REC,
     .event = QW_EV_POST_BACKPRESSURE,
     .status = QW_STATUS_DELAYED,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_END_RETRY,
     .posted = true,
     .retry_lo = 0,
     .retry_hi = 0,
     .detail_has = "the node's window shrank"},
    {.name = "failed poll: poll again after a backoff",
     .kind = STATUS,
     .outcome = QW_DLT_RETRY,
     .http_status = 503,
     .job_kind = QW_JOB_SUBMIT,
     .action = QW_PLAN_POLL_AT,
     .event = QW_EV_POLL_FAILED},
    {.name = "answer without our id: poll again",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .job_kind = QW_JOB_SUBMIT,
     .action = QW_PLAN_POLL_AT,
     .event = QW_EV_POLL_FAILED},
    {.name = "stopping with an unrecorded 202 writes Pending",
     .kind = STATUS,
     .outcome = QW_DLT_OK,
     .http_status = 200,
     .reported = true,
     .type = QW_DLT_STATUS_COMMITTED,
     .job_kind = QW_JOB_SUBMIT,
     .accepted_unrecorded = true,
     .stopping = true,
     .action = REC,
     .event = QW_EV_ABANDONED,
     .status = QW_STATUS_PENDING,
     .expect = QW_EXPECT_POSTING,
     .after = QW_AFTER_END_ABANDONED,
     .attempts_add = 1,
     .posted = true,
     .submitted = true,
     .retry_lo = NR,
     .retry_hi = NR},
    {.name = "cancelled poll is handed back",
     .kind = STATUS,
     .outcome = QW_DLT_ABANDONED,
     .job_kind = QW_JOB_ADOPT,
     .action = QW_PLAN_HAND_BACK,
     .event = QW_EV_ABANDONED},
};

static void check_row(const struct row *t)
{
    struct qw_rng rng;
    qw_rng_seed(&rng, 42);
    struct qw_plan_ctx ctx = {
        .now_ms = NOW,
        .stopping = t->stopping,
        .max_attempts = t->max_attempts,
        .retry_base_ms = 100,
        .retry_max_ms = 1000,
        .pause_base_ms = 50,
        .pause_max_ms = 500,
        .status_wait_s = 10,
        .unknown_confirm_ms = CONFIRM,
        .window_backs_off = t->window_backs_off,
        .first_look_ms = t->first_look_ms,
        .rng = &rng,
    };
    atomic_bool drain;
    atomic_init(&drain, t->drain);
    struct qw_submission sub = {
        .chained = t->chained,
        .accepted_unrecorded = t->accepted_unrecorded,
        .post_uncertain = t->post_uncertain,
        .post_failure = "POST got no answer (dropped)",
        .accepted_ms = NOW - 30,
        .unknown_since_ms = t->unknown_since_ms,
        .post_node = t->post_node,
        .post_node_knew = t->post_node_knew,
    };
    struct qw_job job = {
        .kind = t->job_kind,
        .attempts = t->attempts,
        .drain = &drain,
        .adopted_submitting = t->adopted_submitting,
        .sub = &sub,
    };
    struct qw_dlt_status st = {.reported = t->reported, .type = t->type};
    snprintf(st.message, sizeof(st.message), "bad nonce");
    struct qw_dlt_result r = {
        .kind = t->kind,
        .outcome = t->outcome,
        .transport = t->transport,
        .http_status = t->http_status,
        .node = t->answer_node,
        .retry_after_ms = t->retry_after_ms ? t->retry_after_ms : -1,
        .message = "from the ledger",
        .statuses = t->kind == STATUS ? &st : NULL,
        .n_statuses = t->kind == STATUS ? 1 : 0,
    };
    struct qw_ledger_pause pause = {0};
    struct qw_plan p;
    qw_outcome_plan(&job, &r, &ctx, &pause, &p);
    print_message("row: %s\n", t->name);
    assert_int_equal(p.action, t->action);
    assert_int_equal(p.event, t->event);
    if (t->check_at)
        assert_int_equal(p.at_ms, t->at_ms);
    if (t->check_wait)
        assert_int_equal(p.wait_s, t->wait_s);
    assert_int_equal(p.post_uncertain, t->plan_uncertain);
    if (t->action != REC)
        return;
    if (t->post_uncertain)
        assert_non_null(strstr(p.outcome.detail, "POST got no answer (dropped)"));
    if (t->detail_has && !strstr(p.outcome.detail, t->detail_has))
        fail_msg("detail \"%s\" lacks \"%s\"", p.outcome.detail, t->detail_has);
    if (t->window_backs_off)
        assert_int_equal(pause.pause_until_ms, 0); /* no pause of every submission */
    const struct qw_outcome *o = &p.outcome;
    assert_int_equal(o->status, t->status);
    assert_int_equal(o->expect, t->expect);
    assert_int_equal(o->after, t->after);
    assert_int_equal(o->attempts_add, t->attempts_add);
    assert_int_equal(o->posted, t->posted);
    assert_int_equal(o->submitted, t->submitted);
    assert_int_equal(o->go_on, t->go_on);
    assert_in_range(o->retry_ms, t->retry_lo, t->retry_hi);
}

static void test_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        check_row(&rows[i]);
}

static struct qw_plan_ctx ctx_at(int64_t now, struct qw_rng *rng)
{
    return (struct qw_plan_ctx){.now_ms = now,
                                .retry_base_ms = 100,
                                .retry_max_ms = 1000,
                                .pause_base_ms = 50,
                                .pause_max_ms = 500,
                                .status_wait_s = 10,
                                .unknown_confirm_ms = CONFIRM,
                                .rng = rng};
}

/* 429s answered together grow the pause once; a 202 resets the count. */
static void test_pause_grows_once_per_burst(void **state)
{
    (void)state;
    struct qw_rng rng;
    qw_rng_seed(&rng, 7);
    struct qw_submission sub = {0};
    struct qw_job job = {.kind = QW_JOB_SUBMIT, .sub = &sub};
    struct qw_dlt_result r = {
        .kind = POST, .outcome = QW_DLT_BACKPRESSURE, .http_status = 429, .retry_after_ms = -1};
    struct qw_ledger_pause pause = {0};
    struct qw_plan p;
    struct qw_plan_ctx ctx = ctx_at(NOW, &rng);
    qw_outcome_plan(&job, &r, &ctx, &pause, &p);
    assert_int_equal(pause.pause_count, 1);
    assert_true(p.pause_grew);
    assert_int_equal(pause.pause_until_ms, NOW + p.pause_ms);
    qw_outcome_plan(&job, &r, &ctx, &pause, &p); /* same burst */
    assert_int_equal(pause.pause_count, 1);
    ctx = ctx_at(pause.pause_until_ms, &rng); /* the next burst */
    qw_outcome_plan(&job, &r, &ctx, &pause, &p);
    assert_int_equal(pause.pause_count, 2);
    r.outcome = QW_DLT_ACCEPTED;
    qw_outcome_plan(&job, &r, &ctx, &pause, &p);
    assert_int_equal(pause.pause_count, 0);
    assert_true(p.accepted_unrecorded);
    assert_int_equal(p.accepted_ms, ctx.now_ms);
}

/* 401/403 answered together count and log once; the next refusal waits longer. */
static void test_auth_pause_grows(void **state)
{
    (void)state;
    struct qw_rng rng;
    qw_rng_seed(&rng, 7);
    struct qw_submission sub = {0};
    struct qw_job job = {.kind = QW_JOB_SUBMIT, .sub = &sub};
    struct qw_dlt_result r = {
        .kind = POST, .outcome = QW_DLT_AUTH, .http_status = 403, .retry_after_ms = -1};
    struct qw_ledger_pause pause = {0};
    struct qw_plan p;
    struct qw_plan_ctx ctx = ctx_at(NOW, &rng);
    qw_outcome_plan(&job, &r, &ctx, &pause, &p);
    assert_true(p.pause_grew);
    assert_int_equal(p.at_ms, NOW + 1000);
    qw_outcome_plan(&job, &r, &ctx, &pause, &p);
    assert_false(p.pause_grew);
    assert_int_equal(p.at_ms, NOW + 1000);
    ctx = ctx_at(NOW + 1000, &rng);
    qw_outcome_plan(&job, &r, &ctx, &pause, &p);
    assert_int_equal(p.at_ms, NOW + 1000 + 2000);
}

/* The job's private state comes back in the plan unchanged when nothing changes it. */
static void test_poll_errors_grow_and_reset(void **state)
{
    (void)state;
    struct qw_rng rng;
    qw_rng_seed(&rng, 7);
    struct qw_submission sub = {.poll_errors = 3, .unknown_since_ms = 55};
    struct qw_job job = {.kind = QW_JOB_SUBMIT, .sub = &sub};
    struct qw_dlt_result r = {.kind = STATUS, .outcome = QW_DLT_RETRY, .retry_after_ms = -1};
    struct qw_plan p;
    struct qw_plan_ctx ctx = ctx_at(NOW, &rng);
    qw_monitor_plan(&job, &r, &ctx, &p);
    assert_int_equal(p.poll_errors, 4);
    assert_int_equal(p.unknown_since_ms, 55);
    assert_in_range(p.at_ms, NOW + 200, NOW + 400);
    struct qw_dlt_status st = {.reported = true, .type = QW_DLT_STATUS_PENDING};
    r = (struct qw_dlt_result){
        .kind = STATUS, .outcome = QW_DLT_OK, .statuses = &st, .n_statuses = 1};
    qw_monitor_plan(&job, &r, &ctx, &p);
    assert_int_equal(p.poll_errors, 0);
    assert_int_equal(p.unknown_since_ms, 0);
    assert_int_equal(p.wait_s, 10);
}

/* Handing back before a POST writes "no status, not submitted". */
static void test_requeue(void **state)
{
    (void)state;
    struct qw_submission sub = {0};
    struct qw_job job = {.kind = QW_JOB_SUBMIT, .sub = &sub};
    struct qw_plan p;
    qw_plan_requeue(&p, &job, "worker stopping");
    assert_int_equal(p.action, QW_PLAN_RECORD);
    assert_int_equal(p.outcome.status, QW_STATUS_NONE);
    assert_int_equal(p.outcome.expect, QW_EXPECT_POSTING);
    assert_false(p.outcome.submitted);
    assert_int_equal(p.outcome.after, QW_AFTER_END_ABANDONED);
    assert_string_equal(p.outcome.detail, "handed back before POST: worker stopping");
    assert_string_equal(qw_outcome_expect_name(QW_EXPECT_INFLIGHT), "inflight");
    assert_null(qw_outcome_expect_name((enum qw_outcome_expect)9));
}

/* A group of outcomes waits as long as the last write took, within 2..20 ms,
 * and in a fleet of more than 4 workers live / 4 times that, up to 200 ms. */
static void test_group_age(void **state)
{
    (void)state;
    static const int64_t cases[][3] = {
        /* last write ms, live workers, age ms */
        {-1, 1, 2},     {0, 1, 2},   {1, 1, 2},     {2, 1, 2},     {3, 1, 3},       {7, 1, 7},
        {19, 1, 19},    {20, 1, 20}, {21, 1, 20},   {5000, 1, 20}, {7, 0, 7},       {7, 4, 7},
        {0, 5, 2},      {8, 5, 10},  {3, 7, 5},     {7, 8, 14},    {20, 8, 40},     {15, 16, 60},
        {5000, 16, 80}, {1, 32, 16}, {20, 40, 200}, {20, 64, 200}, {20, 1000, 200}, {2, 1000, 200},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(qw_outcome_group_age_ms(cases[i][0], (int)cases[i][1]), cases[i][2]);
}

/* The fast path's lease deadline counts from before the statement. */
static void test_lease_deadline(void **state)
{
    (void)state;
    /* a flush sent at t=1000 that returned at t=1900 saying 3000 ms were left */
    assert_int_equal(qw_plan_lease_deadline(1000, 3000, 3000), 1000 + 3000 - 300);
    assert_true(qw_plan_lease_deadline(1000, 3000, 3000) < 1900 + 3000 - 300);
}

/* A poll waits at the ledger only where the node asked knows the batch, or
 * may learn it from another: a node holds a wait on an id it does not know
 * for the whole wait. */
static void test_poll_wait(void **state)
{
    (void)state;
    struct qw_submission sub = {0};
    struct qw_job job = {.kind = QW_JOB_SUBMIT, .sub = &sub};
    assert_int_equal(qw_plan_poll_wait_s(&job, 10, true), 10); /* Pending recorded: long-poll */
    sub.accepted_unrecorded = true;
    assert_int_equal(qw_plan_poll_wait_s(&job, 10, true), QW_OUTCOME_FIRST_POLL_WAIT_S);
    sub.accepted_unrecorded = false;
    sub.post_uncertain = true;
    assert_int_equal(qw_plan_poll_wait_s(&job, 10, false), 0);
    sub.post_uncertain = false;
    sub.unknown_since_ms = 55;
    assert_int_equal(qw_plan_poll_wait_s(&job, 10, false), 0);
    sub.unknown_since_ms = 0;
    /* adopted and already Pending in the database: long-poll */
    job.kind = QW_JOB_ADOPT;
    assert_int_equal(qw_plan_poll_wait_s(&job, 10, true), 10);
    /* adopted mid-submission (the earlier POST may never have been sent):
     * no wait on its one node; with several, the earlier POST's node is
     * not known and the others learn the batch only when it commits */
    job.adopted_submitting = true;
    assert_int_equal(qw_plan_poll_wait_s(&job, 10, true), 0);
    assert_int_equal(qw_plan_poll_wait_s(&job, 10, false), 10);
}

/* True when `s` is well-formed UTF-8 (what PostgreSQL accepts as text). */
static bool utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80             ? 1
                : (*p & 0xe0) == 0xc0 ? 2
                : (*p & 0xf0) == 0xe0 ? 3
                : (*p & 0xf8) == 0xf0 ? 4
                                      : 0;
        if (n == 0 || (n == 2 && *p < 0xc2))
            return false;
        for (int i = 1; i < n; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return false;
        }
        p += n;
    }
    return true;
}

/* Ledger text is cut on character boundaries, never inside one. */
static void test_texts_stay_utf8(void **state)
{
    (void)state;
    char jp[QW_DLT_MESSAGE_MAX] = "";
    while (strlen(jp) + 21 < sizeof(jp))
        strcat(jp, "取引が無効です"); /* 7 characters, 21 bytes */
    struct qw_rng rng;
    qw_rng_seed(&rng, 3);
    struct qw_plan_ctx ctx = ctx_at(NOW, &rng);
    struct qw_ledger_pause pause = {0};
    struct qw_submission sub = {0};
    struct qw_job job = {.kind = QW_JOB_SUBMIT, .attempts = 1, .sub = &sub};
    struct qw_plan p;
    static const enum qw_dlt_outcome posts[] = {QW_DLT_INVALID, QW_DLT_RETRY};
    for (size_t i = 0; i < 2; i++) {
        /* every prefix length, so every cut position inside a character is met */
        for (size_t len = 100; len < strlen(jp); len++) {
            char msg[QW_DLT_MESSAGE_MAX];
            snprintf(msg, sizeof(msg), "%.*s", (int)len, jp);
            struct qw_dlt_result r = {.kind = POST,
                                      .outcome = posts[i],
                                      .http_status = 503,
                                      .retry_after_ms = -1,
                                      .message = msg};
            qw_outcome_plan(&job, &r, &ctx, &pause, &p);
            assert_int_equal(p.action, QW_PLAN_RECORD);
            if (!utf8_valid(p.outcome.last_error) || !utf8_valid(p.outcome.detail))
                fail_msg("POST %s, message of %zu bytes: text cut inside a character",
                         qw_dlt_outcome_name(posts[i]), len);
        }
    }
    for (size_t len = 100; len < QW_DLT_STATUS_MESSAGE_MAX; len++) {
        struct qw_dlt_status st = {.reported = true, .type = QW_DLT_STATUS_INVALID};
        snprintf(st.message, sizeof(st.message), "%.*s", (int)len, jp);
        struct qw_dlt_result r = {
            .kind = STATUS, .outcome = QW_DLT_OK, .statuses = &st, .n_statuses = 1};
        qw_outcome_plan(&job, &r, &ctx, &pause, &p);
        assert_int_equal(p.event, QW_EV_INVALID);
        if (!utf8_valid(p.outcome.last_error) || !utf8_valid(p.outcome.detail))
            fail_msg("status Invalid, message of %zu bytes: text cut inside a character", len);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_pause_grows_once_per_burst),
        cmocka_unit_test(test_auth_pause_grows),
        cmocka_unit_test(test_poll_errors_grow_and_reset),
        cmocka_unit_test(test_requeue),
        cmocka_unit_test(test_texts_stay_utf8),
        cmocka_unit_test(test_lease_deadline),
        cmocka_unit_test(test_poll_wait),
        cmocka_unit_test(test_group_age),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
