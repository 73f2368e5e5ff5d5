/*
 * The simulated scabbard ledger's state machine: per-service commit queues,
 * back pressure with hysteresis, batch statuses and the bounded status
 * memory. Pure: no I/O, no clock reads, no locking; time is passed in as
 * microseconds and every public call first advances the ledger to that time.
 *
 * Rules (see sim/README.md):
 * - a service commits its batches in acceptance order; a batch's first step
 *   is due at max(accepted, previous batch's final step) + commit delay;
 *   with valid_step it is Pending -> Valid -> Committed, one delay per step;
 *   a batch whose id starts with the invalid prefix goes Pending -> Invalid
 *   at its first step;
 * - a service refuses new batches once `queue_high` batches are queued
 *   (Pending or Valid) and accepts again when fewer than `queue_low` are;
 *   the same with the optional global limits over all services;
 * - with a rate, the node accepts at most that many batches a second over
 *   all services (a token bucket, sim/capacity.h) and refuses the rest;
 * - a known id (queued or still remembered) is a duplicate: accepted again,
 *   status unchanged;
 * - each service remembers its last `status_memory` finalized batches
 *   (0 = all); queued batches are always remembered;
 * - each queued batch remembers the node that took it (its origin), so a
 *   node restart can take back what that node had queued and not yet
 *   committed.
 *
 * Thread-safety: none; the owner serialises all calls on one ledger.
 */
#ifndef QW_SIM_LEDGER_H
#define QW_SIM_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Longest service key "ccccc-ccccc::ssss" plus NUL. */
#define QW_SIM_SERVICE_KEY_MAX 18

enum qw_sim_status {
    QW_SIM_UNKNOWN = 0,
    QW_SIM_PENDING,
    QW_SIM_VALID,
    QW_SIM_COMMITTED,
    QW_SIM_INVALID,
};

/** Fixed ledger behaviour, copied at creation. */
struct qw_sim_ledger_config {
    size_t queue_high;          /* per-service queued batches that start back pressure */
    size_t queue_low;           /* per-service queued batches below which it ends */
    size_t global_high;         /* all-service queued batches that start it, 0 = off */
    size_t global_low;          /* all-service queued batches below which it ends */
    int64_t commit_delay_us;    /* duration of one status step, microseconds */
    bool valid_step;            /* Pending -> Valid -> Committed instead of -> Committed */
    const char *invalid_prefix; /* ids starting with this (any case) end Invalid; NULL/"" = none */
    size_t status_memory;       /* finalized batches remembered per service, 0 = all */
    int64_t rate;               /* batches accepted per second over all services, 0 = no
                                   limit (sim/capacity.h) */
    int64_t rate_burst;         /* most batches accepted at once, 0 = a tenth of `rate` */
    bool never_refuse;          /* scabbard protocol version 1: no back pressure, no rate
                                   (nothing is refused) */
};

struct qw_sim_ledger;
struct qw_sim_batch;

/** One service's state. Owned by the ledger; lives until the ledger is freed. */
struct qw_sim_service {
    char key[QW_SIM_SERVICE_KEY_MAX]; /* "circuit::service" */
    size_t index;                     /* creation order, 0-based */
    struct qw_sim_batch *queue_head;  /* oldest queued (Pending/Valid) batch */
    struct qw_sim_batch *queue_tail;  /* newest queued batch */
    size_t queued;                    /* batches in the queue */
    struct qw_sim_batch *done_head;   /* oldest remembered finalized batch */
    struct qw_sim_batch *done_tail;   /* newest remembered finalized batch */
    size_t remembered;                /* batches in the finalized list */
    int64_t chain_us;                 /* time of the last scheduled final step, us */
    bool throttled;                   /* refusing batches (back pressure) */
    size_t max_queued;                /* highest `queued` ever seen (kept over restarts) */
    size_t heap_pos;                  /* index in the ledger's due heap, SIZE_MAX if absent */
    struct qw_sim_service *hash_next; /* ledger-private: next in the key hash bucket */
    void *user;                       /* owner's data; the ledger never touches it */
};

/** One batch offered in a BatchList. */
struct qw_sim_submission {
    const char *batch_id;     /* header_signature, NUL-terminated */
    const char *first_txn_id; /* first transaction's header_signature, may be NULL */
};

enum qw_sim_accept_result {
    QW_SIM_ACCEPTED = 0,        /* every batch is queued or a duplicate */
    QW_SIM_REFUSED_SERVICE = 1, /* service back pressure; nothing changed */
    QW_SIM_REFUSED_GLOBAL = 2,  /* global back pressure; nothing changed */
    QW_SIM_REFUSED_RATE = 3,    /* the node's rate is used up; nothing changed */
};

/** What a status query sees; pointers stay valid until the next ledger call. */
struct qw_sim_status_view {
    enum qw_sim_status status; /* QW_SIM_UNKNOWN when not remembered */
    int64_t changed_us;        /* time of the last status change, 0 for Unknown */
    const char *txn_id;        /* Invalid only: first transaction id or the batch id */
    const char *message;       /* Invalid only: why, else NULL */
    bool settled;              /* not queued: no further change is scheduled */
};

