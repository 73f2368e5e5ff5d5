/* The simulator's monotonic wall clock; see simclock.h. */
#include "simclock.h"

static int64_t base_wall_us; /* CLOCK_REALTIME at init, microseconds */
static int64_t base_mono_us; /* CLOCK_MONOTONIC at init, microseconds */

static int64_t read_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void qw_sim_clock_init(void)
{
    base_wall_us = read_us(CLOCK_REALTIME);
    base_mono_us = read_us(CLOCK_MONOTONIC);
}

int64_t qw_sim_clock_now_us(void)
{
    return base_wall_us + (read_us(CLOCK_MONOTONIC) - base_mono_us);
}

struct timespec qw_sim_clock_mono_at(int64_t at_us)
{
    int64_t mono = at_us - base_wall_us + base_mono_us;
    if (mono < 0)
        mono = 0;
    struct timespec ts = {.tv_sec = (time_t)(mono / 1000000),
                          .tv_nsec = (long)(mono % 1000000) * 1000};
    return ts;
}
