/*
 * Integration: how claims move without a claims transaction
 * (migrations/0019_coordination.sql, docs/CLAIMS.md).
 *
 * - The count of work is split by writer (service_ingest.n_in for inserts,
 *   service_id_claims.n_out for updates and deletes) and stays exact when
 *   enqueues and a worker's marks and outcomes run at once.
 * - An enqueue gives a free service to a live instance below an even share
 *   and its worker.max_claims, at claim_epoch + 1, and wakes the holder on
 *   its own channel with "<service>:<epoch>" ("*" for more than eight);
 *   with no instance live the service stays free with work, at its head's
 *   priority.
 * - An enqueue of a held service neither writes nor waits for its claim
 *   row, and a worker's lock on that row does not wait for the enqueue.
 * - Release, graceful release and maintenance skip a service with an
 *   enqueue in progress (its ingest row locked) and move the others.
 * - A new registration of an instance_id fences the earlier incarnation:
 *   its lease renewal and its fenced writes match nothing.
 * - A worker's waiting priority, reported with its lease, reaches the other
 *   live workers with theirs.
 */
#include "itest.h"

#include "common/hex.h"
#include "db/pgarray.h"
#include "ingest/batchlist.h"
#include "queuer/claims.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define S1 "assig-aaaaa::0001"
#define S2 "assig-aaaaa::0002"
#define S3 "assig-aaaaa::0003"

struct fixture {
    struct itest_pair pg; /* a: the owner, an application or w1; b: another session */
    uint64_t seed;        /* next sample seed */
    char *inc;            /* w1's incarnation */
};
_Static_assert(offsetof(struct fixture, pg) == 0, "itest_pair_teardown() frees the fixture");

/* w1 and w2, live: leases of an hour (soft) and two (hard). */
static const struct itest_instance live[] = {
    {"w1", 3600 * 1000, 7200 * 1000},
    {"w2", 3600 * 1000, 7200 * 1000},
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->seed = 9000;
    itest_pair_open(&f->pg, "claims_assign", live, 2);
    f->inc = itest_incarnation(f->pg.a, "w1");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    free(f->inc);
    return itest_pair_teardown(state);
}

/* itest_scalar() on the second session of printf-formatted SQL. */
__attribute__((format(printf, 2, 3))) static int64_t scalar(struct fixture *f, const char *fmt, ...)
{
    char sql[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    return itest_scalar(f->pg.b, sql);
}

/* The claimant of a service ("-" for none), malloc'd. */
static char *holder(struct fixture *f, const char *svc)
{
    char sql[200];
    snprintf(sql, sizeof(sql),
             "SELECT coalesce(claimant, '-') FROM queuer.service_id_claims WHERE service_id = '%s'",
             svc);
    return itest_string(f->pg.b, sql);
}

static void assert_holder(struct fixture *f, const char *svc, const char *expected)
{
    char *who = holder(f, svc);
    assert_string_equal(who, expected);
    free(who);
}

static int64_t epoch_of(struct fixture *f, const char *svc)
{
    return scalar(f, "SELECT claim_epoch FROM queuer.service_id_claims WHERE service_id = '%s'",
                  svc);
}

/* Gives `svc` (both its rows present) to `who` at the next epoch, by hand. */
static void hold(struct fixture *f, const char *svc, const char *who)
{
    char sql[256];
    snprintf(sql, sizeof(sql),
             "UPDATE queuer.service_id_claims SET claimant = '%s', claim_epoch = claim_epoch + 1, "
             "expiry_1 = now(), expiry_2 = now() WHERE service_id = '%s'",
             who, svc);
    itest_exec(f->pg.a, sql);
}

/* A service without work held by `who`, its rows as an enqueue creates them. */
static void idle_held(struct fixture *f, const char *svc, const char *who)
{
    char sql[320];
    snprintf(sql, sizeof(sql),
             "INSERT INTO queuer.service_ingest (service_id) VALUES ('%s'); "
             "INSERT INTO queuer.service_id_claims (service_id, claimant, claim_epoch, expiry_1, "
             "expiry_2) VALUES ('%s', '%s', 1, now(), now())",
             svc, svc, who);
    itest_exec(f->pg.a, sql);
}

static void enqueue(struct fixture *f, struct qw_db *db, const char *svc, char *id_out)
{
    itest_enqueue_sample(db, svc, f->seed++, id_out);
}

/* Enqueues one batch for each of the `n` services in one statement (one
 * trigger call), through queuer.enqueue_rows(). */
static void enqueue_one_statement(struct fixture *f, const char *const *svcs, size_t n)
{
    struct qw_pgarray s, b, p;
    qw_pgarray_init(&s);
    qw_pgarray_init(&b);
    qw_pgarray_init(&p);
    for (size_t i = 0; i < n; i++) {
        char id[129];
        uint64_t seed = f->seed++;
        qw_batchlist_sample_id(seed, id);
        uint8_t *payload = NULL;
        size_t len = 0;
        assert_int_equal(qw_batchlist_sample(id, seed, &payload, &len), 0);
        char *hex = malloc(2 * len + 1);
        assert_non_null(hex);
        qw_hex_encode(payload, len, hex);
        qw_pgarray_text(&s, svcs[i]);
        qw_pgarray_text(&b, id);
        qw_pgarray_text(&p, hex);
        free(hex);
        free(payload);
    }
    const char *params[] = {qw_pgarray_finish(&s), qw_pgarray_finish(&b), qw_pgarray_finish(&p)};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query_sql(f->pg.a,
                        "SELECT count(*) FROM queuer.enqueue_rows((SELECT array_agg(ROW(x.o, "
                        "x.s, x.b, decode(x.p, 'hex'))::queuer.enqueue_row ORDER BY x.o) FROM "
                        "unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY "
                        "AS x(s, b, p, o)), false)",
                        3, params, &res, &err) != QW_OK)
        fail_msg("enqueue_rows: %s", err.msg);
    assert_int_equal(qw_db_res_int(res, 0, 0), 0); /* no refusals */
    qw_db_res_free(res);
    qw_pgarray_free(&s);
    qw_pgarray_free(&b);
    qw_pgarray_free(&p);
}

