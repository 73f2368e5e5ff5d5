/* Bounded queuer -> submitter handoff queue; see handoff.h for the DESIGN. */
#include "shared/handoff.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct qw_handoff {
    pthread_mutex_t lock;     /* guards every field below except the constants */
    pthread_cond_t not_empty; /* signalled on push and broadcast on close */
    void **ring;              /* `capacity` slots; constant after create */
    size_t capacity;          /* slots; constant after create */
    size_t head;              /* index of the oldest item */
    size_t count;             /* items queued */
    size_t waiters;           /* threads blocked in pop() */
    bool closed;              /* close() was called */
    bool signalled;           /* the eventfd counter is non-zero */
    int efd;                  /* eventfd (non-blocking); readable iff count > 0 || closed */
};

/* Makes the eventfd readable; called with the lock held. */
static void fd_raise(struct qw_handoff *h)
{
    if (h->signalled)
        return;
    uint64_t one = 1;
    while (write(h->efd, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    h->signalled = true;
}

/* Makes the eventfd unreadable; called with the lock held. */
static void fd_clear(struct qw_handoff *h)
{
    if (!h->signalled)
        return;
    uint64_t value;
    while (read(h->efd, &value, sizeof(value)) < 0 && errno == EINTR) {
    }
    h->signalled = false;
}

int qw_handoff_create(struct qw_handoff **out, size_t capacity, struct qw_error *err)
{
    struct qw_handoff *h = NULL;
    pthread_condattr_t cattr;
    bool lock_ok = false;
    int rc = QW_OK;

    *out = NULL;
    if (capacity == 0)
        return qw_error_set(err, QW_ERR_INVALID, "handoff capacity must be at least 1");
    h = calloc(1, sizeof(*h));
    if (h)
        h->efd = -1;
    if (!h || !(h->ring = calloc(capacity, sizeof(*h->ring)))) {
        rc = qw_error_set(err, QW_ERR_NOMEM, "handoff queue of %zu items", capacity);
        goto out;
    }
    h->capacity = capacity;
    h->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (h->efd < 0) {
        rc = qw_error_set(err, QW_ERR_IO, "eventfd: errno %d", errno);
        goto out;
    }
    if (pthread_mutex_init(&h->lock, NULL) != 0) {
        rc = qw_error_set(err, QW_ERR_IO, "handoff mutex init failed");
        goto out;
    }
    lock_ok = true;
    /* Timed pops measure a monotonic deadline: wall-clock jumps do not matter. */
    if (pthread_condattr_init(&cattr) != 0) {
        rc = qw_error_set(err, QW_ERR_IO, "handoff condattr init failed");
        goto out;
    }
    int crc = pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    if (crc == 0)
        crc = pthread_cond_init(&h->not_empty, &cattr);
    pthread_condattr_destroy(&cattr);
    if (crc != 0) {
        rc = qw_error_set(err, QW_ERR_IO, "handoff condition variable init failed");
        goto out;
    }
    *out = h;
    return QW_OK;

out:
    if (h) {
        if (lock_ok)
            pthread_mutex_destroy(&h->lock);
        if (h->efd >= 0)
            close(h->efd);
        free(h->ring);
        free(h);
    }
    return rc;
}

void qw_handoff_destroy(struct qw_handoff *h, void (*free_item)(void *item))
{
    if (!h)
        return;
    if (free_item) {
        for (size_t i = 0; i < h->count; i++)
            free_item(h->ring[(h->head + i) % h->capacity]);
    }
    pthread_cond_destroy(&h->not_empty);
    pthread_mutex_destroy(&h->lock);
    close(h->efd);
    free(h->ring);
    free(h);
}

int qw_handoff_push(struct qw_handoff *h, void *item)
{
    int rc = QW_OK;
    pthread_mutex_lock(&h->lock);
    if (h->closed) {
        rc = QW_ERR_SHUTDOWN;
    } else if (h->count == h->capacity) {
        rc = QW_ERR_BACKPRESSURE;
    } else {
        h->ring[(h->head + h->count) % h->capacity] = item;
        h->count++;
        fd_raise(h);
        pthread_cond_signal(&h->not_empty);
    }
    pthread_mutex_unlock(&h->lock);
    return rc;
}

/* Absolute CLOCK_MONOTONIC time `ms` from now. */
static struct timespec deadline_after(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int qw_handoff_pop(struct qw_handoff *h, int timeout_ms, void **item)
{
    struct timespec deadline = {0};
    int rc = QW_OK;

    if (timeout_ms > 0)
        deadline = deadline_after(timeout_ms);
    pthread_mutex_lock(&h->lock);
    while (h->count == 0 && !h->closed) {
        if (timeout_ms == 0) {
            rc = QW_ERR_TIMEOUT;
            goto out;
        }
        h->waiters++;
        int wrc = timeout_ms < 0 ? pthread_cond_wait(&h->not_empty, &h->lock)
                                 : pthread_cond_timedwait(&h->not_empty, &h->lock, &deadline);
        h->waiters--;
        if (wrc == ETIMEDOUT && h->count == 0 && !h->closed) {
            rc = QW_ERR_TIMEOUT;
            goto out;
        }
    }
    if (h->count == 0) {
        rc = QW_ERR_SHUTDOWN; /* closed and drained */
        goto out;
    }
    *item = h->ring[h->head];
    h->head = (h->head + 1) % h->capacity;
    h->count--;
    if (h->count == 0 && !h->closed)
        fd_clear(h);
out:
    pthread_mutex_unlock(&h->lock);
    return rc;
}

void qw_handoff_close(struct qw_handoff *h)
{
    pthread_mutex_lock(&h->lock);
    if (!h->closed) {
        h->closed = true;
        fd_raise(h);
        pthread_cond_broadcast(&h->not_empty);
    }
    pthread_mutex_unlock(&h->lock);
}

int qw_handoff_fd(const struct qw_handoff *h)
{
    return h->efd; /* constant after create: no lock needed */
}

size_t qw_handoff_len(struct qw_handoff *h)
{
    pthread_mutex_lock(&h->lock);
    size_t n = h->count;
    pthread_mutex_unlock(&h->lock);
    return n;
}

size_t qw_handoff_waiters(struct qw_handoff *h)
{
    pthread_mutex_lock(&h->lock);
    size_t n = h->waiters;
    pthread_mutex_unlock(&h->lock);
    return n;
}
