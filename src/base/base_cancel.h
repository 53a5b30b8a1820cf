/*
 * base_cancel: a cancellation flag that one thread sets and another polls. Long file work (a
 * whole-file hash, a tree walk, a patch's preflight) runs on a pool thread (base_pool.h) and
 * checks the flag between bounded slices of work; the loop thread sets it (time limit, shutdown).
 *
 * A flag may also carry a deadline, past which it reads as set: the executor runs a small file
 * call on the loop thread itself under a deadline of a millisecond, and hands it to a pool thread
 * only when that runs out (runner_exec.c).
 *
 * Trust: none involved. Entry points: cs_cancel_set, cs_cancel_requested (both accept NULL: "never
 * cancelled", what single-threaded callers and the unit tests pass), cs_cancel_now_ns.
 */
#ifndef CS_BASE_CANCEL_H
#define CS_BASE_CANCEL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>

struct cs_cancel {
    atomic_bool set;
    /* CLOCK_MONOTONIC nanoseconds past which the flag reads as set; 0: none. Written before the
     * work starts, never while it runs: a bound for work run on the loop thread itself. */
    int64_t deadline_ns;
};

/* CLOCK_MONOTONIC now, in nanoseconds (a vDSO call: cheap enough to poll per slice). */
static inline int64_t cs_cancel_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Asks the work polling c to stop at its next safe point. Any thread. */
static inline void cs_cancel_set(struct cs_cancel *c)
{
    if (c)
        atomic_store_explicit(&c->set, true, memory_order_relaxed);
}

/* Whether stopping was asked. Relaxed: the flag orders nothing else, and the work's results are
 * handed back through the pool's mutex. */
static inline bool cs_cancel_requested(const struct cs_cancel *c)
{
    return c && (atomic_load_explicit(&c->set, memory_order_relaxed) ||
                 (c->deadline_ns && cs_cancel_now_ns() >= c->deadline_ns));
}

/* Lets another runnable thread go first between slices of long work on a pool thread (a small
 * call never waits behind a big hash's time slice); a flag with a deadline is work running on
 * the loop thread itself, which has no one to make way for. */
static inline void cs_cancel_yield(const struct cs_cancel *c)
{
    if (!c || !c->deadline_ns)
        (void)sched_yield();
}

#endif
