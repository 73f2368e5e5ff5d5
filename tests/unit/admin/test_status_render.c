/* Unit tests: `queuer status` table and JSON rendering from data (src/admin/status_render.c). */
#include "admin/status.h"
#include "common/strbuf.h"
#include "common/table.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const FULL_ID =
    "0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b"
    "2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d";

static struct qw_status_instance instances[] = {
    {"worker-a", "host-a", "0.1.0", "alive", 101, 400, 12, 0, true, 125, 3, 12, 316,
     "not_delivered"},
    {"worker-b", "host-b", "0.1.0", "dead", 102, 95000, 3, 3, .notifications = "not_delivered"},
    {"worker-c", "host-c", "0.1.0", "stopped", 103, 7200000, 0, 0},
};

static struct qw_status_stuck stuck[] = {
    {"", "abcde-fghij::klmn", "parked", "parked,many_attempts", "worker-a",
     "POST failed (connect, HTTP 0): refused", 10, 3720, 14},
    {"", "abcde-fghij::zzzz", "Unknown", "unknown", "", "", 2, 30, 0},
};

static struct qw_status_report sample_report(void)
{
    snprintf(stuck[0].batch_id, sizeof(stuck[0].batch_id), "%s", FULL_ID);
    snprintf(stuck[1].batch_id, sizeof(stuck[1].batch_id), "ff%.126s", FULL_ID);
    struct qw_status_report r;
    memset(&r, 0, sizeof(r));
    snprintf(r.at, sizeof(r.at), "2026-11-21T14:00:00.000Z");
    r.counts = (struct qw_status_counts){
        .waiting = 1234,
        .submitting = 3,
        .pending = 12,
        .delayed = 4,
        .parked = 1,
        .unknown = 1,
        .oldest_age_s = 312,
        .services = 2500,
        .services_with_work = 300,
        .services_claimed = 298,
        .services_unclaimed = 2,
        .services_blocked = 1,
        .stuck = 5,
        .submissions_1h = 12050,
        .committed_1h = 11990,
        .valid_1h = 0,
        .invalid_1h = 3,
        .cancelled_1h = 1,
        .submissions_5m = 1001,
        .committed_5m = 998,
    };
    r.instances = instances;
    r.n_instances = 3;
    r.stuck = stuck;
    r.n_stuck = 2;
    return r;
}

static int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++) {
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return 1;
    }
    return 0;
}

static const char *const text_lines[] = {
    "queuer status at 2026-11-21T14:00:00.000Z",
    "  total            1255  oldest 5m12s",
    "  waiting          1234",
    "  submitting          3",
    "  Pending            12",
    "  Delayed             4",
    "  parked              1  needs an operator: queuer batch retry|cancel",
    "  Unknown             1",
    "  in flight          15  (submitting + Pending)",
    "  submissions     12050  (1001)",
    "  Committed       11990  (998)",
    "  Invalid             3",
    "  Cancelled           1",
    "services: 2500 total, 300 with work, 298 claimed, 2 with work but unclaimed, 1 refusing "
    "enqueues",
    "instances: 1 alive, 1 dead, 1 stopped (last day)",
    "  INSTANCE  STATE    HEARTBEAT  CLAIMS  LAPSED  HOST    PID  VERSION  SHARED CAPACITY",
    "  worker-a  alive    0s         12      0       host-a  101  0.1.0    12 in flight, 316/s, "
    "3 partitions, target 125",
    "  worker-b  dead     1m35s      3       3       host-b  102  0.1.0    -",
    "  worker-c  stopped  2h         0       0       host-c  103  0.1.0    -",
    "wake-ups not delivered (polling): worker-a", /* live instances only */
    "stuck batches: 5 (the 2 stuck longest shown)",
    "  BATCH             SERVICE            STATE    ATTEMPTS  STUCK FOR  BEHIND  CLAIMANT  "
    "REASONS               LAST ERROR",
    "  0a1b2c3d4e5f6a7b  abcde-fghij::klmn  parked   10        1h2m       14      worker-a  "
    "parked,many_attempts  POST failed (connect, HTTP 0): refused",
    "  ff0a1b2c3d4e5f6a  abcde-fghij::zzzz  Unknown  2         30s        0       -         "
    "unknown               -",
};

