/* Unit tests for qw-check's pure core (tools/check/history.h): parsing and invariants. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "check/history.h"

#include <stdio.h>
#include <string.h>

/* ---- parsing ------------------------------------------------------------ */

static void test_parse_valid_lines(void **state)
{
    static const struct {
        const char *line;              /* NDJSON line */
        enum qw_check_event_kind kind; /* expected kind */
        int code;                      /* expected code */
        int reached;                   /* expected reached */
        int dup;                       /* expected dup */
        int no_answer;                 /* expected no_answer */
        int fault;                     /* expected fault */
        const char *batch;             /* expected batch */
        const char *to;                /* expected to */
    } rows[] = {
        {"{\"t\":5,\"ev\":\"post\",\"service\":\"abcde-fghij::k1m2\",\"batch\":\"aa\","
         "\"code\":202,\"dup\":false}\n",
         QW_CHECK_EV_POST, 202, 1, 0, 0, 0, "aa", ""},
        {"{\"t\":6,\"ev\":\"post\",\"service\":\"s\",\"batch\":\"aa\",\"code\":202,\"dup\":true}",
         QW_CHECK_EV_POST, 202, 1, 1, 0, 0, "aa", ""},
        {"{\"t\":7,\"ev\":\"post\",\"service\":\"s\",\"batch\":\"aa\",\"code\":429,\"dup\":false}",
         QW_CHECK_EV_POST, 429, 0, 0, 0, 0, "aa", ""},
        {"{\"t\":7,\"ev\":\"post\",\"service\":\"s\",\"batch\":\"aa\",\"code\":429,\"dup\":false,"
         "\"fault\":\"burst\"}",
         QW_CHECK_EV_POST, 429, 0, 0, 0, 1, "aa", ""},
        {"{\"t\":8,\"ev\":\"post\",\"service\":\"s\",\"batch\":\"aa\",\"code\":\"drop\","
         "\"dup\":false,\"accepted\":true,\"fault\":null}",
         QW_CHECK_EV_POST, 0, 1, 0, 1, 1, "aa", ""},
        {"{\"t\":8,\"ev\":\"post\",\"service\":\"s\",\"batch\":\"aa\",\"code\":\"hang\","
         "\"dup\":false,\"accepted\":false}",
         QW_CHECK_EV_POST, 0, 0, 0, 1, 1, "aa", ""},
        {"{\"t\":9,\"ev\":\"post\",\"service\":\"s\",\"batch\":null,\"code\":401,\"dup\":false}",
         QW_CHECK_EV_POST, 401, 0, 0, 0, 0, "", ""},
        {"{\"t\":9,\"ev\":\"post\",\"service\":null,\"batch\":null,\"code\":404,\"dup\":false}",
         QW_CHECK_EV_POST, 404, 0, 0, 0, 0, "", ""},
        {"{\"t\":10,\"ev\":\"get\",\"service\":\"s\",\"n\":1,\"code\":200,\"waited_ms\":12}",
         QW_CHECK_EV_GET, 200, 0, 0, 0, 0, "", ""},
        {"{\"t\":10,\"ev\":\"get\",\"service\":\"s\",\"n\":1,\"code\":\"drop\"}", QW_CHECK_EV_GET,
         0, 0, 0, 1, 0, "", ""},
        {"{\"t\":11,\"ev\":\"status\",\"service\":\"s\",\"batch\":\"aa\",\"from\":\"Pending\","
         "\"to\":\"Committed\",\"due\":3}",
         QW_CHECK_EV_STATUS, 0, 0, 0, 0, 0, "aa", "Committed"},
        {"{\"t\":12,\"ev\":\"restart\",\"why\":\"SIGHUP\"}", QW_CHECK_EV_RESTART, 0, 0, 0, 0, 0, "",
         ""},
        {"{\"t\":13,\"ev\":\"pause\"}", QW_CHECK_EV_OTHER, 0, 0, 0, 0, 0, "", ""},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct qw_check_event ev;
        char why[200] = "";
        int rc = qw_check_event_parse(rows[i].line, strlen(rows[i].line), &ev, why, sizeof(why));
        if (rc != 0)
            print_error("row %zu: %s\n", i, why);
        assert_int_equal(rc, 0);
        assert_int_equal(ev.kind, rows[i].kind);
        assert_int_equal(ev.code, rows[i].code);
        assert_int_equal(ev.reached, rows[i].reached);
        assert_int_equal(ev.dup, rows[i].dup);
        assert_int_equal(ev.no_answer, rows[i].no_answer);
        assert_int_equal(ev.fault, rows[i].fault);
        assert_string_equal(ev.batch, rows[i].batch);
        assert_string_equal(ev.to, rows[i].to);
    }
}

