/*
 * Enqueue into the database, single and bulk; see enqueue.h.
 *
 * The statements are one-shot (a CLI run issues each once or a few times)
 * and the bulk ones name a temporary table that exists only inside the
 * load's transaction, so they are sent as parameterised text rather than
 * prepared from sql/. No value is ever formatted into SQL text.
 *
 * Bulk path: every line is checked here, once, then sent with binary COPY
 * (ids as text, the payload as its decoded bytes) into pg_temp.queuer_load
 * while the rest of the input is still being read, and moved into
 * queuer.batches by queuer.enqueue_staged() (migration 0011 says why that
 * move does not run the payload trigger again; 0012 stores each row's
 * priority, so one call takes a load of mixed priorities).
 */
#include "ingest/enqueue.h"

#include "common/hex.h"
#include "db/db.h"
#include "db/txn.h"
#include "ingest/batchlist.h"
#include "ingest/tsv.h"
#include "ingest/validate.h"

#include <stdlib.h>
#include <string.h>

#define CHUNK_MS_PER_ROW 1         /* a bulk call's deadline grows by this per row, ms */
#define COPY_FLUSH_BYTES (1 << 20) /* send COPY data in pieces of about 1 MiB */
#define READ_BLOCK (1 << 16)       /* bytes read from the input at a time */
#define COPY_ROW_FIELDS 6          /* seq, line_no, service_id, batch_id, payload, priority */

static const char SQL_MARKS[] = "SELECT set_config('queuer.ingest_high', $1, true), "
                                "set_config('queuer.ingest_low', $2, true)";
static const char SQL_ENQUEUE_ONE[] = "SELECT queuer.enqueue_batch($1, $2, $3::bytea, $4::integer)";
/*
 * The staging table lives in local memory (temp_buffers, set before the
 * session touches any temporary table) so that a load of some 100 MB does
 * not spill; PostgreSQL allocates those buffers only as they fill. Ids are
 * compared bytewise ("C"), as in queuer.batches: sorting them under a
 * locale's collation cost more than the rest of the lock pass.
 */
static const char SQL_STAGE[] =
    "SET LOCAL temp_buffers = '256MB'; "
    "CREATE TEMP TABLE queuer_load (seq integer, line_no integer, service_id text COLLATE \"C\", "
    "batch_id text COLLATE \"C\", payload bytea, priority integer) ON COMMIT DROP";
static const char SQL_STAGE_COPY[] =
    "COPY queuer_load (seq, line_no, service_id, batch_id, payload, priority) FROM STDIN "
    "(FORMAT binary)";
/* For the rest of the load's transaction only. */
static const char SQL_STATEMENT_TIMEOUT[] = "SELECT set_config('statement_timeout', $1, true)";
/* queuer.enqueue_staged() runs as queuer_loader: let it read the staged rows. */
static const char SQL_STAGE_READY[] = "CREATE INDEX ON queuer_load (seq); "
                                      "GRANT SELECT ON queuer_load TO queuer_loader";
/*
 * One chunk through queuer.enqueue_staged(). For a line refused by back
 * pressure the fifth column counts the earlier lines of this chunk for the
 * same service that were stored: the function's message counts the backlog
 * stored before the chunk, and without these a refusal at line 38 of a
 * 40-line load would read "1 batches waiting (high mark 30)". Computed only
 * when some line was refused that way.
 */
static const char SQL_ENQUEUE_CHUNK[] =
    "WITH o AS MATERIALIZED (SELECT * FROM queuer.enqueue_staged($1, $2, true)), "
    "c AS (SELECT l.line_no, count(*) FILTER (WHERE r.line_no IS NULL) OVER (PARTITION BY "
    "l.service_id ORDER BY l.seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS stored "
    "FROM queuer_load l LEFT JOIN o r ON r.line_no = l.line_no "
    "WHERE l.seq >= $1 AND l.seq < $2 AND EXISTS (SELECT 1 FROM o WHERE outcome = 'backpressure')) "
    "SELECT o.line_no, o.batch_id, o.outcome, o.detail, coalesce(c.stored, 0) "
    "FROM o LEFT JOIN c ON c.line_no = o.line_no AND o.outcome = 'backpressure'";

