/*
 * Integration-test helpers: a fresh database per test in the private
 * cluster that with-pg.sh started (QW_TEST_CONNINFO), SQL shortcuts that
 * fail the test on error, and running the built `queuer` binary.
 */
#ifndef QW_TESTS_ITEST_H
#define QW_TESTS_ITEST_H

#include "db/db.h"
#include "queuer/claims.h"

#include <stddef.h>
#include <stdint.h>

/** Conninfo of the cluster's maintenance database (QW_TEST_CONNINFO). */
const char *itest_base_conninfo(void);

/**
 * Creates a new database named after `hint` (plus pid and a counter) and,
 * if `migrate`, applies all migrations. Returns its conninfo (malloc'd).
 */
char *itest_db_create(const char *hint, int migrate);

/**
 * itest_db_create() with `options` appended to CREATE DATABASE (e.g.
 * "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'").
 */
char *itest_db_create_with(const char *hint, const char *options, int migrate);

/** Connects to `conninfo` or fails the test. */
struct qw_db *itest_connect(const char *conninfo);

/** Connects to `conninfo` as login role `role` (trust authentication in the test cluster). */
struct qw_db *itest_connect_as(const char *conninfo, const char *role);

/** A live instance for itest_pair_open(): its id and its leases, from now. */
struct itest_instance {
    const char *id; /* instance_id */
    int lease_1_ms; /* soft lease: lease_1 = now() + this, ms */
    int lease_2_ms; /* hard lease: lease_2 = now() + this, ms */
};

/**
 * A fresh migrated database and two sessions on it (the claim tests'
 * fixtures). A fixture embeds it as its first member, so that
 * itest_pair_teardown() can close it and free the fixture.
 */
struct itest_pair {
    char *conninfo;  /* the database's conninfo (malloc'd) */
    struct qw_db *a; /* first session */
    struct qw_db *b; /* second session */
};

/**
 * Creates and migrates a database named after `hint` (itest_db_create()),
 * connects `p->a` and `p->b` to it, and registers the `n` instances of
 * `live` in queuer.instances in one transaction (host 'h', pid its place in
 * `live` plus 1, version 'v'). Fails the test on error.
 */
void itest_pair_open(struct itest_pair *p, const char *hint, const struct itest_instance *live,
                     size_t n);

/**
 * A cmocka teardown for a calloc'd fixture whose first member is a struct
 * itest_pair: closes both sessions, frees the conninfo and the fixture.
 */
int itest_pair_teardown(void **state);

/**
 * The incarnation of `instance` (queuer.instances), as the fenced
 * statements take it: decimal text (malloc'd). Fails the test when the
 * instance has no row.
 */
char *itest_incarnation(struct qw_db *db, const char *instance);

/**
 * A new session on `conninfo` that LISTENs on the own channel of
 * `instance` (QW_CLAIMS_CHANNEL_PREFIX and its current incarnation), as
 * that instance's worker does. Close it with qw_db_close(). Fails the test
 * on error.
 */
struct qw_db *itest_listen_instance(const char *conninfo, const char *instance);

/**
 * Waits up to `timeout_ms` for a notification on `db`, then collects those
 * that follow within 100 ms of each other. Returns their payloads in
 * arrival order, each followed by a newline (malloc'd; "" when none came).
 */
char *itest_notifications(struct qw_db *db, int timeout_ms);

/** Runs `sql` (simple protocol) or fails the test. */
void itest_exec(struct qw_db *db, const char *sql);

/** Runs `sql` and returns the integer in row 0 column 0, failing the test on error. */
int64_t itest_scalar(struct qw_db *db, const char *sql);

/** Runs `sql` and returns row 0 column 0 as a malloc'd string (NULL for no rows / NULL). */
char *itest_string(struct qw_db *db, const char *sql);

/**
 * Writes `len` bytes to a new file in $TMPDIR (or /tmp) named `hint`-XXXXXX
 * and returns its malloc'd path; the caller unlinks and frees it.
 */
char *itest_temp_file(const char *hint, const void *data, size_t len);

/**
 * Runs `argv` (argv[0] a path) with `env` entries ("NAME=value") added to
 * the environment, `input` (may be NULL) on stdin; captures stdout and
 * stderr into malloc'd strings if the pointers are not NULL. Returns the
 * exit status (128+signal if killed).
 */
int itest_run(const char *const *argv, const char *const *env, const char *input, char **out,
              char **errout);

/**
 * Sample batch `seed` (ingest/batchlist.h): writes its id to `id_out` and
 * returns its payload as hex (malloc'd).
 */
char *itest_sample_hex(uint64_t seed, char id_out[129]);

/**
 * Enqueues sample batch `seed` (ingest/batchlist.h: the id and the payload
 * follow from the seed) for `service` through queuer.enqueue_batch(), and
 * writes its id to `id_out` (129 bytes) when not NULL. Returns the result;
 * `err` says why it failed (the SQLSTATE of a refusal).
 */
int itest_enqueue_sample_try(struct qw_db *db, const char *service, uint64_t seed, char *id_out,
                             struct qw_error *err) QW_MUST_CHECK;

/** itest_enqueue_sample_try(), failing the test unless it succeeds. */
void itest_enqueue_sample(struct qw_db *db, const char *service, uint64_t seed, char *id_out);

/** itest_enqueue_sample() at batch priority `priority` (migration 0010 on). */
void itest_enqueue_sample_at(struct qw_db *db, const char *service, uint64_t seed, int priority,
                             char *id_out);

/**
 * Marks batch `batch_id` of `service` for submission as `instance` (its
 * incarnation `inc`) holding the claim at `epoch`, having seen it in state
 * `seen` ("" = no status): sql/batches_mark.sql. Returns the rows marked
 * (0 or 1) or fails the test on an error.
 */
int itest_mark(struct qw_db *db, const char *instance, const char *inc, const char *service,
               const char *batch_id, int64_t epoch, const char *seen);

/**
 * One claims cycle of `instance` on `db` as the worker runs it (the fair
 * share, maintenance, then the claims transaction with pickup): it holds
 * `held` claims before the call, gives back `release` (a text[] literal of
 * surplus claims, or NULL) and may hold `max_claims` (0 = no cap). Fills
 * `r` (free it with qw_claims_result_free()) or fails the test.
 */
void itest_claims_cycle(struct qw_db *db, const char *instance, size_t held, const char *release,
                        int max_claims, struct qw_claims_result *r);

/** Path of the built queuer binary (QUEUER_BIN). */
const char *itest_queuer_bin(void);

#endif
