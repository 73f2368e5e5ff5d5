/* Unit tests of src/config: defaults, the file, QUEUER_* overrides, rules, secrets, docs. */
#include "config/config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef QW_SOURCE_ROOT
#error "QW_SOURCE_ROOT must be defined by the build"
#endif

/* ---- helpers ---- */

/* Writes `text` to a fresh temporary file with `mode`; returns its malloc'd path. */
static char *write_temp(const char *text, mode_t mode)
{
    const char *dir = getenv("TMPDIR");
    char tmpl[512];
    snprintf(tmpl, sizeof(tmpl), "%s/qwcfg.XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(tmpl);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    assert_int_equal(fchmod(fd, mode), 0);
    assert_int_equal(close(fd), 0);
    char *path = strdup(tmpl);
    assert_non_null(path);
    return path;
}

static void remove_temp(char *path)
{
    unlink(path);
    free(path);
}

/* Reads a whole file (malloc'd, NUL-terminated). */
static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    assert_non_null(mem);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        fwrite(chunk, 1, n, mem);
    fclose(f);
    fclose(mem);
    return buf;
}

static char *print_to_string(const struct qw_config *cfg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    assert_non_null(mem);
    qw_config_print(cfg, mem);
    fclose(mem);
    return buf;
}

static char *reference_to_string(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    assert_non_null(mem);
    qw_config_print_reference(mem);
    fclose(mem);
    return buf;
}

/* After a failed load nothing may be left in the struct. */
static void assert_config_empty(const struct qw_config *cfg)
{
    static const struct qw_config zero;
    assert_memory_equal(cfg, &zero, sizeof(zero));
}

/* Environment arrays are char *const[] like environ; the tests fill them from literals. */
#define E(s) ((char *)(uintptr_t)(s))

static char *const no_env[] = {NULL};

/* ---- defaults ---- */

static void test_defaults(void **state)
{
    (void)state;
    struct qw_config cfg;
    assert_int_equal(qw_config_defaults(&cfg), QW_OK);
    assert_string_equal(cfg.db_conninfo, "");
    assert_string_equal(cfg.db_password_file, "");
    assert_int_equal(cfg.db_connect_timeout_s, 5);
    assert_int_equal(cfg.db_query_timeout_ms, 10000);
    assert_string_equal(cfg.worker_instance_id, "");
    assert_int_equal(cfg.worker_cycle_ms, 1000);
    assert_int_equal(cfg.worker_lease_ms, 30000);
    assert_int_equal(cfg.worker_hard_expiry_ms, 180000);
    assert_int_equal(cfg.worker_claim_slack, 4);
    assert_int_equal(cfg.worker_max_claims, 0);
    assert_int_equal(cfg.worker_listen, 1);
    assert_int_equal(cfg.worker_queue_capacity, 4096);
    assert_int_equal(cfg.worker_shutdown_grace_ms, 5000);
    assert_int_equal(cfg.worker_txn_max_attempts, 20);
    assert_int_equal(cfg.worker_txn_max_ms, 10000);
    assert_int_equal(cfg.worker_txn_backoff_base_ms, 2);
    assert_int_equal(cfg.worker_txn_backoff_max_ms, 200);
    assert_string_equal(cfg.dlt_url, "http://127.0.0.1:8008");
    assert_string_equal(cfg.dlt_token_file, "");
    assert_string_equal(cfg.dlt_ca_file, "");
    assert_int_equal(cfg.dlt_connect_timeout_ms, 3000);
    assert_int_equal(cfg.dlt_request_timeout_ms, 10000);
    assert_int_equal(cfg.dlt_max_in_flight, 256);
    assert_int_equal(cfg.dlt_max_response_bytes, 1048576);
    assert_int_equal(cfg.dlt_status_wait_s, 10);
    assert_int_equal(cfg.dlt_unknown_confirm_ms, 2000);
    assert_int_equal(cfg.dlt_max_attempts, 0);
    assert_int_equal(cfg.dlt_retry_base_ms, 250);
    assert_int_equal(cfg.dlt_retry_max_ms, 30000);
    assert_int_equal(cfg.dlt_pause_base_ms, 100);
    assert_int_equal(cfg.dlt_pause_max_ms, 10000);
    /* -1: the marks come from the database's queuer.settings row */
    assert_int_equal(cfg.ingest_high, -1);
    assert_int_equal(cfg.ingest_low, -1);
    assert_int_equal(cfg.ingest_max_payload_bytes, 1048576);
    assert_string_equal(cfg.admin_listen, "127.0.0.1:9187");
    assert_string_equal(cfg.log_level, "info");
    assert_null(cfg.db_password);
    assert_null(cfg.dlt_token);
    qw_config_free(&cfg);
    assert_config_empty(&cfg);
}

/* No file and no variables: the same as the defaults. */
static void test_load_without_file_is_defaults(void **state)
{
    (void)state;
    struct qw_config def, cfg;
    struct qw_error err;
    assert_int_equal(qw_config_defaults(&def), QW_OK);
    assert_int_equal(qw_config_load(&cfg, NULL, no_env, &err), QW_OK);
    char *a = print_to_string(&def);
    char *b = print_to_string(&cfg);
    assert_string_equal(a, b);
    free(a);
    free(b);
    qw_config_free(&def);
    qw_config_free(&cfg);
}

/* ---- the file ---- */

