/*
 * Integration: enqueue against a real PostgreSQL. The `queuer enqueue` CLI
 * (single and bulk), the SQL functions called directly, every rejection
 * reason with its SQLSTATE and exit code, back-pressure hysteresis,
 * concurrent enqueuers, the enqueuer role, and the database's payload
 * check held to the client's protobuf-c decisions.
 */
#include "itest.h"
#include "common/hex.h"
#include "ingest/batchlist.h"
#include "ingest/enqueue.h"
#include "ingest/validate.h"
#include "../unit/ingest/pb_mutate.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SVC_A "itest-aaaaa::0001"
#define SVC_B "itest-aaaaa::0002"
#define SVC_C "itest-bbbbb::0003"

/* ---- helpers ------------------------------------------------------------- */

/* A growing string; fails the test when memory runs out. */
struct text {
    char *s;    /* NUL-terminated */
    size_t n;   /* characters */
    size_t cap; /* bytes allocated */
};

static void text_add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void text_add(struct text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (t->n + (size_t)need + 1 > t->cap) {
        size_t cap = (t->cap + (size_t)need + 1) * 2;
        char *grown = realloc(t->s, cap);
        if (!grown)
            fail_msg("out of memory");
        t->s = grown;
        t->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
    va_end(ap);
    t->n += (size_t)need;
}

/* The id and sample payload of batch `k` of a test; `seed` varies content. */
static void sample(uint64_t k, uint64_t seed, char id[129], uint8_t **payload, size_t *len)
{
    qw_batchlist_sample_id(k * 7919 + 17, id);
    if (qw_batchlist_sample(id, seed, payload, len) != QW_OK)
        fail_msg("sample payload");
}

/* Appends the TSV line of batch `k` for `service`; returns its id in `id`. */
static void tsv_line(struct text *t, const char *service, uint64_t k, char id[129])
{
    uint8_t *p = NULL;
    size_t n = 0;
    sample(k, 1, id, &p, &n);
    char *hex = malloc(2 * n + 1);
    qw_hex_encode(p, n, hex);
    text_add(t, "%s\t%s\t%s\n", service, id, hex);
    free(hex);
    free(p);
}

/* Runs the queuer binary with the database and extra environment. */
static int run_queuer(const char *conninfo, const char *const *extra_env, const char *const *args,
                      const char *input, char **out, char **err)
{
    char conn_env[1024];
    snprintf(conn_env, sizeof(conn_env), "QUEUER_DATABASE_CONNINFO=%s", conninfo);
    const char *env[16];
    size_t ne = 0;
    env[ne++] = conn_env;
    for (size_t i = 0; extra_env && extra_env[i] && ne < 15; i++)
        env[ne++] = extra_env[i];
    env[ne] = NULL;
    const char *argv[16];
    size_t na = 0;
    argv[na++] = itest_queuer_bin();
    argv[na++] = "enqueue";
    for (size_t i = 0; args[i] && na < 15; i++)
        argv[na++] = args[i];
    argv[na] = NULL;
    char *o = NULL;
    char *e = NULL;
    int rc = itest_run(argv, env, input, &o, &e);
    if (out)
        *out = o;
    else
        free(o);
    if (err)
        *err = e;
    else
        free(e);
    return rc;
}

/* Writes `len` bytes to a new temporary file; returns its malloc'd path. */
static char *temp_file(const void *data, size_t len)
{
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    size_t cap = strlen(dir) + 32;
    char *path = malloc(cap);
    snprintf(path, cap, "%s/qwenq.XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0)
        fail_msg("mkstemp: %s", strerror(errno));
    if (len && write(fd, data, len) != (ssize_t)len)
        fail_msg("write: %s", strerror(errno));
    close(fd);
    return path;
}

/* Enqueues one batch through the CLI from a payload file. */
static int cli_one(const char *conninfo, const char *const *env, const char *service,
                   const char *id, const uint8_t *payload, size_t len, char **out, char **err)
{
    char *path = temp_file(payload, len);
    const char *args[] = {"--service", service, "--batch-id", id, "--payload-file", path, NULL};
    int rc = run_queuer(conninfo, env, args, NULL, out, err);
    unlink(path);
    free(path);
    return rc;
}

/* Loads `tsv` with `queuer enqueue --tsv -`, failing the test unless it exits 0; returns its
 * standard output (the caller frees it). */
static char *load_ok(const char *conninfo, const char *tsv)
{
    const char *args[] = {"--tsv", "-", NULL};
    char *out = NULL;
    char *err = NULL;
    int rc = run_queuer(conninfo, NULL, args, tsv, &out, &err);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, err);
    free(err);
    return out;
}

/* Runs `sql` with text parameters; returns the rc and fills `err`. */
static int sql_params(struct qw_db *db, const char *sql, int n, const char *const *params,
                      struct qw_db_res **res, struct qw_error *err)
{
    qw_error_clear(err);
    return qw_db_query_sql(db, sql, n, params, res, err);
}

/* `payload` as PostgreSQL's text form of a bytea ("\\x..."); the caller frees it. */
static char *bytea_text(const uint8_t *payload, size_t len)
{
    char *hex = malloc(2 * len + 3);
    if (!hex)
        fail_msg("out of memory");
    memcpy(hex, "\\x", 2);
    qw_hex_encode(payload, len, hex + 2);
    return hex;
}

/* enqueue_batch() through SQL as the connection's role. */
static int sql_enqueue(struct qw_db *db, const char *service, const char *id,
                       const uint8_t *payload, size_t len, char *word, size_t word_len,
                       struct qw_error *err)
{
    char *hex = bytea_text(payload, len);
    const char *params[] = {service, id, hex};
    struct qw_db_res *res = NULL;
    int rc = sql_params(db, "SELECT queuer.enqueue_batch($1, $2, $3::bytea)", 3, params, &res, err);
    if (rc == QW_OK && word)
        snprintf(word, word_len, "%s", qw_db_res_get(res, 0, 0));
    qw_db_res_free(res);
    free(hex);
    return rc;
}

static int64_t count_where(struct qw_db *db, const char *sql, const char *param)
{
    const char *params[] = {param};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    if (sql_params(db, sql, 1, params, &res, &err) != QW_OK)
        fail_msg("%s: %s", sql, err.msg);
    int64_t v = qw_db_res_int(res, 0, 0);
    qw_db_res_free(res);
    return v;
}

static void assert_contains(const char *haystack, const char *needle)
{
    if (!haystack || !strstr(haystack, needle))
        fail_msg("expected to find \"%s\" in:\n%s", needle, haystack ? haystack : "(null)");
}

/* ---- single enqueue ---------------------------------------------------- */

static void test_single_happy_path(void **state)
{
    char *conninfo = itest_db_create("enq_single", 1);
    char id[129];
    uint8_t *payload = NULL;
    size_t len = 0;
    sample(1, 1, id, &payload, &len);

    char *out = NULL;
    char *err = NULL;
    int rc = cli_one(conninfo, NULL, SVC_A, id, payload, len, &out, &err);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, err);
    assert_contains(out, "enqueued");
    free(out);
    free(err);

    struct qw_db *db = itest_connect(conninfo);
    const char *params[] = {id};
    struct qw_db_res *res = NULL;
    struct qw_error e;
    assert_int_equal(
        sql_params(db,
                   "SELECT service_id, encode(payload, 'hex'), submitted, status IS NULL, "
                   "attempts, created_at IS NOT NULL AND created_at <= clock_timestamp(), "
                   "last_submitted_at IS NULL FROM queuer.batches WHERE batch_id = $1",
                   1, params, &res, &e),
        QW_OK);
    assert_int_equal(qw_db_res_rows(res), 1);
    assert_string_equal(qw_db_res_get(res, 0, 0), SVC_A);
    char *hex = malloc(2 * len + 1);
    qw_hex_encode(payload, len, hex);
    assert_string_equal(qw_db_res_get(res, 0, 1), hex);
    assert_string_equal(qw_db_res_get(res, 0, 2), "f");
    assert_string_equal(qw_db_res_get(res, 0, 3), "t");
    assert_string_equal(qw_db_res_get(res, 0, 4), "0");
    assert_string_equal(qw_db_res_get(res, 0, 5), "t");
    assert_string_equal(qw_db_res_get(res, 0, 6), "t");
    qw_db_res_free(res);
    free(hex);

    /* a new service gets its (unclaimed) claims row; the batch's Enqueued transition is its
     * row (queuer.history) and its count a line of the enqueue log */
    assert_int_equal(count_where(db,
                                 "SELECT count(*) FROM queuer.service_id_claims WHERE "
                                 "service_id = $1 AND claimant IS NULL AND claim_epoch = 0",
                                 SVC_A),
                     1);
    assert_int_equal(count_where(db,
                                 "SELECT count(*) FROM queuer.history WHERE batch_id = $1 "
                                 "AND to_status = 'Enqueued' AND from_status IS NULL",
                                 id),
                     1);
    assert_int_equal(count_where(db,
                                 "SELECT sum(batches) FROM queuer.enqueue_log WHERE "
                                 "service_id = $1",
                                 SVC_A),
                     1);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batch_history"), 0);

    /* the identical batch again: exit 0 with a note, nothing new stored */
    rc = cli_one(conninfo, NULL, SVC_A, id, payload, len, &out, &err);
    assert_int_equal(rc, 0);
    assert_contains(err, "already enqueued");
    assert_contains(out, "duplicate");
    free(out);
    free(err);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batches"), 1);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.history"), 1);
    assert_int_equal(itest_scalar(db, "SELECT sum(batches) FROM queuer.enqueue_log"), 1);

    /* the payload from stdin ("-") */
    char id2[129];
    uint8_t *p2 = NULL;
    size_t n2 = 0;
    sample(2, 1, id2, &p2, &n2);
    /* itest_run feeds a C string: only a NUL-free payload can go through stdin here */
    if (!memchr(p2, 0, n2)) {
        char *input = malloc(n2 + 1);
        memcpy(input, p2, n2);
        input[n2] = '\0';
        const char *args[] = {"--service", SVC_A, "--batch-id", id2, "--payload-file", "-", NULL};
        rc = run_queuer(conninfo, NULL, args, input, NULL, NULL);
        assert_int_equal(rc, 0);
        free(input);
        assert_int_equal(
            count_where(db, "SELECT count(*) FROM queuer.batches WHERE batch_id = $1", id2), 1);
    }
    free(p2);
    qw_db_close(db);
    free(payload);
    free(conninfo);
}

