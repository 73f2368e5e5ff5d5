/* Configuration: one key table drives defaults, file, QUEUER_* overrides, checks and docs. */
#include "config/config.h"
#include "common/log.h"
#include "config/literals.h"
#include "db/conninfo.h"
#include "dlt/dlt_url.h"

#include <libconfig.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * How a load runs: qw_config_defaults() fills every key from the table, the
 * file (if any) and then the environment overwrite keys one by one, each
 * value checked against its bounds (or its string rule) the moment it is
 * read, so the error can name the file:line or the variable. Each key
 * remembers where its value came from (struct qw_config_origin, kept in the
 * config), so the cross-key rules checked at the end, check-config and the
 * CLI's connection errors can name the place too. Secrets are read last.
 * Any failure frees everything: the caller never owns a half-loaded config.
 */

enum key_type {
    KEY_INT,    /* int field, bounded by min..max */
    KEY_BOOL,   /* int field holding 0 or 1 */
    KEY_STRING, /* char * field owned by struct qw_config */
};

/*
 * A string rule: returns NULL when `value` is acceptable, else a reason
 * ("must be ..."). Sets *hide_value when the value itself may hold a secret
 * and must not be echoed in the message.
 */
typedef const char *string_rule_fn(const char *value, bool *hide_value);

struct key {
    const char *section;   /* group name in the file, lower case */
    const char *name;      /* key inside the group, lower case */
    enum key_type type;    /* how the field is stored and parsed */
    size_t offset;         /* offsetof(struct qw_config, field) */
    long long def_int;     /* default of KEY_INT / KEY_BOOL keys */
    const char *def_str;   /* default of KEY_STRING keys */
    long long min;         /* KEY_INT lower bound, inclusive */
    long long max;         /* KEY_INT upper bound, inclusive */
    string_rule_fn *rule;  /* KEY_STRING check, or NULL for any string */
    const char *rule_text; /* the rule for humans (reference "bounds" column) */
    const char *help;      /* one line, shown in the reference */
};

static string_rule_fn rule_conninfo, rule_instance_id, rule_url, rule_listen, rule_log_level,
    rule_ledger, rule_cost;

#define F(field) offsetof(struct qw_config, field)
#define INT_KEY(sec, nm, field, def, lo, hi, help)                                                 \
    {                                                                                              \
        sec, nm, KEY_INT, F(field), def, NULL, lo, hi, NULL, NULL, help                            \
    }
#define BOOL_KEY(sec, nm, field, def, help)                                                        \
    {                                                                                              \
        sec, nm, KEY_BOOL, F(field), def, NULL, 0, 1, NULL, NULL, help                             \
    }
#define STR_KEY(sec, nm, field, def, rule, rule_text, help)                                        \
    {                                                                                              \
        sec, nm, KEY_STRING, F(field), 0, def, 0, 0, rule, rule_text, help                         \
    }

