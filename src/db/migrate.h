/*
 * Schema migrations: the numbered files of migrations/, embedded at build
 * time, applied forward-only, one transaction each, recorded in
 * queuer.schema_migrations. Concurrent runs serialise on an advisory lock,
 * so two `queuer migrate` at once are safe and the second finds nothing to do.
 */
#ifndef QW_DB_MIGRATE_H
#define QW_DB_MIGRATE_H

#include "common/err.h"
#include "db/db.h"

#include <stdio.h>

/** Version number of the newest embedded migration. */
int qw_migrate_latest(void);

/**
 * Applies pending migrations, printing one line per applied migration to
 * `report` (may be NULL). *applied (may be NULL) gets how many ran.
 */
QW_MUST_CHECK int qw_migrate_apply(struct qw_db *db, FILE *report, int *applied,
                                   struct qw_error *err);

/**
 * qw_migrate_apply() up to migration `target` only (a version this binary
 * holds): to bring a database to an older schema, e.g. to check what a
 * later migration does to the data it finds.
 */
QW_MUST_CHECK int qw_migrate_apply_to(struct qw_db *db, int target, FILE *report, int *applied,
                                      struct qw_error *err);

/** One migration as `queuer migrate --status` shows it. */
struct qw_migration_info {
    int version;         /* its number */
    const char *name;    /* embedded file name without ".sql" (static), or NULL if unknown */
    const char *sql;     /* embedded text (static); NULL for one this binary does not know */
    char applied_at[40]; /* when it was applied, UTC ISO 8601; "" = pending */
};

/**
 * Lists every embedded migration, and any recorded one this binary does
 * not know, in version order, with when each was applied. Reads only (no
 * lock, nothing created). *out is malloc'd (caller frees); *db_version gets
 * the schema version (0 = no schema).
 */
QW_MUST_CHECK int qw_migrate_list(struct qw_db *db, struct qw_migration_info **out, size_t *n,
                                  int *db_version, struct qw_error *err);

/**
 * Reads the schema version into *version (0 = no schema). Returns
 * QW_ERR_SCHEMA with an explanation when it is not qw_migrate_latest().
 */
QW_MUST_CHECK int qw_migrate_check(struct qw_db *db, int *version, struct qw_error *err);

#endif
