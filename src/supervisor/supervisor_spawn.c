/*
 * supervisor_spawn: starting one command (runtime.md section 5). posix_spawn from an argv, no
 * shell: a new session (so a new process group, and for a PTY the terminal as controlling
 * terminal), every signal back to its default and unblocked (the server blocks SIGINT/SIGTERM
 * for its signalfd and ignores SIGPIPE; a child must not inherit either), the workspace root as
 * working directory, the cleared and rebuilt environment, and nothing but its stdin, stdout and
 * stderr open (every other descriptor is closed in the child, whatever its close-on-exec flag).
 *
 * Trust: argv comes from the client; it is passed to execve only. The program is looked up in
 * the runner's PATH (absolute entries only) unless argv[0] contains a slash, in which case it is
 * taken relative to the workspace root, as a shell would in that directory.
 * Entry points: cs__supervisor_start.
 */
#include "supervisor_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((format(printf, 3, 4))) static void msgf(char *msg, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (msg && cap)
        vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
}

/* Finds name in the absolute entries of path. Returns a new string, or NULL (not found). */
static char *lookup(const char *path, const char *name)
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

int cs__supervisor_start(const struct cs__supervisor_cmd *cmd, struct cs__supervisor_fds *fds,
                         char *msg, size_t cap)
{
    int rc = -1;
    char *prog = NULL;
    int in[2] = {-1, -1}, out[2] = {-1, -1}, master = -1, slave = -1;
    char slave_path[128];
    bool fa_init = false, attr_init = false;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;

    if (strchr(cmd->argv[0], '/')) {
        prog = strdup(cmd->argv[0]);
    } else {
        prog = lookup(cmd->path, cmd->argv[0]);
        if (!prog) {
            msgf(msg, cap, "%s: command not found in the runner's PATH", cmd->argv[0]);
            goto out;
        }
    }
    if (!prog) {
        msgf(msg, cap, "spawn: %s", strerror(ENOMEM));
        goto out;
    }
    if (cmd->tty) {
        if (open_pty(&master, slave_path, sizeof slave_path, cmd->rows, cmd->cols) != 0 ||
            (slave = open(slave_path, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
            msgf(msg, cap, "cannot open a pseudo-terminal: %s", strerror(errno));
            goto out;
        }
    } else {
        /* Blocking pipes for the child; only our ends turn non-blocking (each end is its own
         * open file description). */
        if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || set_nonblock(in[1]) != 0 ||
            set_nonblock(out[0]) != 0) {
            msgf(msg, cap, "cannot create pipes: %s", strerror(errno));
            goto out;
        }
        /* A larger pipe lets a chatty command run ahead of the loop between reads. Best
         * effort: the default 64 KiB works too. */
        (void)fcntl(out[0], F_SETPIPE_SZ, 1024 * 1024);
    }

    int e = posix_spawn_file_actions_init(&fa);
    fa_init = e == 0;
    if (e == 0)
        e = posix_spawnattr_init(&attr);
    attr_init = fa_init && e == 0;
    sigset_t none, all;
    sigemptyset(&none);
    sigemptyset(&all);
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            (void)sigaddset(&all, sig); /* glibc refuses its internal signals: fine */
    if (e == 0)
        e = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                                POSIX_SPAWN_SETSIGDEF);
    if (e == 0)
        e = posix_spawnattr_setsigmask(&attr, &none);
    if (e == 0)
        e = posix_spawnattr_setsigdefault(&attr, &all);
    if (e == 0)
        e = posix_spawn_file_actions_addchdir_np(&fa, cmd->root);
    if (cmd->tty) {
        /* Opened by the new session leader without O_NOCTTY: it becomes the controlling
         * terminal, and the command's group its foreground group. */
        if (e == 0)
            e = posix_spawn_file_actions_addopen(&fa, 0, slave_path, O_RDWR, 0);
        if (e == 0)
            e = posix_spawn_file_actions_adddup2(&fa, 0, 1);
        if (e == 0)
            e = posix_spawn_file_actions_adddup2(&fa, 0, 2);
    } else {
        if (e == 0)
            e = posix_spawn_file_actions_adddup2(&fa, in[0], 0);
        if (e == 0)
            e = posix_spawn_file_actions_adddup2(&fa, out[1], 1);
        if (e == 0)
            e = posix_spawn_file_actions_adddup2(&fa, out[1], 2);
    }
    if (e == 0)
        e = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    pid_t pid = -1;
    if (e == 0)
        e = posix_spawn(&pid, prog, &fa, &attr, cmd->argv, cmd->envp);
    if (e != 0) {
        msgf(msg, cap, "%s: %s", cmd->argv[0], strerror(e));
        goto out;
    }
    /* glibc's posix_spawn returns once the child has exec'd, so the pid is a child of ours
     * that nobody else reaps: the pidfd cannot name a recycled process. */
    int pidfd = pidfd_open(pid, 0);
    if (pidfd < 0) {
        int pe = errno;
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        msgf(msg, cap, "pidfd_open: %s", strerror(pe));
        goto out;
    }
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
    if (attr_init)
        posix_spawnattr_destroy(&attr);
    if (fa_init)
        posix_spawn_file_actions_destroy(&fa);
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
