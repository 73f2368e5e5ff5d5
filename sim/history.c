/* One node's batch history; see history.h. */
#include "history.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

struct entry {
    size_t svc;                /* service index */
    uint64_t hash;             /* of (svc, id) */
    enum qw_sim_status status; /* never Unknown */
    int64_t changed_us;        /* time of the last change */
    struct entry *hash_next;   /* next in the bucket */
    struct entry *prev;        /* service list, oldest change first */
    struct entry *next;        /* service list */
    char id[];                 /* batch id, NUL-terminated */
};

struct svc_list {
    struct entry *head; /* changed longest ago */
    struct entry *tail; /* changed last */
    size_t count;       /* entries */
};

struct qw_sim_history {
    size_t limit;           /* entries per service, 0 = all */
    struct entry **buckets; /* chained hash table */
    size_t n_buckets;       /* power of two */
    size_t n_entries;       /* entries in the table */
    struct svc_list *svcs;  /* by service index */
    size_t n_svcs;          /* allocated entries of svcs */
};

static uint64_t entry_hash(size_t svc, const char *id)
{
    uint64_t h = 1469598103934665603ULL ^ ((uint64_t)svc * 0x9e3779b97f4a7c15ULL);
    for (const unsigned char *p = (const unsigned char *)id; *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

int qw_sim_history_new(size_t limit, struct qw_sim_history **out)
{
    *out = NULL;
    struct qw_sim_history *h = calloc(1, sizeof(*h));
    if (!h)
        return QW_ERR_NOMEM;
    h->limit = limit;
    h->n_buckets = 1024;
    h->buckets = calloc(h->n_buckets, sizeof(*h->buckets));
    if (!h->buckets) {
        free(h);
        return QW_ERR_NOMEM;
    }
    *out = h;
    return QW_OK;
}

void qw_sim_history_clear(struct qw_sim_history *h)
{
    for (size_t i = 0; i < h->n_buckets; i++) {
        struct entry *e = h->buckets[i];
        while (e) {
            struct entry *next = e->hash_next;
            free(e);
            e = next;
        }
        h->buckets[i] = NULL;
    }
    h->n_entries = 0;
    if (h->svcs)
        memset(h->svcs, 0, h->n_svcs * sizeof(*h->svcs));
}

void qw_sim_history_free(struct qw_sim_history *h)
{
    if (!h)
        return;
    qw_sim_history_clear(h);
    free(h->buckets);
    free(h->svcs);
    free(h);
}

static struct entry *find(const struct qw_sim_history *h, size_t svc, const char *id, uint64_t hash)
{
    for (struct entry *e = h->buckets[hash & (h->n_buckets - 1)]; e; e = e->hash_next) {
        if (e->hash == hash && e->svc == svc && strcmp(e->id, id) == 0)
            return e;
    }
    return NULL;
}

static void grow_table(struct qw_sim_history *h)
{
    size_t n = h->n_buckets * 2;
    struct entry **nb = calloc(n, sizeof(*nb));
    if (!nb)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < h->n_buckets; i++) {
        struct entry *e = h->buckets[i];
        while (e) {
            struct entry *next = e->hash_next;
            e->hash_next = nb[e->hash & (n - 1)];
            nb[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    free(h->buckets);
    h->buckets = nb;
    h->n_buckets = n;
}

static void list_unlink(struct svc_list *l, struct entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        l->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        l->tail = e->prev;
    e->prev = e->next = NULL;
    l->count--;
}

static void list_append(struct svc_list *l, struct entry *e)
{
    e->prev = l->tail;
    e->next = NULL;
    if (l->tail)
        l->tail->next = e;
    else
        l->head = e;
    l->tail = e;
    l->count++;
}

static void table_remove(struct qw_sim_history *h, struct entry *e)
{
    struct entry **pp = &h->buckets[e->hash & (h->n_buckets - 1)];
    while (*pp && *pp != e)
        pp = &(*pp)->hash_next;
    if (*pp) {
        *pp = e->hash_next;
        h->n_entries--;
    }
}

int qw_sim_history_put(struct qw_sim_history *h, size_t svc_index, const char *id,
                       enum qw_sim_status status, int64_t at_us)
{
    if (svc_index >= h->n_svcs) {
        size_t n = h->n_svcs ? h->n_svcs : 16;
        while (n <= svc_index)
            n *= 2;
        struct svc_list *ns = realloc(h->svcs, n * sizeof(*ns));
        if (!ns)
            return QW_ERR_NOMEM;
        memset(ns + h->n_svcs, 0, (n - h->n_svcs) * sizeof(*ns));
        h->svcs = ns;
        h->n_svcs = n;
    }
    struct svc_list *l = &h->svcs[svc_index];
    uint64_t hash = entry_hash(svc_index, id);
    struct entry *e = find(h, svc_index, id, hash);
    if (e) {
        list_unlink(l, e);
    } else {
        size_t len = strlen(id);
        e = calloc(1, sizeof(*e) + len + 1);
        if (!e)
            return QW_ERR_NOMEM;
        memcpy(e->id, id, len + 1);
        e->svc = svc_index;
        e->hash = hash;
        if (h->n_entries >= h->n_buckets)
            grow_table(h);
        size_t b = hash & (h->n_buckets - 1);
        e->hash_next = h->buckets[b];
        h->buckets[b] = e;
        h->n_entries++;
    }
    e->status = status;
    e->changed_us = at_us;
    list_append(l, e);
    while (h->limit && l->count > h->limit) {
        struct entry *old = l->head;
        list_unlink(l, old);
        table_remove(h, old);
        free(old);
    }
    return QW_OK;
}

enum qw_sim_status qw_sim_history_get(const struct qw_sim_history *h, size_t svc_index,
                                      const char *id, int64_t *changed_us)
{
    const struct entry *e = find(h, svc_index, id, entry_hash(svc_index, id));
    if (!e)
        return QW_SIM_UNKNOWN;
    if (changed_us)
        *changed_us = e->changed_us;
    return e->status;
}

size_t qw_sim_history_count(const struct qw_sim_history *h, size_t svc_index)
{
    return svc_index < h->n_svcs ? h->svcs[svc_index].count : 0;
}