/* Records Committed for `id` of `svc` (being posted) as w1 at `epoch`; returns
 * the rows of kind 'w' (outcomes written). */
static int record_committed(struct qw_db *db, const char *inc, const char *svc, const char *id,
                            int64_t epoch)
{
    char outcomes[512];
    snprintf(outcomes, sizeof(outcomes), "{\"(%s,%s,%lld,posting,Committed,t,0,,,test,f,f)\"}", id,
             svc, (long long)epoch);
    const char *params[] = {"w1", outcomes, inc};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(db, "outcomes_record", 3, params, &res, &err) != QW_OK)
        fail_msg("outcomes_record: %s", err.msg);
    int written = 0;
    for (int i = 0; i < qw_db_res_rows(res); i++)
        written += strcmp(qw_db_res_get(res, i, 0), "w") == 0;
    qw_db_res_free(res);
    return written;
}

/* The view's n_open of every service equals its count of work. */
static void assert_work_counted(struct fixture *f)
{
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.claims c "
                               "WHERE c.n_open <> (SELECT count(*) FROM queuer.batches b "
                               "WHERE b.service_id = c.service_id "
                               "AND queuer.batch_is_work(b.status, b.retry_at))"),
                     0);
}

/*
 * Both writers of the count with open transactions at once: an enqueue of
 * S1 (n_in, on the ingest row) stays open while w1 marks and ends a batch of
 * S1 (n_out, on the claim row); neither waits for the other, and once both
 * committed the count is exact.
 */
static void test_split_counter_interleaved(void **state)
{
    struct fixture *f = *state;
    char first[129];
    enqueue(f, f->pg.a, S1, first);
    hold(f, S1, "w1");
    int64_t epoch = epoch_of(f, S1);

    itest_exec(f->pg.b, "BEGIN");
    enqueue(f, f->pg.b, S1, NULL);
    struct qw_db *w1 = itest_connect(f->pg.conninfo);
    itest_exec(w1, "SET lock_timeout = '5s'");
    itest_exec(w1, "BEGIN");
    assert_int_equal(itest_mark(w1, "w1", f->inc, S1, first, epoch, ""), 1);
    assert_int_equal(record_committed(w1, f->inc, S1, first, epoch), 1);
    itest_exec(w1, "COMMIT");
    qw_db_close(w1);
    itest_exec(f->pg.b, "COMMIT");
    assert_int_equal(scalar(f, "SELECT n_open FROM queuer.claims WHERE service_id = '" S1 "'"), 1);
    assert_work_counted(f);
}

/* The enqueuing child: `n` batches of S1, S2, S3 in turn, each its own transaction. */
static int enqueuer_child(const char *conninfo, uint64_t seed, int n)
{
    struct qw_db *db = itest_connect(conninfo);
    static const char *const svcs[] = {S1, S2, S3};
    /* back pressure stays on (it reads the count too), with marks above this load */
    itest_exec(db, "SET queuer.ingest_high = '100000'; SET queuer.ingest_low = '50000'");
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        struct qw_error err;
        if (itest_enqueue_sample_try(db, svcs[i % 3], seed + (uint64_t)i, NULL, &err) != QW_OK) {
            fprintf(stderr, "enqueuer: %s\n", err.msg);
            rc = 1;
        }
    }
    qw_db_close(db);
    return rc;
}

/* The worker child: w1 marks and ends the oldest batch of each service in
 * turn, as the queuer and the submitter do, until `total` batches were
 * enqueued (at most 20,000 turns). */
static int worker_child(const char *conninfo, const char *inc, const int64_t *epochs, int total)
{
    struct qw_db *db = itest_connect(conninfo);
    static const char *const svcs[] = {S1, S2, S3};
    int ended = 0;
    for (int i = 0; i < 20000; i++) {
        if (i % 3 == 0 && itest_scalar(db, "SELECT count(*) FROM queuer.batches") >= total)
            break;
        const char *svc = svcs[i % 3];
        const char *params[] = {svc};
        struct qw_db_res *res = NULL;
        struct qw_error err;
        qw_error_clear(&err);
        if (qw_db_query_sql(db,
                            "SELECT batch_id FROM queuer.batches WHERE service_id = $1 "
                            "AND status IS NULL AND NOT submitted ORDER BY created_at LIMIT 1",
                            1, params, &res, &err) != QW_OK) {
            fprintf(stderr, "worker: %s\n", err.msg);
            return 1;
        }
        if (qw_db_res_rows(res) == 1) {
            char id[129];
            snprintf(id, sizeof(id), "%s", qw_db_res_get(res, 0, 0));
            if (itest_mark(db, "w1", inc, svc, id, epochs[i % 3], "") == 1)
                ended += record_committed(db, inc, svc, id, epochs[i % 3]);
        }
        qw_db_res_free(res);
    }
    qw_db_close(db);
    fprintf(stderr, "worker: ended %d batches\n", ended);
    return ended > 0 ? 0 : 2;
}

