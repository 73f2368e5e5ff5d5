/*
 * Builds PostgreSQL array literals ({"a","b",NULL}) for passing many values
 * in one parameter (grouped writes: one statement, one COMMIT, many rows).
 * Pure: no I/O. Elements are always double-quoted with " and \ escaped, so
 * any text (ledger messages included) round-trips.
 */
#ifndef QW_DB_PGARRAY_H
#define QW_DB_PGARRAY_H

#include <stddef.h>
#include <stdint.h>

struct qw_pgarray {
    char *buf;    /* "{...}" under construction, NUL-terminated; owned */
    size_t len;   /* bytes used, without the NUL */
    size_t cap;   /* bytes allocated */
    size_t count; /* elements appended */
    int failed;   /* an allocation failed; the literal is unusable */
};

/** Starts an empty array ("{"). Always succeeds; failures show at finish. */
void qw_pgarray_init(struct qw_pgarray *a);

/** Appends a text element; NULL appends SQL NULL. */
void qw_pgarray_text(struct qw_pgarray *a, const char *text);

/** Appends an integer element. */
void qw_pgarray_int(struct qw_pgarray *a, int64_t v);

/** Appends a boolean element. */
void qw_pgarray_bool(struct qw_pgarray *a, int v);

/** Closes the literal and returns it (owned by `a`), or NULL if an allocation failed. */
const char *qw_pgarray_finish(struct qw_pgarray *a);

/** Empties `a` for reuse, keeping its buffer. */
void qw_pgarray_reset(struct qw_pgarray *a);

/** Frees the buffer. */
void qw_pgarray_free(struct qw_pgarray *a);

#endif
