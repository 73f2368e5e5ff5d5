/*
 * Structured logging: one line per event, key=value, level-filtered.
 *
 *   ts=2026-11-21T14:00:00.123Z level=info instance=w1 thread=queuer event=claim.acquired n=3
 *
 * Policy: debug = per-batch detail; info = lifecycle and state changes an
 * operator wants in a normal log; warn = something failed and is being
 * retried or worked around; error = something needs a human. Callers log a
 * failure once, where the decision about it is made. Secrets are never
 * passed to these functions; values that may hold spaces or quotes go
 * through qw_log_quote().
 *
 * Thread-safety: qw_log() may be called from any thread. qw_log_init() is
 * called once before threads start; qw_log_set_thread() is per thread.
 */
#ifndef QW_COMMON_LOG_H
#define QW_COMMON_LOG_H

#include "common/err.h"

#include <stdio.h>
#include <stddef.h>

enum qw_log_level {
    QW_LOG_DEBUG = 0,
    QW_LOG_INFO = 1,
    QW_LOG_WARN = 2,
    QW_LOG_ERROR = 3,
};

/** Sets the minimum level and the instance id stamped on every line (copied). */
void qw_log_init(enum qw_log_level min_level, const char *instance_id);

/** Changes the lowest level written (SIGHUP reload); thread-safe. */
void qw_log_set_level(enum qw_log_level min_level);

/** Name of the lowest level written now ("debug", "info", "warn" or "error"). */
const char *qw_log_level_name(void);

/** Parses "debug" | "info" | "warn" | "error"; returns 0 or QW_ERR_INVALID. */
QW_MUST_CHECK int qw_log_level_parse(const char *text, enum qw_log_level *out);

/** Names the calling thread in its log lines; `name` must outlive the thread. */
void qw_log_set_thread(const char *name);

/** Redirects output (default stderr); for tests. Not thread-safe vs qw_log(). */
void qw_log_set_output(FILE *out);

/** True when a line at `level` would be written. */
int qw_log_enabled(enum qw_log_level level);

/**
 * Writes one line: common fields, `event=<event>`, then the formatted
 * key=value pairs of `fmt` (may be NULL).
 */
void qw_log(enum qw_log_level level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/**
 * Renders `text` as a double-quoted log value into `buf` (escaping quotes,
 * backslashes and control characters, truncating to fit) and returns `buf`.
 */
const char *qw_log_quote(char *buf, size_t len, const char *text);

#define qw_log_debug(event, ...) qw_log(QW_LOG_DEBUG, event, __VA_ARGS__)
#define qw_log_info(event, ...) qw_log(QW_LOG_INFO, event, __VA_ARGS__)
#define qw_log_warn(event, ...) qw_log(QW_LOG_WARN, event, __VA_ARGS__)
#define qw_log_error(event, ...) qw_log(QW_LOG_ERROR, event, __VA_ARGS__)

#endif
