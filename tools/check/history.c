/* The pure core of qw-check: event parsing, ledger replay and invariants I1-I4 (history.h). */
#include "check/history.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- event parsing ------------------------------------------------------ */

__attribute__((format(printf, 3, 4))) static int fail(char *why, size_t why_len, const char *fmt,
                                                      ...)
{
    if (why && why_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Copies the string member `key` of `obj` into dst (capacity cap): absent
 * or null gives "". Returns 0, or -1 when it is not a string or too long. */
static int copy_member(const json_t *obj, const char *key, char *dst, size_t cap)
{
    const json_t *v = json_object_get(obj, key);
    dst[0] = '\0';
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return -1;
    size_t n = json_string_length(v);
    if (n >= cap)
        return -1;
    memcpy(dst, json_string_value(v), n);
    dst[n] = '\0';
    return 0;
}

/* Reads "code": an HTTP status, or a fate string ("drop", "hang") for a
 * request that got no answer. */
static int read_code(const json_t *obj, struct qw_check_event *ev)
{
    const json_t *v = json_object_get(obj, "code");
    if (json_is_integer(v)) {
        json_int_t code = json_integer_value(v);
        if (code < 100 || code > 599)
            return -1;
        ev->code = (int)code;
        return 0;
    }
    if (json_is_string(v)) {
        ev->code = 0;
        ev->no_answer = true;
        return 0;
    }
    return -1;
}

int qw_check_event_parse(const char *line, size_t len, struct qw_check_event *ev, char *why,
                         size_t why_len)
{
    memset(ev, 0, sizeof(*ev));
    json_error_t jerr;
    json_t *root = json_loadb(line, len, 0, &jerr);
    if (!root)
        return fail(why, why_len, "not JSON: %s", jerr.text);
    int rc = -1;
    const json_t *t = json_object_get(root, "t");
    const json_t *kind = json_object_get(root, "ev");
    if (!json_is_object(root) || !json_is_integer(t) || !json_is_string(kind)) {
        rc = fail(why, why_len, "not an event: needs an integer \"t\" and a string \"ev\"");
        goto out;
    }
    ev->t_us = (int64_t)json_integer_value(t);
    const char *k = json_string_value(kind);
    if (copy_member(root, "service", ev->service, sizeof(ev->service)) != 0 ||
        copy_member(root, "batch", ev->batch, sizeof(ev->batch)) != 0) {
        rc = fail(why, why_len,
                  "%s event: \"service\" or \"batch\" is not a string of at most "
                  "%d/%d characters",
                  k, QW_CHECK_SERVICE_MAX, QW_CHECK_ID_MAX);
        goto out;
    }
    if (strcmp(k, "post") == 0) {
        ev->kind = QW_CHECK_EV_POST;
        if (read_code(root, ev) != 0) {
            rc = fail(why, why_len, "post event: \"code\" is neither an HTTP status nor a fate");
            goto out;
        }
        ev->dup = json_is_true(json_object_get(root, "dup"));
        ev->fault = ev->no_answer || json_is_string(json_object_get(root, "fault"));
        ev->reached =
            ev->code == 202 || (ev->no_answer && json_is_true(json_object_get(root, "accepted")));
        if (ev->reached && (!ev->batch[0] || !ev->service[0])) {
            rc = fail(why, why_len,
                      "post event: the ledger took a batch but the line names no "
                      "batch or service");
            goto out;
        }
    } else if (strcmp(k, "get") == 0) {
        ev->kind = QW_CHECK_EV_GET;
        if (read_code(root, ev) != 0) {
            rc = fail(why, why_len, "get event: \"code\" is neither an HTTP status nor a fate");
            goto out;
        }
    } else if (strcmp(k, "status") == 0) {
        ev->kind = QW_CHECK_EV_STATUS;
        if (copy_member(root, "to", ev->to, sizeof(ev->to)) != 0 || !ev->to[0] || !ev->batch[0] ||
            !ev->service[0]) {
            rc = fail(why, why_len, "status event: needs \"service\", \"batch\" and \"to\"");
            goto out;
        }
    } else if (strcmp(k, "restart") == 0) {
        ev->kind = QW_CHECK_EV_RESTART;
    } else {
        ev->kind = QW_CHECK_EV_OTHER;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

enum qw_check_reason qw_check_reason_of(const char *detail)
{
    if (!detail)
        return QW_CHECK_REASON_NONE;
    if (strcmp(detail, "first submission") == 0)
        return QW_CHECK_REASON_FIRST;
    static const char *const prefixes[] = {"resubmission: ", "retry after delay: "};
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        size_t n = strlen(prefixes[i]);
        if (strncmp(detail, prefixes[i], n) == 0)
            return QW_CHECK_REASON_RESUBMIT;
    }
    return QW_CHECK_REASON_NONE;
}

const char *qw_check_invariant_name(int invariant)
{
    switch (invariant) {
    case 1:
        return "every batch final, ledger agrees";
    case 2:
        return "one pending batch per service";
    case 3:
        return "ledger order = creation order";
    case 4:
        return "duplicate POSTs have a reason";
    default:
        return "?";
    }
}

/* ---- string -> index map ------------------------------------------------ */

struct slot {
    const char *key; /* borrowed from the record it indexes; NULL = empty */
    uint64_t hash;   /* FNV-1a of key */
    size_t idx;      /* record index */
};

struct map {
    struct slot *slots; /* open addressing, linear probing */
    size_t cap;         /* power of two, 0 before the first insert */
    size_t n;           /* used slots */
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = UINT64_C(1469598103934665603);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= UINT64_C(1099511628211);
    }
    return h;
}

/* Finds `key`: returns its slot, or the empty slot where it belongs. */
static struct slot *map_find(const struct map *m, const char *key, uint64_t h)
{
    size_t i = (size_t)h & (m->cap - 1);
    for (;;) {
        struct slot *s = &m->slots[i];
        if (!s->key || (s->hash == h && strcmp(s->key, key) == 0))
            return s;
        i = (i + 1) & (m->cap - 1);
    }
}

static int map_grow(struct map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    struct slot *slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return -1;
    struct map bigger = {slots, cap, 0};
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].key) {
            *map_find(&bigger, m->slots[i].key, m->slots[i].hash) = m->slots[i];
            bigger.n++;
        }
    }
    free(m->slots);
    *m = bigger;
    return 0;
}

