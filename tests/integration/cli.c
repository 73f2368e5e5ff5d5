/*
 * Integration: the first hour of a user of the `queuer` CLI,
 * through the built binary against a real database.
 *
 *  - every --help names the exit codes, the environment and the common
 *    options; every error starts with "queuer <command>: ";
 *  - -c FILE works before and after the command, and twice is refused (64);
 *  - --database CONNINFO works on every command; with no connection string
 *    libpq's PG* defaults apply; a connection failure names where the
 *    string came from; a malformed string is a configuration error (78);
 *  - check-config with -c, QUEUER_CONFIG or the environment alone, with
 *    origins, --json, the variable blamed for its value, and a warning for
 *    a misspelt section;
 *  - migrate --status / --dry-run (change nothing) and --json;
 *  - enqueue before migrate says to migrate; permission errors name the
 *    role; --json of enqueue and prune; the summary's wording and plurals;
 *  - the back-pressure message counts the load's own earlier lines;
 *  - queuer.throughput counts a batch accepted and final at its first
 *    answer (Submitting -> Committed) as accepted.
 */
#include "itest.h"

#include "common/embedded.h"
#include "common/hex.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ARGS 24 /* arguments of one queuer run */

struct result {
    int rc;    /* exit code */
    char *out; /* stdout, malloc'd */
    char *err; /* stderr, malloc'd */
};

static void result_free(struct result *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof(*r));
}

/* Runs `queuer ARGS...` (NULL-terminated) with `env` (NULL-terminated, may be NULL). */
static struct result run(const char *const *env, const char *input, ...)
{
    const char *argv[MAX_ARGS + 2] = {itest_queuer_bin()};
    size_t n = 1;
    va_list ap;
    va_start(ap, input);
    for (const char *a; n <= MAX_ARGS && (a = va_arg(ap, const char *)) != NULL;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    struct result r = {0};
    r.rc = itest_run(argv, env, input, &r.out, &r.err);
    return r;
}

static void expect_in(const char *what, const char *text, const char *needle)
{
    if (!text || !strstr(text, needle))
        fail_msg("%s does not contain \"%s\":\n%s", what, needle, text ? text : "(null)");
}

/* Every non-empty stderr line starts with "queuer <command>: ". */
static void expect_prefix(const char *err, const char *command)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "queuer %s: ", command);
    for (const char *line = err; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len > 0 && strncmp(line, prefix, strlen(prefix)) != 0)
            fail_msg("stderr line without the prefix \"%s\": %.*s", prefix, (int)len, line);
        line = nl ? nl + 1 : line + len;
    }
}

static void expect_rc(const struct result *r, int want)
{
    if (r->rc != want)
        fail_msg("exit %d, want %d\nstdout: %s\nstderr: %s", r->rc, want, r->out, r->err);
}

/* The value of `key` in a keyword conninfo (the last one wins, as in libpq); malloc'd. */
static char *conninfo_value(const char *conninfo, const char *key)
{
    char want[32];
    snprintf(want, sizeof(want), "%s=", key);
    const char *found = NULL;
    for (const char *p = strstr(conninfo, want); p; p = strstr(p + 1, want)) {
        if (p == conninfo || p[-1] == ' ')
            found = p + strlen(want);
    }
    assert_non_null(found);
    return strndup(found, strcspn(found, " "));
}

static char *write_file(const char *text)
{
    return itest_temp_file("qwcli", text, strlen(text));
}

static char *gen_tsv(int services, int batches, const char *prefix)
{
    const char *gen = getenv("QUEUER_GEN_BIN");
    assert_non_null(gen);
    char s[16], b[16];
    snprintf(s, sizeof(s), "%d", services);
    snprintf(b, sizeof(b), "%d", batches);
    const char *argv[] = {gen, "--services", s, "--batches", b, "--circuit-prefix", prefix, NULL};
    char *tsv = NULL;
    assert_int_equal(itest_run(argv, NULL, NULL, &tsv, NULL), 0);
    return tsv;
}

