/* `queuer enqueue`: one batch from a payload file, or many from a TSV stream. */
#include "cli/cli.h"
#include "config/config.h"
#include "db/db.h"
#include "db/migrate.h"
#include "ingest/enqueue.h"
#include "ingest/tsv.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DUPLICATE_NOTES 20 /* duplicates listed one by one before a summary */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: queuer enqueue --service S --batch-id ID --payload-file F|- [--priority N]\n"
            "                      [--json]\n"
            "       queuer enqueue --tsv FILE|- [--skip-invalid] [--priority N] [--json]\n"
            "       (and the common options -c FILE, --database CONNINFO)\n"
            "\n"
            "Enqueues one batch (the payload file holds the raw BatchList bytes), or one\n"
            "batch per line 'service_id<TAB>batch_id<TAB>hex(payload)[<TAB>priority]' of a\n"
            "TSV file or stdin ('-'; blank lines and '#' comments are skipped).\n"
            "\n"
            "Priority: an integer from -1000 to 1000, default 0, higher first. When the\n"
            "ledger's capacity is short, services whose next batch has a higher priority\n"
            "go first (a waiting service gains one step per dlt.priority_aging_ms); a\n"
            "service's own batches always go in the order they were enqueued. --priority\n"
            "applies to the batch, or to every TSV line without a fourth field.\n"
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
            "  --json   print the result as one JSON object on stdout: {\"batch_id\",\n"
            "           \"outcome\"} for one batch; for --tsv {\"committed\", \"lines\",\n"
            "           \"batch_lines\", \"enqueued\", \"duplicates\", \"invalid\",\n"
            "           \"conflicts\", \"backpressure\", \"issues\": [{\"line\", \"outcome\",\n"
            "           \"batch_id\", \"reason\"}] (the first 100)}. Messages stay on stderr.\n"
            "\n"
            "Needs a role granted queuer_enqueuer (or queuer_worker) and a migrated schema.\n");
    qw_cli_help_common(out);
    fprintf(out, "  QUEUER_INGEST_HIGH, QUEUER_INGEST_LOW  back-pressure marks for this command\n"
                 "\n"
                 "exit status: 0 done (duplicates included); 1 failed (e.g. schema not\n"
                 "migrated); 64 usage; 65 invalid input, a batch_id already used with other\n"
                 "content, or --skip-invalid with no line stored; 66 input unreadable; 69\n"
                 "database unreachable; 75 back pressure: a service's backlog is at\n"
                 "ingest.high, retry once it is below ingest.low; 78 bad configuration.\n");
}

struct args {
    struct qw_cli_common common; /* -c FILE, --database */
    const char *service;         /* --service */
    const char *batch_id;        /* --batch-id */
    const char *payload_file;    /* --payload-file, "-" = stdin */
    const char *tsv;             /* --tsv, "-" = stdin */
    const char *priority;        /* --priority, or NULL (0) */
    int priority_value;          /* --priority as parsed, 0 without it */
    int skip_invalid;            /* bool: --skip-invalid */
    int json;                    /* bool: --json */
};

