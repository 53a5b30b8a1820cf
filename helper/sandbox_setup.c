/*
 * sandbox_setup: the privileged setup steps of the sandbox, run by the init process inside the
 * new user, mount, PID, network, IPC, UTS and cgroup namespaces (docs/contract/sandbox.md §3).
 *
 * Trust: the plan was validated by cs_sbx_plan_parse; every path it names is used only as a
 * mount target under the new root or as a Landlock rule. Every step dies on error (only the
 * helper may: cs_sbx_die), and every privilege change is read back.
 *
 * Entry points, in the order sandbox_run.c calls them: cs_sbx_setup_loopback,
 * cs_sbx_setup_proxy_listener, cs_sbx_setup_filesystem, cs_sbx_setup_drop_caps,
 * cs_sbx_setup_landlock, cs_sbx_setup_seccomp (the last step before execve).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include "sandbox.h"
#include "sandbox_filter.h"
#include "sandbox_filter_bpf.h"

/* ---------------------------------------------------------------- network ---- */

void cs_sbx_setup_loopback(void)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        cs_sbx_die("socket for loopback");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        cs_sbx_die("SIOCGIFFLAGS lo");
    ifr.ifr_flags = (short)(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        cs_sbx_die("SIOCSIFFLAGS lo");
    close(s);
}

int cs_sbx_setup_proxy_listener(uint16_t *port)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        cs_sbx_die("proxy socket");
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 256) < 0 ||
        getsockname(s, (struct sockaddr *)&a, &len) < 0)
        cs_sbx_die("proxy listener");
    *port = ntohs(a.sin_port);
    return s;
}

/* ------------------------------------------------------------- filesystem ---- */

static void xmount(const char *src, const char *tgt, const char *type, unsigned long flags,
                   const char *data)
{
    if (mount(src, tgt, type, flags, data) < 0)
        cs_sbx_diex("mount %s: %s", tgt, strerror(errno));
}

static void xmkdir(const char *p, mode_t mode)
{
    if (mkdir(p, mode) < 0 && errno != EEXIST)
        cs_sbx_diex("mkdir %s: %s", p, strerror(errno));
}

static void xcreate(const char *p, mode_t mode)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        cs_sbx_diex("create %s: %s", p, strerror(errno));
    close(fd);
}

static void xsymlink(const char *target, const char *p)
{
    if (symlink(target, p) < 0)
        cs_sbx_diex("symlink %s: %s", p, strerror(errno));
}

/* mkdir -p of an absolute path under the new root. */
static void mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        cs_sbx_diex("path too long: %s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            xmkdir(buf, 0755);
            *p = '/';
        }
    }
    xmkdir(buf, 0755);
}

/* Remounts one mount with extra (MS_RDONLY, MS_NOSUID, MS_NODEV), keeping the flags the kernel
 * locks in a user namespace, and reads the result back. */
static void remount_with(const char *mp, unsigned long extra)
{
    struct statvfs sv;
    if (statvfs(mp, &sv) < 0)
        cs_sbx_diex("statvfs %s: %s", mp, strerror(errno));
    unsigned long fl = MS_REMOUNT | MS_BIND | extra;
    if (sv.f_flag & ST_RDONLY)
        fl |= MS_RDONLY;
    if (sv.f_flag & ST_NOSUID)
        fl |= MS_NOSUID;
    if (sv.f_flag & ST_NODEV)
        fl |= MS_NODEV;
    if (sv.f_flag & ST_NOEXEC)
        fl |= MS_NOEXEC;
    if (sv.f_flag & ST_NOATIME)
        fl |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME)
        fl |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME)
        fl |= MS_RELATIME;
    xmount(NULL, mp, NULL, fl, NULL);
    if (statvfs(mp, &sv) < 0 || ((extra & MS_RDONLY) && !(sv.f_flag & ST_RDONLY)) ||
        ((extra & MS_NOSUID) && !(sv.f_flag & ST_NOSUID)) ||
        ((extra & MS_NODEV) && !(sv.f_flag & ST_NODEV)))
        cs_sbx_diex("remount %s did not hold", mp);
}

static void remount_ro(const char *mp)
{
    remount_with(mp, MS_RDONLY);
}

