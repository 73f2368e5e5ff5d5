/* The grouped, fenced outcome write; see outcome_writer.h. */
#include "submitter/outcome_writer.h"

#include "db/txn.h"
#include "dlt/dlt_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLAIN_RETRY_MAX_MS (7LL * 24 * 3600 * 1000) /* a plain form's retry delay cap */

enum result_col {
    COL_KIND = 0,      /* 'w' written, 'n' next batch marked, 's' skipped (claim row
                          locked), 'm' a next batch found but not marked */
    COL_BATCH_ID,      /* the batch */
    COL_SERVICE_ID,    /* n: its service */
    COL_EPOCH,         /* n: claim epoch */
    COL_ATTEMPTS,      /* n: attempts so far */
    COL_PAYLOAD,       /* n: bytea */
    COL_LEASE_LEFT_MS, /* n: lease left */
    COL_ORD,           /* position (from 1) of the outcome in the array */
    COL_PRIORITY,      /* n: the batch's priority */
};

void qw_outcome_writer_init(struct qw_outcome_writer *w)
{
    qw_pgarray_init(&w->param);
    w->res = NULL;
    w->isolated = NULL;
    w->n_isolated = 0;
}

/* Frees the results of the last write. */
static void results_free(struct qw_outcome_writer *w)
{
    qw_db_res_free(w->res);
    w->res = NULL;
    for (size_t i = 0; i < w->n_isolated; i++)
        qw_db_res_free(w->isolated[i]);
    free(w->isolated);
    w->isolated = NULL;
    w->n_isolated = 0;
}

void qw_outcome_writer_free(struct qw_outcome_writer *w)
{
    qw_pgarray_free(&w->param);
    results_free(w);
}

/* Appends one queuer.outcome element (migrations/0004_outcome_type.sql, column order). */
static int append_outcome(struct qw_pgarray *a, const struct qw_outcome_item *item)
{
    const struct qw_outcome *o = &item->outcome;
    const char *expect = qw_outcome_expect_name(o->expect);
    const char *status = qw_batch_status_name(o->status);
    if (!expect || (unsigned)o->status >= QW_STATUS_COUNT)
        return QW_ERR_INVALID;
    qw_pgarray_row_begin(a);
    qw_pgarray_row_text(a, item->job->batch_id);
    qw_pgarray_row_text(a, item->job->service_id);
    qw_pgarray_row_int(a, item->job->epoch);
    qw_pgarray_row_text(a, expect);
    qw_pgarray_row_text(a, o->status == QW_STATUS_NONE ? NULL : status);
    qw_pgarray_row_bool(a, o->submitted);
    qw_pgarray_row_int(a, o->attempts_add);
    if (o->retry_ms == QW_OUTCOME_NO_RETRY)
        qw_pgarray_row_null(a);
    else
        qw_pgarray_row_int(a, o->retry_ms);
    qw_pgarray_row_text(a, o->last_error[0] ? o->last_error : NULL);
    qw_pgarray_row_text(a, o->detail[0] ? o->detail : NULL);
    qw_pgarray_row_bool(a, o->posted);
    qw_pgarray_row_bool(a, o->go_on);
    qw_pgarray_row_end(a);
    return QW_OK;
}

/* Sends `n` outcomes in one statement; on success *res holds the result. */
static int send(struct qw_outcome_writer *w, struct qw_db *db, const char *instance_id,
                const char *incarnation, const struct qw_outcome_item *items, size_t n,
                struct qw_db_res **res, struct qw_error *err)
{
    qw_pgarray_reset(&w->param);
    for (size_t i = 0; i < n; i++) {
        if (append_outcome(&w->param, &items[i]) != QW_OK)
            return qw_error_set(err, QW_ERR_INVALID,
                                "outcome %zu has an unknown expectation or status", i);
    }
    const char *params[3] = {instance_id, qw_pgarray_finish(&w->param), incarnation};
    if (!params[1])
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    return qw_db_query(db, "outcomes_record", 3, params, res, err);
}

/* Reads which of the `n` items a result wrote, and their next batches. */
static void collect(struct qw_db_res *res, struct qw_outcome_item *items, size_t n)
{
    for (int row = 0; row < qw_db_res_rows(res); row++) {
        int64_t ord = qw_db_res_int(res, row, COL_ORD);
        if (ord < 1 || (uint64_t)ord > n)
            continue;
        struct qw_outcome_item *item = &items[ord - 1];
        char kind = qw_db_res_get(res, row, COL_KIND)[0];
        if (kind == 'w') {
            item->written = true;
        } else if (kind == 's') {
            item->skipped = true;
        } else if (kind == 'm') {
            item->more = true;
        } else if (item->next_row < 0) {
            item->next_row = row;
            item->res = res;
        }
    }
}

/* Whether retrying the same statement later may succeed. */
static bool transient(int rc)
{
    return rc == QW_ERR_DB_CONN || rc == QW_ERR_TIMEOUT || rc == QW_ERR_SERIALIZATION ||
           rc == QW_ERR_OUTCOME_UNKNOWN || rc == QW_ERR_NOMEM;
}

/*
 * The plain form of an outcome the database refused: the same state
 * change with plain ASCII texts naming the refusal, and a retry delay
 * within bounds, so the batch's turn goes on and an operator can see why.
 */
