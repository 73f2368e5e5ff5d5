/*
 * docs/grafana/queuer.json and docs/prometheus/alerts.yml are over the
 * series /metrics really serves: every queuer_* name they use is a family
 * of qw_metrics_render() (or a histogram's _bucket/_sum/_count), and both
 * use the families an operator needs (throughput, back pressure, retries).
 * The alert rules themselves are checked by promtool in
 * tests/scenarios/ops_service_files.sh.
 */
#include "admin/metrics.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    char *buf = malloc(1 << 20);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* The metric families /metrics serves, one "name type\n" per family. */
static char *families(void)
{
    struct qw_metrics_snapshot s;
    memset(&s, 0, sizeof(s));
    s.instance_id = "w1";
    s.version = "0.1.0";
    s.last_cycle_age_ms = 5;          /* every family present */
    s.nodes[0].url = "http://a:8008"; /* the ledger_node_* families need a node */
    s.n_nodes = 1;
    char *text = qw_metrics_render(&s, NULL);
    assert_non_null(text);
    return text;
}

/* True when `name` is served: a family, or a histogram family's series. */
static int served(const char *metrics, const char *name)
{
    char want[160];
    snprintf(want, sizeof(want), "# TYPE %s ", name);
    if (strstr(metrics, want))
        return 1;
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(name), k = strlen(suffixes[i]);
        if (n > k && strcmp(name + n - k, suffixes[i]) == 0) {
            snprintf(want, sizeof(want), "# TYPE %.*s histogram", (int)(n - k), name);
            if (strstr(metrics, want))
                return 1;
        }
    }
    return 0;
}

/* Checks every queuer_* word of `path`; returns how many distinct ones it used. */
static int check_file(const char *path, const char *metrics, const char *const *must, size_t n_must)
{
    char *text = read_all(path);
    int used = 0;
    for (const char *p = strstr(text, "queuer_"); p; p = strstr(p + 1, "queuer_")) {
        if (p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_'))
            continue;
        char name[128];
        size_t n = 0;
        while (n + 1 < sizeof(name) && (isalnum((unsigned char)p[n]) || p[n] == '_'))
            name[n] = p[n], n++;
        name[n] = '\0';
        if (!served(metrics, name))
            fail_msg("%s uses %s, which /metrics does not serve", path, name);
        used++;
    }
    for (size_t i = 0; i < n_must; i++) {
        if (!strstr(text, must[i]))
            fail_msg("%s does not use %s", path, must[i]);
    }
    free(text);
    return used;
}

static void test_dashboard_series(void **state)
{
    (void)state;
    char *metrics = families();
    static const char *const must[] = {
        "queuer_submissions_total",
        "queuer_batch_statuses_total",
        "queuer_claims_held",
        "queuer_in_flight_batches",
        "queuer_ledger_paused",
        "queuer_serialization_retries_total",
        "queuer_cycle_duration_seconds_bucket",
        "queuer_ledger_request_duration_seconds_bucket",
    };
    assert_true(check_file(QW_SOURCE_ROOT "/docs/grafana/queuer.json", metrics, must,
                           sizeof(must) / sizeof(must[0])) > 10);
    free(metrics);
}

static void test_alert_series(void **state)
{
    (void)state;
    char *metrics = families();
    static const char *const must[] = {
        "alert: QueuerNoLiveInstance",
        "alert: QueuerLedgerFailing",
        "alert: QueuerBatchesStuck",
        "alert: QueuerLedgerBackPressure",
        "alert: QueuerSerializationRetriesHigh",
    };
    assert_true(check_file(QW_SOURCE_ROOT "/docs/prometheus/alerts.yml", metrics, must,
                           sizeof(must) / sizeof(must[0])) > 5);
    free(metrics);
}

/* Every alert of alerts.yml is explained in docs/OPERATIONS.md. */
static void test_alerts_documented(void **state)
{
    (void)state;
    char *rules = read_all(QW_SOURCE_ROOT "/docs/prometheus/alerts.yml");
    char *ops = read_all(QW_SOURCE_ROOT "/docs/OPERATIONS.md");
    int n = 0;
    for (const char *p = strstr(rules, "alert: "); p; p = strstr(p + 1, "alert: ")) {
        char name[80], heading[100];
        if (sscanf(p, "alert: %79[A-Za-z]", name) != 1)
            continue;
        snprintf(heading, sizeof(heading), "**%s**", name);
        if (!strstr(ops, heading))
            fail_msg("docs/OPERATIONS.md does not explain alert %s (want a %s entry)", name,
                     heading);
        n++;
    }
    assert_true(n >= 5);
    free(rules);
    free(ops);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dashboard_series),
        cmocka_unit_test(test_alert_series),
        cmocka_unit_test(test_alerts_documented),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
