/* Clock helpers; see clock.h. */
#include "common/clock.h"

#include <errno.h>
#include <time.h>

int64_t qw_clock_mono_us(void)
{
    /* CLOCK_BOOTTIME, not CLOCK_MONOTONIC: it keeps counting while the
     * machine is suspended, so a lease deadline ("surely ours until") taken
     * before a suspend has passed after it, as the database's clock says. */
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t qw_clock_mono_ms(void)
{
    return qw_clock_mono_us() / 1000;
}

int64_t qw_clock_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void qw_clock_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec req = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&req, &req) != 0 && errno == EINTR) {
    }
}
