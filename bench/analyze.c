/*
 * bench-analyze: reads a scabbard-sim NDJSON event log and prints the
 * benchmark's ledger-side figures as one line of key=value pairs (numbers
 * only, so bench/run.sh can read them without a JSON tool).
 *
 *   bench-analyze FILE|-
 *   bench-analyze --wait-final N --timeout-s S FILE
 *   bench-analyze --enqueue-log ELOG --warmup-s W FILE
 *
 * The second form follows a log that the simulator is still writing until N
 * batches have become final (exit 0) or S seconds have passed (exit 3); it
 * reads only what was appended since its last look, so waiting costs next
 * to nothing, unlike polling the database or /_sim/stats.
 *
 * Exit status: 0 on success, 1 when the log cannot be read or holds no
 * batch that became final, 2 on bad usage, 3 on a wait that timed out.
 */
#include "openloop.h"
#include "simlog.h"

#include "common/err.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { EXIT_USAGE = 2, EXIT_TIMEOUT = 3 };

/* How often a follower looks for new lines. */
#define FOLLOW_PERIOD_NS (50L * 1000L * 1000L)

static bool is_final_status(const char *s)
{
    return s &&
           (strcmp(s, "Committed") == 0 || strcmp(s, "Valid") == 0 || strcmp(s, "Invalid") == 0);
}

static enum qw_simlog_kind kind_of(const char *ev)
{
    if (!ev)
        return QW_SIMLOG_OTHER;
    if (strcmp(ev, "post") == 0)
        return QW_SIMLOG_POST;
    if (strcmp(ev, "get") == 0)
        return QW_SIMLOG_GET;
    if (strcmp(ev, "status") == 0)
        return QW_SIMLOG_STATUS;
    return QW_SIMLOG_OTHER;
}

/* Turns one parsed line into an event; strings point into `obj`. */
static int to_event(json_t *obj, struct qw_simlog_event *ev)
{
    json_t *t = json_object_get(obj, "t");
    if (!json_is_integer(t))
        return QW_ERR_INVALID;
    memset(ev, 0, sizeof(*ev));
    ev->t_us = (int64_t)json_integer_value(t);
    ev->kind = kind_of(json_string_value(json_object_get(obj, "ev")));
    ev->service = json_string_value(json_object_get(obj, "service"));
    ev->batch = json_string_value(json_object_get(obj, "batch"));
    json_t *code = json_object_get(obj, "code");
    ev->code = json_is_integer(code) ? (int)json_integer_value(code) : 0;
    ev->from_final = is_final_status(json_string_value(json_object_get(obj, "from")));
    ev->to_final = is_final_status(json_string_value(json_object_get(obj, "to")));
    return QW_OK;
}

/*
 * Parses and feeds one complete line to `log` and, if not NULL, `ol`.
 * Returns QW_OK, QW_ERR_INVALID, QW_ERR_NOMEM.
 */
static int feed_line(struct qw_simlog *log, struct qw_openloop *ol, const char *line, size_t len)
{
    json_error_t jerr;
    json_t *obj = json_loadb(line, len, 0, &jerr);
    struct qw_simlog_event ev;
    int rc = QW_ERR_INVALID;
    if (json_is_object(obj) && to_event(obj, &ev) == QW_OK) {
        rc = qw_simlog_feed(log, &ev);
        if (rc == QW_OK && ol)
            rc = qw_openloop_feed(ol, &ev);
    }
    json_decref(obj);
    return rc;
}

/* Reader state over one log file. */
struct reader {
    FILE *in;              /* the log */
    const char *name;      /* for messages */
    char *line;            /* getline buffer, owned */
    size_t cap;            /* its capacity */
    unsigned long lineno;  /* complete lines read */
    unsigned long skipped; /* lines that were not events */
};

/*
 * Feeds every complete line up to the end of the file. With `follow`, a
 * last line without its newline (still being written) is left for the next
 * call. Returns QW_OK, QW_ERR_NOMEM or QW_ERR_IO.
 */
