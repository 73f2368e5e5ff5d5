/*
 * Integration: the operator views of migration 0002.
 *
 * 1. On a small hand-made database every view returns exactly the rows its
 *    comment promises (claims, backlog, heads, stuck reasons, instance
 *    states, counts, throughput), session overrides of the thresholds
 *    work, no view exposes payload bytes, every view is documented, and
 *    the queuer_operator role can read them (and call the two actions) but
 *    not the tables.
 * 2. On a database with 250,000 batches and ~1,000,000 history rows spread
 *    over 29 days, EXPLAIN (FORMAT JSON) of every view and every ops_*
 *    statement contains no sequential scan of queuer.batches or
 *    queuer.batch_history, and names the index each is designed to use.
 *    Sequential scans of the small per-service/per-instance tables
 *    (service_id_claims, service_ingest, instances, settings) are allowed:
 *    they hold one row per service or worker, and the views report on all
 *    of those anyway.
 */
#include "itest.h"
#include "common/embedded.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every result row as "v1|v2|...\n" (NULL as "~"), `cols` columns, for whole-result
 * comparisons. */
static char *rows_of(struct qw_db *db, const char *sql, int cols)
{
    struct qw_db_res *res = NULL;
    struct qw_error err;
    qw_error_clear(&err);
    if (qw_db_query_sql(db, sql, 0, NULL, &res, &err) != QW_OK)
        fail_msg("SQL failed: %s\n  %s", err.msg, sql);
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    out[0] = '\0';
    for (int r = 0; r < qw_db_res_rows(res); r++) {
        for (int c = 0; c < cols; c++) {
            const char *v = qw_db_res_isnull(res, r, c) ? "~" : qw_db_res_get(res, r, c);
            size_t need = len + strlen(v) + 3;
            if (need > cap) {
                while (cap < need)
                    cap *= 2;
                out = realloc(out, cap);
            }
            len += (size_t)sprintf(out + len, "%s%s", c ? "|" : "", v);
        }
        out[len++] = '\n';
        out[len] = '\0';
    }
    qw_db_res_free(res);
    return out;
}

/* Compares the whole result with `want`; the column count is taken from its first line. */
static void expect_rows(struct qw_db *db, const char *sql, const char *want)
{
    int cols = 1;
    for (const char *p = want; *p && *p != '\n'; p++)
        cols += *p == '|';
    char *got = rows_of(db, sql, cols);
    if (strcmp(got, want) != 0)
        fail_msg("%s\n--- want ---\n%s--- got ---\n%s", sql, want, got);
    free(got);
}

