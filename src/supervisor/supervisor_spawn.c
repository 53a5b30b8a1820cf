/*
 * supervisor_spawn: starting one command (docs/contract/runtime.md §5). A vfork-style clone from an
 * argv, no shell (posix_spawn cannot set the parent-death signal): a new session (so a new process
 * group, and for a PTY the terminal as controlling terminal), every signal back to its default and
 * unblocked (the server blocks SIGINT/SIGTERM for its signalfd and ignores SIGPIPE; a child must
 * not inherit either), the workspace root as working directory, the cleared and rebuilt
 * environment, and nothing but its stdin, stdout and stderr open (every other descriptor is closed
 * in the child, whatever its close-on-exec flag).
 *
 * Trust: argv comes from the client; it is passed to execve only. The program is looked up in
 * the runner's PATH (absolute entries only) unless argv[0] contains a slash, in which case it is
 * taken relative to the workspace root, as a shell would in that directory.
 * A sandboxed start may instead hand its descriptors to the helper started ahead
 * (cs__supervisor_warm_start, `run --wait-fd 5`): the same child rules, the command's descriptors
 * sent over a socket rather than inherited, and the helper's exec already done (issue 20).
 * Entry points: cs__supervisor_start, cs__supervisor_warm_start, cs__supervisor_warm_stop.
 */
#include "base_diag.h"
#include "supervisor_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <termios.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/* Finds name in the absolute entries of path. Returns a new string, or NULL (not found). */
char *cs__supervisor_lookup(const char *path, const char *name)
{
    size_t nlen = strlen(name);
    for (const char *p = path; p && *p;) {
        const char *end = strchr(p, ':');
        size_t dlen = end ? (size_t)(end - p) : strlen(p);
        if (dlen > 0 && p[0] == '/') {
            char *cand = malloc(dlen + 1 + nlen + 1);
            if (!cand)
                return NULL;
            memcpy(cand, p, dlen);
            cand[dlen] = '/';
            memcpy(cand + dlen + 1, name, nlen + 1);
            struct stat st;
            if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) &&
                faccessat(AT_FDCWD, cand, X_OK, AT_EACCESS) == 0)
                return cand;
            free(cand);
        }
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* The PTY pair: the master (close-on-exec, non-blocking, 24x80) and the slave's path. The
 * caller opens the slave in the parent too, so the terminal is never without a slave side
 * between the spawn and the child's own open. */
static int open_pty(int *master, char *slave, size_t cap, int64_t rows, int64_t cols)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0)
        return -1;
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    if (grantpt(m) != 0 || unlockpt(m) != 0 || ptsname_r(m, slave, cap) != 0 ||
        ioctl(m, TIOCSWINSZ, &ws) != 0 || set_nonblock(m) != 0) {
        int e = errno;
        close(m);
        errno = e;
        return -1;
    }
    *master = m;
    return 0;
}

/*
 * The child, between clone and execve. It shares our memory (CLONE_VM | CLONE_VFORK: we are
 * suspended until it execs or exits), so it makes raw system calls only and reports a failure
 * through the struct. Not instrumented: it runs on its own small stack.
 */
struct child {
    char *const *argv;
    char *const *envp;
    const char *prog, *root, *slave;
    int in, out, root_fd, report_fd, plan_fd, netns_fd, userns_fd;
    int warm_sock; /* >= 0: the pre-started helper (its socket to be fd 5, stdio /dev/null) */
    bool pass_root;
    pid_t parent;
    int err;          /* errno of the failed step, 0 if execve was reached */
    const char *step; /* which step failed */
};

struct ksigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    unsigned long mask;
};

