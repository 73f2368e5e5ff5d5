/*
 * qw-check: checks the invariants I1-I4 (tools/check/history.h) over the
 * simulator's NDJSON event log and the queuer database, after a run has
 * drained, and prints a table of figures.
 *
 * The database is read through src/db (libpq stays inside that module, and
 * the client-side deadline and error classification come with it) in one
 * REPEATABLE READ READ ONLY transaction, so batches and history are one
 * snapshot. Reading psql output instead would mean parsing free-text
 * history details out of a text table; a typed result needs no quoting
 * rules. The connection comes from the same configuration as `queuer`
 * (-c FILE or QUEUER_CONFIG, QUEUER_DATABASE_CONNINFO, the password from
 * QUEUER_DATABASE_PASSWORD or database.password_file), or --conninfo.
 *
 * Exit status: 0 no violation, 1 violations, 2 bad usage, unreadable
 * input or a database error.
 */
#include "check/history.h"
#include "common/err.h"
#include "config/config.h"
#include "db/db.h"
#include "db/txn.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

#define EXIT_VIOLATIONS 1
#define EXIT_TROUBLE 2

/* One snapshot: the order of each service's batches and every reason given. */
static const char sql_batches[] =
    "SELECT batch_id, service_id, coalesce(status, '') FROM queuer.batches "
    "ORDER BY service_id, created_at, batch_id COLLATE \"C\"";
static const char sql_submitting[] =
    "SELECT batch_id, detail FROM queuer.batch_history WHERE to_status = 'Submitting'";

struct options {
    const char *events;   /* NDJSON event log */
    const char *config;   /* -c FILE, NULL = QUEUER_CONFIG or none */
    const char *conninfo; /* --conninfo, overrides the configuration */
    const char *kv_path;  /* --kv FILE: key=value figures for scripts */
    long max_report;      /* violations printed per invariant */
};

struct reporter {
    long max_report;                /* print at most this many per invariant */
    long seen[QW_CHECK_INVARIANTS]; /* reported so far per invariant */
};

static void usage(FILE *out)
{
    fprintf(out, "usage: qw-check --events FILE [-c CONFIG] [--conninfo CONNINFO] [--kv FILE]\n"
                 "                [--max-report N]\n"
                 "Checks a drained queuer run against the scabbard-sim event log:\n"
                 "  I1 every batch final, and its final status backed by the ledger\n"
                 "  I2 never two batches of one service pending at the ledger at once\n"
                 "  I3 per service, the ledger's first-acceptance order = creation order\n"
                 "  I4 every duplicate POST has a recorded resubmission reason\n"
                 "Prints a table of figures; --kv also writes them as key=value lines.\n"
                 "The database comes from the queuer configuration (-c, QUEUER_CONFIG,\n"
                 "QUEUER_DATABASE_CONNINFO, QUEUER_DATABASE_PASSWORD) or --conninfo.\n"
                 "Exit status: 0 clean, 1 violations, 2 error.\n");
}

