/* Command-line options of scabbard-sim; see options.h. */
#include "options.h"

#include "capacity.h"
#include "common/err.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_LISTEN = 256,
    OPT_PORT_FILE,
    OPT_QUEUE_HIGH,
    OPT_QUEUE_LOW,
    OPT_GLOBAL_HIGH,
    OPT_GLOBAL_LOW,
    OPT_RATE,
    OPT_COMMIT_DELAY,
    OPT_VALID_STEP,
    OPT_INVALID_PREFIX,
    OPT_STATUS_MEMORY,
    OPT_TOKEN,
    OPT_TOKEN_FILE,
    OPT_SEED,
    OPT_FAULT_5XX,
    OPT_FAULT_DROP,
    OPT_FAULT_429,
    OPT_FAULT_429_BURST,
    OPT_FAULT_SLOW,
    OPT_FAULT_HANG,
    OPT_FAULT_MALFORMED,
    OPT_EVENT_LOG,
    OPT_THREADS,
    OPT_HANG_MAX,
    OPT_LOG_LEVEL,
    OPT_NODE_LATENCY,
    OPT_NODE_HOSTS,
    OPT_HISTORY,
    OPT_PROPAGATION,
    OPT_UNKNOWN_WAIT,
    OPT_WAIT_POLL,
    OPT_PROTOCOL,
    OPT_HELP,
    OPT_VERSION,
};

static const struct option long_options[] = {
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"port-file", required_argument, NULL, OPT_PORT_FILE},
    {"queue-high", required_argument, NULL, OPT_QUEUE_HIGH},
    {"queue-low", required_argument, NULL, OPT_QUEUE_LOW},
    {"global-high", required_argument, NULL, OPT_GLOBAL_HIGH},
    {"global-low", required_argument, NULL, OPT_GLOBAL_LOW},
    {"global-limit", required_argument, NULL, OPT_GLOBAL_HIGH},
    {"global-resume", required_argument, NULL, OPT_GLOBAL_LOW},
    {"rate", required_argument, NULL, OPT_RATE},
    {"commit-delay-ms", required_argument, NULL, OPT_COMMIT_DELAY},
    {"valid-step", no_argument, NULL, OPT_VALID_STEP},
    {"invalid-prefix", required_argument, NULL, OPT_INVALID_PREFIX},
    {"status-memory", required_argument, NULL, OPT_STATUS_MEMORY},
    {"token", required_argument, NULL, OPT_TOKEN},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"seed", required_argument, NULL, OPT_SEED},
    {"fault-5xx", required_argument, NULL, OPT_FAULT_5XX},
    {"fault-drop", required_argument, NULL, OPT_FAULT_DROP},
    {"fault-429", required_argument, NULL, OPT_FAULT_429},
    {"fault-429-burst", required_argument, NULL, OPT_FAULT_429_BURST},
    {"fault-slow", required_argument, NULL, OPT_FAULT_SLOW},
    {"fault-hang", required_argument, NULL, OPT_FAULT_HANG},
    {"fault-malformed", required_argument, NULL, OPT_FAULT_MALFORMED},
    {"event-log", required_argument, NULL, OPT_EVENT_LOG},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"hang-max-ms", required_argument, NULL, OPT_HANG_MAX},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"node-latency-ms", required_argument, NULL, OPT_NODE_LATENCY},
    {"node-hosts", required_argument, NULL, OPT_NODE_HOSTS},
    {"history", required_argument, NULL, OPT_HISTORY},
    {"propagation-ms", required_argument, NULL, OPT_PROPAGATION},
    {"unknown-wait", required_argument, NULL, OPT_UNKNOWN_WAIT},
    {"wait-poll-ms", required_argument, NULL, OPT_WAIT_POLL},
    {"protocol", required_argument, NULL, OPT_PROTOCOL},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

void qw_sim_options_defaults(struct qw_sim_options *o)
{
    memset(o, 0, sizeof(*o));
    snprintf(o->listen[0].host, sizeof(o->listen[0].host), "127.0.0.1");
    o->listen[0].port = 8008;
    o->n_listen = 1;
    o->ledger.queue_high = 30;
    o->ledger.queue_low = 15;
    o->ledger.commit_delay_us = 20 * 1000;
    o->ledger.status_memory = 100;
    o->threads = 2;
    o->hang_max_ms = 300 * 1000;
    o->log_level = QW_LOG_INFO;
    o->history = QW_SIM_HISTORY_PER_NODE;
    o->wait_poll_ms = 100;
    o->protocol = 2;
}

