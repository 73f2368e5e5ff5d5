/*
 * Integration: `queuer status`, `queuer batch show|retry|cancel` and
 * `queuer prune` against a real database, through the built binary.
 *
 * The actions' fencing is tested against the workers' own statements
 * (sql/batches_mark.sql, sql/outcomes_record.sql) run on a second
 * connection that plays the worker: a cancel that waits for a worker's
 * uncommitted mark sees the batch in flight afterwards and refuses; a
 * worker write after a cancel matches nothing; a claim row held FOR NO KEY
 * UPDATE by a worker's outcome flush makes the action wait, then proceed; a row
 * held longer than the action's lock_timeout makes it give up (exit 75).
 * "Waiting" is observed in pg_stat_activity, never assumed after a sleep.
 */
#include "itest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SERVICES 3 /* services of the generated workload */
#define BATCHES 6  /* batches per service */

struct env {
    char *conninfo;   /* the test database */
    struct qw_db *db; /* superuser connection: fixtures and checks */
};

/* Runs `queuer ARGS...` (NULL-terminated) as `user` (NULL = the superuser). */
static int run_queuer(const struct env *e, const char *user, char **out, char **err, ...)
{
    char conn[1024];
    snprintf(conn, sizeof(conn), "QUEUER_DATABASE_CONNINFO=%s%s%s", e->conninfo,
             user ? " user=" : "", user ? user : "");
    const char *env[] = {conn, "QUEUER_LOG_LEVEL=warn", NULL};
    const char *argv[24] = {itest_queuer_bin()};
    size_t n = 1;
    va_list ap;
    va_start(ap, err);
    for (const char *a; n < 23 && (a = va_arg(ap, const char *)) != NULL;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    char *o = NULL, *x = NULL;
    int rc = itest_run(argv, env, NULL, &o, &x);
    if (out)
        *out = o;
    else
        free(o);
    if (err)
        *err = x;
    else
        free(x);
    return rc;
}

static void setup_env(struct env *e, const char *hint)
{
    e->conninfo = itest_db_create(hint, 1);
    e->db = itest_connect(e->conninfo);
    const char *gen = getenv("QUEUER_GEN_BIN");
    assert_non_null(gen);
    char services[8], batches[8];
    snprintf(services, sizeof(services), "%d", SERVICES);
    snprintf(batches, sizeof(batches), "%d", BATCHES);
    const char *gargv[] = {gen,     "--services",       services, "--batches",
                           batches, "--circuit-prefix", "opscl",  NULL};
    char *tsv = NULL;
    assert_int_equal(itest_run(gargv, NULL, NULL, &tsv, NULL), 0);
    char conn[1024];
    snprintf(conn, sizeof(conn), "QUEUER_DATABASE_CONNINFO=%s", e->conninfo);
    const char *env[] = {conn, NULL};
    const char *eargv[] = {itest_queuer_bin(), "enqueue", "--tsv", "-", NULL};
    char *err = NULL;
    int rc = itest_run(eargv, env, tsv, NULL, &err);
    if (rc != 0)
        fail_msg("enqueue failed (%d): %s", rc, err);
    free(err);
    free(tsv);
    assert_int_equal(itest_scalar(e->db, "SELECT count(*) FROM queuer.batches"),
                     SERVICES * BATCHES);
    itest_exec(e->db, "DO $$ BEGIN "
                      "IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ops_cli_op') THEN "
                      "CREATE ROLE ops_cli_op LOGIN IN ROLE queuer_operator; END IF; END $$");
}

static void teardown_env(struct env *e)
{
    qw_db_close(e->db);
    free(e->conninfo);
}

/* The id of batch `k` (creation order) of service `s` (service_id order); malloc'd. */
static char *batch(const struct env *e, int s, int k)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "SELECT batch_id FROM queuer.batches WHERE service_id = "
             "(SELECT DISTINCT service_id FROM queuer.batches ORDER BY 1 OFFSET %d LIMIT 1) "
             "ORDER BY created_at, batch_id OFFSET %d LIMIT 1",
             s, k);
    char *id = itest_string(e->db, sql);
    assert_non_null(id);
    return id;
}

