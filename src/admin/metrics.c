/* Prometheus text rendering of a metrics snapshot; see metrics.h. */
#include "admin/metrics.h"
#include "common/strbuf.h"

#include <stdio.h>

void qw_metrics_format_seconds(int64_t us, char *buf, size_t len)
{
    const char *sign = "";
    uint64_t v = (uint64_t)us;
    if (us < 0) {
        sign = "-";
        v = (uint64_t)0 - v;
    }
    uint64_t whole = v / 1000000, frac = v % 1000000;
    if (frac == 0) {
        snprintf(buf, len, "%s%llu", sign, (unsigned long long)whole);
        return;
    }
    char digits[8];
    snprintf(digits, sizeof(digits), "%06llu", (unsigned long long)frac);
    int end = 6;
    while (end > 0 && digits[end - 1] == '0')
        end--;
    digits[end] = '\0';
    snprintf(buf, len, "%s%llu.%s", sign, (unsigned long long)whole, digits);
}

/* Appends `text` as a label value: backslash, double quote and newline escaped. */
static void label_value(struct qw_strbuf *b, const char *text)
{
    for (const char *p = text ? text : ""; *p; p++) {
        if (*p == '\\')
            qw_strbuf_append(b, "\\\\", 2);
        else if (*p == '"')
            qw_strbuf_append(b, "\\\"", 2);
        else if (*p == '\n')
            qw_strbuf_append(b, "\\n", 2);
        else
            qw_strbuf_append(b, p, 1);
    }
}

static void family(struct qw_strbuf *b, const char *name, const char *type, const char *help)
{
    qw_strbuf_printf(b, "# HELP queuer_%s %s\n# TYPE queuer_%s %s\n", name, help, name, type);
}

static void sample(struct qw_strbuf *b, const char *name, int64_t value)
{
    qw_strbuf_printf(b, "queuer_%s %lld\n", name, (long long)value);
}

static void scalar(struct qw_strbuf *b, const char *name, const char *type, const char *help,
                   int64_t value)
{
    family(b, name, type, help);
    sample(b, name, value);
}

static void labelled(struct qw_strbuf *b, const char *name, const char *label, const char *value,
                     int64_t v)
{
    qw_strbuf_printf(b, "queuer_%s{%s=\"%s\"} %lld\n", name, label, value, (long long)v);
}

static void histogram(struct qw_strbuf *b, const char *name, const char *help,
                      const struct qw_histogram_snapshot *h)
{
    family(b, name, "histogram", help);
    char le[32];
    int64_t cumulative = 0;
    for (int i = 0; i < QW_HISTOGRAM_BUCKETS; i++) {
        cumulative += h->buckets[i];
        if (i < QW_HISTOGRAM_BOUNDS)
            qw_metrics_format_seconds(qw_histogram_bounds_us[i], le, sizeof(le));
        else
            snprintf(le, sizeof(le), "+Inf");
        qw_strbuf_printf(b, "queuer_%s_bucket{le=\"%s\"} %lld\n", name, le, (long long)cumulative);
    }
    char sum[32];
    qw_metrics_format_seconds(h->sum_us, sum, sizeof(sum));
    qw_strbuf_printf(b, "queuer_%s_sum %s\nqueuer_%s_count %lld\n", name, sum, name,
                     (long long)cumulative);
}

/* One sample of a per-node family: queuer_NAME{node="i"[,EXTRA]} value. */
static void node_sample(struct qw_strbuf *b, const char *name, size_t node, const char *extra,
                        const char *value)
{
    qw_strbuf_printf(b, "queuer_%s{node=\"%zu\"%s%s} %s\n", name, node, extra ? "," : "",
                     extra ? extra : "", value);
}

static void node_count(struct qw_strbuf *b, const char *name, size_t node, const char *extra,
                       int64_t v)
{
    char text[32];
    snprintf(text, sizeof(text), "%lld", (long long)v);
    node_sample(b, name, node, extra, text);
}