__attribute__((no_sanitize("address", "undefined"))) static int child_main(void *arg)
{
    struct child *c = arg;
    /* Every signal back to its default: the server ignores SIGPIPE and has handlers. */
    struct ksigaction dfl = {0};
    for (long sig = 1; sig < 65; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            (void)syscall(SYS_rt_sigaction, sig, &dfl, NULL, 8L);
    c->step = "setsid";
    if (syscall(SYS_setsid) < 0)
        goto fail;
    /* The command's leader dies with its runner (the gateway, or the uds worker): a runner
     * killed with SIGKILL cannot leave commands behind. */
    c->step = "prctl";
    if (syscall(SYS_prctl, (long)PR_SET_PDEATHSIG, (long)SIGKILL, 0L, 0L, 0L) != 0)
        goto fail;
    if (syscall(SYS_getppid) != c->parent)
        syscall(SYS_exit_group, 127L);
    if (c->warm_sock >= 0) {
        /* The pre-started helper holds nothing of a workspace until its message: / as working
         * directory, /dev/null as stdio, the socket as fd 5 (dup2 clears close-on-exec; onto
         * itself it would not, hence the fcntl), nothing else. */
        c->step = "chdir";
        if (syscall(SYS_chdir, "/") != 0)
            goto fail;
        c->step = "dup2";
        if (c->warm_sock == 5 ? syscall(SYS_fcntl, 5L, (long)F_SETFD, 0L) != 0
                              : syscall(SYS_dup2, (long)c->warm_sock, 5L) < 0)
            goto fail;
        c->step = "open /dev/null";
        long null = syscall(SYS_openat, (long)AT_FDCWD, "/dev/null", (long)O_RDWR, 0L);
        if (null < 0)
            goto fail;
        c->step = "dup2";
        if (syscall(SYS_dup2, null, 0L) < 0 || syscall(SYS_dup2, null, 1L) < 0 ||
            syscall(SYS_dup2, null, 2L) < 0)
            goto fail;
        c->step = "close_range";
        if (syscall(SYS_close_range, 3L, 4L, 0L) != 0 ||
            syscall(SYS_close_range, 6L, (long)UINT_MAX, 0L) != 0)
            goto fail;
        goto exec;
    }
    /* The held root, never the path: an ancestor swapped since start redirects nothing. */
    c->step = "chdir";
    if (syscall(SYS_fchdir, (long)c->root_fd) != 0)
        goto fail;
    if (c->slave) {
        /* The new session's controlling terminal, and its foreground group. */
        c->step = "open the terminal";
        long fd = syscall(SYS_openat, (long)AT_FDCWD, c->slave, (long)O_RDWR, 0L);
        if (fd < 0)
            goto fail;
        c->step = "TIOCSCTTY";
        if (syscall(SYS_ioctl, fd, (long)TIOCSCTTY, 0L) != 0)
            goto fail;
        c->step = "dup2";
        if (syscall(SYS_dup2, fd, 0L) < 0 || syscall(SYS_dup2, fd, 1L) < 0 ||
            syscall(SYS_dup2, fd, 2L) < 0)
            goto fail;
    } else {
        c->step = "dup2";
        if (syscall(SYS_dup2, (long)c->in, 0L) < 0 || syscall(SYS_dup2, (long)c->out, 1L) < 0 ||
            syscall(SYS_dup2, (long)c->out, 2L) < 0)
            goto fail;
    }
    long first_closed = 3;
    if (c->pass_root) {
        /* The sandbox helper reaches the workspace through this descriptor (the plan's
         * workspace_fd). dup2 onto itself would keep close-on-exec, hence the fcntl. */
        c->step = "dup2";
        if (c->root_fd == 3 ? syscall(SYS_fcntl, 3L, (long)F_SETFD, 0L) != 0
                            : syscall(SYS_dup2, (long)c->root_fd, 3L) < 0)
            goto fail;
        first_closed = 4;
        if (c->report_fd >= 0) {
            /* The denial report's pipe (the plan's report_fd); the helper keeps it from the
             * init and the command. */
            if (c->report_fd == 4 ? syscall(SYS_fcntl, 4L, (long)F_SETFD, 0L) != 0
                                  : syscall(SYS_dup2, (long)c->report_fd, 4L) < 0)
                goto fail;
            first_closed = 5;
        }
        if (c->plan_fd > 5) {
            /* The sealed plan (run --plan-fd 5); the helper closes it after reading. */
            if (syscall(SYS_dup2, (long)c->plan_fd, 5L) < 0)
                goto fail;
            first_closed = 6;
            /* The workspace's namespaces (the plan's netns_fd 6 and userns_fd 7), kept at 10 and
             * above by the supervisor so that no move overwrites a source still to move. */
            if (c->netns_fd >= 10) {
                if (syscall(SYS_dup2, (long)c->netns_fd, 6L) < 0)
                    goto fail;
                first_closed = 7;
                if (c->userns_fd >= 10) {
                    if (syscall(SYS_dup2, (long)c->userns_fd, 7L) < 0)
                        goto fail;
                    first_closed = 8;
                }
            }
        }
    }
    c->step = "close_range";
    if (syscall(SYS_close_range, first_closed, (long)UINT_MAX, 0L) != 0)
        goto fail;
exec:;
    unsigned long none = 0;
    (void)syscall(SYS_rt_sigprocmask, (long)SIG_SETMASK, &none, NULL, 8L);
    c->step = "execve";
    syscall(SYS_execve, c->prog, c->argv, c->envp);
fail:
    c->err = errno ? errno : EINVAL;
    syscall(SYS_exit_group, 127L);
    return 127;
}

/* Starts the child; returns its pid (it has exec'd), or -1 with d set (nothing left running). */
static pid_t spawn_child(const struct cs__supervisor_cmd *cmd, const char *prog, const char *slave,
                         int in, int out, int warm_sock, struct cs_diag *d)
{
    enum { STACK = 64 * 1024 };
    void *stack =
        mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) {
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "cannot spawn: %s", strerror(errno));
        return -1;
    }
    struct child c = {
        .argv = cmd->argv,
        .envp = cmd->envp,
        .prog = prog,
        .root = cmd->root,
        .root_fd = cmd->root_fd,
        .pass_root = cmd->pass_root,
        .report_fd = cmd->pass_root ? cmd->report_fd : -1,
        .plan_fd = cmd->pass_root && cmd->report_fd >= 0 ? cmd->plan_fd : 0,
        .netns_fd = cmd->netns_fd,
        .userns_fd = cmd->userns_fd,
        .slave = slave,
        .in = in,
        .out = out,
        .warm_sock = warm_sock,
        .parent = getpid(),
    };
    /* No handler of ours may run on the child's stack before it resets them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pid_t pid = clone(child_main, (char *)stack + STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
    int ce = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    munmap(stack, STACK);
    if (pid < 0) {
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "cannot spawn: clone: %s", strerror(ce));
        return -1;
    }
    if (c.err != 0) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        if (strcmp(c.step, "execve") == 0 || strcmp(c.step, "chdir") == 0)
            cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "%s: %s",
                        strcmp(c.step, "chdir") == 0 ? cmd->root : cmd->argv[0], strerror(c.err));
        else
            cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "cannot spawn %s: %s: %s", cmd->argv[0],
                        c.step, strerror(c.err));
        return -1;
    }
    return pid;
}

/* ---- the pre-started helper (issue 20) ---- */