/* Parses a decimal integer in [min, max]. */
static int parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!text || !isdigit((unsigned char)text[0]))
        return QW_ERR_INVALID;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || *end || v < min || v > max)
        return QW_ERR_INVALID;
    *out = v;
    return QW_OK;
}

/* Parses HOST:PORT into the next node (the first --listen replaces the default). */
static int parse_listen(const char *text, struct qw_sim_options *o, bool *given)
{
    if (*given && o->n_listen == QW_SIM_NODES_MAX)
        return QW_ERR_INVALID;
    struct qw_sim_listen *l = &o->listen[*given ? o->n_listen : 0];
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text)
        return QW_ERR_INVALID;
    uint64_t port;
    if (parse_u64(colon + 1, 0, 65535, &port) != QW_OK)
        return QW_ERR_INVALID;
    const char *host = text;
    size_t len = (size_t)(colon - text);
    if (host[0] == '[') {
        if (len < 3 || host[len - 1] != ']')
            return QW_ERR_INVALID;
        host++;
        len -= 2;
    }
    if (len == 0 || len >= sizeof(l->host))
        return QW_ERR_INVALID;
    memcpy(l->host, host, len);
    l->host[len] = '\0';
    l->port = (int)port;
    l->latency_ms = 0;
    o->n_listen = *given ? o->n_listen + 1 : 1;
    *given = true;
    return QW_OK;
}

/* Parses NODE:MS (node index, extra latency); checked against the nodes at the end. */
static int parse_node_latency(const char *text, struct qw_sim_options *o)
{
    const char *colon = strchr(text, ':');
    if (!colon || colon == text || colon - text > 3)
        return QW_ERR_INVALID;
    char index[4];
    memcpy(index, text, (size_t)(colon - text));
    index[colon - text] = '\0';
    uint64_t node, ms;
    if (parse_u64(index, 0, QW_SIM_NODES_MAX - 1, &node) != QW_OK ||
        parse_u64(colon + 1, 0, 600000, &ms) != QW_OK)
        return QW_ERR_INVALID;
    o->node_latency_ms[node] = (int64_t)ms;
    o->node_latency_set[node] = true;
    return QW_OK;
}

/* Parses NODE:KEY[,KEY...] (circuits or services the node runs); checked at the end. */
static int parse_node_hosts(const char *text, struct qw_sim_options *o)
{
    const char *colon = strchr(text, ':');
    if (!colon || colon == text || colon - text > 3 || !colon[1])
        return QW_ERR_INVALID;
    char index[4];
    memcpy(index, text, (size_t)(colon - text));
    index[colon - text] = '\0';
    uint64_t node;
    if (parse_u64(index, 0, QW_SIM_NODES_MAX - 1, &node) != QW_OK)
        return QW_ERR_INVALID;
    o->node_hosts[node] = colon + 1;
    return QW_OK;
}

/* A circuit id: 5 + '-' + 5 characters of [A-Za-z0-9]. */
static bool circuit_valid(const char *s, size_t len)
{
    if (len != 11 || s[5] != '-')
        return false;
    for (size_t i = 0; i < len; i++) {
        if (i != 5 && !isalnum((unsigned char)s[i]))
            return false;
    }
    return true;
}

/* Splits node `i`'s --node-hosts list into o->listen[i].hosts. */
static int split_hosts(struct qw_sim_options *o, size_t i, char *err, size_t errlen)
{
    struct qw_sim_listen *l = &o->listen[i];
    const char *p = o->node_hosts[i];
    l->n_hosts = 0;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        bool ok = len > 0 && l->n_hosts < QW_SIM_HOSTS_MAX &&
                  (circuit_valid(p, len) ||
                   (len == 17 && circuit_valid(p, 11) && p[11] == ':' && p[12] == ':' &&
                    isalnum((unsigned char)p[13]) && isalnum((unsigned char)p[14]) &&
                    isalnum((unsigned char)p[15]) && isalnum((unsigned char)p[16])));
        if (!ok) {
            snprintf(err, errlen,
                     "--node-hosts %zu: \"%.*s\" is neither a circuit (abcde-12345) nor a "
                     "service (abcde-12345::ab12), or more than %d are given",
                     i, (int)(len > 40 ? 40 : len), p, QW_SIM_HOSTS_MAX);
            return QW_ERR_INVALID;
        }
        memcpy(l->hosts[l->n_hosts], p, len);
        l->hosts[l->n_hosts][len] = '\0';
        l->n_hosts++;
        p += len;
        if (*p == ',')
            p++;
    }
    return QW_OK;
}