/* The ledger_node_* families, one sample per node (and per state, request). */
static void render_nodes(struct qw_strbuf *b, const struct qw_metrics_snapshot *s)
{
    size_t n = s->n_nodes < QW_METRICS_NODES_MAX ? s->n_nodes : QW_METRICS_NODES_MAX;
    if (n == 0)
        return;
    family(b, "ledger_node_up", "gauge",
           "1 while the ledger node is up (in use), 0 while suspect or down.");
    for (size_t i = 0; i < n; i++) {
        qw_strbuf_printf(b, "queuer_ledger_node_up{node=\"%zu\",url=\"", i);
        label_value(b, s->nodes[i].url);
        qw_strbuf_printf(b, "\"} %d\n", s->nodes[i].state == 0 ? 1 : 0);
    }
    static const char *const states[3] = {"up", "suspect", "down"};
    family(b, "ledger_node_state", "gauge",
           "1 for the node's state: up, suspect (failing, probed) or down (probes fail).");
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < 3; k++) {
            char extra[32];
            snprintf(extra, sizeof(extra), "state=\"%s\"", states[k]);
            node_count(b, "ledger_node_state", i, extra, s->nodes[i].state == k);
        }
    }
    family(b, "ledger_node_latency_seconds", "gauge",
           "Moving average of the node's answer time (POSTs, status reads without a wait).");
    for (size_t i = 0; i < n; i++) {
        char sec[32];
        qw_metrics_format_seconds(s->nodes[i].latency_us, sec, sizeof(sec));
        node_sample(b, "ledger_node_latency_seconds", i, NULL, sec);
    }
    family(b, "ledger_node_posts_in_flight", "gauge",
           "POSTs in flight on the node (its channels in use, at most dlt.channels).");
    for (size_t i = 0; i < n; i++)
        node_count(b, "ledger_node_posts_in_flight", i, NULL, s->nodes[i].posts_in_flight);
    family(b, "ledger_node_window", "gauge",
           "Batches the node's congestion window allows this worker to keep there at once.");
    for (size_t i = 0; i < n; i++)
        node_count(b, "ledger_node_window", i, NULL, s->nodes[i].window);
    family(b, "ledger_node_window_used", "gauge",
           "Batches this worker keeps at the node now (posted, not yet known final).");
    for (size_t i = 0; i < n; i++)
        node_count(b, "ledger_node_window_used", i, NULL, s->nodes[i].window_used);
    family(b, "ledger_node_first_look_seconds", "gauge",
           "When a batch's first status read goes out after the node's 202, learnt from its "
           "answers.");
    for (size_t i = 0; i < n; i++) {
        char sec[32];
        qw_metrics_format_seconds(s->nodes[i].first_look_ms * 1000, sec, sizeof(sec));
        node_sample(b, "ledger_node_first_look_seconds", i, NULL, sec);
    }
    family(b, "ledger_node_requests_total", "counter",
           "Requests started on the node: post, status (probes included).");
    for (size_t i = 0; i < n; i++) {
        node_count(b, "ledger_node_requests_total", i, "request=\"post\"", s->nodes[i].posts);
        node_count(b, "ledger_node_requests_total", i, "request=\"status\"", s->nodes[i].polls);
    }
    family(b, "ledger_node_failures_total", "counter",
           "Requests that failed on the node (timeout, connection, TLS, 5xx).");
    for (size_t i = 0; i < n; i++)
        node_count(b, "ledger_node_failures_total", i, NULL, s->nodes[i].failures);
    family(b, "ledger_node_suspect_total", "counter", "Times the node turned suspect.");
    for (size_t i = 0; i < n; i++)
        node_count(b, "ledger_node_suspect_total", i, NULL, s->nodes[i].suspect);
}

