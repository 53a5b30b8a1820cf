/*
 * supervisor: managed processes on the event loop (the state machine is in docs/process.md).
 *
 * A process is "live" from its spawn until it has finished: its leader reaped (through its
 * pidfd) and its output collected (EOF on the pipe or PTY, or a short grace once the leader is
 * gone). Only then is it reported `exited`, so an exited process's output is complete. When the
 * leader exits, what is left of its process group is killed: a command leaves no daemon behind.
 *
 * Signals go to the leader through its pidfd and to the group through kill(-pgid) only while the
 * leader is unreaped: the group id is the leader's pid, which cannot be recycled before we reap
 * it (docs/contract/runtime.md section 5).
 *
 * Trust: see supervisor.h. Every buffer has a fixed cap: the output ring (limits.ring_bytes; its
 * type is supervisor_ring.c), a pending write (the message that carried it, already capped by the
 * transport).
 * Entry points: supervisor.h.
 */
#include "supervisor_internal.h"
#include "supervisor_ring.h"

#include "base_id.h"
#include "base_roots.h"
#include "base_utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/* After the leader is reaped, output still in flight gets this long to reach EOF. */
#define DRAIN_GRACE_MS 500
/* A write_stdin that cannot finish (a command that never reads) answers after this long with
 * the bytes written so far. */
#define WRITE_DEADLINE_MS 10000
/* A terminate_process call answers at the latest this long after the SIGKILL. */
#define TERMINATE_SLACK_MS 3000
/* Output read in one loop turn at most, so one chatty process cannot starve the loop. */
#define READ_BUDGET (4u * 1024u * 1024u)

enum waiter_kind { WAIT_EXEC, WAIT_READ, WAIT_TERMINATE };

struct waiter {
    struct waiter *prev, *next;
    struct proc *p;
    enum waiter_kind kind;
    int64_t cursor; /* WAIT_READ */
    struct cs_loop_timer *timer;
    cs_supervisor_done_fn done;
    void *arg;
};

struct write_req {
    struct write_req *next;
    char *data;
    size_t n, off, extra; /* extra: trailing bytes we added (the TTY's EOF character) */
    bool close;
    cs_supervisor_done_fn done;
    void *arg;
};

struct proc {
    struct proc *prev, *next;
    struct cs_supervisor *s;
    char id[CS_SUPERVISOR_ID_SIZE];
    char *workspace_id;
    pid_t pid;
    int pidfd, in, out;
    struct cs_loop_fd *pidw, *inw, *outw;
    bool pinned; /* inside maybe_finish: not to be freed */
    bool tty, stdin_closed, input_ended, reaped, out_done, finished;
    int64_t finished_at;
    /* set before the end when the server ends it (timeout, terminate); else from the status */
    bool forced;
    enum csw_process_termination term;
    int exit_code, signo;
    int64_t rows, cols;
    int64_t timeout_ms; /* its time limit; 0: none */
    /* The combined output (supervisor_ring.c); compacted once the process has finished. */
    struct cs_ring ring;
    struct waiter *waiters;
    struct write_req *wq, *wq_tail;
    struct cs_loop_timer *limit_timer, *kill_timer, *drain_timer, *write_timer;
    cs_supervisor_exit_fn on_exit;
    void *exit_arg;
    /* The plan prepare returned for a sandboxed process (NULL otherwise): removed once the
     * process is reaped, if `run` did not remove it first (docs/contract/sandbox.md §1). */
    char *plan;
    /* A shared workspace's process: the network namespace it joined, released when it has
     * finished (NULL otherwise). */
    struct cs__netns *netns;
    /* A sandboxed process: the read end of the helper's denial report pipe (docs/contract/tools.md
     * section 6), read once the helper is reaped; the decoded report when there was one. */
    int report;
    bool has_report;
    struct csw_sandbox_report rep;
};

struct cs_supervisor {
    struct cs_loop *loop;
    struct cs_supervisor_limits lim;
    char *path, *tmpdir, *sandbox;
    struct proc *procs, *procs_tail; /* in spawn order */
    size_t live, exited;
    /* The sandbox helper started ahead of the next sandboxed command (issue 20): none until a
     * sandboxed spawn has happened (an idle server has no extra child), then started again on
     * the loop turn after each. Not a process of the table: never listed, counted or limited. */
    struct cs__supervisor_warm warm;
    bool warm_pending; /* warm_rearm deferred */
    /* The shared workspaces' network namespaces (supervisor_netns.c). */
    struct cs__netns_table netns;
};

static int64_t now_ms(void)
{
    return cs_loop_now_ms();
}

/* ---- ids ---- */

int cs_supervisor_new_id(char out[CS_SUPERVISOR_ID_SIZE])
{
    return cs_id_new("proc-", out, CS_SUPERVISOR_ID_SIZE);
}

/* ---- the ring (supervisor_ring.c) ---- */

static uint64_t retained_from(const struct proc *p)
{
    return cs__ring_retained_from(&p->ring);
}

/* ---- results ---- */

/* The retained output from cursor as a lossy UTF-8 string. Sets *next to the cursor after it.
 * Returns a new string (free it), or NULL on OOM. */
static char *chunk_from(const struct proc *p, uint64_t start, uint64_t *next, size_t *len)
{
    size_t n = (size_t)(p->ring.total - start);
    uint8_t *raw = malloc(n ? n : 1);
    char *text = malloc(3 * n + 1);
    if (!raw || !text) {
        free(raw);
        free(text);
        return NULL;
    }
    cs__ring_copy(&p->ring, start, p->ring.total, raw);
    size_t used = 0;
    *len = cs_utf8_lossy(raw, n, !p->finished, text, &used, NULL);
    free(raw);
    *next = start + used;
    return text;
}

/* The denials of a finished sandboxed process, borrowed from p (absent when none), and how many
 * refusals the helper counted without listing them (has_dropped false when none). */
static void fill_denials(const struct proc *p, bool *has, struct csw_denial **v, size_t *n,
                         bool *has_dropped, int64_t *dropped)
{
    *has = p->has_report && p->rep.denials.n > 0;
    *v = *has ? p->rep.denials.v : NULL;
    *n = *has ? p->rep.denials.n : 0;
    *has_dropped = p->has_report && p->rep.has_dropped && p->rep.dropped > 0;
    *dropped = *has_dropped ? p->rep.dropped : 0;
}

/* The helper has exited: everything it wrote is in the pipe. One frame (u32 big-endian length
 * + schema/sandbox/report.json), at most REPORT_MAX bytes; anything else is ignored (a helper
 * that died early wrote nothing; the command never holds this pipe). */
