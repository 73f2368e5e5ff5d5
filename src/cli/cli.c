/* Shared helpers of the subcommands, and check-config. */
#include "cli/cli.h"
#include "config/config.h"
#include "db/db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

int qw_cli_exit_for(int rc)
{
    switch (rc) {
    case QW_OK:
        return QW_EXIT_OK;
    case QW_ERR_INVALID:
    case QW_ERR_DUPLICATE:
        return QW_EXIT_DATAERR;
    case QW_ERR_CONFIG:
        return QW_EXIT_CONFIG;
    case QW_ERR_DB_CONN:
    case QW_ERR_TIMEOUT:
        return QW_EXIT_UNAVAILABLE;
    case QW_ERR_BACKPRESSURE:
        return QW_EXIT_TEMPFAIL;
    default:
        return QW_EXIT_FAILURE;
    }
}

int qw_cli_load_config(const char *path, struct qw_config *cfg)
{
    struct qw_error err;
    qw_error_clear(&err);
    if (!path) {
        const char *env = getenv("QUEUER_CONFIG");
        if (env && *env)
            path = env;
    }
    int rc = qw_config_load(cfg, path, environ, &err);
    if (rc != QW_OK) {
        fprintf(stderr, "queuer: %s\n", err.msg);
        return rc;
    }
    return QW_OK;
}

int qw_cli_connect(const struct qw_config *cfg, const char *app, struct qw_db **db)
{
    struct qw_db_opts opts = {
        .conninfo = cfg->db_conninfo,
        .password = cfg->db_password,
        .app_name = app,
        .connect_timeout_s = cfg->db_connect_timeout_s,
        .query_timeout_ms = cfg->db_query_timeout_ms,
        .unprepared = !cfg->db_prepared_statements,
    };
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_db_connect(db, &opts, &err);
    if (rc != QW_OK)
        fprintf(stderr, "queuer: %s\n", err.msg);
    return rc;
}

int qw_cli_open_db(const char *config_path, const char *app, struct qw_db **db)
{
    struct qw_config cfg;
    if (qw_cli_load_config(config_path, &cfg) != QW_OK)
        return QW_EXIT_CONFIG;
    int rc = qw_cli_connect(&cfg, app, db);
    qw_config_free(&cfg);
    return qw_cli_exit_for(rc);
}

int qw_cli_config_opt(int argc, char **argv, int *i, const char **path)
{
    const char *a = argv[*i];
    if (strcmp(a, "-c") != 0 && strcmp(a, "--config") != 0)
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "queuer: %s needs a file name\n", a);
        return -1;
    }
    *path = argv[++*i];
    return 1;
}

int qw_cmd_check_config(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(argc == 2 && strcmp(argv[1], "--help") == 0 ? stdout : stderr,
                "usage: queuer check-config FILE\n"
                "Validates FILE plus QUEUER_* environment overrides and prints the\n"
                "effective configuration (secrets shown only as <set>/<unset>).\n");
        return argc == 2 && strcmp(argv[1], "--help") == 0 ? QW_EXIT_OK : QW_EXIT_USAGE;
    }
    struct qw_config cfg;
    if (qw_cli_load_config(argv[1], &cfg) != QW_OK)
        return QW_EXIT_CONFIG;
    qw_config_print(&cfg, stdout);
    fprintf(stderr, "%s: configuration OK\n", argv[1]);
    qw_config_free(&cfg);
    return QW_EXIT_OK;
}
