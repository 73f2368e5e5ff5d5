/* JSON bodies and their corruption; see render.h. */
#include "render.h"

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

char *qw_sim_render_link(const char *circuit, const char *service,
                         const struct qw_sim_submission *subs, size_t n)
{
    static const char fmt[] = "/scabbard/%s/%s/batch_statuses?ids=";
    size_t cap = sizeof(fmt) + strlen(circuit) + strlen(service);
    for (size_t i = 0; i < n; i++)
        cap += strlen(subs[i].batch_id) + 1;
    char *link = malloc(cap);
    if (!link)
        return NULL;
    size_t pos = (size_t)snprintf(link, cap, fmt, circuit, service);
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            link[pos++] = ',';
        size_t len = strlen(subs[i].batch_id);
        memcpy(link + pos, subs[i].batch_id, len);
        pos += len;
    }
    link[pos] = '\0';
    char *out = dump(json_pack("{s:s}", "link", link));
    free(link);
    return out;
}

static json_t *status_entry(const char *id, const struct qw_sim_status_view *v, int64_t now_us)
{
    json_t *messages = json_array();
    if (!messages)
        return NULL;
    if (v->status == QW_SIM_INVALID && v->message) {
        json_t *m = json_pack("{s:s, s:s, s:[]}", "transaction_id", v->txn_id ? v->txn_id : id,
                              "error_message", v->message, "error_data");
        if (!m || json_array_append_new(messages, m) != 0) {
            json_decref(messages);
            return NULL;
        }
    }
    int64_t at = v->status == QW_SIM_UNKNOWN ? now_us : v->changed_us;
    return json_pack("{s:s, s:{s:s, s:o}, s:f}", "id", id, "status", "statusType",
                     qw_sim_status_name(v->status), "message", messages, "timestamp",
                     (double)at / 1e6);
}

char *qw_sim_render_statuses(const char *const *ids, const struct qw_sim_status_view *views,
                             size_t n, int64_t now_us)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *e = status_entry(ids[i], &views[i], now_us);
        if (!e || json_array_append_new(arr, e) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return dump(arr);
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