/* The keys, grouped by section (a section's keys are listed together). */
static const struct key keys[] = {
    STR_KEY("database", "conninfo", db_conninfo, "", rule_conninfo, "libpq syntax, no password",
            "libpq connection string (keywords or URI); empty = libpq's defaults and PGHOST, "
            "PGDATABASE, ...; the password comes from the secret"),
    STR_KEY("database", "listen_conninfo", db_listen_conninfo, "", rule_conninfo,
            "libpq syntax, no password",
            "a direct or session-pooled connection used only to LISTEN for wake-ups, when "
            "database.conninfo goes through a transaction pooler; empty = LISTEN on "
            "database.conninfo (same password)"),
    STR_KEY("database", "password_file", db_password_file, "", NULL, "path or empty",
            "file holding the database password (mode 0600); QUEUER_DATABASE_PASSWORD wins"),
    INT_KEY("database", "connect_timeout_s", db_connect_timeout_s, 5, 1, 300,
            "seconds to wait for a database connection"),
    INT_KEY("database", "query_timeout_ms", db_query_timeout_ms, 10000, 100, 600000,
            "client-side deadline per statement; a hung server cannot hang a worker"),
    BOOL_KEY("database", "prepared_statements", db_prepared_statements, 1,
             "prepare each statement once per connection; turn off behind a transaction-pooling "
             "PgBouncer older than 1.21"),

    STR_KEY("worker", "instance_id", worker_instance_id, "", rule_instance_id,
            "empty or 1..64 of A-Z a-z 0-9 . _ : -",
            "this worker's name in claims, history and logs; empty = `<host>-<pid>-<random>`"),
    INT_KEY("worker", "cycle_ms", worker_cycle_ms, 1000, 10, 600000,
            "period of the claim/renew/queue cycle; must be < worker.lease_ms"),
    INT_KEY("worker", "lease_ms", worker_lease_ms, 30000, 100, 3600000,
            "soft claim lease: expiry_1 = now() + lease_ms"),
    INT_KEY("worker", "hard_expiry_ms", worker_hard_expiry_ms, 180000, 100, 86400000,
            "hard claim lease: expiry_2 = now() + hard_expiry_ms; must be >= worker.lease_ms"),
    INT_KEY("worker", "claim_slack", worker_claim_slack, 4, 0, 100000,
            "claims allowed above the fair share (services with work / live workers)"),
    INT_KEY("worker", "max_claims", worker_max_claims, 0, 0, 1000000,
            "hard cap on services claimed by one worker; 0 = no cap"),
    BOOL_KEY("worker", "listen", worker_listen, 1,
             "LISTEN for wake-ups; turn off behind a transaction-pooling PgBouncer"),
    INT_KEY("worker", "queue_capacity", worker_queue_capacity, 4096, 1, 1000000,
            "capacity of the queue from the queuer thread to the submitter"),
    INT_KEY("worker", "shutdown_grace_ms", worker_shutdown_grace_ms, 5000, 0, 600000,
            "time allowed at SIGTERM to finish in-flight work before abandoning it"),
    INT_KEY("worker", "txn_max_attempts", worker_txn_max_attempts, 20, 1, 1000,
            "runs of one serializable transaction before giving up"),
    INT_KEY(
        "worker", "txn_max_ms", worker_txn_max_ms, 10000, 10, 600000,
        "time budget for one transaction including its retries (at most half of worker.lease_ms)"),
    INT_KEY("worker", "txn_backoff_base_ms", worker_txn_backoff_base_ms, 2, 1, 10000,
            "base of the full-jitter backoff between transaction retries"),
    INT_KEY("worker", "txn_backoff_max_ms", worker_txn_backoff_max_ms, 200, 1, 600000,
            "cap of that backoff; must be >= worker.txn_backoff_base_ms"),

    STR_KEY("dlt", "url", dlt_url, "http://127.0.0.1:8008", rule_url,
            "http(s)://host[:port][/path]; port 1..65535; no credentials, ? or #; "
            "up to 16, comma-separated, each optionally followed by circuits or services",
            "base URL of the Splinter node (scabbard REST), or of several nodes of the same "
            "ledger separated by commas; a URL followed by circuits and services serves only "
            "those (see Ledger nodes and routing)"),
    STR_KEY("dlt", "token_file", dlt_token_file, "", NULL, "path or empty",
            "file holding the bearer token (mode 0600); QUEUER_DLT_TOKEN wins"),
    STR_KEY("dlt", "ca_file", dlt_ca_file, "", NULL, "path or empty",
            "CA bundle for TLS verification; empty = system default"),
    INT_KEY("dlt", "connect_timeout_ms", dlt_connect_timeout_ms, 3000, 100, 60000,
            "TCP/TLS connect timeout"),
    INT_KEY("dlt", "request_timeout_ms", dlt_request_timeout_ms, 10000, 100, 600000,
            "timeout of one whole batch POST; must be < worker.hard_expiry_ms - worker.lease_ms"),
    INT_KEY("dlt", "max_in_flight", dlt_max_in_flight, 256, 1, 10000,
            "concurrent HTTP requests to the ledger"),
    INT_KEY("dlt", "channels", dlt_channels, 64, 1, 10000,
            "POSTs in flight per ledger node; a POST waits for a free channel of an "
            "available node"),
    INT_KEY("dlt", "priority_aging_ms", dlt_priority_aging_ms, 1000, 1, 3600000,
            "waiting this long raises a service's priority by one while it waits for "
            "ledger capacity, so low priority cannot starve"),
    INT_KEY("dlt", "max_response_bytes", dlt_max_response_bytes, 1048576, 1024, 67108864,
            "largest response body accepted; larger ones fail the request"),
    INT_KEY("dlt", "status_wait_s", dlt_status_wait_s, 10, 0, 60,
            "long-poll wait=N of batch_statuses requests"),
    INT_KEY("dlt", "unknown_confirm_ms", dlt_unknown_confirm_ms, 2000, 0, 3600000,
            "delay before an Unknown status is re-checked and the batch resubmitted"),
    INT_KEY("dlt", "max_attempts", dlt_max_attempts, 0, 0, 1000000,
            "submissions per batch before it is left for an operator; 0 = unlimited"),
    INT_KEY("dlt", "retry_base_ms", dlt_retry_base_ms, 250, 1, 3600000,
            "base of the exponential backoff of a Delayed batch"),
    INT_KEY("dlt", "retry_max_ms", dlt_retry_max_ms, 30000, 1, 3600000,
            "cap of that backoff; must be >= dlt.retry_base_ms"),
    INT_KEY("dlt", "pause_base_ms", dlt_pause_base_ms, 100, 1, 3600000,
            "first pause of submissions after a 429 from the ledger"),
    INT_KEY("dlt", "pause_max_ms", dlt_pause_max_ms, 10000, 1, 3600000,
            "cap of the growing 429 pause; must be >= dlt.pause_base_ms"),
    STR_KEY("dlt", "ledger", dlt_ledger, "default", rule_ledger, "1..64 of A-Z a-z 0-9 . _ : -",
            "name of the ledger's shared capacity (`queuer capacity set --ledger`); workers "
            "of one ledger share it"),
    STR_KEY("dlt", "cost", dlt_cost, "batch", rule_cost, "batch, transactions or bytes",
            "what one batch costs against the shared capacity: 1, its transactions, or its "
            "payload bytes; the same on every worker of the ledger"),

    INT_KEY("ingest", "high", ingest_high, -1, -1, 1000000,
            "backlog of one service at which enqueue is refused; 0 = no back pressure; "
            "-1 = the database's queuer.settings (30 unless changed); other values only "
            "when connected as the schema owner"),
    INT_KEY("ingest", "low", ingest_low, -1, -1, 1000000,
            "enqueue is accepted again below this backlog; must be < ingest.high; "
            "-1 = the database's queuer.settings (15 unless changed); other values only "
            "when connected as the schema owner"),
    INT_KEY("ingest", "max_payload_bytes", ingest_max_payload_bytes, 1048576, 1, 67108864,
            "largest BatchList payload accepted by enqueue"),

    STR_KEY("admin", "listen", admin_listen, "127.0.0.1:9187", rule_listen,
            "off or host:port, port 1..65535",
            "address of /healthz, /readyz and /metrics; off disables the admin server"),

    STR_KEY("log", "level", log_level, "info", rule_log_level, "debug, info, warn or error",
            "lowest level written to the log"),
};

#define N_KEYS (sizeof(keys) / sizeof(keys[0]))

/* Secrets are not keys: each comes from its variable, else from the file a key names. */
struct secret {
    const char *section;  /* group whose print-out shows the <set>/<unset> line */
    const char *name;     /* name in that line */
    const char *env;      /* variable that holds it directly */
    size_t offset;        /* char * field of the secret */
    size_t file_offset;   /* char * field naming the secret file */
    const char *file_key; /* "section.key" of that field, for messages */
};

static const struct secret secrets[] = {
    {"database", "password", "QUEUER_DATABASE_PASSWORD", F(db_password), F(db_password_file),
     "database.password_file"},
    {"dlt", "token", "QUEUER_DLT_TOKEN", F(dlt_token), F(dlt_token_file), "dlt.token_file"},
};

#define N_SECRETS (sizeof(secrets) / sizeof(secrets[0]))
#define SECRET_MAX_BYTES 65536

/* Where a key's effective value came from: "" (default), "FILE:LINE", a variable or an option. */
struct qw_config_origin {
    char where[256]; /* text that prefixes messages about this key */
};

/* ---- field access ---- */

static int *int_field(struct qw_config *cfg, const struct key *k)
{
    return (int *)(void *)((char *)cfg + k->offset);
}

static int int_at(const struct qw_config *cfg, size_t offset)
{
    return *(const int *)(const void *)((const char *)cfg + offset);
}

