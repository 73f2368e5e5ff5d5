/*
 * bench-load: the open-loop load of workload W5. Enqueues batches at a
 * fixed rate, whatever the queue does with them, for a fixed time, and
 * writes one line per stored batch, "batch_id<TAB>service_id<TAB>t_us",
 * where t_us is when its enqueue committed (epoch microseconds, the clock
 * scabbard-sim stamps its events with), for bench-analyze --enqueue-log.
 *
 *   bench-load --rate N --services S --seconds D --out FILE
 *              [--tick-ms T] [--seed X] [--single [--prepared] | --graphile]
 *
 * Every tick (default 5 ms) it enqueues the batches due by then in one
 * call of queuer.enqueue_rows() (the application's SQL path, the payload
 * checked by the database), each to a service drawn uniformly from S
 * (w5lod-NNNNN::NNNN). At 1,500 batches/s a 5 ms tick holds 7 or 8
 * batches, so each call's NOTIFY names its services (enqueue_rows() names
 * up to 8), as an application enqueueing batch by batch would; a bigger
 * tick sends one anonymous NOTIFY per call, on which every worker runs a
 * whole cycle. Ticks run on a schedule fixed at the start: a late
 * tick sends what is due at once, so the offered rate stays N. Back
 * pressure stays as the database sets it: refused batches are counted and
 * not retried. QUEUER_DATABASE_CONNINFO names the database.
 *
 * --single sends every batch as its own call of queuer.enqueue_batch()
 * instead, in an unnamed statement (as most drivers send a query), or with
 * --prepared through a statement prepared once per session: the one-batch
 * path an application calls.
 *
 * --graphile sends every batch as its own graphile-worker job instead
 * (graphile_worker.add_job('submit_batch', ...) in the queue named after
 * its service, an unnamed statement): the same open loop for the peer that
 * bench/run.sh compares with (workload G5).
 *
 * Prints one line of key=value figures at the end (batches, refused, the
 * achieved rate, the latest tick, the enqueue calls: each a transaction of
 * its own; and the CPU its backend used, read from /proc when the server
 * runs on this host, else -1). Exit status: 0, 1 on a database error, 64 on bad usage, 74
 * when FILE cannot be written.
 */
#include "common/backoff.h"
#include "common/clock.h"
#include "common/hex.h"
#include "common/number.h"
#include "db/db.h"
#include "db/pgarray.h"
#include "ingest/batchlist.h"

#include <getopt.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SERVICES_PER_CIRCUIT 10000 /* services NNNN under one circuit w5lod-NNNNN */

static const char SQL_ENQUEUE[] =
    "SELECT o.line_no, o.outcome FROM queuer.enqueue_rows((SELECT array_agg(ROW(u.o, u.s, u.b, "
    "u.p)::queuer.enqueue_row ORDER BY u.o) FROM unnest($1::text[], $2::text[], $3::bytea[]) "
    "WITH ORDINALITY AS u(s, b, p, o)), true) o";
static const char SQL_ENQUEUE_ONE[] = "SELECT queuer.enqueue_batch($1, $2, $3::bytea)";
static const char SQL_GRAPHILE_ONE[] =
    "SELECT graphile_worker.add_job('submit_batch', json_build_object('service_id', $1::text, "
    "'batch_id', $2::text, 'payload_hex', $3::text), queue_name := $1::text)";

struct opts {
    long rate;       /* batches per second */
    long services;   /* services drawn from */
    long seconds;    /* duration */
    long tick_ms;    /* one enqueue call per tick */
    uint64_t seed;   /* ids, payloads and the service draw */
    const char *out; /* enqueue log */
    int single;      /* one queuer.enqueue_batch() call per batch */
    int prepared;    /* with single: through a prepared statement */
    int graphile;    /* one graphile-worker job per batch (implies single) */
};

