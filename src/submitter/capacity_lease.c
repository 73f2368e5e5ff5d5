/* Shared ledger capacity, the lease adapter; see capacity_lease.h. */
#include "submitter/capacity_lease.h"
#include "common/clock.h"
#include "db/pgarray.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one step read before its transaction, and what the plan decided. */
struct step {
    struct qw_capacity_lease *l; /* the adapter */
    int64_t target;              /* this worker's target */
    char *release;               /* int[] literal of partitions to give back (and not to
                                    renew), "{}" = none */
    bool retire_mine;            /* old-generation partitions of ours may be deleted */
    int64_t acquire_reserved;    /* reservation partitions to take */
    int64_t acquire_shared;      /* shared partitions to take */
    /* collected by the transaction, reset on every attempt */
    struct qw_capacity_part *got; /* partitions held after COMMIT */
    size_t n_got;                 /* entries in got */
    size_t cap_got;               /* allocated entries */
    int64_t lease_left_ms;        /* shortest lease left among them */
    int released;                 /* partitions given back */
    int acquired;                 /* partitions taken */
};

void qw_capacity_lease_init(struct qw_capacity_lease *l, const char *ledger,
                            const char *instance_id, enum qw_capacity_cost cost, int lease_ms)
{
    memset(l, 0, sizeof(*l));
    l->ledger = ledger;
    l->instance_id = instance_id;
    l->cost = cost;
    l->lease_ms = lease_ms;
}

void qw_capacity_lease_free(struct qw_capacity_lease *l)
{
    free(l->held);
    l->held = NULL;
    l->n_held = l->cap_held = 0;
}

static int64_t limit_of(const struct qw_db_res *res, int row, int col)
{
    return qw_db_res_isnull(res, row, col) ? QW_CAPACITY_UNLIMITED : qw_db_res_int(res, row, col);
}

static bool is_true(const struct qw_db_res *res, int row, int col)
{
    return qw_db_res_get(res, row, col)[0] == 't';
}

static int push_part(struct qw_capacity_part **v, size_t *n, size_t *cap,
                     const struct qw_capacity_part *p)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        struct qw_capacity_part *grown = realloc(*v, c * sizeof(*grown));
        if (!grown)
            return QW_ERR_NOMEM;
        *v = grown;
        *cap = c;
    }
    (*v)[(*n)++] = *p;
    return QW_OK;
}

/* Adds a kind's amount to a total; unlimited stays unlimited. */
static void add_units(int64_t *total, int64_t v)
{
    if (*total == QW_CAPACITY_UNLIMITED || v == QW_CAPACITY_UNLIMITED)
        *total = QW_CAPACITY_UNLIMITED;
    else
        *total += v;
}

static bool listed(const int64_t *nos, size_t n, int64_t no)
{
    for (size_t i = 0; i < n; i++) {
        if (nos[i] == no)
            return true;
    }
    return false;
}

/*
 * The grant of `parts` (n entries), minus the partitions numbered in
 * `skip` (n_skip entries). A kind the capacity does not limit is
 * unlimited; one it limits starts at 0 (nothing held, nothing allowed).
 */
static struct qw_capacity_grant grant_of(const struct qw_capacity_part *parts, size_t n,
                                         const int64_t *skip, size_t n_skip, int64_t deadline_ms,
                                         int64_t max_in_flight, int64_t per_second)
{
    struct qw_capacity_grant g = {
        .active = true,
        .in_flight = max_in_flight == QW_CAPACITY_UNLIMITED ? QW_CAPACITY_UNLIMITED : 0,
        .per_second = per_second == QW_CAPACITY_UNLIMITED ? QW_CAPACITY_UNLIMITED : 0,
        .deadline_ms = deadline_ms,
    };
    for (size_t i = 0; i < n; i++) {
        if (listed(skip, n_skip, parts[i].no))
            continue;
        if (g.in_flight != QW_CAPACITY_UNLIMITED)
            add_units(&g.in_flight, parts[i].in_flight);
        if (g.per_second != QW_CAPACITY_UNLIMITED)
            add_units(&g.per_second, parts[i].per_second);
    }
    return g;
}