static json_t *parse_json(const char *text)
{
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    if (!j)
        fail_msg("not JSON (%s): %s", jerr.text, text);
    return j;
}

static void test_help_everywhere(void **state)
{
    (void)state;
    static const char *const commands[] = {"migrate", "run",   "enqueue",     "status",
                                           "batch",   "prune", "check-config"};
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        struct result r = run(NULL, NULL, commands[i], "--help", NULL);
        expect_rc(&r, 0);
        expect_in(commands[i], r.out, "exit status:");
        expect_in(commands[i], r.out, "environment:");
        expect_in(commands[i], r.out, "QUEUER_DATABASE_CONNINFO");
        expect_in(commands[i], r.out, "--database CONNINFO");
        result_free(&r);
    }
    struct result r = run(NULL, NULL, "run", "--help", NULL);
    expect_in("run --help", r.out, "SIGHUP");
    expect_in("run --help", r.out, "SIGTERM");
    result_free(&r);
    r = run(NULL, NULL, "--help", NULL);
    expect_rc(&r, 0);
    expect_in("queuer --help", r.out, "exit status:");
    result_free(&r);
    r = run(NULL, NULL, "status", "--no-such-option", NULL);
    expect_rc(&r, 64);
    expect_in("stderr", r.err, "queuer status: unknown argument '--no-such-option'\nusage: ");
    result_free(&r);
}

static void test_common_options(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("cli_opts", 1);
    char cfg_text[1024];
    snprintf(cfg_text, sizeof(cfg_text), "database = { conninfo = \"%s\"; };\n", conninfo);
    char *cfg = write_file(cfg_text);

    struct result r = run(NULL, NULL, "-c", cfg, "status", "--json", NULL);
    expect_rc(&r, 0);
    result_free(&r);
    r = run(NULL, NULL, "status", "--json", "-c", cfg, NULL);
    expect_rc(&r, 0);
    result_free(&r);
    r = run(NULL, NULL, "--config", cfg, "status", "-c", cfg, NULL);
    expect_rc(&r, 64);
    expect_in("stderr", r.err, "given twice");
    expect_prefix(r.err, "status");
    result_free(&r);

    /* --database on every command, winning over a broken environment */
    const char *bad_env[] = {"QUEUER_DATABASE_CONNINFO=host=/nonexistent", NULL};
    r = run(bad_env, NULL, "--database", conninfo, "migrate", "--status", NULL);
    expect_rc(&r, 0);
    expect_in("migrate --status", r.out, "up to date");
    result_free(&r);
    r = run(bad_env, NULL, "status", "--database", conninfo, NULL);
    expect_rc(&r, 0);
    result_free(&r);
    char *tsv = gen_tsv(1, 2, "clopt");
    r = run(bad_env, tsv, "enqueue", "--tsv", "-", "--database", conninfo, NULL);
    expect_rc(&r, 0);
    result_free(&r);
    r = run(bad_env, NULL, "batch", "show", "0123456789abcdef", "--database", conninfo, NULL);
    expect_rc(&r, 65);
    expect_prefix(r.err, "batch show");
    expect_in("batch show", r.err, "no batch 0123456789abcdef");
    result_free(&r);
    r = run(bad_env, NULL, "prune", "--older-than", "1d", "--dry-run", "--database", conninfo,
            NULL);
    expect_rc(&r, 0);
    expect_in("prune --dry-run", r.out, "would remove 0 batches");
    result_free(&r);

    /* where a failing connection string came from */
    r = run(bad_env, NULL, "status", NULL);
    expect_rc(&r, 69);
    expect_prefix(r.err, "status");
    expect_in("stderr", r.err, "\"host=/nonexistent\" from QUEUER_DATABASE_CONNINFO");
    result_free(&r);
    r = run(NULL, NULL, "status", "-c", cfg, "--database", "host=/nonexistent", NULL);
    expect_rc(&r, 69);
    expect_in("stderr", r.err, "from --database");
    result_free(&r);

    /* a malformed connection string is bad configuration, not an unreachable database */
    r = run(NULL, NULL, "status", "--database", "host=x dbname", NULL);
    expect_rc(&r, 78);
    expect_prefix(r.err, "status");
    result_free(&r);
    const char *malformed[] = {"QUEUER_DATABASE_CONNINFO=host=x dbname", NULL};
    r = run(malformed, NULL, "migrate", NULL);
    expect_rc(&r, 78);
    expect_in("stderr", r.err, "QUEUER_DATABASE_CONNINFO");
    expect_prefix(r.err, "migrate");
    result_free(&r);
    free(tsv);
    unlink(cfg);
    free(cfg);
    free(conninfo);
}

