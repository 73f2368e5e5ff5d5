/*
 * End-to-end tests of scabbard-sim: each test starts the built binary on
 * port 0 (path from $SCABBARD_SIM_BIN, else the compile-time
 * SCABBARD_SIM_BIN), talks real HTTP to it with libcurl, and stops it with
 * SIGTERM, expecting exit status 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "batch.pb-c.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SCABBARD_SIM_BIN
#define SCABBARD_SIM_BIN "scabbard-sim"
#endif

#define CIRCUIT "abcde-fghij"
#define SERVICE "ab12"
#define BATCHES_PATH "/scabbard/" CIRCUIT "/" SERVICE "/batches"
#define STATUSES_PATH "/scabbard/" CIRCUIT "/" SERVICE "/batch_statuses"
#define SVC_KEY CIRCUIT "::" SERVICE

/* A running simulator. */
struct sim {
    pid_t pid;       /* child process */
    int port;        /* port requests go to (one of ports) */
    int ports[4];    /* every node's port, in --listen order */
    char dir[64];    /* scratch directory */
    char evlog[128]; /* event log path */
    CURL *curl;      /* keep-alive handle for this sim */
};

/* One HTTP exchange. */
struct reply {
    long status;       /* HTTP status, 0 when none */
    char *body;        /* NUL-terminated body, malloc'd */
    size_t len;        /* body bytes */
    double elapsed_ms; /* wall time of the exchange */
};

/* The simulator a test started and has not stopped (killed by teardown
 * when an assertion ends the test early). */
static pid_t running_pid;

static int kill_leftover(void **state)
{
    if (running_pid > 0) {
        kill(running_pid, SIGKILL);
        waitpid(running_pid, NULL, 0);
        running_pid = 0;
    }
    return 0;
}

static const char *sim_bin(void)
{
    const char *env = getenv("SCABBARD_SIM_BIN");
    return env && *env ? env : SCABBARD_SIM_BIN;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static void pause_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Starts the simulator with `extra` (NULL-terminated) arguments and waits
 * for its port file. */
static void sim_start(struct sim *s, const char *const *extra)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->dir, sizeof(s->dir), "/tmp/sim-e2e-XXXXXX");
    assert_non_null(mkdtemp(s->dir));
    char port_file[128];
    snprintf(port_file, sizeof(port_file), "%s/port", s->dir);
    snprintf(s->evlog, sizeof(s->evlog), "%s/events.ndjson", s->dir);
    const char *argv[64] = {sim_bin(), "--listen",    "127.0.0.1:0", "--port-file",
                            port_file, "--event-log", s->evlog,      "--seed",
                            "1",       "--log-level", "warn"};
    size_t argc = 11;
    for (size_t i = 0; extra && extra[i] && argc < 62; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        char *cargv[64];                  /* execv wants mutable strings */
        for (size_t i = 0; i <= argc; i++)
            cargv[i] = argv[i] ? strdup(argv[i]) : NULL;
        execv(cargv[0], cargv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    /* Await the port file (written atomically once listening). */
    for (int i = 0; i < 1000; i++) {
        FILE *f = fopen(port_file, "r");
        if (f) {
            int ok = fscanf(f, "%d", &s->port) == 1;
            s->ports[0] = s->port;
            for (int k = 1; ok && k < 4 && fscanf(f, "%d", &s->ports[k]) == 1; k++) {
            }
            fclose(f);
            if (ok && s->port > 0)
                break;
        }
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            print_error("scabbard-sim exited early (status %d)\n", status);
            fail();
        }
        pause_ms(10);
    }
    assert_true(s->port > 0);
    running_pid = s->pid;
    s->curl = curl_easy_init();
    assert_non_null(s->curl);
}

/* SIGTERM, expect a clean exit, remove the scratch files. */
static void sim_stop(struct sim *s)
{
    curl_easy_cleanup(s->curl);
    s->curl = NULL;
    assert_int_equal(kill(s->pid, SIGTERM), 0);
    int status = 0;
    assert_int_equal(waitpid(s->pid, &status, 0), s->pid);
    running_pid = 0;
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void sim_cleanup(struct sim *s)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/port", s->dir);
    unlink(path);
    unlink(s->evlog);
    rmdir(s->dir);
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    struct reply *r = arg;
    size_t len = size * n;
    char *nb = realloc(r->body, r->len + len + 1);
    if (!nb)
        return 0;
    memcpy(nb + r->len, data, len);
    r->body = nb;
    r->len += len;
    r->body[r->len] = '\0';
    return len;
}

/* Performs one request on the sim's keep-alive handle. `auth` is a full
 * Authorization header value or NULL. Returns the curl result. */
static CURLcode http(struct sim *s, const char *method, const char *path, const void *body,
                     size_t body_len, const char *auth, long timeout_ms, struct reply *r)
{
    memset(r, 0, sizeof(*r));
    r->body = calloc(1, 1);
    char url[8192];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", s->port, path);
    CURL *c = s->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 30000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    struct curl_slist *headers = NULL;
    char auth_header[256];
    if (auth) {
        snprintf(auth_header, sizeof(auth_header), "Authorization: %s", auth);
        headers = curl_slist_append(headers, auth_header);
    }
    if (strcmp(method, "POST") == 0) {
        headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)body_len);
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    double t0 = now_ms();
    CURLcode rc = curl_easy_perform(c);
    r->elapsed_ms = now_ms() - t0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(headers);
    return rc;
}

static void reply_free(struct reply *r)
{
    free(r->body);
    r->body = NULL;
}

