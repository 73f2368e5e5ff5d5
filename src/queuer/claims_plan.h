/*
 * The claims decisions of one worker, as pure functions (no I/O, no clock:
 * times are passed in): what a claims cycle does (renew the lease, read the
 * fair share, read every claim we hold, give surplus back), whether it
 * needs a claims transaction at all, and which held services are surplus
 * over the fair share. The queuer thread (queuer.c, claims.c) runs what
 * they decide; docs/CLAIMS.md argues why each rule is safe.
 */
#ifndef QW_WORKER_CLAIMS_PLAN_H
#define QW_WORKER_CLAIMS_PLAN_H

#include "common/err.h"
#include "common/batch.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** What the queuer thread knows when a claims cycle starts. */
struct qw_claims_state {
    int64_t now_ms;             /* monotonic ms: the cycle starts */
    int64_t lease_deadline_ms;  /* monotonic ms our claims are surely held until, 0 = none
                                   yet (the first cycle) */
    int64_t lease_renewed_ms;   /* monotonic ms our lease was last renewed (as sent) */
    int64_t settle_until_ms;    /* monotonic ms before which no surplus goes back */
    int cycle_ms;               /* worker.cycle_ms */
    bool listen;                /* worker.listen: notifications tell us of new claims */
    bool woken;                 /* a notification (or more claims work) asked for this cycle */
    bool periodic_housekeeping; /* the cycles counted since the last housekeeping say so */
    bool reconcile_asked;       /* a lost connection, a malformed or "read all" notification */
    int cycles_since_reconcile; /* claims cycles since all our claims were read, this one
                                   included */
    size_t held;                /* claims we hold */
    size_t reported_held;       /* claims our last lease renewal reported */
    int slack;                  /* worker.claim_slack */
    int share;                  /* the last fair share read, 0 = none yet */
    int64_t free_with_work;     /* free services with work at the last look, 0 = none */
};

/** What the cycle does, in this order: renew, (share), claims, drain. */
struct qw_claims_plan {
    bool renew;        /* renew our lease before anything else */
    bool reconcile;    /* read every claim we hold */
    bool housekeeping; /* read the fair share (and with it whether a lease lapsed) */
    bool may_release;  /* surplus claims with no job out may go back */
};

/** A polling worker reads all its claims every cycle, a listening one this often. */
#define QW_CLAIMS_RECONCILE_EVERY 60

/**
 * Plans a claims cycle from `s`:
 * - reconcile when no claim was ever read, when our lease may have lapsed
 *   (others may have taken claims of ours), when asked, every
 *   QW_CLAIMS_RECONCILE_EVERY cycles, and every cycle without LISTEN;
 * - housekeeping when woken or due, while no share is known, and while
 *   free services with work wait;
 * - renew when the lease may have lapsed, half a cycle after the last
 *   renewal, or when our claim count moved by more than the slack since it
 *   was last reported (the others' fair share reads the reported count);
 * - release surplus after the settle time, unless the map of our claims
 *   may be wrong (the first cycle, a lease that may have lapsed, a read
 *   asked for); a routine read of every claim does not hold it back, or a
 *   polling worker (which reads them every cycle) would never give any
 *   back.
 */
void qw_claims_plan_cycle(const struct qw_claims_state *s, struct qw_claims_plan *out);

/** Whether the claim count moved by more than the slack since it was reported. */
bool qw_claims_count_unreported(size_t held, size_t reported_held, int slack);

/**
 * Whether a claims cycle needs the SERIALIZABLE claims transaction: only to
 * pick up free services with work (`acquire` and `free_with_work` > 0).
 * Work that comes to claims we keep, services an enqueue gives us, the
 * read of all our claims and the giving back of claims need none.
 */
bool qw_claims_txn_due(bool acquire, int64_t free_with_work);

/**
 * Whether a pickup runs again at once: we held the pickup lock, it gave out
 * at least a full step (`step` claims) and some of them went to other
 * instances. A worker that found nobody else live waits for its next cycle.
 */
bool qw_claims_pickup_again(bool picker, int picked, int acquired, int step);

/**
 * Whether idle claims (services without work) go back: only when free
 * services with work wait, more than the other live instances have room
 * for below their share (`room_elsewhere`), and we hold our share already
 * (`held` >= `share` > 0), so that pickup can give the rest to us. Claims
 * are kept otherwise.
 */
bool qw_claims_release_idle_due(size_t held, int share, int64_t free_with_work,
                                int64_t room_elsewhere);

/** One held service as the surplus choice sees it. */
struct qw_claims_held {
    const char *service_id; /* borrowed */
    bool busy;              /* a job of it is with the submitter */
    bool draining;          /* out: surplus over the fair share */
};

/**
 * Marks the surplus over the fair `share` among the `n` held services: the
 * ones with the highest service ids (a stable choice, so repeated cycles
 * drain the same services), `n - share` of them. Sorts `held` by service id,
 * highest first. Returns how many of the surplus have no job out (those
 * can go back at once; the others when their job comes back).
 */
size_t qw_claims_mark_surplus(struct qw_claims_held *held, size_t n, size_t share);

/** One item of a payload on an instance's channel. */
struct qw_wakeup_item {
    char service[QW_SERVICE_ID_MAX]; /* the service given work or given to us */
    int64_t epoch;                   /* the claim's epoch */
    char batch[QW_BATCH_ID_LEN + 1]; /* the one batch a lone enqueue gave it; "" when the item
                                        names none */
};

/**
 * Parses one item of a payload on an instance's channel,
 * "<service>:<epoch>" or "<service>:<epoch>/<batch_id>" (the latter from a
 * lone enqueue of a held service; items are separated by spaces; *next is
 * set past this one, NULL after the last). Returns QW_OK with the item in
 * `out`, QW_ERR_INVALID for a malformed item (a service id too long for
 * the buffer, an epoch that is not a number, a batch id that is not 128
 * lower-case hex characters). Pure.
 */
QW_MUST_CHECK int qw_claims_parse_item(const char *payload, struct qw_wakeup_item *out,
                                       const char **next);

#endif
