/*
 * The node's own capacity, over all services: a rate of batches
 * accepted per second as a token bucket. A Splinter node has a finite rate;
 * above it the simulator answers 429 with an empty body, as for a full
 * queue. Pure: time is passed in (microseconds), no locking (the ledger's
 * owner serialises calls).
 */
#ifndef QW_SIM_CAPACITY_H
#define QW_SIM_CAPACITY_H

#include <stdbool.h>
#include <stdint.h>

/** A token bucket of batches, in milli-batches so refills are exact. */
struct qw_sim_rate {
    int64_t rate;        /* batches per second, 0 = no limit */
    int64_t burst_milli; /* most milli-batches held */
    int64_t milli;       /* milli-batches now */
    int64_t at_us;       /* last refill, microseconds */
};

/**
 * Sets up `r` full for `rate` batches per second holding at most `burst`
 * batches (0 = a tenth of a second's worth, at least 1).
 */
void qw_sim_rate_init(struct qw_sim_rate *r, int64_t rate, int64_t burst, int64_t now_us);

/**
 * Takes `n` batches at `now_us` when the bucket holds them; returns false
 * (nothing taken) when it does not. Always true without a limit.
 */
bool qw_sim_rate_take(struct qw_sim_rate *r, int64_t n, int64_t now_us);

/** Puts `n` batches back (a submission refused for another reason); capped at the burst. */
void qw_sim_rate_refund(struct qw_sim_rate *r, int64_t n);

/**
 * Parses "R" or "R:BURST" (whole numbers, R >= 1, BURST >= 1). Returns
 * false on anything else.
 */
bool qw_sim_rate_parse(const char *text, int64_t *rate, int64_t *burst);

#endif