/* The small fixture: eight services, each showing one situation. */
static const char FIXTURE[] =
    "SET session_replication_role = replica;\n" /* payload checks off: payloads are dummies */
    "CREATE FUNCTION pg_temp.id(n int) RETURNS text LANGUAGE sql AS "
    "$$ SELECT repeat(lpad(to_hex(n), 2, '0'), 64) $$;\n"
    "INSERT INTO queuer.instances (instance_id, host, pid, version, heartbeat_at, stopped_at) "
    "VALUES ('w1', 'h1', 11, '0.1.0', now() - interval '1 second', NULL),"
    "       ('w2', 'h2', 12, '0.1.0', now() - interval '10 minutes', NULL),"
    "       ('w3', 'h3', 13, '0.1.0', now() - interval '1 hour', now() - interval '1 hour'),"
    "       ('w4', 'h4', 14, '0.1.0', now(), NULL);\n"
    "INSERT INTO queuer.service_id_claims (service_id, claimant, claim_epoch, expiry_1, expiry_2) "
    "VALUES ('views-aaaaa::0001', 'w1', 3, now() + interval '30 s', now() + interval '3 min'),"
    "       ('views-aaaaa::0002', 'w2', 5, now() - interval '10 s', now() + interval '2 min'),"
    "       ('views-aaaaa::0003', NULL, 7, NULL, NULL),"
    "       ('views-aaaaa::0004', 'w1', 1, now() + interval '30 s', now() + interval '3 min'),"
    "       ('views-aaaaa::0005', 'w1', 1, now() + interval '30 s', now() + interval '3 min'),"
    "       ('views-aaaaa::0006', 'w3', 2, now() - interval '5 min', now() - interval '1 min'),"
    "       ('views-aaaaa::0007', 'w1', 1, now() + interval '30 s', now() + interval '3 min'),"
    "       ('views-aaaaa::0008', 'w1', 1, now() + interval '30 s', now() + interval '3 min');\n"
    "INSERT INTO queuer.service_ingest (service_id, blocked) VALUES ('views-aaaaa::0004', true);\n"
    "INSERT INTO queuer.batches (batch_id, service_id, payload, created_at, submitted, status,"
    "                            attempts, last_submitted_at, retry_at, status_at, last_error) "
    "SELECT pg_temp.id(n), 'views-aaaaa::000' || s, '\\x0a00'::bytea, now() - age, sub, st, att,"
    "       CASE WHEN att > 0 THEN now() - age END, ra, now() - sa, le "
    "  FROM (VALUES"
    "   (1, 1, interval '3 h', true, 'Committed', 1, NULL::timestamptz, interval '3 h', NULL),"
    "   (2, 1, interval '2 h', true, 'Pending', 1, NULL, interval '1 min', NULL),"
    "   (3, 1, interval '1 h', false, NULL, 0, NULL, NULL, NULL),"
    "   (4, 1, interval '30 min', false, NULL, 0, NULL, NULL, NULL),"
    "   (5, 2, interval '2 h', false, 'Delayed', 3, now() + interval '20 s', interval '1 min',"
    "    'POST failed (HTTP 503)'),"
    "   (6, 2, interval '1 h', false, NULL, 0, NULL, NULL, NULL),"
    "   (7, 3, interval '6 h', false, 'Delayed', 10, 'infinity', interval '1 h', 'gave up'),"
    "   (8, 3, interval '5 h', false, NULL, 0, NULL, NULL, NULL),"
    "   (9, 3, interval '4 h', false, NULL, 0, NULL, NULL, NULL),"
    "   (10, 3, interval '3 h', false, NULL, 0, NULL, NULL, NULL),"
    "   (11, 3, interval '2 h', false, NULL, 0, NULL, NULL, NULL),"
    "   (12, 4, interval '10 min', false, 'Unknown', 2, now(), interval '1 min',"
    "    'ledger does not know the batch'),"
    "   (13, 4, interval '5 min', false, NULL, 0, NULL, NULL, NULL),"
    "   (14, 5, interval '2 h', true, 'Committed', 1, NULL, interval '30 min', NULL),"
    "   (15, 5, interval '1 h', true, 'Valid', 1, NULL, interval '3 h', NULL),"
    "   (16, 6, interval '1 h', false, NULL, 0, NULL, NULL, NULL),"
    "   (17, 7, interval '25 min', true, NULL, 0, NULL, interval '20 min', NULL),"
    "   (18, 8, interval '40 min', true, 'Pending', 1, NULL, interval '30 min', NULL)"
    "  ) AS v(n, s, age, sub, st, att, ra, sa, le);\n"
    "INSERT INTO queuer.batch_history (batch_id, service_id, from_status, to_status, "
    "                                  instance_id, claim_epoch, at) "
    "SELECT pg_temp.id(n), 'views-aaaaa::000' || s, NULL, t, 'w1', 1, now() - age "
    "  FROM (VALUES (5, 2, 'Submitting', interval '90 min'), (7, 3, 'Submitting', interval '5 h'),"
    "               (12, 4, 'Submitting', interval '3 min'), (17, 7, 'Submitting', interval '20 "
    "min'),"
    "               (1, 1, 'Committed', interval '2 min'), (14, 5, 'Committed', interval '30 min'),"
    "               (15, 5, 'Valid', interval '3 h'),"
    "               (2, 1, 'Pending', interval '1 min')) AS h(n, s, t, age);\n"
    "INSERT INTO queuer.enqueue_log (at, service_id, batches) "
    "VALUES (now() - interval '2 days', 'views-aaaaa::0001', 1),"
    "       (now() - interval '2 min', 'views-aaaaa::0002', 3),"
    "       (now() - interval '20 min', 'views-aaaaa::0003', 2);\n"
    "RESET session_replication_role;\n";

