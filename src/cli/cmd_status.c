/* `queuer status`: counts, instances and stuck batches from the operator views. */
#include "admin/status.h"
#include "cli/cli.h"
#include "db/db.h"
#include "db/migrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_STUCK_SHOWN 20 /* stuck batches listed by default */
#define DEFAULT_INSTANCES 200  /* instances listed at most */

static void usage(FILE *out)
{
    fprintf(out, "usage: queuer status [-c FILE] [--json] [--stuck N]\n"
                 "\n"
                 "Shows unfinished batches by state (waiting, submitting, Pending, Delayed,\n"
                 "parked, Unknown) and how many are in flight, what reached a final status in\n"
                 "the last hour, services and their claims, worker instances (alive, dead or\n"
                 "stopped, claims held) and the batches stuck longest (queuer.stuck_batches).\n"
                 "Read-only; the queuer_operator role is enough.\n"
                 "\n"
                 "  --json      the same data as one JSON object on stdout\n"
                 "  --stuck N   list up to N stuck batches (default 20, 0..10000)\n"
                 "\n"
                 "exit status: 0 shown; 64 usage; 69 database unreachable; 78 bad\n"
                 "configuration; 1 other failure (e.g. schema not migrated).\n");
}

static int parse_count(const char *text, int max, int *out)
{
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!*text || *end || v < 0 || v > max)
        return -1;
    *out = (int)v;
    return 0;
}

/* Returns -1 to go on, else the exit code of a usage error or --help. */
static int parse_args(int argc, char **argv, const char **config, int *json, int *stuck)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout);
            return QW_EXIT_OK;
        }
        int r = qw_cli_config_opt(argc, argv, &i, config);
        if (r == 1)
            continue;
        if (r < 0)
            return QW_EXIT_USAGE;
        if (strcmp(arg, "--json") == 0) {
            *json = 1;
        } else if (strcmp(arg, "--stuck") == 0 && i + 1 < argc) {
            if (parse_count(argv[++i], 10000, stuck) != 0) {
                fprintf(stderr, "queuer status: --stuck needs a number 0..10000\n");
                return QW_EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "queuer status: unknown argument '%s'\n", arg);
            usage(stderr);
            return QW_EXIT_USAGE;
        }
    }
    return -1;
}

int qw_cmd_status(int argc, char **argv)
{
    const char *config = NULL;
    int json = 0, stuck = DEFAULT_STUCK_SHOWN;
    int code = parse_args(argc, argv, &config, &json, &stuck);
    if (code >= 0)
        return code;
    struct qw_db *db = NULL;
    int rc = qw_cli_open_db(config, "queuer-status", &db);
    if (rc != QW_EXIT_OK)
        return rc;

    struct qw_error err;
    qw_error_clear(&err);
    struct qw_status_report report;
    rc = qw_migrate_check(db, NULL, &err);
    if (rc == QW_OK)
        rc = qw_status_load(db, DEFAULT_INSTANCES, stuck, &report, &err);
    qw_db_close(db);
    if (rc != QW_OK) {
        fprintf(stderr, "queuer status: %s\n", err.msg);
        return qw_cli_exit_for(rc);
    }
    char *text = NULL;
    if (json) {
        json_t *obj = qw_status_render_json(&report);
        text =
            obj ? json_dumps(obj, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII) : NULL;
        json_decref(obj);
    } else {
        text = qw_status_render_text(&report);
    }
    qw_status_free(&report);
    if (!text) {
        fprintf(stderr, "queuer status: out of memory\n");
        return QW_EXIT_FAILURE;
    }
    fputs(text, stdout);
    if (json)
        fputc('\n', stdout);
    free(text);
    return fflush(stdout) == 0 ? QW_EXIT_OK : QW_EXIT_FAILURE;
}
