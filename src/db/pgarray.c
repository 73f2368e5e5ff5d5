/* PostgreSQL array literal builder; see pgarray.h. */
#include "db/pgarray.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reserve(struct qw_pgarray *a, size_t more)
{
    if (a->failed)
        return -1;
    if (a->len + more + 2 <= a->cap)
        return 0;
    size_t cap = a->cap ? a->cap : 256;
    while (cap < a->len + more + 2)
        cap *= 2;
    char *grown = realloc(a->buf, cap);
    if (!grown) {
        a->failed = 1;
        return -1;
    }
    a->buf = grown;
    a->cap = cap;
    return 0;
}

static void put(struct qw_pgarray *a, const char *s, size_t n)
{
    if (reserve(a, n) != 0)
        return;
    memcpy(a->buf + a->len, s, n);
    a->len += n;
    a->buf[a->len] = '\0';
}

void qw_pgarray_init(struct qw_pgarray *a)
{
    memset(a, 0, sizeof(*a));
    put(a, "{", 1);
}

void qw_pgarray_reset(struct qw_pgarray *a)
{
    a->len = 0;
    a->count = 0;
    a->failed = 0;
    put(a, "{", 1);
}

static void separator(struct qw_pgarray *a)
{
    if (a->count++ > 0)
        put(a, ",", 1);
}

void qw_pgarray_text(struct qw_pgarray *a, const char *text)
{
    separator(a);
    if (!text) {
        put(a, "NULL", 4);
        return;
    }
    size_t n = strlen(text);
    if (reserve(a, 2 * n + 2) != 0)
        return;
    a->buf[a->len++] = '"';
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '"' || text[i] == '\\')
            a->buf[a->len++] = '\\';
        a->buf[a->len++] = text[i];
    }
    a->buf[a->len++] = '"';
    a->buf[a->len] = '\0';
}

void qw_pgarray_int(struct qw_pgarray *a, int64_t v)
{
    char num[32];
    int n = snprintf(num, sizeof(num), "%" PRId64, v);
    separator(a);
    put(a, num, (size_t)n);
}

void qw_pgarray_bool(struct qw_pgarray *a, int v)
{
    separator(a);
    put(a, v ? "t" : "f", 1);
}

void qw_pgarray_row_begin(struct qw_pgarray *a)
{
    separator(a);
    a->row_fields = 0;
    put(a, "\"(", 2);
}

static void row_separator(struct qw_pgarray *a)
{
    if (a->row_fields++ > 0)
        put(a, ",", 1);
}

/* Appends one character of the row text, escaped for the array element. */
static void put_in_element(struct qw_pgarray *a, char ch)
{
    if (ch == '"' || ch == '\\')
        put(a, "\\", 1);
    put(a, &ch, 1);
}

void qw_pgarray_row_text(struct qw_pgarray *a, const char *text)
{
    row_separator(a);
    if (!text)
        return; /* an empty field is NULL */
    put_in_element(a, '"');
    for (const char *p = text; *p; p++) {
        if (*p == '"' || *p == '\\')
            put_in_element(a, '\\');
        put_in_element(a, *p);
    }
    put_in_element(a, '"');
}

void qw_pgarray_row_int(struct qw_pgarray *a, int64_t v)
{
    char num[32];
    int n = snprintf(num, sizeof(num), "%" PRId64, v);
    row_separator(a);
    put(a, num, (size_t)n);
}

void qw_pgarray_row_bool(struct qw_pgarray *a, int v)
{
    row_separator(a);
    put(a, v ? "t" : "f", 1);
}

void qw_pgarray_row_null(struct qw_pgarray *a)
{
    row_separator(a);
}

void qw_pgarray_row_end(struct qw_pgarray *a)
{
    put(a, ")\"", 2);
}

const char *qw_pgarray_finish(struct qw_pgarray *a)
{
    put(a, "}", 1);
    return a->failed ? NULL : a->buf;
}

void qw_pgarray_free(struct qw_pgarray *a)
{
    free(a->buf);
    memset(a, 0, sizeof(*a));
}