int cs__supervisor_warm_start(struct cs__supervisor_warm *w, const char *prog, char *const envp[])
{
    static char *const argv[] = {(char *)"codespace-linux-sandbox", (char *)"run",
                                 (char *)"--wait-fd", (char *)"5", NULL};
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    struct cs__supervisor_cmd cmd = {
        .argv = argv, .envp = envp, .root = "/", .root_fd = -1, .report_fd = -1};
    pid_t pid = spawn_child(&cmd, prog, NULL, -1, -1, sv[1], NULL);
    close(sv[1]);
    int pidfd = pid < 0 ? -1 : pidfd_open(pid, 0);
    if (pidfd < 0) {
        if (pid > 0) {
            kill(pid, SIGKILL);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        }
        close(sv[0]);
        return -1;
    }
    *w = (struct cs__supervisor_warm){.pid = pid, .pidfd = pidfd, .sock = sv[0]};
    return 0;
}

void cs__supervisor_warm_stop(struct cs__supervisor_warm *w)
{
    if (w->sock >= 0)
        close(w->sock);
    if (w->pidfd >= 0) {
        (void)pidfd_send_signal(w->pidfd, SIGKILL, NULL, 0);
        siginfo_t si;
        while (waitid((idtype_t)P_PIDFD, (id_t)w->pidfd, &si, WEXITED) != 0 && errno == EINTR)
            ;
        close(w->pidfd);
    }
    *w = (struct cs__supervisor_warm){.pid = 0, .pidfd = -1, .sock = -1};
}

/* Hands a sandboxed start's descriptors to the warm helper: exactly those its own child would
 * have had (the plan, stdin and stdout or the terminal, the root, the report pipe, and a shared
 * workspace's network namespace and its user namespace), which it puts at the same numbers. Returns
 * 0 with *pid and *pidfd (the helper's, now the command's), or -1 (the helper is reaped: start
 * cold). *w holds none afterwards either way. */