/* Runs printf-formatted SQL on the fixture connection. */
static void sqlf(const struct env *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sqlf(const struct env *e, const char *fmt, ...)
{
    char sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    itest_exec(e->db, sql);
}

static int64_t scalarf(const struct env *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int64_t scalarf(const struct env *e, const char *fmt, ...)
{
    char sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    return itest_scalar(e->db, sql);
}

static char *stringf(const struct env *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static char *stringf(const struct env *e, const char *fmt, ...)
{
    char sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    return itest_string(e->db, sql);
}

static void expect_contains(const char *text, const char *needle)
{
    if (!text || !strstr(text, needle))
        fail_msg("expected '%s' in:\n%s", needle, text ? text : "(null)");
}

static int64_t history_rows(const struct env *e, const char *id)
{
    return scalarf(e, "SELECT count(*) FROM queuer.history WHERE batch_id = '%s'", id);
}

static void test_batch_retry(void **state)
{
    (void)state;
    struct env e;
    setup_env(&e, "ops_retry");
    char *out = NULL, *err = NULL;
    char prefix[17];

    /* Delayed, due in an hour: due now, audited with who and why */
    char *delayed = batch(&e, 0, 0);
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Delayed', attempts = 2, "
         "retry_at = now() + interval '1 hour', last_error = 'HTTP 503' "
         "WHERE batch_id = '%s'",
         delayed);
    snprintf(prefix, sizeof(prefix), "%.16s", delayed);
    int rc = run_queuer(&e, NULL, &out, &err, "batch", "retry", prefix, "--reason",
                        "ledger is back", NULL);
    if (rc != 0)
        fail_msg("retry: %d %s", rc, err);
    expect_contains(out, "due now");
    assert_int_equal(scalarf(&e,
                             "SELECT (retry_at <= now())::int FROM queuer.batches "
                             "WHERE batch_id = '%s'",
                             delayed),
                     1);
    char *row = stringf(&e,
                        "SELECT concat_ws('|', from_status, to_status, instance_id, "
                        "claim_epoch, detail) FROM queuer.batch_history "
                        "WHERE batch_id = '%s' ORDER BY id DESC LIMIT 1",
                        delayed);
    char *epoch = stringf(&e,
                          "SELECT claim_epoch::text FROM queuer.service_id_claims c "
                          "JOIN queuer.batches b USING (service_id) "
                          "WHERE b.batch_id = '%s'",
                          delayed);
    char want[512];
    snprintf(want, sizeof(want),
             "Delayed|Retrying|operator:postgres|%s|operator retry (was Delayed after 2 "
             "attempts): ledger is back",
             epoch);
    assert_string_equal(row, want);
    free(row);
    free(epoch);
    free(out);
    free(err);

    /* parked (retry_at infinity): one more attempt */
    sqlf(&e,
         "UPDATE queuer.batches SET retry_at = 'infinity', attempts = 5 "
         "WHERE batch_id = '%s'",
         delayed);
    assert_int_equal(scalarf(&e, "SELECT count(*) FROM queuer.stuck_batches "
                                 "WHERE 'parked' = ANY (reasons)"),
                     1);
    assert_int_equal(run_queuer(&e, NULL, &out, NULL, "batch", "retry", delayed, NULL), 0);
    expect_contains(out, "due now (parked)");
    free(out);
    assert_int_equal(scalarf(&e, "SELECT count(*) FROM queuer.stuck_batches "
                                 "WHERE 'parked' = ANY (reasons)"),
                     0);
    assert_int_equal(scalarf(&e,
                             "SELECT (retry_at <= now())::int FROM queuer.batches "
                             "WHERE batch_id = '%s'",
                             delayed),
                     1);

    /* Unknown */
    char *unknown = batch(&e, 1, 0);
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Unknown', attempts = 1, retry_at = now() "
         "+ interval '1 minute' WHERE batch_id = '%s'",
         unknown);
    assert_int_equal(run_queuer(&e, NULL, NULL, NULL, "batch", "retry", unknown, NULL), 0);

    /* refused: never submitted, in flight (Pending, being submitted), final */
    char *waiting = batch(&e, 0, 1);
    int64_t before = history_rows(&e, waiting);
    assert_int_equal(run_queuer(&e, NULL, NULL, &err, "batch", "retry", waiting, NULL), 1);
    expect_contains(err, "has not been submitted yet");
    free(err);
    assert_int_equal(history_rows(&e, waiting), before);

    char *pending = batch(&e, 2, 0);
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Pending', submitted = true, attempts = 1 "
         "WHERE batch_id = '%s'",
         pending);
    before = history_rows(&e, pending);
    assert_int_equal(run_queuer(&e, NULL, NULL, &err, "batch", "retry", pending, NULL), 75);
    expect_contains(err, "in flight: Pending at the ledger");
    free(err);
    assert_int_equal(history_rows(&e, pending), before);
    assert_int_equal(scalarf(&e,
                             "SELECT (retry_at IS NULL AND status = 'Pending')::int "
                             "FROM queuer.batches WHERE batch_id = '%s'",
                             pending),
                     1);

    sqlf(&e, "UPDATE queuer.batches SET status = NULL, submitted = true WHERE batch_id = '%s'",
         pending);
    assert_int_equal(run_queuer(&e, NULL, NULL, &err, "batch", "retry", pending, NULL), 75);
    expect_contains(err, "is submitting it");
    free(err);

    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Committed', submitted = true, "
         "status_at = now() WHERE batch_id = '%s'",
         pending);
    assert_int_equal(run_queuer(&e, NULL, NULL, &err, "batch", "retry", pending, NULL), 1);
    expect_contains(err, "already final (Committed)");
    free(err);

    /* ids: unknown, malformed, too short, ambiguous prefix */
    char missing[129];
    memset(missing, 'f', 128);
    missing[128] = '\0';
    assert_int_equal(run_queuer(&e, NULL, NULL, &err, "batch", "retry", missing, NULL), 65);
    expect_contains(err, "no batch");
    free(err);
    assert_int_equal(run_queuer(&e, NULL, NULL, NULL, "batch", "retry", "zzzzzzzzzzzzzzzzzz", NULL),
                     64);
    assert_int_equal(run_queuer(&e, NULL, NULL, NULL, "batch", "retry", "abcdef", NULL), 64);
    assert_int_equal(run_queuer(&e, NULL, NULL, NULL, "batch", "frobnicate", delayed, NULL), 64);
    sqlf(&e, "SET session_replication_role = replica; "
             "INSERT INTO queuer.batches (batch_id, service_id, payload, created_at) VALUES "
             "(repeat('ab', 8) || repeat('0', 112), 'opscl-zzzzz::0001', '\\x00', now()), "
             "(repeat('ab', 8) || repeat('1', 112), 'opscl-zzzzz::0001', '\\x00', now()); "
             "RESET session_replication_role");
    assert_int_equal(run_queuer(&e, NULL, NULL, &err, "batch", "show", "ABABABABABABABAB", NULL),
                     65);
    expect_contains(err, "matches more than one batch");
    free(err);
    assert_int_equal(run_queuer(&e, NULL, NULL, NULL, "batch", "show", "abababababababab0", NULL),
                     0);

    /* an operator role is enough */
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Delayed', retry_at = now() + interval '1 h' "
         "WHERE batch_id = '%s'",
         unknown);
    assert_int_equal(run_queuer(&e, "ops_cli_op", NULL, NULL, "batch", "retry", unknown, NULL), 0);
    char *who = stringf(&e,
                        "SELECT instance_id FROM queuer.batch_history WHERE batch_id = '%s' "
                        "ORDER BY id DESC LIMIT 1",
                        unknown);
    assert_string_equal(who, "operator:ops_cli_op");
    free(who);
    free(delayed);
    free(unknown);
    free(waiting);
    free(pending);
    teardown_env(&e);
}