static void test_parse_rejects_bad_lines(void **state)
{
    char long_id[QW_CHECK_ID_MAX + 2];
    memset(long_id, 'a', sizeof(long_id) - 1);
    long_id[sizeof(long_id) - 1] = '\0';
    char too_long[512];
    snprintf(too_long, sizeof(too_long),
             "{\"t\":1,\"ev\":\"post\",\"service\":\"s\",\"batch\":\"%s\",\"code\":202}", long_id);
    static const char *const rows[] = {
        "",
        "not json",
        "{\"t\":1,\"ev\":\"post\",\"service\":\"s\",\"batch\":\"aa\",\"code\":20", /* truncated */
        "[1,2]",
        "{\"ev\":\"post\",\"code\":202}",             /* no t */
        "{\"t\":\"1\",\"ev\":\"post\",\"code\":202}", /* t not an integer */
        "{\"t\":1,\"code\":202}",                     /* no ev */
        "{\"t\":1,\"ev\":\"post\",\"batch\":\"aa\"}", /* no code */
        "{\"t\":1,\"ev\":\"post\",\"batch\":\"aa\",\"code\":99}",
        "{\"t\":1,\"ev\":\"post\",\"batch\":\"aa\",\"code\":true}",
        "{\"t\":1,\"ev\":\"post\",\"batch\":7,\"code\":429}",       /* batch not a string */
        "{\"t\":1,\"ev\":\"post\",\"service\":\"s\",\"code\":202}", /* taken, but which batch? */
        "{\"t\":1,\"ev\":\"status\",\"service\":\"s\",\"batch\":\"aa\"}",     /* no to */
        "{\"t\":1,\"ev\":\"status\",\"service\":\"s\",\"to\":\"Committed\"}", /* no batch */
        "{\"t\":1,\"ev\":\"get\",\"service\":\"s\"}",
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]) + 1; i++) {
        const char *line = i < sizeof(rows) / sizeof(rows[0]) ? rows[i] : too_long;
        struct qw_check_event ev;
        char why[200] = "";
        int rc = qw_check_event_parse(line, strlen(line), &ev, why, sizeof(why));
        if (rc == 0)
            print_error("row %zu accepted: %s\n", i, line);
        assert_int_equal(rc, -1);
        assert_true(why[0] != '\0');
    }
}

