/*
 * supervisor_sandbox: the runner's side of the Linux command sandbox (docs/contract/sandbox.md §1,
 * 2). It never builds a sandbox itself: it runs the helper, codespace-linux-sandbox, to `probe`
 * once, and for each command encodes the plan with the generated encoder into a sealed memfd
 * (cs__supervisor_sandbox_plan_memfd); the supervisor then starts
 * `codespace-linux-sandbox run --plan-fd 5` in place of the command, and the helper validates the
 * plan with the same rules `prepare` applies (issue 20: no prepare process, no plan file). Only
 * the generated protocol code (schema/sandbox/) is linked here.
 *
 * No plan outlives its run (docs/contract/sandbox.md §1, invariant R9). A memfd plan goes with its
 * last descriptor. Plan files are still written by the probe and by a tool's `prepare`: the helper
 * is given CODESPACE_SANDBOX_RUNNER_PID=<our pid>, so its plan directories, and the probe's
 * workspace, are named `codespace-sandbox-<pid>-XXXXXX` under the helper's TMPDIR (below). Then:
 *  - cs__supervisor_plan_remove removes an exact plan path if it is still there (a process
 *    given a plan file; the runner's own commands no longer are);
 *  - when a supervisor with a sandbox starts, it removes the plan directories that a runner which
 *    is gone left (crashed, SIGKILLed, its helper killed during prepare or probe): a name carrying
 *    a pid that is no live process, or any pid when the directory is over an hour old (a plan is
 *    read within milliseconds of its prepare; an hour old means its pid was recycled), always
 *    only a real directory owned by our uid directly under the helper's TMPDIR:
 *    cs__supervisor_plan_sweep. A live pid's directories, another server's included, are left
 *    alone; so are names without a pid (`prepare` or `probe` run by hand). Runners sharing a
 *    TMPDIR must share a PID namespace (they do, unless /dev/shm is shared into containers),
 *    since "live" is decided by kill(pid, 0).
 * Both runners come here: the in-process gateway and the uds worker (codespace-runtime).
 *
 * Trust: the helper is the operator's binary (flag, variable or our sibling); its output is
 * still decoded through the generated decoder and capped. The directories swept are untrusted
 * names in a shared directory: opened with O_NOFOLLOW relative to a directory fd, checked to be
 * directories of our uid, and only `plan` inside them is unlinked before the rmdir.
 * Entry points: cs_supervisor_sandbox_probe, cs_supervisor_isolation_probe,
 * cs__supervisor_sandbox_plan_memfd, cs__supervisor_plan_remove, cs__supervisor_plan_sweep,
 * cs__supervisor_plan_dir_pid, cs_supervisor_sandbox_identity_check.
 */
#include "supervisor_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/landlock.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "base_json.h"
#include "base_loop.h"

/*
 * Where the helper makes its plan directories (its TMPDIR): /dev/shm when it is a writable
 * tmpfs, so a plan (created exclusive, 0600 in a 0700 mkdtemp directory, fsynced) never waits on
 * a disk; else the runner's own TMPDIR, else /tmp. Its whole environment is this and a plain
 * PATH: the helper runs outside the sandbox, so nothing of ours (LD_*, secrets) reaches it.
 */
static const char *helper_tmpdir(void)
{
    static char chosen[4096];
    if (chosen[0])
        return chosen;
    struct statfs fs;
    const char *t = getenv("TMPDIR");
    if (statfs("/dev/shm", &fs) == 0 && fs.f_type == TMPFS_MAGIC &&
        access("/dev/shm", W_OK | X_OK) == 0)
        snprintf(chosen, sizeof chosen, "/dev/shm");
    else
        snprintf(chosen, sizeof chosen, "%s", t && t[0] == '/' ? t : "/tmp");
    return chosen;
}

const char *cs__supervisor_helper_tmpdir(void)
{
    return helper_tmpdir();
}

#define HELPER_LIMIT_MS  5000
#define HELPER_MAX_BYTES (1024 * 1024)

/*
 * Runs helper with args, input (may be NULL) on its stdin, collects at most HELPER_MAX_BYTES of
 * stdout into *out (NUL-terminated, malloc'd) and of stderr into err (truncated), kills it after
 * HELPER_LIMIT_MS. Returns its wait status, or -1 (could not run it; err says why).
 */
