/*
 * The pure core of qw-check, the ledger-history invariant checker: parses
 * the simulator's NDJSON event lines, replays them in log order, joins
 * them with what the database holds, and checks
 *   I1 every batch in queuer.batches is final, and a final status is
 *      backed by the ledger (Committed/Valid seen there, Invalid seen there
 *      or answered 400);
 *   I2 never two batches of one service Pending at the ledger at once: a
 *      batch is taken (202) only when no other batch of its service is
 *      queued there (duplicates of the same batch are fine);
 *   I3 per service, the order in which the ledger first took the batches
 *      equals their (created_at, batch_id) order, and it took only known
 *      batches, each under its own service;
 *   I4 every extra POST of a batch has a recorded reason: a batch the
 *      ledger took n times has at least n-1 'Submitting' history rows with
 *      a resubmission reason, and no batch was POSTed more often than it
 *      was marked 'Submitting'.
 *
 * No I/O, no clock, no logging: the caller feeds parsed events and rows and
 * reads the figures; each violation is reported once through the caller's
 * callback. One checker belongs to one thread.
 */
#ifndef QW_TOOLS_CHECK_HISTORY_H
#define QW_TOOLS_CHECK_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Invariants checked, I1..I4 (array index = number - 1). */
#define QW_CHECK_INVARIANTS 4

/** Longest batch id accepted in an event (a header_signature is 128 hex characters). */
#define QW_CHECK_ID_MAX 128
/** Longest service key accepted ("ccccc-ccccc::ssss" is 17). */
#define QW_CHECK_SERVICE_MAX 63

enum qw_check_event_kind {
    QW_CHECK_EV_OTHER = 0, /* pause, resume and anything newer: counted, not replayed */
    QW_CHECK_EV_POST,      /* one batch offered in a POST .../batches */
    QW_CHECK_EV_GET,       /* one GET .../batch_statuses answered */
    QW_CHECK_EV_STATUS,    /* a batch's status changed at the ledger */
    QW_CHECK_EV_RESTART,   /* the ledger lost its memory (node restart) */
};

/** One event line, parsed. Strings are "" when the line has none (or null). */
struct qw_check_event {
    enum qw_check_event_kind kind;          /* what happened */
    int64_t t_us;                           /* "t": log time, microseconds */
    char service[QW_CHECK_SERVICE_MAX + 1]; /* "circuit::service" */
    char batch[QW_CHECK_ID_MAX + 1];        /* batch id (header_signature) */
    int code;                               /* HTTP status; 0 when dropped or hung */
    bool no_answer;                         /* POST/GET: connection dropped or held (a fault) */
    bool reached;                           /* POST: the ledger took the batch */
    bool dup;                               /* POST: the ledger already knew the batch */
    bool fault;                             /* POST: the answer was an injected fault */
    char to[16];                            /* STATUS: the new status */
};

/**
 * Parses one NDJSON line of `len` bytes (no trailing newline needed) into
 * `ev`. A POST "reached" the ledger when it was answered 202, or when its
 * connection was dropped or held after the ledger had taken the batch
 * ("accepted": true). Returns 0, or -1 with a one-line reason in `why`
 * (capacity `why_len`) for a line that is not a well-formed event. Pure.
 */
int qw_check_event_parse(const char *line, size_t len, struct qw_check_event *ev, char *why,
                         size_t why_len);

/** What a 'Submitting' history row's detail says about the submission. */
enum qw_check_reason {
    QW_CHECK_REASON_NONE = 0, /* no reason recognised (NULL, empty or unknown text) */
    QW_CHECK_REASON_FIRST,    /* 'first submission' */
    QW_CHECK_REASON_RESUBMIT, /* 'resubmission: ...' or 'retry after delay: ...' */
};

/** Classifies a 'Submitting' row's detail (NULL allowed). Pure. */
enum qw_check_reason qw_check_reason_of(const char *detail);

/** Figures of one check; every count is over the whole log and database. */
struct qw_check_figures {
    long long events;            /* event lines replayed */
    long long batches;           /* rows in queuer.batches */
    long long final_batches;     /* ... Committed, Valid or Invalid */
    long long services;          /* services seen in the database or the log */
    long long posts;             /* POST lines (one per batch offered, or per refused request) */
    long long posts_202;         /* answered 202 */
    long long posts_429;         /* answered 429 (back pressure, real or injected) */
    long long posts_other;       /* any other answer: 4xx, 5xx, dropped or held */
    long long posts_reached;     /* POSTs whose batch the ledger took */
    long long gets;              /* status requests answered or failed */
    long long restarts;          /* ledger memory wipes */
    long long submitting_rows;   /* 'Submitting' history rows */
    long long resubmit_reasons;  /* ... with a resubmission reason */
    long long duplicate_batches; /* batches the ledger took more than once */
    long long duplicate_posts;   /* the extra times it took them */
    long long violations[QW_CHECK_INVARIANTS]; /* I1..I4 */
};

/**
 * Receives each violation once: `invariant` is 1..4, `message` one line
 * (valid only during the call).
 */
typedef void (*qw_check_violation_fn)(void *ctx, int invariant, const char *message);

struct qw_check;

/**
 * Creates an empty checker reporting violations to `fn(ctx, ...)` (`fn`
 * may be NULL). Returns 0, or -1 when out of memory.
 */
int qw_check_new(qw_check_violation_fn fn, void *ctx, struct qw_check **out);

/** Frees the checker; NULL is a no-op. */
void qw_check_free(struct qw_check *c);

/**
 * Replays one event. Events must come in log order (I2 is decided here,
 * the moment a batch is taken). Returns 0, or -1 when out of memory.
 */
int qw_check_replay(struct qw_check *c, const struct qw_check_event *ev);

/**
 * Adds one row of queuer.batches: `status` NULL or "" when it has none.
 * Rows of one service must come in (created_at, batch_id) order; services
 * may interleave. Returns 0, or -1 when out of memory or when `batch_id`
 * was added before.
 */
int qw_check_add_batch(struct qw_check *c, const char *batch_id, const char *service_id,
                       const char *status);

/**
 * Adds one 'Submitting' row of queuer.batch_history for `batch_id` with
 * its `detail` (may be NULL). Returns 0, or -1 when out of memory.
 */
int qw_check_add_submitting(struct qw_check *c, const char *batch_id, const char *detail);

/**
 * Runs the checks that need everything (I1, I3, I4), reports their
 * violations and fills `fig` (I2's were reported during the replay).
 * Call once, after the last event and row. Returns 0, or -1 when out of
 * memory.
 */
int qw_check_finish(struct qw_check *c, struct qw_check_figures *fig);

/** Short name of invariant 1..4 ("every batch final", ...); "?" otherwise. */
const char *qw_check_invariant_name(int invariant);

#endif
