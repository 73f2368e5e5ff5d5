/*
 * Subcommands of the `queuer` program. Each takes argc/argv with argv[0]
 * the subcommand name, parses its own options, and returns a process exit
 * code from enum qw_exit (sysexits.h values where one fits).
 *
 * The options every command accepts (-c/--config FILE, --database
 * CONNINFO) may stand before the command name too: main() moves them
 * behind it, so each command parses them in qw_cli_next_arg(). Every
 * message a command prints starts with "queuer <command>: " (qw_cli_err,
 * qw_cli_warn), errors and warnings on stderr.
 */
#ifndef QW_CLI_CLI_H
#define QW_CLI_CLI_H

#include "common/err.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

enum qw_exit {
    QW_EXIT_OK = 0,
    QW_EXIT_FAILURE = 1,      /* failed; the message says why */
    QW_EXIT_USAGE = 64,       /* bad command line */
    QW_EXIT_DATAERR = 65,     /* invalid input data (malformed batch, bad line) */
    QW_EXIT_NOINPUT = 66,     /* an input file could not be opened */
    QW_EXIT_UNAVAILABLE = 69, /* database unreachable */
    QW_EXIT_TEMPFAIL = 75,    /* back pressure: try again after the backlog drains */
    QW_EXIT_SUPERSEDED = 76,  /* queuer run: a later process registered under our instance_id */
    QW_EXIT_CONFIG = 78,      /* bad configuration */
};

/** Options common to every command. Strings point into argv. */
struct qw_cli_common {
    const char *config_path; /* -c/--config FILE, or NULL (then QUEUER_CONFIG) */
    const char *database;    /* --database CONNINFO, or NULL (then database.conninfo) */
};

/** Maps a result code to the exit code a script should see. */
int qw_cli_exit_for(int rc);

/** Sets the command named in messages ("migrate"); call once, before any message. */
void qw_cli_set_command(const char *name);

/** Prints "queuer <command>: <message>" to stderr. */
void qw_cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/** Prints "queuer <command>: warning: <message>" to stderr. */
void qw_cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/** "1 batch" / "2 batches": `n` and the singular or plural noun, into `buf`. */
const char *qw_cli_count(char *buf, size_t len, long long n, const char *one, const char *many);

/**
 * Parses a common option at argv[*i] (-c FILE, --config FILE, --database
 * CONNINFO, and the --opt=VALUE forms); returns 1 when it consumed it
 * (advancing *i), 0 when argv[*i] is something else, -1 after printing a
 * usage error (value missing, or the option given twice).
 */
int qw_cli_common_opt(int argc, char **argv, int *i, struct qw_cli_common *c);

/** What qw_cli_next_arg() found besides an exit code. */
enum {
    QW_CLI_ARG = -1,      /* argv[*i] is the command's own argument */
    QW_CLI_ARGS_END = -2, /* no argument left */
};

/**
 * The argument loop every command shares: advances *i (start at 0) to the
 * command's next own argument, taking the common options on the way
 * (qw_cli_common_opt). Returns QW_CLI_ARG with argv[*i] for the command to
 * parse (it may take a value by advancing *i itself), QW_CLI_ARGS_END after
 * the last argument, QW_EXIT_OK after printing usage(stdout) for --help or
 * -h, QW_EXIT_USAGE after a bad common option (message printed).
 */
int qw_cli_next_arg(int argc, char **argv, int *i, struct qw_cli_common *c,
                    void (*usage)(FILE *out)) QW_MUST_CHECK;

/**
 * Fills `src` with the sources of `c`: the file of -c or QUEUER_CONFIG,
 * --database, and warnings printed to stderr.
 */
struct qw_config_source;
void qw_cli_config_source(const struct qw_cli_common *c, struct qw_config_source *src);

/**
 * Loads the configuration: the file of -c or QUEUER_CONFIG (none: defaults
 * and environment), the QUEUER_* environment, --database. Prints the error
 * (and any warning) and returns non-zero on failure; on success the caller
 * owns `cfg` (qw_config_free).
 */
struct qw_config;
int qw_cli_load_config(const struct qw_cli_common *c, struct qw_config *cfg);

/**
 * Opens a database connection from `cfg` with application_name `app`, with
 * JIT compilation off unless `jit` (a bulk load gains from it; the
 * operators' reads over views, planned with stale statistics, took seconds
 * to compile). Prints the reason, naming where the connection string came
 * from, and returns non-zero on failure.
 */
struct qw_db;
int qw_cli_connect(const struct qw_config *cfg, const char *app, bool jit, struct qw_db **db);

/**
 * Loads the configuration (qw_cli_load_config) and connects with
 * application_name `app`; the configuration is not kept. Returns
 * QW_EXIT_OK with *db open, or the exit code to return (reason printed).
 */
int qw_cli_open_db(const struct qw_cli_common *c, const char *app, struct qw_db **db);

/**
 * Prints a database error of the command: the message, and for SQLSTATE
 * 42501 (permission denied) which role the command needs (`role`, e.g.
 * "queuer_operator"). Returns the exit code for `rc`.
 */
int qw_cli_db_error(const struct qw_error *err, const char *role);

/**
 * qw_cli_open_db(), then refuses a database whose schema is not the one
 * this binary was built for (qw_migrate_check): reports it with
 * qw_cli_db_error(`role`), closes the connection and returns the exit
 * code. Returns QW_EXIT_OK with *db open otherwise. For the commands that
 * read or change batches (not migrate).
 */
int qw_cli_open_current_db(const struct qw_cli_common *c, const char *app, const char *role,
                           struct qw_db **db);

/**
 * Prints `obj` as indented JSON and a newline on stdout, then releases it
 * (NULL, from a failed json_pack, counts as out of memory). Returns
 * QW_EXIT_OK or QW_EXIT_FAILURE (message printed).
 */
int qw_cli_print_json(json_t *obj);

/** Prints the help text shared by every command: common options, environment. */
void qw_cli_help_common(FILE *out);

int qw_cmd_migrate(int argc, char **argv);
int qw_cmd_run(int argc, char **argv);
int qw_cmd_enqueue(int argc, char **argv);
int qw_cmd_status(int argc, char **argv);
int qw_cmd_batch(int argc, char **argv);
int qw_cmd_prune(int argc, char **argv);
int qw_cmd_capacity(int argc, char **argv);
int qw_cmd_check_config(int argc, char **argv);

#endif
