/*
 * Unit tests for the simulator's output: JSON bodies and their garbling
 * (sim/render.h), event-log lines (sim/evlog.h) and stats names (sim/stats.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "evlog.h"
#include "render.h"
#include "stats.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static json_t *parse(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j)
        print_error("not JSON (%s): %s\n", e.text, text);
    assert_non_null(j);
    return j;
}

static void test_message_and_link(void **state)
{
    char *s = qw_sim_render_message("bad \"thing\"\n");
    json_t *j = parse(s);
    assert_string_equal(json_string_value(json_object_get(j, "message")), "bad \"thing\"\n");
    json_decref(j);
    free(s);

    struct qw_sim_submission subs[] = {{.batch_id = "aa"}, {.batch_id = "bb"}};
    s = qw_sim_render_link("abcde-fghij", "ab12", subs, 2);
    j = parse(s);
    assert_string_equal(json_string_value(json_object_get(j, "link")),
                        "/scabbard/abcde-fghij/ab12/batch_statuses?ids=aa,bb");
    json_decref(j);
    free(s);
}

static void test_statuses_shape(void **state)
{
    const char *ids[] = {"p", "c", "i", "u"};
    struct qw_sim_status_view v[4] = {
        {.status = QW_SIM_PENDING, .changed_us = 1000000},
        {.status = QW_SIM_COMMITTED, .changed_us = 1500000},
        {.status = QW_SIM_INVALID, .changed_us = 2000000, .txn_id = "t", .message = "why"},
        {.status = QW_SIM_UNKNOWN},
    };
    char *s = qw_sim_render_statuses(ids, v, 4, 9000000);
    json_t *arr = parse(s);
    free(s);
    assert_true(json_is_array(arr));
    assert_int_equal(json_array_size(arr), 4);
    static const char *const types[] = {"Pending", "Committed", "Invalid", "Unknown"};
    static const double stamps[] = {1.0, 1.5, 2.0, 9.0};
    for (size_t i = 0; i < 4; i++) {
        json_t *e = json_array_get(arr, i);
        assert_string_equal(json_string_value(json_object_get(e, "id")), ids[i]);
        json_t *st = json_object_get(e, "status");
        assert_string_equal(json_string_value(json_object_get(st, "statusType")), types[i]);
        json_t *msg = json_object_get(st, "message");
        assert_true(json_is_array(msg));
        assert_int_equal(json_array_size(msg), i == 2 ? 1 : 0);
        assert_true(json_number_value(json_object_get(e, "timestamp")) == stamps[i]);
    }
    json_t *m = json_array_get(
        json_object_get(json_object_get(json_array_get(arr, 2), "status"), "message"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "transaction_id")), "t");
    assert_string_equal(json_string_value(json_object_get(m, "error_message")), "why");
    json_decref(arr);
}

/*
 * Text from a client (the first transaction id of an Invalid batch) is
 * escaped, non-ASCII UTF-8 kept; text that is not UTF-8 fails the render
 * (the request is answered 500) rather than give a body that is not JSON.
 * Timestamps keep their microseconds.
 */
static void test_statuses_client_text(void **state)
{
    const char *ids[] = {"i"};
    struct qw_sim_status_view v = {.status = QW_SIM_INVALID,
                                   .changed_us = 1700000000000001,
                                   .txn_id = "t\"x\\\n\xc3\xa9",
                                   .message = "m"};
    char *s = qw_sim_render_statuses(ids, &v, 1, 0);
    json_t *arr = parse(s);
    free(s);
    json_t *e = json_array_get(arr, 0);
    json_t *m = json_array_get(json_object_get(json_object_get(e, "status"), "message"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "transaction_id")),
                        "t\"x\\\n\xc3\xa9");
    assert_true(json_is_array(json_object_get(m, "error_data")));
    assert_true(json_number_value(json_object_get(e, "timestamp")) == 1700000000.000001);
    json_decref(arr);

    v.txn_id = "bad \xff byte";
    assert_null(qw_sim_render_statuses(ids, &v, 1, 0));
}

/* Whatever the variant, a garbled body never parses as JSON. */
static void test_mangle_never_parses(void **state)
{
    static const char *const bodies[] = {
        "{\"link\":\"/scabbard/abcde-fghij/ab12/batch_statuses?ids=aa\"}",
        "[]",
        "[{\"id\":\"a\",\"status\":{\"statusType\":\"Pending\",\"message\":[]},\"timestamp\":1}]",
        "{}",
    };
    for (size_t b = 0; b < sizeof(bodies) / sizeof(bodies[0]); b++) {
        for (uint64_t variant = 0; variant < 300; variant++) {
            size_t len = 0;
            char *bad = qw_sim_render_mangle(bodies[b], strlen(bodies[b]),
                                             variant * 0x9e3779b97f4a7c15ULL + variant, &len);
            assert_non_null(bad);
            json_t *j = json_loadb(bad, len, 0, NULL);
            if (j)
                print_error("body %zu variant %llu parsed: %.*s\n", b, (unsigned long long)variant,
                            (int)len, bad);
            assert_null(j);
            free(bad);
        }
    }
}

