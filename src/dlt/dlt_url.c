/* Ledger identifiers and scabbard REST URLs; see dlt_url.h. */
#include "dlt/dlt_url.h"

#include "common/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool is_alnum(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool all_alnum(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!is_alnum(s[i]))
            return false;
    }
    return true;
}

int qw_dlt_service_id_parse(const char *service_id, struct qw_dlt_service_ref *out)
{
    const size_t total = QW_SERVICE_ID_LEN; /* circuit (11) + "::" + service (4) */
    if (!service_id || strnlen(service_id, total + 1) != total)
        return QW_ERR_INVALID;
    const char *s = service_id;
    if (!all_alnum(s, 5) || s[5] != '-' || !all_alnum(s + 6, 5))
        return QW_ERR_INVALID;
    if (s[11] != ':' || s[12] != ':' || !all_alnum(s + 13, QW_SERVICE_LEN))
        return QW_ERR_INVALID;
    if (out) {
        memcpy(out->circuit, s, QW_CIRCUIT_LEN);
        out->circuit[QW_CIRCUIT_LEN] = '\0';
        memcpy(out->service, s + 13, QW_SERVICE_LEN);
        out->service[QW_SERVICE_LEN] = '\0';
    }
    return QW_OK;
}

bool qw_dlt_batch_id_valid(const char *id)
{
    if (!id)
        return false;
    /* a table: every status answer checks each id several times */
    static const bool lower_hex[256] = {
        ['0'] = true, ['1'] = true, ['2'] = true, ['3'] = true, ['4'] = true, ['5'] = true,
        ['6'] = true, ['7'] = true, ['8'] = true, ['9'] = true, ['a'] = true, ['b'] = true,
        ['c'] = true, ['d'] = true, ['e'] = true, ['f'] = true,
    };
    size_t i = 0;
    for (; i < QW_BATCH_ID_LEN; i++) {
        if (!lower_hex[(unsigned char)id[i]])
            return false;
    }
    return id[i] == '\0';
}

/* Checks "host[:port]" (the authority, `len` bytes): a host, then nothing or a port 1..65535. */
static const char *authority_check(const char *auth, size_t len)
{
    static const char bad_port[] = "must have a port 1..65535 after the host";
    const char *end = auth + len;
    const char *p = auth;
    if (*p == '[') {
        p = memchr(auth, ']', len);
        if (!p || p == auth + 1)
            return "must have a closing ] after an IPv6 address";
        p++;
    } else {
        while (p < end && *p != ':')
            p++;
        if (p == auth)
            return "must name a host after the scheme";
    }
    if (p == end)
        return NULL;
    if (*p != ':')
        return bad_port;
    p++;
    size_t digits = (size_t)(end - p);
    if (digits == 0 || digits > 5)
        return bad_port;
    long port = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return bad_port;
        port = port * 10 + (*p - '0');
    }
    return port >= 1 && port <= 65535 ? NULL : bad_port;
}

const char *qw_dlt_base_url_check(const char *base)
{
    if (!base)
        return "must be set";
    size_t skip;
    if (strncasecmp(base, "http://", 7) == 0)
        skip = 7;
    else if (strncasecmp(base, "https://", 8) == 0)
        skip = 8;
    else
        return "must start with http:// or https://";
    const char *host = base + skip;
    if (*host == '\0' || *host == '/')
        return "must name a host after the scheme";
    for (const char *p = base; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c <= 0x20 || c == 0x7f)
            return "must not contain spaces or control characters";
        if (c == '@')
            return "must not contain credentials (user:password@)";
        if (c == '?' || c == '#')
            return "must not contain ? or #";
    }
    return authority_check(host, strcspn(host, "/"));
}

bool qw_dlt_base_url_valid(const char *base)
{
    return qw_dlt_base_url_check(base) == NULL;
}

