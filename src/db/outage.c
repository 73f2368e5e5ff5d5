/* Database outage tracking: few log lines per outage, paced reconnects; see outage.h. */
#include "db/outage.h"

#include "common/log.h"
#include "db/db.h"

#include <string.h>

void qw_outage_init(struct qw_outage *o, const char *conn)
{
    memset(o, 0, sizeof(*o));
    o->conn = conn;
}

enum qw_outage_event qw_outage_fail(struct qw_outage *o, int64_t now_ms, struct qw_rng *rng)
{
    enum qw_outage_event ev = QW_OUTAGE_QUIET;
    if (!o->down) {
        o->down = true;
        o->began_ms = now_ms;
        o->failures = 0;
        o->remind_at_ms = now_ms + QW_OUTAGE_REMIND_MS;
        o->remind_gap_ms = 2 * QW_OUTAGE_REMIND_MS;
        ev = QW_OUTAGE_BEGAN;
    } else if (now_ms >= o->remind_at_ms) {
        o->remind_at_ms = now_ms + o->remind_gap_ms;
        o->remind_gap_ms *= 2;
        if (o->remind_gap_ms > QW_OUTAGE_REMIND_MAX_MS)
            o->remind_gap_ms = QW_OUTAGE_REMIND_MAX_MS;
        ev = QW_OUTAGE_STILL;
    }
    int64_t wait = qw_backoff_exponential_jitter(o->failures, QW_OUTAGE_RETRY_BASE_MS,
                                                 QW_OUTAGE_RETRY_MAX_MS, rng);
    o->failures++;
    o->retry_at_ms = now_ms + wait;
    return ev;
}

enum qw_outage_event qw_outage_ok(struct qw_outage *o, int64_t now_ms)
{
    if (!o->down)
        return QW_OUTAGE_QUIET;
    o->down = false;
    o->last_ms = now_ms - o->began_ms;
    o->last_failures = o->failures;
    o->failures = 0;
    o->retry_at_ms = 0;
    return QW_OUTAGE_ENDED;
}

bool qw_outage_retry_due(const struct qw_outage *o, int64_t now_ms)
{
    return !o->down || now_ms >= o->retry_at_ms;
}

int64_t qw_outage_note_failure(struct qw_outage *o, const struct qw_error *err, int64_t now_ms,
                               struct qw_rng *rng)
{
    char quoted[300];
    enum qw_outage_event ev = qw_outage_fail(o, now_ms, rng);
    if (ev == QW_OUTAGE_BEGAN)
        qw_log_warn("db.unavailable", "conn=%s error=%s sqlstate=%s retry_max_ms=%d", o->conn,
                    qw_log_quote(quoted, sizeof(quoted), err->msg),
                    err->sqlstate[0] ? err->sqlstate : "-", QW_OUTAGE_RETRY_MAX_MS);
    else if (ev == QW_OUTAGE_STILL)
        qw_log_warn("db.still_unavailable", "conn=%s down_ms=%lld attempts=%d error=%s", o->conn,
                    (long long)(now_ms - o->began_ms), o->failures,
                    qw_log_quote(quoted, sizeof(quoted), err->msg));
    return o->retry_at_ms - now_ms;
}

void qw_outage_note_success(struct qw_outage *o, int64_t now_ms)
{
    if (qw_outage_ok(o, now_ms) == QW_OUTAGE_ENDED)
        qw_log_warn("db.restored", "conn=%s down_ms=%lld failed_attempts=%d", o->conn,
                    (long long)o->last_ms, o->last_failures);
}

int qw_outage_reconnect(struct qw_outage *o, struct qw_db *db, int64_t now_ms, struct qw_rng *rng)
{
    if (qw_db_ok(db))
        return QW_OK;
    if (!qw_outage_retry_due(o, now_ms))
        return QW_ERR_DB_CONN;
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_db_reconnect(db, &err);
    if (rc != QW_OK) {
        if (err.msg[0] == '\0')
            qw_error_set(&err, rc, "%s", qw_strerror(rc));
        qw_outage_note_failure(o, &err, now_ms, rng);
        return QW_ERR_DB_CONN;
    }
    qw_log_info("db.reconnected", "conn=%s", o->conn);
    return QW_OK;
}
