/*
 * supervisor_netns: one network namespace per shared workspace (workflows.md section 3,
 * docs/runner-isolation.md "The workspace's network namespace").
 *
 * The namespace is created at the workspace's first sandboxed spawn by a holder,
 * `codespace-linux-sandbox netns-hold <workspace id>` (helper/sandbox_netns.c): a small child of
 * the runner that makes it (inside a user namespace of its own when the runner is not root),
 * brings lo up and waits on its stdin. The runner opens the holder's /proc/<pid>/ns/net (and
 * ns/user) once, keeps the descriptors, and every command of the workspace joins them (the
 * plan's netns_fd and userns_fd). When the workspace's last process has finished, a grace
 * period (CODESPACE_NETNS_GRACE_SECS, 60 s) starts; a spawn within it keeps the namespace,
 * otherwise the descriptors are closed, the holder gets EOF (and SIGKILL) and is reaped: nothing
 * of the namespace is left. A runner that dies takes its holders with it (their parent-death
 * signal). Namespaces are keyed by workspace id and never shared between workspaces.
 *
 * Trust: the workspace id comes from the runner's caller (the gateway), already a registered
 * workspace; it only labels the holder. Entry points: cs__netns_acquire, cs__netns_release,
 * cs__netns_owns_pid, cs__netns_table_fini (supervisor_internal.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "supervisor_internal.h"

struct cs__netns {
    struct cs__netns *next;
    struct cs__netns_table *tab;
    char *workspace_id;
    pid_t pid;    /* the holder, our unreaped child */
    int pidfd;    /* its pidfd (close-on-exec) */
    int ctl;      /* the write end of its stdin: closing it lets the holder go */
    int net_fd;   /* its ns/net, >= 10 (close-on-exec) */
    int usr_fd;   /* its ns/user, >= 10, or -1 for a root runner (the namespace is the host's) */
    size_t users; /* live processes that joined it */
    struct cs_loop_timer *grace; /* armed while users is 0 */
};

/* Descriptors are kept at 10 and above: the spawn's child moves them to 6 and 7 after the fixed
 * numbers 3 to 5, and sources below 8 could be overwritten on the way. */
#define NS_FD_MIN 10

