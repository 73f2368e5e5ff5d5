/*
 * Shared ledger capacity, the pure part:
 * what a batch costs, the gate the submitter asks before it starts a POST
 * (a counter for the capacity in flight, a token bucket for the rate, both
 * sized by what this worker holds, shrunk for a while after a 429), and
 * the partition arithmetic that decides how many shared partitions this
 * worker should hold given every live worker's target. No I/O, no clock
 * reads (time is passed in, monotonic ms), no logging, no locking: the
 * submitter owns its gate; capacity_lease.c is the adapter that leases
 * partitions in PostgreSQL and hands the gate a grant.
 *
 * Units: every amount is in cost units (dlt.cost: 1 per batch, or its
 * transaction count, or its payload bytes); a rate is cost units per
 * second. A limit of QW_CAPACITY_UNLIMITED means that kind is not limited.
 *
 * The seam for the dispatch: the one place that decides to start a POST
 * calls qw_capacity_try_take() and POSTs only on QW_CAP_TAKEN; whatever
 * ends the batch's stay at the ledger calls qw_capacity_give_back() with
 * the same cost. A gate that is not active (no capacity set for the
 * ledger) takes everything and changes nothing.
 */
#ifndef QW_SUBMITTER_CAPACITY_H
#define QW_SUBMITTER_CAPACITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QW_CAPACITY_UNLIMITED INT64_MAX /* limit of a kind that is not set */
#define QW_CAPACITY_BURST_MS 100        /* the bucket holds this many ms of its rate */
#define QW_CAPACITY_AIMD_FLOOR 64       /* lowest AIMD factor, in 1/1024ths (1/16) */
#define QW_CAPACITY_AIMD_HOLD_MS 1000   /* 429s closer together than this shrink once */
#define QW_CAPACITY_AIMD_STEP 51        /* additive increase, 1/1024ths per second (~5%) */

/** What one batch costs (dlt.cost). */
enum qw_capacity_cost {
    QW_COST_BATCH = 0,    /* 1 per batch */
    QW_COST_TRANSACTIONS, /* the number of transactions in its Batch */
    QW_COST_BYTES,        /* the payload's size in bytes */
};

/** Parses "batch", "transactions" or "bytes"; returns false for anything else. */
bool qw_capacity_cost_parse(const char *text, enum qw_capacity_cost *out);

/** The config spelling of `c`. */
const char *qw_capacity_cost_name(enum qw_capacity_cost c);

/**
 * The cost of one batch of `payload_bytes` bytes holding `transactions`
 * transactions (pass 0 when unknown: it counts as 1). Never below 1.
 */
int64_t qw_capacity_cost_of(enum qw_capacity_cost c, size_t payload_bytes, int64_t transactions);

/**
 * A token bucket in milli-units (exact integer arithmetic): refills at
 * `rate` units per second up to `burst_milli`. May go negative (debt)
 * when one item costs more than the whole burst.
 */
struct qw_bucket {
    int64_t rate;        /* units per second; 0 = nothing is ever allowed */
    int64_t burst_milli; /* most milli-units held */
    int64_t milli;       /* milli-units now (negative = debt) */
    int64_t at_ms;       /* time of the last refill, monotonic ms */
};

/**
 * Sets the bucket's rate (units/s, >= 0) at `now_ms`: refills at the old
 * rate first, then holds at most QW_CAPACITY_BURST_MS of the new rate (at
 * least one unit when the rate is above 0). A new bucket starts full.
 */
void qw_bucket_set_rate(struct qw_bucket *b, int64_t rate, int64_t now_ms, bool start_full);

/**
 * Takes `cost` units at `now_ms` when the bucket holds them (or is full,
 * for a cost above the burst: it goes into debt). Returns 0 when taken,
 * else the milliseconds until it could be (at least 1; INT64_MAX at rate 0).
 */
int64_t qw_bucket_take(struct qw_bucket *b, int64_t cost, int64_t now_ms);

/** What this worker holds, as the lease adapter computed it. */
struct qw_capacity_grant {
    bool active;         /* capacity is set for the ledger: the gate limits */
    int64_t in_flight;   /* units in flight allowed, or QW_CAPACITY_UNLIMITED */
    int64_t per_second;  /* units per second allowed, or QW_CAPACITY_UNLIMITED */
    int64_t deadline_ms; /* monotonic ms: the leases behind it are surely ours until
                            then; nothing may be taken after it */
};

/** The answer of qw_capacity_try_take(). */
enum qw_capacity_verdict {
    QW_CAP_TAKEN = 0,  /* start the POST; give the cost back when the batch leaves */
    QW_CAP_WAIT_SLOT,  /* the capacity in flight is used up: wait for a give-back */
    QW_CAP_WAIT_RATE,  /* the rate is used up: try again after *wait_ms */
    QW_CAP_WAIT_GRANT, /* nothing held, or the lease deadline passed: wait for a grant */
};

