/*
 * Configuration: the only module that includes libconfig.h.
 *
 * Sources, later ones winning: built-in defaults, the libconfig file (if
 * any), then environment variables QUEUER_<SECTION>_<KEY> (upper case, e.g.
 * QUEUER_DLT_URL, QUEUER_ADMIN_LISTEN=off). Every key is described once in
 * the key table in config.c (name, type, default, bounds, help), which
 * drives parsing, validation, env overrides, `queuer check-config` output
 * and docs/CONFIG.md. Unknown keys and sections are errors; values out of
 * bounds are errors naming file:line (or the env variable).
 *
 * Every key remembers where its value came from (qw_config_origin), so
 * errors, `check-config` and connection failures can name the file:line,
 * the variable or the option. A QUEUER_* variable whose section is close to
 * a known one but not one (QUEUER_WROKER_LEASE_MS) is reported through the
 * warn callback of struct qw_config_source, not silently ignored.
 *
 * A few keys are reloadable: a running worker applies them at SIGHUP
 * (qw_config_reloadable); the others need a restart.
 *
 * Secrets are not keys: the database password comes from
 * QUEUER_DATABASE_PASSWORD or the file named by database.password_file, the
 * ledger token from QUEUER_DLT_TOKEN or dlt.token_file. A secret file must
 * be a regular file not readable by group or others. Secrets are never
 * printed (check-config shows "<set>" or "<unset>").
 *
 * Strings in struct qw_config are owned by it; qw_config_free() releases
 * them. The struct is filled once at start-up and read-only afterwards, so
 * threads may read it without locks.
 */
#ifndef QW_CONFIG_CONFIG_H
#define QW_CONFIG_CONFIG_H

#include "common/err.h"

#include <stdio.h>

struct qw_config {
    /* [database] */
    char *db_conninfo;          /* libpq conninfo without password; default "" = libpq's
                                   defaults (PGHOST, PGDATABASE, ...) */
    char *db_listen_conninfo;   /* libpq conninfo of the connection that only LISTENs
                                   (direct or session-pooled), "" = LISTEN on db_conninfo */
    char *db_password_file;     /* path of a private file holding the password, or "" */
    int db_connect_timeout_s;   /* seconds, 1..300, default 5 */
    int db_query_timeout_ms;    /* client-side deadline per statement, 100..600000, default 10000 */
    int db_prepared_statements; /* bool: named prepared statements (off behind a transaction
                                   pooler without prepared-statement support), default 1 */

    /* [worker] */
    char *worker_instance_id;  /* "" = generated as <host>-<pid>-<random> */
    int worker_cycle_ms;       /* cycle period, 10..600000, default 1000 */
    int worker_lease_ms;       /* expiry_1 = now() + lease, 100..3600000, default 30000 */
    int worker_hard_expiry_ms; /* expiry_2 = now() + hard, >= lease, ..86400000, default 180000 */
    int worker_claim_slack;    /* extra claims over the fair share, 0..100000, default 4 */
    int worker_max_claims;     /* hard cap on claims, 0 = none, default 0 */
    int worker_listen;         /* bool: LISTEN for wake-ups (off behind transaction poolers) */
    int worker_queue_capacity; /* bounded queuer->submitter queue, 1..1000000, default 4096 */
    int worker_shutdown_grace_ms;   /* bound on finishing in-flight work at SIGTERM, default 5000 */
    int worker_txn_max_attempts;    /* serializable retries per transaction, 1..1000, default 20 */
    int worker_txn_max_ms;          /* time budget per retried transaction, default 10000 */
    int worker_txn_backoff_base_ms; /* full-jitter backoff base, 1..10000, default 2 */
    int worker_txn_backoff_max_ms;  /* backoff cap, >= base, default 200 */

    /* [dlt] */
    char *dlt_url;              /* ledger base URL(s), comma-separated nodes of one ledger,
                                   default "http://127.0.0.1:8008" */
    char *dlt_token_file;       /* private file holding the bearer token, or "" */
    char *dlt_ca_file;          /* CA bundle for TLS verification, "" = system default */
    int dlt_connect_timeout_ms; /* 100..60000, default 3000 */
    int dlt_request_timeout_ms; /* whole POST, 100..600000, default 10000 */
    int dlt_max_in_flight;      /* concurrent HTTP requests, 1..10000, default 256 */
    int dlt_channels;           /* POSTs in flight per node, 1..10000, default 64 */
    int dlt_priority_aging_ms;  /* waiting time per priority step gained, ms, default 1000 */
    int dlt_max_response_bytes; /* response body cap, 1024..67108864, default 1048576 */
    int dlt_status_wait_s;      /* long-poll wait=N, 0..60, default 10 */
    int dlt_unknown_confirm_ms; /* re-check delay before resubmitting Unknown, default 2000 */
    int dlt_max_attempts;       /* submissions per batch, 0 = unlimited, default 0 */
    int dlt_retry_base_ms;      /* Delayed backoff base, 1..3600000, default 250 */
    int dlt_retry_max_ms;       /* Delayed backoff cap, >= base, default 30000 */
    int dlt_pause_base_ms;      /* 429 pause base, 1..3600000, default 100 */
    int dlt_pause_max_ms;       /* 429 pause cap, >= base, default 10000 */
    char *dlt_ledger;           /* name of the shared capacity row, default "default" */
    char *dlt_cost;             /* batch | transactions | bytes, default "batch" */