static struct qw_db *fixture_db(char **conninfo)
{
    *conninfo = itest_db_create("ops_views", 1);
    struct qw_db *db = itest_connect(*conninfo);
    itest_exec(db, FIXTURE);
    return db;
}

static void test_service_overview(void **state)
{
    (void)state;
    char *conninfo;
    struct qw_db *db = fixture_db(&conninfo);
    expect_rows(db,
                "SELECT service_id, coalesce(claimant, '-'), claim_epoch, claim_state, backlog, "
                "in_flight, left(coalesce(head_batch_id, '-'), 2), coalesce(head_state, '-'), "
                "coalesce(head_attempts, -1), oldest_waiting_age > interval '0', "
                "coalesce(last_error, '-'), ingest_blocked "
                "FROM queuer.service_overview ORDER BY service_id",
                "views-aaaaa::0001|w1|3|held|3|t|02|Pending|1|t|-|f\n"
                "views-aaaaa::0002|w2|5|lapsed|2|f|05|Delayed|3|t|POST failed (HTTP 503)|f\n"
                "views-aaaaa::0003|-|7|free|5|f|07|parked|10|t|gave up|f\n"
                "views-aaaaa::0004|w1|1|held|2|f|0c|Unknown|2|t|ledger does not know the batch|t\n"
                "views-aaaaa::0005|w1|1|held|0|f|-|-|-1|~|-|f\n"
                "views-aaaaa::0006|w3|2|expired|1|f|10|waiting|0|t|-|f\n"
                "views-aaaaa::0007|w1|1|held|1|t|11|submitting|0|t|-|f\n"
                "views-aaaaa::0008|w1|1|held|1|t|12|Pending|1|t|-|f\n");
    /* the age of the oldest waiting batch is measured from its creation */
    assert_int_equal(itest_scalar(db, "SELECT extract(epoch FROM oldest_waiting_age)::int / 60 "
                                      "FROM queuer.service_overview "
                                      "WHERE service_id = 'views-aaaaa::0003'"),
                     360);
    qw_db_close(db);
    free(conninfo);
}

static void test_stuck_batches(void **state)
{
    (void)state;
    char *conninfo;
    struct qw_db *db = fixture_db(&conninfo);
    const char *q = "SELECT left(batch_id, 2), service_id, state, reasons, attempts, "
                    "waiting_behind, coalesce(claimant, '-'), "
                    "first_submitted_at IS NOT NULL, stuck_for > interval '0' "
                    "FROM queuer.stuck_batches ORDER BY batch_id";
    expect_rows(db, q,
                "05|views-aaaaa::0002|Delayed|{delayed_long}|3|1|w2|t|t\n"
                "07|views-aaaaa::0003|parked|{parked,many_attempts}|10|4|-|t|t\n"
                "0c|views-aaaaa::0004|Unknown|{unknown}|2|1|w1|t|t\n"
                "11|views-aaaaa::0007|submitting|{submitting_long}|0|0|w1|t|t\n"
                "12|views-aaaaa::0008|Pending|{pending_long}|1|0|w1|f|t\n");
    /* stuck_for counts from the first submission (the parked one: 5 hours) */
    assert_int_equal(itest_scalar(db, "SELECT round(extract(epoch FROM stuck_for) / 3600) "
                                      "FROM queuer.stuck_batches WHERE state = 'parked'"),
                     5);
    /* session overrides of the thresholds */
    itest_exec(db, "SET queuer.stuck_attempts = '2'; SET queuer.stuck_after = '2 hours'");
    expect_rows(db, q,
                "05|views-aaaaa::0002|Delayed|{many_attempts}|3|1|w2|t|t\n"
                "07|views-aaaaa::0003|parked|{parked,many_attempts}|10|4|-|t|t\n"
                "0c|views-aaaaa::0004|Unknown|{unknown,many_attempts}|2|1|w1|t|t\n");
    itest_exec(db, "RESET queuer.stuck_attempts; RESET queuer.stuck_after");
    /* and the settings table */
    itest_exec(db, "UPDATE queuer.settings SET stuck_after = '25 minutes'"); /* drops b17 */
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.stuck_batches"), 4);
    qw_db_close(db);
    free(conninfo);
}

