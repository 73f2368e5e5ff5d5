/*
 * Whether LISTEN/NOTIFY wake-ups reach this worker: the self-test. Behind a
 * transaction-pooling PgBouncer a LISTEN belongs to a server session that
 * the pool hands to other clients, so notifications go astray without any
 * error. The queuer thread therefore sends a NOTIFY with a distinctive
 * payload to its own channel, through its main connection, at start,
 * every QW_NOTIFY_CHECK_EVERY claims cycles and after every reconnect of
 * the connection it listens on; when that NOTIFY has not come back on the
 * listening connection within a cycle, notifications are "not delivered"
 * and the worker polls (a full fetch and a read of all its claims every
 * cycle, as with worker.listen = false) until a later self-test succeeds.
 * A listening connection that is lost counts as not delivering until it
 * is back and a self-test has passed.
 *
 * Pure: no I/O, no clock (times are passed in), no logging. The caller
 * logs the transitions the functions return (each once per episode). One
 * struct per queuer thread; not thread-safe.
 */
#ifndef QW_QUEUER_NOTIFY_CHECK_H
#define QW_QUEUER_NOTIFY_CHECK_H

#include <stdbool.h>
#include <stdint.h>

/** Claims cycles between two self-tests while nothing else asks for one. */
#define QW_NOTIFY_CHECK_EVERY 60

/** The payload prefix of a self-test; '!' never begins a "<service>:<epoch>" item. */
#define QW_NOTIFY_CHECK_PREFIX "!selftest:"

/** What a call changed, for the caller's log. */
enum qw_notify_check_change {
    QW_NOTIFY_CHECK_SAME = 0,  /* nothing to log */
    QW_NOTIFY_CHECK_FAILED,    /* delivery stopped: log once, poll from now on */
    QW_NOTIFY_CHECK_RECOVERED, /* a self-test passed after a failure: log once, stop polling */
};

/** The self-test's state. Start with qw_notify_check_init(). */
struct qw_notify_check {
    bool delivering;  /* notifications are trusted; false = poll every cycle */
    bool due;         /* a self-test goes out at the next chance (start, reconnect) */
    bool listener_up; /* the listening connection is connected */
    uint64_t token;   /* number of the pending self-test, 0 = none pending */
    uint64_t last;    /* number of the last self-test sent */
    int64_t sent_ms;  /* monotonic ms the pending self-test was sent */
    int cycles;       /* claims cycles since the last self-test was sent */
};

/** Starts trusting delivery, with a self-test due at once. */
void qw_notify_check_init(struct qw_notify_check *c);

/** Counts a claims cycle. */
void qw_notify_check_cycle(struct qw_notify_check *c);

/**
 * Whether a self-test should be sent now: none is pending, the listening
 * connection is up, and one is due (start, reconnect) or
 * QW_NOTIFY_CHECK_EVERY cycles have passed since the last.
 */
bool qw_notify_check_send_due(const struct qw_notify_check *c);

/** The number the next self-test carries (its payload: QW_NOTIFY_CHECK_PREFIX "<number>"). */
uint64_t qw_notify_check_next(const struct qw_notify_check *c);

/**
 * Records the self-test numbered qw_notify_check_next() as sent (its NOTIFY
 * committed) at monotonic `now_ms`: it is pending until it comes back or
 * expires. A test that could not be sent is not recorded, and stays due.
 */
void qw_notify_check_sent(struct qw_notify_check *c, int64_t now_ms);

/**
 * A self-test payload with number `token` arrived. Only the pending one
 * counts (a late answer to an expired one proves nothing about now).
 * Returns RECOVERED when delivery was not trusted before.
 */
enum qw_notify_check_change qw_notify_check_received(struct qw_notify_check *c, uint64_t token);

/**
 * Expires the pending self-test when `timeout_ms` have passed since it was
 * sent: returns NOT_DELIVERED when delivery was trusted until then.
 */
enum qw_notify_check_change qw_notify_check_expire(struct qw_notify_check *c, int64_t now_ms,
                                                   int64_t timeout_ms);

/** Monotonic ms the pending self-test expires (`timeout_ms` after it was sent), or INT64_MAX. */
int64_t qw_notify_check_deadline(const struct qw_notify_check *c, int64_t timeout_ms);

/**
 * The listening connection is lost: nothing is delivered until it is back
 * and a self-test passed. Returns NOT_DELIVERED when delivery was trusted.
 */
enum qw_notify_check_change qw_notify_check_listener_lost(struct qw_notify_check *c);

/**
 * The listening connection is back (LISTENing again): a self-test is due at
 * once, and one pending is void (what was sent before the loss proves
 * nothing either way).
 */
void qw_notify_check_listener_back(struct qw_notify_check *c);

/**
 * Parses a payload on our channel: true when it is a self-test (then
 * *token is its number, 0 when the number is malformed).
 */
bool qw_notify_check_parse(const char *payload, uint64_t *token);

#endif
