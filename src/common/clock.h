/*
 * Monotonic time for local deadlines. Database time (now()) rules leases;
 * the local clock only bounds "our lease is surely still valid until", so
 * it must never run slower than the database's: it is CLOCK_BOOTTIME,
 * which (unlike CLOCK_MONOTONIC) keeps counting while the machine sleeps.
 */
#ifndef QW_COMMON_CLOCK_H
#define QW_COMMON_CLOCK_H

#include <stdint.h>

/** Milliseconds on CLOCK_BOOTTIME; only differences are meaningful. */
int64_t qw_clock_mono_ms(void);

/** Microseconds on CLOCK_BOOTTIME. */
int64_t qw_clock_mono_us(void);

/** Milliseconds since the Unix epoch on CLOCK_REALTIME (for display only). */
int64_t qw_clock_wall_ms(void);

/** Sleeps `ms` milliseconds, resuming after signals. */
void qw_clock_sleep_ms(int64_t ms);

#endif
