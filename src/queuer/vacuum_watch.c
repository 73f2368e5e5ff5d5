/* The worker's look at what holds back vacuum; see vacuum_watch.h. */
#include "queuer/vacuum_watch.h"

#include "common/log.h"

#include <string.h>

enum qw_vacuum_change qw_vacuum_watch_change(const struct qw_status_snapshot *prev,
                                             const struct qw_status_snapshot *cur)
{
    if (cur->holders == 0)
        return prev->holders == 0 ? QW_VACUUM_SAME : QW_VACUUM_RELEASED;
    if (prev->holders == 0 || prev->pid != cur->pid || strcmp(prev->kind, cur->kind) != 0 ||
        strcmp(prev->application, cur->application) != 0)
        return QW_VACUUM_HELD;
    return QW_VACUUM_SAME;
}

static void publish(struct qw_ops_stats *ops, const struct qw_status_snapshot *s)
{
    atomic_store_explicit(&ops->vacuum_holders, (long long)s->holders, memory_order_relaxed);
    atomic_store_explicit(&ops->vacuum_xids_behind, s->holders ? (long long)s->xids_behind : 0,
                          memory_order_relaxed);
    atomic_store_explicit(&ops->vacuum_open_s, s->holders ? (long long)s->open_s : -1,
                          memory_order_relaxed);
}

static void log_held(const struct qw_status_snapshot *s)
{
    char role[96], app[96], state[64];
    qw_log_warn("db.vacuum_held_back",
                "holders=%lld kind=\"%s\" pid=%lld role=%s application=%s state=%s open_s=%lld "
                "xids_behind=%lld hint=\"a transaction left open keeps every row version made "
                "since it began, and the workers slow down until it ends: see "
                "queuer.snapshot_holders and docs/OPERATIONS.md\"",
                (long long)s->holders, s->kind, (long long)s->pid,
                qw_log_quote(role, sizeof(role), s->role),
                qw_log_quote(app, sizeof(app), s->application),
                qw_log_quote(state, sizeof(state), s->state), (long long)s->open_s,
                (long long)s->xids_behind);
}

void qw_vacuum_watch_step(struct qw_vacuum_watch *w, struct qw_db *db, struct qw_ops_stats *ops,
                          int64_t now_ms)
{
    if (now_ms < w->due_ms)
        return;
    w->due_ms = now_ms + QW_VACUUM_WATCH_EVERY_MS;
    struct qw_status_snapshot cur;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_status_load_snapshot(db, &cur, &err) != QW_OK) {
        char quoted[256];
        if (!w->failing)
            qw_log_warn("db.vacuum_watch_failed", "error=%s sqlstate=%s retry_ms=%d",
                        qw_log_quote(quoted, sizeof(quoted), err.msg),
                        err.sqlstate[0] ? err.sqlstate : "-", QW_VACUUM_WATCH_EVERY_MS);
        w->failing = true;
        return;
    }
    w->failing = false;
    publish(ops, &cur);
    switch (qw_vacuum_watch_change(&w->last, &cur)) {
    case QW_VACUUM_HELD:
        log_held(&cur);
        break;
    case QW_VACUUM_RELEASED:
        qw_log_info("db.vacuum_released", "kind=\"%s\" pid=%lld", w->last.kind,
                    (long long)w->last.pid);
        break;
    case QW_VACUUM_SAME:
        break;
    }
    w->last = cur;
}
