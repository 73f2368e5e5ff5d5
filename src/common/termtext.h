/*
 * Text from the database (operator reasons, ledger error messages, worker
 * host names) shown on a terminal: control characters made visible so a
 * stored escape sequence cannot move the cursor, recolour, retitle or
 * clear the operator's screen, and a stored newline cannot forge a table
 * row. Pure functions.
 */
#ifndef QW_COMMON_TERMTEXT_H
#define QW_COMMON_TERMTEXT_H

#include <stddef.h>

/**
 * Copies `src` into `dst` (capacity `cap` > 0, always NUL-terminated)
 * with what a terminal would act on written out instead: C0 controls and
 * DEL as `\n`, `\r`, `\t` or `\xNN`; C1 controls (U+0080..U+009F) and the
 * bidirectional overrides (U+202A..U+202E, U+2066..U+2069) as `\uNNNN`;
 * bytes that are not UTF-8 as `\xNN`. Everything else, other UTF-8
 * included, is copied as is. Output that does not fit is cut before a
 * whole character or escape, never inside one. Returns the length
 * written. NULL `src` is "".
 */
size_t qw_termtext_escape(char *dst, size_t cap, const char *src);

/** Like qw_termtext_escape() into a new malloc'd string (caller frees); NULL when out of memory. */
char *qw_termtext_dup(const char *src);

#endif