static int run_helper(const char *helper, char *const argv[], const char *input, int rootfd,
                      char **out, char *err, size_t err_cap)
{
    int in[2] = {-1, -1}, o[2] = {-1, -1}, e[2] = {-1, -1};
    *out = NULL;
    err[0] = '\0';
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(o, O_CLOEXEC) != 0 || pipe2(e, O_CLOEXEC) != 0) {
        snprintf(err, err_cap, "pipe: %s", strerror(errno));
        goto fail;
    }
    pid_t pid;
    char tmp_env[4200], pid_env[64];
    snprintf(tmp_env, sizeof tmp_env, "TMPDIR=%s", helper_tmpdir());
    /* Our pid in the plan directory's name: what the start-up sweep goes by. */
    snprintf(pid_env, sizeof pid_env, "CODESPACE_SANDBOX_RUNNER_PID=%ld", (long)getpid());
    char *envp[] = {(char *)"PATH=/usr/bin:/bin", tmp_env, pid_env, NULL};
    int rc = cs_supervisor_spawn_aux_keep(helper, argv, envp, (const int[3]){in[0], o[1], e[1]},
                                          &rootfd, rootfd >= 0 ? 1 : 0, &pid);
    close(in[0]);
    close(o[1]);
    close(e[1]);
    in[0] = o[1] = e[1] = -1;
    if (rc != 0) {
        snprintf(err, err_cap, "cannot run %s: %s", helper, strerror(rc));
        goto fail;
    }
    if (input) {
        size_t n = strlen(input), off = 0;
        while (off < n) {
            ssize_t w = write(in[1], input + off, n - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            off += (size_t)w;
        }
    }
    close(in[1]);
    in[1] = -1;
    char *buf = malloc(HELPER_MAX_BYTES + 1);
    size_t got = 0, egot = 0;
    int64_t end = cs_loop_now_ms() + HELPER_LIMIT_MS;
    bool timed_out = false;
    struct pollfd p[2] = {{.fd = o[0], .events = POLLIN}, {.fd = e[0], .events = POLLIN}};
    while (buf && (p[0].fd >= 0 || p[1].fd >= 0)) {
        int64_t left = end - cs_loop_now_ms();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        if (poll(p, 2, (int)left) <= 0)
            continue;
        if (p[0].fd >= 0 && p[0].revents) {
            char tmp[4096];
            ssize_t n = read(o[0], tmp, sizeof tmp);
            if (n <= 0) {
                p[0].fd = -1;
            } else {
                size_t take = (size_t)n;
                if (got + take > HELPER_MAX_BYTES)
                    take = HELPER_MAX_BYTES - got;
                memcpy(buf + got, tmp, take);
                got += take;
            }
        }
        if (p[1].fd >= 0 && p[1].revents) {
            char tmp[1024];
            ssize_t n = read(e[0], tmp, sizeof tmp);
            if (n <= 0) {
                p[1].fd = -1;
            } else if (egot + 1 < err_cap) {
                size_t take = (size_t)n < err_cap - 1 - egot ? (size_t)n : err_cap - 1 - egot;
                memcpy(err + egot, tmp, take);
                egot += take;
                err[egot] = '\0';
            }
        }
    }
    int status = 0;
    if (timed_out)
        kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    close(o[0]);
    close(e[0]);
    if (!buf) {
        snprintf(err, err_cap, "out of memory");
        return -1;
    }
    if (timed_out) {
        free(buf);
        snprintf(err, err_cap, "%s %s did not finish within 5 s", helper, argv[1]);
        return -1;
    }
    buf[got] = '\0';
    *out = buf;
    return status;
fail:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (o[i] >= 0)
            close(o[i]);
        if (e[i] >= 0)
            close(e[i]);
    }
    return -1;
}

int cs_supervisor_sandbox_probe(const char *helper, char *msg, size_t cap)
{
    char *argv[] = {(char *)"codespace-linux-sandbox", (char *)"probe", NULL};
    char *out = NULL;
    char err[2048];
    int st = run_helper(helper, argv, NULL, -1, &out, err, sizeof err);
    free(out);
    if (st < 0) {
        snprintf(msg, cap, "%s", err);
        return -1;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(msg, cap, "%s probe failed (status %d): %s", helper,
                 WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), err[0] ? err : "no output");
        return -1;
    }
    return 0;
}

/* Whether the kernel reports refused system calls to a supervisor (SECCOMP_RET_USER_NOTIF). */
static bool seccomp_user_notif(void)
{
    FILE *f = fopen("/proc/sys/kernel/seccomp/actions_avail", "re");
    if (!f)
        return false;
    char buf[256];
    bool yes = fgets(buf, sizeof buf, f) && strstr(buf, "user_notif");
    fclose(f);
    return yes;
}

