/* Integer literals that libconfig would wrap; see literals.h. */
#include "config/literals.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Where the lexer is in the text. */
struct lexer {
    const char *p;   /* next character */
    const char *end; /* one past the last character */
    int line;        /* 1-based line of *p */
};

static bool is_name_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '*';
}

static bool is_name_char(char c)
{
    return is_name_start(c) || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_hex(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static void advance(struct lexer *lx)
{
    if (*lx->p == '\n')
        lx->line++;
    lx->p++;
}

/* Skips a comment starting at lx->p, if there is one; returns true when it did. */
static bool skip_comment(struct lexer *lx)
{
    const char *p = lx->p;
    bool line_comment = *p == '#' || (p + 1 < lx->end && p[0] == '/' && p[1] == '/');
    if (line_comment) {
        while (lx->p < lx->end && *lx->p != '\n')
            lx->p++;
        return true;
    }
    if (p + 1 < lx->end && p[0] == '/' && p[1] == '*') {
        lx->p += 2;
        while (lx->p < lx->end && !(lx->p + 1 < lx->end && lx->p[0] == '*' && lx->p[1] == '/'))
            advance(lx);
        lx->p = lx->p < lx->end ? lx->p + 2 : lx->end;
        return true;
    }
    return false;
}

/* Skips a "string" at lx->p, copying its raw contents into out (cut to cap). */
static void read_string(struct lexer *lx, char *out, size_t cap)
{
    size_t n = 0;
    advance(lx); /* opening quote */
    while (lx->p < lx->end && *lx->p != '"') {
        if (*lx->p == '\\' && lx->p + 1 < lx->end)
            advance(lx);
        if (n + 1 < cap)
            out[n++] = *lx->p;
        advance(lx);
    }
    if (lx->p < lx->end)
        advance(lx); /* closing quote */
    if (cap > 0)
        out[n] = '\0';
}

static void copy_cut(char *dst, size_t cap, const char *src, size_t len)
{
    if (len >= cap)
        len = cap - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/*
 * Reads a number token at lx->p (sign included) and returns true when it is
 * an integer without an L suffix that libconfig would wrap.
 */
static bool number_wraps(struct lexer *lx, const char **start, size_t *len)
{
    const char *s = lx->p;
    const char *p = s;
    bool negative = false;
    if (*p == '-' || *p == '+')
        negative = *p++ == '-';
    bool hex = p + 1 < lx->end && p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
    const char *digits = hex ? p + 2 : p;
    /* the whole token: digits, letters, '.', and a sign right after an exponent 'e' */
    const char *q = p;
    while (q < lx->end && (is_name_char(*q) || *q == '.' ||
                           (!hex && (*q == '+' || *q == '-') && (q[-1] == 'e' || q[-1] == 'E'))))
        q++;
    lx->p = q;
    *start = s;
    *len = (size_t)(q - s);

    const char *d = digits;
    while (d < q && (hex ? is_hex(*d) : is_digit(*d)))
        d++;
    if (d == digits)
        return false;
    const char *suffix = d;
    if (suffix < q && (*suffix == 'L' || *suffix == 'l'))
        return false; /* 64-bit literal: libconfig reads it whole, the key's bounds apply */
    if (suffix != q)
        return false; /* a float or not a number: libconfig decides */

    uint64_t limit = hex ? 0x7fffffffu : (negative ? 2147483648u : 2147483647u);
    uint64_t v = 0;
    for (const char *c = digits; c < d; c++) {
        unsigned digit = is_digit(*c) ? (unsigned)(*c - '0') : (unsigned)((*c | 0x20) - 'a' + 10);
        v = v * (hex ? 16 : 10) + digit;
        if (v > limit)
            return true;
    }
    return false;
}

int qw_config_find_wrapping_int(const char *text, size_t len, qw_config_include_fn *on_include,
                                void *arg, struct qw_config_literal *bad)
{
    struct lexer lx = {text, text + len, 1};
    char name[64] = "";    /* last name read */
    char setting[64] = ""; /* name of the setting whose value is being read */
    char section[64] = ""; /* top-level group being read */
    int depth = 0;         /* group/list nesting */
    bool line_start = true;

    while (lx.p < lx.end) {
        char c = *lx.p;
        if (c == '\n') {
            advance(&lx);
            line_start = true;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            lx.p++;
            continue;
        }
        if (skip_comment(&lx))
            continue;
        bool was_line_start = line_start;
        line_start = false;
        if (c == '"') {
            char ignored[1];
            read_string(&lx, ignored, sizeof(ignored));
        } else if (c == '@' && was_line_start && (size_t)(lx.end - lx.p) > 8 &&
                   strncmp(lx.p, "@include", 8) == 0) {
            lx.p += 8;
            while (lx.p < lx.end && (*lx.p == ' ' || *lx.p == '\t'))
                lx.p++;
            if (lx.p < lx.end && *lx.p == '"') {
                char path[4096];
                read_string(&lx, path, sizeof(path));
                int rc = on_include ? on_include(path, arg) : 0;
                if (rc != 0)
                    return rc;
            }
        } else if (is_name_start(c)) {
            const char *s = lx.p;
            while (lx.p < lx.end && is_name_char(*lx.p))
                lx.p++;
            copy_cut(name, sizeof(name), s, (size_t)(lx.p - s));
        } else if (c == '=' || c == ':') {
            memcpy(setting, name, sizeof(setting));
            lx.p++;
        } else if (c == '{' || c == '[' || c == '(') {
            if (depth++ == 0)
                memcpy(section, setting, sizeof(section));
            lx.p++;
        } else if (c == '}' || c == ']' || c == ')') {
            if (depth > 0 && --depth == 0)
                section[0] = '\0';
            lx.p++;
        } else if (is_digit(c) ||
                   ((c == '-' || c == '+') && lx.p + 1 < lx.end && is_digit(lx.p[1]))) {
            int line = lx.line;
            const char *start;
            size_t n;
            if (number_wraps(&lx, &start, &n)) {
                bad->line = line;
                snprintf(bad->section, sizeof(bad->section), "%s", depth > 0 ? section : "");
                snprintf(bad->name, sizeof(bad->name), "%s", setting);
                copy_cut(bad->text, sizeof(bad->text), start, n);
                return 1;
            }
        } else {
            lx.p++;
        }
    }
    return 0;
}