/*
 * Many enqueues and many marks and outcomes of the same services at once,
 * from two processes: the count stays exact.
 */
static void test_split_counter_concurrent(void **state)
{
    struct fixture *f = *state;
    static const char *const svcs[] = {S1, S2, S3};
    int64_t epochs[3];
    for (int i = 0; i < 3; i++) {
        enqueue(f, f->pg.a, svcs[i], NULL);
        hold(f, svcs[i], "w1");
        epochs[i] = epoch_of(f, svcs[i]);
    }
    pid_t enq = fork();
    assert_true(enq >= 0);
    if (enq == 0)
        _exit(enqueuer_child(f->pg.conninfo, 100000, 300));
    pid_t wrk = fork();
    assert_true(wrk >= 0);
    if (wrk == 0)
        _exit(worker_child(f->pg.conninfo, f->inc, epochs, 3 + 300));
    int st_enq = 0, st_wrk = 0;
    assert_int_equal(waitpid(enq, &st_enq, 0), enq);
    assert_int_equal(waitpid(wrk, &st_wrk, 0), wrk);
    assert_true(WIFEXITED(st_enq) && WEXITSTATUS(st_enq) == 0);
    assert_true(WIFEXITED(st_wrk) && WEXITSTATUS(st_wrk) == 0);
    assert_true(scalar(f, "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'") > 0);
    assert_int_equal(scalar(f, "SELECT sum(n_open) FROM queuer.claims WHERE service_id IN ('" S1
                               "', '" S2 "', '" S3 "')"),
                     scalar(f, "SELECT count(*) FROM queuer.batches WHERE status IS NULL"));
    assert_work_counted(f);
}

/* With no instance live, an enqueue leaves a new service free with work at
 * its first batch's priority: pickup serves it. */
static void test_enqueue_with_none_live_leaves_it_free(void **state)
{
    struct fixture *f = *state;
    itest_exec(f->pg.a, "UPDATE queuer.instances SET lease_1 = now() - interval '1 s'");
    itest_enqueue_sample_at(f->pg.a, S1, f->seed++, 7, NULL);
    itest_enqueue_sample_at(f->pg.a, S1, f->seed++, 9, NULL);
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims WHERE service_id "
                               "= '" S1 "' AND claimant IS NULL AND has_work "
                               "AND head_priority = 7 AND claim_epoch = 0"),
                     1);
}

/*
 * A free service that gets work goes to a live instance in the enqueue's
 * statement, at the next epoch, and the holder alone is woken on its own
 * channel with "<service>:<epoch>"; a further enqueue of the held service
 * wakes the holder again at the same epoch, naming the batch:
 * "<service>:<epoch>/<batch_id>".
 */
static void test_enqueue_gives_a_free_service_and_wakes_the_holder(void **state)
{
    struct fixture *f = *state;
    struct qw_db *l1 = itest_listen_instance(f->pg.conninfo, "w1");
    struct qw_db *l2 = itest_listen_instance(f->pg.conninfo, "w2");
    enqueue(f, f->pg.a, S1, NULL);
    char *who = holder(f, S1);
    assert_true(strcmp(who, "w1") == 0 || strcmp(who, "w2") == 0);
    assert_int_equal(epoch_of(f, S1), 1);
    static const char want[] = S1 ":1\n";
    struct qw_db *mine = strcmp(who, "w1") == 0 ? l1 : l2;
    struct qw_db *other = mine == l1 ? l2 : l1;
    char *got = itest_notifications(mine, 5000);
    assert_string_equal(got, want);
    free(got);
    got = itest_notifications(other, 300);
    assert_string_equal(got, "");
    free(got);

    char id[129];
    enqueue(f, f->pg.a, S1, id);
    assert_int_equal(epoch_of(f, S1), 1);
    assert_holder(f, S1, who);
    got = itest_notifications(mine, 5000);
    char named[200];
    snprintf(named, sizeof(named), "%s:1/%s\n", S1, id);
    assert_string_equal(got, named);
    free(got);
    free(who);
    qw_db_close(l1);
    qw_db_close(l2);
}

/*
 * Enqueues `svcs` while nobody is live (free with work, for pickup), then
 * w1 picks up for every live instance, giving out at most `max` (as a
 * string): returns w2's listening connection, opened before the pickup.
 */
static struct qw_db *picked_up_by_w1(struct fixture *f, const char *const *svcs, size_t n,
                                     const char *max)
{
    itest_exec(f->pg.a, "UPDATE queuer.instances SET lease_1 = now() - interval '1 s'");
    enqueue_one_statement(f, svcs, n);
    itest_exec(f->pg.a, "UPDATE queuer.instances SET lease_1 = now() + interval '1 hour'");
    struct qw_db *l2 = itest_listen_instance(f->pg.conninfo, "w2");
    const char *params[] = {"w1", max, "3600000", "7200000", "0", "0", max};
    itest_exec(f->pg.a, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(f->pg.a, "claims_acquire", 7, params, &res, &err) != QW_OK)
        fail_msg("claims_acquire: %s", err.msg);
    qw_db_res_free(res);
    itest_exec(f->pg.a, "COMMIT");
    return l2;
}

/* Fails unless the items of the notifications `got` (one per line, the
 * items of each in whatever order the statement wrote them) are exactly
 * the claims of `claimant`, each "<service>:<epoch>" once. */
