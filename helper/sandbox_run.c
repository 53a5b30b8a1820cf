/*
 * sandbox_run: `run --plan`, after the plan is loaded. Three processes:
 *
 *   outer helper  the process the runner spawned (its session, its process group). Clones the
 *                 init into new namespaces, writes the uid/gid maps, serves the proxy (enabled
 *                 network), forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2/SIGWINCH to
 *                 the init, and exits with the command's status (re-raising its signal).
 *   init          PID 1 of the new PID namespace, dies with the outer helper (PR_SET_PDEATHSIG
 *                 SIGKILL). Builds the sandbox (sandbox_setup.c), forks the command, forwards
 *                 signals to the command's process group, reaps everything, and when the command
 *                 is gone kills whatever is left and reports the command's wait status.
 *   command       started by the init (CLONE_VFORK): a new session (controlling terminal = fd 0
 * when the plan says tty), seccomp last, then execve.
 *
 * Trust: the plan is validated; the command is hostile from execve on.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <ifaddrs.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "sandbox.h"

extern char **environ;

static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};

_Noreturn void cs_sbx_die(const char *what)
{
    int e = errno;
    fprintf(stderr, "codespace-linux-sandbox: %s: %s\n", what, strerror(e));
    _exit(CS_SBX_EXIT_SETUP);
}

_Noreturn void cs_sbx_diex(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("codespace-linux-sandbox: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    _exit(CS_SBX_EXIT_SETUP);
}

static void write_file(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        cs_sbx_diex("open %s: %s", path, strerror(errno));
    size_t n = strlen(s);
    if (write(fd, s, n) != (ssize_t)n)
        cs_sbx_diex("write %s: %s", path, strerror(errno));
    close(fd);
}

static bool env_drop(const struct cs_str *k)
{
    static const char *const drop[] = {"NO_PROXY",   "no_proxy",    "PATH",
                                       "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                                       "http_proxy", "https_proxy", "all_proxy"};
    for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
        if (strcmp(k->s, drop[i]) == 0)
            return true;
    return false;
}

/* The command's environment: the plan's, PATH fixed, TMPDIR pointing at the private /tmp,
 * NO_PROXY removed, and the proxy variables in enabled mode. */
static char **build_env(const struct csw_sandbox_plan *plan, uint16_t proxy_port)
{
    size_t n = plan->env.n + 8;
    char **env = calloc(n, sizeof *env);
    size_t k = 0;
    if (!env)
        cs_sbx_diex("out of memory");
    for (size_t i = 0; i < plan->env.n; i++) {
        const struct csw_sandbox_plan_env_entry *e = &plan->env.v[i];
        if (env_drop(&e->key))
            continue;
        const char *val = strcmp(e->key.s, "TMPDIR") == 0 ? "/tmp" : e->value.s;
        if (asprintf(&env[k++], "%s=%s", e->key.s, val) < 0)
            cs_sbx_diex("out of memory");
    }
    env[k++] = strdup("PATH=" CS_SBX_PATH);
    if (plan->network == CSW_SANDBOX_PLAN_NETWORK_ENABLED) {
        static const char *const vars[] = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                                           "http_proxy", "https_proxy", "all_proxy"};
        for (size_t i = 0; i < 6; i++)
            if (asprintf(&env[k++], "%s=http://127.0.0.1:%u", vars[i], proxy_port) < 0)
                cs_sbx_diex("out of memory");
    }
    env[k] = NULL;
    return env;
}

void cs_sbx_send_fd(int sock, int fd, const char *what)
{
    char byte = 'P';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(sock, &msg, MSG_NOSIGNAL) != 1)
        cs_sbx_diex("send %s: %s", what, strerror(errno));
}

