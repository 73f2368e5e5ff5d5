/*
 * POST dispatch: the ready queue (prioq.h) and the one place a POST starts,
 * once no 429 or 401/403 pause holds, the node chooser finds a free channel
 * and the shared capacity admits the job's cost (see submitter.c, "Dispatch").
 */
#include "common/log.h"
#include "ingest/batchlist.h"
#include "submitter/submitter_int.h"

/* The job's cost against the shared capacity (dlt.cost), computed once per batch. */
int64_t qw_submitter_job_cost(struct submitter *s, struct qw_job *job)
{
    if (job->sub->cost == 0) {
        int64_t txns = 0;
        if (s->cost_kind == QW_COST_TRANSACTIONS && job->payload)
            txns = qw_batchlist_transactions(job->payload, job->payload_len);
        job->sub->cost = qw_capacity_cost_of(s->cost_kind, job->payload_len, txns);
    }
    return job->sub->cost;
}

/* The job's batch left the ledger (or never got in): its units of the shared capacity are free
 * again. */
void qw_submitter_units_give_back(struct submitter *s, struct qw_job *job)
{
    if (job->sub->cap_taken > 0)
        qw_capacity_give_back(&s->gate, job->sub->cap_taken);
    job->sub->cap_taken = 0;
}

/* The job gives up its place in its node's window. */
void qw_submitter_window_give_back(struct submitter *s, struct qw_job *job)
{
    if (job->sub->win_node >= 0)
        qw_window_give_back(&s->nodes.node[job->sub->win_node].win);
    job->sub->win_node = -1;
}

void qw_submitter_capacity_give_back(struct submitter *s, struct qw_job *job)
{
    qw_submitter_units_give_back(s, job);
    qw_submitter_window_give_back(s, job);
}

/* The cap on every node's window: the in-flight share of a shared capacity
 * counted in batches (dlt.cost = batch), else none (0). */
int qw_submitter_window_cap(const struct submitter *s)
{
    const struct qw_capacity_grant *g = &s->gate.grant;
    if (!g->active || s->cost_kind != QW_COST_BATCH || g->in_flight == QW_CAPACITY_UNLIMITED)
        return 0;
    return g->in_flight < 1 ? 1 : g->in_flight > INT32_MAX ? INT32_MAX : (int)g->in_flight;
}

static struct qw_job *job_of_ready(struct qw_prioq_item *it)
{
    struct qw_submission *sub =
        (struct qw_submission *)(void *)((char *)it - offsetof(struct qw_submission, ready));
    return sub->job;
}

/* The job's POST is due: it waits in the ready queue for capacity. */
void qw_submitter_make_ready(struct submitter *s, struct qw_job *job, int64_t t)
{
    job->sub->state = QW_JOB_WAITING;
    if (qw_prioq_push(&s->ready, &job->sub->ready, job->priority, t) != 0) {
        qw_submitter_push_timer(s, job, QW_JOB_WAITING,
                                t + 5); /* no memory for a new level: retry */
        return;
    }
    if (job->deadline_ms < s->ready_deadline_ms)
        s->ready_deadline_ms = job->deadline_ms;
}

/* Starts the job's POST on `node`; false when the client could not start it,
 * or once our registration was superseded (nothing more is posted). */
static bool start_post(struct submitter *s, struct qw_job *job, int node, int64_t t)
{
    if (atomic_load(&s->w->superseded))
        return false;
    int rc = qw_dlt_post(s->dlt, node, job->service_id, job->payload, job->payload_len, job);
    if (rc != QW_OK)
        return false;
    job->sub->state = QW_JOB_POSTING;
    job->sub->node = node;
    job->sub->post_node = node;
    job->sub->post_node_knew = false;
    job->sub->win_node = node;
    job->sub->win_epoch = qw_window_take(&s->nodes.node[node].win);
    job->sub->posted_us = qw_clock_mono_us();
    s->posting++;
    qw_nodes_started(&s->nodes, node, QW_NODE_REQ_POST, t);
    return true;
}

/*
 * The one place that decides whether a POST may start now as far as the
 * shared capacity goes (capacity.h): takes the job's cost from the gate, or
 * leaves the job waiting and says when to look again in *next.
 */