static void assert_names_claims_of(struct fixture *f, const char *got, const char *claimant)
{
    char head[256];
    snprintf(head, sizeof(head),
             "SELECT string_agg(service_id || ':' || claim_epoch, ' ' ORDER BY service_id) "
             "FROM queuer.service_id_claims WHERE claimant = '%s'",
             claimant);
    char *want = itest_string(f->pg.b, head);
    size_t cap = strlen(got) + 128;
    char *sql = malloc(cap);
    assert_non_null(sql);
    snprintf(sql, cap,
             "SELECT string_agg(x, ' ' ORDER BY x) "
             "FROM regexp_split_to_table('%s', '\\s+') x WHERE x <> ''",
             got);
    char *named = itest_string(f->pg.b, sql);
    assert_string_equal(named, want);
    free(named);
    free(sql);
    free(want);
}

/*
 * Pickup names every claim it gives another instance (ten here, more than
 * an enqueue's payload names): a receiver told "*" would read all its
 * claims and fetch every service it holds, at every pickup.
 */
static void test_pickup_names_every_claim_given(void **state)
{
    struct fixture *f = *state;
    static const char *const twenty[] = {
        "assig-ccccc::0001", "assig-ccccc::0002", "assig-ccccc::0003", "assig-ccccc::0004",
        "assig-ccccc::0005", "assig-ccccc::0006", "assig-ccccc::0007", "assig-ccccc::0008",
        "assig-ccccc::0009", "assig-ccccc::0010", "assig-ccccc::0011", "assig-ccccc::0012",
        "assig-ccccc::0013", "assig-ccccc::0014", "assig-ccccc::0015", "assig-ccccc::0016",
        "assig-ccccc::0017", "assig-ccccc::0018", "assig-ccccc::0019", "assig-ccccc::0020"};
    /* w1 picks up for both, in turns: w2 gets ten */
    struct qw_db *l2 = picked_up_by_w1(f, twenty, 20, "100");
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims "
                               "WHERE claimant = 'w2'"),
                     10);
    char *got = itest_notifications(l2, 5000);
    /* one notification */
    size_t len = strlen(got);
    assert_true(len > 1 && got[len - 1] == '\n' && strchr(got, '\n') == got + len - 1);
    assert_names_claims_of(f, got, "w2");
    free(got);
    qw_db_close(l2);
}

/* Enqueues `n` new services "assig-<prefix>::<0001..>" in one statement
 * (held by w1 alone) and returns w1's notifications, one per line. */
static char *wake_up_for(struct fixture *f, struct qw_db *l1, const char *prefix, size_t n)
{
    char(*ids)[32] = calloc(n, sizeof(*ids));
    const char **svcs = calloc(n, sizeof(*svcs));
    assert_true(ids && svcs);
    for (size_t i = 0; i < n; i++) {
        snprintf(ids[i], sizeof(ids[i]), "assig-%s::%04zu", prefix, i + 1);
        svcs[i] = ids[i];
    }
    enqueue_one_statement(f, svcs, n);
    free(svcs);
    free(ids);
    return itest_notifications(l1, 5000);
}

/* The items named in `got` (one payload per line), and in `payloads` how
 * many payloads; fails the test on a payload PostgreSQL would refuse
 * (8,000 bytes or more). */
static size_t named_items(const char *got, size_t *payloads)
{
    size_t items = 0;
    *payloads = 0;
    for (const char *line = got; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        assert_true(len < 8000);
        (*payloads)++;
        for (const char *c = line; c < line + len; c++)
            items += *c == ' ';
        items++;
        line += len + (nl ? 1 : 0);
    }
    return items;
}

/*
 * Past what one payload holds (PostgreSQL's 8,000 bytes: about two hundred
 * claims), pickup names the claims it gives in as many notifications as it
 * takes: a receiver told QW_CLAIMS_NEW instead read all its claims, at
 * every pickup, which at start-up was a read of thousands of claims by
 * every receiver of every pickup.
 */
static void test_pickup_names_claims_in_several_payloads(void **state)
{
    struct fixture *f = *state;
    enum { N = 1000 };
    char names[N][QW_SERVICE_ID_MAX];
    const char *svcs[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "assig-ddddd::%04d", i);
        svcs[i] = names[i];
    }
    struct qw_db *l2 = picked_up_by_w1(f, svcs, N, "1000");
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims "
                               "WHERE claimant = 'w2'"),
                     N / 2);
    char *got = itest_notifications(l2, 5000);
    size_t payloads = 0;
    /* 500 items of 20 bytes: two notifications, each claim once, at its epoch */
    assert_int_equal(named_items(got, &payloads), N / 2);
    assert_int_equal(payloads, 2);
    assert_names_claims_of(f, got, "w2");
    free(got);
    qw_db_close(l2);
}

/*
 * Past sixteen payloads' worth (more than 6,000 claims to one receiver in
 * one call), pickup tells the receiver QW_CLAIMS_NEW in one notification:
 * read your claims and fetch those at a new epoch, not every service you
 * hold (QW_CLAIMS_ALL, which a receiver holding thousands paid for at every
 * pickup).
 */
