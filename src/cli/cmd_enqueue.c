/* `queuer enqueue`: one batch from a payload file, or many from a TSV stream. */
#include "cli/cli.h"
#include "config/config.h"
#include "db/db.h"
#include "ingest/enqueue.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DUPLICATE_NOTES 20 /* duplicates listed one by one before a summary */

static void usage(FILE *out)
{
    fprintf(out, "usage: queuer enqueue [-c FILE] --service S --batch-id ID --payload-file F|-\n"
                 "       queuer enqueue [-c FILE] --tsv FILE|- [--skip-invalid]\n"
                 "\n"
                 "Enqueues one batch (the payload file holds the raw BatchList bytes), or one\n"
                 "batch per line 'service_id<TAB>batch_id<TAB>hex(payload)' of a TSV file or\n"
                 "stdin ('-'; blank lines and '#' comments are skipped).\n"
                 "\n"
                 "Every line is checked before anything is written; without --skip-invalid a\n"
                 "single bad line loads nothing. With it, the good lines are loaded and each\n"
                 "skipped line is reported. An identical batch that is already enqueued is a\n"
                 "no-op (reported as a duplicate), so a load can be re-run safely.\n"
                 "\n"
                 "Back pressure: a service whose backlog reaches the high mark is refused\n"
                 "until it is below the low mark (queuer.settings). When connected as the\n"
                 "schema owner, ingest.high / ingest.low from the configuration (or\n"
                 "QUEUER_INGEST_HIGH / _LOW) override them for this command (high = 0 turns\n"
                 "back pressure off); for any other role setting them is an error.\n"
                 "\n"
                 "exit status: 0 done (duplicates included); 64 usage; 65 invalid input, a\n"
                 "batch_id already used with other content, or --skip-invalid with no line\n"
                 "stored; 66 input unreadable; 69 database\n"
                 "unreachable; 75 back pressure: a service's backlog is at ingest.high, retry\n"
                 "once it is below ingest.low; 78 bad configuration.\n");
}

struct args {
    const char *config;       /* -c FILE, or NULL */
    const char *service;      /* --service */
    const char *batch_id;     /* --batch-id */
    const char *payload_file; /* --payload-file, "-" = stdin */
    const char *tsv;          /* --tsv, "-" = stdin */
    int skip_invalid;         /* bool: --skip-invalid */
};

/* Returns -1 to go on, else the exit code (help or usage error). */
static int parse_args(int argc, char **argv, struct args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout);
            return QW_EXIT_OK;
        }
        int r = qw_cli_config_opt(argc, argv, &i, &a->config);
        if (r == 1)
            continue;
        if (r < 0)
            return QW_EXIT_USAGE;
        if (strcmp(arg, "--skip-invalid") == 0) {
            a->skip_invalid = 1;
            continue;
        }
        const char **slot = NULL;
        if (strcmp(arg, "--service") == 0)
            slot = &a->service;
        else if (strcmp(arg, "--batch-id") == 0)
            slot = &a->batch_id;
        else if (strcmp(arg, "--payload-file") == 0)
            slot = &a->payload_file;
        else if (strcmp(arg, "--tsv") == 0)
            slot = &a->tsv;
        if (!slot) {
            fprintf(stderr, "queuer enqueue: unknown argument '%s'\n", arg);
            usage(stderr);
            return QW_EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "queuer enqueue: %s needs a value\n", arg);
            return QW_EXIT_USAGE;
        }
        *slot = argv[++i];
    }
    int single = a->service || a->batch_id || a->payload_file;
    if (a->tsv && single) {
        fprintf(stderr, "queuer enqueue: --tsv cannot be combined with --service, --batch-id "
                        "or --payload-file\n");
        return QW_EXIT_USAGE;
    }
    if (!a->tsv && !(a->service && a->batch_id && a->payload_file)) {
        fprintf(stderr, "queuer enqueue: give --tsv FILE, or all of --service, --batch-id and "
                        "--payload-file\n");
        usage(stderr);
        return QW_EXIT_USAGE;
    }
    if (!a->tsv && a->skip_invalid) {
        fprintf(stderr, "queuer enqueue: --skip-invalid applies to --tsv only\n");
        return QW_EXIT_USAGE;
    }
    return -1;
}

static int open_input(const char *path, FILE **out)
{
    if (strcmp(path, "-") == 0) {
        *out = stdin;
        return QW_EXIT_OK;
    }
    *out = fopen(path, "rb");
    if (!*out) {
        fprintf(stderr, "queuer enqueue: cannot open %s: %s\n", path, strerror(errno));
        return QW_EXIT_NOINPUT;
    }
    return QW_EXIT_OK;
}

/*
 * Reads at most `max` + 1 bytes of `in` into a malloc'd buffer; one byte more
 * than `max` is enough to know the payload is too large.
 */
static int read_payload(FILE *in, const char *path, size_t max, uint8_t **out, size_t *len)
{
    size_t cap = max + 1;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        fprintf(stderr, "queuer enqueue: out of memory\n");
        return QW_EXIT_FAILURE;
    }
    size_t n = fread(buf, 1, cap, in);
    if (ferror(in)) {
        fprintf(stderr, "queuer enqueue: cannot read %s: %s\n", path, strerror(errno));
        free(buf);
        return QW_EXIT_NOINPUT;
    }
    if (n > max) {
        fprintf(stderr, "queuer enqueue: invalid: payload %s is more than %zu bytes, the limit\n",
                path, max);
        free(buf);
        return QW_EXIT_DATAERR;
    }
    *out = buf;
    *len = n;
    return QW_EXIT_OK;
}

