/* The claims transaction; see claims.h. */
#include "queuer/claims.h"

#include "common/log.h"
#include "ingest/tsv.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct claims_txn {
    const struct qw_claims_params *p; /* inputs */
    struct qw_claims_result *out;     /* collected, reset on every attempt */
    long asked;                       /* claims the last attempt asked for */
};

static int append_claim(struct qw_claim **list, size_t *n, size_t *cap, const char *service_id,
                        int64_t epoch)
{
    if (*n == *cap) {
        size_t grown_cap = *cap ? *cap * 2 : 256;
        struct qw_claim *grown = realloc(*list, grown_cap * sizeof(*grown));
        if (!grown)
            return QW_ERR_NOMEM;
        *list = grown;
        *cap = grown_cap;
    }
    struct qw_claim *c = &(*list)[(*n)++];
    snprintf(c->service_id, sizeof(c->service_id), "%s", service_id);
    c->epoch = epoch;
    return QW_OK;
}

/* Appends column 0 (service) and, when `epoch_col` >= 0, that column (epoch) of every row. */
static int collect(struct qw_claim **list, size_t *n, size_t *cap, struct qw_db_res *res,
                   int epoch_col, struct qw_error *err)
{
    for (int i = 0; i < qw_db_res_rows(res); i++) {
        int64_t epoch = epoch_col >= 0 ? qw_db_res_int(res, i, epoch_col) : 0;
        if (append_claim(list, n, cap, qw_db_res_get(res, i, 0), epoch) != QW_OK)
            return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }
    return QW_OK;
}

static int release(struct qw_db *db, const char *name, int n, const char *const *params,
                   struct qw_claims_result *r, struct qw_error *err)
{
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, name, n, params, &res, err);
    if (rc == QW_OK)
        rc = collect(&r->released, &r->n_released, &r->cap_released, res, -1, err);
    qw_db_res_free(res);
    return rc;
}

/*
 * Maintenance's rows: (service, new claimant or NULL when freed, epoch).
 * What it handed to us is a new claim of ours; what went to another live
 * instance is counted, so the caller wakes the receivers.
 */
static int take_over(const struct qw_claims_params *p, struct qw_claims_result *r,
                     struct qw_db_res *res, struct qw_error *err)
{
    r->freed = qw_db_res_rows(res);
    for (int i = 0; i < r->freed; i++) {
        if (qw_db_res_isnull(res, i, 1))
            continue;
        if (strcmp(qw_db_res_get(res, i, 1), p->instance_id) != 0) {
            r->handed_over++;
            continue;
        }
        if (append_claim(&r->claims, &r->n_claims, &r->cap_claims, qw_db_res_get(res, i, 0),
                         qw_db_res_int(res, i, 2)) != QW_OK)
            return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
        r->taken++;
    }
    return QW_OK;
}

/*
 * Maintenance, in a READ COMMITTED transaction of its own: the claim rows
 * are locked and their conditions re-read at their newest version, which
 * is all the decision needs (docs/CLAIMS.md). In the serializable claims
 * transaction it read a dead worker's thousands of claims, so its
 * predicate locks covered the whole table and every other worker's claim
 * write made it re-run.
 */
static int maintain_body(void *conn, void *arg, struct qw_error *err)
{
    struct qw_db *db = conn;
    struct claims_txn *t = arg;
    const struct qw_claims_params *p = t->p;
    struct qw_claims_result *r = t->out;
    r->n_claims = 0;
    r->freed = r->taken = r->handed_over = 0;

    char lease[16], hard[16], max_freed[16], max_each[16];
    snprintf(lease, sizeof(lease), "%d", p->lease_ms);
    snprintf(hard, sizeof(hard), "%d", p->hard_expiry_ms);
    snprintf(max_freed, sizeof(max_freed), "%d", 10 * p->max_changes);
    snprintf(max_each, sizeof(max_each), "%d", p->max_changes);
    struct qw_db_res *res = NULL;
    const char *params[] = {p->instance_id, max_freed, lease, hard, max_each};
    int rc = qw_db_query(db, "claims_maintain", 5, params, &res, err);
    if (rc != QW_OK)
        return rc;
    rc = take_over(p, r, res, err);
    qw_db_res_free(res);
    if (rc != QW_OK || r->freed == r->taken)
        return rc;
    /* Wake the others (at COMMIT): a lease ran out, its services are free
     * or theirs now, and the fair share changed. Not a service name, so no
     * full fetch; "handover" also makes them read their claims again. */
    return qw_db_exec(db,
                      r->handed_over > 0 ? "NOTIFY queuer_work, '" QW_CLAIMS_HANDOVER "'"
                                         : "NOTIFY queuer_work, 'claims'",
                      err);
}

