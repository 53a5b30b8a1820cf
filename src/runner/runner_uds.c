/*
 * runner_uds: the gateway side of `--runner uds` (docs/contract/runtime.md §4). Creates a private
 * 0700 leaf directory under the runner dir, starts codespace-runtime on `<leaf>/runner.sock`, polls
 * for the socket (20 ms, up to 2 s, while the worker lives), does the hello handshake, then carries
 * requests (`rrpc-<n>` ids, a 120 s deadline each) and the worker's events.
 *
 * Failure split: a request that could not be queued is "before dispatch" (nothing ran); a
 * request in flight when the worker goes away, the stream breaks or its deadline passes is
 * "ambiguous" (it may have run). Worker loss kills the worker and every process tree it owned:
 * the gateway is a child subreaper, so the worker's orphaned commands become our children, and
 * their groups are killed and reaped here. The socket and the directory are removed.
 *
 * A lost worker is replaced (docs/contract/runtime.md §5, invariant R12): the next call after the
 * loss starts a fresh worker in a fresh leaf directory, blocking like the first start, with a
 * back-off after workers that die young (RESTART_*), at most RESTART_PER_MIN starts a minute, each
 * start logged. Each worker's connection has its own link, so a late callback of the old connection
 * never touches the new one.
 *
 * Lifetime (issue 34): the worker gets the read end of a pipe whose write end only we hold
 * (`--gateway-fd N`, close-on-exec here); our death, at any moment of its start or after, is its
 * hang-up, and the worker exits and removes its socket and leaf (runtime_main.c). We close our
 * end once we have reaped it.
 *
 * Trust: the worker is our own child, but its frames are still decoded through the generated
 * decoder; a bad frame is a lost worker.
 * Entry points: cs_runner_uds_new (runner.h), cs__runner_uds_call/free (runner_internal.h).
 */
#include "runner_internal.h"

#include "base_roots.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base_json.h"
#include "base_json_fast.h"
#include "base_log.h"
#include "transport_frame.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

extern char **environ;

#define POLL_EVERY_MS 20
#define POLL_FOR_MS   2000

/* Replacing a lost worker: at most RESTART_PER_MIN starts (the first one included) in any 60 s.
 * A worker that lived less than RESTART_YOUNG_MS, or a start that failed, is a failure; the
 * first one in a row is replaced at once, the second waits RESTART_BACKOFF_MS, each further one
 * twice as long as the last, up to RESTART_BACKOFF_MAX_MS. */
#define RESTART_PER_MIN        5
#define RESTART_YOUNG_MS       10000
#define RESTART_BACKOFF_MS     500
#define RESTART_BACKOFF_MAX_MS 30000

struct cs__runner_uds;

/* One worker's connection. The callbacks get the link, not the runner: a link that is no longer
 * the runner's current one belongs to a lost worker and is only waiting to be freed. */
struct link {
    struct cs__runner_uds *u;
    struct cs_runner_conn *conn;
    struct link *next; /* in u->dying */
};

struct call {
    struct call *prev, *next;
    uint64_t id;
    cs_runner_done_fn done;
    void *arg;
    int64_t deadline; /* cs_loop_now_ms() after which the call is ambiguous */
    struct cs__runner_uds *u;
};

struct cs__runner_uds {
    struct cs_runner *r;
    pid_t pid;
    int pidfd;
    struct cs_loop_fd *pidw;
    int gatefd;         /* the write end of the worker's --gateway-fd pipe, or -1 */
    struct link *link;  /* the live worker's connection, NULL once lost */
    struct link *dying; /* lost workers' connections, closed, freed on the next turn */
    char *dir, *sock;   /* the current worker's leaf and socket (NULL when none) */
    /* What a (re)start needs: copies of the options. */
    char *runtime_bin, *runner_dir, *version, *sandbox_helper;
    char *operations_db; /* handed to each worker (deny identities), or NULL */
    int64_t max_processes, timeout_ms, sandbox_uid, sandbox_gid;
    int64_t starts[RESTART_PER_MIN]; /* the last starts' times, a ring */
    uint64_t nstarts;
    int64_t started_at, not_before;
    unsigned young; /* workers in a row that died young or did not start */
    uint64_t next_id;
    struct call *calls;
    struct cs_loop_timer *sweep; /* every second: calls past their deadline */
    bool lost;
    char lost_why[256];
    /* The worker's stderr (its JSON log lines): a pipe the gateway relays to its own stderr, so
     * that no child inherits the server's stdout or stderr (docs/contract/runtime.md section 3). */
    int logfd;
    struct cs_loop_fd *logw;
    char logbuf[4096];
    size_t logn;
};

/* ---- cleanup ---- */

/* Kills and reaps whatever the worker left behind as our children (we are a subreaper): each one
 * is a command's session leader or a member of its group. A few rounds, as the death of a leader
 * reparents its own children to us. */
