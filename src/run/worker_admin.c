/* The worker's admin server: hooks over struct qw_worker; see worker_admin.h. */
#include "run/worker_admin.h"
#include "admin/admin_http.h"
#include "common/clock.h"
#include "common/log.h"
#include "config/config.h"
#include "db/db.h"
#include "dlt/dlt_url.h"
#include "shared/shared.h"

#include <stdlib.h>
#include <string.h>

#define READY_DB_TIMEOUT_MS 2000 /* /readyz: the database must answer within this */

struct qw_worker_admin {
    const struct qw_config *cfg; /* read-only */
    struct qw_worker *w;         /* read through atomics only */
    struct qw_ops_stats *ops;    /* may be NULL */
    struct qw_admin_http *http;  /* the server */
    struct qw_dlt_url_list urls; /* the ledger nodes' URLs (metric labels) */
};

static int64_t load(atomic_llong *v)
{
    return (int64_t)atomic_load_explicit(v, memory_order_relaxed);
}

static void worker_snapshot(void *ctx, struct qw_metrics_snapshot *out)
{
    struct qw_worker_admin *a = ctx;
    struct qw_worker_stats *st = &a->w->stats;
    out->instance_id = a->w->instance_id;
    out->version = QW_VERSION;
    out->posts_accepted = load(&st->posts_accepted);
    out->posts_backpressure = load(&st->posts_backpressure);
    out->posts_invalid = load(&st->posts_invalid);
    out->posts_auth = load(&st->posts_auth);
    out->posts_failed = load(&st->posts_retry);
    out->final_committed = load(&st->final_committed);
    out->final_valid = load(&st->final_valid);
    out->final_invalid = load(&st->final_invalid);
    out->unknown_confirmed = load(&st->unknown_confirmed);
    out->in_flight = load(&st->jobs_busy);
    out->claims_held = load(&st->claims_held);
    out->cycles = load(&st->cycles);
    out->serialization_retries = load(&st->serialization_retries);
    out->claims_lost = load(&st->lost);
    out->flushes = load(&st->flushes);
    out->outcomes = load(&st->outcomes);
    out->capacity_in_flight = load(&st->capacity_in_flight);
    out->capacity_per_second = load(&st->capacity_per_second);
    out->capacity_target = load(&st->capacity_target);
    out->partitions_held = load(&st->capacity_partitions);
    out->capacity_waits = load(&st->capacity_waits);
    out->paused = atomic_load_explicit(&st->paused, memory_order_relaxed) != 0;
    out->stopping = atomic_load_explicit(&a->w->stop, memory_order_relaxed) != 0;
    int below = atomic_load_explicit(&a->w->yield_below, memory_order_relaxed);
    out->yielding = below != QW_PRIORITY_NONE;
    out->yield_below = out->yielding ? below : 0;
    out->last_cycle_age_ms = -1;
    static const char *const requests[2] = {"post", "status"};
    out->n_failures = 0;
    for (int r = 0; r < 2; r++) {
        for (int k = QW_DLT_FAIL_NONE + 1; k < QW_DLT_FAIL_COUNT; k++) {
            if (out->n_failures < QW_METRICS_FAILURES_MAX)
                out->failures[out->n_failures++] = (struct qw_metrics_failure){
                    requests[r], qw_dlt_failure_name((enum qw_dlt_failure)k),
                    load(&st->ledger_failures[r][k])};
        }
    }
    out->submit_waiting = load(&st->ready);
    int n_nodes = atomic_load_explicit(&st->n_nodes, memory_order_relaxed);
    out->n_nodes = 0;
    for (int i = 0; i < n_nodes && i < QW_METRICS_NODES_MAX && i < QW_DLT_MAX_NODES; i++) {
        struct qw_node_stats *ns = &st->nodes[i];
        out->nodes[out->n_nodes++] = (struct qw_metrics_node){
            .url = (size_t)i < a->urls.n ? a->urls.url[i] : NULL,
            .state = atomic_load_explicit(&ns->state, memory_order_relaxed),
            .latency_us = load(&ns->latency_us),
            .posts_in_flight = load(&ns->posts_in_flight),
            .window = load(&ns->window),
            .window_used = load(&ns->window_used),
            .first_look_ms = load(&ns->first_look_ms),
            .posts = load(&ns->posts),
            .polls = load(&ns->polls),
            .failures = load(&ns->failures),
            .suspect = load(&ns->suspect),
        };
    }
    int64_t failing_since = load(&st->outcomes_failing_since_ms);
    out->outcomes_failing_ms = failing_since > 0 ? qw_clock_mono_ms() - failing_since : 0;
    if (a->ops) {
        out->delayed = load(&a->ops->delayed);
        out->vacuum_holders = load(&a->ops->vacuum_holders);
        out->vacuum_xids_behind = load(&a->ops->vacuum_xids_behind);
        out->vacuum_open_s = load(&a->ops->vacuum_open_s);
        int64_t last = load(&a->ops->last_cycle_ok_ms);
        if (last > 0) {
            int64_t age = qw_clock_mono_ms() - last;
            out->last_cycle_age_ms = age > 0 ? age : 0;
        }
        qw_histogram_read(&a->ops->cycle_duration, &out->cycle_duration);
        qw_histogram_read(&a->ops->ledger_latency, &out->ledger_latency);
    }
}

