/*
 * base_loop: epoll event loop with one timerfd for all timers (a sorted list; the loop holds few
 * timers at once) and one signalfd per registered signal.
 *
 * Trust: no peer data passes through here.
 *
 * Removal while dispatching: a watcher removed from inside a callback is only marked dead and
 * freed at the end of the turn, so an event already returned by epoll_wait for it is skipped
 * instead of touching freed memory.
 */
#include "base_loop.h"
#include "base_log.h"
#include "base_mem.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

struct cs_loop_fd {
    struct cs_loop *loop;
    int fd;
    cs_loop_fd_fn fn;
    void *arg;
    bool dead;
    struct cs_loop_fd *next_dead;
};

struct cs_loop_timer {
    struct cs_loop *loop;
    int64_t due;
    uint64_t seq; /* ties fire in creation order */
    cs_loop_fn fn;
    void *arg;
    struct cs_loop_timer *next;
};

struct sig {
    int signo;
    cs_loop_signal_fn fn;
    void *arg;
    struct cs_loop_fd *w;
    int fd;
    struct sig *next;
};

struct deferred {
    cs_loop_fn fn;
    void *arg;
    struct deferred *next;
};

struct cs_loop {
    int ep;
    bool stop;
    struct cs_loop_fd *timer_w;
    int timer_fd;
    struct cs_loop_timer *timers; /* sorted by (due, seq) */
    uint64_t timer_seq;
    struct sig *sigs;
    struct deferred *defer_head, *defer_tail;
    struct deferred *running; /* the rest of the batch run_deferred is working through */
    struct cs_loop_fd *dead;  /* watchers removed during this turn */
    /* Busy polling (cs_loop_busy_poll): the window, the end of the current one (0: none), and
     * when the process's CPUs were last counted. */
    int64_t poll_ns, poll_until_ns, cpus_checked_ns;
    bool one_cpu;
    uint64_t empty_polls;
};

int64_t cs_loop_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint32_t to_epoll(unsigned events)
{
    uint32_t e = 0;
    if (events & CS_LOOP_READ)
        e |= EPOLLIN | EPOLLRDHUP;
    if (events & CS_LOOP_WRITE)
        e |= EPOLLOUT;
    return e;
}

struct cs_loop_fd *cs_loop_fd_add(struct cs_loop *loop, int fd, unsigned events, cs_loop_fd_fn fn,
                                  void *arg)
{
    struct cs_loop_fd *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->loop = loop;
    w->fd = fd;
    w->fn = fn;
    w->arg = arg;
    struct epoll_event ev = {.events = to_epoll(events), .data.ptr = w};
    if (epoll_ctl(loop->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        int e = errno;
        free(w);
        errno = e;
        return NULL;
    }
    return w;
}

int cs_loop_fd_mod(struct cs_loop_fd *w, unsigned events)
{
    struct epoll_event ev = {.events = to_epoll(events), .data.ptr = w};
    return epoll_ctl(w->loop->ep, EPOLL_CTL_MOD, w->fd, &ev);
}

void cs_loop_fd_del(struct cs_loop_fd *w)
{
    if (!w || w->dead)
        return;
    /* The fd may already be closed by the owner (then epoll dropped it); ignore the error. */
    epoll_ctl(w->loop->ep, EPOLL_CTL_DEL, w->fd, NULL);
    w->dead = true;
    w->next_dead = w->loop->dead;
    w->loop->dead = w;
}

static void arm_timerfd(struct cs_loop *loop)
{
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    if (loop->timers) {
        int64_t ms = loop->timers->due - cs_loop_now_ms();
        if (ms < 1)
            ms = 1; /* 0 would disarm; 1 ms is "now" */
        its.it_value.tv_sec = ms / 1000;
        its.it_value.tv_nsec = (ms % 1000) * 1000000;
    }
    timerfd_settime(loop->timer_fd, 0, &its, NULL);
}

struct cs_loop_timer *cs_loop_timer_add(struct cs_loop *loop, int64_t ms, cs_loop_fn fn, void *arg)
{
    struct cs_loop_timer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->loop = loop;
    t->due = cs_loop_now_ms() + (ms > 0 ? ms : 0);
    t->seq = loop->timer_seq++;
    t->fn = fn;
    t->arg = arg;
    struct cs_loop_timer **pp = &loop->timers;
    while (*pp && ((*pp)->due < t->due || ((*pp)->due == t->due && (*pp)->seq < t->seq)))
        pp = &(*pp)->next;
    t->next = *pp;
    *pp = t;
    if (loop->timers == t)
        arm_timerfd(loop);
    return t;
}

void cs_loop_timer_cancel(struct cs_loop_timer *t)
{
    if (!t)
        return;
    struct cs_loop *loop = t->loop;
    for (struct cs_loop_timer **pp = &loop->timers; *pp; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            free(t);
            arm_timerfd(loop);
            return;
        }
    }
}

