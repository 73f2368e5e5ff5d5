/*
 * A ledger node's congestion window: how many batches this worker keeps at
 * one node at once (posted and not yet known final), found without
 * configuration. Additive increase, multiplicative decrease (AIMD), with a
 * latency signal:
 *
 * - an accepted POST (202) while the node's recent latency stays near its
 *   base latency grows the window: by one per answer until the first decrease
 *   (slow start), then at most every `grow_every_ms` by one or by
 *   `grow_share` of itself, whichever is more (a ledger's round trip can be
 *   a few ms, and growing once per round trip would overrun a rate limit
 *   many times a second, while a large window must win back a decrease
 *   quickly); only while the window is what holds POSTs back (it is nearly
 *   full), so a window that is not used does not grow;
 * - a 429, and a POST without an answer, shrink it by `backoff`;
 * - an accepted POST while the recent latency (a moving average, weight
 *   1/8, so one slow answer on a busy machine is not taken for a queue)
 *   exceeds `latency_factor` x the base latency plus `latency_slack_us`
 *   (the node is queueing) shrinks it by `latency_backoff`;
 * - answers to POSTs sent before the last decrease do not shrink it again
 *   (they were sent by the window that was too large): one decrease per
 *   round trip, as TCP does;
 * - the window stays within [min, max], and under a cap the caller gives
 *   (a shared capacity's leased share).
 *
 * The base latency is the lowest latency seen, drifting up slowly towards
 * newer samples so that a node whose path got slower for good is not held
 * to an old minimum.
 *
 * Pure: no I/O, no clock reads, no logging; one owner (the submitter
 * thread) per window.
 */
#ifndef QW_SUBMITTER_WINDOW_H
#define QW_SUBMITTER_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

/** How windows behave; the same for every node of a worker. */
struct qw_window_policy {
    double initial;           /* window at start, batches, >= min */
    double min;               /* smallest window, batches, >= 1 */
    double max;               /* largest window, batches, >= min */
    int64_t grow_every_ms;    /* after slow start, it grows at most this often, ms */
    double grow_share;        /* ... by this share of itself, or by one if that is more */
    double backoff;           /* factor on a 429 or a POST without an answer, (0, 1) */
    double latency_backoff;   /* factor on a slow answer, (0, 1) */
    double latency_factor;    /* an answer slower than this x base ... */
    int64_t latency_slack_us; /* ... + this, us, is slow */
};

/** One node's window. */
struct qw_window {
    double cwnd;            /* current window, batches */
    double ssthresh;        /* slow start ends at this window, batches */
    int64_t base_us;        /* base latency, us; 0 = no sample yet */
    int64_t recent_us;      /* moving average of the latency (weight 1/8), us; 0 = none */
    uint64_t epoch;         /* decreases so far: a POST carries the epoch it started in */
    int in_flight;          /* batches at the node now (taken, not given back) */
    int64_t grown_ms;       /* when it last grew after slow start (caller's clock), ms */
    long long cuts_refused; /* decreases for a 429 */
    long long cuts_failed;  /* decreases for a POST without an answer */
    long long cuts_latency; /* decreases for a slow answer */
};

/** The defaults: start at 4, between 1 and `max`; after slow start +max(1, 5%) at most every
 * 100 ms; back off to 0.7 (429, no answer) and 0.9 (recent latency beyond 3 x base + 250 ms). */
struct qw_window_policy qw_window_policy_default(double max);

/** A fresh window at `p->initial`. */
void qw_window_init(struct qw_window *w, const struct qw_window_policy *p);

/**
 * Starts the window afresh (the node came back after an outage: what its
 * window learnt from failures says nothing about its capacity): back to
 * `p->initial` in slow start, latency forgotten; the batches counted at the
 * node stay counted, and answers to POSTs sent before do not shrink it.
 */
void qw_window_restart(struct qw_window *w, const struct qw_window_policy *p);

/** The batches the window allows at once now, under `cap` (<= 0 = no cap): >= 1. */
int qw_window_limit(const struct qw_window *w, int cap);

/**
 * The cap on the window for a batch of `priority` (`cap` as for
 * qw_window_limit()): 1 when another worker has batches of the higher
 * priority `yield_below` waiting for room at a node that pushes back, so
 * that the room goes to them (a lower-priority batch then goes at most one
 * at a time per node: slower, never stopped); else `cap`.
 */
int qw_window_yield_cap(int cap, int priority, int yield_below);

/** Whether one more batch may go to the node now, under `cap` (<= 0 = no cap). */
bool qw_window_admits(const struct qw_window *w, int cap);

/** A batch goes to the node (a POST starts); returns the epoch the POST carries. */
uint64_t qw_window_take(struct qw_window *w);

/** A batch left the node (final, refused, lost, or handed back). */
void qw_window_give_back(struct qw_window *w);

/** How a POST ended, for the window. */
enum qw_window_answer {
    QW_WINDOW_ACCEPTED = 0, /* 202 */
    QW_WINDOW_REFUSED,      /* 429 */
    QW_WINDOW_FAILED,       /* no answer: timeout, connection lost, 5xx */
};

/**
 * Adjusts the window for the answer, at `now_ms` (the caller's monotonic
 * clock), to a POST that started in `epoch`, `latency_us` after it started
 * (accepted answers only; -1 = none), under `cap` (<= 0 = no cap). Returns
 * true when the window shrank.
 */
bool qw_window_answer(struct qw_window *w, const struct qw_window_policy *p,
                      enum qw_window_answer answer, uint64_t epoch, int64_t latency_us, int cap,
                      int64_t now_ms);

#endif