static int step_body(void *conn, void *arg, struct qw_error *err)
{
    struct qw_db *db = conn;
    struct step *s = arg;
    struct qw_capacity_lease *l = s->l;
    s->n_got = 0;
    s->lease_left_ms = INT64_MAX;
    s->released = s->acquired = 0;
    char gen[24], target[24], lease[16];
    snprintf(gen, sizeof(gen), "%lld", (long long)l->generation);
    snprintf(target, sizeof(target), "%lld", (long long)(s->target > 0 ? s->target : 0));
    snprintf(lease, sizeof(lease), "%d", l->lease_ms);

    const char *publish[] = {l->ledger, l->instance_id, target, qw_capacity_cost_name(l->cost),
                             lease};
    int rc = qw_db_query(db, "capacity_publish", 5, publish, NULL, err);
    const char *renew[] = {l->ledger, gen, l->instance_id, lease, s->release};
    if (rc == QW_OK)
        rc = qw_db_query(db, "capacity_renew", 5, renew, NULL, err);
    struct qw_db_res *res = NULL;
    if (rc == QW_OK && strcmp(s->release, "{}") != 0) {
        const char *release[] = {l->ledger, gen, l->instance_id, s->release};
        rc = qw_db_query(db, "capacity_release", 4, release, &res, err);
        s->released = rc == QW_OK ? qw_db_res_rows(res) : 0;
        qw_db_res_free(res);
        res = NULL;
    }
    const char *retire[] = {l->ledger, gen, l->instance_id, s->retire_mine ? "true" : "false"};
    if (rc == QW_OK)
        rc = qw_db_query(db, "capacity_retire", 4, retire, NULL, err);
    for (int k = 0; k < 2 && rc == QW_OK; k++) {
        int64_t want = k == 0 ? s->acquire_reserved : s->acquire_shared;
        if (want <= 0)
            continue;
        char n[24];
        snprintf(n, sizeof(n), "%lld", (long long)want);
        const char *acquire[] = {l->ledger, gen, l->instance_id, n, k == 0 ? "true" : "false",
                                 lease};
        rc = qw_db_query(db, "capacity_acquire", 6, acquire, &res, err);
        s->acquired += rc == QW_OK ? qw_db_res_rows(res) : 0;
        qw_db_res_free(res);
        res = NULL;
    }
    const char *held[] = {l->ledger, gen, l->instance_id};
    if (rc == QW_OK)
        rc = qw_db_query(db, "capacity_held", 3, held, &res, err);
    for (int i = 0; rc == QW_OK && i < qw_db_res_rows(res); i++) {
        struct qw_capacity_part p = {
            .no = qw_db_res_int(res, i, 0),
            .reserved = is_true(res, i, 1),
            .in_flight = limit_of(res, i, 2),
            .per_second = limit_of(res, i, 3),
        };
        int64_t left = qw_db_res_int(res, i, 5);
        if (left < s->lease_left_ms)
            s->lease_left_ms = left;
        if (push_part(&s->got, &s->n_got, &s->cap_got, &p) != QW_OK)
            rc = qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }
    qw_db_res_free(res);
    return rc;
}

/* The live workers' needs in id order, this one included; sets *me and *live. */
static int read_needs(struct qw_capacity_lease *l, struct qw_db *db, int64_t target,
                      int64_t **needs, size_t *me, int64_t *live, struct qw_error *err)
{
    struct qw_db_res *res = NULL;
    const char *params[] = {l->ledger, l->instance_id};
    int rc = qw_db_query(db, "capacity_demands", 2, params, &res, err);
    if (rc != QW_OK)
        return rc;
    int rows = qw_db_res_rows(res);
    int64_t *v = calloc((size_t)rows + 1, sizeof(*v));
    if (!v) {
        qw_db_res_free(res);
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }
    size_t n = 0;
    bool placed = false;
    for (int i = 0; i < rows; i++) {
        const char *id = qw_db_res_get(res, i, 0);
        int cmp = strcmp(id, l->instance_id);
        if (!placed && cmp >= 0) {
            /* our own row may not exist yet (first step): count us where we sort */
            *me = n;
            v[n++] = qw_capacity_need(target, l->reserved_units, l->partition_size);
            placed = true;
            if (cmp == 0)
                continue;
        }
        v[n++] = qw_capacity_need(qw_db_res_int(res, i, 1), l->reserved_units, l->partition_size);
    }
    if (!placed) {
        *me = n;
        v[n++] = qw_capacity_need(target, l->reserved_units, l->partition_size);
    }
    qw_db_res_free(res);
    *needs = v;
    *live = (int64_t)n;
    return QW_OK;
}