/* Binary COPY framing: the file header (signature, flags, extension length) and trailer. */
static const char COPY_HEADER[19] = "PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0";
static const char COPY_TRAILER[2] = {'\377', '\377'};

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
        rc = qw_txn_begin(db, err);
        if (rc == QW_OK)
            rc = set_marks(db, opts, err);
        if (rc != QW_OK)
            goto out;
    }
    rc = qw_db_query_sql(db, SQL_ENQUEUE_ONE, 4, params, &res, err);
    if (rc == QW_OK && in_txn)
        rc = qw_txn_commit(db, err);
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
            qw_txn_rollback(db);
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
        int ended = qw_db_copy_end(b->db, "load abandoned: invalid input", &ignored);
        (void)ended; /* the rollback below ends the load either way */
    }
    qw_txn_rollback(b->db);
}

/* Makes room for `need` more bytes of COPY data: sends what is pending, grows the buffer. */
static int copy_reserve(struct bulk *b, size_t need, struct qw_error *err)
{
    if (b->copy_len + need <= b->copy_cap)
        return QW_OK;
    int rc = copy_flush(b, err);
    if (rc != QW_OK || need <= b->copy_cap)
        return rc;
    char *grown = realloc(b->copy_buf, need + COPY_FLUSH_BYTES);
    if (!grown)
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    b->copy_buf = grown;
    b->copy_cap = need + COPY_FLUSH_BYTES;
    return QW_OK;
}

/* Appends `len` bytes of COPY framing. */
static int copy_append(struct bulk *b, const void *data, size_t len, struct qw_error *err)
{
    int rc = copy_reserve(b, len, err);
    if (rc != QW_OK)
        return rc;
    memcpy(b->copy_buf + b->copy_len, data, len);
    b->copy_len += len;
    return QW_OK;
}

static char *put_be16(char *p, uint16_t v)
{
    p[0] = (char)(v >> 8);
    p[1] = (char)v;
    return p + 2;
}

static char *put_be32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
    return p + 4;
}

/* Appends one binary COPY field: its length, then its bytes. */
static char *put_field(char *p, const void *data, size_t len)
{
    p = put_be32(p, (uint32_t)len);
    memcpy(p, data, len);
    return p + len;
}

/*
 * Appends one binary COPY row: seq, line_no, service_id, batch_id, the
 * decoded payload (`len` bytes) and the line's priority (or the load's), as PostgreSQL's binary
 * COPY format lays out a tuple (a field count, then each field's length and bytes).
 */
static int copy_row(struct bulk *b, long line_no, const struct qw_tsv_record *rec,
                    const uint8_t *payload, size_t len, struct qw_error *err)
{
    if (b->sent >= INT32_MAX || line_no > INT32_MAX)
        return qw_error_set(err, QW_ERR_INVALID, "a load holds at most %d lines", INT32_MAX);
    size_t need =
        2 + 2 * (4 + 4) + 4 + rec->service_id_len + 4 + rec->batch_id_len + 4 + len + (4 + 4);
    int rc = copy_reserve(b, need, err);
    if (rc != QW_OK)
        return rc;
    char *p = b->copy_buf + b->copy_len;
    p = put_be16(p, COPY_ROW_FIELDS);
    p = put_be32(p, 4);
    p = put_be32(p, (uint32_t)b->sent);
    p = put_be32(p, 4);
    p = put_be32(p, (uint32_t)line_no);
    p = put_field(p, rec->service_id, rec->service_id_len);
    p = put_field(p, rec->batch_id, rec->batch_id_len);
    p = put_field(p, payload, len);
    p = put_be32(p, 4);
    p = put_be32(p, (uint32_t)(rec->has_priority ? rec->priority : b->opts->priority));
    b->copy_len = (size_t)(p - b->copy_buf);
    b->sent++;
    if (b->copy_len >= COPY_FLUSH_BYTES)
        return copy_flush(b, err);
    return QW_OK;
}

/* Sets the server's statement_timeout (ms, 0 = none) until the load's transaction ends. */
static int set_statement_timeout(struct qw_db *db, int ms, struct qw_error *err)
{
    char value[24];
    snprintf(value, sizeof(value), "%d", ms);
    const char *params[1] = {value};
    return qw_db_query_sql(db, SQL_STATEMENT_TIMEOUT, 1, params, NULL, err);
}

