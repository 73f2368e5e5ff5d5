/* The claims transaction; see claims.h. */
#include "queuer/claims.h"
#include "queuer/claims_plan.h"

#include "common/log.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Pickup gives out at most this many times max_changes claims per call:
 * one worker picks at a time, for every live instance. */
#define PICKUP_FACTOR 10

struct claims_txn {
    const struct qw_claims_params *p; /* inputs */
    struct qw_claims_result *out;     /* collected, reset on every attempt */
    size_t base;                      /* claims listed before pickup (maintenance's, or
                                         the read of all ours); its new claims follow them */
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

/* Gives claims back; rows are (service, whether it has work). */
static int release(struct qw_db *db, const char *name, int n, const char *const *params,
                   struct qw_claims_result *r, struct qw_error *err)
{
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, name, n, params, &res, err);
    if (rc == QW_OK)
        rc = collect(&r->released, &r->n_released, &r->cap_released, res, -1, err);
    for (int i = 0; rc == QW_OK && i < qw_db_res_rows(res); i++)
        r->released_with_work += qw_db_res_get(res, i, 1)[0] == 't';
    qw_db_res_free(res);
    return rc;
}

/* Whether the claims transaction picks up free services with work. */
static bool pickup_due(const struct qw_claims_params *p, const struct qw_claims_result *r)
{
    return qw_claims_txn_due(p->acquire, r->free_with_work);
}

/*
 * Maintenance's rows: (service, new claimant, epoch). What it handed to us
 * is a new claim of ours; what went to another live instance is counted
 * (the statement woke the receivers).
 */
