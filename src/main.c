/* queuer: entry point; dispatches to the subcommands in src/cli/. */
#include "cli/cli.h"

#include <stdio.h>
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
    {"check-config", qw_cmd_check_config, "validate a configuration file and print it"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: queuer [--help] [--version] <command> [options]\n\n"
                 "PostgreSQL-backed batch queuer for a Splinter scabbard ledger.\n\n"
                 "commands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-13s %s\n", commands[i].name, commands[i].summary);
    fprintf(out,
            "\n'queuer <command> --help' describes a command's options.\n"
            "Configuration: -c FILE or QUEUER_CONFIG, overridden by QUEUER_<SECTION>_<KEY>.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return QW_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return QW_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("queuer %s\n", QW_VERSION);
        return QW_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "queuer: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return QW_EXIT_USAGE;
}
