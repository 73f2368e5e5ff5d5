/* `queuer check-config`: load the configuration as `queuer run` would and print it. */
#include "cli/cli.h"
#include "config/config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: queuer check-config [-c FILE | FILE] [--database CONNINFO] [--json]\n"
            "\n"
            "Loads the configuration exactly as the other commands do: built-in defaults,\n"
            "then the file (-c FILE, a FILE argument, or $QUEUER_CONFIG; none is fine: a\n"
            "container configured by environment alone has none), then the QUEUER_*\n"
            "environment, then --database. Prints the effective configuration, each\n"
            "value that is not the default followed by where it came from (file:line or\n"
            "variable). Secrets are shown only as <set>/<unset>. Nothing is connected.\n"
            "\n"
            "  --json   the same as one JSON object: {\"valid\", \"file\", \"keys\": [{\"key\",\n"
            "           \"value\", \"from\", \"reloadable\"}], \"secrets\"}; when the\n"
            "           configuration is invalid {\"valid\": false, \"error\"}\n");
    qw_cli_help_common(out);
    fprintf(out, "\nexit status: 0 valid; 64 usage; 78 invalid configuration (the message\n"
                 "names the file:line or the variable).\n");
}

struct json_visit {
    json_t *keys;    /* array of key objects */
    json_t *secrets; /* object: "section.name" -> bool */
};

static void add_key(void *ctx, const char *section, const char *name, enum qw_config_kind kind,
                    long long num, const char *str, const char *origin)
{
    struct json_visit *v = ctx;
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", section, name);
    if (kind == QW_CONFIG_SECRET) {
        json_object_set_new(v->secrets, full, json_boolean(num));
        return;
    }
    json_t *value = kind == QW_CONFIG_STRING ? json_string(str)
                    : kind == QW_CONFIG_BOOL ? json_boolean(num)
                                             : json_integer(num);
    json_array_append_new(v->keys,
                          json_pack("{s:s, s:o, s:s?, s:b}", "key", full, "value", value, "from",
                                    origin, "reloadable", qw_config_reloadable(section, name)));
}

static void print_warning(void *ctx, const char *msg)
{
    (void)ctx;
    qw_cli_warn("%s", msg);
}

int qw_cmd_check_config(int argc, char **argv)
{
    struct qw_cli_common common = {0};
    int json = 0;
    int i = 0, r;
    while ((r = qw_cli_next_arg(argc, argv, &i, &common, usage)) == QW_CLI_ARG) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (argv[i][0] != '-' && !common.config_path) {
            common.config_path = argv[i];
        } else {
            qw_cli_err("unexpected argument '%s'", argv[i]);
            usage(stderr);
            return QW_EXIT_USAGE;
        }
    }
    if (r != QW_CLI_ARGS_END)
        return r;
    struct qw_config_source src = {
        .path = common.config_path,
        .path_from = "the command line",
        .database = common.database,
        .warn = print_warning,
    };
    if (!src.path && getenv("QUEUER_CONFIG") && *getenv("QUEUER_CONFIG")) {
        src.path = getenv("QUEUER_CONFIG");
        src.path_from = "QUEUER_CONFIG";
    }
    struct qw_config cfg;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_config_load_from(&cfg, &src, environ, &err) != QW_OK) {
        qw_cli_err("%s", err.msg);
        if (json)
            qw_cli_print_json(json_pack("{s:b, s:s}", "valid", 0, "error", err.msg));
        return QW_EXIT_CONFIG;
    }
    int code = QW_EXIT_OK;
    if (json) {
        struct json_visit v = {json_array(), json_object()};
        qw_config_visit(&cfg, add_key, &v);
        code = qw_cli_print_json(json_pack("{s:b, s:s?, s:o, s:o}", "valid", 1, "file", src.path,
                                           "keys", v.keys, "secrets", v.secrets));
    } else {
        qw_config_print(&cfg, stdout);
        fprintf(stderr, "queuer check-config: configuration OK (%s%s)\n",
                src.path ? "file " : "no file: defaults and environment", src.path ? src.path : "");
    }
    qw_config_free(&cfg);
    return code;
}