static int recv_fd(int sock)
{
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    ssize_t r;
    do
        r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (r < 0 && errno == EINTR);
    if (r != 1)
        return -1; /* the init died during setup; its status tells why */
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

/* ------------------------------------------------------------------ command ---- */

/* The plan's network as the seccomp filter's variant. */
static enum cs_sbx_net filter_net(enum csw_sandbox_plan_network n)
{
    switch (n) {
    case CSW_SANDBOX_PLAN_NETWORK_RESTRICTED:
        break;
    case CSW_SANDBOX_PLAN_NETWORK_ENABLED:
        return CS_SBX_NET_ENABLED;
    case CSW_SANDBOX_PLAN_NETWORK_LOOPBACK:
        return CS_SBX_NET_LOOPBACK;
    }
    return CS_SBX_NET_RESTRICTED;
}

_Noreturn static void command_main(const struct csw_sandbox_plan *plan, char **env, int notify_sock)
{
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            signal(s, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (setsid() < 0)
        cs_sbx_die("setsid");
    /* A PTY command owns its terminal: controlling terminal and foreground process group. */
    if (plan->tty && isatty(0)) {
        if (ioctl(0, TIOCSCTTY, 0) < 0)
            cs_sbx_die("TIOCSCTTY");
        if (tcgetpgrp(0) != getpgrp())
            cs_sbx_diex("terminal foreground group not set");
    }
    /* Only 0-2 and the socket the seccomp listener leaves on (closed with it below). */
    if (close_range(3, (unsigned)notify_sock - 1, 0) < 0 ||
        close_range((unsigned)notify_sock + 1, ~0u, 0) < 0)
        cs_sbx_die("close_range");
    char **argv = calloc(plan->argv.n + 1, sizeof *argv);
    if (!argv)
        cs_sbx_diex("out of memory");
    for (size_t i = 0; i < plan->argv.n; i++)
        argv[i] = plan->argv.v[i].s;
    environ = env; /* execvp searches the sandbox PATH */
    cs_sbx_setup_seccomp(filter_net(plan->network), notify_sock);
    if (close_range(3, ~0u, 0) < 0) /* nothing but 0-2 reaches the command */
        cs_sbx_die("close_range");
    execvp(argv[0], argv);
    int e = errno;
    fprintf(stderr, "codespace-linux-sandbox: exec %s: %s\n", argv[0], strerror(e));
    _exit(e == ENOENT || e == ENOTDIR ? 127 : 126);
}

/* Starts the command: clone with CLONE_VM | CLONE_VFORK (vfork on a stack of its own). The init
 * has nothing to do until the command has exec'd, and sharing its memory spares copying the page
 * tables and the copy-on-write faults of both sides (issue 20). The child changes only what is its
 * own (signal dispositions and mask, session, descriptors, its seccomp filter) and the init's
 * environ and heap, which the init no longer reads. */
#if defined(__SANITIZE_ADDRESS__)
#define CS_SBX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CS_SBX_ASAN 1
#endif
#endif

#ifndef CS_SBX_ASAN
struct command_args {
    const struct csw_sandbox_plan *plan;
    char **env;
    int notify_sock;
};

static int command_entry(void *arg)
{
    const struct command_args *a = arg;
    command_main(a->plan, a->env, a->notify_sock);
}
#endif

static pid_t spawn_command(const struct csw_sandbox_plan *plan, char **env, int notify_sock)
{
#ifdef CS_SBX_ASAN
    /* AddressSanitizer cannot follow a child onto a stack of its own: it warns, into the
     * command's output, at the first call that does not return. Sanitized builds fork: the same
     * child on a copy of the init's memory. */
    pid_t pid = fork();
    if (pid == 0)
        command_main(plan, env, notify_sock);
    return pid;
#else
    static char stack[256 * 1024] __attribute__((aligned(16)));
    struct command_args a = {.plan = plan, .env = env, .notify_sock = notify_sock};
    return clone(command_entry, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
#endif
}

/* ---------------------------------------------------------------------- init ---- */

_Noreturn static void init_main(struct csw_sandbox_plan *plan, int go_fd, int status_fd,
                                int fd_sock, int notify_sock, const struct cs_sbx_ids *ids)
{
    /* The report is the outer helper's to write: nothing in the sandbox holds it; the
     * workspace's namespaces were joined already. */
    if (plan->has_report_fd)
        close((int)plan->report_fd);
    if (plan->has_netns_fd)
        close((int)plan->netns_fd);
    if (plan->has_userns_fd)
        close((int)plan->userns_fd);
    /* Die with the outer helper; a parent that died before this line closed go_fd. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        cs_sbx_die("PR_SET_PDEATHSIG");
    char go;
    if (read(go_fd, &go, 1) != 1)
        _exit(CS_SBX_EXIT_SETUP);
    close(go_fd);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
        cs_sbx_die("PR_SET_NO_NEW_PRIVS");
    /* The init runs without the seccomp filter: nothing in the sandbox may open its memory
     * (/proc/1/mem) or ptrace it, which a non-dumpable process refuses without CAP_SYS_PTRACE. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 || prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0)
        cs_sbx_die("PR_SET_DUMPABLE");
    /* A root caller's init starts with host ids that are unmapped here; it takes the mapped ones
     * (keeping its capabilities in this namespace until cs_sbx_setup_drop_caps: none of its old
     * ids was this namespace's root). */
    if (getuid() != ids->inner_uid || getgid() != ids->inner_gid) {
        if (setresgid(ids->inner_gid, ids->inner_gid, ids->inner_gid) < 0)
            cs_sbx_die("setresgid");
        if (setresuid(ids->inner_uid, ids->inner_uid, ids->inner_uid) < 0)
            cs_sbx_die("setresuid");
    }
    if (getuid() != ids->inner_uid || getgid() != ids->inner_gid || geteuid() != ids->inner_uid ||
        getegid() != ids->inner_gid)
        cs_sbx_diex("uid/gid map did not hold");
    /* A change of ids clears the parent-death signal: arm it again, then make sure the outer
     * helper did not die in between (its end of the status pipe would be closed). */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        cs_sbx_die("PR_SET_PDEATHSIG");
    struct pollfd alive = {.fd = status_fd, .events = POLLOUT};
    if (poll(&alive, 1, 0) < 0 || (alive.revents & (POLLERR | POLLHUP)))
        _exit(CS_SBX_EXIT_SETUP);
    if (setsid() < 0) /* out of the runner's process group: signals come through the helper */
        cs_sbx_die("setsid (init)");

    uint16_t port = 0;
    /* The workspace's namespace (netns_fd) came with lo up, from a holder whose user namespace
     * owns it: nothing here may (or can) change its interfaces. */
    if (!plan->has_netns_fd)
        cs_sbx_setup_loopback();
    if (plan->network == CSW_SANDBOX_PLAN_NETWORK_ENABLED) {
        int l = cs_sbx_setup_proxy_listener(&port);
        cs_sbx_send_fd(fd_sock, l, "the proxy listener");
        close(l);
    }
    if (fd_sock >= 0)
        close(fd_sock);

    cs_sbx_setup_filesystem(plan, ids);
    if (sethostname("codespace", 9) < 0)
        cs_sbx_die("sethostname");
    struct rlimit rl = {0, 0};
    if (setrlimit(RLIMIT_CORE, &rl) < 0 || getrlimit(RLIMIT_CORE, &rl) < 0 || rl.rlim_cur != 0 ||
        rl.rlim_max != 0)
        cs_sbx_die("RLIMIT_CORE");
    if (chdir(plan->cwd.s) < 0)
        cs_sbx_diex("chdir %s: %s", plan->cwd.s, strerror(errno));
    cs_sbx_setup_drop_caps();
    cs_sbx_setup_landlock(plan);

    /* Only 0-2, the status pipe (as fd 3) and the command's end of the listener socket (as
     * fd 4) stay open. */
    if (notify_sock == 3) {
        int d = fcntl(notify_sock, F_DUPFD_CLOEXEC, 5);
        if (d < 0)
            cs_sbx_die("dup");
        close(notify_sock);
        notify_sock = d;
    }
    if (status_fd != 3) {
        if (dup2(status_fd, 3) < 0)
            cs_sbx_die("dup2");
        status_fd = 3;
    }
    if (notify_sock != 4) {
        if (dup2(notify_sock, 4) < 0)
            cs_sbx_die("dup2");
        notify_sock = 4;
    }
    if (close_range(5, ~0u, 0) < 0)
        cs_sbx_die("close_range");
    fcntl(status_fd, F_SETFD, FD_CLOEXEC);
    fcntl(notify_sock, F_SETFD, FD_CLOEXEC);

    char **env = build_env(plan, port);
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++)
        sigaddset(&set, forwarded[i]);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, NULL);

    pid_t cmd = spawn_command(plan, env, notify_sock);
    if (cmd < 0)
        cs_sbx_die("clone (command)");
    close(notify_sock); /* the outer helper sees EOF if the command dies before sending */

    int cmd_status = 0;
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(&set, &si);
        if (sig < 0)
            continue;
        if (sig != SIGCHLD) {
            if (kill(-cmd, sig) < 0) /* before its setsid the group does not exist yet */
                kill(cmd, sig);
            continue;
        }
        bool done = false;
        int st;
        pid_t p;
        while ((p = waitpid(-1, &st, WNOHANG)) > 0)
            if (p == cmd) {
                cmd_status = st;
                done = true;
            }
        if (done)
            break;
    }
    /* Nothing the command started survives it. */
    kill(-1, SIGKILL);
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
        ;
    (void)!write(status_fd, &cmd_status, sizeof cmd_status);
    if (WIFSIGNALED(cmd_status))
        _exit(128 + WTERMSIG(cmd_status));
    _exit(WEXITSTATUS(cmd_status));
}

