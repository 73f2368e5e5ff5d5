/* Fault settings, parsers, PRNG and per-request decisions; see faults.h. */
#include "faults.h"

#include "common/err.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- PRNG -------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void qw_sim_prng_seed(struct qw_sim_prng *p, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        p->s[i] = splitmix64(&seed);
    if (!(p->s[0] | p->s[1] | p->s[2] | p->s[3]))
        p->s[0] = 1;
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t qw_sim_prng_next(struct qw_sim_prng *p)
{
    uint64_t *s = p->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double qw_sim_prng_unit(struct qw_sim_prng *p)
{
    return (double)(qw_sim_prng_next(p) >> 11) * 0x1.0p-53;
}

/* ---- decisions --------------------------------------------------------- */

bool qw_sim_fault_in_burst(const struct qw_sim_fault_config *cfg, int64_t since_ms)
{
    if (cfg->burst_every_ms <= 0 || cfg->burst_len_ms <= 0 || since_ms < 0)
        return false;
    return since_ms % cfg->burst_every_ms >= cfg->burst_every_ms - cfg->burst_len_ms;
}

void qw_sim_fault_decide(const struct qw_sim_fault_config *cfg, struct qw_sim_prng *prng,
                         bool is_submission, int64_t since_ms, struct qw_sim_fault_decision *out)
{
    /* One draw per fault kind, always, in a fixed order. */
    double r_drop = qw_sim_prng_unit(prng);
    double r_hang = qw_sim_prng_unit(prng);
    double r_5xx = qw_sim_prng_unit(prng);
    double r_429 = qw_sim_prng_unit(prng);
    double r_slow = qw_sim_prng_unit(prng);
    double r_malformed = qw_sim_prng_unit(prng);
    uint64_t bits = qw_sim_prng_next(prng);

    memset(out, 0, sizeof(*out));
    out->garble = bits >> 2;
    if (r_drop < cfg->rate_drop) {
        out->action = QW_SIM_FAULT_DROP;
        out->accept_first = is_submission && (bits & 1);
    } else if (r_hang < cfg->rate_hang) {
        out->action = QW_SIM_FAULT_HANG;
        out->accept_first = is_submission && (bits & 1);
    } else if (r_5xx < cfg->rate_5xx) {
        out->action = QW_SIM_FAULT_5XX;
        out->http_status = (bits & 2) ? 503 : 500;
    } else if (is_submission && r_429 < cfg->rate_429) {
        out->action = QW_SIM_FAULT_429;
        out->http_status = 429;
    } else if (is_submission && qw_sim_fault_in_burst(cfg, since_ms)) {
        out->action = QW_SIM_FAULT_429;
        out->http_status = 429;
        out->burst = true;
    }
    if (out->action != QW_SIM_FAULT_DROP && out->action != QW_SIM_FAULT_HANG &&
        r_slow < cfg->rate_slow)
        out->slow_ms = cfg->slow_ms;
    out->malformed = out->action == QW_SIM_FAULT_NONE && r_malformed < cfg->rate_malformed;
}

/* ---- parsing ----------------------------------------------------------- */

static int parse_double(const char *text, double *out)
{
    if (!text || !*text)
        return QW_ERR_INVALID;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || *end || !isfinite(v))
        return QW_ERR_INVALID;
    *out = v;
    return QW_OK;
}

static int parse_ms(const char *text, size_t len, int64_t *out)
{
    if (len == 0 || len > 12)
        return QW_ERR_INVALID;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9')
            return QW_ERR_INVALID;
        v = v * 10 + (text[i] - '0');
    }
    *out = v;
    return QW_OK;
}

int qw_sim_fault_parse_rate(const char *text, double *out)
{
    double v;
    if (parse_double(text, &v) != QW_OK || v < 0.0 || v > 1.0)
        return QW_ERR_INVALID;
    *out = v;
    return QW_OK;
}

int qw_sim_fault_parse_slow(const char *text, double *rate, int64_t *ms)
{
    const char *colon = text ? strchr(text, ':') : NULL;
    if (!colon)
        return QW_ERR_INVALID;
    char rate_text[32];
    size_t n = (size_t)(colon - text);
    if (n == 0 || n >= sizeof(rate_text))
        return QW_ERR_INVALID;
    memcpy(rate_text, text, n);
    rate_text[n] = '\0';
    double r;
    int64_t m;
    if (qw_sim_fault_parse_rate(rate_text, &r) != QW_OK ||
        parse_ms(colon + 1, strlen(colon + 1), &m) != QW_OK || m > 3600 * 1000)
        return QW_ERR_INVALID;
    *rate = r;
    *ms = m;
    return QW_OK;
}

