/* The simulated scabbard ledger's pure state machine; see ledger.h. */
#include "ledger.h"
#include "capacity.h"

#include "common/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct qw_sim_batch {
    struct qw_sim_service *svc;     /* owning service */
    uint64_t hash;                  /* hash of (service index, id) */
    enum qw_sim_status status;      /* current status, never Unknown */
    bool invalid;                   /* ends Invalid instead of Committed */
    int origin;                     /* node that took it */
    int64_t valid_at_us;            /* Pending -> Valid time, 0 without a valid step */
    int64_t final_at_us;            /* -> Committed/Invalid time */
    int64_t changed_us;             /* time of the last status change */
    char *txn_id;                   /* Invalid only: first transaction id, may be NULL */
    struct qw_sim_batch *hash_next; /* next in the hash bucket */
    struct qw_sim_batch *list_next; /* next in the service's queue or finalized list */
    char id[];                      /* header_signature, NUL-terminated */
};

struct qw_sim_ledger {
    struct qw_sim_ledger_config cfg;     /* copy; invalid_prefix points at `prefix` */
    char *prefix;                        /* owned copy of the invalid prefix, "" = none */
    size_t prefix_len;                   /* strlen(prefix) */
    qw_sim_ledger_change_fn on_change;   /* transition observer, may be NULL */
    void *ctx;                           /* passed to on_change */
    int64_t now_us;                      /* latest time seen */
    bool paused;                         /* commit clock stopped */
    struct qw_sim_service **services;    /* every service, by index */
    size_t n_services;                   /* used entries in `services` */
    size_t cap_services;                 /* allocated entries in `services` */
    struct qw_sim_service **svc_buckets; /* service hash table on key, chained */
    size_t n_svc_buckets;                /* power of two */
    struct qw_sim_batch **buckets;       /* batch hash table, chained */
    size_t n_buckets;                    /* power of two */
    size_t n_batches;                    /* batches in the table */
    struct qw_sim_service **heap;        /* services with a queue, min-heap on head due time */
    size_t heap_len;                     /* entries in `heap` */
    size_t queued_total;                 /* sum of every service's `queued` */
    bool throttled;                      /* global back pressure active */
    size_t max_queued_total;             /* highest queued_total ever seen */
    struct qw_sim_rate rate;             /* the node's rate of accepted batches */
};

static const char *const status_names[] = {"Unknown", "Pending", "Valid", "Committed", "Invalid"};

const char *qw_sim_status_name(enum qw_sim_status status)
{
    if ((unsigned)status >= sizeof(status_names) / sizeof(status_names[0]))
        return "Unknown";
    return status_names[status];
}

/* ---- hashing ---------------------------------------------------------- */

static uint64_t batch_hash(size_t svc_index, const char *id)
{
    uint64_t h = 1469598103934665603ULL ^ ((uint64_t)svc_index * 0x9e3779b97f4a7c15ULL);
    for (const unsigned char *p = (const unsigned char *)id; *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

static struct qw_sim_batch *table_find(const struct qw_sim_ledger *l,
                                       const struct qw_sim_service *svc, const char *id)
{
    uint64_t h = batch_hash(svc->index, id);
    for (struct qw_sim_batch *b = l->buckets[h & (l->n_buckets - 1)]; b; b = b->hash_next) {
        if (b->hash == h && b->svc == svc && strcmp(b->id, id) == 0)
            return b;
    }
    return NULL;
}

static int table_grow(struct qw_sim_ledger *l)
{
    size_t n = l->n_buckets * 2;
    struct qw_sim_batch **nb = calloc(n, sizeof(*nb));
    if (!nb)
        return QW_ERR_NOMEM;
    for (size_t i = 0; i < l->n_buckets; i++) {
        struct qw_sim_batch *b = l->buckets[i];
        while (b) {
            struct qw_sim_batch *next = b->hash_next;
            b->hash_next = nb[b->hash & (n - 1)];
            nb[b->hash & (n - 1)] = b;
            b = next;
        }
    }
    free(l->buckets);
    l->buckets = nb;
    l->n_buckets = n;
    return QW_OK;
}

static void table_insert(struct qw_sim_ledger *l, struct qw_sim_batch *b)
{
    size_t i = b->hash & (l->n_buckets - 1);
    b->hash_next = l->buckets[i];
    l->buckets[i] = b;
    l->n_batches++;
}

static void table_remove(struct qw_sim_ledger *l, struct qw_sim_batch *b)
{
    struct qw_sim_batch **pp = &l->buckets[b->hash & (l->n_buckets - 1)];
    while (*pp && *pp != b)
        pp = &(*pp)->hash_next;
    if (*pp) {
        *pp = b->hash_next;
        l->n_batches--;
    }
}

static void batch_free(struct qw_sim_batch *b)
{
    if (!b)
        return;
    free(b->txn_id);
    free(b);
}

/* ---- due heap ---------------------------------------------------------- */

static int64_t head_due(const struct qw_sim_service *svc)
{
    const struct qw_sim_batch *b = svc->queue_head;
    if (b->status == QW_SIM_PENDING && b->valid_at_us)
        return b->valid_at_us;
    return b->final_at_us;
}

static void heap_swap(struct qw_sim_ledger *l, size_t a, size_t b)
{
    struct qw_sim_service *t = l->heap[a];
    l->heap[a] = l->heap[b];
    l->heap[b] = t;
    l->heap[a]->heap_pos = a;
    l->heap[b]->heap_pos = b;
}

static bool heap_less(const struct qw_sim_ledger *l, size_t a, size_t b)
{
    int64_t da = head_due(l->heap[a]);
    int64_t db = head_due(l->heap[b]);
    if (da != db)
        return da < db;
    return l->heap[a]->index < l->heap[b]->index;
}

static void heap_sift_down(struct qw_sim_ledger *l, size_t i)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= l->heap_len)
            break;
        if (c + 1 < l->heap_len && heap_less(l, c + 1, c))
            c++;
        if (!heap_less(l, c, i))
            break;
        heap_swap(l, c, i);
        i = c;
    }
}

