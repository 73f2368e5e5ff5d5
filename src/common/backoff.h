/*
 * Retry delays: a small seeded PRNG and the jittered exponential backoff
 * shapes used for database retries, Delayed batches and 429 pauses. Pure:
 * no clock reads, no I/O; the PRNG state belongs to the caller (one per
 * thread, never shared).
 */
#ifndef QW_COMMON_BACKOFF_H
#define QW_COMMON_BACKOFF_H

#include <stdint.h>

/**
 * PRNG state (splitmix64). Seed it with qw_rng_seed(); any 64-bit seed,
 * zero included, gives a full-period stream. Not thread-safe: one per thread.
 */
struct qw_rng {
    uint64_t state; /* splitmix64 counter; advanced by a fixed odd constant per draw */
};

/** Seeds `rng`; the same seed always yields the same sequence. */
void qw_rng_seed(struct qw_rng *rng, uint64_t seed);

/** Next 64 uniformly distributed bits. */
uint64_t qw_rng_next(struct qw_rng *rng);

/**
 * Uniform integer in [0, bound) without modulo bias (rejection sampling);
 * returns 0 when `bound` is 0.
 */
uint64_t qw_rng_below(struct qw_rng *rng, uint64_t bound);

/**
 * The exponential ceiling min(cap_ms, base_ms * 2^attempt), computed
 * without overflow for any `attempt`. Negative inputs count as 0.
 */
int64_t qw_backoff_ceiling_ms(int attempt, int64_t base_ms, int64_t cap_ms);

/**
 * "Full jitter": uniform in [0, min(cap_ms, base_ms * 2^attempt)] (both
 * ends included). Used between re-runs of a database transaction, where
 * spreading competing workers matters more than a minimum wait.
 * `attempt` counts from 0 (the first retry).
 */
int64_t qw_backoff_full_jitter(int attempt, int64_t base_ms, int64_t cap_ms, struct qw_rng *rng);

/**
 * "Exponential jitter": c * uniform[0.5, 1.0] where
 * c = min(cap_ms, base_ms * 2^attempt), i.e. an integer in [c - c/2, c].
 * Used for the per-batch Delayed backoff: the wait always grows with the
 * attempt count but workers do not retry in lock step.
 */
int64_t qw_backoff_exponential_jitter(int attempt, int64_t base_ms, int64_t cap_ms,
                                      struct qw_rng *rng);

/**
 * Pause after the `consecutive`-th (from 0) 429 answer from a ledger: the
 * exponential-jitter shape, raised to `retry_after_ms` when the ledger sent
 * Retry-After (pass 0 when it did not), and never above `cap_ms` so a
 * misbehaving server cannot park the worker for hours.
 */
int64_t qw_backoff_pause_429(int consecutive, int64_t base_ms, int64_t cap_ms,
                             int64_t retry_after_ms, struct qw_rng *rng);

#endif