/* A 128-lowercase-hex batch id derived from `n` (and `prefix`, if any). */
static void make_id(unsigned n, const char *prefix, char out[129])
{
    uint64_t x = 0x9e3779b97f4a7c15ULL * (n + 1);
    size_t p = 0;
    if (prefix) {
        p = strlen(prefix);
        memcpy(out, prefix, p);
    }
    for (; p < 128; p++) {
        x ^= x >> 13;
        x *= 0xff51afd7ed558ccdULL;
        x ^= x >> 29;
        out[p] = "0123456789abcdef"[x & 15];
    }
    out[128] = '\0';
}

/* A BatchList holding `n` Batches named `ids`, each with a header and one
 * Transaction. Caller frees. */
static uint8_t *make_batchlist_n(const char *const *ids, size_t n, size_t *len)
{
    char txn_sig[129], signer[] = "02aabbcc";
    make_id(7, "7", txn_sig);
    char *txn_ids[] = {txn_sig};
    BatchHeader bh;
    batch_header__init(&bh);
    bh.signer_public_key = signer;
    bh.n_transaction_ids = 1;
    bh.transaction_ids = txn_ids;
    uint8_t header[256];
    size_t header_len = batch_header__pack(&bh, header);
    uint8_t payload[] = "payload";
    Transaction txn;
    transaction__init(&txn);
    txn.header.data = header;
    txn.header.len = header_len;
    txn.header_signature = txn_sig;
    txn.payload.data = payload;
    txn.payload.len = sizeof(payload) - 1;
    Transaction *txns[] = {&txn};
    Batch batch[64];
    Batch *batches[64];
    assert_true(n <= 64);
    for (size_t i = 0; i < n; i++) {
        batch__init(&batch[i]);
        batch[i].header.data = header;
        batch[i].header.len = header_len;
        batch[i].header_signature = (char *)ids[i];
        batch[i].n_transactions = 1;
        batch[i].transactions = txns;
        batches[i] = &batch[i];
    }
    BatchList list;
    batch_list__init(&list);
    list.n_batches = n;
    list.batches = batches;
    *len = batch_list__get_packed_size(&list);
    uint8_t *buf = malloc(*len);
    assert_non_null(buf);
    batch_list__pack(&list, buf);
    return buf;
}

static uint8_t *make_batchlist(const char *id, size_t *len)
{
    const char *ids[1] = {id};
    return make_batchlist_n(ids, 1, len);
}

/* POSTs batch `id` and returns the HTTP status (0 when no answer). */
static long submit(struct sim *s, const char *id, const char *auth, struct reply *r)
{
    size_t len;
    uint8_t *body = make_batchlist(id, &len);
    http(s, "POST", BATCHES_PATH, body, len, auth, 5000, r);
    free(body);
    return r->status;
}

static long submit_simple(struct sim *s, const char *id)
{
    struct reply r;
    long status = submit(s, id, NULL, &r);
    reply_free(&r);
    return status;
}

/* GETs the statuses of `ids` (comma-separated) with `wait_s`; returns the
 * parsed array (caller decrefs) and the reply's elapsed time. */
