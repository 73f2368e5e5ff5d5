/* Sanitising untrusted ledger text; see dlt_text.h. */
#include "dlt/dlt_text.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

/*
 * Length of the well-formed UTF-8 sequence at `s` (at most `avail` bytes),
 * or 0 when it is malformed (overlong, surrogate, above U+10FFFF, cut).
 * *cp receives the code point.
 */
static size_t utf8_seq(const unsigned char *s, size_t avail, uint32_t *cp)
{
    unsigned char b = s[0];
    size_t n;
    uint32_t v, min;
    if (b < 0x80) {
        *cp = b;
        return 1;
    } else if (b >= 0xc2 && b <= 0xdf) {
        n = 2, v = b & 0x1f, min = 0x80;
    } else if (b >= 0xe0 && b <= 0xef) {
        n = 3, v = b & 0x0f, min = 0x800;
    } else if (b >= 0xf0 && b <= 0xf4) {
        n = 4, v = b & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (avail < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return n;
}

size_t qw_dlt_text_sanitize(char *out, size_t cap, const char *in, size_t len)
{
    if (cap == 0)
        return 0;
    const unsigned char *s = (const unsigned char *)in;
    size_t pos = 0;
    bool pending_space = false;
    for (size_t i = 0; in && i < len;) {
        uint32_t cp = 0;
        size_t n = utf8_seq(s + i, len - i, &cp);
        const char *piece = in + i;
        size_t piece_len = n;
        if (n == 0) {
            piece = "?";
            piece_len = 1;
            n = 1;
            cp = '?';
        }
        i += n;
        if (cp == ' ' || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) {
            pending_space = pos > 0;
            continue;
        }
        size_t need = piece_len + (pending_space ? 1 : 0);
        if (need > cap - 1 - pos)
            break;
        if (pending_space)
            out[pos++] = ' ';
        pending_space = false;
        for (size_t k = 0; k < piece_len; k++)
            out[pos++] = piece[k];
    }
    out[pos] = '\0';
    return pos;
}

void qw_dlt_text_mask_secret(char *buf, size_t len, const char *token)
{
    if (!buf)
        return;
    size_t tlen = token ? strlen(token) : 0;
    for (size_t i = 0; tlen > 0 && i + tlen <= len; i++) {
        if (buf[i] == token[0] && memcmp(buf + i, token, tlen) == 0) {
            memset(buf + i, '*', tlen);
            i += tlen - 1;
        }
    }
    static const char header[] = "authorization:";
    const size_t hlen = sizeof(header) - 1;
    for (size_t i = 0; i + hlen <= len; i++) {
        /* the first byte first: a call per byte of every answer costs */
        if ((buf[i] | 0x20) != header[0] || strncasecmp(buf + i, header, hlen) != 0)
            continue;
        size_t j = i + hlen;
        while (j < len && (buf[j] == ' ' || buf[j] == '\t'))
            j++;
        while (j < len && buf[j] != '\r' && buf[j] != '\n' && buf[j] != '"' && buf[j] != '<' &&
               buf[j] != '\0')
            buf[j++] = '*';
        i = j - 1;
    }
}