/** The submitter's gate. Zero-filled memory is an inactive gate. */
struct qw_capacity_gate {
    struct qw_capacity_grant grant; /* what is held now */
    int64_t used;                   /* units in flight, taken and not given back */
    struct qw_bucket bucket;        /* the rate, at the AIMD-scaled grant */
    bool bucket_set;                /* the bucket has been sized once */
    int factor;                     /* AIMD factor in 1/1024ths (1024 = all of the grant) */
    int64_t changed_ms;             /* reference of the additive increase, monotonic ms */
    int64_t shrunk_ms;              /* when a 429 last shrank the factor, monotonic ms */
};

/** Initialises an inactive gate (takes everything). */
void qw_capacity_gate_init(struct qw_capacity_gate *g);

/**
 * Applies a new grant at `now_ms`. Units in flight stay counted; a
 * smaller grant only stops new takes until enough are given back.
 */
void qw_capacity_gate_grant(struct qw_capacity_gate *g, const struct qw_capacity_grant *grant,
                            int64_t now_ms);

/**
 * Asks for `cost` units at `now_ms`. On QW_CAP_TAKEN the units count as in
 * flight (and were taken from the bucket). On QW_CAP_WAIT_RATE *wait_ms
 * says when to ask again; otherwise *wait_ms is INT64_MAX. A batch costing
 * more than the whole in-flight grant may go when nothing else is in flight.
 * An inactive gate always answers QW_CAP_TAKEN and counts nothing.
 */
enum qw_capacity_verdict qw_capacity_try_take(struct qw_capacity_gate *g, int64_t cost,
                                              int64_t now_ms, int64_t *wait_ms);

/**
 * Counts `cost` units in flight without asking (a batch found at the ledger
 * already: it occupies capacity whatever the gate says).
 */
void qw_capacity_force_take(struct qw_capacity_gate *g, int64_t cost);

/** Gives back `cost` units taken earlier (the batch left the ledger or never got in). */
void qw_capacity_give_back(struct qw_capacity_gate *g, int64_t cost);

/**
 * A 429 at `now_ms`: halves the AIMD factor (not below
 * QW_CAPACITY_AIMD_FLOOR), at most once per QW_CAPACITY_AIMD_HOLD_MS. The
 * factor grows back by QW_CAPACITY_AIMD_STEP per second without a 429.
 */
void qw_capacity_backpressure(struct qw_capacity_gate *g, int64_t now_ms);

/** The in-flight limit in force at `now_ms` (grant scaled by AIMD, >= 1 while any is held). */
int64_t qw_capacity_in_flight_limit(struct qw_capacity_gate *g, int64_t now_ms);

/** The rate in force at `now_ms`, units/s (scaled like the in-flight limit). */
int64_t qw_capacity_rate_limit(struct qw_capacity_gate *g, int64_t now_ms);

/**
 * Partitions wanted for a target: ceil(max(0, target - reserved_units) /
 * partition_units), where partition_units >= 1.
 */
int64_t qw_capacity_need(int64_t target, int64_t reserved_units, int64_t partition_units);

/**
 * Max-min fair ("water-filling") split of `n_shared` partitions over `n`
 * instances that need `needs[i]` partitions each: nobody gets more than it
 * needs, and what one does not need is split evenly among the others.
 * Partitions that do not divide evenly go to the lowest indexes first, so
 * every instance computes the same split from the same list (callers order
 * it by instance id). Writes each share into `out` (n entries); returns the
 * partitions left over (when the needs add up to less than n_shared).
 */
int64_t qw_capacity_allot(int64_t n_shared, const int64_t *needs, size_t n, int64_t *out);

/** What one worker sees in one lease step (counts of partitions). */
struct qw_capacity_view {
    int64_t partitions;      /* partitions of the current generation */
    int64_t reserved_each;   /* partitions each live instance reserves */
    int64_t live;            /* live instances, this one included */
    const int64_t *needs;    /* shared partitions each live instance needs, by instance id */
    int64_t *shares;         /* scratch of `live` entries: each instance's allotment */
    size_t me;               /* this instance's index in needs */
    int64_t held_reserved;   /* partitions this instance holds as its reservation */
    int64_t held_shared;     /* partitions this instance holds beyond it */
    int64_t free_partitions; /* partitions nobody holds now */
};

/** What to do about it. */
struct qw_capacity_plan {
    int64_t allot;            /* shared partitions this instance should hold */
    int64_t acquire_reserved; /* reservation partitions to take */
    int64_t acquire_shared;   /* shared partitions to take */
    int64_t release_shared;   /* shared partitions to give back */
};

/**
 * Plans one step: the reservation first (taken whatever the target, never
 * given back while the instance lives), then shared partitions up to the
 * allotment of qw_capacity_allot() over what the reservations leave, never
 * more than are free. Shared partitions above the allotment are released.
 */
void qw_capacity_plan(const struct qw_capacity_view *v, struct qw_capacity_plan *p);

#endif
