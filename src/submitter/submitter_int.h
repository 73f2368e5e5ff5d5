/*
 * The submitter thread's own state (struct submitter) and the functions its
 * files call one another by; private to src/submitter. Every part runs on
 * the submitter thread only, so nothing here is locked. Each group of
 * fields below is kept by one file:
 *  - submitter.c: the thread, its loop, taking and handing back jobs, timers;
 *  - dispatch.c: the ready queue and the one place a POST starts;
 *  - capacity_step.c: the partitions of the shared capacity this worker holds;
 *  - follow.c: status polls, the ledger's nodes and their probes;
 *  - answers.c: what each finished transfer means (plans), pauses, failure logs;
 *  - record.c: the grouped outcome write and what follows it (fast path).
 */
#ifndef QW_SUBMITTER_SUBMITTER_INT_H
#define QW_SUBMITTER_SUBMITTER_INT_H

#include "common/backoff.h"
#include "common/clock.h"
#include "db/db.h"
#include "db/outage.h"
#include "db/pgarray.h"
#include "db/txn.h"
#include "dlt/dlt_client.h"
#include "shared/job.h"
#include "shared/shared.h"
#include "submitter/capacity.h"
#include "submitter/capacity_lease.h"
#include "submitter/nodes.h"
#include "submitter/outcome.h"
#include "submitter/outcome_writer.h"
#include "submitter/prioq.h"
#include "submitter/submission.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OUTCOME_GROUP_FULL 256 /* flush at once when this many outcomes wait */
#define CAPACITY_LOG_EVERY_MS                                                                      \
    30000 /* a lease step failing in a row is logged when it starts and then at most this          \
             often (a database failover is one line, however many steps its seconds fail) */
#define FAILURE_LOG_EVERY_MS                                                                       \
    1000                   /* at most one ledger.request_failed line per request                   \
                              type and kind this often (the rest are counted) */
#define NOTE_POLL_ERRORS 3 /* failed polls in a row before last_error is noted */
#define PROBE_BASE_MS 100  /* first probe of a suspect node after this, ms */
#define PROBE_MAX_MS 1000  /* probe delay cap, and the probe period of a down node, ms */
#define EXPLORE_MS 1000    /* an up node not measured this long gets the next request, ms */
#define NODE_PARAMS 10     /* array parameters of sql/instance_nodes.sql (all but the instance) */
#define NODES_REPORT_MS                                                                            \
    5000 /* the nodes are written to the database this often (and when a                           \
            node changes state), for `queuer status` */

#define CAPACITY_STEP_MAX_MS                                                                       \
    250 /* while a shared capacity is set, a lease step at least this often (and every             \
           worker.cycle_ms at most), so partitions follow the targets within a fraction of a       \
           second; without one, every worker.cycle_ms (a change is seen within one cycle) */
#define CAPACITY_NO_GRANT_RETRY_MS 50 /* jobs waiting for a grant look again this often */
#define CAPACITY_STEP_SOON_MS 20      /* next step when partitions are free and we want more */

struct submitter {
    /* Used by every part; set up by qw_submitter_start() (submitter.c). */
    struct qw_worker *w;         /* shared state */
    const struct qw_config *cfg; /* read-only */
    struct qw_db *db;            /* owned connection */
    struct qw_dlt_client *dlt;   /* owned ledger client */
    struct qw_rng rng;           /* this thread's PRNG */

    /* The thread (submitter.c). */
    struct qw_job *timers;     /* jobs waiting for a moment: a poll, a POST after a
                                  401/403 pause (QW_JOB_POLL_WAIT / QW_JOB_WAITING) */
    struct qw_job *overflow;   /* finished jobs the done queue refused */
    bool stopping;             /* jobs queue closed: shutting down */
    int64_t grace_deadline_ms; /* stopping: abandon what is left after this */
    int owned;                 /* jobs owned and not yet handed back */

    /* POST dispatch (dispatch.c). */
    struct qw_prioq ready;           /* jobs whose POST is due, waiting for capacity */
    int64_t ready_deadline_ms;       /* no ready job's lease deadline is earlier than this */
    int posting;                     /* POSTs in flight */
    struct qw_capacity_gate gate;    /* shared capacity: what a POST may use (capacity.h) */
    enum qw_capacity_cost cost_kind; /* dlt.cost */
    int64_t target;                  /* cost waiting to POST or in flight, last counted */
    bool cap_refused;                /* the last pass left a POST waiting for capacity */
    int64_t cap_retry_ms;            /* monotonic ms the capacity may admit the next POST */

    /* The shared capacity's lease step (capacity_step.c). */
    struct qw_capacity_lease lease;  /* shared capacity: the partitions held (capacity_lease.h) */
    struct qw_txn_policy cap_policy; /* retries of the lease step's transaction */
    int64_t cap_next_step_ms;        /* monotonic ms of the next lease step */
    int cap_failures;                /* lease steps failed in a row */
    int64_t cap_logged_ms;           /* monotonic ms a failed step was last logged */

    /* Status polls and the ledger's nodes (follow.c). */
    struct qw_nodes nodes;                 /* the ledger's nodes: states, latency, channels */
    char probe_service[QW_SERVICE_ID_MAX]; /* ids a probe asks about (any batch we were */
    char probe_batch[QW_BATCH_ID_LEN + 1]; /* given; "" = none yet: nothing to probe for) */
    char probe_tag[QW_NODES_MAX];          /* &probe_tag[i] marks node i's probe transfer */
    int64_t nodes_reported_ms;             /* when the nodes were last written to the database */
    uint32_t nodes_reported_states;        /* their states then, 2 bits per node */
    struct qw_pgarray node_params[NODE_PARAMS]; /* parameters of sql/instance_nodes.sql */