/* ---- records ------------------------------------------------------------ */

#define NONE ((size_t)-1)

struct batch {
    char *id;              /* owned */
    size_t svc;            /* service the ledger took it under, NONE before */
    size_t db_svc;         /* service in queuer.batches, NONE when not there */
    long long db_pos;      /* add order of its row; within a service, creation order */
    long long first_taken; /* replay sequence of the ledger's first take, -1 never */
    char db_status[12];    /* status column, "" none */
    bool in_db;            /* a row of queuer.batches */
    bool open;             /* queued at the ledger: taken and not yet final there */
    bool two_services;     /* taken under more than one service (reported once) */
    bool seen_committed;   /* the ledger reported Committed */
    bool seen_valid;       /* ... Valid */
    bool seen_invalid;     /* ... Invalid */
    bool seen_400;         /* a POST of it was answered 400 */
    int posts;             /* POST lines naming it */
    int taken;             /* of those, the ones the ledger took */
    int submitting;        /* 'Submitting' history rows */
    int reasons;           /* ... with a resubmission reason */
};

struct service {
    char *key;     /* owned "circuit::service" */
    size_t *open;  /* indexes of its batches queued at the ledger */
    size_t n_open; /* entries in open */
    size_t cap;    /* room in open */
};

struct qw_check {
    qw_check_violation_fn fn;    /* violation sink, may be NULL */
    void *ctx;                   /* passed to fn */
    struct batch *batches;       /* every batch seen anywhere */
    size_t n_batches;            /* used entries */
    size_t cap_batches;          /* room */
    struct map batch_map;        /* id -> batches[] */
    struct service *services;    /* every service seen anywhere */
    size_t n_services;           /* used entries */
    size_t cap_services;         /* room */
    struct map service_map;      /* key -> services[] */
    long long next_pos;          /* next db_pos */
    struct qw_check_figures fig; /* counts so far */
};