static bool all_hex(const char *text)
{
    if (!*text)
        return false;
    for (const char *p = text; *p; p++) {
        if (!isxdigit((unsigned char)*p))
            return false;
    }
    return true;
}

/* Applies one option; returns QW_OK or QW_ERR_INVALID with `err` set. */
static int apply(int opt, const char *arg, struct qw_sim_options *o, bool *listen_given, char *err,
                 size_t errlen)
{
    uint64_t u;
    int rc = QW_OK;
    switch (opt) {
    case OPT_LISTEN:
        rc = parse_listen(arg, o, listen_given);
        break;
    case OPT_NODE_LATENCY:
        rc = parse_node_latency(arg, o);
        break;
    case OPT_NODE_HOSTS:
        rc = parse_node_hosts(arg, o);
        break;
    case OPT_HISTORY:
        rc = strcmp(arg, "per-node") == 0 || strcmp(arg, "shared") == 0 ? QW_OK : QW_ERR_INVALID;
        o->history = strcmp(arg, "shared") == 0 ? QW_SIM_HISTORY_SHARED : QW_SIM_HISTORY_PER_NODE;
        break;
    case OPT_PROPAGATION:
        rc = parse_u64(arg, 0, 600000, &u);
        o->propagation_ms = (int64_t)u;
        break;
    case OPT_UNKNOWN_WAIT:
        rc = strcmp(arg, "hang") == 0 || strcmp(arg, "answer") == 0 ? QW_OK : QW_ERR_INVALID;
        o->unknown_answers = strcmp(arg, "answer") == 0;
        break;
    case OPT_WAIT_POLL:
        rc = parse_u64(arg, 0, 10000, &u);
        o->wait_poll_ms = (int64_t)u;
        break;
    case OPT_PROTOCOL:
        rc = parse_u64(arg, 1, 2, &u);
        o->protocol = (int)u;
        break;
    case OPT_PORT_FILE:
        o->port_file = arg;
        break;
    case OPT_QUEUE_HIGH:
        rc = parse_u64(arg, 1, 1000000, &u);
        o->ledger.queue_high = (size_t)u;
        break;
    case OPT_QUEUE_LOW:
        rc = parse_u64(arg, 0, 1000000, &u);
        o->ledger.queue_low = (size_t)u;
        break;
    case OPT_GLOBAL_HIGH:
        rc = parse_u64(arg, 0, 100000000, &u);
        o->ledger.global_high = (size_t)u;
        break;
    case OPT_GLOBAL_LOW:
        rc = parse_u64(arg, 0, 100000000, &u);
        o->ledger.global_low = (size_t)u;
        break;
    case OPT_RATE:
        rc =
            qw_sim_rate_parse(arg, &o->ledger.rate, &o->ledger.rate_burst) ? QW_OK : QW_ERR_INVALID;
        break;
    case OPT_COMMIT_DELAY:
        rc = parse_u64(arg, 0, 3600 * 1000, &u);
        o->ledger.commit_delay_us = (int64_t)u * 1000;
        break;
    case OPT_VALID_STEP:
        o->ledger.valid_step = true;
        break;
    case OPT_INVALID_PREFIX:
        rc = all_hex(arg) ? QW_OK : QW_ERR_INVALID;
        o->ledger.invalid_prefix = arg;
        break;
    case OPT_STATUS_MEMORY:
        rc = parse_u64(arg, 0, 100000000, &u);
        o->ledger.status_memory = (size_t)u;
        break;
    case OPT_TOKEN:
        rc = arg[0] ? QW_OK : QW_ERR_INVALID;
        o->token = arg;
        break;
    case OPT_TOKEN_FILE:
        o->token_file = arg;
        break;
    case OPT_SEED:
        rc = parse_u64(arg, 0, UINT64_MAX, &o->seed);
        o->seed_set = true;
        break;
    case OPT_FAULT_5XX:
        rc = qw_sim_fault_parse_rate(arg, &o->faults.rate_5xx);
        break;
    case OPT_FAULT_DROP:
        rc = qw_sim_fault_parse_rate(arg, &o->faults.rate_drop);
        break;
    case OPT_FAULT_429:
        rc = qw_sim_fault_parse_rate(arg, &o->faults.rate_429);
        break;
    case OPT_FAULT_429_BURST:
        rc = qw_sim_fault_parse_burst(arg, &o->faults.burst_every_ms, &o->faults.burst_len_ms);
        break;
    case OPT_FAULT_SLOW:
        rc = qw_sim_fault_parse_slow(arg, &o->faults.rate_slow, &o->faults.slow_ms);
        break;
    case OPT_FAULT_HANG:
        rc = qw_sim_fault_parse_rate(arg, &o->faults.rate_hang);
        break;
    case OPT_FAULT_MALFORMED:
        rc = qw_sim_fault_parse_rate(arg, &o->faults.rate_malformed);
        break;
    case OPT_EVENT_LOG:
        o->event_log = arg;
        break;
    case OPT_THREADS:
        rc = parse_u64(arg, 1, 64, &u);
        o->threads = (int)u;
        break;
    case OPT_HANG_MAX:
        rc = parse_u64(arg, 1, 24 * 3600 * 1000, &u);
        o->hang_max_ms = (int64_t)u;
        break;
    case OPT_LOG_LEVEL:
        rc = qw_log_level_parse(arg, &o->log_level);
        break;
    default:
        rc = QW_ERR_INVALID;
    }
    if (rc != QW_OK) {
        const char *name = "?";
        for (const struct option *lo = long_options; lo->name; lo++) {
            if (lo->val == opt && strcmp(name, "?") == 0)
                name = lo->name;
        }
        snprintf(err, errlen, "invalid value for --%s: \"%.100s\"", name, arg ? arg : "");
    }
    return rc;
}

