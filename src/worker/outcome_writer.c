/* The grouped, fenced outcome write; see outcome_writer.h. */
#include "worker/outcome_writer.h"

#include <stdlib.h>
#include <string.h>

enum result_col {
    COL_KIND = 0,      /* 'w' written, 'n' next batch marked */
    COL_BATCH_ID,      /* the batch */
    COL_SERVICE_ID,    /* n: its service */
    COL_EPOCH,         /* n: claim epoch */
    COL_ATTEMPTS,      /* n: attempts so far */
    COL_PAYLOAD,       /* n: bytea */
    COL_LEASE_LEFT_MS, /* n: lease left */
    COL_ORD,           /* position (from 1) of the outcome in the array */
};

void qw_outcome_writer_init(struct qw_outcome_writer *w)
{
    qw_pgarray_init(&w->param);
    w->res = NULL;
}

void qw_outcome_writer_free(struct qw_outcome_writer *w)
{
    qw_pgarray_free(&w->param);
    qw_db_res_free(w->res);
    w->res = NULL;
}

/* Appends one queuer.outcome element (migrations/0004_outcome_type.sql, column order). */
static int append_outcome(struct qw_pgarray *a, const struct qw_outcome_item *item)
{
    const struct qw_outcome *o = &item->outcome;
    const char *expect = qw_outcome_expect_name(o->expect);
    const char *status = qw_batch_status_name(o->status);
    if (!expect || strcmp(status, "?") == 0)
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

int qw_outcome_writer_write(struct qw_outcome_writer *w, struct qw_db *db, const char *instance_id,
                            struct qw_outcome_item *items, size_t n, struct qw_error *err)
{
    qw_pgarray_reset(&w->param);
    for (size_t i = 0; i < n; i++) {
        if (append_outcome(&w->param, &items[i]) != QW_OK)
            return qw_error_set(err, QW_ERR_INVALID,
                                "outcome %zu has an unknown expectation "
                                "or status",
                                i);
    }
    const char *params[2] = {instance_id, qw_pgarray_finish(&w->param)};
    if (!params[1])
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "outcomes_record", 2, params, &res, err);
    if (rc != QW_OK)
        return rc;
    qw_db_res_free(w->res);
    w->res = res;
    for (size_t i = 0; i < n; i++) {
        items[i].written = false;
        items[i].next_row = -1;
    }
    for (int row = 0; row < qw_db_res_rows(res); row++) {
        int64_t ord = qw_db_res_int(res, row, COL_ORD);
        if (ord < 1 || (uint64_t)ord > n)
            continue;
        struct qw_outcome_item *item = &items[ord - 1];
        if (qw_db_res_get(res, row, COL_KIND)[0] == 'w')
            item->written = true;
        else if (item->next_row < 0)
            item->next_row = row;
    }
    return QW_OK;
}

void qw_outcome_writer_next(const struct qw_outcome_writer *w, int row, struct qw_next_batch *out)
{
    out->batch_id = qw_db_res_get(w->res, row, COL_BATCH_ID);
    out->epoch = qw_db_res_int(w->res, row, COL_EPOCH);
    out->attempts = (int)qw_db_res_int(w->res, row, COL_ATTEMPTS);
    out->payload_hex = qw_db_res_get(w->res, row, COL_PAYLOAD);
    out->lease_left_ms = qw_db_res_int(w->res, row, COL_LEASE_LEFT_MS);
}
