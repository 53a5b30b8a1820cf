/*
 * Unit tests of base_pool (the file-work thread pool, src/base/base_pool.c) on a real loop:
 *
 * - every job's work runs on a pool thread and its done exactly once on the loop thread, after
 *   the work;
 * - the loop keeps turning (a 10 ms timer fires on time) while every thread is busy;
 * - cs_pool_cancel reaches a running job, whose done still comes afterwards;
 * - cs_pool_free cancels a running job, runs a queued job's work with its flag already set, joins,
 *   and calls both dones; a submit from a done during free is refused;
 * - pool threads run with every signal blocked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "base_loop.h"
#include "base_pool.h"

static pthread_t loop_thread;

struct job {
    struct cs_pool *pool;
    struct cs_loop *loop;
    atomic_int work_runs;
    atomic_bool started;
    int done_runs;
    bool work_on_loop_thread;
    bool done_on_loop_thread;
    bool done_after_work;
    bool saw_cancel_at_start;
    bool saw_cancel;
    bool signals_blocked;
    int spin_ms;         /* work: busy this long, or until cancelled when < 0 */
    size_t *remaining;   /* done: decrements, stops the loop at 0 */
    bool submit_in_done; /* done: tries a submit */
    bool submit_refused;
};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void work(void *arg, const struct cs_cancel *cancel)
{
    struct job *j = arg;
    atomic_store(&j->started, true);
    j->work_on_loop_thread = pthread_equal(pthread_self(), loop_thread);
    j->saw_cancel_at_start = cs_cancel_requested(cancel);
    sigset_t cur;
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    j->signals_blocked = sigismember(&cur, SIGTERM) && sigismember(&cur, SIGINT) &&
                         sigismember(&cur, SIGCHLD) && sigismember(&cur, SIGUSR1);
    int64_t until = cs_loop_now_ms() + (j->spin_ms > 0 ? j->spin_ms : 0);
    while (j->spin_ms < 0 ? !cs_cancel_requested(cancel) : cs_loop_now_ms() < until)
        sleep_ms(1);
    j->saw_cancel = cs_cancel_requested(cancel);
    atomic_fetch_add(&j->work_runs, 1);
}

static void nop_work(void *arg, const struct cs_cancel *cancel)
{
    (void)arg;
    (void)cancel;
}

static void nop_done(void *arg)
{
    (void)arg;
}

static void done(void *arg)
{
    struct job *j = arg;
    j->done_runs++;
    j->done_on_loop_thread = pthread_equal(pthread_self(), loop_thread);
    j->done_after_work = atomic_load(&j->work_runs) == 1;
    if (j->submit_in_done)
        j->submit_refused = cs_pool_submit(j->pool, nop_work, nop_done, NULL) == NULL;
    if (j->remaining && --*j->remaining == 0)
        cs_loop_stop(j->loop);
}

static void stop_loop(void *arg)
{
    cs_loop_stop(arg);
}

static void test_jobs_complete_on_loop_thread(void **state)
{
    (void)state;
    loop_thread = pthread_self();
    struct cs_loop *loop = cs_loop_new();
    assert_non_null(loop);
    struct cs_pool *pool = cs_pool_new(loop, CS_POOL_THREADS);
    assert_non_null(pool);
    enum { N = 40 };
    static struct job jobs[N];
    size_t remaining = N;
    for (size_t i = 0; i < N; i++) {
        jobs[i] = (struct job){
            .pool = pool, .loop = loop, .spin_ms = (int)(i % 3), .remaining = &remaining};
        assert_non_null(cs_pool_submit(pool, work, done, &jobs[i]));
    }
    assert_int_equal(cs_pool_pending(pool), N);
    struct cs_loop_timer *guard = cs_loop_timer_add(loop, 10000, stop_loop, loop);
    assert_int_equal(cs_loop_run(loop), 0);
    cs_loop_timer_cancel(guard);
    assert_int_equal(remaining, 0);
    assert_int_equal(cs_pool_pending(pool), 0);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(atomic_load(&jobs[i].work_runs), 1);
        assert_int_equal(jobs[i].done_runs, 1);
        assert_false(jobs[i].work_on_loop_thread);
        assert_true(jobs[i].done_on_loop_thread);
        assert_true(jobs[i].done_after_work);
        assert_false(jobs[i].saw_cancel);
        assert_true(jobs[i].signals_blocked);
    }
    cs_pool_free(pool);
    cs_loop_free(loop);
}

/* A 10 ms timer, re-armed while every thread is busy: each firing's lateness is recorded. */
struct ticker {
    struct cs_loop *loop;
    int64_t due;
    int64_t worst_late;
    int ticks;
};