char *qw_metrics_render(const struct qw_metrics_snapshot *s, size_t *len)
{
    struct qw_strbuf b;
    qw_strbuf_init(&b);

    family(&b, "build_info", "gauge", "Version and instance id of this worker (always 1).");
    qw_strbuf_printf(&b, "queuer_build_info{version=\"");
    label_value(&b, s->version);
    qw_strbuf_printf(&b, "\",instance_id=\"");
    label_value(&b, s->instance_id);
    qw_strbuf_printf(&b, "\"} 1\n");

    family(&b, "ledger_failures_total", "counter",
           "Failed exchanges with the ledger by request (post, status) and kind.");
    for (size_t i = 0; i < s->n_failures && i < QW_METRICS_FAILURES_MAX; i++)
        qw_strbuf_printf(&b, "queuer_ledger_failures_total{request=\"%s\",kind=\"%s\"} %lld\n",
                         s->failures[i].request, s->failures[i].kind,
                         (long long)s->failures[i].count);

    family(&b, "submissions_total", "counter",
           "Batch POSTs to the ledger by outcome: accepted (202), backpressure (429), "
           "invalid (400), auth_refused (401/403), failed (5xx, 404, network, timeout).");
    labelled(&b, "submissions_total", "outcome", "accepted", s->posts_accepted);
    labelled(&b, "submissions_total", "outcome", "backpressure", s->posts_backpressure);
    labelled(&b, "submissions_total", "outcome", "invalid", s->posts_invalid);
    labelled(&b, "submissions_total", "outcome", "auth_refused", s->posts_auth);
    labelled(&b, "submissions_total", "outcome", "failed", s->posts_failed);

    family(&b, "batch_statuses_total", "counter",
           "Batch statuses this worker recorded (Unknown: confirmed, a resubmission follows).");
    labelled(&b, "batch_statuses_total", "status", "Pending", s->posts_accepted);
    labelled(&b, "batch_statuses_total", "status", "Committed", s->final_committed);
    labelled(&b, "batch_statuses_total", "status", "Valid", s->final_valid);
    labelled(&b, "batch_statuses_total", "status", "Invalid", s->final_invalid);
    labelled(&b, "batch_statuses_total", "status", "Unknown", s->unknown_confirmed);

    scalar(&b, "in_flight_batches", "gauge",
           "Batches this worker is submitting or following at the ledger now.", s->in_flight);
    scalar(&b, "delayed_services", "gauge",
           "Services held by this worker whose oldest batch is Delayed (parked included).",
           s->delayed);
    scalar(&b, "claims_held", "gauge", "Services this worker holds a claim on.", s->claims_held);
    family(&b, "capacity_held", "gauge",
           "Shared ledger capacity this worker holds (in_flight: cost units in flight, "
           "per_second: cost units a second); 0 when no capacity is set.");
    labelled(&b, "capacity_held", "kind", "in_flight", s->capacity_in_flight);
    labelled(&b, "capacity_held", "kind", "per_second", s->capacity_per_second);
    scalar(&b, "capacity_target", "gauge",
           "Cost units this worker has waiting to POST or in flight (what it asks capacity for).",
           s->capacity_target);
    scalar(&b, "partitions_held", "gauge", "Shared capacity partitions this worker leases.",
           s->partitions_held);
    scalar(&b, "capacity_waits_total", "counter",
           "POSTs that had to wait for shared capacity (in flight, rate, or no lease).",
           s->capacity_waits);
    scalar(&b, "ledger_paused", "gauge",
           "1 while submissions to the ledger pause after a 429 or refused credentials.",
           s->paused ? 1 : 0);
    if (s->yielding)
        scalar(&b, "ledger_yield_below_priority", "gauge",
               "Another worker's batches of this priority wait for the ledger: this worker's "
               "below it go one at a time per node (absent when none wait).",
               s->yield_below);
    scalar(&b, "stopping", "gauge", "1 once a graceful stop was requested.", s->stopping ? 1 : 0);
    if (s->last_cycle_age_ms >= 0) {
        char age[32];
        qw_metrics_format_seconds(s->last_cycle_age_ms * 1000, age, sizeof(age));
        family(&b, "last_cycle_age_seconds", "gauge",
               "Seconds since this worker last completed a claims cycle.");
        qw_strbuf_printf(&b, "queuer_last_cycle_age_seconds %s\n", age);
    }
    scalar(&b, "submit_waiting", "gauge",
           "Batches whose POST waits for ledger capacity (a free channel, the end of a pause).",
           s->submit_waiting);
    scalar(&b, "vacuum_held_back", "gauge",
           "Snapshots holding back vacuum past the thresholds of queuer.snapshot_holders, as of "
           "this worker's last look (every 10 s).",
           s->vacuum_holders);
    scalar(&b, "vacuum_held_back_xids", "gauge",
           "Transactions begun since the oldest snapshot holding back vacuum (0 when none).",
           s->vacuum_xids_behind);
    if (s->vacuum_holders > 0 && s->vacuum_open_s >= 0)
        scalar(&b, "vacuum_held_back_seconds", "gauge",
               "How long the oldest snapshot holding back vacuum has been open (absent when "
               "none, or when this worker's role may not see it).",
               s->vacuum_open_s);
    render_nodes(&b, s);
    scalar(&b, "cycles_total", "counter", "Claims cycles run (successful or not).", s->cycles);
    scalar(&b, "serialization_retries_total", "counter",
           "Transactions re-run after a serialization failure or deadlock (40001/40P01).",
           s->serialization_retries);
    scalar(&b, "claims_lost_total", "counter",
           "Fenced writes that matched nothing: the claim had moved to another worker.",
           s->claims_lost);
    scalar(&b, "outcome_flushes_total", "counter", "Grouped outcome statements committed.",
           s->flushes);
    scalar(&b, "outcomes_written_total", "counter", "Batch outcomes written by them.", s->outcomes);

    histogram(&b, "cycle_duration_seconds",
              "Duration of successful claims cycles (heartbeat, claims, fetch, queue).",
              &s->cycle_duration);
    histogram(&b, "ledger_request_duration_seconds",
              "Latency of batch POSTs to the ledger, until the answer.", &s->ledger_latency);
    return qw_strbuf_take(&b, len);
}
