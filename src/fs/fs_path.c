/*
 * fs_path: lexical normalisation of client paths and the no-follow open beneath a workspace root.
 *
 * Trust: paths are the client's; the tree under the root may be changed concurrently by anyone.
 * A path is first normalised without touching the file system (so ".." can only cancel a
 * component the client named, never climb above the root), then opened relative to a root fd:
 * with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) where the kernel has
 * it, else one component at a time with O_PATH | O_NOFOLLOW, each component's type read from its
 * own fd (never re-resolved by name). Either way a symlink anywhere, or a swap of a directory for
 * a symlink between two calls, makes the open fail instead of leaving the root.
 *
 * Entry points: cs_fs_path_normalize, cs_fs_root_open, cs_fs_open_beneath, cs__fs_force_fallback.
 */
#include "fs.h"
#include "base_roots.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

_Static_assert(CSW_ERROR_INVALID_ARGUMENTS == 0 && CSW_ERROR_PATH_ESCAPE != 0,
               "0 means success; fs never returns INVALID_ARGUMENTS");

#define QUOTE_MAX     200 /* bytes of a client path quoted in a message */
#define EAGAIN_TRIES  8   /* openat2 may ask to retry when a rename raced the lookup */
#define RESOLVE_FLAGS (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

/* Set for good once openat2 answers ENOSYS; the test hook sets it too. */
static atomic_bool use_fallback;

void cs__fs_force_fallback(bool on)
{
    atomic_store(&use_fallback, on);
}

/* ---- messages ---- */

int cs__fs_clip(const char *s, size_t n, size_t max)
{
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    return (int)n;
}

/* ---- normalisation ---- */

int cs_fs_path_normalize(const char *in, size_t n, struct cs_fs_path *out, struct cs_diag *diag)
{
    if (n == 0) {
        cs_diag_set(diag, CSW_ERROR_PATH_ESCAPE, "the path is empty");
        return CSW_ERROR_PATH_ESCAPE;
    }
    if (memchr(in, '\0', n) != NULL) {
        cs_diag_set(diag, CSW_ERROR_PATH_ESCAPE, "the path contains a NUL byte");
        return CSW_ERROR_PATH_ESCAPE;
    }
    if (in[0] == '/') {
        cs_diag_set(diag, CSW_ERROR_PATH_ESCAPE,
                    "%.*s: absolute paths are refused; give a path relative to "
                    "the workspace root",
                    cs__fs_clip(in, n, QUOTE_MAX), in);
        return CSW_ERROR_PATH_ESCAPE;
    }

    /*
     * Right to left: a ".." skips the next kept component to its left, so only components of the
     * result are ever written and the buffer never holds more than the answer. A ".." left over
     * at the start climbs above the root (the same as a running depth going below zero when read
     * left to right).
     */
    char *rel = out->rel;
    size_t w = CS_FS_PATH_MAX;
    rel[w] = '\0';
    size_t skip = 0;
    bool too_long = false, first = true, dir_only = false, last = true;
    size_t end = n;
    for (;;) {
        size_t start = end;
        while (start > 0 && in[start - 1] != '/')
            start--;
        size_t clen = end - start;
        const char *comp = in + start;
        bool dot = clen == 1 && comp[0] == '.';
        bool dotdot = clen == 2 && comp[0] == '.' && comp[1] == '.';
        if (last)
            dir_only = clen == 0 || dot || dotdot;
        last = false;
        if (clen == 0 || dot) {
            /* nothing */
        } else if (dotdot) {
            skip++;
        } else if (skip > 0) {
            skip--;
        } else {
            size_t need = clen + (first ? 0 : 1);
            if (need > w) {
                too_long = true;
            } else if (!too_long) {
                if (!first)
                    rel[--w] = '/';
                w -= clen;
                memcpy(rel + w, comp, clen);
            }
            first = false;
        }
        if (start == 0)
            break;
        end = start - 1;
    }
    if (skip > 0) {
        cs_diag_set(diag, CSW_ERROR_PATH_ESCAPE, "%.*s: '..' climbs above the workspace root",
                    cs__fs_clip(in, n, QUOTE_MAX), in);
        return CSW_ERROR_PATH_ESCAPE;
    }
    if (too_long) {
        cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                    "%.*s...: the path is longer than %d bytes", cs__fs_clip(in, n, QUOTE_MAX), in,
                    CS_FS_PATH_MAX);
        return CSW_ERROR_FILE_OPERATION_FAILED;
    }
    out->len = CS_FS_PATH_MAX - w;
    memmove(rel, rel + w, out->len + 1);
    out->dir_only = dir_only;
    return 0;
}