static void kill_orphans(void)
{
    pid_t self = getpid();
    for (int round = 0; round < 20; round++) {
        bool any = false;
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char *end;
            long pid = strtol(e->d_name, &end, 10);
            if (*end || pid <= 0)
                continue;
            char path[64], buf[512];
            snprintf(path, sizeof path, "/proc/%ld/stat", pid);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                continue;
            ssize_t n = read(fd, buf, sizeof buf - 1);
            close(fd);
            if (n <= 0)
                continue;
            buf[n] = '\0';
            const char *rp = strrchr(buf, ')'); /* the name may hold spaces and parens */
            char state = 0;
            long ppid = 0, pgrp = 0;
            /* NOLINTNEXTLINE(cert-err34-c): the kernel's stat line, well-formed numbers */
            if (!rp || sscanf(rp + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3 || ppid != self)
                continue;
            any = true;
            if (pgrp == pid)
                (void)kill(-(pid_t)pid, SIGKILL);
            (void)kill((pid_t)pid, SIGKILL);
            (void)waitpid((pid_t)pid, NULL, 0);
        }
        if (d)
            closedir(d);
        if (!any)
            return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Relays what the worker wrote to its stderr (its own JSON log lines, unchanged) to the
 * gateway's log, whole lines only (a line longer than the buffer goes out in pieces), until the
 * pipe is empty. At the end (the worker is gone) the rest goes
 * too and the pipe is closed. */
static void relay_log(struct cs__runner_uds *u, bool end)
{
    while (u->logfd >= 0) {
        ssize_t n = read(u->logfd, u->logbuf + u->logn, sizeof u->logbuf - u->logn);
        if (n < 0 && errno == EINTR)
            continue;
        if (n > 0) {
            u->logn += (size_t)n;
            char *nl = memrchr(u->logbuf, '\n', u->logn);
            size_t whole = nl                            ? (size_t)(nl - u->logbuf) + 1
                           : u->logn == sizeof u->logbuf ? u->logn
                                                         : 0;
            cs_log_forward(u->logbuf, whole);
            memmove(u->logbuf, u->logbuf + whole, u->logn - whole);
            u->logn -= whole;
            continue;
        }
        if (n < 0 && errno == EAGAIN && !end)
            return;
        /* EOF, an error, or the end: the rest, then no more. */
        cs_log_forward(u->logbuf, u->logn);
        u->logn = 0;
        cs_loop_fd_del(u->logw);
        u->logw = NULL;
        close(u->logfd);
        u->logfd = -1;
    }
}

static void on_worker_log(void *arg, int fd, unsigned events)
{
    (void)fd;
    (void)events;
    relay_log(arg, false);
}

/* Our end of the worker's --gateway-fd pipe: closed once the worker is reaped (a clean shutdown
 * ends it by the socket's EOF, quietly; its hang-up is for our death). */
static void close_gate(struct cs__runner_uds *u)
{
    if (u->gatefd >= 0)
        close(u->gatefd);
    u->gatefd = -1;
}

static void reap_worker(struct cs__runner_uds *u, int grace_ms)
{
    if (u->pidfd < 0) {
        close_gate(u);
        return;
    }
    struct pollfd p = {.fd = u->pidfd, .events = POLLIN};
    if (grace_ms <= 0 || poll(&p, 1, grace_ms) <= 0)
        (void)pidfd_send_signal(u->pidfd, SIGKILL, NULL, 0);
    siginfo_t si;
    while (waitid((idtype_t)P_PIDFD, (id_t)u->pidfd, &si, WEXITED) != 0 && errno == EINTR)
        ;
    close_gate(u);
    cs_loop_fd_del(u->pidw);
    u->pidw = NULL;
    close(u->pidfd);
    u->pidfd = -1;
    kill_orphans();
    relay_log(u, true); /* the worker's last words, then the pipe is closed */
}

static void remove_files(struct cs__runner_uds *u)
{
    if (u->sock)
        (void)unlink(u->sock);
    if (u->dir)
        (void)rmdir(u->dir);
    free(u->sock);
    free(u->dir);
    u->sock = u->dir = NULL;
}

static void complete_all(struct cs__runner_uds *u, enum cs_runner_outcome outcome, const char *why)
{
    while (u->calls) {
        struct call *c = u->calls;
        u->calls = c->next;
        if (u->calls)
            u->calls->prev = NULL;
        struct cs_runner_reply rep = {.outcome = outcome, .msg = why};
        c->done(c->arg, &rep);
        free(c);
    }
}

static void free_options(struct cs__runner_uds *u)
{
    free(u->runtime_bin);
    free(u->runner_dir);
    free(u->version);
    free(u->sandbox_helper);
    free(u->operations_db);
}

/* Frees a lost worker's link (deferred: never inside its own callbacks). */
static void free_link(void *arg)
{
    struct link *l = arg;
    for (struct link **p = &l->u->dying; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            break;
        }
    cs_runner_conn_free(l->conn);
    free(l);
}

static int64_t backoff_ms(unsigned young)
{
    if (young <= 1)
        return 0;
    int64_t ms = RESTART_BACKOFF_MS;
    for (unsigned i = 2; i < young && ms < RESTART_BACKOFF_MAX_MS; i++)
        ms *= 2;
    return ms < RESTART_BACKOFF_MAX_MS ? ms : RESTART_BACKOFF_MAX_MS;
}

/* The worker is gone (or must be): every pending call is ambiguous, the worker and its commands
 * are killed, the files removed, and the tool layer told. The next call starts a new worker. */
static void lose(struct cs__runner_uds *u, const char *why)
{
    if (u->lost)
        return;
    u->lost = true;
    cs_loop_timer_cancel(u->sweep);
    u->sweep = NULL;
    cs_diag_format(u->lost_why, sizeof u->lost_why, "%s", why); /* cut on a character */
    struct link *l = u->link;
    u->link = NULL;
    if (l) {
        cs_runner_conn_close(l->conn, why); /* its closed callback frees it */
        l->next = u->dying;
        u->dying = l;
    }
    reap_worker(u, 0);
    remove_files(u);
    int64_t now = cs_loop_now_ms();
    u->young = now - u->started_at < RESTART_YOUNG_MS ? u->young + 1 : 0;
    u->not_before = now + backoff_ms(u->young);
    cs_log(
        CS_LOG_WARNING, "runner worker lost",
        json_pack("{s:s,s:I}", "error", why, "next_start_in_ms", (json_int_t)backoff_ms(u->young)));
    struct cs_diag d; /* the tool layer answers a transport failure with TIMEOUT */
    cs_diag_set(&d, CSW_ERROR_TIMEOUT, "runner transport failed: %s", why);
    complete_all(u, CS_RUNNER_AMBIGUOUS, d.text);
    if (u->r->ev.lost)
        u->r->ev.lost(u->r->ev.arg);
}

/* ---- the connection ---- */

static void call_unlink(struct cs__runner_uds *u, struct call *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        u->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
}

static struct call *take_call(struct cs__runner_uds *u, const struct cs_str *rid)
{
    uint64_t id;
    if (!cs__runner_rid_parse(rid, &id))
        return NULL;
    for (struct call *c = u->calls; c; c = c->next) {
        if (c->id != id)
            continue;
        call_unlink(u, c);
        return c;
    }
    return NULL;
}

static void on_message(void *arg, struct csw_runner_wire *msg)
{
    struct link *l = arg;
    struct cs__runner_uds *u = l->u;
    if (l != u->link)
        return; /* a lost worker's */
    if (msg->tag == CSW_RUNNER_WIRE_EVENT) {
        const struct csw_runner_event *e = &msg->u.event;
        if (e->event.tag == CSW_RUNNER_WIRE_EVENT_BODY_PROCESS_EXITED && u->r->ev.process_exited) {
            const struct cs_str *id = &e->event.u.process_exited.data.process_id;
            char buf[CS_SUPERVISOR_ID_SIZE + 8];
            if (id->n < sizeof buf) {
                memcpy(buf, id->s, id->n);
                buf[id->n] = '\0';
                u->r->ev.process_exited(u->r->ev.arg, buf, &e->event.u.process_exited.data);
            }
        }
        return;
    }
    if (msg->tag != CSW_RUNNER_WIRE_RESPONSE) {
        lose(u, "the worker sent a request");
        return;
    }
    const struct csw_runner_response *resp = &msg->u.response;
    struct call *c = take_call(u, &resp->request_id);
    if (!c)
        return; /* a late answer to a call already completed (deadline): dropped */
    struct cs_runner_reply rep;
    struct cs_diag d;
    if (resp->ok && resp->has_result) {
        rep = (struct cs_runner_reply){.outcome = CS_RUNNER_OK, .result = &resp->result};
    } else if (!resp->ok && resp->has_error) {
        cs_diag_set(&d, resp->error.code, "%.*s", (int)resp->error.message.n,
                    resp->error.message.s);
        rep = (struct cs_runner_reply){
            .outcome = CS_RUNNER_ERROR, .code = (int)d.code, .msg = d.text};
    } else {
        rep = (struct cs_runner_reply){.outcome = CS_RUNNER_AMBIGUOUS,
                                       .msg = "runner transport failed: a response with neither "
                                              "result nor error"};
    }
    c->done(c->arg, &rep);
    free(c);
}

static void on_bad(void *arg, const json_t *raw, const char *why)
{
    (void)raw;
    struct link *l = arg;
    if (l != l->u->link)
        return;
    char msg[CS_DIAG_TEXT_SIZE];
    cs_diag_format(msg, sizeof msg, "bad frame from the worker: %s", why);
    lose(l->u, msg);
}

static void on_closed(void *arg, const char *why)
{
    struct link *l = arg;
    struct cs__runner_uds *u = l->u;
    if (l == u->link) {
        char msg[CS_DIAG_TEXT_SIZE];
        cs_diag_format(msg, sizeof msg, "worker connection ended: %s", why);
        lose(u, msg); /* moves l to u->dying */
    }
    /* Without memory to defer, l stays in u->dying until the runner is freed. */
    (void)cs_loop_defer(u->r->loop, free_link, l);
}

static void on_worker_exit(void *arg, int fd, unsigned events)
{
    (void)fd;
    (void)events;
    lose(arg, "the worker exited");
}

/* One timer for every call's deadline (a timer a call would cost two timerfd updates per call):
 * every second, the calls past theirs become ambiguous. */
static void on_sweep(void *arg)
{
    struct cs__runner_uds *u = arg;
    u->sweep = NULL;
    int64_t now = cs_loop_now_ms();
    for (struct call *c = u->calls, *next; c; c = next) {
        next = c->next;
        if (c->deadline > now)
            continue;
        call_unlink(u, c);
        struct cs_runner_reply rep = {.outcome = CS_RUNNER_AMBIGUOUS,
                                      .msg = "runner transport failed: no answer within 120 s"};
        c->done(c->arg, &rep);
        free(c);
    }
    if (!u->lost)
        u->sweep = cs_loop_timer_add(u->r->loop, 1000, on_sweep, u);
}

static int start_worker(struct cs__runner_uds *u, struct cs_diag *d);

/* After a loss: starts a new worker unless the back-off or the per-minute cap says not yet.
 * Returns 0 with a live worker, or -1 with d saying why (under TIMEOUT, what the tool layer
 * answers a call refused before dispatch with). */
static int replace_worker(struct cs__runner_uds *u, struct cs_diag *d)
{
    int64_t now = cs_loop_now_ms();
    int64_t oldest = u->starts[u->nstarts % RESTART_PER_MIN];
    if (now < u->not_before) {
        cs_diag_set(d, CSW_ERROR_TIMEOUT,
                    "runner transport failed before dispatch: %s; the next worker starts in "
                    "%" PRId64 " ms",
                    u->lost_why, u->not_before - now);
        return -1;
    }
    if (u->nstarts >= RESTART_PER_MIN && now - oldest < 60000) {
        cs_diag_set(d, CSW_ERROR_TIMEOUT,
                    "runner transport failed before dispatch: %s; %d workers started within a "
                    "minute, the next starts in %" PRId64 " ms",
                    u->lost_why, RESTART_PER_MIN, oldest + 60000 - now);
        return -1;
    }
    struct cs_diag err = {0};
    u->starts[u->nstarts++ % RESTART_PER_MIN] = now;
    cs_log(CS_LOG_INFO, "runner worker starting",
           json_pack("{s:s,s:I}", "replacing", u->lost_why, "start", (json_int_t)u->nstarts));
    if (start_worker(u, &err) != 0) {
        u->young++;
        u->not_before = cs_loop_now_ms() + backoff_ms(u->young);
        cs_log(CS_LOG_ERROR, "runner worker did not start",
               json_pack("{s:s,s:I}", "error", err.text, "next_start_in_ms",
                         (json_int_t)backoff_ms(u->young)));
        cs_diag_set(d, CSW_ERROR_TIMEOUT,
                    "runner transport failed before dispatch: %.160s; a new worker did not "
                    "start: %.160s",
                    u->lost_why, err.text);
        return -1;
    }
    cs_log(CS_LOG_INFO, "runner worker replaced",
           json_pack("{s:I,s:s}", "pid", (json_int_t)u->pid, "replaced", u->lost_why));
    if (u->r->ev.reconnected)
        u->r->ev.reconnected(u->r->ev.arg);
    return 0;
}

/* A request the worker answers within microseconds: the gateway polls for its answer (busy
 * polling, runner.h). Not a spawn, a patch, a long poll or a termination. */
static bool quick(const struct csw_runner_wire_op *op)
{
    switch (op->tag) {
    case CSW_RUNNER_WIRE_OP_READ:
    case CSW_RUNNER_WIRE_OP_FIND:
    case CSW_RUNNER_WIRE_OP_WRITE_STDIN:
    case CSW_RUNNER_WIRE_OP_PROCESS_STATUS:
    case CSW_RUNNER_WIRE_OP_RESIZE:
    case CSW_RUNNER_WIRE_OP_WORKSPACE_OF:
    case CSW_RUNNER_WIRE_OP_OPERATION_STATUS:
        return true;
    case CSW_RUNNER_WIRE_OP_READ_PROCESS:
        return !op->u.read_process.data.has_wait_ms || op->u.read_process.data.wait_ms == 0;
    case CSW_RUNNER_WIRE_OP_HELLO:
    case CSW_RUNNER_WIRE_OP_VERSION:
    case CSW_RUNNER_WIRE_OP_APPLY_PATCH:
    case CSW_RUNNER_WIRE_OP_EXEC:
    case CSW_RUNNER_WIRE_OP_TERMINATE:
    case CSW_RUNNER_WIRE_OP_TERMINATE_WORKSPACE:
    case CSW_RUNNER_WIRE_OP_REPLAY:
    case CSW_RUNNER_WIRE_OP_CANCEL:
    case CSW_RUNNER_WIRE_OP_PATCH_OUTCOMES:
        return false;
    }
    return false;
}

void cs__runner_uds_call(struct cs_runner *r, const struct csw_runner_wire_op *op,
                         cs_runner_done_fn done, void *arg)
{
    struct cs__runner_uds *u = r->u;
    struct cs_diag why;
    if (u->lost && replace_worker(u, &why) != 0) {
        cs__runner_fail_before(done, arg, why.text);
        return;
    }
    struct call *c = calloc(1, sizeof *c);
    char rid[CS__RUNNER_RID_SIZE];
    uint64_t id = u->next_id++;
    struct csw_runner_wire w;
    cs__runner_request(&w, rid, id, op);
    if (!c || cs_runner_conn_send(u->link->conn, &w) != 0) {
        free(c);
        cs__runner_fail_before(
            done, arg, "runner transport failed before dispatch: the request could not be written");
        return;
    }
    if (quick(op))
        cs_runner_conn_expect_answer(u->link->conn);
    c->id = id;
    c->done = done;
    c->arg = arg;
    c->u = u;
    c->deadline = cs_loop_now_ms() + CS_RUNNER_DEADLINE_MS;
    c->next = u->calls;
    if (u->calls)
        u->calls->prev = c;
    u->calls = c;
}

void cs__runner_uds_cancel(struct cs_runner *r, cs_runner_done_fn done, void *arg,
                           const char *process_id)
{
    struct cs__runner_uds *u = r->u;
    if (u->lost || !u->link)
        return; /* the worker is gone, and its processes with it */
    struct call *c = u->calls;
    while (c && !(c->done == done && c->arg == arg))
        c = c->next;
    if (!c && !process_id)
        return; /* answered already */
    /* The wait is in the worker: it stops there, and its answer completes the call. */
    cs__runner_cancel_send(r, cs__runner_uds_call, c ? &c->id : NULL, process_id);
}

void cs__runner_uds_free(struct cs_runner *r)
{
    struct cs__runner_uds *u = r->u;
    if (!u)
        return;
    while (u->dying) {
        struct link *l = u->dying;
        u->dying = l->next;
        cs_loop_defer_cancel(r->loop, free_link, l);
        cs_runner_conn_free(l->conn);
        free(l);
    }
    cs_loop_timer_cancel(u->sweep);
    u->sweep = NULL;
    /* EOF on the socket makes the worker kill its commands and exit; it gets a moment. */
    if (u->link) {
        cs_runner_conn_free(u->link->conn);
        free(u->link);
        u->link = NULL;
    }
    if (!u->lost)
        reap_worker(u, 2000);
    else
        reap_worker(u, 0);
    relay_log(u, true);
    remove_files(u);
    complete_all(u, CS_RUNNER_AMBIGUOUS, "runner transport failed: the gateway is shutting down");
    free_options(u);
    free(u);
    r->u = NULL;
}

/* ---- start ---- */

/* The worker's environment: only what it needs (PATH, TMPDIR, LANG, the shared workspaces'
 * namespace grace period) and the test and sanitizer switches; never the gateway's token or
 * anything else. */
static char **worker_env(void)
{
    size_t n = 0;
    for (char **e = environ; *e; e++)
        n++;
    char **out = calloc(n + 1, sizeof *out);
    if (!out)
        return NULL;
    size_t k = 0;
    static const char *const keep[] = {"PATH=",
                                       "TMPDIR=",
                                       "LANG=",
                                       "CODESPACE_NETNS_GRACE_SECS=",
                                       "CODESPACE_BUSY_POLL_US=",
                                       "CODESPACE_TEST_",
                                       "ASAN_",
                                       "UBSAN_",
                                       "LSAN_"};
    for (char **e = environ; *e; e++)
        for (size_t i = 0; i < sizeof keep / sizeof *keep; i++)
            if (strncmp(*e, keep[i], strlen(keep[i])) == 0) {
                out[k++] = *e;
                break;
            }
    return out;
}

static int spawn_worker(struct cs__runner_uds *u, const struct cs_runner_uds_options *opt,
                        struct cs_diag *d)
{
    char maxp[32], tmo[32], uid[32], gid[32];
    snprintf(maxp, sizeof maxp, "%" PRId64, opt->max_processes);
    snprintf(tmo, sizeof tmo, "%" PRId64, opt->timeout_ms > 0 ? opt->timeout_ms : 30000);
    snprintf(uid, sizeof uid, "%" PRId64, opt->sandbox_uid);
    snprintf(gid, sizeof gid, "%" PRId64, opt->sandbox_gid);
    /* Every held root goes to the worker as its descriptor 3, 4, ... with "--root N:PATH". */
    size_t nroots = cs_roots_count();
    enum { FIXED = 18 };
    char **argv = calloc(FIXED + 2 * nroots + 1, sizeof *argv);
    char **rootargs = calloc(nroots + 1, sizeof *rootargs);
    int *keep = calloc(nroots + 1, sizeof *keep); /* the roots, then the gateway pipe */
    char gatearg[32];
    snprintf(gatearg, sizeof gatearg, "%zu", 3 + nroots);
    size_t k = 0;
    if (!argv || !rootargs || !keep) {
        free(argv);
        free(rootargs);
        free(keep);
        cs_diag_set(d, CSW_ERROR_INTERNAL, "out of memory");
        return -1;
    }
    argv[k++] = (char *)"codespace-runtime";
    argv[k++] = (char *)"--socket";
    argv[k++] = u->sock;
    argv[k++] = (char *)"--gateway-fd";
    argv[k++] = gatearg;
    argv[k++] = (char *)"--max-processes";
    argv[k++] = maxp;
    argv[k++] = (char *)"--timeout-ms";
    argv[k++] = tmo;
    /* The gateway's probe passed with this helper: the worker runs every command through it. */
    if (opt->sandbox_helper) {
        argv[k++] = (char *)"--sandbox";
        argv[k++] = (char *)opt->sandbox_helper;
    }
    if (opt->sandbox_uid > 0) {
        argv[k++] = (char *)"--sandbox-uid";
        argv[k++] = uid;
    }
    if (opt->sandbox_gid > 0) {
        argv[k++] = (char *)"--sandbox-gid";
        argv[k++] = gid;
    }
    /* Our operations database: the worker keeps the deny identities there, so its replacement
     * after a crash still denies what it learned (contract section 7). */
    if (opt->operations_db) {
        argv[k++] = (char *)"--operations-db";
        argv[k++] = (char *)opt->operations_db;
    }
    for (size_t i = 0; i < nroots; i++) {
        keep[i] = cs_roots_fd(i);
        if (asprintf(&rootargs[i], "%zu:%s", 3 + i, cs_roots_path(i)) < 0) {
            rootargs[i] = NULL;
            for (size_t j = 0; j < i; j++)
                free(rootargs[j]);
            free(argv);
            free(rootargs);
            free(keep);
            cs_diag_set(d, CSW_ERROR_INTERNAL, "out of memory");
            return -1;
        }
        argv[k++] = (char *)"--root";
        argv[k++] = rootargs[i];
    }
    argv[k] = NULL;
    char **envp = worker_env();
    /* stdout is the MCP channel on stdio: the worker never gets it, nor the server's stderr; its
     * log lines come through a pipe the gateway relays (relay_log). */
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    int logp[2] = {-1, -1}, gatep[2] = {-1, -1};
    int e = !envp ? ENOMEM : null < 0 ? errno : 0;
    if (e == 0 && (pipe2(logp, O_CLOEXEC) != 0 || pipe2(gatep, O_CLOEXEC) != 0))
        e = errno;
    keep[nroots] = gatep[0];
    if (e == 0)
        e = cs_supervisor_spawn_aux_keep(opt->runtime_bin, argv, envp,
                                         (const int[3]){null, null, logp[1]}, keep, nroots + 1,
                                         &u->pid);
    if (gatep[0] >= 0)
        close(gatep[0]);
    if (e == 0)
        u->gatefd = gatep[1];
    else if (gatep[1] >= 0)
        close(gatep[1]);
    free(envp);
    for (size_t i = 0; i < nroots; i++)
        free(rootargs[i]);
    free(rootargs);
    free(argv);
    free(keep);
    if (null >= 0)
        close(null);
    if (logp[1] >= 0)
        close(logp[1]);
    if (e == 0) {
        u->logfd = logp[0];
        (void)fcntl(u->logfd, F_SETFL, O_NONBLOCK);
    } else if (logp[0] >= 0) {
        close(logp[0]);
    }
    if (e != 0) {
        cs_diag_set(d, CSW_ERROR_INTERNAL, "cannot start the worker %s: %s", opt->runtime_bin,
                    strerror(e));
        return -1;
    }
    u->pidfd = pidfd_open(u->pid, 0);
    if (u->pidfd < 0) {
        cs_diag_set(d, CSW_ERROR_INTERNAL, "pidfd_open: %s", strerror(errno));
        kill(u->pid, SIGKILL);
        waitpid(u->pid, NULL, 0);
        close_gate(u);
        return -1;
    }
    return 0;
}

/* Connects to the worker's socket, polling while the worker lives. Returns the fd or -1. */
static int connect_worker(struct cs__runner_uds *u, struct cs_diag *d)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", u->sock);
    for (int waited = 0; waited <= POLL_FOR_MS; waited += POLL_EVERY_MS) {
        struct pollfd p = {.fd = u->pidfd, .events = POLLIN};
        if (poll(&p, 1, 0) > 0) {
            cs_diag_set(d, CSW_ERROR_INTERNAL,
                        "the worker exited before its socket appeared (see its log)");
            return -1;
        }
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            cs_diag_set(d, CSW_ERROR_INTERNAL, "socket: %s", strerror(errno));
            return -1;
        }
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
            return fd;
        close(fd);
        (void)poll(NULL, 0, POLL_EVERY_MS);
    }
    cs_diag_set(d, CSW_ERROR_INTERNAL, "the worker's socket %s did not appear within 2 s", u->sock);
    return -1;
}

