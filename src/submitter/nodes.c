/* The node chooser: node states, latency, and where the next request goes; see nodes.h. */
#include "submitter/nodes.h"

#include <string.h>

#define EWMA_SHIFT 2 /* weight of a new latency sample: 1 / 2^EWMA_SHIFT */

enum qw_node_result qw_nodes_classify(enum qw_dlt_outcome outcome, enum qw_dlt_transport transport,
                                      long http_status)
{
    if (outcome == QW_DLT_ABANDONED)
        return QW_NODE_ABANDONED;
    if (transport != QW_DLT_TRANSPORT_OK || http_status >= 500 || http_status <= 0)
        return QW_NODE_FAILED;
    return QW_NODE_ANSWERED;
}

void qw_nodes_init(struct qw_nodes *set, size_t n, const struct qw_nodes_policy *policy,
                   int64_t now_ms)
{
    memset(set, 0, sizeof(*set));
    set->n = n < 1 ? 1 : n > QW_NODES_MAX ? QW_NODES_MAX : n;
    set->policy = *policy;
    if (set->policy.channels < 1)
        set->policy.channels = 1;
    if (set->policy.probe_base_ms < 1)
        set->policy.probe_base_ms = 1;
    if (set->policy.probe_max_ms < set->policy.probe_base_ms)
        set->policy.probe_max_ms = set->policy.probe_base_ms;
    if (set->policy.explore_ms < 1)
        set->policy.explore_ms = 1;
    if (set->policy.window.max < 1.0) {
        /* No window policy: windows that never hold anything back. */
        set->policy.window = qw_window_policy_default(QW_NODES_WINDOW_OFF);
        set->policy.window.initial = QW_NODES_WINDOW_OFF;
    }
    for (size_t i = 0; i < set->n; i++) {
        set->node[i].state_since_ms = now_ms;
        qw_window_init(&set->node[i].win, &set->policy.window);
    }
}

/* The latency estimate of `nd`: its EWMA, else the best measured one, else a default. */
static int64_t estimate_us(const struct qw_nodes *set, const struct qw_node *nd)
{
    if (nd->ewma_us > 0)
        return nd->ewma_us;
    int64_t best = 0;
    for (size_t i = 0; i < set->n; i++) {
        int64_t e = set->node[i].ewma_us;
        if (e > 0 && (best == 0 || e < best))
            best = e;
    }
    return best > 0 ? best : QW_NODES_UNMEASURED_US;
}

/* The first-read delay is a staircase over the reads that went out with it
 * (and those late that went out later still). A read is late when it was
 * not final or answered a look or more after it went out (a read that
 * waited for a look is answered a whole look after it came), and half a look
 * over the node's usual latency. When the delay has held for its own length
 * and a look and a quarter, with at least QW_NODES_FIRST_LOOK_READS answered
 * and at most one in QW_NODES_FIRST_LOOK_EARLY_IN late, it comes down by a
 * sixteenth (at least 1 ms); as soon as more than one read and one in
 * EARLY_IN are late, it goes up by a quarter (at least 5 ms; until a read
 * has come in time, it doubles, at least an eighth of a look). Holding more
 * than a look after each step lets the late answers to the reads it sent,
 * which come a look after the others, be counted before the next step down:
 * with many reads in flight, a staircase that steps on the answers as they
 * come goes down on the early ones and sends a fifth of its reads too
 * early (the unit tests' ledger with 30 reads in flight). After a step up
 * it comes down no further than 1 ms above the delay the late reads went
 * out with, and holds there QW_NODES_FIRST_LOOK_EDGE_HOLDS times before it
 * tries that delay again: where commits come close together, every step
 * down to their edge sends a look's worth of reads too early. It goes no later
 * than QW_NODES_FIRST_LOOK_MAX_MS, a look: a read sent a look after the 202
 * learns of the commit at most a look late, as a read too early does, so a
 * later one saves no more; and answers slowed by a busy worker, which look
 * late, cannot push it further. */
#define QW_NODES_FIRST_LOOK_READS 11
#define QW_NODES_FIRST_LOOK_EARLY_IN 50
#define QW_NODES_FIRST_LOOK_MIN_DOWN_US 1000
#define QW_NODES_FIRST_LOOK_MIN_UP_US 5000
#define QW_NODES_FIRST_LOOK_EDGE_HOLDS 8

