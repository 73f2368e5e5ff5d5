/* `queuer status`: counts, instances and stuck batches from the operator views. */
#include "admin/status.h"
#include "cli/cli.h"
#include "common/clock.h"
#include "db/db.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define DEFAULT_STUCK_SHOWN 20                         /* stuck batches listed by default */
#define DEFAULT_INSTANCES 200                          /* instances listed at most */
#define OPERATOR_ROLE "a role granted queuer_operator" /* named when permission is denied */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: queuer status [--json | --watch] [--stuck N] [-c FILE] [--database CONNINFO]\n"
            "\n"
            "Shows unfinished batches by state (waiting, submitting, Pending, Delayed,\n"
            "parked, Unknown) and how many are in flight, what reached a final status in\n"
            "the last hour, services and their claims, worker instances (alive, dead or\n"
            "stopped, claims held) and the batches stuck longest (queuer.stuck_batches).\n"
            "Read-only; the queuer_operator role is enough.\n"
            "\n"
            "  --json      the same data as one JSON object on stdout\n"
            "  --watch     a live view redrawn every second until Ctrl-C: in flight,\n"
            "              waiting, throughput, claims per instance, stuck batches,\n"
            "              fitted to the terminal (80x24 is enough); a lost database\n"
            "              is shown on screen and retried\n"
            "  --stuck N   list up to N stuck batches (default 20, 0..10000)\n");
    qw_cli_help_common(out);
    fprintf(out, "\nexit status: 0 shown (--watch: ended by Ctrl-C/SIGTERM); 64 usage; 69\n"
                 "database unreachable; 78 bad configuration; 1 other failure (e.g. schema not\n"
                 "migrated).\n");
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
static int parse_args(int argc, char **argv, struct qw_cli_common *common, int *json, int *watch,
                      int *stuck)
{
    int i = 0, r;
    while ((r = qw_cli_next_arg(argc, argv, &i, common, usage)) == QW_CLI_ARG) {
        const char *arg = argv[i];
        if (strcmp(arg, "--json") == 0) {
            *json = 1;
        } else if (strcmp(arg, "--watch") == 0) {
            *watch = 1;
        } else if (strcmp(arg, "--stuck") == 0 && i + 1 < argc) {
            if (parse_count(argv[++i], 10000, stuck) != 0) {
                qw_cli_err("--stuck needs a number 0..10000");
                return QW_EXIT_USAGE;
            }
        } else {
            qw_cli_err("unknown argument '%s'", arg);
            usage(stderr);
            return QW_EXIT_USAGE;
        }
    }
    if (r != QW_CLI_ARGS_END)
        return r;
    if (*json && *watch) {
        qw_cli_err("--json and --watch exclude each other");
        return QW_EXIT_USAGE;
    }
    return -1;
}

/* --watch ends at SIGINT/SIGTERM: the handler only sets this flag. */
static volatile sig_atomic_t watch_stop;

static void on_watch_signal(int sig)
{
    (void)sig;
    watch_stop = 1;
}

static void terminal_size(int *rows, int *cols)
{
    struct winsize ws;
    *rows = 24;
    *cols = 80;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
        *rows = ws.ws_row;
        *cols = ws.ws_col;
    }
}

/* Redraws the screen once a second until a signal; the database may come and go. */
static int watch(struct qw_db *db, int stuck)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_watch_signal; /* the naps below check the flag */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct qw_status_report prev, cur;
    memset(&prev, 0, sizeof(prev));
    int have_prev = 0;
    int64_t prev_ms = 0;
    while (!watch_stop) {
        int64_t began = qw_clock_mono_ms();
        int rows, cols;
        terminal_size(&rows, &cols);
        struct qw_error err;
        qw_error_clear(&err);
        char problem[600] = "";
        int rc = qw_db_ok(db) ? QW_OK : qw_db_reconnect(db, &err);
        if (rc == QW_OK)
            rc = qw_status_load(db, DEFAULT_INSTANCES, stuck, &cur, &err);
        if (rc != QW_OK) {
            snprintf(problem, sizeof(problem), "%s; showing the last view, retrying", err.msg);
            if (!have_prev) {
                qw_cli_err("%s", err.msg);
                return qw_cli_exit_for(rc);
            }
        }
        struct qw_status_rates rates;
        const struct qw_status_report *shown = rc == QW_OK ? &cur : &prev;
        qw_status_watch_rates(rc == QW_OK && have_prev ? &prev : NULL, shown, began - prev_ms,
                              &rates);
        char *frame =
            qw_status_render_watch(shown, &rates, problem[0] ? problem : NULL, rows, cols);
        if (frame) {
            fputs("\033[H\033[2J", stdout); /* home, clear */
            fputs(frame, stdout);
            fflush(stdout);
            free(frame);
        }
        if (rc == QW_OK) {
            if (have_prev)
                qw_status_free(&prev);
            prev = cur;
            have_prev = 1;
            prev_ms = began;
        }
        /* Short naps, so Ctrl-C ends the view at once. */
        for (int64_t left; !watch_stop && (left = 1000 - (qw_clock_mono_ms() - began)) > 0;)
            qw_clock_sleep_ms(left < 100 ? left : 100);
    }
    if (have_prev)
        qw_status_free(&prev);
    fputc('\n', stdout);
    return QW_EXIT_OK;
}

int qw_cmd_status(int argc, char **argv)
{
    struct qw_cli_common common = {0};
    int json = 0, watching = 0, stuck = DEFAULT_STUCK_SHOWN;
    int code = parse_args(argc, argv, &common, &json, &watching, &stuck);
    if (code >= 0)
        return code;
    struct qw_db *db = NULL;
    code = qw_cli_open_current_db(&common, "queuer-status", OPERATOR_ROLE, &db);
    if (code != QW_EXIT_OK)
        return code;
    if (watching) {
        code = watch(db, stuck);
        qw_db_close(db);
        return code;
    }

    struct qw_error err;
    qw_error_clear(&err);
    struct qw_status_report report;
    int rc = qw_status_load(db, DEFAULT_INSTANCES, stuck, &report, &err);
    qw_db_close(db);
    if (rc != QW_OK)
        return qw_cli_db_error(&err, OPERATOR_ROLE);
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
        qw_cli_err("out of memory");
        return QW_EXIT_FAILURE;
    }
    fputs(text, stdout);
    if (json)
        fputc('\n', stdout);
    free(text);
    return fflush(stdout) == 0 ? QW_EXIT_OK : QW_EXIT_FAILURE;
}