static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct option longs[] = {
        {"events", required_argument, NULL, 'e'},
        {"config", required_argument, NULL, 'c'},
        {"conninfo", required_argument, NULL, 'd'},
        {"kv", required_argument, NULL, 'k'},
        {"max-report", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof(*o));
    o->max_report = 10;
    for (;;) {
        int opt = getopt_long(argc, argv, "c:h", longs, NULL);
        if (opt == -1)
            break;
        char *end = NULL;
        switch (opt) {
        case 'e':
            o->events = optarg;
            break;
        case 'c':
            o->config = optarg;
            break;
        case 'd':
            o->conninfo = optarg;
            break;
        case 'k':
            o->kv_path = optarg;
            break;
        case 'm':
            o->max_report = strtol(optarg, &end, 10);
            if (!*optarg || *end || o->max_report < 0) {
                fprintf(stderr, "qw-check: --max-report needs a number >= 0\n");
                return EXIT_TROUBLE;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return EXIT_TROUBLE;
        }
    }
    if (optind < argc || !o->events) {
        usage(stderr);
        return EXIT_TROUBLE;
    }
    return -1;
}

static void on_violation(void *ctx, int invariant, const char *message)
{
    struct reporter *r = ctx;
    long n = ++r->seen[invariant - 1];
    if (n <= r->max_report)
        fprintf(stderr, "qw-check: I%d violated: %s\n", invariant, message);
    else if (n == r->max_report + 1)
        fprintf(stderr, "qw-check: I%d: further violations not shown\n", invariant);
}

/* Replays the event log; a truncated last line (a killed simulator) is skipped. */
static int read_events(const char *path, struct qw_check *c, long long *truncated)
{
    FILE *in = fopen(path, "r");
    if (!in) {
        fprintf(stderr, "qw-check: cannot open %s: %s\n", path, strerror(errno));
        return EXIT_TROUBLE;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long long lineno = 0;
    int rc = 0;
    *truncated = 0;
    while ((len = getline(&line, &cap, in)) >= 0) {
        lineno++;
        bool complete = len > 0 && line[len - 1] == '\n';
        if (len == 0 || (len == 1 && complete))
            continue;
        struct qw_check_event ev;
        char why[200];
        if (qw_check_event_parse(line, (size_t)len, &ev, why, sizeof(why)) != 0) {
            if (!complete) {
                (*truncated)++;
                fprintf(stderr, "qw-check: %s:%lld: skipping a truncated last line\n", path,
                        lineno);
                continue;
            }
            fprintf(stderr, "qw-check: %s:%lld: %s\n", path, lineno, why);
            rc = EXIT_TROUBLE;
            break;
        }
        if (qw_check_replay(c, &ev) != 0) {
            fprintf(stderr, "qw-check: out of memory\n");
            rc = EXIT_TROUBLE;
            break;
        }
    }
    if (rc == 0 && ferror(in)) {
        fprintf(stderr, "qw-check: reading %s: %s\n", path, strerror(errno));
        rc = EXIT_TROUBLE;
    }
    free(line);
    fclose(in);
    return rc;
}

static int connect_db(const struct options *o, struct qw_db **db)
{
    struct qw_config cfg;
    struct qw_error err;
    qw_error_clear(&err);
    const char *path = o->config;
    if (!path && getenv("QUEUER_CONFIG") && *getenv("QUEUER_CONFIG"))
        path = getenv("QUEUER_CONFIG");
    if (qw_config_load(&cfg, path, environ, &err) != QW_OK) {
        fprintf(stderr, "qw-check: %s\n", err.msg);
        return EXIT_TROUBLE;
    }
    struct qw_db_opts opts = {
        .conninfo = o->conninfo ? o->conninfo : cfg.db_conninfo,
        .password = cfg.db_password,
        .app_name = "qw-check",
        .connect_timeout_s = cfg.db_connect_timeout_s,
        .query_timeout_ms = 120000,
    };
    int rc = qw_db_connect(db, &opts, &err);
    qw_config_free(&cfg);
    if (rc != QW_OK) {
        fprintf(stderr, "qw-check: cannot connect to the database: %s\n", err.msg);
        return EXIT_TROUBLE;
    }
    return 0;
}

static int read_database(struct qw_db *db, struct qw_check *c)
{
    struct qw_error err;
    qw_error_clear(&err);
    struct qw_db_res *res = NULL;
    int rc = qw_txn_begin_snapshot(db, &err);
    if (rc == QW_OK)
        rc = qw_db_query_sql(db, sql_batches, 0, NULL, &res, &err);
    if (rc == QW_OK) {
        for (int i = 0; i < qw_db_res_rows(res) && rc == QW_OK; i++) {
            if (qw_check_add_batch(c, qw_db_res_get(res, i, 0), qw_db_res_get(res, i, 1),
                                   qw_db_res_get(res, i, 2)) != 0)
                rc = qw_error_set(&err, QW_ERR_NOMEM, "out of memory (or a repeated batch id)");
        }
        qw_db_res_free(res);
        res = NULL;
    }
    if (rc == QW_OK)
        rc = qw_db_query_sql(db, sql_submitting, 0, NULL, &res, &err);
    if (rc == QW_OK) {
        for (int i = 0; i < qw_db_res_rows(res) && rc == QW_OK; i++) {
            const char *detail = qw_db_res_isnull(res, i, 1) ? NULL : qw_db_res_get(res, i, 1);
            if (qw_check_add_submitting(c, qw_db_res_get(res, i, 0), detail) != 0)
                rc = qw_error_set(&err, QW_ERR_NOMEM, "out of memory");
        }
        qw_db_res_free(res);
    }
    if (rc == QW_OK)
        rc = qw_txn_commit(db, &err);
    if (rc != QW_OK) {
        fprintf(stderr, "qw-check: reading the database: %s\n", err.msg);
        return EXIT_TROUBLE;
    }
    return 0;
}

/* One figure: its key for --kv and its label for the table. */
struct figure {
    const char *key;   /* key=value name */
    const char *label; /* table label */
    long long value;   /* the count */
};

static size_t collect(const struct qw_check_figures *f, long long truncated, struct figure *out)
{
    size_t n = 0;
    out[n++] = (struct figure){"batches", "batches in queuer.batches", f->batches};
    out[n++] = (struct figure){"final", "  final (Committed/Valid/Invalid)", f->final_batches};
    out[n++] = (struct figure){"services", "services", f->services};
    out[n++] = (struct figure){"events", "ledger events replayed", f->events};
    out[n++] = (struct figure){"truncated_lines", "  truncated last lines skipped", truncated};
    out[n++] = (struct figure){"posts", "POST requests", f->posts};
    out[n++] = (struct figure){"posts_202", "  202 accepted", f->posts_202};
    out[n++] = (struct figure){"posts_429", "  429 back pressure", f->posts_429};
    out[n++] = (struct figure){"posts_other", "  other errors (4xx/5xx/dropped)", f->posts_other};
    out[n++] = (struct figure){"posts_reached", "  batches taken by the ledger", f->posts_reached};
    out[n++] = (struct figure){"gets", "status requests (GET)", f->gets};
    out[n++] = (struct figure){"restarts", "ledger restarts", f->restarts};
    out[n++] = (struct figure){"submitting_rows", "'Submitting' history rows", f->submitting_rows};
    out[n++] =
        (struct figure){"resubmit_reasons", "  with a resubmission reason", f->resubmit_reasons};
    out[n++] = (struct figure){"duplicate_batches", "duplicates: batches taken twice or more",
                               f->duplicate_batches};
    out[n++] =
        (struct figure){"duplicate_posts", "duplicates: extra acceptances", f->duplicate_posts};
    return n;
}

static void print_figures(const struct qw_check_figures *f, long long truncated, FILE *out)
{
    struct figure figs[24];
    size_t n = collect(f, truncated, figs);
    fprintf(out, "qw-check figures\n");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "  %-42s %12lld\n", figs[i].label, figs[i].value);
    long long total = 0;
    for (int i = 0; i < QW_CHECK_INVARIANTS; i++) {
        char label[80];
        snprintf(label, sizeof(label), "I%d %s", i + 1, qw_check_invariant_name(i + 1));
        fprintf(out, "  %-42s %12lld violation(s)\n", label, f->violations[i]);
        total += f->violations[i];
    }
    if (total)
        fprintf(out, "  result: FAILED, %lld violation(s)\n", total);
    else
        fprintf(out, "  result: OK, no violations\n");
}

static int write_kv(const char *path, const struct qw_check_figures *f, long long truncated)
{
    FILE *out = fopen(path, "w");
    if (!out) {
        fprintf(stderr, "qw-check: cannot write %s: %s\n", path, strerror(errno));
        return EXIT_TROUBLE;
    }
    struct figure figs[24];
    size_t n = collect(f, truncated, figs);
    long long total = 0;
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%s=%lld\n", figs[i].key, figs[i].value);
    for (int i = 0; i < QW_CHECK_INVARIANTS; i++) {
        fprintf(out, "violations_i%d=%lld\n", i + 1, f->violations[i]);
        total += f->violations[i];
    }
    fprintf(out, "violations=%lld\n", total);
    if (fclose(out) != 0) {
        fprintf(stderr, "qw-check: writing %s: %s\n", path, strerror(errno));
        return EXIT_TROUBLE;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    struct reporter rep = {.max_report = o.max_report};
    struct qw_check *c = NULL;
    struct qw_db *db = NULL;
    long long truncated = 0;
    struct qw_check_figures fig;
    if (qw_check_new(on_violation, &rep, &c) != 0) {
        fprintf(stderr, "qw-check: out of memory\n");
        return EXIT_TROUBLE;
    }
    rc = read_events(o.events, c, &truncated);
    if (rc == 0)
        rc = connect_db(&o, &db);
    if (rc == 0)
        rc = read_database(db, c);
    if (rc == 0 && qw_check_finish(c, &fig) != 0) {
        fprintf(stderr, "qw-check: out of memory\n");
        rc = EXIT_TROUBLE;
    }
    if (rc == 0) {
        print_figures(&fig, truncated, stdout);
        if (o.kv_path)
            rc = write_kv(o.kv_path, &fig, truncated);
    }
    if (rc == 0) {
        for (int i = 0; i < QW_CHECK_INVARIANTS; i++) {
            if (fig.violations[i])
                rc = EXIT_VIOLATIONS;
        }
    }
    qw_db_close(db);
    qw_check_free(c);
    return rc;
}
