/*
 * Enqueueing batches into the database: one at a time, or a bulk TSV
 * stream (see tsv.h) loaded in one transaction.
 *
 * Every line is checked in the client first (identifier formats, hex, the
 * BatchList payload, the optional priority), and all failures are reported
 * with their line numbers. The valid lines are then COPYed (binary) into a
 * temporary table, each with its priority, and handed, in line order, to
 * queuer.enqueue_staged(), which settles duplicates, conflicts and back pressure under per-service
 * locks and inserts; the database does not check those payloads a second time. The load commits
 * only if every line was enqueued or was an identical duplicate (an idempotent no-op), unless
 * `skip_invalid` is set, in which case the lines that can be enqueued are, and every other line is
 * reported. Re-running a load is therefore safe: lines already stored come back as duplicates.
 *
 * Back-pressure marks: the session settings queuer.ingest_high/low are set
 * (SET LOCAL) from the options when they are >= 0; otherwise the database's
 * queuer.settings row applies. All SQL is parameterised.
 *
 * Thread-safety: each call uses the caller's connection for its duration;
 * one connection per thread.
 */
#ifndef QW_INGEST_ENQUEUE_H
#define QW_INGEST_ENQUEUE_H

#include "common/err.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct qw_db;

/** How one batch (line) fared. */
enum qw_enqueue_outcome {
    QW_ENQ_ENQUEUED = 0, /* stored */
    QW_ENQ_DUPLICATE,    /* identical batch already stored: nothing to do */
    QW_ENQ_INVALID,      /* bad line: format, hex or payload (client or database check) */
    QW_ENQ_TOO_LARGE,    /* payload over the size limit */
    QW_ENQ_CONFLICT,     /* batch_id stored (or repeated) with other content */
    QW_ENQ_BACKPRESSURE, /* the service's backlog is at the high mark */
};

/** Options of an enqueue; zero values are not all sensible: fill every field. */
struct qw_enqueue_opts {
    int ingest_high;          /* back pressure at this backlog; 0 = off; -1 = database setting */
    int ingest_low;           /* accept again below this backlog; -1 = database setting */
    size_t max_payload_bytes; /* client-side payload limit, bytes (the database has its own) */
    int skip_invalid;         /* bool: bulk only; enqueue what can be, report the rest */
    int chunk_rows;           /* bulk: rows per queuer.enqueue_staged() call; 0 = all in one */
    int priority;             /* batch priority (QW_PRIORITY_MIN..MAX, higher first); bulk:
                                 of the lines without a fourth field */
};

/** A line that was not enqueued (or was a duplicate), as reported to the caller. */
struct qw_enqueue_issue {
    long line_no;                    /* 1-based line in the input */
    enum qw_enqueue_outcome outcome; /* never QW_ENQ_ENQUEUED */
    const char *batch_id;            /* as given, NUL-terminated; "" if unreadable */
    const char *reason;              /* one line */
};

/** Called for every issue, in line order for the client checks. Must not keep the pointers. */
typedef void (*qw_enqueue_issue_fn)(void *ctx, const struct qw_enqueue_issue *issue);

/** Counts of a bulk load. */
struct qw_enqueue_report {
    long lines;        /* lines read, blank and comment lines included */
    long records;      /* batch lines (not blank, not comments) */
    long enqueued;     /* stored by this load (0 when it was rolled back) */
    long duplicates;   /* identical batches already stored */
    long invalid;      /* rejected as malformed (format, hex, payload, size) */
    long conflicts;    /* batch_id stored or repeated with other content */
    long backpressure; /* refused because the service's backlog is at the high mark */
    int committed;     /* bool: the load's transaction committed */
};

/** Static lower-case name of an outcome ("enqueued", "duplicate", ...). */
const char *qw_enqueue_outcome_name(enum qw_enqueue_outcome outcome);

/**
 * Enqueues one batch through queuer.enqueue_batch() after the client-side
 * checks. `payload` is borrowed. On QW_OK *outcome is QW_ENQ_ENQUEUED or
 * QW_ENQ_DUPLICATE. Errors: QW_ERR_INVALID (bad service id, batch id or
 * payload, too large), QW_ERR_DUPLICATE (batch_id taken by other content),
 * QW_ERR_BACKPRESSURE (err->msg says below which backlog enqueues resume),
 * QW_ERR_DB_CONN / QW_ERR_TIMEOUT / QW_ERR_DB; *outcome then says which.
 */
QW_MUST_CHECK int qw_enqueue_one(struct qw_db *db, const struct qw_enqueue_opts *opts,
                                 const char *service_id, const char *batch_id,
                                 const uint8_t *payload, size_t len,
                                 enum qw_enqueue_outcome *outcome, struct qw_error *err);

/**
 * Loads the TSV stream `in` (read to EOF; not closed) in one transaction,
 * reporting each line not enqueued through `on_issue` (may be NULL) and
 * the counts in *report.
 *
 * Returns QW_OK when the load committed: every record was enqueued or a
 * duplicate, or (skip_invalid) the rest were skipped and reported;
 * report->backpressure > 0 then means some lines should be retried later.
 * Without skip_invalid, any other line rolls the whole load back and the
 * return is QW_ERR_INVALID (malformed or too large lines), QW_ERR_DUPLICATE
 * (conflicts) or QW_ERR_BACKPRESSURE, in that order of precedence, with
 * every offending line reported. Also QW_ERR_IO (reading `in`),
 * QW_ERR_NOMEM, and database errors; QW_ERR_OUTCOME_UNKNOWN when the
 * connection was lost during COMMIT (re-run the load: it is idempotent).
 */
QW_MUST_CHECK int qw_enqueue_bulk(struct qw_db *db, const struct qw_enqueue_opts *opts, FILE *in,
                                  qw_enqueue_issue_fn on_issue, void *ctx,
                                  struct qw_enqueue_report *report, struct qw_error *err);

#endif
