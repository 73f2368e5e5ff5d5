/* The claims transaction; see claims.h. */
#include "worker/claims.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct claims_txn {
    const struct qw_claims_params *p; /* inputs */
    struct qw_claims_result *out;     /* collected, reset on every attempt */
};

static int append_held(struct qw_claims_result *r, const char *service_id, int64_t epoch)
{
    if (r->n_held == r->cap_held) {
        size_t cap = r->cap_held ? r->cap_held * 2 : 256;
        struct qw_claim *grown = realloc(r->held, cap * sizeof(*grown));
        if (!grown)
            return QW_ERR_NOMEM;
        r->held = grown;
        r->cap_held = cap;
    }
    struct qw_claim *c = &r->held[r->n_held++];
    snprintf(c->service_id, sizeof(c->service_id), "%s", service_id);
    c->epoch = epoch;
    return QW_OK;
}

static int collect_held(struct qw_claims_result *r, struct qw_db_res *res, struct qw_error *err)
{
    for (int i = 0; i < qw_db_res_rows(res); i++) {
        if (append_held(r, qw_db_res_get(res, i, 0), qw_db_res_int(res, i, 1)) != QW_OK)
            return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }
    return QW_OK;
}

static int claims_body(void *conn, void *arg, struct qw_error *err)
{
    struct qw_db *db = conn;
    struct claims_txn *t = arg;
    const struct qw_claims_params *p = t->p;
    struct qw_claims_result *r = t->out;
    r->n_held = 0;
    r->freed = r->released = r->acquired = 0;
    r->lease_left_ms = INT64_MAX;

    char lease[16], hard[16], share[16], want[16];
    snprintf(lease, sizeof(lease), "%d", p->lease_ms);
    snprintf(hard, sizeof(hard), "%d", p->hard_expiry_ms);
    snprintf(share, sizeof(share), "%d", p->acquire ? r->share : 0);

    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "claims_maintain", 0, NULL, &res, err);
    if (rc != QW_OK)
        return rc;
    r->freed = qw_db_res_rows(res);
    qw_db_res_free(res);

    if (p->housekeeping) {
        const char *release_params[] = {p->instance_id, share};
        rc = qw_db_query(db, "claims_release_idle", 2, release_params, &res, err);
        if (rc != QW_OK)
            return rc;
        r->released = qw_db_res_rows(res);
        qw_db_res_free(res);
    }

    const char *renew_params[] = {p->instance_id, lease, hard};
    rc = qw_db_query(db, "claims_renew", 3, renew_params, NULL, err);
    if (rc != QW_OK)
        return rc;
    const char *held_params[] = {p->instance_id};
    rc = qw_db_query(db, "claims_held", 1, held_params, &res, err);
    if (rc != QW_OK)
        return rc;
    rc = collect_held(r, res, err);
    for (int i = 0; i < qw_db_res_rows(res); i++) {
        int64_t left = qw_db_res_int(res, i, 2);
        if (left < r->lease_left_ms)
            r->lease_left_ms = left;
    }
    qw_db_res_free(res);
    if (rc != QW_OK || !p->acquire)
        return rc;

    int n = r->share - (int)r->n_held;
    if (n <= 0 || (r->free_with_work == 0 && r->freed == 0))
        return QW_OK;
    snprintf(want, sizeof(want), "%d", n);
    const char *acquire_params[] = {p->instance_id, want, lease, hard};
    rc = qw_db_query(db, "claims_acquire", 4, acquire_params, &res, err);
    if (rc != QW_OK)
        return rc;
    size_t before = r->n_held;
    rc = collect_held(r, res, err);
    r->acquired = (int)(r->n_held - before);
    if (r->acquired > 0 && p->lease_ms < r->lease_left_ms)
        r->lease_left_ms = p->lease_ms;
    qw_db_res_free(res);
    return rc;
}

/* The advisory fair share, read outside the serializable transaction. */
static int read_share(struct qw_db *db, const struct qw_claims_params *p,
                      struct qw_claims_result *r, struct qw_error *err)
{
    char live[16], slack[16], maxc[16];
    snprintf(live, sizeof(live), "%d", p->liveness_ms);
    snprintf(slack, sizeof(slack), "%d", p->slack);
    snprintf(maxc, sizeof(maxc), "%d", p->max_claims);
    const char *params[] = {p->instance_id, live, slack, maxc};
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "claims_share", 4, params, &res, err);
    if (rc != QW_OK)
        return rc;
    r->share = (int)qw_db_res_int(res, 0, 0);
    r->with_work = qw_db_res_int(res, 0, 1);
    r->live = (int)qw_db_res_int(res, 0, 2);
    r->free_with_work = qw_db_res_int(res, 0, 3);
    qw_db_res_free(res);
    return QW_OK;
}

int qw_claims_cycle(struct qw_db *db, const struct qw_txn_policy *policy,
                    const struct qw_claims_params *p, struct qw_claims_result *out,
                    struct qw_txn_stats *stats, struct qw_error *err)
{
    struct claims_txn t = {.p = p, .out = out};
    /* Without housekeeping the share of the last one stands. */
    int rc = p->housekeeping ? read_share(db, p, out, err) : QW_OK;
    if (rc != QW_OK)
        return rc;
    return qw_txn_run(&qw_txn_db_ops, db, policy, claims_body, &t, stats, err);
}

void qw_claims_result_free(struct qw_claims_result *r)
{
    free(r->held);
    memset(r, 0, sizeof(*r));
}

int qw_claims_release_all(struct qw_db *db, const char *instance_id, int *released,
                          struct qw_error *err)
{
    /* One transaction: others see the instance stopped (so it no longer
     * counts in their fair share) at the moment its claims become free. */
    struct qw_db_res *res = NULL;
    const char *params[] = {instance_id};
    int rc = qw_db_exec(db, "BEGIN", err);
    if (rc == QW_OK)
        rc = qw_db_query(db, "instance_stop", 1, params, NULL, err);
    if (rc == QW_OK)
        rc = qw_db_query(db, "claims_release_all", 1, params, &res, err);
    int n = rc == QW_OK ? qw_db_res_rows(res) : 0;
    qw_db_res_free(res);
    /* Wake the other workers (delivered at COMMIT) so they take over at once. */
    if (rc == QW_OK && n > 0)
        rc = qw_db_exec(db, "NOTIFY queuer_work", err);
    if (rc == QW_OK)
        rc = qw_db_exec(db, "COMMIT", err);
    if (rc != QW_OK) {
        struct qw_error ignored;
        if (qw_db_ok(db))
            qw_db_exec(db, "ROLLBACK", &ignored);
        return rc;
    }
    if (released)
        *released = n;
    return QW_OK;
}
