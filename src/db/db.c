/* libpq adapter with client-side deadlines and classified errors; see db.h. */
#include "db/db.h"
#include "common/clock.h"
#include "common/embedded.h"
#include "common/log.h"

#include <libpq-fe.h>

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define QW_DB_MAX_LISTEN 4
#define QW_DB_MAX_PREPARED 128

struct qw_db {
    PGconn *conn;                             /* NULL after a drop */
    char *conninfo;                           /* copied from opts */
    char *password;                           /* copied; wiped on close */
    char *app_name;                           /* application_name */
    int connect_timeout_s;                    /* seconds */
    int query_timeout_ms;                     /* deadline per call */
    int idle_in_txn_timeout_ms;               /* server setting, 0 = leave default */
    int lock_timeout_ms;                      /* server setting, 0 = leave default */
    int unprepared;                           /* send statement text, never prepare by name */
    int keep_jit;                             /* else SET jit = off at connect */
    char listen[QW_DB_MAX_LISTEN][64];        /* channels to re-LISTEN */
    int nlisten;                              /* used entries of listen */
    const char *prepared[QW_DB_MAX_PREPARED]; /* statement names prepared on conn */
    int nprepared;                            /* used entries of prepared */
    const char *begin;                        /* a BEGIN not sent yet (qw_db_begin) */
    bool then_pending;                        /* qw_db_query_then()'s second statement ran */
    struct qw_error then_err;                 /* (until the next call): its outcome */
};

struct qw_db_res {
    PGresult *res; /* owned */
};

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* Drops the connection (closing the socket) so a hung backend cannot hold us. */
static void db_drop(struct qw_db *db)
{
    if (db->conn) {
        PQfinish(db->conn);
        db->conn = NULL;
    }
    db->nprepared = 0;
    db->begin = NULL;
    db->then_pending = false;
}

/*
 * Errors that call for another connection. 25006 (read-only transaction):
 * the server we are on no longer takes writes (a primary demoted under a
 * pooler or a proxy that kept the client connection); reconnecting lets a
 * multi-host conninfo with target_session_attrs=read-write find the primary.
 */
static int is_conn_sqlstate(const char *st)
{
    return st && (strncmp(st, "08", 2) == 0 || strcmp(st, "57P01") == 0 ||
                  strcmp(st, "57P02") == 0 || strcmp(st, "57P03") == 0 || strcmp(st, "25006") == 0);
}

static int classify_sqlstate(const char *st)
{
    if (!st)
        return QW_ERR_DB;
    if (strcmp(st, "40001") == 0 || strcmp(st, "40P01") == 0 || strcmp(st, "55P03") == 0)
        return QW_ERR_SERIALIZATION;
    if (is_conn_sqlstate(st))
        return QW_ERR_DB_CONN;
    if (strcmp(st, "QU429") == 0)
        return QW_ERR_BACKPRESSURE;
    if (strcmp(st, "QU409") == 0)
        return QW_ERR_DUPLICATE;
    if (strcmp(st, "QU400") == 0 || strcmp(st, "QU413") == 0)
        return QW_ERR_INVALID;
    if (strcmp(st, "57014") == 0)
        return QW_ERR_TIMEOUT;
    return QW_ERR_DB;
}

/* Copies the first line of `msg` into err->msg. */
static void set_msg_line(struct qw_error *err, const char *prefix, const char *msg)
{
    if (!err)
        return;
    char line[sizeof(err->msg)];
    snprintf(line, sizeof(line), "%s", msg ? msg : "");
    line[strcspn(line, "\n")] = '\0';
    snprintf(err->msg, sizeof(err->msg), "%s%s", prefix, line);
}

static int conn_error(struct qw_db *db, struct qw_error *err)
{
    if (err) {
        err->rc = QW_ERR_DB_CONN;
        err->sqlstate[0] = '\0';
        set_msg_line(err, "database connection lost: ",
                     db->conn ? PQerrorMessage(db->conn) : "not connected");
    }
    db_drop(db);
    return QW_ERR_DB_CONN;
}

