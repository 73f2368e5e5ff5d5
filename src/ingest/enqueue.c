/*
 * Enqueue into the database, single and bulk; see enqueue.h.
 *
 * The statements are one-shot (a CLI run issues each once or a few times)
 * and the bulk ones name a temporary table that exists only inside the
 * load's transaction, so they are sent as parameterised text rather than
 * prepared from sql/. No value is ever formatted into SQL text.
 */
#include "ingest/enqueue.h"

#include "common/hex.h"
#include "db/db.h"
#include "ingest/batchlist.h"
#include "ingest/tsv.h"
#include "ingest/validate.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_CHUNK_ROWS 10000
#define COPY_FLUSH_BYTES (1 << 20) /* send COPY data in pieces of about 1 MiB */
#define READ_BLOCK (1 << 16)       /* bytes read from the input at a time */

static const char SQL_MARKS[] = "SELECT set_config('queuer.ingest_high', $1, true), "
                                "set_config('queuer.ingest_low', $2, true)";
static const char SQL_ENQUEUE_ONE[] = "SELECT queuer.enqueue_batch($1, $2, $3::bytea, $4::integer)";
static const char SQL_STAGE[] =
    "CREATE TEMP TABLE queuer_load (seq integer, line_no integer, service_id text, "
    "batch_id text, payload bytea) ON COMMIT DROP";
static const char SQL_STAGE_COPY[] =
    "COPY queuer_load (seq, line_no, service_id, batch_id, payload) FROM STDIN";
static const char SQL_STAGE_INDEX[] = "CREATE INDEX ON queuer_load (seq)";
/*
 * Locks every service of the load up front, in one sorted pass: one row per
 * service without a batch id, which queuer.enqueue_rows() refuses but
 * whose service it locks. Chunks then never wait on each other's locks,
 * so concurrent multi-chunk loads cannot deadlock.
 */
static const char SQL_LOCK_SERVICES[] =
    "SELECT count(*) FROM queuer.enqueue_rows((SELECT array_agg(ROW(NULL, d.service_id, NULL, "
    "NULL)::queuer.enqueue_row ORDER BY d.service_id) FROM (SELECT DISTINCT service_id "
    "FROM queuer_load) d), true)";
/*
 * One chunk through queuer.enqueue_rows(). For a line refused by back
 * pressure the fifth column counts the earlier lines of this chunk for the
 * same service that were stored: the function's message counts the backlog
 * stored before the chunk, and without these a refusal at line 38 of a
 * 40-line load would read "1 batches waiting (high mark 30)". Computed only
 * when some line was refused that way.
 */
static const char SQL_ENQUEUE_CHUNK[] =
    "WITH o AS MATERIALIZED (SELECT * FROM queuer.enqueue_rows("
    "(SELECT array_agg(ROW(l.line_no, l.service_id, l.batch_id, l.payload)::queuer.enqueue_row "
    "ORDER BY l.seq) FROM queuer_load l WHERE l.seq >= $1 AND l.seq < $2), true, $3::integer)), "
    "c AS (SELECT l.line_no, count(*) FILTER (WHERE r.line_no IS NULL) OVER (PARTITION BY "
    "l.service_id ORDER BY l.seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS stored "
    "FROM queuer_load l LEFT JOIN o r ON r.line_no = l.line_no "
    "WHERE l.seq >= $1 AND l.seq < $2 AND EXISTS (SELECT 1 FROM o WHERE outcome = 'backpressure')) "
    "SELECT o.line_no, o.batch_id, o.outcome, o.detail, coalesce(c.stored, 0) "
    "FROM o LEFT JOIN c ON c.line_no = o.line_no AND o.outcome = 'backpressure'";

const char *qw_enqueue_outcome_name(enum qw_enqueue_outcome outcome)
{
    switch (outcome) {
    case QW_ENQ_ENQUEUED:
        return "enqueued";
    case QW_ENQ_DUPLICATE:
        return "duplicate";
    case QW_ENQ_INVALID:
        return "invalid";
    case QW_ENQ_TOO_LARGE:
        return "too large";
    case QW_ENQ_CONFLICT:
        return "conflict";
    case QW_ENQ_BACKPRESSURE:
        return "back pressure";
    }
    return "unknown";
}

