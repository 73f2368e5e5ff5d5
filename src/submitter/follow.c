/*
 * Following batches at the ledger: status polls (long-polls) on a node that
 * is up, the probes of nodes that are not, and the nodes' state for
 * /metrics and `queuer status`.
 */
#include "common/log.h"
#include "submitter/submitter_int.h"

/* Where a status poll goes (qw_nodes_poll_route()); clears the batch's
 * unknown_elsewhere once every other node is ruled out. */
static uint32_t poll_route(const struct submitter *s, struct qw_job *job)
{
    struct qw_submission *sub = job->sub;
    int pn = sub->post_node;
    struct qw_poll_route_in in = {
        .n = s->nodes.n,
        .up = qw_nodes_up_mask(&s->nodes),
        .route = sub->route,
        .post_node = pn,
        .avoid = sub->poll_avoid,
        .post_failures = pn >= 0 && (size_t)pn < s->nodes.n ? s->nodes.node[pn].failures : 0,
        .unknown_elsewhere = sub->unknown_elsewhere,
    };
    struct qw_poll_route route = qw_nodes_poll_route(&in);
    if (route.forget_unknown)
        sub->unknown_elsewhere = 0;
    return route.mask;
}

void qw_submitter_start_poll(struct submitter *s, struct qw_job *job, int wait_s)
{
    int64_t t = now_ms();
    uint32_t route = poll_route(s, job);
    int node = qw_nodes_pick_poll(&s->nodes, route, job->sub->poll_avoid, t);
    /* Elsewhere than the POST's node, a wait on a batch that node never
     * learns would hold the poll for its whole wait: ask without one. */
    if (node >= 0 && job->sub->post_node >= 0 && node != job->sub->post_node)
        wait_s = 0;
    if (node < 0) {
        /* No node is up: wait until a probe finds one (unpark_polls()). */
        job->sub->parked = true;
        qw_submitter_push_timer(s, job, QW_JOB_POLL_WAIT, INT64_MAX);
        return;
    }
    const char *ids[1] = {job->batch_id};
    int rc = qw_dlt_get_statuses(s->dlt, node, job->service_id, ids, 1, wait_s, job);
    if (rc == QW_OK) {
        job->sub->state = QW_JOB_POLLING;
        job->sub->node = node;
        job->sub->poll_wait_s = wait_s;
        qw_nodes_started(&s->nodes, node, QW_NODE_REQ_POLL, t);
        return;
    }
    /* No transfer slot (or a transient failure): try again shortly. */
    qw_submitter_push_timer(s, job, QW_JOB_POLL_WAIT, t + 5);
}

/* A node came back: the polls that waited for one go out now. */
static void unpark_polls(struct submitter *s)
{
    for (struct qw_job *job = s->timers; job; job = job->next) {
        if (job->sub->parked) {
            job->sub->parked = false;
            job->sub->next_at_ms = 0;
        }
    }
}

/* Starts the probes that are due: a status GET (wait=0) of a batch we were given. */
void qw_submitter_run_probes(struct submitter *s, int64_t t)
{
    if (s->stopping || !s->probe_batch[0])
        return;
    int node;
    while ((node = qw_nodes_probe_due(&s->nodes, t)) >= 0) {
        const char *ids[1] = {s->probe_batch};
        if (qw_dlt_get_statuses(s->dlt, node, s->probe_service, ids, 1, 0, &s->probe_tag[node]) !=
            QW_OK)
            return; /* no transfer slot: the next pass tries again */
        qw_nodes_started(&s->nodes, node, QW_NODE_REQ_PROBE, t);
    }
}

/* Logs and counts a node's change of state. */
void qw_submitter_note_node(struct submitter *s, int node, enum qw_node_change change)
{
    if (change == QW_NODE_SAME)
        return;
    const struct qw_node *nd = &s->nodes.node[node];
    const char *url = qw_dlt_node_url(s->dlt, node);
    switch (change) {
    case QW_NODE_BECAME_SUSPECT:
        qw_log_warn("ledger.node_suspect",
                    "node=%d url=%s failures=%d probe_in_ms=%d hint=\"requests go to the other "
                    "nodes until it answers a probe\"",
                    node, url, nd->failures, PROBE_BASE_MS);
        return;
    case QW_NODE_BECAME_DOWN:
        qw_log_error("ledger.node_down", "node=%d url=%s failures=%d probe_every_ms=%d", node, url,
                     nd->failures, PROBE_MAX_MS);
        return;
    case QW_NODE_BECAME_UP:
        qw_log_info("ledger.node_up", "node=%d url=%s latency_us=%lld", node, url,
                    (long long)nd->ewma_us);
        unpark_polls(s);
        return;
    case QW_NODE_SAME:
        return;
    }
}