struct hello_wait {
    bool got;
    struct cs_diag err; /* set: the handshake failed */
};

static int hello_frame(void *arg, const uint8_t *data, size_t len)
{
    struct hello_wait *h = arg;
    h->got = true;
    json_error_t jerr;
    json_t *j = cs_json_loadb_peer((const char *)data, len, 0, &jerr);
    struct csw_runner_wire msg;
    struct cs_wire_diag diag;
    if (!j || csw_runner_wire_decode(j, &msg, &diag) != CS_WIRE_OK) {
        cs_diag_set(&h->err, CSW_ERROR_INTERNAL,
                    "the worker's hello answer is not a wire message%s%s", j ? ": " : "",
                    j ? diag.text : "");
        json_decref(j);
        return 1;
    }
    json_decref(j);
    const struct csw_runner_response *r = &msg.u.response;
    if (msg.tag != CSW_RUNNER_WIRE_RESPONSE)
        cs_diag_set(&h->err, CSW_ERROR_INTERNAL, "the worker answered hello with something else");
    else if (r->protocol != CS_RUNNER_PROTOCOL)
        cs_diag_set(&h->err, CSW_ERROR_INTERNAL,
                    "protocol mismatch: the worker speaks %" PRId64 ", we %d", r->protocol,
                    CS_RUNNER_PROTOCOL);
    else if (!r->ok || !r->has_result || r->result.tag != CSW_RUNNER_WIRE_RESULT_HELLO)
        cs_diag_set(&h->err, CSW_ERROR_INTERNAL, "the worker refused hello: %.*s",
                    r->has_error ? (int)r->error.message.n : 0,
                    r->has_error ? r->error.message.s : "");
    else if (r->result.u.hello.data.protocol != CS_RUNNER_PROTOCOL)
        cs_diag_set(&h->err, CSW_ERROR_INTERNAL,
                    "protocol mismatch: the worker speaks %" PRId64 ", we %d",
                    r->result.u.hello.data.protocol, CS_RUNNER_PROTOCOL);
    csw_runner_wire_free(&msg);
    return 1;
}