__attribute__((format(printf, 3, 4))) static void violation(struct qw_check *c, int invariant,
                                                            const char *fmt, ...)
{
    c->fig.violations[invariant - 1]++;
    if (!c->fn)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->fn(c->ctx, invariant, msg);
}

static int grow(void **arr, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 64;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * size);
    if (!p)
        return -1;
    *arr = p;
    *cap = n;
    return 0;
}

/* Returns the index of the batch `id`, creating it; NONE when out of memory. */
static size_t batch_get(struct qw_check *c, const char *id)
{
    uint64_t h = hash_str(id);
    if (c->batch_map.cap) {
        struct slot *s = map_find(&c->batch_map, id, h);
        if (s->key)
            return s->idx;
    }
    if ((c->batch_map.n + 1) * 2 > c->batch_map.cap && map_grow(&c->batch_map) != 0)
        return NONE;
    if (grow((void **)&c->batches, &c->cap_batches, c->n_batches + 1, sizeof(*c->batches)) != 0)
        return NONE;
    char *copy = strdup(id);
    if (!copy)
        return NONE;
    struct batch *b = &c->batches[c->n_batches];
    memset(b, 0, sizeof(*b));
    b->id = copy;
    b->svc = NONE;
    b->db_svc = NONE;
    b->first_taken = -1;
    struct slot *s = map_find(&c->batch_map, copy, h);
    *s = (struct slot){copy, h, c->n_batches};
    c->batch_map.n++;
    return c->n_batches++;
}

/* Returns the index of the service `key`, creating it; NONE when out of memory. */
static size_t service_get(struct qw_check *c, const char *key)
{
    uint64_t h = hash_str(key);
    if (c->service_map.cap) {
        struct slot *s = map_find(&c->service_map, key, h);
        if (s->key)
            return s->idx;
    }
    if ((c->service_map.n + 1) * 2 > c->service_map.cap && map_grow(&c->service_map) != 0)
        return NONE;
    if (grow((void **)&c->services, &c->cap_services, c->n_services + 1, sizeof(*c->services)) != 0)
        return NONE;
    char *copy = strdup(key);
    if (!copy)
        return NONE;
    struct service *sv = &c->services[c->n_services];
    memset(sv, 0, sizeof(*sv));
    sv->key = copy;
    struct slot *s = map_find(&c->service_map, copy, h);
    *s = (struct slot){copy, h, c->n_services};
    c->service_map.n++;
    return c->n_services++;
}

int qw_check_new(qw_check_violation_fn fn, void *ctx, struct qw_check **out)
{
    *out = calloc(1, sizeof(**out));
    if (!*out)
        return -1;
    (*out)->fn = fn;
    (*out)->ctx = ctx;
    return 0;
}

void qw_check_free(struct qw_check *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_batches; i++)
        free(c->batches[i].id);
    for (size_t i = 0; i < c->n_services; i++) {
        free(c->services[i].key);
        free(c->services[i].open);
    }
    free(c->batches);
    free(c->services);
    free(c->batch_map.slots);
    free(c->service_map.slots);
    free(c);
}

/* ---- replay ------------------------------------------------------------- */

static void close_open(struct qw_check *c, size_t bi)
{
    struct batch *b = &c->batches[bi];
    if (!b->open)
        return;
    b->open = false;
    struct service *sv = &c->services[b->svc];
    for (size_t i = 0; i < sv->n_open; i++) {
        if (sv->open[i] == bi) {
            sv->open[i] = sv->open[--sv->n_open];
            return;
        }
    }
}