/* One tick's batches. */
struct tick {
    struct qw_pgarray services;
    struct qw_pgarray ids;
    struct qw_pgarray payloads;
    char **hex;          /* with --single: each batch's payload as bytea text */
    char (*id)[129];     /* batch ids of this tick */
    char (*service)[32]; /* their services */
    int *refused;        /* bool per batch: back pressure (or another refusal) */
    long n;              /* batches in the tick */
    long cap;            /* room in id/service/refused */
};

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: bench-load --rate N --services S --seconds D --out FILE\n"
            "                  [--tick-ms T] [--seed X] [--single [--prepared] | --graphile]\n");
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {
        {"rate", required_argument, NULL, 'r'},
        {"services", required_argument, NULL, 'n'},
        {"seconds", required_argument, NULL, 'd'},
        {"tick-ms", required_argument, NULL, 't'},
        {"seed", required_argument, NULL, 's'},
        {"out", required_argument, NULL, 'o'},
        {"single", no_argument, NULL, '1'},
        {"prepared", no_argument, NULL, 'p'},
        {"graphile", no_argument, NULL, 'g'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'r':
            bad = qw_number_parse("--rate", optarg, 1, 1000000, &o->rate, NULL, 0) != 0;
            break;
        case 'n':
            bad = qw_number_parse("--services", optarg, 1, 10000000, &o->services, NULL, 0) != 0;
            break;
        case 'd':
            bad = qw_number_parse("--seconds", optarg, 1, 86400, &o->seconds, NULL, 0) != 0;
            break;
        case 't':
            bad = qw_number_parse("--tick-ms", optarg, 1, 1000, &o->tick_ms, NULL, 0) != 0;
            break;
        case 's':
            o->seed = strtoull(optarg, NULL, 0);
            break;
        case 'o':
            o->out = optarg;
            break;
        case '1':
            o->single = 1;
            break;
        case 'p':
            o->prepared = 1;
            break;
        case 'g':
            o->graphile = o->single = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            bad = 1;
        }
        if (bad) {
            usage(stderr);
            return -1;
        }
    }
    if (optind != argc || !o->rate || !o->services || !o->seconds || !o->out ||
        (o->prepared && (!o->single || o->graphile))) {
        usage(stderr);
        return -1;
    }
    return 0;
}

static int tick_room(struct tick *t, long n)
{
    if (n <= t->cap)
        return 0;
    for (long i = 0; i < t->cap; i++)
        free(t->hex[i]);
    free(t->hex);
    free(t->id);
    free(t->service);
    free(t->refused);
    t->id = calloc((size_t)n, sizeof(*t->id));
    t->service = calloc((size_t)n, sizeof(*t->service));
    t->refused = calloc((size_t)n, sizeof(*t->refused));
    t->hex = calloc((size_t)n, sizeof(*t->hex));
    t->cap = n;
    return t->id && t->service && t->refused && t->hex ? 0 : -1;
}

/* Fills tick `t` with `n` batches numbered from `first`. */
static int tick_fill(struct tick *t, const struct opts *o, struct qw_rng *rng, long first, long n)
{
    if (tick_room(t, n) != 0)
        return -1;
    qw_pgarray_reset(&t->services);
    qw_pgarray_reset(&t->ids);
    qw_pgarray_reset(&t->payloads);
    t->n = n;
    char *hex = NULL;
    for (long i = 0; i < n; i++) {
        uint64_t k = o->seed * UINT64_C(0x9e3779b97f4a7c15) + (uint64_t)(first + i);
        long svc = (long)qw_rng_below(rng, (uint64_t)o->services);
        snprintf(t->service[i], sizeof(t->service[i]), "w5lod-%05ld::%04ld",
                 svc / SERVICES_PER_CIRCUIT, svc % SERVICES_PER_CIRCUIT);
        qw_batchlist_sample_id(k, t->id[i]);
        uint8_t *payload = NULL;
        size_t len = 0;
        if (qw_batchlist_sample(t->id[i], k, &payload, &len) != 0)
            return -1;
        hex = malloc(2 * len + 3);
        if (!hex) {
            free(payload);
            return -1;
        }
        memcpy(hex, "\\x", 2);
        qw_hex_encode(payload, len, hex + 2);
        free(payload);
        qw_pgarray_text(&t->services, t->service[i]);
        qw_pgarray_text(&t->ids, t->id[i]);
        qw_pgarray_text(&t->payloads, hex);
        free(t->hex[i]);
        t->hex[i] = hex;
        t->refused[i] = 0;
    }
    return 0;
}

