/* Parser for bulk enqueue lines; see tsv.h. */
#include "ingest/tsv.h"

#include "common/hex.h"
#include "ingest/validate.h"

#include <string.h>

int qw_tsv_parse_priority(const char *text, size_t len, int *out, struct qw_error *err)
{
    size_t i = 0;
    bool negative = false;
    if (len > 0 && (text[0] == '-' || text[0] == '+')) {
        negative = text[0] == '-';
        i = 1;
    }
    long v = 0;
    bool ok = i < len && len - i <= 4;
    for (; ok && i < len; i++) {
        if (text[i] < '0' || text[i] > '9')
            ok = false;
        else
            v = v * 10 + (text[i] - '0');
    }
    if (negative)
        v = -v;
    if (!ok || v < QW_PRIORITY_MIN || v > QW_PRIORITY_MAX)
        return qw_error_set(err, QW_ERR_INVALID, "priority must be an integer from %d to %d",
                            QW_PRIORITY_MIN, QW_PRIORITY_MAX);
    *out = (int)v;
    return QW_OK;
}

int qw_tsv_parse(const char *line, size_t len, size_t max_payload_bytes, struct qw_tsv_record *rec,
                 struct qw_error *err)
{
    memset(rec, 0, sizeof(*rec));
    rec->kind = QW_TSV_SKIP;
    if (len > 0 && line[len - 1] == '\n')
        len--;
    if (len > 0 && line[len - 1] == '\r')
        len--;

    size_t first = 0;
    while (first < len && (line[first] == ' ' || line[first] == '\t'))
        first++;
    if (first == len || line[first] == '#')
        return QW_OK;

    /* Three or four fields: two or three tabs (memchr: the payload field is long). */
    const char *end = line + len;
    const char *tab1 = memchr(line, '\t', len);
    const char *tab2 = tab1 ? memchr(tab1 + 1, '\t', (size_t)(end - tab1 - 1)) : NULL;
    const char *tab3 = tab2 ? memchr(tab2 + 1, '\t', (size_t)(end - tab2 - 1)) : NULL;
    if (!tab2 || (tab3 && memchr(tab3 + 1, '\t', (size_t)(end - tab3 - 1)))) {
        size_t nfields = 1;
        for (const char *p = line; (p = memchr(p, '\t', (size_t)(end - p))) != NULL; p++)
            nfields++;
        return qw_error_set(err, QW_ERR_INVALID,
                            "expected 3 or 4 tab-separated fields (service_id, batch_id, hex "
                            "payload[, priority]), found %zu",
                            nfields);
    }
    const char *payload_end = tab3 ? tab3 : end;
    const char *field[3] = {line, tab1 + 1, tab2 + 1};
    size_t field_len[3] = {(size_t)(tab1 - line), (size_t)(tab2 - tab1 - 1),
                           (size_t)(payload_end - tab2 - 1)};
    if (qw_validate_service_id(field[0], field_len[0], err) != QW_OK)
        return QW_ERR_INVALID;
    if (qw_validate_batch_id(field[1], field_len[1], err) != QW_OK)
        return QW_ERR_INVALID;

    const char *hex = field[2];
    size_t hex_len = field_len[2];
    if (hex_len == 0)
        return qw_error_set(err, QW_ERR_INVALID, "payload is empty");
    if (hex_len / 2 > max_payload_bytes) {
        rec->too_large = 1;
        return qw_error_set(err, QW_ERR_INVALID, "payload is %zu bytes, the limit is %zu",
                            hex_len / 2, max_payload_bytes);
    }
    size_t digits = qw_hex_span(hex, hex_len);
    if (digits < hex_len) {
        unsigned char c = (unsigned char)hex[digits];
        if (c >= 0x20 && c < 0x7f)
            return qw_error_set(err, QW_ERR_INVALID,
                                "payload hex character %zu is '%c', not a hex digit", digits + 1,
                                c);
        return qw_error_set(err, QW_ERR_INVALID,
                            "payload hex character %zu is byte 0x%02x, not a hex digit", digits + 1,
                            c);
    }
    if (hex_len % 2 != 0)
        return qw_error_set(err, QW_ERR_INVALID, "payload hex has an odd number of digits (%zu)",
                            hex_len);
    if (tab3) {
        if (qw_tsv_parse_priority(tab3 + 1, (size_t)(end - tab3 - 1), &rec->priority, err) != QW_OK)
            return QW_ERR_INVALID;
        rec->has_priority = true;
    }

    rec->kind = QW_TSV_RECORD;
    rec->service_id = field[0];
    rec->service_id_len = field_len[0];
    rec->batch_id = field[1];
    rec->batch_id_len = field_len[1];
    rec->payload_hex = hex;
    rec->payload_hex_len = hex_len;
    return QW_OK;
}

long qw_tsv_decode_payload(const struct qw_tsv_record *rec, uint8_t *out, size_t cap)
{
    return qw_hex_decode(rec->payload_hex, rec->payload_hex_len, out, cap);
}