/* The ledger took batch `bi` under service `si` (I2 is decided here). */
static int on_taken(struct qw_check *c, size_t bi, size_t si, bool dup)
{
    struct batch *b = &c->batches[bi];
    struct service *sv = &c->services[si];
    b->taken++;
    if (b->first_taken < 0)
        b->first_taken = c->fig.events;
    if (b->svc == NONE) {
        b->svc = si;
    } else if (b->svc != si && !b->two_services) {
        b->two_services = true;
        violation(c, 3, "batch %.16s taken under service %s after %s", b->id, sv->key,
                  c->services[b->svc].key);
        return 0; /* its queue slot stays with the first service */
    }
    if (b->open || dup)
        return 0; /* already queued, or known and final there: status unchanged */
    if (sv->n_open > 0) {
        const struct batch *other = &c->batches[sv->open[0]];
        violation(c, 2,
                  "service %s: batch %.16s taken while batch %.16s%s is still pending at the "
                  "ledger",
                  sv->key, b->id, other->id, sv->n_open > 1 ? " (and others)" : "");
    }
    if (grow((void **)&sv->open, &sv->cap, sv->n_open + 1, sizeof(*sv->open)) != 0)
        return -1;
    sv->open[sv->n_open++] = bi;
    b->open = true;
    return 0;
}

static int replay_post(struct qw_check *c, const struct qw_check_event *ev)
{
    c->fig.posts++;
    if (ev->code == 202)
        c->fig.posts_202++;
    else if (ev->code == 429)
        c->fig.posts_429++;
    else
        c->fig.posts_other++;
    if (!ev->batch[0])
        return 0;
    size_t bi = batch_get(c, ev->batch);
    if (bi == NONE)
        return -1;
    struct batch *b = &c->batches[bi];
    b->posts++;
    if (ev->code == 400)
        b->seen_400 = true;
    if (!ev->reached)
        return 0;
    c->fig.posts_reached++;
    size_t si = service_get(c, ev->service);
    if (si == NONE)
        return -1;
    return on_taken(c, bi, si, ev->dup);
}

static int replay_status(struct qw_check *c, const struct qw_check_event *ev)
{
    size_t bi = batch_get(c, ev->batch);
    if (bi == NONE)
        return -1;
    struct batch *b = &c->batches[bi];
    bool final = true;
    if (strcmp(ev->to, "Committed") == 0)
        b->seen_committed = true;
    else if (strcmp(ev->to, "Valid") == 0)
        b->seen_valid = true; /* Valid ends the batch's turn too */
    else if (strcmp(ev->to, "Invalid") == 0)
        b->seen_invalid = true;
    else
        final = false;
    if (final)
        close_open(c, bi);
    return 0;
}

int qw_check_replay(struct qw_check *c, const struct qw_check_event *ev)
{
    int rc = 0;
    switch (ev->kind) {
    case QW_CHECK_EV_POST:
        rc = replay_post(c, ev);
        break;
    case QW_CHECK_EV_GET:
        c->fig.gets++;
        break;
    case QW_CHECK_EV_STATUS:
        rc = replay_status(c, ev);
        break;
    case QW_CHECK_EV_RESTART:
        /* The node forgot everything: nothing is queued there any more. */
        c->fig.restarts++;
        for (size_t i = 0; i < c->n_services; i++) {
            struct service *sv = &c->services[i];
            for (size_t k = 0; k < sv->n_open; k++)
                c->batches[sv->open[k]].open = false;
            sv->n_open = 0;
        }
        break;
    case QW_CHECK_EV_OTHER:
        break;
    }
    c->fig.events++;
    return rc;
}

/* ---- database rows ------------------------------------------------------ */

static bool is_final(const char *status)
{
    return strcmp(status, "Committed") == 0 || strcmp(status, "Valid") == 0 ||
           strcmp(status, "Invalid") == 0;
}

int qw_check_add_batch(struct qw_check *c, const char *batch_id, const char *service_id,
                       const char *status)
{
    size_t bi = batch_get(c, batch_id);
    size_t si = service_get(c, service_id);
    if (bi == NONE || si == NONE)
        return -1;
    struct batch *b = &c->batches[bi];
    if (b->in_db)
        return -1;
    b->in_db = true;
    b->db_svc = si;
    b->db_pos = c->next_pos++;
    snprintf(b->db_status, sizeof(b->db_status), "%s", status ? status : "");
    c->fig.batches++;
    if (is_final(b->db_status))
        c->fig.final_batches++;
    return 0;
}

