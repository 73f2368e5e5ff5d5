/* Applies the embedded migrations under an advisory lock; see migrate.h. */
#include "db/migrate.h"
#include "common/embedded.h"
#include "db/txn.h"

#include <stdlib.h>
#include <string.h>

/* pg_advisory_lock key shared by every `queuer migrate` ("queu"). */
#define QW_MIGRATE_LOCK_KEY "1903519093"

static int migration_version(const char *name)
{
    return atoi(name);
}

int qw_migrate_latest(void)
{
    int latest = 0;
    for (const struct qw_embedded *m = qw_migrations; m->name; m++) {
        int v = migration_version(m->name);
        if (v > latest)
            latest = v;
    }
    return latest;
}

static int current_version(struct qw_db *db, int *version, struct qw_error *err)
{
    struct qw_db_res *res = NULL;
    int rc = qw_db_query_sql(db,
                             "SELECT CASE WHEN to_regclass('queuer.schema_migrations') IS NULL "
                             "THEN -1 ELSE 0 END",
                             0, NULL, &res, err);
    if (rc != QW_OK)
        return rc;
    int exists = qw_db_res_int(res, 0, 0) == 0;
    qw_db_res_free(res);
    if (!exists) {
        *version = 0;
        return QW_OK;
    }
    rc = qw_db_query_sql(db, "SELECT coalesce(max(version), 0) FROM queuer.schema_migrations", 0,
                         NULL, &res, err);
    if (rc != QW_OK)
        return rc;
    *version = (int)qw_db_res_int(res, 0, 0);
    qw_db_res_free(res);
    return QW_OK;
}

static int apply_one(struct qw_db *db, const struct qw_embedded *m, struct qw_error *err)
{
    int rc = qw_txn_begin(db, err);
    if (rc != QW_OK)
        return rc;
    rc = qw_db_exec(db, m->text, err);
    if (rc == QW_OK) {
        char version[16];
        snprintf(version, sizeof(version), "%d", migration_version(m->name));
        const char *params[] = {version, m->name};
        rc = qw_db_query_sql(db,
                             "INSERT INTO queuer.schema_migrations (version, name) "
                             "VALUES ($1::integer, $2)",
                             2, params, NULL, err);
    }
    if (rc == QW_OK)
        return qw_txn_commit(db, err);
    qw_txn_rollback(db);
    char why[sizeof(err->msg)];
    snprintf(why, sizeof(why), "%s", err->msg);
    snprintf(err->msg, sizeof(err->msg), "migration %s failed: %.400s", m->name, why);
    return rc;
}

/* Refuses to start when migration 0001 could not create the group roles. */
static int check_roles(struct qw_db *db, struct qw_error *err)
{
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "migrate_roles_missing", 0, NULL, &res, err);
    if (rc != QW_OK)
        return rc;
    if (!qw_db_res_isnull(res, 0, 0))
        rc = qw_error_set(err, QW_ERR_DB,
                          "role(s) %s do not exist and this role may not create them: "
                          "run queuer migrate as a role with CREATEROLE, or have an "
                          "administrator create them once (CREATE ROLE queuer_worker NOLOGIN; "
                          "likewise queuer_operator, queuer_enqueuer and queuer_loader, and GRANT "
                          "queuer_loader TO the owner); see "
                          "docs/OPERATIONS.md, Roles",
                          qw_db_res_get(res, 0, 0));
    qw_db_res_free(res);
    return rc;
}

int qw_migrate_apply(struct qw_db *db, FILE *report, int *applied, struct qw_error *err)
{
    return qw_migrate_apply_to(db, qw_migrate_latest(), report, applied, err);
}

