/*
 * SIGHUP: re-read the configuration and apply what a running worker can
 * change (see run.h). Runs on the queuer thread, which owns the admin
 * server; the submitter sees the new 429 pause limits through atomics.
 */
#include "run/reload.h"
#include "common/log.h"
#include "run/worker_admin.h"

#include <stdlib.h>
#include <string.h>

struct reload {
    struct qw_worker *w; /* the worker being reloaded */
    int applied;         /* keys applied */
    int restart;         /* keys that need a restart */
};

/*
 * Restarts the admin server on `listen`; back on the old address when that
 * fails. The server keeps a pointer to the config it was started with, so
 * it is always w->admin_cfg (whose admin_listen this function owns).
 */
static int restart_admin(struct qw_worker *w, const char *listen)
{
    char *copy = strdup(listen);
    if (!copy)
        return QW_ERR_NOMEM;
    char *old = w->admin_cfg.admin_listen;
    /* Stop first: the new address may be the old port on another interface. */
    qw_worker_admin_stop(w->admin);
    w->admin = NULL;
    w->admin_cfg.admin_listen = copy;
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_worker_admin_start(&w->admin_cfg, w, &w->stats.ops, &w->admin, &err);
    if (rc == QW_OK) {
        free(old);
        return QW_OK;
    }
    char quoted[600];
    qw_log_error("config.reload_admin_failed", "listen=%s error=%s kept=%s", listen,
                 qw_log_quote(quoted, sizeof(quoted), err.msg), old);
    w->admin_cfg.admin_listen = old;
    free(copy);
    qw_error_clear(&err);
    if (qw_worker_admin_start(&w->admin_cfg, w, &w->stats.ops, &w->admin, &err) != QW_OK)
        qw_log_error("admin.lost", "error=%s until=next reload",
                     qw_log_quote(quoted, sizeof(quoted), err.msg));
    return rc;
}

static void apply_key(void *ctx, const char *section, const char *name, enum qw_config_kind kind,
                      long long num, const char *str, const char *origin)
{
    struct reload *r = ctx;
    char full[128], value[300];
    snprintf(full, sizeof(full), "%s.%s", section, name);
    if (kind == QW_CONFIG_SECRET)
        snprintf(value, sizeof(value), "<%s>", num ? "changed" : "unset");
    else if (kind == QW_CONFIG_STRING)
        qw_log_quote(value, sizeof(value), str);
    else
        snprintf(value, sizeof(value), "%lld", num);
    if (kind == QW_CONFIG_SECRET || !qw_config_reloadable(section, name)) {
        r->restart++;
        qw_log_warn("config.needs_restart", "key=%s new=%s from=%s", full, value,
                    origin ? origin : "default");
        return;
    }
    int rc = QW_OK;
    if (strcmp(full, "log.level") == 0) {
        enum qw_log_level level = QW_LOG_INFO;
        if (qw_log_level_parse(str, &level) != QW_OK)
            level = QW_LOG_INFO; /* config.c accepts only the four names */
        qw_log_set_level(level);
    } else if (strcmp(full, "admin.listen") == 0) {
        rc = restart_admin(r->w, str);
    } else if (strcmp(full, "dlt.pause_base_ms") == 0) {
        atomic_store(&r->w->pause_base_ms, (int)num);
    } else if (strcmp(full, "dlt.pause_max_ms") == 0) {
        atomic_store(&r->w->pause_max_ms, (int)num);
    }
    if (rc == QW_OK) {
        r->applied++;
        qw_log_info("config.reloaded", "key=%s value=%s from=%s", full, value,
                    origin ? origin : "default");
    }
}

void qw_worker_apply_reload(struct qw_worker *w)
{
    if (!w->reload_load) {
        qw_log_warn("config.reload_unsupported", "signal=SIGHUP");
        return;
    }
    struct qw_config next;
    struct qw_error err;
    qw_error_clear(&err);
    if (w->reload_load(w->reload_ctx, &next, &err) != QW_OK) {
        char quoted[600];
        qw_log_error("config.reload_failed", "error=%s kept=running configuration",
                     qw_log_quote(quoted, sizeof(quoted), err.msg));
        return;
    }
    /* Compare with what is in force: the start-up values, as reloaded so far. */
    struct qw_config in_force = *w->cfg;
    in_force.admin_listen = w->admin_cfg.admin_listen;
    in_force.dlt_pause_base_ms = atomic_load(&w->pause_base_ms);
    in_force.dlt_pause_max_ms = atomic_load(&w->pause_max_ms);
    char level[16] = "info";
    snprintf(level, sizeof(level), "%s", qw_log_level_name());
    in_force.log_level = level;
    struct reload r = {.w = w};
    qw_config_diff(&in_force, &next, apply_key, &r);
    qw_log_info("config.reload", "signal=SIGHUP applied=%d needs_restart=%d", r.applied, r.restart);
    qw_config_free(&next);
}