int qw_check_add_submitting(struct qw_check *c, const char *batch_id, const char *detail)
{
    size_t bi = batch_get(c, batch_id);
    if (bi == NONE)
        return -1;
    c->batches[bi].submitting++;
    c->fig.submitting_rows++;
    if (qw_check_reason_of(detail) == QW_CHECK_REASON_RESUBMIT) {
        c->batches[bi].reasons++;
        c->fig.resubmit_reasons++;
    }
    return 0;
}

/* ---- final checks ------------------------------------------------------- */

static void check_final(struct qw_check *c, const struct batch *b)
{
    const char *svc = c->services[b->db_svc].key;
    const char *st = b->db_status;
    if (!is_final(st)) {
        violation(c, 1, "service %s: batch %.16s is not final (status %s)", svc, b->id,
                  st[0] ? st : "none");
        return;
    }
    bool backed = strcmp(st, "Committed") == 0 ? b->seen_committed
                  : strcmp(st, "Valid") == 0   ? b->seen_valid || b->seen_committed
                                               : b->seen_invalid || b->seen_400;
    if (!backed)
        violation(c, 1,
                  "service %s: batch %.16s is %s in the database but the ledger never "
                  "said so",
                  svc, b->id, st);
}

static int by_service_then_creation(const void *pa, const void *pb, void *arg)
{
    const struct batch *all = arg;
    const struct batch *a = &all[*(const size_t *)pa];
    const struct batch *b = &all[*(const size_t *)pb];
    if (a->db_svc != b->db_svc)
        return a->db_svc < b->db_svc ? -1 : 1;
    return a->db_pos < b->db_pos ? -1 : a->db_pos > b->db_pos;
}

static int check_order(struct qw_check *c)
{
    size_t n = 0;
    size_t *idx = malloc((c->n_batches ? c->n_batches : 1) * sizeof(*idx));
    if (!idx)
        return -1;
    for (size_t i = 0; i < c->n_batches; i++) {
        const struct batch *b = &c->batches[i];
        if (b->first_taken < 0)
            continue;
        if (!b->in_db) {
            violation(c, 3,
                      "service %s: the ledger took batch %.16s, which queuer.batches "
                      "does not hold",
                      c->services[b->svc].key, b->id);
            continue;
        }
        if (b->svc != b->db_svc && !b->two_services) {
            violation(c, 3, "batch %.16s of service %s was taken under service %s", b->id,
                      c->services[b->db_svc].key, c->services[b->svc].key);
            continue;
        }
        idx[n++] = i;
    }
    qsort_r(idx, n, sizeof(*idx), by_service_then_creation, c->batches);
    for (size_t k = 1; k < n; k++) {
        const struct batch *prev = &c->batches[idx[k - 1]];
        const struct batch *cur = &c->batches[idx[k]];
        if (prev->db_svc == cur->db_svc && prev->first_taken > cur->first_taken)
            violation(c, 3, "service %s: batch %.16s was taken before the older batch %.16s",
                      c->services[cur->db_svc].key, cur->id, prev->id);
    }
    free(idx);
    return 0;
}

static void check_reasons(struct qw_check *c, const struct batch *b)
{
    if (b->taken > 1) {
        c->fig.duplicate_batches++;
        c->fig.duplicate_posts += b->taken - 1;
        if (b->reasons < b->taken - 1)
            violation(c, 4,
                      "batch %.16s: the ledger took it %d times but only %d resubmission "
                      "reason(s) are recorded",
                      b->id, b->taken, b->reasons);
    }
    if (b->posts > b->submitting)
        violation(c, 4, "batch %.16s: POSTed %d times but marked Submitting only %d times", b->id,
                  b->posts, b->submitting);
}

int qw_check_finish(struct qw_check *c, struct qw_check_figures *fig)
{
    for (size_t i = 0; i < c->n_batches; i++) {
        const struct batch *b = &c->batches[i];
        if (b->in_db) {
            check_final(c, b);
            check_reasons(c, b);
        }
    }
    int rc = check_order(c);
    c->fig.services = (long long)c->n_services;
    *fig = c->fig;
    return rc;
}
