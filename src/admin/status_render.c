/* Pure renderers of the `queuer status` report: table and JSON; see status.h. */
#include "admin/status.h"
#include "common/duration.h"
#include "common/strbuf.h"
#include "common/table.h"
#include "common/termtext.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH_ID_SHOWN 16 /* leading characters of a batch id in tables */

static void count_line(struct qw_strbuf *b, const char *label, int64_t v, const char *note)
{
    qw_strbuf_printf(b, "  %-12s %8lld%s%s\n", label, (long long)v, note && *note ? "  " : "",
                     note ? note : "");
}

/* "12 in flight, 316/s, 3 partitions, target 125": an instance's shared capacity. */
static void capacity_text(const struct qw_status_instance *in, char *out, size_t len)
{
    if (!in->capacity) {
        snprintf(out, len, "-");
        return;
    }
    char flight[40] = "", rate[40] = "";
    if (in->cap_in_flight >= 0)
        snprintf(flight, sizeof(flight), "%lld in flight, ", (long long)in->cap_in_flight);
    if (in->cap_per_second >= 0)
        snprintf(rate, sizeof(rate), "%lld/s, ", (long long)in->cap_per_second);
    snprintf(out, len, "%s%s%lld partitions, target %lld", flight, rate,
             (long long)in->cap_partitions, (long long)in->cap_target);
}

/* A line naming the live instances whose LISTEN wake-ups do not arrive
 * (they poll every cycle meanwhile), when there are any. */
static void render_not_delivered(struct qw_strbuf *b, const struct qw_status_report *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n_instances; i++) {
        const struct qw_status_instance *in = &r->instances[i];
        if (strcmp(in->state, "alive") != 0 || strcmp(in->notifications, "not_delivered") != 0)
            continue;
        qw_strbuf_printf(b, "%s%s",
                         n++ ? ", " : "wake-ups not delivered (polling): ", in->instance_id);
    }
    if (n)
        qw_strbuf_printf(b, "\n");
}

static void render_instances(struct qw_strbuf *b, const struct qw_status_report *r)
{
    size_t alive = 0, dead = 0, stopped = 0;
    bool capacity = false;
    for (size_t i = 0; i < r->n_instances; i++) {
        capacity = capacity || r->instances[i].capacity;
        const char *s = r->instances[i].state;
        alive += strcmp(s, "alive") == 0;
        dead += strcmp(s, "dead") == 0;
        stopped += strcmp(s, "stopped") == 0;
    }
    qw_strbuf_printf(b, "\ninstances: %zu alive, %zu dead, %zu stopped (last day)\n", alive, dead,
                     stopped);
    if (r->n_instances == 0)
        return;
    struct qw_table t;
    if (qw_table_init(&t, r->n_instances + 1, capacity ? 9 : 8) != 0) {
        b->failed = true;
        return;
    }
    const char *head[] = {"INSTANCE", "STATE", "HEARTBEAT", "CLAIMS",         "LAPSED",
                          "HOST",     "PID",   "VERSION",   "SHARED CAPACITY"};
    for (int c = 0; c < t.cols; c++)
        qw_table_set(&t, 0, c, head[c]);
    for (size_t i = 0; i < r->n_instances; i++) {
        const struct qw_status_instance *in = &r->instances[i];
        char age[32];
        qw_duration_format(in->heartbeat_age_ms / 1000, age, sizeof(age));
        qw_table_set(&t, i + 1, 0, in->instance_id);
        qw_table_set(&t, i + 1, 1, in->state);
        qw_table_set(&t, i + 1, 2, age);
        qw_table_set_int(&t, i + 1, 3, in->claims_held);
        qw_table_set_int(&t, i + 1, 4, in->claims_lapsed);
        qw_table_set(&t, i + 1, 5, in->host);
        qw_table_set_int(&t, i + 1, 6, in->pid);
        qw_table_set(&t, i + 1, 7, in->version);
        if (capacity) {
            char cap[128];
            capacity_text(in, cap, sizeof(cap));
            qw_table_set(&t, i + 1, 8, cap);
        }
    }
    qw_table_render(&t, b);
    qw_table_free(&t);
    render_not_delivered(b, r);
}

