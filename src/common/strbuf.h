/*
 * A growable text buffer for the pure renderers (metrics, status report).
 * Appends never fail loudly: the first allocation failure marks the buffer
 * failed, later appends do nothing, and qw_strbuf_take() returns NULL, so
 * a renderer checks once at the end (as curl's dynbuf does). A hard size
 * cap bounds what any renderer can produce.
 */
#ifndef QW_COMMON_STRBUF_H
#define QW_COMMON_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

#define QW_STRBUF_MAX (16u * 1024 * 1024) /* bytes; an append past this fails the buffer */

struct qw_strbuf {
    char *data;  /* NUL-terminated text, NULL until the first append */
    size_t len;  /* bytes used, without the NUL */
    size_t cap;  /* bytes allocated */
    bool failed; /* an allocation failed or the cap was hit: contents are incomplete */
};

/** Initialises an empty buffer (no allocation). */
void qw_strbuf_init(struct qw_strbuf *b);

/** Appends printf-style text. Not thread-safe (one buffer, one thread). */
void qw_strbuf_printf(struct qw_strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** Appends `len` bytes of `text`. */
void qw_strbuf_append(struct qw_strbuf *b, const char *text, size_t len);

/**
 * Hands the text to the caller (free() it) and empties the buffer. Returns
 * NULL when the buffer failed (its memory is released either way); an
 * untouched buffer yields "".
 */
char *qw_strbuf_take(struct qw_strbuf *b, size_t *len);

/** Releases the buffer's memory. */
void qw_strbuf_free(struct qw_strbuf *b);

#endif
