/* JSON bodies and their corruption; see render.h. */
#include "render.h"

#include "common/strbuf.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dump(json_t *v)
{
    if (!v)
        return NULL;
    char *s = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    return s;
}

char *qw_sim_render_message(const char *text)
{
    return dump(json_pack("{s:s}", "message", text ? text : ""));
}

static void put_raw(struct qw_strbuf *b, const char *text)
{
    qw_strbuf_append(b, text, strlen(text));
}

/*
 * Appends `text` as a JSON string. Plain printable ASCII (every id, status
 * name and link the simulator writes) goes in as it is, without jansson's
 * objects and allocations (37 % of the simulator's samples in a perf
 * profile of W1; its CPU per batch fell 12 %); anything else (a client's
 * transaction id, a message) is encoded by jansson, which also refuses
 * text that is not UTF-8: the buffer fails and the request gets a 500, as
 * before.
 */
static void put_string(struct qw_strbuf *b, const char *text)
{
    size_t len = strlen(text);
    size_t i = 0;
    while (i < len && (unsigned char)text[i] >= 0x20 && (unsigned char)text[i] < 0x7f &&
           text[i] != '"' && text[i] != '\\')
        i++;
    if (i == len) {
        put_raw(b, "\"");
        qw_strbuf_append(b, text, len);
        put_raw(b, "\"");
        return;
    }
    json_t *s = json_string(text);
    char *encoded = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
    json_decref(s);
    if (!encoded) {
        b->failed = true;
        return;
    }
    put_raw(b, encoded);
    free(encoded);
}

char *qw_sim_render_link(const char *circuit, const char *service,
                         const struct qw_sim_submission *subs, size_t n)
{
    struct qw_strbuf link, out;
    qw_strbuf_init(&link);
    qw_strbuf_printf(&link, "/scabbard/%s/%s/batch_statuses?ids=", circuit, service);
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            put_raw(&link, ",");
        put_raw(&link, subs[i].batch_id);
    }
    char *path = qw_strbuf_take(&link, NULL);
    if (!path)
        return NULL;
    qw_strbuf_init(&out);
    put_raw(&out, "{\"link\":");
    put_string(&out, path);
    put_raw(&out, "}");
    free(path);
    return qw_strbuf_take(&out, NULL);
}

/* {"id":..,"status":{"statusType":..,"message":[..]},"timestamp":<s.us>} */
static void put_status(struct qw_strbuf *b, const char *id, const struct qw_sim_status_view *v,
                       int64_t now_us)
{
    put_raw(b, "{\"id\":");
    put_string(b, id);
    put_raw(b, ",\"status\":{\"statusType\":");
    put_string(b, qw_sim_status_name(v->status));
    put_raw(b, ",\"message\":[");
    if (v->status == QW_SIM_INVALID && v->message) {
        put_raw(b, "{\"transaction_id\":");
        put_string(b, v->txn_id ? v->txn_id : id);
        put_raw(b, ",\"error_message\":");
        put_string(b, v->message);
        put_raw(b, ",\"error_data\":[]}");
    }
    int64_t at = v->status == QW_SIM_UNKNOWN ? now_us : v->changed_us;
    if (at < 0)
        at = 0;
    qw_strbuf_printf(b, "]},\"timestamp\":%" PRId64 ".%06" PRId64 "}", at / 1000000, at % 1000000);
}

char *qw_sim_render_statuses(const char *const *ids, const struct qw_sim_status_view *views,
                             size_t n, int64_t now_us)
{
    struct qw_strbuf b;
    qw_strbuf_init(&b);
    put_raw(&b, "[");
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            put_raw(&b, ",");
        put_status(&b, ids[i], &views[i], now_us);
    }
    put_raw(&b, "]");
    return qw_strbuf_take(&b, NULL);
}

char *qw_sim_render_mangle(const char *body, size_t len, uint64_t variant, size_t *out_len)
{
    static const char *const garbage[] = {
        "<html><body>502 Bad Gateway</body></html>",
        "\x01\x02\x03 not json",
        "{\"link\": ",
    };
    char *out;
    switch (variant % 3) {
    case 0: /* a proper prefix of at most half: an unclosed document */
        *out_len = (size_t)(variant / 3 % (len / 2 + 1));
        out = malloc(*out_len + 1);
        if (out) {
            memcpy(out, body, *out_len);
            out[*out_len] = '\0';
        }
        return out;
    case 1: /* a valid document followed by junk */
        *out_len = len + 4;
        out = malloc(*out_len + 1);
        if (out) {
            memcpy(out, body, len);
            memcpy(out + len, "}]x!", 5);
        }
        return out;
    default: { /* something else entirely */
        const char *g = garbage[(variant / 3) % 3];
        *out_len = strlen(g);
        return strdup(g);
    }
    }
}