static void test_instances_and_counts(void **state)
{
    (void)state;
    char *conninfo;
    struct qw_db *db = fixture_db(&conninfo);
    const char *q = "SELECT instance_id, state, claims_held, claims_lapsed "
                    "FROM queuer.instance_overview ORDER BY instance_id";
    expect_rows(db, q, "w1|alive|5|0\nw2|dead|0|1\nw3|stopped|0|1\nw4|alive|0|0\n");
    itest_exec(db, "SET queuer.instance_dead_after = '1 hour'");
    expect_rows(db, q, "w1|alive|5|0\nw2|alive|0|1\nw3|stopped|0|1\nw4|alive|0|0\n");
    itest_exec(db, "RESET queuer.instance_dead_after");

    expect_rows(db,
                "SELECT state, batches, oldest_age > interval '0' "
                "FROM queuer.batch_counts ORDER BY state",
                "Delayed|1|t\nPending|2|t\nUnknown|1|t\nparked|1|t\nsubmitting|1|t\nwaiting|9|t\n");
    expect_rows(db,
                "SELECT status, last_5m, last_1h, last_24h "
                "FROM queuer.status_counts ORDER BY status",
                "Committed|1|2|2\nEnqueued|3|5|5\nPending|1|1|1\nSubmitting|1|2|4\nValid|0|0|1\n");
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.throughput"), 60);
    expect_rows(db,
                "SELECT sum(enqueued), sum(submissions), sum(accepted), sum(committed), "
                "sum(valid), sum(invalid), sum(operator_actions) FROM queuer.throughput",
                "5|2|1|2|0|0|0\n");
    /* one row per minute, the newest being the current minute */
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.throughput "
                                      "WHERE minute = date_trunc('minute', now())"),
                     1);
    qw_db_close(db);
    free(conninfo);
}

static const char *const VIEWS[] = {
    "service_overview", "stuck_batches", "instance_overview",   "batch_counts",
    "status_counts",    "throughput",    "operator_thresholds", "snapshot_holders",
};
#define N_VIEWS (sizeof(VIEWS) / sizeof(VIEWS[0]))

