/* The simulator's engine: locked ledger, ticker thread, waiters; see engine.h. */
#include "engine.h"

#include "common/err.h"
#include "common/log.h"
#include "history.h"
#include "render.h"
#include "simclock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Long polls of one service, hung off qw_sim_service.user. */
struct svc_waiters {
    struct qw_sim_waiter *head;     /* armed long polls on this service */
    bool dirty;                     /* a status changed since the last check */
    struct svc_waiters *next_dirty; /* next in the engine's dirty list */
};

/* A commit on its way to the nodes that did not take the batch. */
struct propagation {
    int64_t due_us;             /* when the other nodes learn it */
    struct qw_sim_service *svc; /* its service (lives as long as the ledger) */
    int origin;                 /* the node that took it (knows already) */
    enum qw_sim_status status;  /* Committed or Invalid */
    char *id;                   /* batch id, malloc'd */
};

struct qw_sim_engine {
    pthread_mutex_t mu;              /* guards everything below */
    struct qw_sim_engine_config cfg; /* copy */
    struct qw_sim_history **hist;    /* per_node: one history per node */
    struct propagation *props;       /* min-heap on due_us */
    size_t n_props;                  /* entries in props */
    size_t cap_props;                /* allocated entries */
    pthread_cond_t tick;             /* wakes the ticker (CLOCK_MONOTONIC) */
    pthread_t ticker;                /* the ticker thread */
    bool ticker_started;             /* `ticker` must be joined */
    bool stop_ticker;                /* ticker exits */
    bool shutting_down;              /* waits wake at once */
    int64_t ticker_due_us;           /* when the ticker next wakes by itself */
    struct qw_sim_ledger *ledger;    /* the state machine */
    struct qw_sim_evlog *log;        /* borrowed, may be NULL */
    struct qw_sim_stats *stats;      /* borrowed */
    struct qw_sim_waiter **timers;   /* min-heap of armed waiters on deadline */
    size_t n_timers;                 /* entries in `timers` */
    size_t cap_timers;               /* allocated entries */
    struct svc_waiters *dirty;       /* services whose long polls need a check */
};

/* ---- deadline heap ----------------------------------------------------- */

static void timers_swap(struct qw_sim_engine *e, size_t a, size_t b)
{
    struct qw_sim_waiter *t = e->timers[a];
    e->timers[a] = e->timers[b];
    e->timers[b] = t;
    e->timers[a]->heap_pos = a;
    e->timers[b]->heap_pos = b;
}

static void timers_fix(struct qw_sim_engine *e, size_t i)
{
    while (i > 0 && e->timers[i]->deadline_us < e->timers[(i - 1) / 2]->deadline_us) {
        timers_swap(e, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= e->n_timers)
            break;
        if (c + 1 < e->n_timers && e->timers[c + 1]->deadline_us < e->timers[c]->deadline_us)
            c++;
        if (e->timers[c]->deadline_us >= e->timers[i]->deadline_us)
            break;
        timers_swap(e, c, i);
        i = c;
    }
}

static int timers_push(struct qw_sim_engine *e, struct qw_sim_waiter *w)
{
    if (e->n_timers == e->cap_timers) {
        size_t cap = e->cap_timers ? e->cap_timers * 2 : 64;
        struct qw_sim_waiter **n = realloc(e->timers, cap * sizeof(*n));
        if (!n)
            return QW_ERR_NOMEM;
        e->timers = n;
        e->cap_timers = cap;
    }
    w->heap_pos = e->n_timers;
    e->timers[e->n_timers++] = w;
    timers_fix(e, w->heap_pos);
    return QW_OK;
}

static void timers_remove(struct qw_sim_engine *e, struct qw_sim_waiter *w)
{
    size_t i = w->heap_pos;
    e->n_timers--;
    if (i != e->n_timers) {
        e->timers[i] = e->timers[e->n_timers];
        e->timers[i]->heap_pos = i;
        timers_fix(e, i);
    }
}

/* ---- propagation heap (mutex held) ------------------------------------ */