static void test_reason_of(void **state)
{
    static const struct {
        const char *detail;            /* history detail */
        enum qw_check_reason expected; /* classification */
    } rows[] = {
        {"first submission", QW_CHECK_REASON_FIRST},
        {"resubmission: earlier attempt did not reach the ledger", QW_CHECK_REASON_RESUBMIT},
        {"resubmission: ledger does not know the batch (confirmed)", QW_CHECK_REASON_RESUBMIT},
        {"retry after delay: ledger back pressure (HTTP 429)", QW_CHECK_REASON_RESUBMIT},
        {"retry after delay: ", QW_CHECK_REASON_RESUBMIT},
        {"resubmission:", QW_CHECK_REASON_NONE}, /* a reason needs its text */
        {"first submission again", QW_CHECK_REASON_NONE},
        {"", QW_CHECK_REASON_NONE},
        {NULL, QW_CHECK_REASON_NONE},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        assert_int_equal(qw_check_reason_of(rows[i].detail), rows[i].expected);
}

/* ---- replay and invariants ---------------------------------------------- */

enum step_kind {
    END = 0,
    POST,    /* a: batch, b: code (202/429/...), dup */
    DROP,    /* a: batch, dropped connection; accepted = taken */
    STATUS,  /* a: batch, to */
    RESTART, /* ledger memory wiped */
    ROW,     /* a queuer.batches row: a: batch, to: status ("" none) */
    SUBMIT,  /* a 'Submitting' history row: a: batch, to: detail */
};

struct step {
    enum step_kind kind; /* what */
    const char *svc;     /* service */
    const char *batch;   /* batch id */
    int code;            /* POST: HTTP status */
    int flag;            /* POST: dup; DROP: accepted */
    const char *text;    /* STATUS: new status; ROW: status; SUBMIT: detail */
};

#define FIRST "first submission"
#define RETRY "retry after delay: ledger back pressure (HTTP 429)"
#define RESUB "resubmission: ledger does not know the batch (confirmed)"

struct scenario {
    const char *name;                          /* what it shows */
    struct step steps[24];                     /* events and rows, END-terminated */
    long long violations[QW_CHECK_INVARIANTS]; /* expected per invariant */
    const char *message;                       /* a substring of the first violation, or NULL */
    long long duplicate_batches;               /* expected */
    long long duplicate_posts;                 /* expected */
};

struct sink {
    int n;           /* violations reported */
    int first_inv;   /* invariant of the first */
    char first[512]; /* message of the first */
};

static void record(void *ctx, int invariant, const char *message)
{
    struct sink *s = ctx;
    if (s->n++ == 0) {
        s->first_inv = invariant;
        snprintf(s->first, sizeof(s->first), "%s", message);
    }
}

static void feed(struct qw_check *c, const struct step *st)
{
    struct qw_check_event ev;
    memset(&ev, 0, sizeof(ev));
    if (st->svc)
        snprintf(ev.service, sizeof(ev.service), "%s", st->svc);
    if (st->batch)
        snprintf(ev.batch, sizeof(ev.batch), "%s", st->batch);
    switch (st->kind) {
    case POST:
        ev.kind = QW_CHECK_EV_POST;
        ev.code = st->code;
        ev.dup = st->flag;
        ev.reached = st->code == 202;
        break;
    case DROP:
        ev.kind = QW_CHECK_EV_POST;
        ev.no_answer = true;
        ev.fault = true;
        ev.reached = st->flag;
        break;
    case STATUS:
        ev.kind = QW_CHECK_EV_STATUS;
        snprintf(ev.to, sizeof(ev.to), "%s", st->text);
        break;
    case RESTART:
        ev.kind = QW_CHECK_EV_RESTART;
        break;
    case ROW:
        assert_int_equal(qw_check_add_batch(c, st->batch, st->svc, st->text), 0);
        return;
    case SUBMIT:
        assert_int_equal(qw_check_add_submitting(c, st->batch, st->text), 0);
        return;
    case END:
        return;
    }
    assert_int_equal(qw_check_replay(c, &ev), 0);
}

/* A service's two batches, committed one after the other, as every scenario's baseline. */
#define ROWS_AB(sa, sb)                                                                            \
    {ROW, "s1", "A", 0, 0, sa}, {ROW, "s1", "B", 0, 0, sb}, {SUBMIT, NULL, "A", 0, 0, FIRST},      \
    {                                                                                              \
        SUBMIT, NULL, "B", 0, 0, FIRST                                                             \
    }

static const struct scenario scenarios[] = {
    {"clean: one at a time, in order",
     {{POST, "s1", "A", 202, 0, NULL},
      {STATUS, "s1", "A", 0, 0, "Committed"},
      {POST, "s1", "B", 202, 0, NULL},
      {POST, "s2", "C", 202, 0, NULL}, /* other services are independent */
      {STATUS, "s1", "B", 0, 0, "Committed"},
      {STATUS, "s2", "C", 0, 0, "Committed"},
      ROWS_AB("Committed", "Committed"),
      {ROW, "s2", "C", 0, 0, "Committed"},
      {SUBMIT, NULL, "C", 0, 0, FIRST}},
     {0, 0, 0, 0},
     NULL,
     0,
     0},
    {"I2: the next batch taken while the previous one is still pending",
     {{POST, "s1", "A", 202, 0, NULL},
      {POST, "s1", "B", 202, 0, NULL},
      {STATUS, "s1", "A", 0, 0, "Committed"},
      {STATUS, "s1", "B", 0, 0, "Committed"},
      ROWS_AB("Committed", "Committed")},
     {0, 1, 0, 0},
     "taken while batch A",
     0,
     0},
    {"I2: Valid ends a batch's turn; a duplicate of a pending batch is fine",
     {{POST, "s1", "A", 202, 0, NULL},
      {DROP, "s1", "A", 0, 1, NULL},
      {POST, "s1", "A", 202, 1, NULL},
      {STATUS, "s1", "A", 0, 0, "Valid"},
      {POST, "s1", "B", 202, 0, NULL},
      {STATUS, "s1", "A", 0, 0, "Committed"},
      {STATUS, "s1", "B", 0, 0, "Committed"},
      ROWS_AB("Committed", "Committed"),
      {SUBMIT, NULL, "A", 0, 0, RETRY},
      {SUBMIT, NULL, "A", 0, 0, RETRY}},
     {0, 0, 0, 0},
     NULL,
     1,
     2},
    {"I2: a ledger restart forgets pending batches; resubmitting them is fine",
     {{POST, "s1", "A", 202, 0, NULL},
      {RESTART, NULL, NULL, 0, 0, NULL},
      {POST, "s1", "A", 202, 0, NULL},
      {STATUS, "s1", "A", 0, 0, "Committed"},
      {POST, "s1", "B", 202, 0, NULL},
      {STATUS, "s1", "B", 0, 0, "Committed"},
      ROWS_AB("Committed", "Committed"),
      {SUBMIT, NULL, "A", 0, 0, RESUB}},
     {0, 0, 0, 0},
     NULL,
     1,
     1},
    {"I2: a duplicate POST of a final batch does not reopen it",
     {{POST, "s1", "A", 202, 0, NULL},
      {STATUS, "s1", "A", 0, 0, "Committed"},
      {POST, "s1", "B", 202, 0, NULL},
      {POST, "s1", "A", 202, 1, NULL}, /* stale owner: the ledger knows A, nothing queued */
      {STATUS, "s1", "B", 0, 0, "Committed"},
      ROWS_AB("Committed", "Committed"),
      {SUBMIT, NULL, "A", 0, 0, RESUB}},
     {0, 0, 0, 0}, /* A's first acceptance still precedes B's: order holds */
     NULL,
     1,
     1},
    {"I3: the younger batch taken first",
     {{POST, "s1", "B", 202, 0, NULL},
      {STATUS, "s1", "B", 0, 0, "Committed"},
      {POST, "s1", "A", 202, 0, NULL},
      {STATUS, "s1", "A", 0, 0, "Committed"},
      ROWS_AB("Committed", "Committed")},
     {0, 0, 1, 0},
     "batch B was taken before the older batch A",
     0,
     0},
    {"I3: the ledger took a batch the database does not hold, and one under another service",
     {{POST, "s1", "A", 202, 0, NULL},
      {STATUS, "s1", "A", 0, 0, "Committed"},
      {POST, "s1", "X", 202, 0, NULL},
      {STATUS, "s1", "X", 0, 0, "Committed"},
      {POST, "s9", "B", 202, 0, NULL},
      {STATUS, "s9", "B", 0, 0, "Committed"},
      ROWS_AB("Committed", "Committed")},
     {0, 0, 2, 0}, /* X's missing Submitting row is not checked: X is not a known batch */
     "does not hold",
     0,
     0},
    {"I1: not final, and final without the ledger saying so",
     {{POST, "s1", "A", 202, 0, NULL},
      {STATUS, "s1", "A", 0, 0, "Committed"},
      {POST, "s1", "B", 202, 0, NULL},
      {POST, "s2", "C", 400, 0, NULL},
      {POST, "s3", "D", 503, 0, NULL},
      ROWS_AB("Committed", "Committed"),
      {ROW, "s2", "C", 0, 0, "Invalid"}, /* backed by the 400 */
      {SUBMIT, NULL, "C", 0, 0, FIRST},
      {ROW, "s3", "D", 0, 0, "Delayed"},
      {SUBMIT, NULL, "D", 0, 0, FIRST},
      {ROW, "s3", "E", 0, 0, ""}},
     {3, 0, 0, 0},
     "batch B is Committed in the database but the ledger never said so",
     0,
     0},
    {"I1: Valid is backed by Valid or Committed; Invalid needs the ledger's word",
     {{POST, "s1", "A", 202, 0, NULL},
      {STATUS, "s1", "A", 0, 0, "Valid"},
      {POST, "s1", "B", 202, 0, NULL},
      {STATUS, "s1", "B", 0, 0, "Committed"},
      ROWS_AB("Valid", "Valid"),
      {ROW, "s2", "C", 0, 0, "Invalid"}},
     {1, 0, 0, 0},
     "batch C is Invalid",
     0,
     0},
    {"I4: a batch taken twice with no recorded reason",
     {{DROP, "s1", "A", 0, 1, NULL},
      {POST, "s1", "A", 202, 1, NULL},
      {STATUS, "s1", "A", 0, 0, "Committed"},
      {ROW, "s1", "A", 0, 0, "Committed"},
      {SUBMIT, NULL, "A", 0, 0, FIRST},
      {SUBMIT, NULL, "A", 0, 0, "some other text"}},
     {0, 0, 0, 1},
     "took it 2 times but only 0 resubmission",
     1,
     1},
    {"I4: a 429 then a retry with its reason is not a duplicate",
     {{POST, "s1", "A", 429, 0, NULL},
      {DROP, "s1", "A", 0, 0, NULL}, /* dropped before the ledger took it */
      {POST, "s1", "A", 202, 0, NULL},
      {STATUS, "s1", "A", 0, 0, "Committed"},
      {ROW, "s1", "A", 0, 0, "Committed"},
      {SUBMIT, NULL, "A", 0, 0, FIRST},
      {SUBMIT, NULL, "A", 0, 0, RETRY},
      {SUBMIT, NULL, "A", 0, 0, "retry after delay: POST failed (connection)"}},
     {0, 0, 0, 0},
     NULL,
     0,
     0},
    {"I4: more POSTs than Submitting rows",
     {{POST, "s1", "A", 503, 0, NULL},
      {POST, "s1", "A", 202, 0, NULL},
      {STATUS, "s1", "A", 0, 0, "Committed"},
      {ROW, "s1", "A", 0, 0, "Committed"},
      {SUBMIT, NULL, "A", 0, 0, FIRST}},
     {0, 0, 0, 1},
     "POSTed 2 times but marked Submitting only 1 times",
     0,
     0},
};

static void test_scenarios(void **state)
{
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
        const struct scenario *sc = &scenarios[i];
        struct sink sink = {0};
        struct qw_check *c = NULL;
        assert_int_equal(qw_check_new(record, &sink, &c), 0);
        for (const struct step *st = sc->steps; st->kind != END; st++)
            feed(c, st);
        struct qw_check_figures fig;
        assert_int_equal(qw_check_finish(c, &fig), 0);
        long long total = 0;
        for (int k = 0; k < QW_CHECK_INVARIANTS; k++) {
            if (fig.violations[k] != sc->violations[k])
                print_error("scenario \"%s\": I%d: %lld violations, expected %lld (first: %s)\n",
                            sc->name, k + 1, fig.violations[k], sc->violations[k], sink.first);
            assert_int_equal(fig.violations[k], sc->violations[k]);
            total += fig.violations[k];
        }
        assert_int_equal(sink.n, total);
        if (sc->message) {
            if (!strstr(sink.first, sc->message))
                print_error("scenario \"%s\": first violation \"%s\" lacks \"%s\"\n", sc->name,
                            sink.first, sc->message);
            assert_non_null(strstr(sink.first, sc->message));
        }
        assert_int_equal(fig.duplicate_batches, sc->duplicate_batches);
        assert_int_equal(fig.duplicate_posts, sc->duplicate_posts);
        qw_check_free(c);
    }
}