/* No connection string anywhere: libpq's PG* variables decide, as for psql. */
static void test_pg_defaults(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("cli_pgenv", 1);
    char *host = conninfo_value(conninfo, "host");
    char *port = conninfo_value(conninfo, "port");
    char *user = conninfo_value(conninfo, "user");
    char *db = conninfo_value(conninfo, "dbname");
    char e_host[512], e_port[64], e_user[128], e_db[256];
    snprintf(e_host, sizeof(e_host), "PGHOST=%s", host);
    snprintf(e_port, sizeof(e_port), "PGPORT=%s", port);
    snprintf(e_user, sizeof(e_user), "PGUSER=%s", user);
    snprintf(e_db, sizeof(e_db), "PGDATABASE=%s", db);
    const char *env[] = {e_host, e_port, e_user, e_db, NULL};
    struct result r = run(env, NULL, "status", "--json", NULL);
    expect_rc(&r, 0);
    json_t *j = parse_json(r.out);
    assert_non_null(json_object_get(j, "batches"));
    json_decref(j);
    result_free(&r);

    const char *nowhere[] = {"PGHOST=/nonexistent", NULL};
    r = run(nowhere, NULL, "status", NULL);
    expect_rc(&r, 69);
    expect_in("stderr", r.err, "no connection string is set");
    expect_in("stderr", r.err, "PGHOST");
    result_free(&r);
    free(host);
    free(port);
    free(user);
    free(db);
    free(conninfo);
}