/* The handshake, blocking (before the loop runs): hello out, its answer in within 2 s. */
static int handshake(int fd, const char *version, struct cs_diag *d)
{
    char peer[128];
    snprintf(peer, sizeof peer, "codespace-mcp %s", version);
    struct csw_runner_wire w;
    memset(&w, 0, sizeof w);
    w.tag = CSW_RUNNER_WIRE_REQUEST;
    w.u.request.protocol = CS_RUNNER_PROTOCOL;
    w.u.request.request_id = (struct cs_str){(char *)"rrpc-1", 6};
    w.u.request.op.tag = CSW_RUNNER_WIRE_OP_HELLO;
    w.u.request.op.u.hello.data.protocol = CS_RUNNER_PROTOCOL;
    w.u.request.op.u.hello.data.has_peer = true;
    w.u.request.op.u.hello.data.peer = (struct cs_str){peer, strlen(peer)};
    json_t *j = NULL;
    struct cs_wire_diag diag;
    char *text = NULL;
    if (csw_runner_wire_encode(&w, &j, &diag) != CS_WIRE_OK ||
        !(text = json_dumps(j, JSON_COMPACT))) {
        json_decref(j);
        cs_diag_set(d, CSW_ERROR_INTERNAL, "cannot encode hello");
        return -1;
    }
    json_decref(j);
    size_t len = strlen(text);
    uint8_t hdr[CS_LENFRAME_HEADER_SIZE];
    (void)cs_lenframe_encode_header(hdr, len, CS_FRAME_DEFAULT_CAP);
    bool sent =
        write(fd, hdr, sizeof hdr) == (ssize_t)sizeof hdr && write(fd, text, len) == (ssize_t)len;
    free(text);
    if (!sent) {
        cs_diag_set(d, CSW_ERROR_INTERNAL, "cannot send hello: %s", strerror(errno));
        return -1;
    }
    struct hello_wait h = {0};
    struct cs_lenframe fr;
    cs_lenframe_init(&fr, CS_FRAME_DEFAULT_CAP, hello_frame, &h);
    int64_t end = cs_loop_now_ms() + POLL_FOR_MS;
    while (!h.got) {
        int64_t left = end - cs_loop_now_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
            cs_diag_set(&h.err, CSW_ERROR_INTERNAL, "no answer to hello within 2 s");
            break;
        }
        uint8_t buf[4096];
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) {
            cs_diag_set(&h.err, CSW_ERROR_INTERNAL,
                        "the worker closed the connection during hello");
            break;
        }
        enum cs_frame_status st = cs_lenframe_feed(&fr, buf, (size_t)n, NULL);
        if (st != CS_FRAME_OK && st != CS_FRAME_STOPPED) {
            cs_diag_set(&h.err, CSW_ERROR_INTERNAL, "bad frame during hello: %s",
                        cs_frame_status_str(st));
            break;
        }
        if (h.got && !cs_lenframe_at_boundary(&fr) && !cs_diag_failed(&h.err))
            cs_diag_set(&h.err, CSW_ERROR_INTERNAL, "the worker sent more than the hello answer");
    }
    cs_lenframe_fini(&fr);
    if (cs_diag_failed(&h.err)) {
        if (d)
            *d = h.err;
        return -1;
    }
    return 0;
}

