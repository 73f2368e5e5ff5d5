/* queuer: entry point; dispatches to the subcommands in src/cli/. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct command commands[] = {
    {"migrate", qw_cmd_migrate, "apply pending schema migrations"},
    {"run", qw_cmd_run, "run a worker until SIGTERM/SIGINT"},
    {"enqueue", qw_cmd_enqueue, "enqueue one batch, or many from a TSV file"},
    {"status", qw_cmd_status, "show services, claims, instances and batch counts"},
    {"batch", qw_cmd_batch, "show, retry or cancel one batch"},
    {"prune", qw_cmd_prune, "delete old final batches and their history"},
    {"capacity", qw_cmd_capacity, "set, show or clear a ledger's shared capacity"},
    {"check-config", qw_cmd_check_config, "validate the configuration and print it"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: queuer [-c FILE] [--database CONNINFO] <command> [options]\n"
                 "       queuer --help | --version\n\n"
                 "PostgreSQL-backed batch queuer for a Splinter scabbard ledger.\n\n"
                 "commands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-13s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'queuer <command> --help' describes a command: options, environment, exit "
                 "status.\n");
    qw_cli_help_common(out);
    fprintf(out, "\nexit status: 0 ok; 1 failed or refused; 64 usage; 65 invalid input; 66 input\n"
                 "unreadable; 69 database unreachable; 75 try again later (back pressure,\n"
                 "busy); 78 bad configuration.\n");
}

/*
 * Moves the common options given before the command behind it, so that
 * `queuer -c FILE status` and `queuer status -c FILE` mean the same to the
 * command's own parser (which refuses an option given twice). Returns the
 * index of the command name in argv, or -1 (usage error printed).
 */
static int find_command(int argc, char **argv, int *n_globals)
{
    int i = 1;
    while (i < argc && argv[i][0] == '-' && strcmp(argv[i], "--help") != 0 &&
           strcmp(argv[i], "-h") != 0 && strcmp(argv[i], "--version") != 0) {
        struct qw_cli_common scratch = {0};
        int r = qw_cli_common_opt(argc, argv, &i, &scratch);
        if (r <= 0) {
            if (r == 0)
                qw_cli_err("unknown option '%s' before the command", argv[i]);
            return -1;
        }
        i++;
    }
    *n_globals = i - 1;
    return i;
}

int main(int argc, char **argv)
{
    int n_globals = 0;
    int at = find_command(argc, argv, &n_globals);
    if (at < 0 || at >= argc) {
        usage(stderr);
        return QW_EXIT_USAGE;
    }
    const char *name = argv[at];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        usage(stdout);
        return QW_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        printf("queuer %s\n", QW_VERSION);
        return QW_EXIT_OK;
    }
    for (size_t c = 0; c < sizeof(commands) / sizeof(commands[0]); c++) {
        if (strcmp(name, commands[c].name) != 0)
            continue;
        qw_cli_set_command(name);
        /* argv for the command: its name, the global options, then its own. */
        char **sub = malloc(sizeof(char *) * (size_t)(argc + 1));
        if (!sub) {
            qw_cli_err("out of memory");
            return QW_EXIT_FAILURE;
        }
        int n = 0;
        sub[n++] = argv[at];
        for (int g = 1; g <= n_globals; g++)
            sub[n++] = argv[g];
        for (int k = at + 1; k < argc; k++)
            sub[n++] = argv[k];
        sub[n] = NULL;
        int rc = commands[c].fn(n, sub);
        free(sub);
        return rc;
    }
    qw_cli_err("unknown command '%s'", name);
    usage(stderr);
    return QW_EXIT_USAGE;
}