static void stop(struct cs__netns *n)
{
    if (n->grace)
        cs_loop_timer_cancel(n->grace);
    n->grace = NULL;
    if (n->net_fd >= 0)
        close(n->net_fd);
    if (n->usr_fd >= 0)
        close(n->usr_fd);
    if (n->ctl >= 0)
        close(n->ctl); /* EOF: the holder exits */
    if (n->pidfd >= 0) {
        (void)syscall(SYS_pidfd_send_signal, n->pidfd, SIGKILL, NULL, 0);
        siginfo_t si;
        while (waitid((idtype_t)P_PIDFD, (id_t)n->pidfd, &si, WEXITED) != 0 && errno == EINTR)
            ;
        close(n->pidfd);
    } else if (n->pid > 0) {
        kill(n->pid, SIGKILL);
        while (waitpid(n->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    free(n->workspace_id);
    free(n);
}

static void unlink_netns(struct cs__netns *n)
{
    for (struct cs__netns **pp = &n->tab->list; *pp; pp = &(*pp)->next)
        if (*pp == n) {
            *pp = n->next;
            return;
        }
}

static void grace_over(void *arg)
{
    struct cs__netns *n = arg;
    n->grace = NULL;
    if (n->users > 0)
        return;
    unlink_netns(n);
    stop(n);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads the holder's "ready\n" (5 s at most). Returns 0, or -1 with d holding what it said. */
static int await_ready(int out, const char *wsid, struct cs_diag *d)
{
    char buf[512];
    size_t got = 0;
    int64_t end = mono_ms() + 5000;
    for (;;) {
        int64_t left = end - mono_ms();
        struct pollfd p = {.fd = out, .events = POLLIN};
        int r = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED,
                               "workspace \"%s\": the network namespace holder did not start "
                               "within 5 s",
                               wsid);
        ssize_t k = read(out, buf + got, sizeof buf - 1 - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k > 0)
            got += (size_t)k;
        buf[got] = '\0';
        if (strcmp(buf, "ready\n") == 0)
            return 0;
        if (k <= 0 || got == sizeof buf - 1 || strchr(buf, '\n')) {
            char *nl = strrchr(buf, '\n');
            if (nl && nl[1] == '\0')
                *nl = '\0';
            return cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED,
                               "workspace \"%s\": cannot hold its network namespace: %s", wsid,
                               got ? buf : "the holder exited");
        }
    }
}

static int open_ns(pid_t pid, const char *which)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/%s", (int)pid, which);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, NS_FD_MIN);
    int e = errno;
    close(fd);
    errno = e;
    return high;
}

/* Starts a holder for wsid. Returns the new entry (not linked), or NULL with d set. */
static struct cs__netns *start(struct cs__netns_table *t, const char *wsid, struct cs_diag *d)
{
    struct cs__netns *n = calloc(1, sizeof *n);
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if (!n || !(n->workspace_id = strdup(wsid))) {
        free(n);
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "out of memory");
        return NULL;
    }
    n->tab = t;
    n->pidfd = n->ctl = n->net_fd = n->usr_fd = -1;
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "cannot create the holder's pipes: %s",
                    strerror(errno));
        goto fail;
    }
    char *argv[] = {(char *)"codespace-linux-sandbox", (char *)"netns-hold", n->workspace_id, NULL};
    char *envp[] = {NULL};
    int fds[3] = {in[0], out[1], out[1]};
    int e = cs_supervisor_spawn_aux(t->helper, argv, envp, fds, &n->pid);
    close(in[0]);
    close(out[1]);
    in[0] = out[1] = -1;
    if (e != 0) {
        n->pid = 0;
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED,
                    "cannot start the network namespace holder %s: %s", t->helper, strerror(e));
        goto fail;
    }
    n->ctl = in[1];
    in[1] = -1;
    n->pidfd = (int)syscall(SYS_pidfd_open, n->pid, 0);
    if (n->pidfd < 0 || fcntl(n->pidfd, F_SETFD, FD_CLOEXEC) != 0) {
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "pidfd_open: %s", strerror(errno));
        goto fail;
    }
    if (await_ready(out[0], wsid, d) != 0)
        goto fail;
    /* Our unreaped child: its pid names it until we reap it. */
    n->net_fd = open_ns(n->pid, "net");
    if (n->net_fd < 0 || (geteuid() != 0 && (n->usr_fd = open_ns(n->pid, "user")) < 0)) {
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "cannot open the holder's namespaces: %s",
                    strerror(errno));
        goto fail;
    }
    close(out[0]);
    return n;
fail:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
    }
    stop(n);
    return NULL;
}

struct cs__netns *cs__netns_acquire(struct cs__netns_table *t, const char *wsid, struct cs_diag *d)
{
    struct cs__netns *n = t->list;
    while (n && strcmp(n->workspace_id, wsid) != 0)
        n = n->next;
    if (!n) {
        n = start(t, wsid, d);
        if (!n)
            return NULL;
        n->next = t->list;
        t->list = n;
    }
    if (n->grace)
        cs_loop_timer_cancel(n->grace);
    n->grace = NULL;
    n->users++;
    return n;
}

void cs__netns_release(struct cs__netns *n)
{
    if (!n || n->users == 0)
        return;
    if (--n->users > 0)
        return;
    n->grace = cs_loop_timer_add(n->tab->loop, n->tab->grace_ms, grace_over, n);
    if (!n->grace) { /* no timer: let it go now rather than never */
        unlink_netns(n);
        stop(n);
    }
}

int cs__netns_fd(const struct cs__netns *n, bool user)
{
    return user ? n->usr_fd : n->net_fd;
}

bool cs__netns_owns_pid(const struct cs__netns_table *t, pid_t pid)
{
    for (const struct cs__netns *n = t->list; n; n = n->next)
        if (n->pid == pid)
            return true;
    return false;
}

void cs__netns_table_fini(struct cs__netns_table *t)
{
    while (t->list) {
        struct cs__netns *n = t->list;
        t->list = n->next;
        stop(n);
    }
}