static int int_value(const struct qw_config *cfg, const struct key *k)
{
    return int_at(cfg, k->offset);
}

static char **str_field(struct qw_config *cfg, size_t offset)
{
    return (char **)(void *)((char *)cfg + offset);
}

static const char *str_value(const struct qw_config *cfg, size_t offset)
{
    return *(char *const *)(const void *)((const char *)cfg + offset);
}

static int set_string(struct qw_config *cfg, const struct key *k, const char *value)
{
    char *copy = strdup(value);
    if (!copy)
        return QW_ERR_NOMEM;
    char **slot = str_field(cfg, k->offset);
    free(*slot);
    *slot = copy;
    return QW_OK;
}

static const struct key *find_key(const char *section, const char *name)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].name, name) == 0)
            return &keys[i];
    }
    return NULL;
}

static bool section_known(const char *section, size_t len)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        if (strlen(keys[i].section) == len && strncmp(keys[i].section, section, len) == 0)
            return true;
    }
    return false;
}

/* Writes QUEUER_<SECTION>_<NAME> for `k` into buf. */
static void env_name(const struct key *k, char *buf, size_t len)
{
    snprintf(buf, len, "QUEUER_%s_%s", k->section, k->name);
    for (char *p = buf; *p; p++)
        *p = (char)toupper((unsigned char)*p);
}

/*
 * Escapes `s` for a libconfig string or a one-line message (no quotes
 * added) into buf, truncating with "..." when it does not fit.
 */
static const char *escape(char *buf, size_t len, const char *s)
{
    size_t n = 0;
    for (; *s; s++) {
        char piece[8];
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            snprintf(piece, sizeof(piece), "\\%c", c);
        else if (c == '\n')
            snprintf(piece, sizeof(piece), "\\n");
        else if (c == '\t')
            snprintf(piece, sizeof(piece), "\\t");
        else if (c < 0x20 || c == 0x7f)
            snprintf(piece, sizeof(piece), "\\x%02x", c);
        else
            snprintf(piece, sizeof(piece), "%c", c);
        size_t plen = strlen(piece);
        if (n + plen + 4 > len) {
            snprintf(buf + n, len - n, "...");
            return buf;
        }
        memcpy(buf + n, piece, plen);
        n += plen;
    }
    buf[n] = '\0';
    return buf;
}

/* ---- string rules ---- */

/* libpq parses it (src/db): whatever libpq would take as a password is refused. */
static const char *rule_conninfo(const char *value, bool *hide_value)
{
    const char *why = qw_db_conninfo_check(value);
    if (why)
        *hide_value = true; /* refused strings may hold a password in some spelling */
    return why;
}

static const char *rule_instance_id(const char *value, bool *hide_value)
{
    (void)hide_value;
    size_t len = strlen(value);
    if (len > 64)
        return "must be at most 64 characters";
    for (const char *p = value; *p; p++) {
        if (!isalnum((unsigned char)*p) && !strchr("._:-", *p))
            return "may only contain A-Z a-z 0-9 . _ : -";
    }
    return NULL;
}

/* The ledger client's own check (one rule for check-config and run); credentials hidden. */
static const char *rule_url(const char *value, bool *hide_value)
{
    if (strchr(value, '@')) {
        *hide_value = true;
        return "must not contain credentials; use QUEUER_DLT_TOKEN or dlt.token_file";
    }
    return qw_dlt_url_list_check(value);
}

static const char *rule_listen(const char *value, bool *hide_value)
{
    (void)hide_value;
    static const char why[] = "must be \"off\" or host:port with port 1..65535";
    if (strcmp(value, "off") == 0)
        return NULL;
    const char *colon;
    if (value[0] == '[') {
        const char *close = strchr(value, ']');
        if (!close || close == value + 1 || close[1] != ':')
            return why;
        colon = close + 1;
    } else {
        colon = strrchr(value, ':');
        if (!colon || colon == value || memchr(value, ':', (size_t)(colon - value)))
            return why;
    }
    for (const char *p = value; p < colon; p++) {
        if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p))
            return why;
    }
    const char *port = colon + 1;
    if (*port == '\0' || strlen(port) > 5 || strspn(port, "0123456789") != strlen(port))
        return why;
    long n = strtol(port, NULL, 10);
    if (n < 1 || n > 65535)
        return why;
    return NULL;
}

static const char *rule_ledger(const char *value, bool *hide_value)
{
    if (!value[0])
        return "must not be empty";
    return rule_instance_id(value, hide_value);
}

static const char *rule_cost(const char *value, bool *hide_value)
{
    (void)hide_value;
    if (strcmp(value, "batch") != 0 && strcmp(value, "transactions") != 0 &&
        strcmp(value, "bytes") != 0)
        return "must be one of batch, transactions, bytes";
    return NULL;
}

static const char *rule_log_level(const char *value, bool *hide_value)
{
    (void)hide_value;
    enum qw_log_level level;
    if (qw_log_level_parse(value, &level) != QW_OK)
        return "must be one of debug, info, warn, error";
    return NULL;
}

/* ---- defaults and free ---- */

int qw_config_defaults(struct qw_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < N_KEYS; i++) {
        const struct key *k = &keys[i];
        if (k->type == KEY_STRING) {
            if (set_string(cfg, k, k->def_str) != QW_OK) {
                qw_config_free(cfg);
                return QW_ERR_NOMEM;
            }
        } else {
            *int_field(cfg, k) = (int)k->def_int;
        }
    }
    return QW_OK;
}

static void wipe_and_free(char *secret)
{
    if (secret) {
        explicit_bzero(secret, strlen(secret));
        free(secret);
    }
}

void qw_config_free(struct qw_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < N_SECRETS; i++)
        wipe_and_free(*str_field(cfg, secrets[i].offset));
    for (size_t i = 0; i < N_KEYS; i++) {
        if (keys[i].type == KEY_STRING)
            free(*str_field(cfg, keys[i].offset));
    }
    free(cfg->origins);
    explicit_bzero(cfg, sizeof(*cfg));
}

/* ---- the file ---- */