/* Checks the options against each other; gives each node its --node-latency-ms. */
static int check(struct qw_sim_options *o, char *err, size_t errlen)
{
    const struct qw_sim_ledger_config *l = &o->ledger;
    for (size_t i = 0; i < QW_SIM_NODES_MAX; i++) {
        if (!o->node_latency_set[i])
            continue;
        if (i >= o->n_listen) {
            snprintf(err, errlen, "--node-latency-ms names node %zu, but only %zu --listen given",
                     i, o->n_listen);
            return QW_ERR_INVALID;
        }
        o->listen[i].latency_ms = o->node_latency_ms[i];
    }
    for (size_t i = 0; i < QW_SIM_NODES_MAX; i++) {
        if (!o->node_hosts[i])
            continue;
        if (i >= o->n_listen) {
            snprintf(err, errlen, "--node-hosts names node %zu, but only %zu --listen given", i,
                     o->n_listen);
            return QW_ERR_INVALID;
        }
        if (split_hosts(o, i, err, errlen) != QW_OK)
            return QW_ERR_INVALID;
    }
    o->ledger.never_refuse = o->protocol == 1;
    if (l->queue_low > l->queue_high) {
        snprintf(err, errlen, "--queue-low (%zu) must not exceed --queue-high (%zu)", l->queue_low,
                 l->queue_high);
        return QW_ERR_INVALID;
    }
    if (l->global_low > l->global_high) {
        snprintf(err, errlen, "--global-low (%zu) must not exceed --global-high (%zu)",
                 l->global_low, l->global_high);
        return QW_ERR_INVALID;
    }
    if (o->token && o->token_file) {
        snprintf(err, errlen, "--token and --token-file are mutually exclusive");
        return QW_ERR_INVALID;
    }
    return QW_OK;
}