static void test_check_config(void **state)
{
    (void)state;
    char *cfg = write_file("worker = {\n  cycle_ms = 1000;\n};\nlog = { level = \"warn\"; };\n");

    /* environment alone (a container has no file) */
    const char *env_only[] = {"QUEUER_WORKER_LEASE_MS=60000", NULL};
    struct result r = run(env_only, NULL, "check-config", NULL);
    expect_rc(&r, 0);
    expect_in("stdout", r.out, "lease_ms = 60000;  # QUEUER_WORKER_LEASE_MS");
    expect_in("stderr", r.err, "no file: defaults and environment");
    result_free(&r);

    /* the file from -c, from QUEUER_CONFIG, and as an argument */
    char line[512];
    snprintf(line, sizeof(line), "level = \"warn\";  # %s:4", cfg);
    r = run(NULL, NULL, "check-config", "-c", cfg, NULL);
    expect_rc(&r, 0);
    expect_in("stdout", r.out, line);
    result_free(&r);
    char qc[512];
    snprintf(qc, sizeof(qc), "QUEUER_CONFIG=%s", cfg);
    const char *via_env[] = {qc, NULL};
    r = run(via_env, NULL, "check-config", NULL);
    expect_rc(&r, 0);
    expect_in("stdout", r.out, line);
    result_free(&r);
    r = run(NULL, NULL, "-c", cfg, "check-config", "--json", NULL);
    expect_rc(&r, 0);
    json_t *j = parse_json(r.out);
    assert_true(json_is_true(json_object_get(j, "valid")));
    assert_string_equal(json_string_value(json_object_get(j, "file")), cfg);
    size_t i;
    json_t *k;
    int seen = 0;
    json_array_foreach(json_object_get(j, "keys"), i, k)
    {
        const char *key = json_string_value(json_object_get(k, "key"));
        if (strcmp(key, "log.level") == 0) {
            assert_string_equal(json_string_value(json_object_get(k, "value")), "warn");
            snprintf(line, sizeof(line), "%s:4", cfg);
            assert_string_equal(json_string_value(json_object_get(k, "from")), line);
            assert_true(json_is_true(json_object_get(k, "reloadable")));
            seen++;
        } else if (strcmp(key, "worker.lease_ms") == 0) {
            assert_true(json_is_null(json_object_get(k, "from")));
            assert_false(json_is_true(json_object_get(k, "reloadable")));
            seen++;
        }
    }
    assert_int_equal(seen, 2);
    assert_true(json_is_false(json_object_get(json_object_get(j, "secrets"), "dlt.token")));
    json_decref(j);
    result_free(&r);

    /* the value from the environment is blamed on its variable */
    const char *short_lease[] = {"QUEUER_WORKER_LEASE_MS=500", NULL};
    r = run(short_lease, NULL, "check-config", cfg, NULL);
    expect_rc(&r, 78);
    snprintf(line, sizeof(line),
             "queuer check-config: QUEUER_WORKER_LEASE_MS: worker.cycle_ms = 1000 must be < "
             "worker.lease_ms = 500 (worker.cycle_ms from %s:2)",
             cfg);
    expect_in("stderr", r.err, line);
    result_free(&r);
    r = run(short_lease, NULL, "check-config", "--json", "-c", cfg, NULL);
    expect_rc(&r, 78);
    j = parse_json(r.out);
    assert_true(json_is_false(json_object_get(j, "valid")));
    expect_in("error", json_string_value(json_object_get(j, "error")), "QUEUER_WORKER_LEASE_MS");
    json_decref(j);
    result_free(&r);

    /* a misspelt section is warned about, and the load goes on */
    const char *typo[] = {"QUEUER_WROKER_LEASE_MS=60000", NULL};
    r = run(typo, NULL, "check-config", NULL);
    expect_rc(&r, 0);
    expect_in(
        "stderr", r.err,
        "queuer check-config: warning: QUEUER_WROKER_LEASE_MS names no configuration section");
    expect_in("stderr", r.err, "did you mean QUEUER_WORKER_LEASE_MS?");
    expect_in("stdout", r.out, "lease_ms = 30000;");
    result_free(&r);

    r = run(NULL, NULL, "check-config", "-c", "/nonexistent/q.cfg", NULL);
    expect_rc(&r, 78);
    expect_prefix(r.err, "check-config");
    result_free(&r);
    unlink(cfg);
    free(cfg);
}