static void test_figures(void **state)
{
    struct qw_check *c = NULL;
    assert_int_equal(qw_check_new(NULL, NULL, &c), 0);
    static const struct step steps[] = {
        {POST, "s1", "A", 429, 0, NULL},   {POST, "s1", "A", 503, 0, NULL},
        {DROP, "s1", "A", 0, 1, NULL},     {POST, "s1", "A", 202, 1, NULL},
        {POST, "s1", NULL, 401, 0, NULL},  {STATUS, "s1", "A", 0, 0, "Committed"},
        {RESTART, NULL, NULL, 0, 0, NULL}, {ROW, "s1", "A", 0, 0, "Committed"},
        {ROW, "s1", "B", 0, 0, ""},        {SUBMIT, NULL, "A", 0, 0, FIRST},
        {SUBMIT, NULL, "A", 0, 0, RETRY},  {SUBMIT, NULL, "A", 0, 0, RETRY},
        {SUBMIT, NULL, "A", 0, 0, RETRY},  {END, NULL, NULL, 0, 0, NULL},
    };
    for (const struct step *st = steps; st->kind != END; st++)
        feed(c, st);
    struct qw_check_event get = {.kind = QW_CHECK_EV_GET, .code = 200};
    assert_int_equal(qw_check_replay(c, &get), 0);
    struct qw_check_figures f;
    assert_int_equal(qw_check_finish(c, &f), 0);
    assert_int_equal(f.events, 8);
    assert_int_equal(f.batches, 2);
    assert_int_equal(f.final_batches, 1);
    assert_int_equal(f.services, 1);
    assert_int_equal(f.posts, 5);
    assert_int_equal(f.posts_202, 1);
    assert_int_equal(f.posts_429, 1);
    assert_int_equal(f.posts_other, 3);
    assert_int_equal(f.posts_reached, 2);
    assert_int_equal(f.gets, 1);
    assert_int_equal(f.restarts, 1);
    assert_int_equal(f.submitting_rows, 4);
    assert_int_equal(f.resubmit_reasons, 3);
    assert_int_equal(f.duplicate_batches, 1);
    assert_int_equal(f.duplicate_posts, 1);
    assert_int_equal(f.violations[0], 1); /* B has no status */
    assert_int_equal(f.violations[1] + f.violations[2] + f.violations[3], 0);
    qw_check_free(c);
}

