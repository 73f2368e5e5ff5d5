/* Unit tests for the retrying transaction helper (db/txn.h) against a scripted fake database. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/backoff.h"
#include "common/err.h"
#include "common/log.h"
#include "db/txn.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define SCRIPT_LEN 64

/*
 * A fake connection. Each kind of call takes its result from a script
 * (index = how many calls of that kind came before; 0 = QW_OK), and a
 * QW_ERR_DB_CONN result kills the connection like libpq would. Every call
 * is appended to `trace`: B=BEGIN b=body C=COMMIT R=ROLLBACK X=reconnect.
 */
struct fake_db {
    bool alive;                     /* connection usable */
    int begin_rc[SCRIPT_LEN];       /* results of BEGIN calls */
    int body_rc[SCRIPT_LEN];        /* results of body runs */
    int commit_rc[SCRIPT_LEN];      /* results of COMMIT calls */
    int rollback_rc[SCRIPT_LEN];    /* results of ROLLBACK calls */
    int reconnect_rc[SCRIPT_LEN];   /* results of reconnect calls */
    bool timeout_drops[SCRIPT_LEN]; /* per body run: a QW_ERR_TIMEOUT also kills it */
    int n_begin, n_body, n_commit, n_rollback, n_reconnect; /* calls so far */
    bool always_serialization;                              /* body fails with 40001 forever */
    bool always_reconnect_fails;                            /* reconnect fails forever */
    int body_saw_attempt[SCRIPT_LEN]; /* stats->attempts as seen by each body run */
    const struct qw_txn_stats *stats; /* the stats passed to qw_txn_run */
    bool in_txn;                      /* BEGIN seen without COMMIT/ROLLBACK */
    bool exec_in_dead;                /* a statement was sent on a dead connection */
    char begin_sql[64];               /* last BEGIN text */
    char trace[256];                  /* call log */
    /* fake clock */
    int64_t now_ms;             /* current fake time */
    int64_t sleeps[SCRIPT_LEN]; /* requested sleeps, ms */
    int n_sleeps;               /* entries in sleeps */
    int stop_after_sleeps;      /* should_stop true once this many sleeps (0 = never) */
};

static void trace(struct fake_db *db, char c)
{
    size_t len = strlen(db->trace);
    if (len + 2 < sizeof(db->trace)) {
        db->trace[len] = c;
        db->trace[len + 1] = '\0';
    }
}

static int scripted(struct fake_db *db, int rc, struct qw_error *err, const char *what)
{
    if (rc == QW_OK)
        return QW_OK;
    if (rc == QW_ERR_DB_CONN)
        db->alive = false;
    if (rc == QW_ERR_SERIALIZATION)
        snprintf(err->sqlstate, sizeof(err->sqlstate), "40001");
    return qw_error_set(err, rc, "%s failed: %s", what, qw_strerror(rc));
}

static int fake_exec(void *conn, const char *sql, struct qw_error *err)
{
    struct fake_db *db = conn;
    if (!db->alive) {
        db->exec_in_dead = true;
        return qw_error_set(err, QW_ERR_DB_CONN, "not connected");
    }
    if (strncmp(sql, "BEGIN", 5) == 0) {
        trace(db, 'B');
        snprintf(db->begin_sql, sizeof(db->begin_sql), "%s", sql);
        int rc = scripted(db, db->begin_rc[db->n_begin++ % SCRIPT_LEN], err, "BEGIN");
        db->in_txn = rc == QW_OK;
        return rc;
    }
    if (strcmp(sql, "COMMIT") == 0) {
        trace(db, 'C');
        db->in_txn = false;
        return scripted(db, db->commit_rc[db->n_commit++ % SCRIPT_LEN], err, "COMMIT");
    }
    if (strcmp(sql, "ROLLBACK") == 0) {
        trace(db, 'R');
        db->in_txn = false;
        return scripted(db, db->rollback_rc[db->n_rollback++ % SCRIPT_LEN], err, "ROLLBACK");
    }
    fail_msg("unexpected statement %s", sql);
    return QW_ERR_INVALID;
}

