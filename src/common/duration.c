/* Parsing and formatting of operator durations; see duration.h. */
#include "common/duration.h"
#include "common/err.h"

#include <stdio.h>
#include <string.h>

struct unit {
    char name;    /* suffix letter */
    int64_t secs; /* seconds in one unit */
};

/* Largest first: groups must follow this order. */
static const struct unit units[] = {
    {'w', 7 * 86400}, {'d', 86400}, {'h', 3600}, {'m', 60}, {'s', 1},
};
#define N_UNITS (sizeof(units) / sizeof(units[0]))

static int refuse(char *why, size_t why_len, const char *text, const char *reason)
{
    if (why && why_len)
        snprintf(why, why_len, "bad duration '%s': %s (e.g. 7d, 12h, 30m, 1d12h)", text, reason);
    return QW_ERR_INVALID;
}

int qw_duration_parse(const char *text, int64_t *out_s, char *why, size_t why_len)
{
    if (!text || !*text)
        return refuse(why, why_len, text ? text : "", "empty");
    const char *p = text;
    int64_t total = 0;
    size_t next_unit = 0; /* index of the largest unit still allowed */
    while (*p) {
        if (*p < '0' || *p > '9')
            return refuse(why, why_len, text, "expected a number");
        int64_t n = 0;
        while (*p >= '0' && *p <= '9') {
            n = n * 10 + (*p - '0');
            if (n > QW_DURATION_MAX_S)
                return refuse(why, why_len, text, "too long");
            p++;
        }
        if (!*p)
            return refuse(why, why_len, text, "missing unit (s, m, h, d or w)");
        size_t u = 0;
        while (u < N_UNITS && units[u].name != *p)
            u++;
        if (u == N_UNITS)
            return refuse(why, why_len, text, "unknown unit (use s, m, h, d or w)");
        if (u < next_unit)
            return refuse(why, why_len, text, "units must go from largest to smallest, once each");
        next_unit = u + 1;
        if (n > (QW_DURATION_MAX_S - total) / units[u].secs)
            return refuse(why, why_len, text, "too long");
        total += n * units[u].secs;
        p++;
    }
    if (total == 0)
        return refuse(why, why_len, text, "must be longer than zero");
    *out_s = total;
    return QW_OK;
}

void qw_duration_format(int64_t s, char *buf, size_t len)
{
    if (!len)
        return;
    const char *sign = "";
    uint64_t v = (uint64_t)s;
    if (s < 0) {
        sign = "-";
        v = (uint64_t)0 - v;
    }
    /* Formatting uses days as the largest unit: "15d" reads better than "2w1d". */
    static const struct unit shown[] = {{'d', 86400}, {'h', 3600}, {'m', 60}, {'s', 1}};
    for (size_t i = 0; i < 4; i++) {
        uint64_t q = v / (uint64_t)shown[i].secs;
        if (q == 0 && i < 3)
            continue;
        uint64_t rest = v % (uint64_t)shown[i].secs;
        if (i < 3 && rest / (uint64_t)shown[i + 1].secs > 0) {
            snprintf(buf, len, "%s%llu%c%llu%c", sign, (unsigned long long)q, shown[i].name,
                     (unsigned long long)(rest / (uint64_t)shown[i + 1].secs), shown[i + 1].name);
        } else {
            snprintf(buf, len, "%s%llu%c", sign, (unsigned long long)q, shown[i].name);
        }
        return;
    }
}