static int read_available(struct reader *r, struct qw_simlog *log, struct qw_openloop *ol,
                          bool follow)
{
    for (;;) {
        long start = follow ? ftell(r->in) : 0;
        ssize_t len = getline(&r->line, &r->cap, r->in);
        if (len == -1)
            break;
        if (follow && r->line[len - 1] != '\n') {
            if (fseek(r->in, start, SEEK_SET) != 0)
                return QW_ERR_IO;
            break;
        }
        r->lineno++;
        if (len <= 1)
            continue;
        int rc = feed_line(log, ol, r->line, (size_t)len);
        if (rc == QW_ERR_NOMEM) {
            fprintf(stderr, "bench-analyze: out of memory at line %lu\n", r->lineno);
            return rc;
        }
        if (rc != QW_OK && r->skipped++ < 5)
            fprintf(stderr, "bench-analyze: %s:%lu: line skipped\n", r->name, r->lineno);
    }
    if (ferror(r->in)) {
        perror(r->name);
        return QW_ERR_IO;
    }
    clearerr(r->in);
    return QW_OK;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Follows the log until `want` batches are final or `timeout_s` passes. */
static int wait_final(struct reader *r, struct qw_simlog *log, uint64_t want, double timeout_s)
{
    double deadline = mono_s() + timeout_s;
    for (;;) {
        int rc = read_available(r, log, NULL, true);
        if (rc != QW_OK)
            return 1;
        if (qw_simlog_batches_final(log) >= want)
            return 0;
        if (mono_s() >= deadline) {
            fprintf(stderr, "bench-analyze: %llu of %llu batches final after %.1f s\n",
                    (unsigned long long)qw_simlog_batches_final(log), (unsigned long long)want,
                    timeout_s);
            return EXIT_TIMEOUT;
        }
        struct timespec nap = {0, FOLLOW_PERIOD_NS};
        while (nanosleep(&nap, &nap) != 0 && errno == EINTR)
            ;
    }
}

static void print_figures(const struct qw_simlog_figures *f, unsigned long skipped)
{
    printf("batches=%llu posts=%llu posts_202=%llu posts_429=%llu posts_other=%llu gets=%llu "
           "first_post_us=%lld last_final_us=%lld span_s=%.3f batches_per_s=%.1f "
           "requests_per_batch=%.3f turnarounds=%llu turnaround_p50_ms=%.2f "
           "turnaround_p99_ms=%.2f turnaround_max_ms=%.2f turnaround_mean_ms=%.2f "
           "skipped_lines=%lu\n",
           (unsigned long long)f->batches_final, (unsigned long long)f->posts,
           (unsigned long long)f->posts_202, (unsigned long long)f->posts_429,
           (unsigned long long)f->posts_other, (unsigned long long)f->gets,
           (long long)f->first_post_us, (long long)f->last_final_us, f->span_s, f->batches_per_s,
           f->requests_per_batch, (unsigned long long)f->turnarounds,
           (double)f->turnaround_p50_us / 1000.0, (double)f->turnaround_p99_us / 1000.0,
           (double)f->turnaround_max_us / 1000.0, f->turnaround_mean_us / 1000.0, skipped);
}

static int usage(void)
{
    fprintf(stderr, "usage: bench-analyze SIM-EVENT-LOG.ndjson|-\n"
                    "       bench-analyze --wait-final N --timeout-s S SIM-EVENT-LOG.ndjson\n"
                    "       bench-analyze --enqueue-log ELOG --warmup-s W SIM-EVENT-LOG.ndjson\n");
    return EXIT_USAGE;
}

static bool parse_number(const char *text, double min, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v >= min))
        return false;
    *out = v;
    return true;
}

/* Reads bench-load's "batch_id<TAB>service_id<TAB>t_us" lines into `ol`. */
static int read_enqueue_log(const char *path, struct qw_openloop *ol)
{
    FILE *in = fopen(path, "r");
    if (!in) {
        perror(path);
        return QW_ERR_IO;
    }
    char id[160], service[64];
    long long t_us;
    int rc = QW_OK;
    unsigned long lineno = 0;
    int got;
    while ((got = fscanf(in, "%159s %63s %lld", id, service, &t_us)) == 3) {
        lineno++;
        rc = qw_openloop_enqueued(ol, id, service, (int64_t)t_us);
        if (rc != QW_OK) {
            fprintf(stderr, "bench-analyze: %s:%lu: bad enqueue record\n", path, lineno);
            break;
        }
    }
    if (rc == QW_OK && got != EOF) {
        fprintf(stderr, "bench-analyze: %s: unreadable after line %lu\n", path, lineno);
        rc = QW_ERR_INVALID;
    }
    fclose(in);
    return rc;
}

