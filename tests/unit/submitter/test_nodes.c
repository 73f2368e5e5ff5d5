/*
 * Unit tests of the node chooser (src/submitter/nodes.c): classification of
 * answers, the up/suspect/down machine with its probe schedule, the choice
 * of a node by latency, load, channels and the node to avoid, exploration,
 * a simulated run with one slow node, and when a batch's first status read
 * goes out after its POST. Time is passed in; no network.
 */
#include "submitter/nodes.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

static const struct qw_nodes_policy POLICY = {
    .channels = 4,
    .probe_base_ms = 100,
    .probe_max_ms = 1000,
    .explore_ms = 1000,
};

static void test_classify(void **state)
{
    (void)state;
    static const struct {
        enum qw_dlt_outcome outcome;
        enum qw_dlt_transport transport;
        long http;
        enum qw_node_result want;
    } rows[] = {
        {QW_DLT_ACCEPTED, QW_DLT_TRANSPORT_OK, 202, QW_NODE_ANSWERED},
        {QW_DLT_OK, QW_DLT_TRANSPORT_OK, 200, QW_NODE_ANSWERED},
        {QW_DLT_BACKPRESSURE, QW_DLT_TRANSPORT_OK, 429,
         QW_NODE_ANSWERED}, /* the ledger, not the node */
        {QW_DLT_INVALID, QW_DLT_TRANSPORT_OK, 400, QW_NODE_ANSWERED},
        {QW_DLT_AUTH, QW_DLT_TRANSPORT_OK, 401, QW_NODE_ANSWERED},
        {QW_DLT_RETRY, QW_DLT_TRANSPORT_OK, 404, QW_NODE_ANSWERED},
        {QW_DLT_RETRY, QW_DLT_TRANSPORT_OK, 500, QW_NODE_FAILED},
        {QW_DLT_RETRY, QW_DLT_TRANSPORT_OK, 503, QW_NODE_FAILED},
        {QW_DLT_RETRY, QW_DLT_TRANSPORT_CONNECT, 0, QW_NODE_FAILED},
        {QW_DLT_RETRY, QW_DLT_TRANSPORT_TIMEOUT, 0, QW_NODE_FAILED},
        {QW_DLT_RETRY, QW_DLT_TRANSPORT_DROPPED, 0, QW_NODE_FAILED},
        {QW_DLT_RETRY, QW_DLT_TRANSPORT_TLS, 0, QW_NODE_FAILED},
        {QW_DLT_RETRY, QW_DLT_TRANSPORT_TOO_LARGE, 202, QW_NODE_FAILED},
        {QW_DLT_ABANDONED, QW_DLT_TRANSPORT_OTHER, 0, QW_NODE_ABANDONED},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        enum qw_node_result got =
            qw_nodes_classify(rows[i].outcome, rows[i].transport, rows[i].http);
        if (got != rows[i].want)
            fail_msg("row %zu (http %ld, transport %s): %d, want %d", i, rows[i].http,
                     qw_dlt_transport_name(rows[i].transport), got, rows[i].want);
    }
}

/* Starts and ends a request at once, answered after `latency_us`. */
static enum qw_node_change answer(struct qw_nodes *set, int node, enum qw_node_req kind,
                                  int64_t latency_us, int64_t t)
{
    qw_nodes_started(set, node, kind, t);
    return qw_nodes_finished(set, node, kind, QW_NODE_ANSWERED, latency_us, t);
}

static enum qw_node_change refuse(struct qw_nodes *set, int node, enum qw_node_req kind, int64_t t)
{
    qw_nodes_started(set, node, kind, t);
    return qw_nodes_finished(set, node, kind, QW_NODE_FAILED, -1, t);
}

