/*
 * The simulator's HTTP layer (libmicrohttpd): scabbard's batches and
 * batch_statuses routes, the /_sim control routes, bearer-token checks and
 * fault injection. Long polls, slow and hung answers suspend the
 * connection and hand a waiter to the engine, which resumes it.
 *
 * Threads: libmicrohttpd's pool (`threads`) runs every handler. The fault
 * settings and PRNG sit behind their own mutex (never held with another).
 *
 * Nodes (node.h): one HTTP layer serves one node's address; several share
 * the engine. A node answers 404 for a service it does not run. A node's extra latency delays its
 * answers: a status query is answered that much later, a submission is taken by the ledger when it
 * arrives and answered that much later (so a node that goes down meanwhile
 * leaves it accepted with its answer lost). A layer that is retired (its
 * node went down) accepts no connection and drops every request.
 */
#ifndef QW_SIM_HTTP_H
#define QW_SIM_HTTP_H

#include "engine.h"
#include "faults.h"
#include "stats.h"

#include <jansson.h>
#include <stdint.h>

struct qw_sim_node;

/** The /_sim/nodes control routes, served by whoever owns the nodes (nodes.h). */
struct qw_sim_http_control {
    char *(*render)(void *ctx); /* the nodes as a malloc'd JSON array; NULL on failure */
    int (*apply)(void *ctx, int index, json_t *change, char *why,
                 size_t why_len); /* QW_OK, QW_ERR_INVALID (why set), QW_ERR_IO, QW_ERR_NOMEM */
    void *ctx;                    /* passed to both */
};

struct qw_sim_http_config {
    int listen_fd;                      /* bound, listening socket; the daemon owns it */
    int threads;                        /* handler threads, >= 1 */
    const char *token;                  /* required bearer token, NULL = none (copied) */
    int64_t hang_max_ms;                /* hung connections are closed after this, ms */
    struct qw_sim_engine *engine;       /* borrowed; outlives the HTTP layer */
    struct qw_sim_stats *stats;         /* borrowed; outlives the HTTP layer */
    struct qw_sim_fault_config faults;  /* initial fault settings */
    uint64_t seed;                      /* fault PRNG seed */
    struct qw_sim_node *node;           /* the node served (latency, counters); NULL = none */
    struct qw_sim_http_control control; /* the /_sim/nodes routes; render NULL = none */
};

struct qw_sim_http;

/**
 * Starts serving on `cfg->listen_fd`. Returns QW_OK, QW_ERR_NOMEM or
 * QW_ERR_IO (the daemon did not start; the socket is then closed).
 */
int qw_sim_http_start(const struct qw_sim_http_config *cfg, struct qw_sim_http **out);

/**
 * Stops serving and frees the layer. Call qw_sim_engine_shutdown() first so
 * no connection stays suspended. NULL is a no-op.
 */
void qw_sim_http_stop(struct qw_sim_http *h);

/**
 * Takes the layer's node down: closes its listening socket (new
 * connections are refused), drops every request from now on (a connection
 * in use sees it closed) and ends its suspended requests at once. The
 * layer stays allocated until qw_sim_http_stop(). Thread-safe; may be
 * called from one of its own handlers.
 */
void qw_sim_http_retire(struct qw_sim_http *h);

#endif
