/* Unit tests for the simulator's fault injection (sim/faults.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/err.h"
#include "faults.h"

#include <string.h>

static void test_parse_rate_slow_burst(void **state)
{
    static const struct {
        const char *text;
        int rc;
        double v;
    } rates[] = {
        {"0", QW_OK, 0.0},           {"1", QW_OK, 1.0},
        {"0.25", QW_OK, 0.25},       {"1.0001", QW_ERR_INVALID, 0},
        {"-0.1", QW_ERR_INVALID, 0}, {"", QW_ERR_INVALID, 0},
        {"x", QW_ERR_INVALID, 0},    {"0.5x", QW_ERR_INVALID, 0},
        {"nan", QW_ERR_INVALID, 0},
    };
    for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
        double v = -1;
        assert_int_equal(qw_sim_fault_parse_rate(rates[i].text, &v), rates[i].rc);
        if (rates[i].rc == QW_OK)
            assert_true(v == rates[i].v);
    }
    static const struct {
        const char *text;
        int rc;
        double rate;
        int64_t ms;
    } slows[] = {
        {"0.5:200", QW_OK, 0.5, 200},     {"1:0", QW_OK, 1.0, 0},
        {"0.5", QW_ERR_INVALID, 0, 0},    {":200", QW_ERR_INVALID, 0, 0},
        {"0.5:", QW_ERR_INVALID, 0, 0},   {"2:10", QW_ERR_INVALID, 0, 0},
        {"0.5:-3", QW_ERR_INVALID, 0, 0},
    };
    for (size_t i = 0; i < sizeof(slows) / sizeof(slows[0]); i++) {
        double r = -1;
        int64_t ms = -1;
        assert_int_equal(qw_sim_fault_parse_slow(slows[i].text, &r, &ms), slows[i].rc);
        if (slows[i].rc == QW_OK) {
            assert_true(r == slows[i].rate);
            assert_int_equal(ms, slows[i].ms);
        }
    }
    static const struct {
        const char *text;
        int rc;
        int64_t every, len;
    } bursts[] = {
        {"1000:100", QW_OK, 1000, 100}, {"0:0", QW_OK, 0, 0},
        {"100:100", QW_OK, 100, 100},   {"100:101", QW_ERR_INVALID, 0, 0},
        {"100", QW_ERR_INVALID, 0, 0},  {"a:b", QW_ERR_INVALID, 0, 0},
    };
    for (size_t i = 0; i < sizeof(bursts) / sizeof(bursts[0]); i++) {
        int64_t every = -1, len = -1;
        assert_int_equal(qw_sim_fault_parse_burst(bursts[i].text, &every, &len), bursts[i].rc);
        if (bursts[i].rc == QW_OK) {
            assert_int_equal(every, bursts[i].every);
            assert_int_equal(len, bursts[i].len);
        }
    }
}

static void test_burst_phase(void **state)
{
    struct qw_sim_fault_config cfg = {.burst_every_ms = 1000, .burst_len_ms = 200};
    static const struct {
        int64_t since_ms;
        bool on;
    } rows[] = {
        {0, false},    {799, false}, {800, true}, {999, true},
        {1000, false}, {1850, true}, {-5, false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        assert_int_equal(qw_sim_fault_in_burst(&cfg, rows[i].since_ms), rows[i].on);
    struct qw_sim_fault_config off = {0};
    assert_false(qw_sim_fault_in_burst(&off, 900));
    struct qw_sim_fault_config always = {.burst_every_ms = 100, .burst_len_ms = 100};
    assert_true(qw_sim_fault_in_burst(&always, 0));
    assert_true(qw_sim_fault_in_burst(&always, 12345));
}

/* Rates 0 and 1 decide with certainty; the order of precedence holds. */
static void test_decide_certain(void **state)
{
    struct qw_sim_prng prng;
    qw_sim_prng_seed(&prng, 1);
    static const struct {
        struct qw_sim_fault_config cfg;
        bool submission;
        enum qw_sim_fault_action action;
        bool slow;
        bool malformed;
    } rows[] = {
        {{0}, true, QW_SIM_FAULT_NONE, false, false},
        {{.rate_drop = 1, .rate_hang = 1, .rate_5xx = 1}, true, QW_SIM_FAULT_DROP, false, false},
        {{.rate_hang = 1, .rate_5xx = 1, .rate_slow = 1, .slow_ms = 5},
         true,
         QW_SIM_FAULT_HANG,
         false,
         false},
        {{.rate_5xx = 1, .rate_429 = 1}, true, QW_SIM_FAULT_5XX, false, false},
        {{.rate_429 = 1}, true, QW_SIM_FAULT_429, false, false},
        {{.rate_429 = 1}, false, QW_SIM_FAULT_NONE, false, false}, /* no 429 on status reads */
        {{.burst_every_ms = 10, .burst_len_ms = 10}, true, QW_SIM_FAULT_429, false, false},
        {{.rate_slow = 1, .slow_ms = 50}, false, QW_SIM_FAULT_NONE, true, false},
        {{.rate_slow = 1, .slow_ms = 50, .rate_5xx = 1}, false, QW_SIM_FAULT_5XX, true, false},
        {{.rate_malformed = 1}, false, QW_SIM_FAULT_NONE, false, true},
        {{.rate_malformed = 1, .rate_5xx = 1}, false, QW_SIM_FAULT_5XX, false, false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        for (int k = 0; k < 50; k++) {
            struct qw_sim_fault_decision d;
            qw_sim_fault_decide(&rows[i].cfg, &prng, rows[i].submission, 5, &d);
            if (d.action != rows[i].action)
                print_error("row %zu: action %d\n", i, d.action);
            assert_int_equal(d.action, rows[i].action);
            assert_int_equal(d.slow_ms > 0, rows[i].slow);
            assert_int_equal(d.malformed, rows[i].malformed);
            if (d.action == QW_SIM_FAULT_5XX)
                assert_true(d.http_status == 500 || d.http_status == 503);
            if (d.action == QW_SIM_FAULT_429)
                assert_int_equal(d.http_status, 429);
            if (!rows[i].submission)
                assert_false(d.accept_first);
        }
    }
}

/* A seed replays the same decisions; rates are roughly honoured. */
static void test_decide_seeded(void **state)
{
    struct qw_sim_fault_config cfg = {.rate_5xx = 0.2, .rate_drop = 0.1, .rate_malformed = 0.3};
    struct qw_sim_prng a, b;
    qw_sim_prng_seed(&a, 12345);
    qw_sim_prng_seed(&b, 12345);
    int counts[5] = {0};
    int accept_first = 0, drops = 0;
    for (int i = 0; i < 20000; i++) {
        struct qw_sim_fault_decision da, db;
        qw_sim_fault_decide(&cfg, &a, true, 0, &da);
        qw_sim_fault_decide(&cfg, &b, true, 0, &db);
        assert_int_equal(da.action, db.action);
        assert_int_equal(da.malformed, db.malformed);
        assert_int_equal(da.garble, db.garble);
        counts[da.action]++;
        if (da.action == QW_SIM_FAULT_DROP) {
            drops++;
            accept_first += da.accept_first;
        }
    }
    /* drop 10%, 5xx 20% of the remaining 90% = 18% */
    assert_in_range(counts[QW_SIM_FAULT_DROP], 1700, 2300);
    assert_in_range(counts[QW_SIM_FAULT_5XX], 3200, 4000);
    assert_in_range(accept_first, drops / 3, drops * 2 / 3);
    /* Different seeds differ. */
    struct qw_sim_prng c;
    qw_sim_prng_seed(&c, 12346);
    qw_sim_prng_seed(&a, 12345);
    int same = 0;
    for (int i = 0; i < 64; i++)
        same += qw_sim_prng_next(&a) == qw_sim_prng_next(&c);
    assert_int_equal(same, 0);
    /* Unit draws stay in [0, 1). */
    for (int i = 0; i < 10000; i++) {
        double u = qw_sim_prng_unit(&a);
        assert_true(u >= 0.0 && u < 1.0);
    }
}

static void test_apply_json(void **state)
{
    struct qw_sim_fault_config cfg = {.rate_drop = 0.5};
    uint64_t seed = 0;
    bool seed_set = false;
    char err[128] = "";
    json_t *j = json_loads("{\"fault-5xx\": 1, \"fault-slow\": \"0.5:30\", \"fault-429-burst\": "
                           "\"100:10\", \"fault-hang\": \"0.25\", \"seed\": 9}",
                           0, NULL);
    assert_non_null(j);
    assert_int_equal(qw_sim_fault_apply_json(&cfg, j, &seed, &seed_set, err, sizeof(err)), QW_OK);
    json_decref(j);
    assert_true(cfg.rate_5xx == 1.0);
    assert_true(cfg.rate_drop == 0.5); /* untouched */
    assert_true(cfg.rate_slow == 0.5);
    assert_int_equal(cfg.slow_ms, 30);
    assert_int_equal(cfg.burst_every_ms, 100);
    assert_int_equal(cfg.burst_len_ms, 10);
    assert_true(cfg.rate_hang == 0.25);
    assert_true(seed_set);
    assert_int_equal(seed, 9);

    j = json_loads("{\"reset\": true, \"fault-429\": 0.5}", 0, NULL);
    assert_int_equal(qw_sim_fault_apply_json(&cfg, j, &seed, &seed_set, err, sizeof(err)), QW_OK);
    json_decref(j);
    assert_true(cfg.rate_5xx == 0.0 && cfg.rate_drop == 0.0 && cfg.rate_hang == 0.0);
    assert_true(cfg.rate_429 == 0.5);
    assert_int_equal(cfg.burst_every_ms, 0);
    assert_false(seed_set);

    static const char *const bad[] = {
        "[]",
        "{\"fault-5xx\": 2}",
        "{\"fault-5xx\": \"lots\"}",
        "{\"fault-slow\": 0.5}",
        "{\"fault-429-burst\": \"5:10\"}",
        "{\"nonsense\": 1}",
        "{\"reset\": 1}",
        "{\"seed\": -1}",
        "{\"fault-drop\": 1, \"fault-5xx\": null}",
    };
    struct qw_sim_fault_config before = cfg;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        j = json_loads(bad[i], 0, NULL);
        assert_non_null(j);
        err[0] = '\0';
        assert_int_equal(qw_sim_fault_apply_json(&cfg, j, &seed, &seed_set, err, sizeof(err)),
                         QW_ERR_INVALID);
        json_decref(j);
        assert_true(err[0] != '\0');
        assert_memory_equal(&cfg, &before, sizeof(cfg)); /* all or nothing */
    }

    json_t *out = qw_sim_fault_to_json(&cfg);
    assert_non_null(out);
    assert_true(json_real_value(json_object_get(out, "fault-429")) == 0.5);
    assert_string_equal(json_string_value(json_object_get(out, "fault-slow")), "0:0");
    json_decref(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_rate_slow_burst),
        cmocka_unit_test(test_burst_phase),
        cmocka_unit_test(test_decide_certain),
        cmocka_unit_test(test_decide_seeded),
        cmocka_unit_test(test_apply_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
