/* Growable text buffer with a sticky failure flag; see strbuf.h. */
#include "common/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qw_strbuf_init(struct qw_strbuf *b)
{
    memset(b, 0, sizeof(*b));
}

static bool reserve(struct qw_strbuf *b, size_t extra)
{
    if (b->failed)
        return false;
    if (extra > QW_STRBUF_MAX - b->len) {
        b->failed = true;
        return false;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *grown = realloc(b->data, cap);
    if (!grown) {
        b->failed = true;
        return false;
    }
    b->data = grown;
    b->cap = cap;
    return true;
}

void qw_strbuf_append(struct qw_strbuf *b, const char *text, size_t len)
{
    if (!reserve(b, len))
        return;
    memcpy(b->data + b->len, text, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void qw_strbuf_printf(struct qw_strbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if ((size_t)n < sizeof(small)) {
        qw_strbuf_append(b, small, (size_t)n);
        return;
    }
    if (!reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *qw_strbuf_take(struct qw_strbuf *b, size_t *len)
{
    if (b->failed) {
        qw_strbuf_free(b);
        return NULL;
    }
    char *text = b->data ? b->data : strdup("");
    if (len)
        *len = text ? b->len : 0;
    qw_strbuf_init(b);
    return text;
}

void qw_strbuf_free(struct qw_strbuf *b)
{
    free(b->data);
    qw_strbuf_init(b);
}