/* Maps an outcome word of queuer.enqueue_rows() to the enum. */
static enum qw_enqueue_outcome outcome_parse(const char *word)
{
    if (strcmp(word, "duplicate") == 0)
        return QW_ENQ_DUPLICATE;
    if (strcmp(word, "conflict") == 0)
        return QW_ENQ_CONFLICT;
    if (strcmp(word, "backpressure") == 0)
        return QW_ENQ_BACKPRESSURE;
    if (strcmp(word, "too_large") == 0)
        return QW_ENQ_TOO_LARGE;
    return QW_ENQ_INVALID;
}

/* The outcome a failed result code stands for. */
static enum qw_enqueue_outcome outcome_for_rc(int rc)
{
    switch (rc) {
    case QW_ERR_DUPLICATE:
        return QW_ENQ_CONFLICT;
    case QW_ERR_BACKPRESSURE:
        return QW_ENQ_BACKPRESSURE;
    default:
        return QW_ENQ_INVALID;
    }
}

/* SET LOCAL the back-pressure marks the options override; needs a transaction. */
static int set_marks(struct qw_db *db, const struct qw_enqueue_opts *opts, struct qw_error *err)
{
    char high[16];
    char low[16];
    const char *params[2] = {NULL, NULL};
    if (opts->ingest_high >= 0) {
        snprintf(high, sizeof(high), "%d", opts->ingest_high);
        params[0] = high;
    }
    if (opts->ingest_low >= 0) {
        snprintf(low, sizeof(low), "%d", opts->ingest_low);
        params[1] = low;
    }
    if (!params[0] && !params[1])
        return QW_OK;
    /* set_config(name, NULL, true) would reset; send "" for "not overridden". */
    if (!params[0])
        params[0] = "";
    if (!params[1])
        params[1] = "";
    return qw_db_query_sql(db, SQL_MARKS, 2, params, NULL, err);
}

static int overrides_marks(const struct qw_enqueue_opts *opts)
{
    return opts->ingest_high >= 0 || opts->ingest_low >= 0;
}

/* Rolls back after a failure; keeps the first error in `err`. */
static void rollback(struct qw_db *db)
{
    struct qw_error ignored;
    qw_error_clear(&ignored);
    if (qw_db_ok(db))
        qw_db_exec(db, "ROLLBACK", &ignored);
}

int qw_enqueue_one(struct qw_db *db, const struct qw_enqueue_opts *opts, const char *service_id,
                   const char *batch_id, const uint8_t *payload, size_t len,
                   enum qw_enqueue_outcome *outcome, struct qw_error *err)
{
    *outcome = QW_ENQ_INVALID;
    if (opts->priority < QW_PRIORITY_MIN || opts->priority > QW_PRIORITY_MAX)
        return qw_error_set(err, QW_ERR_INVALID, "priority must be an integer from %d to %d",
                            QW_PRIORITY_MIN, QW_PRIORITY_MAX);
    if (qw_validate_service_id(service_id, strlen(service_id), err) != QW_OK)
        return QW_ERR_INVALID;
    if (qw_validate_batch_id(batch_id, strlen(batch_id), err) != QW_OK)
        return QW_ERR_INVALID;
    enum qw_batchlist_defect defect = QW_BATCHLIST_OK;
    int rc = qw_batchlist_check(payload, len, batch_id, opts->max_payload_bytes, &defect, err);
    if (rc != QW_OK) {
        if (defect == QW_BATCHLIST_TOO_LARGE)
            *outcome = QW_ENQ_TOO_LARGE;
        return rc;
    }

    char *hex = malloc(2 * len + 3);
    if (!hex)
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    hex[0] = '\\';
    hex[1] = 'x';
    qw_hex_encode(payload, len, hex + 2);

    int in_txn = overrides_marks(opts);
    struct qw_db_res *res = NULL;
    char prio[16];
    snprintf(prio, sizeof(prio), "%d", opts->priority);
    const char *params[4] = {service_id, batch_id, hex, prio};
    if (in_txn) {
        rc = qw_db_exec(db, "BEGIN", err);
        if (rc == QW_OK)
            rc = set_marks(db, opts, err);
        if (rc != QW_OK)
            goto out;
    }
    rc = qw_db_query_sql(db, SQL_ENQUEUE_ONE, 4, params, &res, err);
    if (rc == QW_OK && in_txn)
        rc = qw_db_exec(db, "COMMIT", err);
    if (rc == QW_OK) {
        const char *word = qw_db_res_rows(res) == 1 ? qw_db_res_get(res, 0, 0) : "";
        *outcome = strcmp(word, "duplicate") == 0 ? QW_ENQ_DUPLICATE : QW_ENQ_ENQUEUED;
    }
out:
    if (rc != QW_OK) {
        *outcome = outcome_for_rc(rc);
        if (rc == QW_ERR_INVALID && strcmp(err ? err->sqlstate : "", "QU413") == 0)
            *outcome = QW_ENQ_TOO_LARGE;
        if (in_txn)
            rollback(db);
    }
    qw_db_res_free(res);
    free(hex);
    return rc;
}