static void on_timerfd(void *arg, int fd, unsigned events)
{
    struct cs_loop *loop = arg;
    (void)events;
    uint64_t expirations;
    if (read(fd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
        return;
    int64_t now = cs_loop_now_ms();
    /* Fire what is due now; timers added by callbacks wait for the next turn. */
    while (loop->timers && loop->timers->due <= now && !loop->stop) {
        struct cs_loop_timer *t = loop->timers;
        loop->timers = t->next;
        cs_loop_fn fn = t->fn;
        void *targ = t->arg;
        free(t);
        fn(targ);
    }
    arm_timerfd(loop);
}

static void on_signalfd(void *arg, int fd, unsigned events)
{
    struct sig *s = arg;
    (void)events;
    struct signalfd_siginfo si;
    while (read(fd, &si, sizeof si) == (ssize_t)sizeof si)
        s->fn(s->arg, (int)si.ssi_signo);
}

int cs_loop_signal(struct cs_loop *loop, int signo, cs_loop_signal_fn fn, void *arg)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, signo);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0)
        return -1;
    struct sig *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (s->fd < 0) {
        free(s);
        return -1;
    }
    s->signo = signo;
    s->fn = fn;
    s->arg = arg;
    s->w = cs_loop_fd_add(loop, s->fd, CS_LOOP_READ, on_signalfd, s);
    if (!s->w) {
        close(s->fd);
        free(s);
        return -1;
    }
    s->next = loop->sigs;
    loop->sigs = s;
    return 0;
}

int cs_loop_defer(struct cs_loop *loop, cs_loop_fn fn, void *arg)
{
    struct deferred *d = cs_zalloc(sizeof *d);
    if (!d)
        return -1;
    d->fn = fn;
    d->arg = arg;
    if (loop->defer_tail)
        loop->defer_tail->next = d;
    else
        loop->defer_head = d;
    loop->defer_tail = d;
    return 0;
}

void cs_loop_defer_cancel(struct cs_loop *loop, cs_loop_fn fn, void *arg)
{
    for (struct deferred **pp = &loop->running; *pp;) {
        struct deferred *d = *pp;
        if (d->fn == fn && d->arg == arg) {
            *pp = d->next;
            free(d);
        } else {
            pp = &d->next;
        }
    }
    struct deferred **pp = &loop->defer_head;
    loop->defer_tail = NULL;
    while (*pp) {
        struct deferred *d = *pp;
        if (d->fn == fn && d->arg == arg) {
            *pp = d->next;
            free(d);
            continue;
        }
        loop->defer_tail = d;
        pp = &d->next;
    }
}

struct cs_loop *cs_loop_new(void)
{
    struct cs_loop *loop = calloc(1, sizeof *loop);
    if (!loop)
        return NULL;
    loop->ep = epoll_create1(EPOLL_CLOEXEC);
    loop->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (loop->ep < 0 || loop->timer_fd < 0)
        goto fail;
    loop->timer_w = cs_loop_fd_add(loop, loop->timer_fd, CS_LOOP_READ, on_timerfd, loop);
    if (!loop->timer_w)
        goto fail;
    return loop;
fail:
    if (loop->ep >= 0)
        close(loop->ep);
    if (loop->timer_fd >= 0)
        close(loop->timer_fd);
    free(loop);
    return NULL;
}

