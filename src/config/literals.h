/*
 * Integer literals that libconfig would wrap. libconfig 1.5 (Debian 12)
 * reads an integer without an L suffix into 32 bits and keeps the low
 * bits: `lease_ms = 4294997296;` loads as 30000 and `0xFFFFFFFF` as -1,
 * with no error. The value it hands back cannot tell, so the configuration
 * loader scans the file text first with this small lexer (comments,
 * strings, names, groups and @include lines as libconfig reads them) and
 * refuses such literals with FILE:LINE and the setting's name. Pure: no
 * I/O, no allocation.
 */
#ifndef QW_CONFIG_LITERALS_H
#define QW_CONFIG_LITERALS_H

#include <stddef.h>

/** An integer literal that does not fit in 32 bits, and where it stands. */
struct qw_config_literal {
    int line;         /* 1-based line of the literal in the scanned text */
    char section[64]; /* name of the enclosing top-level group, "" outside any */
    char name[64];    /* name of the setting it is the value of, "" if none */
    char text[64];    /* the literal as written (with its sign), cut to fit */
};

/**
 * Called for each `@include "path"` line with the path as written;
 * returns 0 to go on scanning, anything else to stop the scan.
 */
typedef int qw_config_include_fn(const char *path, void *arg);

/**
 * Scans `len` bytes of libconfig text for the first decimal or hex integer
 * literal without an L suffix outside -2147483648..2147483647 (hex above
 * 0x7FFFFFFF). Returns 1 and fills *bad when it finds one, 0 when there is
 * none, or the non-zero result of `on_include` (may be NULL) that stopped
 * the scan. Text libconfig cannot parse is left for libconfig to report.
 */
int qw_config_find_wrapping_int(const char *text, size_t len, qw_config_include_fn *on_include,
                                void *arg, struct qw_config_literal *bad);

#endif