/*
 * `batch retry --invalid`: a batch marked Invalid by mistake (a proxy's HTML 400)
 * goes back to its service's queue, audited, only with --invalid and a
 * reason; other states are refused.
 */
static void test_batch_retry_invalid(void **state)
{
    (void)state;
    struct env e;
    setup_env(&e, "ops_retry_invalid");
    char *out = NULL, *err = NULL;
    char *id = batch(&e, 0, 0);
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Invalid', submitted = true, attempts = 1, "
         "last_error = 'rejected by the ledger (HTTP 400): Bad Request' WHERE batch_id = '%s'",
         id);
    /* plain retry still refuses a final batch; --invalid needs a reason */
    assert_int_equal(run_queuer(&e, NULL, NULL, NULL, "batch", "retry", id, NULL), 1);
    assert_int_equal(run_queuer(&e, NULL, NULL, NULL, "batch", "retry", "--invalid", id, NULL), 64);
    int rc = run_queuer(&e, NULL, &out, &err, "batch", "retry", "--invalid", id, "--reason",
                        "proxy answered 400", NULL);
    if (rc != 0)
        fail_msg("retry --invalid: %d %s", rc, err);
    expect_contains(out, "queued again");
    free(out);
    free(err);
    assert_int_equal(scalarf(&e,
                             "SELECT (status IS NULL AND NOT submitted AND retry_at IS NULL)::int "
                             "FROM queuer.batches WHERE batch_id = '%s'",
                             id),
                     1);
    char *row = stringf(&e,
                        "SELECT concat_ws('|', from_status, to_status, instance_id, detail) "
                        "FROM queuer.batch_history WHERE batch_id = '%s' ORDER BY id DESC LIMIT 1",
                        id);
    expect_contains(row, "Invalid|Retrying|operator:postgres|operator retry of an Invalid batch");
    expect_contains(row, "proxy answered 400");
    free(row);
    /* now it is not Invalid: --invalid refuses */
    assert_int_equal(run_queuer(&e, NULL, NULL, &err, "batch", "retry", "--invalid", id, "--reason",
                                "again", NULL),
                     1);
    expect_contains(err, "not Invalid");
    free(err);
    free(id);
    teardown_env(&e);
}

static void test_batch_cancel(void **state)
{
    (void)state;
    struct env e;
    setup_env(&e, "ops_cancel");
    char *out = NULL, *err = NULL;
    char *head = batch(&e, 0, 0), *next = batch(&e, 0, 1);
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Delayed', attempts = 7, retry_at = "
         "'infinity', last_error = 'HTTP 500' WHERE batch_id = '%s'",
         head);

    assert_int_equal(run_queuer(&e, NULL, NULL, &err, "batch", "cancel", head, NULL), 64);
    expect_contains(err, "--reason TEXT is required");
    free(err);
    assert_int_equal(
        run_queuer(&e, NULL, NULL, NULL, "batch", "cancel", head, "--reason", "   ", NULL), 64);

    int rc = run_queuer(&e, NULL, &out, &err, "batch", "cancel", head, "--reason",
                        "payload rejected by the customer", NULL);
    if (rc != 0)
        fail_msg("cancel: %d %s", rc, err);
    expect_contains(out, "ends as Invalid");
    free(out);
    free(err);
    char *row = stringf(&e,
                        "SELECT concat_ws('|', status, submitted, retry_at IS NULL, "
                        "last_error) FROM queuer.batches WHERE batch_id = '%s'",
                        head);
    assert_string_equal(row, "Invalid|f|t|cancelled by operator: payload rejected by the "
                             "customer");
    free(row);
    row = stringf(&e,
                  "SELECT concat_ws('|', from_status, to_status, instance_id, detail) "
                  "FROM queuer.batch_history WHERE batch_id = '%s' ORDER BY id DESC "
                  "LIMIT 1",
                  head);
    assert_string_equal(row, "Delayed|Cancelled|operator:postgres|operator cancel (was parked "
                             "after 7 attempts): payload rejected by the customer");
    free(row);
    /* the service moves on: its head is now the next batch */
    char *new_head = stringf(&e,
                             "SELECT head_batch_id FROM queuer.service_overview o "
                             "JOIN queuer.batches b ON b.service_id = o.service_id "
                             "WHERE b.batch_id = '%s'",
                             head);
    assert_string_equal(new_head, next);
    free(new_head);

    /* refused: again (final), in flight */
    assert_int_equal(
        run_queuer(&e, NULL, NULL, &err, "batch", "cancel", head, "--reason", "x", NULL), 1);
    expect_contains(err, "already final (Invalid)");
    free(err);
    sqlf(&e, "UPDATE queuer.batches SET submitted = true WHERE batch_id = '%s'", next);
    assert_int_equal(
        run_queuer(&e, NULL, NULL, &err, "batch", "cancel", next, "--reason", "x", NULL), 75);
    expect_contains(err, "in flight");
    free(err);
    assert_int_equal(scalarf(&e,
                             "SELECT (status IS NULL)::int FROM queuer.batches "
                             "WHERE batch_id = '%s'",
                             next),
                     1);

    /* a waiting batch deeper in the queue may be cancelled too */
    char *later = batch(&e, 0, 3);
    assert_int_equal(run_queuer(&e, NULL, NULL, NULL, "batch", "cancel", later, "--reason",
                                "duplicate of an earlier batch", NULL),
                     0);
    row = stringf(&e,
                  "SELECT concat_ws('|', from_status, to_status) FROM queuer.batch_history "
                  "WHERE batch_id = '%s' ORDER BY id DESC LIMIT 1",
                  later);
    assert_string_equal(row, "Cancelled"); /* from none: it was never submitted */
    free(row);
    free(head);
    free(next);
    free(later);
    teardown_env(&e);
}

