/*
 * Steps 1-3 of the worker cycle (DESIGN §3) at a cost that follows what
 * changed, not the number of services (docs/CLAIMS.md):
 *
 * - qw_claims_lease() renews this instance's lease, one row, every cycle,
 *   outside the serializable transaction. Every claim we hold is held while
 *   its own expiry or our lease is in the future, so claims are never
 *   renewed one by one.
 * - qw_claims_cycle() runs maintenance in a READ COMMITTED transaction
 *   (take over the claims of instances whose lease ran out, decided per
 *   service on the locked row: those with work go straight to a live
 *   instance, the others are freed; the receivers are woken with a NOTIFY
 *   QW_CLAIMS_HANDOVER and read their claims again), then one retried
 *   SERIALIZABLE transaction: release of our idle claims and of the
 *   surplus the caller lists, and new claims up to the fair share
 *   (highest head priority first, one priority at a time from a random
 *   place within it: migration 0013), each step bounded per call. The fair share is advisory and
 * read just before, outside the transactions. It reads every claim we hold only when asked to
 * (`reconcile`: at start, after our lease may have lapsed, after a handover); otherwise the result
 * lists what changed and the caller keeps its own set.
 *
 * Nothing in a result may be acted on unless the call returned QW_OK.
 */
#ifndef QW_QUEUER_CLAIMS_H
#define QW_QUEUER_CLAIMS_H

#include "common/backoff.h"
#include "common/err.h"
#include "db/db.h"
#include "db/txn.h"
#include "shared/job.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** NOTIFY payload on queuer_work: claims were handed over, read yours again. */
#define QW_CLAIMS_HANDOVER "handover"

/**
 * Wakes the listening workers for a claims cycle with housekeeping (NOTIFY
 * queuer_work, 'claims'): we gave claims back, or we just joined and the
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
    const char *instance_id; /* our claimant id */
    int lease_ms;            /* expiry_1 of a new claim = now() + lease_ms */
    int hard_expiry_ms;      /* expiry_2 of a new claim = now() + hard_expiry_ms */
    int slack;               /* claims allowed over the fair share */
    int max_claims;          /* hard cap, 0 = none */
    int max_changes;         /* at most this many claims acquired or released (each)
                                per call or handed to one instance, and 10 times as many
                                taken over: bounded batches */
    size_t held;             /* claims we hold before the call (the caller's count) */
    struct qw_rng *rng;      /* where claiming starts (random, new on every attempt, so
                                workers and retries read different ranges); the
                                caller's, used by this thread only */
    const char *release;     /* text[] literal of our claims to give back (surplus), or
                                NULL */
    bool acquire;            /* false: no new claims (shutting down) */
    bool housekeeping;       /* also recompute the fair share and give back idle claims */
    bool reconcile;          /* list every claim we hold (claims_held) */
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
    int freed;                 /* expired claims (anyone's) maintenance freed or handed over */
    int taken;                 /* ... of those, handed to us (in claims) */
    int handed_over;           /* ... handed to other live instances */
    int acquired;              /* new claims */
    int share;                 /* our fair share this cycle */
    int64_t with_work;         /* services with non-final batches (estimate) */
    int64_t free_with_work;    /* of those, held by nobody (before maintenance; set to 0
                                  when claiming found fewer than it asked for) */
    int live;                  /* live instances */
    bool lapsed;               /* another instance with claims let its lease run out
                                  (maintenance has work; read with the share) */
    int64_t peer_lease_ms;     /* the lease call: ms until the first other live lease runs
                                  out (maintenance may have work then), -1 for none */
};

/**
 * Renews this instance's lease (`lease_ms`, `hard_expiry_ms` from now on
 * the database clock) and records `held` claims, on `db` (owned by the
 * calling thread), in a single autocommit statement; sets
 * `out->peer_lease_ms`. QW_ERR_DB when the instance is not registered.
 */
int qw_claims_lease(struct qw_db *db, const struct qw_claims_params *p,
                    struct qw_claims_result *out, struct qw_error *err);

/**
 * Runs maintenance in a READ COMMITTED transaction of its own
 * (`maintain_policy`; skipped when the share read with housekeeping names
 * no lapsed holder), then the claims transaction with the retry `policy`,
 * on `db` (owned by the calling thread). On QW_OK `out` describes the
 * committed changes; on failure it is meaningless, except that
 * maintenance may have committed and handed us claims (`out->taken` > 0:
 * read every claim next time). `stats` (may be NULL) gets the claims
 * transaction's retry counts.
 */
int qw_claims_cycle(struct qw_db *db, const struct qw_txn_policy *policy,
                    const struct qw_txn_policy *maintain_policy, const struct qw_claims_params *p,
                    struct qw_claims_result *out, struct qw_txn_stats *stats, struct qw_error *err);

/** Frees the result's storage. */
void qw_claims_result_free(struct qw_claims_result *r);

/**
 * Graceful shutdown: in one transaction marks the instance stopped and
 * gives back every claim of `instance_id`, then NOTIFYs, so other workers
 * take over at once with a fair share that no longer counts this one.
 * Returns the number released in *released.
 */
int qw_claims_release_all(struct qw_db *db, const char *instance_id, int *released,
                          struct qw_error *err);

#endif