static void test_migrate_modes(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("cli_migrate", 0);
    struct qw_db *db = itest_connect(conninfo);

    struct result r = run(NULL, NULL, "migrate", "--status", "--database", conninfo, NULL);
    expect_rc(&r, 0);
    expect_in("--status", r.out, "0001_schema");
    expect_in("--status", r.out, "pending");
    result_free(&r);
    r = run(NULL, NULL, "migrate", "--dry-run", "--database", conninfo, NULL);
    expect_rc(&r, 0);
    expect_in("--dry-run", r.out, "-- ==== migration 0001_schema");
    expect_in("--dry-run", r.out, "CREATE TABLE queuer.batches");
    result_free(&r);
    /* neither changed anything */
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM pg_namespace WHERE nspname = 'queuer'"),
                     0);

    /* enqueue before migrate says what to do */
    char *tsv = gen_tsv(1, 1, "clmig");
    r = run(NULL, tsv, "enqueue", "--tsv", "-", "--database", conninfo, NULL);
    expect_rc(&r, 1);
    expect_in("stderr", r.err, "run 'queuer migrate' first");
    expect_prefix(r.err, "enqueue");
    result_free(&r);

    r = run(NULL, NULL, "migrate", "--json", "--database", conninfo, NULL);
    expect_rc(&r, 0);
    json_t *j = parse_json(r.out);
    int latest = (int)json_integer_value(json_object_get(j, "binary_version"));
    assert_true(latest >= 4);
    assert_int_equal(json_integer_value(json_object_get(j, "schema_version")), latest);
    json_t *list = json_object_get(j, "migrations");
    size_t embedded = 0; /* numbers may have gaps (reserved ones not merged yet) */
    while (qw_migrations[embedded].name)
        embedded++;
    assert_int_equal(json_array_size(list), embedded);
    size_t i;
    json_t *m;
    json_array_foreach(list, i, m)
    {
        assert_true(json_is_true(json_object_get(m, "applied_now")));
        assert_true(json_is_string(json_object_get(m, "applied_at")));
    }
    json_decref(j);
    result_free(&r);
    r = run(NULL, NULL, "migrate", "--json", "--database", conninfo, NULL);
    expect_rc(&r, 0);
    j = parse_json(r.out);
    json_array_foreach(json_object_get(j, "migrations"), i, m)
        assert_true(json_is_false(json_object_get(m, "applied_now")));
    json_decref(j);
    result_free(&r);
    r = run(NULL, NULL, "migrate", "--status", "--database", conninfo, NULL);
    expect_rc(&r, 0);
    expect_in("--status", r.out, "up to date");
    result_free(&r);
    r = run(NULL, NULL, "migrate", "--status", "--dry-run", NULL);
    expect_rc(&r, 64);
    result_free(&r);
    free(tsv);
    qw_db_close(db);
    free(conninfo);
}

