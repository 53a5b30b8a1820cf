/*
 * fs_deny_link: denied symlinks (docs/contract/tools.md §5). A rule that matches a
 * symlink denies what the link leads to inside the workspace: the scan (fs_deny.c, scan_link)
 * masks the link itself and the target under its real path, remembers the target's identity and,
 * for a directory, everything below it. This file holds the two pieces that need no scan state:
 *
 *  - cs__fs_deny_link_resolve: where a symlink of the workspace leads, following a chain of links
 *    within the workspace (at most LINK_FOLLOW_MAX of them, as the kernel's bound), without ever
 *    opening anything but O_PATH directories through O_NOFOLLOW, one component at a time from the
 *    root fd, so a link swapped in meanwhile is read, never followed by the kernel. An absolute
 *    target, or a ".." above the root, is inside only when it names the root's own path (the path
 *    the sandbox attaches the workspace at: the root fd's path in /proc/self/fd) lexically.
 *  - cs__fs_deny_under: a path below a directory whose identity is remembered as denied (a denied
 *    link's target directory, a denied directory renamed by a command) is denied, though it may
 *    not exist yet: what the file tools ask before they add, move to or read a path.
 *
 * Trust: the link texts and the tree are the workspace's (a command may change them at any
 * moment); the root fd is the runner's. Nothing here allocates, logs or follows a link.
 */

#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define LINK_FOLLOW_MAX 40 /* links in one chain, as the kernel's MAXSYMLINKS */
#define REST_MAX        (2 * (CS_FS_PATH_MAX + 1)) /* what is left of a chain to walk */

struct lwalk {
    int rootfd;
    int cur; /* O_PATH fd of the directory cur_rel (beneath the root) */
    char cur_rel[CS_FS_PATH_MAX + 1];
    size_t cur_n;
    size_t up; /* > 0: that many levels above the root (an absolute or ".." path) */
    char root[CS_FS_PATH_MAX + 1]; /* the root's absolute path, once needed */
    int root_state;                /* 0: not read yet, -1: known, else the errno it failed with */
    size_t root_depth;             /* components of root */
};

