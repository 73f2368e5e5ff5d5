/*
 * Integration, hostile cases: what a login role in queuer_worker or
 * queuer_enqueuer must not be able to do even with the privileges it needs
 * (docs/RELIABILITY.md, hostile input). A worker cannot forge operator history rows
 * or rows for a claim it does not hold, cannot move claim_epoch except one
 * step up with a change of hands; the real worker statements still work as
 * that role. An enqueuer cannot learn which service holds a batch id it
 * does not own, nor switch back pressure off with SET queuer.ingest_high.
 */
#include "itest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SVC "hostl-aaaaa::0001"
#define SVC2 "hostl-aaaaa::0002"
#define OTHER_SVC "hostl-bbbbb::0002"

/* Runs `sql` and checks its SQLSTATE ("" = success); returns the error message. */
static const char *expect(struct qw_db *db, const char *sql, const char *want)
{
    static struct qw_error err;
    qw_error_clear(&err);
    int rc = qw_db_exec(db, sql, &err);
    const char *state = rc == QW_OK ? "" : err.sqlstate;
    if (strcmp(state, want) != 0)
        fail_msg("%s\n  expected SQLSTATE '%s', got '%s' (%s)", sql, want, state, err.msg);
    return err.msg;
}

static void create_roles(struct qw_db *admin)
{
    itest_exec(admin, "DO $$ BEGIN "
                      "IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'itest_hworker') THEN "
                      "CREATE ROLE itest_hworker LOGIN IN ROLE queuer_worker; END IF; "
                      "IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'itest_henq') THEN "
                      "CREATE ROLE itest_henq LOGIN IN ROLE queuer_enqueuer; END IF; END $$");
}

/* w1 holds every service's claim, at epoch 1, for an hour. */
static void held_by_w1(struct qw_db *admin)
{
    itest_exec(admin,
               "UPDATE queuer.service_id_claims SET claimant = 'w1', claim_epoch = 1, "
               "expiry_1 = now() + interval '1 hour', expiry_2 = now() + interval '2 hours'");
}

/* Runs `sql` with sample batch `seed`'s id as $1 and its payload (hex) as $2. */
static void with_sample(struct qw_db *db, const char *sql, uint64_t seed)
{
    char id[129];
    char *hex = itest_sample_hex(seed, id);
    const char *params[] = {id, hex};
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query_sql(db, sql, 2, params, NULL, &err) != QW_OK)
        fail_msg("%s: %s", sql, err.msg);
    free(hex);
}