/* Restores the heap order after the key of entry `i` changed. */
static void heap_fix(struct qw_sim_ledger *l, size_t i)
{
    while (i > 0 && heap_less(l, i, (i - 1) / 2)) {
        heap_swap(l, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    heap_sift_down(l, i);
}

/* The heap has room for every service (grown with `services`). */
static void heap_push(struct qw_sim_ledger *l, struct qw_sim_service *svc)
{
    svc->heap_pos = l->heap_len;
    l->heap[l->heap_len++] = svc;
    heap_fix(l, svc->heap_pos);
}

static void heap_remove(struct qw_sim_ledger *l, struct qw_sim_service *svc)
{
    size_t i = svc->heap_pos;
    svc->heap_pos = SIZE_MAX;
    l->heap_len--;
    if (i == l->heap_len)
        return;
    l->heap[i] = l->heap[l->heap_len];
    l->heap[i]->heap_pos = i;
    heap_fix(l, i);
}

/* ---- lifecycle --------------------------------------------------------- */

int qw_sim_ledger_new(const struct qw_sim_ledger_config *cfg, qw_sim_ledger_change_fn on_change,
                      void *ctx, struct qw_sim_ledger **out)
{
    *out = NULL;
    if (cfg->queue_high == 0 || cfg->queue_low > cfg->queue_high ||
        cfg->global_low > cfg->global_high || cfg->commit_delay_us < 0 || cfg->rate < 0 ||
        cfg->rate_burst < 0)
        return QW_ERR_INVALID;
    struct qw_sim_ledger *l = calloc(1, sizeof(*l));
    if (!l)
        return QW_ERR_NOMEM;
    l->cfg = *cfg;
    l->prefix = strdup(cfg->invalid_prefix ? cfg->invalid_prefix : "");
    l->n_buckets = 1024;
    l->buckets = calloc(l->n_buckets, sizeof(*l->buckets));
    l->n_svc_buckets = 64;
    l->svc_buckets = calloc(l->n_svc_buckets, sizeof(*l->svc_buckets));
    if (!l->prefix || !l->buckets || !l->svc_buckets) {
        qw_sim_ledger_free(l);
        return QW_ERR_NOMEM;
    }
    l->prefix_len = strlen(l->prefix);
    l->cfg.invalid_prefix = l->prefix;
    l->on_change = on_change;
    l->ctx = ctx;
    qw_sim_rate_init(&l->rate, cfg->rate, cfg->rate_burst, 0);
    *out = l;
    return QW_OK;
}

static void free_list(struct qw_sim_batch *b)
{
    while (b) {
        struct qw_sim_batch *next = b->list_next;
        batch_free(b);
        b = next;
    }
}

void qw_sim_ledger_free(struct qw_sim_ledger *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n_services; i++) {
        free_list(l->services[i]->queue_head);
        free_list(l->services[i]->done_head);
        free(l->services[i]);
    }
    free(l->services);
    free(l->heap);
    free(l->buckets);
    free(l->svc_buckets);
    free(l->prefix);
    free(l);
}

static uint64_t key_hash(const char *key)
{
    return batch_hash(0, key);
}

static int services_rehash(struct qw_sim_ledger *l, size_t n)
{
    struct qw_sim_service **nb = calloc(n, sizeof(*nb));
    if (!nb)
        return QW_ERR_NOMEM;
    for (size_t i = 0; i < l->n_services; i++) {
        struct qw_sim_service *svc = l->services[i];
        size_t b = key_hash(svc->key) & (n - 1);
        svc->hash_next = nb[b];
        nb[b] = svc;
    }
    free(l->svc_buckets);
    l->svc_buckets = nb;
    l->n_svc_buckets = n;
    return QW_OK;
}

struct qw_sim_service *qw_sim_ledger_service(struct qw_sim_ledger *l, const char *key, bool create)
{
    uint64_t h = key_hash(key);
    for (struct qw_sim_service *s = l->svc_buckets[h & (l->n_svc_buckets - 1)]; s;
         s = s->hash_next) {
        if (strcmp(s->key, key) == 0)
            return s;
    }
    if (!create || strlen(key) >= QW_SIM_SERVICE_KEY_MAX)
        return NULL;
    if (l->n_services >= l->n_svc_buckets && services_rehash(l, l->n_svc_buckets * 2) != QW_OK)
        return NULL;
    if (l->n_services == l->cap_services) {
        size_t cap = l->cap_services ? l->cap_services * 2 : 16;
        struct qw_sim_service **ns = realloc(l->services, cap * sizeof(*ns));
        if (!ns)
            return NULL;
        l->services = ns;
        struct qw_sim_service **nh = realloc(l->heap, cap * sizeof(*nh));
        if (!nh)
            return NULL;
        l->heap = nh;
        l->cap_services = cap;
    }
    struct qw_sim_service *svc = calloc(1, sizeof(*svc));
    if (!svc)
        return NULL;
    snprintf(svc->key, sizeof(svc->key), "%s", key);
    svc->index = l->n_services;
    svc->heap_pos = SIZE_MAX;
    l->services[l->n_services++] = svc;
    size_t b = h & (l->n_svc_buckets - 1);
    svc->hash_next = l->svc_buckets[b];
    l->svc_buckets[b] = svc;
    return svc;
}

/* ---- time -------------------------------------------------------------- */

static void notify(struct qw_sim_ledger *l, const struct qw_sim_batch *b, enum qw_sim_status from,
                   int64_t at_us)
{
    if (l->on_change)
        l->on_change(l->ctx, b->svc, b->id, b->origin, from, b->status, at_us);
}

static void remember(struct qw_sim_ledger *l, struct qw_sim_service *svc, struct qw_sim_batch *b)
{
    b->list_next = NULL;
    if (svc->done_tail)
        svc->done_tail->list_next = b;
    else
        svc->done_head = b;
    svc->done_tail = b;
    svc->remembered++;
    while (l->cfg.status_memory && svc->remembered > l->cfg.status_memory) {
        struct qw_sim_batch *old = svc->done_head;
        svc->done_head = old->list_next;
        if (!svc->done_head)
            svc->done_tail = NULL;
        svc->remembered--;
        table_remove(l, old);
        batch_free(old);
    }
}

/* Moves the head batch of `svc` one step. */
static void step_head(struct qw_sim_ledger *l, struct qw_sim_service *svc)
{
    struct qw_sim_batch *b = svc->queue_head;
    enum qw_sim_status from = b->status;
    if (b->status == QW_SIM_PENDING && b->valid_at_us) {
        b->status = QW_SIM_VALID;
        b->changed_us = b->valid_at_us;
        heap_fix(l, svc->heap_pos);
        notify(l, b, from, b->changed_us);
        return;
    }
    b->status = b->invalid ? QW_SIM_INVALID : QW_SIM_COMMITTED;
    b->changed_us = b->final_at_us;
    svc->queue_head = b->list_next;
    if (!svc->queue_head) {
        svc->queue_tail = NULL;
        heap_remove(l, svc);
    } else {
        heap_fix(l, svc->heap_pos);
    }
    svc->queued--;
    l->queued_total--;
    notify(l, b, from, b->changed_us);
    remember(l, svc, b);
}

size_t qw_sim_ledger_advance(struct qw_sim_ledger *l, int64_t now_us)
{
    if (now_us > l->now_us)
        l->now_us = now_us;
    if (l->paused)
        return 0;
    size_t changes = 0;
    while (l->heap_len > 0 && head_due(l->heap[0]) <= l->now_us) {
        step_head(l, l->heap[0]);
        changes++;
    }
    return changes;
}

/* Sets the step times of `b`, whose first step may start at `start_us`;
 * returns the time of its final step. */
static int64_t schedule(const struct qw_sim_ledger *l, struct qw_sim_batch *b, int64_t start_us)
{
    int64_t d = l->cfg.commit_delay_us;
    if (b->status == QW_SIM_PENDING && l->cfg.valid_step && !b->invalid) {
        b->valid_at_us = start_us + d;
        b->final_at_us = start_us + 2 * d;
    } else {
        b->valid_at_us = 0;
        b->final_at_us = start_us + d;
    }
    return b->final_at_us;
}

/* ---- accept ------------------------------------------------------------ */

static bool hysteresis(bool *throttled, size_t queued, size_t high, size_t low)
{
    if (*throttled && queued < low)
        *throttled = false;
    if (!*throttled && queued >= high)
        *throttled = true;
    return *throttled;
}

static int enqueue(struct qw_sim_ledger *l, struct qw_sim_service *svc,
                   const struct qw_sim_submission *sub, int origin)
{
    if (l->n_batches >= l->n_buckets && table_grow(l) != QW_OK)
        return QW_ERR_NOMEM;
    size_t len = strlen(sub->batch_id);
    struct qw_sim_batch *b = calloc(1, sizeof(*b) + len + 1);
    if (!b)
        return QW_ERR_NOMEM;
    memcpy(b->id, sub->batch_id, len + 1);
    b->svc = svc;
    b->origin = origin;
    b->hash = batch_hash(svc->index, b->id);
    b->status = QW_SIM_PENDING;
    b->changed_us = l->now_us;
    b->invalid = l->prefix_len > 0 && strncasecmp(b->id, l->prefix, l->prefix_len) == 0;
    if (b->invalid && sub->first_txn_id && sub->first_txn_id[0]) {
        b->txn_id = strdup(sub->first_txn_id);
        if (!b->txn_id) {
            free(b);
            return QW_ERR_NOMEM;
        }
    }
    int64_t start = svc->chain_us > l->now_us ? svc->chain_us : l->now_us;
    svc->chain_us = schedule(l, b, start);
    table_insert(l, b);
    if (svc->queue_tail)
        svc->queue_tail->list_next = b;
    else
        svc->queue_head = b;
    svc->queue_tail = b;
    svc->queued++;
    l->queued_total++;
    if (l->queued_total > l->max_queued_total)
        l->max_queued_total = l->queued_total;
    if (svc->queued > svc->max_queued)
        svc->max_queued = svc->queued;
    if (svc->heap_pos == SIZE_MAX)
        heap_push(l, svc);
    return QW_OK;
}

int qw_sim_ledger_accept(struct qw_sim_ledger *l, struct qw_sim_service *svc,
                         const struct qw_sim_submission *subs, size_t n, int64_t now_us, int origin,
                         bool *dup, enum qw_sim_accept_result *result)
{
    qw_sim_ledger_advance(l, now_us);
    bool global_on = l->cfg.global_high > 0 && !l->cfg.never_refuse;
    /* Both states are updated before deciding, so each reflects the queue
     * it watches whichever refuses first. */
    bool svc_refuses = !l->cfg.never_refuse && hysteresis(&svc->throttled, svc->queued,
                                                          l->cfg.queue_high, l->cfg.queue_low);
    bool global_refuses = global_on && hysteresis(&l->throttled, l->queued_total,
                                                  l->cfg.global_high, l->cfg.global_low);
    bool rate_refuses = !l->cfg.never_refuse && !svc_refuses && !global_refuses &&
                        !qw_sim_rate_take(&l->rate, (int64_t)n, l->now_us);
    if (svc_refuses || global_refuses || rate_refuses) {
        *result = svc_refuses      ? QW_SIM_REFUSED_SERVICE
                  : global_refuses ? QW_SIM_REFUSED_GLOBAL
                                   : QW_SIM_REFUSED_RATE;
        if (dup)
            memset(dup, 0, n * sizeof(*dup));
        return QW_OK;
    }
    *result = QW_SIM_ACCEPTED;
    for (size_t i = 0; i < n; i++) {
        bool known = table_find(l, svc, subs[i].batch_id) != NULL;
        if (dup)
            dup[i] = known;
        if (known)
            continue;
        int rc = enqueue(l, svc, &subs[i], origin);
        if (rc != QW_OK)
            return rc;
    }
    return QW_OK;
}

/* ---- queries ----------------------------------------------------------- */

void qw_sim_ledger_peek(const struct qw_sim_ledger *l, const struct qw_sim_service *svc,
                        const char *batch_id, struct qw_sim_status_view *view)
{
    memset(view, 0, sizeof(*view));
    view->status = QW_SIM_UNKNOWN;
    view->settled = true;
    const struct qw_sim_batch *b = svc ? table_find(l, svc, batch_id) : NULL;
    if (!b)
        return;
    view->status = b->status;
    view->changed_us = b->changed_us;
    view->settled = b->status == QW_SIM_COMMITTED || b->status == QW_SIM_INVALID;
    if (b->status == QW_SIM_INVALID) {
        view->txn_id = b->txn_id ? b->txn_id : b->id;
        view->message = "the simulator rejects batches whose id starts with the invalid prefix";
    }
}

void qw_sim_ledger_status(struct qw_sim_ledger *l, struct qw_sim_service *svc, const char *batch_id,
                          int64_t now_us, struct qw_sim_status_view *view)
{
    qw_sim_ledger_advance(l, now_us);
    qw_sim_ledger_peek(l, svc, batch_id, view);
}

/* ---- control ----------------------------------------------------------- */

void qw_sim_ledger_restart(struct qw_sim_ledger *l, int64_t now_us)
{
    if (now_us > l->now_us)
        l->now_us = now_us;
    for (size_t i = 0; i < l->n_services; i++) {
        struct qw_sim_service *svc = l->services[i];
        free_list(svc->queue_head);
        free_list(svc->done_head);
        svc->queue_head = svc->queue_tail = NULL;
        svc->done_head = svc->done_tail = NULL;
        svc->queued = 0;
        svc->remembered = 0;
        svc->chain_us = 0;
        svc->throttled = false;
        svc->heap_pos = SIZE_MAX;
    }
    memset(l->buckets, 0, l->n_buckets * sizeof(*l->buckets));
    l->n_batches = 0;
    l->heap_len = 0;
    l->queued_total = 0;
    l->throttled = false;
}

size_t qw_sim_ledger_drop_origin(struct qw_sim_ledger *l, int origin, int64_t now_us)
{
    qw_sim_ledger_advance(l, now_us);
    size_t dropped = 0;
    for (size_t i = 0; i < l->n_services; i++) {
        struct qw_sim_service *svc = l->services[i];
        struct qw_sim_batch *keep_head = NULL, *keep_tail = NULL;
        struct qw_sim_batch *b = svc->queue_head;
        bool head_changed = false;
        while (b) {
            struct qw_sim_batch *next = b->list_next;
            if (b->origin == origin) {
                head_changed = head_changed || b == svc->queue_head;
                table_remove(l, b);
                batch_free(b);
                svc->queued--;
                l->queued_total--;
                dropped++;
            } else {
                b->list_next = NULL;
                if (keep_tail)
                    keep_tail->list_next = b;
                else
                    keep_head = b;
                keep_tail = b;
            }
            b = next;
        }
        svc->queue_head = keep_head;
        svc->queue_tail = keep_tail;
        if (!head_changed)
            continue;
        if (!keep_head)
            heap_remove(l, svc);
        else
            heap_fix(l, svc->heap_pos);
    }
    return dropped;
}

void qw_sim_ledger_set_paused(struct qw_sim_ledger *l, bool paused, int64_t now_us)
{
    qw_sim_ledger_advance(l, now_us);
    if (paused == l->paused)
        return;
    l->paused = paused;
    if (paused)
        return;
    for (size_t i = 0; i < l->n_services; i++) {
        struct qw_sim_service *svc = l->services[i];
        int64_t t = l->now_us;
        for (struct qw_sim_batch *b = svc->queue_head; b; b = b->list_next)
            t = schedule(l, b, t);
        if (svc->queue_head)
            svc->chain_us = t;
    }
    /* Every key changed: rebuild the heap bottom-up. */
    for (size_t i = l->heap_len / 2; i-- > 0;)
        heap_sift_down(l, i);
}

bool qw_sim_ledger_paused(const struct qw_sim_ledger *l)
{
    return l->paused;
}

int64_t qw_sim_ledger_next_due_us(const struct qw_sim_ledger *l)
{
    if (l->paused || l->heap_len == 0)
        return INT64_MAX;
    return head_due(l->heap[0]);
}

size_t qw_sim_ledger_queued_total(const struct qw_sim_ledger *l)
{
    return l->queued_total;
}

size_t qw_sim_ledger_max_queued_total(const struct qw_sim_ledger *l)
{
    return l->max_queued_total;
}

void qw_sim_ledger_foreach_service(const struct qw_sim_ledger *l,
                                   void (*fn)(void *ctx, const struct qw_sim_service *svc),
                                   void *ctx)
{
    for (size_t i = 0; i < l->n_services; i++)
        fn(ctx, l->services[i]);
}