/* Runs queuer.enqueue_staged() over the staged rows, chunk by chunk. */
static int enqueue_staged(struct bulk *b, struct qw_error *err)
{
    long chunk = b->opts->chunk_rows > 0 ? b->opts->chunk_rows : b->sent;
    long not_stored = 0;
    /*
     * The configured deadline bounds a hung server, not a long load: a
     * call's deadline grows with its rows (about 50 times what a row
     * costs on a busy 2-core machine), on both sides (the server's
     * statement_timeout, set per connection, follows the client's).
     */
    int base_ms = qw_db_timeout(b->db);
    long rows_ms = (chunk < b->sent ? chunk : b->sent) * CHUNK_MS_PER_ROW;
    int call_ms =
        (int)(rows_ms < INT32_MAX - base_ms - 2000 ? base_ms + rows_ms : INT32_MAX - 2000);
    int rc = set_statement_timeout(b->db, call_ms + 2000, err);
    qw_db_set_timeout(b->db, call_ms);
    if (rc == QW_OK)
        rc = qw_db_exec(b->db, SQL_STAGE_READY, err);
    for (long from = 0; rc == QW_OK && from < b->sent; from += chunk) {
        char lo[24];
        char hi[24];
        snprintf(lo, sizeof(lo), "%ld", from);
        snprintf(hi, sizeof(hi), "%ld", from + chunk);
        const char *params[2] = {lo, hi};
        struct qw_db_res *res = NULL;
        rc = qw_db_query_sql(b->db, SQL_ENQUEUE_CHUNK, 2, params, &res, err);
        if (rc != QW_OK)
            break;
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
    qw_db_set_timeout(b->db, base_ms);
    if (rc == QW_OK)
        b->report->enqueued = b->sent - not_stored;
    return rc;
}

/* Starts the transaction, the staging table and its COPY. */
static int bulk_start(struct bulk *b, struct qw_error *err)
{
    int rc = qw_txn_begin(b->db, err);
    if (rc == QW_OK)
        rc = set_marks(b->db, b->opts, err);
    if (rc == QW_OK)
        rc = qw_db_exec(b->db, SQL_STAGE, err);
    /* The COPY lasts as long as the input does; the client's deadline on
       each piece it sends still bounds a server that stops answering. */
    if (rc == QW_OK)
        rc = set_statement_timeout(b->db, 0, err);
    if (rc == QW_OK)
        rc = qw_db_copy_begin(b->db, SQL_STAGE_COPY, err);
    if (rc == QW_OK) {
        b->copying = 1;
        rc = copy_append(b, COPY_HEADER, sizeof(COPY_HEADER), err);
    }
    return rc;
}

/* Reads, checks and stages every line. Returns a failure only for I/O, memory or the database. */
static int bulk_read(struct bulk *b, FILE *in, struct qw_error *err)
{
    const struct qw_enqueue_opts *opts = b->opts;
    struct line_reader reader = {.in = in};
    /* three tabs, a priority of up to 5 characters, CR LF */
    reader.max_line = QW_SERVICE_ID_LEN + QW_BATCH_ID_LEN + 2 * opts->max_payload_bytes + 10;
    reader.cap = reader.max_line + READ_BLOCK * 16;
    reader.buf = malloc(reader.cap);
    uint8_t *payload = malloc(opts->max_payload_bytes + 1);
    int rc = QW_OK;
    if (!reader.buf || !payload) {
        rc = qw_error_set(err, QW_ERR_NOMEM, "out of memory");
        goto out;
    }

    char batch_id[QW_BATCH_ID_LEN + 1];
    long payload_len = 0;
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
            payload_len = qw_tsv_decode_payload(&rec, payload, opts->max_payload_bytes + 1);
            if (payload_len < 0)
                payload_len = 0;
            enum qw_batchlist_defect defect = QW_BATCHLIST_OK;
            rc = qw_batchlist_check(payload, (size_t)payload_len, batch_id, opts->max_payload_bytes,
                                    &defect, &why);
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
        rc = copy_row(b, line_no, &rec, payload, (size_t)payload_len, err);
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
        rc = copy_append(&b, COPY_TRAILER, sizeof(COPY_TRAILER), err);
        if (rc == QW_OK)
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
                int ended = qw_db_copy_end(db, "load abandoned", &ignored);
                (void)ended; /* the rollback below ends the load either way */
            }
            qw_txn_rollback(db);
        }
        goto out;
    }

    long refused = report->invalid + report->conflicts + report->backpressure;
    if (!opts->skip_invalid && refused > 0) {
        if (!b.doomed)
            qw_txn_rollback(db);
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
    rc = qw_txn_commit(db, err);
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
    return rc;
}
