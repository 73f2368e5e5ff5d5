/* Open-addressing service map; see svcmap.h. */
#include "queuer/svcmap.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

int qw_svcmap_init(struct qw_svcmap *m)
{
    memset(m, 0, sizeof(*m));
    m->capacity = 64;
    m->slots = calloc(m->capacity, sizeof(*m->slots));
    return m->slots ? 0 : -1;
}

void qw_svcmap_free(struct qw_svcmap *m)
{
    free(m->slots);
    memset(m, 0, sizeof(*m));
}

static struct qw_svc *find_slot(struct qw_svc *slots, size_t cap, const char *id, int for_insert)
{
    size_t mask = cap - 1;
    size_t i = (size_t)hash_str(id) & mask;
    struct qw_svc *first_tomb = NULL;
    for (size_t probes = 0; probes < cap; probes++, i = (i + 1) & mask) {
        struct qw_svc *s = &slots[i];
        if (s->service_id[0] == '\0') {
            if (s->tombstone) {
                if (!first_tomb)
                    first_tomb = s;
                continue;
            }
            if (for_insert)
                return first_tomb ? first_tomb : s;
            return NULL;
        }
        if (strcmp(s->service_id, id) == 0)
            return s;
    }
    return for_insert ? first_tomb : NULL;
}

static int grow(struct qw_svcmap *m)
{
    size_t cap = m->used * 4 > m->capacity ? m->capacity * 2 : m->capacity;
    struct qw_svc *slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return -1;
    for (size_t i = 0; i < m->capacity; i++) {
        struct qw_svc *s = &m->slots[i];
        if (s->service_id[0] == '\0')
            continue;
        *find_slot(slots, cap, s->service_id, 1) = *s;
    }
    free(m->slots);
    m->slots = slots;
    m->capacity = cap;
    m->filled = m->used;
    return 0;
}

struct qw_svc *qw_svcmap_get(struct qw_svcmap *m, const char *service_id)
{
    return find_slot(m->slots, m->capacity, service_id, 0);
}

struct qw_svc *qw_svcmap_put(struct qw_svcmap *m, const char *service_id)
{
    struct qw_svc *s = find_slot(m->slots, m->capacity, service_id, 0);
    if (s)
        return s;
    if ((m->filled + 1) * 2 > m->capacity && grow(m) != 0)
        return NULL;
    s = find_slot(m->slots, m->capacity, service_id, 1);
    if (!s->tombstone)
        m->filled++;
    memset(s, 0, sizeof(*s));
    strncpy(s->service_id, service_id, sizeof(s->service_id) - 1);
    m->used++;
    return s;
}

void qw_svcmap_set_busy(struct qw_svcmap *m, struct qw_svc *s, bool busy)
{
    if (s->busy == busy)
        return;
    s->busy = busy;
    if (busy)
        m->busy++;
    else
        m->busy--;
}

void qw_svcmap_del(struct qw_svcmap *m, const char *service_id)
{
    struct qw_svc *s = find_slot(m->slots, m->capacity, service_id, 0);
    if (!s)
        return;
    qw_svcmap_set_busy(m, s, false);
    memset(s, 0, sizeof(*s));
    s->tombstone = true;
    m->used--;
}

struct qw_svc *qw_svcmap_next(struct qw_svcmap *m, size_t *pos)
{
    while (*pos < m->capacity) {
        struct qw_svc *s = &m->slots[(*pos)++];
        if (s->service_id[0] != '\0')
            return s;
    }
    return NULL;
}
