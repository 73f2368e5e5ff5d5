/*
 * bench-load: the open-loop load of workload W5. Enqueues batches at a
 * fixed rate, whatever the queue does with them, for a fixed time, and
 * writes one line per stored batch, "batch_id<TAB>service_id<TAB>t_us",
 * where t_us is when its enqueue committed (epoch microseconds, the clock
 * scabbard-sim stamps its events with), for bench-analyze --enqueue-log.
 *
 *   bench-load --rate N --services S --seconds D --out FILE
 *              [--tick-ms T] [--seed X]
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
 * Prints one line of key=value figures at the end (batches, refused, the
 * achieved rate, the latest tick, the enqueue calls: each a transaction of
 * its own). Exit status: 0, 1 on a database error, 64 on bad usage, 74
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SERVICES_PER_CIRCUIT 10000 /* services NNNN under one circuit w5lod-NNNNN */

static const char SQL_ENQUEUE[] =
    "SELECT o.line_no, o.outcome FROM queuer.enqueue_rows((SELECT array_agg(ROW(u.o, u.s, u.b, "
    "u.p)::queuer.enqueue_row ORDER BY u.o) FROM unnest($1::text[], $2::text[], $3::bytea[]) "
    "WITH ORDINALITY AS u(s, b, p, o)), true) o";

struct opts {
    long rate;       /* batches per second */
    long services;   /* services drawn from */
    long seconds;    /* duration */
    long tick_ms;    /* one enqueue call per tick */
    uint64_t seed;   /* ids, payloads and the service draw */
    const char *out; /* enqueue log */
};

/* One tick's batches. */
struct tick {
    struct qw_pgarray services;
    struct qw_pgarray ids;
    struct qw_pgarray payloads;
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
    fprintf(out, "usage: bench-load --rate N --services S --seconds D --out FILE\n"
                 "                  [--tick-ms T] [--seed X]\n");
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {
        {"rate", required_argument, NULL, 'r'},    {"services", required_argument, NULL, 'n'},
        {"seconds", required_argument, NULL, 'd'}, {"tick-ms", required_argument, NULL, 't'},
        {"seed", required_argument, NULL, 's'},    {"out", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
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
    if (optind != argc || !o->rate || !o->services || !o->seconds || !o->out) {
        usage(stderr);
        return -1;
    }
    return 0;
}

static int tick_room(struct tick *t, long n)
{
    if (n <= t->cap)
        return 0;
    free(t->id);
    free(t->service);
    free(t->refused);
    t->id = calloc((size_t)n, sizeof(*t->id));
    t->service = calloc((size_t)n, sizeof(*t->service));
    t->refused = calloc((size_t)n, sizeof(*t->refused));
    t->cap = n;
    return t->id && t->service && t->refused ? 0 : -1;
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
        free(hex);
        t->refused[i] = 0;
    }
    return 0;
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
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_connect(&db, &dbo, &err) != QW_OK) {
        fprintf(stderr, "bench-load: %s\n", err.msg);
        fclose(log);
        return 1;
    }
    struct qw_rng rng;
    qw_rng_seed(&rng, o.seed);
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
        const char *params[3] = {qw_pgarray_finish(&t.services), qw_pgarray_finish(&t.ids),
                                 qw_pgarray_finish(&t.payloads)};
        struct qw_db_res *res = NULL;
        if (!params[0] || !params[1] || !params[2] ||
            qw_db_query_sql(db, SQL_ENQUEUE, 3, params, &res, &err) != QW_OK) {
            fprintf(stderr, "bench-load: enqueue failed: %s\n", err.msg);
            rc = 1;
            break;
        }
        int64_t committed_us = wall_us();
        calls++;
        for (int i = 0; i < qw_db_res_rows(res); i++) {
            long line = (long)qw_db_res_int(res, i, 0);
            if (line >= 1 && line <= t.n && strcmp(qw_db_res_get(res, i, 1), "duplicate") != 0)
                t.refused[line - 1] = 1;
        }
        qw_db_res_free(res);
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
    if (fclose(log) != 0) {
        perror(o.out);
        rc = rc ? rc : 74;
    }
    printf("load_batches=%ld load_refused=%ld load_seconds=%.1f load_rate=%.1f "
           "load_max_late_ms=%lld load_calls=%ld\n",
           stored, refused, secs, secs > 0 ? (double)sent / secs : 0.0, (long long)max_late_ms,
           calls);
    qw_pgarray_free(&t.services);
    qw_pgarray_free(&t.ids);
    qw_pgarray_free(&t.payloads);
    free(t.id);
    free(t.service);
    free(t.refused);
    qw_db_close(db);
    return rc;
}