static void test_text_table(void **state)
{
    (void)state;
    struct qw_status_report r = sample_report();
    char *text = qw_status_render_text(&r);
    assert_non_null(text);
    for (size_t i = 0; i < sizeof(text_lines) / sizeof(text_lines[0]); i++) {
        if (!has_line(text, text_lines[i]))
            fail_msg("missing line:\n[%s]\n--- output ---\n%s", text_lines[i], text);
    }
    assert_null(strstr(text, FULL_ID)); /* tables show id prefixes */
    free(text);
}

static void test_text_empty_system(void **state)
{
    (void)state;
    struct qw_status_report r;
    memset(&r, 0, sizeof(r));
    r.counts.oldest_age_s = -1;
    snprintf(r.at, sizeof(r.at), "2026-01-01T00:00:00.000Z");
    char *text = qw_status_render_text(&r);
    assert_non_null(text);
    assert_true(has_line(text, "  total               0"));
    assert_true(has_line(text, "  parked              0"));
    assert_true(has_line(text, "instances: 0 alive, 0 dead, 0 stopped (last day)"));
    assert_true(has_line(text, "stuck batches: none"));
    assert_true(has_line(text, "snapshots holding back vacuum: none"));
    assert_null(strstr(text, "oldest"));
    assert_null(strstr(text, "INSTANCE"));
    assert_null(strstr(text, "wake-ups"));
    free(text);
}

static void test_json(void **state)
{
    (void)state;
    struct qw_status_report r = sample_report();
    json_t *j = qw_status_render_json(&r);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "at")), r.at);
    json_t *b = json_object_get(j, "batches");
    assert_int_equal(json_integer_value(json_object_get(b, "waiting")), 1234);
    assert_int_equal(json_integer_value(json_object_get(b, "pending")), 12);
    assert_int_equal(json_integer_value(json_object_get(b, "delayed")), 4);
    assert_int_equal(json_integer_value(json_object_get(b, "parked")), 1);
    assert_int_equal(json_integer_value(json_object_get(b, "unknown")), 1);
    assert_int_equal(json_integer_value(json_object_get(b, "in_flight")), 15);
    assert_int_equal(json_integer_value(json_object_get(b, "oldest_age_s")), 312);
    json_t *h = json_object_get(j, "last_hour");
    assert_int_equal(json_integer_value(json_object_get(h, "committed")), 11990);
    assert_int_equal(json_integer_value(json_object_get(h, "cancelled")), 1);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(j, "last_5m"), "submissions")), 1001);
    json_t *s = json_object_get(j, "services");
    assert_int_equal(json_integer_value(json_object_get(s, "unclaimed_with_work")), 2);
    assert_int_equal(json_integer_value(json_object_get(s, "ingest_blocked")), 1);
    json_t *in = json_object_get(j, "instances");
    assert_int_equal(json_array_size(in), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(in, 1), "state")), "dead");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(in, 1), "heartbeat_age_ms")),
                     95000);
    json_t *cap = json_object_get(json_array_get(in, 0), "capacity");
    assert_int_equal(json_integer_value(json_object_get(cap, "in_flight")), 12);
    assert_int_equal(json_integer_value(json_object_get(cap, "per_second")), 316);
    assert_int_equal(json_integer_value(json_object_get(cap, "target")), 125);
    assert_true(json_is_null(json_object_get(json_array_get(in, 1), "capacity")));
    assert_string_equal(json_string_value(json_object_get(json_array_get(in, 0), "notifications")),
                        "not_delivered");
    assert_true(json_is_null(json_object_get(json_array_get(in, 2), "notifications")));
    json_t *claims = json_object_get(j, "claims_per_instance");
    assert_int_equal(json_integer_value(json_object_get(claims, "worker-a")), 12);
    assert_int_equal(json_integer_value(json_object_get(claims, "worker-c")), 0);
    json_t *st = json_object_get(j, "stuck");
    assert_int_equal(json_integer_value(json_object_get(st, "total")), 5);
    json_t *longest = json_object_get(st, "longest");
    assert_int_equal(json_array_size(longest), 2);
    json_t *first = json_array_get(longest, 0);
    assert_string_equal(json_string_value(json_object_get(first, "batch_id")), FULL_ID);
    json_t *reasons = json_object_get(first, "reasons");
    assert_int_equal(json_array_size(reasons), 2);
    assert_string_equal(json_string_value(json_array_get(reasons, 1)), "many_attempts");
    assert_int_equal(json_integer_value(json_object_get(first, "waiting_behind")), 14);
    json_t *second = json_array_get(longest, 1);
    assert_true(json_is_null(json_object_get(second, "claimant")));
    assert_true(json_is_null(json_object_get(second, "last_error")));
    json_decref(j);
}