static int fake_reconnect(void *conn, struct qw_error *err)
{
    struct fake_db *db = conn;
    trace(db, 'X');
    int rc = db->always_reconnect_fails ? QW_ERR_DB_CONN
                                        : db->reconnect_rc[db->n_reconnect % SCRIPT_LEN];
    db->n_reconnect++;
    db->in_txn = false;
    db->alive = rc == QW_OK;
    return rc == QW_OK ? QW_OK : qw_error_set(err, rc, "connection refused");
}

static int fake_ok(void *conn)
{
    return ((struct fake_db *)conn)->alive;
}

static const struct qw_txn_ops fake_ops = {
    .exec = fake_exec,
    .reconnect = fake_reconnect,
    .ok = fake_ok,
};

static int fake_body(void *conn, void *arg, struct qw_error *err)
{
    struct fake_db *db = arg;
    assert_ptr_equal(conn, arg);
    assert_true(db->in_txn); /* the body always runs inside BEGIN */
    trace(db, 'b');
    int i = db->n_body++;
    if (db->stats && i < SCRIPT_LEN)
        db->body_saw_attempt[i] = db->stats->attempts;
    int rc = db->always_serialization ? QW_ERR_SERIALIZATION : db->body_rc[i % SCRIPT_LEN];
    if (rc == QW_ERR_TIMEOUT && db->timeout_drops[i % SCRIPT_LEN])
        db->alive = false;
    return scripted(db, rc, err, "body");
}

static int64_t fake_now(void *ctx)
{
    return ((struct fake_db *)ctx)->now_ms;
}

static void fake_sleep(void *ctx, int64_t ms)
{
    struct fake_db *db = ctx;
    assert_true(ms > 0);
    if (db->n_sleeps < SCRIPT_LEN)
        db->sleeps[db->n_sleeps] = ms;
    db->n_sleeps++;
    db->now_ms += ms;
}

static int fake_should_stop(void *ctx)
{
    struct fake_db *db = ctx;
    return db->stop_after_sleeps > 0 && db->n_sleeps >= db->stop_after_sleeps;
}

/* Test fixture: a live fake, its hooks, and a policy with a fixed seed. */
struct fixture {
    struct fake_db db;           /* the fake */
    struct qw_txn_hooks hooks;   /* fake clock */
    struct qw_rng rng;           /* seeded jitter */
    struct qw_txn_policy policy; /* what the test runs with */
    struct qw_txn_stats stats;   /* filled by qw_txn_run */
    struct qw_error err;         /* filled by qw_txn_run */
};

static int setup(void **state)
{
    static struct fixture f;
    memset(&f, 0, sizeof(f));
    f.db.alive = true;
    f.db.now_ms = 1000000;
    f.db.stats = &f.stats;
    f.hooks = (struct qw_txn_hooks){
        .now_ms = fake_now, .sleep_ms = fake_sleep, .should_stop = fake_should_stop, .ctx = &f.db};
    qw_rng_seed(&f.rng, 1);
    f.policy = (struct qw_txn_policy){
        .max_attempts = 10,
        .max_ms = 5000,
        .backoff_base_ms = 4,
        .backoff_max_ms = 100,
        .hooks = &f.hooks,
        .rng = &f.rng,
    };
    *state = &f;
    return 0;
}

static int run(struct fixture *f)
{
    return qw_txn_run(&fake_ops, &f->db, &f->policy, fake_body, &f->db, &f->stats, &f->err);
}