static void test_batch_show(void **state)
{
    (void)state;
    struct env e;
    setup_env(&e, "ops_show");
    char *id = batch(&e, 1, 2);
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Delayed', attempts = 3, retry_at = "
         "'infinity', last_error = 'POST failed (HTTP 502)' WHERE batch_id = '%s'",
         id);
    sqlf(&e,
         "INSERT INTO queuer.batch_history (batch_id, service_id, from_status, to_status, "
         "instance_id, claim_epoch, detail) SELECT batch_id, service_id, NULL, 'Submitting', "
         "'w9', 4, 'first submission' FROM queuer.batches WHERE batch_id = '%s'",
         id);
    char *payload_hex = stringf(&e,
                                "SELECT encode(payload, 'hex') FROM queuer.batches "
                                "WHERE batch_id = '%s'",
                                id);
    char *out = NULL;
    assert_int_equal(run_queuer(&e, NULL, &out, NULL, "batch", "show", id, NULL), 0);
    expect_contains(out, id);
    expect_contains(out, "state       parked");
    expect_contains(out, "retry at    infinity");
    expect_contains(out, "last error  POST failed (HTTP 502)");
    expect_contains(out, "queue       2 unfinished ahead of it, 6 unfinished in the service");
    expect_contains(out, "history (2)");
    expect_contains(out, "Enqueued");
    expect_contains(out, "first submission");
    /* the payload never appears, not even in part */
    char head[41];
    snprintf(head, sizeof(head), "%.40s", payload_hex + 8);
    assert_null(strstr(out, head));
    free(out);

    assert_int_equal(run_queuer(&e, "ops_cli_op", &out, NULL, "batch", "show", id, "--json", NULL),
                     0);
    json_error_t jerr;
    json_t *j = json_loads(out, 0, &jerr);
    if (!j)
        fail_msg("not JSON: %s\n%s", jerr.text, out);
    assert_string_equal(json_string_value(json_object_get(j, "batch_id")), id);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "parked");
    assert_string_equal(json_string_value(json_object_get(j, "retry_at")), "infinity");
    assert_int_equal(json_integer_value(json_object_get(j, "attempts")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "ahead")), 2);
    json_t *hist = json_object_get(j, "history");
    assert_int_equal(json_array_size(hist), history_rows(&e, id));
    json_t *last = json_array_get(hist, 1);
    assert_string_equal(json_string_value(json_object_get(last, "instance_id")), "w9");
    assert_int_equal(json_integer_value(json_object_get(last, "claim_epoch")), 4);
    assert_true(json_is_null(json_object_get(json_array_get(hist, 0), "from")));
    assert_null(strstr(out, head));
    json_decref(j);
    free(out);
    free(payload_hex);
    free(id);
    teardown_env(&e);
}

/* ---- races with a worker ---- */

struct bg {
    const struct env *e; /* test env */
    const char *args[8]; /* queuer arguments, NULL-terminated */
    int rc;              /* exit status */
    char *out, *err;     /* captured output */
};

static void *bg_main(void *arg)
{
    struct bg *b = arg;
    b->rc = run_queuer(b->e, NULL, &b->out, &b->err, b->args[0], b->args[1], b->args[2], b->args[3],
                       b->args[4], b->args[5], b->args[6], b->args[7]);
    return NULL;
}

/* Waits until a backend of `app` waits for a lock (bounded; the bound only guards a hang). */
static void await_lock_wait(const struct env *e, const char *app)
{
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM pg_stat_activity WHERE application_name "
             "= '%s' AND wait_event_type = 'Lock'",
             app);
    for (int i = 0; i < 6000; i++) {
        if (itest_scalar(e->db, sql) > 0)
            return;
        nanosleep(&(struct timespec){.tv_nsec = 5 * 1000 * 1000}, NULL);
    }
    fail_msg("%s never waited for a lock", app);
}

/* Gives service `s` to instance `who` with a fresh lease; returns the new epoch. */
static int64_t claim(const struct env *e, int s, const char *who)
{
    char *id = batch(e, s, 0);
    int64_t epoch = scalarf(e,
                            "UPDATE queuer.service_id_claims c SET claimant = '%s', "
                            "claim_epoch = claim_epoch + 1, expiry_1 = now() + interval "
                            "'5 min', expiry_2 = now() + interval '10 min' FROM "
                            "queuer.batches b WHERE b.batch_id = '%s' AND c.service_id = "
                            "b.service_id RETURNING c.claim_epoch",
                            who, id);
    free(id);
    return epoch;
}

static char *service_of(const struct env *e, const char *id)
{
    return stringf(e, "SELECT service_id FROM queuer.batches WHERE batch_id = '%s'", id);
}

/* Registers the worker w1 (no lease: its claims are held by their own expiries);
 * returns its incarnation (malloc'd), which its fenced statements name. */
static char *register_w1(const struct env *e)
{
    sqlf(e, "INSERT INTO queuer.instances (instance_id, host, pid, version) "
            "VALUES ('w1', 'h', 1, 'v')");
    return itest_incarnation(e->db, "w1");
}

static void test_cancel_waits_for_worker_mark_then_refuses(void **state)
{
    (void)state;
    struct env e;
    setup_env(&e, "ops_race1");
    char *inc = register_w1(&e);
    char *id = batch(&e, 1, 0);
    char *svc = service_of(&e, id);
    int64_t epoch = claim(&e, 1, "w1");
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Delayed', attempts = 1, retry_at = now() "
         "WHERE batch_id = '%s'",
         id);

    struct qw_db *w = itest_connect(e.conninfo);
    itest_exec(w, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    assert_int_equal(itest_mark(w, "w1", inc, svc, id, epoch, "Delayed"), 1); /* uncommitted */

    struct bg b = {.e = &e, .args = {"batch", "cancel", id, "--reason", "race", NULL}};
    pthread_t t;
    pthread_create(&t, NULL, bg_main, &b);
    await_lock_wait(&e, "queuer-batch");
    itest_exec(w, "COMMIT");
    pthread_join(t, NULL);
    if (b.rc != 75)
        fail_msg("cancel racing a mark: exit %d\n%s%s", b.rc, b.out, b.err);
    expect_contains(b.err, "in flight: worker w1");
    assert_int_equal(scalarf(&e,
                             "SELECT (submitted AND status IS NULL)::int FROM "
                             "queuer.batches WHERE batch_id = '%s'",
                             id),
                     1);
    assert_int_equal(scalarf(&e,
                             "SELECT count(*) FROM queuer.batch_history WHERE batch_id = "
                             "'%s' AND to_status = 'Cancelled'",
                             id),
                     0);
    free(b.out);
    free(b.err);
    qw_db_close(w);
    free(inc);
    free(id);
    free(svc);
    teardown_env(&e);
}