static void reap_dead(struct cs_loop *loop)
{
    while (loop->dead) {
        struct cs_loop_fd *w = loop->dead;
        loop->dead = w->next_dead;
        free(w);
    }
}

static void run_deferred(struct cs_loop *loop)
{
    /* Only what was deferred before this point runs now; new deferrals wait a turn. The batch
     * stays reachable (loop->running) so cs_loop_defer_cancel can still drop its entries. */
    loop->running = loop->defer_head;
    loop->defer_head = loop->defer_tail = NULL;
    struct deferred *d;
    while ((d = loop->running) != NULL) {
        loop->running = d->next;
        d->fn(d->arg);
        free(d);
    }
}

void cs_loop_busy_poll_from_env(struct cs_loop *loop)
{
    const char *text = getenv("CODESPACE_BUSY_POLL_US");
    unsigned us = CS_LOOP_BUSY_POLL_DEFAULT_US;
    if (text) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(text, &end, 10);
        if (text[0] >= '0' && text[0] <= '9' && errno == 0 && *end == '\0' &&
            v <= CS_LOOP_BUSY_POLL_MAX_US) {
            us = (unsigned)v;
        } else {
            json_t *f = json_pack("{s:s,s:i}", "expected", "0 .. 1000 (microseconds)", "default",
                                  (int)CS_LOOP_BUSY_POLL_DEFAULT_US);
            /* The value given, its first 64 bytes, when they are text JSON can carry. */
            json_t *given = json_stringn(text, strnlen(text, 64));
            if (f && given)
                json_object_set_new(f, "given", given);
            else
                json_decref(given);
            cs_log(CS_LOG_WARNING, "CODESPACE_BUSY_POLL_US ignored", f);
        }
    }
    cs_loop_busy_poll(loop, us);
}

void cs_loop_busy_poll(struct cs_loop *loop, unsigned us)
{
    if (us > CS_LOOP_BUSY_POLL_MAX_US)
        us = CS_LOOP_BUSY_POLL_MAX_US;
    loop->poll_ns = (int64_t)us * 1000;
    loop->poll_until_ns = 0;
    loop->cpus_checked_ns = 0;
}

/* Reads up to two integers (separated by white space) from the first line of a file into a
 * and b. Returns how many it read, or -1 when the file cannot be opened ("max" is not one). */
static int read_two(const char *path, long *a, long *b)
{
    char buf[64];
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int n = 0;
    if (fgets(buf, sizeof buf, f)) {
        char *p = buf, *end;
        long *out[2] = {a, b};
        for (; n < 2; n++) {
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p || errno != 0)
                break;
            *out[n] = v;
            p = end;
        }
    }
    fclose(f);
    return n;
}

/* Whether controller (cgroup v1) is one of the comma-separated names in list. */
static bool has_controller(const char *list, size_t len, const char *controller)
{
    size_t cl = strlen(controller);
    for (const char *p = list, *end = list + len; p < end;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t n = comma ? (size_t)(comma - p) : (size_t)(end - p);
        if (n == cl && memcmp(p, controller, n) == 0)
            return true;
        p += n + 1;
    }
    return false;
}

/* The CPUs the process's cgroup quota grants, rounded down (cgroup v2 cpu.max, else v1
 * cpu.cfs_quota_us over cpu.cfs_period_us); 0 for no quota or none readable. A container
 * limited to one CPU keeps every host CPU in its affinity: the quota is what says it has one. */
static long cgroup_cpus(void)
{
    char line[4096], path[4300];
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return 0;
    long quota = 0, period = 0;
    while (quota <= 0 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        const char *rel = strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1;
        if (c2 == c1 + 1) { /* v2: "0::/path" */
            if (snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", rel) < (int)sizeof path &&
                read_two(path, &quota, &period) != 2)
                quota = 0; /* "max 100000": no quota */
        } else if (has_controller(c1 + 1, (size_t)(c2 - c1 - 1), "cpu")) {
            long unused;
            if (snprintf(path, sizeof path, "/sys/fs/cgroup/cpu%s/cpu.cfs_quota_us", rel) <
                    (int)sizeof path &&
                read_two(path, &quota, &unused) >= 1 &&
                snprintf(path, sizeof path, "/sys/fs/cgroup/cpu%s/cpu.cfs_period_us", rel) <
                    (int)sizeof path &&
                read_two(path, &period, &unused) < 1)
                quota = 0;
        }
    }
    fclose(f);
    return quota > 0 && period > 0 ? quota / period : 0;
}

