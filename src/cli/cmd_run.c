/* `queuer run`: run one worker until SIGTERM/SIGINT. */
#include "cli/cli.h"
#include "config/config.h"
#include "worker/worker.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: queuer run [-c FILE]\n"
                 "Runs a worker: claims services, submits their batches to the ledger in\n"
                 "creation order and follows them to a final status. SIGTERM or SIGINT stops\n"
                 "it gracefully (claims are given back at once); a second signal exits now.\n");
}

int qw_cmd_run(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return QW_EXIT_OK;
        }
        int r = qw_cli_config_opt(argc, argv, &i, &path);
        if (r == 1)
            continue;
        if (r == 0)
            fprintf(stderr, "queuer run: unknown argument '%s'\n", argv[i]);
        usage(stderr);
        return QW_EXIT_USAGE;
    }
    struct qw_config cfg;
    if (qw_cli_load_config(path, &cfg) != QW_OK)
        return QW_EXIT_CONFIG;
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_worker_run(&cfg, &err);
    if (rc != QW_OK)
        fprintf(stderr, "queuer run: %s\n", err.msg);
    qw_config_free(&cfg);
    return qw_cli_exit_for(rc);
}
