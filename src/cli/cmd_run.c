/* `queuer run`: run one worker until SIGTERM/SIGINT; SIGHUP reloads what it can. */
#include "cli/cli.h"
#include "config/config.h"
#include "common/log.h"
#include "run/run.h"

#include <stdio.h>
#include <string.h>

extern char **environ;

static void usage(FILE *out)
{
    fprintf(out, "usage: queuer run [-c FILE] [--database CONNINFO]\n"
                 "\n"
                 "Runs a worker: claims services, submits their batches to the ledger in\n"
                 "creation order and follows them to a final status. Logs go to stderr, one\n"
                 "key=value line per event.\n"
                 "\n"
                 "signals:\n"
                 "  SIGTERM, SIGINT  stop gracefully: stop claiming, let POSTs in flight finish\n"
                 "                   within worker.shutdown_grace_ms, give every claim back at\n"
                 "                   once, exit 0. A second one exits at once (130); its claims\n"
                 "                   then expire as after a crash.\n"
                 "  SIGHUP           re-read the configuration file: log.level, admin.listen and\n"
                 "                   dlt.pause_base_ms/pause_max_ms (the 429 pause) take effect\n"
                 "                   at once; other changed keys are logged as needing a restart;\n"
                 "                   an invalid file is logged and the running configuration\n"
                 "                   kept. (The environment of a running process cannot change.)\n"
                 "  SIGPIPE          ignored.\n");
    qw_cli_help_common(out);
    fprintf(out,
            "  QUEUER_DLT_URL, QUEUER_DLT_TOKEN (or dlt.token_file)  the ledger and its token\n"
            "  QUEUER_ADMIN_LISTEN       /healthz, /readyz, /metrics address, or off\n"
            "\n"
            "exit status: 0 stopped by SIGTERM/SIGINT; 1 failed (e.g. schema not migrated,\n"
            "see the last log line); 64 usage; 69 database unreachable at start; 78 bad\n"
            "configuration (or the admin port is taken); 130 second signal.\n");
}

/* Reload warnings are log lines like everything else a worker says. */
static void log_warning(void *ctx, const char *msg)
{
    (void)ctx;
    char quoted[600];
    qw_log_warn("config.warning", "message=%s", qw_log_quote(quoted, sizeof(quoted), msg));
}

/* SIGHUP: the same sources as at start (the environment cannot have changed). */
static int reload_config(void *ctx, struct qw_config *out, struct qw_error *err)
{
    struct qw_config_source src;
    qw_cli_config_source(ctx, &src);
    src.warn = log_warning;
    return qw_config_load_from(out, &src, environ, err);
}

int qw_cmd_run(int argc, char **argv)
{
    struct qw_cli_common common = {0};
    int i = 0;
    int r = qw_cli_next_arg(argc, argv, &i, &common, usage);
    if (r == QW_CLI_ARG)
        qw_cli_err("unknown argument '%s'", argv[i]);
    if (r == QW_CLI_ARG || r == QW_EXIT_USAGE) {
        usage(stderr);
        return QW_EXIT_USAGE;
    }
    if (r != QW_CLI_ARGS_END)
        return r;
    struct qw_config cfg;
    if (qw_cli_load_config(&common, &cfg) != QW_OK)
        return QW_EXIT_CONFIG;
    struct qw_worker_reload reload = {.load = reload_config, .ctx = &common};
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_worker_run(&cfg, &reload, &err);
    qw_config_free(&cfg);
    if (rc != QW_OK)
        return qw_cli_db_error(&err, "a role granted queuer_worker");
    return QW_EXIT_OK;
}