static void test_enqueue_and_prune_output(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("cli_enq", 1);
    struct qw_db *db = itest_connect(conninfo);
    char conn[1024];
    snprintf(conn, sizeof(conn), "QUEUER_DATABASE_CONNINFO=%s", conninfo);
    const char *env[] = {conn, "QUEUER_INGEST_HIGH=0", NULL};
    char *tsv = gen_tsv(2, 2, "clenq");

    struct result r = run(env, tsv, "enqueue", "--tsv", "-", "--json", NULL);
    expect_rc(&r, 0);
    json_t *j = parse_json(r.out);
    assert_true(json_is_true(json_object_get(j, "committed")));
    assert_int_equal(json_integer_value(json_object_get(j, "batch_lines")), 4);
    assert_int_equal(json_integer_value(json_object_get(j, "enqueued")), 4);
    assert_int_equal(json_integer_value(json_object_get(j, "duplicates")), 0);
    assert_int_equal(json_array_size(json_object_get(j, "issues")), 0);
    json_decref(j);
    result_free(&r);

    /* again, plus one bad line: plurals and wording of the summary */
    size_t len = strlen(tsv);
    char *again = malloc(len + 64);
    snprintf(again, len + 64, "%sbad line\n", tsv);
    r = run(env, again, "enqueue", "--tsv", "-", "--skip-invalid", NULL);
    expect_rc(&r, 0);
    expect_in("stdout", r.out,
              "0 of 5 batch lines enqueued; 4 duplicates (already stored, no-op); 1 skipped "
              "(1 invalid, 0 conflicting, 0 refused by back pressure)");
    expect_in("stderr", r.err, "queuer enqueue: line 5: invalid:");
    expect_prefix(r.err, "enqueue");
    result_free(&r);
    r = run(env, again, "enqueue", "--tsv", "-", "--json", NULL);
    expect_rc(&r, 65);
    j = parse_json(r.out);
    assert_true(json_is_false(json_object_get(j, "committed")));
    assert_int_equal(json_integer_value(json_object_get(j, "invalid")), 1);
    /* the bad line dooms the load: the others are not sent, so it is the only issue */
    assert_int_equal(json_array_size(json_object_get(j, "issues")), 1);
    json_t *issue = json_array_get(json_object_get(j, "issues"), 0);
    assert_non_null(issue);
    assert_int_equal(json_integer_value(json_object_get(issue, "line")), 5);
    assert_string_equal(json_string_value(json_object_get(issue, "outcome")), "invalid");
    json_decref(j);
    result_free(&r);
    free(again);

    /* one duplicate reads as one */
    char *first = strndup(tsv, strcspn(tsv, "\n") + 1);
    r = run(env, first, "enqueue", "--tsv", "-", NULL);
    expect_rc(&r, 0);
    expect_in("stdout", r.out, "0 of 1 batch line enqueued; 1 duplicate (already stored");
    result_free(&r);
    free(first);

    /* prune --json, dry run and real */
    itest_exec(db, "UPDATE queuer.batches SET status = 'Committed', submitted = true, "
                   "status_at = now() - interval '2 days'");
    r = run(env, NULL, "prune", "--older-than", "1d", "--dry-run", "--json", NULL);
    expect_rc(&r, 0);
    j = parse_json(r.out);
    assert_true(json_is_true(json_object_get(j, "dry_run")));
    assert_int_equal(json_integer_value(json_object_get(j, "batches")), 4);
    assert_int_equal(json_integer_value(json_object_get(j, "committed")), 4);
    assert_string_equal(json_string_value(json_object_get(j, "older_than")), "1d");
    json_decref(j);
    result_free(&r);
    /* the load's two lines of the enqueue log (one per service), one backdated with the
     * batches; a line younger than the cutoff stays */
    itest_exec(db, "UPDATE queuer.enqueue_log SET at = now() - interval '2 days' "
                   "WHERE service_id = (SELECT min(service_id) FROM queuer.enqueue_log)");
    r = run(env, NULL, "prune", "--older-than", "1d", "--json", NULL);
    expect_rc(&r, 0);
    j = parse_json(r.out);
    assert_true(json_is_false(json_object_get(j, "dry_run")));
    assert_int_equal(json_integer_value(json_object_get(j, "batches")), 4);
    /* the statuses were set by hand: the batches had no stored history */
    assert_int_equal(json_integer_value(json_object_get(j, "history_rows")), 0);
    assert_int_equal(json_integer_value(json_object_get(j, "enqueue_log_rows")), 1);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.enqueue_log"), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "transactions")), 1);
    json_decref(j);
    result_free(&r);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batches"), 0);

    /* one batch: --json */
    free(tsv);
    tsv = gen_tsv(1, 1, "clone");
    char service[64], id[129], *hex = NULL;
    assert_int_equal(sscanf(tsv, "%63[^\t]\t%128[^\t]\t", service, id), 2);
    hex = strrchr(tsv, '\t') + 1;
    hex[strcspn(hex, "\n")] = '\0';
    size_t nbytes = strlen(hex) / 2;
    uint8_t *payload = malloc(nbytes);
    assert_int_equal(qw_hex_decode(hex, strlen(hex), payload, nbytes), (long)nbytes);
    char *path = itest_temp_file("qwcli-payload", payload, nbytes);
    r = run(env, NULL, "enqueue", "--service", service, "--batch-id", id, "--payload-file", path,
            "--json", NULL);
    expect_rc(&r, 0);
    j = parse_json(r.out);
    assert_string_equal(json_string_value(json_object_get(j, "outcome")), "enqueued");
    assert_string_equal(json_string_value(json_object_get(j, "batch_id")), id);
    json_decref(j);
    result_free(&r);
    unlink(path);
    free(path);
    free(payload);
    free(tsv);
    qw_db_close(db);
    free(conninfo);
}