/* Applies one libconfig setting to key `k`; `where` is "FILE:LINE". */
static int apply_setting(struct qw_config *cfg, const struct key *k, const config_setting_t *s,
                         const char *where, struct qw_error *err)
{
    int type = config_setting_type(s);
    char esc[200];
    switch (k->type) {
    case KEY_INT: {
        if (type != CONFIG_TYPE_INT && type != CONFIG_TYPE_INT64)
            return qw_error_set(err, QW_ERR_CONFIG, "%s: %s.%s must be an integer", where,
                                k->section, k->name);
        long long v = config_setting_get_int64(s);
        if (v < k->min || v > k->max)
            return qw_error_set(err, QW_ERR_CONFIG, "%s: %s.%s = %lld is out of range %lld..%lld",
                                where, k->section, k->name, v, k->min, k->max);
        *int_field(cfg, k) = (int)v;
        return QW_OK;
    }
    case KEY_BOOL:
        if (type != CONFIG_TYPE_BOOL)
            return qw_error_set(err, QW_ERR_CONFIG, "%s: %s.%s must be a boolean (true or false)",
                                where, k->section, k->name);
        *int_field(cfg, k) = config_setting_get_bool(s) ? 1 : 0;
        return QW_OK;
    case KEY_STRING: {
        if (type != CONFIG_TYPE_STRING)
            return qw_error_set(err, QW_ERR_CONFIG, "%s: %s.%s must be a string (in double quotes)",
                                where, k->section, k->name);
        const char *v = config_setting_get_string(s);
        bool hide = false;
        const char *why = k->rule ? k->rule(v, &hide) : NULL;
        if (why && hide)
            return qw_error_set(err, QW_ERR_CONFIG, "%s: %s.%s %s", where, k->section, k->name,
                                why);
        if (why)
            return qw_error_set(err, QW_ERR_CONFIG, "%s: %s.%s = \"%s\" %s", where, k->section,
                                k->name, escape(esc, sizeof(esc), v), why);
        if (set_string(cfg, k, v) != QW_OK)
            return qw_error_set(err, QW_ERR_NOMEM, "out of memory reading %s.%s", k->section,
                                k->name);
        return QW_OK;
    }
    }
    return qw_error_set(err, QW_ERR_CONFIG, "%s.%s has no type", k->section, k->name);
}

static void setting_where(const config_setting_t *s, const char *path, char *buf, size_t len)
{
    const char *file = config_setting_source_file(s);
    snprintf(buf, len, "%s:%u", file ? file : path, (unsigned)config_setting_source_line(s));
}

#define CONFIG_FILE_MAX_BYTES (1024 * 1024)
#define CONFIG_INCLUDE_MAX_DEPTH 10

/*
 * Reads the whole configuration file `path` into *text (malloc'd,
 * NUL-terminated). Opened here first because libconfig only says "file I/O
 * error"; O_NONBLOCK so a FIFO cannot hang the load (fstat refuses it).
 */
static int read_config_text(const char *path, char **text, size_t *len, struct qw_error *err)
{
    *text = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return qw_error_set(err, QW_ERR_CONFIG, "%s: cannot open configuration file: %s", path,
                            strerror(errno));
    int rc = QW_OK;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = qw_error_set(err, QW_ERR_CONFIG, "%s: configuration file is not a regular file", path);
        goto out;
    }
    if (st.st_size > CONFIG_FILE_MAX_BYTES) {
        rc = qw_error_set(err, QW_ERR_CONFIG, "%s: configuration file is larger than %d bytes",
                          path, CONFIG_FILE_MAX_BYTES);
        goto out;
    }
    *text = malloc((size_t)st.st_size + 1);
    if (!*text) {
        rc = qw_error_set(err, QW_ERR_NOMEM, "out of memory reading %s", path);
        goto out;
    }
    size_t n = 0;
    while (n < (size_t)st.st_size) {
        ssize_t got = read(fd, *text + n, (size_t)st.st_size - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = qw_error_set(err, QW_ERR_CONFIG, "%s: cannot read configuration file: %s", path,
                              strerror(errno));
            goto out;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    (*text)[n] = '\0';
    *len = n;
out:
    if (rc != QW_OK) {
        free(*text);
        *text = NULL;
    }
    close(fd);
    return rc;
}

/* State of the wrapped-integer scan over a file and the files it @includes. */
struct literal_scan {
    int depth;            /* @include nesting */
    struct qw_error *err; /* where the refusal goes */
};

static int scan_text(const char *path, const char *text, size_t len, struct literal_scan *scan);

/* @include "path": scans the included file too; one libconfig cannot read is left to libconfig. */
static int scan_include(const char *path, void *arg)
{
    struct literal_scan *scan = arg;
    if (scan->depth >= CONFIG_INCLUDE_MAX_DEPTH)
        return 0;
    char *text;
    size_t len;
    struct qw_error ignored;
    if (read_config_text(path, &text, &len, &ignored) != QW_OK)
        return 0;
    scan->depth++;
    int rc = scan_text(path, text, len, scan);
    scan->depth--;
    free(text);
    return rc;
}

/* Refuses integer literals libconfig would wrap to 32 bits (see config/literals.h). */
static int scan_text(const char *path, const char *text, size_t len, struct literal_scan *scan)
{
    struct qw_config_literal bad;
    int found = qw_config_find_wrapping_int(text, len, scan_include, scan, &bad);
    if (found != 1)
        return found;
    const struct key *k = find_key(bad.section, bad.name);
    if (k && k->type == KEY_INT)
        return qw_error_set(scan->err, QW_ERR_CONFIG,
                            "%s:%d: %s.%s = %s is out of range %lld..%lld", path, bad.line,
                            k->section, k->name, bad.text, k->min, k->max);
    return qw_error_set(scan->err, QW_ERR_CONFIG, "%s:%d: integer %s does not fit in 32 bits", path,
                        bad.line, bad.text);
}

static int load_file(struct qw_config *cfg, const char *path, struct qw_config_origin *origins,
                     struct qw_error *err)
{
    char *text;
    size_t len;
    int rc = read_config_text(path, &text, &len, err);
    if (rc != QW_OK)
        return rc;
    struct literal_scan scan = {0, err};
    rc = scan_text(path, text, len, &scan);
    free(text);
    if (rc != QW_OK)
        return rc;

    config_t lc;
    config_init(&lc);
    if (config_read_file(&lc, path) != CONFIG_TRUE) {
        const char *file = config_error_file(&lc);
        if (config_error_type(&lc) == CONFIG_ERR_PARSE)
            rc = qw_error_set(err, QW_ERR_CONFIG, "%s:%d: %s", file ? file : path,
                              config_error_line(&lc), config_error_text(&lc));
        else
            rc = qw_error_set(err, QW_ERR_CONFIG, "%s: %s", file ? file : path,
                              config_error_text(&lc));
        goto out;
    }

    config_setting_t *root = config_root_setting(&lc);
    char where[256];
    for (int i = 0; i < config_setting_length(root); i++) {
        config_setting_t *group = config_setting_get_elem(root, (unsigned)i);
        const char *section = config_setting_name(group);
        setting_where(group, path, where, sizeof(where));
        if (!section_known(section, strlen(section))) {
            rc = qw_error_set(err, QW_ERR_CONFIG, "%s: unknown %s %s", where,
                              config_setting_is_group(group) ? "section" : "key", section);
            goto out;
        }
        if (!config_setting_is_group(group)) {
            rc = qw_error_set(err, QW_ERR_CONFIG,
                              "%s: %s must be a group: %s = { key = value; ... };", where, section,
                              section);
            goto out;
        }
        for (int j = 0; j < config_setting_length(group); j++) {
            config_setting_t *s = config_setting_get_elem(group, (unsigned)j);
            const char *name = config_setting_name(s);
            setting_where(s, path, where, sizeof(where));
            const struct key *k = find_key(section, name);
            if (!k) {
                rc =
                    qw_error_set(err, QW_ERR_CONFIG, "%s: unknown key %s.%s", where, section, name);
                goto out;
            }
            rc = apply_setting(cfg, k, s, where, err);
            if (rc != QW_OK)
                goto out;
            snprintf(origins[k - keys].where, sizeof(origins[0].where), "%s", where);
        }
    }
out:
    config_destroy(&lc);
    return rc;
}

/* ---- the environment ---- */

static bool parse_bool(const char *v, int *out)
{
    static const char *const yes[] = {"true", "on", "1", "yes"};
    static const char *const no[] = {"false", "off", "0", "no"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = 1;
            return true;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = 0;
            return true;
        }
    }
    return false;
}

