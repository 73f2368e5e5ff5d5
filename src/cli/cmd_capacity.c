/*
 * `queuer capacity set|show|clear`: a ledger's shared capacity.
 * set and clear call queuer.capacity_set() / queuer.capacity_clear()
 * (migration 0009), which check the values and cut the partitions; show
 * reads queuer.capacity and the overview views. The workers pick a change
 * up within one lease step. This file only parses, calls and reports.
 */
#include "cli/cli.h"
#include "common/strbuf.h"
#include "common/table.h"
#include "config/config.h"
#include "db/db.h"
#include "db/migrate.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: queuer capacity set [--ledger NAME] [--max-in-flight M] [--per-second R]\n"
            "                           [--partition-size P] [--reserved-per-instance K]\n"
            "       queuer capacity show [--ledger NAME] [--json]\n"
            "       queuer capacity clear [--ledger NAME]\n"
            "       (each also takes -c FILE and --database CONNINFO)\n"
            "\n"
            "The capacity of a ledger that all workers share (docs/OPERATIONS.md, \"Shared\n"
            "ledger capacity\"), in cost units (dlt.cost: batches by default).\n"
            "\n"
            "set     states the whole capacity, replacing any earlier one: at most M units\n"
            "        in flight and/or R units a second (one of them at least), cut into\n"
            "        partitions of P units (of M when set, else of R; default 1/32 of it),\n"
            "        K units reserved by each live worker (a multiple of P; default 0).\n"
            "show    the capacity, its partitions (held, free, lapsed, retiring) and what\n"
            "        each worker wants (target) and holds; all ledgers unless --ledger.\n"
            "clear   removes it: the workers stop limiting themselves.\n"
            "\n"
            "--ledger defaults to dlt.ledger of the configuration (\"default\"). Workers pick\n"
            "a change up within a step (at most worker.cycle_ms, 250 ms while set); a new\n"
            "capacity is used only once the old one's partitions are given back or lapsed.\n"
            "set and clear need the queuer_operator role.\n");
    qw_cli_help_common(out);
    fprintf(out, "\nexit status: 0 done; 1 failed (clear: none was set); 64 usage; 65 values\n"
                 "the database refused; 69 database unreachable; 78 bad configuration.\n");
}

struct args {
    const char *action;          /* "set", "show" or "clear" */
    struct qw_cli_common common; /* -c FILE, --database */
    const char *ledger;          /* --ledger, or NULL (dlt.ledger) */
    const char *limit[4];        /* set: max in flight, per second, partition size, reserved */
    int json;                    /* show: --json */
};

static const char *const limit_opts[4] = {"--max-in-flight", "--per-second", "--partition-size",
                                          "--reserved-per-instance"};

static bool positive_number(const char *text, bool zero_ok)
{
    if (!isdigit((unsigned char)text[0]))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    return !errno && !*end && (v > 0 || (zero_ok && v == 0));
}

/* Returns -1 to go on, else the exit code of a usage error or --help. */
static int parse_args(int argc, char **argv, struct args *a)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? QW_EXIT_USAGE : QW_EXIT_OK;
    }
    a->action = argv[1];
    if (strcmp(a->action, "set") != 0 && strcmp(a->action, "show") != 0 &&
        strcmp(a->action, "clear") != 0) {
        qw_cli_err("unknown action '%s' (set, show or clear)", a->action);
        return QW_EXIT_USAGE;
    }
    bool set = strcmp(a->action, "set") == 0;
    int i = 1, r; /* argv[1] is the action */
    while ((r = qw_cli_next_arg(argc, argv, &i, &a->common, usage)) == QW_CLI_ARG) {
        const char *arg = argv[i];
        if (strcmp(arg, "--json") == 0 && strcmp(a->action, "show") == 0) {
            a->json = 1;
            continue;
        }
        if (strcmp(arg, "--ledger") == 0 && i + 1 < argc) {
            a->ledger = argv[++i];
            continue;
        }
        int k = -1;
        for (int j = 0; set && j < 4; j++) {
            if (strcmp(arg, limit_opts[j]) == 0)
                k = j;
        }
        if (k >= 0 && i + 1 < argc) {
            a->limit[k] = argv[++i];
            if (!positive_number(a->limit[k], k == 3)) {
                qw_cli_err("%s needs a whole number %s", limit_opts[k], k == 3 ? ">= 0" : "> 0");
                return QW_EXIT_USAGE;
            }
            continue;
        }
        qw_cli_err("unknown or incomplete argument '%s'", arg);
        usage(stderr);
        return QW_EXIT_USAGE;
    }
    if (r != QW_CLI_ARGS_END)
        return r;
    if (set && !a->limit[0] && !a->limit[1]) {
        qw_cli_err("set: give --max-in-flight, --per-second or both");
        return QW_EXIT_USAGE;
    }
    return -1;
}