/* Every rejection: CLI exit code and message, SQL function SQLSTATE. */
static void test_rejections(void **state)
{
    char *conninfo = itest_db_create("enq_reject", 1);
    struct qw_db *db = itest_connect(conninfo);
    char id[129];
    uint8_t *payload = NULL;
    size_t len = 0;
    sample(10, 1, id, &payload, &len);
    char other[129];
    uint8_t *other_payload = NULL;
    size_t other_len = 0;
    sample(11, 1, other, &other_payload, &other_len);
    static const uint8_t garbage[] = {0xde, 0xad, 0xbe, 0xef};
    char upper[129];
    memcpy(upper, id, sizeof(upper));
    upper[0] = 'A';

    const struct {
        const char *name;      /* row label */
        const char *service;   /* --service */
        const char *id;        /* --batch-id */
        const uint8_t *p;      /* payload */
        size_t n;              /* bytes */
        const char *limit_env; /* extra env, or NULL */
        const char *message;   /* expected in stderr */
        const char *sqlstate;  /* from queuer.enqueue_batch */
    } rows[] = {
        {"bad service id", "itest-aaaa::0001", id, payload, len, NULL, "service_id", "QU400"},
        {"service id with a space", "itest-aaaaa::00 1", id, payload, len, NULL, "service_id",
         "QU400"},
        {"bad batch id", SVC_A, upper, payload, len, NULL, "batch_id", "QU400"},
        {"short batch id", SVC_A, "abc", payload, len, NULL, "batch_id", "QU400"},
        {"not a BatchList", SVC_A, id, garbage, sizeof(garbage), NULL, "BatchList", "QU400"},
        {"empty payload", SVC_A, id, garbage, 0, NULL, "empty", "QU400"},
        {"mismatched signature", SVC_A, other, payload, len, NULL, "does not equal batch_id",
         "QU400"},
        {"too large", SVC_A, id, payload, len, "QUEUER_INGEST_MAX_PAYLOAD_BYTES=100", "limit",
         NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const char *env[] = {rows[i].limit_env, NULL};
        char *out = NULL;
        char *err = NULL;
        int rc =
            cli_one(conninfo, env, rows[i].service, rows[i].id, rows[i].p, rows[i].n, &out, &err);
        if (rc != 65 || !strstr(err, rows[i].message))
            fail_msg("row '%s': exit %d, stderr: %s", rows[i].name, rc, err);
        free(out);
        free(err);
        if (rows[i].sqlstate) {
            struct qw_error e;
            rc = sql_enqueue(db, rows[i].service, rows[i].id, rows[i].p, rows[i].n, NULL, 0, &e);
            if (rc != QW_ERR_INVALID || strcmp(e.sqlstate, rows[i].sqlstate) != 0)
                fail_msg("row '%s' via SQL: rc %d sqlstate %s: %s", rows[i].name, rc, e.sqlstate,
                         e.msg);
        }
    }
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batches"), 0);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.service_ingest"), 0);

    /* the database's own size limit: QU413 */
    itest_exec(db, "UPDATE queuer.settings SET max_payload_bytes = 100");
    struct qw_error e;
    assert_int_equal(sql_enqueue(db, SVC_A, id, payload, len, NULL, 0, &e), QW_ERR_INVALID);
    assert_string_equal(e.sqlstate, "QU413");
    char *err_text = NULL;
    int rc = cli_one(conninfo, NULL, SVC_A, id, payload, len, NULL, &err_text);
    assert_int_equal(rc, 65);
    assert_contains(err_text, "the limit is 100");
    free(err_text);
    itest_exec(db, "UPDATE queuer.settings SET max_payload_bytes = DEFAULT");

    /* conflicting duplicates: same id, other service; same id, other payload */
    assert_int_equal(cli_one(conninfo, NULL, SVC_A, id, payload, len, NULL, NULL), 0);
    uint8_t *resigned = NULL;
    size_t resigned_len = 0;
    assert_int_equal(qw_batchlist_sample(id, 99, &resigned, &resigned_len), QW_OK);
    const struct {
        const char *service; /* --service */
        const uint8_t *p;    /* payload */
        size_t n;            /* bytes */
    } conflicts[] = {{SVC_B, payload, len}, {SVC_A, resigned, resigned_len}};
    for (size_t i = 0; i < 2; i++) {
        err_text = NULL;
        rc = cli_one(conninfo, NULL, conflicts[i].service, id, conflicts[i].p, conflicts[i].n, NULL,
                     &err_text);
        if (rc != 65)
            fail_msg("conflict %zu: exit %d: %s", i, rc, err_text);
        assert_contains(err_text, "conflict");
        assert_contains(err_text, "already enqueued");
        free(err_text);
        assert_int_equal(
            sql_enqueue(db, conflicts[i].service, id, conflicts[i].p, conflicts[i].n, NULL, 0, &e),
            QW_ERR_DUPLICATE);
        assert_string_equal(e.sqlstate, "QU409");
    }
    /* the identical one is a no-op, through SQL too */
    char word[32];
    assert_int_equal(sql_enqueue(db, SVC_A, id, payload, len, word, sizeof(word), &e), QW_OK);
    assert_string_equal(word, "duplicate");
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batches"), 1);

    /* a payload must not be rewritten into an invalid one either */
    qw_error_clear(&e);
    assert_int_not_equal(qw_db_exec(db, "UPDATE queuer.batches SET payload = '\\x0a00'", &e),
                         QW_OK);
    assert_string_equal(e.sqlstate, "QU400");

    /* usage errors and unreadable files */
    const char *no_args[] = {NULL};
    assert_int_equal(run_queuer(conninfo, NULL, no_args, NULL, NULL, NULL), 64);
    const char *mixed[] = {"--tsv", "-", "--service", SVC_A, NULL};
    assert_int_equal(run_queuer(conninfo, NULL, mixed, NULL, NULL, NULL), 64);
    const char *missing[] = {"--tsv", "/nonexistent/x.tsv", NULL};
    assert_int_equal(run_queuer(conninfo, NULL, missing, NULL, NULL, NULL), 66);
    const char *help[] = {"--help", NULL};
    char *help_out = NULL;
    assert_int_equal(run_queuer(conninfo, NULL, help, NULL, &help_out, NULL), 0);
    assert_contains(help_out, "--skip-invalid");
    free(help_out);
    /* an unreachable database */
    const char *tsv[] = {"--tsv", "-", NULL};
    assert_int_equal(run_queuer("host=/nonexistent-dir port=1 dbname=x", NULL, tsv, "", NULL, NULL),
                     69);

    qw_db_close(db);
    free(resigned);
    free(payload);
    free(other_payload);
    free(conninfo);
}

/* ---- bulk ------------------------------------------------------------------- */

