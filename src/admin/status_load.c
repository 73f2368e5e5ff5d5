/* Loads the `queuer status` report from the operator views; see status.h. */
#include "admin/status.h"
#include "db/db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void copy(char *dst, size_t len, const char *src)
{
    snprintf(dst, len, "%s", src ? src : "");
}

static int load_counts(struct qw_db *db, struct qw_status_report *r, struct qw_error *err)
{
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "ops_status_counts", 0, NULL, &res, err);
    if (rc != QW_OK)
        return rc;
    if (qw_db_res_rows(res) != 1) {
        qw_db_res_free(res);
        return qw_error_set(err, QW_ERR_DB, "status counts: expected one row");
    }
    struct qw_status_counts *c = &r->counts;
    copy(r->at, sizeof(r->at), qw_db_res_get(res, 0, 0));
    int64_t *cols[] = {
        &c->waiting,
        &c->submitting,
        &c->pending,
        &c->delayed,
        &c->parked,
        &c->unknown,
        &c->oldest_age_s,
        &c->services,
        &c->services_with_work,
        &c->services_claimed,
        &c->services_unclaimed,
        &c->services_blocked,
        &c->stuck,
        &c->committed_1h,
        &c->valid_1h,
        &c->invalid_1h,
        &c->cancelled_1h,
        &c->submissions_1h,
        &c->committed_5m,
        &c->submissions_5m,
    };
    for (int i = 0; i < (int)(sizeof(cols) / sizeof(cols[0])); i++)
        *cols[i] = qw_db_res_int(res, 0, i + 1);
    if (qw_db_res_isnull(res, 0, 7))
        c->oldest_age_s = -1;
    qw_db_res_free(res);
    return QW_OK;
}

static int load_instances(struct qw_db *db, int max, struct qw_status_report *r,
                          struct qw_error *err)
{
    char limit[16];
    snprintf(limit, sizeof(limit), "%d", max);
    const char *params[] = {limit};
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "ops_status_instances", 1, params, &res, err);
    if (rc != QW_OK)
        return rc;
    int n = qw_db_res_rows(res);
    r->instances = calloc((size_t)n + 1, sizeof(*r->instances));
    if (!r->instances) {
        qw_db_res_free(res);
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        struct qw_status_instance *in = &r->instances[i];
        copy(in->instance_id, sizeof(in->instance_id), qw_db_res_get(res, i, 0));
        copy(in->host, sizeof(in->host), qw_db_res_get(res, i, 1));
        in->pid = qw_db_res_int(res, i, 2);
        copy(in->version, sizeof(in->version), qw_db_res_get(res, i, 3));
        copy(in->state, sizeof(in->state), qw_db_res_get(res, i, 4));
        in->heartbeat_age_ms = qw_db_res_int(res, i, 5);
        in->claims_held = qw_db_res_int(res, i, 6);
        in->claims_lapsed = qw_db_res_int(res, i, 7);
        copy(in->notifications, sizeof(in->notifications), qw_db_res_get(res, i, 8));
    }
    r->n_instances = (size_t)n;
    qw_db_res_free(res);
    return QW_OK;
}

/* The shared capacity each listed instance holds (live targets only). */
static int load_capacity(struct qw_db *db, struct qw_status_report *r, struct qw_error *err)
{
    const char *params[] = {NULL};
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "ops_capacity_instances", 1, params, &res, err);
    if (rc != QW_OK)
        return rc;
    for (int i = 0; i < qw_db_res_rows(res); i++) {
        if (strcmp(qw_db_res_get(res, i, 2), "live") != 0)
            continue;
        for (size_t k = 0; k < r->n_instances; k++) {
            struct qw_status_instance *in = &r->instances[k];
            if (in->capacity || strcmp(in->instance_id, qw_db_res_get(res, i, 1)) != 0)
                continue;
            in->capacity = true;
            in->cap_target = qw_db_res_int(res, i, 3);
            in->cap_partitions = qw_db_res_int(res, i, 5);
            in->cap_in_flight = qw_db_res_isnull(res, i, 7) ? -1 : qw_db_res_int(res, i, 7);
            in->cap_per_second = qw_db_res_isnull(res, i, 8) ? -1 : qw_db_res_int(res, i, 8);
        }
    }
    qw_db_res_free(res);
    return QW_OK;
}