/* Decodes the octal escapes of /proc/self/mountinfo in place. */
static void unescape(char *s)
{
    char *w = s;
    for (char *r = s; *r;) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '7' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)(((r[1] - '0') << 6) | ((r[2] - '0') << 3) | (r[3] - '0'));
            r += 4;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
}

/* Remounts with extra the mount at dir and every mount below it (a recursive bind brings
 * submounts along, and MS_REMOUNT applies to one mount only). One recursive mount_setattr where
 * the kernel has it (5.12): it changes every mount of the tree or none, and only adds flags, so
 * the ones a user namespace locks stay; the top is read back. Older kernels: each mount listed
 * in mountinfo, remounted and read back (reading mountinfo was most of this step's cost). */
static void remount_tree_with(const char *dir, unsigned long extra)
{
    struct mount_attr attr = {.attr_set = ((extra & MS_RDONLY) ? MOUNT_ATTR_RDONLY : 0) |
                                          ((extra & MS_NOSUID) ? MOUNT_ATTR_NOSUID : 0) |
                                          ((extra & MS_NODEV) ? MOUNT_ATTR_NODEV : 0)};
    if (syscall(SYS_mount_setattr, AT_FDCWD, dir, AT_RECURSIVE | AT_SYMLINK_NOFOLLOW, &attr,
                sizeof attr) == 0) {
        struct statvfs sv;
        if (statvfs(dir, &sv) < 0 || ((extra & MS_RDONLY) && !(sv.f_flag & ST_RDONLY)) ||
            ((extra & MS_NOSUID) && !(sv.f_flag & ST_NOSUID)) ||
            ((extra & MS_NODEV) && !(sv.f_flag & ST_NODEV)))
            cs_sbx_diex("remount %s did not hold", dir);
        return;
    }
    if (errno != ENOSYS)
        cs_sbx_diex("mount_setattr %s: %s", dir, strerror(errno));
    FILE *f = fopen("/oldroot/proc/self/mountinfo", "re");
    if (!f)
        cs_sbx_die("open mountinfo");
    size_t dl = strlen(dir);
    char *line = NULL;
    size_t cap = 0;
    char **mps = NULL;
    size_t n = 0;
    while (getline(&line, &cap, f) > 0) {
        /* fields: id parent major:minor root mountpoint ... */
        char *save = NULL, *tok = strtok_r(line, " ", &save);
        for (int i = 0; tok && i < 4; i++)
            tok = strtok_r(NULL, " ", &save);
        if (!tok)
            continue;
        unescape(tok);
        if (strncmp(tok, dir, dl) == 0 && (tok[dl] == '\0' || tok[dl] == '/')) {
            char **nm = realloc(mps, (n + 1) * sizeof *mps);
            if (!nm || !(nm[n] = strdup(tok)))
                cs_sbx_diex("out of memory");
            mps = nm;
            n++;
        }
    }
    free(line);
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        remount_with(mps[i], extra);
        free(mps[i]);
    }
    free(mps);
}

static void remount_ro_tree(const char *dir)
{
    remount_tree_with(dir, MS_RDONLY);
}

/*
 * Binds the workspace at dst, nosuid and nodev, read-only unless rw (docs/contract/sandbox.md §3).
 * A root caller's tree (sandbox_identity.c) is a detached bind of the held root with its flags
 * and idmapping already set: it is attached as it is. Otherwise the source is the path, opened
 * with RESOLVE_NO_SYMLINKS under the old root, and must be the very directory the runner holds
 * (same device and inode as ids->ws_fd): a root whose ancestor was swapped for a symlink is
 * refused, never followed.
 */
