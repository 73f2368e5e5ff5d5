/*
 * Shared ledger capacity, the lease adapter: one step reads the ledger's
 * capacity (sql/capacity_config.sql), every live worker's target and the
 * partitions, plans with capacity.h (pure), and in a transaction of its
 * own (READ COMMITTED, fenced row by row; not the claims transaction)
 * publishes this worker's target, renews its partitions, gives back what
 * the plan says, and takes free partitions; then hands the submitter's
 * gate the grant that results.
 *
 * Why READ COMMITTED is enough: the invariant "the workers together never
 * use more than the capacity" rests on each partition row having at most
 * one holder with a live lease, and on a worker using a partition only
 * while its own conservative clock says the lease is live. The first is
 * enforced row by row whatever the isolation level: a take updates only
 * rows that are free at their newest version (the UPDATE re-checks its
 * WHERE after waiting for a concurrent writer, and the candidate rows are
 * locked FOR UPDATE SKIP LOCKED), renewals and releases touch only rows
 * whose holder is this instance, and the primary key makes a partition one
 * row. The reads the plan is made from (targets, free counts) are advisory:
 * a stale one makes a worker ask for too much or too little for one step,
 * never hold what another holds. SERIALIZABLE would add retries between
 * workers, not safety. See docs/OPERATIONS.md for the interleavings.
 *
 * Giving capacity back is done in the right order: the gate is shrunk
 * first (before the transaction), and a partition is released only once
 * the gate's units in flight fit in what is kept; otherwise it is kept
 * (and not used for new POSTs) until a later step. A partition is used
 * only after the COMMIT that took it.
 *
 * Thread-safety: a lease belongs to the thread that owns the gate and the
 * connection (the submitter).
 */
#ifndef QW_SUBMITTER_CAPACITY_LEASE_H
#define QW_SUBMITTER_CAPACITY_LEASE_H

#include "common/err.h"
#include "db/db.h"
#include "db/txn.h"
#include "submitter/capacity.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** One partition this worker holds. */
struct qw_capacity_part {
    int64_t no;         /* partition_no */
    bool reserved;      /* held as this instance's reservation */
    int64_t in_flight;  /* units in flight, QW_CAPACITY_UNLIMITED when not limited */
    int64_t per_second; /* units a second, QW_CAPACITY_UNLIMITED when not limited */
};

/** The adapter's state across steps. Zero-filled + qw_capacity_lease_init(). */
struct qw_capacity_lease {
    const char *ledger;            /* dlt.ledger; borrowed */
    const char *instance_id;       /* this worker; borrowed */
    enum qw_capacity_cost cost;    /* dlt.cost */
    int lease_ms;                  /* partition lease (worker.lease_ms) */
    bool set;                      /* capacity was set at the last step */
    int64_t generation;            /* its generation */
    int64_t partitions;            /* partitions of that generation */
    int64_t partition_size;        /* units per partition */
    int64_t reserved_units;        /* reserved per instance, units */
    struct qw_capacity_part *held; /* partitions held after the last step */
    size_t n_held;                 /* entries in held */
    size_t cap_held;               /* allocated entries of held */
    int64_t live;                  /* live workers seen at the last step */
    int64_t allot;                 /* shared partitions the split gave this worker */
    int64_t free_partitions;       /* partitions nobody held after the last step */
    int released;                  /* partitions given back at the last step */
    int acquired;                  /* partitions taken at the last step */
    bool deferred;                 /* a release waits until the gate drains */
};

/** Sets up `l` for `ledger` and `instance_id` (both borrowed, must outlive it). */
void qw_capacity_lease_init(struct qw_capacity_lease *l, const char *ledger,
                            const char *instance_id, enum qw_capacity_cost cost, int lease_ms);

/** Frees the lease's storage. */
void qw_capacity_lease_free(struct qw_capacity_lease *l);

/**
 * One step on `db` (the caller's connection) with the retry `policy`:
 * `target` is this worker's waiting and in-flight cost now. Applies the
 * resulting grant to `gate` (inactive when no capacity is set). On failure
 * the gate keeps its grant, shrunk if something was to be given back, and
 * its old deadline, so nothing is used beyond a lease that was not renewed.
 * Returns QW_OK or the failure (detail in `err`).
 */
QW_MUST_CHECK int qw_capacity_lease_step(struct qw_capacity_lease *l, struct qw_db *db,
                                         const struct qw_txn_policy *policy, int64_t target,
                                         struct qw_capacity_gate *gate, struct qw_error *err);

/** Held totals of the last step, for metrics: units in flight and per second, partitions. */
void qw_capacity_lease_totals(const struct qw_capacity_lease *l, int64_t *in_flight,
                              int64_t *per_second, int64_t *partitions);

/**
 * A stopping worker gives back every partition it holds and stops counting
 * as live (one statement). *released (may be NULL) gets how many.
 */
QW_MUST_CHECK int qw_capacity_lease_release_all(struct qw_db *db, const char *instance_id,
                                                int *released, struct qw_error *err);

#endif
