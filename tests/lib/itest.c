/* Integration-test helpers; see itest.h. */
#include "itest.h"
#include "common/hex.h"
#include "db/migrate.h"
#include "ingest/batchlist.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

const char *itest_base_conninfo(void)
{
    const char *c = getenv("QW_TEST_CONNINFO");
    if (!c) {
        fprintf(stderr,
                "QW_TEST_CONNINFO is not set: run this test through tests/lib/with-pg.sh\n");
        exit(2);
    }
    return c;
}

const char *itest_queuer_bin(void)
{
    const char *b = getenv("QUEUER_BIN");
    if (!b) {
        fprintf(stderr, "QUEUER_BIN is not set\n");
        exit(2);
    }
    return b;
}

struct qw_db *itest_connect(const char *conninfo)
{
    struct qw_db_opts opts = {.conninfo = conninfo, .query_timeout_ms = 120000};
    struct qw_db *db = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_connect(&db, &opts, &err) != QW_OK)
        fail_msg("connect %s: %s", conninfo, err.msg);
    return db;
}

struct qw_db *itest_connect_as(const char *conninfo, const char *role)
{
    size_t len = strlen(conninfo) + strlen(role) + 8;
    char *c = malloc(len);
    assert_non_null(c);
    snprintf(c, len, "%s user=%s", conninfo, role);
    struct qw_db *db = itest_connect(c);
    free(c);
    return db;
}

void itest_exec(struct qw_db *db, const char *sql)
{
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_exec(db, sql, &err) != QW_OK)
        fail_msg("SQL failed: %s\n  %s", err.msg, sql);
}

static struct qw_db_res *query_or_fail(struct qw_db *db, const char *sql)
{
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query_sql(db, sql, 0, NULL, &res, &err) != QW_OK)
        fail_msg("SQL failed: %s\n  %s", err.msg, sql);
    return res;
}

int64_t itest_scalar(struct qw_db *db, const char *sql)
{
    struct qw_db_res *res = query_or_fail(db, sql);
    if (qw_db_res_rows(res) < 1)
        fail_msg("no rows from: %s", sql);
    int64_t v = qw_db_res_int(res, 0, 0);
    qw_db_res_free(res);
    return v;
}

char *itest_string(struct qw_db *db, const char *sql)
{
    struct qw_db_res *res = query_or_fail(db, sql);
    char *s = NULL;
    if (qw_db_res_rows(res) > 0 && !qw_db_res_isnull(res, 0, 0))
        s = strdup(qw_db_res_get(res, 0, 0));
    qw_db_res_free(res);
    return s;
}

char *itest_incarnation(struct qw_db *db, const char *instance)
{
    const char *params[] = {instance};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query_sql(db, "SELECT incarnation::text FROM queuer.instances WHERE instance_id = $1",
                        1, params, &res, &err) != QW_OK)
        fail_msg("incarnation of %s: %s", instance, err.msg);
    if (qw_db_res_rows(res) != 1)
        fail_msg("instance %s is not registered", instance);
    char *s = strdup(qw_db_res_get(res, 0, 0));
    qw_db_res_free(res);
    assert_non_null(s);
    return s;
}

struct qw_db *itest_listen_instance(const char *conninfo, const char *instance)
{
    struct qw_db *db = itest_connect(conninfo);
    char *inc = itest_incarnation(db, instance);
    char channel[64];
    snprintf(channel, sizeof(channel), "%s%s", QW_CLAIMS_CHANNEL_PREFIX, inc);
    free(inc);
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_listen(db, channel, &err) != QW_OK)
        fail_msg("LISTEN %s: %s", channel, err.msg);
    return db;
}

/* Appends a notification's payload and a newline to the string at `arg`. */
static void append_payload(const char *channel, const char *payload, void *arg)
{
    (void)channel;
    char **all = arg;
    size_t had = strlen(*all), len = strlen(payload);
    char *grown = realloc(*all, had + len + 2);
    if (!grown)
        fail_msg("out of memory");
    memcpy(grown + had, payload, len);
    grown[had + len] = '\n';
    grown[had + len + 1] = '\0';
    *all = grown;
}

char *itest_notifications(struct qw_db *db, int timeout_ms)
{
    char *all = calloc(1, 1);
    assert_non_null(all);
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_db_wait_notify(db, timeout_ms, -1, append_payload, &all, &err);
    while (rc == 1)
        rc = qw_db_wait_notify(db, 100, -1, append_payload, &all, &err);
    if (rc < 0)
        fail_msg("waiting for notifications: %s", err.msg);
    return all;
}

char *itest_db_create(const char *hint, int migrate)
{
    return itest_db_create_with(hint, "", migrate);
}

