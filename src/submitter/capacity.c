/* Shared ledger capacity, the pure part: cost, gate, bucket, partition split; see capacity.h. */
#include "submitter/capacity.h"

#include <string.h>

#define FACTOR_ONE 1024 /* the AIMD factor's unit */

static const char *const cost_names[] = {"batch", "transactions", "bytes"};

bool qw_capacity_cost_parse(const char *text, enum qw_capacity_cost *out)
{
    for (size_t i = 0; text && i < sizeof(cost_names) / sizeof(cost_names[0]); i++) {
        if (strcmp(text, cost_names[i]) == 0) {
            *out = (enum qw_capacity_cost)i;
            return true;
        }
    }
    return false;
}

const char *qw_capacity_cost_name(enum qw_capacity_cost c)
{
    return (size_t)c < sizeof(cost_names) / sizeof(cost_names[0]) ? cost_names[c] : "batch";
}

int64_t qw_capacity_cost_of(enum qw_capacity_cost c, size_t payload_bytes, int64_t transactions)
{
    int64_t cost = 1;
    if (c == QW_COST_TRANSACTIONS)
        cost = transactions;
    else if (c == QW_COST_BYTES)
        cost = payload_bytes > (size_t)INT64_MAX ? INT64_MAX : (int64_t)payload_bytes;
    return cost < 1 ? 1 : cost;
}

/* ---- token bucket ------------------------------------------------------- */

static int64_t sat_mul(int64_t a, int64_t b)
{
    if (a == 0 || b == 0)
        return 0;
    if (a > INT64_MAX / b)
        return INT64_MAX;
    return a * b;
}

static void refill(struct qw_bucket *b, int64_t now_ms)
{
    if (now_ms <= b->at_ms)
        return;
    /* units/s == milli-units/ms */
    int64_t add = sat_mul(now_ms - b->at_ms, b->rate);
    b->at_ms = now_ms;
    if (b->milli > b->burst_milli - add)
        b->milli = b->burst_milli;
    else
        b->milli += add;
}

void qw_bucket_set_rate(struct qw_bucket *b, int64_t rate, int64_t now_ms, bool start_full)
{
    if (!start_full)
        refill(b, now_ms);
    b->rate = rate < 0 ? 0 : rate;
    b->burst_milli = sat_mul(b->rate, QW_CAPACITY_BURST_MS);
    if (b->rate > 0 && b->burst_milli < 1000)
        b->burst_milli = 1000;
    b->at_ms = now_ms;
    if (start_full || b->milli > b->burst_milli)
        b->milli = b->burst_milli;
}

int64_t qw_bucket_take(struct qw_bucket *b, int64_t cost, int64_t now_ms)
{
    refill(b, now_ms);
    int64_t need = sat_mul(cost, 1000);
    /* A cost above the whole burst goes when the bucket is full (into debt). */
    int64_t enough = need > b->burst_milli ? b->burst_milli : need;
    if (b->rate > 0 && b->milli >= enough) {
        b->milli -= need;
        return 0;
    }
    if (b->rate <= 0)
        return INT64_MAX;
    int64_t missing = enough - b->milli;
    int64_t wait = (missing + b->rate - 1) / b->rate;
    return wait < 1 ? 1 : wait;
}

/* ---- gate --------------------------------------------------------------- */

void qw_capacity_gate_init(struct qw_capacity_gate *g)
{
    memset(g, 0, sizeof(*g));
    g->factor = FACTOR_ONE;
}

/* Additive increase: the factor grows back with the time since it last moved. */
static void grow(struct qw_capacity_gate *g, int64_t now_ms)
{
    if (g->factor >= FACTOR_ONE) {
        g->changed_ms = now_ms;
        return;
    }
    int64_t steps = (now_ms - g->changed_ms) * QW_CAPACITY_AIMD_STEP / 1000;
    if (steps <= 0)
        return;
    int64_t f = g->factor + steps;
    g->factor = f >= FACTOR_ONE ? FACTOR_ONE : (int)f;
    /* keep the remainder: move the reference by the time the steps took */
    g->changed_ms += steps * 1000 / QW_CAPACITY_AIMD_STEP;
    if (g->factor == FACTOR_ONE)
        g->changed_ms = now_ms;
}

static int64_t scaled(int64_t held, int factor)
{
    if (held == QW_CAPACITY_UNLIMITED || held <= 0)
        return held < 0 ? 0 : held;
    int64_t v =
        held >= INT64_MAX / FACTOR_ONE ? held / FACTOR_ONE * factor : held * factor / FACTOR_ONE;
    return v < 1 ? 1 : v;
}

int64_t qw_capacity_in_flight_limit(struct qw_capacity_gate *g, int64_t now_ms)
{
    grow(g, now_ms);
    return scaled(g->grant.in_flight, g->factor);
}

int64_t qw_capacity_rate_limit(struct qw_capacity_gate *g, int64_t now_ms)
{
    grow(g, now_ms);
    return scaled(g->grant.per_second, g->factor);
}

/* Keeps the bucket at the rate in force; a first sizing starts it full. */
static void size_bucket(struct qw_capacity_gate *g, int64_t now_ms)
{
    int64_t rate = qw_capacity_rate_limit(g, now_ms);
    if (rate == QW_CAPACITY_UNLIMITED)
        return;
    if (!g->bucket_set || g->bucket.rate != rate) {
        qw_bucket_set_rate(&g->bucket, rate, now_ms, !g->bucket_set);
        g->bucket_set = true;
    }
}