static void test_pickup_past_sixteen_payloads_says_new_claims(void **state)
{
    struct fixture *f = *state;
    enum { N = 14000 };
    char(*names)[QW_SERVICE_ID_MAX] = calloc(N, sizeof(*names));
    const char **svcs = calloc(N, sizeof(*svcs));
    assert_true(names && svcs);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "assig-%05d::%04d", i / 10000, i % 10000);
        svcs[i] = names[i];
    }
    struct qw_db *l2 = picked_up_by_w1(f, svcs, N, "14000");
    free(svcs);
    free(names);
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims "
                               "WHERE claimant = 'w2'"),
                     N / 2);
    char *got = itest_notifications(l2, 5000);
    assert_string_equal(got, QW_CLAIMS_NEW "\n");
    free(got);
    qw_db_close(l2);
}

/* Services given work by one statement are named to their holder, in as
 * many notifications as they need below PostgreSQL's 8,000 bytes; past
 * sixteen notifications' worth, one "*" (read your claims) instead. */
static void test_wake_up_names_every_service(void **state)
{
    struct fixture *f = *state;
    itest_exec(f->pg.a, "DELETE FROM queuer.instances WHERE instance_id = 'w2'");
    struct qw_db *l1 = itest_listen_instance(f->pg.conninfo, "w1");
    static const char *const two[] = {S2, S1};
    enqueue_one_statement(f, two, 2);
    char *got = itest_notifications(l1, 5000);
    if (strcmp(got, S1 ":1 " S2 ":1\n") != 0 && strcmp(got, S2 ":1 " S1 ":1\n") != 0)
        fail_msg("wake-up for two services: '%s'", got);
    free(got);
    size_t payloads;
    /* nine: one notification */
    got = wake_up_for(f, l1, "bbbbb", 9);
    assert_int_equal(named_items(got, &payloads), 9);
    assert_int_equal(payloads, 1);
    assert_non_null(strstr(got, "assig-bbbbb::0009:1"));
    free(got);
    /* 400 items of 20 bytes: two notifications, each service once */
    got = wake_up_for(f, l1, "ddddd", 400);
    assert_int_equal(named_items(got, &payloads), 400);
    assert_int_equal(payloads, 2);
    for (int i = 1; i <= 400; i++) {
        char item[32];
        snprintf(item, sizeof(item), "assig-ddddd::%04d:1", i);
        if (!strstr(got, item))
            fail_msg("%s not named", item);
    }
    free(got);
    /* 7,000: more than sixteen notifications' worth */
    got = wake_up_for(f, l1, "eeeee", 7000);
    assert_string_equal(got, QW_CLAIMS_ALL "\n");
    free(got);
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims "
                               "WHERE claimant = 'w1' AND claim_epoch = 1"),
                     2 + 9 + 400 + 7000);
    qw_db_close(l1);
}

/*
 * An enqueue gives new services only to live instances below an even share
 * (by the claims they reported) and below their worker.max_claims; when
 * every live instance is at its cap, the service stays free with work.
 */
static void test_enqueue_respects_share_and_cap(void **state)
{
    struct fixture *f = *state;
    /* w1 reports 4 claims, w2 none: the even share of 4 + 1 is 3, w1 is over it */
    itest_exec(f->pg.a, "UPDATE queuer.instances SET claims_held = 4 WHERE instance_id = 'w1'");
    static const char *const three[] = {"assig-ccccc::0001", "assig-ccccc::0002",
                                        "assig-ccccc::0003"};
    for (int i = 0; i < 3; i++) {
        enqueue(f, f->pg.a, three[i], NULL);
        assert_holder(f, three[i], "w2");
    }
    /* w2 at its cap (reported): w1 gets them, over its share or not */
    itest_exec(f->pg.a, "UPDATE queuer.instances SET claims_held = 3, max_claims = 3 "
                        "WHERE instance_id = 'w2'");
    enqueue(f, f->pg.a, "assig-ccccc::0004", NULL);
    assert_holder(f, "assig-ccccc::0004", "w1");
    /* both at their caps: free, with work, for pickup */
    itest_exec(f->pg.a, "UPDATE queuer.instances SET max_claims = 4 WHERE instance_id = 'w1'");
    enqueue(f, f->pg.a, "assig-ccccc::0005", NULL);
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims WHERE service_id "
                               "= 'assig-ccccc::0005' AND claimant IS NULL AND has_work"),
                     1);
}

/*
 * An enqueue of a held service does not write its claim row: a worker
 * holding that row (FOR NO KEY UPDATE, as its fenced statements do) does not
 * hold up the enqueue, and an enqueue in progress does not hold up the
 * worker's lock of the row (NOWAIT).
 */
static void test_enqueue_of_a_held_service_leaves_its_claim_row(void **state)
{
    struct fixture *f = *state;
    enqueue(f, f->pg.a, S1, NULL);
    hold(f, S1, "w1");
    int64_t epoch = epoch_of(f, S1);

    /* the worker holds the claim row; the enqueue does not wait */
    struct qw_db *w1 = itest_connect(f->pg.conninfo);
    itest_exec(w1, "BEGIN");
    itest_exec(w1, "SELECT 1 FROM queuer.service_id_claims WHERE service_id = '" S1
                   "' FOR NO KEY UPDATE");
    itest_exec(f->pg.b, "SET lock_timeout = '3s'");
    struct qw_error err;
    if (itest_enqueue_sample_try(f->pg.b, S1, f->seed++, NULL, &err) != QW_OK)
        fail_msg("the enqueue of a held service waited for its claim row: %s (SQLSTATE %s)",
                 err.msg, err.sqlstate);
    itest_exec(w1, "COMMIT");

    /* the enqueue is open; the worker locks the claim row at once */
    itest_exec(f->pg.b, "BEGIN");
    enqueue(f, f->pg.b, S1, NULL);
    itest_exec(w1, "BEGIN");
    qw_error_clear(&err);
    if (qw_db_exec(w1,
                   "SELECT 1 FROM queuer.service_id_claims WHERE service_id = '" S1
                   "' FOR NO KEY UPDATE NOWAIT",
                   &err) != QW_OK)
        fail_msg("an open enqueue holds the claim row of a held service: %s (SQLSTATE %s)", err.msg,
                 err.sqlstate);
    itest_exec(w1, "COMMIT");
    itest_exec(f->pg.b, "COMMIT");
    qw_db_close(w1);
    assert_holder(f, S1, "w1");
    assert_int_equal(epoch_of(f, S1), epoch);
    assert_int_equal(scalar(f, "SELECT n_open FROM queuer.claims WHERE service_id = '" S1 "'"), 3);
}