static void test_worker_cannot_forge(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("hostile_worker", 1);
    struct qw_db *admin = itest_connect(conninfo);
    create_roles(admin);
    char id[129];
    struct qw_error err;
    assert_int_equal(itest_enqueue_sample_try(admin, SVC, 7, id, &err), QW_OK);
    held_by_w1(admin);
    struct qw_db *w = itest_connect_as(conninfo, "itest_hworker");
    char sql[1024];
#define HIST(to, inst, epoch, extra)                                                               \
    (snprintf(sql, sizeof(sql),                                                                    \
              "INSERT INTO queuer.batch_history (batch_id, service_id, to_status, instance_id, "   \
              "claim_epoch, detail%s) VALUES ('%s', '" SVC "', '%s', %s, %s, 'x'%s)",              \
              (extra)[0] ? ", at" : "", id, to, inst, epoch, extra),                               \
     sql)
    /* operator kinds, whoever claims to write them */
    expect(w, HIST("Cancelled", "'operator:alice'", "1", ""), "42501");
    expect(w, HIST("Retrying", "'w1'", "1", ""), "42501");
    expect(w, HIST("Enqueued", "'w1'", "1", ""), "42501");
    expect(w, HIST("Committed", "'operator:alice'", "1", ""), "42501");
    /* rows that do not match the service's current claim */
    expect(w, HIST("Committed", "'w2'", "1", ""), "42501");
    expect(w, HIST("Committed", "'w1'", "0", ""), "42501");
    expect(w, HIST("Committed", "'w1'", "2", ""), "42501");
    expect(w, HIST("Committed", "NULL", "NULL", ""), "42501");
    /* a back-dated row */
    expect(w, HIST("Committed", "'w1'", "1", ", now() - interval '1 day'"), "42501");
    /* one bad row refuses the whole statement */
    snprintf(sql, sizeof(sql),
             "INSERT INTO queuer.batch_history (batch_id, service_id, to_status, instance_id, "
             "claim_epoch) VALUES ('%s', '" SVC "', 'Pending', 'w1', 1), "
             "('%s', '" SVC "', 'Cancelled', 'w1', 1)",
             id, id);
    expect(w, sql, "42501");
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.batch_history "
                                         "WHERE to_status <> 'Enqueued'"),
                     0);
    /* the claim holder's own row at its epoch is what workers write */
    expect(w, HIST("Committed", "'w1'", "1", ""), "");

    /* claim_epoch moves only one step up, and with every change of hands */
    expect(w, "UPDATE queuer.service_id_claims SET claim_epoch = 100", "42501");
    expect(w, "UPDATE queuer.service_id_claims SET claim_epoch = claim_epoch - 1", "42501");
    expect(w, "UPDATE queuer.service_id_claims SET claim_epoch = NULL", "42501");
    expect(w, "UPDATE queuer.service_id_claims SET claimant = 'w2'", "42501");
    expect(w, "UPDATE queuer.service_id_claims SET claim_epoch = claim_epoch + 2, claimant = 'w2'",
           "42501");
    expect(w,
           "INSERT INTO queuer.service_id_claims (service_id, claimant, claim_epoch) "
           "VALUES ('hostl-ccccc::0003', 'w1', 99)",
           "42501");
    /* renewals, takeovers and releases as the worker statements make them */
    expect(w, "UPDATE queuer.service_id_claims SET expiry_1 = now() + interval '1 hour'", "");
    expect(w, "UPDATE queuer.service_id_claims SET claimant = 'w2', claim_epoch = claim_epoch + 1",
           "");
    expect(w,
           "UPDATE queuer.service_id_claims SET claimant = NULL, expiry_1 = NULL, "
           "expiry_2 = NULL, claim_epoch = claim_epoch + 1",
           "");
    assert_int_equal(itest_scalar(admin, "SELECT claim_epoch FROM queuer.service_id_claims"), 3);

    /* the real statements run as the worker role: the registered w3 picks the
     * free service with work up, then marks its batch (history at its epoch) */
    itest_exec(admin, "INSERT INTO queuer.instances (instance_id, host, pid, version, lease_1, "
                      "lease_2) VALUES ('w3', 'h', 3, 'v', now() + interval '1 min', "
                      "now() + interval '2 min')");
    char *inc = itest_incarnation(admin, "w3");
    const char *acq[] = {"w3", "10", "60000", "120000", "0", "0", "1000"};
    struct qw_db_res *res = NULL;
    qw_error_clear(&err);
    if (qw_db_query(w, "claims_acquire", 7, acq, &res, &err) != QW_OK)
        fail_msg("claims_acquire as the worker role: %s", err.msg);
    assert_int_equal(qw_db_res_rows(res), 1);
    assert_string_equal(qw_db_res_get(res, 0, 0), SVC);
    assert_int_equal(qw_db_res_int(res, 0, 1), 4);
    qw_db_res_free(res);
    char ids[160];
    snprintf(ids, sizeof(ids), "{%s}", id);
    const char *mark[] = {"w3", ids, "{" SVC "}", "{4}", "{\"\"}", inc};
    res = NULL;
    if (qw_db_query(w, "batches_mark", 6, mark, &res, &err) != QW_OK)
        fail_msg("batches_mark as the worker role: %s", err.msg);
    assert_int_equal(qw_db_res_rows(res), 1);
    qw_db_res_free(res);
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.batch_history "
                                         "WHERE to_status = 'Submitting' AND instance_id = 'w3' "
                                         "AND claim_epoch = 4"),
                     1);
    free(inc);
    qw_db_close(w);
    qw_db_close(admin);
    free(conninfo);
#undef HIST
}

/* The check of a worker's history rows probes the claims' primary key, row
 * by row: a statement of 40 rows among 3,000 claims reads no claim it does
 * not name. A hashed plan reads them all once per statement; a plan made
 * from statistics taken while the claims were free walks the claimant's
 * index, every claim the worker holds, for each row. */
