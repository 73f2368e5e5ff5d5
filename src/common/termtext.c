/* Terminal-safe text; see termtext.h. */
#include "common/termtext.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the well-formed UTF-8 sequence at `s` (its code point in *cp), 0 if none. */
static size_t utf8_seq(const unsigned char *s, uint32_t *cp)
{
    size_t n;
    uint32_t min;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    } else if ((s[0] & 0xe0) == 0xc0) {
        n = 2;
        min = 0x80;
        *cp = s[0] & 0x1f;
    } else if ((s[0] & 0xf0) == 0xe0) {
        n = 3;
        min = 0x800;
        *cp = s[0] & 0x0f;
    } else if ((s[0] & 0xf8) == 0xf0) {
        n = 4;
        min = 0x10000;
        *cp = s[0] & 0x07;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) /* also stops at the NUL */
            return 0;
        *cp = (*cp << 6) | (s[i] & 0x3f);
    }
    if (*cp < min || *cp > 0x10ffff || (*cp >= 0xd800 && *cp <= 0xdfff))
        return 0;
    return n;
}

static int shown_escaped(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
           (cp >= 0x2066 && cp <= 0x2069);
}

size_t qw_termtext_escape(char *dst, size_t cap, const char *src)
{
    const unsigned char *s = (const unsigned char *)(src ? src : "");
    size_t len = 0;
    while (*s) {
        char piece[8];
        size_t plen;
        uint32_t cp = 0;
        size_t n = utf8_seq(s, &cp);
        if (n == 0) {
            plen = (size_t)snprintf(piece, sizeof(piece), "\\x%02x", s[0]);
            n = 1;
        } else if (cp == '\n') {
            plen = (size_t)snprintf(piece, sizeof(piece), "\\n");
        } else if (cp == '\r') {
            plen = (size_t)snprintf(piece, sizeof(piece), "\\r");
        } else if (cp == '\t') {
            plen = (size_t)snprintf(piece, sizeof(piece), "\\t");
        } else if (cp < 0x20 || cp == 0x7f) {
            plen = (size_t)snprintf(piece, sizeof(piece), "\\x%02x", (unsigned)cp);
        } else if (shown_escaped(cp)) {
            plen = (size_t)snprintf(piece, sizeof(piece), "\\u%04x", (unsigned)cp);
        } else {
            memcpy(piece, s, n);
            plen = n;
        }
        if (len + plen >= cap)
            break;
        memcpy(dst + len, piece, plen);
        len += plen;
        s += n;
    }
    dst[len] = '\0';
    return len;
}

char *qw_termtext_dup(const char *src)
{
    /* at most 4 output bytes per input byte: \xNN from 1, \u0085 from 2, \u202e from 3 */
    size_t cap = 4 * strlen(src ? src : "") + 1;
    char *out = malloc(cap);
    if (out)
        qw_termtext_escape(out, cap, src);
    return out;
}
