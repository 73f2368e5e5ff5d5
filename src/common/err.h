/*
 * One classified result code for the whole program, in the spirit of
 * CURLcode: 0 is success, every failure is a negative value, and
 * qw_strerror() names it. A struct qw_error carries the detail (SQLSTATE,
 * HTTP status, message) up to the place that decides and logs.
 */
#ifndef QW_COMMON_ERR_H
#define QW_COMMON_ERR_H

#include <stddef.h>

/**
 * Marks a function whose result must be checked (a fallible call whose
 * failure the caller has to decide about), as curl marks CURLcode.
 */
#define QW_MUST_CHECK __attribute__((warn_unused_result))

enum qw_rc {
    QW_OK = 0,
    QW_ERR_NOMEM = -1,           /* allocation failed */
    QW_ERR_INVALID = -2,         /* bad input: the caller's data is wrong */
    QW_ERR_CONFIG = -3,          /* bad configuration */
    QW_ERR_IO = -4,              /* file or socket I/O failed */
    QW_ERR_DB = -5,              /* database error that a retry will not fix */
    QW_ERR_DB_CONN = -6,         /* connection to the database lost or refused */
    QW_ERR_SERIALIZATION = -7,   /* SQLSTATE 40001 / 40P01: re-run the transaction */
    QW_ERR_OUTCOME_UNKNOWN = -8, /* connection lost during COMMIT: re-read by key */
    QW_ERR_TIMEOUT = -9,         /* a deadline passed */
    QW_ERR_BACKPRESSURE = -10,   /* refused until a backlog drains */
    QW_ERR_DUPLICATE = -11,      /* the key exists already with other content */
    QW_ERR_SCHEMA = -13,         /* database schema older or newer than this binary */
    QW_ERR_SHUTDOWN = -16,       /* stopped because the process is shutting down */
    QW_ERR_SUPERSEDED = -17,     /* a later registration of our instance_id took over */
};

/** Static, human-readable name of a result code; never NULL. */
const char *qw_strerror(int rc);

/**
 * Detail that travels with a failure. Filled by the module that saw the
 * failure; the caller that decides what to do logs it once.
 */
struct qw_error {
    int rc;           /* enum qw_rc */
    char sqlstate[6]; /* SQLSTATE of a database error, "" if none */
    int http_status;  /* HTTP status from the ledger, 0 if none */
    char msg[512];    /* one line, no secrets */
};

/** Clears `err` to "no error". */
void qw_error_clear(struct qw_error *err);

/**
 * Records `rc` and a printf-style message in `err` (may be NULL) and returns
 * `rc`, so a failing path can `return qw_error_set(err, QW_ERR_X, ...)`.
 */
int qw_error_set(struct qw_error *err, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
