/*
 * The queuer thread's view of the services it holds: service_id -> claim
 * epoch and whether a job of the service is with the submitter. An
 * open-addressing hash table with tombstones; owned and used by one thread.
 */
#ifndef QW_QUEUER_SVCMAP_H
#define QW_QUEUER_SVCMAP_H

#include "shared/job.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct qw_svc {
    char service_id[QW_SERVICE_ID_MAX]; /* key; "" = empty slot */
    int64_t epoch;                      /* claim epoch we hold */
    bool busy;                          /* a job of this service is with the submitter */
    struct qw_job *job;                 /* that job (while busy; the submitter owns it, only
                                           its `drain` may be written) */
    bool held;                          /* we hold its claim */
    bool seen;                          /* listed by the latest full read of our claims
                                           (mark-and-sweep) */
    bool draining;                      /* above our fair share: queue nothing more (and no
                                           fast path), so it goes idle and is released */
    bool avoid;                         /* its last POST failed on node avoid_node: the next
                                           one prefers another node */
    bool woken_busy;                    /* a notification named it while its job was out:
                                           fetch it when the job comes back */
    bool named;                         /* a wake-up named its new batch: marked without a
                                           fetch at the next queue step */
    int avoid_node;                     /* that node (when avoid) */
    bool tombstone;                     /* deleted slot */
};

struct qw_svcmap {
    struct qw_svc *slots; /* capacity entries */
    size_t capacity;      /* power of two */
    size_t used;          /* live entries */
    size_t filled;        /* live + tombstones */
    size_t busy;          /* live entries with busy set */
};

/** Initialises an empty map. Returns 0 or -1 on allocation failure. */
int qw_svcmap_init(struct qw_svcmap *m);

/** Frees the table. */
void qw_svcmap_free(struct qw_svcmap *m);

/** Finds a service; NULL when absent. The pointer is valid until the next put/del. */
struct qw_svc *qw_svcmap_get(struct qw_svcmap *m, const char *service_id);

/** Finds or inserts a service (new entries zeroed). NULL on allocation failure. */
struct qw_svc *qw_svcmap_put(struct qw_svcmap *m, const char *service_id);

/** Removes a service if present (keeps the busy count right). */
void qw_svcmap_del(struct qw_svcmap *m, const char *service_id);

/** Sets or clears busy on an entry, keeping the busy count right. */
void qw_svcmap_set_busy(struct qw_svcmap *m, struct qw_svc *s, bool busy);

/** Iteration: returns the next live entry at or after *pos, advancing it; NULL at the end. */
struct qw_svc *qw_svcmap_next(struct qw_svcmap *m, size_t *pos);

#endif