/* Applies "NAME=value" (name already matched to `k`). */
static int apply_env(struct qw_config *cfg, const struct key *k, const char *name,
                     const char *value, struct qw_error *err)
{
    char esc[200];
    escape(esc, sizeof(esc), value);
    switch (k->type) {
    case KEY_INT: {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (*value == '\0' || isspace((unsigned char)*value) || *end != '\0')
            return qw_error_set(err, QW_ERR_CONFIG, "%s=%s: not an integer", name, esc);
        if (errno == ERANGE || v < k->min || v > k->max)
            return qw_error_set(err, QW_ERR_CONFIG, "%s=%s: out of range %lld..%lld", name, esc,
                                k->min, k->max);
        *int_field(cfg, k) = (int)v;
        return QW_OK;
    }
    case KEY_BOOL: {
        int b;
        if (!parse_bool(value, &b))
            return qw_error_set(err, QW_ERR_CONFIG,
                                "%s=%s: not a boolean (true/false, on/off, 1/0, yes/no)", name,
                                esc);
        *int_field(cfg, k) = b;
        return QW_OK;
    }
    case KEY_STRING: {
        bool hide = false;
        const char *why = k->rule ? k->rule(value, &hide) : NULL;
        if (why && hide)
            return qw_error_set(err, QW_ERR_CONFIG, "%s: %s.%s %s", name, k->section, k->name, why);
        if (why)
            return qw_error_set(err, QW_ERR_CONFIG, "%s=%s: %s.%s %s", name, esc, k->section,
                                k->name, why);
        if (set_string(cfg, k, value) != QW_OK)
            return qw_error_set(err, QW_ERR_NOMEM, "out of memory reading %s", name);
        return QW_OK;
    }
    }
    return qw_error_set(err, QW_ERR_CONFIG, "%s has no type", name);
}

static bool is_special_env(const char *name, size_t len)
{
    if (len == strlen("QUEUER_CONFIG") && strncmp(name, "QUEUER_CONFIG", len) == 0)
        return true;
    for (size_t i = 0; i < N_SECRETS; i++) {
        if (len == strlen(secrets[i].env) && strncmp(name, secrets[i].env, len) == 0)
            return true;
    }
    return false;
}

/* Levenshtein distance of a[0..la) and b[0..lb), both short (<= 31). */
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
    size_t row[32];
    if (la > 31 || lb > 31)
        return 32;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/*
 * For QUEUER_<sec>_<rest> whose <sec> is no section: the variable a key
 * would have if <sec> is a misspelt section (at most 2 edits away, 1 for
 * short names) or <rest> is the key of some section. Writes the suggestion
 * into `out` ("" when the variable looks like someone else's).
 */
static void suggest_env(const char *sec, size_t sec_len, const char *rest, char *out, size_t len)
{
    out[0] = '\0';
    const struct key *by_name = NULL;
    const char *near = NULL;
    size_t near_d = 3;
    for (size_t i = 0; i < N_KEYS; i++) {
        const struct key *k = &keys[i];
        if (!by_name && strcmp(k->name, rest) == 0)
            by_name = k;
        size_t slen = strlen(k->section);
        size_t d = edit_distance(sec, sec_len, k->section, slen);
        size_t allowed = slen <= 4 ? 1 : 2;
        if (d <= allowed && d < near_d) {
            near = k->section;
            near_d = d;
        }
    }
    if (near && find_key(near, rest))
        by_name = find_key(near, rest);
    if (by_name) {
        env_name(by_name, out, len);
    } else if (near) {
        snprintf(out, len, "QUEUER_%s_...", near);
        for (char *p = out; *p; p++)
            *p = (char)toupper((unsigned char)*p);
    }
}