/* /readyz's note: LISTEN wake-ups that do not arrive, while the worker polls. */
static void worker_detail(void *ctx, char *buf, size_t len)
{
    struct qw_worker_admin *a = ctx;
    bool lost = atomic_load_explicit(&a->w->stats.notify_lost, memory_order_relaxed) != 0;
    snprintf(buf, len, "%s",
             lost ? "wake-ups: not delivered (the LISTEN self-test failed or the listening "
                    "connection is lost); polling every cycle"
                  : "");
}

/* A fresh connection per ping: the worker's connections stay with their threads. */
static int db_ping(void *ctx, struct qw_error *err)
{
    struct qw_worker_admin *a = ctx;
    const struct qw_config *cfg = a->cfg;
    struct qw_db_opts opts = {
        .conninfo = cfg->db_conninfo,
        .password = cfg->db_password,
        .app_name = "queuer-admin",
        .connect_timeout_s = 2,
        .query_timeout_ms = READY_DB_TIMEOUT_MS,
    };
    struct qw_db *db = NULL;
    int rc = qw_db_connect(&db, &opts, err);
    if (rc == QW_OK)
        rc = qw_db_query_sql(db, "SELECT 1", 0, NULL, NULL, err);
    qw_db_close(db);
    return rc;
}

int qw_worker_admin_start(const struct qw_config *cfg, struct qw_worker *w,
                          struct qw_ops_stats *ops, struct qw_worker_admin **out,
                          struct qw_error *err)
{
    *out = NULL;
    if (!cfg->admin_listen || strcmp(cfg->admin_listen, "off") == 0) {
        qw_log_info("admin.off", "listen=off");
        return QW_OK;
    }
    struct qw_worker_admin *a = calloc(1, sizeof(*a));
    if (!a)
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    a->cfg = cfg;
    a->w = w;
    a->ops = ops;
    if (qw_dlt_url_list_parse(cfg->dlt_url, &a->urls, NULL) != QW_OK)
        memset(&a->urls, 0, sizeof(a->urls)); /* labels without URLs; run checked the list */
    int64_t max_age = 3 * (int64_t)cfg->worker_cycle_ms + 2000;
    if (max_age > cfg->worker_lease_ms)
        max_age = cfg->worker_lease_ms;
    struct qw_admin_hooks hooks = {
        .snapshot = worker_snapshot,
        .db_ping = db_ping,
        .detail = worker_detail,
        .ctx = a,
        .max_cycle_age_ms = ops ? max_age : 0,
    };
    int rc = qw_admin_http_start(&a->http, cfg->admin_listen, &hooks, err);
    if (rc != QW_OK) {
        qw_dlt_url_list_free(&a->urls);
        free(a);
        if (rc == QW_ERR_IO) {
            rc = QW_ERR_CONFIG; /* a port clash is fixed in the configuration */
            if (err)
                err->rc = rc;
        }
        return rc;
    }
    qw_log_info("admin.listening", "listen=%s port=%d ready_max_cycle_age_ms=%lld",
                cfg->admin_listen, qw_admin_http_port(a->http), (long long)hooks.max_cycle_age_ms);
    *out = a;
    return QW_OK;
}

void qw_worker_admin_stop(struct qw_worker_admin *a)
{
    if (!a)
        return;
    qw_admin_http_stop(a->http);
    qw_dlt_url_list_free(&a->urls);
    free(a);
}