/* Starts a worker: a fresh leaf directory, the process, its socket, the handshake (blocking, up
 * to 2 s + 2 s), then its watches on the loop. Returns 0, or -1 with d set (INTERNAL) and nothing
 * of the attempt left (no worker, no directory). */
static int start_worker(struct cs__runner_uds *u, struct cs_diag *d)
{
    struct cs_runner_uds_options opt = {
        .runtime_bin = u->runtime_bin,
        .runner_dir = u->runner_dir,
        .max_processes = u->max_processes,
        .timeout_ms = u->timeout_ms,
        .version = u->version,
        .sandbox_helper = u->sandbox_helper,
        .operations_db = u->operations_db,
        .sandbox_uid = u->sandbox_uid,
        .sandbox_gid = u->sandbox_gid,
    };
    u->logn = 0;
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        rnd = (uint32_t)cs_loop_now_ms();
    char leaf[64];
    snprintf(leaf, sizeof leaf, "codespace-runner-%d-%08" PRIx32, (int)getpid(), rnd);
    size_t dn = strlen(opt.runner_dir) + 1 + strlen(leaf) + 1;
    u->dir = malloc(dn);
    u->sock = malloc(dn + strlen("/runner.sock"));
    int fd = -1;
    if (!u->dir || !u->sock) {
        cs_diag_set(d, CSW_ERROR_INTERNAL, "out of memory");
        goto fail;
    }
    snprintf(u->dir, dn, "%s/%s", opt.runner_dir, leaf);
    snprintf(u->sock, dn + strlen("/runner.sock"), "%s/runner.sock", u->dir);
    if (strlen(u->sock) >= sizeof((struct sockaddr_un *)0)->sun_path) {
        cs_diag_set(d, CSW_ERROR_INTERNAL, "runner dir %s is too long for a Unix socket path",
                    opt.runner_dir);
        goto fail;
    }
    /* Only the leaf is ours: created 0700 (the mode is forced past the umask), the parent is
     * never touched. */
    if (mkdir(u->dir, 0700) != 0) {
        cs_diag_set(d, CSW_ERROR_INTERNAL, "cannot create %s: %s", u->dir, strerror(errno));
        free(u->dir);
        u->dir = NULL;
        goto fail;
    }
    if (chmod(u->dir, 0700) != 0) {
        cs_diag_set(d, CSW_ERROR_INTERNAL, "chmod %s: %s", u->dir, strerror(errno));
        goto fail;
    }
    if (spawn_worker(u, &opt, d) != 0)
        goto fail;
    fd = connect_worker(u, d);
    if (fd < 0 || handshake(fd, opt.version, d) != 0)
        goto fail;
    u->link = calloc(1, sizeof *u->link);
    if (!u->link) {
        cs_diag_set(d, CSW_ERROR_INTERNAL, "out of memory");
        goto fail;
    }
    u->link->u = u;
    struct cs_runner_conn_callbacks cb = {on_message, on_bad, on_closed, u->link};
    u->link->conn = cs_runner_conn_new(u->r->loop, fd, &cb);
    if (!u->link->conn) {
        cs_diag_set(d, CSW_ERROR_INTERNAL, "out of memory");
        goto fail;
    }
    fd = -1;
    relay_log(u, false); /* what it said while starting */
    u->pidw = cs_loop_fd_add(u->r->loop, u->pidfd, CS_LOOP_READ, on_worker_exit, u);
    u->sweep = cs_loop_timer_add(u->r->loop, 1000, on_sweep, u);
    if (u->logfd >= 0)
        u->logw = cs_loop_fd_add(u->r->loop, u->logfd, CS_LOOP_READ, on_worker_log, u);
    if (!u->pidw || !u->sweep || (u->logfd >= 0 && !u->logw)) {
        cs_diag_set(d, CSW_ERROR_INTERNAL, "cannot watch the worker: %s", strerror(errno));
        goto fail;
    }
    u->lost = false;
    u->started_at = cs_loop_now_ms();
    u->next_id = 2; /* request ids count from 1 per connection; rrpc-1 was the hello */
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    cs_loop_timer_cancel(u->sweep);
    u->sweep = NULL;
    cs_loop_fd_del(u->pidw);
    u->pidw = NULL;
    cs_loop_fd_del(u->logw);
    u->logw = NULL;
    if (u->link) {
        cs_runner_conn_free(u->link->conn);
        free(u->link);
        u->link = NULL;
    }
    reap_worker(u, 0);
    relay_log(u, true); /* also when the worker was never watched */
    remove_files(u);
    return -1;
}