/* Applies every QUEUER_<SECTION>_<KEY> of envp, in order. */
static int load_env(struct qw_config *cfg, char *const *envp, struct qw_config_origin *origins,
                    const struct qw_config_source *src, struct qw_error *err)
{
    static const char prefix[] = "QUEUER_";
    const size_t plen = sizeof(prefix) - 1;
    for (char *const *e = envp; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq || strncmp(*e, prefix, plen) != 0)
            continue;
        size_t len = (size_t)(eq - *e);
        if (is_special_env(*e, len))
            continue;
        char name[128];
        if (len >= sizeof(name))
            continue; /* longer than any key's variable, and no section is that long */
        memcpy(name, *e, len);
        name[len] = '\0';

        const struct key *k = NULL;
        for (size_t i = 0; i < N_KEYS && !k; i++) {
            char want[128];
            env_name(&keys[i], want, sizeof(want));
            if (strcmp(want, name) == 0)
                k = &keys[i];
        }
        if (!k) {
            char lower[128];
            for (size_t i = 0; i <= len; i++)
                lower[i] = (char)tolower((unsigned char)name[i]);
            const char *sec = lower + plen;
            const char *us = strchr(sec, '_');
            /* QUEUER_<known section>_<something>: a misspelt key, not someone else's variable. */
            if (us && section_known(sec, (size_t)(us - sec)))
                return qw_error_set(err, QW_ERR_CONFIG, "%s: unknown key %.*s.%s", name,
                                    (int)(us - sec), sec, us + 1);
            char hint[160];
            if (us && src->warn) {
                suggest_env(sec, (size_t)(us - sec), us + 1, hint, sizeof(hint));
                if (hint[0]) {
                    char msg[400];
                    snprintf(msg, sizeof(msg),
                             "%s names no configuration section (database, worker, dlt, "
                             "ingest, admin, log) and is ignored; did you mean %s?",
                             name, hint);
                    src->warn(src->warn_ctx, msg);
                }
            }
            continue;
        }
        int rc = apply_env(cfg, k, name, eq + 1, err);
        if (rc != QW_OK)
            return rc;
        snprintf(origins[k - keys].where, sizeof(origins[0].where), "%s", name);
    }
    return QW_OK;
}

/* ---- secrets ---- */

/* Checks a secret's text; `what` names its source in the message (never the value). */
static int check_secret_text(const char *text, size_t len, const char *what, struct qw_error *err)
{
    if (len == 0)
        return qw_error_set(err, QW_ERR_CONFIG, "%s: secret is empty", what);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x20 || c == 0x7f)
            return qw_error_set(err, QW_ERR_CONFIG,
                                "%s: secret must be one line without control characters", what);
    }
    return QW_OK;
}

/* Reads the secret file `path` into *out (malloc'd, wiped by the caller's free). */
static int read_secret_file(const char *path, char **out, struct qw_error *err)
{
    int rc = QW_OK;
    char *buf = NULL;
    size_t len = 0;
    /* O_NONBLOCK: a FIFO without a writer must not hang the load (fstat refuses it next) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return qw_error_set(err, QW_ERR_CONFIG, "%s: cannot open secret file: %s", path,
                            strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = qw_error_set(err, QW_ERR_CONFIG, "%s: cannot stat secret file: %s", path,
                          strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = qw_error_set(err, QW_ERR_CONFIG, "%s: secret file is not a regular file", path);
        goto out;
    }
    if (st.st_mode & 077) {
        rc = qw_error_set(err, QW_ERR_CONFIG,
                          "%s: secret file must not be readable by group or others (chmod 600)",
                          path);
        goto out;
    }
    buf = malloc(SECRET_MAX_BYTES + 1);
    if (!buf) {
        rc = qw_error_set(err, QW_ERR_NOMEM, "out of memory reading %s", path);
        goto out;
    }
    for (;;) {
        ssize_t n = read(fd, buf + len, SECRET_MAX_BYTES + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = qw_error_set(err, QW_ERR_CONFIG, "%s: cannot read secret file: %s", path,
                              strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > SECRET_MAX_BYTES) {
            rc = qw_error_set(err, QW_ERR_CONFIG, "%s: secret file is larger than %d bytes", path,
                              SECRET_MAX_BYTES);
            goto out;
        }
    }
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        len--;
    rc = check_secret_text(buf, len, path, err);
    if (rc != QW_OK)
        goto out;
    *out = malloc(len + 1);
    if (!*out) {
        rc = qw_error_set(err, QW_ERR_NOMEM, "out of memory reading %s", path);
        goto out;
    }
    memcpy(*out, buf, len);
    (*out)[len] = '\0';
out:
    if (buf) {
        explicit_bzero(buf, SECRET_MAX_BYTES + 1);
        free(buf);
    }
    close(fd);
    return rc;
}

static const char *env_lookup(char *const *envp, const char *name)
{
    size_t len = strlen(name);
    for (char *const *e = envp; e && *e; e++) {
        if (strncmp(*e, name, len) == 0 && (*e)[len] == '=')
            return *e + len + 1;
    }
    return NULL;
}

/* The variable wins when set and not empty; else the file, when one is named. */
static int load_secrets(struct qw_config *cfg, char *const *envp, struct qw_error *err)
{
    for (size_t i = 0; i < N_SECRETS; i++) {
        const struct secret *s = &secrets[i];
        char **slot = str_field(cfg, s->offset);
        const char *value = env_lookup(envp, s->env);
        if (value && *value) {
            size_t len = strnlen(value, SECRET_MAX_BYTES + 1);
            if (len > SECRET_MAX_BYTES)
                return qw_error_set(err, QW_ERR_CONFIG, "%s: secret is larger than %d bytes",
                                    s->env, SECRET_MAX_BYTES);
            int rc = check_secret_text(value, len, s->env, err);
            if (rc != QW_OK)
                return rc;
            *slot = strdup(value);
            if (!*slot)
                return qw_error_set(err, QW_ERR_NOMEM, "out of memory reading %s", s->env);
            continue;
        }
        const char *file = str_value(cfg, s->file_offset);
        if (file && *file) {
            int rc = read_secret_file(file, slot, err);
            if (rc != QW_OK)
                return rc;
        }
    }
    return QW_OK;
}

/* ---- cross-key rules ---- */

/* Precedence of an origin: default 0 < file 1 < environment 2 < --database 3. */
static int origin_rank(const char *where)
{
    if (!where[0])
        return 0;
    if (strncmp(where, "QUEUER_", 7) == 0)
        return 2;
    return strcmp(where, "--database") == 0 ? 3 : 1;
}

/*
 * The place to blame for a rule between keys a and b: the value set by the
 * source that wins (the environment over the file, a over b on a tie), so
 * QUEUER_WORKER_LEASE_MS=500 is blamed on the variable, not on a line of the
 * file that only set cycle_ms. *other gets the other key's origin when it
 * was set elsewhere (for a note), else NULL.
 */
static const char *blame(const struct qw_config_origin *origins, const struct key *a,
                         const struct key *b, const struct key **other_key, const char **other)
{
    const char *wa = origins[a - keys].where, *wb = origins[b - keys].where;
    bool pick_b = origin_rank(wb) > origin_rank(wa);
    const char *picked = pick_b ? wb : wa, *rest = pick_b ? wa : wb;
    *other_key = pick_b ? a : b;
    *other = origin_rank(rest) != 0 && origin_rank(rest) != origin_rank(picked) ? rest : NULL;
    return picked[0] ? picked : "built-in defaults";
}

static const struct key *key_at(size_t offset)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        if (keys[i].offset == offset)
            return &keys[i];
    }
    return NULL;
}

