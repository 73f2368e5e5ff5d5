/* Seeded PRNG and jittered backoff; see backoff.h. */
#include "common/backoff.h"

void qw_rng_seed(struct qw_rng *rng, uint64_t seed)
{
    rng->state = seed;
}

uint64_t qw_rng_next(struct qw_rng *rng)
{
    /* splitmix64 (Steele, Lea, Flood 2014): a Weyl counter plus a mixer. */
    uint64_t z = (rng->state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

uint64_t qw_rng_below(struct qw_rng *rng, uint64_t bound)
{
    if (bound == 0)
        return 0;
    /* Reject the low 2^64 mod bound values so every residue is equally likely. */
    uint64_t threshold = (0 - bound) % bound;
    for (;;) {
        uint64_t r = qw_rng_next(rng);
        if (r >= threshold)
            return r % bound;
    }
}

int64_t qw_backoff_ceiling_ms(int attempt, int64_t base_ms, int64_t cap_ms)
{
    if (cap_ms <= 0 || base_ms <= 0)
        return 0;
    if (attempt < 0)
        attempt = 0;
    if (base_ms >= cap_ms || attempt >= 62)
        return cap_ms;
    /* base <= cap >> attempt  implies  base << attempt <= cap: no overflow. */
    if (base_ms > (cap_ms >> attempt))
        return cap_ms;
    return base_ms << attempt;
}

/* Uniform in [0, n] for n >= 0; n + 1 cannot overflow in uint64_t. */
static int64_t uniform_upto(struct qw_rng *rng, int64_t n)
{
    return (int64_t)qw_rng_below(rng, (uint64_t)n + 1);
}

int64_t qw_backoff_full_jitter(int attempt, int64_t base_ms, int64_t cap_ms, struct qw_rng *rng)
{
    return uniform_upto(rng, qw_backoff_ceiling_ms(attempt, base_ms, cap_ms));
}

int64_t qw_backoff_exponential_jitter(int attempt, int64_t base_ms, int64_t cap_ms,
                                      struct qw_rng *rng)
{
    int64_t c = qw_backoff_ceiling_ms(attempt, base_ms, cap_ms);
    int64_t half = c / 2;
    return (c - half) + uniform_upto(rng, half);
}

int64_t qw_backoff_pause_429(int consecutive, int64_t base_ms, int64_t cap_ms,
                             int64_t retry_after_ms, struct qw_rng *rng)
{
    int64_t pause = qw_backoff_exponential_jitter(consecutive, base_ms, cap_ms, rng);
    if (retry_after_ms > pause)
        pause = retry_after_ms;
    if (pause > cap_ms)
        pause = cap_ms;
    return pause < 0 ? 0 : pause;
}