static int load_stuck(struct qw_db *db, int max, struct qw_status_report *r, struct qw_error *err)
{
    char limit[16];
    snprintf(limit, sizeof(limit), "%d", max);
    const char *params[] = {limit};
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "ops_status_stuck", 1, params, &res, err);
    if (rc != QW_OK)
        return rc;
    int n = qw_db_res_rows(res);
    r->stuck = calloc((size_t)n + 1, sizeof(*r->stuck));
    if (!r->stuck) {
        qw_db_res_free(res);
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        struct qw_status_stuck *s = &r->stuck[i];
        copy(s->batch_id, sizeof(s->batch_id), qw_db_res_get(res, i, 0));
        copy(s->service_id, sizeof(s->service_id), qw_db_res_get(res, i, 1));
        copy(s->state, sizeof(s->state), qw_db_res_get(res, i, 2));
        copy(s->reasons, sizeof(s->reasons), qw_db_res_get(res, i, 3));
        s->attempts = qw_db_res_int(res, i, 4);
        s->stuck_for_s = qw_db_res_int(res, i, 5);
        s->waiting_behind = qw_db_res_int(res, i, 6);
        copy(s->claimant, sizeof(s->claimant), qw_db_res_get(res, i, 7));
        copy(s->last_error, sizeof(s->last_error), qw_db_res_get(res, i, 8));
    }
    r->n_stuck = (size_t)n;
    qw_db_res_free(res);
    return QW_OK;
}

static int load_nodes(struct qw_db *db, int max, struct qw_status_report *r, struct qw_error *err)
{
    char limit[16];
    snprintf(limit, sizeof(limit), "%d", max);
    const char *params[] = {limit};
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "ops_status_nodes", 1, params, &res, err);
    if (rc != QW_OK)
        return rc;
    int n = qw_db_res_rows(res);
    r->nodes = calloc((size_t)n + 1, sizeof(*r->nodes));
    if (!r->nodes) {
        qw_db_res_free(res);
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        struct qw_status_node *nd = &r->nodes[i];
        copy(nd->instance_id, sizeof(nd->instance_id), qw_db_res_get(res, i, 0));
        nd->node = qw_db_res_int(res, i, 1);
        copy(nd->url, sizeof(nd->url), qw_db_res_get(res, i, 2));
        copy(nd->state, sizeof(nd->state), qw_db_res_get(res, i, 3));
        nd->latency_us = qw_db_res_int(res, i, 4);
        nd->posts_in_flight = qw_db_res_int(res, i, 5);
        nd->posts = qw_db_res_int(res, i, 6);
        nd->failures = qw_db_res_int(res, i, 7);
        nd->reported_age_s = qw_db_res_int(res, i, 8);
        nd->window = qw_db_res_int(res, i, 9);
        nd->window_used = qw_db_res_int(res, i, 10);
    }
    r->n_nodes = (size_t)n;
    qw_db_res_free(res);
    return QW_OK;
}

int qw_status_load_snapshot(struct qw_db *db, struct qw_status_snapshot *s, struct qw_error *err)
{
    memset(s, 0, sizeof(*s));
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "ops_status_snapshot", 0, NULL, &res, err);
    if (rc != QW_OK)
        return rc;
    if (qw_db_res_rows(res) == 1) {
        s->holders = qw_db_res_int(res, 0, 0);
        copy(s->kind, sizeof(s->kind), qw_db_res_get(res, 0, 1));
        s->pid = qw_db_res_int(res, 0, 2);
        copy(s->role, sizeof(s->role), qw_db_res_get(res, 0, 3));
        copy(s->application, sizeof(s->application), qw_db_res_get(res, 0, 4));
        copy(s->state, sizeof(s->state), qw_db_res_get(res, 0, 5));
        s->xids_behind = qw_db_res_int(res, 0, 6);
        s->open_s = qw_db_res_isnull(res, 0, 7) ? -1 : qw_db_res_int(res, 0, 7);
    }
    qw_db_res_free(res);
    return QW_OK;
}

int qw_status_load(struct qw_db *db, int max_instances, int max_stuck, struct qw_status_report *r,
                   struct qw_error *err)
{
    memset(r, 0, sizeof(*r));
    int rc = load_counts(db, r, err);
    if (rc == QW_OK)
        rc = load_instances(db, max_instances, r, err);
    if (rc == QW_OK)
        rc = load_capacity(db, r, err);
    if (rc == QW_OK)
        rc = load_stuck(db, max_stuck, r, err);
    if (rc == QW_OK)
        rc = load_nodes(db, max_instances * 16, r, err);
    if (rc == QW_OK)
        rc = qw_status_load_snapshot(db, &r->snapshot, err);
    if (rc != QW_OK)
        qw_status_free(r);
    return rc;
}

void qw_status_free(struct qw_status_report *r)
{
    free(r->instances);
    free(r->stuck);
    free(r->nodes);
    memset(r, 0, sizeof(*r));
}