int qw_migrate_apply_to(struct qw_db *db, int target, FILE *report, int *applied,
                        struct qw_error *err)
{
    int count = 0;
    int rc = qw_db_exec(db, "SELECT pg_advisory_lock(" QW_MIGRATE_LOCK_KEY ")", err);
    if (rc != QW_OK)
        return rc;
    rc = check_roles(db, err);
    if (rc == QW_OK)
        rc = qw_db_exec(db,
                        "SET client_min_messages = warning;"
                        "CREATE SCHEMA IF NOT EXISTS queuer;"
                        "CREATE TABLE IF NOT EXISTS queuer.schema_migrations ("
                        " version integer PRIMARY KEY,"
                        " name text NOT NULL,"
                        " applied_at timestamptz NOT NULL DEFAULT now())",
                        err);
    int version = 0;
    if (rc == QW_OK)
        rc = current_version(db, &version, err);
    if (rc == QW_OK && version > qw_migrate_latest()) {
        rc = qw_error_set(err, QW_ERR_SCHEMA,
                          "database schema is version %d, newer than this binary knows (%d)",
                          version, qw_migrate_latest());
    }
    for (const struct qw_embedded *m = qw_migrations; rc == QW_OK && m->name; m++) {
        if (migration_version(m->name) <= version || migration_version(m->name) > target)
            continue;
        rc = apply_one(db, m, err);
        if (rc == QW_OK) {
            count++;
            if (report)
                fprintf(report, "applied %s\n", m->name);
        }
    }
    if (rc == QW_OK && report)
        fprintf(report,
                count ? "schema is now at version %d\n" : "schema is up to date (version %d)\n",
                target);
    if (qw_db_ok(db)) {
        struct qw_error ignored;
        int unlocked =
            qw_db_exec(db, "SELECT pg_advisory_unlock(" QW_MIGRATE_LOCK_KEY ")", &ignored);
        (void)unlocked; /* best effort: the end of the session releases the lock too */
    }
    if (applied)
        *applied = count;
    return rc;
}

static struct qw_migration_info *find_info(struct qw_migration_info *list, size_t n, int version)
{
    for (size_t i = 0; i < n; i++) {
        if (list[i].version == version)
            return &list[i];
    }
    return NULL;
}

int qw_migrate_list(struct qw_db *db, struct qw_migration_info **out, size_t *n, int *db_version,
                    struct qw_error *err)
{
    *out = NULL;
    *n = 0;
    size_t embedded = 0;
    while (qw_migrations[embedded].name)
        embedded++;
    int rc = current_version(db, db_version, err);
    struct qw_db_res *res = NULL;
    if (rc == QW_OK && *db_version > 0)
        rc = qw_db_query_sql(db,
                             "SELECT version, to_char(applied_at AT TIME ZONE 'UTC', "
                             "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM queuer.schema_migrations "
                             "ORDER BY version",
                             0, NULL, &res, err);
    if (rc != QW_OK)
        return rc;
    int rows = res ? qw_db_res_rows(res) : 0;
    struct qw_migration_info *list = calloc(embedded + (size_t)rows + 1, sizeof(*list));
    if (!list) {
        qw_db_res_free(res);
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }
    size_t count = 0;
    for (size_t i = 0; i < embedded; i++) {
        list[count].version = migration_version(qw_migrations[i].name);
        list[count].name = qw_migrations[i].name;
        list[count].sql = qw_migrations[i].text;
        count++;
    }
    for (int r = 0; r < rows; r++) {
        int v = (int)qw_db_res_int(res, r, 0);
        struct qw_migration_info *m = find_info(list, count, v);
        if (!m) {
            m = &list[count++];
            m->version = v;
        }
        snprintf(m->applied_at, sizeof(m->applied_at), "%s", qw_db_res_get(res, r, 1));
    }
    qw_db_res_free(res);
    *out = list;
    *n = count;
    return QW_OK;
}

int qw_migrate_check(struct qw_db *db, int *version, struct qw_error *err)
{
    int v = 0;
    int rc = current_version(db, &v, err);
    if (rc != QW_OK)
        return rc;
    if (version)
        *version = v;
    if (v == 0)
        return qw_error_set(err, QW_ERR_SCHEMA,
                            "the database has no queuer schema; run 'queuer migrate' first");
    if (v < qw_migrate_latest())
        return qw_error_set(err, QW_ERR_SCHEMA,
                            "the database schema is version %d but this binary needs %d; "
                            "run 'queuer migrate'",
                            v, qw_migrate_latest());
    if (v > qw_migrate_latest())
        return qw_error_set(err, QW_ERR_SCHEMA,
                            "the database schema is version %d, newer than this binary (%d); "
                            "upgrade queuer",
                            v, qw_migrate_latest());
    return QW_OK;
}