/* ---------------------------------------------------------------- outer helper ---- */

/* The pipes between the outer helper and the init: each pair [read end, write end]. */
struct init_fds {
    int go[2], status[2], sp[2], np[2];
};

/* The init's side of a fresh clone: the outer helper's ends closed, then init_main. */
_Noreturn static void start_init(struct csw_sandbox_plan *plan, const struct init_fds *f,
                                 const struct cs_sbx_ids *ids)
{
    close(f->go[1]);
    close(f->status[0]);
    if (f->sp[0] >= 0)
        close(f->sp[0]);
    close(f->np[0]);
    init_main(plan, f->go[0], f->status[1], f->sp[1], f->np[1], ids);
}

/* docs/contract/sandbox.md §3: the command's ids map to themselves: the caller's when it is not
 * root, else the unprivileged ids cs_sbx_identity chose. Written by a process of the parent user
 * namespace of pid's. */
static void write_maps(pid_t pid, const struct cs_sbx_ids *ids)
{
    char path[64], map[64];
    snprintf(path, sizeof path, "/proc/%d/setgroups", pid);
    write_file(path, "deny");
    snprintf(path, sizeof path, "/proc/%d/uid_map", pid);
    snprintf(map, sizeof map, "%u %u 1\n", ids->inner_uid, ids->host_uid);
    write_file(path, map);
    snprintf(path, sizeof path, "/proc/%d/gid_map", pid);
    snprintf(map, sizeof map, "%u %u 1\n", ids->inner_gid, ids->host_gid);
    write_file(path, map);
}