int qw_sim_fault_parse_burst(const char *text, int64_t *every_ms, int64_t *len_ms)
{
    const char *colon = text ? strchr(text, ':') : NULL;
    if (!colon)
        return QW_ERR_INVALID;
    int64_t every, len;
    if (parse_ms(text, (size_t)(colon - text), &every) != QW_OK ||
        parse_ms(colon + 1, strlen(colon + 1), &len) != QW_OK || len > every)
        return QW_ERR_INVALID;
    *every_ms = every;
    *len_ms = len;
    return QW_OK;
}

/* ---- JSON -------------------------------------------------------------- */

/* A rate field: a JSON number or a string parsed like the option. */
static int json_rate(const json_t *v, double *out)
{
    if (json_is_number(v)) {
        double d = json_number_value(v);
        if (d < 0.0 || d > 1.0)
            return QW_ERR_INVALID;
        *out = d;
        return QW_OK;
    }
    if (json_is_string(v))
        return qw_sim_fault_parse_rate(json_string_value(v), out);
    return QW_ERR_INVALID;
}

int qw_sim_fault_apply_json(struct qw_sim_fault_config *cfg, const json_t *changes, uint64_t *seed,
                            bool *seed_set, char *err, size_t errlen)
{
    *seed_set = false;
    if (!json_is_object(changes)) {
        snprintf(err, errlen, "body must be a JSON object");
        return QW_ERR_INVALID;
    }
    struct qw_sim_fault_config next = *cfg;
    const json_t *reset = json_object_get(changes, "reset");
    if (reset) {
        if (!json_is_boolean(reset)) {
            snprintf(err, errlen, "\"reset\" must be true or false");
            return QW_ERR_INVALID;
        }
        if (json_is_true(reset))
            memset(&next, 0, sizeof(next));
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)changes, key, v)
    {
        int rc = QW_OK;
        if (strcmp(key, "reset") == 0) {
            continue;
        } else if (strcmp(key, "fault-5xx") == 0) {
            rc = json_rate(v, &next.rate_5xx);
        } else if (strcmp(key, "fault-drop") == 0) {
            rc = json_rate(v, &next.rate_drop);
        } else if (strcmp(key, "fault-429") == 0) {
            rc = json_rate(v, &next.rate_429);
        } else if (strcmp(key, "fault-hang") == 0) {
            rc = json_rate(v, &next.rate_hang);
        } else if (strcmp(key, "fault-malformed") == 0) {
            rc = json_rate(v, &next.rate_malformed);
        } else if (strcmp(key, "fault-slow") == 0) {
            rc = json_is_string(v)
                     ? qw_sim_fault_parse_slow(json_string_value(v), &next.rate_slow, &next.slow_ms)
                     : QW_ERR_INVALID;
        } else if (strcmp(key, "fault-429-burst") == 0) {
            rc = json_is_string(v)
                     ? qw_sim_fault_parse_burst(json_string_value(v), &next.burst_every_ms,
                                                &next.burst_len_ms)
                     : QW_ERR_INVALID;
        } else if (strcmp(key, "seed") == 0) {
            if (json_is_integer(v) && json_integer_value(v) >= 0) {
                *seed = (uint64_t)json_integer_value(v);
                *seed_set = true;
            } else {
                rc = QW_ERR_INVALID;
            }
        } else {
            snprintf(err, errlen, "unknown key \"%.64s\"", key);
            *seed_set = false;
            return QW_ERR_INVALID;
        }
        if (rc != QW_OK) {
            snprintf(err, errlen, "bad value for \"%.64s\"", key);
            *seed_set = false;
            return QW_ERR_INVALID;
        }
    }
    *cfg = next;
    return QW_OK;
}

json_t *qw_sim_fault_to_json(const struct qw_sim_fault_config *cfg)
{
    char slow[64], burst[64];
    snprintf(slow, sizeof(slow), "%g:%" PRId64, cfg->rate_slow, cfg->slow_ms);
    snprintf(burst, sizeof(burst), "%" PRId64 ":%" PRId64, cfg->burst_every_ms, cfg->burst_len_ms);
    return json_pack("{s:f, s:f, s:f, s:s, s:s, s:f, s:f}", "fault-5xx", cfg->rate_5xx,
                     "fault-drop", cfg->rate_drop, "fault-429", cfg->rate_429, "fault-429-burst",
                     burst, "fault-slow", slow, "fault-hang", cfg->rate_hang, "fault-malformed",
                     cfg->rate_malformed);
}
