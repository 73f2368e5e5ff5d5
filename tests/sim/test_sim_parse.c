/*
 * Unit tests for the simulator's request and option parsing: routes, ids,
 * wait, BatchList bodies, which services a node runs (sim/routes.h,
 * sim/payload.h, sim/options.h, sim/node.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "batch.pb-c.h"
#include "common/err.h"
#include "node.h"
#include "options.h"
#include "payload.h"
#include "routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_routes_table(void **state)
{
    static const struct {
        const char *method;
        const char *path;
        enum qw_sim_route_kind kind;
        bool allowed;
        const char *key; /* service key, "" when none */
    } rows[] = {
        {"POST", "/scabbard/abcde-fghij/ab12/batches", QW_SIM_ROUTE_BATCHES, true,
         "abcde-fghij::ab12"},
        {"GET", "/scabbard/ABCDE-01234/Zz99/batch_statuses", QW_SIM_ROUTE_STATUSES, true,
         "ABCDE-01234::Zz99"},
        {"GET", "/scabbard/abcde-fghij/ab12/batches", QW_SIM_ROUTE_BATCHES, false,
         "abcde-fghij::ab12"},
        {"POST", "/scabbard/abcde-fghij/ab12/batch_statuses", QW_SIM_ROUTE_STATUSES, false,
         "abcde-fghij::ab12"},
        {"POST", "/scabbard/abcd-fghij/ab12/batches", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"POST", "/scabbard/abcdef-fghij/ab12/batches", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"POST", "/scabbard/abcde_fghij/ab12/batches", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"POST", "/scabbard/abcde-fghij/ab1/batches", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"POST", "/scabbard/abcde-fghij/ab123/batches", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"POST", "/scabbard/abcde-fgh!j/ab12/batches", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"POST", "/scabbard/abcde-fghij/ab12/batches/", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"POST", "/scabbard/abcde-fghij/ab12/other", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"POST", "/scabbard/abcde-fghij/ab12", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"GET", "/", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"POST", "/_sim/restart", QW_SIM_ROUTE_RESTART, true, ""},
        {"GET", "/_sim/restart", QW_SIM_ROUTE_RESTART, false, ""},
        {"GET", "/_sim/faults", QW_SIM_ROUTE_FAULTS, true, ""},
        {"POST", "/_sim/faults", QW_SIM_ROUTE_FAULTS, true, ""},
        {"PUT", "/_sim/faults", QW_SIM_ROUTE_FAULTS, false, ""},
        {"GET", "/_sim/stats", QW_SIM_ROUTE_STATS, true, ""},
        {"POST", "/_sim/pause", QW_SIM_ROUTE_PAUSE, true, ""},
        {"POST", "/_sim/resume", QW_SIM_ROUTE_RESUME, true, ""},
        {"POS", "/_sim/resume", QW_SIM_ROUTE_RESUME, false, ""},
        {"GET", "/_sim/statsx", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"GET", "/_sim/nodes", QW_SIM_ROUTE_NODES, true, ""},
        {"POST", "/_sim/nodes", QW_SIM_ROUTE_NODES, false, ""},
        {"POST", "/_sim/nodes/2", QW_SIM_ROUTE_NODE, true, ""},
        {"POST", "/_sim/nodes/015", QW_SIM_ROUTE_NODE, true, ""},
        {"GET", "/_sim/nodes/2", QW_SIM_ROUTE_NODE, false, ""},
        {"POST", "/_sim/nodes/", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"POST", "/_sim/nodes/1000", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"POST", "/_sim/nodes/-1", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"POST", "/_sim/nodes/1/x", QW_SIM_ROUTE_NOT_FOUND, true, ""},
        {"GET", "/_sim/nodesx", QW_SIM_ROUTE_NOT_FOUND, true, ""},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct qw_sim_route r;
        qw_sim_route_parse(rows[i].method, rows[i].path, &r);
        if (r.kind != rows[i].kind || r.method_allowed != rows[i].allowed)
            print_error("row %zu: %s %s -> kind %d allowed %d\n", i, rows[i].method, rows[i].path,
                        r.kind, r.method_allowed);
        assert_int_equal(r.kind, rows[i].kind);
        assert_int_equal(r.method_allowed, rows[i].allowed);
        assert_string_equal(r.service_key, rows[i].key);
    }
    struct qw_sim_route node;
    qw_sim_route_parse("POST", "/_sim/nodes/015", &node);
    assert_int_equal(node.node, 15);
    struct qw_sim_route r;
    qw_sim_route_parse("POST", "/scabbard/abcde-fghij/ab12/batches", &r);
    assert_string_equal(r.circuit, "abcde-fghij");
    assert_string_equal(r.service, "ab12");
    assert_false(qw_sim_route_is_control(r.kind));
    assert_true(qw_sim_route_is_control(QW_SIM_ROUTE_STATS));
}