static json_t *statuses(struct sim *s, const char *ids, int wait_s, double *elapsed_ms)
{
    char path[4096];
    snprintf(path, sizeof(path), STATUSES_PATH "?ids=%s&wait=%d", ids, wait_s);
    struct reply r;
    assert_int_equal(http(s, "GET", path, NULL, 0, NULL, 70000, &r), CURLE_OK);
    assert_int_equal(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    if (!j)
        print_error("not JSON: %s\n", r.body);
    assert_non_null(j);
    assert_true(json_is_array(j));
    if (elapsed_ms)
        *elapsed_ms = r.elapsed_ms;
    reply_free(&r);
    return j;
}

static const char *status_type(json_t *arr, size_t i)
{
    json_t *e = json_array_get(arr, i);
    return json_string_value(json_object_get(json_object_get(e, "status"), "statusType"));
}

/* POSTs a control route and expects 200. */
static void control(struct sim *s, const char *path, const char *json_body)
{
    struct reply r;
    assert_int_equal(
        http(s, "POST", path, json_body, json_body ? strlen(json_body) : 0, NULL, 5000, &r),
        CURLE_OK);
    if (r.status != 200)
        print_error("%s -> %ld %s\n", path, r.status, r.body);
    assert_int_equal(r.status, 200);
    reply_free(&r);
}

static json_t *get_stats(struct sim *s)
{
    struct reply r;
    assert_int_equal(http(s, "GET", "/_sim/stats", NULL, 0, NULL, 5000, &r), CURLE_OK);
    assert_int_equal(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    reply_free(&r);
    return j;
}

static long long stat_int(json_t *stats, const char *a, const char *b)
{
    json_t *v = json_object_get(stats, a);
    if (b)
        v = json_object_get(v, b);
    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

/* ---- tests ------------------------------------------------------------- */

static void test_submit_link_and_commit(void **state)
{
    struct sim s;
    sim_start(&s, NULL);
    char id[129];
    make_id(1, NULL, id);
    struct reply r;
    assert_int_equal(submit(&s, id, NULL, &r), 202);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    char expected[512];
    snprintf(expected, sizeof(expected), STATUSES_PATH "?ids=%s", id);
    assert_string_equal(json_string_value(json_object_get(j, "link")), expected);
    json_decref(j);
    reply_free(&r);

    double elapsed;
    json_t *arr = statuses(&s, id, 10, &elapsed);
    assert_int_equal(json_array_size(arr), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(arr, 0), "id")), id);
    assert_string_equal(status_type(arr, 0), "Committed");
    assert_true(json_is_array(
        json_object_get(json_object_get(json_array_get(arr, 0), "status"), "message")));
    assert_true(json_is_number(json_object_get(json_array_get(arr, 0), "timestamp")));
    assert_true(elapsed < 5000.0);
    json_decref(arr);

    /* Unknown ids come back in request order; an id the node does not know
     * holds a waiting query for its whole wait, as scabbard's does. */
    char other[129], list[300];
    make_id(2, NULL, other);
    snprintf(list, sizeof(list), "%s,%s", other, id);
    arr = statuses(&s, list, 1, &elapsed);
    assert_string_equal(status_type(arr, 0), "Unknown");
    assert_string_equal(status_type(arr, 1), "Committed");
    assert_true(elapsed >= 990.0);
    json_decref(arr);
    arr = statuses(&s, list, 0, &elapsed);
    assert_string_equal(status_type(arr, 0), "Unknown");
    assert_true(elapsed < 900.0);
    json_decref(arr);

    /* A resubmission is accepted again and counted as a duplicate. */
    assert_int_equal(submit_simple(&s, id), 202);
    json_t *st = get_stats(&s);
    assert_int_equal(stat_int(st, "accepted", NULL), 1);
    assert_int_equal(stat_int(st, "duplicates", NULL), 1);
    assert_int_equal(stat_int(st, "committed", NULL), 1);
    assert_int_equal(stat_int(st, "posts", "202"), 2);
    json_decref(st);
    sim_stop(&s);
    sim_cleanup(&s);
}

static void test_bad_requests(void **state)
{
    struct sim s;
    sim_start(&s, NULL);
    static const struct {
        const char *method;
        const char *path;
        const char *body;
        long status;
    } rows[] = {
        {"POST", BATCHES_PATH, "this is not protobuf", 400},
        {"POST", BATCHES_PATH, "", 400},
        {"GET", STATUSES_PATH, NULL, 400},
        {"GET", STATUSES_PATH "?ids=", NULL, 400},
        {"POST", "/scabbard/abc-fghij/ab12/batches", "x", 404},
        {"POST", "/scabbard/abcde-fghij/ab123/batches", "x", 404},
        {"GET", "/", NULL, 404},
        {"GET", BATCHES_PATH, NULL, 405},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct reply r;
        assert_int_equal(http(&s, rows[i].method, rows[i].path, rows[i].body,
                              rows[i].body ? strlen(rows[i].body) : 0, NULL, 5000, &r),
                         CURLE_OK);
        if (r.status != rows[i].status)
            print_error("row %zu: %s %s -> %ld\n", i, rows[i].method, rows[i].path, r.status);
        assert_int_equal(r.status, rows[i].status);
        json_t *j = json_loads(r.body, 0, NULL);
        assert_non_null(j);
        assert_true(json_is_string(json_object_get(j, "message")));
        json_decref(j);
        reply_free(&r);
    }
    sim_stop(&s);
    sim_cleanup(&s);
}

/* 429 with an empty body from 30 queued until fewer than 15 are queued. */
static json_t *read_events(const char *path);

/* GET `path` on node `node` with a client timeout; returns the curl result and the reply. */
static CURLcode get_on(struct sim *s, int node, const char *path, long timeout_ms, struct reply *r)
{
    s->port = s->ports[node];
    CURLcode rc = http(s, "GET", path, NULL, 0, NULL, timeout_ms, r);
    s->port = s->ports[0];
    return rc;
}

/* POSTs batch `id` to node `node`; returns the HTTP status. */
static long submit_on(struct sim *s, int node, const char *id)
{
    s->port = s->ports[node];
    long status = submit_simple(s, id);
    s->port = s->ports[0];
    return status;
}

/* The status node `node` reports for `id` with `wait_s`; caller frees. */
static char *status_on(struct sim *s, int node, const char *id, int wait_s, double *elapsed_ms)
{
    s->port = s->ports[node];
    json_t *arr = statuses(s, id, wait_s, elapsed_ms);
    s->port = s->ports[0];
    char *st = strdup(status_type(arr, 0));
    json_decref(arr);
    return st;
}

static void expect_status(struct sim *s, int node, const char *id, int wait_s, const char *expected)
{
    char *st = status_on(s, node, id, wait_s, NULL);
    if (strcmp(st, expected) != 0)
        print_error("node %d, wait %d: %s, expected %s\n", node, wait_s, st, expected);
    assert_string_equal(st, expected);
    free(st);
}

/* A query without a number for `wait` waits scabbard's default (300 s), so
 * one for an unknown id is still waiting when the client gives up. */
static void test_wait_default(void **state)
{
    struct sim s;
    sim_start(&s, NULL);
    struct reply r;
    assert_int_equal(get_on(&s, 0, STATUSES_PATH "?ids=abc&wait=soon", 1500, &r),
                     CURLE_OPERATION_TIMEDOUT);
    reply_free(&r);
    curl_easy_cleanup(s.curl); /* the timed-out connection is not reused */
    s.curl = curl_easy_init();
    assert_int_equal(get_on(&s, 0, STATUSES_PATH "?ids=abc", 1500, &r), CURLE_OK);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    sim_stop(&s);
    sim_cleanup(&s);
}

/* Each node answers from its own history: what was posted to it at once,
 * the others' commits after the propagation delay. */
static void test_per_node_history(void **state)
{
    static const char *const args[] = {
        "--listen", "127.0.0.1:0",      "--listen", "127.0.0.1:0", "--commit-delay-ms",
        "20",       "--propagation-ms", "400",      NULL};
    struct sim s;
    sim_start(&s, args);
    assert_true(s.ports[2] > 0);
    control(&s, "/_sim/pause", NULL);
    char id[129];
    make_id(1000, NULL, id);
    assert_int_equal(submit_on(&s, 0, id), 202);
    expect_status(&s, 0, id, 0, "Pending");
    expect_status(&s, 1, id, 0, "Unknown");
    control(&s, "/_sim/resume", NULL);
    double elapsed;
    char *st = status_on(&s, 0, id, 5, &elapsed);
    assert_string_equal(st, "Committed");
    free(st);
    /* Committed on node 0; node 2 learns it some 400 ms later. */
    expect_status(&s, 2, id, 0, "Unknown");
    st = status_on(&s, 2, id, 5, &elapsed);
    assert_string_equal(st, "Committed");
    assert_true(elapsed >= 150.0);
    free(st);
    expect_status(&s, 1, id, 0, "Committed");
    sim_stop(&s);
    sim_cleanup(&s);
}

/* --history shared: every node reports the one status memory at once. */
static void test_shared_history(void **state)
{
    static const char *const args[] = {"--listen", "127.0.0.1:0", "--history", "shared", NULL};
    struct sim s;
    sim_start(&s, args);
    control(&s, "/_sim/pause", NULL);
    char id[129];
    make_id(1100, NULL, id);
    assert_int_equal(submit_on(&s, 0, id), 202);
    expect_status(&s, 1, id, 0, "Pending");
    control(&s, "/_sim/resume", NULL);
    expect_status(&s, 1, id, 5, "Committed");
    sim_stop(&s);
    sim_cleanup(&s);
}

/* A node restart forgets its history and the batches it had queued; the
 * other nodes keep what they learnt. */
static void test_node_restart(void **state)
{
    static const char *const args[] = {"--listen", "127.0.0.1:0", "--commit-delay-ms", "20", NULL};
    struct sim s;
    sim_start(&s, args);
    char done[129], queued[129];
    make_id(1200, NULL, done);
    make_id(1201, NULL, queued);
    assert_int_equal(submit_on(&s, 0, done), 202);
    expect_status(&s, 0, done, 5, "Committed");
    expect_status(&s, 1, done, 5, "Committed");
    control(&s, "/_sim/pause", NULL);
    assert_int_equal(submit_on(&s, 0, queued), 202);
    s.port = s.ports[1];
    control(&s, "/_sim/nodes/0", "{\"restart\": true}");
    s.port = s.ports[0];
    control(&s, "/_sim/resume", NULL);
    expect_status(&s, 0, done, 0, "Unknown");
    expect_status(&s, 1, done, 0, "Committed");
    pause_ms(200); /* ten commit delays: a batch still queued would commit */
    expect_status(&s, 0, queued, 0, "Unknown");
    expect_status(&s, 1, queued, 0, "Unknown");
    json_t *st = get_stats(&s);
    assert_int_equal(stat_int(st, "committed", NULL), 1);
    assert_int_equal(stat_int(st, "restarts", NULL), 1);
    json_decref(st);
    sim_stop(&s);
    json_t *events = read_events(s.evlog);
    size_t i;
    json_t *e;
    int restarts = 0;
    json_array_foreach(events, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "ev")), "restart") == 0) {
            assert_string_equal(json_string_value(json_object_get(e, "why")), "node");
            assert_int_equal(json_integer_value(json_object_get(e, "node")), 0);
            assert_int_equal(json_integer_value(json_object_get(e, "dropped")), 1);
            restarts++;
        }
    }
    assert_int_equal(restarts, 1);
    json_decref(events);
    sim_cleanup(&s);
}