static void test_success_first_time(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(run(f), QW_OK);
    assert_string_equal(f->db.trace, "BbC");
    assert_string_equal(f->db.begin_sql, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    assert_int_equal(f->stats.attempts, 1);
    assert_int_equal(f->stats.serialization_retries, 0);
    assert_int_equal(f->stats.reconnects, 0);
    assert_int_equal(f->db.n_sleeps, 0);
    assert_int_equal(f->err.rc, QW_OK);
}

static void test_custom_begin_sql(void **state)
{
    struct fixture *f = *state;
    f->policy.begin_sql = "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY DEFERRABLE";
    assert_int_equal(run(f), QW_OK);
    assert_string_equal(f->db.begin_sql, f->policy.begin_sql);
}

static void test_serialization_failures_then_success(void **state)
{
    struct fixture *f = *state;
    f->db.body_rc[0] = QW_ERR_SERIALIZATION;
    f->db.body_rc[1] = QW_ERR_SERIALIZATION;
    f->db.body_rc[2] = QW_ERR_SERIALIZATION;
    assert_int_equal(run(f), QW_OK);
    assert_string_equal(f->db.trace, "BbRBbRBbRBbC");
    assert_int_equal(f->stats.attempts, 4);
    assert_int_equal(f->stats.serialization_retries, 3);
    /* The body is told which attempt it is. */
    for (int i = 0; i < 4; i++)
        assert_int_equal(f->db.body_saw_attempt[i], i + 1);
    /* Full jitter: wait i is in [0, min(cap, base * 2^i)] (zero waits are skipped). */
    assert_true(f->db.n_sleeps <= 3);
    int64_t slept = 0;
    for (int i = 0; i < f->db.n_sleeps; i++) {
        assert_in_range(f->db.sleeps[i], 1, 100);
        slept += f->db.sleeps[i];
    }
    assert_true(slept <= 4 + 8 + 16);
    assert_int_equal(f->db.now_ms - 1000000, slept);
}

static void test_backoff_respects_cap(void **state)
{
    struct fixture *f = *state;
    f->policy.max_attempts = 60;
    f->policy.max_ms = 1000000;
    f->db.always_serialization = true;
    assert_int_equal(run(f), QW_ERR_SERIALIZATION);
    assert_int_equal(f->stats.attempts, 60);
    int n = f->db.n_sleeps < SCRIPT_LEN ? f->db.n_sleeps : SCRIPT_LEN;
    int64_t longest = 0;
    for (int i = 0; i < n; i++) {
        assert_in_range(f->db.sleeps[i], 1, 100);
        if (f->db.sleeps[i] > longest)
            longest = f->db.sleeps[i];
    }
    assert_true(longest > 50); /* it does grow towards the cap */
}

static void test_commit_serialization_failure_is_retried(void **state)
{
    struct fixture *f = *state;
    f->db.commit_rc[0] = QW_ERR_SERIALIZATION;
    assert_int_equal(run(f), QW_OK);
    /* A failed COMMIT has ended the transaction: no ROLLBACK, just re-run. */
    assert_string_equal(f->db.trace, "BbCBbC");
    assert_int_equal(f->stats.attempts, 2);
    assert_int_equal(f->stats.serialization_retries, 1);
}

static void test_begin_serialization_failure_is_retried(void **state)
{
    struct fixture *f = *state;
    f->db.begin_rc[0] = QW_ERR_SERIALIZATION;
    assert_int_equal(run(f), QW_OK);
    assert_string_equal(f->db.trace, "BRBbC");
    assert_int_equal(f->stats.attempts, 2);
}

static void test_connection_lost_in_body_reconnects(void **state)
{
    struct fixture *f = *state;
    f->db.body_rc[0] = QW_ERR_DB_CONN;
    assert_int_equal(run(f), QW_OK);
    /* No ROLLBACK on a dead connection; reconnect, then the whole body again. */
    assert_string_equal(f->db.trace, "BbXBbC");
    assert_int_equal(f->stats.attempts, 2);
    assert_int_equal(f->stats.reconnects, 1);
    assert_int_equal(f->stats.serialization_retries, 0);
    assert_false(f->db.exec_in_dead);
}

static void test_connection_lost_on_begin_reconnects(void **state)
{
    struct fixture *f = *state;
    f->db.begin_rc[0] = QW_ERR_DB_CONN;
    assert_int_equal(run(f), QW_OK);
    assert_string_equal(f->db.trace, "BXBbC");
    assert_int_equal(f->stats.reconnects, 1);
}

static void test_dead_at_start_reconnects_first(void **state)
{
    struct fixture *f = *state;
    f->db.alive = false;
    assert_int_equal(run(f), QW_OK);
    assert_string_equal(f->db.trace, "XBbC");
    assert_int_equal(f->stats.reconnects, 1);
    assert_int_equal(f->stats.attempts, 1);
}

static void test_reconnect_failures_back_off_then_succeed(void **state)
{
    struct fixture *f = *state;
    f->db.alive = false;
    f->db.reconnect_rc[0] = QW_ERR_DB_CONN;
    f->db.reconnect_rc[1] = QW_ERR_DB_CONN;
    assert_int_equal(run(f), QW_OK);
    assert_string_equal(f->db.trace, "XXXBbC");
    assert_int_equal(f->stats.reconnects, 3);
    assert_int_equal(f->stats.attempts, 1); /* reconnects do not use up attempts */
    /* Reconnect waits use exponential jitter: at least half the ceiling. */
    assert_int_equal(f->db.n_sleeps, 2);
    assert_in_range(f->db.sleeps[0], 2, 4);
    assert_in_range(f->db.sleeps[1], 4, 8);
}

static void test_connection_lost_on_commit_is_outcome_unknown(void **state)
{
    struct fixture *f = *state;
    f->db.commit_rc[0] = QW_ERR_DB_CONN;
    assert_int_equal(run(f), QW_ERR_OUTCOME_UNKNOWN);
    assert_int_equal(f->err.rc, QW_ERR_OUTCOME_UNKNOWN);
    assert_non_null(strstr(f->err.msg, "COMMIT"));
    /* Never re-run, never reconnected behind the caller's back. */
    assert_string_equal(f->db.trace, "BbC");
    assert_int_equal(f->db.n_body, 1);
    assert_int_equal(f->stats.attempts, 1);
    assert_int_equal(f->db.n_sleeps, 0);
}

static void test_timeout_on_commit_is_outcome_unknown(void **state)
{
    struct fixture *f = *state;
    f->db.commit_rc[0] = QW_ERR_TIMEOUT;
    assert_int_equal(run(f), QW_ERR_OUTCOME_UNKNOWN);
    assert_string_equal(f->db.trace, "BbC");
}

static void test_other_commit_failure_is_returned(void **state)
{
    struct fixture *f = *state;
    f->db.commit_rc[0] = QW_ERR_DB; /* e.g. a deferred constraint */
    assert_int_equal(run(f), QW_ERR_DB);
    assert_int_equal(f->err.rc, QW_ERR_DB);
    assert_non_null(strstr(f->err.msg, "COMMIT failed"));
    assert_string_equal(f->db.trace, "BbC");
}

static void test_body_outcome_unknown_is_returned_not_rerun(void **state)
{
    /* The body's last statement took COMMIT along and the answer was lost. */
    struct fixture *f = *state;
    f->db.body_rc[0] = QW_ERR_OUTCOME_UNKNOWN;
    assert_int_equal(run(f), QW_ERR_OUTCOME_UNKNOWN);
    assert_int_equal(f->err.rc, QW_ERR_OUTCOME_UNKNOWN);
    assert_int_equal(f->db.n_body, 1);
    assert_int_equal(f->stats.attempts, 1);
    assert_int_equal(f->stats.reconnects, 0);
    assert_int_equal(f->db.n_sleeps, 0);
}

static void test_attempt_budget(void **state)
{
    struct fixture *f = *state;
    f->policy.max_attempts = 5;
    f->db.always_serialization = true;
    assert_int_equal(run(f), QW_ERR_SERIALIZATION);
    assert_int_equal(f->stats.attempts, 5);
    assert_int_equal(f->db.n_body, 5);
    assert_int_equal(f->stats.serialization_retries, 5);
    assert_string_equal(f->db.trace, "BbRBbRBbRBbRBbR");
    assert_int_equal(f->err.rc, QW_ERR_SERIALIZATION);
    assert_string_equal(f->err.sqlstate, "40001");
    assert_non_null(strstr(f->err.msg, "attempt budget"));
    assert_non_null(strstr(f->err.msg, "5 attempts"));
    assert_true(f->db.n_sleeps <= 4); /* no pointless wait after the last attempt */
}

static void test_time_budget(void **state)
{
    struct fixture *f = *state;
    f->policy.max_attempts = 100000;
    f->policy.max_ms = 300;
    f->policy.backoff_base_ms = 50;
    f->policy.backoff_max_ms = 50;
    f->db.always_serialization = true;
    assert_int_equal(run(f), QW_ERR_SERIALIZATION);
    assert_non_null(strstr(f->err.msg, "time budget"));
    /* Never slept past the budget, and stopped once it was spent. */
    assert_int_equal(f->db.now_ms - 1000000, 300);
    assert_true(f->stats.attempts > 3);
    assert_true(f->stats.attempts < 1000);
}

static void test_time_budget_while_reconnecting(void **state)
{
    struct fixture *f = *state;
    f->db.alive = false;
    f->db.always_reconnect_fails = true;
    f->policy.max_ms = 2000;
    assert_int_equal(run(f), QW_ERR_DB_CONN);
    assert_non_null(strstr(f->err.msg, "time budget"));
    assert_int_equal(f->db.n_body, 0);
    assert_int_equal(f->stats.attempts, 0);
    assert_true(f->stats.reconnects > 3);
    assert_int_equal(f->db.now_ms - 1000000, 2000);
}

static void test_non_retryable_error_rolls_back(void **state)
{
    static const int codes[] = {QW_ERR_DB, QW_ERR_INVALID, QW_ERR_DUPLICATE, QW_ERR_SCHEMA};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        setup(state);
        struct fixture *f = *state;
        f->db.body_rc[0] = codes[i];
        assert_int_equal(run(f), codes[i]);
        assert_string_equal(f->db.trace, "BbR");
        assert_int_equal(f->err.rc, codes[i]);
        assert_non_null(strstr(f->err.msg, "body failed"));
        assert_int_equal(f->stats.attempts, 1);
        assert_int_equal(f->db.n_sleeps, 0);
    }
}

