/* The node's rate of accepted batches; see capacity.h. */
#include "capacity.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

void qw_sim_rate_init(struct qw_sim_rate *r, int64_t rate, int64_t burst, int64_t now_us)
{
    memset(r, 0, sizeof(*r));
    r->rate = rate > 0 ? rate : 0;
    if (burst <= 0)
        burst = r->rate / 10;
    if (burst < 1)
        burst = 1;
    r->burst_milli = burst * 1000;
    r->milli = r->burst_milli;
    r->at_us = now_us;
}

static void refill(struct qw_sim_rate *r, int64_t now_us)
{
    if (now_us <= r->at_us)
        return;
    /* batches/s * us / 1000 = milli-batches; keep the remainder of the time */
    int64_t elapsed = now_us - r->at_us;
    if (elapsed >= (r->burst_milli / r->rate + 1) * 1000) {
        /* long enough to fill it whatever it held (and no overflow below) */
        r->milli = r->burst_milli;
        r->at_us = now_us;
        return;
    }
    int64_t add = elapsed * r->rate / 1000;
    if (add <= 0)
        return;
    r->at_us += add * 1000 / r->rate;
    r->milli = r->milli + add > r->burst_milli ? r->burst_milli : r->milli + add;
    if (r->milli == r->burst_milli)
        r->at_us = now_us;
}

bool qw_sim_rate_take(struct qw_sim_rate *r, int64_t n, int64_t now_us)
{
    if (r->rate <= 0)
        return true;
    refill(r, now_us);
    if (r->milli < n * 1000)
        return false;
    r->milli -= n * 1000;
    return true;
}

void qw_sim_rate_refund(struct qw_sim_rate *r, int64_t n)
{
    if (r->rate <= 0)
        return;
    r->milli = r->milli + n * 1000 > r->burst_milli ? r->burst_milli : r->milli + n * 1000;
}

static bool whole(const char *text, size_t len, int64_t *out)
{
    if (len == 0 || len > 12)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)text[i]))
            return false;
        v = v * 10 + (text[i] - '0');
    }
    *out = v;
    return v >= 1;
}

bool qw_sim_rate_parse(const char *text, int64_t *rate, int64_t *burst)
{
    if (!text)
        return false;
    const char *colon = strchr(text, ':');
    *burst = 0;
    if (!colon)
        return whole(text, strlen(text), rate);
    return whole(text, (size_t)(colon - text), rate) && whole(colon + 1, strlen(colon + 1), burst);
}