char *itest_db_create_with(const char *hint, const char *options, int migrate)
{
    static int counter;
    char name[96];
    snprintf(name, sizeof(name), "%s_%d_%d", hint, (int)getpid(), ++counter);
    for (char *p = name; *p; p++) {
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
        else if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')))
            *p = '_';
    }
    struct qw_db *admin = itest_connect(itest_base_conninfo());
    char sql[512];
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s %s", name, options);
    itest_exec(admin, sql);
    qw_db_close(admin);

    size_t len = strlen(itest_base_conninfo()) + strlen(name) + 16;
    char *conninfo = malloc(len);
    snprintf(conninfo, len, "%s dbname=%s", itest_base_conninfo(), name);
    if (migrate) {
        struct qw_db *db = itest_connect(conninfo);
        struct qw_error err;
        qw_error_clear(&err);
        if (qw_migrate_apply(db, NULL, NULL, &err) != QW_OK)
            fail_msg("migrate: %s", err.msg);
        qw_db_close(db);
    }
    return conninfo;
}

void itest_pair_open(struct itest_pair *p, const char *hint, const struct itest_instance *live,
                     size_t n)
{
    p->conninfo = itest_db_create(hint, 1);
    p->a = itest_connect(p->conninfo);
    p->b = itest_connect(p->conninfo);
    itest_exec(p->a, "BEGIN"); /* one now() for every lease */
    for (size_t i = 0; i < n; i++) {
        char pid[24], lease_1[24], lease_2[24];
        snprintf(pid, sizeof(pid), "%zu", i + 1);
        snprintf(lease_1, sizeof(lease_1), "%d", live[i].lease_1_ms);
        snprintf(lease_2, sizeof(lease_2), "%d", live[i].lease_2_ms);
        const char *params[] = {live[i].id, pid, lease_1, lease_2};
        struct qw_error err;
        qw_error_clear(&err);
        if (qw_db_query_sql(p->a,
                            "INSERT INTO queuer.instances (instance_id, host, pid, version, "
                            "lease_1, lease_2) VALUES ($1, 'h', $2::integer, 'v', "
                            "now() + $3::integer * interval '1 ms', "
                            "now() + $4::integer * interval '1 ms')",
                            4, params, NULL, &err) != QW_OK)
            fail_msg("register instance %s: %s", live[i].id, err.msg);
    }
    itest_exec(p->a, "COMMIT");
}

int itest_pair_teardown(void **state)
{
    struct itest_pair *p = *state; /* the fixture's first member */
    qw_db_close(p->a);
    qw_db_close(p->b);
    free(p->conninfo);
    free(*state);
    return 0;
}

/* Reads whatever is ready on fd into *buf (growing it). Returns 0 at EOF. */
static int drain(int fd, char **buf, size_t *len)
{
    char chunk[4096];
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return 1;
    if (n <= 0)
        return 0;
    char *grown = realloc(*buf, *len + (size_t)n + 1);
    if (!grown)
        fail_msg("out of memory");
    memcpy(grown + *len, chunk, (size_t)n);
    *len += (size_t)n;
    grown[*len] = '\0';
    *buf = grown;
    return 1;
}

