/*
 * The node chooser: the state of every node of the ledger (the base URLs
 * of dlt.url) and where the submitter's next request goes. Pure: no I/O,
 * no clock reads (time is passed in), no logging. The submitter reports
 * every request it starts on a node and how it ended, and asks which node
 * takes the next POST, status poll or probe.
 *
 * States. up: used. suspect: QW_NODES_SUSPECT_AFTER requests in a row
 * failed on it (timeout, connection refused or lost, TLS, 5xx); it gets
 * no request but probes (a status GET with wait=0), the first after
 * probe_base_ms, then after a delay that doubles up to probe_max_ms.
 * down: suspect, and QW_NODES_DOWN_AFTER probes in a row failed; probed
 * every probe_max_ms. Any answer from a node (a probe's or another
 * request's, whatever its HTTP status below 500) makes it up again, at
 * once: a node that comes back is used without a restart.
 *
 * Latency: an exponentially weighted moving average (weight 1/4) of the
 * time to an answer of POSTs and of status GETs that do not long-poll;
 * a node that comes back up starts it afresh with its first answer.
 *
 * Routing: every request names the nodes that may take it, as a mask of
 * node indexes (the nodes of dlt.url that serve its service, dlt_url.h);
 * other nodes are never chosen for it.
 *
 * Window: each node has a congestion window (window.h) counting the
 * batches this worker keeps there (from the POST until the batch is known
 * final or leaves); a POST goes only to a node whose window has room. The
 * submitter reports each POST's answer to the window of its node. A node
 * that comes back up starts its window afresh (qw_window_restart()).
 *
 * Choosing a node for a POST: among up nodes with a free channel (fewer
 * than `channels` POSTs in flight) and room in their window, the lowest cost, latency estimate x
 * (POSTs in flight + 1), so the fastest node takes most and a slow one
 * only what the fast ones cannot take as quickly. A node with no latency
 * sample yet is estimated at the best measured one (so it gets tried); an
 * up node that has not been measured for explore_ms gets the next request
 * (so a node that became faster is noticed); ties go to the node used
 * least recently. The node to avoid (where the previous attempt of that
 * batch failed) is taken only when no other qualifies. A status poll goes
 * to any up node by the same cost with its polls in flight as the load
 * (scaled by channels), avoiding likewise; it needs no channel.
 *
 * Not thread-safe: one owner (the submitter thread).
 */
#ifndef QW_SUBMITTER_NODES_H
#define QW_SUBMITTER_NODES_H

#include "dlt/dlt_classify.h"
#include "dlt/dlt_url.h"
#include "submitter/window.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QW_NODES_MAX QW_DLT_MAX_NODES  /* nodes a set can hold */
#define QW_NODES_SUSPECT_AFTER 3       /* failed requests in a row that make a node suspect */
#define QW_NODES_DOWN_AFTER 3          /* failed probes in a row that make a suspect node down */
#define QW_NODES_UNMEASURED_US 1000    /* latency estimate when no node was measured yet, us */
#define QW_NODES_LOOK_EVERY_MS 100     /* a waiting status read looks this often (scabbard) */
#define QW_NODES_FIRST_LOOK_MAX_MS 100 /* the latest a batch's first status read goes out */
#define QW_NODES_ALL UINT32_MAX        /* a mask naming every node */
#define QW_NODES_WINDOW_OFF 1e9        /* window of a set whose policy has none: no limit */

enum qw_node_state {
    QW_NODE_UP = 0,  /* in use */
    QW_NODE_SUSPECT, /* failing: probed with a growing delay */
    QW_NODE_DOWN,    /* probes keep failing: probed every probe_max_ms */
};

/** What a request on a node is, for the counts. */
enum qw_node_req {
    QW_NODE_REQ_POST = 0, /* a batch POST: holds a channel */
    QW_NODE_REQ_POLL,     /* a status GET for a batch we follow */
    QW_NODE_REQ_PROBE,    /* a status GET (wait=0) that tests a node that is not up */
};

/** How a request ended, as the node sees it. */
enum qw_node_result {
    QW_NODE_ANSWERED = 0, /* an HTTP answer below 500 arrived: the node works */
    QW_NODE_FAILED,       /* no usable answer: timeout, connection, TLS, 5xx, too large */
    QW_NODE_ABANDONED,    /* cancelled by us (shutdown): says nothing about the node */
};