static void test_statement_timeout_on_live_connection_is_not_retried(void **state)
{
    struct fixture *f = *state;
    f->db.body_rc[0] = QW_ERR_TIMEOUT; /* server-side statement_timeout: connection fine */
    assert_int_equal(run(f), QW_ERR_TIMEOUT);
    assert_string_equal(f->db.trace, "BbR");
}

static void test_client_timeout_that_dropped_connection_is_retried(void **state)
{
    struct fixture *f = *state;
    f->db.body_rc[0] = QW_ERR_TIMEOUT;
    f->db.timeout_drops[0] = true; /* client deadline on a hung backend */
    assert_int_equal(run(f), QW_OK);
    assert_string_equal(f->db.trace, "BbXBbC");
}

static void test_rollback_failing_on_dead_connection(void **state)
{
    struct fixture *f = *state;
    /* Serialization failure, then the ROLLBACK finds the connection gone. */
    f->db.body_rc[0] = QW_ERR_SERIALIZATION;
    f->db.rollback_rc[0] = QW_ERR_DB_CONN;
    assert_int_equal(run(f), QW_OK);
    assert_string_equal(f->db.trace, "BbRXBbC");
    assert_int_equal(f->stats.reconnects, 1);
    assert_false(f->db.exec_in_dead);
}