enum relation { REL_LESS, REL_AT_LEAST };

struct pair_rule {
    size_t a;           /* offset of the constrained key */
    enum relation rel;  /* how a must relate to b */
    size_t b;           /* offset of the other key */
    size_t unless_zero; /* offset of a key whose 0 switches the rule off, or SIZE_MAX */
};

static const struct pair_rule pair_rules[] = {
    {F(ingest_low), REL_LESS, F(ingest_high), F(ingest_high)},
    {F(worker_hard_expiry_ms), REL_AT_LEAST, F(worker_lease_ms), SIZE_MAX},
    {F(worker_cycle_ms), REL_LESS, F(worker_lease_ms), SIZE_MAX},
    {F(worker_txn_backoff_max_ms), REL_AT_LEAST, F(worker_txn_backoff_base_ms), SIZE_MAX},
    {F(dlt_retry_max_ms), REL_AT_LEAST, F(dlt_retry_base_ms), SIZE_MAX},
    {F(dlt_pause_max_ms), REL_AT_LEAST, F(dlt_pause_base_ms), SIZE_MAX},
};

static int check_rules(const struct qw_config *cfg, const struct qw_config_origin *origins,
                       struct qw_error *err)
{
    for (size_t i = 0; i < sizeof(pair_rules) / sizeof(pair_rules[0]); i++) {
        const struct pair_rule *r = &pair_rules[i];
        const struct key *a = key_at(r->a);
        const struct key *b = key_at(r->b);
        if (!a || !b)
            return qw_error_set(err, QW_ERR_CONFIG, "internal error: rule %zu names no key", i);
        if (r->unless_zero != SIZE_MAX && int_at(cfg, r->unless_zero) == 0)
            continue;
        int va = int_value(cfg, a), vb = int_value(cfg, b);
        /* -1 means "the database decides" (ingest marks): nothing to compare here. */
        if (va < 0 || vb < 0)
            continue;
        bool ok = r->rel == REL_LESS ? va < vb : va >= vb;
        if (!ok) {
            const struct key *other_key = NULL;
            const char *other = NULL;
            const char *where = blame(origins, a, b, &other_key, &other);
            char note[400] = "";
            if (other)
                snprintf(note, sizeof(note), " (%s.%s from %s)", other_key->section,
                         other_key->name, other);
            return qw_error_set(err, QW_ERR_CONFIG, "%s: %s.%s = %d must be %s %s.%s = %d%s%s",
                                where, a->section, a->name, va,
                                r->rel == REL_LESS ? "<" : ">=", b->section, b->name, vb,
                                r->unless_zero != SIZE_MAX ? " (or set it to 0)" : "", note);
        }
    }
    /* A POST must end before a claim past its soft expiry can be taken over
     * (expiry_2 - expiry_1), or a batch could reach the ledger after its
     * service moved on. */
    const struct key *timeout = key_at(F(dlt_request_timeout_ms));
    const struct key *hard = key_at(F(worker_hard_expiry_ms));
    if (timeout && hard &&
        cfg->dlt_request_timeout_ms >= cfg->worker_hard_expiry_ms - cfg->worker_lease_ms) {
        const struct key *other_key = NULL;
        const char *other = NULL;
        const char *where = blame(origins, timeout, hard, &other_key, &other);
        return qw_error_set(err, QW_ERR_CONFIG,
                            "%s: dlt.request_timeout_ms = %d must be < worker.hard_expiry_ms - "
                            "worker.lease_ms = %d (a POST must end before its claim can be taken "
                            "over)",
                            where, cfg->dlt_request_timeout_ms,
                            cfg->worker_hard_expiry_ms - cfg->worker_lease_ms);
    }
    return QW_OK;
}

/* ---- load ---- */

/* Applies --database: the same rule as the key, origin "--database". */
static int apply_database(struct qw_config *cfg, const char *value,
                          struct qw_config_origin *origins, struct qw_error *err)
{
    const struct key *k = find_key("database", "conninfo");
    bool hide = false;
    const char *why = k->rule(value, &hide);
    if (why && hide)
        return qw_error_set(err, QW_ERR_CONFIG, "--database: %s", why);
    if (why) {
        char esc[200];
        return qw_error_set(err, QW_ERR_CONFIG, "--database \"%s\": %s",
                            escape(esc, sizeof(esc), value), why);
    }
    if (set_string(cfg, k, value) != QW_OK)
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory reading --database");
    snprintf(origins[k - keys].where, sizeof(origins[0].where), "--database");
    return QW_OK;
}

int qw_config_load_from(struct qw_config *cfg, const struct qw_config_source *src,
                        char *const *envp, struct qw_error *err)
{
    struct qw_config_origin *origins = calloc(N_KEYS, sizeof(*origins));
    if (!origins) {
        memset(cfg, 0, sizeof(*cfg));
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory loading the configuration");
    }
    int rc = qw_config_defaults(cfg);
    if (rc != QW_OK) {
        free(origins);
        return qw_error_set(err, rc, "out of memory loading the configuration");
    }
    cfg->origins = origins;
    if (src->path) {
        rc = load_file(cfg, src->path, origins, err);
        if (rc != QW_OK && src->path_from && strstr(err->msg, "cannot open configuration file")) {
            size_t n = strlen(err->msg);
            snprintf(err->msg + n, sizeof(err->msg) - n, " (named by %s)", src->path_from);
        }
        if (rc != QW_OK)
            goto out;
    }
    rc = load_env(cfg, envp, origins, src, err);
    if (rc == QW_OK && src->database)
        rc = apply_database(cfg, src->database, origins, err);
    if (rc == QW_OK)
        rc = check_rules(cfg, origins, err);
    if (rc == QW_OK)
        rc = load_secrets(cfg, envp, err);
out:
    if (rc != QW_OK)
        qw_config_free(cfg);
    return rc;
}