/* Polling on the only CPU the process may use would keep the peer it waits for off that CPU
 * (and spend the quota the peer needs, in a container limited to one): counted again at most
 * once a second, so that a process pinned while it runs stops. */
static bool may_poll(struct cs_loop *loop, int64_t now)
{
    if (loop->cpus_checked_ns == 0 || now - loop->cpus_checked_ns > 1000000000) {
        cpu_set_t set;
        long quota = cgroup_cpus();
        loop->one_cpu = sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < 2 ||
                        (quota > 0 && quota < 2);
        loop->cpus_checked_ns = now;
    }
    return !loop->one_cpu;
}

void cs_loop_expect(struct cs_loop *loop)
{
    if (loop->poll_ns <= 0)
        return;
    int64_t now = now_ns();
    if (may_poll(loop, now))
        loop->poll_until_ns = now + loop->poll_ns;
}

bool cs_loop_busy_poll_on(struct cs_loop *loop)
{
    return loop->poll_ns > 0 && may_poll(loop, now_ns());
}

uint64_t cs_loop_empty_polls(const struct cs_loop *loop)
{
    return loop->empty_polls;
}

/* epoll_wait, after polling without sleeping while a window cs_loop_expect opened lasts (only
 * when the wait would block). Each empty poll yields the CPU to whatever else may run on it. */
static int wait_events(struct cs_loop *loop, struct epoll_event *evs, int max, int timeout)
{
    if (timeout != 0 && loop->poll_until_ns) {
        for (;;) {
            int n = epoll_wait(loop->ep, evs, max, 0);
            if (n != 0) {
                loop->poll_until_ns = 0;
                return n;
            }
            loop->empty_polls++;
            if (now_ns() >= loop->poll_until_ns) {
                loop->poll_until_ns = 0;
                break;
            }
            sched_yield();
        }
    }
    return epoll_wait(loop->ep, evs, max, timeout);
}

int cs_loop_run(struct cs_loop *loop)
{
    loop->stop = false;
    while (!loop->stop) {
        int timeout = loop->defer_head ? 0 : -1;
        struct epoll_event evs[64];
        int n = wait_events(loop, evs, 64, timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        for (int i = 0; i < n && !loop->stop; i++) {
            struct cs_loop_fd *w = evs[i].data.ptr;
            if (w->dead)
                continue;
            unsigned ev = 0;
            if (evs[i].events & (EPOLLIN | EPOLLRDHUP))
                ev |= CS_LOOP_READ;
            if (evs[i].events & EPOLLOUT)
                ev |= CS_LOOP_WRITE;
            if (evs[i].events & (EPOLLERR | EPOLLHUP))
                ev |= CS_LOOP_ERROR;
            w->fn(w->arg, w->fd, ev);
        }
        if (!loop->stop)
            run_deferred(loop);
        reap_dead(loop);
    }
    return 0;
}

void cs_loop_stop(struct cs_loop *loop)
{
    loop->stop = true;
}

void cs_loop_free(struct cs_loop *loop)
{
    if (!loop)
        return;
    while (loop->sigs) {
        struct sig *s = loop->sigs;
        loop->sigs = s->next;
        cs_loop_fd_del(s->w);
        close(s->fd);
        free(s);
    }
    while (loop->timers) {
        struct cs_loop_timer *t = loop->timers;
        loop->timers = t->next;
        free(t);
    }
    while (loop->defer_head) {
        struct deferred *d = loop->defer_head;
        loop->defer_head = d->next;
        free(d);
    }
    cs_loop_fd_del(loop->timer_w);
    reap_dead(loop);
    close(loop->timer_fd);
    close(loop->ep);
    free(loop);
}