static int claims_body(void *conn, void *arg, struct qw_error *err)
{
    struct qw_db *db = conn;
    struct claims_txn *t = arg;
    const struct qw_claims_params *p = t->p;
    struct qw_claims_result *r = t->out;
    r->n_claims = (size_t)r->taken; /* maintenance's come first and stay */
    r->n_released = 0;
    r->acquired = 0;
    t->asked = 0;

    char lease[16], hard[16], max[16], want[16], start[16], level[16];
    snprintf(lease, sizeof(lease), "%d", p->lease_ms);
    snprintf(hard, sizeof(hard), "%d", p->hard_expiry_ms);
    snprintf(max, sizeof(max), "%d", p->max_changes);

    int rc;
    struct qw_db_res *res = NULL;
    if (p->housekeeping) {
        const char *idle_params[] = {p->instance_id, max};
        rc = release(db, "claims_release_idle", 2, idle_params, r, err);
        if (rc != QW_OK)
            return rc;
    }
    if (p->release) {
        const char *release_params[] = {p->instance_id, p->release};
        rc = release(db, "claims_release", 2, release_params, r, err);
        if (rc != QW_OK)
            return rc;
    }
    if (p->reconcile) {
        /* the list of every claim we hold includes those maintenance took */
        r->n_claims = 0;
        const char *held_params[] = {p->instance_id};
        rc = qw_db_query(db, "claims_held", 1, held_params, &res, err);
        if (rc != QW_OK)
            return rc;
        rc = collect(&r->claims, &r->n_claims, &r->cap_claims, res, 1, err);
        qw_db_res_free(res);
        if (rc != QW_OK)
            return rc;
    }
    long held = p->reconcile ? (long)r->n_claims : (long)p->held - (long)r->n_released + r->taken;
    if (!p->acquire || (r->free_with_work == 0 && r->freed == 0))
        return QW_OK;
    long n = (long)r->share - held;
    if (n > p->max_changes)
        n = p->max_changes;
    if (n <= 0)
        return QW_OK;
    t->asked = n;
    snprintf(start, sizeof(start), "%d", (int32_t)(uint32_t)qw_rng_next(p->rng));
    /* One priority per call, highest first: the next lower one present
     * only while a call filled less than it was asked (docs/CLAIMS.md). */
    for (int top = QW_PRIORITY_MAX; r->acquired < n;) {
        snprintf(want, sizeof(want), "%ld", n - r->acquired);
        snprintf(level, sizeof(level), "%d", top);
        const char *acquire_params[] = {p->instance_id, want, lease, hard, start, level};
        rc = qw_db_query(db, "claims_acquire", 6, acquire_params, &res, err);
        if (rc != QW_OK)
            return rc;
        int got = qw_db_res_rows(res);
        /* none left, or every one locked by another claimer; or no lower
         * priority to go on with */
        bool last = got == 0 || qw_db_res_isnull(res, 0, 3);
        if (!last)
            top = (int)qw_db_res_int(res, 0, 3);
        rc = collect(&r->claims, &r->n_claims, &r->cap_claims, res, 1, err);
        qw_db_res_free(res);
        if (rc != QW_OK)
            return rc;
        r->acquired += got;
        if (last)
            break;
    }
    return QW_OK;
}

/* The advisory fair share, read outside the serializable transaction. */
static int read_share(struct qw_db *db, const struct qw_claims_params *p,
                      struct qw_claims_result *r, struct qw_error *err)
{
    char slack[16], maxc[16], lease[16];
    snprintf(slack, sizeof(slack), "%d", p->slack);
    snprintf(maxc, sizeof(maxc), "%d", p->max_claims);
    snprintf(lease, sizeof(lease), "%d", p->lease_ms);
    const char *params[] = {p->instance_id, slack, maxc, lease};
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "claims_share", 4, params, &res, err);
    if (rc != QW_OK)
        return rc;
    r->share = (int)qw_db_res_int(res, 0, 0);
    r->with_work = qw_db_res_int(res, 0, 1);
    r->live = (int)qw_db_res_int(res, 0, 2);
    r->free_with_work = qw_db_res_int(res, 0, 3);
    r->lapsed = strcmp(qw_db_res_get(res, 0, 4), "t") == 0;
    qw_db_res_free(res);
    return QW_OK;
}

