/*
 * The oldest snapshot that holds back vacuum, as `queuer status` and the
 * workers' watch read it (sql/ops_status_snapshot.sql over the view
 * queuer.snapshot_holders). Apart from status.h so that a worker thread
 * reads it without the renderers' JSON library.
 */
#ifndef QW_ADMIN_SNAPSHOT_H
#define QW_ADMIN_SNAPSHOT_H

#include "common/err.h"

#include <stddef.h>
#include <stdint.h>

struct qw_db;

/**
 * The oldest snapshot that holds back vacuum (sql/ops_status_snapshot.sql:
 * queuer.snapshot_holders past its thresholds); strings truncated to fit.
 */
struct qw_status_snapshot {
    int64_t holders;      /* snapshots past the thresholds; 0 = none (the rest is unset) */
    char kind[24];        /* session | prepared | replication slot */
    int64_t pid;          /* its process (a session, an active slot's user); 0 = none */
    char role[64];        /* its role, "" = not known (a slot) */
    char application[64]; /* application_name, a prepared transaction's gid or a slot's name */
    char state[32];       /* a session's state, "" = not visible to the reading role */
    int64_t xids_behind;  /* transactions begun since its snapshot */
    int64_t open_s;       /* seconds its transaction has been open; -1 = not visible */
};

/**
 * Fills `s` with the oldest snapshot that holds back vacuum, as
 * qw_status_load() does (holders 0: none). One read-only statement on
 * `db`; readable by queuer_operator and queuer_worker.
 */
QW_MUST_CHECK int qw_status_load_snapshot(struct qw_db *db, struct qw_status_snapshot *s,
                                          struct qw_error *err);

/**
 * Describes the snapshot `s` (holders > 0) in one line: what holds it, for
 * how long, how far behind, e.g. "session pid 4209 (role app, application
 * psql, idle in transaction): open 12m3s, 45678 transactions behind".
 * Writes at most `len` bytes to `out`. Pure.
 */
void qw_status_snapshot_text(const struct qw_status_snapshot *s, char *out, size_t len);

#endif