static void test_bulk_order_and_rows(void **state)
{
    char *conninfo = itest_db_create("enq_bulk", 1);
    const char *services[] = {SVC_A, SVC_B, SVC_C};
    struct text t = {0};
    char ids[30][129];
    text_add(&t, "# a comment, then a blank line\n\n");
    for (int k = 0; k < 10; k++)
        for (int s = 0; s < 3; s++)
            tsv_line(&t, services[s], (uint64_t)(100 + k * 3 + s), ids[k * 3 + s]);
    char *out = load_ok(conninfo, t.s);
    assert_contains(
        out, "30 of 30 batch lines enqueued; 0 duplicates (already stored, no-op); 0 skipped");
    free(out);

    struct qw_db *db = itest_connect(conninfo);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batches"), 30);
    assert_int_equal(itest_scalar(db, "SELECT sum(batches) FROM queuer.enqueue_log"), 30);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batch_history"), 0);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.service_id_claims"), 3);
    /* per service, created_at order is line order and strictly increasing */
    for (int s = 0; s < 3; s++) {
        struct qw_db_res *res = NULL;
        struct qw_error e;
        const char *params[] = {services[s]};
        assert_int_equal(sql_params(db,
                                    "SELECT batch_id, created_at > lag(created_at) OVER "
                                    "(ORDER BY created_at) FROM queuer.batches "
                                    "WHERE service_id = $1 ORDER BY created_at, batch_id",
                                    1, params, &res, &e),
                         QW_OK);
        assert_int_equal(qw_db_res_rows(res), 10);
        for (int k = 0; k < 10; k++) {
            assert_string_equal(qw_db_res_get(res, k, 0), ids[k * 3 + s]);
            if (k > 0)
                assert_string_equal(qw_db_res_get(res, k, 1), "t");
        }
        qw_db_res_free(res);
    }
    /* the same load again: all duplicates, exit 0, nothing new */
    const char *args[] = {"--tsv", "-", NULL};
    char *err = NULL;
    int rc = run_queuer(conninfo, NULL, args, t.s, &out, &err);
    assert_int_equal(rc, 0);
    assert_contains(
        out, "0 of 30 batch lines enqueued; 30 duplicates (already stored, no-op); 0 skipped");
    assert_contains(err, "... and 10 more duplicates");
    free(out);
    free(err);

    /* a later load continues each service's order after what is stored */
    struct text more = {0};
    char later[129];
    tsv_line(&more, SVC_A, 500, later);
    rc = run_queuer(conninfo, NULL, args, more.s, NULL, NULL);
    assert_int_equal(rc, 0);
    assert_int_equal(count_where(db,
                                 "SELECT count(*) FROM queuer.batches b WHERE batch_id = $1 AND "
                                 "created_at > (SELECT max(created_at) FROM queuer.batches x "
                                 "WHERE x.service_id = b.service_id AND x.batch_id <> b.batch_id)",
                                 later),
                     1);
    qw_db_close(db);
    free(more.s);
    free(t.s);
    free(conninfo);
}

/* Bytes of the batches heap and of its TOAST relation. */
static void batches_sizes(struct qw_db *db, int64_t *heap, int64_t *toast)
{
    *heap = itest_scalar(db, "SELECT pg_relation_size('queuer.batches')");
    *toast = itest_scalar(db, "SELECT pg_relation_size(reltoastrelid) FROM pg_class "
                              "WHERE oid = 'queuer.batches'::regclass");
}

/* Batch `id`'s payload reads back as `hex` (bytea_text()). */
static void assert_payload(struct qw_db *db, const char *id, const char *hex)
{
    const char *params[] = {id};
    struct qw_db_res *res = NULL;
    struct qw_error e;
    if (sql_params(db, "SELECT payload FROM queuer.batches WHERE batch_id = $1", 1, params, &res,
                   &e) != QW_OK)
        fail_msg("%s", e.msg);
    assert_string_equal(qw_db_res_get(res, 0, 0), hex);
    qw_db_res_free(res);
}

/*
 * A payload is stored once, out of its batch's row, whichever way the batch
 * came in (a load, enqueue_batch(), a plain INSERT): the rows stay narrow
 * (well under the payload's size each), the payloads take the table's
 * TOAST, state changes write new row versions without copying them, and
 * every payload reads back whole.
 */
static void test_payload_stored_out_of_line(void **state)
{
    enum { LOADED = 300 };
    char *conninfo = itest_db_create("enq_out_of_line", 1);
    struct text t = {0};
    for (int k = 0; k < LOADED; k++) {
        char service[32]; /* 25 batches each, under the test's high mark */
        char loaded[129];
        snprintf(service, sizeof service, "itest-ccccc::%04d", k % 12);
        tsv_line(&t, service, (uint64_t)(1000 + k), loaded);
    }
    free(load_ok(conninfo, t.s));

    struct qw_db *db = itest_connect(conninfo);
    char id[129];
    uint8_t *payload = NULL;
    size_t len = 0;
    struct qw_error e;
    sample(5000, 3, id, &payload, &len);
    assert_int_equal(sql_enqueue(db, SVC_A, id, payload, len, NULL, 0, &e), QW_OK);
    char id2[129];
    uint8_t *payload2 = NULL;
    size_t len2 = 0;
    sample(5001, 4, id2, &payload2, &len2);
    char *hex = bytea_text(payload2, len2);
    const char *params[] = {id2, SVC_B, hex};
    struct qw_db_res *res = NULL;
    assert_int_equal(sql_params(db,
                                "INSERT INTO queuer.batches (batch_id, service_id, payload, "
                                "created_at) VALUES ($1, $2, $3::bytea, now())",
                                3, params, &res, &e),
                     QW_OK);
    qw_db_res_free(res);

    const int64_t rows = LOADED + 2;
    int64_t bytes = itest_scalar(db, "SELECT sum(octet_length(payload)) FROM queuer.batches");
    assert_true(bytes > rows * 500); /* payloads of a few hundred bytes each */
    int64_t heap = 0, toast = 0;
    batches_sizes(db, &heap, &toast);
    /* every payload in the TOAST relation; rows of ~250 bytes, at fill factor 80 */
    assert_true(toast >= bytes);
    assert_true(heap <= rows * 400 + 8192);

    /* three state changes a batch: new versions, the payloads not copied */
    for (int i = 0; i < 3; i++)
        assert_int_equal(itest_scalar(db, "WITH u AS (UPDATE queuer.batches "
                                          "SET attempts = attempts + 1 RETURNING 1) "
                                          "SELECT count(*) FROM u"),
                         rows);
    int64_t heap2 = 0, toast2 = 0;
    batches_sizes(db, &heap2, &toast2);
    assert_int_equal(toast2, toast);
    assert_true(heap2 <= heap + 3 * (rows * 400 + 8192));

    /* the payloads read back whole */
    assert_int_equal(itest_scalar(db, "SELECT sum(octet_length(payload)) FROM queuer.batches"),
                     bytes);
    assert_payload(db, id2, hex);
    char *hex1 = bytea_text(payload, len);
    assert_payload(db, id, hex1);

    qw_db_close(db);
    free(hex1);
    free(hex);
    free(payload2);
    free(payload);
    free(t.s);
    free(conninfo);
}

/*
 * Asserts that `service`'s batches, except those at priority `skip` (0:
 * none skipped), are ids[first], ids[first + stride], ... (n of them) in
 * created_at order: the load's line order.
 */
static void assert_line_order(struct qw_db *db, const char *service, int skip, char (*ids)[129],
                              int first, int stride, int n)
{
    char skipped[16];
    snprintf(skipped, sizeof(skipped), "%d", skip);
    const char *ps[] = {service, skipped};
    struct qw_db_res *res = NULL;
    struct qw_error e;
    assert_int_equal(sql_params(db,
                                "SELECT batch_id FROM queuer.batches WHERE service_id = $1 "
                                "AND ($2::integer = 0 OR priority <> $2::integer) "
                                "ORDER BY created_at, batch_id",
                                2, ps, &res, &e),
                     QW_OK);
    assert_int_equal(qw_db_res_rows(res), n);
    for (int i = 0; i < n; i++)
        assert_string_equal(qw_db_res_get(res, i, 0), ids[first + i * stride]);
    qw_db_res_free(res);
}

/*
 * Priorities: --priority for a single batch and as the default
 * of a load, the fourth TSV column per line, enqueue_batch()'s parameter;
 * a load mixing priorities keeps each service's line order (it is stored
 * with each line's own priority); out-of-range values are refused.
 */
