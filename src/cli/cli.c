/* Shared helpers of the subcommands: options, messages, configuration and connection. */
#include "cli/cli.h"
#include "config/config.h"
#include "db/db.h"
#include "db/migrate.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

/* The command named in messages; set once by main() before anything prints. */
static const char *command_name = "";

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
    case QW_ERR_SUPERSEDED:
        return QW_EXIT_SUPERSEDED;
    default:
        return QW_EXIT_FAILURE;
    }
}

void qw_cli_set_command(const char *name)
{
    command_name = name ? name : "";
}

static void vmessage(const char *kind, const char *fmt, va_list ap)
{
    fprintf(stderr, "queuer%s%s: %s", *command_name ? " " : "", command_name, kind);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void qw_cli_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage("", fmt, ap);
    va_end(ap);
}

void qw_cli_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage("warning: ", fmt, ap);
    va_end(ap);
}

const char *qw_cli_count(char *buf, size_t len, long long n, const char *one, const char *many)
{
    snprintf(buf, len, "%lld %s", n, n == 1 ? one : many);
    return buf;
}

/* Matches "--name VALUE" or "--name=VALUE" (or a short alias); 1 matched, -1 value missing. */
static int opt_value(int argc, char **argv, int *i, const char *name, const char *alias,
                     const char **value)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) == 0 && a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (strcmp(a, name) != 0 && !(alias && strcmp(a, alias) == 0))
        return 0;
    if (*i + 1 >= argc) {
        qw_cli_err("%s needs a value", a);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

int qw_cli_common_opt(int argc, char **argv, int *i, struct qw_cli_common *c)
{
    static const struct {
        const char *name, *alias, *what;
        size_t offset;
    } opts[] = {
        {"--config", "-c", "a configuration file", offsetof(struct qw_cli_common, config_path)},
        {"--database", NULL, "a connection string", offsetof(struct qw_cli_common, database)},
    };
    for (size_t k = 0; k < sizeof(opts) / sizeof(opts[0]); k++) {
        const char *value = NULL;
        int r = opt_value(argc, argv, i, opts[k].name, opts[k].alias, &value);
        if (r == 0)
            continue;
        if (r < 0)
            return -1;
        const char **slot = (const char **)((char *)c + opts[k].offset);
        if (*slot) {
            qw_cli_err("%s given twice (before and after the command?); give %s once", opts[k].name,
                       opts[k].what);
            return -1;
        }
        *slot = value;
        return 1;
    }
    return 0;
}

int qw_cli_next_arg(int argc, char **argv, int *i, struct qw_cli_common *c,
                    void (*usage)(FILE *out))
{
    while (++*i < argc) {
        if (strcmp(argv[*i], "--help") == 0 || strcmp(argv[*i], "-h") == 0) {
            usage(stdout);
            return QW_EXIT_OK;
        }
        int r = qw_cli_common_opt(argc, argv, i, c);
        if (r < 0)
            return QW_EXIT_USAGE;
        if (r == 0)
            return QW_CLI_ARG;
    }
    return QW_CLI_ARGS_END;
}

static void print_warning(void *ctx, const char *msg)
{
    (void)ctx;
    qw_cli_warn("%s", msg);
}

void qw_cli_config_source(const struct qw_cli_common *c, struct qw_config_source *src)
{
    *src = (struct qw_config_source){
        .path = c->config_path,
        .path_from = "-c",
        .database = c->database,
        .warn = print_warning,
    };
    const char *env = getenv("QUEUER_CONFIG");
    if (!src->path && env && *env) {
        src->path = env;
        src->path_from = "QUEUER_CONFIG";
    }
}

int qw_cli_load_config(const struct qw_cli_common *c, struct qw_config *cfg)
{
    struct qw_config_source src;
    qw_cli_config_source(c, &src);
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_config_load_from(cfg, &src, environ, &err);
    if (rc != QW_OK)
        qw_cli_err("%s", err.msg);
    return rc;
}

int qw_cli_connect(const struct qw_config *cfg, const char *app, bool jit, struct qw_db **db)
{
    struct qw_db_opts opts = {
        .conninfo = cfg->db_conninfo,
        .password = cfg->db_password,
        .app_name = app,
        .connect_timeout_s = cfg->db_connect_timeout_s,
        .query_timeout_ms = cfg->db_query_timeout_ms,
        .unprepared = !cfg->db_prepared_statements,
        .keep_jit = jit,
    };
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_db_connect(db, &opts, &err);
    if (rc == QW_OK)
        return rc;
    if (rc != QW_ERR_DB_CONN) {
        qw_cli_err("%s", err.msg);
        return rc;
    }
    const char *from = qw_config_origin(cfg, "database", "conninfo");
    if (cfg->db_conninfo[0])
        qw_cli_err("%s (connection string \"%s\" from %s)", err.msg, cfg->db_conninfo,
                   from ? from : "the built-in default");
    else
        qw_cli_err("%s (no connection string is set, so libpq's defaults and PGHOST, PGPORT, "
                   "PGDATABASE, PGUSER apply; give one with --database CONNINFO, "
                   "QUEUER_DATABASE_CONNINFO or database.conninfo)",
                   err.msg);
    return rc;
}

int qw_cli_open_db(const struct qw_cli_common *c, const char *app, struct qw_db **db)
{
    struct qw_config cfg;
    if (qw_cli_load_config(c, &cfg) != QW_OK)
        return QW_EXIT_CONFIG;
    int rc = qw_cli_connect(&cfg, app, false, db);
    qw_config_free(&cfg);
    return qw_cli_exit_for(rc);
}

int qw_cli_db_error(const struct qw_error *err, const char *role)
{
    if (strcmp(err->sqlstate, "42501") == 0 && role)
        qw_cli_err("%s (this needs %s)", err->msg, role);
    else
        qw_cli_err("%s", err->msg);
    return qw_cli_exit_for(err->rc);
}

int qw_cli_open_current_db(const struct qw_cli_common *c, const char *app, const char *role,
                           struct qw_db **db)
{
    int code = qw_cli_open_db(c, app, db);
    if (code != QW_EXIT_OK)
        return code;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_migrate_check(*db, NULL, &err) != QW_OK) {
        qw_db_close(*db);
        *db = NULL;
        return qw_cli_db_error(&err, role);
    }
    return QW_EXIT_OK;
}

int qw_cli_print_json(json_t *obj)
{
    char *text = obj ? json_dumps(obj, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(obj);
    if (!text) {
        qw_cli_err("out of memory");
        return QW_EXIT_FAILURE;
    }
    puts(text);
    free(text);
    return QW_EXIT_OK;
}

void qw_cli_help_common(FILE *out)
{
    fprintf(out,
            "\n"
            "common options (before or after the command):\n"
            "  -c, --config FILE     libconfig file (default: $QUEUER_CONFIG, else none)\n"
            "  --database CONNINFO   libpq connection string; wins over database.conninfo\n"
            "\n"
            "environment:\n"
            "  QUEUER_CONFIG             configuration file when -c is not given\n"
            "  QUEUER_<SECTION>_<KEY>    any key, e.g. QUEUER_DATABASE_CONNINFO, QUEUER_LOG_LEVEL\n"
            "  QUEUER_DATABASE_PASSWORD  database password (or database.password_file)\n"
            "  PGHOST, PGPORT, PGDATABASE, PGUSER, ...  libpq's defaults, used for what the\n"
            "                            connection string leaves out\n");
}
