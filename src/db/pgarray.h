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
    char *buf;         /* "{...}" under construction, NUL-terminated; owned */
    size_t len;        /* bytes used, without the NUL */
    size_t cap;        /* bytes allocated */
    size_t count;      /* elements appended */
    int failed;        /* an allocation failed; the literal is unusable */
    size_t row_fields; /* fields appended to the row element being built */
};

/** Starts an empty array ("{"). Always succeeds; failures show at finish. */
void qw_pgarray_init(struct qw_pgarray *a);

/** Appends a text element; NULL appends SQL NULL. */
void qw_pgarray_text(struct qw_pgarray *a, const char *text);

/** Appends an integer element. */
void qw_pgarray_int(struct qw_pgarray *a, int64_t v);

/** Appends a boolean element. */
void qw_pgarray_bool(struct qw_pgarray *a, int v);

/*
 * Row (composite) elements, for an array of a row type such as
 * queuer.outcome[]: qw_pgarray_row_begin(), then one call per field in
 * the type's column order, then qw_pgarray_row_end(). Text fields are
 * quoted for the row and the row again for the array, so any text
 * round-trips; NULL text is SQL NULL (an empty string stays empty).
 */
/** Starts a row element. */
void qw_pgarray_row_begin(struct qw_pgarray *a);

/** Appends a text field to the row being built; NULL = SQL NULL. */
void qw_pgarray_row_text(struct qw_pgarray *a, const char *text);

/** Appends an integer field to the row being built. */
void qw_pgarray_row_int(struct qw_pgarray *a, int64_t v);

/** Appends a boolean field to the row being built. */
void qw_pgarray_row_bool(struct qw_pgarray *a, int v);

/** Appends a NULL field to the row being built. */
void qw_pgarray_row_null(struct qw_pgarray *a);

/** Ends the row element. */
void qw_pgarray_row_end(struct qw_pgarray *a);

/** Closes the literal and returns it (owned by `a`), or NULL if an allocation failed. */
const char *qw_pgarray_finish(struct qw_pgarray *a);

/** Empties `a` for reuse, keeping its buffer. */
void qw_pgarray_reset(struct qw_pgarray *a);

/** Frees the buffer. */
void qw_pgarray_free(struct qw_pgarray *a);

#endif