static void test_json_empty_system(void **state)
{
    (void)state;
    struct qw_status_report r;
    memset(&r, 0, sizeof(r));
    r.counts.oldest_age_s = -1;
    json_t *j = qw_status_render_json(&r);
    assert_non_null(j);
    assert_true(json_is_null(json_object_get(json_object_get(j, "batches"), "oldest_age_s")));
    assert_int_equal(json_array_size(json_object_get(j, "instances")), 0);
    assert_int_equal(json_array_size(json_object_get(json_object_get(j, "stuck"), "longest")), 0);
    assert_true(json_is_null(json_object_get(j, "snapshot_holding_back_vacuum")));
    json_decref(j);
}

/* The text of report `r` has `line`. */
static void expect_text_line(const struct qw_status_report *r, const char *line)
{
    char *text = qw_status_render_text(r);
    assert_non_null(text);
    if (!has_line(text, line))
        fail_msg("missing line:\n[%s]\n--- output ---\n%s", line, text);
    free(text);
}

/* A session held open: the text names it, its age and how far behind it is; a
 * hostile application_name is written out, not sent to the terminal. */
static void test_snapshot_holding_back(void **state)
{
    (void)state;
    struct qw_status_report r = sample_report();
    r.snapshot = (struct qw_status_snapshot){.holders = 2,
                                             .kind = "session",
                                             .pid = 4209,
                                             .role = "app",
                                             .application = "report\x1b[2J",
                                             .state = "idle in transaction",
                                             .xids_behind = 45678,
                                             .open_s = 723};
    char *text = qw_status_render_text(&r);
    assert_non_null(text);
    assert_true(has_line(text, "snapshots holding back vacuum: 2; the oldest:"));
    assert_true(has_line(text, "  session pid 4209 (role app, application report\\x1b[2J, idle "
                               "in transaction): open 12m3s, 45678 transactions behind"));
    assert_null(strchr(text, '\x1b'));
    free(text);
    json_t *j = qw_status_render_json(&r);
    assert_non_null(j);
    json_t *sn = json_object_get(j, "snapshot_holding_back_vacuum");
    assert_int_equal(json_integer_value(json_object_get(sn, "holders")), 2);
    assert_string_equal(json_string_value(json_object_get(sn, "kind")), "session");
    assert_int_equal(json_integer_value(json_object_get(sn, "pid")), 4209);
    assert_string_equal(json_string_value(json_object_get(sn, "application")), "report\x1b[2J");
    assert_int_equal(json_integer_value(json_object_get(sn, "xids_behind")), 45678);
    assert_int_equal(json_integer_value(json_object_get(sn, "open_s")), 723);
    json_decref(j);

    /* another role's session without pg_read_all_stats: no age, no state */
    r.snapshot = (struct qw_status_snapshot){.holders = 1,
                                             .kind = "session",
                                             .pid = 77,
                                             .role = "app",
                                             .xids_behind = 200000,
                                             .open_s = -1};
    expect_text_line(&r, "  session pid 77 (role app, application -, state not visible): "
                         "open for an unknown time (not visible to this role), 200000 "
                         "transactions behind");
    j = qw_status_render_json(&r);
    assert_non_null(j);
    sn = json_object_get(j, "snapshot_holding_back_vacuum");
    assert_true(json_is_null(json_object_get(sn, "open_s")));
    assert_true(json_is_null(json_object_get(sn, "state")));
    json_decref(j);

    /* a standby's slot */
    r.snapshot = (struct qw_status_snapshot){.holders = 1,
                                             .kind = "replication slot",
                                             .application = "standby1",
                                             .state = "inactive",
                                             .xids_behind = 9000000,
                                             .open_s = -1};
    expect_text_line(&r, "  replication slot (role -, slot standby1, inactive): open for an "
                         "unknown time (not visible to this role), 9000000 transactions behind");
}

