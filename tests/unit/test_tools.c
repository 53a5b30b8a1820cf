/*
 * test_tools: the workspace lease's state machine (tools_lease.c) driven through fake hooks:
 * acquire, the FIFO and its cap (the 65th waiter gets RESOURCE_QUEUE_FULL), release in order,
 * release from inside a completion (re-entrancy), a live process refusing the queue and new
 * mutations, a killed process letting them queue again, and unqueue (a queued mutation whose
 * client cancelled it leaves the queue, wherever it sits in the ring, and the later waiters keep
 * their order: docs/contract/tools.md section 2, issue #16).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "csw.h"
#include "tools_lease.h"
#include "tools_progress.h"

/* Fake calls: the lease only compares and hands back pointers. */
static char calls[512];
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

/* ---- the state machine through fake hooks ---- */

enum how {
    HOLD,     /* the granted mutation keeps the lease (it runs on) */
    COMPLETE, /* it completes at once: releases the lease inside the grant */
    GO_LIVE,  /* it is an exec_command whose process goes live at once */
};

/* What the hooks saw, in order. */
static struct {
    size_t granted[512], n_granted;
    size_t refused[512], n_refused;
    int depth, max_depth; /* grants nested inside grants */
} seen;

static size_t index_of(const struct cs_mcp_call *call)
{
    return (size_t)((const char *)(const void *)call - calls);
}

/* Each fake waiter's input says what its run does. */
static const enum how how_hold = HOLD, how_complete = COMPLETE, how_live = GO_LIVE;

static void fake_run(struct cs_tools *t, const struct cs_workspace *ws, struct cs_mcp_call *call,
                     const void *input)
{
    (void)t;
    (void)ws;
    (void)call;
    (void)input;
    fail_msg("the lease must run a waiter through hooks->grant, never directly");
}

static void fake_grant(struct cs_tools_lease *l, struct cs_mcp_call *call, const void *input,
                       cs_tools_locked_fn run)
{
    assert_ptr_equal(run, fake_run);
    assert_int_equal(l->state, CS_TOOLS_LEASE_HELD); /* held for this waiter already */
    seen.granted[seen.n_granted++] = index_of(call);
    seen.depth++;
    if (seen.depth > seen.max_depth)
        seen.max_depth = seen.depth;
    switch (*(const enum how *)input) {
    case HOLD:
        break;
    case COMPLETE:
        cs__tools_lease_release(l);
        break;
    case GO_LIVE:
        cs__tools_lease_go_live(l, "proc-from-queue");
        break;
    }
    seen.depth--;
}

static void fake_busy(struct cs_tools_lease *l, struct cs_mcp_call *call)
{
    (void)l;
    seen.refused[seen.n_refused++] = index_of(call);
}

static const struct cs_tools_lease_hooks hooks = {fake_grant, fake_busy};

static void fresh(struct cs_tools_lease *l)
{
    memset(l, 0, sizeof *l);
    memset(&seen, 0, sizeof seen);
    l->hooks = &hooks;
}

static int acquire(struct cs_tools_lease *l, size_t i, const enum how *how)
{
    return cs__tools_lease_acquire(l, CALL(i), how, fake_run);
}

static void test_free_then_fifo_then_full(void **state)
{
    (void)state;
    struct cs_tools_lease l;
    fresh(&l);
    const size_t cap = CS_TOOLS_LEASE_MAX_WAITERS;
    assert_int_equal(cap, 64);                      /* docs/contract/runtime.md §5 */
    assert_int_equal(acquire(&l, 0, &how_hold), 0); /* free: taken at once, nothing queued */
    assert_int_equal(l.state, CS_TOOLS_LEASE_HELD);
    assert_int_equal(l.n_wait, 0);
    for (size_t i = 1; i <= cap; i++)
        assert_int_equal(acquire(&l, i, &how_hold), 1);
    assert_int_equal(l.n_wait, cap);
    /* The 65th waiter is refused and not queued; the queue is as it was. */
    assert_int_equal(acquire(&l, cap + 1, &how_hold), CSW_ERROR_RESOURCE_QUEUE_FULL);
    assert_int_equal(acquire(&l, cap + 2, &how_hold), CSW_ERROR_RESOURCE_QUEUE_FULL);
    assert_int_equal(l.n_wait, cap);
    assert_false(cs__tools_lease_unqueue(&l, CALL(cap + 1)));
    assert_int_equal(seen.n_granted, 0);
    assert_int_equal(seen.n_refused, 0); /* refusing is the caller's answer, not a hook's */
    /* Each release hands the lease to the next in arrival order. */
    for (size_t i = 1; i <= cap; i++) {
        cs__tools_lease_release(&l);
        assert_int_equal(seen.n_granted, i);
        assert_int_equal(seen.granted[i - 1], i);
        assert_int_equal(l.state, CS_TOOLS_LEASE_HELD);
        assert_int_equal(l.n_wait, cap - i + (i > 1)); /* 100 joined after the first */
        if (i == 1) /* a slot is free again: a new waiter goes to the back */
            assert_int_equal(acquire(&l, 100, &how_hold), 1);
    }
    assert_int_equal(l.n_wait, 1);
    cs__tools_lease_release(&l);
    assert_int_equal(seen.granted[cap], 100);
    cs__tools_lease_release(&l); /* the last holder finishes: free */
    assert_int_equal(l.state, CS_TOOLS_LEASE_FREE);
    assert_int_equal(seen.n_granted, cap + 1);
    assert_int_equal(seen.max_depth, 1);
}