static void test_priorities(void **state)
{
    char *conninfo = itest_db_create("enq_prio", 1);
    struct qw_db *db = itest_connect(conninfo);

    /* single: --priority, and the SQL function's parameter */
    uint8_t *p = NULL;
    size_t n = 0;
    char one[129], two[129];
    sample(900, 1, one, &p, &n);
    const char *env[] = {NULL};
    char *path = temp_file(p, n);
    const char *args1[] = {"--service", SVC_A,        "--batch-id", one, "--payload-file",
                           path,        "--priority", "42",         NULL};
    assert_int_equal(run_queuer(conninfo, env, args1, NULL, NULL, NULL), 0);
    unlink(path);
    free(path);
    free(p);
    assert_int_equal(
        count_where(db, "SELECT priority FROM queuer.batches WHERE batch_id = $1", one), 42);
    sample(901, 1, two, &p, &n);
    char *hex = bytea_text(p, n);
    const char *params[] = {SVC_A, two, hex, "-3"};
    struct qw_error e;
    struct qw_db_res *res = NULL;
    assert_int_equal(sql_params(db, "SELECT queuer.enqueue_batch($1, $2, $3::bytea, $4::integer)",
                                4, params, &res, &e),
                     QW_OK);
    qw_db_res_free(res);
    assert_int_equal(
        count_where(db, "SELECT priority FROM queuer.batches WHERE batch_id = $1", two), -3);
    const char *bad[] = {SVC_A, two, hex, "1001"};
    assert_int_not_equal(sql_params(db,
                                    "SELECT queuer.enqueue_batch($1, $2, $3::bytea, $4::integer)",
                                    4, bad, NULL, &e),
                         QW_OK);
    assert_string_equal(e.sqlstate, "QU400");
    free(hex);
    free(p);
    /* the parameter decides, not a session's own queuer.enqueue_priority */
    char three[129];
    sample(902, 1, three, &p, &n);
    hex = malloc(2 * n + 3);
    hex[0] = '\\';
    hex[1] = 'x';
    qw_hex_encode(p, n, hex + 2);
    assert_int_equal(qw_db_exec(db, "SET queuer.enqueue_priority = '9'", &e), QW_OK);
    const char *plain[] = {SVC_A, three, hex};
    assert_int_equal(
        sql_params(db, "SELECT queuer.enqueue_batch($1, $2, $3::bytea)", 3, plain, &res, &e),
        QW_OK);
    qw_db_res_free(res);
    assert_int_equal(qw_db_exec(db, "RESET queuer.enqueue_priority", &e), QW_OK);
    assert_int_equal(
        count_where(db, "SELECT priority FROM queuer.batches WHERE batch_id = $1", three), 0);
    free(hex);
    free(p);

    /* bulk: the fourth column wins over --priority; mixed runs keep line order */
    static const int prio[12] = {5, 5, -1, 7, 7, 7, -1, 5, 5, 0, 1000, -1000};
    struct text t = {0};
    char ids[12][129];
    for (int k = 0; k < 12; k++) {
        struct text line = {0};
        tsv_line(&line, k % 2 ? SVC_B : SVC_C, (uint64_t)(300 + k), ids[k]);
        line.s[line.n - 1] = '\0'; /* drop the newline */
        if (prio[k] == -1)
            text_add(&t, "%s\n", line.s); /* no fourth field: --priority applies */
        else
            text_add(&t, "%s\t%d\n", line.s, prio[k]);
        free(line.s);
    }
    const char *args2[] = {"--tsv", "-", "--priority", "3", NULL};
    char *out = NULL, *err = NULL;
    int rc = run_queuer(conninfo, env, args2, t.s, &out, &err);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, err);
    assert_contains(out, "12 of 12 batch lines enqueued");
    free(out);
    free(err);
    for (int k = 0; k < 12; k++)
        assert_int_equal(
            count_where(db, "SELECT priority FROM queuer.batches WHERE batch_id = $1", ids[k]),
            prio[k] == -1 ? 3 : prio[k]);
    /* each service's batches in line order (created_at strictly increasing) */
    assert_line_order(db, SVC_C, 0, ids, 0, 2, 6);
    assert_line_order(db, SVC_B, 0, ids, 1, 2, 6);
    free(t.s);

    /* refused: an out-of-range fourth column (the line), a bad --priority (usage) */
    struct text badline = {0};
    char bid[129];
    tsv_line(&badline, SVC_A, 700, bid);
    badline.s[badline.n - 1] = '\0';
    struct text badt = {0};
    text_add(&badt, "%s\t1001\n", badline.s);
    const char *args3[] = {"--tsv", "-", NULL};
    rc = run_queuer(conninfo, env, args3, badt.s, NULL, &err);
    assert_int_equal(rc, 65);
    assert_contains(err, "line 1: invalid: priority must be an integer from -1000 to 1000");
    free(err);
    const char *args4[] = {"--tsv", "-", "--priority", "high", NULL};
    rc = run_queuer(conninfo, env, args4, badt.s, NULL, &err);
    assert_int_equal(rc, 64);
    assert_contains(err, "--priority must be an integer from -1000 to 1000");
    free(err);
    free(badline.s);
    free(badt.s);
    qw_db_close(db);
    free(conninfo);
}

/* Calls of queuer.enqueue_staged() in the statistics; waits (up to 10 s) for `want`. */
static int64_t staged_calls_reach(struct qw_db *db, int64_t want)
{
    int64_t got = -1;
    for (int i = 0; i < 100; i++) {
        itest_exec(db, "SELECT pg_stat_clear_snapshot()");
        got = itest_scalar(db, "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
                               "WHERE schemaname = 'queuer' AND funcname = 'enqueue_staged'");
        if (got >= want)
            break;
        struct timespec nap = {0, 100 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    return got;
}

/*
 * Priorities through the bulk path (the staging table's priority column,
 * read by queuer.enqueue_staged(), migration 0012): `--tsv --priority N`
 * stores N for a whole load; a load whose fourth column changes stores each
 * line at its own priority, still in one call, each service's batches in
 * line order; a duplicate keeps the priority it was stored with.
 */
static void test_bulk_priorities(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("enq_prio_bulk", 1);
    struct qw_db *db = itest_connect(conninfo);
    char *dbname = itest_string(db, "SELECT current_database()");
    char sql[256];
    snprintf(sql, sizeof(sql), "ALTER DATABASE %s SET track_functions = 'pl'", dbname);
    itest_exec(db, sql);
    free(dbname);
    const char *svcs[3] = {SVC_A, SVC_B, SVC_C};

    /* one priority for the whole load: one call */
    struct text t = {0};
    char ids[40][129];
    for (int k = 0; k < 40; k++)
        tsv_line(&t, svcs[k % 3], (uint64_t)(1000 + k), ids[k]);
    const char *env[] = {NULL};
    const char *args1[] = {"--tsv", "-", "--priority", "7", NULL};
    char *out = NULL, *err = NULL;
    int rc = run_queuer(conninfo, env, args1, t.s, &out, &err);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, err);
    free(out);
    free(err);
    free(t.s);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batches WHERE priority = 7"),
                     40);
    assert_int_equal(staged_calls_reach(db, 1), 1);

    /* three runs (2, then --priority -5, then 900) and two repeats of the first load */
    struct text m = {0};
    char mids[30][129];
    for (int k = 0; k < 30; k++) {
        struct text line = {0};
        tsv_line(&line, svcs[k % 3], (uint64_t)(2000 + k), mids[k]);
        line.s[line.n - 1] = '\0';
        if (k < 10)
            text_add(&m, "%s\t2\n", line.s);
        else if (k < 20)
            text_add(&m, "%s\n", line.s);
        else
            text_add(&m, "%s\t900\n", line.s);
        free(line.s);
    }
    for (int k = 0; k < 2; k++) {
        struct text again = {0};
        char id[129];
        tsv_line(&again, svcs[k % 3], (uint64_t)(1000 + k), id);
        again.s[again.n - 1] = '\0';
        text_add(&m, "%s\t900\n", again.s);
        free(again.s);
    }
    const char *args2[] = {"--tsv", "-", "--priority", "-5", NULL};
    rc = run_queuer(conninfo, env, args2, m.s, &out, &err);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, err);
    assert_contains(out, "30 of 32 batch lines enqueued");
    free(out);
    free(err);
    free(m.s);
    for (int k = 0; k < 30; k++)
        assert_int_equal(
            count_where(db, "SELECT priority FROM queuer.batches WHERE batch_id = $1", mids[k]),
            k < 10   ? 2
            : k < 20 ? -5
                     : 900);
    for (int k = 0; k < 2; k++)
        assert_int_equal(
            count_where(db, "SELECT priority FROM queuer.batches WHERE batch_id = $1", ids[k]), 7);
    assert_int_equal(staged_calls_reach(db, 2), 2);
    /* each service's batches of the second load in line order across priorities */
    for (int s2 = 0; s2 < 3; s2++)
        assert_line_order(db, svcs[s2], 7, mids, s2, 3, 10);
    qw_db_close(db);
    free(conninfo);
}

