/*
 * `queuer batch show|retry|cancel ID`: one batch without its payload and
 * its full history; the audited operator actions. The actions run
 * queuer.batch_retry() / queuer.batch_cancel() (migration 0002), which
 * lock the service's claim row and the batch, compare-and-set on the state
 * read under the lock, refuse batches in flight and append a history row
 * by 'operator:<login role>'. This file only parses, calls and reports.
 */
#include "cli/cli.h"
#include "common/strbuf.h"
#include "common/table.h"
#include "common/termtext.h"
#include "db/db.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_PREFIX_MIN 16 /* shortest batch id prefix accepted */
#define ID_LEN 128       /* a full batch id */
#define REASON_MAX 1000  /* longest --reason accepted, bytes */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: queuer batch show ID [--json]\n"
            "       queuer batch retry ID [--reason TEXT]\n"
            "       queuer batch retry --invalid ID --reason TEXT\n"
            "       queuer batch cancel ID --reason TEXT\n"
            "       (and the common options -c FILE, --database CONNINFO)\n"
            "\n"
            "ID is a batch id or a unique prefix of at least 16 of its characters.\n"
            "\n"
            "show    the batch's fields (never its payload), its service's claim, its place\n"
            "        in the service's queue, and its full history.\n"
            "retry   a Delayed, Unknown or parked batch becomes due now; the worker holding\n"
            "        its service resubmits it (a parked batch gets one more attempt).\n"
            "        With --invalid: a batch marked Invalid by mistake (e.g. a proxy's 400)\n"
            "        is queued again; needs --reason. Later batches of its service may\n"
            "        already be at the ledger, which then sees this one after them.\n"
            "cancel  ends a waiting, Delayed, Unknown or parked batch as Invalid with the\n"
            "        reason, so the next batch of its service may go.\n"
            "\n"
            "retry and cancel lock the service's claim and the batch, act only on the state\n"
            "they read under the lock, refuse a batch in flight (being submitted, or Pending\n"
            "at the ledger), and record the action in the batch's history as\n"
            "'operator:<database role>' with the reason. They need the queuer_operator role.\n");
    qw_cli_help_common(out);
    fprintf(out, "\nexit status: 0 done; 1 refused (final, or nothing to retry) or failed; 64\n"
                 "usage; 65 no such batch, or an ambiguous prefix; 69 database unreachable; 75\n"
                 "the batch is in flight or locked by a worker right now: try again later; 78\n"
                 "bad configuration.\n");
}

struct args {
    const char *action;          /* "show", "retry" or "cancel" */
    char id[ID_LEN + 1];         /* lower-cased id or prefix */
    struct qw_cli_common common; /* -c FILE, --database */
    const char *reason;          /* --reason, or NULL */
    int json;                    /* bool: --json (show) */
    int invalid;                 /* bool: --invalid (retry an Invalid batch) */
};