    /* [ingest] */
    int ingest_high;              /* back pressure on at this backlog, 0 = off, default 30 */
    int ingest_low;               /* and off again below this, < high, default 15 */
    int ingest_max_payload_bytes; /* 1..67108864, default 1048576 */

    /* [admin] */
    char *admin_listen; /* "host:port" or "off", default "127.0.0.1:9187" */

    /* [log] */
    char *log_level; /* debug | info | warn | error, default "info" */

    /* secrets, loaded from env or files, never printed */
    char *db_password; /* NULL when unset */
    char *dlt_token;   /* NULL when unset */

    struct qw_config_origin *origins; /* per key: where its value came from; owned */
};

/** Where a load takes its values from, besides defaults and the environment. */
struct qw_config_source {
    const char *path;      /* configuration file, NULL = none */
    const char *path_from; /* how the file was named ("-c", "QUEUER_CONFIG"), or NULL */
    const char *database;  /* --database CONNINFO: wins over file and environment, or NULL */
    void (*warn)(void *ctx, const char *msg); /* non-fatal findings; NULL drops them */
    void *warn_ctx;                           /* passed to warn */
};

/** Fills `cfg` with the built-in defaults (allocates the strings). */
int qw_config_defaults(struct qw_config *cfg);

/**
 * Loads defaults, then `path` (NULL = no file), then overrides from `envp`
 * (a NULL-terminated "NAME=value" array, normally `environ`), then secrets,
 * then checks cross-key rules (low < high, hard >= lease, ...). On failure
 * `err->msg` names the file:line or variable and the rule; `cfg` is freed.
 */
QW_MUST_CHECK int qw_config_load(struct qw_config *cfg, const char *path, char *const *envp,
                                 struct qw_error *err);

/**
 * Like qw_config_load() with the sources of `src`: the file, then `envp`,
 * then src->database (origin "--database"). Warnings (a QUEUER_* variable
 * that looks like a misspelt key) go to src->warn.
 */
QW_MUST_CHECK int qw_config_load_from(struct qw_config *cfg, const struct qw_config_source *src,
                                      char *const *envp, struct qw_error *err);

/**
 * Where the value of key `section`.`name` came from: "FILE:LINE", a
 * variable name or "--database"; NULL for the built-in default or an
 * unknown key. Valid while `cfg` is.
 */
const char *qw_config_origin(const struct qw_config *cfg, const char *section, const char *name);

/** True for the keys a running worker applies at SIGHUP. */
int qw_config_reloadable(const char *section, const char *name);

/** Kinds of values passed to a qw_config_visit_fn. */
enum qw_config_kind {
    QW_CONFIG_INT,    /* `num` holds it */
    QW_CONFIG_BOOL,   /* `num` is 0 or 1 */
    QW_CONFIG_STRING, /* `str` holds it */
    QW_CONFIG_SECRET, /* `num` is 1 when set; the value is never passed */
};

/** One key: its effective value and origin (NULL = default). */
typedef void qw_config_visit_fn(void *ctx, const char *section, const char *name,
                                enum qw_config_kind kind, long long num, const char *str,
                                const char *origin);

/** Calls `fn` for every key and secret of `cfg`, in table order. */
void qw_config_visit(const struct qw_config *cfg, qw_config_visit_fn *fn, void *ctx);

/**
 * Calls `fn` (value arguments from `next`) for every key whose value
 * differs between `cur` and `next`; secrets are compared, never passed.
 */
void qw_config_diff(const struct qw_config *cur, const struct qw_config *next,
                    qw_config_visit_fn *fn, void *ctx);

/** Frees the strings held by `cfg` (wiping secrets first). */
void qw_config_free(struct qw_config *cfg);

/** Prints every key and its effective value in libconfig syntax; secrets redacted. */
void qw_config_print(const struct qw_config *cfg, FILE *out);

/** Prints the key table as a Markdown table (for docs/CONFIG.md). */
void qw_config_print_reference(FILE *out);

#endif
