/*
 * The lease step of the shared capacity (capacity_lease.h) on the submitter's
 * connection: publishes the target, renews, gives back and takes partitions,
 * and gives them all back when the thread stops.
 */
#include "common/log.h"
#include "submitter/submitter_int.h"

/* Publishes the capacity gauges for /metrics. */
static void capacity_publish_stats(struct submitter *s)
{
    struct qw_worker_stats *st = &s->w->stats;
    int64_t in_flight, per_second, partitions;
    qw_capacity_lease_totals(&s->lease, &in_flight, &per_second, &partitions);
    atomic_store_explicit(&st->capacity_set, s->lease.set, memory_order_relaxed);
    atomic_store_explicit(&st->capacity_in_flight, in_flight, memory_order_relaxed);
    atomic_store_explicit(&st->capacity_per_second, per_second, memory_order_relaxed);
    atomic_store_explicit(&st->capacity_partitions, partitions, memory_order_relaxed);
    atomic_store_explicit(&st->capacity_target, s->target, memory_order_relaxed);
}

/*
 * The lease step of the shared capacity (capacity_lease.h) on this thread's
 * connection, when due: publishes the target, renews, gives back, takes.
 * A failure keeps the gate's grant until its deadline and tries again soon.
 */
void qw_submitter_capacity_step(struct submitter *s, int64_t t)
{
    if (t < s->cap_next_step_ms || s->stopping)
        return;
    struct qw_error err;
    qw_error_clear(&err);
    bool was_set = s->lease.set;
    int rc = qw_db_ok(s->db) ? QW_OK : qw_db_reconnect(s->db, &err);
    if (rc == QW_OK)
        rc = qw_capacity_lease_step(&s->lease, s->db, &s->cap_policy, s->target, &s->gate, &err);
    int64_t period = s->cfg->worker_cycle_ms;
    if (s->lease.set && period > CAPACITY_STEP_MAX_MS)
        period = CAPACITY_STEP_MAX_MS;
    if (rc != QW_OK) {
        if (s->cap_failures++ == 0 || t - s->cap_logged_ms >= CAPACITY_LOG_EVERY_MS) {
            s->cap_logged_ms = t;
            qw_log_warn("capacity.step_failed", "ledger=%s failures=%d sqlstate=%s error=%s",
                        s->cfg->dlt_ledger, s->cap_failures, err.sqlstate,
                        qw_log_quote((char[300]){0}, 300, err.msg));
        }
        s->cap_next_step_ms =
            now_ms() + qw_backoff_full_jitter(s->cap_failures, 50, period, &s->rng);
        return;
    }
    s->cap_failures = 0;
    s->cap_next_step_ms = now_ms() + period;
    const struct qw_capacity_lease *l = &s->lease;
    if (was_set != l->set)
        qw_log_info(l->set ? "capacity.set" : "capacity.cleared",
                    "ledger=%s generation=%lld partitions=%lld partition_size=%lld "
                    "reserved=%lld cost=%s",
                    s->cfg->dlt_ledger, (long long)l->generation, (long long)l->partitions,
                    (long long)l->partition_size, (long long)l->reserved_units,
                    qw_capacity_cost_name(s->cost_kind));
    if (l->acquired || l->released) {
        int64_t in_flight, per_second, partitions;
        qw_capacity_lease_totals(l, &in_flight, &per_second, &partitions);
        qw_log_info("capacity.changed",
                    "ledger=%s partitions=%lld acquired=%d released=%d in_flight=%lld "
                    "per_second=%lld target=%lld share=%lld live=%lld",
                    s->cfg->dlt_ledger, (long long)partitions, l->acquired, l->released,
                    (long long)in_flight, (long long)per_second, (long long)s->target,
                    (long long)l->allot, (long long)l->live);
    }
    capacity_publish_stats(s);
}

/* Stopping: gives every partition back at once (others take them in their next step). */
void qw_submitter_capacity_release(struct submitter *s)
{
    if (!s->lease.set)
        return;
    struct qw_error err;
    qw_error_clear(&err);
    int released = 0;
    int rc = qw_db_ok(s->db) ? QW_OK : qw_db_reconnect(s->db, &err);
    if (rc == QW_OK)
        rc = qw_capacity_lease_release_all(s->db, s->w->instance_id, &released, &err);
    if (rc != QW_OK)
        qw_log_warn("capacity.release_failed", "error=%s",
                    qw_log_quote((char[300]){0}, 300, err.msg));
    else
        qw_log_info("capacity.released", "partitions=%d", released);
}
