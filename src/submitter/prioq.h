/*
 * The submitter's ready queue: jobs whose POST is due and that wait for
 * ledger capacity (a free channel of an available node, the end of a 429
 * pause, the shared capacity). Priority with aging, and round-robin among
 * services of equal priority. Pure: no I/O, no clock reads (time is passed
 * in), no logging.
 *
 * Order. Every entry has a priority (its batch's, higher first) and the
 * moment it entered the queue. While it waits it gains one priority step
 * per `aging_ms`: its rank is priority * aging_ms + waited_ms, so a service
 * that has waited N * aging_ms ranks with a fresh one of priority p + N and
 * low priority cannot starve. The next entry is the one of highest rank;
 * among equal ranks the one that has waited longest, then the one pushed
 * first. Entries of one priority leave in the order they came: a service
 * whose batch just ended and whose next batch enters now goes behind every
 * service of its priority that was already waiting, which is round-robin
 * among the ready services of equal priority (a service has at most one
 * batch in the queue).
 *
 * Structure: one FIFO per distinct priority (an array of levels sorted by
 * priority); a level's head is its oldest entry and so its highest rank,
 * so choosing compares the heads only: O(levels). Entries are intrusive
 * (struct qw_prioq_item inside the caller's object); the queue never owns
 * them. Not thread-safe: one owner (the submitter thread).
 */
#ifndef QW_SUBMITTER_PRIOQ_H
#define QW_SUBMITTER_PRIOQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** An entry, embedded in the caller's object. */
struct qw_prioq_item {
    struct qw_prioq_item *prev; /* toward its level's head */
    struct qw_prioq_item *next; /* toward its level's tail */
    int priority;               /* base priority, higher first */
    int64_t since_ms;           /* when it entered the queue (caller's clock), ms */
    uint64_t seq;               /* push order, the last tie-break */
    bool queued;                /* linked into a queue */
};

/** The entries of one priority, oldest first. */
struct qw_prioq_level {
    int priority;               /* of every entry here */
    struct qw_prioq_item *head; /* oldest */
    struct qw_prioq_item *tail; /* newest */
    size_t n;                   /* entries */
};

struct qw_prioq {
    struct qw_prioq_level *levels; /* sorted by priority, highest first; none empty */
    size_t n_levels;               /* levels in use */
    size_t cap_levels;             /* levels allocated */
    size_t n;                      /* entries in all levels */
    int64_t aging_ms;              /* waiting time worth one priority step, ms, >= 1 */
    uint64_t seq;                  /* next push number */
};

/** An empty queue; `aging_ms` < 1 counts as 1. Allocates nothing. */
void qw_prioq_init(struct qw_prioq *q, int64_t aging_ms);

/** Frees the level array (not the entries, which are the caller's). */
void qw_prioq_free(struct qw_prioq *q);

/**
 * Appends `it` (not queued) at the tail of its priority, entering at
 * `now_ms`. Returns 0, or -1 when a new level cannot be allocated (`it`
 * is then not queued).
 */
int qw_prioq_push(struct qw_prioq *q, struct qw_prioq_item *it, int priority, int64_t now_ms);

/**
 * Puts back an entry just taken with qw_prioq_pop() at the head of its
 * level, keeping its priority, entry time and turn (its start failed).
 * Returns 0 or -1 as qw_prioq_push().
 */
int qw_prioq_push_again(struct qw_prioq *q, struct qw_prioq_item *it);

/** The entry qw_prioq_pop() would take at `now_ms`, or NULL when empty. */
struct qw_prioq_item *qw_prioq_peek(const struct qw_prioq *q, int64_t now_ms);

/** Takes the next entry at `now_ms` (see the order above), or NULL when empty. */
struct qw_prioq_item *qw_prioq_pop(struct qw_prioq *q, int64_t now_ms);

/** Takes out `it` wherever it is; a no-op when it is not queued. */
void qw_prioq_remove(struct qw_prioq *q, struct qw_prioq_item *it);

/** Number of entries. */
size_t qw_prioq_len(const struct qw_prioq *q);

/**
 * Iteration over every entry (levels by priority, each oldest first),
 * for sweeps: qw_prioq_first(), then qw_prioq_next() until NULL. The
 * current entry may be removed if the next one was taken first.
 */
struct qw_prioq_item *qw_prioq_first(const struct qw_prioq *q);
struct qw_prioq_item *qw_prioq_next(const struct qw_prioq *q, const struct qw_prioq_item *it);

/**
 * The rank of an entry of `priority` that has waited `waited_ms` (>= 0)
 * with `aging_ms` per step: priority * aging_ms + waited_ms. Higher
 * leaves first.
 */
int64_t qw_prioq_rank(int priority, int64_t waited_ms, int64_t aging_ms);

#endif