/* A node's life: up, suspect after three failures, probed with a doubling delay, down, back. */
static void test_state_machine(void **state)
{
    (void)state;
    struct qw_nodes set;
    qw_nodes_init(&set, 2, &POLICY, 0);
    struct qw_node *n0 = &set.node[0];
    assert_int_equal(n0->state, QW_NODE_UP);
    assert_int_equal(qw_nodes_probe_due(&set, 0), -1);
    assert_int_equal(qw_nodes_next_probe_ms(&set), INT64_MAX);

    /* two failures, an answer in between resets the count */
    assert_int_equal(refuse(&set, 0, QW_NODE_REQ_POST, 10), QW_NODE_SAME);
    assert_int_equal(refuse(&set, 0, QW_NODE_REQ_POLL, 11), QW_NODE_SAME);
    assert_int_equal(answer(&set, 0, QW_NODE_REQ_POST, 2000, 12), QW_NODE_SAME);
    assert_int_equal(n0->failures, 0);
    assert_int_equal(refuse(&set, 0, QW_NODE_REQ_POST, 20), QW_NODE_SAME);
    assert_int_equal(refuse(&set, 0, QW_NODE_REQ_POST, 21), QW_NODE_SAME);
    assert_int_equal(refuse(&set, 0, QW_NODE_REQ_POST, 22), QW_NODE_BECAME_SUSPECT);
    assert_int_equal(n0->state, QW_NODE_SUSPECT);
    assert_int_equal(n0->suspect_total, 1);
    assert_int_equal(n0->failures_total, 5);

    /* suspect: no request goes there; the probe is due after probe_base_ms */
    for (int k = 0; k < 5; k++) {
        assert_int_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 30), 1);
        assert_int_equal(qw_nodes_pick_poll(&set, QW_NODES_ALL, -1, 30), 1);
    }
    assert_int_equal(qw_nodes_next_probe_ms(&set), 122);
    assert_int_equal(qw_nodes_probe_due(&set, 121), -1);
    assert_int_equal(qw_nodes_probe_due(&set, 122), 0);
    /* a request started before it turned suspect failing later is no probe */
    assert_int_equal(refuse(&set, 0, QW_NODE_REQ_POLL, 122), QW_NODE_SAME);
    assert_int_equal(n0->probe_failures, 0);

    /* probes that fail: 200, 400 ms apart; the third makes it down; then every probe_max_ms */
    static const struct {
        int64_t at_ms, next_ms;
        enum qw_node_change change;
    } probes[] = {
        {122, 322, QW_NODE_SAME},   {322, 722, QW_NODE_SAME},   {722, 1522, QW_NODE_BECAME_DOWN},
        {1522, 2522, QW_NODE_SAME}, {2522, 3522, QW_NODE_SAME},
    };
    for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
        assert_int_equal(qw_nodes_probe_due(&set, probes[i].at_ms), 0);
        qw_nodes_started(&set, 0, QW_NODE_REQ_PROBE, probes[i].at_ms);
        assert_true(n0->probing);
        assert_int_equal(qw_nodes_probe_due(&set, probes[i].at_ms + 5000), -1); /* one at a time */
        assert_int_equal(qw_nodes_next_probe_ms(&set), INT64_MAX);
        enum qw_node_change c =
            qw_nodes_finished(&set, 0, QW_NODE_REQ_PROBE, QW_NODE_FAILED, -1, probes[i].at_ms);
        assert_int_equal(c, probes[i].change);
        assert_false(n0->probing);
        assert_int_equal(n0->probe_at_ms, probes[i].next_ms);
    }
    assert_int_equal(n0->state, QW_NODE_DOWN);

    /* an abandoned probe says nothing about the node */
    qw_nodes_started(&set, 0, QW_NODE_REQ_PROBE, 3522);
    assert_int_equal(qw_nodes_finished(&set, 0, QW_NODE_REQ_PROBE, QW_NODE_ABANDONED, -1, 3530),
                     QW_NODE_SAME);
    assert_int_equal(n0->state, QW_NODE_DOWN);

    /* the probe is answered: up at once, and used again */
    qw_nodes_started(&set, 0, QW_NODE_REQ_PROBE, 3600);
    assert_int_equal(qw_nodes_finished(&set, 0, QW_NODE_REQ_PROBE, QW_NODE_ANSWERED, 900, 3601),
                     QW_NODE_BECAME_UP);
    assert_int_equal(n0->state, QW_NODE_UP);
    assert_int_equal(n0->state_since_ms, 3601);
    assert_int_equal(n0->posts, 0);
    assert_int_equal(n0->polls, 0);
    assert_int_equal(qw_nodes_probe_due(&set, 99999), -1);
    /* node 1 was never measured; node 0 now has 0.9 ms: both estimated alike, 0 used longer ago */
    assert_int_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 3602), 1);
}

