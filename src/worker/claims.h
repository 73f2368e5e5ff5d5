/*
 * Steps 1-3 of the worker cycle (DESIGN §3) as one retried SERIALIZABLE
 * transaction: maintenance (free expired claims, decided per service),
 * release of idle claims and of claims beyond the fair share, renewal of
 * our claims (those past half their lease, so claim rows are written
 * rarely), and new claims up to the fair share. The fair share itself is
 * advisory and read just before, outside the transaction, so the
 * transaction's reads stay narrow and conflicts between workers rare. The result is the set
 * of claims this instance holds after COMMIT, with their epochs; nothing
 * in it may be acted on unless qw_claims_cycle() returned QW_OK.
 */
#ifndef QW_WORKER_CLAIMS_H
#define QW_WORKER_CLAIMS_H

#include "common/err.h"
#include "db/db.h"
#include "db/txn.h"
#include "worker/job.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct qw_claim {
    char service_id[QW_SERVICE_ID_MAX]; /* the service */
    int64_t epoch;                      /* claim_epoch after this transaction */
};

/** What one claims transaction asks for. */
struct qw_claims_params {
    const char *instance_id; /* our claimant id */
    int lease_ms;            /* expiry_1 = now() + lease_ms */
    int hard_expiry_ms;      /* expiry_2 = now() + hard_expiry_ms */
    int liveness_ms;         /* instances with a heartbeat this recent count as live */
    int slack;               /* claims allowed over the fair share */
    int max_claims;          /* hard cap, 0 = none */
    bool acquire;            /* false: renew and release only (shutting down) */
    bool housekeeping;       /* also recompute the fair share and give back idle and
                                surplus claims; the scans behind them cost O(services),
                                so the caller asks for them every few cycles, not each */
};

/** What it did; `held` is owned and reused across calls. */
struct qw_claims_result {
    struct qw_claim *held;  /* claims held after COMMIT */
    size_t n_held;          /* entries in held */
    size_t cap_held;        /* allocated entries */
    int freed;              /* expired claims (anyone's) freed by maintenance */
    int released;           /* our idle or surplus claims given back */
    int acquired;           /* new claims */
    int share;              /* our fair share this cycle */
    int64_t with_work;      /* services with non-final batches */
    int64_t free_with_work; /* of those, held by nobody (before maintenance) */
    int live;               /* live instances */
    int64_t lease_left_ms;  /* shortest lease left among held claims, database clock */
};

/**
 * Runs the claims transaction on `db` (owned by the calling thread) with
 * the retry `policy`. On QW_OK `out` describes the committed state; on
 * failure it is meaningless. `stats` (may be NULL) gets the retry counts.
 */
int qw_claims_cycle(struct qw_db *db, const struct qw_txn_policy *policy,
                    const struct qw_claims_params *p, struct qw_claims_result *out,
                    struct qw_txn_stats *stats, struct qw_error *err);

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
