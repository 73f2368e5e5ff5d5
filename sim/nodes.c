/* The simulator's nodes: several addresses over one ledger, each can go down and up; see nodes.h.
 */
#include "nodes.h"

#include "common/err.h"
#include "common/log.h"
#include "engine.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Binds and listens; returns the socket and the bound port, or -1 (logged). */
static int open_listener(const char *host, int port, int *bound_port)
{
    char port_text[16];
    snprintf(port_text, sizeof(port_text), "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, port_text, &hints, &res);
    if (gai != 0) {
        qw_log_error("sim.listen.resolve_failed", "host=%s error=\"%s\"", host, gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    int last_errno = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 4096) == 0)
            break;
        last_errno = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        qw_log_error("sim.listen.failed", "host=%s port=%d error=\"%s\"", host, port,
                     strerror(last_errno));
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &len);
    if (ss.ss_family == AF_INET6)
        *bound_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    else
        *bound_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

static char *control_render(void *ctx)
{
    return qw_sim_nodes_render(ctx);
}

static int control_apply(void *ctx, int index, json_t *change, char *why, size_t why_len)
{
    return qw_sim_nodes_apply(ctx, index, change, why, why_len);
}

/* Starts a layer for node `nd` on its address (its port once bound); set mutex held or no
 * other thread yet. */
static int node_serve(struct qw_sim_nodes *ns, struct qw_sim_node *nd)
{
    int port = nd->port;
    struct qw_sim_http_config cfg = ns->base;
    cfg.listen_fd = open_listener(nd->host, port, &port);
    if (cfg.listen_fd < 0)
        return QW_ERR_IO;
    cfg.node = nd;
    cfg.control =
        (struct qw_sim_http_control){.render = control_render, .apply = control_apply, .ctx = ns};
    int rc = qw_sim_http_start(&cfg, &nd->http); /* closes the socket on failure */
    if (rc != QW_OK)
        return rc;
    nd->port = port;
    atomic_store(&nd->up, true);
    return QW_OK;
}

/* Takes node `nd` down; set mutex held. */
static int node_down(struct qw_sim_nodes *ns, struct qw_sim_node *nd)
{
    struct qw_sim_http **grown = realloc(ns->retired, (ns->n_retired + 1) * sizeof(*grown));
    if (!grown)
        return QW_ERR_NOMEM;
    ns->retired = grown;
    atomic_store(&nd->up, false);
    atomic_fetch_add(&nd->downs, 1);
    qw_sim_http_retire(nd->http);
    ns->retired[ns->n_retired++] = nd->http;
    nd->http = NULL;
    return QW_OK;
}

int qw_sim_nodes_start(const struct qw_sim_options *o, const struct qw_sim_http_config *base,
                       struct qw_sim_nodes **out, int *ports)
{
    *out = NULL;
    struct qw_sim_nodes *ns = calloc(1, sizeof(*ns));
    if (!ns)
        return QW_ERR_NOMEM;
    pthread_mutex_init(&ns->mu, NULL);
    ns->base = *base;
    ns->n = o->n_listen;
    int rc = QW_OK;
    for (size_t i = 0; i < ns->n && rc == QW_OK; i++) {
        struct qw_sim_node *nd = &ns->node[i];
        nd->index = (int)i;
        snprintf(nd->host, sizeof(nd->host), "%s", o->listen[i].host);
        nd->port = o->listen[i].port;
        atomic_store(&nd->latency_ms, o->listen[i].latency_ms);
        memcpy(nd->hosts, o->listen[i].hosts, sizeof(nd->hosts));
        nd->n_hosts = o->listen[i].n_hosts;
        rc = node_serve(ns, nd);
        ports[i] = nd->port;
    }
    if (rc != QW_OK) {
        qw_sim_nodes_stop(ns);
        return rc;
    }
    *out = ns;
    return QW_OK;
}

int qw_sim_nodes_apply(struct qw_sim_nodes *ns, int index, json_t *change, char *why,
                       size_t why_len)
{
    if (index < 0 || (size_t)index >= ns->n) {
        snprintf(why, why_len, "no node %d (there are %zu)", index, ns->n);
        return QW_ERR_INVALID;
    }
    if (!json_is_object(change)) {
        snprintf(why, why_len, "body must be a JSON object");
        return QW_ERR_INVALID;
    }
    const char *key;
    json_t *value;
    json_object_foreach(change, key, value)
    {
        bool ok = (strcmp(key, "up") == 0 && json_is_boolean(value)) ||
                  (strcmp(key, "restart") == 0 && json_is_true(value)) ||
                  (strcmp(key, "latency_ms") == 0 && json_is_integer(value) &&
                   json_integer_value(value) >= 0 && json_integer_value(value) <= 600000);
        if (!ok) {
            snprintf(why, why_len,
                     "unknown key or bad value \"%.40s\": give \"up\" (true/false), "
                     "\"restart\" (true) and/or \"latency_ms\" (0..600000)",
                     key);
            return QW_ERR_INVALID;
        }
    }
    struct qw_sim_node *nd = &ns->node[index];
    int rc = QW_OK;
    pthread_mutex_lock(&ns->mu);
    json_t *latency = json_object_get(change, "latency_ms");
    if (latency)
        atomic_store(&nd->latency_ms, (long long)json_integer_value(latency));
    json_t *up = json_object_get(change, "up");
    bool want_up = up && json_is_true(up);
    if (json_object_get(change, "restart") && atomic_load(&nd->up)) {
        /* Its process goes: connections cut, memory lost, and it is back. */
        rc = node_down(ns, nd);
        if (rc == QW_OK) {
            qw_sim_engine_restart_node(ns->base.engine, index);
            atomic_fetch_add(&nd->restarts, 1);
            rc = node_serve(ns, nd);
        }
    } else if (json_object_get(change, "restart")) {
        qw_sim_engine_restart_node(ns->base.engine, index);
        atomic_fetch_add(&nd->restarts, 1);
    }
    if (rc == QW_OK && up && want_up != atomic_load(&nd->up)) {
        rc = want_up ? node_serve(ns, nd) : node_down(ns, nd);
        if (rc == QW_ERR_IO)
            snprintf(why, why_len, "cannot listen on port %d again", nd->port);
        else if (rc != QW_OK)
            snprintf(why, why_len, "out of memory");
    }
    int port = nd->port;
    pthread_mutex_unlock(&ns->mu);
    qw_log_info("sim.node.changed", "node=%d up=%d latency_ms=%lld restarts=%lld port=%d rc=%d",
                index, (int)atomic_load(&nd->up), (long long)atomic_load(&nd->latency_ms),
                (long long)atomic_load(&nd->restarts), port, rc);
    return rc;
}

char *qw_sim_nodes_render(struct qw_sim_nodes *ns)
{
    pthread_mutex_lock(&ns->mu); /* a node coming up sets its port */
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < ns->n; i++) {
        const struct qw_sim_node *nd = &ns->node[i];
        json_t *hosts = json_array();
        for (size_t k = 0; hosts && k < nd->n_hosts; k++)
            json_array_append_new(hosts, json_string(nd->hosts[k]));
        json_t *o = json_pack(
            "{s:i, s:i, s:b, s:I, s:I, s:I, s:I, s:I, s:o*}", "node", nd->index, "port", nd->port,
            "up", (int)atomic_load(&nd->up), "latency_ms", (json_int_t)atomic_load(&nd->latency_ms),
            "posts", (json_int_t)atomic_load(&nd->posts), "gets",
            (json_int_t)atomic_load(&nd->gets), "downs", (json_int_t)atomic_load(&nd->downs),
            "restarts", (json_int_t)atomic_load(&nd->restarts), "hosts", hosts);
        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    pthread_mutex_unlock(&ns->mu);
    char *s = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    return s;
}

void qw_sim_nodes_stop(struct qw_sim_nodes *ns)
{
    if (!ns)
        return;
    for (size_t i = 0; i < ns->n; i++)
        qw_sim_http_stop(ns->node[i].http);
    for (size_t i = 0; i < ns->n_retired; i++)
        qw_sim_http_stop(ns->retired[i]);
    free(ns->retired);
    pthread_mutex_destroy(&ns->mu);
    free(ns);
}
