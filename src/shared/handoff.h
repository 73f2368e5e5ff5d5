/*
 * A bounded, closable FIFO of pointers between two threads: the queuer
 * hands chosen batches to the submitter through one, and the same type can
 * carry results back (size it so the producer never needs to block).
 *
 * DESIGN
 *  Threads: any number of producers and consumers; in queuer the queuer
 *  thread pushes and the submitter thread pops. push() never blocks: a full
 *  queue answers QW_ERR_BACKPRESSURE at once, so the queuer keeps its
 *  database cycle running and simply offers the batch again later. pop()
 *  waits on a condition variable up to a timeout.
 *  Lock order: one mutex per queue, held only for O(1) work (and one
 *  non-blocking eventfd read or write); nothing else is locked or called
 *  under it, so it cannot take part in a lock cycle.
 *  Poll integration: qw_handoff_fd() is an eventfd that is readable exactly
 *  while the queue holds items or is closed, so a consumer that also waits
 *  on sockets (curl multi) polls it alongside them and then drains with
 *  pop(timeout 0). Consumers never read the fd themselves.
 *  Shutdown: close() stops further pushes (QW_ERR_SHUTDOWN) and wakes every
 *  waiter; pops drain the items still queued and then answer
 *  QW_ERR_SHUTDOWN. destroy() runs only after all users have stopped and
 *  hands leftover items to a caller-supplied free function.
 *  Ownership: a pushed item belongs to the queue until popped; a pop
 *  transfers it to the caller. A refused push leaves it with the caller.
 */
#ifndef QW_SHARED_HANDOFF_H
#define QW_SHARED_HANDOFF_H

#include "common/err.h"

#include <stddef.h>

struct qw_handoff;

/**
 * Creates a queue holding at most `capacity` (>= 1) items. On failure *out
 * is NULL and `err` says why: QW_ERR_INVALID (capacity 0), QW_ERR_NOMEM,
 * or QW_ERR_IO (eventfd or pthread setup failed).
 */
QW_MUST_CHECK int qw_handoff_create(struct qw_handoff **out, size_t capacity, struct qw_error *err);

/**
 * Frees the queue. No thread may use it any more. Items still queued are
 * passed to `free_item` (NULL: they are dropped, i.e. the caller owns them
 * elsewhere). NULL `h` is ignored.
 */
void qw_handoff_destroy(struct qw_handoff *h, void (*free_item)(void *item));

/**
 * Appends `item` (any pointer, NULL included) without blocking.
 * Returns QW_OK (the queue now owns the item), QW_ERR_BACKPRESSURE when
 * full, or QW_ERR_SHUTDOWN after close(); in both failure cases the caller
 * keeps the item. Thread-safe.
 */
QW_MUST_CHECK int qw_handoff_push(struct qw_handoff *h, void *item);

/**
 * Removes the oldest item into *item, waiting up to `timeout_ms` for one
 * (0: do not wait; negative: wait until an item arrives or close()).
 * Returns QW_OK (the caller now owns *item), QW_ERR_TIMEOUT when nothing
 * arrived in time, or QW_ERR_SHUTDOWN when the queue is closed and empty.
 * Thread-safe.
 */
QW_MUST_CHECK int qw_handoff_pop(struct qw_handoff *h, int timeout_ms, void **item);

/**
 * Closes the queue: later pushes fail with QW_ERR_SHUTDOWN, waiting pops
 * wake up, and the fd becomes readable. Idempotent; thread-safe.
 */
void qw_handoff_close(struct qw_handoff *h);

/**
 * A file descriptor (owned by the queue; never read, write or close it)
 * that polls readable (POLLIN) while at least one item is queued or the
 * queue is closed, and not readable otherwise. Level-triggered: after
 * poll() says readable, pop(h, 0, ...) until QW_ERR_TIMEOUT; the fd clears
 * itself when the last item is taken. Thread-safe.
 */
int qw_handoff_fd(const struct qw_handoff *h);

/** Items queued right now (a snapshot, for metrics). Thread-safe. */
size_t qw_handoff_len(struct qw_handoff *h);

/** Threads blocked in pop() right now (a snapshot, for metrics and tests). Thread-safe. */
size_t qw_handoff_waiters(struct qw_handoff *h);

#endif
