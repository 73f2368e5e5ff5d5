/* Key=value log lines; see log.h for the level policy. */
#include "common/log.h"
#include "common/err.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static atomic_int log_min_level = QW_LOG_INFO;
static char log_instance[64] = "-";
static FILE *log_out;
static _Thread_local const char *log_thread = "main";

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void qw_log_init(enum qw_log_level min_level, const char *instance_id)
{
    atomic_store(&log_min_level, (int)min_level);
    if (instance_id)
        snprintf(log_instance, sizeof(log_instance), "%s", instance_id);
}

void qw_log_set_level(enum qw_log_level min_level)
{
    atomic_store(&log_min_level, (int)min_level);
}

const char *qw_log_level_name(void)
{
    return level_names[atomic_load(&log_min_level)];
}

int qw_log_level_parse(const char *text, enum qw_log_level *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(text, level_names[i]) == 0) {
            *out = (enum qw_log_level)i;
            return QW_OK;
        }
    }
    return QW_ERR_INVALID;
}

void qw_log_set_thread(const char *name)
{
    log_thread = name;
}

void qw_log_set_output(FILE *out)
{
    log_out = out;
}

int qw_log_enabled(enum qw_log_level level)
{
    return (int)level >= atomic_load(&log_min_level);
}

void qw_log(enum qw_log_level level, const char *event, const char *fmt, ...)
{
    if (!qw_log_enabled(level))
        return;

    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line),
                     "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s instance=%s thread=%s "
                     "event=%s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000L, level_names[level], log_instance, log_thread, event);
    if (fmt && n > 0 && (size_t)n < sizeof(line) - 2) {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
    }
    if (n < 0)
        return;
    if ((size_t)n > sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    line[n] = '\0';
    FILE *out = log_out ? log_out : stderr;
    fputs(line, out);
    fflush(out);
}

const char *qw_log_quote(char *buf, size_t len, const char *text)
{
    size_t o = 0;
    if (len < 3) {
        if (len)
            buf[0] = '\0';
        return buf;
    }
    buf[o++] = '"';
    for (const char *p = text ? text : ""; *p && o + 3 < len; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            if (o + 4 >= len)
                break;
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            buf[o++] = ' ';
        } else {
            buf[o++] = (char)c;
        }
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}
