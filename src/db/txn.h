/*
 * The retrying SERIALIZABLE transaction (docs/DESIGN.md §4.4): run a body between
 * BEGIN and COMMIT, and re-run the whole of it on 40001/40P01 with capped
 * full-jitter backoff, bounded in attempts and in time. Below it, the
 * statements of a transaction run once (qw_txn_begin() and the rest, at the
 * end of this file): every BEGIN, COMMIT, ROLLBACK and savepoint the program
 * sends is written in txn.c.
 *
 * Rules the helper enforces, in the spirit of pgbench's retry logic
 * (classify first, then decide):
 *  - nothing the body read may be acted on before qw_txn_run() returns
 *    QW_OK: the body only collects; the caller acts afterwards;
 *  - the body is re-run from scratch on every attempt, so it must reset
 *    whatever it collected (stats->attempts tells it which attempt it is);
 *  - the COMMIT result is checked: 40001 on COMMIT re-runs the body; a
 *    connection lost during COMMIT is QW_ERR_OUTCOME_UNKNOWN and is never
 *    re-run automatically (the caller re-reads by key and claim epoch);
 *    the same holds when the body's last statement took COMMIT along
 *    (qw_txn_query_commit()) and the connection was lost before its answer;
 *  - a connection lost (or a client-side timeout, which drops the
 *    connection) before COMMIT reconnects, repeating the session setup,
 *    and re-runs the body within the same budgets;
 *  - any other failure rolls back and is returned unchanged, never
 *    retried.
 *
 * The database is reached through struct qw_txn_ops so the logic is tested
 * against a fake; qw_txn_db_ops adapts struct qw_db. The clock, sleep and
 * PRNG are hooks, so tests run instantly and deterministically.
 */
#ifndef QW_DB_TXN_H
#define QW_DB_TXN_H

#include "common/backoff.h"
#include "common/err.h"

#include <stdint.h>

/** How the helper talks to one connection. All but `begin` and `commit` are required. */
struct qw_txn_ops {
    /** Runs a statement without results (BEGIN, COMMIT, ROLLBACK). */
    int (*exec)(void *conn, const char *sql, struct qw_error *err);
    /** Starts the transaction with `sql`, which may go out with the body's
     * first statement; NULL: `exec` sends it at once. */
    int (*begin)(void *conn, const char *sql, struct qw_error *err);
    /** Commits: sends COMMIT, or answers the outcome of one the body's
     * last statement took along; NULL: `exec` sends COMMIT. */
    int (*commit)(void *conn, struct qw_error *err);
    /** Drops and reopens the connection, repeating the session setup. */
    int (*reconnect)(void *conn, struct qw_error *err);
    /** Non-zero while the connection is usable. */
    int (*ok)(void *conn);
};

/** qw_txn_ops over a struct qw_db (src/db/db.h); `conn` is a struct qw_db *. */
extern const struct qw_txn_ops qw_txn_db_ops;

/**
 * The transaction body: runs the statements of one attempt on `conn`.
 * Returns QW_OK, or a result code with detail in `err`. It must not commit,
 * roll back or act outside the database.
 */
typedef int (*qw_txn_body_fn)(void *conn, void *arg, struct qw_error *err);

/** Time and randomness for the helper; tests substitute fakes. */
struct qw_txn_hooks {
    int64_t (*now_ms)(void *ctx);            /* monotonic milliseconds */
    void (*sleep_ms)(void *ctx, int64_t ms); /* waits `ms` milliseconds */
    int (*should_stop)(void *ctx);           /* optional: non-zero = give up before the
                                                next attempt with QW_ERR_SHUTDOWN */
    void *ctx;                               /* passed to the three functions */
};

/** Retry budget and backoff; zero fields take the defaults shown. */
struct qw_txn_policy {
    int max_attempts;                 /* runs (BEGIN sent), >= 1; default 20 */
    int64_t max_ms;                   /* time budget from the first attempt, ms; default 10000 */
    int backoff_base_ms;              /* full-jitter base, ms; default 2 */
    int backoff_max_ms;               /* backoff cap, ms; default 200 */
    const char *begin_sql;            /* default "BEGIN ISOLATION LEVEL SERIALIZABLE" */
    const struct qw_txn_hooks *hooks; /* NULL = qw_clock_mono_ms/qw_clock_sleep_ms */
    struct qw_rng *rng;               /* the calling thread's PRNG; NULL = seeded per call
                                         from the monotonic clock */
};