/* Classifies a finished result; frees nothing. */
static int result_rc(struct qw_db *db, PGresult *res, struct qw_error *err)
{
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_COPY_IN)
        return QW_OK;
    if (!res || (db->conn && PQstatus(db->conn) == CONNECTION_BAD))
        return conn_error(db, err);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    int rc = classify_sqlstate(state);
    if (err) {
        err->rc = rc;
        snprintf(err->sqlstate, sizeof(err->sqlstate), "%s", state ? state : "");
        const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
        set_msg_line(err, "", primary ? primary : PQresultErrorMessage(res));
    }
    if (rc == QW_ERR_DB_CONN)
        db_drop(db);
    return rc;
}

/*
 * Waits until the socket is ready for `events` or the deadline passes.
 * Returns 1 ready, 0 deadline, -1 error.
 */
static int wait_socket(PGconn *conn, short events, int64_t deadline_ms)
{
    for (;;) {
        int64_t left = deadline_ms - qw_clock_mono_ms();
        if (left <= 0)
            return 0;
        struct pollfd pfd = {.fd = PQsocket(conn), .events = events};
        int n = poll(&pfd, 1, left > 1000000 ? 1000000 : (int)left);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

static int deadline_passed(struct qw_db *db, struct qw_error *err)
{
    db_drop(db);
    return qw_error_set(err, QW_ERR_TIMEOUT,
                        "database did not answer within %d ms; connection dropped",
                        db->query_timeout_ms);
}

/* Flushes the outgoing query under the deadline. */
static int flush_out(struct qw_db *db, int64_t deadline, struct qw_error *err)
{
    for (;;) {
        int r = PQflush(db->conn);
        if (r == 0)
            return QW_OK;
        if (r < 0)
            return conn_error(db, err);
        int w = wait_socket(db->conn, POLLOUT | POLLIN, deadline);
        if (w == 0)
            return deadline_passed(db, err);
        if (w < 0 || !PQconsumeInput(db->conn))
            return conn_error(db, err);
    }
}

/* Waits until the next result can be read without blocking; on failure
 * frees *keep. */
static int await_result(struct qw_db *db, int64_t deadline, PGresult **keep, struct qw_error *err)
{
    while (PQisBusy(db->conn)) {
        int w = wait_socket(db->conn, POLLIN, deadline);
        if (w <= 0 || !PQconsumeInput(db->conn)) {
            PQclear(*keep);
            *keep = NULL;
            return w == 0 ? deadline_passed(db, err) : conn_error(db, err);
        }
    }
    return QW_OK;
}

/* Keeps the first error, else the latest result: drops `r` when an error is
 * kept already or when `skip`. */
static void keep_result(PGresult **keep, PGresult *r, bool skip)
{
    if (skip || (*keep && PQresultStatus(*keep) == PGRES_FATAL_ERROR)) {
        PQclear(r);
    } else {
        PQclear(*keep);
        *keep = r;
    }
}

/* The kept result's outcome; the result goes to *out when it succeeded and
 * the caller wants it, else it is freed. */
static int deliver(struct qw_db *db, PGresult *keep, PGresult **out, struct qw_error *err)
{
    int rc = result_rc(db, keep, err);
    if (rc != QW_OK || !out)
        PQclear(keep);
    else
        *out = keep;
    return rc;
}

/*
 * Collects the results of the query just sent. Keeps the first error, else
 * the last result. Stops early at COPY IN (the caller then streams data).
 */
static int collect(struct qw_db *db, PGresult **out, struct qw_error *err)
{
    int64_t deadline = qw_clock_mono_ms() + db->query_timeout_ms;
    int rc = flush_out(db, deadline, err);
    if (rc != QW_OK)
        return rc;
    PGresult *keep = NULL;
    for (;;) {
        rc = await_result(db, deadline, &keep, err);
        if (rc != QW_OK)
            return rc;
        PGresult *r = PQgetResult(db->conn);
        if (!r)
            break;
        if (PQresultStatus(r) == PGRES_COPY_IN) {
            PQclear(keep);
            keep = r;
            break;
        }
        keep_result(&keep, r, false);
    }
    if (!keep)
        return conn_error(db, err);
    return deliver(db, keep, out, err);
}

/*
 * Collects the results of a pipeline of `n` statements and its sync: per
 * statement its first error, else its last result, NULL when the server
 * skipped it. On failure the caller frees what `got` holds.
 */
static int collect_piped(struct qw_db *db, int n, PGresult *got[], struct qw_error *err)
{
    int64_t deadline = qw_clock_mono_ms() + db->query_timeout_ms;
    int rc = flush_out(db, deadline, err);
    if (rc != QW_OK)
        return rc;
    int i = 0; /* statements whose results are all in (each ends with a NULL) */
    for (;;) {
        PGresult *none = NULL;
        rc = await_result(db, deadline, &none, err);
        if (rc != QW_OK)
            return rc;
        PGresult *r = PQgetResult(db->conn);
        if (!r) {
            /* past the last statement without the sync: the connection broke */
            if (++i > n)
                return conn_error(db, err);
            continue;
        }
        ExecStatusType st = PQresultStatus(r);
        if (st == PGRES_PIPELINE_SYNC) {
            PQclear(r);
            break;
        }
        if (i >= n) {
            PQclear(r);
            return conn_error(db, err);
        }
        keep_result(&got[i], r, st == PGRES_PIPELINE_ABORTED);
    }
    return PQexitPipelineMode(db->conn) ? QW_OK : conn_error(db, err);
}

/*
 * Collects the results of a pipeline of two statements (the deferred BEGIN,
 * then the caller's) and its sync: the first error, else the caller's
 * statement's result.
 */
static int collect_pipeline(struct qw_db *db, PGresult **out, struct qw_error *err)
{
    PGresult *got[2] = {NULL, NULL};
    int rc = collect_piped(db, 2, got, err);
    bool begin_failed = got[0] && PQresultStatus(got[0]) == PGRES_FATAL_ERROR;
    PGresult *keep = got[begin_failed ? 0 : 1];
    PQclear(got[begin_failed ? 1 : 0]);
    if (rc != QW_OK || !keep) {
        PQclear(keep);
        return rc != QW_OK ? rc : conn_error(db, err);
    }
    return deliver(db, keep, out, err);
}

static int exec_setup(struct qw_db *db, const char *sql, struct qw_error *err)
{
    if (!PQsendQuery(db->conn, sql))
        return conn_error(db, err);
    return collect(db, NULL, err);
}

/* Server NOTICE/WARNING messages go to our log, not straight to stderr. */
static void on_notice(void *arg, const PGresult *res)
{
    (void)arg;
    char quoted[600];
    const char *severity = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    qw_log(severity && strcmp(severity, "WARNING") == 0 ? QW_LOG_WARN : QW_LOG_DEBUG, "db.notice",
           "severity=%s message=%s", severity ? severity : "NOTICE",
           qw_log_quote(quoted, sizeof(quoted), msg));
}

static int db_open(struct qw_db *db, struct qw_error *err)
{
    char timeout[16];
    snprintf(timeout, sizeof(timeout), "%d", db->connect_timeout_s);
    const char *keys[8];
    const char *vals[8];
    int n = 0;
    keys[n] = "application_name";
    vals[n++] = db->app_name;
    keys[n] = "connect_timeout";
    vals[n++] = timeout;
    keys[n] = "keepalives_idle";
    vals[n++] = "10";
    keys[n] = "keepalives_interval";
    vals[n++] = "3";
    keys[n] = "dbname";
    vals[n++] = db->conninfo;
    if (db->password) {
        keys[n] = "password";
        vals[n++] = db->password;
    }
    keys[n] = NULL;
    vals[n] = NULL;

    db->conn = PQconnectdbParams(keys, vals, 1);
    if (!db->conn)
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory connecting to the database");
    if (PQstatus(db->conn) != CONNECTION_OK) {
        if (err) {
            err->rc = QW_ERR_DB_CONN;
            err->sqlstate[0] = '\0';
            set_msg_line(err, "cannot connect to the database: ", PQerrorMessage(db->conn));
        }
        db_drop(db);
        return QW_ERR_DB_CONN;
    }
    PQsetNoticeReceiver(db->conn, on_notice, NULL);
    db->nprepared = 0;

    /* The server gives up shortly after we would (client deadline first). */
    char sql[128];
    snprintf(sql, sizeof(sql), "SET statement_timeout = %d", db->query_timeout_ms + 2000);
    int rc = exec_setup(db, sql, err);
    /* Our statements take arrays and ids whose plans do not depend on the
     * values: plan them once per connection instead of at every call. */
    if (rc == QW_OK)
        rc = exec_setup(db, "SET plan_cache_mode = force_generic_plan", err);
    /* A worker's generic plan whose row estimates for a small,
     * often-updated table (instances) ran high crossed the JIT cost
     * thresholds, and compiling it took 2-3 s of server CPU at every call
     * (the fair-share read). A bulk load, which gains from JIT, keeps
     * the server's setting. */
    if (rc == QW_OK && !db->keep_jit)
        rc = exec_setup(db, "SET jit = off", err);
    if (rc == QW_OK && db->idle_in_txn_timeout_ms > 0) {
        snprintf(sql, sizeof(sql), "SET idle_in_transaction_session_timeout = %d",
                 db->idle_in_txn_timeout_ms);
        rc = exec_setup(db, sql, err);
    }
    if (rc == QW_OK && db->lock_timeout_ms > 0) {
        snprintf(sql, sizeof(sql), "SET lock_timeout = %d", db->lock_timeout_ms);
        rc = exec_setup(db, sql, err);
    }
    for (int i = 0; rc == QW_OK && i < db->nlisten; i++) {
        snprintf(sql, sizeof(sql), "LISTEN %s", db->listen[i]);
        rc = exec_setup(db, sql, err);
    }
    return rc;
}

int qw_db_connect(struct qw_db **out, const struct qw_db_opts *opts, struct qw_error *err)
{
    *out = NULL;
    struct qw_db *db = calloc(1, sizeof(*db));
    if (!db)
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    db->conninfo = dup_or_null(opts->conninfo ? opts->conninfo : "");
    db->password = dup_or_null(opts->password);
    db->app_name = dup_or_null(opts->app_name ? opts->app_name : "queuer");
    db->connect_timeout_s = opts->connect_timeout_s > 0 ? opts->connect_timeout_s : 5;
    db->query_timeout_ms = opts->query_timeout_ms > 0 ? opts->query_timeout_ms : 10000;
    db->idle_in_txn_timeout_ms = opts->idle_in_txn_timeout_ms;
    db->lock_timeout_ms = opts->lock_timeout_ms;
    db->unprepared = opts->unprepared;
    db->keep_jit = opts->keep_jit;
    if (!db->conninfo || !db->app_name || (opts->password && !db->password)) {
        qw_db_close(db);
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }
    int rc = db_open(db, err);
    if (rc != QW_OK) {
        qw_db_close(db);
        return rc;
    }
    *out = db;
    return QW_OK;
}

void qw_db_close(struct qw_db *db)
{
    if (!db)
        return;
    db_drop(db);
    if (db->password) {
        explicit_bzero(db->password, strlen(db->password));
        free(db->password);
    }
    free(db->conninfo);
    free(db->app_name);
    free(db);
}

int qw_db_ok(const struct qw_db *db)
{
    return db && db->conn && PQstatus(db->conn) == CONNECTION_OK;
}

int qw_db_reconnect(struct qw_db *db, struct qw_error *err)
{
    db_drop(db);
    return db_open(db, err);
}

void qw_db_set_timeout(struct qw_db *db, int query_timeout_ms)
{
    if (query_timeout_ms > 0)
        db->query_timeout_ms = query_timeout_ms;
}

int qw_db_timeout(const struct qw_db *db)
{
    return db->query_timeout_ms;
}

/* Sends a deferred BEGIN on its own (before a statement that cannot join it in a pipeline). */
static int send_begin(struct qw_db *db, struct qw_error *err)
{
    const char *begin = db->begin;
    db->begin = NULL;
    return begin ? exec_setup(db, begin, err) : QW_OK;
}

int qw_db_begin(struct qw_db *db, const char *sql, struct qw_error *err)
{
    if (!db->conn)
        return conn_error(db, err);
    db->then_pending = false;
    db->begin = sql;
    return QW_OK;
}

int qw_db_exec(struct qw_db *db, const char *sql, struct qw_error *err)
{
    db->then_pending = false;
    if (!db->conn)
        return conn_error(db, err);
    int rc = send_begin(db, err);
    return rc == QW_OK ? exec_setup(db, sql, err) : rc;
}

static int wrap_result(PGresult *r, struct qw_db_res **res, struct qw_error *err)
{
    if (!res) {
        PQclear(r);
        return QW_OK;
    }
    struct qw_db_res *w = malloc(sizeof(*w));
    if (!w) {
        PQclear(r);
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }
    w->res = r;
    *res = w;
    return QW_OK;
}

/*
 * With a BEGIN deferred by qw_db_begin(): enters pipeline mode and sends the
 * BEGIN, so that the statement the caller sends next goes out with it in
 * one round trip. Returns 1 in pipeline mode, 0 when there is nothing to
 * send, -1 when the connection failed.
 */
static int pipeline_begin(struct qw_db *db)
{
    const char *begin = db->begin;
    if (!begin)
        return 0;
    db->begin = NULL;
    if (!PQenterPipelineMode(db->conn) ||
        !PQsendQueryParams(db->conn, begin, 0, NULL, NULL, NULL, NULL, 0))
        return -1;
    return 1;
}

/*
 * Waits for the result of a query just sent (`sent`: what PQsend* returned),
 * after pipeline_begin() returned `piped`.
 */
static int finish_query(struct qw_db *db, int piped, int sent, struct qw_db_res **res,
                        struct qw_error *err)
{
    if (piped < 0 || !sent || (piped && !PQpipelineSync(db->conn)))
        return conn_error(db, err);
    PGresult *r = NULL;
    int rc = piped ? collect_pipeline(db, &r, err) : collect(db, &r, err);
    if (rc != QW_OK)
        return rc;
    return wrap_result(r, res, err);
}

int qw_db_query_sql(struct qw_db *db, const char *sql, int nparams, const char *const *params,
                    struct qw_db_res **res, struct qw_error *err)
{
    if (res)
        *res = NULL;
    db->then_pending = false;
    if (!db->conn)
        return conn_error(db, err);
    int piped = pipeline_begin(db);
    return finish_query(db, piped,
                        piped >= 0 &&
                            PQsendQueryParams(db->conn, sql, nparams, NULL, params, NULL, NULL, 0),
                        res, err);
}

static int is_prepared(const struct qw_db *db, const char *name)
{
    for (int i = 0; i < db->nprepared; i++) {
        if (strcmp(db->prepared[i], name) == 0)
            return 1;
    }
    return 0;
}

/*
 * Sends statement `name` with its parameters (prepared on first use, or as
 * text with `unprepared`), after the deferred BEGIN if there is one. `piped`
 * says how: in pipeline mode after BEGIN (1), in pipeline mode without one
 * (2: only with `pipeline`, which asks for pipeline mode in any case), alone
 * (0), or not at all (-1). Clears *res first. Returns QW_OK once sent,
 * else an error (nothing of the statement went out).
 */
static int send_named(struct qw_db *db, const char *name, int nparams, const char *const *params,
                      bool pipeline, int *piped, struct qw_db_res **res, struct qw_error *err)
{
    *piped = 0;
    if (res)
        *res = NULL;
    db->then_pending = false;
    if (!db->conn)
        return conn_error(db, err);
    const char *text = qw_statement_text(name);
    if (!text)
        return qw_error_set(err, QW_ERR_INVALID, "no embedded statement named %s", name);
    if (!db->unprepared && !is_prepared(db, name)) {
        if (db->nprepared == QW_DB_MAX_PREPARED)
            return qw_error_set(err, QW_ERR_INVALID, "too many prepared statements");
        /* (the first use on a connection: BEGIN goes out alone) */
        int rc = send_begin(db, err);
        if (rc != QW_OK)
            return rc;
        if (!PQsendPrepare(db->conn, name, text, 0, NULL))
            return conn_error(db, err);
        rc = collect(db, NULL, err);
        if (rc != QW_OK)
            return rc;
        db->prepared[db->nprepared++] = name;
    }
    *piped = pipeline_begin(db);
    if (*piped == 0 && pipeline)
        *piped = PQenterPipelineMode(db->conn) ? 2 : -1;
    int sent =
        *piped >= 0 &&
        (db->unprepared ? PQsendQueryParams(db->conn, text, nparams, NULL, params, NULL, NULL, 0)
                        : PQsendQueryPrepared(db->conn, name, nparams, params, NULL, NULL, 0));
    return sent ? QW_OK : conn_error(db, err);
}

int qw_db_query(struct qw_db *db, const char *name, int nparams, const char *const *params,
                struct qw_db_res **res, struct qw_error *err)
{
    int piped = 0;
    int rc = send_named(db, name, nparams, params, false, &piped, res, err);
    if (rc != QW_OK)
        return rc;
    return finish_query(db, piped, 1, res, err);
}

int qw_db_query_then(struct qw_db *db, const char *name, int nparams, const char *const *params,
                     const char *then_sql, struct qw_db_res **res, struct qw_error *err)
{
    int piped = 0;
    int rc = send_named(db, name, nparams, params, true, &piped, res, err);
    if (rc != QW_OK)
        return rc;
    bool begun = piped == 1;
    PGresult *got[3] = {NULL, NULL, NULL};
    struct qw_error lost;
    qw_error_clear(&lost);
    if (!PQsendQueryParams(db->conn, then_sql, 0, NULL, NULL, NULL, NULL, 0) ||
        !PQpipelineSync(db->conn))
        rc = conn_error(db, &lost);
    else
        rc = collect_piped(db, begun ? 3 : 2, got + (begun ? 0 : 1), &lost);
    /* BEGIN's error, else the statement's: the server skipped the rest of
     * the pipeline, `then_sql` included. */
    for (int i = 0; rc == QW_OK && i < 2; i++) {
        if (got[i] && PQresultStatus(got[i]) == PGRES_FATAL_ERROR) {
            rc = result_rc(db, got[i], err);
            for (int j = 0; j < 3; j++)
                PQclear(got[j]);
            return rc;
        }
    }
    if (rc != QW_OK || !got[1]) {
        /* The pipeline may have reached the server and run to its end. */
        for (int i = 0; i < 3; i++)
            PQclear(got[i]);
        return qw_error_set(err, QW_ERR_OUTCOME_UNKNOWN, "outcome unknown: %.450s",
                            rc != QW_OK ? lost.msg : "no result for the statement");
    }
    PQclear(got[0]);
    qw_error_clear(&db->then_err);
    db->then_err.rc = got[2] ? result_rc(db, got[2], &db->then_err) : conn_error(db, &db->then_err);
    PQclear(got[2]);
    db->then_pending = true;
    return wrap_result(got[1], res, err);
}

bool qw_db_then_pending(const struct qw_db *db)
{
    return db->then_pending;
}

int qw_db_then_outcome(struct qw_db *db, struct qw_error *err)
{
    db->then_pending = false;
    if (err && db->then_err.rc != QW_OK)
        *err = db->then_err;
    return db->then_err.rc;
}

int qw_db_res_rows(const struct qw_db_res *res)
{
    return res ? PQntuples(res->res) : 0;
}

const char *qw_db_res_get(const struct qw_db_res *res, int row, int col)
{
    return PQgetvalue(res->res, row, col);
}

int qw_db_res_isnull(const struct qw_db_res *res, int row, int col)
{
    return PQgetisnull(res->res, row, col);
}

int64_t qw_db_res_int(const struct qw_db_res *res, int row, int col)
{
    if (PQgetisnull(res->res, row, col))
        return 0;
    return strtoll(PQgetvalue(res->res, row, col), NULL, 10);
}

void qw_db_res_free(struct qw_db_res *res)
{
    if (!res)
        return;
    PQclear(res->res);
    free(res);
}

int qw_db_copy_begin(struct qw_db *db, const char *sql, struct qw_error *err)
{
    db->then_pending = false;
    if (!db->conn)
        return conn_error(db, err);
    int rc = send_begin(db, err);
    if (rc != QW_OK)
        return rc;
    if (!PQsendQuery(db->conn, sql))
        return conn_error(db, err);
    PGresult *r = NULL;
    rc = collect(db, &r, err);
    if (rc != QW_OK)
        return rc;
    int is_copy = PQresultStatus(r) == PGRES_COPY_IN;
    PQclear(r);
    if (!is_copy)
        return qw_error_set(err, QW_ERR_DB, "statement did not start COPY FROM STDIN");
    return QW_OK;
}

int qw_db_copy_put(struct qw_db *db, const char *data, size_t len, struct qw_error *err)
{
    if (!db->conn)
        return conn_error(db, err);
    int64_t deadline = qw_clock_mono_ms() + db->query_timeout_ms;
    while (len > 0) {
        int chunk = len > (1 << 20) ? (1 << 20) : (int)len;
        int r = PQputCopyData(db->conn, data, chunk);
        if (r < 0)
            return conn_error(db, err);
        if (r == 0) {
            int w = wait_socket(db->conn, POLLOUT, deadline);
            if (w == 0)
                return deadline_passed(db, err);
            if (w < 0)
                return conn_error(db, err);
            continue;
        }
        data += chunk;
        len -= (size_t)chunk;
    }
    return QW_OK;
}

int qw_db_copy_end(struct qw_db *db, const char *errmsg, struct qw_error *err)
{
    if (!db->conn)
        return conn_error(db, err);
    int r;
    int64_t deadline = qw_clock_mono_ms() + db->query_timeout_ms;
    while ((r = PQputCopyEnd(db->conn, errmsg)) == 0) {
        int w = wait_socket(db->conn, POLLOUT, deadline);
        if (w == 0)
            return deadline_passed(db, err);
        if (w < 0)
            return conn_error(db, err);
    }
    if (r < 0)
        return conn_error(db, err);
    return collect(db, NULL, err);
}

static int valid_channel(const char *c)
{
    size_t n = strlen(c);
    if (n == 0 || n >= 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!((c[i] >= 'a' && c[i] <= 'z') || c[i] == '_' || (i > 0 && c[i] >= '0' && c[i] <= '9')))
            return 0;
    }
    return 1;
}

int qw_db_listen(struct qw_db *db, const char *channel, struct qw_error *err)
{
    if (!valid_channel(channel) || db->nlisten == QW_DB_MAX_LISTEN)
        return qw_error_set(err, QW_ERR_INVALID, "bad LISTEN channel");
    snprintf(db->listen[db->nlisten++], sizeof(db->listen[0]), "%s", channel);
    if (!db->conn)
        return conn_error(db, err);
    char sql[96];
    snprintf(sql, sizeof(sql), "LISTEN %s", channel);
    return exec_setup(db, sql, err);
}

static int drain_notifies(struct qw_db *db, qw_db_notify_fn *cb, void *arg)
{
    int got = 0;
    PGnotify *n;
    while ((n = PQnotifies(db->conn)) != NULL) {
        got = 1;
        if (cb)
            cb(n->relname, n->extra ? n->extra : "", arg);
        PQfreemem(n);
    }
    return got;
}

int qw_db_wait_notify(struct qw_db *db, int timeout_ms, int wake_fd, qw_db_notify_fn *cb, void *arg,
                      struct qw_error *err)
{
    if (!db->conn)
        return conn_error(db, err);
    if (!PQconsumeInput(db->conn))
        return conn_error(db, err);
    if (drain_notifies(db, cb, arg))
        return 1;
    int64_t deadline = qw_clock_mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        int64_t left = deadline - qw_clock_mono_ms();
        if (left < 0)
            left = 0;
        struct pollfd pfd[2] = {{.fd = PQsocket(db->conn), .events = POLLIN},
                                {.fd = wake_fd, .events = POLLIN}};
        int n = poll(pfd, wake_fd >= 0 ? 2 : 1, (int)left);
        if (n < 0 && errno != EINTR)
            return conn_error(db, err);
        if (n > 0 && pfd[0].revents) {
            if (!PQconsumeInput(db->conn))
                return conn_error(db, err);
            if (drain_notifies(db, cb, arg))
                return 1;
        }
        if (n > 0 && wake_fd >= 0 && pfd[1].revents)
            return 2;
        if (left == 0)
            return 0;
    }
}
