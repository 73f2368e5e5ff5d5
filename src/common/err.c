/* Names of result codes and the error-detail helpers. */
#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *qw_strerror(int rc)
{
    switch ((enum qw_rc)rc) {
    case QW_OK:
        return "ok";
    case QW_ERR_NOMEM:
        return "out of memory";
    case QW_ERR_INVALID:
        return "invalid input";
    case QW_ERR_CONFIG:
        return "configuration error";
    case QW_ERR_IO:
        return "I/O error";
    case QW_ERR_DB:
        return "database error";
    case QW_ERR_DB_CONN:
        return "database connection lost";
    case QW_ERR_SERIALIZATION:
        return "serialization failure";
    case QW_ERR_OUTCOME_UNKNOWN:
        return "commit outcome unknown";
    case QW_ERR_TIMEOUT:
        return "timed out";
    case QW_ERR_BACKPRESSURE:
        return "back pressure";
    case QW_ERR_DUPLICATE:
        return "duplicate";
    case QW_ERR_SCHEMA:
        return "schema version mismatch";
    case QW_ERR_SHUTDOWN:
        return "shutting down";
    case QW_ERR_SUPERSEDED:
        return "superseded by a later registration";
    }
    return "unknown error";
}

void qw_error_clear(struct qw_error *err)
{
    if (err)
        memset(err, 0, sizeof(*err));
}

int qw_error_set(struct qw_error *err, int rc, const char *fmt, ...)
{
    if (!err)
        return rc;
    err->rc = rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return rc;
}
