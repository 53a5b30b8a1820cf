/*
 * sandbox_wait: `run --wait-fd <n>`, the helper the runner starts ahead of a command (issue 20),
 * so that a sandboxed spawn need not wait for the helper's exec.
 *
 * Until its message comes, the helper holds nothing of any workspace: /dev/null as 0-2, the
 * root directory as working directory, and fd n, one end of a SOCK_SEQPACKET socketpair whose
 * other end the runner keeps. It then takes exactly one message: a CS_SBX_WAIT_HEADER-byte
 * header (version, terminal flag, namespace count) and, as SCM_RIGHTS, the descriptors a helper
 * started for that command would have inherited:
 *
 *   pipes:    plan memfd, stdin, stdout (also stderr), workspace root, report pipe   (5)
 *   terminal: plan memfd, terminal (0, 1 and 2),       workspace root, report pipe   (4)
 *
 * followed, for a command of a shared workspace (workflows.md section 3), by the namespaces it
 * joins: 1, its network namespace; 2, that and the user namespace owning it (a runner that is
 * not root). Each is checked for its type here, and again by main against the plan.
 *
 * They are put where the runner's start puts them (0-2, the root 3, the report pipe 4, the plan
 * 5, the network namespace 6, its user namespace 7), the working directory becomes the root as
 * in the runner's child, a terminal becomes the
 * controlling terminal (the runner's child made this helper a session leader with none), and
 * everything else is closed. main then runs the plan as `run --plan-fd 5`: every check from the
 * plan read onward (a sealed memfd of our uid, cs_sbx_plan_parse) is the same code.
 *
 * Trust: the message comes from the socket's creator, checked to be our parent (SO_PEERCRED),
 * which is the runner; the header and the descriptor count are still checked exactly, and
 * anything else (a short or long header, another count, truncated control data, an unknown
 * version) runs nothing. EOF (the runner closed its end: no command came) is a quiet exit 0.
 * Entry points: cs_sbx_wait.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "sandbox.h"

#define WAIT_MAX_FDS 8 /* room to see (and refuse) a message with too many descriptors */
/* Sets err and gives -1. */
#define fail(err, ...) (cs_diag_set((err), __VA_ARGS__), -1)

int cs_sbx_wait_check(const unsigned char *hdr, size_t n, int msg_flags, size_t nfds, bool *tty,
                      size_t *nns, struct cs_diag *err)
{
    if (msg_flags & (MSG_TRUNC | MSG_CTRUNC))
        return fail(err, CSW_ERROR_PROCESS_SPAWN_FAILED,
                    "wait: the runner's message was truncated");
    if (n != CS_SBX_WAIT_HEADER)
        return fail(err, CSW_ERROR_PROCESS_SPAWN_FAILED, "wait: a header of %zu bytes (want %d)", n,
                    CS_SBX_WAIT_HEADER);
    if (hdr[0] != CS_SBX_WAIT_VERSION)
        return fail(err, CSW_ERROR_PROCESS_SPAWN_FAILED, "wait: version %u (want %d)", hdr[0],
                    CS_SBX_WAIT_VERSION);
    if (hdr[1] > 1)
        return fail(err, CSW_ERROR_PROCESS_SPAWN_FAILED, "wait: terminal flag %u", hdr[1]);
    if (hdr[2] > 2)
        return fail(err, CSW_ERROR_PROCESS_SPAWN_FAILED, "wait: namespace count %u (at most 2)",
                    hdr[2]);
    size_t want = (hdr[1] ? 4u : 5u) + hdr[2];
    if (nfds != want)
        return fail(err, CSW_ERROR_PROCESS_SPAWN_FAILED,
                    "wait: %zu descriptors (want %zu for %s and %u namespaces)", nfds, want,
                    hdr[1] ? "a terminal" : "pipes", hdr[2]);
    *tty = hdr[1] != 0;
    *nns = hdr[2];
    return 0;
}

