/*
 * The database connection: the only module that includes libpq-fe.h.
 *
 * A struct qw_db is one libpq connection owned by one thread. Every call
 * runs under a client-side deadline (`query_timeout_ms`): the query is sent
 * asynchronously and the socket polled; when the deadline passes the
 * connection is dropped (a hung or stopped backend cannot hang the caller)
 * and QW_ERR_TIMEOUT returned. A lost connection is reported as
 * QW_ERR_DB_CONN; qw_db_reconnect() opens it again and repeats the session
 * setup (LISTEN channels; prepared statements are re-prepared lazily).
 *
 * Statements are referred to by the name of their embedded file in sql/
 * and prepared on first use per connection (or, with `unprepared`, sent
 * as text each time). Errors are classified:
 * 40001/40P01 and 55P03 (lock not available, from NOWAIT) ->
 * QW_ERR_SERIALIZATION (re-run it), class 08, 57P0x and 25006 (read-only
 * transaction: this server is not the primary any more) -> QW_ERR_DB_CONN,
 * QU429 -> QW_ERR_BACKPRESSURE, QU409 -> QW_ERR_DUPLICATE, QU400/QU413 ->
 * QW_ERR_INVALID, anything else -> QW_ERR_DB, with the SQLSTATE and the
 * server's message in struct qw_error. Messages never contain the conninfo.
 */
#ifndef QW_DB_DB_H
#define QW_DB_DB_H

#include "common/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct qw_db;
struct qw_db_res;

/** Connection options; zero values take the documented defaults. */
struct qw_db_opts {
    const char *conninfo;       /* libpq connection string, without password */
    const char *password;       /* from env or a private file; NULL = none */
    const char *app_name;       /* application_name, default "queuer" */
    int connect_timeout_s;      /* default 5 */
    int query_timeout_ms;       /* client-side deadline per call, default 10000 */
    int idle_in_txn_timeout_ms; /* server ends a session idle in a transaction this
                                   long (a frozen client cannot hold locks), 0 = off */
    int lock_timeout_ms;        /* a statement waiting this long for a lock fails with
                                   55P03 (retried as a serialization failure), 0 = off */
    int unprepared;             /* non-zero: qw_db_query() sends the statement text each time
                                   (unnamed statement) instead of preparing it by name, for
                                   transaction poolers that cannot carry named statements */
    int keep_jit;               /* non-zero: keep the server's JIT setting (a bulk load gains
                                   from it); otherwise SET jit = off: our statements are short
                                   and run again and again, a JIT compile costs more than it
                                   can save */
};

/**
 * Opens a connection. `opts` strings are copied. On failure *out is NULL
 * and `err` says why (QW_ERR_DB_CONN or QW_ERR_NOMEM).
 */
QW_MUST_CHECK int qw_db_connect(struct qw_db **out, const struct qw_db_opts *opts,
                                struct qw_error *err);

/** Closes the connection and frees everything; NULL is ignored. */
void qw_db_close(struct qw_db *db);

/** True while the connection is usable. */
int qw_db_ok(const struct qw_db *db);

/** Drops and reopens the connection, then LISTENs again. */
QW_MUST_CHECK int qw_db_reconnect(struct qw_db *db, struct qw_error *err);

/** Changes the per-call deadline (ms, > 0). */
void qw_db_set_timeout(struct qw_db *db, int query_timeout_ms);

/** The per-call deadline in effect, ms. */
int qw_db_timeout(const struct qw_db *db);

/**
 * Starts a transaction with `sql` (a BEGIN; it must stay valid until the
 * next statement): sent together with the next statement, in one round
 * trip (libpq's pipeline mode; a transaction pooler such as PgBouncer
 * passes the pipeline on as it came, one sync for both). Whatever the
 * next call is (a query, qw_db_exec(), COMMIT), BEGIN goes first.
 */
QW_MUST_CHECK int qw_db_begin(struct qw_db *db, const char *sql, struct qw_error *err);

/**
 * Runs `sql` with the simple query protocol (several statements allowed, no
 * parameters, results discarded), e.g. "BEGIN" or a migration file.
 */