static void props_swap(struct qw_sim_engine *e, size_t a, size_t b)
{
    struct propagation t = e->props[a];
    e->props[a] = e->props[b];
    e->props[b] = t;
}

static void props_push(struct qw_sim_engine *e, const struct propagation *p)
{
    if (e->n_props == e->cap_props) {
        size_t cap = e->cap_props ? e->cap_props * 2 : 256;
        struct propagation *n = realloc(e->props, cap * sizeof(*n));
        if (!n) {
            free(p->id); /* out of memory: the other nodes never learn this one */
            return;
        }
        e->props = n;
        e->cap_props = cap;
    }
    size_t i = e->n_props++;
    e->props[i] = *p;
    while (i > 0 && e->props[i].due_us < e->props[(i - 1) / 2].due_us) {
        props_swap(e, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void props_pop(struct qw_sim_engine *e)
{
    free(e->props[0].id);
    e->props[0] = e->props[--e->n_props];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= e->n_props)
            break;
        if (c + 1 < e->n_props && e->props[c + 1].due_us < e->props[c].due_us)
            c++;
        if (e->props[c].due_us >= e->props[i].due_us)
            break;
        props_swap(e, c, i);
        i = c;
    }
}

static void props_clear(struct qw_sim_engine *e)
{
    for (size_t i = 0; i < e->n_props; i++)
        free(e->props[i].id);
    e->n_props = 0;
}

/* What node `node` answers for `id` of `svc` (NULL = a service nobody posted to). */
static void view(const struct qw_sim_engine *e, int node, const struct qw_sim_service *svc,
                 const char *id, struct qw_sim_status_view *v)
{
    qw_sim_ledger_peek(e->ledger, svc, id, v);
    if (e->cfg.per_node) {
        int64_t changed = 0;
        enum qw_sim_status st =
            svc ? qw_sim_history_get(e->hist[node], svc->index, id, &changed) : QW_SIM_UNKNOWN;
        if (st != v->status || st == QW_SIM_UNKNOWN) {
            const char *txn = v->txn_id, *message = v->message;
            memset(v, 0, sizeof(*v));
            v->status = st;
            v->changed_us = changed;
            if (st == QW_SIM_INVALID) {
                v->txn_id = txn ? txn : id;
                v->message = message ? message : "invalid";
            }
        } else {
            v->changed_us = changed;
        }
        v->settled = st != QW_SIM_PENDING && st != QW_SIM_VALID;
    }
    if (v->status == QW_SIM_UNKNOWN)
        v->settled = e->cfg.unknown_settles;
}

/* ---- waiters (mutex held) ---------------------------------------------- */

static void unlink_waiter(struct qw_sim_engine *e, struct qw_sim_waiter *w)
{
    timers_remove(e, w);
    if (w->svc) {
        struct svc_waiters *sw = w->svc->user;
        if (w->svc_prev)
            w->svc_prev->svc_next = w->svc_next;
        else
            sw->head = w->svc_next;
        if (w->svc_next)
            w->svc_next->svc_prev = w->svc_prev;
        w->svc_prev = w->svc_next = NULL;
    }
    atomic_store(&w->armed, false);
}

static void wake_waiter(struct qw_sim_engine *e, struct qw_sim_waiter *w,
                        enum qw_sim_wake_reason reason)
{
    unlink_waiter(e, w);
    w->reason = reason;
    w->wake(w);
}

/* True when no id of `w` awaits a status change. */
static bool waiter_ready(const struct qw_sim_engine *e, const struct qw_sim_waiter *w)
{
    for (size_t i = 0; i < w->n_ids; i++) {
        struct qw_sim_status_view v;
        view(e, w->node, w->svc, w->ids[i], &v);
        if (!v.settled)
            return false;
    }
    return true;
}

/* The first look of a long poll whose wait began at `start_us` at or after `t_us` (scabbard's
 * handler looks every wait_poll_us from the request on). */
static int64_t next_look(const struct qw_sim_engine *e, int64_t start_us, int64_t t_us)
{
    int64_t p = e->cfg.wait_poll_us;
    if (p <= 0 || t_us <= start_us)
        return t_us;
    return start_us + (t_us - start_us + p - 1) / p * p;
}

static void check_service(struct qw_sim_engine *e, struct svc_waiters *sw, int64_t now_us)
{
    struct qw_sim_waiter *w = sw->head;
    while (w) {
        struct qw_sim_waiter *next = w->svc_next;
        if (waiter_ready(e, w)) {
            int64_t look = next_look(e, w->start_us, now_us);
            if (look <= now_us) {
                wake_waiter(e, w, QW_SIM_WAKE_READY);
            } else if (look < w->deadline_us) {
                w->deadline_us = look; /* answered at its next look */
                timers_fix(e, w->heap_pos);
            }
        }
        w = next;
    }
}

static void check_dirty(struct qw_sim_engine *e, int64_t now_us)
{
    while (e->dirty) {
        struct svc_waiters *sw = e->dirty;
        e->dirty = sw->next_dirty;
        sw->dirty = false;
        sw->next_dirty = NULL;
        check_service(e, sw, now_us);
    }
}

/* Marks the long polls of `svc` for a check. */
static void mark_dirty(struct qw_sim_engine *e, const struct qw_sim_service *svc)
{
    struct svc_waiters *sw = svc->user;
    if (sw && sw->head && !sw->dirty) {
        sw->dirty = true;
        sw->next_dirty = e->dirty;
        e->dirty = sw;
    }
}

/* Records in node `node`'s history; a failed allocation leaves the node not knowing. */
static void hist_put(struct qw_sim_engine *e, int node, const struct qw_sim_service *svc,
                     const char *id, enum qw_sim_status status, int64_t at_us)
{
    if (qw_sim_history_put(e->hist[node], svc->index, id, status, at_us) != QW_OK)
        qw_log_warn("sim.history.no_memory", "node=%d service=%s", node, svc->key);
}

/* The other nodes learn the commits whose propagation is due. */
static void propagate(struct qw_sim_engine *e, int64_t now_us)
{
    while (e->n_props > 0 && e->props[0].due_us <= now_us) {
        const struct propagation *p = &e->props[0];
        for (size_t n = 0; n < e->cfg.nodes; n++) {
            if ((int)n != p->origin)
                hist_put(e, (int)n, p->svc, p->id, p->status, p->due_us);
        }
        mark_dirty(e, p->svc);
        props_pop(e);
    }
}

static void expire_timers(struct qw_sim_engine *e, int64_t now_us)
{
    while (e->n_timers > 0 && e->timers[0]->deadline_us <= now_us)
        wake_waiter(e, e->timers[0], QW_SIM_WAKE_TIMEOUT);
}

/* The earliest of the next status change, propagation and waiter deadline. */
static int64_t next_due(const struct qw_sim_engine *e)
{
    int64_t due = qw_sim_ledger_next_due_us(e->ledger);
    if (e->n_timers > 0 && e->timers[0]->deadline_us < due)
        due = e->timers[0]->deadline_us;
    if (e->n_props > 0 && e->props[0].due_us < due)
        due = e->props[0].due_us;
    return due;
}

/* Wakes the ticker if something is now due before it would wake. */
static void kick(struct qw_sim_engine *e)
{
    int64_t due = next_due(e);
    if (due < e->ticker_due_us) {
        e->ticker_due_us = due;
        pthread_cond_signal(&e->tick);
    }
}

/* Ledger change callback (mutex held). */
static void on_change(void *ctx, const struct qw_sim_service *svc, const char *batch_id, int origin,
                      enum qw_sim_status from, enum qw_sim_status to, int64_t at_us)
{
    struct qw_sim_engine *e = ctx;
    bool final = to == QW_SIM_COMMITTED || to == QW_SIM_INVALID;
    if (to == QW_SIM_COMMITTED)
        atomic_fetch_add(&e->stats->committed, 1);
    else if (to == QW_SIM_INVALID)
        atomic_fetch_add(&e->stats->invalid, 1);
    if (e->cfg.per_node) {
        hist_put(e, origin, svc, batch_id, to, at_us);
        if (final && e->cfg.nodes > 1) {
            struct propagation p = {.due_us = at_us + e->cfg.propagation_us,
                                    .svc = (struct qw_sim_service *)svc,
                                    .origin = origin,
                                    .status = to,
                                    .id = strdup(batch_id)};
            if (p.id)
                props_push(e, &p);
        }
    }
    mark_dirty(e, svc);
    if (qw_sim_evlog_enabled(e->log)) {
        struct qw_sim_event ev;
        qw_sim_event_begin(&ev, "status");
        qw_sim_event_str(&ev, "service", svc->key);
        qw_sim_event_str(&ev, "batch", batch_id);
        qw_sim_event_str(&ev, "from", qw_sim_status_name(from));
        qw_sim_event_str(&ev, "to", qw_sim_status_name(to));
        qw_sim_event_int(&ev, "due", at_us);
        qw_sim_evlog_emit(e->log, &ev);
    }
}

/* Advances the ledger and the propagation to now and wakes long polls that became ready. */
static void advance(struct qw_sim_engine *e, int64_t now_us)
{
    qw_sim_ledger_advance(e->ledger, now_us);
    propagate(e, now_us);
    check_dirty(e, now_us);
}

/* ---- ticker ------------------------------------------------------------ */

static void *ticker_main(void *arg)
{
    struct qw_sim_engine *e = arg;
    qw_log_set_thread("ticker");
    pthread_mutex_lock(&e->mu);
    while (!e->stop_ticker) {
        int64_t now = qw_sim_clock_now_us();
        advance(e, now);
        expire_timers(e, now);
        int64_t due = next_due(e);
        /* Wake at least once a second even when idle; costs nothing and
         * bounds the effect of any missed signal. */
        if (due > now + 1000000)
            due = now + 1000000;
        e->ticker_due_us = due;
        struct timespec ts = qw_sim_clock_mono_at(due);
        int rc = pthread_cond_timedwait(&e->tick, &e->mu, &ts);
        if (rc != 0 && rc != ETIMEDOUT && rc != EINTR)
            qw_log_error("sim.ticker.wait_failed", "rc=%d", rc);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- lifecycle --------------------------------------------------------- */

int qw_sim_engine_start(const struct qw_sim_engine_config *cfg, struct qw_sim_evlog *log,
                        struct qw_sim_stats *stats, struct qw_sim_engine **out)
{
    *out = NULL;
    if (cfg->nodes < 1)
        return QW_ERR_INVALID;
    struct qw_sim_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return QW_ERR_NOMEM;
    e->cfg = *cfg;
    e->log = log;
    e->stats = stats;
    e->ticker_due_us = INT64_MAX;
    struct qw_sim_ledger_config lc = cfg->ledger;
    int rc = QW_OK;
    if (cfg->per_node) {
        /* The ledger keeps every final status (duplicates are recognised as
         * long as the ledger lives); what a node can tell is its history's. */
        lc.status_memory = 0;
        e->hist = calloc(cfg->nodes, sizeof(*e->hist));
        rc = e->hist ? QW_OK : QW_ERR_NOMEM;
        for (size_t i = 0; rc == QW_OK && i < cfg->nodes; i++)
            rc = qw_sim_history_new(cfg->ledger.status_memory, &e->hist[i]);
    }
    if (rc == QW_OK)
        rc = qw_sim_ledger_new(&lc, on_change, e, &e->ledger);
    if (rc != QW_OK) {
        for (size_t i = 0; e->hist && i < cfg->nodes; i++)
            qw_sim_history_free(e->hist[i]);
        free(e->hist);
        free(e);
        return rc;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->tick, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&e->mu, NULL);
    if (pthread_create(&e->ticker, NULL, ticker_main, e) != 0) {
        qw_sim_engine_free(e);
        return QW_ERR_IO;
    }
    e->ticker_started = true;
    *out = e;
    return QW_OK;
}

static void wake_service_polls(void *ctx, const struct qw_sim_service *svc)
{
    struct qw_sim_engine *e = ctx;
    struct svc_waiters *sw = svc->user;
    while (sw && sw->head)
        wake_waiter(e, sw->head, QW_SIM_WAKE_READY);
}

void qw_sim_engine_shutdown(struct qw_sim_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->shutting_down = true;
    while (e->n_timers > 0)
        wake_waiter(e, e->timers[0], QW_SIM_WAKE_SHUTDOWN);
    pthread_mutex_unlock(&e->mu);
}

static void free_service_ext(void *ctx, const struct qw_sim_service *svc)
{
    (void)ctx;
    free(svc->user);
}

void qw_sim_engine_free(struct qw_sim_engine *e)
{
    if (!e)
        return;
    if (e->ticker_started) {
        pthread_mutex_lock(&e->mu);
        e->stop_ticker = true;
        pthread_cond_signal(&e->tick);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->ticker, NULL);
    }
    qw_sim_ledger_foreach_service(e->ledger, free_service_ext, NULL);
    qw_sim_ledger_free(e->ledger);
    for (size_t i = 0; e->hist && i < e->cfg.nodes; i++)
        qw_sim_history_free(e->hist[i]);
    free(e->hist);
    props_clear(e);
    free(e->props);
    free(e->timers);
    pthread_cond_destroy(&e->tick);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

/* ---- requests ---------------------------------------------------------- */

/* Why the ledger refused a submission, for the event log; NULL when it did not. */
static const char *refusal_name(enum qw_sim_accept_result r)
{
    switch (r) {
    case QW_SIM_REFUSED_SERVICE:
        return "service";
    case QW_SIM_REFUSED_GLOBAL:
        return "global";
    case QW_SIM_REFUSED_RATE:
        return "rate";
    case QW_SIM_ACCEPTED:
        break;
    }
    return NULL;
}

static void post_line(struct qw_sim_engine *e, int node, const char *service_key, const char *batch,
                      int code, const char *fate, const bool *dup, const bool *accepted,
                      const struct qw_sim_post_note *note, const char *refused)
{
    struct qw_sim_event ev;
    qw_sim_event_begin(&ev, "post");
    qw_sim_event_str(&ev, "service", service_key);
    qw_sim_event_str(&ev, "batch", batch);
    if (fate)
        qw_sim_event_str(&ev, "code", fate);
    else
        qw_sim_event_int(&ev, "code", code);
    qw_sim_event_bool(&ev, "dup", dup ? *dup : false);
    if (accepted)
        qw_sim_event_bool(&ev, "accepted", *accepted);
    if (note && note->fault)
        qw_sim_event_str(&ev, "fault", note->fault);
    if (note && note->malformed)
        qw_sim_event_bool(&ev, "malformed", true);
    if (note && note->slow_ms > 0)
        qw_sim_event_int(&ev, "slow_ms", note->slow_ms);
    if (refused)
        qw_sim_event_str(&ev, "refused", refused);
    qw_sim_event_int(&ev, "node", node);
    qw_sim_evlog_emit(e->log, &ev);
}

int qw_sim_engine_submit(struct qw_sim_engine *e, int node, const char *service_key,
                         const struct qw_sim_submission *subs, size_t n,
                         const struct qw_sim_post_note *note, enum qw_sim_accept_result *result)
{
    bool dup_small[16];
    bool *dup = n <= 16 ? dup_small : calloc(n, sizeof(*dup));
    if (!dup)
        return QW_ERR_NOMEM;
    pthread_mutex_lock(&e->mu);
    int64_t now = qw_sim_clock_now_us();
    advance(e, now);
    int rc = QW_ERR_NOMEM;
    struct qw_sim_service *svc = qw_sim_ledger_service(e->ledger, service_key, true);
    if (svc)
        rc = qw_sim_ledger_accept(e->ledger, svc, subs, n, now, node, dup, result);
    if (rc == QW_OK) {
        bool accepted = *result == QW_SIM_ACCEPTED;
        if (!accepted)
            atomic_fetch_add(&e->stats->refused[*result - QW_SIM_REFUSED_SERVICE], 1);
        for (size_t i = 0; i < n; i++) {
            if (accepted && dup[i]) {
                atomic_fetch_add(&e->stats->duplicates, 1);
                qw_log_debug("sim.duplicate", "service=%s batch=%.16s", service_key,
                             subs[i].batch_id);
            } else if (accepted) {
                atomic_fetch_add(&e->stats->accepted, 1);
            }
            if (accepted && e->cfg.per_node) {
                /* The node records what it is given (a duplicate: as the
                 * ledger has it now). */
                struct qw_sim_status_view v;
                qw_sim_ledger_peek(e->ledger, svc, subs[i].batch_id, &v);
                hist_put(e, node, svc, subs[i].batch_id,
                         v.status == QW_SIM_UNKNOWN ? QW_SIM_PENDING : v.status, now);
                mark_dirty(e, svc);
            }
            if (qw_sim_evlog_enabled(e->log)) {
                const char *fate = note ? note->fate : NULL;
                post_line(e, node, service_key, subs[i].batch_id, accepted ? 202 : 429, fate,
                          &dup[i], fate ? &accepted : NULL, note, refusal_name(*result));
            }
        }
        check_dirty(e, now);
        kick(e);
    }
    pthread_mutex_unlock(&e->mu);
    if (dup != dup_small)
        free(dup);
    return rc;
}

void qw_sim_engine_log_post(struct qw_sim_engine *e, int node, const char *service_key,
                            const struct qw_sim_submission *subs, size_t n, int code,
                            const char *fate, const struct qw_sim_post_note *note)
{
    if (!qw_sim_evlog_enabled(e->log))
        return;
    bool not_accepted = false;
    if (n == 0)
        post_line(e, node, service_key, NULL, code, fate, NULL, fate ? &not_accepted : NULL, note,
                  NULL);
    for (size_t i = 0; i < n; i++)
        post_line(e, node, service_key, subs[i].batch_id, code, fate, NULL,
                  fate ? &not_accepted : NULL, note, NULL);
}

char *qw_sim_engine_render_statuses(struct qw_sim_engine *e, int node, const char *service_key,
                                    const char *const *ids, size_t n, bool *settled)
{
    struct qw_sim_status_view small[16];
    struct qw_sim_status_view *views = n <= 16 ? small : calloc(n, sizeof(*views));
    if (!views)
        return NULL;
    pthread_mutex_lock(&e->mu);
    int64_t now = qw_sim_clock_now_us();
    advance(e, now);
    struct qw_sim_service *svc = qw_sim_ledger_service(e->ledger, service_key, false);
    *settled = true;
    for (size_t i = 0; i < n; i++) {
        view(e, node, svc, ids[i], &views[i]);
        *settled = *settled && views[i].settled;
    }
    char *body = qw_sim_render_statuses(ids, views, n, now);
    pthread_mutex_unlock(&e->mu);
    if (views != small)
        free(views);
    return body;
}

void qw_sim_engine_log_get(struct qw_sim_engine *e, int node, const char *service_key, size_t n_ids,
                           int code, const char *fate, int64_t waited_ms)
{
    if (!qw_sim_evlog_enabled(e->log))
        return;
    struct qw_sim_event ev;
    qw_sim_event_begin(&ev, "get");
    qw_sim_event_str(&ev, "service", service_key);
    qw_sim_event_int(&ev, "n", (long long)n_ids);
    if (fate)
        qw_sim_event_str(&ev, "code", fate);
    else
        qw_sim_event_int(&ev, "code", code);
    if (waited_ms > 0)
        qw_sim_event_int(&ev, "waited_ms", waited_ms);
    qw_sim_event_int(&ev, "node", node);
    qw_sim_evlog_emit(e->log, &ev);
}

void qw_sim_engine_wait(struct qw_sim_engine *e, struct qw_sim_waiter *w)
{
    w->reason = QW_SIM_WAKE_NONE;
    w->svc = NULL;
    w->svc_prev = w->svc_next = NULL;
    pthread_mutex_lock(&e->mu);
    int64_t now = qw_sim_clock_now_us();
    advance(e, now);
    enum qw_sim_wake_reason at_once = QW_SIM_WAKE_NONE;
    if (e->shutting_down)
        at_once = QW_SIM_WAKE_SHUTDOWN;
    if (w->n_ids > 0 && w->deadline_us != INT64_MAX)
        w->deadline_us = next_look(e, w->start_us, w->deadline_us); /* it ends at a look */
    if (!at_once && w->n_ids > 0) {
        w->svc = qw_sim_ledger_service(e->ledger, w->service_key, true);
        if (!w->svc || waiter_ready(e, w))
            at_once = QW_SIM_WAKE_READY;
        else if (!w->svc->user && !(w->svc->user = calloc(1, sizeof(struct svc_waiters))))
            at_once = QW_SIM_WAKE_READY;
    }
    if (!at_once && w->deadline_us <= now)
        at_once = QW_SIM_WAKE_TIMEOUT;
    if (!at_once && timers_push(e, w) != QW_OK)
        at_once = QW_SIM_WAKE_TIMEOUT;
    if (at_once) {
        w->svc = NULL;
        w->reason = at_once;
        w->wake(w);
    } else {
        atomic_store(&w->armed, true);
        if (w->svc) {
            struct svc_waiters *sw = w->svc->user;
            w->svc_next = sw->head;
            if (sw->head)
                sw->head->svc_prev = w;
            sw->head = w;
        }
        kick(e);
    }
    pthread_mutex_unlock(&e->mu);
}

void qw_sim_engine_cancel(struct qw_sim_engine *e, struct qw_sim_waiter *w)
{
    if (!atomic_load(&w->armed))
        return;
    pthread_mutex_lock(&e->mu);
    if (atomic_load(&w->armed))
        unlink_waiter(e, w);
    pthread_mutex_unlock(&e->mu);
}

size_t qw_sim_engine_wake_where(struct qw_sim_engine *e,
                                bool (*match)(const struct qw_sim_waiter *w, void *ctx), void *ctx)
{
    size_t woken = 0;
    pthread_mutex_lock(&e->mu);
    /* Every armed waiter is in the deadline heap; waking one reorders the
     * heap, so collect the matches first. */
    struct qw_sim_waiter **hit = e->n_timers ? malloc(e->n_timers * sizeof(*hit)) : NULL;
    size_t n = 0;
    for (size_t i = 0; hit && i < e->n_timers; i++) {
        if (match(e->timers[i], ctx))
            hit[n++] = e->timers[i];
    }
    for (size_t i = 0; i < n; i++) {
        if (atomic_load(&hit[i]->armed)) {
            wake_waiter(e, hit[i], QW_SIM_WAKE_SHUTDOWN);
            woken++;
        }
    }
    free(hit);
    pthread_mutex_unlock(&e->mu);
    return woken;
}

void qw_sim_engine_restart(struct qw_sim_engine *e, const char *why)
{
    pthread_mutex_lock(&e->mu);
    int64_t now = qw_sim_clock_now_us();
    advance(e, now);
    qw_sim_ledger_restart(e->ledger, now);
    for (size_t i = 0; e->hist && i < e->cfg.nodes; i++)
        qw_sim_history_clear(e->hist[i]);
    props_clear(e);
    atomic_fetch_add(&e->stats->restarts, 1);
    if (qw_sim_evlog_enabled(e->log)) {
        struct qw_sim_event ev;
        qw_sim_event_begin(&ev, "restart");
        qw_sim_event_str(&ev, "why", why);
        qw_sim_evlog_emit(e->log, &ev);
    }
    /* Every status is Unknown now, so every long poll is answered. */
    qw_sim_ledger_foreach_service(e->ledger, wake_service_polls, e);
    pthread_mutex_unlock(&e->mu);
    qw_log_info("sim.restart", "why=%s", why);
}

void qw_sim_engine_restart_node(struct qw_sim_engine *e, int node)
{
    if (!e->cfg.per_node) {
        qw_sim_engine_restart(e, "node");
        return;
    }
    pthread_mutex_lock(&e->mu);
    int64_t now = qw_sim_clock_now_us();
    advance(e, now);
    qw_sim_history_clear(e->hist[node]);
    size_t dropped = qw_sim_ledger_drop_origin(e->ledger, node, now);
    atomic_fetch_add(&e->stats->restarts, 1);
    if (qw_sim_evlog_enabled(e->log)) {
        struct qw_sim_event ev;
        qw_sim_event_begin(&ev, "restart");
        qw_sim_event_str(&ev, "why", "node");
        qw_sim_event_int(&ev, "node", node);
        qw_sim_event_int(&ev, "dropped", (long long)dropped);
        qw_sim_evlog_emit(e->log, &ev);
    }
    kick(e);
    pthread_mutex_unlock(&e->mu);
    qw_log_info("sim.node.restart", "node=%d queued_batches_lost=%zu", node, dropped);
}

void qw_sim_engine_set_paused(struct qw_sim_engine *e, bool paused)
{
    pthread_mutex_lock(&e->mu);
    int64_t now = qw_sim_clock_now_us();
    advance(e, now);
    bool was = qw_sim_ledger_paused(e->ledger);
    qw_sim_ledger_set_paused(e->ledger, paused, now);
    if (was != paused && qw_sim_evlog_enabled(e->log)) {
        struct qw_sim_event ev;
        qw_sim_event_begin(&ev, paused ? "pause" : "resume");
        qw_sim_evlog_emit(e->log, &ev);
    }
    kick(e);
    pthread_mutex_unlock(&e->mu);
    if (was != paused)
        qw_log_info(paused ? "sim.commits.paused" : "sim.commits.resumed", NULL);
}

struct stats_walk {
    json_t *services; /* {key: {...}} being filled */
    size_t max_any;   /* highest max_queued seen */
    bool failed;      /* an allocation failed */
};

static void stats_service(void *ctx, const struct qw_sim_service *svc)
{
    struct stats_walk *sw = ctx;
    if (svc->max_queued > sw->max_any)
        sw->max_any = svc->max_queued;
    json_t *o = json_pack("{s:I, s:I}", "queued", (json_int_t)svc->queued, "max_queued",
                          (json_int_t)svc->max_queued);
    if (!o || json_object_set_new(sw->services, svc->key, o) != 0)
        sw->failed = true;
}

int qw_sim_engine_stats_json(struct qw_sim_engine *e, json_t *into)
{
    struct stats_walk sw = {.services = json_object()};
    if (!sw.services)
        return QW_ERR_NOMEM;
    pthread_mutex_lock(&e->mu);
    advance(e, qw_sim_clock_now_us());
    qw_sim_ledger_foreach_service(e->ledger, stats_service, &sw);
    size_t queued = qw_sim_ledger_queued_total(e->ledger);
    size_t max_total = qw_sim_ledger_max_queued_total(e->ledger);
    bool paused = qw_sim_ledger_paused(e->ledger);
    pthread_mutex_unlock(&e->mu);
    if (sw.failed || json_object_set_new(into, "services", sw.services) != 0 ||
        json_object_set_new(into, "queued", json_integer((json_int_t)queued)) != 0 ||
        json_object_set_new(into, "max_queued_any", json_integer((json_int_t)sw.max_any)) != 0 ||
        json_object_set_new(into, "max_queued_total", json_integer((json_int_t)max_total)) != 0 ||
        json_object_set_new(into, "paused", json_boolean(paused)) != 0) {
        if (sw.failed)
            json_decref(sw.services);
        return QW_ERR_NOMEM;
    }
    return QW_OK;
}