static void test_fifo_across_the_ring(void **state)
{
    (void)state;
    struct cs_tools_lease l;
    fresh(&l);
    /* 300 waiters pass through a ring of 64 slots, never more than 40 queued: the head wraps
     * several times and the order holds. */
    assert_int_equal(acquire(&l, 0, &how_hold), 0);
    size_t next = 1, want = 1;
    while (want < 300) {
        while (l.n_wait < 40 && next < 300)
            assert_int_equal(acquire(&l, next++, &how_hold), 1);
        cs__tools_lease_release(&l);
        assert_int_equal(seen.granted[seen.n_granted - 1], want);
        want++;
    }
    assert_int_equal(seen.n_granted, 299);
    assert_int_equal(l.n_wait, 0);
    cs__tools_lease_release(&l);
    assert_int_equal(l.state, CS_TOOLS_LEASE_FREE);
}

static void test_release_from_completion(void **state)
{
    (void)state;
    struct cs_tools_lease l;
    fresh(&l);
    assert_int_equal(acquire(&l, 0, &how_hold), 0);
    /* Waiters 1..3 complete inside their grant (they release from their completion callback),
     * 4 runs on, 5 and 6 wait behind it. */
    for (size_t i = 1; i <= 3; i++)
        assert_int_equal(acquire(&l, i, &how_complete), 1);
    assert_int_equal(acquire(&l, 4, &how_hold), 1);
    assert_int_equal(acquire(&l, 5, &how_complete), 1);
    assert_int_equal(acquire(&l, 6, &how_complete), 1);
    cs__tools_lease_release(&l);
    /* One loop handed it on: no grant ran inside another (the inner release only frees it). */
    assert_int_equal(seen.n_granted, 4);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(seen.granted[i], i + 1);
    assert_int_equal(seen.max_depth, 1);
    assert_int_equal(l.state, CS_TOOLS_LEASE_HELD); /* by 4 */
    assert_false(l.draining);
    expect(&l, (const size_t[]){5, 6}, 2);
    /* 4 ends: 5 and 6 complete at once; the lease ends free. */
    cs__tools_lease_release(&l);
    assert_int_equal(seen.n_granted, 6);
    assert_int_equal(seen.granted[4], 5);
    assert_int_equal(seen.granted[5], 6);
    assert_int_equal(l.state, CS_TOOLS_LEASE_FREE);
    assert_int_equal(l.n_wait, 0);
    assert_false(l.draining);
    assert_int_equal(seen.n_refused, 0);
}

static void test_live_process_refuses_the_queue(void **state)
{
    (void)state;
    struct cs_tools_lease l;
    fresh(&l);
    assert_int_equal(acquire(&l, 0, &how_hold), 0); /* an exec_command being spawned */
    for (size_t i = 1; i <= 3; i++)
        assert_int_equal(acquire(&l, i, &how_hold), 1);
    cs__tools_lease_go_live(&l, "proc-1");
    /* Its process is confirmed: every waiter fails WORKSPACE_BUSY, in order. */
    assert_int_equal(l.state, CS_TOOLS_LEASE_LIVE);
    assert_string_equal(l.process_id, "proc-1");
    assert_int_equal(l.n_wait, 0);
    assert_int_equal(seen.n_refused, 3);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(seen.refused[i], i + 1);
    assert_int_equal(seen.n_granted, 0);
    /* New mutations are refused at once, not queued. */
    assert_int_equal(acquire(&l, 4, &how_hold), CSW_ERROR_WORKSPACE_BUSY);
    assert_int_equal(l.n_wait, 0);
    assert_true(cs__tools_lease_holds(&l, "proc-1"));
    assert_true(cs__tools_lease_holds(&l, NULL));
    assert_false(cs__tools_lease_holds(&l, "proc-2"));
    /* Another process's exit or kill does not touch it. */
    cs__tools_lease_kill(&l, "proc-2");
    assert_int_equal(l.state, CS_TOOLS_LEASE_LIVE);
    assert_false(l.killing);
    /* Its exit frees it; the next mutation takes it at once. */
    cs__tools_lease_release(&l);
    assert_int_equal(l.state, CS_TOOLS_LEASE_FREE);
    assert_string_equal(l.process_id, "");
    assert_false(cs__tools_lease_holds(&l, NULL));
    assert_int_equal(acquire(&l, 5, &how_hold), 0);
}