/* The ledger nodes as each live worker sees them (only when a worker reported some). */
static void render_nodes(struct qw_strbuf *b, const struct qw_status_report *r)
{
    if (r->n_nodes == 0)
        return;
    qw_strbuf_printf(b, "\nledger nodes (as each live worker sees them):\n");
    struct qw_table t;
    if (qw_table_init(&t, r->n_nodes + 1, 10) != 0) {
        b->failed = true;
        return;
    }
    const char *head[] = {"INSTANCE",  "NODE",   "URL",   "STATE",    "LATENCY",
                          "IN FLIGHT", "WINDOW", "POSTS", "FAILURES", "REPORTED"};
    for (int c = 0; c < t.cols; c++)
        qw_table_set(&t, 0, c, head[c]);
    for (size_t i = 0; i < r->n_nodes; i++) {
        const struct qw_status_node *nd = &r->nodes[i];
        char latency[32], age[32], window[48];
        if (nd->latency_us < 0)
            snprintf(latency, sizeof(latency), "-");
        else
            snprintf(latency, sizeof(latency), "%.1f ms", (double)nd->latency_us / 1000.0);
        qw_duration_format(nd->reported_age_s, age, sizeof(age));
        if (nd->window < 0)
            snprintf(window, sizeof(window), "-");
        else
            snprintf(window, sizeof(window), "%lld/%lld", (long long)nd->window_used,
                     (long long)nd->window);
        qw_table_set(&t, i + 1, 0, nd->instance_id);
        qw_table_set_int(&t, i + 1, 1, nd->node);
        qw_table_set(&t, i + 1, 2, nd->url);
        qw_table_set(&t, i + 1, 3, nd->state);
        qw_table_set(&t, i + 1, 4, latency);
        qw_table_set_int(&t, i + 1, 5, nd->posts_in_flight);
        qw_table_set(&t, i + 1, 6, window);
        qw_table_set_int(&t, i + 1, 7, nd->posts);
        qw_table_set_int(&t, i + 1, 8, nd->failures);
        qw_table_set(&t, i + 1, 9, age);
    }
    qw_table_render(&t, b);
    qw_table_free(&t);
}

static void render_stuck(struct qw_strbuf *b, const struct qw_status_report *r)
{
    if (r->counts.stuck == 0) {
        qw_strbuf_printf(b, "\nstuck batches: none\n");
        return;
    }
    qw_strbuf_printf(b, "\nstuck batches: %lld", (long long)r->counts.stuck);
    if ((int64_t)r->n_stuck < r->counts.stuck)
        qw_strbuf_printf(b, " (the %zu stuck longest shown)", r->n_stuck);
    qw_strbuf_printf(b, "\n");
    struct qw_table t;
    if (qw_table_init(&t, r->n_stuck + 1, 9) != 0) {
        b->failed = true;
        return;
    }
    const char *head[] = {"BATCH",  "SERVICE",  "STATE",   "ATTEMPTS",  "STUCK FOR",
                          "BEHIND", "CLAIMANT", "REASONS", "LAST ERROR"};
    for (int c = 0; c < t.cols; c++)
        qw_table_set(&t, 0, c, head[c]);
    for (size_t i = 0; i < r->n_stuck; i++) {
        const struct qw_status_stuck *s = &r->stuck[i];
        char id[BATCH_ID_SHOWN + 1], age[32];
        snprintf(id, sizeof(id), "%.*s", BATCH_ID_SHOWN, s->batch_id);
        qw_duration_format(s->stuck_for_s, age, sizeof(age));
        qw_table_set(&t, i + 1, 0, id);
        qw_table_set(&t, i + 1, 1, s->service_id);
        qw_table_set(&t, i + 1, 2, s->state);
        qw_table_set_int(&t, i + 1, 3, s->attempts);
        qw_table_set(&t, i + 1, 4, age);
        qw_table_set_int(&t, i + 1, 5, s->waiting_behind);
        qw_table_set(&t, i + 1, 6, s->claimant[0] ? s->claimant : "-");
        qw_table_set(&t, i + 1, 7, s->reasons);
        qw_table_set(&t, i + 1, 8, s->last_error[0] ? s->last_error : "-");
    }
    qw_table_render(&t, b);
    qw_table_free(&t);
    qw_strbuf_printf(b, "  (act with: queuer batch show|retry|cancel <BATCH>; "
                        "a unique id prefix of 16+ characters is enough)\n");
}