static int take_over(const struct qw_claims_params *p, struct qw_claims_result *r,
                     struct qw_db_res *res, struct qw_error *err)
{
    r->freed = qw_db_res_rows(res);
    for (int i = 0; i < r->freed; i++) {
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
    r->maintain_more = false;

    char lease[16], hard[16], max_freed[16], max_each[16], grace[16];
    snprintf(lease, sizeof(lease), "%d", p->lease_ms);
    snprintf(hard, sizeof(hard), "%d", p->hard_expiry_ms);
    snprintf(max_freed, sizeof(max_freed), "%d", 10 * p->max_changes);
    snprintf(max_each, sizeof(max_each), "%d", p->max_changes);
    snprintf(grace, sizeof(grace), "%d", p->handover_grace_ms);
    struct qw_db_res *res = NULL;
    const char *params[] = {p->instance_id, max_freed, lease, hard, max_each, grace};
    int rc = qw_db_query(db, "claims_maintain", 6, params, &res, err);
    if (rc != QW_OK)
        return rc;
    rc = take_over(p, r, res, err);
    qw_db_res_free(res);
    /* either bound reached: more may wait (our own part, or the others') */
    r->maintain_more = r->freed >= 10 * p->max_changes || r->taken >= p->max_changes;
    return rc;
}

/*
 * Giving back, in a READ COMMITTED transaction of its own before pickup:
 * the surplus named by the worker, then, when pickup is due and we hold
 * our share, idle claims to make room. Only claims of ours are given back,
 * each row locked and its conditions (holder, submitting, the work
 * counters of both rows) re-read at its newest version, which is all the
 * decision needs (docs/CLAIMS.md). In the serializable claims transaction
 * the search for idle claims read every claim of ours and its service's
 * ingest row: predicate locks on whole tables, and every other worker's
 * claim write made one of the two transactions fail.
 */
static int release_body(void *conn, void *arg, struct qw_error *err)
{
    struct qw_db *db = conn;
    struct claims_txn *t = arg;
    const struct qw_claims_params *p = t->p;
    struct qw_claims_result *r = t->out;
    r->n_released = 0;
    r->released_with_work = 0;

    int rc;
    if (p->release) {
        const char *release_params[] = {p->instance_id, p->release};
        rc = release(db, "claims_release", 2, release_params, r, err);
        if (rc != QW_OK)
            return rc;
    }
    if (!pickup_due(p, r))
        return QW_OK;
    /* At our share with free work waiting: make room, idle claims first. */
    long now_held = p->reconcile ? (long)t->base : (long)p->held - (long)r->n_released;
    if (!qw_claims_release_idle_due(now_held > 0 ? (size_t)now_held : 0, r->share,
                                    r->free_with_work, r->room_elsewhere))
        return QW_OK;
    char max_idle[16];
    snprintf(max_idle, sizeof(max_idle), "%d", p->max_changes);
    const char *idle_params[] = {p->instance_id, max_idle};
    return release(db, "claims_release_idle", 2, idle_params, r, err);
}

/* Pickup, the SERIALIZABLE claims transaction. */
static int claims_body(void *conn, void *arg, struct qw_error *err)
{
    struct qw_db *db = conn;
    struct claims_txn *t = arg;
    const struct qw_claims_params *p = t->p;
    struct qw_claims_result *r = t->out;
    r->n_claims = t->base; /* those listed before come first and stay */
    r->acquired = r->picked = 0;
    r->picker = false;

    int rc;
    struct qw_db_res *res = NULL;
    /* Pickup: free services with work go to every live instance with room,
     * ours included, highest priority first (one worker at a time). */
    char max[16], lease[16], hard[16], slack[16], maxc[16];
    snprintf(max, sizeof(max), "%d", PICKUP_FACTOR * p->max_changes);
    snprintf(lease, sizeof(lease), "%d", p->lease_ms);
    snprintf(hard, sizeof(hard), "%d", p->hard_expiry_ms);
    snprintf(slack, sizeof(slack), "%d", p->slack);
    snprintf(maxc, sizeof(maxc), "%d", p->max_claims);
    char each[16];
    snprintf(each, sizeof(each), "%d", p->max_changes);
    const char *pick_params[] = {p->instance_id, max, lease, hard, slack, maxc, each};
    rc = qw_db_query(db, "claims_acquire", 7, pick_params, &res, err);
    if (rc != QW_OK)
        return rc;
    int rows = qw_db_res_rows(res);
    r->picker = rows > 0 && strcmp(qw_db_res_get(res, 0, 3), "t") == 0;
    r->picked = rows > 0 ? (int)qw_db_res_int(res, 0, 4) : 0;
    for (int i = 0; i < rows && rc == QW_OK; i++) {
        if (qw_db_res_isnull(res, i, 0))
            continue;
        if (append_claim(&r->claims, &r->n_claims, &r->cap_claims, qw_db_res_get(res, i, 0),
                         qw_db_res_int(res, i, 1)) != QW_OK)
            rc = qw_error_set(err, QW_ERR_NOMEM, "out of memory");
        else
            r->acquired++;
    }
    qw_db_res_free(res);
    return rc;
}

/* The advisory fair share, read outside the serializable transaction. */
static int read_share(struct qw_db *db, const struct qw_claims_params *p,
                      struct qw_claims_result *r, struct qw_error *err)
{
    char slack[16], maxc[16], lease[16], held[24], free_max[16], free_read[16];
    snprintf(slack, sizeof(slack), "%d", p->slack);
    snprintf(maxc, sizeof(maxc), "%d", p->max_claims);
    snprintf(lease, sizeof(lease), "%d", p->lease_ms);
    snprintf(held, sizeof(held), "%zu", p->held);
    snprintf(free_max, sizeof(free_max), "%d", PICKUP_FACTOR * p->max_changes);
    snprintf(free_read, sizeof(free_read), "%d", p->max_changes);
    /* (our count is not known while our map may be wrong: the share is then counted exactly) */
    const char *params[] = {p->instance_id, slack,    maxc, lease, p->reconcile ? NULL : held,
                            free_max,       free_read};
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "claims_share", 7, params, &res, err);
    if (rc != QW_OK)
        return rc;
    r->share = (int)qw_db_res_int(res, 0, 0);
    r->with_work = qw_db_res_int(res, 0, 1);
    r->live = (int)qw_db_res_int(res, 0, 2);
    r->free_with_work = qw_db_res_int(res, 0, 3);
    r->lapsed = strcmp(qw_db_res_get(res, 0, 4), "t") == 0;
    r->room_elsewhere = qw_db_res_int(res, 0, 5);
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
    char maxc[16];
    snprintf(maxc, sizeof(maxc), "%d", p->max_claims);
    char waiting[16];
    snprintf(waiting, sizeof(waiting), "%d", p->waiting_priority);
    const char *params[] = {p->instance_id,
                            lease,
                            hard,
                            held,
                            p->incarnation,
                            maxc,
                            p->notifications,
                            p->waiting_priority == QW_PRIORITY_NONE ? NULL : waiting};
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "claims_lease", 8, params, &res, err);
    if (rc == QW_OK && qw_db_res_rows(res) != 1)
        rc = qw_error_set(err, QW_ERR_SUPERSEDED,
                          "instance %s is no longer registered as incarnation %s: a later "
                          "process registered under the same instance_id (this one was "
                          "frozen or cut off for over two leases), or the row was removed",
                          p->instance_id, p->incarnation);
    if (rc == QW_OK) {
        out->peer_lease_ms = qw_db_res_isnull(res, 0, 1) ? -1 : qw_db_res_int(res, 0, 1);
        out->peer_waiting_priority =
            qw_db_res_isnull(res, 0, 2) ? QW_PRIORITY_NONE : (int)qw_db_res_int(res, 0, 2);
    }
    qw_db_res_free(res);
    return rc;
}

