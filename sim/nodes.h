/*
 * The simulator's nodes: several addresses (--listen, repeated) of one
 * ledger. Each node has its own HTTP layer (http.h) over the one shared
 * engine, so a batch accepted on one node is seen on every node; each has
 * an extra latency (--node-latency-ms, or the control route) and can be
 * taken down and brought back up at run time.
 *
 * Down: the node's layer is retired (its listening socket closed, every
 * request dropped, its suspended requests ended), as if its process died:
 * clients see connections refused or closed. Up: a new layer listens on
 * the same port again. The ledger is untouched either way.
 *
 * Restart: the node goes down and comes back up at once, having
 * forgotten its batch history and the batches it had queued
 * (qw_sim_engine_restart_node()).
 *
 * Control: GET /_sim/nodes lists the nodes; POST /_sim/nodes/N with
 * {"up": bool, "latency_ms": MS, "restart": true} changes node N (any key
 * may be left out). A node that is down answers nothing, so send these to
 * another node's address. The HTTP layer reaches these through the hooks
 * in its config (struct qw_sim_http_control), so it needs no part of this
 * header.
 *
 * Threads: changes are serialised by the set's mutex; the counters and the
 * latency are atomics read by the HTTP handlers.
 */
#ifndef QW_SIM_NODES_H
#define QW_SIM_NODES_H

#include "http.h"
#include "node.h"
#include "options.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct qw_sim_nodes {
    size_t n;                                  /* nodes */
    struct qw_sim_node node[QW_SIM_NODES_MAX]; /* by index */
    struct qw_sim_http_config base;            /* what every layer is started with */
    pthread_mutex_t mu;                        /* serialises up/down */
    struct qw_sim_http **retired;              /* layers of nodes taken down, stopped at the end */
    size_t n_retired;                          /* entries in retired */
};

/**
 * Binds every address of `o` and starts a layer on each (with `base`,
 * whose listen_fd, node and nodes are filled per node). On success *out
 * owns the set; `ports` (o->n_listen entries) receives the bound ports.
 * Returns QW_OK, QW_ERR_IO (an address cannot be bound or served; logged)
 * or QW_ERR_NOMEM; nothing is left running on failure.
 */
int qw_sim_nodes_start(const struct qw_sim_options *o, const struct qw_sim_http_config *base,
                       struct qw_sim_nodes **out, int *ports);

/**
 * Applies a control change (a JSON object with "up", "latency_ms" and/or
 * "restart") to node `index`. Returns QW_OK, QW_ERR_INVALID (no such node, bad keys
 * or values; the reason in `why`), QW_ERR_IO (the port cannot be bound
 * again) or QW_ERR_NOMEM. All or nothing for the values; thread-safe.
 */
int qw_sim_nodes_apply(struct qw_sim_nodes *ns, int index, json_t *change, char *why,
                       size_t why_len);

/** The nodes as a malloc'd JSON array (index, port, up, latency_ms, posts, gets, downs, restarts,
 * hosts); NULL on allocation failure. Thread-safe. */
char *qw_sim_nodes_render(struct qw_sim_nodes *ns);

/** Stops every layer (current and retired) and frees the set. Call after qw_sim_engine_shutdown().
 * NULL is a no-op. */
void qw_sim_nodes_stop(struct qw_sim_nodes *ns);

#endif