static void test_documented_no_payload_and_operator_access(void **state)
{
    (void)state;
    char *conninfo;
    struct qw_db *db = fixture_db(&conninfo);
    /* no view in the schema has a bytea column */
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM information_schema.columns c "
                                      "JOIN information_schema.views v "
                                      "  ON v.table_schema = c.table_schema "
                                      " AND v.table_name = c.table_name "
                                      "WHERE c.table_schema = 'queuer' AND c.data_type = 'bytea'"),
                     0);
    /* every view carries a COMMENT */
    char *undocumented = itest_string(db, "SELECT string_agg(c.relname, ', ') FROM pg_class c "
                                          "JOIN pg_namespace n ON n.oid = c.relnamespace "
                                          "WHERE n.nspname = 'queuer' AND c.relkind = 'v' "
                                          "AND obj_description(c.oid, 'pg_class') IS NULL");
    if (undocumented)
        fail_msg("views without COMMENT: %s", undocumented);

    itest_exec(db, "DO $$ BEGIN "
                   "IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ops_reader') THEN "
                   "CREATE ROLE ops_reader LOGIN IN ROLE queuer_operator; END IF; "
                   "IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ops_nobody') THEN "
                   "CREATE ROLE ops_nobody LOGIN; END IF; END $$");
    size_t len = strlen(conninfo) + 32;
    char *as_op = malloc(len), *as_nobody = malloc(len);
    snprintf(as_op, len, "%s user=ops_reader", conninfo);
    snprintf(as_nobody, len, "%s user=ops_nobody", conninfo);
    struct qw_db *op = itest_connect(as_op);
    struct qw_db *nobody = itest_connect(as_nobody);
    struct qw_error err;
    for (size_t i = 0; i < N_VIEWS; i++) {
        char sql[128];
        snprintf(sql, sizeof(sql), "SELECT count(*) FROM queuer.%s", VIEWS[i]);
        itest_scalar(op, sql);
        qw_error_clear(&err);
        if (qw_db_exec(nobody, sql, &err) == QW_OK || strcmp(err.sqlstate, "42501") != 0)
            fail_msg("a role outside queuer_operator read queuer.%s (%s)", VIEWS[i], err.sqlstate);
    }
    qw_error_clear(&err);
    assert_int_not_equal(qw_db_exec(op, "SELECT payload FROM queuer.batches", &err), QW_OK);
    assert_string_equal(err.sqlstate, "42501");
    assert_int_not_equal(qw_db_exec(op, "UPDATE queuer.batches SET retry_at = now()", &err), QW_OK);
    assert_string_equal(err.sqlstate, "42501");
    /* the operator may act through the audited functions, and nobody else */
    char *outcome = itest_string(op, "SELECT outcome FROM queuer.batch_retry("
                                     "repeat('05', 64), 'from the role test')");
    assert_string_equal(outcome, "done");
    free(outcome);
    char *who = itest_string(db, "SELECT instance_id FROM queuer.batch_history "
                                 "WHERE to_status = 'Retrying'");
    assert_string_equal(who, "operator:ops_reader");
    free(who);
    qw_error_clear(&err);
    assert_int_not_equal(
        qw_db_exec(nobody, "SELECT queuer.batch_cancel(repeat('05', 64), 'x')", &err), QW_OK);
    assert_string_equal(err.sqlstate, "42501");
    assert_int_not_equal(qw_db_exec(op,
                                    "SELECT queuer.operator_batch_action('cancel', "
                                    "repeat('05', 64), 'x')",
                                    &err),
                         QW_OK);
    assert_string_equal(err.sqlstate, "42501");
    qw_db_close(op);
    qw_db_close(nobody);
    free(as_op);
    free(as_nobody);
    qw_db_close(db);
    free(conninfo);
}

/* ---- plans on a million history rows ---- */

/*
 * 2,500 services x 100 batches over the last 29 days; per service the 98
 * oldest are final (every 97th Invalid), the 99th is in one of six
 * unfinished states and the 100th waits. Three history rows per started
 * batch (Submitting, Pending, final), and a line of the enqueue log per
 * batch (each enqueued alone): 739,616 history rows. Non-primary-key indexes, CHECK and exclusion
 * constraints are dropped during the load and rebuilt from their own definitions afterwards
 * (pg_get_indexdef / pg_get_constraintdef), which is ten times faster than
 * maintaining them row by row; the schema ends up as migrated.
 */