/** What one qw_txn_run() did; updated as it goes. */
struct qw_txn_stats {
    int attempts;              /* runs started (BEGIN sent); 1 during the first run */
    int serialization_retries; /* re-runs caused by 40001/40P01 (body, BEGIN or COMMIT) */
    int reconnects;            /* reconnect calls made (successful or not) */
};

/**
 * Runs `body` in a transaction on `conn`, retrying as described above.
 *
 * Before each run `stats->attempts` is set to the run number (1, 2, ...),
 * so a body that keeps `stats` in its `arg` can see which attempt it is.
 * `stats` may be NULL. A connection found unusable at the start is
 * reconnected first; reconnect failures back off and count against the
 * time budget only.
 *
 * Returns QW_OK after a successful COMMIT. Otherwise the transaction was
 * rolled back (or its outcome is unknown) and the result is one of:
 * QW_ERR_OUTCOME_UNKNOWN (connection lost during COMMIT), QW_ERR_SHUTDOWN
 * (hooks->should_stop), the last retryable error when the attempt or time
 * budget ran out (its message says which and how much was spent), or the
 * body's own non-retryable error. `err` gets the detail (SQLSTATE kept).
 *
 * Thread-safety: uses only `conn` (owned by the calling thread) and the
 * policy's rng, which must not be shared between threads.
 */
QW_MUST_CHECK int qw_txn_run(const struct qw_txn_ops *ops, void *conn,
                             const struct qw_txn_policy *policy, qw_txn_body_fn body, void *arg,
                             struct qw_txn_stats *stats, struct qw_error *err);

/*
 * Transactions run once, without the retry loop: for work that a caller
 * does not re-run on a serialization failure (a migration, an enqueue, the
 * outcome writer's one-by-one fallback, a consistent read). Each function
 * sends one statement on `db`; errors are the database's (db.h), with
 * detail in `err`. The caller owns the connection and the transaction.
 */
struct qw_db;
struct qw_db_res;

/** Starts a transaction (BEGIN, the server's default isolation). Returns QW_OK or an error. */
QW_MUST_CHECK int qw_txn_begin(struct qw_db *db, struct qw_error *err);

/**
 * Starts a read-only transaction that sees one snapshot of the database
 * throughout (REPEATABLE READ READ ONLY). Returns QW_OK or an error.
 */
QW_MUST_CHECK int qw_txn_begin_snapshot(struct qw_db *db, struct qw_error *err);

/**
 * Commits the open transaction, or, right after qw_txn_query_commit()
 * succeeded, answers the outcome of the COMMIT that went with it. Returns
 * QW_OK, or an error after which the transaction is over (a lost
 * connection leaves its outcome unknown).
 */
QW_MUST_CHECK int qw_txn_commit(struct qw_db *db, struct qw_error *err);

/**
 * Runs statement `name` (as qw_db_query()) as the transaction's last and
 * sends COMMIT with it, one round trip for both; then qw_txn_commit()
 * (qw_txn_run() calls it after the body) answers COMMIT's outcome. The
 * statement's own error leaves the transaction open, to roll back;
 * QW_ERR_OUTCOME_UNKNOWN says the connection was lost with both on their
 * way: the transaction may have committed (re-read by key).
 */
QW_MUST_CHECK int qw_txn_query_commit(struct qw_db *db, const char *name, int nparams,
                                      const char *const *params, struct qw_db_res **res,
                                      struct qw_error *err);

/**
 * Rolls the open transaction back after a failure, when the connection is
 * still usable; its own failure is ignored (the server ends the transaction
 * with the session), so the caller's first error stays the one reported.
 */
void qw_txn_rollback(struct qw_db *db);

/**
 * Marks a savepoint, so that one failing statement can be undone without
 * ending the transaction. One at a time: the next call replaces it.
 * Returns QW_OK or an error.
 */
QW_MUST_CHECK int qw_txn_savepoint(struct qw_db *db, struct qw_error *err);

/** Keeps what was done since the savepoint and forgets it. Returns QW_OK or an error. */
QW_MUST_CHECK int qw_txn_savepoint_release(struct qw_db *db, struct qw_error *err);

/** Undoes what was done since the savepoint; the transaction goes on. Returns QW_OK or an error. */
QW_MUST_CHECK int qw_txn_savepoint_rollback(struct qw_db *db, struct qw_error *err);

#endif