/* Returns -1 to go on, else the exit code of a usage error or --help. */
static int parse_args(int argc, char **argv, struct args *a)
{
    const char *id = NULL;
    int i = 0, r;
    while ((r = qw_cli_next_arg(argc, argv, &i, &a->common, usage)) == QW_CLI_ARG) {
        const char *arg = argv[i];
        if (strcmp(arg, "--json") == 0) {
            a->json = 1;
        } else if (strcmp(arg, "--invalid") == 0) {
            a->invalid = 1;
        } else if (strcmp(arg, "--reason") == 0 && i + 1 < argc) {
            a->reason = argv[++i];
        } else if (arg[0] == '-') {
            qw_cli_err("unknown option '%s'", arg);
            return QW_EXIT_USAGE;
        } else if (!a->action) {
            a->action = arg;
        } else if (!id) {
            id = arg;
        } else {
            qw_cli_err("unexpected argument '%s'", arg);
            return QW_EXIT_USAGE;
        }
    }
    if (r != QW_CLI_ARGS_END)
        return r;
    if (!a->action || (strcmp(a->action, "show") != 0 && strcmp(a->action, "retry") != 0 &&
                       strcmp(a->action, "cancel") != 0)) {
        qw_cli_err("expected show, retry or cancel");
        usage(stderr);
        return QW_EXIT_USAGE;
    }
    if (!id) {
        qw_cli_err("%s: missing batch id", a->action);
        return QW_EXIT_USAGE;
    }
    size_t n = strlen(id);
    if (n < ID_PREFIX_MIN || n > ID_LEN) {
        qw_cli_err("%s: a batch id has %d hex characters; give all of them or a prefix of "
                   "at least %d",
                   a->action, ID_LEN, ID_PREFIX_MIN);
        return QW_EXIT_USAGE;
    }
    for (size_t k = 0; k < n; k++) {
        if (!isxdigit((unsigned char)id[k])) {
            qw_cli_err("%s: '%s' is not a hex batch id", a->action, id);
            return QW_EXIT_USAGE;
        }
        a->id[k] = (char)tolower((unsigned char)id[k]);
    }
    a->id[n] = '\0';
    if (a->json && strcmp(a->action, "show") != 0) {
        qw_cli_err("%s: --json goes with show", a->action);
        return QW_EXIT_USAGE;
    }
    if (a->reason && (strlen(a->reason) > REASON_MAX || strcmp(a->action, "show") == 0)) {
        qw_cli_err("%s: %s", a->action,
                   strcmp(a->action, "show") == 0 ? "--reason goes with retry and cancel"
                                                  : "--reason is longer than 1000 bytes");
        return QW_EXIT_USAGE;
    }
    if (a->invalid && strcmp(a->action, "retry") != 0) {
        qw_cli_err("%s: --invalid goes with retry", a->action);
        return QW_EXIT_USAGE;
    }
    if (strcmp(a->action, "cancel") == 0 || a->invalid) {
        const char *p = a->reason;
        while (p && isspace((unsigned char)*p))
            p++;
        if (!p || !*p) {
            qw_cli_err("%s: --reason TEXT is required (it is kept in the batch's history)",
                       a->invalid ? "retry --invalid" : "cancel");
            return QW_EXIT_USAGE;
        }
    }
    return -1;
}

/* Turns a unique prefix into the full id. Returns an exit code or -1 to go on. */
static int resolve(struct qw_db *db, struct args *a)
{
    const char *params[] = {a->id};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_db_query(db, "ops_batch_resolve", 1, params, &res, &err);
    if (rc != QW_OK) {
        return qw_cli_db_error(&err, "a role granted queuer_operator");
    }
    int rows = qw_db_res_rows(res);
    if (rows == 1)
        snprintf(a->id, sizeof(a->id), "%s", qw_db_res_get(res, 0, 0));
    qw_db_res_free(res);
    if (rows == 0) {
        qw_cli_err("no batch %s", a->id);
        return QW_EXIT_DATAERR;
    }
    if (rows > 1) {
        qw_cli_err("prefix %s matches more than one batch; give more characters", a->id);
        return QW_EXIT_DATAERR;
    }
    return -1;
}

static const char *or_dash(const struct qw_db_res *res, int row, int col)
{
    return qw_db_res_isnull(res, row, col) ? "-" : qw_db_res_get(res, row, col);
}

/* Appends "LABEL      value\n" with the value's control characters written out. */
static void put_escaped(struct qw_strbuf *s, const char *label, const char *value)
{
    char *v = qw_termtext_dup(value);
    if (!v) {
        s->failed = true;
        return;
    }
    qw_strbuf_printf(s, "%-12s%s\n", label, v);
    free(v);
}

static json_t *nullable(const struct qw_db_res *res, int row, int col)
{
    return qw_db_res_isnull(res, row, col) ? json_null()
                                           : json_string(qw_db_res_get(res, row, col));
}