/* A node that comes back is judged by its answers since, not by the slow ones before its outage. */
static void test_latency_afresh_after_outage(void **state)
{
    (void)state;
    struct qw_nodes set;
    qw_nodes_init(&set, 2, &POLICY, 0);
    answer(&set, 0, QW_NODE_REQ_POST, 2000000, 1); /* node 0 answers in 2 s */
    answer(&set, 1, QW_NODE_REQ_POST, 1000, 1);    /* node 1 in 1 ms */
    for (int i = 0; i < 3; i++)
        refuse(&set, 0, QW_NODE_REQ_POST, 2);
    assert_int_equal(set.node[0].state, QW_NODE_SUSPECT);
    assert_int_equal(answer(&set, 0, QW_NODE_REQ_PROBE, 1000, 200), QW_NODE_BECAME_UP);
    assert_int_equal(set.node[0].ewma_us, 1000); /* not 2 s averaged with 1 ms */
    /* so it takes its share at once: with a POST in flight on node 1, it is the cheaper */
    qw_nodes_started(&set, 1, QW_NODE_REQ_POST, 201);
    assert_int_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 202), 0);
}

/* With no node up nothing can be chosen; any node answering makes one usable. */
static void test_none_up(void **state)
{
    (void)state;
    struct qw_nodes set;
    qw_nodes_init(&set, 1, &POLICY, 0);
    for (int i = 0; i < 3; i++)
        refuse(&set, 0, QW_NODE_REQ_POST, 1);
    assert_false(qw_nodes_any_up(&set));
    assert_int_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 2), -1);
    assert_int_equal(qw_nodes_pick_poll(&set, QW_NODES_ALL, -1, 2), -1);
    /* any answer from it, even to a request started earlier, brings it back */
    assert_int_equal(answer(&set, 0, QW_NODE_REQ_POLL, -1, 3), QW_NODE_BECAME_UP);
    assert_true(qw_nodes_any_up(&set));
    assert_int_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 3), 0);
}

/* Channels bound POSTs per node; polls need none; the node to avoid is a last resort. */
static void test_channels_and_avoid(void **state)
{
    (void)state;
    struct qw_nodes set;
    qw_nodes_init(&set, 3, &POLICY, 0);
    /* equal unmeasured nodes: spread, least recently used first */
    static const int spread[] = {0, 1, 2, 0, 1, 2};
    for (size_t i = 0; i < sizeof(spread) / sizeof(spread[0]); i++) {
        int n = qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 10 + (int64_t)i);
        assert_int_equal(n, spread[i]);
        qw_nodes_started(&set, n, QW_NODE_REQ_POST, 10 + (int64_t)i);
    }
    /* avoid: another node if one qualifies */
    assert_int_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, 0, 0, 20), 1);
    /* fill every channel (4 per node) */
    for (int k = 0; k < 6; k++) {
        int n = qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 30 + k);
        assert_int_not_equal(n, -1);
        qw_nodes_started(&set, n, QW_NODE_REQ_POST, 30 + k);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(set.node[i].posts, 4);
    assert_int_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 40), -1);
    assert_int_not_equal(qw_nodes_pick_poll(&set, QW_NODES_ALL, -1, 40), -1);
    /* one channel frees on node 2: the avoided node is taken when it is the only one */
    qw_nodes_finished(&set, 2, QW_NODE_REQ_POST, QW_NODE_ANSWERED, 1000, 41);
    assert_int_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, 2, 0, 42), 2);
    assert_int_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, 1, 0, 42), 2);
    /* polls avoid likewise */
    assert_int_not_equal(qw_nodes_pick_poll(&set, QW_NODES_ALL, 2, 42), 2);
}

/* The ledger pushes back when a route's up nodes are all full and one of them by a window its
 * answers shrank; channels in use or a window at its max are this worker's own limits. */