/* Reads the partitions: ours of the current generation into l->held, the free count, and
 * whether we still hold any of an older generation. */
static int read_state(struct qw_capacity_lease *l, struct qw_db *db, int64_t *free_parts,
                      bool *old_mine, struct qw_error *err)
{
    struct qw_db_res *res = NULL;
    const char *params[] = {l->ledger, l->instance_id};
    int rc = qw_db_query(db, "capacity_state", 2, params, &res, err);
    if (rc != QW_OK)
        return rc;
    l->n_held = 0;
    *free_parts = 0;
    *old_mine = false;
    for (int i = 0; rc == QW_OK && i < qw_db_res_rows(res); i++) {
        bool current = qw_db_res_int(res, i, 0) == l->generation;
        bool mine = is_true(res, i, 2);
        if (!current) {
            *old_mine = *old_mine || mine;
            continue;
        }
        if (is_true(res, i, 6))
            (*free_parts)++;
        if (!mine)
            continue;
        struct qw_capacity_part p = {
            .no = qw_db_res_int(res, i, 1),
            .reserved = is_true(res, i, 3),
            .in_flight = limit_of(res, i, 4),
            .per_second = limit_of(res, i, 5),
        };
        if (push_part(&l->held, &l->n_held, &l->cap_held, &p) != QW_OK)
            rc = qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }
    qw_db_res_free(res);
    return rc;
}

int qw_capacity_lease_step(struct qw_capacity_lease *l, struct qw_db *db,
                           const struct qw_txn_policy *policy, int64_t target,
                           struct qw_capacity_gate *gate, struct qw_error *err)
{
    int64_t began_ms = qw_clock_mono_ms();
    struct qw_db_res *res = NULL;
    const char *params[] = {l->ledger};
    int rc = qw_db_query(db, "capacity_config", 1, params, &res, err);
    if (rc != QW_OK)
        return rc;
    if (qw_db_res_rows(res) == 0) {
        /* No capacity set: no limit, exactly as without this feature. */
        qw_db_res_free(res);
        l->set = false;
        l->n_held = 0;
        l->released = l->acquired = 0;
        l->deferred = false;
        struct qw_capacity_grant none = {.active = false};
        qw_capacity_gate_grant(gate, &none, began_ms);
        return QW_OK;
    }
    int64_t max_in_flight = limit_of(res, 0, 0);
    int64_t per_second = limit_of(res, 0, 1);
    l->partition_size = qw_db_res_int(res, 0, 2);
    l->reserved_units = qw_db_res_int(res, 0, 3);
    l->partitions = qw_db_res_int(res, 0, 4);
    l->generation = qw_db_res_int(res, 0, 5);
    l->set = true;
    qw_db_res_free(res);

    int64_t free_parts = 0;
    bool old_mine = false;
    int64_t *needs = NULL;
    size_t me = 0;
    rc = read_state(l, db, &free_parts, &old_mine, err);
    if (rc == QW_OK)
        rc = read_needs(l, db, target, &needs, &me, &l->live, err);
    if (rc != QW_OK) {
        free(needs);
        return rc;
    }

    int64_t reserved_each = l->partition_size > 0 ? l->reserved_units / l->partition_size : 0;
    int64_t held_reserved = 0;
    for (size_t i = 0; i < l->n_held; i++)
        held_reserved += l->held[i].reserved;
    int64_t *shares = calloc((size_t)l->live + 1, sizeof(*shares));
    int64_t *skip = calloc(l->n_held + 1, sizeof(*skip));
    size_t n_skip = 0;
    struct qw_pgarray release;
    qw_pgarray_init(&release);
    if (!shares || !skip) {
        free(needs);
        free(shares);
        free(skip);
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }
    struct qw_capacity_view view = {
        .partitions = l->partitions,
        .reserved_each = reserved_each,
        .live = l->live,
        .needs = needs,
        .shares = shares,
        .me = me,
        .held_reserved = held_reserved,
        .held_shared = (int64_t)l->n_held - held_reserved,
        .free_partitions = free_parts,
    };
    struct qw_capacity_plan plan;
    qw_capacity_plan(&view, &plan);
    l->allot = plan.allot;
    free(needs);
    free(shares);