static void test_full_file(void **state)
{
    (void)state;
    char *path = write_temp("# every section\n"
                            "database = {\n"
                            "  conninfo = \"host=db.example port=6432 dbname=q\";\n"
                            "  connect_timeout_s = 7;\n"
                            "  query_timeout_ms = 2500;\n"
                            "};\n"
                            "worker = {\n"
                            "  instance_id = \"w-1.a:b_c\";\n"
                            "  cycle_ms = 500;\n"
                            "  lease_ms = 20000;\n"
                            "  hard_expiry_ms = 60000;\n"
                            "  claim_slack = 0;\n"
                            "  max_claims = 50;\n"
                            "  listen = false;\n"
                            "  txn_backoff_base_ms = 5;\n"
                            "  txn_backoff_max_ms = 5;\n"
                            "};\n"
                            "dlt = {\n"
                            "  url = \"https://ledger.example:8443/\";\n"
                            "  ca_file = \"/etc/ssl/ca.pem\";\n"
                            "  max_in_flight = 0x10;\n"
                            "  retry_base_ms = 1000;\n"
                            "  retry_max_ms = 1000;\n"
                            "};\n"
                            "ingest = { high = 0; low = 500; max_payload_bytes = 4096; };\n"
                            "admin = { listen = \"[::1]:9000\"; };\n"
                            "log = { level = \"debug\"; };\n",
                            0600);
    struct qw_config cfg;
    struct qw_error err;
    int rc = qw_config_load(&cfg, path, no_env, &err);
    if (rc != QW_OK)
        fail_msg("load failed: %s", err.msg);
    assert_string_equal(cfg.db_conninfo, "host=db.example port=6432 dbname=q");
    assert_int_equal(cfg.db_connect_timeout_s, 7);
    assert_int_equal(cfg.db_query_timeout_ms, 2500);
    assert_string_equal(cfg.worker_instance_id, "w-1.a:b_c");
    assert_int_equal(cfg.worker_cycle_ms, 500);
    assert_int_equal(cfg.worker_lease_ms, 20000);
    assert_int_equal(cfg.worker_hard_expiry_ms, 60000);
    assert_int_equal(cfg.worker_claim_slack, 0);
    assert_int_equal(cfg.worker_max_claims, 50);
    assert_int_equal(cfg.worker_listen, 0);
    assert_int_equal(cfg.worker_txn_backoff_base_ms, 5);
    assert_int_equal(cfg.worker_txn_backoff_max_ms, 5);
    assert_string_equal(cfg.dlt_url, "https://ledger.example:8443/");
    assert_string_equal(cfg.dlt_ca_file, "/etc/ssl/ca.pem");
    assert_int_equal(cfg.dlt_max_in_flight, 16);
    assert_int_equal(cfg.dlt_retry_base_ms, 1000);
    assert_int_equal(cfg.dlt_retry_max_ms, 1000);
    assert_int_equal(cfg.ingest_high, 0);
    assert_int_equal(cfg.ingest_low, 500);
    assert_int_equal(cfg.ingest_max_payload_bytes, 4096);
    assert_string_equal(cfg.admin_listen, "[::1]:9000");
    assert_string_equal(cfg.log_level, "debug");
    /* keys the file does not name keep their defaults */
    assert_int_equal(cfg.worker_queue_capacity, 4096);
    assert_int_equal(cfg.dlt_pause_max_ms, 10000);
    qw_config_free(&cfg);
    remove_temp(path);
}

struct file_error_case {
    const char *text;     /* file contents */
    const char *expected; /* err.msg after "PATH" ("" = only check the PATH:LINE: prefix) */
    const char *line;     /* with expected == "", the ":LINE: " that must follow PATH */
};