static void test_pushing_back(void **state)
{
    (void)state;
    struct qw_nodes_policy p = POLICY;
    p.window = qw_window_policy_default(8);
    struct qw_nodes set;
    qw_nodes_init(&set, 2, &p, 0);
    const uint32_t n0 = 1, n1 = 2, both = 3;
    assert_false(qw_nodes_pushing_back(&set, both, 0)); /* room everywhere */
    /* node 0 fills its window of 4, shrunk by a 429 to 2.8 */
    for (int i = 0; i < 4; i++)
        qw_nodes_started(&set, 0, QW_NODE_REQ_POST, 1);
    for (int i = 0; i < 4; i++)
        qw_window_take(&set.node[0].win);
    assert_false(qw_nodes_pushing_back(&set, n0, 0)); /* full, at the initial window */
    qw_window_answer(&set.node[0].win, &p.window, QW_WINDOW_REFUSED, set.node[0].win.epoch, -1, 0,
                     2);
    assert_true(qw_nodes_pushing_back(&set, n0, 0));
    assert_false(qw_nodes_pushing_back(&set, both, 0)); /* node 1 has room */
    assert_false(qw_nodes_pushing_back(&set, n1, 0));
    /* node 1: every channel in use, its window untouched: not the ledger's doing alone */
    for (int i = 0; i < p.channels; i++)
        qw_nodes_started(&set, 1, QW_NODE_REQ_POST, 3);
    assert_false(qw_nodes_pushing_back(&set, n1, 0));
    assert_true(qw_nodes_pushing_back(&set, both, 0));
    /* a node that is not up does not count either way */
    set.node[0].state = QW_NODE_DOWN;
    assert_false(qw_nodes_pushing_back(&set, both, 0));
    assert_false(qw_nodes_pushing_back(&set, n0, 0));
    /* a window at its max, full: this worker's own limit */
    struct qw_nodes_policy small = POLICY;
    small.window = qw_window_policy_default(2);
    qw_nodes_init(&set, 1, &small, 0);
    qw_window_take(&set.node[0].win);
    qw_window_take(&set.node[0].win);
    assert_false(qw_nodes_pushing_back(&set, n0, 0));
}

/* Latency and load: the fast node takes POSTs until its queue costs more than the slow one. */
static void test_latency_and_load(void **state)
{
    (void)state;
    struct qw_nodes_policy p = POLICY;
    p.channels = 100;
    struct qw_nodes set;
    qw_nodes_init(&set, 2, &p, 0);
    answer(&set, 0, QW_NODE_REQ_POST, 2000, 1);   /* 2 ms */
    answer(&set, 1, QW_NODE_REQ_POST, 150000, 1); /* 150 ms */
    assert_int_equal(set.node[0].ewma_us, 2000);
    /* cost 2 ms x (in flight + 1) stays below 150 ms until 75 are in flight */
    int on_fast = 0;
    for (int k = 0; k < 100; k++) {
        int n = qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 2);
        if (n == 1)
            break;
        assert_int_equal(n, 0);
        qw_nodes_started(&set, 0, QW_NODE_REQ_POST, 2);
        on_fast++;
    }
    assert_int_equal(on_fast, 74);
    /* the moving average follows new samples with weight 1/4 */
    struct qw_nodes e;
    qw_nodes_init(&e, 1, &p, 0);
    static const struct {
        int64_t sample_us, ewma_us;
    } samples[] = {{4000, 4000}, {8000, 5000}, {8000, 5750}, {0, 4313}, {-1, 4313}};
    for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
        answer(&e, 0, QW_NODE_REQ_POLL, samples[i].sample_us, 5);
        assert_int_equal(e.node[0].ewma_us, samples[i].ewma_us);
    }
}

/* An unmeasured node is estimated at the best measured one; a node unmeasured for explore_ms gets a
 * turn. */
static void test_estimate_and_explore(void **state)
{
    (void)state;
    struct qw_nodes set;
    qw_nodes_init(&set, 3, &POLICY, 0);
    answer(&set, 0, QW_NODE_REQ_POST, 3000, 100);
    answer(&set, 1, QW_NODE_REQ_POST, 90000, 100);
    /* node 2 (never measured) costs like node 0 and was used less recently */
    assert_int_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 101), 2);
    answer(&set, 2, QW_NODE_REQ_POST, 5000, 101);
    assert_int_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 102), 0);
    /* keep nodes 0 and 2 busy-ish; node 1 is not measured for explore_ms: it gets one turn */
    for (int64_t t = 103; t < 1100; t += 10)
        answer(&set, qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, t), QW_NODE_REQ_POST, 3000, t);
    assert_int_equal(set.node[1].posts_total, 1);
    assert_int_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 1100), 1);
    qw_nodes_started(&set, 1, QW_NODE_REQ_POST, 1100);
    /* while that one is out, node 1 is not explored again */
    assert_int_not_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 1101), 1);
    assert_int_not_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 2000), 1);
    qw_nodes_finished(&set, 1, QW_NODE_REQ_POST, QW_NODE_ANSWERED, 90000, 1190);
    answer(&set, 0, QW_NODE_REQ_POST, 3000, 2100);
    answer(&set, 2, QW_NODE_REQ_POST, 3000, 2100);
    assert_int_not_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 2189), 1);
    assert_int_equal(qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, 2190), 1);
}