/* claims_release of `list` (a text[] literal) by w1; returns the rows released. */
static int release(struct qw_db *db, const char *list)
{
    const char *params[] = {"w1", list};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(db, "claims_release", 2, params, &res, &err) != QW_OK)
        fail_msg("claims_release: %s", err.msg);
    int rows = qw_db_res_rows(res);
    qw_db_res_free(res);
    return rows;
}

/* w1 holds S1 (work), S2 (no work) and S3 (work). */
static void w1_holds_three(struct fixture *f)
{
    enqueue(f, f->pg.a, S1, NULL);
    enqueue(f, f->pg.a, S3, NULL);
    idle_held(f, S2, "w1");
    hold(f, S1, "w1");
    hold(f, S3, "w1");
}

/*
 * A release skips a service with an enqueue in progress (its ingest row is
 * locked) without waiting and gives the others back, each saying exactly
 * whether it has work; once the enqueue committed, the skipped one goes
 * back with its work.
 */
static void test_release_skips_an_enqueue_in_progress(void **state)
{
    struct fixture *f = *state;
    w1_holds_three(f);
    itest_exec(f->pg.b, "BEGIN");
    enqueue(f, f->pg.b, S2, NULL);
    struct qw_db *w1 = itest_connect(f->pg.conninfo);
    itest_exec(w1, "SET lock_timeout = '5s'");
    assert_int_equal(release(w1, "{" S1 "," S2 "," S3 "}"), 2);
    assert_holder(f, S1, "-");
    assert_holder(f, S2, "w1");
    assert_holder(f, S3, "-");
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims WHERE service_id "
                               "IN ('" S1 "', '" S3 "') AND has_work"),
                     2);
    itest_exec(f->pg.b, "COMMIT");
    assert_int_equal(release(w1, "{" S2 "}"), 1);
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims WHERE service_id "
                               "= '" S2 "' AND claimant IS NULL AND has_work"),
                     1);
    /* without work: exactly so */
    idle_held(f, "assig-ddddd::0001", "w1");
    assert_int_equal(release(w1, "{assig-ddddd::0001}"), 1);
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims WHERE service_id "
                               "= 'assig-ddddd::0001' AND claimant IS NULL AND NOT has_work"),
                     1);
    qw_db_close(w1);
}

/* The graceful stop gives back all but a service with an enqueue in
 * progress, and ends the lease: maintenance hands that one over. */
static void test_release_all_skips_an_enqueue_in_progress(void **state)
{
    struct fixture *f = *state;
    w1_holds_three(f);
    itest_exec(f->pg.b, "BEGIN");
    enqueue(f, f->pg.b, S2, NULL);
    struct qw_db *w1 = itest_connect(f->pg.conninfo);
    itest_exec(w1, "SET lock_timeout = '5s'");
    int released = -1;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_claims_release_all(w1, "w1", f->inc, false, &released, &err) != QW_OK)
        fail_msg("release all: %s", err.msg);
    qw_db_close(w1);
    assert_int_equal(released, 2);
    assert_holder(f, S2, "w1");
    itest_exec(f->pg.b, "COMMIT");
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.instances WHERE instance_id = 'w1' "
                               "AND stopped_at IS NOT NULL AND lease_1 <= now()"),
                     1);
    const char *params[] = {"w2", "1000", "5000", "10000", "2000", "0"};
    struct qw_db_res *res = NULL;
    qw_error_clear(&err);
    if (qw_db_query(f->pg.b, "claims_maintain", 6, params, &res, &err) != QW_OK)
        fail_msg("claims_maintain: %s", err.msg);
    assert_int_equal(qw_db_res_rows(res), 1);
    qw_db_res_free(res);
    assert_holder(f, S2, "w2");
}

/*
 * Maintenance skips a lapsed holder's service with an enqueue in progress
 * (that enqueue wakes the holder it saw) and hands the others over, with or
 * without work; once the enqueue committed, the next call hands it over.
 */