static void plain_form(struct qw_outcome *o, const struct qw_error *why)
{
    char msg[160];
    qw_dlt_text_sanitize(msg, sizeof(msg), why->msg, strlen(why->msg));
    for (char *p = msg; *p; p++) {
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    }
    snprintf(o->last_error, sizeof(o->last_error),
             "outcome refused by the database (SQLSTATE %s: %s)", why->sqlstate, msg);
    snprintf(o->detail, sizeof(o->detail), "%s", o->last_error);
    if (o->retry_ms > PLAIN_RETRY_MAX_MS)
        o->retry_ms = PLAIN_RETRY_MAX_MS;
    else if (o->retry_ms < 0 && o->retry_ms != QW_OUTCOME_RETRY_NEVER &&
             o->retry_ms != QW_OUTCOME_NO_RETRY)
        o->retry_ms = 0;
}

/*
 * Writes each outcome on its own under a savepoint, in one transaction,
 * after the group statement failed for a reason a retry will not fix: the
 * outcomes the database accepts are written, one it refuses is written in
 * its plain form (or, if that is refused too, left out and flagged), so a
 * single bad outcome never holds back the others. A transient failure
 * rolls everything back (the group is retried as a whole later).
 */
static int write_isolated(struct qw_outcome_writer *w, struct qw_db *db, const char *instance_id,
                          const char *incarnation, struct qw_outcome_item *items, size_t n,
                          struct qw_error *err)
{
    w->isolated = calloc(n, sizeof(*w->isolated));
    if (!w->isolated)
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    w->n_isolated = n;
    int rc = qw_txn_begin(db, err);
    for (size_t i = 0; rc == QW_OK && i < n; i++) {
        struct qw_outcome_item *item = &items[i];
        for (int form = 0; rc == QW_OK && form < 2; form++) {
            struct qw_error why;
            qw_error_clear(&why);
            rc = qw_txn_savepoint(db, err);
            if (rc != QW_OK)
                break;
            int q = send(w, db, instance_id, incarnation, item, 1, &w->isolated[i], &why);
            if (q == QW_OK) {
                collect(w->isolated[i], item, 1);
                rc = qw_txn_savepoint_release(db, err);
                break;
            }
            if (transient(q)) {
                *err = why;
                rc = q;
                break;
            }
            rc = qw_txn_savepoint_rollback(db, err);
            if (form == 0) {
                item->isolated = true;
                snprintf(item->sqlstate, sizeof(item->sqlstate), "%s", why.sqlstate);
                plain_form(&item->outcome, &why);
            } else {
                item->refused = true;
            }
        }
    }
    if (rc == QW_OK)
        rc = qw_txn_commit(db, err);
    if (rc != QW_OK)
        qw_txn_rollback(db);
    return rc;
}

int qw_outcome_writer_write(struct qw_outcome_writer *w, struct qw_db *db, const char *instance_id,
                            const char *incarnation, struct qw_outcome_item *items, size_t n,
                            struct qw_error *err)
{
    results_free(w);
    for (size_t i = 0; i < n; i++) {
        items[i].written = items[i].skipped = items[i].more = items[i].isolated = items[i].refused =
            items[i].rechecked = false;
        items[i].sqlstate[0] = '\0';
        items[i].next_row = -1;
        items[i].res = NULL;
    }
    int rc = send(w, db, instance_id, incarnation, items, n, &w->res, err);
    if (rc == QW_OK) {
        collect(w->res, items, n);
        return QW_OK;
    }
    if (rc == QW_ERR_INVALID || transient(rc))
        return rc;
    /* The database refused the group (not a lost connection, a lock or a
     * timeout): one of its outcomes is to blame. */
    rc = write_isolated(w, db, instance_id, incarnation, items, n, err);
    if (rc != QW_OK) {
        results_free(w);
        for (size_t i = 0; i < n; i++) {
            items[i].written = items[i].refused = false;
            items[i].next_row = -1;
            items[i].res = NULL;
        }
    }
    return rc;
}

int qw_outcome_writer_recheck(struct qw_outcome_writer *w, struct qw_db *db,
                              const char *instance_id, struct qw_outcome_item *items, size_t n,
                              struct qw_error *err)
{
    /* Only the items the last write did not record; `index` maps back. */
    size_t *index = calloc(n ? n : 1, sizeof(*index));
    if (!index)
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    qw_pgarray_reset(&w->param);
    size_t m = 0;
    int rc = QW_OK;
    for (size_t i = 0; i < n && rc == QW_OK; i++) {
        if (items[i].written || items[i].refused || items[i].skipped)
            continue;
        rc = append_outcome(&w->param, &items[i]);
        index[m++] = i;
    }
    const char *params[2] = {instance_id, qw_pgarray_finish(&w->param)};
    struct qw_db_res *res = NULL;
    if (rc == QW_OK && m > 0 && !params[1])
        rc = qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    if (rc == QW_OK && m > 0)
        rc = qw_db_query(db, "outcomes_recheck", 2, params, &res, err);
    for (int row = 0; rc == QW_OK && row < qw_db_res_rows(res); row++) {
        int64_t ord = qw_db_res_int(res, row, 0);
        if (ord >= 1 && (uint64_t)ord <= m) {
            items[index[ord - 1]].written = true;
            items[index[ord - 1]].rechecked = true;
        }
    }
    qw_db_res_free(res);
    free(index);
    return rc;
}

void qw_outcome_writer_next(const struct qw_outcome_item *item, struct qw_next_batch *out)
{
    const struct qw_db_res *res = item->res;
    int row = item->next_row;
    out->batch_id = qw_db_res_get(res, row, COL_BATCH_ID);
    out->epoch = qw_db_res_int(res, row, COL_EPOCH);
    out->attempts = (int)qw_db_res_int(res, row, COL_ATTEMPTS);
    out->payload_hex = qw_db_res_get(res, row, COL_PAYLOAD);
    out->lease_left_ms = qw_db_res_int(res, row, COL_LEASE_LEFT_MS);
    out->priority = (int)qw_db_res_int(res, row, COL_PRIORITY);
}
