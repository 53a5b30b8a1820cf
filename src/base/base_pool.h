/*
 * base_pool: a small fixed pool of threads for blocking work the loop must not wait for (a
 * whole-file hash, a tree walk, a patch's reads and fsyncs). The loop thread submits a job; a pool
 * thread runs its work function; the completion comes back through an eventfd the loop watches,
 * and the job's done function runs on the loop thread. State therefore keeps one owner: a work
 * function touches only what its job owns (inputs copied at submission, outputs the done function
 * reads afterwards) and the job's cancel flag; everything else, the loop's.
 *
 * Trust: no peer data passes through here; the work functions decide what they trust.
 * Entry points: cs_pool_new/free, cs_pool_submit, cs_pool_cancel, cs_pool_pending. Every one of
 * them is called on the loop thread.
 *
 * Threads start with every signal blocked (the loop takes signals through signalfd, and a signal
 * must never interrupt a pool thread's system call) and are joined by cs_pool_free.
 */
#ifndef CS_BASE_POOL_H
#define CS_BASE_POOL_H

#include <stddef.h>

#include "base_cancel.h"

/* The nice value of the pool threads: below the loop thread's. */
#define CS_POOL_NICE 5
#include "base_loop.h"

struct cs_pool;
struct cs_pool_job;

/* Runs on a pool thread. cancel is the job's flag (set by cs_pool_cancel or cs_pool_free): poll it
 * between bounded slices of work and stop at the next safe point. */
typedef void (*cs_pool_work_fn)(void *arg, const struct cs_cancel *cancel);
/* Runs on the loop thread once work has returned (never before, never concurrently with it).
 * The job is gone when it returns. */
typedef void (*cs_pool_done_fn)(void *arg);

/* Default threads: one huge read does not hold up another workspace's small one. */
#define CS_POOL_THREADS 4

/* Starts threads (1..64) on loop. Returns the pool, or NULL (errno set; no thread left running). */
struct cs_pool *cs_pool_new(struct cs_loop *loop, unsigned threads);
/* Cancels every job, lets the threads finish what they run and run every queued job's work (each
 * sees its flag set), joins them, then calls every job's done that has not run, in completion
 * order, on the calling thread. Accepts NULL. */
void cs_pool_free(struct cs_pool *p);

/* Queues work(arg) and, after it, done(arg) on the loop. Returns the job (valid until its done
 * returns), or NULL when out of memory or while the pool is being freed: then nothing runs. */
struct cs_pool_job *cs_pool_submit(struct cs_pool *p, cs_pool_work_fn work, cs_pool_done_fn done,
                                   void *arg);
/* Sets j's cancel flag. done is still called, once work has returned. */
void cs_pool_cancel(struct cs_pool_job *j);
/* Jobs submitted whose done has not run yet. */
size_t cs_pool_pending(const struct cs_pool *p);

#endif