/*
 * clone_joined for a root runner's namespace (no userns_fd: the host's user namespace owns it):
 * this helper joins the network namespace for the clone alone and returns to its own before
 * anything else, which it can do here (never out of a user namespace it joined, hence the
 * intermediate below for a caller that is not root). One fork fewer on every spawn of a shared
 * workspace (issue 28). Dies on any failure; a failure to return kills the init (the go pipe
 * closes with us) and this helper before its proxy could connect from the wrong namespace.
 */
static pid_t clone_joined_in_place(struct csw_sandbox_plan *plan, long flags,
                                   const struct init_fds *f, const struct cs_sbx_ids *ids)
{
    int own = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (own < 0)
        cs_sbx_die("open /proc/self/ns/net");
    if (setns((int)plan->netns_fd, CLONE_NEWNET) < 0)
        cs_sbx_die("setns (the workspace's network namespace)");
    pid_t pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, 0L);
    if (pid < 0)
        cs_sbx_die("clone (namespaces)");
    if (pid == 0) {
        close(own);
        start_init(plan, f, ids);
    }
    if (setns(own, CLONE_NEWNET) < 0)
        cs_sbx_die("setns (back to the helper's network namespace)");
    close(own);
    write_maps(pid, ids);
    close((int)plan->netns_fd);
    return pid;
}

/*
 * The init in the workspace's network namespace (plan netns_fd, workflows.md section 3): a short
 * intermediate process joins it (a caller that is not root joins the holder's user namespace
 * first, userns_fd: its owner has every capability there, which setns of the network namespace
 * needs), clones the init with the other new namespaces and CLONE_PARENT, so that the init is
 * this outer helper's child as always, writes its id maps (the intermediate is in the parent
 * user namespace of the init's) and exits. The outer helper itself never leaves the host's
 * namespaces: its proxy connects from there. Returns the init's pid; dies on any failure (the
 * init, if it was started, dies with it through its parent-death signal or the closed go pipe).
 */