/* Length of `base` without its trailing slashes. */
static size_t base_len(const char *base)
{
    size_t len = strlen(base);
    while (len > 0 && base[len - 1] == '/')
        len--;
    return len;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

void qw_dlt_url_list_free(struct qw_dlt_url_list *list)
{
    for (size_t i = 0; i < list->n; i++) {
        free(list->url[i]);
        free(list->serves[i]);
    }
    memset(list, 0, sizeof(*list));
}

/* A circuit id: [A-Za-z0-9]{5}-[A-Za-z0-9]{5}. */
static bool circuit_ok(const char *s, size_t len)
{
    return len == QW_CIRCUIT_LEN && s[5] == '-' && all_alnum(s, 5) && all_alnum(s + 6, 5);
}

/* Checks the tags of an entry (blank-separated circuits and services) and
 * copies them with one blank between each; NULL in *out when there are none. */
static int tags_parse(const char *p, size_t len, char **out, const char **why)
{
    *out = NULL;
    char *copy = malloc(len + 1);
    if (!copy)
        return QW_ERR_NOMEM;
    size_t w = 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && is_blank(p[i]))
            i++;
        size_t start = i;
        while (i < len && !is_blank(p[i]))
            i++;
        if (i == start)
            break;
        const char *t = p + start;
        size_t tl = i - start;
        bool ok = circuit_ok(t, tl) ||
                  (tl == QW_CIRCUIT_LEN + 2 + QW_SERVICE_LEN && circuit_ok(t, QW_CIRCUIT_LEN) &&
                   t[11] == ':' && t[12] == ':' && all_alnum(t + 13, QW_SERVICE_LEN));
        if (!ok) {
            free(copy);
            *why = "must follow a URL only with circuits (abcde-12345) or services "
                   "(abcde-12345::ab12) that node serves, separated by blanks";
            return QW_ERR_INVALID;
        }
        if (w > 0)
            copy[w++] = ' ';
        memcpy(copy + w, t, tl);
        w += tl;
    }
    copy[w] = '\0';
    if (w == 0)
        free(copy);
    else
        *out = copy;
    return QW_OK;
}

uint32_t qw_dlt_url_list_route(const struct qw_dlt_url_list *list, const char *service_id)
{
    uint32_t mask = 0;
    const char *sep = service_id ? strstr(service_id, "::") : NULL;
    size_t circuit_len = sep ? (size_t)(sep - service_id) : 0;
    size_t id_len = service_id ? strlen(service_id) : 0;
    for (size_t i = 0; i < list->n; i++) {
        const char *t = list->serves[i];
        bool serves = t == NULL;
        while (t && *t && !serves) {
            size_t tl = strcspn(t, " ");
            serves = (tl == id_len && strncmp(t, service_id, tl) == 0) ||
                     (tl == circuit_len && circuit_len > 0 && strncmp(t, service_id, tl) == 0);
            t += tl;
            while (*t == ' ')
                t++;
        }
        if (serves)
            mask |= UINT32_C(1) << i;
    }
    return mask;
}

/* Parses into `l` (always filled, so a failure can free it); see dlt_url.h. */
static int list_split(const char *list, struct qw_dlt_url_list *l, const char **why)
{
    if (!list || !*list) {
        *why = "must be set";
        return QW_ERR_INVALID;
    }
    for (const char *p = list;; p++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && is_blank(*p)) {
            p++;
            len--;
        }
        while (len > 0 && is_blank(p[len - 1]))
            len--;
        if (len == 0) {
            *why = "must not have an empty entry between commas";
            return QW_ERR_INVALID;
        }
        if (l->n == QW_DLT_MAX_NODES) {
            *why = "must list at most 16 node URLs";
            return QW_ERR_INVALID;
        }
        size_t url_len = 0;
        while (url_len < len && !is_blank(p[url_len]))
            url_len++;
        char *url = strndup(p, url_len);
        if (!url)
            return QW_ERR_NOMEM;
        l->url[l->n++] = url;
        if ((*why = qw_dlt_base_url_check(url)) != NULL)
            return QW_ERR_INVALID;
        int trc = tags_parse(p + url_len, len - url_len, &l->serves[l->n - 1], why);
        if (trc != QW_OK)
            return trc;
        for (size_t i = 0; i + 1 < l->n; i++) {
            size_t a = base_len(l->url[i]);
            if (a == base_len(url) && strncasecmp(l->url[i], url, a) == 0) {
                *why = "must not list the same node URL twice";
                return QW_ERR_INVALID;
            }
        }
        if (!end)
            return QW_OK;
        p = end;
    }
}

