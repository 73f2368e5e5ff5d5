/* Unit tests: histogram buckets and the Prometheus renderer (src/admin/metrics.c). */
#include "common/histogram.h"
#include "admin/metrics.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bucket_case {
    int64_t us; /* observed value */
    int bucket; /* expected bucket index */
};

static const struct bucket_case bucket_cases[] = {
    {-5, 0},       {0, 0},         {500, 0},       {501, 1},       {1000, 1},
    {1001, 2},     {2500, 2},      {99999, 7},     {100000, 7},    {100001, 8},
    {1000000, 10}, {29999999, 14}, {30000000, 14}, {30000001, 15}, {INT64_MAX, 15},
};

static void test_bucket_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bucket_cases) / sizeof(bucket_cases[0]); i++) {
        int b = qw_histogram_bucket(bucket_cases[i].us);
        if (b != bucket_cases[i].bucket)
            fail_msg("%lld us: bucket %d, want %d", (long long)bucket_cases[i].us, b,
                     bucket_cases[i].bucket);
    }
    for (int i = 1; i < QW_HISTOGRAM_BOUNDS; i++)
        assert_true(qw_histogram_bounds_us[i] > qw_histogram_bounds_us[i - 1]);
}

static void test_observe_and_read(void **state)
{
    (void)state;
    struct qw_histogram h;
    memset(&h, 0, sizeof(h)); /* zero-filled is a valid empty histogram */
    qw_histogram_observe_us(&h, 400);
    qw_histogram_observe_us(&h, 400);
    qw_histogram_observe_us(&h, 3000);
    qw_histogram_observe_us(&h, 60000000);
    qw_histogram_observe_us(&h, -1);
    struct qw_histogram_snapshot s;
    qw_histogram_read(&h, &s);
    assert_int_equal(s.count, 5);
    assert_int_equal(s.buckets[0], 3);
    assert_int_equal(s.buckets[3], 1);
    assert_int_equal(s.buckets[QW_HISTOGRAM_BOUNDS], 1);
    assert_int_equal(s.sum_us, 400 + 400 + 3000 + 60000000);
}

struct seconds_case {
    int64_t us;       /* input */
    const char *text; /* expected */
};

static const struct seconds_case seconds_cases[] = {
    {0, "0"},         {1, "0.000001"},  {500, "0.0005"},       {2500, "0.0025"},   {1000000, "1"},
    {2500000, "2.5"}, {30000000, "30"}, {1234567, "1.234567"}, {-1500000, "-1.5"}, {100000, "0.1"},
};

static void test_format_seconds(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(seconds_cases) / sizeof(seconds_cases[0]); i++) {
        char buf[32];
        qw_metrics_format_seconds(seconds_cases[i].us, buf, sizeof(buf));
        if (strcmp(buf, seconds_cases[i].text) != 0)
            fail_msg("%lld us: '%s', want '%s'", (long long)seconds_cases[i].us, buf,
                     seconds_cases[i].text);
    }
}

