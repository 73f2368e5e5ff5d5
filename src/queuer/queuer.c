/*
 * Queuer thread: the loop of the worker cycle. Claims (claims.c), then the
 * queue transaction (fetch, adopt, choose, mark: queue_txn.c), then the
 * handoff of the jobs to the submitter. The database is the truth; the local service map only
 * remembers each held service's claim epoch and whether a job of it is
 * with the submitter (then the service is skipped until the job returns).
 */
#include "queuer/queuer.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "common/histogram.h"
#include "common/log.h"
#include "db/db.h"
#include "db/outage.h"
#include "db/pgarray.h"
#include "db/txn.h"
#include "queuer/backlog.h"
#include "queuer/claims.h"
#include "queuer/claims_plan.h"
#include "queuer/notify_check.h"
#include "shared/job.h"
#include "queuer/queue_txn.h"
#include "queuer/svcmap.h"
#include "queuer/vacuum_watch.h"

#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A claims cycle fetches every held service only this often (and when a
 * big load or a due retry asks for it); otherwise just what changed. The
 * periodic one waits while the backlog drains (see backlog_draining). */
#define FULL_FETCH_EVERY 5
/* The claims cycle's scans over all held services (fair share, release of
 * idle and surplus claims) run this often, counted apart from the full
 * fetches: retries falling due between cycles run full fetches of their
 * own, and once reset the same counter, so under a stream of retries (a
 * 429 storm) the surplus was never released. */
#define HOUSEKEEPING_EVERY 5

/* At most this many claims acquired or released (each) per claims
 * transaction, or taken over for one receiver, and ten times as many
 * taken over in all: a cycle stays short, and what is left goes next
 * cycle. */
#define CLAIMS_BATCH 2000

/* The next claims cycle runs this long after another worker's lease ends
 * by the database's clock, as our clock reads it after the answer. */
#define PEER_LEASE_MARGIN_MS 5
/* A draining service whose job came back (or that a notification named)
 * waits only for a claims cycle to give it back; that cycle runs this long
 * after the first such return, not at the next periodic cycle (a second
 * worker that joins used to idle a whole cycle while the first one's
 * drained services waited), and not at once (jobs come back one by one;
 * one transaction releases all that are back by then). */
#define DRAINED_RELEASE_DELAY_MS 20

/* A mark that left chosen batches out is followed by a full fetch this much later. */
#define MARK_RETRY_MS 100

/* Durations kept for the summary logged at shutdown (the latest ones). */
#define SAMPLES_MAX 16384

/* The latest SAMPLES_MAX durations of one kind of step (a ring). */
struct samples {
    uint32_t us[SAMPLES_MAX]; /* durations, microseconds (saturated) */
    size_t n;                 /* observations so far (the ring holds the last ones) */
};

/* What the claims transactions cost over the worker's life. */
struct claims_tally {
    struct samples txn;     /* claims transactions that committed */
    struct samples cycle;   /* successful cycles: heartbeat, claims, fetch and queue */
    long long txns;         /* claims transactions that committed */
    long long failed;       /* ... that gave up (cycle.failed) */
    long long ser_failures; /* serialization failures (re-runs) in claims transactions */
};

struct queuer {
    struct qw_worker *w;               /* shared state */
    const struct qw_config *cfg;       /* read-only */
    struct qw_db *db;                  /* this thread's connection */
    struct qw_db *listener;            /* database.listen_conninfo's connection, used only
                                          to LISTEN (owned by the caller), or NULL: db
                                          LISTENs */
    struct qw_outage listener_outage;  /* its losses: log lines, paced reconnects */
    struct qw_notify_check check;      /* whether notifications reach us (self-test) */
    struct qw_svcmap svcs;             /* services we hold */
    struct qw_claims_result claims;    /* last claims transaction */
    struct qw_rng rng;                 /* for backoff */
    struct qw_outage outage;           /* this connection's outages: log lines, reconnects */
    struct qw_txn_policy policy;       /* claims: SERIALIZABLE, retried */
    struct qw_txn_policy queue_policy; /* fetch + mark: READ COMMITTED, fenced per row */
    int64_t lease_deadline_ms;         /* monotonic: our claims surely valid until */
    int64_t lease_renewed_ms;          /* monotonic: our lease was last renewed (as sent) */
    int64_t next_retry_ms;             /* monotonic: a Delayed/Unknown batch becomes due */
    char **dirty;                      /* services to fetch again now (jobs came back) */
    size_t n_dirty;                    /* entries in dirty */
    size_t cap_dirty;                  /* allocated entries */
    struct qw_queue_named *named;      /* batches wake-ups named, to mark without a fetch
                                          (their services have `named` set) */
    size_t n_named;                    /* entries in named */
    size_t cap_named;                  /* allocated entries */
    struct qw_queue_bufs bufs;         /* reusable parameters of the queue transaction */
    struct qw_pgarray filter;          /* services of a partial fetch */
    struct qw_pgarray release;         /* surplus claims to give back */
    size_t n_held;                     /* services in svcs with held set */
    size_t reported_held;              /* n_held as our last lease call reported it */
    int cycles_since_reconcile;        /* claims cycles since all our claims were read */
    bool reconcile_asked;              /* claims were handed to us, or the connection
                                          was lost: read them all */
    int64_t settle_until_ms;           /* monotonic: no surplus drained before (the fair
                                          share lags claims handed over) */
    int64_t peer_lease_end_ms;         /* monotonic: another worker's lease runs out, or 0 */
    bool surplus_released;             /* the last claims cycle gave surplus claims back */
    bool released_work;                /* ... and some of them have work (to pick up) */
    bool more_claims;                  /* maintenance or pickup has more to do at once */
    int64_t release_due_ms;            /* monotonic: a claims cycle gives back drained
                                          claims whose job came back, or 0 */
    struct qw_backlog backlog;         /* services chosen but left out for want of room,
                                          started as jobs come back */
    bool notified;                     /* a notification asked for a claims cycle */
    bool notified_all;                 /* ... and for a full fetch (too many to name) */
    bool report_due;                   /* claims given to us by name moved our count past
                                          the slack: a cycle that renews the lease */
    int cycles_since_full;             /* claims cycles since the last full fetch */
    int cycles_since_housekeeping;     /* claims cycles since the last housekeeping */
    struct claims_tally *tally;        /* for the summary; NULL if it could not be allocated */
    struct qw_vacuum_watch vacuum;     /* what holds back vacuum, looked at every 10 s */
};

/* No notification can be trusted: worker.listen is off, or the self-test
 * failed (or the listening connection is lost). New claims and new work are
 * then found by a full fetch and a read of all our claims every cycle. */
static bool polling(const struct queuer *q)
{
    return !q->cfg->worker_listen || !q->check.delivering;
}