static void test_repeated_row_is_refused(void **state)
{
    struct qw_check *c = NULL;
    assert_int_equal(qw_check_new(NULL, NULL, &c), 0);
    assert_int_equal(qw_check_add_batch(c, "A", "s1", NULL), 0);
    assert_int_equal(qw_check_add_batch(c, "A", "s1", "Committed"), -1);
    qw_check_free(c);
}

/* Many batches and services: the maps grow and still find everything. */
static void test_many_batches(void **state)
{
    struct qw_check *c = NULL;
    assert_int_equal(qw_check_new(NULL, NULL, &c), 0);
    char svc[32];
    char id[32];
    for (int k = 0; k < 30; k++) {
        for (int s = 0; s < 300; s++) {
            snprintf(svc, sizeof(svc), "svc%d", s);
            snprintf(id, sizeof(id), "b%d-%d", s, k);
            struct qw_check_event ev = {.kind = QW_CHECK_EV_POST, .code = 202, .reached = true};
            snprintf(ev.service, sizeof(ev.service), "%s", svc);
            snprintf(ev.batch, sizeof(ev.batch), "%s", id);
            assert_int_equal(qw_check_replay(c, &ev), 0);
            ev.kind = QW_CHECK_EV_STATUS;
            snprintf(ev.to, sizeof(ev.to), "Committed");
            assert_int_equal(qw_check_replay(c, &ev), 0);
        }
    }
    for (int s = 0; s < 300; s++) {
        for (int k = 0; k < 30; k++) {
            snprintf(svc, sizeof(svc), "svc%d", s);
            snprintf(id, sizeof(id), "b%d-%d", s, k);
            assert_int_equal(qw_check_add_batch(c, id, svc, "Committed"), 0);
            assert_int_equal(qw_check_add_submitting(c, id, FIRST), 0);
        }
    }
    struct qw_check_figures f;
    assert_int_equal(qw_check_finish(c, &f), 0);
    assert_int_equal(f.batches, 9000);
    assert_int_equal(f.services, 300);
    assert_int_equal(f.posts_202, 9000);
    for (int k = 0; k < QW_CHECK_INVARIANTS; k++)
        assert_int_equal(f.violations[k], 0);
    qw_check_free(c);
}