static void test_worker_write_after_cancel_matches_nothing(void **state)
{
    (void)state;
    struct env e;
    setup_env(&e, "ops_race2");
    char *inc = register_w1(&e);
    char *id = batch(&e, 2, 0);
    char *svc = service_of(&e, id);
    int64_t epoch = claim(&e, 2, "w1");
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Delayed', attempts = 1, retry_at = now() "
         "WHERE batch_id = '%s'",
         id);

    /* a worker's outcome flush holds the claim row FOR NO KEY UPDATE: the cancel waits for it */
    struct qw_db *w = itest_connect(e.conninfo);
    itest_exec(w, "BEGIN");
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT 1 FROM queuer.service_id_claims WHERE service_id = '%s' "
             "FOR NO KEY UPDATE",
             svc);
    itest_exec(w, sql);
    struct bg b = {.e = &e, .args = {"batch", "cancel", id, "--reason", "operator wins", NULL}};
    pthread_t t;
    pthread_create(&t, NULL, bg_main, &b);
    await_lock_wait(&e, "queuer-batch");
    itest_exec(w, "COMMIT");
    pthread_join(t, NULL);
    if (b.rc != 0)
        fail_msg("cancel after the claim lock: exit %d\n%s", b.rc, b.err);
    free(b.out);
    free(b.err);

    /* the worker, still believing the batch Delayed, marks it: nothing matches */
    assert_int_equal(itest_mark(w, "w1", inc, svc, id, epoch, "Delayed"), 0);
    /* and an outcome for a POST it thinks is in progress matches nothing either */
    char outcomes[512];
    snprintf(outcomes, sizeof(outcomes), "{\"(%s,%s,%lld,posting,Pending,t,1,,,accepted,t,f)\"}",
             id, svc, (long long)epoch);
    const char *params[] = {"w1", outcomes, inc};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(w, "outcomes_record", 3, params, &res, &err) != QW_OK)
        fail_msg("outcomes_record: %s", err.msg);
    assert_int_equal(qw_db_res_rows(res), 0);
    qw_db_res_free(res);
    assert_int_equal(scalarf(&e,
                             "SELECT (status = 'Invalid' AND NOT submitted)::int FROM "
                             "queuer.batches WHERE batch_id = '%s'",
                             id),
                     1);
    qw_db_close(w);
    free(inc);
    free(id);
    free(svc);
    teardown_env(&e);
}

static void test_action_gives_up_on_a_long_lock(void **state)
{
    (void)state;
    struct env e;
    setup_env(&e, "ops_race3");
    char *id = batch(&e, 0, 0);
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Delayed', attempts = 1, retry_at = now() + "
         "interval '1 h' WHERE batch_id = '%s'",
         id);
    struct qw_db *w = itest_connect(e.conninfo);
    itest_exec(w, "BEGIN");
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT 1 FROM queuer.batches WHERE batch_id = '%s' FOR UPDATE", id);
    itest_exec(w, sql);
    char *err = NULL;
    /* queuer.operator_batch_action sets lock_timeout = 5s */
    assert_int_equal(run_queuer(&e, NULL, NULL, &err, "batch", "retry", id, NULL), 75);
    expect_contains(err, "stayed locked by a worker; nothing changed");
    free(err);
    itest_exec(w, "ROLLBACK");
    assert_int_equal(scalarf(&e,
                             "SELECT (retry_at > now())::int FROM queuer.batches "
                             "WHERE batch_id = '%s'",
                             id),
                     1);
    qw_db_close(w);
    free(id);
    teardown_env(&e);
}

/* ---- status ---- */

/*
 * Stored text reaches the operator's terminal escaped: an operator's
 * --reason, a ledger's error text and a worker's host name holding escape
 * sequences (clear screen, retitle, C1 CSI, a bidi override, a newline
 * forging a history row) are shown written out; the JSON stays valid and
 * carries the exact text, with no raw control byte either.
 */
static void expect_no_controls(const char *what, const char *out)
{
    for (const unsigned char *p = (const unsigned char *)out; *p; p++) {
        if ((*p < 0x20 && *p != '\n') || *p == 0x7f ||
            (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) ||
            (p[0] == 0xe2 && p[1] == 0x80 && p[2] == 0xae))
            fail_msg("%s prints a raw control character at offset %td:\n%s", what,
                     (const char *)p - out, out);
    }
}