int itest_run(const char *const *argv, const char *const *env, const char *input, char **out,
              char **errout)
{
    int pin[2], pout[2], perr[2];
    if (pipe(pin) || pipe(pout) || pipe(perr))
        fail_msg("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(pin[0], 0);
        dup2(pout[1], 1);
        dup2(perr[1], 2);
        close(pin[0]);
        close(pin[1]);
        close(pout[0]);
        close(pout[1]);
        close(perr[0]);
        close(perr[1]);
        for (int i = 0; env && env[i]; i++)
            putenv((char *)(uintptr_t)env[i]);
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    size_t in_left = input ? strlen(input) : 0;
    if (in_left == 0) {
        close(pin[1]);
        pin[1] = -1;
    } else {
        fcntl(pin[1], F_SETFL, O_NONBLOCK);
    }
    char *obuf = calloc(1, 1), *ebuf = calloc(1, 1);
    size_t olen = 0, elen = 0;
    int oopen = 1, eopen = 1;
    while (oopen || eopen) {
        struct pollfd pfd[3] = {{.fd = oopen ? pout[0] : -1, .events = POLLIN},
                                {.fd = eopen ? perr[0] : -1, .events = POLLIN},
                                {.fd = pin[1], .events = POLLOUT}};
        if (poll(pfd, 3, -1) < 0 && errno != EINTR)
            fail_msg("poll: %s", strerror(errno));
        if (pfd[0].revents)
            oopen = drain(pout[0], &obuf, &olen);
        if (pfd[1].revents)
            eopen = drain(perr[0], &ebuf, &elen);
        if (pin[1] >= 0 && pfd[2].revents) {
            ssize_t w = write(pin[1], input, in_left);
            if (w > 0) {
                input += w;
                in_left -= (size_t)w;
            }
            if (w < 0 && errno != EAGAIN && errno != EINTR)
                in_left = 0;
            if (in_left == 0) {
                close(pin[1]);
                pin[1] = -1;
            }
        }
    }
    if (pin[1] >= 0)
        close(pin[1]);
    close(pout[0]);
    close(perr[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (out)
        *out = obuf;
    else
        free(obuf);
    if (errout)
        *errout = ebuf;
    else
        free(ebuf);
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

char *itest_sample_hex(uint64_t seed, char id_out[129])
{
    qw_batchlist_sample_id(seed, id_out);
    uint8_t *payload = NULL;
    size_t len = 0;
    assert_int_equal(qw_batchlist_sample(id_out, seed, &payload, &len), 0);
    char *hex = malloc(2 * len + 1);
    assert_non_null(hex);
    qw_hex_encode(payload, len, hex);
    free(payload);
    return hex;
}

/* Enqueues sample batch `seed`; `priority` NULL leaves the function's default. */
static int enqueue_sample(struct qw_db *db, const char *service, uint64_t seed,
                          const char *priority, char *id_out, struct qw_error *err)
{
    char id[129];
    char *hex = itest_sample_hex(seed, id);
    const char *params[] = {service, id, hex, priority};
    qw_error_clear(err);
    int rc = priority
                 ? qw_db_query_sql(db,
                                   "SELECT queuer.enqueue_batch($1, $2, decode($3, 'hex'), "
                                   "$4::integer)",
                                   4, params, NULL, err)
                 : qw_db_query_sql(db, "SELECT queuer.enqueue_batch($1, $2, decode($3, 'hex'))", 3,
                                   params, NULL, err);
    free(hex);
    if (id_out)
        memcpy(id_out, id, sizeof(id));
    return rc;
}

int itest_enqueue_sample_try(struct qw_db *db, const char *service, uint64_t seed, char *id_out,
                             struct qw_error *err)
{
    return enqueue_sample(db, service, seed, NULL, id_out, err);
}

void itest_enqueue_sample(struct qw_db *db, const char *service, uint64_t seed, char *id_out)
{
    struct qw_error err;
    if (itest_enqueue_sample_try(db, service, seed, id_out, &err) != QW_OK)
        fail_msg("enqueue %s: %s", service, err.msg);
}

void itest_enqueue_sample_at(struct qw_db *db, const char *service, uint64_t seed, int priority,
                             char *id_out)
{
    char prio[16];
    snprintf(prio, sizeof(prio), "%d", priority);
    struct qw_error err;
    if (enqueue_sample(db, service, seed, prio, id_out, &err) != QW_OK)
        fail_msg("enqueue %s at priority %d: %s", service, priority, err.msg);
}

char *itest_temp_file(const char *hint, const void *data, size_t len)
{
    const char *dir = getenv("TMPDIR");
    char *path = NULL;
    assert_true(asprintf(&path, "%s/%s-XXXXXX", dir && *dir ? dir : "/tmp", hint) > 0);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    return path;
}

int itest_mark(struct qw_db *db, const char *instance, const char *inc, const char *service,
               const char *batch_id, int64_t epoch, const char *seen)
{
    char ids[160], svcs[64], epochs[32], seens[32];
    snprintf(ids, sizeof(ids), "{\"%s\"}", batch_id);
    snprintf(svcs, sizeof(svcs), "{\"%s\"}", service);
    snprintf(epochs, sizeof(epochs), "{%lld}", (long long)epoch);
    snprintf(seens, sizeof(seens), "{\"%s\"}", seen);
    const char *params[] = {instance, ids, svcs, epochs, seens, inc};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(db, "batches_mark", 6, params, &res, &err) != QW_OK)
        fail_msg("batches_mark: %s", err.msg);
    int rows = qw_db_res_rows(res);
    qw_db_res_free(res);
    return rows;
}

void itest_claims_cycle(struct qw_db *db, const char *instance, size_t held, const char *release,
                        int max_claims, struct qw_claims_result *r)
{
    struct qw_txn_policy policy = {
        .max_attempts = 5, .max_ms = 10000, .backoff_base_ms = 2, .backoff_max_ms = 50};
    struct qw_txn_policy rc_policy = policy;
    rc_policy.begin_sql = "BEGIN ISOLATION LEVEL READ COMMITTED";
    struct qw_claims_params p = {.instance_id = instance,
                                 .lease_ms = 30000,
                                 .hard_expiry_ms = 60000,
                                 .max_claims = max_claims,
                                 .max_changes = 1000,
                                 .held = held,
                                 .release = release,
                                 .acquire = true,
                                 .housekeeping = true};
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_claims_cycle(db, &policy, &rc_policy, &p, r, NULL, &err) != QW_OK)
        fail_msg("claims cycle of %s: %s", instance, err.msg);
}