static const char BIG_LOAD[] =
    "SET session_replication_role = replica;\n"
    "CREATE TEMP TABLE saved_ddl AS "
    "SELECT 'DROP INDEX ' || indexrelid::regclass::text AS undo, "
    "       pg_get_indexdef(indexrelid) AS redo "
    "  FROM pg_index "
    " WHERE indrelid IN ('queuer.batches'::regclass, 'queuer.batch_history'::regclass) "
    "   AND NOT indisprimary "
    "   AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = indexrelid) "
    "UNION ALL "
    "SELECT format('ALTER TABLE %s DROP CONSTRAINT %I', conrelid::regclass, conname), "
    "       format('ALTER TABLE %s ADD CONSTRAINT %I %s%s', conrelid::regclass, conname,"
    "              pg_get_constraintdef(oid), "
    "              CASE WHEN contype = 'c' THEN ' NOT VALID' ELSE '' END) "
    "  FROM pg_constraint "
    " WHERE conrelid IN ('queuer.batches'::regclass, 'queuer.batch_history'::regclass) "
    "   AND contype IN ('c', 'x');\n"
    "DO $do$ DECLARE r record; BEGIN "
    "  FOR r IN SELECT * FROM saved_ddl LOOP EXECUTE r.undo; END LOOP; END $do$;\n"
    "INSERT INTO queuer.instances (instance_id, host, pid, version, heartbeat_at) "
    "SELECT 'w' || i, 'host' || i, 1000 + i, '0.1.0', now() FROM generate_series(0, 9) i;\n"
    "INSERT INTO queuer.service_id_claims (service_id, claimant, claim_epoch, expiry_1, expiry_2) "
    "SELECT format('perf%s-%s::svc0', s % 10, lpad(s::text, 5, '0')), 'w' || (s % 8), 1, "
    "       now() + interval '30 seconds', now() + interval '3 minutes' "
    "  FROM generate_series(1, 2500) s;\n"
    "INSERT INTO queuer.service_ingest (service_id, last_created_at) "
    "SELECT format('perf%s-%s::svc0', s % 10, lpad(s::text, 5, '0')), now() "
    "  FROM generate_series(1, 2500) s;\n"
    "INSERT INTO queuer.batches (batch_id, service_id, payload, created_at, submitted, status,"
    "                            attempts, last_submitted_at, retry_at, status_at, last_error) "
    "SELECT repeat(md5(n::text), 4), format('perf%s-%s::svc0', s % 10, lpad(s::text, 5, '0')),"
    "       '\\x0a00'::bytea, t0 + n * interval '10 seconds',"
    "       k <= 98 OR (k = 99 AND s % 6 IN (1, 2)),"
    "       CASE WHEN k <= 98 THEN (CASE WHEN n % 97 = 0 THEN 'Invalid' ELSE 'Committed' END)"
    "            WHEN k = 100 THEN NULL"
    "            ELSE (ARRAY[NULL, NULL, 'Pending', 'Delayed', 'Delayed', 'Unknown'])[s % 6 + 1]"
    "       END,"
    "       CASE WHEN k <= 98 THEN 1 WHEN k = 100 THEN 0 ELSE s % 13 END,"
    "       CASE WHEN k <= 99 THEN t0 + n * interval '10 seconds' + interval '1 second' END,"
    "       CASE WHEN k = 99 AND s % 6 = 4 THEN 'infinity'::timestamptz"
    "            WHEN k = 99 AND s % 6 IN (3, 5) THEN now() END,"
    "       CASE WHEN k <= 99 THEN t0 + n * interval '10 seconds' + interval '5 seconds' END,"
    "       CASE WHEN k = 99 AND s % 6 IN (3, 4) THEN 'POST failed' END"
    "  FROM (SELECT now() - interval '2500000 seconds' AS t0) z,"
    "       generate_series(1, 100) k, generate_series(1, 2500) s,"
    "       LATERAL (SELECT (k - 1) * 2500 + s AS n) nn"
    " ORDER BY 1;\n"
    "INSERT INTO queuer.batch_history (batch_id, service_id, from_status, to_status, instance_id,"
    "                                  claim_epoch, at) "
    "SELECT b.batch_id, b.service_id, st.from_status, st.to_status, 'w1', 1, b.created_at + st.off"
    "  FROM queuer.batches b"
    " CROSS JOIN LATERAL (VALUES (2, NULL, 'Submitting', interval '1 second'),"
    "                            (3, 'Submitting', 'Pending', interval '2 seconds'),"
    "                            (4, 'Pending', b.status, interval '5 seconds'))"
    "       AS st(ord, from_status, to_status, off)"
    " WHERE (st.ord <= 3 AND b.attempts > 0)"
    "    OR (st.ord = 4 AND b.status IN ('Committed', 'Invalid', 'Valid'));\n"
    "INSERT INTO queuer.enqueue_log (at, service_id, batches) "
    "SELECT b.created_at, b.service_id, 1 FROM queuer.batches b;\n"
    "RESET session_replication_role;\n"
    "DO $do$ DECLARE r record; BEGIN "
    "  FOR r IN SELECT * FROM saved_ddl LOOP EXECUTE r.redo; END LOOP; END $do$;\n";

