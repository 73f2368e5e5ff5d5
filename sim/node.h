/*
 * One node of the simulator: its address, what it serves and its live
 * counters. The leaf both the HTTP layer (http.h, which serves one node)
 * and the node set (nodes.h, which starts, stops and changes them) use.
 *
 * Threads: the counters, the latency and `up` are atomics read and bumped
 * by the HTTP handlers; the rest is fixed once the node is started.
 */
#ifndef QW_SIM_NODE_H
#define QW_SIM_NODE_H

#include "options.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct qw_sim_http;

/** One node. */
struct qw_sim_node {
    int index;               /* 0-based, in --listen order */
    char host[256];          /* address it binds */
    int port;                /* port it listens on (kept when it comes back up) */
    atomic_llong latency_ms; /* extra latency of its answers, ms */
    atomic_bool up;          /* serving */
    atomic_llong posts;      /* submissions it received */
    atomic_llong gets;       /* status queries it received */
    atomic_llong downs;      /* times it was taken down */
    atomic_llong restarts;   /* times it restarted (forgetting its history) */
    char hosts[QW_SIM_HOSTS_MAX][QW_SIM_SERVICE_KEY_MAX]; /* circuits or services it runs */
    size_t n_hosts;                                       /* entries in hosts; 0 = every one */
    struct qw_sim_http *http; /* its current layer, NULL while down (node set's mutex) */
};

/**
 * Whether `nd` runs the scabbard service `service_key` ("circuit::service"):
 * every service when it names none, else those it names by service or by
 * circuit. Pure; thread-safe.
 */
bool qw_sim_node_hosts(const struct qw_sim_node *nd, const char *service_key);

#endif