/* Closes the descriptors of a refused message: none of them may stay behind. */
static void close_all(const int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

int cs_sbx_wait(int sock, struct cs_diag *err)
{
    struct ucred peer;
    socklen_t plen = sizeof peer;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &peer, &plen) != 0 || plen != sizeof peer)
        return fail(err, CSW_ERROR_PROCESS_SPAWN_FAILED, "wait fd %d: not a socket: %s", sock,
                    strerror(errno));
    int type = 0;
    socklen_t tlen = sizeof type;
    if (getsockopt(sock, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_SEQPACKET)
        return fail(err, CSW_ERROR_PROCESS_SPAWN_FAILED, "wait fd %d: not a SOCK_SEQPACKET socket",
                    sock);
    /* Our parent made the pair: nobody else can have sent on it. */
    if (peer.pid != getppid())
        return fail(err, CSW_ERROR_PROCESS_SPAWN_FAILED,
                    "wait fd %d: made by pid %d, not by our parent", sock, (int)peer.pid);

    unsigned char hdr[CS_SBX_WAIT_HEADER + 1]; /* one more: a long header shows as too long */
    union {
        char buf[CMSG_SPACE(WAIT_MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {.iov_base = hdr, .iov_len = sizeof hdr};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl};
    ssize_t n;
    do
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return fail(err, CSW_ERROR_PROCESS_SPAWN_FAILED, "wait: recvmsg: %s", strerror(errno));

    int got[WAIT_MAX_FDS] = {-1, -1, -1, -1, -1, -1, -1, -1};
    size_t nfds = 0;
    bool other = false;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
            other = true;
            continue;
        }
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (nfds < WAIT_MAX_FDS)
                got[nfds++] = fd;
            else
                close(fd);
        }
    }
    if (n == 0 && nfds == 0 && !other)
        return 0; /* the runner closed its end: no command */
    bool tty = false;
    size_t nns = 0;
    if (other) {
        close_all(got, nfds);
        return fail(err, CSW_ERROR_PROCESS_SPAWN_FAILED,
                    "wait: control data other than SCM_RIGHTS");
    }
    if (cs_sbx_wait_check(hdr, (size_t)n, msg.msg_flags, nfds, &tty, &nns, err) != 0) {
        close_all(got, nfds);
        return -1;
    }
    /* In the order of the message: plan, then stdin and stdout or the terminal, root, report,
     * then the namespaces. */
    size_t base = nfds - nns; /* the descriptors before the namespaces */
    int in = got[1], root = got[base - 2];
    struct stat st;
    const char *bad = NULL;
    if (fstat(root, &st) != 0 || !S_ISDIR(st.st_mode))
        bad = "the workspace root is not a directory";
    else if (tty && !isatty(in))
        bad = "the terminal is not a terminal";
    else if (nns > 0 && ioctl(got[base], NS_GET_NSTYPE) != CLONE_NEWNET)
        bad = "the first namespace is not a network namespace";
    else if (nns > 1 && ioctl(got[base + 1], NS_GET_NSTYPE) != CLONE_NEWUSER)
        bad = "the second namespace is not a user namespace";
    if (bad) {
        close_all(got, nfds);
        return fail(err, CSW_ERROR_PROCESS_SPAWN_FAILED, "wait: %s", bad);
    }
    /* Everything received is above 5 first, so no dup2 below overwrites one still to move. */
    int high[7] = {-1, -1, -1, -1, -1, -1, -1};
    for (size_t i = 0; i < nfds; i++) {
        high[i] = fcntl(got[i], F_DUPFD_CLOEXEC, 16);
        if (high[i] < 0)
            cs_sbx_die("wait: fcntl");
        close(got[i]);
    }
    /* The socket goes before the dup2s: its number may be one of theirs. */
    close(sock);
    int plan = high[0], outfd = tty ? high[1] : high[2], report = high[base - 1];
    in = high[1];
    root = high[base - 2];
    /* dup2 clears close-on-exec on the copy; the plan's 5 replaces (closes) the socket. */
    if (dup2(in, 0) < 0 || dup2(outfd, 1) < 0 || dup2(outfd, 2) < 0 || dup2(root, 3) < 0 ||
        dup2(report, 4) < 0 || dup2(plan, 5) < 0)
        cs_sbx_die("wait: dup2");
    /* The namespaces at the plan's netns_fd 6 and userns_fd 7 (main checks the plan names
     * them there, and their types again). */
    for (size_t i = 0; i < nns; i++)
        if (dup2(high[base + i], 6 + (int)i) < 0)
            cs_sbx_die("wait: dup2");
    if (close_range(6 + (unsigned)nns, ~0u, 0) != 0)
        cs_sbx_die("wait: close_range");
    /* As the runner's child: the held root, never a path, is the working directory. */
    if (fchdir(3) != 0)
        cs_sbx_die("wait: fchdir");
    /* A session leader without a terminal (the runner's child did setsid): this one becomes
     * its controlling terminal, with our group in the foreground. */
    if (tty && ioctl(0, TIOCSCTTY, 0) != 0)
        cs_sbx_die("wait: TIOCSCTTY");
    return 1;
}
