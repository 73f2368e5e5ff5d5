/*
 * The screen of `queuer status --watch`: one status report fitted to a
 * terminal of rows x cols (pure; the command redraws it once a second).
 * Fixed lines first (in flight, waiting, throughput, services, and a
 * snapshot holding back vacuum when one does), then the
 * instances and the stuck batches share what is left; whatever does not
 * fit is summarised as "... N more", and no line is wider than the screen.
 */
#include "common/duration.h"
#include "admin/status.h"
#include "common/strbuf.h"
#include "common/table.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_ROWS 10 /* smaller screens are drawn as if they had this many rows */
#define MIN_COLS 40 /* and this many columns (the terminal then cuts) */

void qw_status_watch_rates(const struct qw_status_report *prev, const struct qw_status_report *cur,
                           int64_t elapsed_ms, struct qw_status_rates *out)
{
    memset(out, 0, sizeof(*out));
    out->committed_5m_per_s = (double)cur->counts.committed_5m / 300.0;
    if (!prev || elapsed_ms <= 0)
        return;
    /* The hour window slides: a batch leaving it can make the delta negative. */
    int64_t committed = cur->counts.committed_1h - prev->counts.committed_1h;
    int64_t submitted = cur->counts.submissions_1h - prev->counts.submissions_1h;
    out->known = 1;
    out->committed_per_s = committed > 0 ? (double)committed * 1000.0 / (double)elapsed_ms : 0.0;
    out->submissions_per_s = submitted > 0 ? (double)submitted * 1000.0 / (double)elapsed_ms : 0.0;
}

/* Appends `text` (several lines) to the screen lines, each cut to `cols`. */
struct screen {
    struct qw_strbuf out; /* the frame */
    int rows_left;        /* lines that may still be written */
    int cols;             /* width */
};

static void put_line(struct screen *s, const char *line, size_t len)
{
    if (s->rows_left <= 0)
        return;
    if (len > (size_t)s->cols)
        len = (size_t)s->cols;
    while (len > 0 && line[len - 1] == ' ')
        len--;
    qw_strbuf_append(&s->out, line, len);
    qw_strbuf_append(&s->out, "\n", 1);
    s->rows_left--;
}

static void put_text(struct screen *s, const char *text)
{
    while (text && *text) {
        const char *nl = strchr(text, '\n');
        size_t len = nl ? (size_t)(nl - text) : strlen(text);
        put_line(s, text, len);
        text = nl ? nl + 1 : NULL;
    }
}

static void putf(struct screen *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct screen *s, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    put_line(s, line, strlen(line));
}

/* Renders `t` and puts at most `max_rows` of its lines (header included). */
static void put_table(struct screen *s, const struct qw_table *t)
{
    struct qw_strbuf b;
    qw_strbuf_init(&b);
    qw_table_render(t, &b);
    char *text = qw_strbuf_take(&b, NULL);
    if (!text) {
        s->out.failed = true;
        return;
    }
    put_text(s, text);
    free(text);
}

static void instances_table(struct screen *s, const struct qw_status_report *r, size_t shown)
{
    struct qw_table t;
    if (qw_table_init(&t, shown + 1, 5) != 0) {
        s->out.failed = true;
        return;
    }
    const char *head[] = {"INSTANCE", "STATE", "HEARTBEAT", "CLAIMS", "LAPSED"};
    for (int c = 0; c < t.cols; c++)
        qw_table_set(&t, 0, c, head[c]);
    for (size_t i = 0; i < shown; i++) {
        const struct qw_status_instance *in = &r->instances[i];
        char age[32];
        qw_duration_format(in->heartbeat_age_ms / 1000, age, sizeof(age));
        qw_table_set(&t, i + 1, 0, in->instance_id);
        qw_table_set(&t, i + 1, 1, in->state);
        qw_table_set(&t, i + 1, 2, age);
        qw_table_set_int(&t, i + 1, 3, in->claims_held);
        qw_table_set_int(&t, i + 1, 4, in->claims_lapsed);
    }
    put_table(s, &t);
    qw_table_free(&t);
}

static void stuck_table(struct screen *s, const struct qw_status_report *r, size_t shown)
{
    struct qw_table t;
    if (qw_table_init(&t, shown + 1, 5) != 0) {
        s->out.failed = true;
        return;
    }
    const char *head[] = {"STUCK BATCH", "SERVICE", "STATE", "FOR", "REASONS"};
    for (int c = 0; c < t.cols; c++)
        qw_table_set(&t, 0, c, head[c]);
    for (size_t i = 0; i < shown; i++) {
        const struct qw_status_stuck *st = &r->stuck[i];
        char id[17], age[32];
        snprintf(id, sizeof(id), "%.16s", st->batch_id);
        qw_duration_format(st->stuck_for_s, age, sizeof(age));
        qw_table_set(&t, i + 1, 0, id);
        qw_table_set(&t, i + 1, 1, st->service_id);
        qw_table_set(&t, i + 1, 2, st->state);
        qw_table_set(&t, i + 1, 3, age);
        qw_table_set(&t, i + 1, 4, st->reasons);
    }
    put_table(s, &t);
    qw_table_free(&t);
}

