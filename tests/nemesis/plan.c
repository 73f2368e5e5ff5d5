/* The nemesis schedule generator (see plan.h): seeded, pure, reproducible. */
#include "plan.h"

#include <string.h>

static const char *const kind_names[QW_NEM_KINDS] = {
    "worker-kill9", "worker-stop-0.5x", "worker-stop-1.5x", "worker-stop-5x", "pg-immediate",
    "pg-fast",      "pg-terminate",     "pg-backend-stop",  "ledger-429",     "ledger-5xx",
    "ledger-hang",  "ledger-restart",   "ledger-malformed", "net-partition",  "clock-skew",
};

/* splitmix64: tiny, well mixed, and fixed here so a seed means the same
 * schedule whatever else in the tree changes. */
struct rng {
    uint64_t state; /* advanced by every draw */
};

static uint64_t next_u64(struct rng *r)
{
    uint64_t z = (r->state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi] (inclusive); the modulo bias is irrelevant at these ranges. */
static int uniform(struct rng *r, int lo, int hi)
{
    if (hi <= lo)
        return lo;
    return lo + (int)(next_u64(r) % (uint64_t)(hi - lo + 1));
}

const char *qw_nem_kind_name(enum qw_nem_kind kind)
{
    if ((int)kind < 0 || kind >= QW_NEM_KINDS)
        return "?";
    return kind_names[kind];
}

int qw_nem_kind_parse(const char *name, enum qw_nem_kind *out)
{
    for (int k = 0; k < QW_NEM_KINDS; k++) {
        if (strcmp(name, kind_names[k]) == 0) {
            *out = (enum qw_nem_kind)k;
            return 0;
        }
    }
    return -1;
}

int qw_nem_kind_has_target(enum qw_nem_kind kind)
{
    switch (kind) {
    case QW_NEM_WORKER_KILL9:
    case QW_NEM_WORKER_STOP_05:
    case QW_NEM_WORKER_STOP_15:
    case QW_NEM_WORKER_STOP_5:
    case QW_NEM_PG_BACKEND_STOP:
    case QW_NEM_CLOCK_SKEW:
        return 1;
    default:
        return 0;
    }
}

/* Draws every parameter of one fault of `kind`; always the same number of
 * draws per fault, so one kind's parameters never shift another's. */
static void fill(struct rng *r, const struct qw_nem_plan_opts *o, enum qw_nem_kind kind,
                 struct qw_nem_fault *f)
{
    const int lease = o->timing.lease_ms;
    const int query = o->timing.query_timeout_ms;
    const int http = o->timing.http_timeout_ms;
    int a = uniform(r, 0, 1 << 30);
    int b = uniform(r, 0, 1 << 30);
    int sign = uniform(r, 0, 1);
    f->kind = kind;
    f->target = qw_nem_kind_has_target(kind) ? uniform(r, 0, o->workers - 1) : -1;
    f->gap_ms = uniform(r, 0, lease);
    f->pick = (uint32_t)next_u64(r);
    f->count = 0;
    f->rate_permille = 0;
    f->skew_offset_s = 0;
    f->skew_rate_permille = 1000;
    switch (kind) {
    case QW_NEM_WORKER_KILL9:
        f->duration_ms = a % (2 * lease + 1); /* down for 0..2 leases */
        break;
    case QW_NEM_WORKER_STOP_05:
        f->duration_ms = lease / 2;
        break;
    case QW_NEM_WORKER_STOP_15:
        f->duration_ms = lease * 3 / 2;
        break;
    case QW_NEM_WORKER_STOP_5:
        f->duration_ms = lease * 5;
        break;
    case QW_NEM_PG_IMMEDIATE:
    case QW_NEM_PG_FAST:
        f->duration_ms = 200 + a % (2 * lease + 1); /* down for 0.2 s + 0..2 leases */
        break;
    case QW_NEM_PG_TERMINATE:
        f->duration_ms = 0;
        f->count = 1 + a % 3;
        break;
    case QW_NEM_PG_BACKEND_STOP:
        /* Past the client-side deadline, so only that deadline ends the wait. */
        f->duration_ms = query + query / 4 + a % (query * 3 / 4 + 1);
        break;
    case QW_NEM_LEDGER_429:
        f->duration_ms = 2 * lease + a % (3 * lease + 1);
        break;
    case QW_NEM_LEDGER_5XX:
        f->duration_ms = 2 * lease + a % (3 * lease + 1);
        f->rate_permille = 300 + b % 501;
        break;
    case QW_NEM_LEDGER_HANG:
        /* Long enough that hung requests meet the client's HTTP timeout. */
        f->duration_ms = http + http / 4 + a % (http * 3 / 4 + 1);
        f->rate_permille = 300 + b % 501;
        break;
    case QW_NEM_LEDGER_RESTART:
        f->duration_ms = 0;
        break;
    case QW_NEM_LEDGER_MALFORMED:
        f->duration_ms = 2 * lease + a % (3 * lease + 1);
        f->rate_permille = 300 + b % 501;
        break;
    case QW_NEM_NET_PARTITION:
        f->duration_ms = lease / 2 + a % (lease * 11 / 2 + 1); /* 0.5 .. 6 leases */
        break;
    case QW_NEM_CLOCK_SKEW:
        f->duration_ms = 5 * lease + a % (5 * lease + 1);
        f->skew_offset_s = (sign ? 1 : -1) * (600 + b % 6601); /* 10 min .. 2 h */
        f->skew_rate_permille = 950 + (a / 7) % 101;           /* 0.95 .. 1.05 */
        break;
    case QW_NEM_KINDS:
        break;
    }
}

int qw_nem_plan(const struct qw_nem_plan_opts *o, struct qw_nem_fault *out, size_t cap, size_t *n)
{
    *n = 0;
    unsigned all = (1u << QW_NEM_KINDS) - 1;
    if (!o || (o->enabled & all) == 0 || o->workers < 1 || o->timing.lease_ms <= 0 ||
        o->timing.query_timeout_ms <= 0 || o->timing.http_timeout_ms <= 0 || o->repeat < 0 ||
        o->count < 0)
        return -1;
    enum qw_nem_kind kinds[QW_NEM_KINDS];
    size_t n_kinds = 0;
    for (int k = 0; k < QW_NEM_KINDS; k++) {
        if (o->enabled & (1u << k))
            kinds[n_kinds++] = (enum qw_nem_kind)k;
    }
    size_t total = o->repeat > 0 ? n_kinds * (size_t)o->repeat : (size_t)o->count;
    if (total > cap)
        return -1;
    struct rng r = {.state = o->seed};
    if (o->repeat > 0) {
        for (size_t i = 0; i < total; i++)
            out[i].kind = kinds[i % n_kinds];
        /* Fisher-Yates: every kind `repeat` times, in a seeded order. */
        for (size_t i = total; i > 1; i--) {
            size_t j = (size_t)(next_u64(&r) % i);
            enum qw_nem_kind t = out[i - 1].kind;
            out[i - 1].kind = out[j].kind;
            out[j].kind = t;
        }
    } else {
        for (size_t i = 0; i < total; i++)
            out[i].kind = kinds[next_u64(&r) % n_kinds];
    }
    for (size_t i = 0; i < total; i++) {
        fill(&r, o, out[i].kind, &out[i]);
        out[i].seq = (int)i + 1;
    }
    *n = total;
    return 0;
}
