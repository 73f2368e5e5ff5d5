/* Classification of ledger responses; see dlt_classify.h. */
#include "dlt/dlt_classify.h"

#include "common/err.h"
#include "dlt/dlt_text.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

const char *qw_dlt_outcome_name(enum qw_dlt_outcome outcome)
{
    switch (outcome) {
    case QW_DLT_ACCEPTED:
        return "accepted";
    case QW_DLT_OK:
        return "ok";
    case QW_DLT_BACKPRESSURE:
        return "backpressure";
    case QW_DLT_INVALID:
        return "invalid";
    case QW_DLT_AUTH:
        return "auth";
    case QW_DLT_RETRY:
        return "retry";
    case QW_DLT_ABANDONED:
        return "abandoned";
    }
    return "?";
}

const char *qw_dlt_transport_name(enum qw_dlt_transport transport)
{
    switch (transport) {
    case QW_DLT_TRANSPORT_OK:
        return "ok";
    case QW_DLT_TRANSPORT_CONNECT:
        return "connect failed";
    case QW_DLT_TRANSPORT_TIMEOUT:
        return "timeout";
    case QW_DLT_TRANSPORT_DROPPED:
        return "connection dropped";
    case QW_DLT_TRANSPORT_TOO_LARGE:
        return "response too large";
    case QW_DLT_TRANSPORT_TLS:
        return "tls failure";
    case QW_DLT_TRANSPORT_OTHER:
        return "transport error";
    }
    return "?";
}

const char *qw_dlt_failure_name(enum qw_dlt_failure failure)
{
    static const char *const names[QW_DLT_FAIL_COUNT] = {
        [QW_DLT_FAIL_NONE] = "none",
        [QW_DLT_FAIL_BACKPRESSURE] = "backpressure",
        [QW_DLT_FAIL_REJECTED] = "rejected",
        [QW_DLT_FAIL_AUTH] = "auth",
        [QW_DLT_FAIL_HTTP_4XX] = "http_4xx",
        [QW_DLT_FAIL_HTTP_5XX] = "http_5xx",
        [QW_DLT_FAIL_HTTP_OTHER] = "http_other",
        [QW_DLT_FAIL_MALFORMED] = "malformed",
        [QW_DLT_FAIL_CONNECT] = "connect",
        [QW_DLT_FAIL_TIMEOUT] = "timeout",
        [QW_DLT_FAIL_DROPPED] = "dropped",
        [QW_DLT_FAIL_TOO_LARGE] = "too_large",
        [QW_DLT_FAIL_TLS] = "tls",
        [QW_DLT_FAIL_TRANSPORT] = "transport",
    };
    if ((int)failure < 0 || failure >= QW_DLT_FAIL_COUNT)
        return "?";
    return names[failure];
}

enum qw_dlt_failure qw_dlt_failure_kind(int kind, enum qw_dlt_outcome outcome,
                                        enum qw_dlt_transport transport, long http_status)
{
    switch (outcome) {
    case QW_DLT_ACCEPTED:
    case QW_DLT_OK:
    case QW_DLT_ABANDONED:
        return QW_DLT_FAIL_NONE;
    case QW_DLT_BACKPRESSURE:
        return QW_DLT_FAIL_BACKPRESSURE;
    case QW_DLT_INVALID:
        return QW_DLT_FAIL_REJECTED;
    case QW_DLT_AUTH:
        return QW_DLT_FAIL_AUTH;
    case QW_DLT_RETRY:
        break;
    }
    switch (transport) {
    case QW_DLT_TRANSPORT_OK:
        break;
    case QW_DLT_TRANSPORT_CONNECT:
        return QW_DLT_FAIL_CONNECT;
    case QW_DLT_TRANSPORT_TIMEOUT:
        return QW_DLT_FAIL_TIMEOUT;
    case QW_DLT_TRANSPORT_DROPPED:
        return QW_DLT_FAIL_DROPPED;
    case QW_DLT_TRANSPORT_TOO_LARGE:
        return QW_DLT_FAIL_TOO_LARGE;
    case QW_DLT_TRANSPORT_TLS:
        return QW_DLT_FAIL_TLS;
    case QW_DLT_TRANSPORT_OTHER:
        return QW_DLT_FAIL_TRANSPORT;
    }
    long expected = kind == 0 ? 202 : 200;
    if (http_status == expected)
        return QW_DLT_FAIL_MALFORMED;
    if (http_status >= 400 && http_status < 500)
        return QW_DLT_FAIL_HTTP_4XX;
    if (http_status >= 500 && http_status < 600)
        return QW_DLT_FAIL_HTTP_5XX;
    return QW_DLT_FAIL_HTTP_OTHER;
}

/*
 * Writes "<prefix>: <sanitised text>" (or just the prefix when the text is
 * empty) into msg. The prefix is trusted; the text is not.
 */
static void message_set(char *msg, size_t cap, const char *prefix, const char *text, size_t len)
{
    if (!msg || cap == 0)
        return;
    size_t n = strlen(prefix);
    if (n > cap - 1)
        n = cap - 1;
    memcpy(msg, prefix, n);
    msg[n] = '\0';
    if (n + 3 >= cap || !text || len == 0)
        return;
    memcpy(msg + n, ": ", 2);
    size_t added = qw_dlt_text_sanitize(msg + n + 2, cap - n - 2, text, len);
    if (added == 0)
        msg[n] = '\0';
}

static void message_http(char *msg, size_t cap, const char *what,
                         const struct qw_dlt_response *resp)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "HTTP %ld %s", resp->http_status, what);
    message_set(msg, cap, prefix, resp->body, resp->body ? resp->body_len : 0);
}

