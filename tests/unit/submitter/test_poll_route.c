/*
 * Unit tests of where a batch's status read goes (qw_nodes_poll_route() in
 * src/submitter/nodes.c), table-driven over the POST's node, the nodes up,
 * the service's route, the node that failed the last request and the nodes
 * that answered Unknown since. No network.
 */
#include "submitter/nodes.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdint.h>

#define N(i) (UINT32_C(1) << (i)) /* the mask of node i */

static void test_poll_route_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        struct qw_poll_route_in in;
        uint32_t want_mask;
        bool want_forget;
    } rows[] = {
        {"POST node up, never failed: only it",
         {.n = 3, .up = 07, .route = 07, .post_node = 1, .avoid = -1},
         N(1),
         false},
        {"POST node up, another node failed the last request: only it",
         {.n = 3, .up = 07, .route = 07, .post_node = 1, .avoid = 0, .post_failures = 0},
         N(1),
         false},
        {"POST node failed the last request and answered since: only it",
         {.n = 3, .up = 07, .route = 07, .post_node = 1, .avoid = 1, .post_failures = 0},
         N(1),
         false},
        {"POST node failed the last request: the others",
         {.n = 3, .up = 07, .route = 07, .post_node = 1, .avoid = 1, .post_failures = 1},
         N(0) | N(2),
         false},
        {"POST node failed the last request: the others but those that answered Unknown",
         {.n = 3,
          .up = 07,
          .route = 07,
          .post_node = 1,
          .avoid = 1,
          .post_failures = 2,
          .unknown_elsewhere = N(0)},
         N(2),
         false},
        {"POST node failed, every other answered Unknown: the POST node again",
         {.n = 3,
          .up = 07,
          .route = 07,
          .post_node = 1,
          .avoid = 1,
          .post_failures = 1,
          .unknown_elsewhere = N(0) | N(2)},
         N(1),
         true},
        {"POST node failed, the other left is down: the POST node again",
         {.n = 3,
          .up = N(0) | N(1),
          .route = 07,
          .post_node = 1,
          .avoid = 1,
          .post_failures = 1,
          .unknown_elsewhere = N(0)},
         N(1),
         true},
        {"POST node down: the others",
         {.n = 3, .up = N(0) | N(2), .route = 07, .post_node = 1, .avoid = -1},
         N(0) | N(2),
         false},
        {"POST node down: the others but the one that failed the last request",
         {.n = 3, .up = N(0) | N(2), .route = 07, .post_node = 1, .avoid = 0},
         N(2),
         false},
        {"POST node down: the others but those that answered Unknown",
         {.n = 3,
          .up = N(0) | N(2),
          .route = 07,
          .post_node = 1,
          .avoid = -1,
          .unknown_elsewhere = N(2)},
         N(0),
         false},
        {"POST node down, every other answered Unknown: the whole route",
         {.n = 3,
          .up = N(0) | N(2),
          .route = 07,
          .post_node = 1,
          .avoid = -1,
          .unknown_elsewhere = N(0) | N(2)},
         07,
         true},
        {"POST node down, the others failed or answered Unknown: the whole route",
         {.n = 3,
          .up = N(0) | N(2),
          .route = 07,
          .post_node = 1,
          .avoid = 2,
          .unknown_elsewhere = N(0)},
         07,
         true},
        {"no POST node: the route",
         {.n = 3, .up = 07, .route = 07, .post_node = -1, .avoid = -1},
         07,
         false},
        {"no POST node: the route but the node that failed and those that answered Unknown",
         {.n = 4, .up = 017, .route = 017, .post_node = -1, .avoid = 0, .unknown_elsewhere = N(3)},
         N(1) | N(2),
         false},
        {"no POST node, every node ruled out: the whole route",
         {.n = 2, .up = 03, .route = 03, .post_node = -1, .avoid = 0, .unknown_elsewhere = N(1)},
         03,
         true},
        {"POST node out of range counts as none",
         {.n = 2, .up = 03, .route = 03, .post_node = 5, .avoid = -1},
         03,
         false},
        {"nodes outside the route are not asked",
         {.n = 4,
          .up = 017,
          .route = N(0) | N(1) | N(3),
          .post_node = 1,
          .avoid = 1,
          .post_failures = 1},
         N(0) | N(3),
         false},
        {"an up node outside the route does not keep the others open",
         {.n = 3,
          .up = 07,
          .route = N(0) | N(1),
          .post_node = 1,
          .avoid = 1,
          .post_failures = 1,
          .unknown_elsewhere = N(0)},
         N(1),
         true},
        {"no node up: the whole route",
         {.n = 3, .up = 0, .route = 07, .post_node = 1, .avoid = -1},
         07,
         true},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct qw_poll_route got = qw_nodes_poll_route(&rows[i].in);
        if (got.mask != rows[i].want_mask || got.forget_unknown != rows[i].want_forget)
            fail_msg("row %zu (%s): mask %#x forget %d, want mask %#x forget %d", i, rows[i].name,
                     (unsigned)got.mask, got.forget_unknown, (unsigned)rows[i].want_mask,
                     rows[i].want_forget);
    }
}

static void test_up_mask(void **state)
{
    (void)state;
    struct qw_nodes set;
    qw_nodes_init(&set, 3, &(struct qw_nodes_policy){.channels = 1}, 0);
    assert_int_equal(qw_nodes_up_mask(&set), 07);
    set.node[1].state = QW_NODE_SUSPECT;
    set.node[2].state = QW_NODE_DOWN;
    assert_int_equal(qw_nodes_up_mask(&set), N(0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_poll_route_table),
        cmocka_unit_test(test_up_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