static void read_report(struct proc *p)
{
    enum { REPORT_MAX = 64 * 1024 };
    if (p->report < 0)
        return;
    unsigned char *buf = malloc(REPORT_MAX + 1);
    size_t n = 0;
    while (buf && n <= REPORT_MAX) {
        ssize_t r = read(p->report, buf + n, REPORT_MAX + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(p->report);
    p->report = -1;
    if (buf && n >= 4 && n <= REPORT_MAX) {
        size_t len = (size_t)buf[0] << 24 | (size_t)buf[1] << 16 | (size_t)buf[2] << 8 | buf[3];
        json_error_t jerr;
        json_t *j = len == n - 4 ? json_loadb((const char *)buf + 4, len, 0, &jerr) : NULL;
        struct cs_wire_diag diag;
        if (j && csw_sandbox_report_decode(j, &p->rep, &diag) == CS_WIRE_OK)
            p->has_report = true;
        json_decref(j);
    }
    free(buf);
}

static void fill_end(const struct proc *p, bool *has_exit_code, int64_t *exit_code,
                     bool *has_termination, enum csw_process_termination *termination)
{
    *has_termination = p->finished;
    *termination = p->term;
    *has_exit_code = p->finished && p->term == CSW_PROCESS_TERMINATION_EXITED;
    *exit_code = p->exit_code;
}

static void answer_exec(struct proc *p, bool with_output, cs_supervisor_done_fn done, void *arg)
{
    struct csw_mcp_exec_command_output out;
    memset(&out, 0, sizeof out);
    out.process_id.s = p->id;
    out.process_id.n = strlen(p->id);
    out.dispatch_status = CSW_MCP_EXEC_COMMAND_OUTPUT_DISPATCH_STATUS_CONFIRMED;
    char *text = NULL;
    if (with_output) {
        uint64_t next = 0;
        size_t len = 0;
        text = chunk_from(p, retained_from(p), &next, &len);
        if (!text) {
            done(arg, CSW_ERROR_INTERNAL, "out of memory building the output", NULL);
            return;
        }
        out.has_state = true;
        out.state = p->finished ? CSW_PROCESS_STATE_EXITED : CSW_PROCESS_STATE_RUNNING;
        out.has_output = true;
        out.output.s = text;
        out.output.n = len;
        out.has_cursor = true;
        out.cursor = (int64_t)next;
        out.has_output_lost = true;
        out.output_lost = retained_from(p) > 0;
        fill_end(p, &out.has_exit_code, &out.exit_code, &out.has_termination, &out.termination);
        fill_denials(p, &out.has_denials, &out.denials.v, &out.denials.n, &out.has_denials_dropped,
                     &out.denials_dropped);
    }
    done(arg, 0, NULL, &out);
    free(text);
}

/* The effective start of a read at cursor: inside the retained window. */
static uint64_t read_start(const struct proc *p, int64_t cursor)
{
    return cs__ring_start(&p->ring, cursor);
}

/* Answers a read at cursor. */
static void answer_read(struct proc *p, int64_t cursor, cs_supervisor_done_fn done, void *arg)
{
    uint64_t from = retained_from(p);
    uint64_t start = read_start(p, cursor);
    if (p->finished && p->term == CSW_PROCESS_TERMINATION_TIMEOUT && start == p->ring.total) {
        struct cs_diag dg;
        cs_diag_set(
            &dg, CSW_ERROR_TIMEOUT,
            "the process was killed at its time limit (%lld ms); no output past cursor %llu",
            (long long)p->timeout_ms, (unsigned long long)p->ring.total);
        done(arg, (int)dg.code, dg.text, NULL);
        return;
    }
    uint64_t next = 0;
    size_t len = 0;
    char *text = chunk_from(p, start, &next, &len);
    if (!text) {
        done(arg, CSW_ERROR_INTERNAL, "out of memory building the output", NULL);
        return;
    }
    struct csw_mcp_read_process_output out = {
        .process_id = {p->id, strlen(p->id)},
        .cursor = (int64_t)next,
        .chunk = {text, len},
        .eof = p->finished && next == p->ring.total,
        .output_lost = from > 0,
        .retained_from = (int64_t)from,
    };
    fill_denials(p, &out.has_denials, &out.denials.v, &out.denials.n, &out.has_denials_dropped,
                 &out.denials_dropped);
    done(arg, 0, NULL, &out);
    free(text);
}

/* ---- waiters ---- */

static void waiter_unlink(struct waiter *w)
{
    struct proc *p = w->p;
    if (w->prev)
        w->prev->next = w->next;
    else
        p->waiters = w->next;
    if (w->next)
        w->next->prev = w->prev;
    cs_loop_timer_cancel(w->timer);
}

/* Answers w with the process's current state and frees it. */
static void waiter_answer(struct waiter *w)
{
    waiter_unlink(w);
    struct proc *p = w->p;
    switch (w->kind) {
    case WAIT_EXEC:
        answer_exec(p, true, w->done, w->arg);
        break;
    case WAIT_READ:
        answer_read(p, w->cursor, w->done, w->arg);
        break;
    case WAIT_TERMINATE: {
        struct csw_mcp_terminate_process_output out = {
            .state = p->finished ? CSW_PROCESS_STATE_EXITED : CSW_PROCESS_STATE_RUNNING};
        w->done(w->arg, 0, NULL, &out);
        break;
    }
    }
    free(w);
}

static void waiter_timeout(void *arg)
{
    struct waiter *w = arg;
    w->timer = NULL; /* fired */
    waiter_answer(w);
}

static int waiter_add(struct proc *p, enum waiter_kind kind, int64_t cursor, int64_t ms,
                      cs_supervisor_done_fn done, void *arg)
{
    struct waiter *w = calloc(1, sizeof *w);
    if (!w)
        return -1;
    w->p = p;
    w->kind = kind;
    w->cursor = cursor;
    w->done = done;
    w->arg = arg;
    w->timer = cs_loop_timer_add(p->s->loop, ms, waiter_timeout, w);
    if (!w->timer) {
        free(w);
        return -1;
    }
    w->next = p->waiters;
    if (p->waiters)
        p->waiters->prev = w;
    p->waiters = w;
    return 0;
}

/* True when a read from start would return something: bytes other than the held start of a
 * UTF-8 sequence that the next output may complete (a long poll keeps waiting for those). */
static bool readable_from(const struct proc *p, uint64_t start)
{
    if (p->ring.total <= start)
        return false;
    if (p->finished || p->ring.total - start > 3)
        return true;
    uint8_t raw[3];
    char text[3 * sizeof raw + 1];
    size_t used = 0;
    cs__ring_copy(&p->ring, start, p->ring.total, raw);
    cs_utf8_lossy(raw, (size_t)(p->ring.total - start), true, text, &used, NULL);
    return used > 0;
}

/* New output arrived: wake the reads waiting for something past their cursor. */
static void wake_readers(struct proc *p)
{
    for (struct waiter *w = p->waiters, *next; w; w = next) {
        next = w->next;
        if (w->kind == WAIT_READ && readable_from(p, read_start(p, w->cursor)))
            waiter_answer(w);
    }
}

/* ---- the plan ---- */

/* The process is reaped (or was never started): its helper can no longer read the plan, so a
 * plan still there is removed now (invariant R9; `run` normally removed it first thing). */
static void drop_plan(struct proc *p)
{
    if (!p->plan)
        return;
    (void)cs__supervisor_plan_remove(p->plan);
    free(p->plan);
    p->plan = NULL;
}

/* ---- signals ---- */

static void signal_group(struct proc *p, int sig)
{
    if (p->reaped)
        return; /* the pid may be recycled now: never signal it */
    (void)pidfd_send_signal(p->pidfd, sig, NULL, 0);
    (void)kill(-p->pid, sig);
}

/* ---- stdin ---- */

static void write_pump(struct proc *p);

static void close_stdin(struct proc *p)
{
    cs_loop_fd_del(p->inw);
    p->inw = NULL;
    cs_loop_timer_cancel(p->write_timer);
    p->write_timer = NULL;
    if (p->in >= 0)
        close(p->in);
    p->in = -1;
    p->stdin_closed = true;
}

/* Completes the head write request with what it wrote (or an error when nothing was). */
static void write_finish(struct proc *p, int code, const char *msg)
{
    struct write_req *r = p->wq;
    p->wq = r->next;
    if (!p->wq)
        p->wq_tail = NULL;
    cs_loop_timer_cancel(p->write_timer);
    p->write_timer = NULL;
    size_t wrote = r->off > r->n - r->extra ? r->n - r->extra : r->off;
    if (code != 0) {
        r->done(r->arg, code, msg, NULL);
    } else {
        struct csw_mcp_write_stdin_output out = {.bytes_written = (int64_t)wrote};
        r->done(r->arg, 0, NULL, &out);
    }
    free(r->data);
    free(r);
}

static void fail_writes(struct proc *p, const char *why)
{
    while (p->wq) {
        if (p->wq->off > 0)
            write_finish(p, 0, NULL); /* some bytes went in: say how many */
        else
            write_finish(p, CSW_ERROR_PROCESS_NOT_FOUND, why);
    }
}

static void write_ready(void *arg, int fd, unsigned events)
{
    (void)fd;
    (void)events;
    write_pump(arg);
}

static void write_deadline(void *arg)
{
    struct proc *p = arg;
    p->write_timer = NULL;
    if (!p->wq)
        return;
    bool close_after = p->wq->close;
    write_finish(p, 0, NULL); /* the command is not reading: report the bytes taken */
    if (close_after)
        close_stdin(p);
    write_pump(p);
}

static void write_pump(struct proc *p)
{
    while (p->wq) {
        struct write_req *r = p->wq;
        if (p->stdin_closed) {
            fail_writes(p, "stdin of this process is closed");
            return;
        }
        while (r->off < r->n) {
            ssize_t w = write(p->in, r->data + r->off, r->n - r->off);
            if (w > 0) {
                r->off += (size_t)w;
                continue;
            }
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0 && errno == EAGAIN) {
                if (!p->inw)
                    p->inw = cs_loop_fd_add(p->s->loop, p->in, CS_LOOP_WRITE, write_ready, p);
                if (!p->write_timer)
                    p->write_timer =
                        cs_loop_timer_add(p->s->loop, WRITE_DEADLINE_MS, write_deadline, p);
                if (p->inw && p->write_timer)
                    return; /* resumes when the command reads */
            }
            /* EPIPE (the command closed its stdin) or no way to wait: stdin is done */
            close_stdin(p);
            fail_writes(p, "stdin of this process is closed (the command closed it or exited)");
            return;
        }
        bool close_after = r->close;
        write_finish(p, 0, NULL);
        if (close_after)
            close_stdin(p);
    }
    cs_loop_fd_del(p->inw);
    p->inw = NULL;
}

/* ---- the end of a process ---- */

static void proc_free(struct proc *p);

/* Frees exited handles past their retention: older than retain_ms, or beyond retain_max. */
static void sweep(struct cs_supervisor *s)
{
    int64_t now = now_ms();
    for (struct proc *p = s->procs, *next; p; p = next) {
        next = p->next;
        if (p->finished && !p->pinned && now - p->finished_at >= s->lim.retain_ms)
            proc_free(p);
    }
    while (s->exited > s->lim.retain_max) {
        struct proc *oldest = NULL;
        for (struct proc *p = s->procs; p; p = p->next)
            /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): list kept whole by proc_unlink */
            if (p->finished && !p->pinned && (!oldest || p->finished_at < oldest->finished_at))
                oldest = p;
        if (!oldest)
            break;
        proc_free(oldest);
    }
}