static json_t *show_json(const struct qw_db_res *b, const struct qw_db_res *h)
{
    json_t *hist = json_array();
    for (int i = 0; hist && i < qw_db_res_rows(h); i++) {
        json_t *row = json_pack(
            "{s:I, s:s, s:s?, s:s, s:s?, s:o, s:s?}", "id", (json_int_t)qw_db_res_int(h, i, 0),
            "at", qw_db_res_get(h, i, 1), "from",
            *qw_db_res_get(h, i, 2) ? qw_db_res_get(h, i, 2) : NULL, "to", qw_db_res_get(h, i, 3),
            "instance_id", *qw_db_res_get(h, i, 4) ? qw_db_res_get(h, i, 4) : NULL, "claim_epoch",
            qw_db_res_isnull(h, i, 5) ? json_null() : json_integer(qw_db_res_int(h, i, 5)),
            "detail", *qw_db_res_get(h, i, 6) ? qw_db_res_get(h, i, 6) : NULL);
        if (!row || json_array_append_new(hist, row) != 0) {
            json_decref(hist);
            return NULL;
        }
    }
    if (!hist)
        return NULL;
    return json_pack(
        "{s:s, s:s, s:s, s:b, s:I, s:o, s:o, s:o, s:o, s:o, s:I, s:o, s:o, s:s, s:o, s:I, s:o}",
        "batch_id", qw_db_res_get(b, 0, 0), "service_id", qw_db_res_get(b, 0, 1), "state",
        qw_db_res_get(b, 0, 2), "submitted", qw_db_res_get(b, 0, 3)[0] == 't', "attempts",
        (json_int_t)qw_db_res_int(b, 0, 4), "created_at", nullable(b, 0, 5), "last_submitted_at",
        nullable(b, 0, 6), "retry_at", nullable(b, 0, 7), "status_at", nullable(b, 0, 8),
        "last_error", nullable(b, 0, 9), "payload_bytes", (json_int_t)qw_db_res_int(b, 0, 10),
        "claimant", nullable(b, 0, 11), "claim_epoch",
        qw_db_res_isnull(b, 0, 12) ? json_null() : json_integer(qw_db_res_int(b, 0, 12)),
        "claim_state", qw_db_res_get(b, 0, 13), "ahead",
        qw_db_res_isnull(b, 0, 14) ? json_null() : json_integer(qw_db_res_int(b, 0, 14)),
        "service_backlog", (json_int_t)qw_db_res_int(b, 0, 15), "history", hist);
}

static char *show_text(const struct qw_db_res *b, const struct qw_db_res *h)
{
    struct qw_strbuf s;
    qw_strbuf_init(&s);
    const char *state = qw_db_res_get(b, 0, 2);
    qw_strbuf_printf(&s, "batch       %s\n", qw_db_res_get(b, 0, 0));
    qw_strbuf_printf(&s, "service     %s\n", qw_db_res_get(b, 0, 1));
    qw_strbuf_printf(&s, "state       %s%s\n", state,
                     strcmp(state, "parked") == 0
                         ? "  (Delayed for good after dlt.max_attempts: retry or cancel it)"
                         : "");
    qw_strbuf_printf(&s, "submitted   %s\n", qw_db_res_get(b, 0, 3)[0] == 't' ? "yes" : "no");
    qw_strbuf_printf(&s, "attempts    %s\n", qw_db_res_get(b, 0, 4));
    qw_strbuf_printf(&s, "created     %s\n", or_dash(b, 0, 5));
    qw_strbuf_printf(&s, "last POST   %s\n", or_dash(b, 0, 6));
    qw_strbuf_printf(&s, "retry at    %s\n", or_dash(b, 0, 7));
    qw_strbuf_printf(&s, "status at   %s\n", or_dash(b, 0, 8));
    put_escaped(&s, "last error", or_dash(b, 0, 9));
    qw_strbuf_printf(&s, "payload     %s bytes\n", qw_db_res_get(b, 0, 10));
    if (qw_db_res_isnull(b, 0, 11)) {
        qw_strbuf_printf(&s, "claim       none (%s)\n", qw_db_res_get(b, 0, 13));
    } else {
        char claim[512];
        snprintf(claim, sizeof(claim), "%s, epoch %s, %s", qw_db_res_get(b, 0, 11),
                 qw_db_res_get(b, 0, 12), qw_db_res_get(b, 0, 13));
        put_escaped(&s, "claim", claim);
    }
    if (qw_db_res_isnull(b, 0, 14))
        qw_strbuf_printf(&s, "queue       final; %s unfinished in the service\n",
                         qw_db_res_get(b, 0, 15));
    else
        qw_strbuf_printf(&s,
                         "queue       %s unfinished ahead of it, %s unfinished in the "
                         "service\n",
                         qw_db_res_get(b, 0, 14), qw_db_res_get(b, 0, 15));

    int n = qw_db_res_rows(h);
    qw_strbuf_printf(&s, "\nhistory (%d)\n", n);
    struct qw_table t;
    if (qw_table_init(&t, (size_t)n + 1, 7) != QW_OK) {
        qw_strbuf_free(&s);
        return NULL;
    }
    const char *head[] = {"ID", "AT", "FROM", "TO", "BY", "EPOCH", "DETAIL"};
    for (int c = 0; c < 7; c++)
        qw_table_set(&t, 0, c, head[c]);
    for (int i = 0; i < n; i++) {
        for (int c = 0; c < 7; c++) {
            const char *v = qw_db_res_get(h, i, c);
            qw_table_set(&t, (size_t)i + 1, c, *v ? v : "-");
        }
    }
    qw_table_render(&t, &s);
    qw_table_free(&t);
    return qw_strbuf_take(&s, NULL);
}