static void test_queued_exec_goes_live(void **state)
{
    (void)state;
    struct cs_tools_lease l;
    fresh(&l);
    assert_int_equal(acquire(&l, 0, &how_hold), 0);
    assert_int_equal(acquire(&l, 1, &how_complete), 1);
    assert_int_equal(acquire(&l, 2, &how_live), 1); /* an exec_command from the queue */
    assert_int_equal(acquire(&l, 3, &how_hold), 1);
    assert_int_equal(acquire(&l, 4, &how_complete), 1);
    cs__tools_lease_release(&l);
    /* 1 ran and completed, 2 started a process: 3 and 4 fail WORKSPACE_BUSY, never run. */
    assert_int_equal(seen.n_granted, 2);
    assert_int_equal(seen.granted[0], 1);
    assert_int_equal(seen.granted[1], 2);
    assert_int_equal(seen.n_refused, 2);
    assert_int_equal(seen.refused[0], 3);
    assert_int_equal(seen.refused[1], 4);
    assert_int_equal(l.state, CS_TOOLS_LEASE_LIVE);
    assert_true(cs__tools_lease_holds(&l, "proc-from-queue"));
    assert_false(l.draining);
}

static void test_killed_process_lets_mutations_queue(void **state)
{
    (void)state;
    struct cs_tools_lease l;
    fresh(&l);
    assert_int_equal(acquire(&l, 0, &how_hold), 0);
    cs__tools_lease_go_live(&l, "proc-1");
    assert_int_equal(acquire(&l, 1, &how_hold), CSW_ERROR_WORKSPACE_BUSY);
    /* Its client cancelled the exec_command: the kill holds the lease like a mutation. */
    cs__tools_lease_kill(&l, "proc-1");
    assert_int_equal(l.state, CS_TOOLS_LEASE_HELD);
    assert_true(l.killing);
    assert_true(cs__tools_lease_holds(&l, "proc-1"));
    assert_int_equal(acquire(&l, 2, &how_hold), 1);
    assert_int_equal(acquire(&l, 3, &how_hold), 1);
    /* A second kill of the same process changes nothing. */
    cs__tools_lease_kill(&l, "proc-1");
    assert_int_equal(l.state, CS_TOOLS_LEASE_HELD);
    /* The process has exited: the waiters get the lease in order. */
    cs__tools_lease_release(&l);
    assert_false(l.killing);
    assert_false(cs__tools_lease_holds(&l, NULL));
    assert_int_equal(seen.n_granted, 1);
    assert_int_equal(seen.granted[0], 2);
    assert_int_equal(seen.n_refused, 0);
    expect(&l, (const size_t[]){3}, 1);
}

static void test_unqueue_reopens_a_full_queue(void **state)
{
    (void)state;
    struct cs_tools_lease l;
    fresh(&l);
    const size_t cap = CS_TOOLS_LEASE_MAX_WAITERS;
    assert_int_equal(acquire(&l, 0, &how_hold), 0);
    for (size_t i = 1; i <= cap; i++)
        assert_int_equal(acquire(&l, i, &how_hold), 1);
    assert_int_equal(acquire(&l, 200, &how_hold), CSW_ERROR_RESOURCE_QUEUE_FULL);
    assert_true(cs__tools_lease_unqueue(&l, CALL(7))); /* its client cancelled it */
    assert_int_equal(acquire(&l, 200, &how_hold), 1);
    assert_int_equal(acquire(&l, 201, &how_hold), CSW_ERROR_RESOURCE_QUEUE_FULL);
    for (size_t i = 1; i <= cap; i++)
        cs__tools_lease_release(&l);
    assert_int_equal(seen.n_granted, cap);
    for (size_t i = 0, want = 1; i < cap; i++, want++) {
        if (want == 7)
            want++;
        assert_int_equal(seen.granted[i], want == cap + 1 ? 200 : want);
    }
}

/* ---- the progress message (tools_progress.c) ---- */

static size_t line_of(const char *chunk, char *out)
{
    return cs__tools_progress_line(chunk, strlen(chunk), out, CS_TOOLS_PROGRESS_MESSAGE_CAP);
}