static void print_openloop(const struct qw_openloop_figures *f)
{
    printf("w5_enqueued=%llu w5_measured=%llu w5_not_posted=%llu w5_prev_not_final=%llu "
           "w5_p50_ms=%.2f w5_p99_ms=%.2f w5_max_ms=%.2f "
           "w5_idle=%llu w5_idle_p50_ms=%.2f w5_idle_p99_ms=%.2f w5_idle_max_ms=%.2f "
           "w5_next=%llu w5_next_p50_ms=%.2f w5_next_p99_ms=%.2f w5_next_max_ms=%.2f\n",
           (unsigned long long)f->enqueued, (unsigned long long)f->measured,
           (unsigned long long)f->not_posted, (unsigned long long)f->prev_not_final,
           (double)f->all.p50_us / 1000.0, (double)f->all.p99_us / 1000.0,
           (double)f->all.max_us / 1000.0, (unsigned long long)f->idle.n,
           (double)f->idle.p50_us / 1000.0, (double)f->idle.p99_us / 1000.0,
           (double)f->idle.max_us / 1000.0, (unsigned long long)f->next.n,
           (double)f->next.p50_us / 1000.0, (double)f->next.p99_us / 1000.0,
           (double)f->next.max_us / 1000.0);
}

int main(int argc, char **argv)
{
    double want = 0, timeout_s = 0, warmup_s = 0;
    const char *path;
    const char *enqueue_log = NULL;
    bool waiting = false;
    if (argc == 2 && strcmp(argv[1], "--help") != 0) {
        path = argv[1];
    } else if (argc == 6 && strcmp(argv[1], "--wait-final") == 0 &&
               strcmp(argv[3], "--timeout-s") == 0 && parse_number(argv[2], 1, &want) &&
               parse_number(argv[4], 0, &timeout_s) && strcmp(argv[5], "-") != 0) {
        path = argv[5];
        waiting = true;
    } else if (argc == 6 && strcmp(argv[1], "--enqueue-log") == 0 &&
               strcmp(argv[3], "--warmup-s") == 0 && parse_number(argv[4], 0, &warmup_s)) {
        enqueue_log = argv[2];
        path = argv[5];
    } else {
        return usage();
    }
    struct reader r = {.name = path};
    r.in = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!r.in) {
        perror(path);
        return 1;
    }
    struct qw_simlog *log = qw_simlog_new();
    struct qw_openloop *ol = enqueue_log ? qw_openloop_new() : NULL;
    if (!log || (enqueue_log && !ol)) {
        fprintf(stderr, "bench-analyze: out of memory\n");
        return 1;
    }
    int rc;
    if (waiting) {
        rc = wait_final(&r, log, (uint64_t)want, timeout_s);
    } else {
        rc = ol && read_enqueue_log(enqueue_log, ol) != QW_OK ? 1 : 0;
        if (rc == 0)
            rc = read_available(&r, log, ol, false) == QW_OK ? 0 : 1;
        if (rc == 0) {
            struct qw_simlog_figures f;
            qw_simlog_figures(log, &f);
            print_figures(&f, r.skipped);
            if (f.batches_final == 0) {
                fprintf(stderr, "bench-analyze: no batch became final in %s\n", path);
                rc = 1;
            }
        }
        if (rc == 0 && ol) {
            struct qw_openloop_figures of;
            if (qw_openloop_figures(ol, (int64_t)(warmup_s * 1e6), &of) != QW_OK) {
                fprintf(stderr, "bench-analyze: out of memory\n");
                rc = 1;
            } else {
                print_openloop(&of);
            }
        }
    }
    free(r.line);
    if (r.in != stdin)
        fclose(r.in);
    qw_simlog_free(log);
    qw_openloop_free(ol);
    return rc;
}
