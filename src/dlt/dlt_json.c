/* batch_statuses parsing; see dlt_json.h. */
#include "dlt/dlt_json.h"

#include "common/err.h"
#include "dlt/dlt_text.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {
    [QW_DLT_STATUS_UNKNOWN] = "Unknown", [QW_DLT_STATUS_PENDING] = "Pending",
    [QW_DLT_STATUS_VALID] = "Valid",     [QW_DLT_STATUS_COMMITTED] = "Committed",
    [QW_DLT_STATUS_INVALID] = "Invalid",
};
#define STATUS_NAME_COUNT (sizeof(status_names) / sizeof(status_names[0]))

const char *qw_dlt_status_type_name(enum qw_dlt_status_type type)
{
    if ((size_t)type < STATUS_NAME_COUNT)
        return status_names[type];
    return "?";
}

bool qw_dlt_status_type_final(enum qw_dlt_status_type type)
{
    return type == QW_DLT_STATUS_VALID || type == QW_DLT_STATUS_COMMITTED ||
           type == QW_DLT_STATUS_INVALID;
}

static bool status_type_parse(const char *text, enum qw_dlt_status_type *out)
{
    for (size_t i = 0; i < STATUS_NAME_COUNT; i++) {
        if (strcmp(text, status_names[i]) == 0) {
            *out = (enum qw_dlt_status_type)i;
            return true;
        }
    }
    return false;
}

/* A requested id and its position in the caller's arrays, for binary search. */
struct id_slot {
    const char *id; /* points into the caller's ids[] */
    size_t index;   /* position in ids[] and out[] */
};

static int slot_cmp(const void *a, const void *b)
{
    return strcmp(((const struct id_slot *)a)->id, ((const struct id_slot *)b)->id);
}

static int fail(char *err, size_t err_cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t err_cap, const char *fmt, ...)
{
    if (err && err_cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_cap, fmt, ap);
        va_end(ap);
    }
    return QW_ERR_INVALID;
}

/*
 * Deepest nesting of arrays and objects in `body`, counted outside string
 * literals; stops counting (and returns max+1) once `max` is exceeded, so
 * the parser never sees input that would recurse deeply.
 */
static int nesting_depth(const char *body, size_t len, int max)
{
    int depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < len; i++) {
        char c = body[i];
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > deepest)
                deepest = depth;
            if (deepest > max)
                return deepest;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return deepest;
}

/* Appends `text` (and a "; " separator when not first) to buf, truncating. */
static void message_append(char *buf, size_t cap, size_t *pos, const char *text)
{
    if (*pos > 0 && *pos + 2 < cap) {
        memcpy(buf + *pos, "; ", 2);
        *pos += 2;
    }
    size_t len = strlen(text);
    if (len > cap - 1 - *pos)
        len = cap - 1 - *pos;
    memcpy(buf + *pos, text, len);
    *pos += len;
    buf[*pos] = '\0';
}

/*
 * Renders a status "message" (absent, null, a string, or an array of
 * strings or objects carrying "message"/"error_message") into `out`.
 * Returns false when it has another type.
 */
static bool message_render(const json_t *msg, char *out, size_t cap)
{
    char raw[1024] = "";
    size_t pos = 0;
    if (!msg || json_is_null(msg)) {
        out[0] = '\0';
        return true;
    }
    if (json_is_string(msg)) {
        message_append(raw, sizeof(raw), &pos, json_string_value(msg));
    } else if (json_is_array(msg)) {
        size_t i;
        const json_t *item;
        json_array_foreach(msg, i, item)
        {
            const json_t *text = item;
            if (json_is_object(item)) {
                text = json_object_get(item, "message");
                if (!json_is_string(text))
                    text = json_object_get(item, "error_message");
            }
            if (json_is_string(text))
                message_append(raw, sizeof(raw), &pos, json_string_value(text));
        }
    } else {
        return false;
    }
    qw_dlt_text_sanitize(out, cap, raw, pos);
    return true;
}

static void reset_out(const char *const *ids, size_t n, struct qw_dlt_status *out)
{
    for (size_t i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        if (ids && ids[i] && qw_dlt_batch_id_valid(ids[i]))
            memcpy(out[i].id, ids[i], QW_BATCH_ID_LEN + 1);
    }
}