static void test_hostile_text_is_escaped(void **state)
{
    (void)state;
    struct env e;
    setup_env(&e, "ops_escape");
    char *id = batch(&e, 0, 0);
    static const char reason[] = "\x1b[2J\x1b]0;owned\x07 gone\n2099-01-01  Committed  forged";
    char *out = NULL, *err = NULL;
    int rc = run_queuer(&e, NULL, &out, &err, "batch", "cancel", id, "--reason", reason, NULL);
    if (rc != 0)
        fail_msg("cancel: %d %s", rc, err);
    free(out);
    free(err);
    /* stored as given: the audit keeps the operator's exact words */
    assert_int_equal(scalarf(&e,
                             "SELECT count(*) FROM queuer.batch_history WHERE batch_id = '%s' "
                             "AND strpos(detail, E'\\x1b[2J') > 0",
                             id),
                     1);
    char *stuck = batch(&e, 1, 0);
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Delayed', attempts = 50, retry_at = 'infinity', "
         "last_error = E'HTTP 502: \\x1b[31m\\u009b1;1H\\u202Eevil' WHERE batch_id = '%s'",
         stuck);
    claim(&e, 1, "w1");
    sqlf(&e, "INSERT INTO queuer.instances (instance_id, host, pid, version) "
             "VALUES ('w1', E'h\\x1b]0;x\\x07', 1, '0.1.0')");

    assert_int_equal(run_queuer(&e, "ops_cli_op", &out, NULL, "batch", "show", id, NULL), 0);
    expect_no_controls("batch show", out);
    expect_contains(out, "\\x1b[2J\\x1b]0;owned\\x07 gone\\n2099-01-01  Committed  forged");
    free(out);
    assert_int_equal(run_queuer(&e, "ops_cli_op", &out, NULL, "batch", "show", stuck, NULL), 0);
    expect_no_controls("batch show", out);
    expect_contains(out, "last error  HTTP 502: \\x1b[31m\\u009b1;1H\\u202eevil");
    free(out);

    assert_int_equal(run_queuer(&e, "ops_cli_op", &out, NULL, "batch", "show", id, "--json", NULL),
                     0);
    expect_no_controls("batch show --json", out);
    json_error_t jerr;
    json_t *j = json_loads(out, 0, &jerr);
    if (!j)
        fail_msg("not JSON: %s\n%s", jerr.text, out);
    json_t *hist = json_object_get(j, "history");
    const char *detail = json_string_value(
        json_object_get(json_array_get(hist, json_array_size(hist) - 1), "detail"));
    assert_non_null(detail);
    assert_non_null(strstr(detail, reason));
    json_decref(j);
    free(out);

    assert_int_equal(run_queuer(&e, "ops_cli_op", &out, NULL, "status", NULL), 0);
    expect_no_controls("status", out);
    expect_contains(out, "\\x1b[31m");
    expect_contains(out, "h\\x1b]0;x\\x07");
    free(out);
    assert_int_equal(run_queuer(&e, "ops_cli_op", &out, NULL, "status", "--json", NULL), 0);
    expect_no_controls("status --json", out);
    j = json_loads(out, 0, &jerr);
    if (!j)
        fail_msg("not JSON: %s\n%s", jerr.text, out);
    json_decref(j);
    free(out);
    free(stuck);
    free(id);
    teardown_env(&e);
}

static void test_status(void **state)
{
    (void)state;
    struct env e;
    setup_env(&e, "ops_status");
    char *a = batch(&e, 0, 0), *b = batch(&e, 1, 0), *c = batch(&e, 2, 0);
    claim(&e, 0, "w1");
    sqlf(&e, "INSERT INTO queuer.instances (instance_id, host, pid, version) "
             "VALUES ('w1', 'h1', 1, '0.1.0')");
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Pending', submitted = true, attempts = 1, "
         "status_at = now() WHERE batch_id = '%s'",
         a);
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Delayed', attempts = 11, retry_at = "
         "'infinity' WHERE batch_id = '%s'",
         b);
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Committed', submitted = true, attempts = 1, "
         "status_at = now() WHERE batch_id = '%s'",
         c);
    sqlf(&e,
         "INSERT INTO queuer.batch_history (batch_id, service_id, to_status) SELECT "
         "batch_id, service_id, 'Committed' FROM queuer.batches WHERE batch_id = '%s'",
         c);

    char *out = NULL, *err = NULL;
    int rc = run_queuer(&e, "ops_cli_op", &out, &err, "status", NULL);
    if (rc != 0)
        fail_msg("status: %d %s", rc, err);
    expect_contains(out, "  waiting            15\n");
    expect_contains(out, "  Pending             1\n");
    expect_contains(out, "  parked              1  needs an operator");
    expect_contains(out, "  in flight           1  (submitting + Pending)\n");
    expect_contains(out, "  Committed           1  (1)\n");
    expect_contains(out, "services: 3 total, 3 with work, 1 claimed, 2 with work but unclaimed");
    expect_contains(out, "instances: 1 alive, 0 dead, 0 stopped");
    expect_contains(out, "stuck batches: 1\n");
    char prefix[17];
    snprintf(prefix, sizeof(prefix), "%.16s", b);
    expect_contains(out, prefix);
    expect_contains(out, "parked,many_attempts");
    free(out);
    free(err);

    assert_int_equal(run_queuer(&e, NULL, &out, NULL, "status", "--json", NULL), 0);
    json_error_t jerr;
    json_t *j = json_loads(out, 0, &jerr);
    if (!j)
        fail_msg("not JSON: %s\n%s", jerr.text, out);
    json_t *batches = json_object_get(j, "batches");
    assert_int_equal(json_integer_value(json_object_get(batches, "waiting")),
                     itest_scalar(e.db, "SELECT batches FROM queuer.batch_counts "
                                        "WHERE state = 'waiting'"));
    assert_int_equal(json_integer_value(json_object_get(batches, "pending")), 1);
    assert_int_equal(json_integer_value(json_object_get(batches, "parked")), 1);
    assert_int_equal(json_integer_value(json_object_get(batches, "in_flight")), 1);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(j, "claims_per_instance"), "w1")), 1);
    json_t *stuck = json_object_get(j, "stuck");
    assert_int_equal(json_integer_value(json_object_get(stuck, "total")), 1);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(stuck, "longest"), 0), "batch_id")),
                        b);
    json_decref(j);
    free(out);

    assert_int_equal(run_queuer(&e, NULL, NULL, NULL, "status", "--stuck", "x", NULL), 64);
    assert_int_equal(run_queuer(&e, NULL, NULL, NULL, "status", "--bogus", NULL), 64);
    /* an unmigrated database is reported, not crashed on */
    char *empty = itest_db_create("ops_status_empty", 0);
    char conn[1024];
    snprintf(conn, sizeof(conn), "QUEUER_DATABASE_CONNINFO=%s", empty);
    const char *env[] = {conn, NULL};
    const char *argv[] = {itest_queuer_bin(), "status", NULL};
    assert_int_equal(itest_run(argv, env, NULL, NULL, &err), 1);
    expect_contains(err, "migrate");
    free(err);
    free(empty);
    free(a);
    free(b);
    free(c);
    teardown_env(&e);
}