static void maybe_finish(struct proc *p)
{
    if (p->finished || !p->reaped || !p->out_done)
        return;
    struct cs_supervisor *s = p->s;
    p->finished = true;
    p->finished_at = now_ms();
    cs_loop_timer_cancel(p->drain_timer);
    p->drain_timer = NULL;
    cs_loop_fd_del(p->outw);
    p->outw = NULL;
    if (p->out >= 0)
        close(p->out);
    p->out = -1;
    if (!p->stdin_closed)
        close_stdin(p);
    fail_writes(p, "the process has exited");
    cs__ring_compact(&p->ring);
    s->live--;
    s->exited++;
    cs__netns_release(p->netns); /* the namespace's grace period may start */
    p->netns = NULL;
    /* The exit callback first (the lease goes; over uds the process_exited event leaves before
     * the answers below), so a client that sees `exited` can start the next command at once.
     * p survives it: only an exited handle past retention is freed, and p is the newest. */
    p->pinned = true;
    if (p->on_exit)
        p->on_exit(p->exit_arg, p->id);
    while (p->waiters)
        /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): waiter_answer unlinks the head */
        waiter_answer(p->waiters);
    p->pinned = false;
    sweep(s);
}

static void drain_deadline(void *arg)
{
    struct proc *p = arg;
    p->drain_timer = NULL;
    p->out_done = true; /* something outside the group still holds the output open */
    maybe_finish(p);
}

static void on_output(void *arg, int fd, unsigned events)
{
    struct proc *p = arg;
    (void)events;
    size_t budget = READ_BUDGET;
    bool got = false, eof = false;
    while (budget > 0) {
        size_t space = 0;
        uint8_t *dst = cs__ring_space(&p->ring, &space);
        if (!dst)
            break;
        if (space > budget)
            space = budget;
        ssize_t n = read(fd, dst, space);
        if (n > 0) {
            cs__ring_commit(&p->ring, (size_t)n);
            budget -= (size_t)n;
            got = true;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        eof = true; /* 0 (pipe EOF), EIO (the PTY's slave side is gone), or an error */
        break;
    }
    if (eof) {
        cs_loop_fd_del(p->outw);
        p->outw = NULL;
        p->out_done = true;
    }
    if (got)
        wake_readers(p);
    if (eof)
        maybe_finish(p);
}

static void on_exit_ready(void *arg, int fd, unsigned events)
{
    struct proc *p = arg;
    (void)events;
    /* The leader is a zombie: take the rest of its group with it before the pid can go. */
    (void)kill(-p->pid, SIGKILL);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid((idtype_t)P_PIDFD, (id_t)fd, &si, WEXITED | WNOHANG) != 0 || si.si_pid == 0)
        return; /* not yet (spurious wake-up) */
    p->reaped = true;
    drop_plan(p);
    read_report(p);
    cs_loop_fd_del(p->pidw);
    p->pidw = NULL;
    close(p->pidfd);
    p->pidfd = -1;
    cs_loop_timer_cancel(p->limit_timer);
    p->limit_timer = NULL;
    cs_loop_timer_cancel(p->kill_timer);
    p->kill_timer = NULL;
    if (si.si_code == CLD_EXITED) {
        p->exit_code = si.si_status;
        if (!p->forced)
            p->term = CSW_PROCESS_TERMINATION_EXITED;
    } else if (si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED) {
        p->signo = si.si_status;
        if (!p->forced)
            p->term = CSW_PROCESS_TERMINATION_SIGNALED;
    } else if (!p->forced) {
        p->term = CSW_PROCESS_TERMINATION_UNKNOWN;
    }
    if (!p->out_done) {
        on_output(p, p->out, CS_LOOP_READ); /* what is already in the pipe */
        if (!p->out_done && !p->finished)
            p->drain_timer = cs_loop_timer_add(p->s->loop, DRAIN_GRACE_MS, drain_deadline, p);
        if (!p->out_done && !p->drain_timer)
            p->out_done = true;
    }
    maybe_finish(p);
}

static void on_time_limit(void *arg)
{
    struct proc *p = arg;
    p->limit_timer = NULL;
    if (p->reaped)
        return;
    p->forced = true;
    p->term = CSW_PROCESS_TERMINATION_TIMEOUT;
    signal_group(p, SIGKILL);
}

static void on_kill_grace(void *arg)
{
    struct proc *p = arg;
    p->kill_timer = NULL;
    signal_group(p, SIGKILL);
}

/* ---- lifetime ---- */

static void proc_unlink(struct proc *p)
{
    struct cs_supervisor *s = p->s;
    if (p->prev)
        p->prev->next = p->next;
    else
        s->procs = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        s->procs_tail = p->prev;
}

