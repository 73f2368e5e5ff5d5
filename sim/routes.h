/*
 * Request parsing for the simulator's HTTP API: which route a method and
 * path name, the ids list and wait parameter of a status query, and what a
 * batch id may look like. Pure functions.
 */
#ifndef QW_SIM_ROUTES_H
#define QW_SIM_ROUTES_H

#include "ledger.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Longest batch id the simulator accepts, characters. */
#define QW_SIM_ID_MAX 256
/** Most ids one status query may list. */
#define QW_SIM_IDS_MAX 400
/** Longest long-poll wait, milliseconds (longer requests are clamped). */
#define QW_SIM_WAIT_MAX_MS 3600000
/** The wait of a query whose `wait` is not a number, milliseconds (scabbard's default). */
#define QW_SIM_WAIT_DEFAULT_MS 300000

enum qw_sim_route_kind {
    QW_SIM_ROUTE_NOT_FOUND = 0, /* no such path: 404 */
    QW_SIM_ROUTE_BATCHES,       /* /scabbard/{circuit}/{service}/batches */
    QW_SIM_ROUTE_STATUSES,      /* /scabbard/{circuit}/{service}/batch_statuses */
    QW_SIM_ROUTE_RESTART,       /* /_sim/restart */
    QW_SIM_ROUTE_FAULTS,        /* /_sim/faults */
    QW_SIM_ROUTE_STATS,         /* /_sim/stats */
    QW_SIM_ROUTE_PAUSE,         /* /_sim/pause */
    QW_SIM_ROUTE_RESUME,        /* /_sim/resume */
    QW_SIM_ROUTE_NODES,         /* /_sim/nodes */
    QW_SIM_ROUTE_NODE,          /* /_sim/nodes/{index} */
};

/** A parsed request line. */
struct qw_sim_route {
    enum qw_sim_route_kind kind;              /* which route */
    bool method_allowed;                      /* false: answer 405 */
    const char *allow;                        /* static Allow header value for the path */
    char circuit[12];                         /* scabbard routes: circuit id */
    char service[5];                          /* scabbard routes: service id */
    char service_key[QW_SIM_SERVICE_KEY_MAX]; /* scabbard routes: "circuit::service" */
    int node;                                 /* /_sim/nodes/{index}: the index, 0..999 */
};

/** Parses `method` and `path` (no query string) into `out`. */
void qw_sim_route_parse(const char *method, const char *path, struct qw_sim_route *out);

/** True for the /_sim/... control routes. */
bool qw_sim_route_is_control(enum qw_sim_route_kind kind);

/**
 * True when `id` is 1..QW_SIM_ID_MAX characters from the URL-unreserved
 * set [A-Za-z0-9._~-], so it can be listed in a link unescaped.
 */
bool qw_sim_id_valid(const char *id);

/** The ids of a status query; owns its memory. */
struct qw_sim_id_list {
    char *buf;  /* copy of the query value, split in place */
    char **ids; /* `n` pointers into `buf` */
    size_t n;   /* number of ids */
};

/**
 * Splits the comma-separated `text` (may be NULL) into ids, skipping empty
 * items. Fails with QW_ERR_INVALID and a message in `err` when there is no
 * id, more than QW_SIM_IDS_MAX, or an id that fails qw_sim_id_valid();
 * QW_ERR_NOMEM on allocation failure. On success free with qw_sim_ids_free().
 */
int qw_sim_ids_parse(const char *text, struct qw_sim_id_list *out, char *err, size_t errlen);

/** Frees what qw_sim_ids_parse() allocated; safe on a zeroed list. */
void qw_sim_ids_free(struct qw_sim_id_list *list);

/**
 * The wait of a status query, milliseconds, as scabbard's REST handler
 * reads it: no `wait` parameter (NULL) or "false" is no wait; a
 * non-negative decimal number of seconds is that wait (fractions allowed,
 * clamped to QW_SIM_WAIT_MAX_MS); anything else, the empty value included,
 * is QW_SIM_WAIT_DEFAULT_MS.
 */
int64_t qw_sim_wait_parse(const char *text);

#endif
