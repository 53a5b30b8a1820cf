/*
 * base_loop: the single-threaded event loop every server part hangs on (epoll, with timerfd for
 * timers and signalfd for signals). Nothing here blocks except cs_loop_run's epoll_wait.
 *
 * Trust: the loop carries no peer data itself; callbacks do.
 * Entry points: cs_loop_new/free/run/stop, cs_loop_fd_* (readiness on a file descriptor),
 * cs_loop_timer_* (one-shot timers), cs_loop_signal (a signal delivered as a callback),
 * cs_loop_defer (run a callback on the next turn, outside the current call stack).
 *
 * Callbacks may add and remove fds, timers and deferred calls, including their own, at any
 * time; a removed watcher is never called again, even if its event is already pending.
 */
#ifndef CS_BASE_LOOP_H
#define CS_BASE_LOOP_H

#include <stdbool.h>
#include <stdint.h>

struct cs_loop;
struct cs_loop_fd;
struct cs_loop_timer;

/* Readiness bits for cs_loop_fd_add/mod and the callback. */
#define CS_LOOP_READ  0x1u
#define CS_LOOP_WRITE 0x2u
#define CS_LOOP_ERROR 0x4u /* hang-up or error; always reported */

typedef void (*cs_loop_fd_fn)(void *arg, int fd, unsigned events);
typedef void (*cs_loop_fn)(void *arg);
typedef void (*cs_loop_signal_fn)(void *arg, int signo);

/* Returns a new loop, or NULL (errno set). Free with cs_loop_free. */
struct cs_loop *cs_loop_new(void);
/* Frees the loop and every watcher still registered (without calling them). Closes no fd it was
 * given. Accepts NULL. */
void cs_loop_free(struct cs_loop *loop);

/* Runs until cs_loop_stop. Returns 0, or -1 if epoll failed (errno set). */
int cs_loop_run(struct cs_loop *loop);
/* Busy polling (docs/operations.md, "Busy polling"). Once cs_loop_expect was called, the loop's
 * next wait polls its descriptors without sleeping for up to `us` microseconds before it sleeps,
 * so that an answer expected within that window is read without a wake-up (on a virtual machine
 * whose idle vCPUs halt, waking one costs tens of microseconds). The window ends at the first
 * event. 0 (the default) turns it off; it is also off while the process may run on one CPU only,
 * by its affinity or its cgroup's cpu.max quota (polling there would keep the peer it waits for
 * off the CPU). Each empty poll yields. */
#define CS_LOOP_BUSY_POLL_MAX_US     1000u
#define CS_LOOP_BUSY_POLL_DEFAULT_US 200u
void cs_loop_busy_poll(struct cs_loop *loop, unsigned us);
/* Opens a polling window: something this loop waits for is expected soon (a runner connection
 * calls it after each write). Does nothing when busy polling is off. */
void cs_loop_expect(struct cs_loop *loop);
/* Whether cs_loop_expect would open a window now (tests). */
bool cs_loop_busy_poll_on(struct cs_loop *loop);
/* How many polls of a window found nothing, since the loop began (tests). */
uint64_t cs_loop_empty_polls(const struct cs_loop *loop);
/* Sets the window the operator chose: CODESPACE_BUSY_POLL_US, 0 .. CS_LOOP_BUSY_POLL_MAX_US;
 * unset, the default; anything else, the default and a warning naming the value given. */
void cs_loop_busy_poll_from_env(struct cs_loop *loop);
/* Makes cs_loop_run return after the current turn. */
void cs_loop_stop(struct cs_loop *loop);
/* Monotonic milliseconds (CLOCK_MONOTONIC). */
int64_t cs_loop_now_ms(void);

/* Watches fd (borrowed: the caller closes it after cs_loop_fd_del) for events. Returns a watcher
 * owned by the loop, or NULL (errno set). */
struct cs_loop_fd *cs_loop_fd_add(struct cs_loop *loop, int fd, unsigned events, cs_loop_fd_fn fn,
                                  void *arg);
/* Changes the events watched. Returns 0 or -1 (errno set). */
int cs_loop_fd_mod(struct cs_loop_fd *w, unsigned events);
/* Stops watching and releases w. Accepts NULL. */
void cs_loop_fd_del(struct cs_loop_fd *w);

/* Calls fn once after ms milliseconds (0: on the next turn). Returns a timer owned by the loop
 * until it fires or is cancelled, or NULL. */
struct cs_loop_timer *cs_loop_timer_add(struct cs_loop *loop, int64_t ms, cs_loop_fn fn, void *arg);
/* Cancels a timer that has not fired yet. Accepts NULL. Never call it on a fired timer. */
void cs_loop_timer_cancel(struct cs_loop_timer *t);

/* Blocks signo for the process and delivers it through fn on the loop. Returns 0 or -1. */
int cs_loop_signal(struct cs_loop *loop, int signo, cs_loop_signal_fn fn, void *arg);

/* Calls fn(arg) on the next turn of the loop. Returns 0, or -1 on OOM. */
int cs_loop_defer(struct cs_loop *loop, cs_loop_fn fn, void *arg);
/* Drops every pending deferred call of fn with arg (they will not run). */
void cs_loop_defer_cancel(struct cs_loop *loop, cs_loop_fn fn, void *arg);

#endif
