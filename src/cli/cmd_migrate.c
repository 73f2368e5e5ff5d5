/* `queuer migrate`: apply pending schema migrations, or show them (--status, --dry-run). */
#include "cli/cli.h"
#include "db/db.h"
#include "db/migrate.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: queuer migrate [--status | --dry-run] [--json] [-c FILE] [--database CONNINFO]\n"
        "\n"
        "Applies pending schema migrations to the database, one transaction each, and\n"
        "prints what it did. A second run is a no-op; concurrent runs are safe (an\n"
        "advisory lock serialises them). Run it as the role that owns (or may create)\n"
        "the queuer schema.\n"
        "\n"
        "  --status    list every migration: applied (when) or pending; changes nothing\n"
        "  --dry-run   print the SQL of each pending migration; changes nothing\n"
        "  --json      print the result as one JSON object: {\"schema_version\",\n"
        "              \"binary_version\", \"migrations\": [{\"version\", \"name\",\n"
        "              \"applied_at\", \"applied_now\"}]} (with --dry-run also \"sql\")\n");
    qw_cli_help_common(out);
    fprintf(out, "\nexit status: 0 done (or nothing to do); 1 a migration failed (it was rolled\n"
                 "back; the message says which) or the schema is newer than this binary; 64\n"
                 "usage; 69 database unreachable; 78 bad configuration.\n");
}

enum mode { MODE_APPLY, MODE_STATUS, MODE_DRY_RUN };

static json_t *list_json(const struct qw_migration_info *list, size_t n, int before, int with_sql)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        const struct qw_migration_info *m = &list[i];
        int pending = m->applied_at[0] == '\0';
        json_t *o = json_pack("{s:i, s:s?, s:s?, s:b}", "version", m->version, "name", m->name,
                              "applied_at", pending ? NULL : m->applied_at, "applied_now",
                              !pending && m->version > before);
        if (o && with_sql && pending && m->sql)
            json_object_set_new(o, "sql", json_string(m->sql));
        json_array_append_new(arr, o);
    }
    return arr;
}

static void print_status(const struct qw_migration_info *list, size_t n, int version)
{
    size_t pending = 0;
    for (size_t i = 0; i < n; i++) {
        const struct qw_migration_info *m = &list[i];
        pending += m->applied_at[0] == '\0';
        printf("  %04d  %-28s %s\n", m->version, m->name ? m->name : "(unknown to this binary)",
               m->applied_at[0] ? m->applied_at : "pending");
    }
    char count[64];
    printf("schema version %d, this binary's %d: %s\n", version, qw_migrate_latest(),
           pending ? qw_cli_count(count, sizeof(count), (long long)pending, "migration pending",
                                  "migrations pending")
           : version > qw_migrate_latest() ? "the schema is newer than this binary"
                                           : "up to date");
}

static void print_dry_run(const struct qw_migration_info *list, size_t n)
{
    size_t pending = 0;
    for (size_t i = 0; i < n; i++) {
        const struct qw_migration_info *m = &list[i];
        if (m->applied_at[0] || !m->sql)
            continue;
        pending++;
        printf("-- ==== migration %s (would run in its own transaction) ====\n%s\n", m->name,
               m->sql);
    }
    if (pending == 0)
        printf("-- nothing to do: no migration is pending\n");
}

int qw_cmd_migrate(int argc, char **argv)
{
    struct qw_cli_common common = {0};
    enum mode mode = MODE_APPLY;
    int json = 0;
    int i = 0, r;
    while ((r = qw_cli_next_arg(argc, argv, &i, &common, usage)) == QW_CLI_ARG) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
            continue;
        }
        enum mode m = strcmp(argv[i], "--status") == 0    ? MODE_STATUS
                      : strcmp(argv[i], "--dry-run") == 0 ? MODE_DRY_RUN
                                                          : MODE_APPLY;
        if (m == MODE_APPLY) {
            qw_cli_err("unknown argument '%s'", argv[i]);
            usage(stderr);
            return QW_EXIT_USAGE;
        }
        if (mode != MODE_APPLY && mode != m) {
            qw_cli_err("--status and --dry-run exclude each other");
            return QW_EXIT_USAGE;
        }
        mode = m;
    }
    if (r != QW_CLI_ARGS_END)
        return r;
    struct qw_db *db = NULL;
    int code = qw_cli_open_db(&common, "queuer-migrate", &db);
    if (code != QW_EXIT_OK)
        return code;
    struct qw_error err;
    qw_error_clear(&err);
    struct qw_migration_info *list = NULL;
    size_t n = 0;
    int before = 0, after = 0;
    int rc = qw_migrate_list(db, &list, &n, &before, &err);
    if (rc == QW_OK && mode == MODE_APPLY) {
        /* DDL of a large table can take a while; allow it. */
        qw_db_set_timeout(db, 600000);
        rc = qw_migrate_apply(db, json ? NULL : stdout, NULL, &err);
        if (rc == QW_OK && json) {
            free(list);
            list = NULL;
            rc = qw_migrate_list(db, &list, &n, &after, &err);
        }
    }
    qw_db_close(db);
    if (rc != QW_OK) {
        free(list);
        return qw_cli_db_error(&err, "the owner of the queuer schema (or CREATE on the database)");
    }
    code = QW_EXIT_OK;
    if (json)
        code = qw_cli_print_json(json_pack("{s:i, s:i, s:o}", "schema_version",
                                           mode == MODE_APPLY ? after : before, "binary_version",
                                           qw_migrate_latest(), "migrations",
                                           list_json(list, n, before, mode == MODE_DRY_RUN)));
    else if (mode == MODE_STATUS)
        print_status(list, n, before);
    else if (mode == MODE_DRY_RUN)
        print_dry_run(list, n);
    free(list);
    return code;
}