static void bind_workspace(const char *path, const char *dst, bool rw, const struct cs_sbx_ids *ids)
{
    if (ids->tree_fd >= 0) {
        if (syscall(SYS_move_mount, ids->tree_fd, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
            cs_sbx_diex("attach the workspace at %s: %s", path, strerror(errno));
        close(ids->tree_fd);
        struct statvfs sv;
        if (statvfs(dst, &sv) < 0 || !(sv.f_flag & ST_NOSUID) || !(sv.f_flag & ST_NODEV) ||
            (!rw && !(sv.f_flag & ST_RDONLY)))
            cs_sbx_diex("the workspace bind's flags did not hold");
        return;
    }
    char src[PATH_MAX], fdpath[64];
    snprintf(src, sizeof src, "/oldroot%s", path);
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                           .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, src, &how, sizeof how);
    if (fd < 0)
        cs_sbx_diex("open workspace %s: %s", path, strerror(errno));
    struct stat a, b;
    if (fstat(fd, &a) < 0 || fstat(ids->ws_fd, &b) < 0 || a.st_dev != b.st_dev ||
        a.st_ino != b.st_ino)
        cs_sbx_diex("workspace %s is no longer the directory the runner holds", path);
    snprintf(fdpath, sizeof fdpath, "/oldroot/proc/self/fd/%d", fd);
    xmount(fdpath, dst, NULL, MS_BIND | MS_REC, NULL);
    close(fd);
    remount_tree_with(dst, MS_NOSUID | MS_NODEV | (rw ? 0 : MS_RDONLY));
}

/* The masks' sources once the base is the root: an empty file and directory on a tmpfs of their
 * own whose superblock is read-only (setup_masks), so that every bind of them is read-only
 * whatever its mount's flags. */
#define MASK_FILE "/masks/file"
#define MASK_DIR  "/masks/dir"

/* Makes the masks' sources in the base (the current directory) and reads back that their
 * superblock, not only their mount, is read-only: a bind of it made read-write at the mount
 * level must still report ST_RDONLY (statvfs reports the mount's flags and the superblock's). */
static void setup_masks(void)
{
    xmkdir("masks", 0755);
    xmount("tmpfs", "masks", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
    xcreate("masks/file", 0444);
    xmkdir("masks/dir", 0555);
    xmount(NULL, "masks", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0755");
    xmkdir("masks-probe", 0755);
    xmount("masks", "masks-probe", NULL, MS_BIND, NULL);
    xmount(NULL, "masks-probe", NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL);
    struct statvfs sv;
    if (statvfs("masks-probe", &sv) < 0 || !(sv.f_flag & ST_RDONLY))
        cs_sbx_diex("the masks' file system did not become read-only");
    if (umount2("masks-probe", 0) < 0)
        cs_sbx_die("umount masks-probe");
}

/* Masks /newroot/etc/<rel> with an empty file or directory, if it exists. */
static void mask(const char *rel)
{
    char dst[PATH_MAX];
    struct stat st;
    snprintf(dst, sizeof dst, "/newroot/etc/%s", rel);
    if (lstat(dst, &st) < 0)
        return;
    if (S_ISLNK(st.st_mode) && stat(dst, &st) < 0)
        return;
    xmount(S_ISDIR(st.st_mode) ? MASK_DIR : MASK_FILE, dst, NULL, MS_BIND, NULL);
}

static void mask_secrets(void)
{
    static const char *const files[] = {"shadow",  "shadow-",   "gshadow",    "gshadow-",
                                        "sudoers", "sudoers.d", "ssl/private"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        mask(files[i]);
    DIR *d = opendir("/newroot/etc/ssh");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "ssh_host_", 9) == 0) {
            char rel[300];
            snprintf(rel, sizeof rel, "ssh/%s", e->d_name);
            mask(rel);
        }
    }
    closedir(d);
}

/* fd 0 was opened in the caller's mount namespace, so it cannot be a bind source here; its path
 * in our copy of that namespace can, once it is checked to be the same inode. Best effort: a
 * terminal whose path does not resolve here just stays nameless. */
/*
 * The sandbox half of the deny rules (docs/contract/tools.md §5): every path in the plan's
 * deny_mask (resolved by the runner with the rules when the command starts) is covered by the empty
 * read-only file or directory, inside the workspace attached at dst. Each path is reached from the
 * attached workspace without following any link: one openat2 (O_PATH | O_NOFOLLOW,
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), or for a path longer than PATH_MAX a walk opening each
 * component O_PATH | O_NOFOLLOW; never the string resolved again. The mask is bound onto that very
 * descriptor through /proc/self/fd, so a symlink cannot redirect it. The mask sources live on a
 * tmpfs whose superblock is read-only (setup_masks, read back there), so each mask is read-only
 * from the start, whatever its mount's flags; every mask is read back (the path now opens to the
 * mask's device and inode, which only that read-only file system has). A path
 * that has gone since the runner resolved it needs no mask; anything else unexpected stops the
 * setup (fail closed).
 *
 * A denied symlink (docs/contract/tools.md §5) is in deny_mask itself, and its target under the
 * target's own path besides: the empty file is bound onto the link, which makes the link's name a
 * mount point that no command can unlink, rename or replace (EBUSY), and lets nothing through it.
 * The bind goes through /proc/self/fd of the walk's O_PATH, O_NOFOLLOW descriptor, which names the
 * link itself, never what it leads to; a non-directory source (the file) is what a link can take.
 */
static int walk_nofollow(int dirfd, const char *rel)
{
    /* Any length: one component at a time, so a path deeper than PATH_MAX is masked too. */
    char *buf = strdup(rel);
    if (!buf)
        cs_sbx_diex("deny mask: out of memory");
    int fd = dup(dirfd);
    if (fd < 0)
        cs_sbx_die("dup");
    char *save = NULL;
    for (char *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        int nfd = openat(fd, c, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(fd);
        if (nfd < 0) {
            free(buf);
            if (e == ENOENT)
                return -1;
            cs_sbx_diex("deny mask %s: %s", rel, strerror(e));
        }
        fd = nfd;
    }
    free(buf);
    return fd;
}

/*
 * The parent directory of rel (a no-follow walk from dirfd, as walk_nofollow) for the masks
 * loop: *last gets rel's last component. Consecutive masks in one directory share one walk (the
 * previous parent, kept in *prev and *prev_fd, is reused when its path is the same; a mask
 * never changes which directory a sibling's parent path reaches, since a mask below another is
 * reached through that one's walk again once the prefix differs). Returns the parent fd (owned by
 * *prev_fd: do not close it), or -1 when a component is gone.
 */
static int mask_parent(int dirfd, const char *rel, const char **last, char **prev, int *prev_fd)
{
    const char *slash = strrchr(rel, '/');
    *last = slash ? slash + 1 : rel;
    size_t n = slash ? (size_t)(slash - rel) : 0;
    if (*prev_fd >= 0 && *prev && strlen(*prev) == n && memcmp(*prev, rel, n) == 0)
        return *prev_fd;
    if (*prev_fd >= 0)
        close(*prev_fd);
    free(*prev);
    *prev_fd = -1;
    *prev = strndup(rel, n);
    if (!*prev)
        cs_sbx_diex("deny mask: out of memory");
    int fd = n ? walk_nofollow(dirfd, *prev) : dup(dirfd);
    if (fd < 0 && n == 0)
        cs_sbx_die("dup");
    *prev_fd = fd;
    return fd;
}

/* rel beneath the attached workspace wfd in one openat2 (O_PATH, O_NOFOLLOW: a leaf link is
 * returned itself; RESOLVE_NO_SYMLINKS: no link on the way; RESOLVE_BENEATH: never out of it),
 * the same descriptor the component walk reaches, in one system call instead of two per
 * component. Returns the fd, or -1 with errno (ENAMETOOLONG: longer than one call takes; the
 * caller then walks). */
static int mask_beneath(int wfd, const char *rel)
{
    struct open_how how = {.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                           .resolve =
                               RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int fd = -1;
    for (int i = 0; i < 8; i++) { /* EAGAIN: a rename raced the lookup */
        fd = (int)syscall(SYS_openat2, wfd, rel, &how, sizeof how);
        if (fd >= 0 || errno != EAGAIN)
            break;
    }
    return fd;
}

/* The plan's masks as C strings: deny_mask's as they are, deny_mask_hex's decoded (checked by
 * cs_sbx_plan_parse). *n their number; the decoded ones are malloc'd in *owned. */
static const char **mask_paths(const struct csw_sandbox_plan *plan, size_t *n, char ***owned)
{
    size_t nd = plan->has_deny_mask ? plan->deny_mask.n : 0;
    size_t nh = plan->has_deny_mask_hex ? plan->deny_mask_hex.n : 0;
    const char **v = calloc(nd + nh + 1, sizeof *v);
    *owned = calloc(nh + 1, sizeof **owned);
    if (!v || !*owned)
        cs_sbx_diex("deny mask: out of memory");
    for (size_t i = 0; i < nd; i++)
        v[i] = plan->deny_mask.v[i].s;
    for (size_t i = 0; i < nh; i++) {
        size_t len;
        (*owned)[i] = cs_sbx_hex_path(&plan->deny_mask_hex.v[i], &len);
        if (!(*owned)[i])
            cs_sbx_diex("deny_mask_hex[%zu] is not hexadecimal", i);
        v[nd + i] = (*owned)[i];
    }
    *n = nd + nh;
    return v;
}

static void mask_workspace(const char *dst, const struct csw_sandbox_plan *plan)
{
    size_t n_masks;
    char **owned;
    const char **rels = mask_paths(plan, &n_masks, &owned);
    if (n_masks == 0)
        goto out;
    struct stat mf, md;
    if (stat(MASK_FILE, &mf) < 0 || stat(MASK_DIR, &md) < 0)
        cs_sbx_die("stat mask sources");
    int wfd = open(dst, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (wfd < 0)
        cs_sbx_diex("open the attached workspace: %s", strerror(errno));
    char *prev = NULL;
    int prev_fd = -1;
    for (size_t i = 0; i < n_masks; i++) {
        const char *rel = rels[i], *last = NULL;
        int pfd = -1; /* the parent, when the path is walked (too long for one openat2) */
        int fd = mask_beneath(wfd, rel);
        if (fd < 0 && errno == ENAMETOOLONG) {
            pfd = mask_parent(wfd, rel, &last, &prev, &prev_fd);
            fd = pfd < 0 ? -1 : openat(pfd, last, O_PATH | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0 && pfd < 0)
                errno = ENOENT;
        }
        /* A link or a file on the way (ELOOP, ENOTDIR), anything but a path that has gone since
         * the runner resolved it (nothing to hide then), stops the setup. */
        if (fd < 0 && errno != ENOENT)
            cs_sbx_diex("deny mask %s: %s", rel, strerror(errno));
        if (fd < 0)
            continue;
        struct stat st;
        if (fstat(fd, &st) < 0)
            cs_sbx_die("fstat deny mask");
        if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) {
            close(fd); /* a special file now: nothing to read through it */
            continue;
        }
        bool dir = S_ISDIR(st.st_mode);
        char target[64];
        snprintf(target, sizeof target, "/oldroot/proc/self/fd/%d", fd);
        xmount(dir ? MASK_DIR : MASK_FILE, target, NULL, MS_BIND, NULL);
        close(fd);
        /* read back: the name now reaches the mask, and the mask is read-only. Its (device,
         * inode) says both: the device is the masks' tmpfs, whose superblock setup_masks read
         * back read-only, so no mount of it can be written (one fstat, no fstatvfs). */
        fd = pfd >= 0 ? openat(pfd, last, O_PATH | O_NOFOLLOW | O_CLOEXEC) : mask_beneath(wfd, rel);
        const struct stat *want = dir ? &md : &mf;
        if (fd < 0 || fstat(fd, &st) < 0 || st.st_dev != want->st_dev || st.st_ino != want->st_ino)
            cs_sbx_diex("deny mask %s did not hold", rel);
        close(fd);
    }
    if (prev_fd >= 0)
        close(prev_fd);
    free(prev);
    close(wfd);
out:
    for (size_t i = 0; owned[i]; i++)
        free(owned[i]);
    free(owned);
    free(rels);
}

static void bind_terminal(void)
{
    struct stat fdst, pst;
    char name[PATH_MAX], src[PATH_MAX + 16];
    if (!isatty(0) || fstat(0, &fdst) < 0)
        return;
    ssize_t n = readlink("/oldroot/proc/self/fd/0", name, sizeof name - 1);
    if (n <= 0 || name[0] != '/')
        return;
    name[n] = '\0';
    snprintf(src, sizeof src, "/oldroot%s", name);
    if (stat(src, &pst) < 0 || !S_ISCHR(pst.st_mode) || pst.st_rdev != fdst.st_rdev ||
        pst.st_ino != fdst.st_ino || pst.st_dev != fdst.st_dev)
        return;
    xcreate("/newroot/dev/console", 0600);
    xmount(src, "/newroot/dev/console", NULL, MS_BIND, NULL);
}

static void setup_dev(void)
{
    xmkdir("/newroot/dev", 0755);
    xmount("tmpfs", "/newroot/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755");
    static const char *const devs[] = {"null", "zero", "full", "random", "urandom", "tty"};
    for (size_t i = 0; i < sizeof devs / sizeof *devs; i++) {
        char src[64], dst[64];
        snprintf(src, sizeof src, "/oldroot/dev/%s", devs[i]);
        snprintf(dst, sizeof dst, "/newroot/dev/%s", devs[i]);
        xcreate(dst, 0666);
        xmount(src, dst, NULL, MS_BIND, NULL);
    }
    xmkdir("/newroot/dev/pts", 0755);
    xmount("devpts", "/newroot/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
           "newinstance,ptmxmode=0666,mode=620");
    xsymlink("pts/ptmx", "/newroot/dev/ptmx");
    /* The caller's terminal is a host devpts file, already our fd 0, but the host devpts is not
     * mounted here, so ttyname() (and `tty`) could not name it. Bound at /dev/console, as
     * container runtimes do, it has a name; nothing new is reachable (the fd is open anyway). */
    bind_terminal();
    xmkdir("/newroot/dev/shm", 01777);
    xmount("tmpfs", "/newroot/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    xsymlink("/proc/self/fd", "/newroot/dev/fd");
    xsymlink("/proc/self/fd/0", "/newroot/dev/stdin");
    xsymlink("/proc/self/fd/1", "/newroot/dev/stdout");
    xsymlink("/proc/self/fd/2", "/newroot/dev/stderr");
}

static void setup_proc(void)
{
    xmkdir("/newroot/proc", 0555);
    xmount("proc", "/newroot/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    /* The init is root of its own user namespace: kernel tunables must stay read-only. */
    static const char *const ro[] = {"sys", "sysrq-trigger", "irq", "bus"};
    for (size_t i = 0; i < sizeof ro / sizeof *ro; i++) {
        char p[64];
        snprintf(p, sizeof p, "/newroot/proc/%s", ro[i]);
        if (access(p, F_OK) < 0)
            continue;
        xmount(p, p, NULL, MS_BIND | MS_REC, NULL);
        remount_ro(p);
    }
}

void cs_sbx_setup_filesystem(const struct csw_sandbox_plan *plan, const struct cs_sbx_ids *ids)
{
    /* Nothing we mount may propagate back to the host. */
    xmount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
    /* bubblewrap's layout: a tmpfs base holding newroot/ and the pivoted old root, so every
     * host path stays reachable as /oldroot/... while the new tree is built. */
    xmount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
    if (chdir("/tmp") < 0)
        cs_sbx_die("chdir base");
    xmkdir("newroot", 0755);
    xmkdir("oldroot", 0755);
    setup_masks();
    xmount("tmpfs", "newroot", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
    if (syscall(SYS_pivot_root, ".", "oldroot") < 0)
        cs_sbx_die("pivot_root (base)");
    if (chdir("/") < 0)
        cs_sbx_die("chdir /");

    static const char *const sys[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"};
    for (size_t i = 0; i < sizeof sys / sizeof *sys; i++) {
        char src[64], dst[64];
        struct stat st;
        snprintf(src, sizeof src, "/oldroot%s", sys[i]);
        snprintf(dst, sizeof dst, "/newroot%s", sys[i]);
        if (lstat(src, &st) < 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t l = readlink(src, target, sizeof target - 1);
            if (l < 0)
                cs_sbx_die("readlink");
            target[l] = '\0';
            xsymlink(target, dst);
        } else if (S_ISDIR(st.st_mode)) {
            xmkdir(dst, 0755);
            xmount(src, dst, NULL, MS_BIND | MS_REC, NULL);
            if (strcmp(sys[i], "/etc") == 0)
                mask_secrets();
            remount_ro_tree(dst);
        }
    }

    xmkdir("/newroot/tmp", 01777);
    xmount("tmpfs", "/newroot/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    setup_dev();

    /* The workspace at its own absolute path: mkdir -p on the new root, then the bind. */
    char dst[PATH_MAX];
    if (snprintf(dst, sizeof dst, "/newroot%s", plan->workspace_root.s) >= (int)sizeof dst)
        cs_sbx_diex("workspace path too long");
    mkdir_p(dst);
    bind_workspace(plan->workspace_root.s, dst, plan->writable_workspace, ids);
    mask_workspace(dst, plan);

    setup_proc();

    /* The root tmpfs itself becomes read-only: nothing new appears at the top level. */
    xmount(NULL, "/newroot", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0755");

    /* Enter the new root and drop the old one (and the base tmpfs) entirely. */
    if (chdir("/newroot") < 0)
        cs_sbx_die("chdir newroot");
    if (syscall(SYS_pivot_root, ".", ".") < 0)
        cs_sbx_die("pivot_root");
    if (umount2(".", MNT_DETACH) < 0)
        cs_sbx_die("umount old root");
    if (chdir("/") < 0)
        cs_sbx_die("chdir /");
    /* read back: the host's root must be gone */
    if (access("/oldroot", F_OK) == 0 || access("/newroot", F_OK) == 0)
        cs_sbx_diex("old root still visible");
}

/* ----------------------------------------------------------- capabilities ---- */

#ifndef SECBIT_NOROOT
#define SECBIT_NOROOT                      (1 << 0)
#define SECBIT_NOROOT_LOCKED               (1 << 1)
#define SECBIT_NO_SETUID_FIXUP             (1 << 2)
#define SECBIT_NO_SETUID_FIXUP_LOCKED      (1 << 3)
#define SECBIT_KEEP_CAPS_LOCKED            (1 << 5)
#define SECBIT_NO_CAP_AMBIENT_RAISE        (1 << 6)
#define SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED (1 << 7)
#endif

void cs_sbx_setup_drop_caps(void)
{
    /* uid 0 inside (a root caller) must never regain capabilities through execve. */
    unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                         SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                         SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) < 0)
        cs_sbx_die("PR_SET_SECUREBITS");
    if (prctl(PR_GET_SECUREBITS, 0, 0, 0, 0) != (int)bits)
        cs_sbx_diex("securebits read back differ");

    int last = -1;
    for (int c = 0; c < 64; c++) {
        if (prctl(PR_CAPBSET_READ, (unsigned long)c, 0, 0, 0) < 0)
            break; /* EINVAL past the last capability */
        last = c;
        if (prctl(PR_CAPBSET_DROP, (unsigned long)c, 0, 0, 0) < 0)
            cs_sbx_die("PR_CAPBSET_DROP");
    }
    if (last < 0)
        cs_sbx_diex("no capability reported by PR_CAPBSET_READ");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
        cs_sbx_die("PR_CAP_AMBIENT_CLEAR_ALL");

    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capset, &h, d) < 0)
        cs_sbx_die("capset");

    /* Read back all five sets. */
    memset(d, 0xff, sizeof d);
    h.version = _LINUX_CAPABILITY_VERSION_3;
    h.pid = 0;
    if (syscall(SYS_capget, &h, d) < 0)
        cs_sbx_die("capget");
    for (int i = 0; i < 2; i++)
        if (d[i].effective || d[i].permitted || d[i].inheritable)
            cs_sbx_diex("capabilities still present after capset");
    for (int c = 0; c <= last; c++) {
        if (prctl(PR_CAPBSET_READ, (unsigned long)c, 0, 0, 0) != 0)
            cs_sbx_diex("capability %d still in the bounding set", c);
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, (unsigned long)c, 0, 0) != 0)
            cs_sbx_diex("capability %d still ambient", c);
    }
}

/* ---------------------------------------------------------------- Landlock ---- */

#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define LANDLOCK_SCOPE_SIGNAL               (1ULL << 1)
#endif

/* The kernel's struct landlock_ruleset_attr as of ABI 6; the size passed says which prefix the
 * running kernel is given (older headers lack the later fields). */
struct ll_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

int cs_sbx_landlock_abi(void)
{
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    return abi < 0 ? 0 : (int)abi;
}

static void ll_rule(int rs, int fd, uint64_t access, const char *what)
{
    struct landlock_path_beneath_attr pb = {.allowed_access = access, .parent_fd = fd};
    if (syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) < 0)
        cs_sbx_diex("landlock rule %s: %s", what, strerror(errno));
}

static void ll_path(int rs, const char *path, uint64_t access)
{
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return;
        cs_sbx_diex("open %s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) < 0)
        cs_sbx_die("fstat");
    if (!S_ISDIR(st.st_mode)) /* files take only file rights */
        access &= LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_TRUNCATE;
    ll_rule(rs, fd, access, path);
    close(fd);
}

int cs_sbx_setup_landlock(const struct csw_sandbox_plan *plan)
{
    int abi = cs_sbx_landlock_abi();
    if (abi <= 0)
        return 0;
    /* Only writes are handled: what can be read is already decided by the mount tree. */
    uint64_t w = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                 LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                 LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                 LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                 LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
    if (abi >= 2)
        w |= LANDLOCK_ACCESS_FS_REFER;
    if (abi >= 3)
        w |= LANDLOCK_ACCESS_FS_TRUNCATE;
    struct ll_ruleset_attr attr = {.handled_access_fs = w};
    size_t size = sizeof attr.handled_access_fs;
    if (abi >= 4)
        size = offsetof(struct ll_ruleset_attr, scoped);
    if (abi >= 6) {
        attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
        size = sizeof attr;
    }
    int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
    if (rs < 0)
        cs_sbx_die("landlock_create_ruleset");
    if (plan->writable_workspace)
        ll_path(rs, plan->workspace_root.s, w);
    ll_path(rs, "/tmp", w);
    ll_path(rs, "/dev/shm", w);
    static const char *const term[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/tty",
                                       "/dev/pts"};
    uint64_t fw = LANDLOCK_ACCESS_FS_WRITE_FILE | (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0);
    for (size_t i = 0; i < sizeof term / sizeof *term; i++)
        ll_path(rs, term[i], fw);
    /* The caller's terminal (a host devpts file) stays writable through /dev/stdout. */
    for (int fd = 0; fd <= 2; fd++)
        if (isatty(fd))
            ll_rule(rs, fd, fw, "terminal");
    if (syscall(SYS_landlock_restrict_self, rs, 0) < 0)
        cs_sbx_die("landlock_restrict_self");
    close(rs);
    return abi;
}

/* ---------------------------------------------------------------- seccomp ---- */

/* Loads the filter for the variant: the program compiled at build time (sandbox_filter_bpf.h)
 * when the build had one, else the rules built and compiled here. Returns the listener (notify),
 * else -1; dies if the filter cannot be loaded. */
static int load_filter(enum cs_sbx_net net, bool notify)
{
    unsigned short len = cs_sbx_bpf[net][notify].len;
    if (len > 0) {
        /* What seccomp_load does with this program: no_new_privs is set already (the init,
         * and SCMP_FLTATR_CTL_NNP for the built path); a notifying filter asks for its
         * listener. */
        struct sock_fprog prog = {.len = len,
                                  .filter = (struct sock_filter *)cs_sbx_bpf[net][notify].prog};
        long fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                          notify ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0, &prog);
        if (fd < 0)
            cs_sbx_die("seccomp (precompiled filter)");
        return notify ? (int)fd : -1;
    }
    char err[256];
    scmp_filter_ctx ctx = cs_sbx_filter_new(net, notify, err, sizeof err);
    if (!ctx)
        cs_sbx_diex("%s", err);
    int rc = seccomp_load(ctx);
    int listener = notify && rc == 0 ? seccomp_notify_fd(ctx) : -1;
    seccomp_release(ctx);
    if (rc < 0)
        cs_sbx_diex("seccomp_load: %s", strerror(-rc));
    return listener;
}

void cs_sbx_setup_seccomp(enum cs_sbx_net net, int notify_sock)
{
    /* The refusals the helper reports (docs/contract/tools.md §6) notify it when the host can. */
    bool notify = notify_sock >= 0 && cs_sbx_notify_supported(cs_sbx_bpf[net][1].len > 0);
    int listener = load_filter(net, notify);
    /* The listener goes to the outer helper and is closed here before execve: a command that
     * held it could answer its own notifications (and let a refused call succeed). */
    if (notify) {
        if (listener < 0)
            cs_sbx_diex("seccomp listener missing");
        cs_sbx_send_fd(notify_sock, listener, "the seccomp listener");
        close(listener);
    }
    if (notify_sock >= 0)
        close(notify_sock);
    /* read back */
    if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 2)
        cs_sbx_diex("seccomp filter not in force");
}