static pid_t clone_joined(struct csw_sandbox_plan *plan, long flags, const struct init_fds *f,
                          const struct cs_sbx_ids *ids)
{
    if (!plan->has_userns_fd)
        return clone_joined_in_place(plan, flags, f, ids);
    int pp[2];
    if (pipe2(pp, O_CLOEXEC) < 0)
        cs_sbx_die("pipe");
    pid_t mid = fork();
    if (mid < 0)
        cs_sbx_die("fork");
    if (mid == 0) {
        close(pp[0]);
        if (plan->has_userns_fd && setns((int)plan->userns_fd, CLONE_NEWUSER) < 0)
            cs_sbx_die("setns (the workspace's user namespace)");
        if (setns((int)plan->netns_fd, CLONE_NEWNET) < 0)
            cs_sbx_die("setns (the workspace's network namespace)");
        pid_t pid = (pid_t)syscall(SYS_clone, flags | CLONE_PARENT, NULL, NULL, NULL, 0L);
        if (pid < 0)
            cs_sbx_die("clone (namespaces)");
        if (pid == 0) {
            close(pp[1]);
            start_init(plan, f, ids);
        }
        write_maps(pid, ids);
        if (write(pp[1], &pid, sizeof pid) != (ssize_t)sizeof pid)
            _exit(CS_SBX_EXIT_SETUP);
        _exit(0);
    }
    close(pp[1]);
    pid_t pid = -1;
    ssize_t r;
    do
        r = read(pp[0], &pid, sizeof pid);
    while (r < 0 && errno == EINTR);
    close(pp[0]);
    int st = 0;
    while (waitpid(mid, &st, 0) < 0 && errno == EINTR)
        ;
    if (r != (ssize_t)sizeof pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        _exit(CS_SBX_EXIT_SETUP); /* the intermediate said why on stderr */
    if (plan->has_netns_fd)
        close((int)plan->netns_fd);
    if (plan->has_userns_fd)
        close((int)plan->userns_fd);
    return pid;
}

struct outer {
    pid_t init;
    int init_status;
    bool reaped;
};

static bool outer_on_signal(void *ctx, int sig)
{
    struct outer *o = ctx;
    if (sig != SIGCHLD) {
        kill(o->init, sig);
        return false;
    }
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0)
        if (p == o->init) {
            o->init_status = st;
            o->reaped = true;
        }
    return o->reaped;
}

/* Exits with the wait status st: the same exit code, or the same signal re-raised. */
_Noreturn static void exit_like(int st)
{
    if (WIFEXITED(st))
        _exit(WEXITSTATUS(st));
    int sig = WTERMSIG(st);
    struct rlimit rl = {0, 0};
    setrlimit(RLIMIT_CORE, &rl); /* a re-raised SIGSEGV must not dump the helper */
    signal(sig, SIG_DFL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    sigprocmask(SIG_UNBLOCK, &s, NULL);
    raise(sig);
    _exit(128 + sig);
}

/* Every IPv4 and IPv6 address of the host's interfaces, read in the host network namespace
 * (the outer helper's) when the proxy starts: the proxy refuses them unless listed, whatever
 * their range, so the command cannot reach the host's own services through a public address
 * either. Returns the count, *out malloc'd; dies when the list cannot be read (fail closed). */
static size_t host_addresses(struct sockaddr_storage **out)
{
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) < 0)
        cs_sbx_die("getifaddrs");
    size_t n = 0;
    for (struct ifaddrs *i = ifa; i; i = i->ifa_next)
        n += i->ifa_addr &&
             (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6);
    struct sockaddr_storage *v = calloc(n ? n : 1, sizeof *v);
    if (!v)
        cs_sbx_diex("out of memory");
    size_t k = 0;
    for (struct ifaddrs *i = ifa; i && k < n; i = i->ifa_next)
        if (i->ifa_addr &&
            (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6))
            cs_netallow_addr_normalize(i->ifa_addr, &v[k++]);
    freeifaddrs(ifa);
    *out = v;
    return k;
}

