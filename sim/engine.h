/*
 * The simulator's engine: the pure ledger behind one mutex, the nodes'
 * batch histories (history.h), a ticker thread that applies status changes
 * and the propagation of commits to the other nodes when they fall due, and
 * waiters (suspended HTTP requests: long polls, slow and hung answers) that
 * it wakes.
 *
 * Whose status a query sees (struct qw_sim_engine_config): with per-node
 * histories, node N answers from its own history, which holds what was
 * posted to N (Pending at once) and every commit, at once for the node that
 * took the batch and `propagation_us` later for the others; otherwise every
 * node answers from the ledger's one status memory. A long poll ends when
 * no listed id awaits a change (an id the node does not know keeps it
 * waiting unless `unknown_settles`), looking every `wait_poll_us` as
 * scabbard's handler does, or at the change itself when that is 0.
 *
 * DESIGN
 * - One mutex (`mu`) guards the ledger and every waiter structure. Every
 *   ledger-visible event (accepted post, status change, restart) is written
 *   to the event log while it is held, so the log's line order is the
 *   ledger's order. Lock order: engine mutex, then the event log's mutex.
 * - The ticker sleeps on a condition variable until the earliest of the next
 *   status change and the next waiter deadline; request threads signal it
 *   when they make something due earlier. Request threads also advance the
 *   ledger themselves, so an answer never shows a stale status.
 * - A waiter belongs to its request; the engine links it while it is armed.
 *   Waking unlinks it, clears `armed`, then calls `wake` with the mutex held
 *   (the HTTP layer resumes the connection there; it must not call back into
 *   the engine). A request must not be freed while armed: call
 *   qw_sim_engine_cancel() first (a no-op when not armed).
 * - Shutdown: qw_sim_engine_shutdown() wakes every waiter and makes later
 *   waits return at once; qw_sim_engine_free() stops the ticker.
 */
#ifndef QW_SIM_ENGINE_H
#define QW_SIM_ENGINE_H

#include "evlog.h"
#include "ledger.h"
#include "stats.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct qw_sim_engine;

/** How the engine behaves; copied at start. */
struct qw_sim_engine_config {
    struct qw_sim_ledger_config ledger; /* commit queues, back pressure; with per_node its
                                           status_memory is each node's history limit */
    size_t nodes;                       /* nodes (HTTP layers) over this engine, >= 1 */
    bool per_node;                      /* each node answers from its own batch history */
    int64_t propagation_us;             /* per_node: a commit reaches the other nodes this late */
    bool unknown_settles;               /* a long poll does not wait for an unknown id */
    int64_t wait_poll_us;               /* a long poll looks this often; 0 = at each change */
};

enum qw_sim_wake_reason {
    QW_SIM_WAKE_NONE = 0, /* still waiting */
    QW_SIM_WAKE_READY,    /* every listed id is settled */
    QW_SIM_WAKE_TIMEOUT,  /* the deadline passed */
    QW_SIM_WAKE_SHUTDOWN, /* the simulator is stopping */
};

/** A suspended request. Owned by the request; see DESIGN above. */
struct qw_sim_waiter {
    void (*wake)(struct qw_sim_waiter *w); /* called once, engine mutex held */
    void *arg;                             /* for `wake` */
    int64_t deadline_us;                   /* wake with TIMEOUT then; INT64_MAX = never */
    int node;                              /* node whose view a long poll reads */
    const char *service_key;               /* long poll: the service, else NULL */
    const char *const *ids;                /* long poll: ids that must settle */
    size_t n_ids;                          /* long poll: number of ids, 0 = pure timer */
    int64_t start_us;                      /* long poll: when its wait began; looks count from it */
    enum qw_sim_wake_reason reason;        /* why it was woken, set before `wake` */
    /* engine-private */
    atomic_bool armed;              /* linked into the engine */
    size_t heap_pos;                /* index in the deadline heap */
    struct qw_sim_waiter *svc_prev; /* long-poll list of its service */
    struct qw_sim_waiter *svc_next; /* long-poll list of its service */
    struct qw_sim_service *svc;     /* service of a long poll */
};

/**
 * Creates the ledger and the histories and starts the ticker thread. `log`
 * (may be NULL) and `stats` are borrowed and must outlive the engine.
 * Returns QW_OK, QW_ERR_INVALID (bad config), QW_ERR_NOMEM or QW_ERR_IO
 * (thread).
 */
int qw_sim_engine_start(const struct qw_sim_engine_config *cfg, struct qw_sim_evlog *log,
                        struct qw_sim_stats *stats, struct qw_sim_engine **out);