/* --node-hosts: a node answers 404 for a service it does not run. */
static void test_hosting(void **state)
{
    static const char *const args[] = {"--listen", "127.0.0.1:0", "--node-hosts",
                                       "1:zzzzz-zzzzz,abcde-fghij::zz99", NULL};
    struct sim s;
    sim_start(&s, args);
    char id[129];
    make_id(1300, NULL, id);
    assert_int_equal(submit_on(&s, 1, id), 404);
    struct reply r;
    assert_int_equal(get_on(&s, 1, STATUSES_PATH "?ids=abc", 5000, &r), CURLE_OK);
    assert_int_equal(r.status, 404);
    reply_free(&r);
    assert_int_equal(submit_on(&s, 0, id), 202);
    sim_stop(&s);
    sim_cleanup(&s);
}

/* Protocol 1 never refuses; protocol 2 (the default) refuses a full queue
 * with an empty 429, checking before the whole list is queued. */
static void test_protocol(void **state)
{
    static const char *const v1[] = {"--protocol", "1", NULL};
    struct sim s;
    sim_start(&s, v1);
    control(&s, "/_sim/pause", NULL);
    char ids[40][129];
    for (unsigned i = 0; i < 40; i++) {
        make_id(1400 + i, NULL, ids[i]);
        assert_int_equal(submit_simple(&s, ids[i]), 202);
    }
    sim_stop(&s);
    sim_cleanup(&s);

    sim_start(&s, NULL);
    control(&s, "/_sim/pause", NULL);
    const char *list[40];
    for (unsigned i = 0; i < 40; i++)
        list[i] = ids[i];
    size_t len;
    uint8_t *body = make_batchlist_n(list, 29, &len); /* 29 queued: not yet refusing */
    struct reply r;
    http(&s, "POST", BATCHES_PATH, body, len, NULL, 5000, &r);
    free(body);
    assert_int_equal(r.status, 202);
    reply_free(&r);
    body = make_batchlist_n(list + 29, 5, &len); /* checked at 29: all five go in */
    http(&s, "POST", BATCHES_PATH, body, len, NULL, 5000, &r);
    free(body);
    assert_int_equal(r.status, 202);
    reply_free(&r);
    assert_int_equal(submit(&s, ids[39], NULL, &r), 429);
    assert_int_equal(r.len, 0);
    reply_free(&r);
    json_t *st = get_stats(&s);
    assert_int_equal(stat_int(json_object_get(st, "services"), SVC_KEY, "queued"), 34);
    json_decref(st);
    sim_stop(&s);
    sim_cleanup(&s);
}

