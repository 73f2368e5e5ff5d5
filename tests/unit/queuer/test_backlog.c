/* Unit tests of the queuer's backlog (src/queuer/backlog.c). */
#include "queuer/backlog.h"

#include "common/err.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A list of waiting services from "id:priority" words; *n gets their number. */
static struct qw_waiting *list(const char *words, size_t *n)
{
    struct qw_waiting *w = calloc(8, sizeof(*w));
    assert_non_null(w);
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", words);
    *n = 0;
    for (char *save = NULL, *word = strtok_r(buf, " ", &save); word;
         word = strtok_r(NULL, " ", &save)) {
        char *colon = strchr(word, ':');
        assert_non_null(colon);
        assert_true(*n < 8);
        *colon = '\0';
        w[*n].service_id = strdup(word);
        w[*n].priority = atoi(colon + 1);
        (*n)++;
    }
    return w;
}

/* Drains the backlog and compares the order it starts them in with `want`
 * (ids separated by spaces). */
static void assert_order(struct qw_backlog *b, const char *want)
{
    char got[128] = "";
    const char *next;
    while ((next = qw_backlog_next(b)) != NULL)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", got[0] ? " " : "", next);
    assert_string_equal(got, want);
    assert_int_equal(qw_backlog_waiting(b), 0);
}

static void test_empty(void **state)
{
    (void)state;
    struct qw_backlog b;
    qw_backlog_init(&b);
    assert_int_equal(qw_backlog_waiting(&b), 0);
    assert_null(qw_backlog_next(&b));
    size_t n;
    struct qw_waiting *none = list("", &n);
    assert_int_equal(qw_backlog_add(&b, none, n), QW_OK);
    assert_int_equal(qw_backlog_waiting(&b), 0);
    qw_backlog_free(&b);
}

/* One case of adding a partial fetch's overflow to a backlog: lists of
 * "id:priority" in priority order, and the order they start in after. */
static const struct add_case {
    const char *name;
    const char *had;   /* the backlog */
    size_t started;    /* entries started before the add */
    const char *added; /* the overflow added */
    const char *want;  /* the ids in the order they start */
} add_cases[] = {
    {"equal priorities queue behind those waiting", "a:0 b:0", 0, "c:0 d:0", "a b c d"},
    {"a higher priority goes ahead of every lower one", "a:0 b:0 c:0", 0, "x:10", "x a b c"},
    {"behind those waiting at its priority", "a:10 b:0 c:0", 0, "x:10", "a x b c"},
    {"a lower priority goes last", "a:5 b:5", 0, "x:1", "a b x"},
    {"a mixed overflow merged, each by its priority", "a:9 b:5 c:1", 0, "x:9 y:3 z:0",
     "a x b y c z"},
    {"entries already started are dropped", "a:0 b:0 c:0 d:0", 3, "x:1", "x d"},
    {"an add to a drained backlog", "a:0", 1, "x:3 y:2", "x y"},
};

static void test_add_keeps_priority_order(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(add_cases) / sizeof(add_cases[0]); c++) {
        const struct add_case *k = &add_cases[c];
        print_message("%s\n", k->name);
        struct qw_backlog b;
        qw_backlog_init(&b);
        size_t n;
        struct qw_waiting *had = list(k->had, &n);
        qw_backlog_replace(&b, had, n);
        for (size_t i = 0; i < k->started; i++)
            assert_non_null(qw_backlog_next(&b));
        struct qw_waiting *added = list(k->added, &n);
        assert_int_equal(qw_backlog_add(&b, added, n), QW_OK);
        assert_order(&b, k->want);
        qw_backlog_free(&b);
    }
}

/* A full fetch's overflow replaces whatever waited. */
static void test_replace_drops_what_waited(void **state)
{
    (void)state;
    struct qw_backlog b;
    qw_backlog_init(&b);
    size_t n;
    struct qw_waiting *had = list("a:0 b:0", &n);
    qw_backlog_replace(&b, had, n);
    assert_non_null(qw_backlog_next(&b));
    struct qw_waiting *now = list("c:2 b:0", &n);
    qw_backlog_replace(&b, now, n);
    assert_order(&b, "c b");
    qw_backlog_replace(&b, NULL, 0);
    assert_int_equal(qw_backlog_waiting(&b), 0);
    qw_backlog_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_add_keeps_priority_order),
        cmocka_unit_test(test_replace_drops_what_waited),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