static int warm_hand(struct cs__supervisor_warm *w, const struct cs__supervisor_cmd *cmd, int in,
                     int out, int slave, pid_t *pid, int *pidfd)
{
    if (w->pid <= 0)
        return -1;
    int fds[7];
    size_t n = 0;
    unsigned char nns = 0;
    fds[n++] = cmd->plan_fd;
    if (cmd->tty) {
        fds[n++] = slave;
    } else {
        fds[n++] = in;
        fds[n++] = out;
    }
    fds[n++] = cmd->root_fd;
    fds[n++] = cmd->report_fd;
    if (cmd->netns_fd >= 0) {
        fds[n++] = cmd->netns_fd;
        nns++;
        if (cmd->userns_fd >= 0) {
            fds[n++] = cmd->userns_fd;
            nns++;
        }
    }
    unsigned char hdr[3] = {CS__SUPERVISOR_WAIT_VERSION, cmd->tty ? 1 : 0, nns};
    union {
        char buf[CMSG_SPACE(sizeof fds)];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {.iov_base = hdr, .iov_len = sizeof hdr};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = ctl.buf,
                         .msg_controllen = CMSG_SPACE(n * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n * sizeof(int));
    memcpy(CMSG_DATA(c), fds, n * sizeof(int));
    ssize_t r;
    /* A helper that has gone (killed, failed to start) closed its end: EPIPE, not SIGPIPE. */
    do
        r = sendmsg(w->sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (r < 0 && errno == EINTR);
    close(w->sock); /* it takes one message; EOF after it is never read */
    w->sock = -1;
    if (r != (ssize_t)sizeof hdr) {
        cs__supervisor_warm_stop(w);
        return -1;
    }
    *pid = w->pid;
    *pidfd = w->pidfd;
    *w = (struct cs__supervisor_warm){.pid = 0, .pidfd = -1, .sock = -1};
    return 0;
}

int cs__supervisor_start(const struct cs__supervisor_cmd *cmd, struct cs__supervisor_warm *warm,
                         struct cs__supervisor_fds *fds, struct cs_diag *d)
{
    int rc = -1;
    char *prog = NULL;
    int in[2] = {-1, -1}, out[2] = {-1, -1}, master = -1, slave = -1;
    char slave_path[128];

    if (cmd->prog) {
        prog = strdup(cmd->prog);
    } else if (strchr(cmd->argv[0], '/')) {
        prog = strdup(cmd->argv[0]);
    } else {
        prog = cs__supervisor_lookup(cmd->path, cmd->argv[0]);
        if (!prog) {
            cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED,
                        "%s: command not found in the runner's PATH", cmd->argv[0]);
            goto out;
        }
    }
    if (!prog) {
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "spawn: %s", strerror(ENOMEM));
        goto out;
    }
    if (cmd->tty) {
        if (open_pty(&master, slave_path, sizeof slave_path, cmd->rows, cmd->cols) != 0 ||
            (slave = open(slave_path, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
            cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "cannot open a pseudo-terminal: %s",
                        strerror(errno));
            goto out;
        }
    } else {
        /* Blocking pipes for the child; only our ends turn non-blocking (each end is its own
         * open file description). */
        if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || set_nonblock(in[1]) != 0 ||
            set_nonblock(out[0]) != 0) {
            cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "cannot create pipes: %s",
                        strerror(errno));
            goto out;
        }
        /* A larger pipe lets a chatty command run ahead of the loop between reads. Best
         * effort: the default 64 KiB works too. */
        (void)fcntl(out[0], F_SETPIPE_SZ, 1024 * 1024);
    }

    pid_t pid = -1;
    int pidfd = -1;
    if (warm && warm->pid > 0) {
        if (cmd->pass_root && cmd->report_fd >= 0 && cmd->plan_fd > 5 &&
            warm_hand(warm, cmd, in[0], out[1], slave, &pid, &pidfd) == 0)
            goto started;
        cs__supervisor_warm_stop(warm); /* not a start it can take: it never runs one */
    }
    pid = spawn_child(cmd, prog, cmd->tty ? slave_path : NULL, in[0], out[1], -1, d);
    if (pid < 0)
        goto out;
    /* The child has exec'd (the parent of a CLONE_VFORK child resumes only then), and it is a
     * child of ours that nobody else reaps: the pidfd cannot name a recycled process. */
    pidfd = pidfd_open(pid, 0);
    if (pidfd < 0) {
        int pe = errno;
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "pidfd_open: %s", strerror(pe));
        goto out;
    }
