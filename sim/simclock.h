/*
 * The simulator's clock: wall-clock microseconds that never go backwards
 * (the wall time at start plus CLOCK_MONOTONIC elapsed since). Ledger
 * times, status timestamps and event-log "t" all come from it.
 */
#ifndef QW_SIM_SIMCLOCK_H
#define QW_SIM_SIMCLOCK_H

#include <stdint.h>
#include <time.h>

/** Fixes the epoch; call once before any thread reads the clock. */
void qw_sim_clock_init(void);

/** Current time, microseconds since the Unix epoch, monotonic. */
int64_t qw_sim_clock_now_us(void);

/** The CLOCK_MONOTONIC instant at which qw_sim_clock_now_us() reaches `at_us`. */
struct timespec qw_sim_clock_mono_at(int64_t at_us);

#endif
