/*
 * sandbox_netns: `codespace-linux-sandbox netns-hold <label>`, the holder of one workspace's
 * network namespace (workflows.md section 3, docs/runner-isolation.md "The workspace's network
 * namespace"), and the checks run applies to the namespaces a plan names.
 *
 * The holder creates a network namespace (a caller that is not root: inside a user namespace
 * of its own mapping the caller's ids to themselves, which then owns the network namespace),
 * brings lo up, drops every capability, closes everything but 0-2, writes "ready\n" on stdout
 * and waits: EOF or anything on stdin (the runner's pipe), or the runner's death
 * (PR_SET_PDEATHSIG), ends it and the namespace with it once no command is in it. The runner
 * opens /proc/<pid>/ns/net (and ns/user) and passes them to each `run` as the plan's netns_fd
 * (and userns_fd). The label (the workspace id) is only shown in ps; nothing reads it.
 *
 * Trust: argv and stdin come from the runner. Entry points: cs_sbx_netns_hold_main,
 * cs_sbx_netns_check.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "sandbox.h"

static void write_self(const char *file, const char *text)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/%s", file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        cs_sbx_diex("open %s: %s", path, strerror(errno));
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n)
        cs_sbx_diex("write %s: %s", path, strerror(errno));
    close(fd);
}

/* The label: 1..128 bytes of printable ASCII other than space (a workspace id as ps shows it). */
static bool label_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return false;
    return true;
}

int cs_sbx_netns_hold_main(int argc, char **argv)
{
    if (argc != 3 || !label_ok(argv[2])) {
        fputs("usage: codespace-linux-sandbox netns-hold <label>\n", stderr);
        return CS_SBX_EXIT_USAGE;
    }
    /* Dies with the runner: a runner killed with SIGKILL leaves no namespace behind. */
    pid_t parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        cs_sbx_die("PR_SET_PDEATHSIG");
    if (getppid() != parent || parent == 1)
        return CS_SBX_EXIT_SETUP;
    signal(SIGPIPE, SIG_IGN);
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (uid != 0) {
        /* The caller's own user namespace owns the network namespace: the runner's `run`
         * joins it first (its owner has every capability there), then the network namespace. */
        if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0)
            cs_sbx_die("unshare (user, net)");
        char map[64];
        write_self("setgroups", "deny");
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
        write_self("uid_map", map);
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
        write_self("gid_map", map);
    } else if (unshare(CLONE_NEWNET) < 0) {
        cs_sbx_die("unshare (net)");
    }
    cs_sbx_setup_loopback();
    /* It only waits from here: nothing of its privilege is needed any more. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        cs_sbx_die("PR_SET_NO_NEW_PRIVS");
    cs_sbx_setup_drop_caps();
    if (close_range(3, ~0u, 0) < 0)
        cs_sbx_die("close_range");
    static const char ready[] = "ready\n";
    if (write(1, ready, sizeof ready - 1) != (ssize_t)(sizeof ready - 1))
        return CS_SBX_EXIT_SETUP;
    for (;;) {
        char c;
        ssize_t r = read(0, &c, 1);
        if (r < 0 && errno == EINTR)
            continue;
        return 0; /* EOF, a byte or an error: the runner lets the namespace go */
    }
}

void cs_sbx_netns_check(int fd, int nstype, const char *what)
{
    int t = ioctl(fd, NS_GET_NSTYPE);
    if (t < 0 || t != nstype)
        cs_sbx_diex("%s %d is not a %s namespace descriptor", what, fd,
                    nstype == CLONE_NEWNET ? "network" : "user");
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        cs_sbx_die("fcntl");
}