static const struct file_error_case file_errors[] = {
    {"worker = {\n  leese_ms = 100;\n};\n", ":2: unknown key worker.leese_ms", NULL},
    {"wrker = { lease_ms = 100; };\n", ":1: unknown section wrker", NULL},
    {"\nlease_ms = 100;\n", ":2: unknown key lease_ms", NULL},
    {"worker = 5;\n", ":1: worker must be a group: worker = { key = value; ... };", NULL},
    {"worker = {\n  lease_ms = { a = 1; };\n};\n", ":2: worker.lease_ms must be an integer", NULL},
    {"worker = {\n  lease_ms = \"30000\";\n};\n", ":2: worker.lease_ms must be an integer", NULL},
    {"worker = {\n  lease_ms = 1.5;\n};\n", ":2: worker.lease_ms must be an integer", NULL},
    {"worker = { listen = 1; };\n", ":1: worker.listen must be a boolean (true or false)", NULL},
    {"log = { level = 3; };\n", ":1: log.level must be a string (in double quotes)", NULL},
    {"worker = {\n\n  lease_ms = 5;\n};\n", ":3: worker.lease_ms = 5 is out of range 100..3600000",
     NULL},
    {"worker = { lease_ms = -1; };\n", ":1: worker.lease_ms = -1 is out of range 100..3600000",
     NULL},
    {"worker = { lease_ms = 99999999999L; };\n",
     ":1: worker.lease_ms = 99999999999 is out of range 100..3600000", NULL},
    {"database = { connect_timeout_s = 301; };\n",
     ":1: database.connect_timeout_s = 301 is out of range 1..300", NULL},
    {"log = { level = \"verbose\"; };\n",
     ":1: log.level = \"verbose\" must be one of debug, info, warn, error", NULL},
    {"admin = { listen = \"localhost\"; };\n",
     ":1: admin.listen = \"localhost\" must be \"off\" or host:port with port 1..65535", NULL},
    {"admin = { listen = \"127.0.0.1:0\"; };\n",
     ":1: admin.listen = \"127.0.0.1:0\" must be \"off\" or host:port with port 1..65535", NULL},
    {"admin = { listen = \"127.0.0.1:65536\"; };\n",
     ":1: admin.listen = \"127.0.0.1:65536\" must be \"off\" or host:port with port 1..65535",
     NULL},
    {"admin = { listen = \":9187\"; };\n",
     ":1: admin.listen = \":9187\" must be \"off\" or host:port with port 1..65535", NULL},
    {"admin = { listen = \"::1:9187\"; };\n",
     ":1: admin.listen = \"::1:9187\" must be \"off\" or host:port with port 1..65535", NULL},
    {"admin = { listen = \"OFF\"; };\n",
     ":1: admin.listen = \"OFF\" must be \"off\" or host:port with port 1..65535", NULL},
    {"dlt = { url = \"ftp://ledger\"; };\n",
     ":1: dlt.url = \"ftp://ledger\" must start with http:// or https://", NULL},
    {"dlt = { url = \"http://\"; };\n",
     ":1: dlt.url = \"http://\" must name a host after the scheme", NULL},
    {"dlt = { url = \"https://user:hunter2@ledger\"; };\n",
     ":1: dlt.url must not contain credentials; use QUEUER_DLT_TOKEN or dlt.token_file", NULL},
    {"database = { conninfo = \"host=db password=hunter2\"; };\n",
     ":1: database.conninfo must not contain a password; use QUEUER_DATABASE_PASSWORD or "
     "database.password_file",
     NULL},
    {"database = { conninfo = \"postgresql://q:hunter2@db/q\"; };\n",
     ":1: database.conninfo must not contain a password; use QUEUER_DATABASE_PASSWORD or "
     "database.password_file",
     NULL},
    /* libconfig 1.5 wraps integer literals to 32 bits: 4294997296 would load as 30000 */
    {"worker = {\n  lease_ms = 4294997296;\n};\n",
     ":2: worker.lease_ms = 4294997296 is out of range 100..3600000", NULL},
    {"ingest = { high = 0xFFFFFFFF; };\n",
     ":1: ingest.high = 0xFFFFFFFF is out of range -1..1000000", NULL},
    {"worker = { cycle_ms = -4294966296; };\n",
     ":1: worker.cycle_ms = -4294966296 is out of range 10..600000", NULL},
    {"# 4294997296 in a comment is fine\nworker = { instance_id = \"x\"; };\n"
     "dlt = {\n url = \"http://h\";\n max_attempts = 99999999999999999999999;\n};\n",
     ":5: dlt.max_attempts = 99999999999999999999999 is out of range 0..1000000", NULL},
    /* the URL rules are the ledger client's own: what run refuses, check-config refuses */
    {"dlt = { url = \"http://h/a?b#c\"; };\n",
     ":1: dlt.url = \"http://h/a?b#c\" must not contain ? or #", NULL},
    {"dlt = { url = \"http://h:99999\"; };\n",
     ":1: dlt.url = \"http://h:99999\" must have a port 1..65535 after the host", NULL},
    {"dlt = { url = \"http://h:\"; };\n",
     ":1: dlt.url = \"http://h:\" must have a port 1..65535 after the host", NULL},
    {"dlt = { url = \"http://[::1/x\"; };\n",
     ":1: dlt.url = \"http://[::1/x\" must have a closing ] after an IPv6 address", NULL},
    /* several nodes: each URL by the same rule, no empty entry, no URL twice */
    {"dlt = { url = \"http://a:1,http://b:99999\"; };\n",
     ":1: dlt.url = \"http://a:1,http://b:99999\" must have a port 1..65535 after the host", NULL},
    {"dlt = { url = \"http://a:1,,http://b:2\"; };\n",
     ":1: dlt.url = \"http://a:1,,http://b:2\" must not have an empty entry between commas", NULL},
    {"dlt = { url = \"http://a:1,http://a:1/\"; };\n",
     ":1: dlt.url = \"http://a:1,http://a:1/\" must not list the same node URL twice", NULL},
    {"dlt = { channels = 0; };\n", ":1: dlt.channels = 0 is out of range 1..10000", NULL},
    /* libpq parses the conninfo: every spelling of a password is refused, and never echoed */
    {"database = { conninfo = \"postgresql:///queuer?pass%77ord=hunter2\"; };\n",
     ":1: database.conninfo must not contain a password; use QUEUER_DATABASE_PASSWORD or "
     "database.password_file",
     NULL},
    {"database = { conninfo = \"host=db password\\n=hunter2\"; };\n",
     ":1: database.conninfo must not contain a password; use QUEUER_DATABASE_PASSWORD or "
     "database.password_file",
     NULL},
    {"database = { conninfo = \"host=db\\fpassword\\x0b=\\rhunter2\"; };\n",
     ":1: database.conninfo must not contain a password; use QUEUER_DATABASE_PASSWORD or "
     "database.password_file",
     NULL},
    {"database = { conninfo = \"host=db sslpassword=hunter2\"; };\n",
     ":1: database.conninfo must not contain a password; use QUEUER_DATABASE_PASSWORD or "
     "database.password_file",
     NULL},
    {"database = { conninfo = \"postgresql://%71:hunter2@db/q\"; };\n",
     ":1: database.conninfo must not contain a password; use QUEUER_DATABASE_PASSWORD or "
     "database.password_file",
     NULL},
    {"database = { conninfo = \"host=db pasword=hunter2\"; };\n",
     ":1: database.conninfo is not a valid libpq connection string (key=value pairs or a "
     "postgresql:// URI)",
     NULL},
    {"database = { conninfo = \"host=db password = 'hunter2\"; };\n",
     ":1: database.conninfo is not a valid libpq connection string (key=value pairs or a "
     "postgresql:// URI)",
     NULL},
    {"worker = { instance_id = \"has space\"; };\n",
     ":1: worker.instance_id = \"has space\" may only contain A-Z a-z 0-9 . _ : -", NULL},
    {"worker = { instance_id = \"a\\nb\"; };\n",
     ":1: worker.instance_id = \"a\\nb\" may only contain A-Z a-z 0-9 . _ : -", NULL},
    /* cross-key rules name the line of the key that breaks them */
    {"ingest = {\n  high = 10;\n  low = 10;\n};\n",
     ":3: ingest.low = 10 must be < ingest.high = 10 (or set it to 0)", NULL},
    {"ingest = {\n  low = 20;\n  high = 10;\n};\n",
     ":2: ingest.low = 20 must be < ingest.high = 10 (or set it to 0)", NULL},
    {"ingest = {\n  low = -2;\n};\n", ":2: ingest.low = -2 is out of range -1..1000000", NULL},
    {"worker = {\n  hard_expiry_ms = 1000;\n};\n",
     ":2: worker.hard_expiry_ms = 1000 must be >= worker.lease_ms = 30000", NULL},
    {"worker = {\n  cycle_ms = 30000;\n};\n",
     ":2: worker.cycle_ms = 30000 must be < worker.lease_ms = 30000", NULL},
    {"worker = { txn_backoff_max_ms = 1; };\n",
     ":1: worker.txn_backoff_max_ms = 1 must be >= worker.txn_backoff_base_ms = 2", NULL},
    {"dlt = { retry_base_ms = 40000; };\n",
     ":1: dlt.retry_max_ms = 30000 must be >= dlt.retry_base_ms = 40000", NULL},
    {"dlt = { pause_max_ms = 99; };\n",
     ":1: dlt.pause_max_ms = 99 must be >= dlt.pause_base_ms = 100", NULL},
    /* a POST must end before a claim past its soft expiry can be taken */
    {"worker = {\n  lease_ms = 3000;\n  hard_expiry_ms = 9000;\n};\ndlt = {\n"
     "  request_timeout_ms = 6000;\n};\n",
     ":6: dlt.request_timeout_ms = 6000 must be < worker.hard_expiry_ms - worker.lease_ms = "
     "6000 (a POST must end before its claim can be taken over)",
     NULL},
    /* libconfig's own parse errors keep its message after FILE:LINE: */
    {"worker = {\n  lease_ms = ;\n};\n", "", ":2: "},
    {"worker = { lease_ms = 100 }\n", "", ":1: "},
    {"worker = {\n  lease_ms = 100;\n  lease_ms = 200;\n};\n", "", ":3: "},
};

