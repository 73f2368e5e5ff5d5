/* `queuer migrate`: apply pending schema migrations and say what was done. */
#include "cli/cli.h"
#include "db/db.h"
#include "db/migrate.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: queuer migrate [-c FILE]\n"
                 "Applies pending schema migrations to the database of database.conninfo,\n"
                 "one transaction each, and prints what it did. A second run is a no-op;\n"
                 "concurrent runs are safe.\n");
}

int qw_cmd_migrate(int argc, char **argv)
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
            fprintf(stderr, "queuer migrate: unknown argument '%s'\n", argv[i]);
        usage(stderr);
        return QW_EXIT_USAGE;
    }
    struct qw_db *db = NULL;
    int rc = qw_cli_open_db(path, "queuer-migrate", &db);
    if (rc != QW_EXIT_OK)
        return rc;
    /* DDL of a large table can take a while; allow it. */
    qw_db_set_timeout(db, 600000);
    struct qw_error err;
    qw_error_clear(&err);
    rc = qw_migrate_apply(db, stdout, NULL, &err);
    if (rc != QW_OK)
        fprintf(stderr, "queuer migrate: %s\n", err.msg);
    qw_db_close(db);
    return qw_cli_exit_for(rc);
}