/** A change of state for the caller to log and count. */
enum qw_node_change {
    QW_NODE_SAME = 0,       /* no change */
    QW_NODE_BECAME_UP,      /* was suspect or down, answered */
    QW_NODE_BECAME_SUSPECT, /* was up, failed QW_NODES_SUSPECT_AFTER times in a row */
    QW_NODE_BECAME_DOWN,    /* was suspect, QW_NODES_DOWN_AFTER probes failed */
};

/** The settings of a set. */
struct qw_nodes_policy {
    int channels;      /* POSTs in flight per node (dlt.channels), >= 1 */
    int probe_base_ms; /* first probe delay after a node turns suspect, ms, >= 1 */
    int probe_max_ms;  /* probe delay cap (and period while down), ms, >= probe_base_ms */
    int explore_ms;    /* an up node unmeasured this long gets the next request, ms, >= 1 */
    struct qw_window_policy window; /* every node's congestion window; max 0 = no windows */
};

/** One node. */
struct qw_node {
    enum qw_node_state state;    /* up, suspect or down */
    int64_t state_since_ms;      /* when it entered that state */
    int64_t ewma_us;             /* latency estimate, us; 0 = no sample yet */
    int64_t measured_ms;         /* when latency was last sampled; 0 = never */
    int64_t used_ms;             /* when a request was last started on it; 0 = never */
    int posts;                   /* POSTs in flight: channels in use */
    int polls;                   /* status GETs in flight (probes included) */
    int failures;                /* requests in a row that failed */
    int probe_failures;          /* probes in a row that failed while not up */
    bool probing;                /* a probe is in flight */
    int64_t probe_at_ms;         /* not up: when the next probe is due */
    long long posts_total;       /* POSTs started */
    long long polls_total;       /* status GETs started (probes included) */
    long long failures_total;    /* requests that failed */
    long long suspect_total;     /* times it turned suspect */
    struct qw_window win;        /* batches this worker keeps at it, and how many it may */
    int64_t first_look_us;       /* a batch it took is first asked about this long after the 202
                                    (qw_nodes_note_first_look) */
    int64_t first_look_since_ms; /* when that delay was set */
    int first_look_reads;        /* reads answered since that count towards it */
    int first_look_late;         /* how many of them were late */
    bool first_look_in_time;     /* a first read has come in time */
    int64_t first_look_edge_us;  /* the delay its last step up started from; 0 = none */
    int first_look_edge_holds;   /* holds just above that edge since */
};

/** The nodes of one ledger. */
struct qw_nodes {
    size_t n;                          /* nodes, 1..QW_NODES_MAX */
    struct qw_node node[QW_NODES_MAX]; /* node i = base URL i of dlt.url */
    struct qw_nodes_policy policy;     /* settings */
};

/** Whether a finished exchange (the client's classification) counts as a node failure. */
enum qw_node_result qw_nodes_classify(enum qw_dlt_outcome outcome, enum qw_dlt_transport transport,
                                      long http_status);

/** Every node up and unmeasured; `n` is clamped to 1..QW_NODES_MAX. */
void qw_nodes_init(struct qw_nodes *set, size_t n, const struct qw_nodes_policy *policy,
                   int64_t now_ms);

/**
 * The node among `mask` for the next POST at `now_ms`, avoiding `avoid`
 * (-1 = none) unless it is the only choice; -1 when no up node of `mask`
 * has a free channel and room in its window under `cap` (<= 0 = no cap).
 */
int qw_nodes_pick_post(const struct qw_nodes *set, uint32_t mask, int avoid, int cap,
                       int64_t now_ms);

/**
 * Whether the ledger pushes back on a POST to `mask` under `cap` (as for
 * qw_nodes_pick_post()): no up node of `mask` has a free channel and room
 * in its window, and at least one is full because its window shrank below
 * the policy's max (429s, POSTs without an answer, slow answers), not
 * because of the channels, the max a worker allows itself or a first slow
 * start still growing.
 */
bool qw_nodes_pushing_back(const struct qw_nodes *set, uint32_t mask, int cap);

/** The node among `mask` for the next status poll (an up node), avoiding `avoid` likewise; -1
 * when none is up. */
int qw_nodes_pick_poll(const struct qw_nodes *set, uint32_t mask, int avoid, int64_t now_ms);

/** Every node of the set, as a mask (bit i = node i). */
uint32_t qw_nodes_all_mask(const struct qw_nodes *set);

/** The nodes that are up, as a mask (bit i = node i). */
uint32_t qw_nodes_up_mask(const struct qw_nodes *set);