/* ---- opening ---- */

int cs_fs_root_open(const char *root, int *fd, struct cs_diag *diag)
{
    /* A process that holds its roots (the gateway, the uds worker) reaches a root only through
     * the descriptor opened at start: the path is never resolved again, so an ancestor swapped
     * for a symlink since then redirects nothing (docs/contract/runtime.md section 2). */
    if (cs_roots_active()) {
        int held = cs_roots_get(root);
        if (held < 0) {
            cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                        "%s is not a workspace root this process holds", root);
            return CSW_ERROR_FILE_OPERATION_FAILED;
        }
        int f = fcntl(held, F_DUPFD_CLOEXEC, 3);
        if (f < 0) {
            cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED, "cannot use the workspace root: %s",
                        strerror(errno));
            return CSW_ERROR_FILE_OPERATION_FAILED;
        }
        *fd = f;
        return 0;
    }
    /* Without held roots (tools and tests that pass a path): the registry holds canonical
     * roots (realpath at load), so a root that is a symlink now was swapped after the fact and
     * is not followed. */
    int f = open(root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (f < 0) {
        int e = errno;
        if (e == ENOENT)
            cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                        "the workspace root has gone (it was deleted or moved)");
        else if (e == ELOOP || e == ENOTDIR)
            cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                        "the workspace root is no longer a directory (it was "
                        "replaced, by a symlink or a file)");
        else
            cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED, "cannot open the workspace root: %s",
                        strerror(e));
        return CSW_ERROR_FILE_OPERATION_FAILED;
    }
    *fd = f;
    return 0;
}

static int sys_openat2(int dirfd, const char *path, uint64_t flags)
{
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = flags;
    how.resolve = RESOLVE_FLAGS;
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

/* The path as shown in messages: "." for the root. */
static const char *shown(const char *rel)
{
    return rel[0] ? rel : ".";
}

/* The error for what st says about the object at rel, or 0 when it is what was wanted. */
static int classify(const struct stat *st, enum cs_fs_want want, bool dir_only, const char *rel,
                    struct cs_diag *diag)
{
    int q = cs__fs_clip(shown(rel), strlen(shown(rel)), QUOTE_MAX);
    const char *what;
    switch (st->st_mode & S_IFMT) {
    case S_IFREG:
        if (want == CS_FS_WANT_DIR || dir_only) {
            cs_diag_set(diag, CSW_ERROR_PATH_NOT_DIRECTORY,
                        "%.*s is a regular file, not a directory", q, shown(rel));
            return CSW_ERROR_PATH_NOT_DIRECTORY;
        }
        return 0;
    case S_IFDIR:
        if (want == CS_FS_WANT_DIR)
            return 0;
        cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                    "%.*s is a directory, not a regular file", q, shown(rel));
        return CSW_ERROR_FILE_OPERATION_FAILED;
    case S_IFLNK:
        cs_diag_set(diag, CSW_ERROR_SYMLINK_REJECTED,
                    "%.*s is a symlink; symlinks are never followed", q, shown(rel));
        return CSW_ERROR_SYMLINK_REJECTED;
    case S_IFIFO:
        what = "a fifo";
        break;
    case S_IFSOCK:
        what = "a socket";
        break;
    case S_IFCHR:
        what = "a character device";
        break;
    case S_IFBLK:
        what = "a block device";
        break;
    default:
        what = "a special file";
        break;
    }
    cs_diag_set(diag, CSW_ERROR_SPECIAL_FILE_REJECTED, "%.*s is %s; only regular files are read", q,
                shown(rel), what);
    return CSW_ERROR_SPECIAL_FILE_REJECTED;
}