static void test_maintenance_skips_an_enqueue_in_progress(void **state)
{
    struct fixture *f = *state;
    w1_holds_three(f);
    itest_exec(f->pg.a, "UPDATE queuer.instances SET lease_1 = now() - interval '1 s' "
                        "WHERE instance_id = 'w1'");
    itest_exec(f->pg.b, "BEGIN");
    enqueue(f, f->pg.b, S2, NULL);
    struct qw_db *w2 = itest_connect(f->pg.conninfo);
    itest_exec(w2, "SET lock_timeout = '5s'");
    const char *params[] = {"w2", "1000", "5000", "10000", "2000", "0"};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(w2, "claims_maintain", 6, params, &res, &err) != QW_OK)
        fail_msg("claims_maintain: %s", err.msg);
    assert_int_equal(qw_db_res_rows(res), 2);
    qw_db_res_free(res);
    assert_holder(f, S1, "w2");
    assert_holder(f, S2, "w1");
    assert_holder(f, S3, "w2");
    itest_exec(f->pg.b, "COMMIT");
    qw_error_clear(&err);
    if (qw_db_query(w2, "claims_maintain", 6, params, &res, &err) != QW_OK)
        fail_msg("claims_maintain: %s", err.msg);
    assert_int_equal(qw_db_res_rows(res), 1);
    qw_db_res_free(res);
    qw_db_close(w2);
    assert_holder(f, S2, "w2");
}

/* The lease renewal of `id` as incarnation `inc`, reporting `waiting` as its waiting priority;
 * *peer_waiting (when not NULL) gets the other live instances' highest. */
static int renew_as(struct fixture *f, const char *id, const char *inc, int waiting,
                    int *peer_waiting)
{
    struct qw_claims_params p = {.instance_id = id,
                                 .incarnation = inc,
                                 .lease_ms = 30000,
                                 .hard_expiry_ms = 60000,
                                 .waiting_priority = waiting};
    struct qw_claims_result r = {0};
    struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_claims_lease(f->pg.a, &p, &r, &err);
    if (peer_waiting)
        *peer_waiting = r.peer_waiting_priority;
    qw_claims_result_free(&r);
    return rc;
}

/* The lease renewal of w1 as incarnation `inc`. */
static int renew(struct fixture *f, const char *inc)
{
    return renew_as(f, "w1", inc, QW_PRIORITY_NONE, NULL);
}

/*
 * A worker's waiting priority (its batches waiting for room at a ledger
 * node pushing back) reaches the other live workers with their next lease
 * renewal, not itself; a renewal without one clears it, and a lapsed
 * lease's report no longer counts.
 */
static void test_waiting_priority_reaches_the_others(void **state)
{
    struct fixture *f = *state;
    char *inc2 = itest_incarnation(f->pg.a, "w2");
    int peer = 0;
    assert_int_equal(renew_as(f, "w1", f->inc, 10, &peer), QW_OK);
    assert_int_equal(peer, QW_PRIORITY_NONE);
    assert_int_equal(renew_as(f, "w2", inc2, -5, &peer), QW_OK);
    assert_int_equal(peer, 10);
    assert_int_equal(renew_as(f, "w1", f->inc, QW_PRIORITY_NONE, &peer), QW_OK);
    assert_int_equal(peer, -5);
    assert_int_equal(renew_as(f, "w2", inc2, QW_PRIORITY_NONE, &peer), QW_OK);
    assert_int_equal(peer, QW_PRIORITY_NONE);
    assert_int_equal(renew_as(f, "w1", f->inc, 7, &peer), QW_OK);
    itest_exec(f->pg.b, "UPDATE queuer.instances SET lease_1 = now() - interval '1 second' "
                        "WHERE instance_id = 'w1'");
    assert_int_equal(renew_as(f, "w2", inc2, QW_PRIORITY_NONE, &peer), QW_OK);
    assert_int_equal(peer, QW_PRIORITY_NONE);
    free(inc2);
}

/*
 * A later registration of w1 (a new process taking over a frozen one) gets
 * a new incarnation; the earlier incarnation's lease renewal answers
 * QW_ERR_SUPERSEDED and its fenced writes (mark, outcome, note, graceful
 * release, stop) match nothing, while the new incarnation's do.
 */
/* Registers instance `id` as a process on host h2 with $6 `take_over`;
 * the answer has one row (the caller frees it). */
static struct qw_db_res *register_id(struct fixture *f, const char *id, const char *take_over)
{
    const char *reg[] = {id, "h2", "4242", "v", "60000", take_over};
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query(f->pg.b, "instance_register", 6, reg, &res, &err) != QW_OK)
        fail_msg("instance_register: %s", err.msg);
    assert_int_equal(qw_db_res_rows(res), 1);
    return res;
}

static void test_new_incarnation_fences_the_old(void **state)
{
    struct fixture *f = *state;
    char id[129];
    enqueue(f, f->pg.a, S1, id);
    hold(f, S1, "w1");
    int64_t epoch = epoch_of(f, S1);
    assert_int_equal(renew(f, f->inc), QW_OK);

    struct qw_db_res *res = register_id(f, "w1", "true");
    char *fresh = strdup(qw_db_res_get(res, 0, 1));
    /* the replaced registration did not stop: its heartbeat age, to wait for its POSTs */
    assert_false(qw_db_res_isnull(res, 0, 2));
    qw_db_res_free(res);
    assert_string_not_equal(fresh, f->inc);

    assert_int_equal(renew(f, f->inc), QW_ERR_SUPERSEDED);
    assert_int_equal(itest_mark(f->pg.a, "w1", f->inc, S1, id, epoch, ""), 0);
    assert_int_equal(renew(f, fresh), QW_OK);
    assert_int_equal(itest_mark(f->pg.a, "w1", fresh, S1, id, epoch, ""), 1);
    assert_int_equal(record_committed(f->pg.a, f->inc, S1, id, epoch), 0);
    const char *note[] = {"w1", id, S1, "", "old", f->inc};
    char epoch_text[24];
    snprintf(epoch_text, sizeof(epoch_text), "%lld", (long long)epoch);
    note[3] = epoch_text;
    struct qw_error err;
    qw_error_clear(&err);
    res = NULL;
    if (qw_db_query(f->pg.a, "batches_note", 6, note, &res, &err) != QW_OK)
        fail_msg("batches_note: %s", err.msg);
    qw_db_res_free(res);
    int released = -1;
    if (qw_claims_release_all(f->pg.a, "w1", f->inc, false, &released, &err) != QW_OK)
        fail_msg("release all: %s", err.msg);
    assert_int_equal(released, 0);
    assert_holder(f, S1, "w1");
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.instances WHERE instance_id = 'w1' "
                               "AND stopped_at IS NULL AND lease_1 > now()"),
                     1);
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.batches WHERE service_id = '" S1
                               "' AND submitted AND status IS NULL AND last_error IS NULL"),
                     1);
    /* the new incarnation writes */
    assert_int_equal(record_committed(f->pg.a, fresh, S1, id, epoch), 1);
    free(fresh);
}