/*
 * Writes the nodes' state into our instance row (sql/instance_nodes.sql)
 * when a node changed state or NODES_REPORT_MS passed. Best effort: a
 * failure is logged at debug and the next period tries again.
 */
void qw_submitter_report_nodes(struct submitter *s, int64_t t)
{
    uint32_t states = 0;
    for (size_t i = 0; i < s->nodes.n; i++)
        states |= (uint32_t)s->nodes.node[i].state << (2 * i);
    if (s->nodes_reported_ms != 0 && states == s->nodes_reported_states &&
        t - s->nodes_reported_ms < NODES_REPORT_MS)
        return;
    s->nodes_reported_ms = t;
    s->nodes_reported_states = states;
    if (!qw_db_ok(s->db))
        return; /* the next flush reconnects */
    struct qw_pgarray *a = s->node_params;
    for (int k = 0; k < NODE_PARAMS; k++)
        qw_pgarray_reset(&a[k]);
    for (size_t i = 0; i < s->nodes.n; i++) {
        const struct qw_node *nd = &s->nodes.node[i];
        qw_pgarray_text(&a[0], qw_dlt_node_url(s->dlt, (int)i));
        qw_pgarray_text(&a[1], qw_node_state_name(nd->state));
        qw_pgarray_int(&a[2], nd->ewma_us);
        qw_pgarray_int(&a[3], nd->posts);
        qw_pgarray_int(&a[4], nd->posts_total);
        qw_pgarray_int(&a[5], nd->polls_total);
        qw_pgarray_int(&a[6], nd->failures_total);
        qw_pgarray_int(&a[7], nd->suspect_total);
        qw_pgarray_int(&a[8], qw_window_limit(&nd->win, qw_submitter_window_cap(s)));
        qw_pgarray_int(&a[9], nd->win.in_flight);
    }
    const char *params[NODE_PARAMS + 1] = {s->w->instance_id};
    for (int k = 0; k < NODE_PARAMS; k++) {
        params[k + 1] = qw_pgarray_finish(&a[k]);
        if (!params[k + 1])
            return;
    }
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(s->db, "instance_nodes", NODE_PARAMS + 1, params, NULL, &err) != QW_OK)
        qw_log_debug("ledger.nodes_report_failed", "error=%s",
                     qw_log_quote((char[300]){0}, 300, err.msg));
}

/* Publishes the nodes' state for /metrics (relaxed atomics, read by the admin thread). */
void qw_submitter_publish_nodes(struct submitter *s)
{
    struct qw_worker_stats *st = &s->w->stats;
    for (size_t i = 0; i < s->nodes.n; i++) {
        const struct qw_node *nd = &s->nodes.node[i];
        struct qw_node_stats *ns = &st->nodes[i];
        atomic_store_explicit(&ns->state, (int)nd->state, memory_order_relaxed);
        atomic_store_explicit(&ns->latency_us, nd->ewma_us, memory_order_relaxed);
        atomic_store_explicit(&ns->posts_in_flight, nd->posts, memory_order_relaxed);
        atomic_store_explicit(&ns->window, qw_window_limit(&nd->win, qw_submitter_window_cap(s)),
                              memory_order_relaxed);
        atomic_store_explicit(&ns->window_used, nd->win.in_flight, memory_order_relaxed);
        atomic_store_explicit(&ns->first_look_ms, qw_nodes_first_look_ms(&s->nodes, (int)i),
                              memory_order_relaxed);
        atomic_store_explicit(&ns->posts, nd->posts_total, memory_order_relaxed);
        atomic_store_explicit(&ns->polls, nd->polls_total, memory_order_relaxed);
        atomic_store_explicit(&ns->failures, nd->failures_total, memory_order_relaxed);
        atomic_store_explicit(&ns->suspect, nd->suspect_total, memory_order_relaxed);
    }
    atomic_store_explicit(&st->n_nodes, (int)s->nodes.n, memory_order_relaxed);
    atomic_store_explicit(&st->ready, (long long)qw_prioq_len(&s->ready), memory_order_relaxed);
}