static void test_file_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(file_errors) / sizeof(file_errors[0]); i++) {
        const struct file_error_case *c = &file_errors[i];
        char *path = write_temp(c->text, 0600);
        struct qw_config cfg;
        struct qw_error err;
        qw_error_clear(&err);
        int rc = qw_config_load(&cfg, path, no_env, &err);
        if (rc != QW_ERR_CONFIG)
            fail_msg("case %zu (%s): rc %d, want QW_ERR_CONFIG", i, c->text, rc);
        assert_int_equal(err.rc, QW_ERR_CONFIG);
        assert_config_empty(&cfg);
        char want[1024];
        if (c->expected[0]) {
            snprintf(want, sizeof(want), "%s%s", path, c->expected);
            if (strcmp(err.msg, want) != 0)
                fail_msg("case %zu:\n got: %s\nwant: %s", i, err.msg, want);
        } else {
            snprintf(want, sizeof(want), "%s%s", path, c->line);
            if (strncmp(err.msg, want, strlen(want)) != 0 || strlen(err.msg) <= strlen(want))
                fail_msg("case %zu:\n got: %s\nwant: %s<libconfig message>", i, err.msg, want);
        }
        assert_null(strstr(err.msg, "hunter2"));
        remove_temp(path);
    }
}

static void test_missing_file(void **state)
{
    (void)state;
    struct qw_config cfg;
    struct qw_error err;
    assert_int_equal(qw_config_load(&cfg, "/nonexistent/queuer.cfg", no_env, &err), QW_ERR_CONFIG);
    assert_int_equal(err.rc, QW_ERR_CONFIG);
    assert_string_equal(err.msg, "/nonexistent/queuer.cfg: cannot open configuration file: "
                                 "No such file or directory");
    assert_config_empty(&cfg);

    const char *dir = getenv("TMPDIR");
    assert_int_equal(qw_config_load(&cfg, dir && *dir ? dir : "/tmp", no_env, &err), QW_ERR_CONFIG);
    assert_non_null(strstr(err.msg, "not a regular file"));
    assert_config_empty(&cfg);
}

/* Removes the "  # origin" note after each "key = value;" line, in place. */
static void strip_origin_notes(char *text)
{
    char *out = text;
    for (char *line = text; *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
        char *note = strstr(line, ";  # ");
        size_t keep = note && note < line + len ? (size_t)(note - line) + 1 : len;
        memmove(out, line, keep);
        out += keep;
        if (keep < len && nl)
            *out++ = '\n';
        line += len;
    }
    *out = '\0';
}

/* What check-config prints is itself a valid file that loads back to the same values. */
static void test_print_round_trip(void **state)
{
    (void)state;
    char *const env[] = {E("QUEUER_DATABASE_CONNINFO=host='a b' application_name=\"q\\x\"\tport=1"),
                         E("QUEUER_WORKER_LISTEN=off"), E("QUEUER_ADMIN_LISTEN=off"), NULL};
    struct qw_config cfg, back;
    struct qw_error err;
    assert_int_equal(qw_config_load(&cfg, NULL, env, &err), QW_OK);
    char *printed = print_to_string(&cfg);
    char *path = write_temp(printed, 0600);
    int rc = qw_config_load(&back, path, no_env, &err);
    if (rc != QW_OK)
        fail_msg("printed config does not load: %s\n%s", err.msg, printed);
    assert_string_equal(back.db_conninfo, "host='a b' application_name=\"q\\x\"\tport=1");
    assert_int_equal(back.worker_listen, 0);
    assert_string_equal(back.admin_listen, "off");
    /* The values print the same; only the "# where from" notes differ (env, then file). */
    char *again = print_to_string(&back);
    strip_origin_notes(printed);
    strip_origin_notes(again);
    assert_string_equal(printed, again);
    free(printed);
    free(again);
    remove_temp(path);
    qw_config_free(&cfg);
    qw_config_free(&back);
}

/* ---- the environment ---- */

static void test_env_overrides(void **state)
{
    (void)state;
    char *const env[] = {E("PATH=/usr/bin"),
                         E("QUEUER_WORKER_LEASE_MS=60000"),
                         E("QUEUER_WORKER_HARD_EXPIRY_MS=120000"),
                         E("QUEUER_WORKER_LISTEN=false"),
                         E("QUEUER_ADMIN_LISTEN=off"),
                         E("QUEUER_DLT_URL=https://ledger:8443, http://ledger-b:8008"),
                         E("QUEUER_DLT_CHANNELS=8"),
                         E("QUEUER_DLT_PRIORITY_AGING_MS=250"),
                         E("QUEUER_DATABASE_CONNINFO="),
                         E("QUEUER_INGEST_HIGH=-0"),
                         E("QUEUER_CONFIG=/etc/queuer.cfg"),
                         E("QUEUER_BIN=/usr/bin/queuer"),
                         E("QUEUER_=x"),
                         E("QUEUER_WORKER=x"),
                         E("NOT_QUEUER_WORKER_LEESE=1"),
                         NULL};
    struct qw_config cfg;
    struct qw_error err;
    int rc = qw_config_load(&cfg, NULL, env, &err);
    if (rc != QW_OK)
        fail_msg("load failed: %s", err.msg);
    assert_int_equal(cfg.worker_lease_ms, 60000);
    assert_int_equal(cfg.worker_hard_expiry_ms, 120000);
    assert_int_equal(cfg.worker_listen, 0);
    assert_string_equal(cfg.admin_listen, "off");
    assert_string_equal(cfg.dlt_url, "https://ledger:8443, http://ledger-b:8008");
    assert_int_equal(cfg.dlt_channels, 8);
    assert_int_equal(cfg.dlt_priority_aging_ms, 250);
    assert_string_equal(cfg.db_conninfo, "");
    assert_int_equal(cfg.ingest_high, 0);
    qw_config_free(&cfg);
}

static void test_env_bool_spellings(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int want;
    } cases[] = {
        {"true", 1},  {"TRUE", 1}, {"on", 1},  {"1", 1}, {"yes", 1}, {"Yes", 1},
        {"false", 0}, {"off", 0},  {"OFF", 0}, {"0", 0}, {"no", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char var[64];
        snprintf(var, sizeof(var), "QUEUER_WORKER_LISTEN=%s", cases[i].text);
        char *const env[] = {var, NULL};
        struct qw_config cfg;
        struct qw_error err;
        assert_int_equal(qw_config_load(&cfg, NULL, env, &err), QW_OK);
        if (cfg.worker_listen != cases[i].want)
            fail_msg("%s gave %d", var, cfg.worker_listen);
        qw_config_free(&cfg);
    }
}