int64_t qw_nodes_first_look_ms(const struct qw_nodes *set, int node)
{
    if (node < 0 || (size_t)node >= set->n)
        return 0;
    return set->node[node].first_look_us / 1000;
}

static int64_t larger(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* Sets `nd`'s first-read delay to `us` (within 0..QW_NODES_FIRST_LOOK_MAX_MS) from `now_ms` on. */
static void first_look_set(struct qw_node *nd, int64_t us, int64_t now_ms)
{
    if (us < 0)
        us = 0;
    if (us > QW_NODES_FIRST_LOOK_MAX_MS * INT64_C(1000))
        us = QW_NODES_FIRST_LOOK_MAX_MS * INT64_C(1000);
    nd->first_look_us = us;
    nd->first_look_since_ms = now_ms;
    nd->first_look_reads = 0;
    nd->first_look_late = 0;
}

void qw_nodes_note_first_look(struct qw_nodes *set, int node, int64_t sent_after_ms,
                              int64_t answer_us, bool final, int64_t now_ms)
{
    if (node < 0 || (size_t)node >= set->n)
        return;
    struct qw_node *nd = &set->node[node];
    int64_t d_us = nd->first_look_us, d_ms = d_us / 1000;
    int64_t look_us = QW_NODES_LOOK_EVERY_MS * INT64_C(1000);
    int64_t late_us = estimate_us(set, nd) + look_us / 2;
    bool late = !final || answer_us >= larger(late_us, look_us);
    nd->first_look_in_time |= !late;
    if (sent_after_ms < d_ms || (sent_after_ms > d_ms && !late))
        return; /* says nothing about the delay now */
    nd->first_look_reads++;
    nd->first_look_late += late;
    int allowed = nd->first_look_reads / QW_NODES_FIRST_LOOK_EARLY_IN;
    if (nd->first_look_late > 1 + allowed) {
        int64_t up = nd->first_look_in_time ? d_us / 4 : d_us;
        int64_t least = nd->first_look_in_time ? QW_NODES_FIRST_LOOK_MIN_UP_US
                                               : QW_NODES_LOOK_EVERY_MS * INT64_C(1000) / 8;
        nd->first_look_edge_us = larger(sent_after_ms * 1000, d_us);
        nd->first_look_edge_holds = 0;
        first_look_set(nd, d_us + larger(up, least), now_ms);
    } else if (nd->first_look_late <= allowed &&
               nd->first_look_reads >= QW_NODES_FIRST_LOOK_READS &&
               now_ms - nd->first_look_since_ms >=
                   d_ms + QW_NODES_LOOK_EVERY_MS + QW_NODES_LOOK_EVERY_MS / 4) {
        int64_t down = larger(d_us / 16, QW_NODES_FIRST_LOOK_MIN_DOWN_US);
        int64_t above_edge = nd->first_look_edge_us + QW_NODES_FIRST_LOOK_MIN_DOWN_US;
        if (d_us - down >= above_edge || nd->first_look_edge_us == 0)
            first_look_set(nd, d_us - down, now_ms);
        else if (d_us > above_edge)
            first_look_set(nd, above_edge, now_ms);
        else if (++nd->first_look_edge_holds < QW_NODES_FIRST_LOOK_EDGE_HOLDS)
            first_look_set(nd, d_us, now_ms); /* another hold just above the edge */
        else {
            nd->first_look_edge_us = 0; /* it tries the edge again */
            first_look_set(nd, d_us - down, now_ms);
        }
    }
}

/* Whether `a` should be preferred over `b` (both candidates) for a request. */
static bool better(const struct qw_node *a, int64_t cost_a, const struct qw_node *b, int64_t cost_b)
{
    if (cost_a != cost_b)
        return cost_a < cost_b;
    return a->used_ms < b->used_ms;
}

/* Whether up node `nd` can take one more POST now under `cap`: a free channel and room in its
 * window. */
static bool post_room(const struct qw_nodes *set, const struct qw_node *nd, int cap)
{
    return nd->posts < set->policy.channels && qw_window_admits(&nd->win, cap);
}

/*
 * The best node among those `eligible` accepts, by cost; an up node not
 * measured for explore_ms first. `avoid` only when nothing else qualifies.
 */
static int pick(const struct qw_nodes *set, uint32_t mask, int avoid, int cap, int64_t now_ms,
                bool post)
{
    int best = -1, stale = -1;
    int64_t best_cost = 0;
    for (int pass = 0; pass < 2 && best < 0 && stale < 0; pass++) {
        for (size_t i = 0; i < set->n; i++) {
            const struct qw_node *nd = &set->node[i];
            if (nd->state != QW_NODE_UP || !(mask & (UINT32_C(1) << i)) ||
                (post && !post_room(set, nd, cap)))
                continue;
            if (pass == 0 && (int)i == avoid)
                continue;
            /* measured once, but neither measured nor tried for explore_ms */
            bool unmeasured_long = nd->measured_ms > 0 &&
                                   now_ms - nd->measured_ms >= set->policy.explore_ms &&
                                   now_ms - nd->used_ms >= set->policy.explore_ms;
            if (unmeasured_long && (stale < 0 || nd->measured_ms < set->node[stale].measured_ms))
                stale = (int)i;
            int64_t est = estimate_us(set, nd);
            int64_t cost = post ? est * (nd->posts + 1)
                                : est * (set->policy.channels + nd->polls) / set->policy.channels;
            if (best < 0 || better(nd, cost, &set->node[best], best_cost)) {
                best = (int)i;
                best_cost = cost;
            }
        }
    }
    return stale >= 0 ? stale : best;
}

int qw_nodes_pick_post(const struct qw_nodes *set, uint32_t mask, int avoid, int cap,
                       int64_t now_ms)
{
    return pick(set, mask, avoid, cap, now_ms, true);
}

bool qw_nodes_pushing_back(const struct qw_nodes *set, uint32_t mask, int cap)
{
    bool shrunk_full = false;
    for (size_t i = 0; i < set->n; i++) {
        const struct qw_node *nd = &set->node[i];
        if (nd->state != QW_NODE_UP || !(mask & (UINT32_C(1) << i)))
            continue;
        if (post_room(set, nd, cap))
            return false;
        /* (a window in its first slow start is still finding the node's room) */
        if (!qw_window_admits(&nd->win, cap) && nd->win.ssthresh < set->policy.window.max &&
            nd->win.cwnd < set->policy.window.max)
            shrunk_full = true;
    }
    return shrunk_full;
}

int qw_nodes_pick_poll(const struct qw_nodes *set, uint32_t mask, int avoid, int64_t now_ms)
{
    return pick(set, mask, avoid, 0, now_ms, false);
}

uint32_t qw_nodes_all_mask(const struct qw_nodes *set)
{
    return set->n >= 32 ? UINT32_MAX : (UINT32_C(1) << set->n) - 1;
}

uint32_t qw_nodes_up_mask(const struct qw_nodes *set)
{
    uint32_t up = 0;
    for (size_t i = 0; i < set->n; i++) {
        if (set->node[i].state == QW_NODE_UP)
            up |= UINT32_C(1) << i;
    }
    return up;
}

struct qw_poll_route qw_nodes_poll_route(const struct qw_poll_route_in *in)
{
    int pn = in->post_node;
    uint32_t post = pn >= 0 && (size_t)pn < in->n ? UINT32_C(1) << pn : 0;
    bool post_up = (post & in->up) != 0;
    if (post_up && (pn != in->avoid || in->post_failures == 0))
        return (struct qw_poll_route){.mask = post};
    uint32_t failed = in->avoid >= 0 ? UINT32_C(1) << in->avoid : 0;
    uint32_t others = in->route & ~post & ~failed & ~in->unknown_elsewhere;
    if (others & in->up)
        return (struct qw_poll_route){.mask = others};
    return (struct qw_poll_route){.mask = post_up ? post : in->route, .forget_unknown = true};
}

int qw_nodes_probe_due(const struct qw_nodes *set, int64_t now_ms)
{
    int due = -1;
    for (size_t i = 0; i < set->n; i++) {
        const struct qw_node *nd = &set->node[i];
        if (nd->state == QW_NODE_UP || nd->probing || nd->probe_at_ms > now_ms)
            continue;
        if (due < 0 || nd->probe_at_ms < set->node[due].probe_at_ms)
            due = (int)i;
    }
    return due;
}

int64_t qw_nodes_next_probe_ms(const struct qw_nodes *set)
{
    int64_t next = INT64_MAX;
    for (size_t i = 0; i < set->n; i++) {
        const struct qw_node *nd = &set->node[i];
        if (nd->state != QW_NODE_UP && !nd->probing && nd->probe_at_ms < next)
            next = nd->probe_at_ms;
    }
    return next;
}

bool qw_nodes_any_up(const struct qw_nodes *set)
{
    for (size_t i = 0; i < set->n; i++) {
        if (set->node[i].state == QW_NODE_UP)
            return true;
    }
    return false;
}

void qw_nodes_started(struct qw_nodes *set, int node, enum qw_node_req kind, int64_t now_ms)
{
    if (node < 0 || (size_t)node >= set->n)
        return;
    struct qw_node *nd = &set->node[node];
    nd->used_ms = now_ms;
    if (kind == QW_NODE_REQ_POST) {
        nd->posts++;
        nd->posts_total++;
        return;
    }
    nd->polls++;
    nd->polls_total++;
    if (kind == QW_NODE_REQ_PROBE)
        nd->probing = true;
}

/* The delay before the next probe after `failed` probes in a row failed. */
static int64_t probe_delay_ms(const struct qw_nodes_policy *p, int failed)
{
    int64_t d = p->probe_base_ms;
    for (int i = 0; i < failed && d < p->probe_max_ms; i++)
        d *= 2;
    return d < p->probe_max_ms ? d : p->probe_max_ms;
}

static void set_state(struct qw_node *nd, enum qw_node_state state, int64_t now_ms)
{
    nd->state = state;
    nd->state_since_ms = now_ms;
}

enum qw_node_change qw_nodes_finished(struct qw_nodes *set, int node, enum qw_node_req kind,
                                      enum qw_node_result result, int64_t latency_us,
                                      int64_t now_ms)
{
    if (node < 0 || (size_t)node >= set->n)
        return QW_NODE_SAME;
    struct qw_node *nd = &set->node[node];
    if (kind == QW_NODE_REQ_POST) {
        if (nd->posts > 0)
            nd->posts--;
    } else if (nd->polls > 0) {
        nd->polls--;
    }
    if (kind == QW_NODE_REQ_PROBE)
        nd->probing = false;
    if (result == QW_NODE_ABANDONED)
        return QW_NODE_SAME;
    if (result == QW_NODE_ANSWERED) {
        /* A node coming back is judged by its answers from now on, not by
         * the slow ones that may have come before its outage. */
        if (nd->state != QW_NODE_UP)
            nd->ewma_us = 0;
        if (latency_us >= 0) {
            int64_t sample = latency_us > 0 ? latency_us : 1;
            nd->ewma_us = nd->ewma_us == 0
                              ? sample
                              : nd->ewma_us + (sample - nd->ewma_us) / (1 << EWMA_SHIFT);
            if (nd->ewma_us < 1)
                nd->ewma_us = 1;
            nd->measured_ms = now_ms;
        }
        nd->failures = 0;
        nd->probe_failures = 0;
        if (nd->state == QW_NODE_UP)
            return QW_NODE_SAME;
        set_state(nd, QW_NODE_UP, now_ms);
        qw_window_restart(&nd->win, &set->policy.window);
        return QW_NODE_BECAME_UP;
    }
    nd->failures++;
    nd->failures_total++;
    if (nd->state == QW_NODE_UP) {
        if (nd->failures < QW_NODES_SUSPECT_AFTER)
            return QW_NODE_SAME;
        set_state(nd, QW_NODE_SUSPECT, now_ms);
        nd->suspect_total++;
        nd->probe_failures = 0;
        nd->probe_at_ms = now_ms + probe_delay_ms(&set->policy, 0);
        return QW_NODE_BECAME_SUSPECT;
    }
    if (kind != QW_NODE_REQ_PROBE)
        return QW_NODE_SAME; /* a request started before it turned suspect */
    nd->probe_failures++;
    nd->probe_at_ms = now_ms + probe_delay_ms(&set->policy, nd->probe_failures);
    if (nd->state == QW_NODE_SUSPECT && nd->probe_failures >= QW_NODES_DOWN_AFTER) {
        set_state(nd, QW_NODE_DOWN, now_ms);
        return QW_NODE_BECAME_DOWN;
    }
    return QW_NODE_SAME;
}

const char *qw_node_state_name(enum qw_node_state state)
{
    switch (state) {
    case QW_NODE_UP:
        return "up";
    case QW_NODE_SUSPECT:
        return "suspect";
    case QW_NODE_DOWN:
        return "down";
    }
    return "?";
}