/* A waiting query looks every --wait-poll-ms (100 by default), as
 * scabbard's handler does; --unknown-wait answer ends a wait on an unknown
 * id at once. */
static void test_wait_poll(void **state)
{
    static const char *const args[] = {"--commit-delay-ms", "10", NULL};
    struct sim s;
    sim_start(&s, args);
    char id[129];
    make_id(1500, NULL, id);
    control(&s, "/_sim/pause", NULL);
    assert_int_equal(submit_simple(&s, id), 202);
    control(&s, "/_sim/resume", NULL);
    double elapsed;
    char *st = status_on(&s, 0, id, 5, &elapsed);
    assert_string_equal(st, "Committed");
    free(st);
    assert_true(elapsed >= 90.0);
    sim_stop(&s);
    sim_cleanup(&s);

    static const char *const answer[] = {"--unknown-wait", "answer", NULL};
    sim_start(&s, answer);
    st = status_on(&s, 0, id, 5, &elapsed);
    assert_string_equal(st, "Unknown");
    free(st);
    assert_true(elapsed < 2000.0);
    sim_stop(&s);
    sim_cleanup(&s);
}

static void test_back_pressure(void **state)
{
    static const char *const args[] = {"--commit-delay-ms", "100", NULL};
    struct sim s;
    sim_start(&s, args);
    control(&s, "/_sim/pause", NULL);
    char ids[32][129];
    for (unsigned i = 0; i < 30; i++) {
        make_id(100 + i, NULL, ids[i]);
        assert_int_equal(submit_simple(&s, ids[i]), 202);
    }
    make_id(200, NULL, ids[30]);
    struct reply r;
    assert_int_equal(submit(&s, ids[30], NULL, &r), 429);
    assert_int_equal(r.len, 0);
    reply_free(&r);

    /* Drain one: 29 queued, still refused (hysteresis). */
    control(&s, "/_sim/resume", NULL);
    json_t *arr = statuses(&s, ids[0], 10, NULL);
    assert_string_equal(status_type(arr, 0), "Committed");
    json_decref(arr);
    control(&s, "/_sim/pause", NULL);
    json_t *st = get_stats(&s);
    long long queued = stat_int(json_object_get(st, "services"), SVC_KEY, "queued");
    assert_in_range(queued, 15, 29);
    assert_int_equal(stat_int(json_object_get(st, "services"), SVC_KEY, "max_queued"), 30);
    json_decref(st);
    assert_int_equal(submit(&s, ids[30], NULL, &r), 429);
    assert_int_equal(r.len, 0);
    reply_free(&r);

    /* Drain below 15 (batch 16 committed): accepted again. */
    control(&s, "/_sim/resume", NULL);
    arr = statuses(&s, ids[15], 10, NULL);
    assert_string_equal(status_type(arr, 0), "Committed");
    json_decref(arr);
    assert_int_equal(submit_simple(&s, ids[30]), 202);
    st = get_stats(&s);
    assert_int_equal(stat_int(st, "posts", "429"), 2);
    json_decref(st);
    sim_stop(&s);
    sim_cleanup(&s);
}

static void test_long_poll(void **state)
{
    static const char *const args[] = {"--commit-delay-ms", "50", NULL};
    struct sim s;
    sim_start(&s, args);
    control(&s, "/_sim/pause", NULL);
    char id[129];
    make_id(300, NULL, id);
    assert_int_equal(submit_simple(&s, id), 202);
    /* Nothing can commit while paused: the poll runs out its wait. */
    double elapsed;
    json_t *arr = statuses(&s, id, 1, &elapsed);
    assert_string_equal(status_type(arr, 0), "Pending");
    assert_true(elapsed >= 900.0);
    json_decref(arr);
    /* wait=0 answers at once. */
    arr = statuses(&s, id, 0, &elapsed);
    assert_string_equal(status_type(arr, 0), "Pending");
    assert_true(elapsed < 900.0);
    json_decref(arr);
    /* Resumed: the poll returns as soon as the batch commits. */
    control(&s, "/_sim/resume", NULL);
    arr = statuses(&s, id, 30, &elapsed);
    assert_string_equal(status_type(arr, 0), "Committed");
    assert_true(elapsed < 10000.0);
    json_decref(arr);
    json_t *st = get_stats(&s);
    assert_true(stat_int(st, "long_polls", NULL) >= 1);
    json_decref(st);
    sim_stop(&s);
    sim_cleanup(&s);
}