static void test_rollback_failing_keeps_body_error(void **state)
{
    struct fixture *f = *state;
    f->db.body_rc[0] = QW_ERR_INVALID;
    f->db.rollback_rc[0] = QW_ERR_DB_CONN;
    assert_int_equal(run(f), QW_ERR_INVALID);
    assert_int_equal(f->err.rc, QW_ERR_INVALID);
    assert_string_equal(f->db.trace, "BbR");
    /* The dead connection is left for the next run, which reconnects first. */
    assert_false(f->db.alive);
    memset(f->db.trace, 0, sizeof(f->db.trace));
    f->db.body_rc[1] = QW_OK;
    assert_int_equal(run(f), QW_OK);
    assert_string_equal(f->db.trace, "XBbC");
}

static void test_rollback_failing_on_live_connection_resets_it(void **state)
{
    struct fixture *f = *state;
    f->db.body_rc[0] = QW_ERR_DB;
    f->db.rollback_rc[0] = QW_ERR_DB; /* session state now unknown */
    assert_int_equal(run(f), QW_ERR_DB);
    assert_string_equal(f->db.trace, "BbRX");
    assert_true(f->db.alive);
    assert_false(f->db.in_txn);
}

static void test_should_stop_abandons_retries(void **state)
{
    struct fixture *f = *state;
    f->db.always_serialization = true;
    f->policy.backoff_base_ms = 10; /* full jitter may draw 0; make sleeps likely */
    f->db.stop_after_sleeps = 1;
    assert_int_equal(run(f), QW_ERR_SHUTDOWN);
    assert_int_equal(f->err.rc, QW_ERR_SHUTDOWN);
    assert_true(f->stats.attempts < 10);
}