int qw_sim_options_parse(int argc, char **argv, struct qw_sim_options *o, bool *show_usage,
                         char *err, size_t errlen)
{
    qw_sim_options_defaults(o);
    *show_usage = false;
    bool listen_given = false;
    optind = 0; /* GNU: restart scanning (tests parse several times) */
    opterr = 0;
    for (;;) {
        int opt = getopt_long(argc, argv, "h", long_options, NULL);
        if (opt == -1)
            break;
        if (opt == 'h')
            opt = OPT_HELP;
        if (opt == '?' || opt == ':') {
            *show_usage = true;
            if (optopt >= OPT_LISTEN)
                snprintf(err, errlen, "option %s needs a value", argv[optind - 1]);
            else
                snprintf(err, errlen, "unknown option %s", argv[optind - 1]);
            return QW_ERR_INVALID;
        }
        if (opt == OPT_HELP) {
            o->help = true;
            continue;
        }
        if (opt == OPT_VERSION) {
            o->version = true;
            continue;
        }
        int rc = apply(opt, optarg, o, &listen_given, err, errlen);
        if (rc != QW_OK)
            return rc;
    }
    if (optind < argc) {
        *show_usage = true;
        snprintf(err, errlen, "unexpected argument \"%.100s\"", argv[optind]);
        return QW_ERR_INVALID;
    }
    return check(o, err, errlen);
}

void qw_sim_options_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: %s [options]\n"
            "A simulated Splinter scabbard ledger (REST) for tests, demos and benchmarks.\n"
            "\n"
            "  --listen HOST:PORT        address to listen on (default 127.0.0.1:8008; port 0 = "
            "any);\n"
            "                            repeat it for several nodes of the same ledger (up to "
            "16)\n"
            "  --node-latency-ms N:MS    node N (0 = first --listen) answers MS ms late\n"
            "  --node-hosts N:KEY,...    node N runs only these circuits or services (404 for\n"
            "                            others); default: every node runs every service\n"
            "  --history per-node|shared whose batch history a status query reads: the node's\n"
            "                            own (per-node, default) or one shared by all nodes\n"
            "  --propagation-ms MS       per-node: a commit reaches the other nodes MS late (0)\n"
            "  --unknown-wait hang|answer  a wait on an id the node does not know lasts the\n"
            "                            whole wait (hang, default) or ends at once (answer)\n"
            "  --wait-poll-ms MS         a waiting status query looks again every MS (100);\n"
            "                            0 = answers at the change itself\n"
            "  --protocol 1|2            scabbard protocol version: 1 never answers 429 (2)\n"
            "  --port-file FILE          write the bound ports to FILE (one a line, in --listen "
            "order)\n"
            "  --queue-high N            per-service queued batches that start 429s (30)\n"
            "  --queue-low N             ... and below which they stop (15)\n"
            "  --global-high N           same over all services, 0 = off (0);\n"
            "                            alias --global-limit (the seed's 30 over the node)\n"
            "  --global-low N            (0); alias --global-resume (the seed's 15)\n"
            "  --rate R[:BURST]          accept at most R batches a second over all services,\n"
            "                            BURST at once (default R/10); 429 above it\n"
            "  --commit-delay-ms MS      time per status step (20)\n"
            "  --valid-step              Pending -> Valid -> Committed\n"
            "  --invalid-prefix HEX      batches whose id starts with HEX end Invalid\n"
            "  --status-memory N         finalized batches remembered per service, 0 = all "
            "(100)\n"
            "  --token T                 require 'Authorization: Bearer T'\n"
            "  --token-file FILE         read T from FILE (trailing newline ignored)\n"
            "  --seed N                  fault PRNG seed (default: from time and pid)\n"
            "  --fault-5xx RATE          answer 500/503 with probability RATE (0..1)\n"
            "  --fault-drop RATE         close the connection without answering\n"
            "  --fault-429 RATE          extra 429s on submissions\n"
            "  --fault-429-burst EVERY:LEN  429 storms: the last LEN ms of every EVERY ms\n"
            "  --fault-slow RATE:MS      answer MS milliseconds late\n"
            "  --fault-hang RATE         never answer; hold the connection\n"
            "  --fault-malformed RATE    garble JSON bodies (202 and batch_statuses)\n"
            "  --event-log FILE          append NDJSON events to FILE\n"
            "  --threads N               HTTP threads (2)\n"
            "  --hang-max-ms MS          close a hung connection after MS (300000)\n"
            "  --log-level LEVEL         debug|info|warn|error (info)\n"
            "  --help, --version\n"
            "\n"
            "Signals: SIGHUP wipes the ledger (node restart); SIGTERM/SIGINT stop.\n"
            "Control: POST /_sim/restart, GET|POST /_sim/faults, GET /_sim/stats,\n"
            "         POST /_sim/pause, POST /_sim/resume, GET /_sim/nodes,\n"
            "         POST /_sim/nodes/N {\"up\": bool, \"latency_ms\": MS}. See sim/README.md.\n",
            prog);
}
