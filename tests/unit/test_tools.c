/*
 * test_tools: the workspace lease's FIFO seam (tools.h, cs__tools_lease_unqueue): a queued
 * mutation whose client cancelled it leaves the queue, wherever it sits in the ring, and the
 * later waiters keep their order (docs/contract/tools.md section 2, issue #16).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "tools.h"

/* Fake calls: the FIFO only compares pointers. */
static char calls[CS_TOOLS_LEASE_MAX_WAITERS + 1];
#define CALL(i) ((struct cs_mcp_call *)(void *)&calls[i])

/* A lease whose FIFO holds calls first .. first + n - 1, its head at head. */
static void fill(struct cs_tools_lease *l, size_t head, size_t first, size_t n)
{
    memset(l, 0, sizeof *l);
    l->state = CS_TOOLS_LEASE_HELD;
    l->head = head;
    for (size_t i = 0; i < n; i++)
        l->wait[(head + i) % CS_TOOLS_LEASE_MAX_WAITERS].call = CALL(first + i);
    l->n_wait = n;
}

/* The queue, in order, equals want[0 .. n). */
static void expect(const struct cs_tools_lease *l, const size_t *want, size_t n)
{
    assert_int_equal(l->n_wait, n);
    for (size_t i = 0; i < n; i++)
        assert_ptr_equal(l->wait[(l->head + i) % CS_TOOLS_LEASE_MAX_WAITERS].call, CALL(want[i]));
}

static void test_unqueue_middle_first_last(void **state)
{
    (void)state;
    struct cs_tools_lease l;
    fill(&l, 0, 1, 5);
    assert_true(cs__tools_lease_unqueue(&l, CALL(3)));
    expect(&l, (const size_t[]){1, 2, 4, 5}, 4);
    assert_true(cs__tools_lease_unqueue(&l, CALL(1))); /* the next in line: 2 moves up */
    expect(&l, (const size_t[]){2, 4, 5}, 3);
    assert_true(cs__tools_lease_unqueue(&l, CALL(5)));
    expect(&l, (const size_t[]){2, 4}, 2);
    assert_false(cs__tools_lease_unqueue(&l, CALL(3))); /* gone already */
    assert_false(cs__tools_lease_unqueue(&l, CALL(9))); /* never queued */
    expect(&l, (const size_t[]){2, 4}, 2);
    assert_true(cs__tools_lease_unqueue(&l, CALL(2)));
    assert_true(cs__tools_lease_unqueue(&l, CALL(4)));
    assert_int_equal(l.n_wait, 0);
    assert_false(cs__tools_lease_unqueue(&l, CALL(4)));
    assert_int_equal(l.state, CS_TOOLS_LEASE_HELD); /* the holder is not touched */
}

static void test_unqueue_across_the_wrap(void **state)
{
    (void)state;
    struct cs_tools_lease l;
    const size_t cap = CS_TOOLS_LEASE_MAX_WAITERS;
    fill(&l, cap - 2, 10, 5); /* slots cap-2, cap-1, 0, 1, 2 */
    assert_true(cs__tools_lease_unqueue(&l, CALL(11)));
    expect(&l, (const size_t[]){10, 12, 13, 14}, 4);
    /* A slot freed at the tail takes a new waiter in order. */
    l.wait[(l.head + l.n_wait) % cap].call = CALL(15);
    l.n_wait++;
    expect(&l, (const size_t[]){10, 12, 13, 14, 15}, 5);
}

static void test_unqueue_full_queue(void **state)
{
    (void)state;
    struct cs_tools_lease l;
    const size_t cap = CS_TOOLS_LEASE_MAX_WAITERS;
    fill(&l, 17, 0, cap);
    assert_true(cs__tools_lease_unqueue(&l, CALL(cap / 2)));
    assert_int_equal(l.n_wait, cap - 1);
    for (size_t i = 0, k = 0; i < cap; i++) {
        if (i == cap / 2)
            continue;
        assert_ptr_equal(l.wait[(l.head + k) % cap].call, CALL(i));
        k++;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unqueue_middle_first_last),
        cmocka_unit_test(test_unqueue_across_the_wrap),
        cmocka_unit_test(test_unqueue_full_queue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