/** Wakes every waiter with SHUTDOWN; later waits wake at once. Idempotent. */
void qw_sim_engine_shutdown(struct qw_sim_engine *e);

/** Stops the ticker and frees everything. Waiters must be gone. NULL is a no-op. */
void qw_sim_engine_free(struct qw_sim_engine *e);

/** How a submission ends, for the event log. */
struct qw_sim_post_note {
    const char *fate;  /* NULL: answered; "drop" or "hang": no answer follows */
    const char *fault; /* injected fault behind the answer ("429", "burst", "5xx"), or NULL */
    bool malformed;    /* the 202 body is garbled */
    int64_t slow_ms;   /* the answer was delayed this long */
};

/**
 * Offers a BatchList's batches, posted to node `node`, to the ledger (for
 * `service_key`); the node's history records them. Logs one "post" line
 * per batch, with code 202/429 or the note's fate. Returns QW_OK or
 * QW_ERR_NOMEM; `*result` says whether the ledger took them. Thread-safe.
 */
int qw_sim_engine_submit(struct qw_sim_engine *e, int node, const char *service_key,
                         const struct qw_sim_submission *subs, size_t n,
                         const struct qw_sim_post_note *note, enum qw_sim_accept_result *result);

/**
 * Logs "post" lines for a submission the ledger never saw (bad request,
 * auth failure, injected fault): one per batch in `subs`, or one with a
 * null batch when `n` is 0. `code` is the HTTP status, or 0 with `fate`
 * ("drop"/"hang"). Does not take the engine mutex. Thread-safe.
 */
void qw_sim_engine_log_post(struct qw_sim_engine *e, int node, const char *service_key,
                            const struct qw_sim_submission *subs, size_t n, int code,
                            const char *fate, const struct qw_sim_post_note *note);

/**
 * Renders node `node`'s batch_statuses answer for `ids` of `service_key`
 * now into a malloc'd string (caller frees; NULL on allocation failure).
 * `*settled` tells whether no listed id keeps a long poll waiting.
 * Thread-safe.
 */
char *qw_sim_engine_render_statuses(struct qw_sim_engine *e, int node, const char *service_key,
                                    const char *const *ids, size_t n, bool *settled);

/**
 * Logs a "get" line: `code` is the HTTP status, or 0 with `fate`
 * ("drop"/"hang"); `waited_ms` > 0 for a long poll. Thread-safe.
 */
void qw_sim_engine_log_get(struct qw_sim_engine *e, int node, const char *service_key, size_t n_ids,
                           int code, const char *fate, int64_t waited_ms);

/**
 * Arms `w` (fields above "engine-private" filled by the caller). If its
 * condition already holds, or the engine is shutting down, `wake` is
 * called before this returns. Thread-safe.
 */
void qw_sim_engine_wait(struct qw_sim_engine *e, struct qw_sim_waiter *w);

/** Disarms `w` without waking it; no-op when not armed. Thread-safe. */
void qw_sim_engine_cancel(struct qw_sim_engine *e, struct qw_sim_waiter *w);

/**
 * Wakes, with SHUTDOWN, every armed waiter for which `match(w, ctx)` is
 * true (called with the engine mutex held: it must not call back into the
 * engine). Used when a node goes down: its suspended requests end at once.
 * Returns how many were woken. Thread-safe.
 */
size_t qw_sim_engine_wake_where(struct qw_sim_engine *e,
                                bool (*match)(const struct qw_sim_waiter *w, void *ctx), void *ctx);

/** Wipes the ledger and every history (every node restarts), logs it, wakes long polls.
 * Thread-safe. */
void qw_sim_engine_restart(struct qw_sim_engine *e, const char *why);

/**
 * Node `node` restarts: with per-node histories it forgets its history and
 * the batches it had queued and not yet committed (logged as a "restart"
 * line naming the node); with the shared one, the same as
 * qw_sim_engine_restart(). Its suspended requests are the HTTP layer's to
 * end (the node's process is gone). Thread-safe.
 */
void qw_sim_engine_restart_node(struct qw_sim_engine *e, int node);

/** Pauses or resumes the commit clock, logs it. Thread-safe. */
void qw_sim_engine_set_paused(struct qw_sim_engine *e, bool paused);

/**
 * Adds the ledger's view to a stats object: "paused", "queued" (all
 * services), "max_queued_any" and "services" {key: {"queued", "max_queued"}}.
 * Returns QW_OK or QW_ERR_NOMEM. Thread-safe.
 */
int qw_sim_engine_stats_json(struct qw_sim_engine *e, json_t *into);

#endif