int qw_config_load(struct qw_config *cfg, const char *path, char *const *envp, struct qw_error *err)
{
    struct qw_config_source src = {.path = path};
    return qw_config_load_from(cfg, &src, envp, err);
}

const char *qw_config_origin(const struct qw_config *cfg, const char *section, const char *name)
{
    const struct key *k = find_key(section, name);
    if (!k || !cfg->origins || !cfg->origins[k - keys].where[0])
        return NULL;
    return cfg->origins[k - keys].where;
}

/* Keys a running worker applies at SIGHUP (see run/reload.c). */
static const char *const reloadable_keys[] = {
    "log.level",
    "admin.listen",
    "dlt.pause_base_ms",
    "dlt.pause_max_ms",
};

int qw_config_reloadable(const char *section, const char *name)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", section, name);
    for (size_t i = 0; i < sizeof(reloadable_keys) / sizeof(reloadable_keys[0]); i++) {
        if (strcmp(reloadable_keys[i], full) == 0)
            return 1;
    }
    return 0;
}

static void visit_key(const struct qw_config *cfg, const struct key *k, qw_config_visit_fn *fn,
                      void *ctx)
{
    const char *origin =
        cfg->origins && cfg->origins[k - keys].where[0] ? cfg->origins[k - keys].where : NULL;
    switch (k->type) {
    case KEY_INT:
        fn(ctx, k->section, k->name, QW_CONFIG_INT, int_value(cfg, k), NULL, origin);
        break;
    case KEY_BOOL:
        fn(ctx, k->section, k->name, QW_CONFIG_BOOL, int_value(cfg, k), NULL, origin);
        break;
    case KEY_STRING: {
        const char *v = str_value(cfg, k->offset);
        fn(ctx, k->section, k->name, QW_CONFIG_STRING, 0, v ? v : "", origin);
        break;
    }
    }
}

void qw_config_visit(const struct qw_config *cfg, qw_config_visit_fn *fn, void *ctx)
{
    for (size_t i = 0; i < N_KEYS; i++)
        visit_key(cfg, &keys[i], fn, ctx);
    for (size_t s = 0; s < N_SECRETS; s++)
        fn(ctx, secrets[s].section, secrets[s].name, QW_CONFIG_SECRET,
           str_value(cfg, secrets[s].offset) != NULL, NULL, NULL);
}

static bool same_string(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

void qw_config_diff(const struct qw_config *cur, const struct qw_config *next,
                    qw_config_visit_fn *fn, void *ctx)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        const struct key *k = &keys[i];
        bool same = k->type == KEY_STRING
                        ? same_string(str_value(cur, k->offset), str_value(next, k->offset))
                        : int_value(cur, k) == int_value(next, k);
        if (!same)
            visit_key(next, k, fn, ctx);
    }
    for (size_t s = 0; s < N_SECRETS; s++) {
        const char *a = str_value(cur, secrets[s].offset);
        const char *b = str_value(next, secrets[s].offset);
        if (!same_string(a, b) || (a == NULL) != (b == NULL))
            fn(ctx, secrets[s].section, secrets[s].name, QW_CONFIG_SECRET, b != NULL, NULL, NULL);
    }
}

/* ---- printing ---- */

static bool first_of_section(size_t i)
{
    for (size_t j = 0; j < i; j++) {
        if (strcmp(keys[j].section, keys[i].section) == 0)
            return false;
    }
    return true;
}

void qw_config_print(const struct qw_config *cfg, FILE *out)
{
    char esc[4096];
    fprintf(out, "# queuer effective configuration (defaults < file < QUEUER_* environment "
                 "< --database);\n# a value that is not the default says where it came from\n");
    for (size_t i = 0; i < N_KEYS; i++) {
        if (!first_of_section(i))
            continue;
        const char *section = keys[i].section;
        fprintf(out, "\n%s = {\n", section);
        for (size_t j = i; j < N_KEYS; j++) {
            const struct key *k = &keys[j];
            if (strcmp(k->section, section) != 0)
                continue;
            switch (k->type) {
            case KEY_INT:
                fprintf(out, "  %s = %d;", k->name, int_value(cfg, k));
                break;
            case KEY_BOOL:
                fprintf(out, "  %s = %s;", k->name, int_value(cfg, k) ? "true" : "false");
                break;
            case KEY_STRING: {
                const char *v = str_value(cfg, k->offset);
                fprintf(out, "  %s = \"%s\";", k->name, escape(esc, sizeof(esc), v ? v : ""));
                break;
            }
            }
            const char *from = qw_config_origin(cfg, k->section, k->name);
            if (from)
                fprintf(out, "  # %s", from);
            fputc('\n', out);
        }
        for (size_t s = 0; s < N_SECRETS; s++) {
            if (strcmp(secrets[s].section, section) == 0)
                fprintf(out, "  # %s: %s (secret: %s or %s)\n", secrets[s].name,
                        str_value(cfg, secrets[s].offset) ? "<set>" : "<unset>", secrets[s].env,
                        secrets[s].file_key);
        }
        fprintf(out, "};\n");
    }
}

void qw_config_print_reference(FILE *out)
{
    char env[128];
    fprintf(out, "| Key | Type | Default | Bounds | Environment | Meaning |\n"
                 "|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < N_KEYS; i++) {
        const struct key *k = &keys[i];
        env_name(k, env, sizeof(env));
        fprintf(out, "| `%s.%s` | ", k->section, k->name);
        switch (k->type) {
        case KEY_INT:
            fprintf(out, "integer | `%lld` | %lld..%lld", k->def_int, k->min, k->max);
            break;
        case KEY_BOOL:
            fprintf(out, "boolean | `%s` | true/false", k->def_int ? "true" : "false");
            break;
        case KEY_STRING:
            fprintf(out, "string | `\"%s\"` | %s", k->def_str, k->rule_text ? k->rule_text : "");
            break;
        }
        fprintf(out, " | `%s` | %s%s |\n", env, k->help,
                qw_config_reloadable(k->section, k->name) ? " (reloaded at SIGHUP)" : "");
    }
}