/*
 * Reads lines of at most `max_line` bytes from a FILE through one buffer.
 * A longer line is consumed and reported as too long.
 */
struct line_reader {
    FILE *in;        /* borrowed */
    char *buf;       /* owned; `cap` bytes */
    size_t cap;      /* bytes */
    size_t start;    /* first unread byte */
    size_t end;      /* one past the last valid byte */
    size_t max_line; /* bytes, line end included */
    int eof;         /* bool: `in` is exhausted */
};

enum read_result {
    READ_LINE = 1,     /* a line is returned, with its '\n' if it had one */
    READ_TOO_LONG = 2, /* a line over max_line was skipped */
    READ_EOF = 0,
    READ_ERROR = -1,
};

static int reader_fill(struct line_reader *r)
{
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    size_t want = r->cap - r->end;
    if (want > READ_BLOCK * 16)
        want = READ_BLOCK * 16;
    size_t got = fread(r->buf + r->end, 1, want, r->in);
    r->end += got;
    if (got < want) {
        if (ferror(r->in))
            return -1;
        r->eof = 1;
    }
    return 0;
}

static enum read_result reader_next(struct line_reader *r, const char **line, size_t *len)
{
    int skipping = 0;
    for (;;) {
        char *nl = memchr(r->buf + r->start, '\n', r->end - r->start);
        if (nl) {
            size_t n = (size_t)(nl - (r->buf + r->start)) + 1;
            *line = r->buf + r->start;
            *len = n;
            r->start += n;
            return skipping ? READ_TOO_LONG : READ_LINE;
        }
        if (r->eof) {
            size_t n = r->end - r->start;
            *line = r->buf + r->start;
            *len = n;
            r->start = r->end;
            if (skipping)
                return READ_TOO_LONG;
            return n > 0 ? READ_LINE : READ_EOF;
        }
        if (r->end - r->start >= r->max_line) {
            skipping = 1; /* drop what we have; keep reading to the line end */
            r->start = r->end;
        }
        if (reader_fill(r) != 0)
            return READ_ERROR;
    }
}

/* State of one bulk load. */
struct bulk {
    struct qw_db *db;                   /* borrowed */
    const struct qw_enqueue_opts *opts; /* borrowed */
    qw_enqueue_issue_fn on_issue;       /* may be NULL */
    void *ctx;                          /* for on_issue */
    struct qw_enqueue_report *report;   /* borrowed */
    int copying;                        /* bool: COPY is open */
    int doomed;                         /* bool: the load will not commit; stop sending */
    char *copy_buf;                     /* owned; pending COPY text */
    size_t copy_len;                    /* bytes pending */
    size_t copy_cap;                    /* bytes allocated */
    long sent;                          /* rows COPYed (their seq is 0..sent-1) */
    struct run *runs;                   /* owned; rows of equal priority, in seq order */
    size_t n_runs;                      /* entries in runs */
    size_t cap_runs;                    /* entries allocated */
};

/* Consecutive staged rows of one priority: seq from `from` to the next run's. */
struct run {
    long from;    /* first seq */
    int priority; /* of every row in the run */
};

static void report_issue(struct bulk *b, long line_no, enum qw_enqueue_outcome outcome,
                         const char *batch_id, const char *reason)
{
    switch (outcome) {
    case QW_ENQ_DUPLICATE:
        b->report->duplicates++;
        break;
    case QW_ENQ_CONFLICT:
        b->report->conflicts++;
        break;
    case QW_ENQ_BACKPRESSURE:
        b->report->backpressure++;
        break;
    case QW_ENQ_INVALID:
    case QW_ENQ_TOO_LARGE:
        b->report->invalid++;
        break;
    case QW_ENQ_ENQUEUED:
        return;
    }
    if (b->on_issue) {
        struct qw_enqueue_issue issue = {
            .line_no = line_no,
            .outcome = outcome,
            .batch_id = batch_id ? batch_id : "",
            .reason = reason,
        };
        b->on_issue(b->ctx, &issue);
    }
}