/* Registers instance `id` with $6 `take_over`; returns whether the answer
 * names a heartbeat age (a replaced registration whose POSTs may land). */
static bool register_names_an_age(struct fixture *f, const char *id, const char *take_over)
{
    struct qw_db_res *res = register_id(f, id, take_over);
    bool named = !qw_db_res_isnull(res, 0, 2);
    qw_db_res_free(res);
    return named;
}

/*
 * A stop that abandoned POSTs keeps the claim of a service with a batch
 * mid-submission (it changes hands at the hard expiry, after any such POST
 * landed) and gives the others back. A later registration of the id is told
 * the stopped one's heartbeat age, to wait for those POSTs before posting;
 * one of a fresh id is not.
 */
static void test_stop_that_abandoned_posts_keeps_mid_submission(void **state)
{
    struct fixture *f = *state;
    char id[129];
    enqueue(f, f->pg.a, S1, id);
    enqueue(f, f->pg.a, S3, NULL);
    hold(f, S1, "w1");
    hold(f, S3, "w1");
    assert_int_equal(renew(f, f->inc), QW_OK);
    assert_int_equal(itest_mark(f->pg.a, "w1", f->inc, S1, id, epoch_of(f, S1), ""), 1);
    int released = -1;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_claims_release_all(f->pg.a, "w1", f->inc, true, &released, &err) != QW_OK)
        fail_msg("release all: %s", err.msg);
    assert_int_equal(released, 1);
    assert_holder(f, S1, "w1");
    assert_int_equal(scalar(f, "SELECT count(*) FROM queuer.service_id_claims WHERE service_id "
                               "= '" S3 "' AND claimant IS NULL"),
                     1);
    assert_true(register_names_an_age(f, "w1", "false"));
    assert_false(register_names_an_age(f, "w9", "false"));
}

/*
 * The mark leaves out a batch that is not its service's next, as the
 * one-round serial choice would (a wake-up's batch is marked without a
 * fetch): not while an older batch of the service is open, not while one
 * is in flight; the oldest, once nothing is in flight, is marked.
 */
static void test_mark_takes_only_the_services_next_batch(void **state)
{
    struct fixture *f = *state;
    char first[129], second[129];
    enqueue(f, f->pg.a, S1, first);
    enqueue(f, f->pg.a, S1, second);
    hold(f, S1, "w1");
    assert_int_equal(renew(f, f->inc), QW_OK);
    int64_t epoch = epoch_of(f, S1);
    /* the second, while the first is open: left alone */
    assert_int_equal(itest_mark(f->pg.a, "w1", f->inc, S1, second, epoch, ""), 0);
    /* the first; then the second, while the first is in flight */
    assert_int_equal(itest_mark(f->pg.a, "w1", f->inc, S1, first, epoch, ""), 1);
    assert_int_equal(itest_mark(f->pg.a, "w1", f->inc, S1, second, epoch, ""), 0);
    /* Pending counts as in flight too */
    itest_exec(f->pg.a, "UPDATE queuer.batches SET submitted = false, status = 'Pending' "
                        "WHERE service_id = '" S1 "' AND submitted");
    assert_int_equal(itest_mark(f->pg.a, "w1", f->inc, S1, second, epoch, ""), 0);
    itest_exec(f->pg.a, "UPDATE queuer.batches SET submitted = true, status = NULL "
                        "WHERE service_id = '" S1 "' AND status = 'Pending'");
    /* the first final: the second is the service's next */
    assert_int_equal(record_committed(f->pg.a, f->inc, S1, first, epoch), 1);
    assert_int_equal(itest_mark(f->pg.a, "w1", f->inc, S1, second, epoch, ""), 1);
    assert_work_counted(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_split_counter_interleaved, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_counter_concurrent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_enqueue_with_none_live_leaves_it_free, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_enqueue_gives_a_free_service_and_wakes_the_holder,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_wake_up_names_every_service, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pickup_names_every_claim_given, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pickup_names_claims_in_several_payloads, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pickup_past_sixteen_payloads_says_new_claims, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_enqueue_respects_share_and_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_enqueue_of_a_held_service_leaves_its_claim_row, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_release_skips_an_enqueue_in_progress, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_all_skips_an_enqueue_in_progress, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_maintenance_skips_an_enqueue_in_progress, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_new_incarnation_fences_the_old, setup, teardown),
        cmocka_unit_test_setup_teardown(test_waiting_priority_reaches_the_others, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mark_takes_only_the_services_next_batch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stop_that_abandoned_posts_keeps_mid_submission, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