static bool capacity_admits(struct submitter *s, struct qw_job *job, int64_t t, int64_t *next)
{
    if (!s->gate.grant.active)
        return true; /* no capacity set: nothing to count, not even the cost */
    int64_t wait_ms;
    enum qw_capacity_verdict v =
        qw_capacity_try_take(&s->gate, qw_submitter_job_cost(s, job), t, &wait_ms);
    if (v == QW_CAP_TAKEN) {
        job->sub->cap_taken = job->sub->cost;
        job->sub->cap_waited = false;
        return true;
    }
    s->cap_refused = s->cap_refused || v != QW_CAP_WAIT_RATE;
    if (!job->sub->cap_waited) {
        job->sub->cap_waited = true;
        atomic_fetch_add_explicit(&s->w->stats.capacity_waits, 1, memory_order_relaxed);
    }
    /* A freed slot wakes the loop by itself (a transfer ends); a rate or a
     * missing grant needs a timer. */
    int64_t at = v == QW_CAP_WAIT_RATE    ? t + wait_ms
                 : v == QW_CAP_WAIT_GRANT ? t + CAPACITY_NO_GRANT_RETRY_MS
                                          : INT64_MAX;
    if (at < *next)
        *next = at;
    return false;
}

/*
 * Starts the POST of ready entry `it` on a node of `route` when one has a
 * free channel and room in its window (one batch at a time per node when
 * its priority is below `yield_below`; else adds `route` to *full) and the
 * shared capacity admits it. Returns false when dispatch must stop for now
 * (the capacity or the transfer slots are used up).
 */
static bool try_post(struct submitter *s, struct qw_prioq_item *it, uint32_t route, int cap,
                     int yield_below, int64_t t, uint32_t *full)
{
    struct qw_job *job = job_of_ready(it);
    int node = qw_nodes_pick_post(&s->nodes, route, job->avoid_node,
                                  qw_window_yield_cap(cap, job->priority, yield_below), t);
    if (node < 0) {
        *full |= route;
        return true;
    }
    if (!capacity_admits(s, job, t, &s->cap_retry_ms))
        return false; /* a finishing POST, the rate or the next grant frees some */
    qw_prioq_remove(&s->ready, it);
    if (!start_post(s, job, node, t)) {
        qw_submitter_capacity_give_back(s, job);
        if (qw_prioq_push_again(&s->ready, it) != 0)
            qw_submitter_push_timer(s, job, QW_JOB_WAITING, t + 5);
        return false; /* no transfer slot: try again when one frees */
    }
    return true;
}

/* the latest of: a 429 pause, a 401/403 pause, the wait of a registration
 * that replaced a process whose POSTs may still land */
static int64_t paused_until(const struct submitter *s)
{
    int64_t until = s->pause.pause_until_ms > s->pause.auth_until_ms ? s->pause.pause_until_ms
                                                                     : s->pause.auth_until_ms;
    return until > s->w->posts_from_ms ? until : s->w->posts_from_ms;
}

static bool paused(const struct submitter *s, int64_t t)
{
    return t < paused_until(s);
}

/* Gives back the ready jobs whose lease deadline passed (all of them when stopping). */
void qw_submitter_sweep_ready(struct submitter *s, int64_t t)
{
    int64_t earliest = INT64_MAX;
    struct qw_prioq_item *it = qw_prioq_first(&s->ready);
    while (it) {
        struct qw_prioq_item *next = qw_prioq_next(&s->ready, it);
        struct qw_job *job = job_of_ready(it);
        if (s->stopping || t >= job->deadline_ms) {
            qw_prioq_remove(&s->ready, it);
            qw_submitter_requeue(s, job,
                                 s->stopping ? "worker stopping" : "claim lease may have lapsed");
        } else if (job->deadline_ms < earliest) {
            earliest = job->deadline_ms;
        }
        it = next;
    }
    s->ready_deadline_ms = earliest;
}

/* The cost of every POST waiting (ready or on a timer) plus what is in flight: the target. */
static int64_t capacity_target(struct submitter *s)
{
    int64_t cost = s->gate.used;
    for (struct qw_prioq_item *it = qw_prioq_first(&s->ready); it;
         it = qw_prioq_next(&s->ready, it))
        cost += qw_submitter_job_cost(s, job_of_ready(it));
    for (struct qw_job *job = s->timers; job; job = job->next)
        if (job->sub->state == QW_JOB_WAITING)
            cost += qw_submitter_job_cost(s, job);
    return cost;
}