/* The second tab-separated field of a bad line, made printable, for the report. */
static void guess_batch_id(const char *line, size_t len, char out[QW_BATCH_ID_LEN + 1])
{
    out[0] = '\0';
    const char *tab = memchr(line, '\t', len);
    if (!tab)
        return;
    const char *field = tab + 1;
    size_t rest = len - (size_t)(field - line);
    const char *end = memchr(field, '\t', rest);
    size_t n = end ? (size_t)(end - field) : rest;
    while (n > 0 && (field[n - 1] == '\n' || field[n - 1] == '\r'))
        n--;
    qw_validate_printable(field, n, out, QW_BATCH_ID_LEN + 1);
}

static int copy_flush(struct bulk *b, struct qw_error *err)
{
    if (b->copy_len == 0)
        return QW_OK;
    int rc = qw_db_copy_put(b->db, b->copy_buf, b->copy_len, err);
    b->copy_len = 0;
    return rc;
}

/* Abandons the COPY and the transaction: the load will not commit. */
static void doom(struct bulk *b)
{
    if (b->doomed)
        return;
    b->doomed = 1;
    if (b->copying) {
        struct qw_error ignored;
        qw_error_clear(&ignored);
        b->copying = 0;
        qw_db_copy_end(b->db, "load abandoned: invalid input", &ignored);
    }
    rollback(b->db);
}

/* Notes the priority of the row about to get seq b->sent: a new run when it changes. */
static int note_priority(struct bulk *b, int priority, struct qw_error *err)
{
    if (b->n_runs > 0 && b->runs[b->n_runs - 1].priority == priority)
        return QW_OK;
    if (b->n_runs == b->cap_runs) {
        size_t cap = b->cap_runs ? b->cap_runs * 2 : 8;
        struct run *grown = realloc(b->runs, cap * sizeof(*grown));
        if (!grown)
            return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
        b->runs = grown;
        b->cap_runs = cap;
    }
    b->runs[b->n_runs++] = (struct run){.from = b->sent, .priority = priority};
    return QW_OK;
}

/* Appends one COPY row: seq, line_no, service_id, batch_id, \\x<hex>. */
static int copy_row(struct bulk *b, long line_no, const struct qw_tsv_record *rec,
                    struct qw_error *err)
{
    int prc = note_priority(b, rec->has_priority ? rec->priority : b->opts->priority, err);
    if (prc != QW_OK)
        return prc;
    size_t need = 2 * 24 + rec->service_id_len + rec->batch_id_len + rec->payload_hex_len + 16;
    if (b->copy_len + need > b->copy_cap) {
        int rc = copy_flush(b, err);
        if (rc != QW_OK)
            return rc;
        if (need > b->copy_cap) {
            char *grown = realloc(b->copy_buf, need + COPY_FLUSH_BYTES);
            if (!grown)
                return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
            b->copy_buf = grown;
            b->copy_cap = need + COPY_FLUSH_BYTES;
        }
    }
    char *p = b->copy_buf + b->copy_len;
    p += snprintf(p, 48, "%ld\t%ld\t", b->sent, line_no);
    memcpy(p, rec->service_id, rec->service_id_len);
    p += rec->service_id_len;
    *p++ = '\t';
    memcpy(p, rec->batch_id, rec->batch_id_len);
    p += rec->batch_id_len;
    memcpy(p, "\t\\\\x", 4); /* bytea hex input, its backslash escaped for COPY text */
    p += 4;
    memcpy(p, rec->payload_hex, rec->payload_hex_len);
    p += rec->payload_hex_len;
    *p++ = '\n';
    b->copy_len = (size_t)(p - b->copy_buf);
    b->sent++;
    if (b->copy_len >= COPY_FLUSH_BYTES)
        return copy_flush(b, err);
    return QW_OK;
}