/* Frees a process record. A live one is killed and reaped first (shutdown only). */
static void proc_free(struct proc *p)
{
    struct cs_supervisor *s = p->s;
    if (!p->reaped && p->pidfd >= 0) {
        signal_group(p, SIGKILL);
        siginfo_t si;
        while (waitid((idtype_t)P_PIDFD, (id_t)p->pidfd, &si, WEXITED) != 0 && errno == EINTR)
            ;
        p->reaped = true;
    }
    drop_plan(p);
    while (p->waiters) {
        struct waiter *w = p->waiters;
        /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): waiter_unlink moves the head on */
        waiter_unlink(w);
        w->done(w->arg, CSW_ERROR_INTERNAL, "the server is shutting down", NULL);
        free(w);
    }
    fail_writes(p, "the server is shutting down");
    cs_loop_fd_del(p->pidw);
    cs_loop_fd_del(p->inw);
    cs_loop_fd_del(p->outw);
    cs_loop_timer_cancel(p->limit_timer);
    cs_loop_timer_cancel(p->kill_timer);
    cs_loop_timer_cancel(p->drain_timer);
    cs_loop_timer_cancel(p->write_timer);
    if (p->pidfd >= 0)
        close(p->pidfd);
    if (p->in >= 0)
        close(p->in);
    if (p->out >= 0)
        close(p->out);
    if (p->report >= 0)
        close(p->report);
    if (p->has_report)
        csw_sandbox_report_free(&p->rep);
    if (p->finished)
        s->exited--;
    else
        s->live--;
    cs__netns_release(p->netns);
    proc_unlink(p);
    free(p->workspace_id);
    cs__ring_fini(&p->ring);
    free(p);
}

static char *concat(const char *a, const char *b);

/* Starts the next warm helper, on the loop turn after a sandboxed spawn (off that call's path:
 * the vfork parent waits for the helper's exec). Best effort: without one, the next sandboxed
 * spawn starts its helper itself. */
static void warm_rearm(void *arg)
{
    struct cs_supervisor *s = arg;
    s->warm_pending = false;
    if (s->warm.pid > 0 || !s->sandbox)
        return;
    char *env[2] = {concat("TMPDIR=", cs__supervisor_helper_tmpdir()), NULL};
    if (env[0])
        (void)cs__supervisor_warm_start(&s->warm, s->sandbox, env);
    free(env[0]);
}

struct cs_supervisor *cs_supervisor_new(struct cs_loop *loop,
                                        const struct cs_supervisor_limits *lim)
{
    struct cs_supervisor *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->loop = loop;
    s->lim = *lim;
    s->warm = (struct cs__supervisor_warm){.pid = 0, .pidfd = -1, .sock = -1};
    s->path = strdup(lim->path ? lim->path : "/usr/local/bin:/usr/bin:/bin");
    s->tmpdir = strdup(lim->tmpdir ? lim->tmpdir : "/tmp");
    s->sandbox = lim->sandbox_helper ? strdup(lim->sandbox_helper) : NULL;
    if (!s->path || !s->tmpdir || (lim->sandbox_helper && !s->sandbox)) {
        cs_supervisor_free(s);
        errno = ENOMEM;
        return NULL;
    }
    s->lim.path = s->path;
    s->lim.tmpdir = s->tmpdir;
    s->lim.sandbox_helper = s->sandbox;
    s->netns = (struct cs__netns_table){
        .loop = loop, .helper = s->sandbox, .grace_ms = lim->netns_grace_ms, .list = NULL};
    /* docs/contract/sandbox.md §1: the plans a runner of ours that is gone left behind (R9). */
    if (s->sandbox)
        (void)cs__supervisor_plan_sweep();
    return s;
}

void cs_supervisor_free(struct cs_supervisor *s)
{
    if (!s)
        return;
    if (s->warm_pending)
        cs_loop_defer_cancel(s->loop, warm_rearm, s);
    cs__supervisor_warm_stop(&s->warm);
    while (s->procs)
        proc_free(s->procs);
    cs__netns_table_fini(&s->netns);
    free(s->path);
    free(s->tmpdir);
    free(s->sandbox);
    free(s);
}

size_t cs_supervisor_live(const struct cs_supervisor *s)
{
    return s->live;
}

bool cs_supervisor_owns_pid(const struct cs_supervisor *s, pid_t pid)
{
    if (s->warm.pid > 0 && s->warm.pid == pid)
        return true; /* reaped through its pidfd, by cs__supervisor_warm_stop */
    if (cs__netns_owns_pid(&s->netns, pid))
        return true; /* a network namespace holder, reaped by the table */
    for (const struct proc *p = s->procs; p; p = p->next)
        if (!p->reaped && p->pid == pid)
            return true;
    return false;
}

/* ---- spawn ---- */

static char *concat(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *r = malloc(na + nb + 1);
    if (r) {
        memcpy(r, a, na);
        memcpy(r + na, b, nb + 1);
    }
    return r;
}

/* The plan's masks (sp->n_deny_mask > 0): a path that is valid UTF-8 as it is (deny_mask), any
 * other in the plan's byte form (deny_mask_hex, two lowercase hex digits a byte), so a file name
 * that is not UTF-8 is masked like any other (issue 29). *dm and *hex (each string of *hex too)
 * are the caller's to free, also on failure. Returns 0, or -1 with d. */
static int deny_masks(const struct cs_supervisor_spawn *sp, struct csw_sandbox_plan *plan,
                      struct cs_str **dm, struct cs_str **hex, struct cs_diag *d)
{
    static const char digits[] = "0123456789abcdef";
    *dm = calloc(sp->n_deny_mask, sizeof **dm);
    *hex = calloc(sp->n_deny_mask, sizeof **hex);
    if (!*dm || !*hex)
        goto oom;
    for (size_t i = 0; i < sp->n_deny_mask; i++) {
        const unsigned char *p = (const unsigned char *)sp->deny_mask[i];
        size_t n = strlen(sp->deny_mask[i]), step = 0;
        bool valid = true;
        for (size_t k = 0; valid && k < n; k += step) {
            uint32_t cp;
            step = cs_utf8_step(p + k, n - k, &cp, &valid);
        }
        if (valid) {
            (*dm)[plan->deny_mask.n++] = (struct cs_str){sp->deny_mask[i], n};
            continue;
        }
        char *h = malloc(2 * n + 1);
        if (!h)
            goto oom;
        for (size_t k = 0; k < n; k++) {
            h[2 * k] = digits[p[k] >> 4];
            h[2 * k + 1] = digits[p[k] & 15];
        }
        h[2 * n] = '\0';
        (*hex)[plan->deny_mask_hex.n++] = (struct cs_str){h, 2 * n};
    }
    plan->has_deny_mask = plan->deny_mask.n > 0;
    plan->deny_mask.v = *dm;
    plan->has_deny_mask_hex = plan->deny_mask_hex.n > 0;
    plan->deny_mask_hex.v = *hex;
    return 0;
oom:
    cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "out of memory");
    return -1;
}

/* Builds the plan for one command through the generated encoder, as `prepare` would write it,
 * and returns it as a sealed memfd for `run --plan-fd 5` (no prepare process, no plan file:
 * issue 20), or -1 with d. Every rule prepare checks, run checks again on this plan
 * (cs_sbx_plan_parse), so nothing is trusted more for being built here. */