void qw_status_snapshot_text(const struct qw_status_snapshot *s, char *out, size_t len)
{
    /* role, application and state come from other sessions: written out safely */
    char who[32] = "", open[64] = "open for an unknown time (not visible to this role)";
    char role[96], app[96], state[96];
    qw_termtext_escape(role, sizeof(role), s->role[0] ? s->role : "-");
    qw_termtext_escape(app, sizeof(app), s->application[0] ? s->application : "-");
    qw_termtext_escape(state, sizeof(state), s->state[0] ? s->state : "state not visible");
    if (s->pid > 0)
        snprintf(who, sizeof(who), " pid %lld", (long long)s->pid);
    if (s->open_s >= 0) {
        char age[32];
        qw_duration_format(s->open_s, age, sizeof(age));
        snprintf(open, sizeof(open), "open %s", age);
    }
    snprintf(out, len, "%s%s (role %s, %s %s, %s): %s, %lld transactions behind", s->kind, who,
             role, strcmp(s->kind, "replication slot") == 0 ? "slot" : "application", app, state,
             open, (long long)s->xids_behind);
}

/* The oldest snapshot that holds back vacuum, when one does. */
static void render_snapshot(struct qw_strbuf *b, const struct qw_status_report *r)
{
    const struct qw_status_snapshot *s = &r->snapshot;
    if (s->holders == 0) {
        qw_strbuf_printf(b, "\nsnapshots holding back vacuum: none\n");
        return;
    }
    char line[512];
    qw_status_snapshot_text(s, line, sizeof(line));
    qw_strbuf_printf(b,
                     "\nsnapshots holding back vacuum: %lld; the oldest:\n  %s\n"
                     "  (while it stays open vacuum removes no row version updated or deleted "
                     "after it began, and the workers slow down minute by minute: end it; see "
                     "queuer.snapshot_holders and docs/OPERATIONS.md, \"Table growth and long "
                     "transactions\")\n",
                     (long long)s->holders, line);
}

char *qw_status_render_text(const struct qw_status_report *r)
{
    const struct qw_status_counts *c = &r->counts;
    struct qw_strbuf b;
    qw_strbuf_init(&b);
    qw_strbuf_printf(&b, "queuer status at %s\n\nbatches not final yet\n", r->at);
    char oldest[48] = "";
    if (c->oldest_age_s >= 0) {
        char age[32];
        qw_duration_format(c->oldest_age_s, age, sizeof(age));
        snprintf(oldest, sizeof(oldest), "oldest %s", age);
    }
    int64_t total = c->waiting + c->submitting + c->pending + c->delayed + c->parked + c->unknown;
    count_line(&b, "total", total, oldest);
    count_line(&b, "waiting", c->waiting, NULL);
    count_line(&b, "submitting", c->submitting, NULL);
    count_line(&b, "Pending", c->pending, NULL);
    count_line(&b, "Delayed", c->delayed, NULL);
    count_line(&b, "parked", c->parked,
               c->parked ? "needs an operator: queuer batch retry|cancel" : NULL);
    count_line(&b, "Unknown", c->unknown, NULL);
    count_line(&b, "in flight", c->submitting + c->pending, "(submitting + Pending)");

    qw_strbuf_printf(&b, "\nlast hour (last 5 minutes)\n");
    char note[48];
    snprintf(note, sizeof(note), "(%lld)", (long long)c->submissions_5m);
    count_line(&b, "submissions", c->submissions_1h, note);
    snprintf(note, sizeof(note), "(%lld)", (long long)c->committed_5m);
    count_line(&b, "Committed", c->committed_1h, note);
    count_line(&b, "Valid", c->valid_1h, NULL);
    count_line(&b, "Invalid", c->invalid_1h, NULL);
    count_line(&b, "Cancelled", c->cancelled_1h, NULL);

    qw_strbuf_printf(&b,
                     "\nservices: %lld total, %lld with work, %lld claimed, %lld with work but "
                     "unclaimed, %lld refusing enqueues\n",
                     (long long)c->services, (long long)c->services_with_work,
                     (long long)c->services_claimed, (long long)c->services_unclaimed,
                     (long long)c->services_blocked);
    render_instances(&b, r);
    render_nodes(&b, r);
    render_stuck(&b, r);
    render_snapshot(&b, r);
    return qw_strbuf_take(&b, NULL);
}

