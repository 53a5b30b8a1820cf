/*
 * sandbox_identity: who a sandboxed command is on the host, and how the workspace reaches the
 * sandbox (docs/contract/sandbox.md section 3). Run by the outer helper in the caller's namespaces.
 *
 *   caller not root   the command keeps the caller's uid and gid; the workspace is bound from
 *                     its path inside the sandbox setup and checked to be the inherited root.
 *   caller root       the command never holds host uid 0 nor any id owning system files. It
 *                     runs as the workspace root's owner when that is not 0, else as the plan's
 *                     sandbox_uid / sandbox_gid (default 65533), with the same ids inside and
 *                     out. The workspace is a detached bind of the held root (open_tree), made
 *                     nosuid and nodev, and when an id had to change, idmapped through a user
 *                     namespace of its own that maps the root's owner to the command's ids: the
 *                     command owns the workspace, and what it creates is owned on the host by
 *                     the root's owner. No fallback: if the kernel or the filesystem cannot do
 *                     this, the helper dies and nothing runs.
 *
 * Trust: the plan is validated; workspace_fd was passed by the runner, and is checked to be a
 * directory. Entry points: cs_sbx_identity, cs_sbx_workspace_tree_attr.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/wait.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox.h"

static int open_workspace(const struct csw_sandbox_plan *plan)
{
    if (plan->has_workspace_fd)
        return (int)plan->workspace_fd;
    /* A tool calling the helper without a held root: no symlink anywhere on the way. */
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                           .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, plan->workspace_root.s, &how, sizeof how);
    if (fd < 0)
        cs_sbx_diex("open workspace %s: %s", plan->workspace_root.s, strerror(errno));
    return fd;
}

void cs_sbx_identity(const struct csw_sandbox_plan *plan, struct cs_sbx_ids *ids)
{
    memset(ids, 0, sizeof *ids);
    ids->tree_fd = -1;
    ids->ws_fd = open_workspace(plan);
    struct stat st;
    if (fstat(ids->ws_fd, &st) < 0 || !S_ISDIR(st.st_mode))
        cs_sbx_diex("the workspace descriptor is not a directory");
    if (geteuid() != 0) {
        ids->inner_uid = ids->host_uid = geteuid();
        ids->inner_gid = ids->host_gid = getegid();
        return;
    }
    unsigned uid = plan->has_sandbox_uid ? (unsigned)plan->sandbox_uid : CS_SBX_DEFAULT_ID;
    unsigned gid = plan->has_sandbox_gid ? (unsigned)plan->sandbox_gid : uid;
    ids->owner_uid = (unsigned)st.st_uid;
    ids->owner_gid = (unsigned)st.st_gid;
    ids->host_uid = ids->inner_uid = st.st_uid != 0 ? (unsigned)st.st_uid : uid;
    ids->host_gid = ids->inner_gid = st.st_gid != 0 ? (unsigned)st.st_gid : gid;
    if (ids->host_uid == 0 || ids->host_gid == 0)
        cs_sbx_diex("refusing to run a command as host uid or gid 0");
    ids->idmap = ids->host_uid != ids->owner_uid || ids->host_gid != ids->owner_gid;
    /* Host root's supplementary groups must not follow the command (setgroups is denied inside
     * once the maps are written, so they could never be dropped there). */
    if (setgroups(0, NULL) < 0)
        cs_sbx_die("setgroups");
    ids->tree_fd = (int)syscall(SYS_open_tree, ids->ws_fd, "",
                                OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
    if (ids->tree_fd < 0)
        cs_sbx_diex("cannot bind the workspace for an unprivileged command (open_tree): %s",
                    strerror(errno));
}

static void write_map(pid_t pid, const char *file, const char *text)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        cs_sbx_diex("write %s: %s", path, strerror(errno));
    close(fd);
}

/* The idmap namespace's holder: born in it (CLONE_NEWUSER: the namespace exists once clone
 * returns, so the helper writes its maps without waiting for the child to run), it waits for
 * down to close. It shares the helper's memory (CLONE_VM, on a stack of its own: nothing to copy,
 * no copy-on-write faults on either side), so it makes raw system calls only. */
struct holder {
    int down;       /* its end */
    int down_write; /* the helper's end, in its copy of the descriptor table */
};

static int holder_main(void *arg)
{
    const struct holder *h = arg;
    char c;
    (void)syscall(SYS_close, (long)h->down_write);
    (void)syscall(SYS_read, (long)h->down, &c, 1L); /* until the helper closes its end */
    syscall(SYS_exit, 0L);
    return 0;
}

/* A user namespace that maps the workspace root's owner (on disk) to the command's host ids:
 * the idmapping of the workspace bind. A child is born in it and waits; the namespace outlives
 * it through the returned descriptor. The child is not waited for here: the outer helper reaps
 * every child it has (outer_on_signal); it cannot exit, nor its pid be reused, before down is
 * closed below. */
static int idmap_userns(const struct cs_sbx_ids *ids)
{
    int down[2];
    if (pipe2(down, O_CLOEXEC) < 0)
        cs_sbx_die("pipe");
    static char stack[16384] __attribute__((aligned(16)));
    static struct holder h;
    h = (struct holder){.down = down[0], .down_write = down[1]};
    pid_t pid = clone(holder_main, stack + sizeof stack, CLONE_VM | CLONE_NEWUSER | SIGCHLD, &h);
    if (pid < 0)
        cs_sbx_die("clone (idmap namespace)");
    close(down[0]);
    char map[64], path[64];
    write_map(pid, "setgroups", "deny");
    snprintf(map, sizeof map, "%u %u 1\n", ids->owner_uid, ids->host_uid);
    write_map(pid, "uid_map", map);
    snprintf(map, sizeof map, "%u %u 1\n", ids->owner_gid, ids->host_gid);
    write_map(pid, "gid_map", map);
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
    int ns = open(path, O_RDONLY | O_CLOEXEC);
    if (ns < 0)
        cs_sbx_die("open the idmap user namespace");
    close(down[1]);
    return ns;
}

void cs_sbx_workspace_tree_attr(const struct cs_sbx_ids *ids, bool writable)
{
    if (ids->tree_fd < 0)
        return;
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
    if (!writable)
        attr.attr_set |= MOUNT_ATTR_RDONLY;
    int ns = -1;
    if (ids->idmap) {
        ns = idmap_userns(ids);
        attr.attr_set |= MOUNT_ATTR_IDMAP;
        attr.userns_fd = (__u64)(unsigned)ns;
    }
    if (syscall(SYS_mount_setattr, ids->tree_fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr,
                sizeof attr) < 0)
        cs_sbx_diex("cannot give the command an unprivileged identity: idmapped bind of the "
                    "workspace refused by this kernel or filesystem (mount_setattr: %s); no "
                    "command runs as host root instead",
                    strerror(errno));
    if (ns >= 0)
        close(ns);
}