    /* Give back the highest-numbered shared partitions first. */
    int64_t to_release = plan.release_shared;
    for (size_t i = l->n_held; i-- > 0 && to_release > 0;) {
        if (!l->held[i].reserved) {
            skip[n_skip++] = l->held[i].no;
            to_release--;
        }
    }
    /* Shrink the gate first: what is given back (and any older generation,
     * which is not in `held`) is not used for new POSTs from now on. */
    struct qw_capacity_grant keep =
        grant_of(l->held, l->n_held, skip, n_skip, gate->grant.active ? gate->grant.deadline_ms : 0,
                 max_in_flight, per_second);
    qw_capacity_gate_grant(gate, &keep, began_ms);
    bool drained = keep.in_flight == QW_CAPACITY_UNLIMITED || gate->used <= keep.in_flight;
    l->deferred = !drained && (plan.release_shared > 0 || old_mine);
    for (size_t i = 0; drained && i < n_skip; i++)
        qw_pgarray_int(&release, skip[i]);
    const char *release_lit = qw_pgarray_finish(&release);
    char *lit = release_lit ? strdup(release_lit) : NULL;
    qw_pgarray_free(&release);
    if (!lit) {
        free(skip);
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }

    struct step s = {
        .l = l,
        .target = target,
        .release = lit,
        .retire_mine = drained,
        .acquire_reserved = plan.acquire_reserved,
        .acquire_shared = plan.acquire_shared,
    };
    struct qw_txn_policy p = *policy;
    p.begin_sql = "BEGIN ISOLATION LEVEL READ COMMITTED";
    rc = qw_txn_run(&qw_txn_db_ops, db, &p, step_body, &s, NULL, err);
    free(lit);
    if (rc != QW_OK) {
        free(skip);
        free(s.got);
        return rc;
    }
    /* Committed: use what we hold now, until its shortest lease runs out
     * (less a tenth of the lease as a margin, counted from before the step). */
    free(l->held);
    l->held = s.got;
    l->n_held = s.n_got;
    l->cap_held = s.cap_got;
    l->released = s.released;
    l->acquired = s.acquired;
    l->free_partitions = free_parts + s.released - s.acquired;
    int64_t left = s.lease_left_ms == INT64_MAX ? l->lease_ms : s.lease_left_ms;
    int64_t deadline = began_ms + left - l->lease_ms / 10;
    /* A release deferred until the gate drains stays out of the grant. */
    struct qw_capacity_grant now = grant_of(l->held, l->n_held, skip, drained ? 0 : n_skip,
                                            deadline, max_in_flight, per_second);
    free(skip);
    qw_capacity_gate_grant(gate, &now, qw_clock_mono_ms());
    return QW_OK;
}

void qw_capacity_lease_totals(const struct qw_capacity_lease *l, int64_t *in_flight,
                              int64_t *per_second, int64_t *partitions)
{
    int64_t f = 0, r = 0;
    for (size_t i = 0; l->set && i < l->n_held; i++) {
        if (l->held[i].in_flight != QW_CAPACITY_UNLIMITED)
            f += l->held[i].in_flight;
        if (l->held[i].per_second != QW_CAPACITY_UNLIMITED)
            r += l->held[i].per_second;
    }
    *in_flight = f;
    *per_second = r;
    *partitions = l->set ? (int64_t)l->n_held : 0;
}

int qw_capacity_lease_release_all(struct qw_db *db, const char *instance_id, int *released,
                                  struct qw_error *err)
{
    struct qw_db_res *res = NULL;
    const char *params[] = {instance_id};
    int rc = qw_db_query(db, "capacity_release_all", 1, params, &res, err);
    if (rc == QW_OK && released)
        *released = qw_db_res_rows(res);
    qw_db_res_free(res);
    return rc;
}