static void tick(void *arg)
{
    struct ticker *t = arg;
    int64_t late = cs_loop_now_ms() - t->due;
    if (late > t->worst_late)
        t->worst_late = late;
    if (++t->ticks == 20)
        return;
    t->due = cs_loop_now_ms() + 10;
    assert_non_null(cs_loop_timer_add(t->loop, 10, tick, t));
}

static void cancel_job(void *arg)
{
    cs_pool_cancel(arg);
}

static void test_loop_turns_while_busy_and_cancel(void **state)
{
    (void)state;
    loop_thread = pthread_self();
    struct cs_loop *loop = cs_loop_new();
    struct cs_pool *pool = cs_pool_new(loop, 2);
    assert_non_null(pool);
    size_t remaining = 2;
    struct job busy = {.pool = pool, .loop = loop, .spin_ms = 400, .remaining = &remaining};
    struct job until_cancel = {.pool = pool, .loop = loop, .spin_ms = -1, .remaining = &remaining};
    assert_non_null(cs_pool_submit(pool, work, done, &busy));
    struct cs_pool_job *cj = cs_pool_submit(pool, work, done, &until_cancel);
    assert_non_null(cj);
    struct ticker t = {.loop = loop, .due = cs_loop_now_ms() + 10};
    assert_non_null(cs_loop_timer_add(loop, 10, tick, &t));
    assert_non_null(cs_loop_timer_add(loop, 300, cancel_job, cj));
    struct cs_loop_timer *guard = cs_loop_timer_add(loop, 10000, stop_loop, loop);
    int64_t t0 = cs_loop_now_ms();
    assert_int_equal(cs_loop_run(loop), 0);
    cs_loop_timer_cancel(guard);
    assert_int_equal(remaining, 0);
    assert_true(cs_loop_now_ms() - t0 < 5000);
    assert_int_equal(t.ticks, 20);
    assert_true(t.worst_late < 50);
    assert_true(until_cancel.saw_cancel);
    assert_false(until_cancel.saw_cancel_at_start);
    assert_int_equal(until_cancel.done_runs, 1);
    assert_true(until_cancel.done_after_work);
    assert_false(busy.saw_cancel);
    cs_pool_free(pool);
    cs_loop_free(loop);
}

static void test_free_cancels_running_and_queued(void **state)
{
    (void)state;
    loop_thread = pthread_self();
    struct cs_loop *loop = cs_loop_new();
    struct cs_pool *pool = cs_pool_new(loop, 1);
    assert_non_null(pool);
    struct job running = {.pool = pool, .loop = loop, .spin_ms = -1, .submit_in_done = true};
    struct job queued = {.pool = pool, .loop = loop, .spin_ms = 0};
    assert_non_null(cs_pool_submit(pool, work, done, &running));
    assert_non_null(cs_pool_submit(pool, work, done, &queued));
    /* Let the one thread pick up the first job. */
    for (int i = 0; i < 1000 && !atomic_load(&running.started); i++)
        sleep_ms(1);
    cs_pool_free(pool);
    assert_int_equal(atomic_load(&running.work_runs), 1);
    assert_true(running.saw_cancel);
    assert_int_equal(running.done_runs, 1);
    assert_true(running.done_on_loop_thread);
    assert_true(running.submit_refused);
    assert_int_equal(atomic_load(&queued.work_runs), 1);
    assert_true(queued.saw_cancel_at_start);
    assert_int_equal(queued.done_runs, 1);
    assert_true(queued.done_after_work);
    cs_loop_free(loop);
}

/* A flag's deadline: none (0) never fires, a past one reads as set, a future one not yet; set()
 * still wins either way (runner_exec.c runs small file calls on the loop under one). */
static void test_cancel_deadline(void **state)
{
    (void)state;
    struct cs_cancel c = {.deadline_ns = 0};
    atomic_init(&c.set, false);
    assert_false(cs_cancel_requested(&c));
    c.deadline_ns = cs_cancel_now_ns() - 1;
    assert_true(cs_cancel_requested(&c));
    c.deadline_ns = cs_cancel_now_ns() + (int64_t)60 * 1000000000;
    assert_false(cs_cancel_requested(&c));
    cs_cancel_set(&c);
    assert_true(cs_cancel_requested(&c));
    assert_false(cs_cancel_requested(NULL));
}

static void test_bad_thread_counts(void **state)
{
    (void)state;
    struct cs_loop *loop = cs_loop_new();
    assert_null(cs_pool_new(loop, 0));
    assert_null(cs_pool_new(loop, 65));
    cs_pool_free(NULL);
    /* A pool nobody used frees cleanly. */
    cs_pool_free(cs_pool_new(loop, 3));
    cs_loop_free(loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jobs_complete_on_loop_thread),
        cmocka_unit_test(test_loop_turns_while_busy_and_cancel),
        cmocka_unit_test(test_free_cancels_running_and_queued),
        cmocka_unit_test(test_cancel_deadline),
        cmocka_unit_test(test_bad_thread_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