/** What a batch's next status read may go to: its facts, as plain values. */
struct qw_poll_route_in {
    size_t n;                   /* nodes of the ledger, 1..QW_NODES_MAX */
    uint32_t up;                /* nodes that are up (qw_nodes_up_mask()) */
    uint32_t route;             /* nodes that serve the batch's service */
    int post_node;              /* node that took (or may have taken) its POST, -1 = none */
    int avoid;                  /* node its last failed request went to, -1 = none */
    int post_failures;          /* requests in a row that failed at `post_node` (0 = it
                                   answered the last one) */
    uint32_t unknown_elsewhere; /* nodes other than the POST's that answered Unknown since */
};

/** Where a batch's next status read may go. */
struct qw_poll_route {
    uint32_t mask;       /* the nodes that may take it (qw_nodes_pick_poll()) */
    bool forget_unknown; /* every other node was ruled out: clear unknown_elsewhere */
};

/**
 * Where a batch's next status read may go: the POST's node while it is up,
 * since only its history surely holds the batch, unless the batch's last
 * request failed there and the node has answered nothing since; otherwise
 * the other up nodes of `route` that neither failed the last request nor
 * answered Unknown since (one that learnt the commit can say so; its
 * Unknown proves nothing, monitor.h), so a hung node holds a batch for one
 * request timeout, not for as long as it hangs, and a node that forgot the
 * batch is not asked over and over. Once no such node is up, the POST's
 * node again when it is up (only it can confirm an Unknown), else all of
 * `route`, and `forget_unknown` is set.
 */
struct qw_poll_route qw_nodes_poll_route(const struct qw_poll_route_in *in);

/** A node that is not up and whose probe is due at `now_ms` (none in flight), or -1. */
int qw_nodes_probe_due(const struct qw_nodes *set, int64_t now_ms);

/** When the next probe falls due (ms), or INT64_MAX when every node is up or being probed. */
int64_t qw_nodes_next_probe_ms(const struct qw_nodes *set);

/** Whether some node is up. */
bool qw_nodes_any_up(const struct qw_nodes *set);

/** Records that a request of `kind` started on `node` at `now_ms`. */
void qw_nodes_started(struct qw_nodes *set, int node, enum qw_node_req kind, int64_t now_ms);

/**
 * Records how a request of `kind` on `node` ended at `now_ms`.
 * `latency_us` >= 0 is a latency sample (an answered POST or a GET that
 * did not long-poll), -1 = none. Returns the change of state, if any.
 */
enum qw_node_change qw_nodes_finished(struct qw_nodes *set, int node, enum qw_node_req kind,
                                      enum qw_node_result result, int64_t latency_us,
                                      int64_t now_ms);

/**
 * When to ask `node` first whether a batch it took is final: this many ms
 * after its 202. A status read with a wait is answered at once when the
 * batch is final already, and otherwise only at one of its looks, every
 * QW_NODES_LOOK_EVERY_MS from its start (scabbard's): a read sent at the
 * 202 learns of a commit 20 ms later 100 ms after the 202. Sent when the
 * batch is likely final, it learns of it at once. 0 for a bad node.
 */
int64_t qw_nodes_first_look_ms(const struct qw_nodes *set, int node);

/**
 * Learns from the answer, at `now_ms`, to a batch's first status read on
 * `node`, the node that took its POST: sent `sent_after_ms` after the 202,
 * answered in `answer_us`, `final` whether it said the batch was final. A
 * read is late when the batch was not final, or the answer came a look or
 * more after the read and half a look over the node's usual latency (it
 * waited for a look). Counting the reads that went out with the delay now
 * (and late ones sent later still), the delay goes up by a quarter (at least
 * 5 ms, at most QW_NODES_FIRST_LOOK_MAX_MS; it doubles, at least an eighth
 * of a look, until a first read has come in time) as soon as more than one,
 * and more than one in 50, are late; it comes down by a sixteenth (at least
 * 1 ms) once at least 11 were answered, at most one in 50 late, and it has
 * held for its own length and a look and a quarter more; after a step up, no
 * further than 1 ms above the delay the late reads had, until it has held
 * there eight times. It settles where few first reads come too early (two or
 * three in a hundred): a read too early costs its service up to a look (the
 * next batch waits for it), one too late only the time since the commit.
 */
void qw_nodes_note_first_look(struct qw_nodes *set, int node, int64_t sent_after_ms,
                              int64_t answer_us, bool final, int64_t now_ms);

/** Static lower-case name of a state ("up", "suspect", "down"). */
const char *qw_node_state_name(enum qw_node_state state);

#endif