static void test_auth(void **state)
{
    char token_file[] = "/tmp/sim-e2e-token-XXXXXX";
    int fd = mkstemp(token_file);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "s3cret\n", 7), 7);
    close(fd);
    static const char *const token_arg[] = {"--token", "s3cret", NULL};
    const char *const file_arg[] = {"--token-file", token_file, NULL};
    const char *const *variants[] = {token_arg, file_arg};
    for (size_t v = 0; v < 2; v++) {
        struct sim s;
        sim_start(&s, variants[v]);
        char id[129];
        make_id(400, NULL, id);
        static const struct {
            const char *auth;
            long status;
        } rows[] = {
            {NULL, 401},
            {"Bearer nope", 403},
            {"Bearer s3cret-and-more", 403},
            {"Basic czNjcmV0", 403},
            {"Bearer s3cret", 202},
        };
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
            struct reply r;
            assert_int_equal(submit(&s, id, rows[i].auth, &r), rows[i].status);
            if (rows[i].status != 202) {
                json_t *j = json_loads(r.body, 0, NULL);
                assert_non_null(j);
                assert_true(json_is_string(json_object_get(j, "message")));
                json_decref(j);
            }
            reply_free(&r);
        }
        struct reply r;
        char path[512];
        snprintf(path, sizeof(path), STATUSES_PATH "?ids=%s", id);
        http(&s, "GET", path, NULL, 0, NULL, 5000, &r);
        assert_int_equal(r.status, 401);
        reply_free(&r);
        http(&s, "GET", path, NULL, 0, "Bearer s3cret", 5000, &r);
        assert_int_equal(r.status, 200);
        reply_free(&r);
        sim_stop(&s);
        sim_cleanup(&s);
    }
    unlink(token_file);
}

/* Faults switched at run time through POST /_sim/faults. */
static void test_faults_runtime(void **state)
{
    struct sim s;
    sim_start(&s, NULL);
    char id[129];
    make_id(500, NULL, id);
    struct reply r;

    control(&s, "/_sim/faults", "{\"fault-5xx\": 1}");
    long status = submit(&s, id, NULL, &r);
    assert_true(status == 500 || status == 503);
    reply_free(&r);

    control(&s, "/_sim/faults", "{\"reset\": true, \"fault-429\": 1}");
    assert_int_equal(submit(&s, id, NULL, &r), 429);
    assert_int_equal(r.len, 0);
    reply_free(&r);

    control(&s, "/_sim/faults", "{\"reset\": true, \"fault-drop\": 1}");
    size_t len;
    uint8_t *body = make_batchlist(id, &len);
    assert_int_equal(http(&s, "POST", BATCHES_PATH, body, len, NULL, 5000, &r), CURLE_GOT_NOTHING);
    reply_free(&r);

    control(&s, "/_sim/faults", "{\"reset\": true, \"fault-hang\": 1}");
    assert_int_equal(http(&s, "POST", BATCHES_PATH, body, len, NULL, 500, &r),
                     CURLE_OPERATION_TIMEDOUT);
    assert_true(r.elapsed_ms >= 450.0);
    reply_free(&r);
    free(body);

    control(&s, "/_sim/faults", "{\"reset\": true, \"fault-slow\": \"1:300\"}");
    char id2[129];
    make_id(501, NULL, id2);
    assert_int_equal(submit(&s, id2, NULL, &r), 202);
    assert_true(r.elapsed_ms >= 290.0);
    reply_free(&r);

    control(&s, "/_sim/faults", "{\"reset\": true, \"fault-malformed\": 1}");
    char id3[129];
    make_id(502, NULL, id3);
    assert_int_equal(submit(&s, id3, NULL, &r), 202);
    assert_null(json_loadb(r.body, r.len, 0, NULL));
    reply_free(&r);
    char path[512];
    snprintf(path, sizeof(path), STATUSES_PATH "?ids=%s", id3);
    assert_int_equal(http(&s, "GET", path, NULL, 0, NULL, 5000, &r), CURLE_OK);
    assert_int_equal(r.status, 200);
    assert_null(json_loadb(r.body, r.len, 0, NULL));
    reply_free(&r);

    /* Bad settings are refused and change nothing. */
    assert_int_equal(http(&s, "POST", "/_sim/faults", "{\"fault-5xx\": 7}", 16, NULL, 5000, &r),
                     CURLE_OK);
    assert_int_equal(r.status, 400);
    reply_free(&r);
    assert_int_equal(http(&s, "POST", "/_sim/faults", "nope", 4, NULL, 5000, &r), CURLE_OK);
    assert_int_equal(r.status, 400);
    reply_free(&r);
    assert_int_equal(http(&s, "GET", "/_sim/faults", NULL, 0, NULL, 5000, &r), CURLE_OK);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    assert_true(json_number_value(json_object_get(j, "fault-malformed")) == 1.0);
    assert_true(json_number_value(json_object_get(j, "fault-5xx")) == 0.0);
    json_decref(j);
    reply_free(&r);

    /* Reset: normal service again; the hung and dropped posts were logged. */
    control(&s, "/_sim/faults", "{\"reset\": true}");
    char id4[129];
    make_id(503, NULL, id4);
    assert_int_equal(submit_simple(&s, id4), 202);
    json_t *st = get_stats(&s);
    /* libcurl replays a request once when a reused connection closes without
     * an answer, so the drop may have been seen twice. */
    assert_in_range(stat_int(st, "posts", "drop"), 1, 2);
    assert_int_equal(stat_int(st, "posts", "hang"), 1);
    assert_int_equal(stat_int(st, "posts", "429"), 1);
    json_decref(st);
    /* Stopping with a hung connection still held exits cleanly. */
    sim_stop(&s);
    sim_cleanup(&s);
}