/*
 * Three nodes, one 150 ms slower, a steady stream of POSTs (one every
 * millisecond, each answered after its node's latency): the slow node
 * gets a small share (the target is at most 20%), and a node that fails
 * for a while gets none until it answers a probe, then its share again.
 */
static void test_simulated_run(void **state)
{
    (void)state;
    enum { NODES = 3, MS = 20000, MAX_OUT = 4096 };
    static const int64_t latency_us[NODES] = {2000, 152000, 2000};
    struct qw_nodes_policy p = POLICY;
    p.channels = 64;
    struct qw_nodes set;
    qw_nodes_init(&set, NODES, &p, 0);
    struct post {
        int node;        /* where it went */
        int64_t done_ms; /* when it ends */
        bool fails;      /* connection refused */
    } out[MAX_OUT];
    int n_out = 0;
    long posts[NODES] = {0}, posts_down = 0;
    bool node2_down = false;
    for (int64_t t = 0; t < MS; t++) {
        node2_down = t >= 8000 && t < 13000; /* node 2 refuses connections for 5 s */
        /* finish what is due */
        for (int i = 0; i < n_out;) {
            if (out[i].done_ms > t) {
                i++;
                continue;
            }
            qw_nodes_finished(&set, out[i].node, QW_NODE_REQ_POST,
                              out[i].fails ? QW_NODE_FAILED : QW_NODE_ANSWERED,
                              out[i].fails ? -1 : latency_us[out[i].node], t);
            out[i] = out[--n_out];
        }
        /* probes answer at once when the node is reachable */
        int pr;
        while ((pr = qw_nodes_probe_due(&set, t)) >= 0) {
            qw_nodes_started(&set, pr, QW_NODE_REQ_PROBE, t);
            bool ok = !(pr == 2 && node2_down);
            qw_nodes_finished(&set, pr, QW_NODE_REQ_PROBE, ok ? QW_NODE_ANSWERED : QW_NODE_FAILED,
                              ok ? latency_us[pr] : -1, t);
        }
        int n = qw_nodes_pick_post(&set, QW_NODES_ALL, -1, 0, t);
        assert_int_not_equal(n, -1);
        qw_nodes_started(&set, n, QW_NODE_REQ_POST, t);
        posts[n]++;
        bool refused = n == 2 && node2_down;
        if (refused)
            posts_down++;
        assert_true(n_out < MAX_OUT);
        out[n_out++] = (struct post){n, t + (refused ? 0 : latency_us[n] / 1000), refused};
        if (t == 12999)
            assert_int_not_equal(set.node[2].state, QW_NODE_UP);
        if (t == 13000 + POLICY.probe_max_ms) /* probed at least every probe_max_ms */
            assert_int_equal(set.node[2].state, QW_NODE_UP);
    }
    long total = posts[0] + posts[1] + posts[2];
    print_message("POSTs per node: %ld %ld %ld (to node 2 while down: %ld)\n", posts[0], posts[1],
                  posts[2], posts_down);
    assert_true(posts[1] * 100 <= total * 2); /* the slow node: under 2% here */
    assert_true(posts_down <= QW_NODES_SUSPECT_AFTER);
    assert_true(posts[2] > total / 4); /* used again after it came back */
}

/* A ledger that commits a batch `commit_ms` after its 202 and looks at a
 * waiting status read every QW_NODES_LOOK_EVERY_MS from its start: the
 * latency, us, of a read sent `sent_ms` after the 202. */