void qw_capacity_gate_grant(struct qw_capacity_gate *g, const struct qw_capacity_grant *grant,
                            int64_t now_ms)
{
    bool was_active = g->grant.active;
    g->grant = *grant;
    if (!grant->active) {
        /* No capacity set: back to taking everything, counting nothing. */
        int64_t keep_changed = g->changed_ms;
        qw_capacity_gate_init(g);
        g->changed_ms = keep_changed;
        return;
    }
    if (!was_active)
        g->factor = FACTOR_ONE;
    size_bucket(g, now_ms);
}

enum qw_capacity_verdict qw_capacity_try_take(struct qw_capacity_gate *g, int64_t cost,
                                              int64_t now_ms, int64_t *wait_ms)
{
    *wait_ms = INT64_MAX;
    if (!g->grant.active)
        return QW_CAP_TAKEN;
    if (now_ms >= g->grant.deadline_ms || g->grant.in_flight <= 0 || g->grant.per_second <= 0)
        return QW_CAP_WAIT_GRANT;
    int64_t limit = qw_capacity_in_flight_limit(g, now_ms);
    if (limit != QW_CAPACITY_UNLIMITED && g->used > 0 && cost > limit - g->used)
        return QW_CAP_WAIT_SLOT;
    if (g->grant.per_second != QW_CAPACITY_UNLIMITED) {
        size_bucket(g, now_ms);
        int64_t wait = qw_bucket_take(&g->bucket, cost, now_ms);
        if (wait > 0) {
            *wait_ms = wait;
            return QW_CAP_WAIT_RATE;
        }
    }
    g->used += cost;
    return QW_CAP_TAKEN;
}

void qw_capacity_force_take(struct qw_capacity_gate *g, int64_t cost)
{
    if (g->grant.active)
        g->used += cost;
}

void qw_capacity_give_back(struct qw_capacity_gate *g, int64_t cost)
{
    g->used -= cost;
    if (g->used < 0)
        g->used = 0;
}

void qw_capacity_backpressure(struct qw_capacity_gate *g, int64_t now_ms)
{
    if (!g->grant.active)
        return;
    grow(g, now_ms);
    if (g->shrunk_ms != 0 && now_ms - g->shrunk_ms < QW_CAPACITY_AIMD_HOLD_MS)
        return; /* the answers to POSTs sent together arrive together: shrink once */
    int f = g->factor / 2;
    g->factor = f < QW_CAPACITY_AIMD_FLOOR ? QW_CAPACITY_AIMD_FLOOR : f;
    g->changed_ms = now_ms;
    g->shrunk_ms = now_ms;
    size_bucket(g, now_ms);
}

/* ---- partitions --------------------------------------------------------- */

int64_t qw_capacity_need(int64_t target, int64_t reserved_units, int64_t partition_units)
{
    if (partition_units < 1)
        partition_units = 1;
    int64_t over = target - reserved_units;
    if (over <= 0)
        return 0;
    return over / partition_units + (over % partition_units != 0);
}

int64_t qw_capacity_allot(int64_t n_shared, const int64_t *needs, size_t n, int64_t *out)
{
    int64_t left = n_shared < 0 ? 0 : n_shared;
    size_t unmet = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = 0;
        unmet += needs[i] > 0;
    }
    /* Rounds: everyone still short gets an even share of what is left,
     * capped at what it still needs; until nothing is left or all are met. */
    while (left > 0 && unmet > 0) {
        int64_t each = left / (int64_t)unmet;
        if (each == 0) {
            /* fewer partitions than instances short of them: lowest indexes first */
            for (size_t i = 0; i < n && left > 0; i++) {
                if (out[i] < needs[i]) {
                    out[i]++;
                    left--;
                }
            }
            break;
        }
        for (size_t i = 0; i < n; i++) {
            int64_t want = needs[i] - out[i];
            if (want <= 0)
                continue;
            int64_t give = want < each ? want : each;
            out[i] += give;
            left -= give;
        }
        unmet = 0;
        for (size_t i = 0; i < n; i++)
            unmet += out[i] < needs[i];
    }
    return left;
}

void qw_capacity_plan(const struct qw_capacity_view *v, struct qw_capacity_plan *p)
{
    memset(p, 0, sizeof(*p));
    int64_t shared_pool = v->partitions - v->reserved_each * v->live;
    if (shared_pool < 0)
        shared_pool = 0;
    size_t n = v->live > 0 ? (size_t)v->live : 0;
    if (n > 0 && v->me < n) {
        qw_capacity_allot(shared_pool, v->needs, n, v->shares);
        p->allot = v->shares[v->me];
    }
    int64_t free_left = v->free_partitions;
    if (v->held_reserved < v->reserved_each) {
        int64_t want = v->reserved_each - v->held_reserved;
        p->acquire_reserved = want < free_left ? want : free_left;
        free_left -= p->acquire_reserved;
    }
    if (v->held_shared < p->allot) {
        int64_t want = p->allot - v->held_shared;
        p->acquire_shared = want < free_left ? want : free_left;
    } else {
        p->release_shared = v->held_shared - p->allot;
    }
}