/* The error for errno e from opening (a prefix of) rel, whose first plen bytes are quoted. */
static int map_errno(int e, const char *rel, size_t plen, struct cs_diag *diag)
{
    int q = cs__fs_clip(rel, plen, QUOTE_MAX);
    switch (e) {
    case ENOENT:
        cs_diag_set(diag, CSW_ERROR_FILE_NOT_FOUND, "%.*s does not exist", q, rel);
        return CSW_ERROR_FILE_NOT_FOUND;
    case ENOTDIR:
        cs_diag_set(diag, CSW_ERROR_PATH_NOT_DIRECTORY,
                    "%.*s: a component of the path is not a directory", q, rel);
        return CSW_ERROR_PATH_NOT_DIRECTORY;
    case ELOOP:
        /* RESOLVE_NO_SYMLINKS and O_NOFOLLOW answer ELOOP for a symlink and nothing else:
         * nothing is ever followed, so no loop can be too deep. */
        cs_diag_set(diag, CSW_ERROR_SYMLINK_REJECTED,
                    "%.*s: a component of the path is a symlink; symlinks are never "
                    "followed",
                    q, rel);
        return CSW_ERROR_SYMLINK_REJECTED;
    case EXDEV:
        cs_diag_set(diag, CSW_ERROR_PATH_ESCAPE, "%.*s resolves outside the workspace root", q,
                    rel);
        return CSW_ERROR_PATH_ESCAPE;
    case ENXIO:
    case ENODEV:
        /* What opening a socket, or a device without a driver, answers. */
        cs_diag_set(diag, CSW_ERROR_SPECIAL_FILE_REJECTED,
                    "%.*s is a special file; only regular files are read", q, rel);
        return CSW_ERROR_SPECIAL_FILE_REJECTED;
    default:
        cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED, "cannot open %.*s: %s", q, rel,
                    strerror(e));
        return CSW_ERROR_FILE_OPERATION_FAILED;
    }
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/*
 * The fallback walk: opens every directory component of p with O_PATH | O_NOFOLLOW from rootfd,
 * reading each one's type from its own fd. Returns 0 with *parent the O_PATH fd of the leaf's
 * directory (-1 when that is the root itself; the caller closes it) and *leaf the last component,
 * or the error naming the first component that is missing, a symlink or not a directory.
 */
static int walk_parent(int rootfd, const struct cs_fs_path *p, int *parent, const char **leaf,
                       struct cs_diag *diag)
{
    int rc = 0;
    int cur = -1;
    char name[CS_FS_PATH_MAX + 1];
    const char *start = p->rel;
    for (;;) {
        const char *slash = strchr(start, '/');
        if (slash == NULL)
            break;
        size_t clen = (size_t)(slash - start);
        size_t plen = (size_t)(slash - p->rel);
        memcpy(name, start, clen);
        name[clen] = '\0';
        int fd = openat(cur >= 0 ? cur : rootfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            rc = map_errno(errno, p->rel, plen, diag);
            goto out;
        }
        struct stat st;
        if (fstat(fd, &st) != 0) {
            rc = map_errno(errno, p->rel, plen, diag);
            close(fd);
            goto out;
        }
        if (!S_ISDIR(st.st_mode)) {
            int q = cs__fs_clip(p->rel, plen, QUOTE_MAX);
            if (S_ISLNK(st.st_mode)) {
                cs_diag_set(diag, CSW_ERROR_SYMLINK_REJECTED,
                            "%.*s is a symlink; symlinks are never followed", q, p->rel);
                rc = CSW_ERROR_SYMLINK_REJECTED;
            } else {
                cs_diag_set(diag, CSW_ERROR_PATH_NOT_DIRECTORY, "%.*s is not a directory", q,
                            p->rel);
                rc = CSW_ERROR_PATH_NOT_DIRECTORY;
            }
            close(fd);
            goto out;
        }
        close_fd(&cur);
        cur = fd;
        start = slash + 1;
    }
    *parent = cur;
    *leaf = start;
    cur = -1;
out:
    close_fd(&cur);
    return rc;
}

/* Flags of the second, real open of the leaf: never blocks, never makes a controlling tty. */
static int read_flags(enum cs_fs_want want)
{
    int f = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC;
    return want == CS_FS_WANT_DIR ? f | O_DIRECTORY : f;
}

/* Opens the leaf with the walk (no openat2). */
static int open_walk(int rootfd, const struct cs_fs_path *p, enum cs_fs_want want, int *out,
                     struct stat *st, struct cs_diag *diag)
{
    int parent = -1, fd = -1;
    const char *leaf = NULL;
    int rc = walk_parent(rootfd, p, &parent, &leaf, diag);
    if (rc != 0)
        goto out;
    int dirfd = parent >= 0 ? parent : rootfd;
    /* First an O_PATH fd: its type is known before anything is really opened. */
    fd = openat(dirfd, leaf, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, st) != 0) {
        rc = map_errno(errno, p->rel, p->len, diag);
        goto out;
    }
    rc = classify(st, want, p->dir_only, p->rel, diag);
    if (rc != 0)
        goto out;
    close_fd(&fd);
    /* Then the real open, by name again from the same parent fd; whatever is there now is
     * classified from this fd, so a swap in between is caught, and O_NONBLOCK keeps a fifo that
     * was swapped in from blocking. */
    fd = openat(dirfd, leaf, read_flags(want));
    if (fd < 0 || fstat(fd, st) != 0) {
        rc = map_errno(errno, p->rel, p->len, diag);
        goto out;
    }
    rc = classify(st, want, p->dir_only, p->rel, diag);
    if (rc != 0)
        goto out;
    *out = fd;
    fd = -1;