/* Faults given on the command line. */
static void test_fault_flags(void **state)
{
    static const struct {
        const char *flag;
        const char *value;
        long expected; /* -1: 500 or 503 */
    } rows[] = {
        {"--fault-429-burst", "60000:60000", 429},
        {"--fault-5xx", "1", -1},
        {"--fault-429", "1", 429},
        {"--fault-5xx", "0", 202},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const char *const args[] = {rows[i].flag, rows[i].value, NULL};
        struct sim s;
        sim_start(&s, args);
        char id[129];
        make_id(600 + (unsigned)i, NULL, id);
        long status = submit_simple(&s, id);
        if (rows[i].expected == -1)
            assert_true(status == 500 || status == 503);
        else
            assert_int_equal(status, rows[i].expected);
        sim_stop(&s);
        sim_cleanup(&s);
    }
}

/* Polls until `id` reads Unknown or ~5 s pass; returns its last status. */
static char *await_unknown(struct sim *s, const char *id)
{
    char *last = NULL;
    for (int i = 0; i < 500; i++) {
        json_t *arr = statuses(s, id, 0, NULL);
        free(last);
        last = strdup(status_type(arr, 0));
        json_decref(arr);
        if (strcmp(last, "Unknown") == 0)
            break;
        pause_ms(10);
    }
    return last;
}

static void test_restart(void **state)
{
    static const char *const args[] = {"--commit-delay-ms", "5", NULL};
    struct sim s;
    sim_start(&s, args);
    char id[129];
    make_id(700, NULL, id);
    assert_int_equal(submit_simple(&s, id), 202);
    json_t *arr = statuses(&s, id, 10, NULL);
    assert_string_equal(status_type(arr, 0), "Committed");
    json_decref(arr);
    control(&s, "/_sim/restart", NULL);
    arr = statuses(&s, id, 0, NULL);
    assert_string_equal(status_type(arr, 0), "Unknown");
    json_decref(arr);

    /* SIGHUP does the same. */
    assert_int_equal(submit_simple(&s, id), 202); /* new again after the wipe */
    arr = statuses(&s, id, 10, NULL);
    assert_string_equal(status_type(arr, 0), "Committed");
    json_decref(arr);
    assert_int_equal(kill(s.pid, SIGHUP), 0);
    char *last = await_unknown(&s, id);
    assert_string_equal(last, "Unknown");
    free(last);
    json_t *st = get_stats(&s);
    assert_int_equal(stat_int(st, "restarts", NULL), 2);
    assert_int_equal(stat_int(st, "duplicates", NULL), 0);
    json_decref(st);
    sim_stop(&s);
    sim_cleanup(&s);
}

static void test_status_memory_and_outcomes(void **state)
{
    static const char *const args[] = {"--status-memory",
                                       "2",
                                       "--commit-delay-ms",
                                       "2",
                                       "--valid-step",
                                       "--invalid-prefix",
                                       "dead",
                                       NULL};
    struct sim s;
    sim_start(&s, args);
    char ids[4][129];
    make_id(800, NULL, ids[0]);
    make_id(801, NULL, ids[1]);
    make_id(802, "dead", ids[2]);
    make_id(803, NULL, ids[3]);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(submit_simple(&s, ids[i]), 202);
    char list[600];
    snprintf(list, sizeof(list), "%s,%s,%s,%s", ids[0], ids[1], ids[2], ids[3]);
    json_t *arr = statuses(&s, ids[3], 10, NULL);
    assert_string_equal(status_type(arr, 0), "Committed");
    json_decref(arr);
    arr = statuses(&s, list, 0, NULL);
    assert_string_equal(status_type(arr, 0), "Unknown"); /* forgotten: memory 2 */
    assert_string_equal(status_type(arr, 1), "Unknown");
    assert_string_equal(status_type(arr, 2), "Invalid");
    assert_string_equal(status_type(arr, 3), "Committed");
    json_t *msg = json_object_get(json_object_get(json_array_get(arr, 2), "status"), "message");
    assert_int_equal(json_array_size(msg), 1);
    assert_true(json_is_string(json_object_get(json_array_get(msg, 0), "error_message")));
    json_decref(arr);
    sim_stop(&s);
    sim_cleanup(&s);
}

/* Reads the event log into an array of objects (fails on a non-JSON line). */
static json_t *read_events(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    json_t *events = json_array();
    char line[8192];
    while (fgets(line, sizeof(line), f)) {
        assert_non_null(strchr(line, '\n'));
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        if (!j)
            print_error("bad event line: %s", line);
        assert_non_null(j);
        json_array_append_new(events, j);
    }
    fclose(f);
    return events;
}

