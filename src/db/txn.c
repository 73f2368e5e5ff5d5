/* Retrying SERIALIZABLE transactions, and transactions run once; see txn.h. */
#include "db/txn.h"

#include "common/clock.h"
#include "common/log.h"
#include "db/db.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

#define TXN_DEFAULT_MAX_ATTEMPTS 20
#define TXN_DEFAULT_MAX_MS 10000
#define TXN_DEFAULT_BACKOFF_BASE_MS 2
#define TXN_DEFAULT_BACKOFF_MAX_MS 200
#define TXN_DEFAULT_BEGIN "BEGIN ISOLATION LEVEL SERIALIZABLE"

/* --- struct qw_db adapter ------------------------------------------------ */

static int db_ops_exec(void *conn, const char *sql, struct qw_error *err)
{
    return qw_db_exec(conn, sql, err);
}

static int db_ops_begin(void *conn, const char *sql, struct qw_error *err)
{
    return qw_db_begin(conn, sql, err);
}

static int db_ops_commit(void *conn, struct qw_error *err)
{
    return qw_txn_commit(conn, err);
}

static int db_ops_reconnect(void *conn, struct qw_error *err)
{
    return qw_db_reconnect(conn, err);
}

static int db_ops_ok(void *conn)
{
    return qw_db_ok(conn);
}

const struct qw_txn_ops qw_txn_db_ops = {
    .exec = db_ops_exec,
    .begin = db_ops_begin,
    .commit = db_ops_commit,
    .reconnect = db_ops_reconnect,
    .ok = db_ops_ok,
};

/* --- default hooks --------------------------------------------------------- */

static int64_t real_now_ms(void *ctx)
{
    return qw_clock_mono_ms();
}

static void real_sleep_ms(void *ctx, int64_t ms)
{
    qw_clock_sleep_ms(ms);
}

static const struct qw_txn_hooks real_hooks = {
    .now_ms = real_now_ms,
    .sleep_ms = real_sleep_ms,
};

/* --- the retry loop ---------------------------------------------------------- */

/* One qw_txn_run() call: the resolved policy and what has happened so far. */
struct txn_run {
    const struct qw_txn_ops *ops;     /* database access */
    void *conn;                       /* the caller's connection */
    const struct qw_txn_hooks *hooks; /* clock, sleep, stop flag */
    struct qw_rng *rng;               /* jitter source */
    int max_attempts;                 /* runs allowed */
    int64_t max_ms;                   /* budget, ms */
    int backoff_base_ms;              /* ms */
    int backoff_max_ms;               /* ms */
    int64_t start_ms;                 /* hooks->now_ms() at entry */
    int waits;                        /* backoff waits so far (the backoff exponent) */
    struct qw_txn_stats *stats;       /* never NULL inside the loop */
};

/* How a failure is handled. */
enum txn_verdict {
    TXN_RETRY_SERIALIZATION, /* roll back, back off, re-run */
    TXN_RETRY_CONNECTION,    /* reconnect, back off, re-run */
    TXN_FAIL,                /* roll back, return the error */
};

/*
 * Classifies a failure before COMMIT. A timeout that left the connection
 * usable is a server-side statement timeout (the same work would time out
 * again): fail. One that dropped the connection (client deadline on a hung
 * backend) is a connection loss: retry.
 */
static enum txn_verdict classify(const struct txn_run *run, int rc)
{
    if (rc == QW_ERR_SERIALIZATION)
        return TXN_RETRY_SERIALIZATION;
    if (rc == QW_ERR_DB_CONN)
        return TXN_RETRY_CONNECTION;
    if (rc == QW_ERR_TIMEOUT && !run->ops->ok(run->conn))
        return TXN_RETRY_CONNECTION;
    return TXN_FAIL;
}

/*
 * Ends the open transaction without caring about its result. If ROLLBACK
 * fails on a connection that still claims to be usable, the session state
 * is unknown, so it is replaced; a dead connection is left for the next
 * attempt (or the next qw_txn_run()) to reconnect.
 */