/**
 * Called for every status change, in time order, with the node that took
 * the batch (`origin`) and the time the change was due (`at_us`). The batch
 * and service stay valid during the call only. It must not call back into
 * the ledger.
 */
typedef void (*qw_sim_ledger_change_fn)(void *ctx, const struct qw_sim_service *svc,
                                        const char *batch_id, int origin, enum qw_sim_status from,
                                        enum qw_sim_status to, int64_t at_us);

/**
 * Creates an empty ledger. `on_change` (may be NULL) observes transitions.
 * Returns QW_OK, QW_ERR_INVALID (queue_low > queue_high, queue_high 0, or
 * global_low > global_high) or QW_ERR_NOMEM. The caller frees with
 * qw_sim_ledger_free().
 */
int qw_sim_ledger_new(const struct qw_sim_ledger_config *cfg, qw_sim_ledger_change_fn on_change,
                      void *ctx, struct qw_sim_ledger **out);

/** Frees the ledger, its services and batches. NULL is a no-op. */
void qw_sim_ledger_free(struct qw_sim_ledger *l);

/** Static name as scabbard spells it ("Pending", ...). */
const char *qw_sim_status_name(enum qw_sim_status status);

/**
 * Finds the service with `key`, creating it when `create` is set. Returns
 * NULL when it does not exist (or on allocation failure). The pointer stays
 * valid until qw_sim_ledger_free(). Does not advance time.
 */
struct qw_sim_service *qw_sim_ledger_service(struct qw_sim_ledger *l, const char *key, bool create);

/**
 * Applies every status change due at or before `now_us` (earlier times are
 * clamped to the latest time seen), calling the change callback for each.
 * Returns the number of changes.
 */
size_t qw_sim_ledger_advance(struct qw_sim_ledger *l, int64_t now_us);

/**
 * Offers `n` batches to `svc` at `now_us` (after advancing), taken by node
 * `origin`. Unless back pressure refuses the whole list (the check runs
 * once, before any batch is queued, so one list may take the queue past
 * its limit), each batch is queued or, when its id is already known to the
 * service, counted as a duplicate and left alone; `dup` (n entries, may be
 * NULL) says which. Returns QW_OK or QW_ERR_NOMEM (batches before the
 * failing one stay queued); `*result` tells the outcome.
 */
int qw_sim_ledger_accept(struct qw_sim_ledger *l, struct qw_sim_service *svc,
                         const struct qw_sim_submission *subs, size_t n, int64_t now_us, int origin,
                         bool *dup, enum qw_sim_accept_result *result);

/**
 * Looks up `batch_id` in `svc` (NULL = unknown service) at `now_us` (after
 * advancing) and fills `view`.
 */
void qw_sim_ledger_status(struct qw_sim_ledger *l, struct qw_sim_service *svc, const char *batch_id,
                          int64_t now_us, struct qw_sim_status_view *view);

/**
 * Like qw_sim_ledger_status() but without advancing: for checking waiters
 * inside an owner's own bookkeeping right after an advance.
 */
void qw_sim_ledger_peek(const struct qw_sim_ledger *l, const struct qw_sim_service *svc,
                        const char *batch_id, struct qw_sim_status_view *view);

/**
 * Forgets every batch of every service (a node restart): queues, statuses,
 * back-pressure state. Services, their `max_queued` and `user` survive.
 * No change callbacks are made.
 */
void qw_sim_ledger_restart(struct qw_sim_ledger *l, int64_t now_us);

/**
 * Takes back every queued batch that node `origin` took (that node
 * restarted: its queue was in its memory). The service's other batches keep
 * their schedule. No change callbacks are made. Returns how many batches
 * were dropped.
 */
size_t qw_sim_ledger_drop_origin(struct qw_sim_ledger *l, int origin, int64_t now_us);

/**
 * Stops (`paused` true) or restarts the commit clock at `now_us`. While
 * paused nothing changes status. On resume every queued batch is scheduled
 * again from `now_us` in its order, as if the ledger had just received it.
 */
void qw_sim_ledger_set_paused(struct qw_sim_ledger *l, bool paused, int64_t now_us);

/** True while the commit clock is paused. */
bool qw_sim_ledger_paused(const struct qw_sim_ledger *l);

/** Time of the next scheduled status change, INT64_MAX when none or paused. */
int64_t qw_sim_ledger_next_due_us(const struct qw_sim_ledger *l);

/** Batches queued (Pending or Valid) over all services. */
size_t qw_sim_ledger_queued_total(const struct qw_sim_ledger *l);

/** The most batches ever queued at once over all services (kept over restarts). */
size_t qw_sim_ledger_max_queued_total(const struct qw_sim_ledger *l);

/** Calls `fn` for every service in creation order. */
void qw_sim_ledger_foreach_service(const struct qw_sim_ledger *l,
                                   void (*fn)(void *ctx, const struct qw_sim_service *svc),
                                   void *ctx);

#endif
