/* The NDJSON event log; see evlog.h. */
#include "evlog.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct qw_sim_evlog {
    int fd;                  /* O_APPEND file descriptor */
    int64_t (*now_us)(void); /* clock for "t" */
    pthread_mutex_t mu;      /* serialises stamping and writing */
    int64_t last_t_us;       /* last "t" written, microseconds */
    unsigned long errors;    /* failed writes */
};

/* ---- line building (pure) ---------------------------------------------- */

size_t qw_sim_json_escape(char *out, size_t cap, const char *text, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t need = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        char esc[7];
        size_t n;
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            n = 2;
        } else if (c == '\n') {
            memcpy(esc, "\\n", 2);
            n = 2;
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            n = 6;
        } else {
            esc[0] = (char)c;
            n = 1;
        }
        if (need + n < cap)
            memcpy(out + need, esc, n);
        need += n;
    }
    if (cap > 0)
        out[need < cap ? need : cap - 1] = '\0';
    return need;
}

static void append_raw(struct qw_sim_event *e, const char *text, size_t n)
{
    if (e->overflow || e->len + n >= sizeof(e->buf)) {
        e->overflow = true;
        return;
    }
    memcpy(e->buf + e->len, text, n);
    e->len += n;
    e->buf[e->len] = '\0';
}

/* Appends `,"key":` (the comma only after the first field). */
static bool append_key(struct qw_sim_event *e, const char *key)
{
    char tmp[96];
    int n = snprintf(tmp, sizeof(tmp), "%s\"%s\":", e->len ? "," : "", key);
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return false;
    append_raw(e, tmp, (size_t)n);
    return !e->overflow;
}

void qw_sim_event_begin(struct qw_sim_event *e, const char *ev)
{
    e->len = 0;
    e->overflow = false;
    e->buf[0] = '\0';
    qw_sim_event_str(e, "ev", ev);
}

void qw_sim_event_str(struct qw_sim_event *e, const char *key, const char *value)
{
    size_t mark = e->len;
    if (!append_key(e, key))
        goto undo;
    if (!value) {
        append_raw(e, "null", 4);
    } else {
        /* Opening quote, escaped text, closing quote and NUL must fit. */
        size_t room = sizeof(e->buf) - e->len;
        size_t need = room < 3
                          ? room
                          : qw_sim_json_escape(e->buf + e->len + 1, room - 2, value, strlen(value));
        if (need + 3 > room)
            goto undo;
        e->buf[e->len] = '"';
        e->len += 1 + need;
        append_raw(e, "\"", 1);
    }
    if (!e->overflow)
        return;
undo:
    /* Leave the line well-formed without the field. */
    e->len = mark;
    e->buf[mark] = '\0';
    e->overflow = true;
}

void qw_sim_event_int(struct qw_sim_event *e, const char *key, long long value)
{
    size_t mark = e->len;
    char tmp[32];
    int n = snprintf(tmp, sizeof(tmp), "%lld", value);
    if (append_key(e, key) && n > 0)
        append_raw(e, tmp, (size_t)n);
    if (e->overflow) {
        e->len = mark;
        e->buf[mark] = '\0';
    }
}

void qw_sim_event_bool(struct qw_sim_event *e, const char *key, bool value)
{
    size_t mark = e->len;
    if (append_key(e, key))
        append_raw(e, value ? "true" : "false", value ? 4 : 5);
    if (e->overflow) {
        e->len = mark;
        e->buf[mark] = '\0';
    }
}

/* ---- the file ---------------------------------------------------------- */

int qw_sim_evlog_open(const char *path, int64_t (*now_us)(void), struct qw_sim_evlog **out)
{
    *out = NULL;
    struct qw_sim_evlog *log = calloc(1, sizeof(*log));
    if (!log)
        return QW_ERR_NOMEM;
    log->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log->fd < 0) {
        free(log);
        return QW_ERR_IO;
    }
    log->now_us = now_us;
    pthread_mutex_init(&log->mu, NULL);
    *out = log;
    return QW_OK;
}

void qw_sim_evlog_close(struct qw_sim_evlog *log)
{
    if (!log)
        return;
    fsync(log->fd);
    close(log->fd);
    pthread_mutex_destroy(&log->mu);
    free(log);
}

bool qw_sim_evlog_enabled(const struct qw_sim_evlog *log)
{
    return log != NULL;
}

static bool write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        buf += n;
        len -= (size_t)n;
    }
    return true;
}

void qw_sim_evlog_emit(struct qw_sim_evlog *log, const struct qw_sim_event *e)
{
    if (!log)
        return;
    char line[sizeof(e->buf) + 48];
    pthread_mutex_lock(&log->mu);
    int64_t t = log->now_us();
    if (t < log->last_t_us)
        t = log->last_t_us;
    log->last_t_us = t;
    int n = snprintf(line, sizeof(line), "{\"t\":%" PRId64 "%s%s}\n", t, e->len ? "," : "", e->buf);
    bool ok = n > 0 && (size_t)n < sizeof(line) && write_all(log->fd, line, (size_t)n);
    bool first_error = !ok && log->errors++ == 0;
    pthread_mutex_unlock(&log->mu);
    if (first_error)
        qw_log_error("sim.evlog.write_failed", "errno=%d", errno);
}