_Noreturn void cs_sbx_run(struct csw_sandbox_plan *plan)
{
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++)
        sigaddset(&set, forwarded[i]);
    sigaddset(&set, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
        cs_sbx_die("sigprocmask");
    signal(SIGPIPE, SIG_IGN);

    /* If fd 0 is this session's controlling terminal, give it up so the command (in its own
     * session inside) can take it; the SIGHUP this sends our own group is discarded. */
    if (plan->tty && isatty(0) && tcgetsid(0) == getsid(0)) {
        sigset_t hup;
        sigemptyset(&hup);
        sigaddset(&hup, SIGHUP);
        sigprocmask(SIG_BLOCK, &hup, NULL);
        if (ioctl(0, TIOCNOTTY) < 0)
            cs_sbx_die("TIOCNOTTY");
        struct timespec zero = {0, 0};
        while (sigtimedwait(&hup, NULL, &zero) == SIGHUP)
            ;
    }

    int go[2], status[2], sp[2] = {-1, -1}, np[2];
    if (pipe2(go, O_CLOEXEC) < 0 || pipe2(status, O_CLOEXEC) < 0)
        cs_sbx_die("pipe");
    /* The command sends its seccomp listener back on np (docs/contract/tools.md section 6). */
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, np) < 0)
        cs_sbx_die("socketpair");
    bool enabled = plan->network == CSW_SANDBOX_PLAN_NETWORK_ENABLED;
    if (enabled && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
        cs_sbx_die("socketpair");

    struct cs_sbx_ids ids;
    cs_sbx_identity(plan, &ids);
    /* A PTY command owns its terminal, as after a login: /dev/stdout and /dev/tty re-open it by
     * its host path, as the command's own unprivileged ids. */
    if (plan->tty && isatty(0) && geteuid() == 0 && fchown(0, ids.host_uid, ids.host_gid) < 0)
        cs_sbx_die("chown the terminal");
    /* The workspace tree (a root caller's detached bind of the held root) gets its flags and
     * idmapping before the init may attach it. */
    cs_sbx_workspace_tree_attr(&ids, plan->writable_workspace);
    long flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                 CLONE_NEWUTS | CLONE_NEWCGROUP | SIGCHLD;
    struct init_fds fds = {.go = {go[0], go[1]},
                           .status = {status[0], status[1]},
                           .sp = {sp[0], sp[1]},
                           .np = {np[0], np[1]}};
    pid_t pid;
    if (plan->has_netns_fd) {
        pid = clone_joined(plan, flags & ~(long)CLONE_NEWNET, &fds, &ids);
    } else {
        pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, 0L);
        if (pid < 0)
            cs_sbx_die("clone (namespaces)");
        if (pid == 0)
            start_init(plan, &fds, &ids);
        write_maps(pid, &ids);
    }
    close(go[0]);
    close(status[1]);
    close(np[1]);
    if (sp[1] >= 0)
        close(sp[1]);
    if (write(go[1], "g", 1) != 1)
        cs_sbx_die("start init");
    close(go[1]);

    int listen_fd = -1;
    if (enabled) {
        listen_fd = recv_fd(sp[0]);
        close(sp[0]);
        if (listen_fd >= 0 && fcntl(listen_fd, F_SETFL, O_NONBLOCK) < 0)
            cs_sbx_die("proxy listener O_NONBLOCK");
    }

    /* The listener arrives once the command loaded its filter (EOF: the setup failed, or this
     * host has no user notification). Signals meanwhile stay pending for the signalfd. */
    int notify_fd = recv_fd(np[0]);
    close(np[0]);
    bool notify_closed = false;

    int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0)
        cs_sbx_die("signalfd");
    struct outer o = {.init = pid};
    /* network_allow absent (public destinations only) and [] (nothing) are different rules:
     * the policy keeps the difference in has_list. */
    struct cs_netallow_entry *allow = NULL;
    struct cs_netallow_policy pol = {.has_list = plan->has_network_allow};
    if (plan->has_network_allow && plan->network_allow.n > 0) {
        allow = calloc(plan->network_allow.n, sizeof *allow);
        if (!allow)
            cs_sbx_diex("out of memory");
        for (size_t i = 0; i < plan->network_allow.n; i++)
            if (cs_netallow_entry_parse(plan->network_allow.v[i].s, plan->network_allow.v[i].n,
                                        &allow[i], NULL) < 0)
                cs_sbx_diex("bad network_allow entry"); /* validated already */
        pol.entries = allow;
        pol.n = plan->network_allow.n;
    }
    struct sockaddr_storage *own = NULL;
    if (enabled)
        pol.n_own = host_addresses(&own);
    pol.own = own;
    struct cs_sbx_proxy_cfg cfg = {.listen_fd = listen_fd,
                                   .notify_fd = notify_fd,
                                   .notify_closed = &notify_closed,
                                   .sig_fd = sfd,
                                   .policy = &pol,
                                   .on_signal = outer_on_signal,
                                   .ctx = &o};
    /* A SIGCHLD may have arrived before the signalfd existed: it is still pending, so the
     * signalfd reports it. */
    cs_sbx_proxy_serve(&cfg);
    free(allow);
    free(own);
    if (notify_fd >= 0 && !notify_closed)
        close(notify_fd);
    if (plan->has_report_fd)
        cs_sbx_report_write((int)plan->report_fd);

    int cmd_status;
    ssize_t r = read(status[0], &cmd_status, sizeof cmd_status);
    if (r == (ssize_t)sizeof cmd_status)
        exit_like(cmd_status);
    exit_like(o.init_status); /* the init failed (setup) or was killed */
}