    /* Answers (answers.c). */
    struct qw_ledger_pause pause;                      /* 429 and 401/403 pauses */
    int64_t failure_logged_ms[2][QW_DLT_FAIL_COUNT];   /* when ledger.request_failed was last
                                                          logged, per request type (0 POST, 1
                                                          status) and kind */
    long long failures_unlogged[2][QW_DLT_FAIL_COUNT]; /* failures since, not logged */

    /* The grouped outcome write (record.c). */
    struct qw_outcome_item *out;     /* outcomes waiting to be written */
    size_t n_out;                    /* entries in out */
    size_t cap_out;                  /* room in out: one per job we can own */
    int64_t first_out_ms;            /* when the oldest waiting outcome was added */
    int64_t flush_retry_at_ms;       /* after a failed flush: not before this */
    int flush_failures;              /* consecutive failed flushes */
    bool flush_uncertain;            /* a failed flush may have committed (connection lost
                                        or timed out while it ran): re-read before dropping */
    struct qw_outcome_writer writer; /* the grouped write */
    int64_t flush_took_ms;           /* how long the last successful write took, ms */
    struct qw_outage outage;         /* this connection's outages: log lines, reconnect pacing */
};

static inline int64_t now_ms(void)
{
    return qw_clock_mono_ms();
}

/* submitter.c */

/** Puts `job` on the timers in `state` until `at_ms` (monotonic ms). */
void qw_submitter_push_timer(struct submitter *s, struct qw_job *job, enum qw_job_state state,
                             int64_t at_ms);

/** Hands `job` back to the queuer with `end`, freeing its submission and capacity. */
void qw_submitter_hand_back(struct submitter *s, struct qw_job *job, enum qw_job_end end);

/* dispatch.c */

/** The job's cost against the shared capacity (dlt.cost), computed once per batch. */
int64_t qw_submitter_job_cost(struct submitter *s, struct qw_job *job);

/** Frees the units of the shared capacity the job holds and its place in its node's window. */
void qw_submitter_capacity_give_back(struct submitter *s, struct qw_job *job);

/** Frees the units of the shared capacity the job holds (its batch left the ledger). */
void qw_submitter_units_give_back(struct submitter *s, struct qw_job *job);

/**
 * Frees the job's place in its node's window. A batch that ended keeps it
 * until its outcome is written: then its service's next batch (fast path)
 * is in the ready queue before the place frees, and the highest priority
 * waiting gets it, not whichever job was waiting while the write ran.
 */
void qw_submitter_window_give_back(struct submitter *s, struct qw_job *job);

/** The cap on every node's window: the leased in-flight share counted in batches, 0 = none. */
int qw_submitter_window_cap(const struct submitter *s);

/** The job's POST is due: it waits in the ready queue for capacity. */
void qw_submitter_make_ready(struct submitter *s, struct qw_job *job, int64_t t);

/** Gives back the ready jobs whose lease deadline passed (all of them when stopping). */
void qw_submitter_sweep_ready(struct submitter *s, int64_t t);

/** Starts the POSTs the ready queue, the pauses, the nodes and the capacity allow now. */
void qw_submitter_dispatch(struct submitter *s, int64_t t);

/** When dispatch should run again without a transfer finishing (ms), or INT64_MAX. */
int64_t qw_submitter_dispatch_due(const struct submitter *s, int64_t t);

/* capacity_step.c */

/** Runs the lease step of the shared capacity when it is due. */
void qw_submitter_capacity_step(struct submitter *s, int64_t t);

/** Stopping: gives every partition back at once. */
void qw_submitter_capacity_release(struct submitter *s);

/* follow.c */

/** Starts a status poll of the job's batch (long-poll `wait_s`), or parks it. */
void qw_submitter_start_poll(struct submitter *s, struct qw_job *job, int wait_s);

/** Logs and counts a node's change of state; a node back up lets parked polls go. */
void qw_submitter_note_node(struct submitter *s, int node, enum qw_node_change change);

/** Starts the probes of nodes that are due. */
void qw_submitter_run_probes(struct submitter *s, int64_t t);

/** Writes the nodes' state into the instance row when it changed or is due. */
void qw_submitter_report_nodes(struct submitter *s, int64_t t);

/** Publishes the nodes' state and the ready gauge for /metrics. */
void qw_submitter_publish_nodes(struct submitter *s);

/* answers.c */

/** The ledger client's callback for every finished transfer (`arg` is the submitter). */
void qw_submitter_on_transfer_done(const struct qw_dlt_result *r, void *arg);

/** Gives a not-yet-posted job back to the database (submitted = false). */
void qw_submitter_requeue(struct submitter *s, struct qw_job *job, const char *why);

/* record.c */

/** Queues `o` for the grouped write; the job waits until it is written. */
void qw_submitter_add_outcome(struct submitter *s, struct qw_job *job, const struct qw_outcome *o);

/** Writes the waiting outcomes in one fenced statement, then moves each job on. */
void qw_submitter_flush_outcomes(struct submitter *s);

/** When the waiting group of outcomes is old enough to be written (ms): its oldest's time plus
 * the group age for the last write (qw_outcome_group_age_ms()). */
int64_t qw_submitter_group_due_ms(const struct submitter *s);

/** Whether the waiting outcomes are to be written now. */
bool qw_submitter_flush_due(const struct submitter *s, int64_t t);

#endif