static void test_worker_history_checked_by_key(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("hostile_history_key", 1);
    struct qw_db *admin = itest_connect(conninfo);
    create_roles(admin);
    itest_exec(admin, "INSERT INTO queuer.service_id_claims (service_id, claimant, claim_epoch, "
                      "expiry_1, expiry_2) "
                      "SELECT format('hkey-%s::0001', i), NULL, 0, NULL, NULL "
                      "FROM generate_series(1, 3000) i");
    itest_exec(admin, "ANALYZE queuer.service_id_claims");
    itest_exec(admin,
               "UPDATE queuer.service_id_claims SET claimant = 'w1', claim_epoch = 1, "
               "expiry_1 = now() + interval '1 hour', expiry_2 = now() + interval '2 hours'");
    struct qw_db *w = itest_connect_as(conninfo, "itest_hworker");
    const char *seq = "SELECT pg_stat_get_xact_numscans('queuer.service_id_claims'::regclass)";
    const char *idx = "SELECT pg_stat_get_xact_numscans('queuer.service_id_claims_pkey'::regclass)";
    /* a statement's plan is made at its first call: twice, so that both
     * the first plan and the one kept are seen */
    for (int round = 0; round < 2; round++) {
        itest_exec(w, "BEGIN");
        long long seq0 = itest_scalar(w, seq);
        long long idx0 = itest_scalar(w, idx);
        expect(w,
               "INSERT INTO queuer.batch_history (batch_id, service_id, to_status, "
               "instance_id, claim_epoch) "
               "SELECT format('hkey-batch-%s', i), format('hkey-%s::0001', i), 'Committed', "
               "'w1', 1 FROM generate_series(1, 40) i",
               "");
        long long seq1 = itest_scalar(w, seq);
        long long idx1 = itest_scalar(w, idx);
        itest_exec(w, "COMMIT");
        if (seq1 != seq0 || idx1 - idx0 != 40)
            fail_msg("round %d: 40 history rows read the claims by %lld sequential scans "
                     "and %lld probes of the primary key",
                     round, seq1 - seq0, idx1 - idx0);
    }
    /* and a row naming a claim that is not the writer's is still refused */
    expect(w,
           "INSERT INTO queuer.batch_history (batch_id, service_id, to_status, instance_id, "
           "claim_epoch) SELECT format('hkey-batch-%s', i), format('hkey-%s::0001', i), "
           "'Committed', 'w1', CASE WHEN i = 40 THEN 2 ELSE 1 END FROM generate_series(1, 40) i",
           "42501");
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.batch_history"), 80);
    qw_db_close(w);
    qw_db_close(admin);
    free(conninfo);
}

static void test_enqueuer_limits(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("hostile_enq", 1);
    struct qw_db *admin = itest_connect(conninfo);
    create_roles(admin);
    char id[129];
    struct qw_error err;
    assert_int_equal(itest_enqueue_sample_try(admin, OTHER_SVC, 11, id, &err), QW_OK);

    struct qw_db *e = itest_connect_as(conninfo, "itest_henq");
    /* the same batch id under another service: refused without naming the holder */
    assert_int_equal(itest_enqueue_sample_try(e, SVC, 11, id, &err), QW_ERR_DUPLICATE);
    assert_string_equal(err.sqlstate, "QU409");
    if (strstr(err.msg, "bbbbb") || strstr(err.msg, "0002"))
        fail_msg("the conflict names the service that holds the batch: %s", err.msg);
    /* nor through enqueue_rows with skip, which returns the outcome */
    char sql[1024];
    snprintf(sql, sizeof(sql),
             "SELECT string_agg(detail, ';') FROM queuer.enqueue_rows(ARRAY[ROW(1, '" SVC
             "', '%s', (SELECT decode('00', 'hex')))]::queuer.enqueue_row[], true)",
             id);
    char *detail = itest_string(e, sql);
    if (strstr(detail, "bbbbb") || strstr(detail, "0002"))
        fail_msg("enqueue_rows names the service that holds the batch: %s", detail);
    free(detail);

    /* back pressure cannot be switched off (or moved) by an enqueuer's session */
    const char *msg = expect(e,
                             "SET queuer.ingest_high = '0'; SELECT queuer.enqueue_batch('" SVC
                             "', repeat('ab', 64), '\\x00')",
                             "42501");
    assert_non_null(strstr(msg, "queuer.settings"));
    expect(e, "RESET queuer.ingest_high", "");
    expect(e, "SET queuer.ingest_low = '1'", "");
    expect(e,
           "SELECT * FROM queuer.enqueue_rows(ARRAY[ROW(1, '" SVC
           "', repeat('ab', 64), '\\x00')]::queuer.enqueue_row[], true)",
           "42501");
    expect(e, "RESET queuer.ingest_low", "");
    /* the marks live in queuer.settings, which only the owner may change */
    expect(e, "UPDATE queuer.settings SET ingest_high = 0", "42501");
    /* the unchecked implementation is the owner's alone */
    expect(e, "SELECT * FROM queuer.enqueue_rows_unchecked(ARRAY[]::queuer.enqueue_row[], true)",
           "42501");
    qw_db_close(e);

    /* the owner's session may still set the marks for itself */
    itest_exec(admin, "SET queuer.ingest_high = '0'");
    char id2[129];
    assert_int_equal(itest_enqueue_sample_try(admin, SVC, 12, id2, &err), QW_OK);
    qw_db_close(admin);
    free(conninfo);
}