/* Runs queuer.enqueue_rows() over the staged rows, chunk by chunk. */
static int enqueue_staged(struct bulk *b, struct qw_error *err)
{
    long chunk = b->opts->chunk_rows > 0 ? b->opts->chunk_rows : DEFAULT_CHUNK_ROWS;
    long not_stored = 0;
    int rc = QW_OK;
    if (b->sent > chunk || b->n_runs > 1) {
        rc = qw_db_exec(b->db, SQL_STAGE_INDEX, err);
        if (rc == QW_OK)
            rc = qw_db_exec(b->db, SQL_LOCK_SERVICES, err);
    }
    /* One call per chunk of a run: a call stores one priority. */
    long from = 0;
    size_t r = 0;
    while (rc == QW_OK && from < b->sent) {
        while (r + 1 < b->n_runs && b->runs[r + 1].from <= from)
            r++;
        long end = r + 1 < b->n_runs ? b->runs[r + 1].from : b->sent;
        long to = from + chunk < end ? from + chunk : end;
        char lo[24];
        char hi[24];
        char prio[16];
        snprintf(lo, sizeof(lo), "%ld", from);
        snprintf(hi, sizeof(hi), "%ld", to);
        snprintf(prio, sizeof(prio), "%d", b->runs[r].priority);
        const char *params[3] = {lo, hi, prio};
        struct qw_db_res *res = NULL;
        rc = qw_db_query_sql(b->db, SQL_ENQUEUE_CHUNK, 3, params, &res, err);
        if (rc != QW_OK)
            break;
        from = to;
        int rows = qw_db_res_rows(res);
        for (int i = 0; i < rows; i++) {
            long line_no = (long)qw_db_res_int(res, i, 0);
            enum qw_enqueue_outcome outcome = outcome_parse(qw_db_res_get(res, i, 2));
            const char *reason = qw_db_res_get(res, i, 3);
            char longer[700];
            int64_t earlier = qw_db_res_int(res, i, 4);
            if (outcome == QW_ENQ_BACKPRESSURE && earlier > 0) {
                snprintf(longer, sizeof(longer),
                         "%s; and %lld earlier line%s of this load for the service %s stored "
                         "and count toward the mark",
                         reason, (long long)earlier, earlier == 1 ? "" : "s",
                         earlier == 1 ? "was" : "were");
                reason = longer;
            }
            report_issue(b, line_no, outcome, qw_db_res_get(res, i, 1), reason);
        }
        not_stored += rows;
        qw_db_res_free(res);
    }
    if (rc == QW_OK)
        b->report->enqueued = b->sent - not_stored;
    return rc;
}

/* Starts the transaction, the staging table and its COPY. */
static int bulk_start(struct bulk *b, struct qw_error *err)
{
    int rc = qw_db_exec(b->db, "BEGIN", err);
    if (rc == QW_OK)
        rc = set_marks(b->db, b->opts, err);
    if (rc == QW_OK)
        rc = qw_db_exec(b->db, SQL_STAGE, err);
    if (rc == QW_OK)
        rc = qw_db_copy_begin(b->db, SQL_STAGE_COPY, err);
    if (rc == QW_OK)
        b->copying = 1;
    return rc;
}

/* Reads, checks and stages every line. Returns a failure only for I/O, memory or the database. */
static int bulk_read(struct bulk *b, FILE *in, struct qw_error *err)
{
    const struct qw_enqueue_opts *opts = b->opts;
    struct line_reader reader = {.in = in};
    reader.max_line = QW_SERVICE_ID_LEN + QW_BATCH_ID_LEN + 2 * opts->max_payload_bytes + 8;
    reader.cap = reader.max_line + READ_BLOCK * 16;
    reader.buf = malloc(reader.cap);
    uint8_t *payload = malloc(opts->max_payload_bytes + 1);
    int rc = QW_OK;
    if (!reader.buf || !payload) {
        rc = qw_error_set(err, QW_ERR_NOMEM, "out of memory");
        goto out;
    }

    char batch_id[QW_BATCH_ID_LEN + 1];
    struct qw_error why;
    for (;;) {
        const char *line = NULL;
        size_t len = 0;
        enum read_result got = reader_next(&reader, &line, &len);
        if (got == READ_EOF)
            break;
        if (got == READ_ERROR) {
            rc = qw_error_set(err, QW_ERR_IO, "reading the input failed after line %ld",
                              b->report->lines);
            goto out;
        }
        long line_no = ++b->report->lines;
        qw_error_clear(&why);
        if (got == READ_TOO_LONG) {
            b->report->records++;
            qw_error_set(&why, QW_ERR_INVALID, "line is longer than %zu bytes (payload limit %zu)",
                         reader.max_line, opts->max_payload_bytes);
            report_issue(b, line_no, QW_ENQ_TOO_LARGE, "", why.msg);
            if (!opts->skip_invalid)
                doom(b);
            continue;
        }
        struct qw_tsv_record rec;
        if (qw_tsv_parse(line, len, opts->max_payload_bytes, &rec, &why) == QW_OK &&
            rec.kind == QW_TSV_SKIP)
            continue;
        b->report->records++;
        enum qw_enqueue_outcome bad = QW_ENQ_INVALID;
        int ok = why.rc == QW_OK;
        if (ok) {
            memcpy(batch_id, rec.batch_id, QW_BATCH_ID_LEN);
            batch_id[QW_BATCH_ID_LEN] = '\0';
            long n = qw_tsv_decode_payload(&rec, payload, opts->max_payload_bytes + 1);
            enum qw_batchlist_defect defect = QW_BATCHLIST_OK;
            rc = qw_batchlist_check(payload, n < 0 ? 0 : (size_t)n, batch_id,
                                    opts->max_payload_bytes, &defect, &why);
            if (rc == QW_ERR_NOMEM) {
                *err = why;
                goto out;
            }
            rc = QW_OK;
            ok = defect == QW_BATCHLIST_OK;
            if (defect == QW_BATCHLIST_TOO_LARGE)
                bad = QW_ENQ_TOO_LARGE;
        } else {
            guess_batch_id(line, len, batch_id);
            if (rec.too_large)
                bad = QW_ENQ_TOO_LARGE;
        }
        if (!ok) {
            report_issue(b, line_no, bad, batch_id, why.msg);
            if (!opts->skip_invalid)
                doom(b);
            continue;
        }
        if (b->doomed)
            continue;
        rc = copy_row(b, line_no, &rec, err);
        if (rc != QW_OK)
            goto out;
    }
out:
    free(reader.buf);
    free(payload);
    return rc;
}