started:
    fds->pid = pid;
    fds->pidfd = pidfd;
    if (cmd->tty) {
        fds->out = master;
        fds->in = fcntl(master, F_DUPFD_CLOEXEC, 3);
        master = -1;
        if (fds->in < 0) {
            /* Writing through the master's own descriptor is not possible on the loop (one
             * watcher a descriptor); without stdin the command still runs. */
            fds->in = -1;
        }
    } else {
        fds->in = in[1];
        fds->out = out[0];
        in[1] = out[0] = -1;
    }
    rc = 0;
out:
    free(prog);
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
    }
    if (slave >= 0)
        close(slave);
    if (master >= 0)
        close(master);
    return rc;
}

void cs_supervisor_limits_init(struct cs_supervisor_limits *lim, int64_t max_live,
                               int64_t timeout_ms, const char *sandbox_helper)
{
    const char *path = getenv("PATH");
    const char *tmpdir = getenv("TMPDIR");
    const char *warm = getenv("CODESPACE_TEST_SANDBOX_WARM");
    *lim = (struct cs_supervisor_limits){
        .max_live = max_live,
        .timeout_ms = timeout_ms,
        .ring_bytes = CS_SUPERVISOR_RING_BYTES,
        .retain_ms = CS_SUPERVISOR_RETAIN_MS,
        .retain_max = CS_SUPERVISOR_RETAIN_MAX,
        .kill_grace_ms = CS_SUPERVISOR_KILL_GRACE_MS,
        .path = path && path[0] ? path : NULL,
        .tmpdir = tmpdir && tmpdir[0] == '/' ? tmpdir : NULL,
        .sandbox_helper = sandbox_helper,
        .sandbox_cold = warm && strcmp(warm, "0") == 0,
        .netns_grace_ms = CS_SUPERVISOR_NETNS_GRACE_MS,
    };
    /* docs/operations.md: how long a shared workspace's network namespace outlives its last
     * process; 0 .. 86400 seconds, anything else keeps the default. */
    const char *grace = getenv("CODESPACE_NETNS_GRACE_SECS");
    if (grace && grace[0] >= '0' && grace[0] <= '9') {
        char *end;
        errno = 0;
        long v = strtol(grace, &end, 10);
        if (errno == 0 && *end == '\0' && v >= 0 && v <= 86400)
            lim->netns_grace_ms = (int64_t)v * 1000;
    }
}

int cs_supervisor_spawn_aux(const char *prog, char *const argv[], char *const envp[],
                            const int fds[3], pid_t *pid)
{
    return cs_supervisor_spawn_aux_keep(prog, argv, envp, fds, NULL, 0, pid);
}

int cs_supervisor_spawn_aux_keep(const char *prog, char *const argv[], char *const envp[],
                                 const int fds[3], const int *keep, size_t nkeep, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    /* The kept descriptors go to 3, 4, ... in the child. They are first duplicated above any
     * target number here, so moving one into place never overwrites another still to move. */
    int *high = nkeep ? calloc(nkeep, sizeof *high) : NULL;
    size_t nhigh = 0;
    if (nkeep && !high)
        return ENOMEM;
    int e = 0;
    for (; nhigh < nkeep; nhigh++) {
        high[nhigh] = fcntl(keep[nhigh], F_DUPFD_CLOEXEC, 64);
        if (high[nhigh] < 0) {
            e = errno;
            break;
        }
    }
    if (e == 0)
        e = posix_spawn_file_actions_init(&fa);
    if (e != 0)
        goto close_high;
    e = posix_spawnattr_init(&attr);
    if (e != 0) {
        posix_spawn_file_actions_destroy(&fa);
        goto close_high;
    }
    for (int i = 0; i < 3 && e == 0; i++)
        e = posix_spawn_file_actions_adddup2(&fa, fds[i], i);
    for (size_t i = 0; i < nkeep && e == 0; i++)
        e = posix_spawn_file_actions_adddup2(&fa, high[i], 3 + (int)i);
    if (e == 0)
        e = posix_spawn_file_actions_addclosefrom_np(&fa, 3 + (int)nkeep);
    if (e == 0)
        e = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (e == 0)
        e = posix_spawnattr_setsigmask(&attr, &none);
    if (e == 0)
        e = posix_spawnattr_setsigdefault(&attr, &all);
    if (e == 0)
        e = posix_spawn(pid, prog, &fa, &attr, argv, envp);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
close_high:
    for (size_t i = 0; i < nhigh; i++)
        close(high[i]);
    free(high);
    return e;
}
