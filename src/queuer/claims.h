/*
 * Steps 1-3 of the worker cycle (docs/DESIGN.md §4) at a cost that follows what
 * changed, not the number of services or workers (docs/CLAIMS.md):
 *
 * - qw_claims_lease() renews this instance's lease, one row, every cycle,
 *   outside the serializable transaction. Every claim we hold is held while
 *   its own expiry or our lease is in the future, so claims are never
 *   renewed one by one.
 * - Most claims come without a claims transaction: an enqueue gives a free
 *   service to a live instance and wakes it on its own channel
 *   (QW_CLAIMS_CHANNEL_PREFIX and the incarnation) with the service and
 *   epoch, and claims are kept when their work runs out.
 * - qw_claims_cycle() runs maintenance in a READ COMMITTED transaction
 *   when another instance's lease ran out (its claims go to live
 *   instances by a hash of the service, decided per service on the locked
 *   row; each live instance takes its own part, and one not taken after
 *   handover_grace_ms is handed over by anyone, the receiver woken on its
 *   channel), then, only when there is something to do,
 *   one retried SERIALIZABLE transaction: the surplus the caller lists
 *   goes back, the caller's claims are all read (`reconcile`), and free
 *   services with work are picked up for every live instance with room,
 *   highest head priority first, by one worker at a time. The fair share
 *   is advisory and read outside the transactions.
 *
 * Nothing in a result may be acted on unless the call returned QW_OK.
 */
#ifndef QW_QUEUER_CLAIMS_H
#define QW_QUEUER_CLAIMS_H

#include "common/err.h"
#include "db/db.h"
#include "db/txn.h"
#include "shared/job.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** The channel on which every worker hears of claims changes that concern all. */
#define QW_CLAIMS_CHANNEL "queuer_claims"
/** An instance's own channel is this prefix and its incarnation (sql/claims_acquire.sql). */
#define QW_CLAIMS_CHANNEL_PREFIX "queuer_i"
/** Payload on an instance's channel: more services got work than one payload names (an
 * insert): read all our claims and fetch every held service. */
#define QW_CLAIMS_ALL "*"
/** Payload on an instance's channel: more claims were given to us than one payload names
 * (pickup, handover): read all our claims; those at a new epoch are fetched. */
#define QW_CLAIMS_NEW "+"

/**
 * Wakes the listening workers for a claims cycle with housekeeping (NOTIFY
 * on QW_CLAIMS_CHANNEL): we gave claims back, or we just joined and the
 * others' fair share shrank. Best effort (a failure is logged at debug):
 * without it they look at their next scheduled housekeeping.
 */
void qw_claims_announce(struct qw_db *db);

struct qw_claim {
    char service_id[QW_SERVICE_ID_MAX]; /* the service */
    int64_t epoch;                      /* claim_epoch after this transaction */
};

/** What one claims transaction asks for. */
struct qw_claims_params {
    const char *instance_id;   /* our claimant id */
    const char *incarnation;   /* our registration's incarnation (decimal) */
    int lease_ms;              /* expiry_1 of a new claim = now() + lease_ms */
    int hard_expiry_ms;        /* expiry_2 of a new claim = now() + hard_expiry_ms */
    int slack;                 /* claims allowed over the fair share */
    int max_claims;            /* hard cap, 0 = none */
    int max_changes;           /* at most this many claims acquired or released (each)
                                  per call or handed to one instance, and 10 times as many
                                  taken over: bounded batches */
    int handover_grace_ms;     /* a lapsed holder's claim that its receiver (by hash) has
                                  not taken this long after it became free to take is
                                  handed over by anyone; until then each takes its own */
    size_t held;               /* claims we hold before the call (the caller's count) */
    const char *release;       /* text[] literal of our claims to give back (surplus), or
                                  NULL */
    bool acquire;              /* false: no pickup (shutting down) */
    bool housekeeping;         /* read the fair share first */
    bool reconcile;            /* list every claim we hold (claims_held) */
    const char *notifications; /* reported with the lease: "delivered", "not_delivered",
                                  "off" (queuer.instances.notifications), NULL = not reported */
    int waiting_priority;      /* reported with the lease: the highest priority of our batches
                                  that waited for room at a ledger node pushing back since the
                                  last renewal, QW_PRIORITY_NONE = none */
};