static int do_show(struct qw_db *db, const struct args *a)
{
    const char *params[] = {a->id};
    struct qw_db_res *b = NULL, *h = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_db_query(db, "ops_batch_show", 1, params, &b, &err);
    if (rc == QW_OK)
        rc = qw_db_query(db, "ops_batch_history", 1, params, &h, &err);
    if (rc != QW_OK) {
        qw_db_res_free(b);
        return qw_cli_db_error(&err, "a role granted queuer_operator");
    }
    int code = QW_EXIT_OK;
    if (qw_db_res_rows(b) != 1) {
        qw_cli_err("no batch %s (pruned a moment ago?)", a->id);
        code = QW_EXIT_DATAERR;
    } else {
        char *text = NULL;
        if (a->json) {
            json_t *obj = show_json(b, h);
            /* ASCII only: C1 controls and bidi overrides are \u-escaped like C0 ones */
            text = obj ? json_dumps(obj, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII)
                       : NULL;
            json_decref(obj);
        } else {
            text = show_text(b, h);
        }
        if (text) {
            fputs(text, stdout);
            if (a->json)
                fputc('\n', stdout);
            free(text);
        } else {
            qw_cli_err("out of memory");
            code = QW_EXIT_FAILURE;
        }
    }
    qw_db_res_free(b);
    qw_db_res_free(h);
    return code;
}

/* Exit code for an action's outcome (see queuer.operator_batch_action). */
static int outcome_exit(const char *outcome)
{
    if (strcmp(outcome, "done") == 0)
        return QW_EXIT_OK;
    if (strcmp(outcome, "not_found") == 0)
        return QW_EXIT_DATAERR;
    if (strcmp(outcome, "in_flight") == 0)
        return QW_EXIT_TEMPFAIL;
    return QW_EXIT_FAILURE; /* final, not_needed, changed */
}

static int do_action(struct qw_db *db, const struct args *a)
{
    int cancel = strcmp(a->action, "cancel") == 0;
    const char *params[] = {a->id, a->reason};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    const char *statement = cancel       ? "ops_batch_cancel"
                            : a->invalid ? "ops_batch_retry_invalid"
                                         : "ops_batch_retry";
    int rc = qw_db_query(db, statement, 2, params, &res, &err);
    if (rc == QW_ERR_SERIALIZATION) {
        /* 55P03 from the function's lock_timeout: a worker holds the rows. */
        qw_cli_err("the batch or its service's claim stayed locked by a worker; nothing "
                   "changed, try again");
        return QW_EXIT_TEMPFAIL;
    }
    if (rc != QW_OK) {
        return qw_cli_db_error(&err, "a role granted queuer_operator");
    }
    int code = QW_EXIT_FAILURE;
    if (qw_db_res_rows(res) == 1) {
        const char *outcome = qw_db_res_get(res, 0, 0);
        code = outcome_exit(outcome);
        FILE *out = code == QW_EXIT_OK ? stdout : stderr;
        char message[1024];
        qw_termtext_escape(message, sizeof(message), qw_db_res_get(res, 0, 4));
        fprintf(out, "queuer batch %s %.16s: %s%s\n", a->action, a->id,
                code == QW_EXIT_OK ? "" : "refused: ", message);
    } else {
        qw_cli_err("no answer from the database");
    }
    qw_db_res_free(res);
    return code;
}

int qw_cmd_batch(int argc, char **argv)
{
    struct args a;
    memset(&a, 0, sizeof(a));
    int code = parse_args(argc, argv, &a);
    if (code >= 0)
        return code;
    static char command[32]; /* "batch show" in messages from here on */
    snprintf(command, sizeof(command), "batch %s", a.action);
    qw_cli_set_command(command);
    struct qw_db *db = NULL;
    code = qw_cli_open_current_db(&a.common, "queuer-batch", "a role granted queuer_operator", &db);
    if (code != QW_EXIT_OK)
        return code;
    code = resolve(db, &a);
    if (code < 0)
        code = strcmp(a.action, "show") == 0 ? do_show(db, &a) : do_action(db, &a);
    qw_db_close(db);
    return code;
}