/* One call of queuer.enqueue_rows() for the whole tick; marks refused batches. */
static int enqueue_tick(struct qw_db *db, struct tick *t, struct qw_error *err)
{
    const char *params[3] = {qw_pgarray_finish(&t->services), qw_pgarray_finish(&t->ids),
                             qw_pgarray_finish(&t->payloads)};
    struct qw_db_res *res = NULL;
    if (!params[0] || !params[1] || !params[2]) {
        qw_error_set(err, QW_ERR_NOMEM, "out of memory");
        return -1;
    }
    if (qw_db_query_sql(db, SQL_ENQUEUE, 3, params, &res, err) != QW_OK)
        return -1;
    for (int i = 0; i < qw_db_res_rows(res); i++) {
        long line = (long)qw_db_res_int(res, i, 0);
        if (line >= 1 && line <= t->n && strcmp(qw_db_res_get(res, i, 1), "duplicate") != 0)
            t->refused[line - 1] = 1;
    }
    qw_db_res_free(res);
    return 0;
}

/*
 * One queuer.enqueue_batch() call (or graphile-worker job) per batch of the
 * tick on `pg` (a plain libpq connection: the unnamed statement of
 * PQexecParams, or the statement prepared as "one"); back pressure marks a
 * batch refused.
 */
static int enqueue_single(PGconn *pg, const struct opts *o, struct tick *t, struct qw_error *err)
{
    for (long i = 0; i < t->n; i++) {
        /* (graphile-worker's job takes the payload's hex digits, without "\x") */
        const char *params[3] = {t->service[i], t->id[i], o->graphile ? t->hex[i] + 2 : t->hex[i]};
        PGresult *r = o->prepared
                          ? PQexecPrepared(pg, "one", 3, params, NULL, NULL, 0)
                          : PQexecParams(pg, o->graphile ? SQL_GRAPHILE_ONE : SQL_ENQUEUE_ONE, 3,
                                         NULL, params, NULL, NULL, 0);
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        if (PQresultStatus(r) != PGRES_TUPLES_OK && !(state && strcmp(state, "QU429") == 0)) {
            qw_error_set(err, QW_ERR_DB, "%s", PQresultErrorMessage(r));
            PQclear(r);
            return -1;
        }
        t->refused[i] = PQresultStatus(r) != PGRES_TUPLES_OK;
        PQclear(r);
    }
    return 0;
}

/* CPU seconds used so far by the backend with process id `pid` when it runs on this host; -1 if
 * unknown. */
