/*
 * bench-analyze: reads a scabbard-sim NDJSON event log and prints the
 * benchmark's ledger-side figures as one line of key=value pairs (numbers
 * only, so bench/run.sh can read them without a JSON tool).
 *
 *   bench-analyze FILE|-
 *
 * Exit status: 0 on success, 1 when the log cannot be read or holds no
 * batch that became final, 2 on bad usage.
 */
#include "simlog.h"

#include "common/err.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_final_status(const char *s)
{
    return s && (strcmp(s, "Committed") == 0 || strcmp(s, "Valid") == 0 ||
                 strcmp(s, "Invalid") == 0);
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
           (long long)f->first_post_us, (long long)f->last_final_us, f->span_s,
           f->batches_per_s, f->requests_per_batch, (unsigned long long)f->turnarounds,
           (double)f->turnaround_p50_us / 1000.0, (double)f->turnaround_p99_us / 1000.0,
           (double)f->turnaround_max_us / 1000.0, f->turnaround_mean_us / 1000.0, skipped);
}

int main(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "--help") == 0) {
        fprintf(stderr, "usage: bench-analyze SIM-EVENT-LOG.ndjson|-\n");
        return 2;
    }
    FILE *in = strcmp(argv[1], "-") == 0 ? stdin : fopen(argv[1], "r");
    if (!in) {
        perror(argv[1]);
        return 1;
    }
    struct qw_simlog *log = qw_simlog_new();
    if (!log) {
        fprintf(stderr, "bench-analyze: out of memory\n");
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    unsigned long lineno = 0, skipped = 0;
    int rc = 0;
    while ((len = getline(&line, &cap, in)) != -1) {
        lineno++;
        if (len <= 1)
            continue;
        json_error_t jerr;
        json_t *obj = json_loadb(line, (size_t)len, 0, &jerr);
        struct qw_simlog_event ev;
        int frc = QW_ERR_INVALID;
        if (json_is_object(obj) && to_event(obj, &ev) == QW_OK)
            frc = qw_simlog_feed(log, &ev);
        json_decref(obj);
        if (frc == QW_ERR_NOMEM) {
            fprintf(stderr, "bench-analyze: out of memory at line %lu\n", lineno);
            rc = 1;
            break;
        }
        if (frc != QW_OK && skipped++ < 5)
            fprintf(stderr, "bench-analyze: %s:%lu: line skipped\n", argv[1], lineno);
    }
    if (ferror(in)) {
        perror(argv[1]);
        rc = 1;
    }
    free(line);
    if (in != stdin)
        fclose(in);
    if (rc == 0) {
        struct qw_simlog_figures f;
        qw_simlog_figures(log, &f);
        print_figures(&f, skipped);
        if (f.batches_final == 0) {
            fprintf(stderr, "bench-analyze: no batch became final in %s\n", argv[1]);
            rc = 1;
        }
    }
    qw_simlog_free(log);
    return rc;
}