static struct qw_metrics_snapshot sample_snapshot(void)
{
    struct qw_metrics_snapshot s;
    memset(&s, 0, sizeof(s));
    s.instance_id = "w-1";
    s.version = "0.1.0";
    s.posts_accepted = 120;
    s.posts_backpressure = 7;
    s.posts_invalid = 2;
    s.posts_auth = 1;
    s.posts_failed = 3;
    s.n_failures = 2;
    s.failures[0] = (struct qw_metrics_failure){"post", "http_5xx", 3};
    s.failures[1] = (struct qw_metrics_failure){"status", "malformed", 5};
    s.final_committed = 110;
    s.final_valid = 4;
    s.final_invalid = 5;
    s.unknown_confirmed = 6;
    s.in_flight = 9;
    s.delayed = 2;
    s.claims_held = 40;
    s.cycles = 1000;
    s.serialization_retries = 12;
    s.claims_lost = 1;
    s.flushes = 77;
    s.outcomes = 240;
    s.capacity_in_flight = 12;
    s.capacity_per_second = 316;
    s.capacity_target = 125;
    s.partitions_held = 3;
    s.capacity_waits = 42;
    s.paused = 1;
    s.yielding = 1;
    s.yield_below = -5;
    s.stopping = 0;
    s.last_cycle_age_ms = 1500;
    s.cycle_duration.buckets[1] = 3; /* <= 1 ms */
    s.cycle_duration.buckets[4] = 2; /* <= 10 ms */
    s.cycle_duration.count = 5;
    s.cycle_duration.sum_us = 21500;
    s.ledger_latency.buckets[QW_HISTOGRAM_BOUNDS] = 1; /* > 30 s */
    s.ledger_latency.count = 1;
    s.ledger_latency.sum_us = 31000000;
    s.submit_waiting = 17;
    s.vacuum_holders = 2;
    s.vacuum_xids_behind = 45678;
    s.vacuum_open_s = 723;
    s.n_nodes = 2;
    s.nodes[0] = (struct qw_metrics_node){"http://a:8008", 0, 2500, 3, 900, 950, 1, 0};
    s.nodes[1] = (struct qw_metrics_node){"http://b\"x:8008", 2, 152000, 0, 12, 40, 7, 2};
    s.nodes[0].window = 12;
    s.nodes[0].window_used = 5;
    s.nodes[0].first_look_ms = 23;
    return s;
}