/* Permission errors name the role the command needs. */
static void test_permission_names_role(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("cli_perm", 1);
    struct qw_db *db = itest_connect(conninfo);
    itest_exec(db, "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
                   "'cli_nobody') THEN CREATE ROLE cli_nobody LOGIN; END IF; END $$");
    char as_nobody[1024];
    snprintf(as_nobody, sizeof(as_nobody), "%s user=cli_nobody", conninfo);
    struct result r = run(NULL, NULL, "status", "--database", as_nobody, NULL);
    expect_rc(&r, 1);
    expect_in("status", r.err, "permission denied");
    expect_in("status", r.err, "this needs a role granted queuer_operator");
    expect_prefix(r.err, "status");
    result_free(&r);
    char *tsv = gen_tsv(1, 1, "clprm");
    r = run(NULL, tsv, "enqueue", "--tsv", "-", "--database", as_nobody, NULL);
    expect_rc(&r, 1);
    expect_in("enqueue", r.err, "this needs a role granted queuer_enqueuer or queuer_worker");
    result_free(&r);
    r = run(NULL, NULL, "prune", "--older-than", "1d", "--database", as_nobody, NULL);
    expect_rc(&r, 1);
    expect_in("prune", r.err, "this needs the schema owner");
    result_free(&r);
    free(tsv);
    qw_db_close(db);
    free(conninfo);
}

/* A refusal at line 38 of a 40-line load counts the load's own earlier lines. */
static void test_backpressure_counts_the_load(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("cli_bp", 1);
    char conn[1024];
    snprintf(conn, sizeof(conn), "QUEUER_DATABASE_CONNINFO=%s", conninfo);
    const char *env[] = {conn, NULL};
    char *tsv = gen_tsv(1, 40, "clbpr");
    struct result r = run(env, tsv, "enqueue", "--tsv", "-", "--skip-invalid", NULL);
    expect_rc(&r, 75);
    expect_in("stderr", r.err, "line 38: back pressure: service clbpr-");
    expect_in("stderr", r.err,
              "and 30 earlier lines of this load for the service were stored and count toward "
              "the mark");
    expect_in("stdout", r.out, "30 of 40 batch lines enqueued");
    expect_in("stderr", r.err, "queuer enqueue: 10 lines refused by back pressure");
    expect_prefix(r.err, "enqueue");
    result_free(&r);
    free(tsv);
    free(conninfo);
}

/* queuer.throughput: accepted counts batches final at their first answer too. */
static void test_throughput_accepted(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("cli_tp", 1);
    struct qw_db *db = itest_connect(conninfo);
    itest_exec(db,
               "INSERT INTO queuer.batch_history (batch_id, service_id, from_status, to_status) "
               "VALUES ('a', 's', NULL, 'Submitting'), ('a', 's', 'Submitting', 'Committed'), "
               "('b', 's', NULL, 'Submitting'), ('b', 's', 'Submitting', 'Pending'), "
               "('b', 's', 'Pending', 'Committed'), ('c', 's', NULL, 'Submitting'), "
               "('c', 's', 'Submitting', 'Invalid')");
    assert_int_equal(itest_scalar(db, "SELECT sum(accepted) FROM queuer.throughput"), 2);
    assert_int_equal(itest_scalar(db, "SELECT sum(committed) FROM queuer.throughput"), 2);
    assert_int_equal(itest_scalar(db, "SELECT sum(submissions) FROM queuer.throughput"), 3);
    qw_db_close(db);
    free(conninfo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_everywhere),
        cmocka_unit_test(test_common_options),
        cmocka_unit_test(test_pg_defaults),
        cmocka_unit_test(test_check_config),
        cmocka_unit_test(test_migrate_modes),
        cmocka_unit_test(test_enqueue_and_prune_output),
        cmocka_unit_test(test_permission_names_role),
        cmocka_unit_test(test_backpressure_counts_the_load),
        cmocka_unit_test(test_throughput_accepted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