static int64_t read_latency_us(int64_t sent_ms, int64_t commit_ms)
{
    if (sent_ms >= commit_ms)
        return 1000; /* final already: answered at once */
    int64_t looks = (commit_ms - sent_ms + QW_NODES_LOOK_EVERY_MS - 1) / QW_NODES_LOOK_EVERY_MS;
    return looks * QW_NODES_LOOK_EVERY_MS * 1000;
}

/* Batches that commit 20-21 ms after their 202, one read at a time: the
 * first reads settle just after the commits, and few come too early. */
static void test_first_look_settles_after_commits(void **state)
{
    (void)state;
    struct qw_nodes set;
    qw_nodes_init(&set, 1, &POLICY, 0);
    assert_int_equal(qw_nodes_first_look_ms(&set, 0), 0); /* at once until it learns */
    int early = 0;
    int64_t lag_ms = 0, t_ms = 0;
    for (int i = 0; i < 2100; i++) {
        int64_t sent = qw_nodes_first_look_ms(&set, 0), commit = 20 + i % 2;
        int64_t lat = read_latency_us(sent, commit);
        t_ms += sent + lat / 1000; /* one service: its next batch goes when this one is final */
        qw_nodes_note_first_look(&set, 0, sent, lat, true, t_ms);
        if (i < 100)
            continue; /* learning */
        early += lat > 50000;
        lag_ms += sent + lat / 1000 - commit;
    }
    print_message("first read %lld ms after the 202; %d of 2000 too early; mean lag %.1f ms\n",
                  (long long)qw_nodes_first_look_ms(&set, 0), early, lag_ms / 2000.0);
    assert_in_range(qw_nodes_first_look_ms(&set, 0), 20, 25);
    /* Commits at 20 or 21 ms only: the staircase tries 20 now and then and
     * finds half its reads late there. */
    assert_true(early <= 60);
    assert_true(lag_ms <= 2000 * 6); /* a read sent at the 202: 79.5 ms on average */
}

/* A node taking a batch every millisecond, each committing 20-29 ms after
 * its 202, so that about 30 first reads are in flight at any time, and a
 * read too early is answered only at the next look, 100 ms on. Answers to
 * reads sent before a late one raised the delay come in after it; still
 * about one read in 50 comes too early, and the others wait little. */
static void test_first_look_many_reads_in_flight(void **state)
{
    (void)state;
    enum { BATCHES = 30000, LEARN = 5000, SLOTS = 256 };
    struct read {
        int64_t answer_us; /* 0: free slot */
        int64_t sent_ms;   /* after the 202 */
        int64_t latency_us;
        int64_t waited_us; /* from the commit to the read, when final already */
    } reads[SLOTS] = {{0}};
    struct qw_nodes set;
    qw_nodes_init(&set, 1, &POLICY, 0);
    uint32_t rng = 12345;
    int late = 0, answered = 0;
    int64_t waited_us = 0;
    for (int64_t now_us = 0; now_us < (BATCHES + 200) * INT64_C(1000); now_us += 1000) {
        /* the answers due by now, in the order they come */
        for (;;) {
            int first = -1;
            for (int k = 0; k < SLOTS; k++)
                if (reads[k].answer_us > 0 && reads[k].answer_us <= now_us &&
                    (first < 0 || reads[k].answer_us < reads[first].answer_us))
                    first = k;
            if (first < 0)
                break;
            struct read *r = &reads[first];
            qw_nodes_note_first_look(&set, 0, r->sent_ms, r->latency_us, true, now_us / 1000);
            if (r->answer_us / 1000 >= LEARN) {
                answered++;
                late += r->latency_us > 50000;
                waited_us += r->waited_us;
            }
            r->answer_us = 0;
        }
        if (now_us >= BATCHES * INT64_C(1000))
            continue;
        /* this millisecond's 202 and its first read */
        rng = rng * 1103515245u + 12345u;
        int64_t commit_us = now_us + 20000 + (int64_t)((rng >> 16) % 10000);
        int64_t sent_ms = qw_nodes_first_look_ms(&set, 0), read_us = now_us + sent_ms * 1000;
        int k = 0;
        while (k < SLOTS && reads[k].answer_us > 0)
            k++;
        assert_true(k < SLOTS);
        if (read_us >= commit_us) {
            reads[k] = (struct read){read_us + 1000, sent_ms, 1000, read_us - commit_us};
        } else {
            int64_t lat = read_latency_us(0, (commit_us - read_us + 999) / 1000);
            reads[k] = (struct read){read_us + lat, sent_ms, lat, 0};
        }
    }
    print_message("first read %lld ms after the 202; %d of %d too early; reads in time waited "
                  "%.1f ms after the commit on average\n",
                  (long long)qw_nodes_first_look_ms(&set, 0), late, answered,
                  (double)waited_us / 1000.0 / (answered - late));
    assert_true(answered > BATCHES - LEARN - 200);
    assert_true(late * 100 <= answered * 3); /* stepping on every answer at once: a fifth */
    assert_true(waited_us <= (int64_t)(answered - late) * 8000);
}

