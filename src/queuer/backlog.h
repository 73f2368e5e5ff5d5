/*
 * The queuer's backlog: services whose next batch was chosen but left out
 * for want of room (every slot of dlt.max_in_flight taken), started one by
 * one as jobs come back. Kept in priority order, highest first, and in the
 * order they were added among equals, so a batch of higher priority that
 * arrives while thousands of services wait goes ahead of them. Owned and
 * used by the queuer thread.
 */
#ifndef QW_QUEUER_BACKLOG_H
#define QW_QUEUER_BACKLOG_H

#include <stdbool.h>
#include <stddef.h>

/* A service waiting for room, with its chosen batch's priority. */
struct qw_waiting {
    char *service_id; /* owned */
    int priority;
};

struct qw_backlog {
    struct qw_waiting *items; /* items[head..n) wait, in order */
    size_t n;                 /* entries in items */
    size_t head;              /* next entry to start */
};

/* Frees `n` entries of `w` and the array itself. */
void qw_waiting_free(struct qw_waiting *w, size_t n);

/* An empty backlog. */
void qw_backlog_init(struct qw_backlog *b);

/* Frees every entry. */
void qw_backlog_free(struct qw_backlog *b);

/* Entries that wait. */
size_t qw_backlog_waiting(const struct qw_backlog *b);

/*
 * Replaces the backlog with `w` (n entries, already in priority order, as
 * a full fetch knows every waiting service), taking the array and its ids.
 */
void qw_backlog_replace(struct qw_backlog *b, struct qw_waiting *w, size_t n);

/*
 * Adds `w` (n entries in priority order, as a partial fetch found them):
 * each goes after every waiting entry of its priority or higher and before
 * the lower ones. Takes the ids and frees the array on success; on
 * QW_ERR_NOMEM the backlog is unchanged and `w` still the caller's.
 */
int qw_backlog_add(struct qw_backlog *b, struct qw_waiting *w, size_t n);

/* The next waiting service (the backlog keeps the id until it is next
 * replaced, added to or freed), or NULL when none waits. */
const char *qw_backlog_next(struct qw_backlog *b);

#endif