static void test_event_log(void **state)
{
    static const char *const args[] = {"--commit-delay-ms", "5", NULL};
    struct sim s;
    sim_start(&s, args);
    char a[129], b[129];
    make_id(900, NULL, a);
    make_id(901, NULL, b);
    assert_int_equal(submit_simple(&s, a), 202);
    assert_int_equal(submit_simple(&s, b), 202);
    assert_int_equal(submit_simple(&s, a), 202); /* duplicate */
    char list[300];
    snprintf(list, sizeof(list), "%s,%s", a, b);
    json_t *arr = statuses(&s, list, 10, NULL);
    assert_string_equal(status_type(arr, 1), "Committed");
    json_decref(arr);
    struct reply r;
    http(&s, "POST", BATCHES_PATH, "junk", 4, NULL, 5000, &r);
    assert_int_equal(r.status, 400);
    reply_free(&r);
    control(&s, "/_sim/restart", NULL);
    sim_stop(&s);

    json_t *events = read_events(s.evlog);
    size_t i;
    json_t *e;
    long long last_t = 0;
    int posts_a = 0, dups = 0, gets = 0, restarts = 0, bad = 0;
    long long t_post_a = -1, t_commit_a = -1, t_post_b = -1;
    size_t idx_post_a = 0, idx_post_b = 0, idx_commit_a = 0;
    json_array_foreach(events, i, e)
    {
        json_t *t = json_object_get(e, "t");
        assert_true(json_is_integer(t));
        assert_true(json_integer_value(t) >= last_t);
        last_t = json_integer_value(t);
        const char *ev = json_string_value(json_object_get(e, "ev"));
        assert_non_null(ev);
        if (strcmp(ev, "post") == 0) {
            assert_string_equal(json_string_value(json_object_get(e, "service")), SVC_KEY);
            assert_non_null(json_object_get(e, "batch"));
            assert_non_null(json_object_get(e, "code"));
            assert_true(json_is_boolean(json_object_get(e, "dup")));
            const char *batch = json_string_value(json_object_get(e, "batch"));
            if (!batch) {
                assert_int_equal(json_integer_value(json_object_get(e, "code")), 400);
                bad++;
                continue;
            }
            assert_int_equal(json_integer_value(json_object_get(e, "code")), 202);
            if (json_is_true(json_object_get(e, "dup")))
                dups++;
            if (strcmp(batch, a) == 0 && posts_a++ == 0) {
                t_post_a = last_t;
                idx_post_a = i;
            }
            if (strcmp(batch, b) == 0) {
                t_post_b = last_t;
                idx_post_b = i;
            }
        } else if (strcmp(ev, "status") == 0) {
            assert_string_equal(json_string_value(json_object_get(e, "service")), SVC_KEY);
            assert_string_equal(json_string_value(json_object_get(e, "from")), "Pending");
            assert_string_equal(json_string_value(json_object_get(e, "to")), "Committed");
            if (strcmp(json_string_value(json_object_get(e, "batch")), a) == 0) {
                t_commit_a = last_t;
                idx_commit_a = i;
            }
        } else if (strcmp(ev, "get") == 0) {
            assert_true(json_is_integer(json_object_get(e, "n")));
            assert_int_equal(json_integer_value(json_object_get(e, "code")), 200);
            gets++;
        } else if (strcmp(ev, "restart") == 0) {
            restarts++;
        }
    }
    assert_int_equal(posts_a, 2);
    assert_int_equal(dups, 1);
    assert_int_equal(bad, 1);
    assert_int_equal(gets, 1);
    assert_int_equal(restarts, 1);
    /* Line order is ledger order: a's commit follows its first post, b's post
     * follows a's. */
    assert_true(t_post_a >= 0 && t_commit_a >= t_post_a && t_post_b >= t_post_a);
    assert_true(idx_commit_a > idx_post_a && idx_post_b > idx_post_a);
    json_decref(events);
    sim_cleanup(&s);
}

static void test_bad_options(void **state)
{
    static const struct {
        const char *a;
        const char *b;
        int exit_code;
    } rows[] = {
        {"--queue-high", "abc", 64},
        {"--queue-high", "10", -1}, /* paired with --queue-low 20 below */
        {"--bogus", NULL, 64},
        {"--fault-5xx", "2", 64},
        {"--token-file", "/nonexistent/token", 64},
        {"--help", NULL, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            int devnull = open("/dev/null", O_WRONLY);
            dup2(devnull, 1);
            dup2(devnull, 2);
            if (rows[i].exit_code == -1)
                execl(sim_bin(), sim_bin(), rows[i].a, rows[i].b, "--queue-low", "20",
                      (char *)NULL);
            else
                execl(sim_bin(), sim_bin(), rows[i].a, rows[i].b, (char *)NULL);
            _exit(127);
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        int expected = rows[i].exit_code == -1 ? 64 : rows[i].exit_code;
        if (WEXITSTATUS(status) != expected)
            print_error("row %zu: %s -> %d\n", i, rows[i].a, WEXITSTATUS(status));
        assert_int_equal(WEXITSTATUS(status), expected);
    }
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_submit_link_and_commit, kill_leftover),
        cmocka_unit_test_teardown(test_bad_requests, kill_leftover),
        cmocka_unit_test_teardown(test_back_pressure, kill_leftover),
        cmocka_unit_test_teardown(test_long_poll, kill_leftover),
        cmocka_unit_test_teardown(test_auth, kill_leftover),
        cmocka_unit_test_teardown(test_faults_runtime, kill_leftover),
        cmocka_unit_test_teardown(test_fault_flags, kill_leftover),
        cmocka_unit_test_teardown(test_restart, kill_leftover),
        cmocka_unit_test_teardown(test_status_memory_and_outcomes, kill_leftover),
        cmocka_unit_test_teardown(test_event_log, kill_leftover),
        cmocka_unit_test_teardown(test_bad_options, kill_leftover),
        cmocka_unit_test_teardown(test_wait_default, kill_leftover),
        cmocka_unit_test_teardown(test_per_node_history, kill_leftover),
        cmocka_unit_test_teardown(test_shared_history, kill_leftover),
        cmocka_unit_test_teardown(test_node_restart, kill_leftover),
        cmocka_unit_test_teardown(test_hosting, kill_leftover),
        cmocka_unit_test_teardown(test_protocol, kill_leftover),
        cmocka_unit_test_teardown(test_wait_poll, kill_leftover),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