static void print_limit(const char *label, const struct qw_db_res *res, int row, int col)
{
    if (qw_db_res_isnull(res, row, col))
        printf("  %-22s unlimited\n", label);
    else
        printf("  %-22s %s\n", label, qw_db_res_get(res, row, col));
}

static int do_set(struct qw_db *db, const struct args *a, const char *ledger, struct qw_error *err)
{
    const char *params[] = {ledger, a->limit[0], a->limit[1], a->limit[2], a->limit[3]};
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "ops_capacity_set", 5, params, &res, err);
    if (rc != QW_OK)
        return rc;
    printf("capacity of ledger %s set (generation %s)\n", qw_db_res_get(res, 0, 0),
           qw_db_res_get(res, 0, 6));
    print_limit("max in flight", res, 0, 1);
    print_limit("per second", res, 0, 2);
    printf("  %-22s %s (%s partitions)\n", "partition size", qw_db_res_get(res, 0, 3),
           qw_db_res_get(res, 0, 5));
    printf("  %-22s %s\n", "reserved per instance", qw_db_res_get(res, 0, 4));
    printf("workers pick it up within a step; the old capacity, if any, is used until its\n"
           "partitions are given back\n");
    qw_db_res_free(res);
    return QW_OK;
}

static int do_clear(struct qw_db *db, const char *ledger, bool *none, struct qw_error *err)
{
    const char *params[] = {ledger};
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "ops_capacity_clear", 1, params, &res, err);
    if (rc != QW_OK)
        return rc;
    bool was = qw_db_res_get(res, 0, 0)[0] == 't';
    qw_db_res_free(res);
    *none = !was;
    if (!was) {
        printf("ledger %s has no capacity set: nothing to clear\n", ledger);
        return QW_OK;
    }
    printf("capacity of ledger %s cleared: workers stop limiting themselves within a step\n",
           ledger);
    return QW_OK;
}

/* A column as JSON: integer, or null for NULL. */
static json_t *json_int_or_null(const struct qw_db_res *res, int row, int col)
{
    return qw_db_res_isnull(res, row, col) ? json_null()
                                           : json_integer(qw_db_res_int(res, row, col));
}

static const char *text_or_dash(const struct qw_db_res *res, int row, int col)
{
    return qw_db_res_isnull(res, row, col) ? "-" : qw_db_res_get(res, row, col);
}