static double backend_cpu_s(long pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* after "(comm) ": state is field 1, utime and stime fields 12 and 13 */
    char *p = strrchr(buf, ')');
    unsigned long long utime = 0;
    unsigned long long stime = 0;
    if (!p ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
        return -1;
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* The process id of the session's backend, 0 if unknown. */
static long backend_pid(struct qw_db *db, PGconn *pg)
{
    if (pg)
        return PQbackendPID(pg);
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query_sql(db, "SELECT pg_backend_pid()", 0, NULL, &res, &err) != QW_OK)
        return 0;
    long pid = (long)qw_db_res_int(res, 0, 0);
    qw_db_res_free(res);
    return pid;
}

int main(int argc, char **argv)
{
    struct opts o = {.tick_ms = 5, .seed = 1};
    if (parse_args(argc, argv, &o) != 0)
        return 64;
    FILE *log = fopen(o.out, "w");
    if (!log) {
        perror(o.out);
        return 74;
    }
    const char *conninfo = getenv("QUEUER_DATABASE_CONNINFO");
    struct qw_db_opts dbo = {.conninfo = conninfo ? conninfo : "", .app_name = "bench-load"};
    struct qw_db *db = NULL;
    PGconn *pg = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (o.single) {
        pg = PQconnectdb(dbo.conninfo);
        PGresult *r = NULL;
        if (PQstatus(pg) == CONNECTION_OK && o.prepared)
            r = PQprepare(pg, "one", SQL_ENQUEUE_ONE, 3, NULL);
        if (PQstatus(pg) != CONNECTION_OK || (r && PQresultStatus(r) != PGRES_COMMAND_OK)) {
            fprintf(stderr, "bench-load: %s", PQerrorMessage(pg));
            PQclear(r);
            PQfinish(pg);
            fclose(log);
            return 1;
        }
        PQclear(r);
    } else if (qw_db_connect(&db, &dbo, &err) != QW_OK) {
        fprintf(stderr, "bench-load: %s\n", err.msg);
        fclose(log);
        return 1;
    }
    struct qw_rng rng;
    qw_rng_seed(&rng, o.seed);
    long pid = backend_pid(db, pg);
    double cpu0_s = backend_cpu_s(pid);
    struct tick t = {0};
    qw_pgarray_init(&t.services);
    qw_pgarray_init(&t.ids);
    qw_pgarray_init(&t.payloads);

    long total = o.rate * o.seconds;
    long sent = 0;
    long stored = 0;
    long refused = 0;
    long calls = 0;
    int64_t max_late_ms = 0;
    int rc = 0;
    int64_t start_ms = qw_clock_mono_ms();
    for (long k = 1; sent < total; k++) {
        int64_t due_ms = start_ms + k * o.tick_ms;
        int64_t now = qw_clock_mono_ms();
        if (due_ms > now)
            qw_clock_sleep_ms(due_ms - now);
        else if (now - due_ms > max_late_ms)
            max_late_ms = now - due_ms;
        long want = o.rate * k * o.tick_ms / 1000;
        if (want > total)
            want = total;
        if (want <= sent)
            continue;
        if (tick_fill(&t, &o, &rng, sent, want - sent) != 0) {
            fprintf(stderr, "bench-load: out of memory\n");
            rc = 1;
            break;
        }
        if (o.single) {
            if (enqueue_single(pg, &o, &t, &err) != 0) {
                fprintf(stderr, "bench-load: enqueue failed: %s\n", err.msg);
                rc = 1;
                break;
            }
            calls += t.n;
        } else {
            if (enqueue_tick(db, &t, &err) != 0) {
                fprintf(stderr, "bench-load: enqueue failed: %s\n", err.msg);
                rc = 1;
                break;
            }
            calls++;
        }
        int64_t committed_us = wall_us();
        for (long i = 0; i < t.n; i++) {
            if (t.refused[i]) {
                refused++;
                continue;
            }
            fprintf(log, "%s\t%s\t%lld\n", t.id[i], t.service[i], (long long)committed_us);
            stored++;
        }
        sent = want;
    }
    double secs = (double)(qw_clock_mono_ms() - start_ms) / 1000.0;
    double cpu1_s = backend_cpu_s(pid);
    if (fclose(log) != 0) {
        perror(o.out);
        rc = rc ? rc : 74;
    }
    printf("load_batches=%ld load_refused=%ld load_seconds=%.1f load_rate=%.1f "
           "load_max_late_ms=%lld load_calls=%ld load_backend_cpu_s=%.2f\n",
           stored, refused, secs, secs > 0 ? (double)sent / secs : 0.0, (long long)max_late_ms,
           calls, cpu0_s >= 0 && cpu1_s >= 0 ? cpu1_s - cpu0_s : -1.0);
    qw_pgarray_free(&t.services);
    qw_pgarray_free(&t.ids);
    qw_pgarray_free(&t.payloads);
    for (long i = 0; i < t.cap; i++)
        free(t.hex[i]);
    free(t.hex);
    free(t.id);
    free(t.service);
    free(t.refused);
    qw_db_close(db);
    PQfinish(pg);
    return rc;
}
