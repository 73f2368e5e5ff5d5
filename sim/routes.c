/* Request parsing for the simulator's HTTP API; see routes.h. */
#include "routes.h"

#include "common/err.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* True when `s[0..len)` is exactly `len` alphanumerics. */
static bool alnum_run(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (!is_alnum(s[i]))
            return false;
    }
    return true;
}

static void set_kind(struct qw_sim_route *out, enum qw_sim_route_kind kind, const char *method,
                     const char *allow)
{
    out->kind = kind;
    out->allow = allow;
    /* `allow` is "GET", "POST" or "GET, POST". */
    out->method_allowed = (strcmp(method, "GET") == 0 || strcmp(method, "POST") == 0) &&
                          strstr(allow, method) != NULL;
}

void qw_sim_route_parse(const char *method, const char *path, struct qw_sim_route *out)
{
    memset(out, 0, sizeof(*out));
    out->kind = QW_SIM_ROUTE_NOT_FOUND;
    out->method_allowed = true;
    out->allow = "";

    static const struct {
        const char *path;
        enum qw_sim_route_kind kind;
        const char *allow;
    } control[] = {
        {"/_sim/restart", QW_SIM_ROUTE_RESTART, "POST"},
        {"/_sim/faults", QW_SIM_ROUTE_FAULTS, "GET, POST"},
        {"/_sim/stats", QW_SIM_ROUTE_STATS, "GET"},
        {"/_sim/pause", QW_SIM_ROUTE_PAUSE, "POST"},
        {"/_sim/resume", QW_SIM_ROUTE_RESUME, "POST"},
    };
    for (size_t i = 0; i < sizeof(control) / sizeof(control[0]); i++) {
        if (strcmp(path, control[i].path) == 0) {
            set_kind(out, control[i].kind, method, control[i].allow);
            return;
        }
    }
    /* /_sim/nodes and /_sim/nodes/{index} (1 to 3 digits) */
    static const char nodes[] = "/_sim/nodes";
    if (strncmp(path, nodes, sizeof(nodes) - 1) == 0) {
        const char *rest = path + sizeof(nodes) - 1;
        size_t digits = rest[0] == '/' ? strspn(rest + 1, "0123456789") : 0;
        if (rest[0] == '\0') {
            set_kind(out, QW_SIM_ROUTE_NODES, method, "GET");
        } else if (digits >= 1 && digits <= 3 && rest[1 + digits] == '\0') {
            set_kind(out, QW_SIM_ROUTE_NODE, method, "POST");
            out->node = atoi(rest + 1);
        }
        return;
    }

    /* /scabbard/CCCCC-CCCCC/SSSS/{batches|batch_statuses} */
    static const char prefix[] = "/scabbard/";
    if (strncmp(path, prefix, sizeof(prefix) - 1) != 0)
        return;
    const char *p = path + sizeof(prefix) - 1;
    if (strlen(p) < 5 + 1 + 5 + 1 + 4 + 1 || !alnum_run(p, 5) || p[5] != '-' ||
        !alnum_run(p + 6, 5) || p[11] != '/' || !alnum_run(p + 12, 4) || p[16] != '/')
        return;
    const char *tail = p + 17;
    if (strcmp(tail, "batches") == 0)
        set_kind(out, QW_SIM_ROUTE_BATCHES, method, "POST");
    else if (strcmp(tail, "batch_statuses") == 0)
        set_kind(out, QW_SIM_ROUTE_STATUSES, method, "GET");
    else
        return;
    memcpy(out->circuit, p, 11);
    out->circuit[11] = '\0';
    memcpy(out->service, p + 12, 4);
    out->service[4] = '\0';
    snprintf(out->service_key, sizeof(out->service_key), "%s::%s", out->circuit, out->service);
}

bool qw_sim_route_is_control(enum qw_sim_route_kind kind)
{
    return kind == QW_SIM_ROUTE_RESTART || kind == QW_SIM_ROUTE_FAULTS ||
           kind == QW_SIM_ROUTE_STATS || kind == QW_SIM_ROUTE_PAUSE ||
           kind == QW_SIM_ROUTE_RESUME || kind == QW_SIM_ROUTE_NODES || kind == QW_SIM_ROUTE_NODE;
}

bool qw_sim_id_valid(const char *id)
{
    size_t n = 0;
    for (const char *p = id; *p; p++, n++) {
        if (n >= QW_SIM_ID_MAX)
            return false;
        if (!is_alnum(*p) && *p != '-' && *p != '.' && *p != '_' && *p != '~')
            return false;
    }
    return n > 0;
}

int qw_sim_ids_parse(const char *text, struct qw_sim_id_list *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!text || !*text) {
        snprintf(err, errlen, "the ids query parameter is required");
        return QW_ERR_INVALID;
    }
    size_t commas = 0;
    for (const char *p = text; *p; p++)
        commas += *p == ',';
    out->buf = strdup(text);
    out->ids = calloc(commas + 1, sizeof(*out->ids));
    if (!out->buf || !out->ids) {
        qw_sim_ids_free(out);
        snprintf(err, errlen, "out of memory");
        return QW_ERR_NOMEM;
    }
    char *save = NULL;
    for (char *tok = strtok_r(out->buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (out->n == QW_SIM_IDS_MAX) {
            snprintf(err, errlen, "more than %d ids", QW_SIM_IDS_MAX);
            qw_sim_ids_free(out);
            return QW_ERR_INVALID;
        }
        if (!qw_sim_id_valid(tok)) {
            snprintf(err, errlen, "malformed batch id");
            qw_sim_ids_free(out);
            return QW_ERR_INVALID;
        }
        out->ids[out->n++] = tok;
    }
    if (out->n == 0) {
        snprintf(err, errlen, "the ids query parameter is empty");
        qw_sim_ids_free(out);
        return QW_ERR_INVALID;
    }
    return QW_OK;
}

void qw_sim_ids_free(struct qw_sim_id_list *list)
{
    free(list->ids);
    free(list->buf);
    memset(list, 0, sizeof(*list));
}

int64_t qw_sim_wait_parse(const char *text)
{
    if (!text || strcmp(text, "false") == 0)
        return 0;
    bool number = *text != '\0';
    for (const char *p = text; *p; p++) {
        if ((*p < '0' || *p > '9') && *p != '.')
            number = false;
    }
    char *end;
    errno = 0;
    double s = number ? strtod(text, &end) : -1.0;
    if (!number || errno || *end || !isfinite(s) || s < 0.0)
        return QW_SIM_WAIT_DEFAULT_MS;
    return s * 1000.0 >= QW_SIM_WAIT_MAX_MS ? QW_SIM_WAIT_MAX_MS : (int64_t)(s * 1000.0);
}