static void test_table_truncates_and_pads(void **state)
{
    (void)state;
    struct qw_table t;
    assert_int_equal(qw_table_init(&t, 2, 3), 0);
    qw_table_set(&t, 0, 0, "A");
    qw_table_set(&t, 0, 1, "BB");
    qw_table_set(&t, 0, 2, "");
    char longer[400];
    memset(longer, 'x', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    qw_table_set(&t, 1, 0, "aaaa");
    qw_table_set_int(&t, 1, 1, -7);
    qw_table_set(&t, 1, 2, longer);
    struct qw_strbuf b;
    qw_strbuf_init(&b);
    qw_table_render(&t, &b);
    qw_table_free(&t);
    char *text = qw_strbuf_take(&b, NULL);
    assert_non_null(text);
    assert_true(has_line(text, "  A     BB")); /* empty last cell: no trailing blanks */
    char want[QW_TABLE_CELL_MAX + 32];
    snprintf(want, sizeof(want), "  aaaa  -7  %.*s...", QW_TABLE_CELL_MAX - 4, longer);
    assert_true(has_line(text, want));
    free(text);
}

/* Cells show stored control characters written out, also where the cell is cut. */
static void test_table_escapes_controls(void **state)
{
    (void)state;
    struct qw_table t;
    assert_int_equal(qw_table_init(&t, 2, 2), 0);
    qw_table_set(&t, 0, 0, "\x1b[2Jx");
    qw_table_set(&t, 0, 1, "a\nb\xc2\x9b");
    char longer[400];
    memset(longer, '\x1b', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    qw_table_set(&t, 1, 0, "-");
    qw_table_set(&t, 1, 1, longer);
    struct qw_strbuf b;
    qw_strbuf_init(&b);
    qw_table_render(&t, &b);
    qw_table_free(&t);
    char *text = qw_strbuf_take(&b, NULL);
    assert_non_null(text);
    assert_null(strchr(text, '\x1b'));
    assert_true(has_line(text, "  \\x1b[2Jx  a\\nb\\u009b"));
    /* 39 whole escapes (156 bytes) and "..." */
    char want[QW_TABLE_CELL_MAX + 32] = "  -         "; /* column 1 is 8 wide */
    for (int i = 0; i < (QW_TABLE_CELL_MAX - 4) / 4; i++)
        strcat(want, "\\x1b");
    strcat(want, "...");
    if (!has_line(text, want))
        fail_msg("got:\n%s\nwant the line:\n%s", text, want);
    free(text);
}

static void test_strbuf_cap_fails_sticky(void **state)
{
    (void)state;
    struct qw_strbuf b;
    qw_strbuf_init(&b);
    char *empty = qw_strbuf_take(&b, NULL);
    assert_string_equal(empty, "");
    free(empty);
    qw_strbuf_printf(&b, "%s-%d", "abc", 42);
    qw_strbuf_append(&b, "x", QW_STRBUF_MAX); /* over the cap */
    assert_true(b.failed);
    qw_strbuf_printf(&b, "more");
    assert_null(qw_strbuf_take(&b, NULL));
    qw_strbuf_printf(&b, "%0300d", 1); /* longer than the inline scratch */
    size_t len = 0;
    char *text = qw_strbuf_take(&b, &len);
    assert_int_equal(len, 300);
    assert_int_equal(text[299], '1');
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_table),
        cmocka_unit_test(test_text_empty_system),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_json_empty_system),
        cmocka_unit_test(test_snapshot_holding_back),
        cmocka_unit_test(test_table_truncates_and_pads),
        cmocka_unit_test(test_table_escapes_controls),
        cmocka_unit_test(test_strbuf_cap_fails_sticky),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