/* Holds the first-read delay of `node` once more, clean: its length and a
 * look and a quarter on from `*t_ms`, eleven reads sent with it in time. */
static void hold_clean(struct qw_nodes *set, int node, int64_t *t_ms)
{
    int64_t d = qw_nodes_first_look_ms(set, node);
    *t_ms += d + QW_NODES_LOOK_EVERY_MS * 5 / 4;
    for (int i = 0; i < 11; i++)
        qw_nodes_note_first_look(set, node, d, 1000, true, *t_ms);
}

/* After a step up, the delay comes down to just above where reads were late
 * and holds there for eight clean holds before it tries that level again. */
static void test_first_look_holds_above_the_edge(void **state)
{
    (void)state;
    struct qw_nodes set;
    qw_nodes_init(&set, 1, &POLICY, 0);
    int64_t t_ms = 0;
    qw_nodes_note_first_look(&set, 0, 0, 1000, true, t_ms); /* in time */
    qw_nodes_note_first_look(&set, 0, 0, 100000, true, t_ms);
    qw_nodes_note_first_look(&set, 0, 0, 100000, true, t_ms);
    assert_int_equal(qw_nodes_first_look_ms(&set, 0), 5);
    qw_nodes_note_first_look(&set, 0, 5, 100000, true, t_ms);
    qw_nodes_note_first_look(&set, 0, 5, 100000, true, t_ms);
    assert_int_equal(qw_nodes_first_look_ms(&set, 0), 10); /* late at 5: the edge */
    const int64_t down[] = {9, 8, 7, 6, 6, 6, 6, 6, 6, 6, 6, 5, 4};
    for (size_t i = 0; i < sizeof down / sizeof down[0]; i++) {
        hold_clean(&set, 0, &t_ms);
        assert_int_equal(qw_nodes_first_look_ms(&set, 0), down[i]);
    }
}

/* Late answers (a final one a look or more after the read, and half a look
 * over the node's usual latency; one that is not final) raise the delay once
 * there are two; a
 * step down waits a look past the delay; the delay is capped; a faster
 * ledger brings it back down within 600 reads; bad nodes are ignored. */