static int sandbox_plan(struct cs_supervisor *s, const struct cs_supervisor_spawn *sp, char **argv,
                        char **envp, size_t ne, const struct cs__netns *ns, struct cs_diag *d)
{
    struct csw_sandbox_plan plan;
    memset(&plan, 0, sizeof plan);
    struct cs_str *av = calloc(sp->argc, sizeof *av), *dm = NULL, *hex = NULL;
    struct csw_sandbox_plan_env_entry *env = calloc(ne, sizeof *env);
    int fd = -1;
    if (!av || !env) {
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < sp->argc; i++)
        av[i] = (struct cs_str){argv[i], strlen(argv[i])};
    for (size_t i = 0; i < ne; i++) {
        const char *eq = strchr(envp[i], '=');
        env[i].key = (struct cs_str){envp[i], (size_t)(eq - envp[i])};
        env[i].value = (struct cs_str){(char *)eq + 1, strlen(eq + 1)};
    }
    plan.workspace_root = (struct cs_str){(char *)sp->root, strlen(sp->root)};
    plan.cwd = plan.workspace_root;
    plan.writable_workspace = sp->writable;
    switch (sp->network) {
    case CS_SUPERVISOR_NETWORK_RESTRICTED:
        plan.network = CSW_SANDBOX_PLAN_NETWORK_RESTRICTED;
        break;
    case CS_SUPERVISOR_NETWORK_ENABLED:
        plan.network = CSW_SANDBOX_PLAN_NETWORK_ENABLED;
        break;
    case CS_SUPERVISOR_NETWORK_LOOPBACK:
        plan.network = CSW_SANDBOX_PLAN_NETWORK_LOOPBACK;
        break;
    }
    plan.has_network_allow = sp->has_network_allow;
    plan.network_allow.v = (struct cs_str *)sp->network_allow;
    plan.network_allow.n = sp->n_network_allow;
    if (sp->n_deny_mask > 0 && deny_masks(sp, &plan, &dm, &hex, d) != 0)
        goto out;
    plan.argv.v = av;
    plan.argv.n = sp->argc;
    plan.env.v = env;
    plan.env.n = ne;
    plan.tty = sp->tty;
    /* The helper reaches the workspace through the held root, passed as its fd 3; workspace_root
     * is only where the workspace appears inside the sandbox. */
    plan.has_workspace_fd = true;
    plan.workspace_fd = 3;
    /* The denial report's pipe is its fd 4. */
    plan.has_report_fd = true;
    plan.report_fd = 4;
    /* A shared workspace's namespace: the child passes it as 6 (and its user namespace as 7). */
    plan.has_netns_fd = ns != NULL;
    plan.netns_fd = 6;
    plan.has_userns_fd = ns && cs__netns_fd(ns, true) >= 0;
    plan.userns_fd = 7;
    plan.has_sandbox_uid = s->lim.sandbox_uid > 0;
    plan.sandbox_uid = s->lim.sandbox_uid;
    plan.has_sandbox_gid = s->lim.sandbox_gid > 0;
    plan.sandbox_gid = s->lim.sandbox_gid;
    fd = cs__supervisor_sandbox_plan_memfd(&plan, d);
out:
    free(av);
    free(dm);
    if (hex)
        for (size_t i = 0; i < plan.deny_mask_hex.n; i++)
            free(hex[i].s);
    free(hex);
    free(env);
    return fd;
}

/* Live processes of workspace_id (NULL: ""), for its own cap. */
static int64_t ws_live(const struct cs_supervisor *s, const char *workspace_id)
{
    const char *id = workspace_id ? workspace_id : "";
    int64_t n = 0;
    for (const struct proc *p = s->procs; p; p = p->next)
        if (!p->finished && strcmp(p->workspace_id, id) == 0)
            n++;
    return n;
}

/*
 * The spawn, as ordered steps (bubblewrap's way, /work/shared/style.md): each step below has one
 * job, takes what it needs from the spawn's state and leaves what it made there. They run in the
 * order of `steps`; the first that fails stops the run, and then, as after a run that succeeded,
 * the cleanups of the steps that ran run in reverse order. A cleanup frees only what the state
 * still owns: what a later step handed on (to the helper, to the process record, to the table)
 * it no longer holds. Until `start` nothing runs; from `table` on the process is the table's,
 * whatever else fails (a failure then kills it through proc_free).
 */
enum { SPAWN_NENV = 11 };

struct spawn {
    struct cs_supervisor *s;
    const struct cs_supervisor_spawn *sp;
    cs_supervisor_done_fn done;
    void *arg;
    struct cs_diag *d;
    int rootfd, own_rootfd; /* the held root; own_rootfd: opened here, closed after */
    char **argv;            /* the command, NULL-terminated */
    char *envp[SPAWN_NENV + 1];
    size_t ne;
    struct proc *p;       /* the record, until the table takes it */
    struct proc *live;    /* the record once in the table (borrowed) */
    struct cs__netns *ns; /* a shared workspace's namespace, until the record takes it */
    int plan_fd;          /* the sealed plan of a sandboxed process */
    int report[2];        /* the denial report pipe of a sandboxed process */
    char *run_argv[5], *run_env[2];
    char *tmp_env;
    struct cs__supervisor_cmd cmd;
};

/* The live-process caps: the workspace's own, then the runner's (after dropping what is due). */
static int step_limits(struct spawn *st)
{
    const struct cs_supervisor_spawn *sp = st->sp;
    sweep(st->s);
    const char *holder =
        sp->exclusive ? cs_supervisor_workspace_holder(st->s, sp->workspace_id) : NULL;
    if (holder) {
        return cs_diag_set(st->d, CSW_ERROR_WORKSPACE_BUSY,
                           "workspace \"%s\" is held by its live process %s (processes: "
                           "exclusive): wait for it to exit (process_status) or terminate it",
                           sp->workspace_id ? sp->workspace_id : "", holder);
    }
    if (sp->max_live > 0 && ws_live(st->s, sp->workspace_id) >= sp->max_live) {
        return cs_diag_set(st->d, CSW_ERROR_WORKSPACE_BUSY,
                           "live process limit reached (max_live_processes %lld): wait for one "
                           "of the workspace's processes to exit, or terminate one",
                           (long long)sp->max_live);
    }
    if ((int64_t)st->s->live >= st->s->lim.max_live) {
        return cs_diag_set(st->d, CSW_ERROR_WORKSPACE_BUSY,
                           "live process limit reached (the runner's cap of %lld processes, "
                           "every workspace together)",
                           (long long)st->s->lim.max_live);
    }
    return 0;
}

/* The held root (base_roots.h); a process that holds none (tools, unit tests) opens the path.
 * Either way every later step uses the descriptor, never the path. */