/* Lines as scabbard-sim writes them, through parse and replay: a POST whose
 * connection was dropped after the ledger took the batch, resent 0.15 ms
 * later on a fresh connection with no new 'Submitting' row (what libcurl's
 * silent resend of a POST on a dead kept-alive connection looks like). */
static void test_sim_lines_silent_resend(void **state)
{
    static const char *const lines[] = {
        "{\"t\":1795273771651484,\"ev\":\"post\",\"service\":\"qwgen-00000::001a\","
        "\"batch\":\"bf32\",\"code\":\"drop\",\"dup\":false,\"accepted\":true}",
        "{\"t\":1795273771651636,\"ev\":\"post\",\"service\":\"qwgen-00000::001a\","
        "\"batch\":\"bf32\",\"code\":202,\"dup\":true}",
        "{\"t\":1795273771666666,\"ev\":\"get\",\"service\":\"qwgen-00000::001a\",\"n\":1,"
        "\"code\":200}",
        "{\"t\":1795273771671493,\"ev\":\"status\",\"service\":\"qwgen-00000::001a\","
        "\"batch\":\"bf32\",\"from\":\"Pending\",\"to\":\"Committed\",\"due\":1795273771671482}",
    };
    struct sink sink = {0};
    struct qw_check *c = NULL;
    assert_int_equal(qw_check_new(record, &sink, &c), 0);
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        struct qw_check_event ev;
        char why[200] = "";
        assert_int_equal(qw_check_event_parse(lines[i], strlen(lines[i]), &ev, why, sizeof(why)),
                         0);
        assert_int_equal(qw_check_replay(c, &ev), 0);
    }
    assert_int_equal(qw_check_add_batch(c, "bf32", "qwgen-00000::001a", "Committed"), 0);
    assert_int_equal(qw_check_add_submitting(c, "bf32", "first submission"), 0);
    struct qw_check_figures f;
    assert_int_equal(qw_check_finish(c, &f), 0);
    assert_int_equal(f.posts, 2);
    assert_int_equal(f.posts_reached, 2);
    assert_int_equal(f.duplicate_batches, 1);
    assert_int_equal(f.violations[0] + f.violations[1] + f.violations[2], 0);
    assert_int_equal(f.violations[3], 2); /* no reason for the resend, and 2 POSTs for 1 mark */
    assert_int_equal(sink.first_inv, 4);
    qw_check_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid_lines), cmocka_unit_test(test_parse_rejects_bad_lines),
        cmocka_unit_test(test_reason_of),         cmocka_unit_test(test_scenarios),
        cmocka_unit_test(test_figures),           cmocka_unit_test(test_repeated_row_is_refused),
        cmocka_unit_test(test_many_batches),      cmocka_unit_test(test_sim_lines_silent_resend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