/** What it did; the arrays are owned and reused across calls. */
struct qw_claims_result {
    struct qw_claim *claims;   /* reconcile: every claim held after COMMIT; otherwise the
                                  new ones */
    size_t n_claims;           /* entries in claims */
    size_t cap_claims;         /* allocated entries */
    struct qw_claim *released; /* our claims given back and not taken again (epoch unused) */
    size_t n_released;         /* entries in released */
    size_t cap_released;       /* allocated entries */
    int released_with_work;    /* of those given back, services with work (to pick up) */
    int freed;                 /* expired claims (anyone's) maintenance handed over */
    int taken;                 /* ... of those, handed to us (in claims) */
    int handed_over;           /* ... handed to other live instances */
    bool maintain_more;        /* maintenance stopped at its bound: more wait for it */
    int acquired;              /* claims pickup gave us */
    int picked;                /* claims pickup gave out in all (us included) */
    bool picker;               /* we held the pickup lock (another worker picks otherwise) */
    int share;                 /* our fair share this cycle */
    int64_t with_work;         /* services with non-final batches (estimate) */
    int64_t free_with_work;    /* of those, held by nobody, counted up to what one pickup
                                  gives out (before maintenance; set to 0 once pickup
                                  gave out what there was room for) */
    int64_t room_elsewhere;    /* claims the other live instances may take below their
                                  share, by the counts they report */
    int live;                  /* live instances */
    bool lapsed;               /* another instance with claims let its lease run out
                                  (maintenance has work; read with the share) */
    int64_t peer_lease_ms;     /* the lease call: ms until the first other live lease runs
                                  out (maintenance may have work then), -1 for none */
    int peer_waiting_priority; /* the lease call: the highest waiting_priority another live
                                  instance reported, QW_PRIORITY_NONE = none */
};

/**
 * Renews this instance's lease (`lease_ms`, `hard_expiry_ms` from now on
 * the database clock) and records `held` claims and `waiting_priority`, on
 * `db` (owned by the calling thread), in a single autocommit statement;
 * sets `out->peer_lease_ms` and `out->peer_waiting_priority`. QW_ERR_SUPERSEDED when our
 * registration is no longer the instance's (a later one took it over, or it was removed): the
 * process must stop.
 */
QW_MUST_CHECK int qw_claims_lease(struct qw_db *db, const struct qw_claims_params *p,
                                  struct qw_claims_result *out, struct qw_error *err);

/**
 * Runs a claims cycle on `db` (owned by the calling thread): maintenance
 * (skipped when the share read with housekeeping names no lapsed holder),
 * then the giving back of surplus and idle claims, each in a READ
 * COMMITTED transaction of its own (`rc_policy`), the read of all our
 * claims when `reconcile`, and, when free services with work wait, pickup
 * in the SERIALIZABLE claims transaction with the retry `policy`. On QW_OK
 * `out` describes the committed changes; on failure it is meaningless,
 * except that maintenance or a release may have committed (`out->taken` >
 * 0: read every claim next time). `stats` (may be NULL) gets the claims
 * transaction's retry counts.
 */
QW_MUST_CHECK int qw_claims_cycle(struct qw_db *db, const struct qw_txn_policy *policy,
                                  const struct qw_txn_policy *rc_policy,
                                  const struct qw_claims_params *p, struct qw_claims_result *out,
                                  struct qw_txn_stats *stats, struct qw_error *err);

/** Frees the result's storage. */
void qw_claims_result_free(struct qw_claims_result *r);

/**
 * Graceful shutdown: in one transaction marks the instance stopped (its
 * lease ends) and gives back every claim of `instance_id` (but those with
 * a batch mid-submission when `posts_abandoned`: their POST may still
 * land, and they change hands at the hard expiry), then NOTIFYs, so other
 * workers pick up its services with work at once, with a fair share that
 * no longer counts this one. Returns the number released in *released.
 */
QW_MUST_CHECK int qw_claims_release_all(struct qw_db *db, const char *instance_id,
                                        const char *incarnation, bool posts_abandoned,
                                        int *released, struct qw_error *err);

#endif