static void samples_add(struct samples *sm, int64_t us)
{
    sm->us[sm->n++ % SAMPLES_MAX] = us < 0 ? 0 : us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static int by_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The p50, p99 and maximum of what the ring holds, in ms (sorts it). */
static void samples_summary(struct samples *sm, double out_ms[3])
{
    size_t n = sm->n < SAMPLES_MAX ? sm->n : SAMPLES_MAX;
    out_ms[0] = out_ms[1] = out_ms[2] = 0;
    if (n == 0)
        return;
    qsort(sm->us, n, sizeof(sm->us[0]), by_u32);
    out_ms[0] = sm->us[(n - 1) / 2] / 1000.0;
    out_ms[1] = sm->us[(n * 99 + 99) / 100 - 1] / 1000.0;
    out_ms[2] = sm->us[n - 1] / 1000.0;
}

static void log_claims_summary(struct claims_tally *t)
{
    double txn[3], cycle[3];
    samples_summary(&t->txn, txn);
    samples_summary(&t->cycle, cycle);
    qw_log_info("claims.summary",
                "txns=%lld failed=%lld serialization_failures=%lld txn_p50_ms=%.1f "
                "txn_p99_ms=%.1f txn_max_ms=%.1f cycle_p50_ms=%.1f cycle_p99_ms=%.1f "
                "cycle_max_ms=%.1f",
                t->txns, t->failed, t->ser_failures, txn[0], txn[1], txn[2], cycle[0], cycle[1],
                cycle[2]);
}

static void add_serialization_retries(struct queuer *q, const struct qw_txn_stats *st)
{
    if (st->serialization_retries)
        atomic_fetch_add_explicit(&q->w->stats.serialization_retries, st->serialization_retries,
                                  memory_order_relaxed);
}

/*
 * Services wait in the backlog and jobs are out, each of which starts the
 * next one when it comes back. A full fetch would find mostly those
 * services again, at the cost of a probe of the batches index for every
 * held service (seconds of database time a minute per worker at 12,500
 * held services, every worker alike), so the periodic one waits until the
 * backlog has drained: wake-ups name the services that get new work (and
 * a partial fetch puts them in the backlog by priority), new claims are
 * fetched at once, and a due retry still runs a full fetch. What it would
 * find otherwise (a wake-up lost although the self-test passes) waits
 * until the backlog drains.
 */
static bool backlog_draining(const struct queuer *q)
{
    return qw_backlog_waiting(&q->backlog) > 0 && q->svcs.busy > 0;
}

static int add_dirty(struct queuer *q, const char *service_id);

/*
 * Empties the list of batches wake-ups named. With `fetch`, the services
 * still idle (their batch was left out: not its service's next, its claim
 * row locked, or not marked by name at all) are fetched now, as any other
 * named service; without, a full fetch is about to see them.
 */
static void end_named(struct queuer *q, bool fetch)
{
    for (size_t i = 0; i < q->n_named; i++) {
        struct qw_svc *s = qw_svcmap_get(&q->svcs, q->named[i].service_id);
        if (!s)
            continue;
        s->named = false;
        if (fetch && s->held && !s->busy && add_dirty(q, s->service_id) != QW_OK)
            q->next_retry_ms = 0; /* fall back to a full fetch */
    }
    q->n_named = 0;
}

/*
 * Fetch + queue for all held services (filter NULL) or the listed ones;
 * or, with `named`, queue the batches wake-ups named without a fetch.
 */
static int fetch_and_queue(struct queuer *q, const char *filter, bool named, struct qw_error *err)
{
    struct qw_queue_params p = {
        .instance_id = q->w->instance_id,
        .incarnation = q->w->incarnation,
        .filter = filter,
        .named = named ? q->named : NULL,
        .n_named = named ? q->n_named : 0,
        .svcs = &q->svcs,
        .max_in_flight = q->cfg->dlt_max_in_flight,
    };
    bool all = !filter && !named;
    struct qw_queue_result t;
    int64_t began_us = qw_clock_mono_us();
    int rc = qw_queue_txn_run(q->db, &q->queue_policy, &p, &q->bufs, &t, err);
    add_serialization_retries(q, &t.stats);
    qw_log_debug("queue.done", "all=%d named=%d jobs=%zu attempts=%d us=%lld", all, named, t.n_jobs,
                 t.stats.attempts, (long long)(qw_clock_mono_us() - began_us));
    bool recovered = false;
    if (rc == QW_ERR_OUTCOME_UNKNOWN && q->bufs.mark_sent) {
        /* The marks may have committed: re-read them by key and epoch, and
         * post the ones that did (they were never handed over). */
        rc = qw_db_ok(q->db) ? QW_OK : qw_db_reconnect(q->db, err);
        if (rc == QW_OK)
            rc = qw_queue_recheck_marks(q->db, q->w->instance_id, q->w->incarnation, &q->bufs, &t,
                                        err);
        if (rc == QW_OK)
            qw_log_warn("queue.commit_unknown", "marks_found=%zu action=post", t.n_jobs);
        recovered = true;
    }
    if (rc != QW_OK)
        return rc;
    if (recovered) {
        /* Only the recovered marks are known: fetch everything again next. */
        q->next_retry_ms = 0;
    } else if (all) {
        /* A full fetch knows every waiting service: its overflow replaces the
         * backlog. A partial one adds to it (replacing it forgot services
         * that waited for room until the next full fetch). */
        qw_backlog_replace(&q->backlog, t.overflow, t.n_overflow);
        t.overflow = NULL;
        t.n_overflow = 0;
    } else if (t.n_overflow > 0) {
        if (qw_backlog_add(&q->backlog, t.overflow, t.n_overflow) == QW_OK) {
            t.overflow = NULL;
            t.n_overflow = 0;
        } else {
            q->next_retry_ms = 0; /* cannot remember them: fall back to a full fetch */
        }
    }
    int64_t deadline = q->lease_deadline_ms;
    struct qw_job *job = t.jobs;
    t.jobs = NULL;
    while (job) {
        struct qw_job *next = job->next;
        job->next = NULL;
        job->deadline_ms = deadline;
        struct qw_svc *s = qw_svcmap_get(&q->svcs, job->service_id);
        if (s && s->avoid)
            job->avoid_node = s->avoid_node;
        if (s)
            atomic_store_explicit(job->drain, s->draining, memory_order_relaxed);
        if (s && qw_handoff_push(q->w->jobs, job) == QW_OK) {
            qw_svcmap_set_busy(&q->svcs, s, true);
            s->job = job;
        } else {
            /* The batch stays marked in the database; the next fetch adopts it. */
            qw_log_warn("handoff.full", "service=%s batch=%.16s", job->service_id, job->batch_id);
            qw_job_free(job);
        }
        job = next;
    }
    atomic_store_explicit(&q->w->stats.jobs_busy, (long long)q->svcs.busy, memory_order_relaxed);
    if (all && !recovered)
        atomic_store_explicit(&q->w->stats.ops.delayed, t.n_delayed, memory_order_relaxed);
    /* When the next Delayed/Unknown batch falls due. A full fetch saw every
     * service and sets it; a partial one saw only a few and may only bring
     * it forward (it used to overwrite it, forgetting the retries of every
     * other service until the next full fetch). */
    int64_t due_ms = INT64_MAX;
    if (t.next_retry_us > 0) {
        int64_t in_ms = (t.next_retry_us - t.db_now_us) / 1000 + 1;
        due_ms = qw_clock_mono_ms() + (in_ms > 0 ? in_ms : 0);
    }
    if (!recovered && (all || due_ms < q->next_retry_ms))
        q->next_retry_ms = due_ms;
    /* A chosen batch the mark left out (its claim row was locked, or its
     * claim or state changed): look again soon, not at the next full fetch.
     * (A named one is fetched at once.) */
    if (named)
        end_named(q, true);
    else if (t.mark_short) {
        int64_t soon = qw_clock_mono_ms() + MARK_RETRY_MS;
        if (soon < q->next_retry_ms)
            q->next_retry_ms = soon;
    }
    qw_queue_result_free(&t);
    return QW_OK;
}

/*
 * Rebalancing. Claims are kept when their work runs out, and a service
 * with a steady stream of work always has a batch in flight, so neither
 * would ever go back (after an outage the first worker back could keep
 * everything). So the surplus over our fair share is drained: no new
 * batch is queued, its job out takes no fast path, its batch in flight
 * finishes, and a claims cycle DRAINED_RELEASE_DELAY_MS later gives it
 * back by name (sql/claims_release.sql): with work, for a less loaded
 * worker to pick up; without, for the next enqueue to give to a live
 * worker. Which services are surplus is qw_claims_mark_surplus()'s
 * choice. Returns whether one of the surplus has no job out.
 */
static bool mark_draining(struct queuer *q)
{
    size_t n = q->svcs.used, k = 0, pos = 0;
    struct qw_svc *s;
    struct qw_claims_held *held = n ? malloc(n * sizeof(*held)) : NULL;
    while ((s = qw_svcmap_next(&q->svcs, &pos)) != NULL) {
        s->draining = false;
        if (s->held && held)
            held[k++] = (struct qw_claims_held){.service_id = s->service_id, .busy = s->busy};
    }
    size_t share = q->claims.share > 0 ? (size_t)q->claims.share : 0;
    size_t idle = held ? qw_claims_mark_surplus(held, k, share) : 0;
    for (size_t i = 0; i < k && held[i].draining; i++)
        qw_svcmap_get(&q->svcs, held[i].service_id)->draining = true;
    if (held && k > share)
        qw_log_debug("claims.draining", "n=%zu share=%zu", k - share, share);
    free(held);
    /* A job out stops its fast path while its service drains. */
    pos = 0;
    while ((s = qw_svcmap_next(&q->svcs, &pos)) != NULL) {
        if (s->busy && s->job)
            atomic_store_explicit(s->job->drain, s->draining, memory_order_relaxed);
    }
    return idle > 0;
}

/* Our surplus claims with no job out (draining), as a text[] literal for
 * claims_release; NULL when there are none (or no memory: next time). */
static const char *surplus_to_release(struct queuer *q, int max)
{
    size_t pos = 0;
    int n = 0;
    struct qw_svc *s;
    qw_pgarray_reset(&q->release);
    while (n < max && (s = qw_svcmap_next(&q->svcs, &pos)) != NULL) {
        if (s->held && s->draining && !s->busy) {
            qw_pgarray_text(&q->release, s->service_id);
            n++;
        }
    }
    return n > 0 ? qw_pgarray_finish(&q->release) : NULL;
}

static void set_held(struct queuer *q, struct qw_svc *s, bool held)
{
    if (s->held != held)
        q->n_held += held ? 1 : -1;
    s->held = held;
}

/* A claim of ours: remember its epoch; a new claim (or a new epoch) is fetched at once. */
static int note_claim(struct queuer *q, const struct qw_claim *c)
{
    struct qw_svc *s = qw_svcmap_put(&q->svcs, c->service_id);
    if (!s)
        return QW_ERR_NOMEM;
    if (s->epoch != c->epoch && s->epoch != 0)
        qw_log_info("claim.epoch_changed", "service=%s old=%lld new=%lld", c->service_id,
                    (long long)s->epoch, (long long)c->epoch);
    if (s->epoch != c->epoch && add_dirty(q, c->service_id) != QW_OK)
        q->cycles_since_full = FULL_FETCH_EVERY;
    s->epoch = c->epoch;
    set_held(q, s, true);
    return QW_OK;
}

/* A claim we no longer hold: forget it, or (a job of it is out) when the job comes back. */
static void drop_claim(struct queuer *q, struct qw_svc *s)
{
    set_held(q, s, false);
    if (s->busy)
        s->epoch = -1;
    else
        qw_svcmap_del(&q->svcs, s->service_id);
}

/* Our claim count moved by more than the slack since our last lease
 * renewal reported it (the others' fair share reads the reported one). */
static bool count_unreported(const struct queuer *q)
{
    return qw_claims_count_unreported(q->n_held, q->reported_held, q->cfg->worker_claim_slack);
}

/* Renews our lease (sent at monotonic `now`), reporting p->held and what of
 * ours waited for the ledger's room, and learns what of the others' did. */
static int renew_lease(struct queuer *q, struct qw_claims_params *p, int64_t now,
                       struct qw_error *err)
{
    /* what waited since the last renewal: the submitter starts counting afresh */
    int waited = atomic_exchange(&q->w->waiting_priority, QW_PRIORITY_NONE);
    if (waited > p->waiting_priority)
        p->waiting_priority = waited;
    int rc = qw_claims_lease(q->db, p, &q->claims, err);
    if (rc != QW_OK)
        return rc;
    int was = atomic_exchange(&q->w->yield_below, q->claims.peer_waiting_priority);
    int now_below = q->claims.peer_waiting_priority;
    if (now_below != was) {
        if (now_below == QW_PRIORITY_NONE)
            qw_log_debug("ledger.yield_ended", "reason=\"no other worker waits for the ledger\"");
        else
            qw_log_debug("ledger.yield",
                         "below_priority=%d reason=\"another worker's batches of this priority "
                         "wait for the ledger: ours below it go one at a time per node\"",
                         now_below);
    }
    q->lease_renewed_ms = now;
    q->reported_held = p->held;
    /* (counted from the answer: late rather than early) */
    q->peer_lease_end_ms = q->claims.peer_lease_ms >= 0
                               ? qw_clock_mono_ms() + q->claims.peer_lease_ms + PEER_LEASE_MARGIN_MS
                               : 0;
    return QW_OK;
}

/*
 * Steps 1-3: renew our lease (at most every half cycle), then the claims
 * transaction, then bring the local map up to date with what it changed.
 * Every claim we hold is held while our lease is, so the map needs the
 * full list of our claims only at start, when the lease may have lapsed
 * (others may have freed some of them meanwhile), after a lost connection
 * (see note_outage), and once in a while as a safety net.
 */
static int claims_step(struct queuer *q, bool acquire, bool woken, bool periodic,
                       struct qw_error *err)
{
    const struct qw_config *cfg = q->cfg;
    int64_t began = qw_clock_mono_ms();
    bool first = q->lease_deadline_ms == 0;
    bool lapsed = began >= q->lease_deadline_ms;
    const struct qw_claims_state state = {
        .now_ms = began,
        .lease_deadline_ms = q->lease_deadline_ms,
        .lease_renewed_ms = q->lease_renewed_ms,
        .settle_until_ms = q->settle_until_ms,
        .cycle_ms = cfg->worker_cycle_ms,
        .listen = !polling(q),
        .woken = woken,
        .periodic_housekeeping = periodic,
        .reconcile_asked = q->reconcile_asked,
        .cycles_since_reconcile = ++q->cycles_since_reconcile,
        .held = q->n_held,
        .reported_held = q->reported_held,
        .slack = cfg->worker_claim_slack,
        .share = q->claims.share,
        .free_with_work = q->claims.free_with_work,
    };
    struct qw_claims_plan plan;
    qw_claims_plan_cycle(&state, &plan);
    bool reconcile = plan.reconcile, housekeeping = plan.housekeeping;
    bool may_release = plan.may_release;
    bool release_due = q->release_due_ms != 0;
    q->release_due_ms = 0; /* (after a failure the retry's backoff rules) */
    struct qw_claims_params p = {
        .instance_id = q->w->instance_id,
        .incarnation = q->w->incarnation,
        .lease_ms = cfg->worker_lease_ms,
        .hard_expiry_ms = cfg->worker_hard_expiry_ms,
        .slack = cfg->worker_claim_slack,
        .max_claims = cfg->worker_max_claims,
        .max_changes = CLAIMS_BATCH,
        /* every live worker runs maintenance within a cycle of a lease's end */
        .handover_grace_ms = cfg->worker_cycle_ms,
        .held = q->n_held,
        /* Every cycle, not only at housekeeping: a draining service with no
         * job out waits for nothing but this (another worker may be idle). */
        .release = may_release ? surplus_to_release(q, CLAIMS_BATCH) : NULL,
        .acquire = acquire,
        .housekeeping = housekeeping,
        .reconcile = reconcile,
        .notifications = !cfg->worker_listen   ? "off"
                         : q->check.delivering ? "delivered"
                                               : "not_delivered",
        .waiting_priority = QW_PRIORITY_NONE,
    };
    /* Once per half cycle at most (a cycle woken soon after the last
     * renewal skips it), unless our count moved by more than the slack. The
     * loop schedules the next cycle at most a cycle after the last renewal. */
    int rc = plan.renew ? renew_lease(q, &p, began, err) : QW_OK;
    if (rc != QW_OK)
        return rc;
    /* Conservative: every claim we hold is held at least until our lease,
     * renewed after `lease_renewed_ms`; keep a tenth of the lease as a
     * safety margin. */
    int64_t deadline = q->lease_renewed_ms + cfg->worker_lease_ms - cfg->worker_lease_ms / 10;

    int64_t began_us = qw_clock_mono_us();
    struct qw_txn_stats st = {0};
    rc = qw_claims_cycle(q->db, &q->policy, &q->queue_policy, &p, &q->claims, &st, err);
    add_serialization_retries(q, &st);
    int64_t took_us = qw_clock_mono_us() - began_us;
    qw_log_debug("claims.done", "held=%zu attempts=%d us=%lld", q->n_held, st.attempts,
                 (long long)took_us);
    if (q->tally) {
        q->tally->ser_failures += st.serialization_retries;
        if (rc == QW_OK) {
            q->tally->txns++;
            samples_add(&q->tally->txn, took_us);
        } else {
            q->tally->failed++;
        }
    }
    atomic_fetch_add_explicit(&q->w->stats.cycles, 1, memory_order_relaxed);
    /* Maintenance stopped at its bound, or pickup gave out all it may in
     * one call: the next cycle runs at once. */
    q->more_claims = rc == QW_OK && (q->claims.maintain_more || q->claims.free_with_work > 0);
    if (rc != QW_OK) {
        if (q->claims.taken > 0)
            q->reconcile_asked = true; /* maintenance handed us claims */
        return rc;
    }
    q->lease_deadline_ms = deadline;

    const struct qw_claims_result *r = &q->claims;
    q->surplus_released = p.release != NULL && r->n_released > 0;
    q->released_work = r->released_with_work > 0;
    size_t pos = 0;
    struct qw_svc *s;
    if (reconcile) {
        q->cycles_since_reconcile = 0;
        q->reconcile_asked = false;
        while ((s = qw_svcmap_next(&q->svcs, &pos)) != NULL)
            s->seen = false;
        for (size_t i = 0; i < r->n_claims; i++) {
            if (note_claim(q, &r->claims[i]) != QW_OK)
                return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
            qw_svcmap_get(&q->svcs, r->claims[i].service_id)->seen = true;
        }
        pos = 0;
        while ((s = qw_svcmap_next(&q->svcs, &pos)) != NULL) {
            if (s->held && !s->seen)
                drop_claim(q, s);
        }
        if (lapsed && !first)
            qw_log_warn("claims.lease_lapsed", "held=%zu", q->n_held);
    } else {
        for (size_t i = 0; i < r->n_claims; i++) {
            if (note_claim(q, &r->claims[i]) != QW_OK)
                return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
        }
    }
    for (size_t i = 0; i < r->n_released; i++) {
        s = qw_svcmap_get(&q->svcs, r->released[i].service_id);
        if (s && s->held)
            drop_claim(q, s);
    }
    if (r->taken > 0 || r->handed_over > 0)
        q->settle_until_ms = began + 2 * cfg->worker_cycle_ms;
    /* Surplus over the (new) share drains: what has no job out goes back in
     * a claims cycle soon, the rest as its job comes back (take_done). A
     * cycle that was due for a release arms no other for what it could not
     * give back (claims_release keeps a service mid-submission), unless it
     * was not allowed to release at all. */
    bool drained_idle = housekeeping && began >= q->settle_until_ms && mark_draining(q);
    if ((drained_idle && !release_due) || (release_due && !may_release))
        q->release_due_ms =
            (began > q->settle_until_ms ? began : q->settle_until_ms) + DRAINED_RELEASE_DELAY_MS;
    atomic_store_explicit(&q->w->stats.claims_held, (long long)q->n_held, memory_order_relaxed);
    if (r->live > 0)
        atomic_store_explicit(&q->w->stats.live_workers, r->live, memory_order_relaxed);
    /* The others compute their fair share from the counts reported with the
     * leases. A count that moved by more than the slack is reported now, not
     * a cycle later: when workers start together each claims its share in
     * its first cycle, and one whose count still read 0 made the others
     * drain half of theirs (queued nothing for them until the next
     * housekeeping gave them back). After giving surplus back the count is
     * reported exactly: read high, it made the fair share (ours included)
     * one too many, and a worker that had just given back its last surplus
     * claim took it straight back in its next cycle, ahead of the worker
     * it was drained for (claims_drain_prompt under TSan, once). */
    if (count_unreported(q) || (q->surplus_released && q->n_held != q->reported_held)) {
        p.held = q->n_held;
        rc = renew_lease(q, &p, qw_clock_mono_ms(), err);
        if (rc != QW_OK)
            return rc;
    }
    if (r->acquired || r->n_released || r->freed || r->picked)
        qw_log_info("claims.changed",
                    "held=%zu acquired=%d picked_for_all=%d released=%zu released_with_work=%d "
                    "taken_over=%d handed_over=%d share=%d services_with_work=%lld "
                    "live_instances=%d txn_ms=%.1f",
                    q->n_held, r->acquired, r->picked, r->n_released, r->released_with_work,
                    r->taken, r->handed_over, r->share, (long long)r->with_work, r->live,
                    (double)took_us / 1000.0);
    return QW_OK;
}

static int add_dirty(struct queuer *q, const char *service_id)
{
    if (q->n_dirty == q->cap_dirty) {
        size_t cap = q->cap_dirty ? q->cap_dirty * 2 : 64;
        char **grown = realloc(q->dirty, cap * sizeof(*grown));
        if (!grown)
            return QW_ERR_NOMEM;
        q->dirty = grown;
        q->cap_dirty = cap;
    }
    q->dirty[q->n_dirty] = strdup(service_id);
    if (!q->dirty[q->n_dirty])
        return QW_ERR_NOMEM;
    q->n_dirty++;
    return QW_OK;
}

static void clear_dirty(struct queuer *q)
{
    for (size_t i = 0; i < q->n_dirty; i++)
        free(q->dirty[i]);
    q->n_dirty = 0;
}

/* A held, draining service with no job out goes back in a claims cycle
 * DRAINED_RELEASE_DELAY_MS from now (one cycle for all that are due by then). */
static void release_drained_soon(struct queuer *q, const struct qw_svc *s)
{
    if (s->held && s->draining && !s->busy && q->release_due_ms == 0)
        q->release_due_ms = qw_clock_mono_ms() + DRAINED_RELEASE_DELAY_MS;
}

/* Takes finished jobs back from the submitter. */
static void take_done(struct queuer *q)
{
    void *item;
    while (qw_handoff_pop(q->w->done, 0, &item) == QW_OK) {
        struct qw_job *job = item;
        struct qw_svc *s = qw_svcmap_get(&q->svcs, job->service_id);
        if (s) {
            qw_svcmap_set_busy(&q->svcs, s, false);
            s->job = NULL;
            /* Where its last POST failed: the service's next POST avoids that node. */
            s->avoid = job->avoid_node >= 0;
            s->avoid_node = job->avoid_node;
            release_drained_soon(q, s);
            /* Fetched again unless its batch ended and the statement that
             * recorded it found no next one, and nothing was enqueued since
             * (that would have named it in a notification). */
            bool settled = job->end == QW_JOB_END_FINAL && job->no_next && !s->woken_busy;
            s->woken_busy = false;
            if (!s->held)
                qw_svcmap_del(&q->svcs, job->service_id);
            else if (!settled && add_dirty(q, job->service_id) != QW_OK)
                q->next_retry_ms = 0; /* fall back to a full fetch */
        }
        qw_job_free(job);
        /* A slot is free: start the next service that waited for one. */
        const char *next;
        while ((next = qw_backlog_next(&q->backlog)) != NULL) {
            struct qw_svc *w = qw_svcmap_get(&q->svcs, next);
            if (w && w->held && !w->busy && !w->draining) {
                if (add_dirty(q, next) != QW_OK)
                    q->next_retry_ms = 0;
                break;
            }
        }
    }
    atomic_store_explicit(&q->w->stats.jobs_busy, (long long)q->svcs.busy, memory_order_relaxed);
}

/*
 * The connection is lost: an outage begins (or goes on). Once back, read all
 * our claims: a handover NOTIFY sent meanwhile is lost, and a claims
 * transaction whose COMMIT we did not hear back may have given us claims
 * (or taken some back) that we do not know of.
 */
static void note_outage(struct queuer *q, const struct qw_error *err)
{
    qw_outage_note_failure(&q->outage, err, qw_clock_mono_ms(), &q->rng);
    q->reconcile_asked = true;
    /* The reconnect LISTENs again on this connection: test it then. */
    if (!q->listener)
        qw_notify_check_listener_back(&q->check);
}

/* Logs the self-test's verdict when it changed (once each way) and
 * publishes it for /readyz; a cycle runs at once when polling begins. */
static void notify_changed(struct queuer *q, enum qw_notify_check_change change, const char *why)
{
    const char *conn = q->listener ? "listener" : "queuer";
    if (change == QW_NOTIFY_CHECK_FAILED) {
        qw_log_warn("notify.not_delivered", "conn=%s reason=\"%s\" action=poll cycle_ms=%d", conn,
                    why, q->cfg->worker_cycle_ms);
        atomic_store_explicit(&q->w->stats.notify_lost, 1, memory_order_relaxed);
        q->reconcile_asked = q->notified = true;
    } else if (change == QW_NOTIFY_CHECK_RECOVERED) {
        qw_log_info("notify.delivered", "conn=%s action=listen", conn);
        atomic_store_explicit(&q->w->stats.notify_lost, 0, memory_order_relaxed);
    }
}

/* The listening connection (database.listen_conninfo) is lost: polling until
 * it is back and a self-test passed; its reconnects are paced. */
static void listener_lost(struct queuer *q, const struct qw_error *err)
{
    qw_outage_note_failure(&q->listener_outage, err, qw_clock_mono_ms(), &q->rng);
    notify_changed(q, qw_notify_check_listener_lost(&q->check), "listening connection lost");
}

/* Reconnects a lost listening connection when its next attempt is due;
 * once it LISTENs again a self-test goes out with the next claims cycle. */
static void keep_listener(struct queuer *q, int64_t now)
{
    if (!q->listener || !q->cfg->worker_listen || qw_db_ok(q->listener))
        return;
    if (q->check.listener_up) {
        /* (dropped by a failed call without a wait noticing) */
        struct qw_error err;
        qw_error_set(&err, QW_ERR_DB_CONN, "listening connection dropped");
        listener_lost(q, &err);
    }
    if (qw_outage_reconnect(&q->listener_outage, q->listener, now, &q->rng) != QW_OK)
        return;
    qw_outage_note_success(&q->listener_outage, qw_clock_mono_ms());
    qw_notify_check_listener_back(&q->check);
}

static void drain_wake_fd(int fd)
{
    uint64_t v;
    while (read(fd, &v, sizeof(v)) > 0) {
    }
}

/*
 * Remembers a batch a wake-up named, to mark without a fetch. Returns false
 * when it cannot (the service has one named already, or no memory): the
 * caller fetches the service instead.
 */
static bool add_named(struct queuer *q, struct qw_svc *s, const struct qw_wakeup_item *it)
{
    if (s->named)
        return false;
    if (q->n_named == q->cap_named) {
        size_t cap = q->cap_named ? q->cap_named * 2 : 16;
        struct qw_queue_named *grown = realloc(q->named, cap * sizeof(*grown));
        if (!grown)
            return false;
        q->named = grown;
        q->cap_named = cap;
    }
    struct qw_queue_named *n = &q->named[q->n_named++];
    snprintf(n->service_id, sizeof(n->service_id), "%s", it->service);
    snprintf(n->batch_id, sizeof(n->batch_id), "%s", it->batch);
    n->epoch = it->epoch;
    s->named = true;
    return true;
}

/*
 * One "<service>:<epoch>[/<batch>]" of a notification on our channel: the
 * service is ours at that epoch (an enqueue, maintenance or pickup gave it
 * to us, or it is ours already and got work). A claim we did not know of,
 * or at another epoch, is noted (and so fetched); one we know is fetched
 * unless its job is out (the job's return fetches it), or, when the
 * wake-up names its one new batch, that batch is marked without a fetch.
 */
static void on_item(struct queuer *q, const struct qw_wakeup_item *it)
{
    struct qw_svc *s = qw_svcmap_get(&q->svcs, it->service);
    if (s && s->held && s->epoch == it->epoch) {
        if (s->busy)
            s->woken_busy = true;
        else if (it->batch[0] && !s->draining && add_named(q, s, it))
            ; /* marked by name */
        else if (add_dirty(q, it->service) != QW_OK)
            q->next_retry_ms = 0; /* fall back to a full fetch */
        /* Draining, we queue nothing new for it: it goes back with its
         * work, for a worker with room (a release skipped it while this
         * enqueue held its ingest row, and nothing else would give it back
         * before the next housekeeping, a cycle or more away). */
        release_drained_soon(q, s);
        return;
    }
    struct qw_claim c = {.epoch = it->epoch};
    snprintf(c.service_id, sizeof(c.service_id), "%s", it->service);
    if (note_claim(q, &c) != QW_OK)
        q->reconcile_asked = q->notified = true;
    /* The others' fair share reads the count our lease reports: a claims
     * cycle reports it when it moved by more than the slack. Not a woken
     * one: a pickup names its claims to every receiver, and a woken cycle
     * reads the fair share (a count of every claim while free services
     * with work wait), so every receiver counted them at once. */
    if (count_unreported(q))
        q->report_due = true;
}

/*
 * Notifications: on our own channel the services we were given or that
 * got work ("<service>:<epoch>" items), our self-test (notify_check.h),
 * QW_CLAIMS_ALL (more services got work than a payload names: read all our
 * claims and fetch them all) or QW_CLAIMS_NEW (more claims were given to
 * us than a payload names: read all our claims; note_claim() marks those
 * at a new epoch to fetch, and the services we held already are left
 * alone, each a probe of the batches index that would find what we know); on
 * QW_CLAIMS_CHANNEL a claims change that concerns every worker (one
 * joined, or claims went back): a claims cycle with the fair share.
 */
static void on_notify(const char *channel, const char *payload, void *arg)
{
    struct queuer *q = arg;
    if (strcmp(channel, QW_CLAIMS_CHANNEL) == 0) {
        q->notified = true;
        return;
    }
    uint64_t token;
    if (qw_notify_check_parse(payload, &token)) {
        notify_changed(q, qw_notify_check_received(&q->check, token), "");
        return;
    }
    if (strcmp(payload, QW_CLAIMS_ALL) == 0) {
        q->reconcile_asked = q->notified = q->notified_all = true;
        return;
    }
    if (strcmp(payload, QW_CLAIMS_NEW) == 0) {
        q->reconcile_asked = q->notified = true;
        return;
    }
    struct qw_wakeup_item it;
    for (const char *item = payload; item;) {
        if (qw_claims_parse_item(item, &it, &item) != QW_OK) {
            qw_log_warn("notify.malformed", "channel=%s payload=%s", channel,
                        qw_log_quote((char[300]){0}, 300, payload));
            q->reconcile_asked = q->notified = true;
            return;
        }
        on_item(q, &it);
    }
}

/* Waits for the next reason to work; returns 1 when a claims cycle is needed. */
static int wait_for_work(struct queuer *q, int64_t next_cycle_ms)
{
    int64_t t = qw_clock_mono_ms();
    int64_t until = next_cycle_ms < q->next_retry_ms ? next_cycle_ms : q->next_retry_ms;
    struct qw_db *ldb = q->listener ? q->listener : q->db;
    bool listening = q->cfg->worker_listen && qw_db_ok(ldb);
    if (listening) {
        int64_t expiry = qw_notify_check_deadline(&q->check, q->cfg->worker_cycle_ms);
        until = expiry < until ? expiry : until;
    } else if (q->cfg->worker_listen && q->listener && q->listener_outage.retry_at_ms < until) {
        until = q->listener_outage.retry_at_ms; /* its next reconnect */
    }
    int64_t timeout = until - t;
    if (timeout < 0 || q->n_dirty > 0 || q->n_named > 0)
        timeout = 0;
    struct qw_error err;
    qw_error_clear(&err);
    int r;
    if (listening) {
        r = qw_db_wait_notify(ldb, (int)timeout, q->w->wake_fd, on_notify, q, &err);
    } else {
        /* Polling only (worker.listen = false), or waiting for the next
         * reconnect during an outage: sleep on the wake fd. */
        struct pollfd pfd = {.fd = q->w->wake_fd, .events = POLLIN};
        r = poll(&pfd, 1, (int)timeout) > 0 ? 2 : 0;
    }
    if (r == 2)
        drain_wake_fd(q->w->wake_fd);
    if (r < 0 && q->listener) {
        listener_lost(q, &err);
    } else if (r < 0) {
        /* Lost the connection while idle: once reconnected (LISTEN again) run
         * a claims cycle, since notifications sent meanwhile are gone. */
        note_outage(q, &err);
        q->notified = true;
    }
    if (q->cfg->worker_listen)
        notify_changed(
            q, qw_notify_check_expire(&q->check, qw_clock_mono_ms(), q->cfg->worker_cycle_ms),
            "the self-test NOTIFY did not come back within a cycle");
    take_done(q);
    bool cycle = q->notified;
    q->notified = false;
    return cycle;
}

/*
 * A later registration of our instance_id took over (we were frozen, or cut
 * off, for over two leases, and a replacement started): every write of ours
 * is fenced out already; stop submitting at once and exit non-zero.
 */
static void superseded(struct queuer *q, const struct qw_error *err)
{
    qw_log_error("instance.superseded", "incarnation=%s error=%s action=exit", q->w->incarnation,
                 qw_log_quote((char[400]){0}, 400, err->msg));
    atomic_store(&q->w->superseded, 1);
    atomic_store(&q->w->stop, 1);
}

/* During an outage: sleeps until the next reconnect may be tried (or a
 * wake-up), taking finished jobs back meanwhile. */
static void wait_for_reconnect(struct queuer *q)
{
    int64_t timeout = q->outage.retry_at_ms - qw_clock_mono_ms();
    struct pollfd pfd = {.fd = q->w->wake_fd, .events = POLLIN};
    if (timeout > 0 && poll(&pfd, 1, (int)timeout) > 0)
        drain_wake_fd(q->w->wake_fd);
    take_done(q);
}

static void log_failure(const char *event, const struct qw_error *err)
{
    char quoted[600];
    qw_log_warn(event, "error=%s sqlstate=%s", qw_log_quote(quoted, sizeof(quoted), err->msg),
                err->sqlstate);
}

/*
 * A failure that left the connection unusable belongs to an outage: logged
 * when it begins and ends, reconnects paced (top of queuer_loop). Anything
 * else is logged as `event`. Returns true for an outage.
 */
static bool note_failure(struct queuer *q, const char *event, const struct qw_error *err)
{
    if (qw_db_ok(q->db)) {
        log_failure(event, err);
        return false;
    }
    note_outage(q, err);
    return true;
}

/*
 * Sends the self-test: a NOTIFY to our own channel, to come back on the
 * listening connection within a cycle. It goes through the main connection
 * when a separate one listens. When the main connection listens itself it
 * goes through a short-lived connection of the same conninfo instead: a
 * session's own NOTIFY always comes back to it, so the main connection
 * would pass the test even behind a transaction pooler, where the session
 * that LISTENed is not ours between transactions.
 */
static void send_selftest(struct queuer *q)
{
    char channel[64], payload[48];
    snprintf(channel, sizeof(channel), QW_CLAIMS_CHANNEL_PREFIX "%s", q->w->incarnation);
    snprintf(payload, sizeof(payload), QW_NOTIFY_CHECK_PREFIX "%llu",
             (unsigned long long)qw_notify_check_next(&q->check));
    const char *params[] = {channel, payload};
    struct qw_error err;
    qw_error_clear(&err);
    struct qw_db *once = NULL;
    int rc = QW_OK;
    if (!q->listener) {
        struct qw_db_opts opts;
        qw_worker_db_opts(q->cfg, "queuer-selftest", &opts);
        rc = qw_db_connect(&once, &opts, &err);
    }
    if (rc == QW_OK)
        rc = qw_db_query(once ? once : q->db, "notify_selftest", 2, params, NULL, &err);
    qw_db_close(once);
    if (rc == QW_OK) {
        /* (the expiry counts from the commit: a slow connect does not shorten it) */
        qw_notify_check_sent(&q->check, qw_clock_mono_ms());
    } else if (!q->listener) {
        /* No connection for it: unverified, so it expires and we poll
         * until a later test passes. */
        log_failure("notify.selftest_failed", &err);
        qw_notify_check_sent(&q->check, qw_clock_mono_ms());
    } else {
        /* The main connection failed (its cycle fails too): it stays due. */
        note_failure(q, "notify.selftest_failed", &err);
    }
}

/*
 * Fetch and queue: everything we hold (`full`) or only the services marked
 * dirty (jobs came back, new claims, named NOTIFYs).
 */
static int queue_now(struct queuer *q, bool full, struct qw_error *err)
{
    if (full) {
        end_named(q, false);
        clear_dirty(q);
        q->cycles_since_full = 0;
        q->notified_all = false;
        return fetch_and_queue(q, NULL, false, err);
    }
    if (q->n_named > 0) {
        /* Marked by name only with room for them all and none waiting for
         * room (the regular fetch orders those by priority). */
        long room = (long)q->cfg->dlt_max_in_flight - (long)q->svcs.busy;
        if ((long)q->n_named <= room && qw_backlog_waiting(&q->backlog) == 0) {
            int rc = fetch_and_queue(q, NULL, true, err);
            if (rc != QW_OK)
                return rc;
        } else {
            end_named(q, true);
        }
    }
    if (q->n_dirty == 0)
        return QW_OK;
    qw_pgarray_reset(&q->filter);
    for (size_t i = 0; i < q->n_dirty; i++)
        qw_pgarray_text(&q->filter, q->dirty[i]);
    const char *filter = qw_pgarray_finish(&q->filter);
    clear_dirty(q);
    return fetch_and_queue(q, filter, false, err);
}

/* When the next claims cycle is due: the periodic one, or earlier a release
 * of drained claims. */
static int64_t cycle_due(const struct queuer *q, int64_t next_cycle)
{
    return q->release_due_ms != 0 && q->release_due_ms < next_cycle ? q->release_due_ms
                                                                    : next_cycle;
}

static void queuer_loop(struct queuer *q)
{
    const struct qw_config *cfg = q->cfg;
    int64_t next_cycle = 0;
    int failures = 0;
    bool notified = false;
    while (!atomic_load(&q->w->stop)) {
        struct qw_error err;
        qw_error_clear(&err);
        int64_t t = qw_clock_mono_ms();
        int rc = QW_OK;
        if (qw_outage_reconnect(&q->outage, q->db, t, &q->rng) != QW_OK) {
            wait_for_reconnect(q);
            notified = true; /* a claims cycle as soon as it is back */
            continue;
        }
        keep_listener(q, t);
        if (t >= cycle_due(q, next_cycle) || notified || q->report_due) {
            bool woken = notified;
            notified = false;
            q->report_due = false;
            int64_t cycle_began_us = qw_clock_mono_us();
            /* The fast path and the wake-ups keep work moving; the scans over
             * every held service (fair share, full fetch) are the safety net,
             * run every few cycles and when woken. Polling workers (no LISTEN)
             * learn of new claims and new work only here, every cycle. */
            bool full = (++q->cycles_since_full >= FULL_FETCH_EVERY && !backlog_draining(q)) ||
                        q->notified_all || t >= q->next_retry_ms || polling(q);
            bool periodic = ++q->cycles_since_housekeeping >= HOUSEKEEPING_EVERY ||
                            q->notified_all || polling(q);
            if (periodic || woken)
                q->cycles_since_housekeeping = 0;
            rc = claims_step(q, true, woken, periodic, &err);
            if (rc == QW_ERR_SUPERSEDED) {
                superseded(q, &err);
                break;
            }
            /* a service we gave back with work (often one with a Delayed
             * batch waiting) is picked up at once */
            if (rc == QW_OK && q->released_work)
                qw_claims_announce(q->db);
            notified = rc == QW_OK && q->more_claims;
            if (rc == QW_OK)
                rc = queue_now(q, full, &err);
            if (rc == QW_OK) {
                failures = 0;
                if (cfg->worker_listen) {
                    qw_notify_check_cycle(&q->check);
                    if (qw_notify_check_send_due(&q->check))
                        send_selftest(q);
                }
                /* (a cycle after the lease's last renewal, which a woken
                 * cycle may have skipped) */
                next_cycle =
                    (q->lease_renewed_ms < t ? q->lease_renewed_ms : t) + cfg->worker_cycle_ms;
                /* a worker that stopped renewing: take its services over at once */
                if (q->peer_lease_end_ms > t && q->peer_lease_end_ms < next_cycle)
                    next_cycle = q->peer_lease_end_ms;
                int64_t cycle_us = qw_clock_mono_us() - cycle_began_us;
                qw_histogram_observe_us(&q->w->stats.ops.cycle_duration, cycle_us);
                if (q->tally)
                    samples_add(&q->tally->cycle, cycle_us);
                atomic_store_explicit(&q->w->stats.ops.last_cycle_ok_ms,
                                      (long long)qw_clock_mono_ms(), memory_order_relaxed);
                qw_outage_note_success(&q->outage, qw_clock_mono_ms());
                qw_vacuum_watch_step(&q->vacuum, q->db, &q->w->stats.ops, qw_clock_mono_ms());
            } else if (note_failure(q, "cycle.failed", &err)) {
                /* The reconnect is paced instead; the cycle runs once it succeeds. */
                next_cycle = t;
            } else {
                next_cycle =
                    t + qw_backoff_full_jitter(failures++, 50, cfg->worker_cycle_ms, &q->rng);
            }
        } else if (q->n_dirty > 0 || q->n_named > 0 || t >= q->next_retry_ms) {
            rc = queue_now(q, t >= q->next_retry_ms, &err);
            if (rc != QW_OK) {
                note_failure(q, "queue.failed", &err);
                q->next_retry_ms = t + 100;
            }
        }
        if (wait_for_work(q, cycle_due(q, next_cycle)))
            notified = true;
        if (atomic_exchange(&q->w->reload, 0) && q->w->apply_reload)
            q->w->apply_reload(q->w);
    }
}

/* Stops: hands no more jobs, waits for the submitter, gives the claims back. */
static void queuer_shutdown(struct queuer *q, pthread_t submitter)
{
    if (atomic_load(&q->w->superseded)) {
        /* Our claims are the later registration's now: nothing of ours to
         * give back or mark stopped. */
        qw_handoff_close(q->w->jobs);
        pthread_join(submitter, NULL);
        take_done(q);
        return;
    }
    qw_log_info("worker.stopping", "claims=%zu busy=%zu", q->n_held, q->svcs.busy);
    qw_handoff_close(q->w->jobs);
    pthread_join(submitter, NULL);
    take_done(q);
    struct qw_error err;
    qw_error_clear(&err);
    int released = 0;
    int rc = qw_db_ok(q->db) ? QW_OK : qw_db_reconnect(q->db, &err);
    if (rc == QW_OK)
        rc = qw_claims_release_all(q->db, q->w->instance_id, q->w->incarnation,
                                   atomic_load(&q->w->posts_abandoned), &released, &err);
    if (rc != QW_OK)
        log_failure("claims.release_failed", &err);
    qw_log_info("worker.stopped", "released=%d", released);
    if (q->tally)
        log_claims_summary(q->tally);
}

static int64_t hook_now_ms(void *ctx)
{
    (void)ctx;
    return qw_clock_mono_ms();
}

static void hook_sleep_ms(void *ctx, int64_t ms)
{
    (void)ctx;
    qw_clock_sleep_ms(ms);
}

/* A stop request ends transaction retries at once (SIGTERM during an outage). */
static int hook_should_stop(void *ctx)
{
    struct qw_worker *w = ctx;
    return atomic_load(&w->stop);
}

int qw_queuer_run(struct qw_worker *w, struct qw_db *db, struct qw_db *listener,
                  pthread_t submitter, struct qw_error *err)
{
    struct queuer q = {
        .w = w, .cfg = w->cfg, .db = db, .listener = listener, .next_retry_ms = INT64_MAX};
    const struct qw_config *cfg = w->cfg;
    if (qw_svcmap_init(&q.svcs) != 0)
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    qw_queue_bufs_init(&q.bufs);
    qw_pgarray_init(&q.filter);
    qw_pgarray_init(&q.release);
    qw_rng_seed(&q.rng, (uint64_t)qw_clock_mono_us() ^ (uint64_t)getpid());
    qw_outage_init(&q.outage, "queuer");
    qw_outage_init(&q.listener_outage, "listener");
    qw_notify_check_init(&q.check);
    const struct qw_txn_hooks hooks = {
        .now_ms = hook_now_ms,
        .sleep_ms = hook_sleep_ms,
        .should_stop = hook_should_stop,
        .ctx = w,
    };
    q.policy = (struct qw_txn_policy){
        .hooks = &hooks,
        .max_attempts = cfg->worker_txn_max_attempts,
        /* retries never hold the lease renewal back past half a lease */
        .max_ms = cfg->worker_txn_max_ms < cfg->worker_lease_ms / 2 ? cfg->worker_txn_max_ms
                                                                    : cfg->worker_lease_ms / 2,
        .backoff_base_ms = cfg->worker_txn_backoff_base_ms,
        .backoff_max_ms = cfg->worker_txn_backoff_max_ms,
        .rng = &q.rng,
    };
    /* Fetch and mark need no SERIALIZABLE: every mark is fenced by its claim
     * row (locked FOR SHARE, re-checked at its newest version) and by a
     * compare-and-set on the batch, and the claim row names the batch in
     * flight (in_flight), which holds at any level. Serializable predicate
     * locks on the batch indexes only produced false conflicts between
     * workers here. */
    q.queue_policy = q.policy;
    q.queue_policy.begin_sql = "BEGIN ISOLATION LEVEL READ COMMITTED";
    q.tally = calloc(1, sizeof(*q.tally));
    queuer_loop(&q);
    queuer_shutdown(&q, submitter);
    free(q.tally);
    clear_dirty(&q);
    free(q.dirty);
    free(q.named);
    qw_claims_result_free(&q.claims);
    qw_backlog_free(&q.backlog);
    qw_svcmap_free(&q.svcs);
    qw_queue_bufs_free(&q.bufs);
    qw_pgarray_free(&q.filter);
    qw_pgarray_free(&q.release);
    if (atomic_load(&w->superseded))
        return qw_error_set(err, QW_ERR_SUPERSEDED,
                            "instance %s (incarnation %s) stopped: a later process registered "
                            "under the same instance_id",
                            w->instance_id, w->incarnation);
    return QW_OK;
}
