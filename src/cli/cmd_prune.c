/*
 * `queuer prune --older-than DURATION`: deletes final batches (Committed,
 * Valid, Invalid) that became final longer ago than DURATION, with their
 * history rows, in short transactions of --batch-size batches
 * (sql/ops_prune_chunk.sql: SKIP LOCKED, an index range on the time a batch
 * became final), then the enqueue log's rows older than DURATION
 * (sql/ops_prune_log.sql). Safe while workers run: workers never touch final
 * batches, and no transaction holds locks for longer than one chunk.
 */
#include "cli/cli.h"
#include "common/clock.h"
#include "common/duration.h"
#include "db/db.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CHUNK 1000 /* batches per transaction */
#define MAX_CHUNK 100000   /* largest --batch-size */
#define MAX_PAUSE_MS 60000 /* largest --pause-ms */
#define PRUNE_ROLE                                                                                 \
    "the schema owner, the role of queuer migrate: DELETE on queuer.batches and "                  \
    "queuer.batch_history, queuer.enqueue_log" /* named when permission is denied */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: queuer prune --older-than DURATION [--batch-size N] [--pause-ms N]\n"
            "                    [--dry-run] [--json] [-c FILE] [--database CONNINFO]\n"
            "\n"
            "Deletes final batches (Committed, Valid, Invalid) that reached their final\n"
            "status more than DURATION ago, and their history rows, then the enqueue log's\n"
            "rows (queuer.enqueue_log) older than DURATION. Unfinished batches and their\n"
            "history are never touched, nor are service claims (their epochs must keep\n"
            "counting up). A pruned batch id can be enqueued again as a new batch.\n"
            "\n"
            "  --older-than DURATION  e.g. 30d, 12h, 90m, 1d12h (units w d h m s)\n"
            "  --batch-size N         batches per transaction (default 1000, 1..100000)\n"
            "  --pause-ms N           pause between transactions (default 0, ..60000)\n"
            "  --dry-run              only count what would be deleted\n"
            "  --json                 print the result as one JSON object: {\"dry_run\",\n"
            "                         \"older_than\", \"cutoff\", \"batches\", \"committed\",\n"
            "                         \"valid\", \"invalid\", \"history_rows\",\n"
            "                         \"enqueue_log_rows\", \"transactions\", \"ms\"} (none of\n"
            "                         the last four with --dry-run)\n"
            "\n"
            "Each transaction deletes at most N batches, skipping rows someone else has\n"
            "locked, so it is safe while workers run. Needs DELETE on queuer.batches,\n"
            "queuer.batch_history and queuer.enqueue_log: run it as the schema owner (the\n"
            "role of queuer migrate).\n");
    qw_cli_help_common(out);
    fprintf(out, "\nexit status: 0 done; 1 failed part-way (what was removed stays removed; run\n"
                 "it again); 64 usage; 69 database unreachable; 78 bad configuration.\n");
}

struct args {
    struct qw_cli_common common; /* -c FILE, --database */
    int64_t older_s;             /* --older-than, seconds */
    int chunk;                   /* --batch-size */
    int pause_ms;                /* --pause-ms */
    int dry_run;                 /* bool: --dry-run */
    int json;                    /* bool: --json */
};

static int parse_int(const char *text, int min, int max, int *out)
{
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!*text || *end || v < min || v > max)
        return -1;
    *out = (int)v;
    return 0;
}

/* Returns -1 to go on, else the exit code of a usage error or --help. */
static int parse_args(int argc, char **argv, struct args *a)
{
    int have_age = 0;
    int i = 0, r;
    while ((r = qw_cli_next_arg(argc, argv, &i, &a->common, usage)) == QW_CLI_ARG) {
        const char *arg = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "--dry-run") == 0) {
            a->dry_run = 1;
        } else if (strcmp(arg, "--json") == 0) {
            a->json = 1;
        } else if (strcmp(arg, "--older-than") == 0 && value) {
            char why[200];
            if (qw_duration_parse(value, &a->older_s, why, sizeof(why)) != 0) {
                qw_cli_err("--older-than: %s", why);
                return QW_EXIT_USAGE;
            }
            have_age = 1;
            i++;
        } else if (strcmp(arg, "--batch-size") == 0 && value) {
            if (parse_int(value, 1, MAX_CHUNK, &a->chunk) != 0) {
                qw_cli_err("--batch-size needs a number 1..%d", MAX_CHUNK);
                return QW_EXIT_USAGE;
            }
            i++;
        } else if (strcmp(arg, "--pause-ms") == 0 && value) {
            if (parse_int(value, 0, MAX_PAUSE_MS, &a->pause_ms) != 0) {
                qw_cli_err("--pause-ms needs a number 0..%d", MAX_PAUSE_MS);
                return QW_EXIT_USAGE;
            }
            i++;
        } else {
            qw_cli_err("unknown or incomplete argument '%s'", arg);
            usage(stderr);
            return QW_EXIT_USAGE;
        }
    }
    if (r != QW_CLI_ARGS_END)
        return r;
    if (!have_age) {
        qw_cli_err("--older-than DURATION is required");
        usage(stderr);
        return QW_EXIT_USAGE;
    }
    return -1;
}

struct totals {
    int64_t committed, valid, invalid; /* batches deleted by status */
    int64_t history;                   /* history rows deleted */
    int64_t log;                       /* enqueue log rows deleted */
    int64_t chunks;                    /* transactions committed */
};