static void rollback(struct txn_run *run)
{
    struct qw_error rb;
    qw_error_clear(&rb);
    if (!run->ops->ok(run->conn))
        return;
    if (run->ops->exec(run->conn, "ROLLBACK", &rb) == QW_OK || !run->ops->ok(run->conn))
        return;
    qw_log_debug("txn.rollback_failed", "rc=%d sqlstate=%s", rb.rc, rb.sqlstate);
    run->stats->reconnects++;
    qw_error_clear(&rb);
    (void)run->ops->reconnect(run->conn, &rb);
}

/* Copies `last` into `err`, appending why the helper stopped retrying. */
static int give_up(const struct txn_run *run, const struct qw_error *last, const char *why,
                   struct qw_error *err)
{
    int64_t spent = run->hooks->now_ms(run->hooks->ctx) - run->start_ms;
    if (!err)
        return last->rc;
    *err = *last;
    snprintf(err->msg, sizeof(err->msg), "%.400s (gave up: %s after %d attempts in %" PRId64 " ms)",
             last->msg, why, run->stats->attempts, spent);
    return last->rc;
}

/*
 * Waits before the next attempt. Serialization conflicts use full jitter
 * (spread the contenders); reconnects use exponential jitter (at least half
 * the ceiling, so a dead server is not hammered). Returns QW_OK to go on,
 * or the reason to stop with `last` as the error.
 */
static int wait_before_retry(struct txn_run *run, bool for_reconnect, const struct qw_error *last,
                             struct qw_error *err)
{
    const struct qw_txn_hooks *h = run->hooks;
    if (h->should_stop && h->should_stop(h->ctx)) {
        return qw_error_set(err, QW_ERR_SHUTDOWN, "transaction abandoned for shutdown: %.400s",
                            last->msg);
    }
    if (run->stats->attempts >= run->max_attempts)
        return give_up(run, last, "attempt budget", err);
    int64_t elapsed = h->now_ms(h->ctx) - run->start_ms;
    if (elapsed >= run->max_ms)
        return give_up(run, last, "time budget", err);
    int64_t pause = for_reconnect ? qw_backoff_exponential_jitter(run->waits, run->backoff_base_ms,
                                                                  run->backoff_max_ms, run->rng)
                                  : qw_backoff_full_jitter(run->waits, run->backoff_base_ms,
                                                           run->backoff_max_ms, run->rng);
    if (pause > run->max_ms - elapsed)
        pause = run->max_ms - elapsed;
    run->waits++;
    qw_log_debug("txn.retry", "attempt=%d rc=%d sqlstate=%s wait_ms=%" PRId64, run->stats->attempts,
                 last->rc, last->sqlstate[0] ? last->sqlstate : "-", pause);
    if (pause > 0)
        h->sleep_ms(h->ctx, pause);
    return QW_OK;
}