static int step_root(struct spawn *st)
{
    const char *root = st->sp->root;
    st->rootfd = cs_roots_get(root);
    if (st->rootfd < 0 && !cs_roots_active())
        st->rootfd = st->own_rootfd = open(root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (st->rootfd < 0) {
        return cs_diag_set(st->d, CSW_ERROR_PROCESS_SPAWN_FAILED, "%s: %s", root,
                           cs_roots_active() ? "not a workspace root this process holds"
                                             : strerror(errno));
    }
    return 0;
}

static void undo_root(struct spawn *st)
{
    if (st->own_rootfd >= 0)
        close(st->own_rootfd);
}

/* The command as C strings; a NUL inside one is refused. */
static int step_argv(struct spawn *st)
{
    const struct cs_supervisor_spawn *sp = st->sp;
    st->argv = calloc(sp->argc + 1, sizeof *st->argv);
    if (!st->argv)
        return cs_diag_set(st->d, CSW_ERROR_PROCESS_SPAWN_FAILED, "out of memory");
    for (size_t i = 0; i < sp->argc; i++) {
        if (memchr(sp->argv[i].s, '\0', sp->argv[i].n)) {
            return cs_diag_set(st->d, CSW_ERROR_PROCESS_SPAWN_FAILED,
                               "command[%zu] contains a NUL byte", i);
        }
        st->argv[i] = strndup(sp->argv[i].s, sp->argv[i].n);
        if (!st->argv[i])
            return cs_diag_set(st->d, CSW_ERROR_PROCESS_SPAWN_FAILED, "out of memory");
    }
    return 0;
}

static void undo_argv(struct spawn *st)
{
    if (!st->argv)
        return;
    for (size_t i = 0; i < st->sp->argc; i++)
        free(st->argv[i]);
    free(st->argv);
}

/* docs/contract/runtime.md section 5: everything cleared, then only these. */
static int step_env(struct spawn *st)
{
    const struct cs_supervisor_spawn *sp = st->sp;
    const struct cs_supervisor *s = st->s;
    char **e = st->envp;
    size_t ne = 0;
    e[ne++] = concat("PATH=", s->sandbox ? CS_SUPERVISOR_SANDBOX_PATH : s->path);
    e[ne++] = concat("HOME=", sp->root);
    e[ne++] = strdup("LANG=C.UTF-8");
    e[ne++] = concat("TMPDIR=", s->tmpdir);
    e[ne++] = strdup(sp->tty ? "TERM=xterm-256color" : "TERM=dumb");
    e[ne++] = strdup("PAGER=cat");
    e[ne++] = strdup("GIT_PAGER=cat");
    e[ne++] = strdup("GIT_TERMINAL_PROMPT=0");
    e[ne++] = strdup("CI=1");
    if (!sp->tty)
        e[ne++] = strdup("NO_COLOR=1");
    st->ne = ne;
    for (size_t i = 0; i < ne; i++)
        if (!e[i])
            return cs_diag_set(st->d, CSW_ERROR_PROCESS_SPAWN_FAILED, "out of memory");
    return 0;
}

static void undo_env(struct spawn *st)
{
    for (size_t i = 0; i < SPAWN_NENV; i++)
        free(st->envp[i]);
}

/* The process record, not yet in the table, and the command the start step runs (the command
 * itself, unless the sandbox steps put the helper in its place). */
static int step_record(struct spawn *st)
{
    const struct cs_supervisor_spawn *sp = st->sp;
    struct cs_supervisor *s = st->s;
    struct proc *p = st->p = calloc(1, sizeof *p);
    if (!p)
        return cs_diag_set(st->d, CSW_ERROR_PROCESS_SPAWN_FAILED, "out of memory");
    p->pidfd = p->in = p->out = p->report = -1;
    p->s = s;
    snprintf(p->id, sizeof p->id, "%s", sp->process_id);
    p->workspace_id = strdup(sp->workspace_id ? sp->workspace_id : "");
    if (!p->workspace_id)
        return cs_diag_set(st->d, CSW_ERROR_PROCESS_SPAWN_FAILED, "out of memory");
    p->tty = sp->tty;
    p->rows = 24;
    p->cols = 80;
    cs__ring_init(&p->ring, sp->ring_bytes > 0 ? sp->ring_bytes : s->lim.ring_bytes);
    p->timeout_ms = sp->timeout_ms > 0                              ? sp->timeout_ms
                    : sp->timeout_ms == CS_SUPERVISOR_NO_TIME_LIMIT ? 0
                                                                    : s->lim.timeout_ms;
    p->term = CSW_PROCESS_TERMINATION_UNKNOWN;
    p->on_exit = sp->on_exit;
    p->exit_arg = sp->exit_arg;
    st->cmd = (struct cs__supervisor_cmd){
        .argv = st->argv,
        .envp = st->envp,
        .root = sp->root,
        .root_fd = st->rootfd,
        .path = s->path,
        .tty = sp->tty,
        .rows = p->rows,
        .cols = p->cols,
        .report_fd = -1,
        .netns_fd = -1,
        .userns_fd = -1,
    };
    return 0;
}

static void undo_record(struct spawn *st)
{
    if (st->p)
        free(st->p->workspace_id);
    free(st->p);
}

/* What the sandbox would refuse, refused before anything runs: network "enabled" without the
 * helper (loopback falls back as restricted does, docs/contract/sandbox.md section 2:
 * unsandboxed, reported as enforcement none), and a program missing from the sandbox PATH (the
 * sandbox binds /usr, /bin, ... of this host read-only). */
static int step_sandbox_checks(struct spawn *st)
{
    const struct cs_supervisor *s = st->s;
    const char *prog = st->argv[0];
    if (!s->sandbox) {
        if (st->sp->network == CS_SUPERVISOR_NETWORK_ENABLED)
            return cs_diag_set(st->d, CSW_ERROR_PROCESS_SPAWN_FAILED,
                               "network \"enabled\" needs the Linux sandbox helper, whose probe "
                               "failed: a missing Linux helper is not permission");
        return 0;
    }
    if (!strchr(prog, '/')) {
        char *found = cs__supervisor_lookup(CS_SUPERVISOR_SANDBOX_PATH, prog);
        if (!found)
            return cs_diag_set(st->d, CSW_ERROR_PROCESS_SPAWN_FAILED,
                               "%s: command not found in the sandbox PATH (%s)", prog,
                               CS_SUPERVISOR_SANDBOX_PATH);
        free(found);
        return 0;
    }
    /* A path (absolute, or relative to the root, where the command starts): what does not exist
     * here does not exist inside either. */
    struct stat stb;
    int e = fstatat(st->rootfd, prog, &stb, 0) != 0              ? errno
            : !S_ISREG(stb.st_mode)                              ? EACCES
            : faccessat(st->rootfd, prog, X_OK, AT_EACCESS) != 0 ? errno
                                                                 : 0;
    if (e != 0)
        return cs_diag_set(st->d, CSW_ERROR_PROCESS_SPAWN_FAILED, "%s: %s", prog, strerror(e));
    return 0;
}

/* workflows.md section 3: a shared workspace's sandboxed commands join its one namespace. */
static int step_netns(struct spawn *st)
{
    const struct cs_supervisor_spawn *sp = st->sp;
    if (!st->s->sandbox || !sp->workspace_netns || !sp->workspace_id || !sp->workspace_id[0])
        return 0;
    st->ns = cs__netns_acquire(&st->s->netns, sp->workspace_id, st->d);
    if (!st->ns)
        return CSW_ERROR_PROCESS_SPAWN_FAILED;
    st->cmd.netns_fd = cs__netns_fd(st->ns, false);
    st->cmd.userns_fd = cs__netns_fd(st->ns, true);
    return 0;
}

static void undo_netns(struct spawn *st)
{
    cs__netns_release(st->ns); /* acquired, but nothing started: its grace period may start */
}

/* docs/contract/sandbox.md §1: the plan, sealed in a memfd; the helper runs it in place of the
 * command (`run --plan-fd 5`, or the helper started ahead). */
static int step_plan(struct spawn *st)
{
    struct cs_supervisor *s = st->s;
    if (!s->sandbox)
        return 0;
    st->plan_fd = sandbox_plan(s, st->sp, st->argv, st->envp, st->ne, st->ns, st->d);
    if (st->plan_fd < 0)
        return CSW_ERROR_PROCESS_SPAWN_FAILED;
    st->tmp_env = concat("TMPDIR=", cs__supervisor_helper_tmpdir());
    if (!st->tmp_env)
        return cs_diag_set(st->d, CSW_ERROR_PROCESS_SPAWN_FAILED, "out of memory");
    st->run_argv[0] = (char *)"codespace-linux-sandbox";
    st->run_argv[1] = (char *)"run";
    st->run_argv[2] = (char *)"--plan-fd";
    st->run_argv[3] = (char *)"5";
    st->run_argv[4] = NULL;
    st->run_env[0] = st->tmp_env;
    st->run_env[1] = NULL;
    st->cmd.plan_fd = st->plan_fd;
    st->cmd.argv = st->run_argv;
    st->cmd.envp = st->run_env;
    st->cmd.prog = s->sandbox;
    st->cmd.pass_root = true;
    return 0;
}

static void undo_plan(struct spawn *st)
{
    if (st->plan_fd >= 0)
        close(st->plan_fd);
    free(st->tmp_env);
}

/* The denial report pipe of a sandboxed process: above the child's fixed numbers (3 and 4) so
 * its dup2s cannot clobber one with the other; the read end non-blocking, read after the reap;
 * the write end blocking (a pipe's 64 KiB hold a whole report, so the helper never waits). */
static int step_report(struct spawn *st)
{
    if (!st->s->sandbox)
        return 0;
    int rp[2];
    if (pipe2(rp, O_CLOEXEC | O_NONBLOCK) != 0)
        goto fail;
    st->report[0] = fcntl(rp[0], F_DUPFD_CLOEXEC, 5);
    st->report[1] = fcntl(rp[1], F_DUPFD_CLOEXEC, 5);
    close(rp[0]);
    close(rp[1]);
    if (st->report[0] < 0 || st->report[1] < 0 || fcntl(st->report[1], F_SETFL, 0) != 0)
        goto fail;
    st->cmd.report_fd = st->report[1];
    return 0;
fail:
    return cs_diag_set(st->d, CSW_ERROR_PROCESS_SPAWN_FAILED, "cannot create the report pipe: %s",
                       strerror(errno));
}

static void undo_report(struct spawn *st)
{
    for (size_t i = 0; i < 2; i++)
        if (st->report[i] >= 0)
            close(st->report[i]);
}

/* The start: the helper started ahead takes a sandboxed command (a shared workspace's with its
 * namespaces), else a child is started for it; the next helper is started on the loop turn
 * after. The record takes the process's descriptors and the namespace it joined. */
static int step_start(struct spawn *st)
{
    struct cs_supervisor *s = st->s;
    struct proc *p = st->p;
    struct cs__supervisor_fds fds;
    bool warm = s->sandbox && !s->lim.sandbox_cold;
    int started = cs__supervisor_start(&st->cmd, warm ? &s->warm : NULL, &fds, st->d);
    if (warm && s->warm.pid <= 0 && !s->warm_pending)
        s->warm_pending = cs_loop_defer(s->loop, warm_rearm, s) == 0;
    if (st->plan_fd >= 0) /* the helper has its own copy, or never will */
        close(st->plan_fd);
    st->plan_fd = -1;
    if (started != 0)
        return CSW_ERROR_PROCESS_SPAWN_FAILED;
    p->pid = fds.pid;
    p->pidfd = fds.pidfd;
    p->netns = st->ns; /* released when it has finished */
    st->ns = NULL;
    if (st->report[1] >= 0)
        close(st->report[1]); /* the helper holds the only write end: EOF once it is gone */
    st->report[1] = -1;
    p->report = st->report[0];
    st->report[0] = -1;
    p->in = fds.in;
    p->out = fds.out;
    if (p->in < 0)
        p->stdin_closed = true;
    return 0;
}

/* From here the process runs: it is the table's whatever else fails. */
static int step_table(struct spawn *st)
{
    struct cs_supervisor *s = st->s;
    struct proc *p = st->live = st->p;
    st->p = NULL;
    if (s->procs_tail) {
        p->prev = s->procs_tail;
        s->procs_tail->next = p;
    } else {
        s->procs = p;
    }
    s->procs_tail = p;
    s->live++;
    return 0;
}

/* Its exit, its output and its time limit (none: no timer at all) watched on the loop: a
 * process that cannot be watched must not run unwatched, so it is killed. */
static int step_watch(struct spawn *st)
{
    struct proc *p = st->live;
    struct cs_loop *loop = st->s->loop;
    p->pidw = cs_loop_fd_add(loop, p->pidfd, CS_LOOP_READ, on_exit_ready, p);
    p->outw = cs_loop_fd_add(loop, p->out, CS_LOOP_READ, on_output, p);
    if (p->timeout_ms > 0)
        p->limit_timer = cs_loop_timer_add(loop, p->timeout_ms, on_time_limit, p);
    if (!p->pidw || !p->outw || (p->timeout_ms > 0 && !p->limit_timer)) {
        int e = errno;
        proc_free(p);
        st->live = NULL;
        return cs_diag_set(st->d, CSW_ERROR_PROCESS_SPAWN_FAILED,
                           "out of resources watching the process: %s", strerror(e));
    }
    return 0;
}

/* The exec answer: once it has finished or yield_ms passed, or at once (no yield, or no memory
 * to wait). */
static int step_answer(struct spawn *st)
{
    const struct cs_supervisor_spawn *sp = st->sp;
    if (sp->yield_ms <= 0 || waiter_add(st->live, WAIT_EXEC, 0, sp->yield_ms, st->done, st->arg))
        answer_exec(st->live, sp->yield_ms > 0, st->done, st->arg);
    return 0;
}

static const struct spawn_step {
    int (*run)(struct spawn *st);   /* 0, or the error code with st->d set */
    void (*undo)(struct spawn *st); /* frees what st still owns of the step's; NULL: nothing */
} spawn_steps[] = {
    {step_limits, NULL},      {step_root, undo_root},     {step_argv, undo_argv},
    {step_env, undo_env},     {step_record, undo_record}, {step_sandbox_checks, NULL},
    {step_netns, undo_netns}, {step_plan, undo_plan},     {step_report, undo_report},
    {step_start, NULL},       {step_table, NULL},         {step_watch, NULL},
    {step_answer, NULL},
};

int cs_supervisor_spawn(struct cs_supervisor *s, const struct cs_supervisor_spawn *sp,
                        cs_supervisor_done_fn done, void *arg, struct cs_diag *d)
{
    struct spawn st = {
        .s = s,
        .sp = sp,
        .done = done,
        .arg = arg,
        .d = d,
        .rootfd = -1,
        .own_rootfd = -1,
        .plan_fd = -1,
        .report = {-1, -1},
    };
    enum { NSTEPS = sizeof spawn_steps / sizeof *spawn_steps };
    size_t ran = 0;
    int rc = 0;
    while (ran < NSTEPS && rc == 0)
        rc = spawn_steps[ran++].run(&st);
    while (ran > 0)
        if (spawn_steps[--ran].undo)
            spawn_steps[ran].undo(&st);
    return rc;
}

/* ---- the process tools ---- */

static struct proc *find(struct cs_supervisor *s, const struct cs_str *id)
{
    sweep(s);
    /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): list kept whole by proc_unlink */
    for (struct proc *p = s->procs; p; p = p->next)
        if (strlen(p->id) == id->n && memcmp(p->id, id->s, id->n) == 0)
            /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): as above */
            return p;
    return NULL;
}