int cs_supervisor_isolation_probe(const char *helper, struct cs_supervisor_isolation *iso,
                                  char *msg, size_t cap)
{
    memset(iso, 0, sizeof *iso);
    if (cap > 0)
        msg[0] = '\0';
    if (!helper) {
        snprintf(msg, cap, "no helper");
        return 0;
    }
    if (cs_supervisor_sandbox_probe(helper, msg, cap) != 0)
        return -1;
    iso->sandbox = true;
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    iso->landlock_abi = abi > 0 ? abi : 0;
    iso->syscall_denials = seccomp_user_notif();
    return 0;
}

/* ---- the plan as a sealed memfd (issue 20: no prepare process, no file) ---- */

int cs__supervisor_sandbox_plan_memfd(const struct csw_sandbox_plan *plan, struct cs_diag *d)
{
    char *text = NULL;
    size_t n = 0;
    struct cs_wire_diag diag;
    if (csw_sandbox_plan_encode_text(plan, &text, &n, &diag) != CS_WIRE_OK) {
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "sandbox plan: %s: %s", diag.pointer,
                    diag.text);
        return -1;
    }
    int fd = memfd_create("codespace-sandbox-plan", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    int high = -1;
    size_t off = 0;
    if (fd < 0)
        goto fail;
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            goto fail;
        off += (size_t)w;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
        goto fail;
    /* Above the child's fixed numbers (3, 4 and 5), so no dup2 there clobbers it. */
    high = fcntl(fd, F_DUPFD_CLOEXEC, 6);
    if (high < 0)
        goto fail;
    close(fd);
    cs_wire_release(text);
    return high;
fail:
    cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "sandbox plan memfd: %s",
                strerror(errno ? errno : EIO));
    if (fd >= 0)
        close(fd);
    cs_wire_release(text);
    return -1;
}

/* ---- no plan outlives its run ---- */

#define PLAN_PREFIX    "codespace-sandbox-"
#define PLAN_STALE_SEC 3600 /* a plan this old is nobody's, whatever its pid */

int cs__supervisor_plan_dir_pid(const char *name, pid_t *pid)
{
    size_t np = strlen(PLAN_PREFIX);
    if (strncmp(name, PLAN_PREFIX, np) != 0)
        return -1;
    const char *d = name + np;
    long n = 0;
    size_t i = 0;
    for (; d[i] >= '0' && d[i] <= '9' && i < 10; i++)
        n = n * 10 + (d[i] - '0');
    if (i == 0 || d[0] == '0' || n > INT_MAX || d[i] != '-')
        return -1;
    /* mkdtemp's six characters, nothing after them */
    const char *x = d + i + 1;
    for (size_t k = 0; k < 6; k++)
        if (!((x[k] >= 'a' && x[k] <= 'z') || (x[k] >= 'A' && x[k] <= 'Z') ||
              (x[k] >= '0' && x[k] <= '9')))
            return -1;
    if (x[6] != '\0')
        return -1;
    *pid = (pid_t)n;
    return 0;
}

/* Removes tmpdir/name/plan and tmpdir/name when name is a real directory of our uid (never
 * following a link). Returns 1 when the directory went, 0 when it was not there, -1 otherwise. */