int qw_txn_run(const struct qw_txn_ops *ops, void *conn, const struct qw_txn_policy *policy,
               qw_txn_body_fn body, void *arg, struct qw_txn_stats *stats, struct qw_error *err)
{
    static const struct qw_txn_policy defaults = {0};
    struct qw_txn_stats local_stats;
    struct qw_rng local_rng;
    struct qw_error last;
    const char *begin_sql;
    int rc;

    if (!policy)
        policy = &defaults;
    if (!stats)
        stats = &local_stats;
    *stats = (struct qw_txn_stats){0};
    qw_error_clear(&last);
    qw_error_clear(err);

    struct txn_run run = {
        .ops = ops,
        .conn = conn,
        .hooks = policy->hooks ? policy->hooks : &real_hooks,
        .rng = policy->rng,
        .max_attempts = policy->max_attempts > 0 ? policy->max_attempts : TXN_DEFAULT_MAX_ATTEMPTS,
        .max_ms = policy->max_ms > 0 ? policy->max_ms : TXN_DEFAULT_MAX_MS,
        .backoff_base_ms =
            policy->backoff_base_ms > 0 ? policy->backoff_base_ms : TXN_DEFAULT_BACKOFF_BASE_MS,
        .backoff_max_ms =
            policy->backoff_max_ms > 0 ? policy->backoff_max_ms : TXN_DEFAULT_BACKOFF_MAX_MS,
        .stats = stats,
    };
    begin_sql = policy->begin_sql ? policy->begin_sql : TXN_DEFAULT_BEGIN;
    if (!run.rng) {
        qw_rng_seed(&local_rng, (uint64_t)qw_clock_mono_us() ^ (uint64_t)(uintptr_t)&local_rng);
        run.rng = &local_rng;
    }
    run.start_ms = run.hooks->now_ms(run.hooks->ctx);

    for (;;) {
        enum txn_verdict verdict;

        if (!ops->ok(conn)) {
            stats->reconnects++;
            qw_error_clear(&last);
            rc = ops->reconnect(conn, &last);
            if (rc != QW_OK) {
                last.rc = rc;
                rc = wait_before_retry(&run, true, &last, err);
                if (rc != QW_OK)
                    return rc;
                continue;
            }
            qw_log_info("db.reconnected", "reconnects=%d", stats->reconnects);
        }

        stats->attempts++;

        qw_error_clear(&last);
        rc = ops->begin ? ops->begin(conn, begin_sql, &last) : ops->exec(conn, begin_sql, &last);
        if (rc == QW_OK) {
            qw_error_clear(&last);
            rc = body(conn, arg, &last);
            if (rc == QW_OK) {
                qw_error_clear(&last);
                rc = ops->commit ? ops->commit(conn, &last) : ops->exec(conn, "COMMIT", &last);
                if (rc == QW_OK)
                    return QW_OK;
                last.rc = rc;
                if (rc == QW_ERR_DB_CONN || rc == QW_ERR_TIMEOUT) {
                    /* The server may or may not have committed: never re-run. */
                    qw_error_set(err, QW_ERR_OUTCOME_UNKNOWN, "COMMIT outcome unknown: %.450s",
                                 last.msg);
                    return QW_ERR_OUTCOME_UNKNOWN;
                }
                /* A failed COMMIT ends the transaction on the server. */
                if (rc != QW_ERR_SERIALIZATION) {
                    if (err)
                        *err = last;
                    return rc;
                }
                stats->serialization_retries++;
                rc = wait_before_retry(&run, false, &last, err);
                if (rc != QW_OK)
                    return rc;
                continue;
            }
        }
        /* BEGIN or the body failed: the transaction (if any) is still open. */
        last.rc = rc;
        verdict = classify(&run, rc);
        rollback(&run);
        if (verdict == TXN_FAIL) {
            if (err)
                *err = last;
            return rc;
        }
        if (verdict == TXN_RETRY_SERIALIZATION)
            stats->serialization_retries++;
        rc = wait_before_retry(&run, verdict == TXN_RETRY_CONNECTION, &last, err);
        if (rc != QW_OK)
            return rc;
    }
}

/* --- transactions run once ------------------------------------------------ */

#define TXN_SAVEPOINT "qw_step" /* the one savepoint name the program uses */

int qw_txn_begin(struct qw_db *db, struct qw_error *err)
{
    return qw_db_exec(db, "BEGIN", err);
}

int qw_txn_begin_snapshot(struct qw_db *db, struct qw_error *err)
{
    return qw_db_exec(db, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", err);
}

int qw_txn_commit(struct qw_db *db, struct qw_error *err)
{
    if (qw_db_then_pending(db))
        return qw_db_then_outcome(db, err);
    return qw_db_exec(db, "COMMIT", err);
}

int qw_txn_query_commit(struct qw_db *db, const char *name, int nparams, const char *const *params,
                        struct qw_db_res **res, struct qw_error *err)
{
    return qw_db_query_then(db, name, nparams, params, "COMMIT", res, err);
}

void qw_txn_rollback(struct qw_db *db)
{
    if (!qw_db_ok(db))
        return;
    struct qw_error ignored;
    qw_error_clear(&ignored);
    int rc = qw_db_exec(db, "ROLLBACK", &ignored);
    (void)rc; /* a ROLLBACK that fails leaves nothing to undo: the server ends the
                 transaction with the session */
}

int qw_txn_savepoint(struct qw_db *db, struct qw_error *err)
{
    return qw_db_exec(db, "SAVEPOINT " TXN_SAVEPOINT, err);
}

int qw_txn_savepoint_release(struct qw_db *db, struct qw_error *err)
{
    return qw_db_exec(db, "RELEASE SAVEPOINT " TXN_SAVEPOINT, err);
}

int qw_txn_savepoint_rollback(struct qw_db *db, struct qw_error *err)
{
    return qw_db_exec(db, "ROLLBACK TO SAVEPOINT " TXN_SAVEPOINT, err);
}