const char *cs_supervisor_workspace_holder(const struct cs_supervisor *s, const char *workspace_id)
{
    const char *id = workspace_id ? workspace_id : "";
    const char *holder = NULL; /* the table is newest first: the last match is the oldest */
    for (const struct proc *p = s->procs; p; p = p->next)
        if (!p->finished && strcmp(p->workspace_id, id) == 0)
            holder = p->id;
    return holder;
}

const char *cs_supervisor_workspace_of(struct cs_supervisor *s, const struct cs_str *process_id)
{
    struct proc *p = find(s, process_id);
    return p ? p->workspace_id : NULL;
}

static void terminate_now(struct cs_supervisor *s, struct proc *p)
{
    if (p->finished || p->reaped)
        return;
    if (!p->forced) {
        p->forced = true;
        p->term = CSW_PROCESS_TERMINATION_TERMINATED;
    }
    signal_group(p, SIGTERM);
    if (!p->kill_timer)
        p->kill_timer = cs_loop_timer_add(s->loop, s->lim.kill_grace_ms, on_kill_grace, p);
    if (!p->kill_timer)
        signal_group(p, SIGKILL);
}

size_t cs_supervisor_terminate_workspace(struct cs_supervisor *s, const struct cs_str *workspace_id)
{
    size_t n = 0;
    for (struct proc *p = s->procs; p; p = p->next) {
        if (p->finished || p->reaped || strlen(p->workspace_id) != workspace_id->n ||
            memcmp(p->workspace_id, workspace_id->s, workspace_id->n) != 0)
            continue;
        terminate_now(s, p);
        n++;
    }
    return n;
}