/* Opens the directory rel (n bytes, "" the root) beneath rootfd, one O_NOFOLLOW step at a time. */
static int open_dir_rel(int rootfd, const char *rel, size_t n)
{
    int fd = openat(rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    for (size_t o = 0; fd >= 0 && o < n;) {
        const char *slash = memchr(rel + o, '/', n - o);
        size_t e = slash ? (size_t)(slash - rel) : n;
        char name[256];
        if (e - o >= sizeof name) {
            close(fd);
            return -1;
        }
        memcpy(name, rel + o, e - o);
        name[e - o] = '\0';
        int nfd = openat(fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(fd);
        fd = nfd;
        o = e + 1;
    }
    return fd;
}

/* The root's absolute path and depth, read once from /proc/self/fd: 0, or an errno value. */
static int root_known(struct lwalk *w)
{
    if (w->root_state != 0)
        return w->root_state < 0 ? 0 : w->root_state;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", w->rootfd);
    ssize_t n = readlink(link, w->root, sizeof w->root - 1);
    if (n <= 0 || w->root[0] != '/') {
        w->root_state = n < 0 && errno > 0 ? errno : EINVAL;
        return w->root_state;
    }
    w->root[n] = '\0';
    if (strstr(w->root, " (deleted)") != NULL)
        return w->root_state = ENOENT;
    w->root_depth = 0;
    for (ssize_t i = 0; i < n; i++)
        if (w->root[i] == '/' && i + 1 < n && w->root[i + 1] != '/')
            w->root_depth++;
    w->root_state = -1;
    return 0;
}

/* The i-th component (0-based) of the root's path, and its length. */
static const char *root_comp(const struct lwalk *w, size_t i, size_t *len)
{
    const char *p = w->root;
    for (size_t k = 0;; k++) {
        while (*p == '/')
            p++;
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (k == i) {
            *len = l;
            return p;
        }
        p += l;
    }
}

/* An errno of a step that failed: 0 when it only means the chain leads nowhere (a name missing,
 * a file used as a directory, a link swapped in meanwhile), else the error itself. */
static int odd(int e)
{
    return e == ENOENT || e == ENOTDIR || e == ELOOP ? 0 : e;
}

/* Back at the root after an absolute path or a climb above it. */
static bool at_root(struct lwalk *w)
{
    int fd = openat(w->rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return false;
    close(w->cur);
    w->cur = fd;
    w->cur_n = 0;
    w->cur_rel[0] = '\0';
    return true;
}

/*
 * Where the symlink at rel (len bytes, normalised, beneath rootfd) leads. Fills *out: inside true
 * with the target's normalised path and its lstat when the chain ends at an existing regular file
 * or directory of the workspace other than the root itself; inside false when it leads outside
 * the workspace, to the root, or to nothing (dangling, a loop, a file used as a directory).
 * Returns 0 (out->inside says which), or an errno value when a step failed otherwise (a directory
 * that cannot be searched, the root's path unknown for an absolute link, a chain longer than
 * CS_FS_PATH_MAX bytes: ENAMETOOLONG), with inside false: the scan cannot tell what to mask.
 */
int cs__fs_deny_link_resolve(int rootfd, const char *rel, size_t len, struct cs__fs_link *out)
{
    struct lwalk w;
    char rest[REST_MAX], spliced[REST_MAX];
    size_t pos = 0, rest_n = 0;
    int links = 0, err = 0;
    memset(out, 0, sizeof *out);
    w.rootfd = rootfd;
    w.up = 0;
    w.root_state = 0;
    w.root_depth = 0;
    w.cur = -1;
    /* Start in the link's directory with its own name as what is left to walk: the loop reads
     * it like any other link of the chain. */
    size_t leaf = len;
    while (leaf > 0 && rel[leaf - 1] != '/')
        leaf--;
    size_t dir_n = leaf > 0 ? leaf - 1 : 0;
    if (len - leaf == 0 || len - leaf >= 256)
        return 0;
    w.cur = open_dir_rel(rootfd, rel, dir_n);
    if (w.cur < 0)
        return odd(errno);
    memcpy(w.cur_rel, rel, dir_n);
    w.cur_rel[dir_n] = '\0';
    w.cur_n = dir_n;
    rest_n = len - leaf;
    memcpy(rest, rel + leaf, rest_n);
    rest[rest_n] = '\0';
    bool last_file = false; /* the chain ended at a regular file: cur_rel + '/' + rest's last */
    struct stat fst;
    size_t file_off = 0, file_n = 0;
    while (pos <= rest_n) {
        if (pos == 0 && rest[0] == '/') { /* an absolute path: from "/" */
            if ((err = root_known(&w)) != 0)
                goto out;
            if ((w.up = w.root_depth) == 0 && !at_root(&w)) {
                err = errno;
                goto out;
            }
        }
        while (pos < rest_n && rest[pos] == '/')
            pos++;
        if (pos >= rest_n)
            break;
        const char *c = rest + pos;
        const char *slash = memchr(c, '/', rest_n - pos);
        size_t cl = slash ? (size_t)(slash - c) : rest_n - pos;
        size_t next = pos + cl;
        bool more = false; /* any component after this one */
        for (size_t k = next; k < rest_n; k++)
            if (rest[k] != '/') {
                more = true;
                break;
            }
        if (last_file)
            goto out; /* a file used as a directory: leads nowhere */
        if (cl == 1 && c[0] == '.') {
            pos = next;
            continue;
        }
        if (w.up > 0) {
            /* Above the root: only the way back down to it is inside. */
            size_t rl;
            const char *rc = NULL;
            if (cl == 2 && c[0] == '.' && c[1] == '.') {
                if (w.up < w.root_depth)
                    w.up++;
            } else if ((rc = root_comp(&w, w.root_depth - w.up, &rl)) != NULL && rl == cl &&
                       memcmp(rc, c, cl) == 0) {
                if (--w.up == 0 && !at_root(&w)) {
                    err = errno;
                    goto out;
                }
            } else {
                goto out; /* outside the workspace */
            }
            pos = next;
            continue;
        }
        if (cl == 2 && c[0] == '.' && c[1] == '.') {
            if (w.cur_n == 0) {
                if ((err = root_known(&w)) != 0)
                    goto out;
                if (w.root_depth == 0)
                    goto out;
                w.up = 1;
            } else {
                while (w.cur_n > 0 && w.cur_rel[w.cur_n - 1] != '/')
                    w.cur_n--;
                if (w.cur_n > 0)
                    w.cur_n--;
                w.cur_rel[w.cur_n] = '\0';
                int fd = open_dir_rel(rootfd, w.cur_rel, w.cur_n);
                if (fd < 0) {
                    err = odd(errno);
                    goto out;
                }
                close(w.cur);
                w.cur = fd;
            }
            pos = next;
            continue;
        }
        if (cl >= 256)
            goto out; /* no such name (NAME_MAX) */
        if (w.cur_n + 1 + cl > CS_FS_PATH_MAX) {
            err = ENAMETOOLONG;
            goto out;
        }
        char cn[256];
        memcpy(cn, c, cl);
        cn[cl] = '\0';
        struct stat st;
        if (fstatat(w.cur, cn, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            err = odd(errno); /* dangling, or unreadable */
            goto out;
        }
        if (S_ISLNK(st.st_mode)) {
            if (++links > LINK_FOLLOW_MAX)
                goto out; /* a loop */
            char t[CS_FS_PATH_MAX + 1];
            ssize_t tn = readlinkat(w.cur, cn, t, sizeof t);
            if (tn < 0) {
                err = odd(errno == EINVAL ? ENOENT : errno); /* EINVAL: no longer a link */
                goto out;
            }
            /* What is left: the link's text, then the components after it. */
            size_t tail = rest_n - next;
            if (tn == 0)
                goto out; /* an empty link leads nowhere */
            if ((size_t)tn >= sizeof t || (size_t)tn + 1 + tail + 1 > sizeof spliced) {
                err = ENAMETOOLONG;
                goto out;
            }
            memcpy(spliced, t, (size_t)tn);
            size_t sn = (size_t)tn;
            if (tail > 0) {
                spliced[sn++] = '/';
                memcpy(spliced + sn, rest + next, tail);
                sn += tail;
            }
            memcpy(rest, spliced, sn);
            rest[sn] = '\0';
            rest_n = sn;
            pos = 0;
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            int fd = openat(w.cur, cn, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0) {
                err = odd(errno); /* ENOTDIR, ELOOP: swapped meanwhile */
                goto out;
            }
            close(w.cur);
            w.cur = fd;
            if (w.cur_n > 0)
                w.cur_rel[w.cur_n++] = '/';
            memcpy(w.cur_rel + w.cur_n, cn, cl + 1);
            w.cur_n += cl;
            pos = next;
            continue;
        }
        if (!S_ISREG(st.st_mode) || more)
            goto out; /* a special file, or a file used as a directory */
        last_file = true;
        fst = st;
        file_off = pos;
        file_n = cl;
        pos = next;
    }
    if (w.up > 0)
        goto out;
    if (last_file) {
        size_t n = w.cur_n;
        memcpy(out->target.rel, w.cur_rel, n);
        if (n > 0)
            out->target.rel[n++] = '/';
        memcpy(out->target.rel + n, rest + file_off, file_n);
        n += file_n;
        out->target.rel[n] = '\0';
        out->target.len = n;
        out->st = fst;
        out->inside = true;
    } else if (w.cur_n > 0) {
        if (fstat(w.cur, &out->st) != 0) {
            err = errno;
            goto out;
        }
        memcpy(out->target.rel, w.cur_rel, w.cur_n + 1);
        out->target.len = w.cur_n;
        out->inside = true;
    }
out:
    if (w.cur >= 0)
        close(w.cur);
    return err;
}

int cs__fs_deny_under(struct cs_fs_deny *d, int rootfd, const struct cs_fs_path *p,
                      struct cs_diag *diag)
{
    if (d == NULL || p->len == 0)
        return 0;
    int fd = openat(rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;
    /* Each directory on the path below the root, the leaf too when it is one, walked without
     * following links: a missing, linked or non-directory component ends the walk (the tool's own
     * open then answers for it; a file's own identity the tool checks itself). */
    for (size_t o = 0; fd >= 0 && o < p->len;) {
        const char *slash = memchr(p->rel + o, '/', p->len - o);
        size_t e = slash ? (size_t)(slash - p->rel) : p->len;
        char name[256];
        if (e - o >= sizeof name)
            break;
        memcpy(name, p->rel + o, e - o);
        name[e - o] = '\0';
        int nfd = openat(fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(fd);
        fd = nfd;
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && cs_fs_deny_known(d, fd, NULL, &st)) {
            if (e == p->len)
                cs_diag_set(diag, CSW_ERROR_PATH_DENIED,
                            "path \"%.*s\" is denied: it is a directory the workspace's deny "
                            "rules matched under another name",
                            cs__fs_clip(p->rel, p->len, 200), p->rel);
            else
                cs_diag_set(diag, CSW_ERROR_PATH_DENIED,
                            "path \"%.*s\" is denied: it is below \"%.*s\", a directory the "
                            "workspace's deny rules matched under another name",
                            cs__fs_clip(p->rel, p->len, 200), p->rel, cs__fs_clip(p->rel, e, 200),
                            p->rel);
            rc = CSW_ERROR_PATH_DENIED;
            break;
        }
        o = e + 1;
    }
    if (fd >= 0)
        close(fd);
    return rc;
}