/* Collects every node of a JSON plan: scans of big tables, and index names used. */
struct plan_facts {
    char seq_scans[512]; /* "relation " for each Seq Scan of batches/history/enqueue log */
    char indexes[1024];  /* " index " for each index used */
};

static void walk_plan(json_t *node, struct plan_facts *f)
{
    const char *type = json_string_value(json_object_get(node, "Node Type"));
    const char *rel = json_string_value(json_object_get(node, "Relation Name"));
    const char *index = json_string_value(json_object_get(node, "Index Name"));
    if (type && strcmp(type, "Seq Scan") == 0 && rel &&
        (strcmp(rel, "batches") == 0 || strcmp(rel, "batch_history") == 0 ||
         strcmp(rel, "enqueue_log") == 0)) {
        size_t n = strlen(f->seq_scans);
        snprintf(f->seq_scans + n, sizeof(f->seq_scans) - n, "%s ", rel);
    }
    if (index) {
        size_t n = strlen(f->indexes);
        snprintf(f->indexes + n, sizeof(f->indexes) - n, " %s ", index);
    }
    json_t *children = json_object_get(node, "Plans");
    size_t i;
    json_t *child;
    json_array_foreach(children, i, child) walk_plan(child, f);
}

static void plan_of(struct qw_db *db, const char *explain, struct plan_facts *f, char **text)
{
    memset(f, 0, sizeof(*f));
    *text = itest_string(db, explain);
    assert_non_null(*text);
    json_error_t jerr;
    json_t *doc = json_loads(*text, 0, &jerr);
    if (!doc)
        fail_msg("EXPLAIN output is not JSON: %s", jerr.text);
    walk_plan(json_object_get(json_array_get(doc, 0), "Plan"), f);
    json_decref(doc);
}

struct plan_case {
    const char *what;        /* view or statement */
    const char *explain;     /* EXPLAIN (FORMAT JSON) ... */
    const char *must_use[3]; /* index names that must appear, NULL-terminated */
};

static const struct plan_case plan_cases[] = {
    {"service_overview",
     "EXPLAIN (FORMAT JSON) SELECT * FROM queuer.service_overview",
     {"batches_open", NULL}},
    {"service_overview, one service",
     "EXPLAIN (FORMAT JSON) SELECT * FROM queuer.service_overview "
     "WHERE service_id = 'perf1-00001::svc0'",
     {"batches_open", "service_id_claims_pkey", NULL}},
    {"stuck_batches",
     "EXPLAIN (FORMAT JSON) SELECT * FROM queuer.stuck_batches",
     {"batches_started", "batch_history_batch", NULL}},
    {"instance_overview", "EXPLAIN (FORMAT JSON) SELECT * FROM queuer.instance_overview", {NULL}},
    {"batch_counts",
     "EXPLAIN (FORMAT JSON) SELECT * FROM queuer.batch_counts",
     {"batches_open", NULL}},
    {"status_counts",
     "EXPLAIN (FORMAT JSON) SELECT * FROM queuer.status_counts",
     {"batch_history_at", "enqueue_log_at", NULL}},
    {"throughput",
     "EXPLAIN (FORMAT JSON) SELECT * FROM queuer.throughput",
     {"batch_history_at", "enqueue_log_at", NULL}},
    {"ops_status_counts",
     "EXPLAIN (FORMAT JSON) EXECUTE ops_status_counts",
     {"batches_open", "batches_started", "batch_history_at"}},
    {"ops_status_stuck",
     "EXPLAIN (FORMAT JSON) EXECUTE ops_status_stuck(20)",
     {"batches_started", NULL}},
    {"ops_status_instances", "EXPLAIN (FORMAT JSON) EXECUTE ops_status_instances(200)", {NULL}},
    {"ops_batch_resolve",
     "EXPLAIN (FORMAT JSON) EXECUTE ops_batch_resolve('c4ca4238a0b92382')",
     {"batches_pkey", NULL}},
    {"ops_batch_show",
     "EXPLAIN (FORMAT JSON) EXECUTE ops_batch_show(repeat(md5('1'), 4))",
     {"batches_pkey", "batches_open", NULL}},
    {"ops_batch_history",
     "EXPLAIN (FORMAT JSON) EXECUTE ops_batch_history(repeat(md5('1'), 4))",
     {"batch_history_batch", NULL}},
    {"ops_prune_count",
     "EXPLAIN (FORMAT JSON) EXECUTE ops_prune_count(now() - interval '20 days')",
     {"batches_final_at", NULL}},
    {"ops_prune_log",
     "EXPLAIN (FORMAT JSON) EXECUTE ops_prune_log(now() - interval '28 days')",
     {"enqueue_log_at", NULL}},
    {"ops_prune_chunk",
     "EXPLAIN (FORMAT JSON) EXECUTE ops_prune_chunk(now() - interval '20 days', 1000, NULL)",
     {"batches_final_at", "batch_history_batch", "batches_pkey"}},
};