/* The pid in a leaf name "codespace-runner-<pid>-<8 hex>" (the exact shape cs_runner_uds_new
 * makes), or 0 when name is not one. */
static pid_t leaf_pid(const char *name)
{
    static const char pre[] = "codespace-runner-";
    if (strncmp(name, pre, sizeof pre - 1) != 0)
        return 0;
    const char *p = name + sizeof pre - 1;
    long pid = 0;
    const char *q = p;
    while (*q >= '0' && *q <= '9' && q - p < 10)
        pid = pid * 10 + (*q++ - '0');
    if (q == p || *p == '0' || *q != '-' || pid <= 0 || pid > INT32_MAX)
        return 0;
    q++;
    for (int i = 0; i < 8; i++, q++)
        if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f')))
            return 0;
    return *q == '\0' ? (pid_t)pid : 0;
}

/* Clean restart (invariant R11): removes the leaf directories a dead gateway of ours left in the
 * runner dir (a kill -9 gives it no chance to). A leaf is removed only when its name has the exact
 * shape, it is a real directory (not followed) owned by our uid, and its pid is not alive (ESRCH;
 * a live pid, ours or anyone's, keeps it). Inside it only runner.sock is unlinked, then the
 * directory is removed if empty: anything else in it keeps it. Everything goes through directory
 * descriptors. Returns the number removed. */