static void test_first_look_late_cap_and_recovery(void **state)
{
    (void)state;
    struct qw_nodes set;
    qw_nodes_init(&set, 3, &POLICY, 0);
    qw_nodes_finished(&set, 0, QW_NODE_REQ_POST, QW_NODE_ANSWERED, 2000, 0);
    qw_nodes_note_first_look(&set, 0, 0, 99999, true, 0);  /* within a look */
    qw_nodes_note_first_look(&set, 0, 0, 100000, true, 0); /* late */
    assert_int_equal(qw_nodes_first_look_ms(&set, 0), 0);  /* one late read in two */
    qw_nodes_note_first_look(&set, 0, 0, 1000, false, 0);  /* not final (Pending) */
    assert_int_equal(qw_nodes_first_look_ms(&set, 0), 5);  /* up, at least 5 ms */
    for (int i = 0; i < 20; i++) /* sent before the step: counted already */
        qw_nodes_note_first_look(&set, 0, 0, 100000, true, 0);
    assert_int_equal(qw_nodes_first_look_ms(&set, 0), 5);
    assert_int_equal(qw_nodes_first_look_ms(&set, 1), 0); /* per node */
    /* node 1 has had no read in time: the delay doubles, 12.5 ms at least */
    const int64_t doubling[] = {12, 25, 50};
    for (size_t i = 0; i < sizeof doubling / sizeof doubling[0]; i++) {
        int64_t sent = qw_nodes_first_look_ms(&set, 1);
        qw_nodes_note_first_look(&set, 1, sent, 100000, true, 0);
        qw_nodes_note_first_look(&set, 1, sent, 100000, true, 0);
        assert_int_equal(qw_nodes_first_look_ms(&set, 1), doubling[i]);
    }
    qw_nodes_note_first_look(&set, 1, 50, 1000, true, 0); /* in time */
    qw_nodes_note_first_look(&set, 1, 50, 100000, true, 0);
    qw_nodes_note_first_look(&set, 1, 50, 100000, true, 0);
    assert_int_equal(qw_nodes_first_look_ms(&set, 1), 62); /* a quarter up from then on */
    /* down only once it has held a look past its own length */
    for (int i = 0; i < 20; i++)
        qw_nodes_note_first_look(&set, 0, 5, 1000, true, 10);
    assert_int_equal(qw_nodes_first_look_ms(&set, 0), 5);
    qw_nodes_note_first_look(&set, 0, 5, 1000, true, 5 + QW_NODES_LOOK_EVERY_MS * 5 / 4);
    assert_int_equal(qw_nodes_first_look_ms(&set, 0), 4);
    /* a read sent later than the delay now: counted only when late */
    for (int i = 0; i < 20; i++)
        qw_nodes_note_first_look(&set, 0, 5, 1000, true, 1000);
    assert_int_equal(qw_nodes_first_look_ms(&set, 0), 4);
    int64_t t_ms = 1000;
    for (int i = 0; i < 100 && qw_nodes_first_look_ms(&set, 0) < QW_NODES_FIRST_LOOK_MAX_MS; i++)
        qw_nodes_note_first_look(&set, 0, qw_nodes_first_look_ms(&set, 0), 100000, true, t_ms);
    assert_int_equal(qw_nodes_first_look_ms(&set, 0), QW_NODES_FIRST_LOOK_MAX_MS); /* capped */
    int reads = 0;
    while (qw_nodes_first_look_ms(&set, 0) > 40 && reads < 2000) {
        int64_t sent = qw_nodes_first_look_ms(&set, 0), lat = read_latency_us(sent, 20);
        t_ms += sent + lat / 1000;
        qw_nodes_note_first_look(&set, 0, sent, lat, true, t_ms);
        reads++;
    }
    print_message("from %d ms to 40 in %d reads\n", QW_NODES_FIRST_LOOK_MAX_MS, reads);
    assert_true(reads <= 600);
    /* a node answering in 80 ms: late from 130 ms */
    qw_nodes_finished(&set, 2, QW_NODE_REQ_POST, QW_NODE_ANSWERED, 80000, t_ms);
    qw_nodes_note_first_look(&set, 2, 0, 129999, true, t_ms);
    qw_nodes_note_first_look(&set, 2, 0, 129999, true, t_ms);
    assert_int_equal(qw_nodes_first_look_ms(&set, 2), 0);
    qw_nodes_note_first_look(&set, 2, 0, 130000, true, t_ms);
    qw_nodes_note_first_look(&set, 2, 0, 130000, true, t_ms);
    assert_int_equal(qw_nodes_first_look_ms(&set, 2), 5);
    qw_nodes_note_first_look(&set, -1, 0, 100000, true, t_ms);
    qw_nodes_note_first_look(&set, 3, 0, 100000, true, t_ms);
    assert_int_equal(qw_nodes_first_look_ms(&set, 3), 0);
    assert_int_equal(qw_nodes_first_look_ms(&set, -1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classify),
        cmocka_unit_test(test_state_machine),
        cmocka_unit_test(test_none_up),
        cmocka_unit_test(test_latency_afresh_after_outage),
        cmocka_unit_test(test_channels_and_avoid),
        cmocka_unit_test(test_pushing_back),
        cmocka_unit_test(test_latency_and_load),
        cmocka_unit_test(test_estimate_and_explore),
        cmocka_unit_test(test_simulated_run),
        cmocka_unit_test(test_first_look_settles_after_commits),
        cmocka_unit_test(test_first_look_many_reads_in_flight),
        cmocka_unit_test(test_first_look_holds_above_the_edge),
        cmocka_unit_test(test_first_look_late_cap_and_recovery),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