/* Message for a transport failure; true when there was one. */
static bool transport_failed(const struct qw_dlt_response *resp, char *msg, size_t cap)
{
    if (resp->transport == QW_DLT_TRANSPORT_OK)
        return false;
    const char *detail = resp->transport_detail;
    message_set(msg, cap, qw_dlt_transport_name(resp->transport), detail,
                detail ? strlen(detail) : 0);
    return true;
}

/* Parses the body as a JSON object; NULL when it is not one (jansson bounds the nesting). */
static json_t *body_object(const struct qw_dlt_response *resp)
{
    if (!resp->body || resp->body_len == 0)
        return NULL;
    json_t *root = json_loadb(resp->body, resp->body_len, 0, NULL);
    if (root && !json_is_object(root)) {
        json_decref(root);
        return NULL;
    }
    return root;
}

/*
 * A 400 is the ledger's verdict on the batch only in scabbard's error
 * shape, a JSON object whose "message" is a non-empty string; its message
 * becomes `msg`. Anything else (a proxy's HTML page, a TLS port answering
 * plain HTTP, an empty body) did not come from the ledger's validation and
 * is classified RETRY by the caller. Returns true for the ledger's shape.
 */
static bool ledger_rejection(const struct qw_dlt_response *resp, char *msg, size_t cap)
{
    json_t *root = body_object(resp);
    const json_t *text = root ? json_object_get(root, "message") : NULL;
    bool ours = json_is_string(text) && json_string_length(text) > 0;
    if (ours && msg && cap > 0 &&
        qw_dlt_text_sanitize(msg, cap, json_string_value(text), json_string_length(text)) == 0)
        ours = false; /* only spaces and control characters: not a message */
    json_decref(root);
    return ours;
}

static enum qw_dlt_outcome classify_accepted(const struct qw_dlt_response *resp, char *msg,
                                             size_t cap)
{
    json_t *root = body_object(resp);
    const json_t *link = root ? json_object_get(root, "link") : NULL;
    enum qw_dlt_outcome outcome;
    if (json_is_string(link) && json_string_length(link) > 0) {
        outcome = QW_DLT_ACCEPTED;
        message_set(msg, cap, "accepted", json_string_value(link), json_string_length(link));
    } else {
        outcome = QW_DLT_RETRY;
        message_http(msg, cap, "without a link", resp);
    }
    json_decref(root);
    return outcome;
}

enum qw_dlt_outcome qw_dlt_classify_post(const struct qw_dlt_response *resp, char *msg,
                                         size_t msg_cap)
{
    if (msg && msg_cap > 0)
        msg[0] = '\0';
    if (transport_failed(resp, msg, msg_cap))
        return QW_DLT_RETRY;
    switch (resp->http_status) {
    case 202:
        return classify_accepted(resp, msg, msg_cap);
    case 429:
        message_http(msg, msg_cap, "back pressure", resp);
        return QW_DLT_BACKPRESSURE;
    case 400:
        if (ledger_rejection(resp, msg, msg_cap))
            return QW_DLT_INVALID;
        message_http(msg, msg_cap, "not from the ledger", resp);
        return QW_DLT_RETRY;
    case 401:
    case 403:
        message_http(msg, msg_cap, "credentials refused", resp);
        return QW_DLT_AUTH;
    default:
        message_http(msg, msg_cap, "unexpected", resp);
        return QW_DLT_RETRY;
    }
}

enum qw_dlt_outcome qw_dlt_classify_status(const struct qw_dlt_response *resp,
                                           const char *const *ids, size_t n,
                                           struct qw_dlt_status *out,
                                           struct qw_dlt_status_counts *counts, char *msg,
                                           size_t msg_cap)
{
    struct qw_dlt_status_counts local = {0};
    enum qw_dlt_outcome outcome = QW_DLT_RETRY;
    if (msg && msg_cap > 0)
        msg[0] = '\0';
    /* Start from "nothing reported" whatever happens below. */
    if (out && ids && n > 0 && n <= QW_DLT_STATUS_MAX_IDS) {
        for (size_t i = 0; i < n; i++) {
            memset(&out[i], 0, sizeof(out[i]));
            if (qw_dlt_batch_id_valid(ids[i]))
                memcpy(out[i].id, ids[i], QW_BATCH_ID_LEN + 1);
        }
    }

    if (transport_failed(resp, msg, msg_cap)) {
        outcome = QW_DLT_RETRY;
    } else if (resp->http_status == 200) {
        char why[256];
        if (qw_dlt_json_parse_statuses(resp->body, resp->body_len, ids, n, out, &local, why,
                                       sizeof(why)) == QW_OK) {
            outcome = QW_DLT_OK;
            char summary[96];
            int len = snprintf(summary, sizeof(summary), "reported=%zu missing=%zu ignored=%zu",
                               local.reported, local.missing, local.ignored);
            if (msg && msg_cap > 0 && len > 0)
                qw_dlt_text_sanitize(msg, msg_cap, summary, (size_t)len);
        } else {
            outcome = QW_DLT_RETRY;
            message_set(msg, msg_cap, "HTTP 200 malformed", why, strlen(why));
        }
    } else if (resp->http_status == 401 || resp->http_status == 403) {
        outcome = QW_DLT_AUTH;
        message_http(msg, msg_cap, "credentials refused", resp);
    } else {
        outcome = QW_DLT_RETRY;
        message_http(msg, msg_cap, "unexpected", resp);
    }
    if (counts)
        *counts = local;
    return outcome;
}