static void test_view_plans_on_a_million_history_rows(void **state)
{
    (void)state;
    char *conninfo = itest_db_create("ops_plans", 1);
    struct qw_db *db = itest_connect(conninfo);
    itest_exec(db, BIG_LOAD);
    itest_exec(db, "VACUUM ANALYZE queuer.batches, queuer.batch_history, queuer.enqueue_log, "
                   "queuer.service_id_claims, queuer.service_ingest, queuer.instances, "
                   "queuer.settings");
    int64_t history = itest_scalar(db, "SELECT count(*) FROM queuer.batch_history");
    assert_true(history > 700000);
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.batches"), 250000);
    /* the rebuilt schema is the migrated one: the indexes the views rely on are back */
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM pg_indexes WHERE schemaname = "
                                      "'queuer' AND indexname IN ('batches_open', "
                                      "'batches_started', 'batches_final_at', "
                                      "'batch_history_at', 'batch_history_batch')"),
                     5);

    /* prepare the runtime statements under their own names for EXPLAIN EXECUTE */
    for (const struct qw_embedded *s = qw_statements; s->name; s++) {
        if (strncmp(s->name, "ops_", 4) != 0)
            continue;
        size_t len = strlen(s->text) + 64;
        char *sql = malloc(len);
        snprintf(sql, len, "PREPARE %s AS %s", s->name, s->text);
        itest_exec(db, sql);
        free(sql);
    }
    /* generic plans: what a long-lived prepared statement would run */
    itest_exec(db, "SET plan_cache_mode = force_generic_plan");
    for (int generic = 0; generic < 2; generic++) {
        if (generic == 1)
            itest_exec(db, "SET plan_cache_mode = force_custom_plan");
        for (size_t i = 0; i < sizeof(plan_cases) / sizeof(plan_cases[0]); i++) {
            const struct plan_case *c = &plan_cases[i];
            struct plan_facts f;
            char *text;
            plan_of(db, c->explain, &f, &text);
            if (f.seq_scans[0])
                fail_msg("%s: sequential scan of %s\n%s", c->what, f.seq_scans, text);
            for (int k = 0; k < 3 && c->must_use[k]; k++) {
                char needle[80];
                snprintf(needle, sizeof(needle), " %s ", c->must_use[k]);
                if (!strstr(f.indexes, needle))
                    fail_msg("%s: does not use index %s (uses:%s)\n%s", c->what, c->must_use[k],
                             f.indexes, text);
            }
            free(text);
        }
    }
    /* and they run: a smoke check of sizes on this data */
    assert_int_equal(itest_scalar(db, "SELECT count(*) FROM queuer.service_overview"), 2500);
    assert_int_equal(itest_scalar(db, "SELECT sum(batches) FROM queuer.batch_counts"), 5000);
    assert_true(itest_scalar(db, "SELECT count(*) FROM queuer.stuck_batches") > 1000);
    qw_db_close(db);
    free(conninfo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_service_overview),
        cmocka_unit_test(test_stuck_batches),
        cmocka_unit_test(test_instances_and_counts),
        cmocka_unit_test(test_documented_no_payload_and_operator_access),
        cmocka_unit_test(test_view_plans_on_a_million_history_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