/* Adds `value` under `key`; a failed allocation makes the whole render fail. */
static int put(json_t *obj, const char *key, json_t *value)
{
    return value ? json_object_set_new(obj, key, value) : -1;
}

json_t *qw_status_render_json(const struct qw_status_report *r)
{
    const struct qw_status_counts *c = &r->counts;
    json_t *root = json_object();
    json_t *batches = json_object(), *hour = json_object(), *five = json_object();
    json_t *services = json_object(), *instances = json_array(), *claims = json_object();
    json_t *stuck = json_object(), *stuck_list = json_array(), *nodes = json_array();
    const struct qw_status_snapshot *sn = &r->snapshot;
    json_t *snapshot =
        sn->holders == 0
            ? json_null()
            : json_pack("{s:I, s:s, s:o, s:s?, s:s?, s:s?, s:I, s:o}", "holders",
                        (json_int_t)sn->holders, "kind", sn->kind, "pid",
                        sn->pid > 0 ? json_integer(sn->pid) : json_null(), "role",
                        sn->role[0] ? sn->role : NULL, "application",
                        sn->application[0] ? sn->application : NULL, "state",
                        sn->state[0] ? sn->state : NULL, "xids_behind", (json_int_t)sn->xids_behind,
                        "open_s", sn->open_s >= 0 ? json_integer(sn->open_s) : json_null());
    int bad = !root || !batches || !hour || !five || !services || !instances || !claims || !stuck ||
              !stuck_list || !nodes || !snapshot;
    if (!bad) {
        bad |= put(batches, "waiting", json_integer(c->waiting));
        bad |= put(batches, "submitting", json_integer(c->submitting));
        bad |= put(batches, "pending", json_integer(c->pending));
        bad |= put(batches, "delayed", json_integer(c->delayed));
        bad |= put(batches, "parked", json_integer(c->parked));
        bad |= put(batches, "unknown", json_integer(c->unknown));
        bad |= put(batches, "in_flight", json_integer(c->submitting + c->pending));
        bad |= put(batches, "oldest_age_s",
                   c->oldest_age_s >= 0 ? json_integer(c->oldest_age_s) : json_null());
        bad |= put(hour, "submissions", json_integer(c->submissions_1h));
        bad |= put(hour, "committed", json_integer(c->committed_1h));
        bad |= put(hour, "valid", json_integer(c->valid_1h));
        bad |= put(hour, "invalid", json_integer(c->invalid_1h));
        bad |= put(hour, "cancelled", json_integer(c->cancelled_1h));
        bad |= put(five, "submissions", json_integer(c->submissions_5m));
        bad |= put(five, "committed", json_integer(c->committed_5m));
        bad |= put(services, "total", json_integer(c->services));
        bad |= put(services, "with_work", json_integer(c->services_with_work));
        bad |= put(services, "claimed", json_integer(c->services_claimed));
        bad |= put(services, "unclaimed_with_work", json_integer(c->services_unclaimed));
        bad |= put(services, "ingest_blocked", json_integer(c->services_blocked));
    }
    for (size_t i = 0; !bad && i < r->n_instances; i++) {
        const struct qw_status_instance *in = &r->instances[i];
        json_t *o = json_pack(
            "{s:s, s:s, s:I, s:I, s:I, s:s, s:I, s:s, s:s?}", "instance_id", in->instance_id,
            "state", in->state, "heartbeat_age_ms", (json_int_t)in->heartbeat_age_ms, "claims_held",
            (json_int_t)in->claims_held, "claims_lapsed", (json_int_t)in->claims_lapsed, "host",
            in->host, "pid", (json_int_t)in->pid, "version", in->version, "notifications",
            in->notifications[0] ? in->notifications : NULL);
        json_t *cap =
            in->capacity
                ? json_pack("{s:I, s:I, s:o, s:o}", "target", (json_int_t)in->cap_target,
                            "partitions", (json_int_t)in->cap_partitions, "in_flight",
                            in->cap_in_flight >= 0 ? json_integer(in->cap_in_flight) : json_null(),
                            "per_second",
                            in->cap_per_second >= 0 ? json_integer(in->cap_per_second)
                                                    : json_null())
                : json_null();
        bad |= o && cap ? json_object_set_new(o, "capacity", cap) : -1;
        bad |= o ? json_array_append_new(instances, o) : -1;
        bad |= put(claims, in->instance_id, json_integer(in->claims_held));
    }
    for (size_t i = 0; !bad && i < r->n_stuck; i++) {
        const struct qw_status_stuck *s = &r->stuck[i];
        json_t *reasons = json_array();
        char list[sizeof(s->reasons)];
        snprintf(list, sizeof(list), "%s", s->reasons);
        char *save = NULL;
        for (char *tok = strtok_r(list, ",", &save); reasons && tok;
             tok = strtok_r(NULL, ",", &save))
            bad |= json_array_append_new(reasons, json_string(tok));
        json_t *o = reasons
                        ? json_pack("{s:s, s:s, s:s, s:o, s:I, s:I, s:I, s:s?, s:s?}", "batch_id",
                                    s->batch_id, "service_id", s->service_id, "state", s->state,
                                    "reasons", reasons, "attempts", (json_int_t)s->attempts,
                                    "stuck_for_s", (json_int_t)s->stuck_for_s, "waiting_behind",
                                    (json_int_t)s->waiting_behind, "claimant",
                                    s->claimant[0] ? s->claimant : NULL, "last_error",
                                    s->last_error[0] ? s->last_error : NULL)
                        : NULL;
        bad |= o ? json_array_append_new(stuck_list, o) : -1;
    }
    for (size_t i = 0; !bad && i < r->n_nodes; i++) {
        const struct qw_status_node *nd = &r->nodes[i];
        json_t *o = json_pack(
            "{s:s, s:I, s:s, s:s, s:o, s:I, s:o, s:o, s:I, s:I, s:I}", "instance_id",
            nd->instance_id, "node", (json_int_t)nd->node, "url", nd->url, "state", nd->state,
            "latency_ms",
            nd->latency_us >= 0 ? json_real((double)nd->latency_us / 1000.0) : json_null(),
            "posts_in_flight", (json_int_t)nd->posts_in_flight, "window",
            nd->window >= 0 ? json_integer(nd->window) : json_null(), "window_used",
            nd->window_used >= 0 ? json_integer(nd->window_used) : json_null(), "posts",
            (json_int_t)nd->posts, "failures", (json_int_t)nd->failures, "reported_age_s",
            (json_int_t)nd->reported_age_s);
        bad |= o ? json_array_append_new(nodes, o) : -1;
    }
    if (!bad) {
        bad |= put(stuck, "total", json_integer(c->stuck));
        bad |= json_object_set(stuck, "longest", stuck_list);
        bad |= put(root, "at", json_string(r->at));
        bad |= json_object_set(root, "batches", batches);
        bad |= json_object_set(root, "last_hour", hour);
        bad |= json_object_set(root, "last_5m", five);
        bad |= json_object_set(root, "services", services);
        bad |= json_object_set(root, "instances", instances);
        bad |= json_object_set(root, "claims_per_instance", claims);
        bad |= json_object_set(root, "stuck", stuck);
        bad |= json_object_set(root, "ledger_nodes", nodes);
        bad |= json_object_set(root, "snapshot_holding_back_vacuum", snapshot);
    }
    json_decref(batches);
    json_decref(hour);
    json_decref(five);
    json_decref(services);
    json_decref(instances);
    json_decref(claims);
    json_decref(stuck);
    json_decref(stuck_list);
    json_decref(nodes);
    json_decref(snapshot);
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}