int qw_enqueue_bulk(struct qw_db *db, const struct qw_enqueue_opts *opts, FILE *in,
                    qw_enqueue_issue_fn on_issue, void *ctx, struct qw_enqueue_report *report,
                    struct qw_error *err)
{
    memset(report, 0, sizeof(*report));
    struct bulk b = {
        .db = db,
        .opts = opts,
        .on_issue = on_issue,
        .ctx = ctx,
        .report = report,
    };
    b.copy_cap = COPY_FLUSH_BYTES + (1 << 16);
    b.copy_buf = malloc(b.copy_cap);
    if (!b.copy_buf)
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");

    int rc = bulk_start(&b, err);
    if (rc == QW_OK)
        rc = bulk_read(&b, in, err);
    if (rc == QW_OK && !b.doomed) {
        rc = copy_flush(&b, err);
        b.copying = 0;
        if (rc == QW_OK)
            rc = qw_db_copy_end(db, NULL, err);
        if (rc == QW_OK)
            rc = enqueue_staged(&b, err);
    }
    if (rc != QW_OK) {
        /* I/O, memory or database failure: nothing is kept. */
        report->enqueued = 0;
        if (!b.doomed) {
            if (b.copying) {
                struct qw_error ignored;
                qw_error_clear(&ignored);
                qw_db_copy_end(db, "load abandoned", &ignored);
            }
            rollback(db);
        }
        goto out;
    }

    long refused = report->invalid + report->conflicts + report->backpressure;
    if (!opts->skip_invalid && refused > 0) {
        if (!b.doomed)
            rollback(db);
        report->enqueued = 0;
        /* "1 invalid line; ...", "2 invalid lines; ..." */
        if (report->invalid > 0)
            rc = qw_error_set(err, QW_ERR_INVALID,
                              "%ld invalid line%s; nothing was enqueued (--skip-invalid loads "
                              "the others)",
                              report->invalid, report->invalid == 1 ? "" : "s");
        else if (report->conflicts > 0)
            rc = qw_error_set(err, QW_ERR_DUPLICATE,
                              "%ld line%s conflict%s with stored batches; nothing was enqueued",
                              report->conflicts, report->conflicts == 1 ? "" : "s",
                              report->conflicts == 1 ? "s" : "");
        else
            rc = qw_error_set(err, QW_ERR_BACKPRESSURE,
                              "%ld line%s refused by back pressure; nothing was enqueued",
                              report->backpressure, report->backpressure == 1 ? "" : "s");
        goto out;
    }
    rc = qw_db_exec(db, "COMMIT", err);
    if (rc == QW_OK) {
        report->committed = 1;
    } else {
        if (rc == QW_ERR_DB_CONN || rc == QW_ERR_TIMEOUT)
            rc = qw_error_set(err, QW_ERR_OUTCOME_UNKNOWN,
                              "connection lost while committing the load; it may or may not "
                              "have been stored: run it again (stored lines become duplicates)");
        report->enqueued = 0;
    }
out:
    free(b.copy_buf);
    free(b.runs);
    return rc;
}
