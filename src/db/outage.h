/*
 * Database outages, seen from one connection: when the server goes away (a
 * restart, a Patroni failover, a network cut), every statement and every
 * reconnect fails until it is back. This tracker turns that burst into a few
 * log lines per outage and paces the reconnect attempts:
 *
 *   db.unavailable        warn, at the first failure that left the connection
 *                         unusable (with that failure's message);
 *   db.still_unavailable  warn, while it lasts: after 30 s, then at doubling
 *                         intervals up to every 10 minutes;
 *   db.restored           warn, at the first success afterwards, with the
 *                         outage's duration and the number of failed attempts.
 *
 * Reconnects back off with exponential jitter from 50 ms up to 250 ms, so a
 * dead server is not hammered and a new primary is found within a quarter of a
 * second of accepting writes. An outage ends at the owner's first success
 * (a statement that worked, not a mere reconnect: a connection to a server
 * that is being demoted is not the end of it).
 *
 * The state machine (qw_outage_fail/qw_outage_ok) is pure: time and the PRNG
 * are passed in. qw_outage_note_* add the log lines; qw_outage_reconnect
 * drives a struct qw_db. One tracker per connection, owned by the thread
 * that owns the connection; not thread-safe.
 */
#ifndef QW_DB_OUTAGE_H
#define QW_DB_OUTAGE_H

#include "common/backoff.h"
#include "common/err.h"

#include <stdbool.h>
#include <stdint.h>

struct qw_db;

#define QW_OUTAGE_RETRY_BASE_MS 50     /* first reconnect backoff ceiling */
#define QW_OUTAGE_RETRY_MAX_MS 250     /* reconnect backoff cap */
#define QW_OUTAGE_REMIND_MS 30000      /* first "still unavailable" line after this */
#define QW_OUTAGE_REMIND_MAX_MS 600000 /* reminder interval cap */

/** What a failure or a success means for the log. */
enum qw_outage_event {
    QW_OUTAGE_QUIET = 0, /* nothing to log */
    QW_OUTAGE_BEGAN,     /* the first failure of an outage */
    QW_OUTAGE_STILL,     /* a reminder is due */
    QW_OUTAGE_ENDED,     /* the first success after an outage */
};

/** One connection's outage state. Zero-initialise, or use qw_outage_init(). */
struct qw_outage {
    const char *conn;      /* names the connection in log lines ("queuer", "submitter") */
    bool down;             /* an outage is in progress */
    int64_t began_ms;      /* monotonic ms of its first failure */
    int64_t remind_at_ms;  /* monotonic ms of the next reminder */
    int64_t remind_gap_ms; /* interval before the reminder after that */
    int64_t retry_at_ms;   /* monotonic ms before which no reconnect is attempted */
    int failures;          /* failed attempts in this outage */
    int64_t last_ms;       /* duration of the last outage that ended, ms */
    int last_failures;     /* failed attempts of the last outage that ended */
};

/** Resets `o`; `conn` (static storage) names the connection in log lines. */
void qw_outage_init(struct qw_outage *o, const char *conn);

/**
 * Records a failure at `now_ms` that left the connection unusable, and sets
 * o->retry_at_ms to when the next reconnect may be tried. Returns BEGAN for
 * the first failure of an outage, STILL when a reminder is due, else QUIET.
 */
enum qw_outage_event qw_outage_fail(struct qw_outage *o, int64_t now_ms, struct qw_rng *rng);

/**
 * Records a success at `now_ms`. Returns ENDED (o->last_ms and
 * o->last_failures then describe the outage) if one was in progress, else
 * QUIET.
 */
enum qw_outage_event qw_outage_ok(struct qw_outage *o, int64_t now_ms);

/** True when no outage is in progress or its next reconnect may be tried. */
bool qw_outage_retry_due(const struct qw_outage *o, int64_t now_ms);

/**
 * qw_outage_fail() plus its log line (`err` says what failed). Returns the
 * milliseconds to wait before the next attempt.
 */
int64_t qw_outage_note_failure(struct qw_outage *o, const struct qw_error *err, int64_t now_ms,
                               struct qw_rng *rng);

/** qw_outage_ok() plus the db.restored line when an outage ended. */
void qw_outage_note_success(struct qw_outage *o, int64_t now_ms);

/**
 * Makes sure `db` is connected: QW_OK if it is, or if a reconnect (tried only
 * when qw_outage_retry_due()) succeeded; otherwise QW_ERR_DB_CONN, the
 * failure noted (quietly while the outage goes on).
 */
QW_MUST_CHECK int qw_outage_reconnect(struct qw_outage *o, struct qw_db *db, int64_t now_ms,
                                      struct qw_rng *rng);

#endif