static int run_chunks(struct qw_db *db, const struct args *a, const char *cutoff, struct totals *t,
                      struct qw_error *err)
{
    char limit[16], from[64] = "";
    snprintf(limit, sizeof(limit), "%d", a->chunk);
    for (;;) {
        const char *params[] = {cutoff, limit, from[0] ? from : NULL};
        struct qw_db_res *res = NULL;
        int rc = qw_db_query(db, "ops_prune_chunk", 3, params, &res, err);
        if (rc != QW_OK)
            return rc;
        int64_t c = qw_db_res_int(res, 0, 0), v = qw_db_res_int(res, 0, 1);
        int64_t i = qw_db_res_int(res, 0, 2), h = qw_db_res_int(res, 0, 3);
        if (!qw_db_res_isnull(res, 0, 4))
            snprintf(from, sizeof(from), "%s", qw_db_res_get(res, 0, 4));
        qw_db_res_free(res);
        t->committed += c;
        t->valid += v;
        t->invalid += i;
        t->history += h;
        t->chunks++;
        if (c + v + i < a->chunk)
            return QW_OK; /* fewer than asked for: nothing older is left (or it is locked) */
        if (a->pause_ms > 0)
            qw_clock_sleep_ms(a->pause_ms);
    }
}

/* The enqueue log's rows older than the cutoff, in one statement. */
static int prune_log(struct qw_db *db, const char *cutoff, struct totals *t, struct qw_error *err)
{
    const char *params[] = {cutoff};
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "ops_prune_log", 1, params, &res, err);
    if (rc != QW_OK)
        return rc;
    t->log = qw_db_res_int(res, 0, 0);
    qw_db_res_free(res);
    return QW_OK;
}

static void print_result(const struct args *a, const struct totals *t, const char *cutoff,
                         const char *age, int64_t ms)
{
    long long total = (long long)(t->committed + t->valid + t->invalid);
    char batches[64];
    qw_cli_count(batches, sizeof(batches), total, "batch", "batches");
    if (a->json) {
        json_t *o = json_pack("{s:b, s:s, s:s, s:I, s:I, s:I, s:I}", "dry_run", a->dry_run,
                              "older_than", age, "cutoff", cutoff, "batches", (json_int_t)total,
                              "committed", (json_int_t)t->committed, "valid", (json_int_t)t->valid,
                              "invalid", (json_int_t)t->invalid);
        if (o && !a->dry_run) {
            json_object_set_new(o, "history_rows", json_integer(t->history));
            json_object_set_new(o, "enqueue_log_rows", json_integer(t->log));
            json_object_set_new(o, "transactions", json_integer(t->chunks));
            json_object_set_new(o, "ms", json_integer(ms));
        }
        qw_cli_print_json(o);
    } else if (a->dry_run) {
        printf("would remove %s (Committed %lld, Valid %lld, Invalid %lld) final before %s "
               "(older than %s), with their history\n",
               batches, (long long)t->committed, (long long)t->valid, (long long)t->invalid, cutoff,
               age);
    } else {
        char rows[64], txns[64];
        printf(
            "removed %s (Committed %lld, Valid %lld, Invalid %lld) and %s, final before %s "
            "(older than %s), in %s, %lld ms\n",
            batches, (long long)t->committed, (long long)t->valid, (long long)t->invalid,
            qw_cli_count(rows, sizeof(rows), (long long)t->history, "history row", "history rows"),
            cutoff, age,
            qw_cli_count(txns, sizeof(txns), (long long)t->chunks, "transaction", "transactions"),
            (long long)ms);
    }
}

int qw_cmd_prune(int argc, char **argv)
{
    struct args a = {.chunk = DEFAULT_CHUNK};
    int code = parse_args(argc, argv, &a);
    if (code >= 0)
        return code;
    struct qw_db *db = NULL;
    code = qw_cli_open_current_db(&a.common, "queuer-prune", PRUNE_ROLE, &db);
    if (code != QW_EXIT_OK)
        return code;

    struct qw_error err;
    qw_error_clear(&err);
    struct qw_db_res *res = NULL;
    char seconds[24], cutoff[64] = "", shown[32] = "";
    snprintf(seconds, sizeof(seconds), "%lld", (long long)a.older_s);
    const char *params[] = {seconds};
    int rc = qw_db_query(db, "ops_prune_cutoff", 1, params, &res, &err);
    if (rc == QW_OK) {
        snprintf(cutoff, sizeof(cutoff), "%s", qw_db_res_get(res, 0, 0));
        snprintf(shown, sizeof(shown), "%s", qw_db_res_get(res, 0, 1));
        qw_db_res_free(res);
        res = NULL;
    }
    char age[32];
    qw_duration_format(a.older_s, age, sizeof(age));
    struct totals t = {0};
    int64_t began = qw_clock_mono_ms();
    if (rc == QW_OK && a.dry_run) {
        const char *p[] = {cutoff};
        rc = qw_db_query(db, "ops_prune_count", 1, p, &res, &err);
        if (rc == QW_OK) {
            t.committed = qw_db_res_int(res, 0, 0);
            t.valid = qw_db_res_int(res, 0, 1);
            t.invalid = qw_db_res_int(res, 0, 2);
            qw_db_res_free(res);
        }
    } else if (rc == QW_OK) {
        rc = run_chunks(db, &a, cutoff, &t, &err);
        if (rc == QW_OK)
            rc = prune_log(db, cutoff, &t, &err);
    }
    qw_db_close(db);
    if (rc == QW_OK || t.chunks > 0)
        print_result(&a, &t, shown, age, qw_clock_mono_ms() - began);
    if (rc != QW_OK)
        return qw_cli_db_error(&err, PRUNE_ROLE);
    return QW_EXIT_OK;
}