/* Lines the renderer must produce for sample_snapshot(), exactly. */
static const char *const expected_lines[] = {
    "# TYPE queuer_build_info gauge",
    "# TYPE queuer_ledger_failures_total counter",
    "queuer_ledger_failures_total{request=\"post\",kind=\"http_5xx\"} 3",
    "queuer_ledger_failures_total{request=\"status\",kind=\"malformed\"} 5",
    "queuer_build_info{version=\"0.1.0\",instance_id=\"w-1\"} 1",
    "# TYPE queuer_submissions_total counter",
    "queuer_submissions_total{outcome=\"accepted\"} 120",
    "queuer_submissions_total{outcome=\"backpressure\"} 7",
    "queuer_submissions_total{outcome=\"invalid\"} 2",
    "queuer_submissions_total{outcome=\"auth_refused\"} 1",
    "queuer_submissions_total{outcome=\"failed\"} 3",
    "queuer_batch_statuses_total{status=\"Pending\"} 120",
    "queuer_batch_statuses_total{status=\"Committed\"} 110",
    "queuer_batch_statuses_total{status=\"Valid\"} 4",
    "queuer_batch_statuses_total{status=\"Invalid\"} 5",
    "queuer_batch_statuses_total{status=\"Unknown\"} 6",
    "# TYPE queuer_in_flight_batches gauge",
    "queuer_in_flight_batches 9",
    "queuer_delayed_services 2",
    "queuer_claims_held 40",
    "# TYPE queuer_capacity_held gauge",
    "queuer_capacity_held{kind=\"in_flight\"} 12",
    "queuer_capacity_held{kind=\"per_second\"} 316",
    "queuer_capacity_target 125",
    "queuer_partitions_held 3",
    "# TYPE queuer_capacity_waits_total counter",
    "queuer_capacity_waits_total 42",
    "queuer_ledger_paused 1",
    "# TYPE queuer_ledger_yield_below_priority gauge",
    "queuer_ledger_yield_below_priority -5",
    "queuer_stopping 0",
    "queuer_last_cycle_age_seconds 1.5",
    "# TYPE queuer_cycles_total counter",
    "queuer_cycles_total 1000",
    "queuer_serialization_retries_total 12",
    "queuer_claims_lost_total 1",
    "queuer_outcome_flushes_total 77",
    "queuer_outcomes_written_total 240",
    "# TYPE queuer_cycle_duration_seconds histogram",
    "queuer_cycle_duration_seconds_bucket{le=\"0.0005\"} 0",
    "queuer_cycle_duration_seconds_bucket{le=\"0.001\"} 3",
    "queuer_cycle_duration_seconds_bucket{le=\"0.0025\"} 3",
    "queuer_cycle_duration_seconds_bucket{le=\"0.01\"} 5",
    "queuer_cycle_duration_seconds_bucket{le=\"30\"} 5",
    "queuer_cycle_duration_seconds_bucket{le=\"+Inf\"} 5",
    "queuer_cycle_duration_seconds_sum 0.0215",
    "queuer_cycle_duration_seconds_count 5",
    "queuer_ledger_request_duration_seconds_bucket{le=\"30\"} 0",
    "queuer_ledger_request_duration_seconds_bucket{le=\"+Inf\"} 1",
    "queuer_ledger_request_duration_seconds_sum 31",
    "queuer_ledger_request_duration_seconds_count 1",
    "queuer_submit_waiting 17",
    "# TYPE queuer_vacuum_held_back gauge",
    "queuer_vacuum_held_back 2",
    "queuer_vacuum_held_back_xids 45678",
    "queuer_vacuum_held_back_seconds 723",
    "# TYPE queuer_ledger_node_up gauge",
    "queuer_ledger_node_up{node=\"0\",url=\"http://a:8008\"} 1",
    "queuer_ledger_node_up{node=\"1\",url=\"http://b\\\"x:8008\"} 0",
    "queuer_ledger_node_state{node=\"0\",state=\"up\"} 1",
    "queuer_ledger_node_state{node=\"1\",state=\"up\"} 0",
    "queuer_ledger_node_state{node=\"1\",state=\"suspect\"} 0",
    "queuer_ledger_node_state{node=\"1\",state=\"down\"} 1",
    "queuer_ledger_node_latency_seconds{node=\"0\"} 0.0025",
    "queuer_ledger_node_latency_seconds{node=\"1\"} 0.152",
    "queuer_ledger_node_posts_in_flight{node=\"0\"} 3",
    "queuer_ledger_node_window{node=\"0\"} 12",
    "queuer_ledger_node_window_used{node=\"0\"} 5",
    "queuer_ledger_node_window{node=\"1\"} 0",
    "queuer_ledger_node_first_look_seconds{node=\"0\"} 0.023",
    "queuer_ledger_node_first_look_seconds{node=\"1\"} 0",
    "queuer_ledger_node_requests_total{node=\"0\",request=\"post\"} 900",
    "queuer_ledger_node_requests_total{node=\"1\",request=\"status\"} 40",
    "queuer_ledger_node_failures_total{node=\"1\"} 7",
    "queuer_ledger_node_suspect_total{node=\"1\"} 2",
};

static int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++) {
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return 1;
    }
    return 0;
}

/* A sample line: name, optional {k="v",...}, one space, a number. */
static int valid_sample(const char *line, char *name, size_t name_len)
{
    size_t i = 0;
    while (isalnum((unsigned char)line[i]) || line[i] == '_' || line[i] == ':')
        i++;
    if (i == 0 || i >= name_len)
        return 0;
    memcpy(name, line, i);
    name[i] = '\0';
    if (line[i] == '{') {
        i++;
        for (;;) {
            while (isalnum((unsigned char)line[i]) || line[i] == '_')
                i++;
            if (line[i++] != '=' || line[i++] != '"')
                return 0;
            while (line[i] && line[i] != '"') {
                if (line[i] == '\\' && !line[++i])
                    return 0;
                i++;
            }
            if (line[i++] != '"')
                return 0;
            if (line[i] == ',') {
                i++;
                continue;
            }
            if (line[i++] != '}')
                return 0;
            break;
        }
    }
    if (line[i++] != ' ')
        return 0;
    char *end = NULL;
    strtod(line + i, &end);
    return end != line + i && *end == '\0';
}