static void test_env_errors(void **state)
{
    (void)state;
    static const struct {
        const char *var;
        const char *expected;
    } cases[] = {
        {"QUEUER_WORKER_LEASE_MS=abc", "QUEUER_WORKER_LEASE_MS=abc: not an integer"},
        {"QUEUER_WORKER_LEASE_MS=", "QUEUER_WORKER_LEASE_MS=: not an integer"},
        {"QUEUER_WORKER_LEASE_MS=12x", "QUEUER_WORKER_LEASE_MS=12x: not an integer"},
        {"QUEUER_WORKER_LEASE_MS= 100", "QUEUER_WORKER_LEASE_MS= 100: not an integer"},
        {"QUEUER_WORKER_LEASE_MS=1.5", "QUEUER_WORKER_LEASE_MS=1.5: not an integer"},
        {"QUEUER_WORKER_LEASE_MS=5", "QUEUER_WORKER_LEASE_MS=5: out of range 100..3600000"},
        {"QUEUER_WORKER_LEASE_MS=99999999999999999999",
         "QUEUER_WORKER_LEASE_MS=99999999999999999999: out of range 100..3600000"},
        {"QUEUER_WORKER_LISTEN=maybe",
         "QUEUER_WORKER_LISTEN=maybe: not a boolean (true/false, on/off, 1/0, yes/no)"},
        {"QUEUER_WORKER_LISTEN=", "QUEUER_WORKER_LISTEN=: not a boolean (true/false, on/off, "
                                  "1/0, yes/no)"},
        {"QUEUER_WORKER_LEESE_MS=1", "QUEUER_WORKER_LEESE_MS: unknown key worker.leese_ms"},
        {"QUEUER_DLT_TOKN=hunter2", "QUEUER_DLT_TOKN: unknown key dlt.tokn"},
        {"QUEUER_LOG_LEVEL=loud",
         "QUEUER_LOG_LEVEL=loud: log.level must be one of debug, info, warn, error"},
        {"QUEUER_ADMIN_LISTEN=no",
         "QUEUER_ADMIN_LISTEN=no: admin.listen must be \"off\" or host:port with port 1..65535"},
        {"QUEUER_DLT_URL=ledger:8008",
         "QUEUER_DLT_URL=ledger:8008: dlt.url must start with http:// or https://"},
        {"QUEUER_DLT_URL=http://u:hunter2@ledger",
         "QUEUER_DLT_URL: dlt.url must not contain credentials; use QUEUER_DLT_TOKEN or "
         "dlt.token_file"},
        {"QUEUER_WORKER_HARD_EXPIRY_MS=1000", "QUEUER_WORKER_HARD_EXPIRY_MS: "
                                              "worker.hard_expiry_ms = 1000 must be >= "
                                              "worker.lease_ms = 30000"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *const env[] = {E("QUEUER_WORKER_CLAIM_SLACK=3"), E(cases[i].var), NULL};
        struct qw_config cfg;
        struct qw_error err;
        qw_error_clear(&err);
        int rc = qw_config_load(&cfg, NULL, env, &err);
        if (rc != QW_ERR_CONFIG)
            fail_msg("%s: rc %d, want QW_ERR_CONFIG", cases[i].var, rc);
        assert_int_equal(err.rc, QW_ERR_CONFIG);
        if (strcmp(err.msg, cases[i].expected) != 0)
            fail_msg("%s:\n got: %s\nwant: %s", cases[i].var, err.msg, cases[i].expected);
        assert_null(strstr(err.msg, "hunter2"));
        assert_config_empty(&cfg);
    }
}

static void test_env_beats_file(void **state)
{
    (void)state;
    char *path = write_temp("worker = { lease_ms = 40000; claim_slack = 9; };\n"
                            "dlt = { url = \"http://file:1\"; };\n",
                            0600);
    char *const env[] = {E("QUEUER_WORKER_LEASE_MS=50000"), E("QUEUER_DLT_URL=http://env:2"), NULL};
    struct qw_config cfg;
    struct qw_error err;
    assert_int_equal(qw_config_load(&cfg, path, env, &err), QW_OK);
    assert_int_equal(cfg.worker_lease_ms, 50000);
    assert_string_equal(cfg.dlt_url, "http://env:2");
    assert_int_equal(cfg.worker_claim_slack, 9); /* the file still counts where env is silent */
    qw_config_free(&cfg);
    remove_temp(path);
}

/* A cross-key error caused by a file value and an env value names the env variable. */
static void test_rule_blames_env_over_default(void **state)
{
    (void)state;
    char *path = write_temp("worker = {\n  lease_ms = 40000;\n};\n", 0600);
    char *const env[] = {E("QUEUER_WORKER_CYCLE_MS=40000"), NULL};
    struct qw_config cfg;
    struct qw_error err;
    assert_int_equal(qw_config_load(&cfg, path, env, &err), QW_ERR_CONFIG);
    char want[512];
    snprintf(want, sizeof(want),
             "QUEUER_WORKER_CYCLE_MS: worker.cycle_ms = 40000 must be < worker.lease_ms = 40000 "
             "(worker.lease_ms from %s:2)",
             path);
    assert_string_equal(err.msg, want);
    remove_temp(path);
}

/* A value from the environment is blamed on its variable, not on a file line. */
static void test_rule_blames_env_over_file(void **state)
{
    (void)state;
    char *path = write_temp("worker = {\n  cycle_ms = 1000;\n};\n", 0600);
    char *const env[] = {E("QUEUER_WORKER_LEASE_MS=500"), NULL};
    struct qw_config cfg;
    struct qw_error err;
    assert_int_equal(qw_config_load(&cfg, path, env, &err), QW_ERR_CONFIG);
    char want[512];
    snprintf(want, sizeof(want),
             "QUEUER_WORKER_LEASE_MS: worker.cycle_ms = 1000 must be < worker.lease_ms = 500 "
             "(worker.cycle_ms from %s:2)",
             path);
    assert_string_equal(err.msg, want);
    remove_temp(path);
}

/* Every key remembers where its value came from; --database wins over everything. */
static void test_origins(void **state)
{
    (void)state;
    char *path = write_temp("database = {\n  conninfo = \"dbname=file\";\n};\n"
                            "log = { level = \"warn\"; };\n",
                            0600);
    char *const env[] = {E("QUEUER_LOG_LEVEL=debug"), E("QUEUER_DATABASE_CONNINFO=dbname=env"),
                         NULL};
    struct qw_config cfg;
    struct qw_error err;
    struct qw_config_source src = {.path = path};
    assert_int_equal(qw_config_load_from(&cfg, &src, env, &err), QW_OK);
    assert_string_equal(qw_config_origin(&cfg, "log", "level"), "QUEUER_LOG_LEVEL");
    assert_string_equal(qw_config_origin(&cfg, "database", "conninfo"), "QUEUER_DATABASE_CONNINFO");
    assert_null(qw_config_origin(&cfg, "worker", "lease_ms"));
    assert_null(qw_config_origin(&cfg, "worker", "no_such_key"));
    qw_config_free(&cfg);
    src.database = "dbname=option";
    assert_int_equal(qw_config_load_from(&cfg, &src, env, &err), QW_OK);
    assert_string_equal(cfg.db_conninfo, "dbname=option");
    assert_string_equal(qw_config_origin(&cfg, "database", "conninfo"), "--database");
    char file_line[300];
    snprintf(file_line, sizeof(file_line), "%s:4", path);
    qw_config_free(&cfg);
    char *const no_log_env[] = {NULL};
    assert_int_equal(qw_config_load_from(&cfg, &src, no_log_env, &err), QW_OK);
    assert_string_equal(qw_config_origin(&cfg, "log", "level"), file_line);
    qw_config_free(&cfg);
    remove_temp(path);
}

struct warnings {
    int n;          /* warnings seen */
    char last[400]; /* the last one */
};

static void collect_warning(void *ctx, const char *msg)
{
    struct warnings *w = ctx;
    w->n++;
    snprintf(w->last, sizeof(w->last), "%s", msg);
}

/* A QUEUER_* variable with a misspelt section is warned about; unrelated ones are not. */
static void test_env_section_typo_warns(void **state)
{
    (void)state;
    static const struct {
        const char *var;        /* the variable set */
        const char *suggestion; /* expected in the warning, NULL = no warning */
    } cases[] = {
        {"QUEUER_WROKER_LEASE_MS=500", "QUEUER_WORKER_LEASE_MS"},
        {"QUEUER_DATABSE_CONNINFO=x", "QUEUER_DATABASE_CONNINFO"},
        {"QUEUER_LGO_LEVEL=debug", "QUEUER_LOG_LEVEL"},
        {"QUEUER_WORKERS_SOMETHING=1", "QUEUER_WORKER_..."},
        {"QUEUER_X_LEASE_MS=1", "QUEUER_WORKER_LEASE_MS"},
        {"QUEUER_BIN=/usr/bin/queuer", NULL},
        {"QUEUER_GEN_BIN=/x", NULL},
        {"QUEUER_SOMETHING_ELSE=1", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *const env[] = {(char *)cases[i].var, NULL};
        struct warnings w = {0};
        struct qw_config_source src = {.warn = collect_warning, .warn_ctx = &w};
        struct qw_config cfg;
        struct qw_error err;
        assert_int_equal(qw_config_load_from(&cfg, &src, env, &err), QW_OK);
        qw_config_free(&cfg);
        if (!cases[i].suggestion) {
            if (w.n != 0)
                fail_msg("%s: unexpected warning: %s", cases[i].var, w.last);
            continue;
        }
        if (w.n != 1 || !strstr(w.last, cases[i].suggestion))
            fail_msg("%s: want one warning naming %s, got %d: %s", cases[i].var,
                     cases[i].suggestion, w.n, w.last);
    }
}

/* Reloadable keys and the diff a SIGHUP applies. */
struct diff_seen {
    char keys[8][64]; /* "section.name" of each difference */
    int n;            /* differences seen */
};

static void collect_diff(void *ctx, const char *section, const char *name, enum qw_config_kind kind,
                         long long num, const char *str, const char *origin)
{
    (void)kind, (void)num, (void)str, (void)origin;
    struct diff_seen *d = ctx;
    if (d->n < 8)
        snprintf(d->keys[d->n], sizeof(d->keys[0]), "%s.%s", section, name);
    d->n++;
}

static void test_diff_and_reloadable(void **state)
{
    (void)state;
    struct qw_config a, b;
    struct qw_error err;
    char *const env_a[] = {NULL};
    char *const env_b[] = {E("QUEUER_LOG_LEVEL=debug"), E("QUEUER_WORKER_LEASE_MS=60000"),
                           E("QUEUER_DLT_TOKEN=secret"), NULL};
    assert_int_equal(qw_config_load(&a, NULL, env_a, &err), QW_OK);
    assert_int_equal(qw_config_load(&b, NULL, env_b, &err), QW_OK);
    struct diff_seen d = {0};
    qw_config_diff(&a, &b, collect_diff, &d);
    assert_int_equal(d.n, 3);
    assert_string_equal(d.keys[0], "worker.lease_ms");
    assert_string_equal(d.keys[1], "log.level");
    assert_string_equal(d.keys[2], "dlt.token");
    struct diff_seen none = {0};
    qw_config_diff(&b, &b, collect_diff, &none);
    assert_int_equal(none.n, 0);
    assert_true(qw_config_reloadable("log", "level"));
    assert_true(qw_config_reloadable("admin", "listen"));
    assert_true(qw_config_reloadable("dlt", "pause_max_ms"));
    assert_false(qw_config_reloadable("worker", "lease_ms"));
    assert_false(qw_config_reloadable("database", "conninfo"));
    qw_config_free(&a);
    qw_config_free(&b);
}

/* ---- secrets ---- */

static void test_secrets_from_env(void **state)
{
    (void)state;
    char *const env[] = {E("QUEUER_DATABASE_PASSWORD=pw from env"), E("QUEUER_DLT_TOKEN=tok.en"),
                         NULL};
    struct qw_config cfg;
    struct qw_error err;
    assert_int_equal(qw_config_load(&cfg, NULL, env, &err), QW_OK);
    assert_string_equal(cfg.db_password, "pw from env");
    assert_string_equal(cfg.dlt_token, "tok.en");
    qw_config_free(&cfg);
    assert_null(cfg.db_password);
    assert_null(cfg.dlt_token);
}

static void test_secrets_from_files(void **state)
{
    (void)state;
    char *pw = write_temp("file-password\n", 0600);
    char *tok = write_temp("file-token\r\n", 0400);
    char text[1024];
    snprintf(text, sizeof(text),
             "database = { password_file = \"%s\"; };\ndlt = { token_file = \"%s\"; };\n", pw, tok);
    char *path = write_temp(text, 0644);
    struct qw_config cfg;
    struct qw_error err;
    int rc = qw_config_load(&cfg, path, no_env, &err);
    if (rc != QW_OK)
        fail_msg("load failed: %s", err.msg);
    assert_string_equal(cfg.db_password, "file-password");
    assert_string_equal(cfg.dlt_token, "file-token");
    qw_config_free(&cfg);

    /* the variable wins over the file; an empty variable counts as unset */
    char *const env[] = {E("QUEUER_DATABASE_PASSWORD=env-password"), E("QUEUER_DLT_TOKEN="), NULL};
    assert_int_equal(qw_config_load(&cfg, path, env, &err), QW_OK);
    assert_string_equal(cfg.db_password, "env-password");
    assert_string_equal(cfg.dlt_token, "file-token");
    qw_config_free(&cfg);

    /* the file can be named from the environment too */
    char var[600];
    snprintf(var, sizeof(var), "QUEUER_DLT_TOKEN_FILE=%s", pw);
    char *const env2[] = {var, NULL};
    assert_int_equal(qw_config_load(&cfg, NULL, env2, &err), QW_OK);
    assert_null(cfg.db_password);
    assert_string_equal(cfg.dlt_token, "file-password");
    qw_config_free(&cfg);

    remove_temp(path);
    remove_temp(pw);
    remove_temp(tok);
}

static void test_secret_file_errors(void **state)
{
    (void)state;
    static const struct {
        const char *content;
        mode_t mode;
        const char *expected; /* after "PATH: " */
    } cases[] = {
        {"hunter2\n", 0644, "secret file must not be readable by group or others (chmod 600)"},
        {"hunter2\n", 0640, "secret file must not be readable by group or others (chmod 600)"},
        {"hunter2\n", 0604, "secret file must not be readable by group or others (chmod 600)"},
        {"hunter2\n", 0602, "secret file must not be readable by group or others (chmod 600)"},
        {"", 0600, "secret is empty"},
        {"\n", 0600, "secret is empty"},
        {"hunter2\nsecond line\n", 0600, "secret must be one line without control characters"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *secret = write_temp(cases[i].content, cases[i].mode);
        char text[1024];
        snprintf(text, sizeof(text), "database = { password_file = \"%s\"; };\n", secret);
        char *path = write_temp(text, 0600);
        struct qw_config cfg;
        struct qw_error err;
        assert_int_equal(qw_config_load(&cfg, path, no_env, &err), QW_ERR_CONFIG);
        assert_int_equal(err.rc, QW_ERR_CONFIG);
        char want[1024];
        snprintf(want, sizeof(want), "%s: %s", secret, cases[i].expected);
        if (strcmp(err.msg, want) != 0)
            fail_msg("case %zu:\n got: %s\nwant: %s", i, err.msg, want);
        assert_null(strstr(err.msg, "hunter2"));
        assert_config_empty(&cfg);
        remove_temp(path);
        remove_temp(secret);
    }

    /* missing file, and a directory */
    char *const env1[] = {E("QUEUER_DLT_TOKEN_FILE=/nonexistent/token"), NULL};
    struct qw_config cfg;
    struct qw_error err;
    assert_int_equal(qw_config_load(&cfg, NULL, env1, &err), QW_ERR_CONFIG);
    assert_string_equal(err.msg,
                        "/nonexistent/token: cannot open secret file: No such file or directory");
    char *const env2[] = {E("QUEUER_DLT_TOKEN_FILE=/"), NULL};
    assert_int_equal(qw_config_load(&cfg, NULL, env2, &err), QW_ERR_CONFIG);
    assert_string_equal(err.msg, "/: secret file is not a regular file");
    /* the 64 KiB limit holds for values from the environment too */
    char *big = malloc(sizeof("QUEUER_DLT_TOKEN=") + 65537);
    assert_non_null(big);
    strcpy(big, "QUEUER_DLT_TOKEN=");
    memset(big + strlen(big), 'a', 65537);
    big[sizeof("QUEUER_DLT_TOKEN=") - 1 + 65537] = '\0';
    char *const env_big[] = {big, NULL};
    assert_int_equal(qw_config_load(&cfg, NULL, env_big, &err), QW_ERR_CONFIG);
    assert_string_equal(err.msg, "QUEUER_DLT_TOKEN: secret is larger than 65536 bytes");
    big[sizeof("QUEUER_DLT_TOKEN=") - 1 + 65536] = '\0';
    assert_int_equal(qw_config_load(&cfg, NULL, env_big, &err), QW_OK);
    qw_config_free(&cfg);
    free(big);
    /* a token with a newline from the environment would break the HTTP header */
    char *const env3[] = {E("QUEUER_DLT_TOKEN=hunter2\nX-Evil: 1"), NULL};
    assert_int_equal(qw_config_load(&cfg, NULL, env3, &err), QW_ERR_CONFIG);
    assert_string_equal(err.msg,
                        "QUEUER_DLT_TOKEN: secret must be one line without control characters");
    assert_config_empty(&cfg);
}

/* A FIFO (or any non-regular file) as a secret or config file is refused at once, not waited on. */
static void test_fifo_does_not_hang(void **state)
{
    (void)state;
    const char *dir = getenv("TMPDIR");
    char fifo[512];
    snprintf(fifo, sizeof(fifo), "%s/qwcfg-fifo.%d", dir && *dir ? dir : "/tmp", (int)getpid());
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(10); /* before the fix open() blocked forever waiting for a writer */
    char var[600];
    snprintf(var, sizeof(var), "QUEUER_DATABASE_PASSWORD_FILE=%s", fifo);
    char *const env[] = {var, NULL};
    struct qw_config cfg;
    struct qw_error err;
    assert_int_equal(qw_config_load(&cfg, NULL, env, &err), QW_ERR_CONFIG);
    char want[700];
    snprintf(want, sizeof(want), "%s: secret file is not a regular file", fifo);
    assert_string_equal(err.msg, want);
    assert_config_empty(&cfg);
    snprintf(var, sizeof(var), "QUEUER_DLT_TOKEN_FILE=%s", fifo);
    assert_int_equal(qw_config_load(&cfg, NULL, env, &err), QW_ERR_CONFIG);
    assert_string_equal(err.msg, want);
    assert_int_equal(qw_config_load(&cfg, fifo, no_env, &err), QW_ERR_CONFIG);
    snprintf(want, sizeof(want), "%s: configuration file is not a regular file", fifo);
    assert_string_equal(err.msg, want);
    alarm(0);
    unlink(fifo);
}

/* check-config never prints a password: a conninfo holding one does not load at all. */
static void test_env_conninfo_password(void **state)
{
    (void)state;
    static const char *const vars[] = {
        "QUEUER_DATABASE_CONNINFO=postgresql:///queuer?pass%77ord=hunter2",
        "QUEUER_DATABASE_CONNINFO=postgres://u:hunter2@h/q",
        "QUEUER_DATABASE_CONNINFO=dbname=q\tpassword\t=\thunter2",
        "QUEUER_DATABASE_CONNINFO=dbname=q password='hunter2' host=h",
    };
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        char *const env[] = {(char *)(uintptr_t)vars[i], NULL};
        struct qw_config cfg;
        struct qw_error err;
        if (qw_config_load(&cfg, NULL, env, &err) != QW_ERR_CONFIG)
            fail_msg("%s: loaded", vars[i]);
        assert_string_equal(err.msg, "QUEUER_DATABASE_CONNINFO: database.conninfo must not "
                                     "contain a password; use QUEUER_DATABASE_PASSWORD or "
                                     "database.password_file");
    }
    /* ordinary conninfo strings still load: keywords, URIs, passfile is a path not a secret */
    static const char *const good[] = {
        "QUEUER_DATABASE_CONNINFO=host=/tmp port=5433 dbname=q user=u passfile=/x",
        "QUEUER_DATABASE_CONNINFO=postgresql://u@h:5432/q?sslmode=require",
        "QUEUER_DATABASE_CONNINFO=postgresql:///queuer?host=/run/pg",
        "QUEUER_DATABASE_CONNINFO=",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char *const env[] = {(char *)(uintptr_t)good[i], NULL};
        struct qw_config cfg;
        struct qw_error err;
        if (qw_config_load(&cfg, NULL, env, &err) != QW_OK)
            fail_msg("%s: %s", good[i], err.msg);
        qw_config_free(&cfg);
    }
}

static void test_print_redacts_secrets(void **state)
{
    (void)state;
    char *const env[] = {E("QUEUER_DATABASE_PASSWORD=hunter2-db"),
                         E("QUEUER_DLT_TOKEN=hunter2-tok"), NULL};
    struct qw_config cfg;
    struct qw_error err;
    assert_int_equal(qw_config_load(&cfg, NULL, env, &err), QW_OK);
    char *out = print_to_string(&cfg);
    assert_null(strstr(out, "hunter2"));
    assert_non_null(strstr(out, "  # password: <set>"));
    assert_non_null(strstr(out, "  # token: <set>"));
    free(out);
    qw_config_free(&cfg);

    assert_int_equal(qw_config_load(&cfg, NULL, no_env, &err), QW_OK);
    out = print_to_string(&cfg);
    assert_non_null(strstr(out, "  # password: <unset>"));
    assert_non_null(strstr(out, "  # token: <unset>"));
    free(out);
    qw_config_free(&cfg);
}

/* ---- documentation ---- */

/*
 * True when `text` has a `section = {` block holding a line whose first
 * word is `name` followed by `=`.
 */
static int block_has_key(const char *text, const char *section, const char *name)
{
    char open[64];
    snprintf(open, sizeof(open), "\n%s = {", section);
    const char *start = strstr(text, open);
    if (!start)
        return 0;
    const char *end = strstr(start, "\n};");
    if (!end)
        return 0;
    size_t nlen = strlen(name);
    for (const char *line = strchr(start + 1, '\n'); line && line < end;
         line = strchr(line + 1, '\n')) {
        const char *p = line + 1;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncmp(p, name, nlen) != 0)
            continue;
        p += nlen;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '=')
            return 1;
    }
    return 0;
}