void qw_claims_announce(struct qw_db *db)
{
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_exec(db, "NOTIFY " QW_CLAIMS_CHANNEL, &err) != QW_OK)
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
                    const struct qw_txn_policy *rc_policy, const struct qw_claims_params *p,
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
        out->maintain_more = false;
    } else {
        rc = qw_txn_run(&qw_txn_db_ops, db, rc_policy, maintain_body, &t, NULL, err);
        if (rc != QW_OK)
            return rc;
    }
    if (p->reconcile) {
        /* Every claim we hold, those maintenance just handed us included: one
         * statement, one snapshot, outside the serializable transaction (a
         * read of thousands of claims there held a lock on the whole table
         * against every other worker's claims transaction). Only our own
         * claims transactions and maintenance while our lease is lapsed take
         * claims of ours, so a claim it lists is ours; later changes reach
         * us by notification or by the next read. */
        struct qw_db_res *res = NULL;
        const char *held_params[] = {p->instance_id};
        out->n_claims = 0;
        rc = qw_db_query(db, "claims_held", 1, held_params, &res, err);
        if (rc == QW_OK)
            rc = collect(&out->claims, &out->n_claims, &out->cap_claims, res, 1, err);
        qw_db_res_free(res);
        if (rc != QW_OK)
            return rc;
    }
    t.base = out->n_claims;
    out->n_released = 0;
    out->released_with_work = 0;
    if (p->release || pickup_due(p, out)) {
        rc = qw_txn_run(&qw_txn_db_ops, db, rc_policy, release_body, &t, NULL, err);
        if (rc != QW_OK)
            return rc;
    }
    /* No free services with work to pick up (the common case: work comes
     * to the claims we keep, and new services come with the enqueue): no
     * claims transaction. */
    if (!pickup_due(p, out)) {
        out->acquired = out->picked = 0;
        out->picker = false;
        return QW_OK;
    }
    rc = qw_txn_run(&qw_txn_db_ops, db, policy, claims_body, &t, stats, err);
    if (rc == QW_OK)
        drop_retaken(out);
    /* Another worker picks up, or we gave out what there was room for: none
     * left for us until the next look at the share (the picker wakes the
     * receivers). A picker that gave others a full step runs again at once;
     * one that found nobody else live waits for the next cycle, by which
     * time workers started with it have registered. */
    if (rc == QW_OK &&
        !qw_claims_pickup_again(out->picker, out->picked, out->acquired, p->max_changes))
        out->free_with_work = 0;
    return rc;
}

void qw_claims_result_free(struct qw_claims_result *r)
{
    free(r->claims);
    free(r->released);
    memset(r, 0, sizeof(*r));
}

int qw_claims_release_all(struct qw_db *db, const char *instance_id, const char *incarnation,
                          bool posts_abandoned, int *released, struct qw_error *err)
{
    /* One transaction: others see the instance stopped (so it no longer
     * counts in their fair share) at the moment its claims become free. */
    struct qw_db_res *res = NULL;
    const char *params[] = {instance_id, incarnation, posts_abandoned ? "true" : "false"};
    int rc = qw_txn_begin(db, err);
    if (rc == QW_OK)
        rc = qw_db_query(db, "instance_stop", 2, params, NULL, err);
    if (rc == QW_OK)
        rc = qw_db_query(db, "claims_release_all", 3, params, &res, err);
    int n = rc == QW_OK ? qw_db_res_rows(res) : 0;
    qw_db_res_free(res);
    /* Wake the other workers (delivered at COMMIT) so they pick up at once. */
    if (rc == QW_OK && n > 0)
        rc = qw_db_exec(db, "NOTIFY " QW_CLAIMS_CHANNEL, err);
    if (rc == QW_OK)
        rc = qw_txn_commit(db, err);
    if (rc != QW_OK) {
        qw_txn_rollback(db);
        return rc;
    }
    if (released)
        *released = n;
    return QW_OK;
}