static void test_progress_line(void **state)
{
    (void)state;
    char out[CS_TOOLS_PROGRESS_MESSAGE_CAP];
    assert_int_equal(line_of("line1\nline2\n", out), 5);
    assert_string_equal(out, "line2");
    /* An unterminated last line counts; blank lines and CR line ends do not. */
    assert_int_equal(line_of("a\nbuilding 3/7", out), 12);
    assert_string_equal(out, "building 3/7");
    line_of("done\n\n  \t\n\r\n", out);
    assert_string_equal(out, "done");
    line_of("10%\r20%\r", out);
    assert_string_equal(out, "20%");
    /* Control characters (C0, DEL, C1) are escaped; other UTF-8 passes. */
    line_of("\x1b[1mbold\x7f \xc2\x85 \xc3\xa9t\xc3\xa9\n", out);
    assert_string_equal(out, "\\x1B[1mbold\\x7F \\x85 \xc3\xa9t\xc3\xa9");
    /* Nothing but blanks: no message. */
    assert_int_equal(line_of("\n \n\t", out), 0);
    assert_string_equal(out, "");
    assert_int_equal(line_of("", out), 0);
    /* At most 200 code points, never half an escape nor half a character. */
    char long_line[1000];
    memset(long_line, 'x', 300);
    long_line[300] = '\0';
    assert_int_equal(line_of(long_line, out), 200);
    memset(long_line, 'x', 198);
    memcpy(long_line + 198, "\x01yz", 4);
    assert_int_equal(line_of(long_line, out), 198); /* \x01 would make 202 */
    for (int i = 0; i < 250; i++)
        memcpy(long_line + 2 * i, "\xc3\xa9", 2);
    long_line[500] = '\0';
    assert_int_equal(line_of(long_line, out), 400); /* 200 two-byte characters */
    /* A buffer too small is refused. */
    assert_int_equal(cs__tools_progress_line("x", 1, out, 10), 0);
}

/* processes "shared" (workflows.md section 3): live processes take places in a set of at most
 * max_live, never the lease; patches queue behind each other only; a process's exit frees its
 * place; the runner's loss empties the set. */
static void test_shared_workspace(void **state)
{
    (void)state;
    struct cs_tools_lease l;
    char live[3][48];
    fresh(&l);
    l.live = live;
    l.max_live = 3;
    assert_int_equal(cs__tools_lease_share(&l, "proc-a"), 0);
    assert_int_equal(cs__tools_lease_share(&l, "proc-b"), 0);
    /* a patch runs while processes live, the next one queues behind it */
    assert_int_equal(acquire(&l, 1, &how_hold), 0);
    assert_int_equal(acquire(&l, 2, &how_complete), 1);
    assert_int_equal(cs__tools_lease_share(&l, "proc-c"), 0);
    assert_int_equal(cs__tools_lease_share(&l, "proc-d"), CSW_ERROR_WORKSPACE_BUSY);
    assert_int_equal(l.n_live, 3);
    assert_int_equal(seen.n_refused, 0); /* no process refused a queued patch */
    assert_true(cs__tools_lease_holds(&l, "proc-b"));
    assert_true(cs__tools_lease_holds(&l, NULL));
    assert_false(cs__tools_lease_holds(&l, "proc-d"));
    /* the patch ends: the queued one runs (and completes) though processes live */
    cs__tools_lease_release(&l);
    assert_int_equal(seen.n_granted, 1);
    assert_int_equal(seen.granted[0], 2);
    assert_int_equal(l.state, CS_TOOLS_LEASE_FREE);
    /* an exit frees a place; an unknown id frees nothing */
    assert_true(cs__tools_lease_unshare(&l, "proc-a"));
    assert_false(cs__tools_lease_unshare(&l, "proc-a"));
    assert_false(cs__tools_lease_holds(&l, "proc-a"));
    assert_true(cs__tools_lease_holds(&l, "proc-c"));
    assert_int_equal(cs__tools_lease_share(&l, "proc-d"), 0);
    /* the runner is lost: every place frees, the lease is untouched */
    assert_int_equal(acquire(&l, 3, &how_hold), 0);
    cs__tools_lease_lost(&l);
    assert_int_equal(l.n_live, 0);
    assert_false(cs__tools_lease_holds(&l, NULL));
    assert_int_equal(l.state, CS_TOOLS_LEASE_HELD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unqueue_middle_first_last),
        cmocka_unit_test(test_unqueue_across_the_wrap),
        cmocka_unit_test(test_unqueue_full_queue),
        cmocka_unit_test(test_free_then_fifo_then_full),
        cmocka_unit_test(test_fifo_across_the_ring),
        cmocka_unit_test(test_release_from_completion),
        cmocka_unit_test(test_live_process_refuses_the_queue),
        cmocka_unit_test(test_queued_exec_goes_live),
        cmocka_unit_test(test_killed_process_lets_mutations_queue),
        cmocka_unit_test(test_unqueue_reopens_a_full_queue),
        cmocka_unit_test(test_progress_line),
        cmocka_unit_test(test_shared_workspace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
