/*
 * The NDJSON event log that tests read to check ledger-side invariants:
 * one JSON object per line, `"t"` (microseconds, never decreasing from line
 * to line) first, then `"ev"` and the event's fields. Lines are written with
 * one write(2) each under a mutex, so they are complete and in order even
 * if the process is killed.
 *
 * Build a line with qw_sim_event_begin() and the field helpers (pure, on a
 * caller-owned struct), then hand it to qw_sim_evlog_emit().
 * Thread-safety: qw_sim_evlog_emit() may be called from any thread.
 */
#ifndef QW_SIM_EVLOG_H
#define QW_SIM_EVLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** One event line under construction. */
struct qw_sim_event {
    char buf[2048]; /* the fields after "t", without braces */
    size_t len;     /* bytes used in `buf` */
    bool overflow;  /* a field did not fit and was left out */
};

/** Starts an event of type `ev` ("post", "status", ...). */
void qw_sim_event_begin(struct qw_sim_event *e, const char *ev);

/** Adds "key": "value" (JSON-escaped); a NULL value is written as null. */
void qw_sim_event_str(struct qw_sim_event *e, const char *key, const char *value);

/** Adds "key": value. */
void qw_sim_event_int(struct qw_sim_event *e, const char *key, long long value);

/** Adds "key": true|false. */
void qw_sim_event_bool(struct qw_sim_event *e, const char *key, bool value);

/**
 * Writes `len` bytes of `text` into `out` (capacity `cap`) as the inside of
 * a JSON string (quotes, backslashes and control characters escaped, bytes
 * >= 0x80 passed through). Returns the length the full escape needs; the
 * output is complete only if that is < cap (always NUL-terminated when cap > 0).
 */
size_t qw_sim_json_escape(char *out, size_t cap, const char *text, size_t len);

struct qw_sim_evlog;

/**
 * Opens (creating, appending) the log at `path`; `now_us` is the clock the
 * "t" field is read from. Returns QW_OK, QW_ERR_IO or QW_ERR_NOMEM.
 */
int qw_sim_evlog_open(const char *path, int64_t (*now_us)(void), struct qw_sim_evlog **out);

/** Closes the log. NULL is a no-op. */
void qw_sim_evlog_close(struct qw_sim_evlog *log);

/** True when `log` is open; lets callers skip building lines. NULL is false. */
bool qw_sim_evlog_enabled(const struct qw_sim_evlog *log);

/**
 * Stamps `e` with "t" and appends it as one line. NULL `log` is a no-op.
 * Write errors are counted and reported once on stderr, never fatal.
 */
void qw_sim_evlog_emit(struct qw_sim_evlog *log, const struct qw_sim_event *e);

#endif