static int remove_plan_dir(int tfd, const char *name)
{
    int dfd = openat(tfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -1;
    struct stat st;
    int rc = -1;
    if (fstat(dfd, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        goto out;
    if (unlinkat(dfd, "plan", 0) != 0 && errno != ENOENT)
        goto out;
    if (unlinkat(tfd, name, AT_REMOVEDIR) == 0)
        rc = 1;
    else if (errno == ENOENT)
        rc = 0;
out:
    close(dfd);
    return rc;
}

int cs__supervisor_plan_remove(const char *plan_path)
{
    /* Only the shape prepare gives: <helper tmpdir>/codespace-sandbox-*\/plan, one component in
     * between; anything else is not ours to touch. */
    const char *tmp = helper_tmpdir();
    size_t nt = strlen(tmp);
    if (strncmp(plan_path, tmp, nt) != 0 || plan_path[nt] != '/')
        return -1;
    const char *name = plan_path + nt + 1;
    const char *slash = strchr(name, '/');
    if (!slash || strcmp(slash, "/plan") != 0 ||
        strncmp(name, PLAN_PREFIX, strlen(PLAN_PREFIX)) != 0)
        return -1;
    char dir[NAME_MAX + 1];
    size_t nd = (size_t)(slash - name);
    if (nd > NAME_MAX)
        return -1;
    memcpy(dir, name, nd);
    dir[nd] = '\0';
    int tfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (tfd < 0)
        return -1;
    int rc = remove_plan_dir(tfd, dir);
    close(tfd);
    return rc;
}

int cs__supervisor_plan_sweep(void)
{
    int tfd = open(helper_tmpdir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (tfd < 0)
        return -1;
    int dup_fd = dup(tfd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0)
            close(dup_fd);
        close(tfd);
        return -1;
    }
    int removed = 0;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        pid_t pid;
        struct stat st;
        if (cs__supervisor_plan_dir_pid(e->d_name, &pid) != 0 ||
            fstatat(tfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
            st.st_uid != geteuid())
            continue;
        /* Alive (ESRCH is the only "gone"; EPERM is someone else's live process). */
        bool alive = kill(pid, 0) == 0 || errno != ESRCH;
        if (alive && now - st.st_mtime < PLAN_STALE_SEC)
            continue;
        if (remove_plan_dir(tfd, e->d_name) > 0)
            removed++;
    }
    closedir(d);
    close(tfd);
    return removed;
}

static int write_proc(pid_t pid, const char *file, const char *text)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    int e = errno;
    close(fd);
    errno = e;
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

int cs_supervisor_sandbox_identity_check(int rootfd, int64_t uid, int64_t gid, struct cs_diag *d)
{
    struct stat st;
    if (geteuid() != 0)
        return 0;
    if (fstat(rootfd, &st) != 0) {
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "cannot stat the workspace root: %s",
                    strerror(errno));
        return -1;
    }
    if (st.st_uid != 0 && st.st_gid != 0)
        return 0; /* the command runs as the root's owner: no idmapped bind needed */
    /* A throwaway user namespace with the helper's mapping (root's owner -> the sandbox id),
     * and the same idmapped detached bind the helper makes; nothing is attached anywhere. */
    /* up: the child says it has entered its namespace; down: closed by us when done. Two
     * pipes, so neither side can read its own byte back. */
    int up[2], down[2];
    if (pipe2(up, O_CLOEXEC) != 0) {
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "pipe: %s", strerror(errno));
        return -1;
    }
    if (pipe2(down, O_CLOEXEC) != 0) {
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "pipe: %s", strerror(errno));
        close(up[0]);
        close(up[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        cs_diag_set(d, CSW_ERROR_PROCESS_SPAWN_FAILED, "fork: %s", strerror(errno));
        close(up[0]);
        close(up[1]);
        close(down[0]);
        close(down[1]);
        return -1;
    }
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        char c = unshare(CLONE_NEWUSER) == 0 ? 'u' : 'x';
        (void)!write(up[1], &c, 1);
        (void)!read(down[0], &c, 1); /* until the parent is done (it closes its end) */
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    char c = 0, map[64];
    int rc = -1, ns = -1, tree = -1;
    const char *step = "unshare(CLONE_NEWUSER)";
    if (read(up[0], &c, 1) != 1 || c != 'u')
        goto out;
    step = "write the id maps";
    snprintf(map, sizeof map, "%u %lld 1\n", (unsigned)st.st_uid,
             (long long)(st.st_uid ? (int64_t)st.st_uid : uid));
    if (write_proc(pid, "setgroups", "deny") != 0 || write_proc(pid, "uid_map", map) != 0)
        goto out;
    snprintf(map, sizeof map, "%u %lld 1\n", (unsigned)st.st_gid,
             (long long)(st.st_gid ? (int64_t)st.st_gid : gid));
    if (write_proc(pid, "gid_map", map) != 0)
        goto out;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
    step = "open the user namespace";
    if ((ns = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        goto out;
    step = "open_tree";
    tree = (int)syscall(SYS_open_tree, rootfd, "",
                        OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
    if (tree < 0)
        goto out;
    step = "mount_setattr(MOUNT_ATTR_IDMAP)";
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (__u64)(unsigned)ns};
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) != 0)
        goto out;
    rc = 0;
out:
    if (rc != 0)
        cs_diag_set(
            d, CSW_ERROR_PROCESS_SPAWN_FAILED,
            "this server runs as root and the workspace root is owned by root, so commands "
            "must run as the unprivileged id %lld through an idmapped bind of the "
            "workspace, which this kernel or the workspace's filesystem cannot provide (%s: "
            "%s); no command runs as host root instead",
            (long long)uid, step, c == 'x' ? "unshare refused" : strerror(errno));
    if (tree >= 0)
        close(tree);
    if (ns >= 0)
        close(ns);
    close(up[0]);
    close(down[1]);
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return rc;
}