static void test_render_sample(void **state)
{
    (void)state;
    struct qw_metrics_snapshot s = sample_snapshot();
    size_t len = 0;
    char *text = qw_metrics_render(&s, &len);
    assert_non_null(text);
    assert_int_equal(len, strlen(text));
    for (size_t i = 0; i < sizeof(expected_lines) / sizeof(expected_lines[0]); i++) {
        if (!has_line(text, expected_lines[i]))
            fail_msg("missing line: %s\n--- output ---\n%s", expected_lines[i], text);
    }
    /* Every sample is well-formed and belongs to a family declared before it. */
    char declared[64][64];
    int n_declared = 0;
    char *copy = strdup(text);
    char *save = NULL;
    int samples = 0;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# TYPE ", 7) == 0) {
            assert_true(n_declared < 64);
            sscanf(line + 7, "%63s", declared[n_declared++]);
            continue;
        }
        if (line[0] == '#')
            continue;
        char name[128];
        if (!valid_sample(line, name, sizeof(name)))
            fail_msg("malformed sample line: %s", line);
        int known = 0;
        for (int d = 0; d < n_declared && !known; d++) {
            size_t dl = strlen(declared[d]);
            known = strncmp(name, declared[d], dl) == 0 &&
                    (name[dl] == '\0' || strcmp(name + dl, "_bucket") == 0 ||
                     strcmp(name + dl, "_sum") == 0 || strcmp(name + dl, "_count") == 0);
        }
        if (!known)
            fail_msg("sample before its # TYPE: %s", line);
        samples++;
    }
    free(copy);
    assert_true(samples > 40);
    assert_int_equal(text[len - 1], '\n');
    free(text);
}

static void test_render_escapes_labels_and_omits_unknown_age(void **state)
{
    (void)state;
    struct qw_metrics_snapshot s;
    memset(&s, 0, sizeof(s));
    s.instance_id = "a\"b\\c\nd";
    s.version = NULL;
    s.last_cycle_age_ms = -1;
    char *text = qw_metrics_render(&s, NULL);
    assert_non_null(text);
    assert_true(
        has_line(text, "queuer_build_info{version=\"\",instance_id=\"a\\\"b\\\\c\\nd\"} 1"));
    assert_null(strstr(text, "last_cycle_age"));
    assert_null(strstr(text, "yield_below")); /* no other worker waits */
    /* nothing holds back vacuum: zero gauges, no age */
    assert_true(has_line(text, "queuer_vacuum_held_back 0"));
    assert_true(has_line(text, "queuer_vacuum_held_back_xids 0"));
    assert_null(strstr(text, "vacuum_held_back_seconds"));
    /* an empty histogram still has all buckets, zero sum and count */
    assert_true(has_line(text, "queuer_cycle_duration_seconds_bucket{le=\"+Inf\"} 0"));
    assert_true(has_line(text, "queuer_cycle_duration_seconds_sum 0"));
    assert_true(has_line(text, "queuer_cycle_duration_seconds_count 0"));
    free(text);
}

static void test_render_count_is_sum_of_buckets(void **state)
{
    (void)state;
    /* A snapshot whose count disagrees with its buckets (a torn read) still
     * renders +Inf == _count, as Prometheus requires. */
    struct qw_metrics_snapshot s = sample_snapshot();
    s.cycle_duration.count = 99;
    char *text = qw_metrics_render(&s, NULL);
    assert_non_null(text);
    assert_true(has_line(text, "queuer_cycle_duration_seconds_count 5"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_table),
        cmocka_unit_test(test_observe_and_read),
        cmocka_unit_test(test_format_seconds),
        cmocka_unit_test(test_render_sample),
        cmocka_unit_test(test_render_escapes_labels_and_omits_unknown_age),
        cmocka_unit_test(test_render_count_is_sum_of_buckets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