static void test_id_valid(void **state)
{
    char long_id[QW_SIM_ID_MAX + 2];
    memset(long_id, 'a', sizeof(long_id) - 1);
    long_id[QW_SIM_ID_MAX + 1] = '\0';
    assert_false(qw_sim_id_valid(long_id));
    long_id[QW_SIM_ID_MAX] = '\0';
    assert_true(qw_sim_id_valid(long_id));
    static const struct {
        const char *id;
        bool ok;
    } rows[] = {
        {"abc123", true}, {"A-b.c_d~e", true}, {"", false},     {"a,b", false},
        {"a b", false},   {"a&b", false},      {"a\"b", false}, {"a%20", false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        assert_int_equal(qw_sim_id_valid(rows[i].id), rows[i].ok);
}

static void test_ids_parse(void **state)
{
    static const struct {
        const char *text;
        int rc;
        size_t n;
        const char *first;
        const char *last;
    } rows[] = {
        {"a", QW_OK, 1, "a", "a"},
        {"a,b,c", QW_OK, 3, "a", "c"},
        {",a,,b,", QW_OK, 2, "a", "b"},
        {NULL, QW_ERR_INVALID, 0, NULL, NULL},
        {"", QW_ERR_INVALID, 0, NULL, NULL},
        {",,,", QW_ERR_INVALID, 0, NULL, NULL},
        {"a,b c", QW_ERR_INVALID, 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct qw_sim_id_list list;
        char err[128] = "";
        int rc = qw_sim_ids_parse(rows[i].text, &list, err, sizeof(err));
        assert_int_equal(rc, rows[i].rc);
        assert_int_equal(list.n, rows[i].n);
        if (rc == QW_OK) {
            assert_string_equal(list.ids[0], rows[i].first);
            assert_string_equal(list.ids[list.n - 1], rows[i].last);
        } else {
            assert_true(err[0] != '\0');
            assert_null(list.ids);
        }
        qw_sim_ids_free(&list);
    }
    /* Too many ids. */
    size_t n = QW_SIM_IDS_MAX + 1;
    char *text = malloc(n * 2);
    assert_non_null(text);
    for (size_t i = 0; i < n; i++) {
        text[2 * i] = 'x';
        text[2 * i + 1] = ',';
    }
    text[2 * n - 1] = '\0';
    struct qw_sim_id_list list;
    char err[128];
    assert_int_equal(qw_sim_ids_parse(text, &list, err, sizeof(err)), QW_ERR_INVALID);
    text[2 * (n - 1) - 1] = '\0'; /* exactly the maximum */
    assert_int_equal(qw_sim_ids_parse(text, &list, err, sizeof(err)), QW_OK);
    assert_int_equal(list.n, QW_SIM_IDS_MAX);
    qw_sim_ids_free(&list);
    free(text);
}

static void test_wait_parse(void **state)
{
    static const struct {
        const char *text;
        int64_t ms;
    } rows[] = {
        {NULL, 0},
        {"false", 0},
        {"0", 0},
        {"5", 5000},
        {"0.25", 250},
        {"60", 60000},
        {"600", 600000},
        {"99999999", QW_SIM_WAIT_MAX_MS},
        {"", QW_SIM_WAIT_DEFAULT_MS},
        {"true", QW_SIM_WAIT_DEFAULT_MS},
        {"1e9", QW_SIM_WAIT_DEFAULT_MS},
        {"-1", QW_SIM_WAIT_DEFAULT_MS},
        {"abc", QW_SIM_WAIT_DEFAULT_MS},
        {".", QW_SIM_WAIT_DEFAULT_MS},
        {"1.2.3", QW_SIM_WAIT_DEFAULT_MS},
    };
    assert_int_equal(QW_SIM_WAIT_DEFAULT_MS, 300000);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int64_t ms = qw_sim_wait_parse(rows[i].text);
        if (ms != rows[i].ms)
            print_error("row %zu: %s\n", i, rows[i].text ? rows[i].text : "(null)");
        assert_int_equal(ms, rows[i].ms);
    }
}

/* Packs a BatchList of `n` batches named `ids` (each with one transaction
 * when `with_txn`); caller frees. */
static uint8_t *pack_batches(const char *const *ids, size_t n, bool with_txn, size_t *len)
{
    Batch *batches = calloc(n, sizeof(*batches));
    Batch **ptrs = calloc(n, sizeof(*ptrs));
    char **names = calloc(n, sizeof(*names));
    char txn_id[] = "txn0";
    Transaction txn;
    transaction__init(&txn);
    txn.header_signature = txn_id;
    Transaction *txns[] = {&txn};
    uint8_t header[] = {1, 2, 3};
    for (size_t i = 0; i < n; i++) {
        names[i] = strdup(ids[i]);
        batch__init(&batches[i]);
        batches[i].header_signature = names[i];
        batches[i].header.data = header;
        batches[i].header.len = sizeof(header);
        if (with_txn) {
            batches[i].n_transactions = 1;
            batches[i].transactions = txns;
        }
        ptrs[i] = &batches[i];
    }
    BatchList list;
    batch_list__init(&list);
    list.n_batches = n;
    list.batches = ptrs;
    *len = batch_list__get_packed_size(&list);
    uint8_t *buf = malloc(*len ? *len : 1);
    batch_list__pack(&list, buf);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(ptrs);
    free(batches);
    return buf;
}

static void test_payload_decode(void **state)
{
    static const char *const ids[] = {"aa11", "bb22"};
    size_t len;
    uint8_t *buf = pack_batches(ids, 2, true, &len);
    struct qw_sim_payload p;
    char err[160] = "";
    assert_int_equal(qw_sim_payload_decode(buf, len, &p, err, sizeof(err)), QW_OK);
    assert_int_equal(p.n, 2);
    assert_string_equal(p.subs[0].batch_id, "aa11");
    assert_string_equal(p.subs[1].batch_id, "bb22");
    assert_string_equal(p.subs[0].first_txn_id, "txn0");
    qw_sim_payload_free(&p);
    free(buf);

    buf = pack_batches(ids, 1, false, &len);
    assert_int_equal(qw_sim_payload_decode(buf, len, &p, err, sizeof(err)), QW_OK);
    assert_null(p.subs[0].first_txn_id);
    qw_sim_payload_free(&p);
    free(buf);

    /* Failures: every one is QW_ERR_INVALID with a reason. */
    static const char *const bad_ids[] = {"ok1", "", "ok2", "no,comma"};
    buf = pack_batches(bad_ids, 4, true, &len);
    assert_int_equal(qw_sim_payload_decode(buf, len, &p, err, sizeof(err)), QW_ERR_INVALID);
    assert_non_null(strstr(err, "2 batch"));
    assert_int_equal(p.n, 2); /* the readable ids, for the log */
    qw_sim_payload_free(&p);
    free(buf);

    /* An empty BatchList packs to zero bytes; one with an empty batch does not. */
    static const char *const no_ids[] = {""};
    size_t elen;
    uint8_t *ebuf = pack_batches(no_ids, 0, false, &elen);
    static const uint8_t garbage[] = "this is not protobuf";
    static const uint8_t unknown_field[] = {0x10, 0x01}; /* field 2 varint: parses, no batches */
    const struct {
        const uint8_t *body;
        size_t len;
        const char *needle;
    } rows[] = {
        {garbage, 0, "empty"},
        {garbage, sizeof(garbage) - 1, "not a protobuf"},
        {ebuf, elen, "empty"},
        {unknown_field, sizeof(unknown_field), "no batches"},
        {(const uint8_t *)"\x0a\x05", 2, "not a protobuf"}, /* truncated field */
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        err[0] = '\0';
        assert_int_equal(qw_sim_payload_decode(rows[i].body, rows[i].len, &p, err, sizeof(err)),
                         QW_ERR_INVALID);
        if (!strstr(err, rows[i].needle))
            print_error("row %zu: %s\n", i, err);
        assert_non_null(strstr(err, rows[i].needle));
        assert_int_equal(p.n, 0);
        qw_sim_payload_free(&p);
    }
    free(ebuf);
}

/* Parses a space-separated command line. */
static int parse_line(const char *line, struct qw_sim_options *o, bool *usage, char *err,
                      size_t errlen)
{
    char buf[1024];
    char *argv[64];
    int argc = 0;
    snprintf(buf, sizeof(buf), "scabbard-sim %s", line);
    char *save = NULL;
    for (char *t = strtok_r(buf, " ", &save); t && argc < 63; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    argv[argc] = NULL;
    int rc = qw_sim_options_parse(argc, argv, o, usage, err, errlen);
    /* Strings point into buf: tests below only look at numbers and flags. */
    return rc;
}

static void test_options_defaults(void **state)
{
    struct qw_sim_options o;
    bool usage;
    char err[256];
    assert_int_equal(parse_line("", &o, &usage, err, sizeof(err)), QW_OK);
    assert_int_equal(o.n_listen, 1);
    assert_string_equal(o.listen[0].host, "127.0.0.1");
    assert_int_equal(o.listen[0].port, 8008);
    assert_int_equal(o.listen[0].latency_ms, 0);
    assert_int_equal(o.ledger.queue_high, 30);
    assert_int_equal(o.ledger.queue_low, 15);
    assert_int_equal(o.ledger.global_high, 0);
    assert_int_equal(o.ledger.commit_delay_us, 20000);
    assert_int_equal(o.ledger.status_memory, 100);
    assert_false(o.ledger.valid_step);
    assert_null(o.ledger.invalid_prefix);
    assert_null(o.token);
    assert_false(o.seed_set);
    assert_true(o.faults.rate_5xx == 0.0);
    assert_int_equal(o.threads, 2);
    /* scabbard's behaviour unless told otherwise */
    assert_int_equal(o.history, QW_SIM_HISTORY_PER_NODE);
    assert_int_equal(o.propagation_ms, 0);
    assert_false(o.unknown_answers);
    assert_int_equal(o.wait_poll_ms, 100);
    assert_int_equal(o.protocol, 2);
    assert_false(o.ledger.never_refuse);
    assert_int_equal(o.listen[0].n_hosts, 0);
}

/* The switches that model scabbard, and what they refuse. */
static void test_options_scabbard(void **state)
{
    struct qw_sim_options o;
    bool usage;
    char err[256];
    assert_int_equal(parse_line("--listen 127.0.0.1:0 --listen 127.0.0.1:0 --history shared "
                                "--propagation-ms 500 --unknown-wait answer --wait-poll-ms 0 "
                                "--protocol 1 --node-hosts 1:abcde-12345,fghij-67890::ab12",
                                &o, &usage, err, sizeof(err)),
                     QW_OK);
    assert_int_equal(o.history, QW_SIM_HISTORY_SHARED);
    assert_int_equal(o.propagation_ms, 500);
    assert_true(o.unknown_answers);
    assert_int_equal(o.wait_poll_ms, 0);
    assert_int_equal(o.protocol, 1);
    assert_true(o.ledger.never_refuse);
    assert_int_equal(o.listen[0].n_hosts, 0);
    assert_int_equal(o.listen[1].n_hosts, 2);
    assert_string_equal(o.listen[1].hosts[0], "abcde-12345");
    assert_string_equal(o.listen[1].hosts[1], "fghij-67890::ab12");
    static const char *const bad[] = {
        "--history both",
        "--unknown-wait never",
        "--protocol 3",
        "--protocol 0",
        "--wait-poll-ms -1",
        "--propagation-ms x",
        "--node-hosts 1:abcde-12345",      /* node 1 does not exist */
        "--node-hosts 0:abcde",            /* not a circuit */
        "--node-hosts 0:abcde-12345::ab1", /* not a service */
        "--node-hosts 0:abcde-12345,,x",   /* empty item */
        "--node-hosts 0:",                 /* nothing */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = parse_line(bad[i], &o, &usage, err, sizeof(err));
        if (rc != QW_ERR_INVALID)
            print_error("accepted: %s\n", bad[i]);
        assert_int_equal(rc, QW_ERR_INVALID);
    }
}

/* Which services a node runs: all without a list, else those named by circuit or service. */
static void test_node_hosts(void **state)
{
    struct qw_sim_node nd;
    memset(&nd, 0, sizeof(nd));
    assert_true(qw_sim_node_hosts(&nd, "abcde-12345::ab12"));
    snprintf(nd.hosts[0], sizeof(nd.hosts[0]), "abcde-12345");
    snprintf(nd.hosts[1], sizeof(nd.hosts[1]), "fghij-67890::cd34");
    nd.n_hosts = 2;
    static const struct {
        const char *key;
        bool hosted;
    } rows[] = {
        {"abcde-12345::ab12", true},  {"abcde-12345::zz99", true},  {"fghij-67890::cd34", true},
        {"fghij-67890::ab12", false}, {"abcde-1234x::ab12", false}, {"abcde-123::ab12", false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        if (qw_sim_node_hosts(&nd, rows[i].key) != rows[i].hosted)
            print_error("row %zu: %s\n", i, rows[i].key);
        assert_true(qw_sim_node_hosts(&nd, rows[i].key) == rows[i].hosted);
    }
}

static void test_options_table(void **state)
{
    static const struct {
        const char *line;
        int rc;
        bool usage;
    } rows[] = {
        {"--listen 0.0.0.0:0 --queue-high 10 --queue-low 5", QW_OK, false},
        {"--listen [::1]:9000", QW_OK, false},
        {"--listen nohost", QW_ERR_INVALID, false},
        {"--listen :80", QW_ERR_INVALID, false},
        {"--listen 127.0.0.1:70000", QW_ERR_INVALID, false},
        {"--listen 127.0.0.1:0 --listen 127.0.0.1:0 --node-latency-ms 1:150", QW_OK, false},
        {"--listen 127.0.0.1:0 --node-latency-ms 1:150", QW_ERR_INVALID, false},
        {"--node-latency-ms 0:150", QW_OK, false},
        {"--node-latency-ms 0", QW_ERR_INVALID, false},
        {"--node-latency-ms :5", QW_ERR_INVALID, false},
        {"--node-latency-ms 16:5", QW_ERR_INVALID, false},
        {"--node-latency-ms 0:600001", QW_ERR_INVALID, false},
        {"--queue-high abc", QW_ERR_INVALID, false},
        {"--queue-high 0", QW_ERR_INVALID, false},
        {"--queue-high 10 --queue-low 11", QW_ERR_INVALID, false},
        {"--global-high 5 --global-low 6", QW_ERR_INVALID, false},
        {"--global-limit 40 --global-resume 20", QW_OK, false},
        {"--global-limit 5 --global-resume 6", QW_ERR_INVALID, false},
        {"--rate 1000", QW_OK, false},
        {"--rate 1000:50", QW_OK, false},
        {"--rate 0", QW_ERR_INVALID, false},
        {"--rate 10:", QW_ERR_INVALID, false},
        {"--rate fast", QW_ERR_INVALID, false},
        {"--commit-delay-ms -1", QW_ERR_INVALID, false},
        {"--invalid-prefix xyz", QW_ERR_INVALID, false},
        {"--invalid-prefix DeadBeef", QW_OK, false},
        {"--fault-5xx 1.5", QW_ERR_INVALID, false},
        {"--fault-5xx 0.5 --fault-drop 0 --fault-hang 1", QW_OK, false},
        {"--fault-slow 0.5", QW_ERR_INVALID, false},
        {"--fault-slow 0.5:250", QW_OK, false},
        {"--fault-429-burst 1000:2000", QW_ERR_INVALID, false},
        {"--fault-429-burst 2000:500", QW_OK, false},
        {"--token a --token-file b", QW_ERR_INVALID, false},
        {"--seed 18446744073709551615", QW_OK, false},
        {"--seed 18446744073709551616", QW_ERR_INVALID, false},
        {"--threads 0", QW_ERR_INVALID, false},
        {"--log-level loud", QW_ERR_INVALID, false},
        {"--bogus", QW_ERR_INVALID, true},
        {"--queue-high", QW_ERR_INVALID, true},
        {"stray", QW_ERR_INVALID, true},
        {"--help", QW_OK, false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct qw_sim_options o;
        bool usage = false;
        char err[256] = "";
        int rc = parse_line(rows[i].line, &o, &usage, err, sizeof(err));
        if (rc != rows[i].rc || usage != rows[i].usage)
            print_error("row %zu: \"%s\" -> rc %d usage %d err %s\n", i, rows[i].line, rc, usage,
                        err);
        assert_int_equal(rc, rows[i].rc);
        assert_int_equal(usage, rows[i].usage);
        if (rc != QW_OK)
            assert_true(err[0] != '\0');
    }
    struct qw_sim_options o;
    bool usage;
    char err[256];
    assert_int_equal(parse_line("--listen [::1]:9000 --fault-slow 0.5:250 --fault-429-burst "
                                "2000:500 --seed 42 --valid-step --status-memory 0",
                                &o, &usage, err, sizeof(err)),
                     QW_OK);
    assert_int_equal(o.n_listen, 1);
    assert_string_equal(o.listen[0].host, "::1");
    assert_int_equal(o.listen[0].port, 9000);
    assert_true(o.faults.rate_slow == 0.5);
    assert_int_equal(o.faults.slow_ms, 250);
    assert_int_equal(o.faults.burst_every_ms, 2000);
    assert_int_equal(o.faults.burst_len_ms, 500);
    assert_true(o.seed_set);
    assert_int_equal(o.seed, 42);
    assert_true(o.ledger.valid_step);
    assert_int_equal(o.ledger.status_memory, 0);

    /* several nodes, in --listen order, each with its latency; 16 at most */
    assert_int_equal(parse_line("--node-latency-ms 2:150 --listen 127.0.0.1:0 --listen [::1]:7 "
                                "--listen 10.0.0.1:8 --node-latency-ms 0:5",
                                &o, &usage, err, sizeof(err)),
                     QW_OK);
    assert_int_equal(o.n_listen, 3);
    assert_string_equal(o.listen[1].host, "::1");
    assert_int_equal(o.listen[1].port, 7);
    assert_string_equal(o.listen[2].host, "10.0.0.1");
    assert_int_equal(o.listen[0].latency_ms, 5);
    assert_int_equal(o.listen[1].latency_ms, 0);
    assert_int_equal(o.listen[2].latency_ms, 150);
    char many[1024] = "";
    for (int i = 0; i < QW_SIM_NODES_MAX + 1; i++)
        strcat(many, "--listen 127.0.0.1:0 ");
    assert_int_equal(parse_line(many, &o, &usage, err, sizeof(err)), QW_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes_table),   cmocka_unit_test(test_id_valid),
        cmocka_unit_test(test_ids_parse),      cmocka_unit_test(test_wait_parse),
        cmocka_unit_test(test_payload_decode), cmocka_unit_test(test_options_defaults),
        cmocka_unit_test(test_options_table),  cmocka_unit_test(test_options_scabbard),
        cmocka_unit_test(test_node_hosts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