static void test_json_escape(void **state)
{
    static const struct {
        const char *in;
        const char *out;
    } rows[] = {
        {"plain", "plain"},
        {"q\"b\\", "q\\\"b\\\\"},
        {"nl\n", "nl\\n"},
        {"\x01\x1f", "\\u0001\\u001f"},
        {"caf\xc3\xa9", "caf\xc3\xa9"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char out[64];
        size_t need = qw_sim_json_escape(out, sizeof(out), rows[i].in, strlen(rows[i].in));
        assert_string_equal(out, rows[i].out);
        assert_int_equal(need, strlen(rows[i].out));
    }
    char small[4];
    size_t need = qw_sim_json_escape(small, sizeof(small), "abcdef", 6);
    assert_int_equal(need, 6);
    assert_int_equal(strlen(small), 3); /* truncated, terminated */
}

static void test_event_builder(void **state)
{
    struct qw_sim_event e;
    qw_sim_event_begin(&e, "post");
    qw_sim_event_str(&e, "service", "abcde-fghij::ab12");
    qw_sim_event_str(&e, "batch", NULL);
    qw_sim_event_int(&e, "code", 202);
    qw_sim_event_bool(&e, "dup", false);
    qw_sim_event_str(&e, "odd", "a\"b");
    assert_false(e.overflow);
    char line[2200];
    snprintf(line, sizeof(line), "{%s}", e.buf);
    json_t *j = parse(line);
    assert_string_equal(json_string_value(json_object_get(j, "ev")), "post");
    assert_true(json_is_null(json_object_get(j, "batch")));
    assert_int_equal(json_integer_value(json_object_get(j, "code")), 202);
    assert_true(json_is_false(json_object_get(j, "dup")));
    assert_string_equal(json_string_value(json_object_get(j, "odd")), "a\"b");
    json_decref(j);

    /* A field that does not fit is left out; the line stays valid JSON. */
    char big[4000];
    memset(big, '"', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    qw_sim_event_begin(&e, "x");
    qw_sim_event_str(&e, "big", big);
    qw_sim_event_int(&e, "after", 1);
    assert_true(e.overflow);
    snprintf(line, sizeof(line), "{%s}", e.buf);
    j = parse(line);
    assert_null(json_object_get(j, "big"));
    json_decref(j);
}

static int64_t fake_clock_us;
static int64_t fake_now(void)
{
    return fake_clock_us;
}

/* Lines are stamped with a "t" that never decreases, one per line. */
static void test_evlog_file(void **state)
{
    char path[] = "/tmp/test_sim_evlog_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct qw_sim_evlog *log;
    assert_int_equal(qw_sim_evlog_open(path, fake_now, &log), 0);
    assert_true(qw_sim_evlog_enabled(log));
    assert_false(qw_sim_evlog_enabled(NULL));
    static const int64_t clock_values[] = {100, 50, 200};
    static const long long expected_t[] = {100, 100, 200};
    for (size_t i = 0; i < 3; i++) {
        fake_clock_us = clock_values[i];
        struct qw_sim_event e;
        qw_sim_event_begin(&e, "restart");
        qw_sim_evlog_emit(log, &e);
    }
    qw_sim_evlog_close(log);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[256];
    size_t n = 0;
    while (fgets(line, sizeof(line), f)) {
        assert_true(n < 3);
        json_t *j = parse(line);
        assert_int_equal(json_integer_value(json_object_get(j, "t")), expected_t[n]);
        assert_string_equal(json_string_value(json_object_get(j, "ev")), "restart");
        json_decref(j);
        n++;
    }
    fclose(f);
    unlink(path);
    assert_int_equal(n, 3);
}

static void test_stats_outcomes(void **state)
{
    static const struct {
        int code;
        const char *name;
    } rows[] = {{202, "202"}, {400, "400"}, {429, "429"}, {503, "503"}, {418, "other"}};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        assert_string_equal(qw_sim_stats_outcome_name(qw_sim_stats_outcome(rows[i].code)),
                            rows[i].name);
    static struct qw_sim_stats s;
    qw_sim_stats_post(&s, QW_SIM_POST_DROP);
    qw_sim_stats_post(&s, QW_SIM_POST_OUTCOMES); /* ignored */
    json_t *j = qw_sim_stats_to_json(&s);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "posts"), "drop")), 1);
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_message_and_link),     cmocka_unit_test(test_statuses_shape),
        cmocka_unit_test(test_statuses_client_text), cmocka_unit_test(test_mangle_never_parses),
        cmocka_unit_test(test_json_escape),          cmocka_unit_test(test_event_builder),
        cmocka_unit_test(test_evlog_file),           cmocka_unit_test(test_stats_outcomes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