out:
    close_fd(&fd);
    close_fd(&parent);
    return rc;
}

/* openat2 with the resolve flags, retrying a lookup that raced a rename. Returns the fd or -1. */
static int openat2_retry(int rootfd, const char *rel, int flags)
{
    int fd = -1;
    for (int i = 0; i < EAGAIN_TRIES; i++) {
        fd = sys_openat2(rootfd, rel, (uint64_t)flags);
        if (fd >= 0 || errno != EAGAIN)
            break;
    }
    return fd;
}

int cs__fs_open_dir_beneath(int rootfd, const char *rel)
{
    if (atomic_load(&use_fallback)) {
        errno = ENOSYS;
        return -1;
    }
    /* O_DIRECTORY refuses anything but a directory before any open happens (a fifo cannot block
     * it), and O_NOFOLLOW a leaf link: no O_PATH probe first, as cs_fs_open_beneath needs. */
    int fd = openat2_retry(rootfd, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOSYS)
        atomic_store(&use_fallback, true);
    return fd;
}

/* The error for a failed openat2: the walk names the offending component when it sees the same
 * thing; if the tree changed in between, the errno alone decides. */
static int openat2_error(int e, int rootfd, const struct cs_fs_path *p, enum cs_fs_want want,
                         struct cs_diag *diag)
{
    if (e == ELOOP || e == ENOTDIR) {
        int fd = -1;
        struct stat st;
        int rc = open_walk(rootfd, p, want, &fd, &st, diag);
        close_fd(&fd);
        if (rc != 0)
            return rc;
    }
    return map_errno(e, p->rel, p->len, diag);
}

int cs_fs_open_beneath(int rootfd, const struct cs_fs_path *p, enum cs_fs_want want, int *fd,
                       struct stat *st, struct cs_diag *diag)
{
    int rc;
    int f = -1;
    struct stat s;
    if (p->len == 0) {
        /* The root itself: no lookup at all. */
        if (fstat(rootfd, &s) != 0) {
            rc = map_errno(errno, ".", 1, diag);
            goto out;
        }
        rc = classify(&s, want, p->dir_only, p->rel, diag);
        if (rc != 0)
            goto out;
        f = openat(rootfd, ".", read_flags(want));
        if (f < 0 || fstat(f, &s) != 0) {
            rc = map_errno(errno, ".", 1, diag);
            goto out;
        }
        goto done;
    }
    if (!atomic_load(&use_fallback)) {
        f = openat2_retry(rootfd, p->rel, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (f < 0 && errno == ENOSYS) {
            atomic_store(&use_fallback, true);
        } else {
            if (f < 0) {
                rc = openat2_error(errno, rootfd, p, want, diag);
                goto out;
            }
            /* O_PATH | O_NOFOLLOW returns a leaf symlink itself: its type says so. */
            if (fstat(f, &s) != 0) {
                rc = map_errno(errno, p->rel, p->len, diag);
                goto out;
            }
            rc = classify(&s, want, p->dir_only, p->rel, diag);
            if (rc != 0)
                goto out;
            close_fd(&f);
            f = openat2_retry(rootfd, p->rel, read_flags(want));
            if (f < 0) {
                rc = openat2_error(errno, rootfd, p, want, diag);
                goto out;
            }
            if (fstat(f, &s) != 0) {
                rc = map_errno(errno, p->rel, p->len, diag);
                goto out;
            }
            rc = classify(&s, want, p->dir_only, p->rel, diag);
            if (rc != 0)
                goto out;
            goto done;
        }
    }
    rc = open_walk(rootfd, p, want, &f, &s, diag);
    if (rc != 0)
        goto out;
done:
    *fd = f;
    *st = s;
    f = -1;
    rc = 0;
out:
    close_fd(&f);
    /* Nothing is found beneath a root that was removed: say that instead. */
    if (rc == CSW_ERROR_FILE_NOT_FOUND && fstat(rootfd, &s) == 0 && s.st_nlink == 0) {
        cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                    "the workspace root has gone (it was deleted or moved)");
        rc = CSW_ERROR_FILE_OPERATION_FAILED;
    }
    return rc;
}