static int sweep_leaves(const char *runner_dir)
{
    int pfd = open(runner_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int dup_fd = pfd >= 0 ? dup(pfd) : -1;
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0)
            close(dup_fd);
        if (pfd >= 0)
            close(pfd);
        return 0;
    }
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        pid_t pid = leaf_pid(e->d_name);
        struct stat st, st2;
        if (pid <= 0 || pid == getpid() || fstatat(pfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
            !(kill(pid, 0) != 0 && errno == ESRCH))
            continue;
        int lfd = openat(pfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (lfd < 0)
            continue;
        if (fstat(lfd, &st2) == 0 && st2.st_dev == st.st_dev && st2.st_ino == st.st_ino &&
            st2.st_uid == geteuid()) {
            struct stat ss;
            if (fstatat(lfd, "runner.sock", &ss, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(ss.st_mode))
                (void)unlinkat(lfd, "runner.sock", 0);
            if (unlinkat(pfd, e->d_name, AT_REMOVEDIR) == 0)
                removed++;
        }
        close(lfd);
    }
    closedir(d);
    close(pfd);
    return removed;
}

static char *dup_or_null(const char *s, bool *oom)
{
    char *d = s ? strdup(s) : NULL;
    if (s && !d)
        *oom = true;
    return d;
}

struct cs_runner *cs_runner_uds_new(struct cs_loop *loop, const struct cs_runner_uds_options *opt,
                                    const struct cs_runner_events *ev, struct cs_diag *d)
{
    struct cs_runner *r = calloc(1, sizeof *r);
    struct cs__runner_uds *u = calloc(1, sizeof *u);
    if (!r || !u) {
        free(r);
        free(u);
        cs_diag_set(d, CSW_ERROR_INTERNAL, "out of memory");
        return NULL;
    }
    r->uds = true;
    r->loop = loop;
    r->ev = *ev;
    r->u = u;
    u->r = r;
    u->pidfd = -1;
    u->gatefd = -1;
    u->logfd = -1;
    u->next_id = 2; /* rrpc-1 is each worker's hello */
    bool oom = false;
    u->runtime_bin = dup_or_null(opt->runtime_bin, &oom);
    u->runner_dir = dup_or_null(opt->runner_dir, &oom);
    u->version = dup_or_null(opt->version, &oom);
    u->sandbox_helper = dup_or_null(opt->sandbox_helper, &oom);
    u->operations_db = dup_or_null(opt->operations_db, &oom);
    u->max_processes = opt->max_processes;
    u->timeout_ms = opt->timeout_ms;
    u->sandbox_uid = opt->sandbox_uid;
    u->sandbox_gid = opt->sandbox_gid;
    if (oom || !u->runner_dir || !u->runtime_bin || !u->version) {
        cs_diag_set(d, CSW_ERROR_INTERNAL, "out of memory");
        goto fail;
    }
    int swept = sweep_leaves(u->runner_dir);
    if (swept > 0)
        cs_log(CS_LOG_INFO, "removed runner directories left by dead gateways",
               json_pack("{s:s,s:i}", "runner_dir", u->runner_dir, "count", swept));
    /* Commands orphaned by a lost worker become ours, to be killed and reaped. */
    (void)prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    u->starts[u->nstarts++ % RESTART_PER_MIN] = cs_loop_now_ms();
    if (start_worker(u, d) != 0)
        goto fail;
    return r;
fail:
    free_options(u);
    free(u);
    free(r);
    return NULL;
}
