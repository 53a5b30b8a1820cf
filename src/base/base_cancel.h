/*
 * base_cancel: a cancellation flag that one thread sets and another polls. Long file work (a
 * whole-file hash, a tree walk, a patch's preflight) runs on a pool thread (base_pool.h) and
 * checks the flag between bounded slices of work; the loop thread sets it (time limit, shutdown).
 *
 * Trust: none involved. Entry points: cs_cancel_set, cs_cancel_requested (both accept NULL: "never
 * cancelled", what single-threaded callers and the unit tests pass).
 */
#ifndef CS_BASE_CANCEL_H
#define CS_BASE_CANCEL_H

#include <stdatomic.h>
#include <stdbool.h>

struct cs_cancel {
    atomic_bool set;
};

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
    return c && atomic_load_explicit(&c->set, memory_order_relaxed);
}

#endif