/* Returns -1 to go on, else the exit code (help or usage error). */
static int parse_args(int argc, char **argv, struct args *a)
{
    int i = 0, r;
    while ((r = qw_cli_next_arg(argc, argv, &i, &a->common, usage)) == QW_CLI_ARG) {
        const char *arg = argv[i];
        if (strcmp(arg, "--skip-invalid") == 0) {
            a->skip_invalid = 1;
            continue;
        }
        if (strcmp(arg, "--json") == 0) {
            a->json = 1;
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
        else if (strcmp(arg, "--priority") == 0)
            slot = &a->priority;
        if (!slot) {
            qw_cli_err("unknown argument '%s'", arg);
            usage(stderr);
            return QW_EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            qw_cli_err("%s needs a value", arg);
            return QW_EXIT_USAGE;
        }
        *slot = argv[++i];
    }
    if (r != QW_CLI_ARGS_END)
        return r;
    int single = a->service || a->batch_id || a->payload_file;
    if (a->tsv && single) {
        qw_cli_err("--tsv cannot be combined with --service, --batch-id "
                   "or --payload-file");
        return QW_EXIT_USAGE;
    }
    if (!a->tsv && !(a->service && a->batch_id && a->payload_file)) {
        qw_cli_err("give --tsv FILE, or all of --service, --batch-id and "
                   "--payload-file");
        usage(stderr);
        return QW_EXIT_USAGE;
    }
    if (!a->tsv && a->skip_invalid) {
        qw_cli_err("--skip-invalid applies to --tsv only");
        return QW_EXIT_USAGE;
    }
    if (a->priority && qw_tsv_parse_priority(a->priority, strlen(a->priority), &a->priority_value,
                                             NULL) != QW_OK) {
        qw_cli_err("--priority must be an integer from %d to %d, not '%s'", QW_PRIORITY_MIN,
                   QW_PRIORITY_MAX, a->priority);
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
        qw_cli_err("cannot open %s: %s", path, strerror(errno));
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
        qw_cli_err("out of memory");
        return QW_EXIT_FAILURE;
    }
    size_t n = fread(buf, 1, cap, in);
    if (ferror(in)) {
        qw_cli_err("cannot read %s: %s", path, strerror(errno));
        free(buf);
        return QW_EXIT_NOINPUT;
    }
    if (n > max) {
        qw_cli_err("invalid: payload %s is more than %zu bytes, the limit", path, max);
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

/* A database error of enqueue, with the step that helps: migrate, or the role needed. */
static int db_failure(const struct qw_error *err)
{
    return qw_cli_db_error(err, "a role granted queuer_enqueuer or queuer_worker");
}

static int enqueue_one(struct qw_db *db, const struct qw_enqueue_opts *opts, const struct args *a,
                       const uint8_t *payload, size_t len)
{
    struct qw_error err;
    qw_error_clear(&err);
    enum qw_enqueue_outcome outcome = QW_ENQ_INVALID;
    int rc = qw_enqueue_one(db, opts, a->service, a->batch_id, payload, len, &outcome, &err);
    if (rc == QW_OK && outcome == QW_ENQ_DUPLICATE)
        qw_cli_err("note: batch %.16s... is already enqueued with the same service and payload; "
                   "nothing to do",
                   a->batch_id);
    if (rc == QW_OK) {
        const char *word = outcome == QW_ENQ_DUPLICATE ? "duplicate" : "enqueued";
        if (a->json)
            qw_cli_print_json(json_pack("{s:s, s:s, s:s}", "batch_id", a->batch_id, "service_id",
                                        a->service, "outcome", word));
        else
            printf("%s %s\n", word, a->batch_id);
    } else if (rc == QW_ERR_BACKPRESSURE) {
        qw_cli_err("back pressure: %s", err.msg);
    } else if (rc == QW_ERR_DUPLICATE) {
        qw_cli_err("conflict: %s", err.msg);
    } else if (rc == QW_ERR_INVALID) {
        qw_cli_err("invalid: %s", err.msg);
    } else {
        db_failure(&err);
    }
    return exit_for(rc);
}

#define MAX_JSON_ISSUES 100 /* issues listed in --json output */

/* Prints each issue of a bulk load to stderr (duplicates only up to a cap). */
struct issue_printer {
    long duplicates; /* duplicate notes seen */
    json_t *issues;  /* with --json: the first MAX_JSON_ISSUES issues, else NULL */
};

static void print_issue(void *ctx, const struct qw_enqueue_issue *issue)
{
    struct issue_printer *p = ctx;
    if (p->issues && json_array_size(p->issues) < MAX_JSON_ISSUES)
        json_array_append_new(p->issues,
                              json_pack("{s:I, s:s, s:s, s:s}", "line", (json_int_t)issue->line_no,
                                        "outcome", qw_enqueue_outcome_name(issue->outcome),
                                        "batch_id", issue->batch_id, "reason", issue->reason));
    if (issue->outcome == QW_ENQ_DUPLICATE) {
        if (++p->duplicates > MAX_DUPLICATE_NOTES)
            return;
        qw_cli_err("line %ld: note: duplicate (already stored, no-op): %s", issue->line_no,
                   issue->reason);
        return;
    }
    qw_cli_err("line %ld: %s: %s", issue->line_no, qw_enqueue_outcome_name(issue->outcome),
               issue->reason);
}

/* The one-line summary of a bulk load, on stdout. */
static void print_summary(const struct qw_enqueue_report *r)
{
    char lines[64], dups[64];
    qw_cli_count(lines, sizeof(lines), r->records, "batch line", "batch lines");
    qw_cli_count(dups, sizeof(dups), r->duplicates, "duplicate", "duplicates");
    long left_out = r->invalid + r->conflicts + r->backpressure;
    if (r->committed)
        printf("%ld of %s enqueued; %s (already stored, no-op); %ld skipped "
               "(%ld invalid, %ld conflicting, %ld refused by back pressure)\n",
               r->enqueued, lines, dups, left_out, r->invalid, r->conflicts, r->backpressure);
    else
        printf("nothing enqueued from %s: %ld invalid, %ld conflicting, %ld refused by back "
               "pressure, %s\n",
               lines, r->invalid, r->conflicts, r->backpressure, dups);
}

static int enqueue_tsv(struct qw_db *db, const struct qw_enqueue_opts *opts, FILE *in, int json)
{
    struct qw_error err;
    qw_error_clear(&err);
    struct qw_enqueue_report report;
    struct issue_printer printer = {.issues = json ? json_array() : NULL};
    int rc = qw_enqueue_bulk(db, opts, in, print_issue, &printer, &report, &err);
    if (printer.duplicates > MAX_DUPLICATE_NOTES)
        qw_cli_err("... and %ld more duplicates", printer.duplicates - MAX_DUPLICATE_NOTES);
    int code = exit_for(rc);
    if (rc == QW_ERR_DB || rc == QW_ERR_SCHEMA)
        code = db_failure(&err);
    else if (rc != QW_OK)
        qw_cli_err("%s", err.msg);
    if (json)
        qw_cli_print_json(json_pack(
            "{s:b, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:o}", "committed", report.committed, "lines",
            (int)report.lines, "batch_lines", (int)report.records, "enqueued", (int)report.enqueued,
            "duplicates", (int)report.duplicates, "invalid", (int)report.invalid, "conflicts",
            (int)report.conflicts, "backpressure", (int)report.backpressure, "issues",
            printer.issues));
    else
        print_summary(&report);
    if (rc == QW_OK && report.backpressure > 0) {
        char refused[64];
        qw_cli_err("%s refused by back pressure; run the load again once the backlog has "
                   "drained (the stored lines then count as duplicates)",
                   qw_cli_count(refused, sizeof(refused), report.backpressure, "line", "lines"));
        return QW_EXIT_TEMPFAIL;
    }
    long skipped = report.invalid + report.conflicts + report.backpressure;
    if (rc == QW_OK && skipped > 0 && report.enqueued + report.duplicates == 0) {
        char lines[64];
        qw_cli_err(
            "no line was stored: all %s skipped",
            qw_cli_count(lines, sizeof(lines), skipped, "batch line was", "batch lines were"));
        return QW_EXIT_DATAERR;
    }
    return code;
}

int qw_cmd_enqueue(int argc, char **argv)
{
    struct args a = {0};
    int code = parse_args(argc, argv, &a);
    if (code >= 0)
        return code;

    struct qw_config cfg;
    if (qw_cli_load_config(&a.common, &cfg) != QW_OK)
        return QW_EXIT_CONFIG;
    struct qw_enqueue_opts opts = {
        .ingest_high = cfg.ingest_high,
        .ingest_low = cfg.ingest_low,
        .max_payload_bytes = (size_t)cfg.ingest_max_payload_bytes,
        .skip_invalid = a.skip_invalid,
        .priority = a.priority_value,
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
    /* (with the server's JIT setting: a bulk load of 100,000 lines ran
     * 10-25% faster with JIT on) */
    int rc = qw_cli_connect(&cfg, "queuer-enqueue", true, &db);
    qw_config_free(&cfg);
    struct qw_error err;
    qw_error_clear(&err);
    if (rc == QW_OK && qw_migrate_check(db, NULL, &err) != QW_OK) {
        code = db_failure(&err);
        qw_db_close(db);
    } else if (rc == QW_OK) {
        code =
            a.tsv ? enqueue_tsv(db, &opts, in, a.json) : enqueue_one(db, &opts, &a, payload, len);
        qw_db_close(db);
    } else {
        code = qw_cli_exit_for(rc);
    }
    if (in && in != stdin)
        fclose(in);
    free(payload);
    return code;
}
