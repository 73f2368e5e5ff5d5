/* Monotonic time for local deadlines. Database time (now()) rules leases. */
#ifndef QW_COMMON_CLOCK_H
#define QW_COMMON_CLOCK_H

#include <stdint.h>

/** Milliseconds on CLOCK_MONOTONIC; only differences are meaningful. */
int64_t qw_clock_mono_ms(void);

/** Microseconds on CLOCK_MONOTONIC. */
int64_t qw_clock_mono_us(void);

/** Milliseconds since the Unix epoch on CLOCK_REALTIME (for display only). */
int64_t qw_clock_wall_ms(void);

/** Sleeps `ms` milliseconds, resuming after signals. */
void qw_clock_sleep_ms(int64_t ms);

#endif