static void test_bulk_bad_lines(void **state)
{
    char *conninfo = itest_db_create("enq_badline", 1);
    char id[129];
    struct text t = {0};
    tsv_line(&t, SVC_A, 1, id);
    tsv_line(&t, SVC_A, 2, id);
    text_add(&t, "%s\t%s\t0a00\n", SVC_A, id); /* line 3: a payload that is not a batch of id */
    tsv_line(&t, SVC_A, 4, id);
    text_add(&t, "bad-service\t%s\t0a00\n", id); /* line 5 */
    tsv_line(&t, SVC_B, 6, id);

    const char *args[] = {"--tsv", "-", NULL};
    char *out = NULL;
    char *err = NULL;
    int rc = run_queuer(conninfo, NULL, args, t.s, &out, &err);
    assert_int_equal(rc, 65);
    assert_contains(err, "line 3: invalid:");
    assert_contains(err, "line 5: invalid: service_id 'bad-service'");
    assert_contains(err, "nothing was enqueued");
    assert_contains(out, "nothing enqueued from 6 batch lines: 2 invalid");
    free(out);
    free(err);
    struct qw_db *db = itest_connect(conninfo);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batches"), 0);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batch_history"), 0);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.service_id_claims"), 0);

    /* --skip-invalid: the other four go in, each skipped line is reported */
    const char *skip[] = {"--tsv", "-", "--skip-invalid", NULL};
    rc = run_queuer(conninfo, NULL, skip, t.s, &out, &err);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, err);
    assert_contains(out,
                    "4 of 6 batch lines enqueued; 0 duplicates (already stored, no-op); 2 skipped "
                    "(2 invalid, 0 conflicting, 0 refused by back pressure)");
    assert_contains(err, "line 3: invalid:");
    assert_contains(err, "line 5: invalid:");
    free(out);
    free(err);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batches"), 4);

    /* --skip-invalid with nothing loadable stored nothing: that is a failure, not exit 0 */
    rc = run_queuer(conninfo, NULL, skip, "junk\nmore junk\tx\n\x01\x02\x03\n", &out, &err);
    if (rc != 65)
        fail_msg("junk with --skip-invalid: exit %d, want 65\n%s%s", rc, out, err);
    assert_contains(out, "0 of 3 batch lines enqueued; 0 duplicates (already stored, no-op); 3 "
                         "skipped (3 invalid, 0 conflicting, 0 refused by back pressure)");
    assert_contains(err, "no line was stored");
    free(out);
    free(err);
    /* lines already stored count as loaded (a re-run of a load is not a failure) */
    rc = run_queuer(conninfo, NULL, skip, t.s, &out, &err);
    if (rc != 0)
        fail_msg("re-run with --skip-invalid: exit %d\n%s", rc, err);
    free(out);
    free(err);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batches"), 4);

    /* a conflict found by the database also rejects the whole load */
    struct text c = {0};
    char fresh[129];
    tsv_line(&c, SVC_C, 7, fresh);
    uint8_t *p = NULL;
    size_t n = 0;
    char first[129];
    sample(1, 1, first, &p, &n); /* line 1's batch, now for another service */
    char *hex = malloc(2 * n + 1);
    qw_hex_encode(p, n, hex);
    text_add(&c, "%s\t%s\t%s\n", SVC_C, first, hex);
    free(hex);
    free(p);
    rc = run_queuer(conninfo, NULL, args, c.s, &out, &err);
    assert_int_equal(rc, 65);
    assert_contains(err, "line 2: conflict:");
    free(out);
    free(err);
    assert_int_equal(
        count_where(db, "SELECT count(*) FROM queuer.batches WHERE batch_id = $1", fresh), 0);

    qw_db_close(db);
    free(c.s);
    free(t.s);
    free(conninfo);
}

/* ---- back pressure ------------------------------------------------------- */

static int enqueue_k(const char *conninfo, const char *const *env, const char *service, uint64_t k,
                     char **err)
{
    char id[129];
    uint8_t *p = NULL;
    size_t n = 0;
    sample(k, 1, id, &p, &n);
    int rc = cli_one(conninfo, env, service, id, p, n, NULL, err);
    free(p);
    return rc;
}

/* Marks the `n` oldest waiting batches of `service` Committed, as a worker would. */
static void finish_oldest(struct qw_db *db, const char *service, int n)
{
    char count[16];
    snprintf(count, sizeof(count), "%d", n);
    const char *params[] = {service, count};
    struct qw_error e;
    if (sql_params(db,
                   "UPDATE queuer.batches SET status = 'Committed' WHERE batch_id IN "
                   "(SELECT batch_id FROM queuer.batches WHERE service_id = $1 AND status IS NULL "
                   "ORDER BY created_at LIMIT $2::integer)",
                   2, params, NULL, &e) != QW_OK)
        fail_msg("finish: %s", e.msg);
}

static void test_backpressure_hysteresis(void **state)
{
    char *conninfo = itest_db_create("enq_bp", 1);
    struct qw_db *db = itest_connect(conninfo);
    const char *env[] = {"QUEUER_INGEST_HIGH=30", "QUEUER_INGEST_LOW=15", NULL};

    /* 30 accepted (one bulk load), the 31st refused */
    struct text t = {0};
    char id[129];
    for (int k = 0; k < 30; k++)
        tsv_line(&t, SVC_A, (uint64_t)k, id);
    const char *args[] = {"--tsv", "-", NULL};
    assert_int_equal(run_queuer(conninfo, env, args, t.s, NULL, NULL), 0);
    char *err = NULL;
    assert_int_equal(enqueue_k(conninfo, env, SVC_A, 30, &err), 75);
    assert_contains(err, "has 30 batches waiting");
    assert_contains(err, "resume below 15 waiting");
    free(err);
    /* the SQL function says QU429; another service is unaffected */
    char id30[129];
    uint8_t *p30 = NULL;
    size_t n30 = 0;
    sample(30, 1, id30, &p30, &n30);
    struct qw_error e;
    itest_exec(db, "SET queuer.ingest_high = '30'");
    itest_exec(db, "SET queuer.ingest_low = '15'");
    assert_int_equal(sql_enqueue(db, SVC_A, id30, p30, n30, NULL, 0, &e), QW_ERR_BACKPRESSURE);
    assert_string_equal(e.sqlstate, "QU429");
    assert_int_equal(enqueue_k(conninfo, env, SVC_B, 1000, NULL), 0);

    /* drained to 16 waiting: still refused (hysteresis) */
    finish_oldest(db, SVC_A, 14);
    assert_int_equal(enqueue_k(conninfo, env, SVC_A, 30, NULL), 75);
    /* 15 waiting is not below 15 */
    finish_oldest(db, SVC_A, 1);
    assert_int_equal(enqueue_k(conninfo, env, SVC_A, 30, NULL), 75);
    /* 14 waiting: accepted again, up to the high mark */
    finish_oldest(db, SVC_A, 1);
    err = NULL;
    int rc = enqueue_k(conninfo, env, SVC_A, 30, &err);
    if (rc != 0)
        fail_msg("exit %d at 14 waiting: %s", rc, err);
    free(err);
    assert_int_equal(count_where(db,
                                 "SELECT count(*) FROM queuer.batches WHERE service_id = $1 AND "
                                 "status IS NULL",
                                 SVC_A),
                     15);

    /* a bulk load that would overshoot: 15 more fit, the rest are refused */
    struct text over = {0};
    for (int k = 40; k < 60; k++)
        tsv_line(&over, SVC_A, (uint64_t)k, id);
    char *out = NULL;
    assert_int_equal(run_queuer(conninfo, env, args, over.s, &out, &err), 75);
    assert_contains(out, "nothing enqueued from 20 batch lines"); /* without --skip-invalid */
    assert_contains(err, "line 16: back pressure:");
    free(out);
    free(err);
    const char *skip[] = {"--tsv", "-", "--skip-invalid", NULL};
    assert_int_equal(run_queuer(conninfo, env, skip, over.s, &out, &err), 75);
    assert_contains(
        out, "15 of 20 batch lines enqueued; 0 duplicates (already stored, no-op); 5 skipped");
    assert_contains(err, "run the load again");
    free(out);
    free(err);
    assert_int_equal(count_where(db,
                                 "SELECT count(*) FROM queuer.batches WHERE service_id = $1 AND "
                                 "status IS NULL",
                                 SVC_A),
                     30);
    /* a re-run reports the stored lines as duplicates and the rest as refused */
    assert_int_equal(run_queuer(conninfo, env, skip, over.s, &out, NULL), 75);
    assert_contains(
        out, "0 of 20 batch lines enqueued; 15 duplicates (already stored, no-op); 5 skipped");
    free(out);

    /* high = 0 disables back pressure */
    const char *off[] = {"QUEUER_INGEST_HIGH=0", NULL};
    assert_int_equal(run_queuer(conninfo, off, skip, over.s, &out, NULL), 0);
    assert_contains(out, "5 of 20 batch lines enqueued; 15 duplicates");
    free(out);
    struct text many = {0};
    for (int k = 100; k < 150; k++)
        tsv_line(&many, SVC_C, (uint64_t)k, id);
    assert_int_equal(run_queuer(conninfo, off, args, many.s, NULL, NULL), 0);
    assert_int_equal(
        count_where(db, "SELECT count(*) FROM queuer.batches WHERE service_id = $1", SVC_C), 50);

    qw_db_close(db);
    free(p30);
    free(t.s);
    free(over.s);
    free(many.s);
    free(conninfo);
}

