/* A ledger node's congestion window (AIMD with a latency signal); see window.h. */
#include "submitter/window.h"

#include <math.h>

#define BASE_DRIFT_SHIFT 6 /* the base latency moves 1/64 of the way to a higher sample */
#define RECENT_SHIFT 3     /* the recent latency moves 1/8 of the way to each sample */

struct qw_window_policy qw_window_policy_default(double max)
{
    if (max < 1.0)
        max = 1.0;
    return (struct qw_window_policy){
        .initial = max < 4.0 ? max : 4.0,
        .min = 1.0,
        .max = max,
        .grow_every_ms = 100,
        .grow_share = 0.05,
        .backoff = 0.7,
        .latency_backoff = 0.9,
        .latency_factor = 3.0,
        .latency_slack_us = 250000,
    };
}

void qw_window_init(struct qw_window *w, const struct qw_window_policy *p)
{
    *w = (struct qw_window){.cwnd = p->initial, .ssthresh = p->max};
}

void qw_window_restart(struct qw_window *w, const struct qw_window_policy *p)
{
    w->cwnd = p->initial;
    w->ssthresh = p->max;
    w->base_us = 0;
    w->recent_us = 0;
    w->epoch++;
}

int qw_window_limit(const struct qw_window *w, int cap)
{
    int limit = (int)floor(w->cwnd);
    if (cap > 0 && limit > cap)
        limit = cap;
    return limit < 1 ? 1 : limit;
}

int qw_window_yield_cap(int cap, int priority, int yield_below)
{
    return priority < yield_below ? 1 : cap;
}

bool qw_window_admits(const struct qw_window *w, int cap)
{
    return w->in_flight < qw_window_limit(w, cap);
}

uint64_t qw_window_take(struct qw_window *w)
{
    w->in_flight++;
    return w->epoch;
}

void qw_window_give_back(struct qw_window *w)
{
    if (w->in_flight > 0)
        w->in_flight--;
}

static void clamp(struct qw_window *w, const struct qw_window_policy *p, int cap)
{
    double hi = p->max;
    if (cap > 0 && cap < hi)
        hi = cap;
    if (hi < p->min)
        hi = p->min;
    if (w->cwnd > hi)
        w->cwnd = hi;
    if (w->cwnd < p->min)
        w->cwnd = p->min;
}

/* Shrinks by `factor` unless this POST started before the last decrease. */
static bool cut(struct qw_window *w, const struct qw_window_policy *p, double factor,
                uint64_t epoch, long long *counter, int cap)
{
    if (epoch != w->epoch)
        return false;
    w->cwnd *= factor;
    clamp(w, p, cap);
    w->ssthresh = w->cwnd;
    w->epoch++;
    (*counter)++;
    return true;
}

bool qw_window_answer(struct qw_window *w, const struct qw_window_policy *p,
                      enum qw_window_answer answer, uint64_t epoch, int64_t latency_us, int cap,
                      int64_t now_ms)
{
    switch (answer) {
    case QW_WINDOW_REFUSED:
        return cut(w, p, p->backoff, epoch, &w->cuts_refused, cap);
    case QW_WINDOW_FAILED:
        return cut(w, p, p->backoff, epoch, &w->cuts_failed, cap);
    case QW_WINDOW_ACCEPTED:
        break;
    }
    if (latency_us >= 0) {
        int64_t sample = latency_us > 0 ? latency_us : 1;
        if (w->base_us == 0 || sample < w->base_us)
            w->base_us = sample;
        else
            w->base_us += (sample - w->base_us) >> BASE_DRIFT_SHIFT;
        if (w->recent_us == 0)
            w->recent_us = sample;
        else
            w->recent_us += (sample - w->recent_us) / (1 << RECENT_SHIFT);
        double slow = p->latency_factor * (double)w->base_us + (double)p->latency_slack_us;
        if ((double)w->recent_us > slow) /* never grows while slow */
            return cut(w, p, p->latency_backoff, epoch, &w->cuts_latency, cap);
    }
    /* Grow only a window that holds POSTs back: the answered batch is still
     * counted in in_flight, so "nearly full" is in_flight >= limit - 1. */
    if (w->in_flight + 1 < qw_window_limit(w, cap))
        return false;
    if (w->cwnd < w->ssthresh) {
        w->cwnd += 1.0;
    } else if (now_ms - w->grown_ms >= p->grow_every_ms) {
        double step = w->cwnd * p->grow_share;
        w->cwnd += step > 1.0 ? step : 1.0;
        w->grown_ms = now_ms;
    }
    clamp(w, p, cap);
    return false;
}