static int show_text(const struct qw_db_res *ledgers, const struct qw_db_res *inst)
{
    int n = qw_db_res_rows(ledgers);
    if (n == 0) {
        printf("no shared capacity set: workers do not limit themselves\n");
        return QW_OK;
    }
    for (int i = 0; i < n; i++) {
        const char *name = qw_db_res_get(ledgers, i, 0);
        printf("%sledger %s (generation %s, set %s by %s)\n", i ? "\n" : "", name,
               qw_db_res_get(ledgers, i, 6), qw_db_res_get(ledgers, i, 7),
               qw_db_res_get(ledgers, i, 8));
        print_limit("max in flight", ledgers, i, 1);
        print_limit("per second", ledgers, i, 2);
        printf("  %-22s %s (%s partitions: %s held, %s free, %s lapsed, %s retiring)\n",
               "partition size", qw_db_res_get(ledgers, i, 3), qw_db_res_get(ledgers, i, 5),
               qw_db_res_get(ledgers, i, 9), qw_db_res_get(ledgers, i, 10),
               qw_db_res_get(ledgers, i, 11), qw_db_res_get(ledgers, i, 12));
        printf("  %-22s %s\n", "reserved per instance", qw_db_res_get(ledgers, i, 4));
        size_t rows = 0;
        for (int r = 0; r < qw_db_res_rows(inst); r++)
            rows += strcmp(qw_db_res_get(inst, r, 0), name) == 0;
        if (rows == 0) {
            printf("  no worker has published a target yet\n");
            continue;
        }
        struct qw_table t;
        if (qw_table_init(&t, rows + 1, 8) != 0)
            return QW_ERR_NOMEM;
        const char *head[] = {"INSTANCE", "STATE",     "TARGET",     "PARTITIONS",
                              "RESERVED", "IN FLIGHT", "PER SECOND", "COST"};
        for (int c = 0; c < t.cols; c++)
            qw_table_set(&t, 0, c, head[c]);
        size_t row = 1;
        for (int r = 0; r < qw_db_res_rows(inst); r++) {
            if (strcmp(qw_db_res_get(inst, r, 0), name) != 0)
                continue;
            qw_table_set(&t, row, 0, qw_db_res_get(inst, r, 1));
            qw_table_set(&t, row, 1, qw_db_res_get(inst, r, 2));
            qw_table_set(&t, row, 2, qw_db_res_get(inst, r, 3));
            qw_table_set(&t, row, 3, qw_db_res_get(inst, r, 5));
            qw_table_set(&t, row, 4, qw_db_res_get(inst, r, 6));
            qw_table_set(&t, row, 5, text_or_dash(inst, r, 7));
            qw_table_set(&t, row, 6, text_or_dash(inst, r, 8));
            qw_table_set(&t, row, 7, qw_db_res_get(inst, r, 4));
            row++;
        }
        struct qw_strbuf b;
        qw_strbuf_init(&b);
        qw_table_render(&t, &b);
        qw_table_free(&t);
        char *text = qw_strbuf_take(&b, NULL);
        if (!text)
            return QW_ERR_NOMEM;
        fputs(text, stdout);
        free(text);
    }
    return QW_OK;
}

static int show_json(const struct qw_db_res *ledgers, const struct qw_db_res *inst)
{
    json_t *root = json_object(), *list = json_array();
    int bad = !root || !list;
    for (int i = 0; !bad && i < qw_db_res_rows(ledgers); i++) {
        const char *name = qw_db_res_get(ledgers, i, 0);
        json_t *workers = json_array();
        for (int r = 0; workers && r < qw_db_res_rows(inst); r++) {
            if (strcmp(qw_db_res_get(inst, r, 0), name) != 0)
                continue;
            json_t *o =
                json_pack("{s:s, s:s, s:I, s:s, s:I, s:I, s:o, s:o}", "instance_id",
                          qw_db_res_get(inst, r, 1), "state", qw_db_res_get(inst, r, 2), "target",
                          (json_int_t)qw_db_res_int(inst, r, 3), "cost", qw_db_res_get(inst, r, 4),
                          "partitions", (json_int_t)qw_db_res_int(inst, r, 5),
                          "reserved_partitions", (json_int_t)qw_db_res_int(inst, r, 6), "in_flight",
                          json_int_or_null(inst, r, 7), "per_second", json_int_or_null(inst, r, 8));
            bad |= o ? json_array_append_new(workers, o) : -1;
        }
        json_t *o =
            workers ? json_pack("{s:s, s:o, s:o, s:I, s:I, s:I, s:I, s:s, s:s, s:{s:I, s:I, "
                                "s:I, s:I}, s:o}",
                                "ledger", name, "max_in_flight", json_int_or_null(ledgers, i, 1),
                                "per_second", json_int_or_null(ledgers, i, 2), "partition_size",
                                (json_int_t)qw_db_res_int(ledgers, i, 3), "reserved_per_instance",
                                (json_int_t)qw_db_res_int(ledgers, i, 4), "partitions",
                                (json_int_t)qw_db_res_int(ledgers, i, 5), "generation",
                                (json_int_t)qw_db_res_int(ledgers, i, 6), "updated_at",
                                qw_db_res_get(ledgers, i, 7), "updated_by",
                                qw_db_res_get(ledgers, i, 8), "partitions_by_state", "held",
                                (json_int_t)qw_db_res_int(ledgers, i, 9), "free",
                                (json_int_t)qw_db_res_int(ledgers, i, 10), "lapsed",
                                (json_int_t)qw_db_res_int(ledgers, i, 11), "retiring",
                                (json_int_t)qw_db_res_int(ledgers, i, 12), "instances", workers)
                    : NULL;
        bad |= o ? json_array_append_new(list, o) : -1;
    }
    if (bad || json_object_set_new(root, "ledgers", list) != 0) {
        json_decref(list);
        json_decref(root);
        return QW_ERR_NOMEM;
    }
    return qw_cli_print_json(root) == QW_EXIT_OK ? QW_OK : QW_ERR_NOMEM;
}