/* ---- concurrency ------------------------------------------------------------ */

/* Asserts that batch `k_first` (of sample()) was created before batch `k_next`. */
static void assert_created_before(struct qw_db *db, uint64_t k_first, uint64_t k_next)
{
    char id_first[129], id_next[129];
    uint8_t *p = NULL;
    size_t n = 0;
    sample(k_first, 1, id_first, &p, &n);
    free(p);
    sample(k_next, 1, id_next, &p, &n);
    free(p);
    const char *params[] = {id_first, id_next};
    struct qw_db_res *res = NULL;
    struct qw_error e;
    assert_int_equal(sql_params(db,
                                "SELECT (SELECT created_at FROM queuer.batches WHERE "
                                "batch_id = $1) < (SELECT created_at FROM "
                                "queuer.batches WHERE batch_id = $2)",
                                2, params, &res, &e),
                     QW_OK);
    assert_string_equal(qw_db_res_get(res, 0, 0), "t");
    qw_db_res_free(res);
}

/* Counts a child process reports back through its pipe. */
struct child_counts {
    long enqueued;     /* stored */
    long backpressure; /* refused */
    int rc;            /* qw_enqueue_bulk() result */
};

/*
 * Runs `procs` processes, each bulk-loading its own `per_service` batches
 * into every one of `services` at once (distinct ids), and returns their
 * counts. `first_lines` receives, per process, its ids in line order.
 */
static void run_concurrent(const char *conninfo, int procs, const char *const *services,
                           int nservices, int per_service, int high, struct child_counts *counts)
{
    int fds[16][2];
    pid_t pids[16];
    for (int c = 0; c < procs; c++) {
        if (pipe(fds[c]) != 0)
            fail_msg("pipe");
        pids[c] = fork();
        if (pids[c] < 0)
            fail_msg("fork");
        if (pids[c] == 0) {
            close(fds[c][0]);
            struct text t = {0};
            char id[129];
            for (int k = 0; k < per_service; k++)
                for (int s = 0; s < nservices; s++)
                    tsv_line(&t, services[s], (uint64_t)(10000 * (c + 1) + k * nservices + s), id);
            FILE *in = fmemopen(t.s, t.n, "r");
            struct qw_db *db = itest_connect(conninfo);
            struct qw_enqueue_opts opts = {
                .ingest_high = high,
                .ingest_low = high > 0 ? high / 2 : 0,
                .max_payload_bytes = 1048576,
                .skip_invalid = 1,
                .chunk_rows = 7, /* many statements per load, to interleave */
            };
            struct qw_enqueue_report report;
            struct qw_error e;
            qw_error_clear(&e);
            struct child_counts out = {0};
            out.rc = qw_enqueue_bulk(db, &opts, in, NULL, NULL, &report, &e);
            out.enqueued = report.enqueued;
            out.backpressure = report.backpressure;
            if (out.rc != QW_OK)
                fprintf(stderr, "child %d: %s\n", c, e.msg);
            if (write(fds[c][1], &out, sizeof(out)) != (ssize_t)sizeof(out))
                _exit(3);
            qw_db_close(db);
            _exit(0);
        }
        close(fds[c][1]);
    }
    for (int c = 0; c < procs; c++) {
        if (read(fds[c][0], &counts[c], sizeof(counts[c])) != (ssize_t)sizeof(counts[c]))
            fail_msg("child %d reported nothing", c);
        close(fds[c][0]);
        int status = 0;
        waitpid(pids[c], &status, 0);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
}

static void test_concurrent_enqueuers(void **state)
{
    char *conninfo = itest_db_create("enq_conc", 1);
    struct qw_db *db = itest_connect(conninfo);
    const char *services[] = {SVC_A, SVC_B, SVC_C};
    enum { PROCS = 4, PER = 40 };

    /* no back pressure: nothing is lost, order holds per service */
    struct child_counts counts[PROCS];
    run_concurrent(conninfo, PROCS, services, 3, PER, 0, counts);
    for (int c = 0; c < PROCS; c++) {
        assert_int_equal(counts[c].rc, QW_OK);
        assert_int_equal(counts[c].enqueued, 3 * PER);
    }
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batches"), PROCS * 3 * PER);
    /* every stored batch counted once in the enqueue log */
    assert_int_equal(itest_scalar(db, "SELECT sum(batches) FROM queuer.enqueue_log"),
                     PROCS * 3 * PER);
    /* created_at is unique within a service ... */
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM (SELECT service_id, created_at FROM "
                                      "queuer.batches GROUP BY 1, 2 HAVING count(*) > 1) d"),
                     0);
    /* ... and every process's batches of a service are in its line order
       (its ids were numbered in line order) */
    for (int c = 0; c < PROCS; c++) {
        for (int s = 0; s < 3; s++) {
            for (int k = 0; k + 1 < PER; k++)
                assert_created_before(db, (uint64_t)(10000 * (c + 1) + k * 3 + s),
                                      (uint64_t)(10000 * (c + 1) + (k + 1) * 3 + s));
        }
    }

    /* with back pressure: exactly `high` accepted per service, whoever wins */
    char *conninfo2 = itest_db_create("enq_conc_bp", 1);
    struct qw_db *db2 = itest_connect(conninfo2);
    run_concurrent(conninfo2, PROCS, services, 3, 20, 30, counts);
    long stored = 0;
    long refused = 0;
    for (int c = 0; c < PROCS; c++) {
        assert_int_equal(counts[c].rc, QW_OK);
        stored += counts[c].enqueued;
        refused += counts[c].backpressure;
    }
    assert_int_equal(stored, 3 * 30);
    assert_int_equal(refused, PROCS * 3 * 20 - 3 * 30);
    assert_int_equal(itest_scalar(db2, "SELECT count(*) FROM queuer.batches"), 3 * 30);
    assert_int_equal(itest_scalar(db2, "SELECT count(*) FROM queuer.service_ingest "
                                       "WHERE blocked"),
                     3);
    qw_db_close(db2);
    qw_db_close(db);
    free(conninfo2);
    free(conninfo);
}

/*
 * Services whose order differs between an ICU "en-US" database collation
 * (aaaaa < BBBBB) and byte order, "C" (BBBBB < aaaaa), the order of the
 * service_id columns.
 */
#define MIX_SERVICES 4
#define MIX_CALLS 100
static const char *const mix_services[MIX_SERVICES] = {"aaaaa-aaaaa::aaaa", "BBBBB-BBBBB::BBBB",
                                                       "ccccc-ccccc::cccc", "DDDDD-DDDDD::DDDD"};

/* Batch number of caller `c`'s row for service `s` in its call (or chunk) `j`. */
static uint64_t mix_k(int c, int j, int s)
{
    return (uint64_t)(200000 * (c + 1) + j * MIX_SERVICES + s);
}

/* The service of place `i` in call `j` of caller `c`: each call in another order. */
static int mix_service(int c, int j, int i)
{
    return (i + j + c) % MIX_SERVICES;
}

/*
 * The callers run in child processes, where a cmocka failure would carry on
 * with the rest of the suite: these report on stderr and return -1 instead.
 */