static int exit_for(int rc)
{
    if (rc == QW_ERR_OUTCOME_UNKNOWN)
        return QW_EXIT_UNAVAILABLE;
    if (rc == QW_ERR_IO)
        return QW_EXIT_NOINPUT;
    return qw_cli_exit_for(rc);
}

static int enqueue_one(struct qw_db *db, const struct qw_enqueue_opts *opts, const struct args *a,
                       const uint8_t *payload, size_t len)
{
    struct qw_error err;
    qw_error_clear(&err);
    enum qw_enqueue_outcome outcome = QW_ENQ_INVALID;
    int rc = qw_enqueue_one(db, opts, a->service, a->batch_id, payload, len, &outcome, &err);
    if (rc == QW_OK && outcome == QW_ENQ_DUPLICATE) {
        fprintf(stderr,
                "queuer enqueue: note: batch %.16s... is already enqueued with the same "
                "service and payload; nothing to do\n",
                a->batch_id);
        printf("duplicate %s\n", a->batch_id);
    } else if (rc == QW_OK) {
        printf("enqueued %s\n", a->batch_id);
    } else if (rc == QW_ERR_BACKPRESSURE) {
        fprintf(stderr, "queuer enqueue: back pressure: %s\n", err.msg);
    } else if (rc == QW_ERR_DUPLICATE) {
        fprintf(stderr, "queuer enqueue: conflict: %s\n", err.msg);
    } else if (rc == QW_ERR_INVALID) {
        fprintf(stderr, "queuer enqueue: invalid: %s\n", err.msg);
    } else {
        fprintf(stderr, "queuer enqueue: %s\n", err.msg);
    }
    return exit_for(rc);
}

/* Prints each issue of a bulk load to stderr (duplicates only up to a cap). */
struct issue_printer {
    long duplicates; /* duplicate notes seen */
};

static void print_issue(void *ctx, const struct qw_enqueue_issue *issue)
{
    struct issue_printer *p = ctx;
    if (issue->outcome == QW_ENQ_DUPLICATE) {
        if (++p->duplicates > MAX_DUPLICATE_NOTES)
            return;
        fprintf(stderr, "queuer enqueue: line %ld: note: duplicate (no-op): %s\n", issue->line_no,
                issue->reason);
        return;
    }
    fprintf(stderr, "queuer enqueue: line %ld: %s: %s\n", issue->line_no,
            qw_enqueue_outcome_name(issue->outcome), issue->reason);
}

static int enqueue_tsv(struct qw_db *db, const struct qw_enqueue_opts *opts, FILE *in)
{
    struct qw_error err;
    qw_error_clear(&err);
    struct qw_enqueue_report report;
    struct issue_printer printer = {0};
    int rc = qw_enqueue_bulk(db, opts, in, print_issue, &printer, &report, &err);
    if (printer.duplicates > MAX_DUPLICATE_NOTES)
        fprintf(stderr, "queuer enqueue: ... and %ld more duplicates\n",
                printer.duplicates - MAX_DUPLICATE_NOTES);
    if (rc != QW_OK)
        fprintf(stderr, "queuer enqueue: %s\n", err.msg);
    long skipped = report.invalid + report.conflicts + report.backpressure;
    printf("%ld enqueued, %ld duplicates (idempotent), %ld %s, of %ld batch lines\n",
           report.enqueued, report.duplicates, skipped, report.committed ? "skipped" : "rejected",
           report.records);
    if (rc == QW_OK && report.backpressure > 0) {
        fprintf(stderr,
                "queuer enqueue: %ld line(s) refused by back pressure; run the load again once "
                "the backlog has drained (stored lines count as duplicates)\n",
                report.backpressure);
        return QW_EXIT_TEMPFAIL;
    }
    if (rc == QW_OK && skipped > 0 && report.enqueued + report.duplicates == 0) {
        fprintf(stderr, "queuer enqueue: no line was stored: all %ld batch line(s) were skipped\n",
                skipped);
        return QW_EXIT_DATAERR;
    }
    return exit_for(rc);
}

int qw_cmd_enqueue(int argc, char **argv)
{
    struct args a = {0};
    int code = parse_args(argc, argv, &a);
    if (code >= 0)
        return code;

    struct qw_config cfg;
    if (qw_cli_load_config(a.config, &cfg) != QW_OK)
        return QW_EXIT_CONFIG;
    struct qw_enqueue_opts opts = {
        .ingest_high = cfg.ingest_high,
        .ingest_low = cfg.ingest_low,
        .max_payload_bytes = (size_t)cfg.ingest_max_payload_bytes,
        .skip_invalid = a.skip_invalid,
    };

    /* Input problems are reported before the database is contacted. */
    FILE *in = NULL;
    uint8_t *payload = NULL;
    size_t len = 0;
    code = open_input(a.tsv ? a.tsv : a.payload_file, &in);
    if (code == QW_EXIT_OK && !a.tsv) {
        code = read_payload(in, a.payload_file, opts.max_payload_bytes, &payload, &len);
        if (in != stdin)
            fclose(in);
        in = NULL;
    }
    if (code != QW_EXIT_OK) {
        qw_config_free(&cfg);
        return code;
    }

    struct qw_db *db = NULL;
    int rc = qw_cli_connect(&cfg, "queuer-enqueue", &db);
    qw_config_free(&cfg);
    if (rc == QW_OK) {
        code = a.tsv ? enqueue_tsv(db, &opts, in) : enqueue_one(db, &opts, &a, payload, len);
        qw_db_close(db);
    } else {
        code = qw_cli_exit_for(rc);
    }
    if (in && in != stdin)
        fclose(in);
    free(payload);
    return code;
}