static int do_show(struct qw_db *db, const struct args *a, struct qw_error *err)
{
    const char *params[] = {a->ledger};
    struct qw_db_res *ledgers = NULL, *inst = NULL;
    int rc = qw_db_query(db, "ops_capacity_ledgers", 1, params, &ledgers, err);
    if (rc == QW_OK)
        rc = qw_db_query(db, "ops_capacity_instances", 1, params, &inst, err);
    if (rc == QW_OK)
        rc = a->json ? show_json(ledgers, inst) : show_text(ledgers, inst);
    if (rc == QW_ERR_NOMEM)
        qw_error_set(err, rc, "out of memory");
    qw_db_res_free(ledgers);
    qw_db_res_free(inst);
    return rc;
}

int qw_cmd_capacity(int argc, char **argv)
{
    struct args a = {0};
    int code = parse_args(argc, argv, &a);
    if (code >= 0)
        return code;
    struct qw_config cfg;
    if (qw_cli_load_config(&a.common, &cfg) != QW_OK)
        return QW_EXIT_CONFIG;
    struct qw_db *db = NULL;
    int rc = qw_cli_connect(&cfg, "queuer-capacity", false, &db);
    if (rc != QW_OK) {
        qw_config_free(&cfg);
        return qw_cli_exit_for(rc);
    }
    /* show without --ledger lists every ledger; set and clear act on dlt.ledger */
    char ledger[80];
    snprintf(ledger, sizeof(ledger), "%s", a.ledger ? a.ledger : cfg.dlt_ledger);
    qw_config_free(&cfg);
    struct qw_error err;
    qw_error_clear(&err);
    bool none = false;
    rc = qw_migrate_check(db, NULL, &err);
    if (rc == QW_OK && strcmp(a.action, "set") == 0)
        rc = do_set(db, &a, ledger, &err);
    else if (rc == QW_OK && strcmp(a.action, "clear") == 0)
        rc = do_clear(db, ledger, &none, &err);
    else if (rc == QW_OK)
        rc = do_show(db, &a, &err);
    qw_db_close(db);
    if (none)
        return QW_EXIT_FAILURE;
    if (rc != QW_OK) {
        int exit_code = qw_cli_db_error(&err, "queuer_operator");
        /* 22023 (invalid value) and 23514 (check violation): the values were refused */
        if (strcmp(err.sqlstate, "22023") == 0 || strcmp(err.sqlstate, "23514") == 0)
            return QW_EXIT_DATAERR;
        return exit_code;
    }
    return fflush(stdout) == 0 ? QW_EXIT_OK : QW_EXIT_FAILURE;
}