bool cs_supervisor_kill(struct cs_supervisor *s, const struct cs_str *process_id)
{
    struct proc *p = find(s, process_id);
    if (!p || p->finished || p->reaped)
        return false;
    if (!p->forced) {
        p->forced = true;
        p->term = CSW_PROCESS_TERMINATION_TERMINATED;
    }
    signal_group(p, SIGKILL);
    return true;
}

bool cs_supervisor_cancel(struct cs_supervisor *s, cs_supervisor_done_fn done, void *arg)
{
    for (struct proc *p = s->procs; p; p = p->next) {
        for (struct waiter *w = p->waiters; w; w = w->next) {
            if (w->done == done && w->arg == arg) {
                waiter_answer(w); /* p is live (a finished one has no waiters): not freed */
                return true;
            }
        }
    }
    return false;
}

static struct proc *find_or_fail(struct cs_supervisor *s, const struct cs_str *id,
                                 cs_supervisor_done_fn done, void *arg)
{
    struct proc *p = find(s, id);
    if (!p)
        done(arg, CSW_ERROR_PROCESS_NOT_FOUND,
             "no process with this process_id (unknown, or evicted after it exited)", NULL);
    return p;
}

void cs_supervisor_write_stdin(struct cs_supervisor *s, const struct csw_mcp_write_stdin_input *in,
                               cs_supervisor_done_fn done, void *arg)
{
    struct proc *p = find_or_fail(s, &in->process_id, done, arg);
    if (!p)
        return;
    if (p->finished || p->reaped) {
        done(arg, CSW_ERROR_PROCESS_NOT_FOUND, "the process has exited; its stdin is closed", NULL);
        return;
    }
    if (p->stdin_closed || p->input_ended) {
        done(arg, CSW_ERROR_PROCESS_NOT_FOUND, "stdin of this process is closed", NULL);
        return;
    }
    struct write_req *r = calloc(1, sizeof *r);
    bool close_after = in->has_close && in->close;
    /* A terminal has no separate input to close: its EOF character ends the line discipline's
     * input instead (what a user typing ^D does). */
    size_t extra = close_after && p->tty ? 1 : 0;
    char *data = malloc(in->data.n + extra + 1);
    if (!r || !data) {
        free(r);
        free(data);
        done(arg, CSW_ERROR_INTERNAL, "out of memory", NULL);
        return;
    }
    memcpy(data, in->data.s, in->data.n);
    if (extra) {
        struct termios tio;
        data[in->data.n] = (char)(tcgetattr(p->in, &tio) == 0 ? tio.c_cc[VEOF] : 4);
    }
    r->data = data;
    r->n = in->data.n + extra;
    r->extra = extra;
    r->close = close_after && !p->tty;
    r->done = done;
    r->arg = arg;
    if (close_after)
        p->input_ended = true; /* later writes are refused, as for a closed pipe */
    if (p->wq_tail)
        p->wq_tail->next = r;
    else
        p->wq = r;
    p->wq_tail = r;
    if (p->wq == r)
        write_pump(p);
}

void cs_supervisor_read(struct cs_supervisor *s, const struct csw_mcp_read_process_input *in,
                        cs_supervisor_done_fn done, void *arg)
{
    struct proc *p = find_or_fail(s, &in->process_id, done, arg);
    if (!p)
        return;
    int64_t cursor = in->has_cursor ? in->cursor : 0;
    int64_t wait = in->has_wait_ms ? in->wait_ms : 0;
    if (wait > 0 && !p->finished && !readable_from(p, read_start(p, cursor)) &&
        waiter_add(p, WAIT_READ, cursor, wait, done, arg) == 0)
        return;
    answer_read(p, cursor, done, arg);
}

void cs_supervisor_status(struct cs_supervisor *s, const struct csw_mcp_process_status_input *in,
                          cs_supervisor_done_fn done, void *arg)
{
    struct proc *p = find_or_fail(s, &in->process_id, done, arg);
    if (!p)
        return;
    struct csw_mcp_process_status_output out;
    memset(&out, 0, sizeof out);
    out.process_id.s = p->id;
    out.process_id.n = strlen(p->id);
    out.state = p->finished ? CSW_PROCESS_STATE_EXITED : CSW_PROCESS_STATE_RUNNING;
    fill_end(p, &out.has_exit_code, &out.exit_code, &out.has_termination, &out.termination);
    char name[24];
    if (p->finished && p->term == CSW_PROCESS_TERMINATION_SIGNALED && p->signo > 0) {
        out.has_signal = true;
        out.signal.number = p->signo;
        const char *abbrev = sigabbrev_np(p->signo);
        if (abbrev) {
            snprintf(name, sizeof name, "SIG%s", abbrev);
            out.signal.has_name = true;
            out.signal.name.s = name;
            out.signal.name.n = strlen(name);
        }
    }
    out.output_total = (int64_t)p->ring.total;
    out.output_retained_from = (int64_t)retained_from(p);
    out.eof = p->finished;
    out.tty = p->tty;
    fill_denials(p, &out.has_denials, &out.denials.v, &out.denials.n, &out.has_denials_dropped,
                 &out.denials_dropped);
    done(arg, 0, NULL, &out);
}

void cs_supervisor_resize(struct cs_supervisor *s, const struct csw_mcp_process_resize_input *in,
                          cs_supervisor_done_fn done, void *arg)
{
    struct proc *p = find_or_fail(s, &in->process_id, done, arg);
    if (!p)
        return;
    if (!p->tty) {
        done(arg, CSW_ERROR_PROCESS_NOT_TTY, "the process runs with pipes, not a terminal", NULL);
        return;
    }
    if (p->finished || p->reaped || p->out < 0) {
        done(arg, CSW_ERROR_PROCESS_NOT_RUNNING, "the process has exited", NULL);
        return;
    }
    struct winsize ws = {.ws_row = (unsigned short)in->rows, .ws_col = (unsigned short)in->cols};
    if (ioctl(p->out, TIOCSWINSZ, &ws) != 0) {
        struct cs_diag dg;
        cs_diag_set(&dg, CSW_ERROR_INTERNAL, "TIOCSWINSZ: %s", strerror(errno));
        done(arg, (int)dg.code, dg.text, NULL);
        return;
    }
    p->rows = in->rows;
    p->cols = in->cols;
    struct csw_mcp_process_resize_output out = {.rows = in->rows, .cols = in->cols};
    done(arg, 0, NULL, &out);
}

void cs_supervisor_terminate(struct cs_supervisor *s,
                             const struct csw_mcp_terminate_process_input *in,
                             cs_supervisor_done_fn done, void *arg)
{
    struct proc *p = find_or_fail(s, &in->process_id, done, arg);
    if (!p)
        return;
    if (!p->finished) {
        if (!p->reaped && !p->forced) {
            p->forced = true;
            p->term = CSW_PROCESS_TERMINATION_TERMINATED;
        }
        if (!p->reaped) {
            signal_group(p, SIGTERM);
            if (!p->kill_timer)
                p->kill_timer = cs_loop_timer_add(s->loop, s->lim.kill_grace_ms, on_kill_grace, p);
            if (!p->kill_timer)
                signal_group(p, SIGKILL);
        }
        if (waiter_add(p, WAIT_TERMINATE, 0, s->lim.kill_grace_ms + TERMINATE_SLACK_MS, done,
                       arg) == 0)
            return;
    }
    struct csw_mcp_terminate_process_output out = {
        .state = p->finished ? CSW_PROCESS_STATE_EXITED : CSW_PROCESS_STATE_RUNNING};
    done(arg, 0, NULL, &out);
}