/* Call `j` of caller `c`: queuer.enqueue_rows() with one row per service; -1 unless all stored. */
static int mix_sql_call(struct qw_db *db, int c, int j)
{
    struct text svc = {0}, ids = {0}, hexes = {0};
    for (int i = 0; i < MIX_SERVICES; i++) {
        int s = mix_service(c, j, i);
        char id[129];
        uint8_t *p = NULL;
        size_t n = 0;
        sample(mix_k(c, j, s), 1, id, &p, &n);
        char *hex = malloc(2 * n + 1);
        if (!hex)
            fail_msg("out of memory");
        qw_hex_encode(p, n, hex);
        const char *sep = i ? "," : "{";
        text_add(&svc, "%s\"%s\"", sep, mix_services[s]);
        text_add(&ids, "%s\"%s\"", sep, id);
        text_add(&hexes, "%s\"%s\"", sep, hex);
        free(hex);
        free(p);
    }
    text_add(&svc, "}");
    text_add(&ids, "}");
    text_add(&hexes, "}");
    const char *params[] = {svc.s, ids.s, hexes.s};
    struct qw_db_res *res = NULL;
    struct qw_error e;
    int rc = sql_params(db,
                        "SELECT count(*) FROM queuer.enqueue_rows((SELECT array_agg(ROW("
                        "u.o::integer, u.s, u.b, decode(u.p, 'hex'))::queuer.enqueue_row ORDER BY "
                        "u.o) FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS "
                        "u(s, b, p, o)), false)",
                        3, params, &res, &e);
    bool stored = rc == QW_OK && strcmp(qw_db_res_get(res, 0, 0), "0") == 0;
    if (!stored)
        fprintf(stderr, "caller %d, call %d: %s\n", c, j,
                rc != QW_OK ? e.msg : "some rows were not stored");
    qw_db_res_free(res);
    free(svc.s);
    free(ids.s);
    free(hexes.s);
    return stored ? 0 : -1;
}

/* Call `j` of caller `c` through `queuer enqueue`'s bulk path: a load of one row per service. */
static int mix_bulk_load(struct qw_db *db, int c, int j)
{
    struct text t = {0};
    char id[129];
    for (int i = 0; i < MIX_SERVICES; i++) {
        int s = mix_service(c, j, i);
        tsv_line(&t, mix_services[s], mix_k(c, j, s), id);
    }
    FILE *in = fmemopen(t.s, t.n, "r");
    struct qw_enqueue_opts opts = {.ingest_high = 0, .ingest_low = 0, .max_payload_bytes = 1048576};
    struct qw_enqueue_report report;
    struct qw_error e;
    qw_error_clear(&e);
    int rc = qw_enqueue_bulk(db, &opts, in, NULL, NULL, &report, &e);
    bool stored = rc == QW_OK && report.enqueued == MIX_SERVICES;
    if (!stored)
        fprintf(stderr, "caller %d, load %d: %s\n", c, j,
                rc != QW_OK ? e.msg : "some rows were not stored");
    fclose(in);
    free(t.s);
    return stored ? 0 : -1;
}

/*
 * The SQL function path (two callers) and bulk loads (two more, a load per
 * call) at once on the same services in an en-US database. Every path
 * locks a call's services in the column's "C" order; were one to follow
 * the database's collation, two callers would take the same rows in
 * opposite orders and one would fail with a deadlock (it did in five runs
 * of five with 0017's sort left at the database's collation). Nothing is
 * refused, and every caller's batches of a service keep its order.
 */
static void test_concurrent_sql_and_bulk(void **state)
{
    struct qw_db *admin = itest_connect(itest_base_conninfo());
    int64_t icu = itest_scalar(admin, "SELECT count(*) FROM pg_collation WHERE collprovider = 'i'");
    qw_db_close(admin);
    if (icu == 0) {
        print_message("skipped: this PostgreSQL has no ICU collations\n");
        skip();
    }
    char *conninfo = itest_db_create_with(
        "enq_mix_icu", "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'", 1);
    struct qw_db *db = itest_connect(conninfo);
    /* the two orders differ here */
    assert_int_equal(itest_scalar(db, "SELECT ('aaaaa' < 'BBBBB')::int + 2 * ('aaaaa' COLLATE "
                                      "\"C\" < 'BBBBB')::int"),
                     1);
    /* no back pressure (every caller stores all), and the services exist */
    itest_exec(db, "UPDATE queuer.settings SET ingest_high = 0, ingest_low = 0");
    assert_int_equal(mix_sql_call(db, MIX_SERVICES, 0), 0);

    enum { PROCS = 4 };
    pid_t pids[PROCS];
    for (int c = 0; c < PROCS; c++) {
        pids[c] = fork();
        if (pids[c] < 0)
            fail_msg("fork");
        if (pids[c] == 0) {
            struct qw_db *own = itest_connect(conninfo);
            int rc = 0;
            for (int j = 0; j < MIX_CALLS && rc == 0; j++)
                rc = c < 2 ? mix_sql_call(own, c, j) : mix_bulk_load(own, c, j);
            qw_db_close(own);
            _exit(rc == 0 ? 0 : 1);
        }
    }
    for (int c = 0; c < PROCS; c++) {
        int status = 0;
        waitpid(pids[c], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("caller %d failed (a deadlock would end one)", c);
    }
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batches"),
                     (PROCS * MIX_CALLS + 1) * MIX_SERVICES);
    for (int c = 0; c < PROCS; c++)
        for (int s = 0; s < MIX_SERVICES; s++)
            for (int j = 0; j + 1 < MIX_CALLS; j++)
                assert_created_before(db, mix_k(c, j, s), mix_k(c, j + 1, s));
    qw_db_close(db);
    free(conninfo);
}

/* ---- roles and the SQL functions -------------------------------------------------- */

static void test_enqueuer_role_calls_sql(void **state)
{
    char *conninfo = itest_db_create("enq_role", 1);
    struct qw_db *admin = itest_connect(conninfo);
    itest_exec(admin, "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
                      "'itest_enqueuer') THEN CREATE ROLE itest_enqueuer LOGIN IN ROLE "
                      "queuer_enqueuer; END IF; END $$");
    size_t len = strlen(conninfo) + 32;
    char *as_enqueuer = malloc(len);
    snprintf(as_enqueuer, len, "%s user=itest_enqueuer", conninfo);
    struct qw_db *db = itest_connect(as_enqueuer);

    char id[129];
    uint8_t *p = NULL;
    size_t n = 0;
    sample(1, 1, id, &p, &n);
    char word[32];
    struct qw_error e;
    assert_int_equal(sql_enqueue(db, SVC_A, id, p, n, word, sizeof(word), &e), QW_OK);
    assert_string_equal(word, "enqueued");
    assert_int_equal(sql_enqueue(db, SVC_A, id, p, n, word, sizeof(word), &e), QW_OK);
    assert_string_equal(word, "duplicate");

    /* bulk through the array function, with per-row outcomes */
    char id2[129];
    uint8_t *p2 = NULL;
    size_t n2 = 0;
    sample(2, 1, id2, &p2, &n2);
    char *hex = malloc(2 * n2 + 3);
    hex[0] = '\\';
    hex[1] = 'x';
    qw_hex_encode(p2, n2, hex + 2);
    const char *params[] = {SVC_A, id2, hex, id};
    struct qw_db_res *res = NULL;
    assert_int_equal(sql_params(admin,
                                "SELECT line_no, outcome FROM queuer.enqueue_rows(ARRAY["
                                "ROW(1, $1, $2, $3::bytea)::queuer.enqueue_row, "
                                "ROW(2, $1, $4, NULL)::queuer.enqueue_row, "
                                "ROW(3, $1, $2, $3::bytea)::queuer.enqueue_row], true)",
                                4, params, &res, &e),
                     QW_OK);
    /* line 1 stored; line 2 has no payload; line 3 repeats line 1 */
    assert_int_equal(qw_db_res_rows(res), 2);
    assert_string_equal(qw_db_res_get(res, 0, 0), "2");
    assert_string_equal(qw_db_res_get(res, 0, 1), "invalid");
    assert_string_equal(qw_db_res_get(res, 1, 0), "3");
    assert_string_equal(qw_db_res_get(res, 1, 1), "duplicate");
    qw_db_res_free(res);
    /* the same with back pressure off (the path that lets the insert find
       repeats): an identical repeat is a duplicate, a re-signed one a conflict.
       Only the owner's session may set the marks (hostile_roles.c). */
    itest_exec(admin, "SET queuer.ingest_high = '0'");
    char id3[129];
    uint8_t *p3 = NULL;
    size_t n3 = 0;
    sample(3, 1, id3, &p3, &n3);
    uint8_t *p3b = NULL;
    size_t n3b = 0;
    assert_int_equal(qw_batchlist_sample(id3, 2, &p3b, &n3b), QW_OK);
    char *hex3 = malloc(2 * n3 + 3);
    char *hex3b = malloc(2 * n3b + 3);
    memcpy(hex3, "\\x", 2);
    memcpy(hex3b, "\\x", 2);
    qw_hex_encode(p3, n3, hex3 + 2);
    qw_hex_encode(p3b, n3b, hex3b + 2);
    const char *params3[] = {SVC_B, id3, hex3, hex3b};
    assert_int_equal(sql_params(admin,
                                "SELECT line_no, outcome FROM queuer.enqueue_rows(ARRAY["
                                "ROW(1, $1, $2, $3::bytea)::queuer.enqueue_row, "
                                "ROW(2, $1, $2, $3::bytea)::queuer.enqueue_row, "
                                "ROW(3, $1, $2, $4::bytea)::queuer.enqueue_row], true)",
                                4, params3, &res, &e),
                     QW_OK);
    assert_int_equal(qw_db_res_rows(res), 2);
    assert_string_equal(qw_db_res_get(res, 0, 0), "2");
    assert_string_equal(qw_db_res_get(res, 0, 1), "duplicate");
    assert_string_equal(qw_db_res_get(res, 1, 0), "3");
    assert_string_equal(qw_db_res_get(res, 1, 1), "conflict");
    qw_db_res_free(res);
    itest_exec(admin, "RESET queuer.ingest_high");
    free(hex3);
    free(hex3b);
    free(p3);
    free(p3b);

    /* without skip the same call raises for line 2 and stores nothing */
    const char *params2[] = {SVC_A, id};
    assert_int_equal(sql_params(db,
                                "SELECT * FROM queuer.enqueue_rows(ARRAY["
                                "ROW(5, $1, $2, NULL)::queuer.enqueue_row], false)",
                                2, params2, NULL, &e),
                     QW_ERR_INVALID);
    assert_string_equal(e.sqlstate, "QU400");
    assert_contains(e.msg, "line 5:");

    /* the role reaches the data only through the functions */
    assert_int_not_equal(sql_params(db, "SELECT count(*) FROM queuer.batches", 0, NULL, NULL, &e),
                         QW_OK);
    assert_string_equal(e.sqlstate, "42501");
    assert_int_not_equal(sql_params(db,
                                    "INSERT INTO queuer.service_ingest (service_id) VALUES ('x')",
                                    0, NULL, NULL, &e),
                         QW_OK);
    assert_string_equal(e.sqlstate, "42501");
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.batches"), 3);

    qw_db_close(db);
    qw_db_close(admin);
    free(hex);
    free(p);
    free(p2);
    free(as_enqueuer);
    free(conninfo);
}