QW_MUST_CHECK int qw_db_exec(struct qw_db *db, const char *sql, struct qw_error *err);

/**
 * Runs the embedded statement `name` with `nparams` text parameters (NULL
 * entries are SQL NULL). On success *res (if res is not NULL) holds the
 * rows and must be freed with qw_db_res_free().
 */
QW_MUST_CHECK int qw_db_query(struct qw_db *db, const char *name, int nparams,
                              const char *const *params, struct qw_db_res **res,
                              struct qw_error *err);

/**
 * Runs statement `name` as qw_db_query() does, followed by `then_sql` (no
 * parameters) in the same round trip (libpq's pipeline mode: the deferred
 * BEGIN if any, the statement, `then_sql`, one sync); db/txn.h uses it to
 * commit with a transaction's last statement. The statement's error (or
 * BEGIN's) is returned as qw_db_query() would: the server skipped
 * `then_sql`. When the statement succeeded, *res gets its rows and the
 * outcome of `then_sql` waits for qw_db_then_outcome(), which the caller
 * must call next. A connection lost or a deadline passed before the answers
 * were in is QW_ERR_OUTCOME_UNKNOWN: both may have run.
 */
QW_MUST_CHECK int qw_db_query_then(struct qw_db *db, const char *name, int nparams,
                                   const char *const *params, const char *then_sql,
                                   struct qw_db_res **res, struct qw_error *err);

/** True after a successful qw_db_query_then() until qw_db_then_outcome()
 * or the next statement sent. */
bool qw_db_then_pending(const struct qw_db *db);

/** The outcome of the `then_sql` of the last qw_db_query_then(): QW_OK or its error. */
QW_MUST_CHECK int qw_db_then_outcome(struct qw_db *db, struct qw_error *err);

/**
 * Like qw_db_query() for ad-hoc SQL text (migrations, tests). Parameters
 * are always passed as $n, never formatted into `sql`.
 */
QW_MUST_CHECK int qw_db_query_sql(struct qw_db *db, const char *sql, int nparams,
                                  const char *const *params, struct qw_db_res **res,
                                  struct qw_error *err);

/** Rows in a result. */
int qw_db_res_rows(const struct qw_db_res *res);
/** Value of (row, col) as text; "" for NULL. Valid until qw_db_res_free(). */
const char *qw_db_res_get(const struct qw_db_res *res, int row, int col);
/** True if (row, col) is NULL. */
int qw_db_res_isnull(const struct qw_db_res *res, int row, int col);
/** Value of (row, col) parsed as int64 (0 for NULL). */
int64_t qw_db_res_int(const struct qw_db_res *res, int row, int col);
/** Frees a result; NULL is ignored. */
void qw_db_res_free(struct qw_db_res *res);

/** Starts `COPY ... FROM STDIN` given as `sql`. */
QW_MUST_CHECK int qw_db_copy_begin(struct qw_db *db, const char *sql, struct qw_error *err);
/** Sends `len` bytes of COPY text data. */
QW_MUST_CHECK int qw_db_copy_put(struct qw_db *db, const char *data, size_t len,
                                 struct qw_error *err);
/** Ends the COPY; `errmsg` non-NULL aborts it with that message. */
QW_MUST_CHECK int qw_db_copy_end(struct qw_db *db, const char *errmsg, struct qw_error *err);

/** LISTENs on `channel` now and again after every reconnect (max 4 channels). */
QW_MUST_CHECK int qw_db_listen(struct qw_db *db, const char *channel, struct qw_error *err);

/** Called for each notification received: channel and payload, valid during the call. */
typedef void qw_db_notify_fn(const char *channel, const char *payload, void *arg);

/**
 * Waits up to `timeout_ms` for a notification on this connection or for
 * `wake_fd` (-1: none) to become readable (the caller drains it). Every
 * queued notification is consumed and passed to `cb` (may be NULL).
 * Returns 1 when a notification arrived, 2 when `wake_fd` is readable,
 * 0 on timeout, negative on a connection error.
 */
QW_MUST_CHECK int qw_db_wait_notify(struct qw_db *db, int timeout_ms, int wake_fd,
                                    qw_db_notify_fn *cb, void *arg, struct qw_error *err);

#endif