static void test_zero_policy_takes_defaults(void **state)
{
    struct fixture *f = *state;
    f->policy = (struct qw_txn_policy){.hooks = &f->hooks, .rng = &f->rng};
    f->db.always_serialization = true;
    assert_int_equal(run(f), QW_ERR_SERIALIZATION);
    assert_int_equal(f->stats.attempts, 20);
    assert_string_equal(f->db.begin_sql, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    for (int i = 0; i < f->db.n_sleeps && i < SCRIPT_LEN; i++)
        assert_in_range(f->db.sleeps[i], 1, 200);
}

static void test_null_stats_and_err(void **state)
{
    struct fixture *f = *state;
    f->db.stats = NULL;
    f->db.body_rc[0] = QW_ERR_SERIALIZATION;
    f->db.body_rc[1] = QW_ERR_INVALID;
    assert_int_equal(qw_txn_run(&fake_ops, &f->db, &f->policy, fake_body, &f->db, NULL, NULL),
                     QW_ERR_INVALID);
    assert_string_equal(f->db.trace, "BbRBbR");
}

/* The same seed gives the same waits: retries replay deterministically. */
static void test_deterministic_per_seed(void **state)
{
    struct fixture *f = *state;
    int64_t first[SCRIPT_LEN];
    int n_first;
    f->policy.max_attempts = 12;
    f->db.always_serialization = true;
    run(f);
    n_first = f->db.n_sleeps;
    memcpy(first, f->db.sleeps, sizeof(first));
    setup(state);
    f = *state;
    f->policy.max_attempts = 12;
    f->db.always_serialization = true;
    run(f);
    assert_int_equal(f->db.n_sleeps, n_first);
    assert_memory_equal(f->db.sleeps, first, sizeof(first));
}

#define T(fn) cmocka_unit_test_setup(fn, setup)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_success_first_time),
        T(test_custom_begin_sql),
        T(test_serialization_failures_then_success),
        T(test_backoff_respects_cap),
        T(test_commit_serialization_failure_is_retried),
        T(test_begin_serialization_failure_is_retried),
        T(test_connection_lost_in_body_reconnects),
        T(test_connection_lost_on_begin_reconnects),
        T(test_dead_at_start_reconnects_first),
        T(test_reconnect_failures_back_off_then_succeed),
        T(test_connection_lost_on_commit_is_outcome_unknown),
        T(test_timeout_on_commit_is_outcome_unknown),
        T(test_other_commit_failure_is_returned),
        T(test_body_outcome_unknown_is_returned_not_rerun),
        T(test_attempt_budget),
        T(test_time_budget),
        T(test_time_budget_while_reconnecting),
        T(test_non_retryable_error_rolls_back),
        T(test_statement_timeout_on_live_connection_is_not_retried),
        T(test_client_timeout_that_dropped_connection_is_retried),
        T(test_rollback_failing_on_dead_connection),
        T(test_rollback_failing_keeps_body_error),
        T(test_rollback_failing_on_live_connection_resets_it),
        T(test_should_stop_abandons_retries),
        T(test_zero_policy_takes_defaults),
        T(test_null_stats_and_err),
        T(test_deterministic_per_seed),
    };
    qw_log_init(QW_LOG_ERROR, "test"); /* keep retry chatter out of the test output */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