int qw_claims_lease(struct qw_db *db, const struct qw_claims_params *p,
                    struct qw_claims_result *out, struct qw_error *err)
{
    char lease[16], hard[16], held[24];
    snprintf(lease, sizeof(lease), "%d", p->lease_ms);
    snprintf(hard, sizeof(hard), "%d", p->hard_expiry_ms);
    snprintf(held, sizeof(held), "%zu", p->held);
    const char *params[] = {p->instance_id, lease, hard, held};
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "claims_lease", 4, params, &res, err);
    if (rc == QW_OK && qw_db_res_rows(res) != 1)
        rc = qw_error_set(err, QW_ERR_DB, "instance %s is not registered", p->instance_id);
    if (rc == QW_OK)
        out->peer_lease_ms = qw_db_res_isnull(res, 0, 1) ? -1 : qw_db_res_int(res, 0, 1);
    qw_db_res_free(res);
    return rc;
}

void qw_claims_announce(struct qw_db *db)
{
    struct qw_error err;
    qw_error_clear(&err);
    /* Not a service name and not empty: a claims cycle, no full fetch. */
    if (qw_db_exec(db, "NOTIFY queuer_work, 'claims'", &err) != QW_OK)
        qw_log_debug("claims.notify_failed", "error=%s",
                     qw_log_quote((char[300]){0}, 300, err.msg));
}

static int by_service_id(const void *a, const void *b)
{
    return strcmp(((const struct qw_claim *)a)->service_id,
                  ((const struct qw_claim *)b)->service_id);
}

/*
 * A claim the transaction gave back and then took again (a surplus
 * release, then claiming up to a share that had grown: the service was
 * free with work by then) is ours after COMMIT, at its new epoch: it is
 * listed among the claims only. Listed as released too, the caller would
 * forget a claim it holds, and nobody would serve the service until the
 * caller next read all its claims.
 */
#define RETAKEN (-1)

static void drop_retaken(struct qw_claims_result *r)
{
    if (r->n_released == 0 || r->n_claims == 0)
        return;
    qsort(r->released, r->n_released, sizeof(*r->released), by_service_id);
    size_t retaken = 0;
    for (size_t i = 0; i < r->n_claims; i++) {
        struct qw_claim *hit =
            bsearch(&r->claims[i], r->released, r->n_released, sizeof(*r->released), by_service_id);
        if (hit && hit->epoch != RETAKEN) {
            hit->epoch = RETAKEN; /* (a released claim's epoch is otherwise unused) */
            retaken++;
        }
    }
    if (retaken == 0)
        return;
    size_t kept = 0;
    for (size_t i = 0; i < r->n_released; i++) {
        if (r->released[i].epoch != RETAKEN)
            r->released[kept++] = r->released[i];
    }
    r->n_released = kept;
}

int qw_claims_cycle(struct qw_db *db, const struct qw_txn_policy *policy,
                    const struct qw_txn_policy *maintain_policy, const struct qw_claims_params *p,
                    struct qw_claims_result *out, struct qw_txn_stats *stats, struct qw_error *err)
{
    struct claims_txn t = {.p = p, .out = out};
    /* Without housekeeping the share of the last one stands. */
    int rc = p->housekeeping ? read_share(db, p, out, err) : QW_OK;
    if (rc != QW_OK)
        return rc;
    /* Maintenance only when the share just read names a lapsed holder, or
     * when it was not read: most cycles are woken by new work, and an idle
     * maintenance transaction was three statements and two round trips
     * in front of every claim. A lease that runs out after the read is
     * seen by the next cycle (the lease call schedules one for it). */
    if (p->housekeeping && !out->lapsed) {
        out->n_claims = 0;
        out->freed = out->taken = out->handed_over = 0;
    } else {
        rc = qw_txn_run(&qw_txn_db_ops, db, maintain_policy, maintain_body, &t, NULL, err);
        if (rc != QW_OK)
            return rc;
    }
    rc = qw_txn_run(&qw_txn_db_ops, db, policy, claims_body, &t, stats, err);
    if (rc == QW_OK)
        drop_retaken(out);
    /* Claiming found fewer than it asked for: none left until the next look. */
    if (rc == QW_OK && out->acquired < t.asked)
        out->free_with_work = 0;
    return rc;
}

void qw_claims_result_free(struct qw_claims_result *r)
{
    free(r->claims);
    free(r->released);
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