int qw_dlt_url_list_parse(const char *list, struct qw_dlt_url_list *out, const char **why)
{
    struct qw_dlt_url_list l = {0};
    const char *reason = NULL;
    int rc = list_split(list, &l, &reason);
    if (why)
        *why = reason;
    if (rc != QW_OK || !out)
        qw_dlt_url_list_free(&l);
    else
        *out = l;
    return rc;
}

const char *qw_dlt_url_list_check(const char *list)
{
    const char *why = NULL;
    int rc = qw_dlt_url_list_parse(list, NULL, &why);
    if (rc == QW_ERR_NOMEM)
        return "could not be checked (out of memory)";
    return why;
}

/*
 * Appends `len` bytes of `s` at *pos in buf, keeping one byte for the NUL.
 * Returns false (and leaves the buffer unterminated) when it would not fit.
 */
static bool append(char *buf, size_t cap, size_t *pos, const char *s, size_t len)
{
    if (cap == 0 || len >= cap - *pos)
        return false;
    memcpy(buf + *pos, s, len);
    *pos += len;
    return true;
}

static bool append_str(char *buf, size_t cap, size_t *pos, const char *s)
{
    return append(buf, cap, pos, s, strlen(s));
}

/* Writes `{base}/scabbard/{circuit}/{service}/` and returns false when bad or too long. */
static bool append_service_prefix(char *buf, size_t cap, size_t *pos, const char *base,
                                  const char *service_id)
{
    struct qw_dlt_service_ref ref;
    if (!qw_dlt_base_url_valid(base) || qw_dlt_service_id_parse(service_id, &ref) != QW_OK)
        return false;
    return append(buf, cap, pos, base, base_len(base)) && append_str(buf, cap, pos, "/scabbard/") &&
           append_str(buf, cap, pos, ref.circuit) && append_str(buf, cap, pos, "/") &&
           append_str(buf, cap, pos, ref.service) && append_str(buf, cap, pos, "/");
}

static int finish(char *buf, size_t cap, size_t pos, bool ok)
{
    if (!ok) {
        if (cap > 0)
            buf[0] = '\0';
        return QW_ERR_INVALID;
    }
    buf[pos] = '\0';
    return QW_OK;
}

int qw_dlt_url_batches(char *buf, size_t cap, const char *base, const char *service_id)
{
    size_t pos = 0;
    bool ok = append_service_prefix(buf, cap, &pos, base, service_id) &&
              append_str(buf, cap, &pos, "batches");
    return finish(buf, cap, pos, ok);
}

int qw_dlt_url_statuses(char *buf, size_t cap, const char *base, const char *service_id,
                        const char *const *ids, size_t n, int wait_s)
{
    size_t pos = 0;
    bool ok = n > 0 && ids && wait_s >= 0 && wait_s <= QW_DLT_MAX_WAIT_S &&
              append_service_prefix(buf, cap, &pos, base, service_id) &&
              append_str(buf, cap, &pos, "batch_statuses?ids=");
    for (size_t i = 0; ok && i < n; i++) {
        ok = qw_dlt_batch_id_valid(ids[i]) && (i == 0 || append_str(buf, cap, &pos, ",")) &&
             append(buf, cap, &pos, ids[i], QW_BATCH_ID_LEN);
    }
    if (ok) {
        char wait[32];
        int len = snprintf(wait, sizeof(wait), "&wait=%d", wait_s);
        ok = len > 0 && append(buf, cap, &pos, wait, (size_t)len);
    }
    return finish(buf, cap, pos, ok);
}
