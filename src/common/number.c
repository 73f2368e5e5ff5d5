/* Strict whole-number option values; see number.h. */
#include "common/number.h"
#include "common/err.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int qw_number_parse(const char *name, const char *text, long min, long max, long *out, char *why,
                    size_t why_len)
{
    char *end = NULL;
    long v = 0;
    int ok = text && *text && !isspace((unsigned char)*text);
    if (ok) {
        errno = 0;
        v = strtol(text, &end, 10);
        ok = errno == 0 && *end == '\0' && v >= min && v <= max;
    }
    if (!ok) {
        if (why && why_len)
            snprintf(why, why_len, "%s must be %ld..%ld", name, min, max);
        return QW_ERR_INVALID;
    }
    *out = v;
    return QW_OK;
}