char *qw_status_render_watch(const struct qw_status_report *r, const struct qw_status_rates *rates,
                             const char *problem, int rows, int cols)
{
    struct screen s = {.rows_left = rows < MIN_ROWS ? MIN_ROWS : rows,
                       .cols = cols < MIN_COLS ? MIN_COLS : cols};
    qw_strbuf_init(&s.out);
    s.rows_left--; /* the last line stays empty: the cursor waits there */
    const struct qw_status_counts *c = &r->counts;

    putf(&s, "queuer status --watch  %s  (every 1 s; Ctrl-C ends)", r->at);
    if (problem)
        putf(&s, "! %s", problem);
    else
        put_line(&s, "", 0);
    char oldest[40] = "-";
    if (c->oldest_age_s >= 0)
        qw_duration_format(c->oldest_age_s, oldest, sizeof(oldest));
    putf(&s, "in flight  %9lld   submitting %lld, Pending %lld",
         (long long)(c->submitting + c->pending), (long long)c->submitting, (long long)c->pending);
    putf(&s, "waiting    %9lld   oldest unfinished %s", (long long)c->waiting, oldest);
    putf(&s, "retrying   %9lld   Delayed %lld, Unknown %lld, parked %lld%s",
         (long long)(c->delayed + c->unknown + c->parked), (long long)c->delayed,
         (long long)c->unknown, (long long)c->parked, c->parked ? " (needs an operator)" : "");
    char now[40] = "-";
    if (rates->known)
        snprintf(now, sizeof(now), "%.0f/s", rates->committed_per_s);
    putf(&s, "committed  %9s   now; %.1f/s over 5 min; %lld in the last hour", now,
         rates->committed_5m_per_s, (long long)c->committed_1h);
    putf(&s, "services   %9lld   with work %lld, claimed %lld, unclaimed %lld, refusing %lld",
         (long long)c->services, (long long)c->services_with_work, (long long)c->services_claimed,
         (long long)c->services_unclaimed, (long long)c->services_blocked);
    if (r->snapshot.holders > 0) {
        char held[512];
        qw_status_snapshot_text(&r->snapshot, held, sizeof(held));
        putf(&s, "! vacuum held back by %s", held);
    }
    put_line(&s, "", 0);

    /* Instances and stuck batches share the rest: each gets what it needs
     * up to half, then the other takes what is left. */
    size_t alive = 0;
    for (size_t i = 0; i < r->n_instances; i++)
        alive += strcmp(r->instances[i].state, "alive") == 0;
    int left = s.rows_left;
    int stuck_need = c->stuck > 0 ? (int)r->n_stuck + 2 : 1;
    int inst_need = (int)r->n_instances + 2;
    int inst_rows = inst_need;
    if (inst_rows + stuck_need + 1 > left) {
        int half = (left - 1) / 2;
        inst_rows =
            stuck_need < half ? left - 1 - stuck_need : (inst_need < half ? inst_need : half);
    }
    if (inst_rows < 2)
        inst_rows = 2;
    size_t inst_shown = r->n_instances;
    if ((int)inst_shown > inst_rows - 2)
        inst_shown = inst_rows > 3 ? (size_t)(inst_rows - 3) : 0;
    putf(&s, "instances: %zu alive of %zu (claims per instance)", alive, r->n_instances);
    if (inst_shown > 0)
        instances_table(&s, r, inst_shown);
    if (inst_shown < r->n_instances)
        putf(&s, "  ... %zu more instances (queuer status lists them all)",
             r->n_instances - inst_shown);

    put_line(&s, "", 0);
    if (c->stuck == 0) {
        put_line(&s, "stuck batches: none", strlen("stuck batches: none"));
    } else {
        putf(&s, "stuck batches: %lld (act: queuer batch show|retry|cancel ID)",
             (long long)c->stuck);
        int room = s.rows_left - 1; /* the header row */
        size_t shown = r->n_stuck;
        if ((int64_t)shown > room)
            shown = room > 1 ? (size_t)(room - 1) : 0;
        if (shown > 0)
            stuck_table(&s, r, shown);
        if ((int64_t)shown < c->stuck)
            putf(&s, "  ... %lld more", (long long)(c->stuck - (int64_t)shown));
    }
    return qw_strbuf_take(&s.out, NULL);
}