static void test_every_key_documented(void **state)
{
    (void)state;
    struct qw_config cfg;
    struct qw_error err;
    assert_int_equal(qw_config_defaults(&cfg), QW_OK);
    char *printed = print_to_string(&cfg);
    qw_config_free(&cfg);

    char *example = read_all(QW_SOURCE_ROOT "/etc/queuer.example.cfg");
    char *docs = read_all(QW_SOURCE_ROOT "/docs/CONFIG.md");
    char *reference = reference_to_string();

    /* Walk the keys as qw_config_print lists them: "section = {" then "  name = value;". */
    char section[64] = "";
    size_t n_keys = 0;
    for (char *line = strtok(printed, "\n"); line; line = strtok(NULL, "\n")) {
        char name[64];
        if (sscanf(line, "%63[a-z_] = {", name) == 1 && strstr(line, "{")) {
            snprintf(section, sizeof(section), "%s", name);
        } else if (line[0] == ' ' && line[2] != '#' && sscanf(line, " %63[a-z0-9_] =", name) == 1) {
            n_keys++;
            if (!block_has_key(example, section, name))
                fail_msg("%s.%s is missing from etc/queuer.example.cfg", section, name);
            char row[200];
            snprintf(row, sizeof(row), "| `%s.%s` |", section, name);
            if (!strstr(docs, row))
                fail_msg("%s.%s is missing from docs/CONFIG.md", section, name);
            if (!strstr(reference, row))
                fail_msg("%s.%s is missing from qw_config_print_reference()", section, name);
        }
    }
    /* print and reference list the same number of keys, and the parse above found them */
    size_t n_rows = 0;
    for (size_t i = 0; reference[i]; i++)
        n_rows += strncmp(reference + i, "\n| `", 4) == 0;
    assert_int_equal(n_keys, n_rows);
    assert_true(n_keys >= 30);

    /* the reference table in the docs is exactly what the code prints */
    if (!strstr(docs, reference))
        fail_msg("docs/CONFIG.md does not contain the current qw_config_print_reference() "
                 "output:\n%s",
                 reference);

    /* and the example file is a valid configuration */
    int rc = qw_config_load(&cfg, QW_SOURCE_ROOT "/etc/queuer.example.cfg", no_env, &err);
    if (rc != QW_OK)
        fail_msg("etc/queuer.example.cfg does not load: %s", err.msg);
    qw_config_free(&cfg);

    free(printed);
    free(example);
    free(docs);
    free(reference);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_load_without_file_is_defaults),
        cmocka_unit_test(test_full_file),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_print_round_trip),
        cmocka_unit_test(test_env_overrides),
        cmocka_unit_test(test_env_bool_spellings),
        cmocka_unit_test(test_env_errors),
        cmocka_unit_test(test_env_beats_file),
        cmocka_unit_test(test_rule_blames_env_over_default),
        cmocka_unit_test(test_rule_blames_env_over_file),
        cmocka_unit_test(test_origins),
        cmocka_unit_test(test_env_section_typo_warns),
        cmocka_unit_test(test_diff_and_reloadable),
        cmocka_unit_test(test_secrets_from_env),
        cmocka_unit_test(test_secrets_from_files),
        cmocka_unit_test(test_secret_file_errors),
        cmocka_unit_test(test_fifo_does_not_hang),
        cmocka_unit_test(test_env_conninfo_password),
        cmocka_unit_test(test_print_redacts_secrets),
        cmocka_unit_test(test_every_key_documented),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
