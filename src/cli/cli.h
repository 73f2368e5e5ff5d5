/*
 * Subcommands of the `queuer` program. Each takes argc/argv with argv[0]
 * the subcommand name, parses its own options, and returns a process exit
 * code from enum qw_exit (sysexits.h values where one fits).
 */
#ifndef QW_CLI_CLI_H
#define QW_CLI_CLI_H

#include "common/err.h"

enum qw_exit {
    QW_EXIT_OK = 0,
    QW_EXIT_FAILURE = 1,      /* failed; the message says why */
    QW_EXIT_USAGE = 64,       /* bad command line */
    QW_EXIT_DATAERR = 65,     /* invalid input data (malformed batch, bad line) */
    QW_EXIT_NOINPUT = 66,     /* an input file could not be opened */
    QW_EXIT_UNAVAILABLE = 69, /* database unreachable */
    QW_EXIT_TEMPFAIL = 75,    /* back pressure: try again after the backlog drains */
    QW_EXIT_CONFIG = 78,      /* bad configuration */
};

/** Maps a result code to the exit code a script should see. */
int qw_cli_exit_for(int rc);

/**
 * Loads the configuration for a subcommand: `path` from -c/--config or
 * QUEUER_CONFIG (NULL = defaults + environment). Prints the error and
 * returns non-zero on failure; on success the caller owns `cfg`.
 */
struct qw_config;
int qw_cli_load_config(const char *path, struct qw_config *cfg);

/**
 * Opens a database connection from `cfg` (conninfo, password, timeouts)
 * with application_name `app`. Prints the reason and returns non-zero on
 * failure.
 */
struct qw_db;
int qw_cli_connect(const struct qw_config *cfg, const char *app, struct qw_db **db);

/**
 * Loads the configuration from `config_path` (see qw_cli_load_config) and
 * connects with application_name `app`; the configuration is not kept.
 * Returns QW_EXIT_OK with *db open, or the exit code to return (the reason
 * is printed).
 */
int qw_cli_open_db(const char *config_path, const char *app, struct qw_db **db);

/**
 * Parses the common "-c FILE / --config FILE" option at argv[*i]; returns 1
 * when it consumed it (advancing *i), 0 otherwise, -1 when FILE is missing.
 */
int qw_cli_config_opt(int argc, char **argv, int *i, const char **path);

int qw_cmd_migrate(int argc, char **argv);
int qw_cmd_run(int argc, char **argv);
int qw_cmd_enqueue(int argc, char **argv);
int qw_cmd_status(int argc, char **argv);
int qw_cmd_batch(int argc, char **argv);
int qw_cmd_prune(int argc, char **argv);
int qw_cmd_check_config(int argc, char **argv);

#endif