/*
 * Notes, for the other workers (reported with the lease), the priority of
 * the ready queue's highest-priority job when it waits for room at a ledger
 * node pushing back: a 429 pause, or windows the node's answers shrank.
 * Not with a shared capacity, which divides the room by leases instead.
 */
static void note_waiting(struct submitter *s, int64_t t, uint32_t every, int cap)
{
    struct qw_prioq_item *top = qw_prioq_first(&s->ready);
    if (!top || s->gate.grant.active)
        return;
    uint32_t route = job_of_ready(top)->sub->route & every;
    if (t >= s->pause.pause_until_ms && !qw_nodes_pushing_back(&s->nodes, route, cap))
        return;
    if (top->priority > atomic_load_explicit(&s->w->waiting_priority, memory_order_relaxed))
        atomic_store_explicit(&s->w->waiting_priority, top->priority, memory_order_relaxed);
}

/*
 * The dispatch point: the one place a POST starts. The ready queue names
 * the next job (priority with aging, round-robin within a priority); it
 * goes when no pause holds, the node chooser finds an up node that serves
 * its service with a free channel and room in its window (a window of one
 * batch when another worker has batches of higher priority waiting for the
 * ledger), and the shared capacity admits it (capacity_admits()). What
 * cannot start stays queued, in its turn: the head waits, so scarce
 * capacity of any kind goes to the highest (aged) priority first. When the
 * head waits for nodes that are full, a job whose service other nodes serve
 * may go past it (those nodes cannot take the head's batch anyway); among
 * jobs that need the same full nodes, order holds.
 */
void qw_submitter_dispatch(struct submitter *s, int64_t t)
{
    s->cap_refused = false;
    s->cap_retry_ms = INT64_MAX;
    if (s->stopping || t >= s->ready_deadline_ms)
        qw_submitter_sweep_ready(s, t);
    int cap = qw_submitter_window_cap(s);
    uint32_t every = qw_nodes_all_mask(&s->nodes);
    if (!paused(s, t)) {
        if (atomic_load_explicit(&s->w->stats.paused, memory_order_relaxed))
            atomic_store(&s->w->stats.paused, 0);
        int yield_below = atomic_load_explicit(&s->w->yield_below, memory_order_relaxed);
        uint32_t full = 0; /* nodes found with no free channel or no room in their window */
        struct qw_prioq_item *it;
        bool go_on = true;
        while (go_on && (it = qw_prioq_peek(&s->ready, t)) != NULL) {
            uint32_t route = job_of_ready(it)->sub->route & every;
            go_on = try_post(s, it, route, cap, yield_below, t, &full);
            if (go_on && (full & route) == route)
                break; /* the head waits for its nodes: a finishing POST or batch frees room */
        }
        /* The head waits for nodes that are full: a job whose service other
         * nodes serve may go past it, in queue order. */
        if (go_on && it && (full & every) != every) {
            struct qw_prioq_item *next;
            for (it = qw_prioq_first(&s->ready); it && go_on && (full & every) != every;
                 it = next) {
                next = qw_prioq_next(&s->ready, it);
                uint32_t route = job_of_ready(it)->sub->route & every;
                if (route & ~full)
                    go_on = try_post(s, it, route, cap, yield_below, t, &full);
            }
        }
    }
    note_waiting(s, t, every, cap);
    s->target = s->gate.grant.active ? capacity_target(s) : s->gate.used;
}

/* When qw_submitter_dispatch() should run again without a transfer finishing (ms), or INT64_MAX. */
int64_t qw_submitter_dispatch_due(const struct submitter *s, int64_t t)
{
    if (qw_prioq_len(&s->ready) == 0)
        return INT64_MAX;
    int64_t due = s->ready_deadline_ms < s->cap_retry_ms ? s->ready_deadline_ms : s->cap_retry_ms;
    if (paused(s, t) && paused_until(s) < due)
        due = paused_until(s);
    return due;
}