/* Checks one entry and, when it is for a requested id, records it. */
static int parse_entry(const json_t *entry, size_t pos, const struct id_slot *slots, size_t n,
                       struct qw_dlt_status *out, struct qw_dlt_status_counts *counts, char *err,
                       size_t err_cap)
{
    if (!json_is_object(entry))
        return fail(err, err_cap, "entry %zu is not an object", pos);
    const json_t *id = json_object_get(entry, "id");
    if (!json_is_string(id))
        return fail(err, err_cap, "entry %zu has no string \"id\"", pos);
    const char *id_text = json_string_value(id);
    if (json_string_length(id) != QW_BATCH_ID_LEN || !qw_dlt_batch_id_valid(id_text))
        return fail(err, err_cap, "entry %zu: id is not 128 lower-case hex characters", pos);

    struct id_slot key = {id_text, 0};
    const struct id_slot *slot = bsearch(&key, slots, n, sizeof(*slots), slot_cmp);
    if (!slot) {
        counts->ignored++;
        return QW_OK;
    }
    struct qw_dlt_status *st = &out[slot->index];
    if (st->reported)
        return fail(err, err_cap, "entry %zu: id reported twice", pos);

    const json_t *status = json_object_get(entry, "status");
    if (!json_is_object(status))
        return fail(err, err_cap, "entry %zu has no object \"status\"", pos);
    const json_t *type = json_object_get(status, "statusType");
    if (!json_is_string(type))
        return fail(err, err_cap, "entry %zu has no string \"statusType\"", pos);
    if (!status_type_parse(json_string_value(type), &st->type)) {
        char shown[40];
        qw_dlt_text_sanitize(shown, sizeof(shown), json_string_value(type),
                             json_string_length(type));
        return fail(err, err_cap, "entry %zu: unknown statusType \"%s\"", pos, shown);
    }
    if (!message_render(json_object_get(status, "message"), st->message, sizeof(st->message)))
        return fail(err, err_cap, "entry %zu: \"message\" has the wrong type", pos);
    st->reported = true;
    counts->reported++;
    return QW_OK;
}

int qw_dlt_json_parse_statuses(const char *body, size_t len, const char *const *ids, size_t n,
                               struct qw_dlt_status *out, struct qw_dlt_status_counts *counts,
                               char *err, size_t err_cap)
{
    struct qw_dlt_status_counts local = {0};
    struct id_slot *slots = NULL;
    json_t *root = NULL;
    int rc = QW_OK;

    if (err && err_cap > 0)
        err[0] = '\0';
    if (!out || n == 0 || n > QW_DLT_STATUS_MAX_IDS || !ids) {
        rc = fail(err, err_cap, "bad request: %zu ids", n);
        goto out;
    }
    reset_out(ids, n, out);

    slots = calloc(n, sizeof(*slots));
    if (!slots) {
        rc = fail(err, err_cap, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (!qw_dlt_batch_id_valid(ids[i])) {
            rc = fail(err, err_cap, "bad request: id %zu is not a batch id", i);
            goto out;
        }
        slots[i] = (struct id_slot){ids[i], i};
    }
    qsort(slots, n, sizeof(*slots), slot_cmp);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(slots[i - 1].id, slots[i].id) == 0) {
            rc = fail(err, err_cap, "bad request: id requested twice");
            goto out;
        }
    }

    if (!body) {
        rc = fail(err, err_cap, "no body");
        goto out;
    }
    if (nesting_depth(body, len, QW_DLT_JSON_MAX_DEPTH) > QW_DLT_JSON_MAX_DEPTH) {
        rc = fail(err, err_cap, "nested deeper than %d", QW_DLT_JSON_MAX_DEPTH);
        goto out;
    }
    json_error_t jerr;
    root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        char shown[160];
        qw_dlt_text_sanitize(shown, sizeof(shown), jerr.text, strlen(jerr.text));
        rc = fail(err, err_cap, "not JSON: %s at offset %d", shown, jerr.position);
        goto out;
    }
    if (!json_is_array(root)) {
        rc = fail(err, err_cap, "not an array");
        goto out;
    }
    if (json_array_size(root) > QW_DLT_STATUS_MAX_ENTRIES) {
        rc = fail(err, err_cap, "%zu entries, more than %d", json_array_size(root),
                  QW_DLT_STATUS_MAX_ENTRIES);
        goto out;
    }
    size_t i;
    const json_t *entry;
    json_array_foreach(root, i, entry)
    {
        rc = parse_entry(entry, i, slots, n, out, &local, err, err_cap);
        if (rc != QW_OK)
            goto out;
    }
    local.missing = n - local.reported;

out:
    if (rc != QW_OK) {
        memset(&local, 0, sizeof(local));
        if (out && ids && n <= QW_DLT_STATUS_MAX_IDS)
            reset_out(ids, n, out);
    }
    if (counts)
        *counts = local;
    json_decref(root);
    free(slots);
    return rc;
}