/* Parses `queuer status --json` as `user` and returns its snapshot entry (a new reference). */
static json_t *status_snapshot(const struct env *e, const char *user)
{
    char *out = NULL;
    assert_int_equal(run_queuer(e, user, &out, NULL, "status", "--json", NULL), 0);
    json_error_t jerr;
    json_t *j = json_loads(out, 0, &jerr);
    if (!j)
        fail_msg("not JSON: %s\n%s", jerr.text, out);
    free(out);
    json_t *sn = json_object_get(j, "snapshot_holding_back_vacuum");
    assert_non_null(sn);
    json_incref(sn);
    json_decref(j);
    return sn;
}

/* A REPEATABLE READ transaction left open: queuer.snapshot_holders lists
 * it, `queuer status` names it once it is past a threshold (its age where
 * the reading role may see it, how far behind it is otherwise), and not
 * after it ends. */
static void test_status_names_a_snapshot_held_open(void **state)
{
    (void)state;
    struct env e;
    setup_env(&e, "ops_snapshot");
    char conn[1024];
    snprintf(conn, sizeof(conn), "%s application_name=held_report", e.conninfo);
    struct qw_db *held = itest_connect(conn);
    int64_t pid = itest_scalar(held, "SELECT pg_backend_pid()");
    itest_exec(held, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    assert_int_equal(itest_scalar(held, "SELECT count(*) FROM queuer.batches"), SERVICES * BATCHES);
    for (int i = 0; i < 5; i++)
        itest_exec(e.db, "SELECT txid_current()"); /* five transactions begin after it */
    char want[128];
    snprintf(want, sizeof(want), "session|%lld|held_report|idle in transaction|t|f",
             (long long)pid);
    char *row = stringf(&e,
                        "SELECT concat_ws('|', kind, pid, application, state, "
                        "xids_behind >= 5, holds_back) FROM queuer.snapshot_holders "
                        "WHERE pid = %lld",
                        (long long)pid);
    assert_string_equal(row, want);
    free(row);

    /* under the thresholds (5 minutes; 100,000 transactions): not reported */
    char *out = NULL;
    assert_int_equal(run_queuer(&e, NULL, &out, NULL, "status", NULL), 0);
    expect_contains(out, "snapshots holding back vacuum: none\n");
    free(out);
    json_t *sn = status_snapshot(&e, NULL);
    assert_true(json_is_null(sn));
    json_decref(sn);

    /* past the age threshold: the superuser sees the session's age */
    sqlf(&e, "UPDATE queuer.settings SET snapshot_held_after = '1 millisecond'");
    assert_int_equal(run_queuer(&e, NULL, &out, NULL, "status", NULL), 0);
    expect_contains(out, "snapshots holding back vacuum: ");
    snprintf(want, sizeof(want), "  session pid %lld (role ", (long long)pid);
    expect_contains(out, want);
    expect_contains(out, ", application held_report, idle in transaction): open ");
    free(out);
    sn = status_snapshot(&e, NULL);
    assert_string_equal(json_string_value(json_object_get(sn, "kind")), "session");
    assert_int_equal(json_integer_value(json_object_get(sn, "pid")), pid);
    assert_string_equal(json_string_value(json_object_get(sn, "application")), "held_report");
    assert_true(json_integer_value(json_object_get(sn, "xids_behind")) >= 5);
    assert_true(json_is_integer(json_object_get(sn, "open_s")));
    json_decref(sn);

    /* an operator without pg_read_all_stats cannot see another role's age:
     * the number of transactions behind decides */
    sqlf(&e, "SET ROLE ops_cli_op");
    assert_int_equal(scalarf(&e,
                             "SELECT count(*) FROM queuer.snapshot_holders WHERE pid = %lld "
                             "AND open_for IS NULL AND NOT holds_back",
                             (long long)pid),
                     1);
    sqlf(&e, "RESET ROLE");
    sn = status_snapshot(&e, "ops_cli_op");
    assert_true(json_is_null(sn));
    json_decref(sn);
    sqlf(&e, "UPDATE queuer.settings SET snapshot_held_xids = 3");
    sn = status_snapshot(&e, "ops_cli_op");
    assert_int_equal(json_integer_value(json_object_get(sn, "pid")), pid);
    assert_true(json_is_null(json_object_get(sn, "open_s")));
    assert_true(json_is_null(json_object_get(sn, "state")));
    json_decref(sn);
    assert_int_equal(run_queuer(&e, "ops_cli_op", &out, NULL, "status", NULL), 0);
    expect_contains(out, "open for an unknown time (not visible to this role)");
    free(out);

    /* once it ends, nothing is reported */
    itest_exec(held, "ROLLBACK");
    assert_int_equal(scalarf(&e, "SELECT count(*) FROM queuer.snapshot_holders WHERE pid = %lld",
                             (long long)pid),
                     0);
    assert_int_equal(run_queuer(&e, NULL, &out, NULL, "status", NULL), 0);
    expect_contains(out, "snapshots holding back vacuum: none\n");
    free(out);
    qw_db_close(held);
    teardown_env(&e);
}

/* ---- prune ---- */

static void test_prune(void **state)
{
    (void)state;
    struct env e;
    setup_env(&e, "ops_prune");
    /* service 0: three final long ago, one final recently, one Delayed, one waiting */
    const char *fates[] = {"Committed", "Invalid", "Valid", "Committed"};
    char *ids[BATCHES];
    for (int k = 0; k < BATCHES; k++)
        ids[k] = batch(&e, 0, k);
    for (int k = 0; k < 4; k++)
        sqlf(&e,
             "UPDATE queuer.batches SET status = '%s', submitted = true, attempts = 1, "
             "status_at = now() - interval '%s' WHERE batch_id = '%s'",
             fates[k], k < 3 ? "10 days" : "1 hour", ids[k]);
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Delayed', attempts = 4, retry_at = now(), "
         "created_at = created_at - interval '30 days' WHERE batch_id = '%s'",
         ids[4]);
    /* service 1: its first batch final long ago */
    char *other = batch(&e, 1, 0);
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Committed', submitted = true, attempts = 1, "
         "status_at = now() - interval '9 days' WHERE batch_id = '%s'",
         other);
    /* two stored history rows for each old final batch (its Enqueued is its row) */
    sqlf(&e, "INSERT INTO queuer.batch_history (batch_id, service_id, to_status) SELECT "
             "batch_id, service_id, t FROM queuer.batches, (VALUES ('Submitting'), ('Pending')) "
             "v(t) WHERE status_at < now() - interval '7 days'");
    int64_t claims = itest_scalar(e.db, "SELECT count(*) FROM queuer.service_id_claims");
    int64_t ingest = itest_scalar(e.db, "SELECT count(*) FROM queuer.service_ingest");
    int64_t kept_history = itest_scalar(e.db, "SELECT count(*) FROM queuer.batch_history h "
                                              "JOIN queuer.batches b USING (batch_id) "
                                              "WHERE b.status_at IS NULL "
                                              "OR b.status_at > now() - interval '7 days'");

    char *out = NULL, *err = NULL;
    assert_int_equal(
        run_queuer(&e, NULL, &out, NULL, "prune", "--older-than", "7d", "--dry-run", NULL), 0);
    expect_contains(out, "would remove 4 batches (Committed 2, Valid 1, Invalid 1)");
    free(out);
    assert_int_equal(itest_scalar(e.db, "SELECT count(*) FROM queuer.batches"), SERVICES * BATCHES);

    /* someone holds one old final batch: prune skips it and does not wait */
    struct qw_db *w = itest_connect(e.conninfo);
    itest_exec(w, "BEGIN");
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT 1 FROM queuer.batches WHERE batch_id = '%s' FOR UPDATE",
             other);
    itest_exec(w, sql);
    int rc =
        run_queuer(&e, NULL, &out, &err, "prune", "--older-than", "1w", "--batch-size", "2", NULL);
    if (rc != 0)
        fail_msg("prune: %d %s", rc, err);
    expect_contains(out, "removed 3 batches (Committed 1, Valid 1, Invalid 1) and 6 history "
                         "rows");
    expect_contains(out, "in 2 transactions");
    free(out);
    free(err);
    itest_exec(w, "ROLLBACK");
    qw_db_close(w);
    assert_int_equal(run_queuer(&e, NULL, &out, NULL, "prune", "--older-than", "7d", NULL), 0);
    expect_contains(out, "removed 1 batch (Committed 1, Valid 0, Invalid 0) and 2 history "
                         "rows");
    free(out);

    /* what stays: recent final, unfinished (however old), their history, claims, ingest */
    assert_int_equal(itest_scalar(e.db, "SELECT count(*) FROM queuer.batches"),
                     SERVICES * BATCHES - 4);
    for (int k = 3; k < BATCHES; k++)
        assert_int_equal(scalarf(&e,
                                 "SELECT count(*) FROM queuer.batches WHERE batch_id = "
                                 "'%s'",
                                 ids[k]),
                         1);
    assert_int_equal(itest_scalar(e.db, "SELECT count(*) FROM queuer.batch_history h "
                                        "WHERE NOT EXISTS (SELECT 1 FROM queuer.batches b "
                                        "WHERE b.batch_id = h.batch_id)"),
                     0);
    assert_int_equal(itest_scalar(e.db, "SELECT count(*) FROM queuer.batch_history"), kept_history);
    assert_int_equal(itest_scalar(e.db, "SELECT count(*) FROM queuer.service_id_claims"), claims);
    assert_int_equal(itest_scalar(e.db, "SELECT count(*) FROM queuer.service_ingest"), ingest);

    /* bad arguments, and a role that may not delete */
    const char *bad[] = {"0d", "7", "7x", "-1d", "", "1h1d"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(run_queuer(&e, NULL, NULL, &err, "prune", "--older-than", bad[i], NULL),
                         64);
        expect_contains(err, "bad duration");
        free(err);
    }
    assert_int_equal(run_queuer(&e, NULL, NULL, NULL, "prune", NULL), 64);
    assert_int_equal(
        run_queuer(&e, NULL, NULL, NULL, "prune", "--older-than", "1d", "--batch-size", "0", NULL),
        64);
    sqlf(&e,
         "UPDATE queuer.batches SET status = 'Committed', status_at = now() - interval "
         "'30 days' WHERE batch_id = '%s'",
         ids[3]);
    assert_int_equal(run_queuer(&e, "ops_cli_op", NULL, &err, "prune", "--older-than", "1d", NULL),
                     1);
    expect_contains(err, "this needs the schema owner, the role of queuer migrate");
    free(err);
    assert_int_equal(
        scalarf(&e, "SELECT count(*) FROM queuer.batches WHERE batch_id = '%s'", ids[3]), 1);
    for (int k = 0; k < BATCHES; k++)
        free(ids[k]);
    free(other);
    teardown_env(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_retry),
        cmocka_unit_test(test_batch_retry_invalid),
        cmocka_unit_test(test_batch_cancel),
        cmocka_unit_test(test_batch_show),
        cmocka_unit_test(test_hostile_text_is_escaped),
        cmocka_unit_test(test_cancel_waits_for_worker_mark_then_refuses),
        cmocka_unit_test(test_worker_write_after_cancel_matches_nothing),
        cmocka_unit_test(test_action_gives_up_on_a_long_lock),
        cmocka_unit_test(test_status),
        cmocka_unit_test(test_status_names_a_snapshot_held_open),
        cmocka_unit_test(test_prune),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