/*
 * The database's plpgsql check (fast path and general walker) and the
 * client's protobuf-c check reach the same verdict on thousands of mutated
 * payloads, so neither side accepts what the other refuses.
 */
static void test_sql_check_agrees_with_client(void **state)
{
    char *conninfo = itest_db_create("enq_agree", 1);
    struct qw_db *db = itest_connect(conninfo);
    char id[129];
    qw_batchlist_sample_id(4242, id);
    struct qw_rng rng;
    qw_rng_seed(&rng, 77);
    int valid = 0;
    for (int i = 0; i < 3000; i++) {
        uint8_t *p = NULL;
        size_t n = 0;
        assert_int_equal(qw_batchlist_sample(id, (uint64_t)i, &p, &n), QW_OK);
        struct pb_buf b = {.n = 0};
        pb_raw(&b, p, n);
        free(p);
        if (i % 10 != 0)
            pb_mutate(&b, &rng);
        enum qw_batchlist_defect defect = QW_BATCHLIST_OK;
        struct qw_error e;
        int c_rc = qw_batchlist_check(b.d, b.n, id, 1 << 20, &defect, &e);
        char *hex = malloc(2 * b.n + 3);
        hex[0] = '\\';
        hex[1] = 'x';
        qw_hex_encode(b.d, b.n, hex + 2);
        const char *params[] = {hex, id};
        struct qw_db_res *res = NULL;
        if (sql_params(db,
                       "SELECT queuer.batchlist_defect($1::bytea, $2), "
                       "queuer.batchlist_defect_walk($1::bytea, $2)",
                       2, params, &res, &e) != QW_OK)
            fail_msg("iteration %d: %s", i, e.msg);
        int fast_ok = qw_db_res_isnull(res, 0, 0);
        int walk_ok = qw_db_res_isnull(res, 0, 1);
        if (fast_ok != (c_rc == QW_OK) || walk_ok != (c_rc == QW_OK))
            fail_msg("iteration %d: client says %s, database says '%s' / '%s'; payload %s", i,
                     qw_batchlist_defect_name(defect), qw_db_res_get(res, 0, 0),
                     qw_db_res_get(res, 0, 1), hex);
        valid += fast_ok;
        qw_db_res_free(res);
        free(hex);
    }
    assert_true(valid > 300); /* both verdicts were exercised */
    assert_true(valid < 2900);
    qw_db_close(db);
    free(conninfo);
}

/*
 * One edit of a UTF-8 string in place: a character (one from a small pool,
 * é among them) replaces one of the string's, goes in before one, or one of
 * the string's goes. Whole characters only, so the string stays UTF-8.
 */
static void mutate_id(char *id, size_t cap, struct qw_rng *rng)
{
    static const char *const pool[] = {"a", "Z", "7", "-", ":", "\xc3\xa9", "\n", " ", "_", "%"};
    size_t len = strlen(id);
    size_t at = qw_rng_below(rng, len + 1);
    while (at > 0 && at < len && ((unsigned char)id[at] & 0xc0) == 0x80)
        at--; /* the start of the character */
    size_t width = 0;
    if (at < len)
        for (width = 1; at + width < len && ((unsigned char)id[at + width] & 0xc0) == 0x80;)
            width++;
    const char *c = pool[qw_rng_below(rng, sizeof(pool) / sizeof(pool[0]))];
    size_t c_len = strlen(c);
    size_t op = qw_rng_below(rng, 3);
    if (op != 1) { /* replace or delete: the character at `at` goes */
        memmove(id + at, id + at + width, len - at - width + 1);
        len -= width;
    }
    if (op != 2 && len + c_len < cap) { /* replace or insert */
        memmove(id + at + c_len, id + at, len - at + 1);
        memcpy(id + at, c, c_len);
    }
}

/*
 * The service id domain (0018: LIKE plus a regular expression without
 * counted repeats) accepts exactly what 0001's expression accepted, and
 * what the client's check accepts, on thousands of mutated ids: moved or
 * doubled separators, other characters, non-ASCII, lengths off by one.
 */
static void test_service_id_domain_agrees(void **state)
{
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    char *conninfo = itest_db_create("enq_svc_domain", 1);
    struct qw_db *db = itest_connect(conninfo);
    itest_exec(db, "CREATE FUNCTION pg_temp.domain_ok(v text) RETURNS boolean LANGUAGE plpgsql "
                   "AS $$ BEGIN PERFORM v::queuer.service_id_text; RETURN true; "
                   "EXCEPTION WHEN check_violation THEN RETURN false; END $$");
    struct qw_rng rng;
    qw_rng_seed(&rng, 18);
    int valid = 0;
    for (int i = 0; i < 4000; i++) {
        char id[64] = "xxxxx-xxxxx::xxxx";
        for (size_t k = 0; k < 17; k++)
            if (id[k] == 'x')
                id[k] = alnum[qw_rng_below(&rng, sizeof(alnum) - 1)];
        for (int m = i % 4 == 0 ? 0 : 1 + (int)qw_rng_below(&rng, 3); m > 0; m--)
            mutate_id(id, sizeof(id), &rng);
        const char *params[] = {id};
        struct qw_db_res *res = NULL;
        struct qw_error e;
        if (sql_params(db,
                       "SELECT $1 ~ '^[A-Za-z0-9]{5}-[A-Za-z0-9]{5}::[A-Za-z0-9]{4}$', "
                       "pg_temp.domain_ok($1)",
                       1, params, &res, &e) != QW_OK)
            fail_msg("id '%s': %s", id, e.msg);
        int reference = strcmp(qw_db_res_get(res, 0, 0), "t") == 0;
        int domain = strcmp(qw_db_res_get(res, 0, 1), "t") == 0;
        int client = qw_validate_service_id(id, strlen(id), &e) == QW_OK;
        if (domain != reference || client != reference)
            fail_msg("id '%s': 0001's expression %d, the domain %d, the client %d", id, reference,
                     domain, client);
        valid += reference;
        qw_db_res_free(res);
    }
    assert_true(valid > 1000); /* both verdicts were exercised */
    assert_true(valid < 3000);
    qw_db_close(db);
    free(conninfo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_happy_path),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_bulk_order_and_rows),
        cmocka_unit_test(test_payload_stored_out_of_line),
        cmocka_unit_test(test_bulk_bad_lines),
        cmocka_unit_test(test_priorities),
        cmocka_unit_test(test_bulk_priorities),
        cmocka_unit_test(test_backpressure_hysteresis),
        cmocka_unit_test(test_concurrent_enqueuers),
        cmocka_unit_test(test_concurrent_sql_and_bulk),
        cmocka_unit_test(test_enqueuer_role_calls_sql),
        cmocka_unit_test(test_sql_check_agrees_with_client),
        cmocka_unit_test(test_service_id_domain_agrees),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