/*
 * queuer.enqueue_batch() counts a held service's batch itself and sets
 * queuer.enqueue_counted, so that the counters trigger does not fire for
 * its insert: an enqueuer does not see the setting after the call, and
 * setting it itself does not keep its batches from being counted, through
 * queuer.enqueue_rows(), queuer.enqueue_staged() (which runs as
 * queuer.enqueue_batch()'s owner) nor queuer.enqueue_batch() for a service
 * nobody holds.
 */
static void test_enqueuer_cannot_skip_the_count(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("hostile_count", 1);
    struct qw_db *admin = itest_connect(conninfo);
    create_roles(admin);
    char id[129];
    struct qw_error err;
    assert_int_equal(itest_enqueue_sample_try(admin, SVC, 21, id, &err), QW_OK);
    held_by_w1(admin);

    struct qw_db *e = itest_connect_as(conninfo, "itest_henq");
    itest_exec(e, "BEGIN");
    assert_int_equal(itest_enqueue_sample_try(e, SVC, 22, id, &err), QW_OK);
    char *seen =
        itest_string(e, "SELECT coalesce(current_setting('queuer.enqueue_counted', true), '')");
    assert_string_equal(seen, "");
    free(seen);
    itest_exec(e, "COMMIT");

    itest_exec(e, "BEGIN");
    static const char guess[] =
        "SELECT set_config('queuer.enqueue_counted', 'on', true) WHERE $1::text <> $2::text";
    with_sample(e, guess, 23);
    with_sample(e,
                "SELECT count(*) FROM queuer.enqueue_rows(ARRAY[ROW(1, '" SVC
                "', $1, decode($2, 'hex'))]::queuer.enqueue_row[], false)",
                23);
    itest_exec(e, "CREATE TEMP TABLE queuer_load (seq integer, line_no integer, service_id "
                  "text COLLATE \"C\", batch_id text COLLATE \"C\", payload bytea, priority "
                  "integer) ON COMMIT DROP; GRANT SELECT ON queuer_load TO queuer_loader");
    with_sample(e, "INSERT INTO queuer_load VALUES (0, 1, '" SVC "', $1, decode($2, 'hex'), 0)",
                24);
    with_sample(e, guess, 24);
    expect(e, "SELECT count(*) FROM queuer.enqueue_staged(0, 1, false)", "");
    with_sample(e, guess, 25);
    assert_int_equal(itest_enqueue_sample_try(e, SVC2, 25, id, &err), QW_OK);
    itest_exec(e, "COMMIT");
    qw_db_close(e);
    assert_int_equal(itest_scalar(admin, "SELECT count(*) FROM queuer.batches"), 5);
    assert_int_equal(
        itest_scalar(admin, "SELECT n_open FROM queuer.claims WHERE service_id = '" SVC "'"), 4);
    assert_int_equal(
        itest_scalar(admin, "SELECT n_open FROM queuer.claims WHERE service_id = '" SVC2 "'"), 1);
    qw_db_close(admin);
    free(conninfo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_cannot_forge),
        cmocka_unit_test(test_worker_history_checked_by_key),
        cmocka_unit_test(test_enqueuer_limits),
        cmocka_unit_test(test_enqueuer_cannot_skip_the_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
