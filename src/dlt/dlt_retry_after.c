/* Retry-After parsing; see dlt_retry_after.h. */
#include "dlt/dlt_retry_after.h"

#include <stdbool.h>
#include <string.h>

/* A cursor over the field value; every reader returns false on a mismatch. */
struct cursor {
    const char *p;   /* next unread byte */
    const char *end; /* one past the last byte */
};

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool take_char(struct cursor *c, char want)
{
    if (c->p < c->end && *c->p == want) {
        c->p++;
        return true;
    }
    return false;
}

/* Reads exactly `n` digits into *out. */
static bool take_digits(struct cursor *c, int n, int *out)
{
    if (c->end - c->p < n)
        return false;
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!is_digit(c->p[i]))
            return false;
        v = v * 10 + (c->p[i] - '0');
    }
    c->p += n;
    *out = v;
    return true;
}

/* Reads one of `n` names (case-sensitive, as the grammar requires); *index = its position. */
static bool take_name(struct cursor *c, const char *const *names, int n, int *index)
{
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        if ((size_t)(c->end - c->p) >= len && memcmp(c->p, names[i], len) == 0) {
            c->p += len;
            *index = i;
            return true;
        }
    }
    return false;
}

static const char *const day_short[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
/* Tried before day_short, whose entries are prefixes of these. */
static const char *const day_long[] = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                                       "Friday", "Saturday", "Sunday"};
static const char *const month_names[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

/* Broken-down UTC time as read from the header. */
struct http_date {
    int year;  /* full year, e.g. 1994 */
    int month; /* 1..12 */
    int day;   /* 1..31 */
    int hour;  /* 0..23 */
    int min;   /* 0..59 */
    int sec;   /* 0..60 (a leap second is accepted) */
};

/* Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Year (proleptic Gregorian) of a day count since 1970-01-01. */
static int64_t year_from_days(int64_t z)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t m = mp < 10 ? mp + 3 : mp - 9;
    return yoe + era * 400 + (m <= 2);
}

static bool is_leap(int y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static bool date_valid(const struct http_date *t)
{
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (t->month < 1 || t->month > 12 || t->day < 1)
        return false;
    int dim = mdays[t->month - 1] + (t->month == 2 && is_leap(t->year));
    return t->day <= dim && t->hour <= 23 && t->min <= 59 && t->sec <= 60;
}

/* "HH:MM:SS" */
static bool take_time(struct cursor *c, struct http_date *t)
{
    return take_digits(c, 2, &t->hour) && take_char(c, ':') && take_digits(c, 2, &t->min) &&
           take_char(c, ':') && take_digits(c, 2, &t->sec);
}

static bool take_month(struct cursor *c, struct http_date *t)
{
    int m;
    if (!take_name(c, month_names, 12, &m))
        return false;
    t->month = m + 1;
    return true;
}

/* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" (after the day name). */
static bool parse_imf_rest(struct cursor *c, struct http_date *t)
{
    return take_char(c, ',') && take_char(c, ' ') && take_digits(c, 2, &t->day) &&
           take_char(c, ' ') && take_month(c, t) && take_char(c, ' ') &&
           take_digits(c, 4, &t->year) && take_char(c, ' ') && take_time(c, t) &&
           take_char(c, ' ') && take_char(c, 'G') && take_char(c, 'M') && take_char(c, 'T');
}

/* RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT" (after the day name); year gets its century later. */
static bool parse_rfc850_rest(struct cursor *c, struct http_date *t)
{
    return take_char(c, ',') && take_char(c, ' ') && take_digits(c, 2, &t->day) &&
           take_char(c, '-') && take_month(c, t) && take_char(c, '-') &&
           take_digits(c, 2, &t->year) && take_char(c, ' ') && take_time(c, t) &&
           take_char(c, ' ') && take_char(c, 'G') && take_char(c, 'M') && take_char(c, 'T');
}

/* asctime: "Sun Nov  6 08:49:37 1994" (after the day name); day is space-padded. */
static bool parse_asctime_rest(struct cursor *c, struct http_date *t)
{
    if (!(take_char(c, ' ') && take_month(c, t) && take_char(c, ' ')))
        return false;
    if (take_char(c, ' ')) {
        if (!take_digits(c, 1, &t->day))
            return false;
    } else if (!take_digits(c, 2, &t->day)) {
        return false;
    }
    return take_char(c, ' ') && take_time(c, t) && take_char(c, ' ') && take_digits(c, 4, &t->year);
}

/* Parses an HTTP-date filling the whole cursor; *unix_s = seconds since the epoch. */
static bool parse_http_date(struct cursor c, int64_t now_unix_ms, int64_t *unix_s)
{
    struct http_date t = {0};
    int wday;
    bool two_digit_year = false;
    bool ok;
    if (take_name(&c, day_long, 7, &wday)) {
        ok = parse_rfc850_rest(&c, &t);
        two_digit_year = true;
    } else if (take_name(&c, day_short, 7, &wday)) {
        struct cursor save = c;
        ok = parse_imf_rest(&c, &t);
        if (!ok) {
            c = save;
            ok = parse_asctime_rest(&c, &t);
        }
    } else {
        ok = false;
    }
    if (!ok || c.p != c.end)
        return false;

    if (two_digit_year) {
        /*
         * RFC 7231: a two-digit year that would put the date more than 50
         * years in the future means the most recent past year with the same
         * last two digits.
         */
        int64_t now_days = now_unix_ms / 86400000;
        if (now_unix_ms < 0 && now_unix_ms % 86400000 != 0)
            now_days--;
        int64_t now_year = year_from_days(now_days);
        int64_t year = now_year - now_year % 100 + t.year;
        if (year > now_year + 50)
            year -= 100;
        t.year = (int)year;
    }
    if (!date_valid(&t))
        return false;
    int sec = t.sec == 60 ? 59 : t.sec;
    *unix_s = days_from_civil(t.year, t.month, t.day) * 86400 + t.hour * 3600 + t.min * 60 + sec;
    return true;
}

static int64_t clamp(int64_t v, int64_t max_ms)
{
    if (v < 0)
        return 0;
    return v > max_ms ? max_ms : v;
}

int64_t qw_dlt_retry_after_ms(const char *value, size_t len, int64_t now_unix_ms, int64_t max_ms)
{
    if (!value || max_ms < 0)
        return -1;
    struct cursor c = {value, value + len};
    while (c.p < c.end && (*c.p == ' ' || *c.p == '\t'))
        c.p++;
    while (c.end > c.p && (c.end[-1] == ' ' || c.end[-1] == '\t'))
        c.end--;
    if (c.p == c.end)
        return -1;

    if (is_digit(*c.p)) {
        /* delta-seconds; saturate rather than overflow. */
        const int64_t limit_s = INT64_MAX / 1000;
        int64_t secs = 0;
        for (const char *p = c.p; p < c.end; p++) {
            if (!is_digit(*p))
                return -1;
            if (secs < limit_s)
                secs = secs * 10 + (*p - '0');
        }
        if (secs > limit_s)
            secs = limit_s;
        return clamp(secs * 1000, max_ms);
    }

    int64_t unix_s;
    if (!parse_http_date(c, now_unix_ms, &unix_s))
        return -1;
    /* Dates are whole seconds; keep the subtraction in range for any now_unix_ms. */
    const int64_t far_ms = INT64_MAX / 4;
    int64_t date_ms = unix_s * 1000;
    if (now_unix_ms > far_ms || now_unix_ms < -far_ms)
        return -1;
    return clamp(date_ms - now_unix_ms, max_ms);
}
