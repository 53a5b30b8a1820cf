/*
 * fs_deny_ident: the identity memory of the deny rules (docs/contract/tools.md §5, contract
 * section 7): which files were denied, so that one renamed or hard-linked by a command stays
 * denied, and what tells such a file apart from a new one that reuses its inode number.
 *
 * An identity is (device, inode) plus what the file system says about that inode's incarnation:
 * the inode generation (ioctl FS_IOC_GETVERSION: ext2/3/4, XFS, btrfs, F2FS) and the birth time
 * (statx STATX_BTIME: ext4, XFS, btrfs, tmpfs, ...), each where it answers, on the file systems
 * known to keep both with the inode through a rename (cs__fs_keeps_inodes). Two identities with one
 * (device, inode) are the same file unless a tag both carry differs. Any other file system
 * (overlayfs, whose copy-up on rename keeps st_ino but not the birth time; NFS; FUSE) keeps
 * (device, inode) alone: there a new file reusing a denied file's inode number stays denied (fail
 * closed) until the workspace's identities are dropped (docs/security-model.md P9).
 *
 * The memory is a hash table keyed by (device, inode), at most CS_FS_DENY_MAX_IDS entries, plus a
 * journal of what changed since the caller last took it (cs_fs_deny_take_changes), so that a
 * caller with a database writes each scan's learning in one batch and reloads it at start
 * (cs_fs_deny_load). An identity is forgotten when its (device, inode) is met under a file whose
 * tags differ: the file it named is gone.
 *
 * Trust: the tree under the root may change at any moment; the tag of a file is read from the
 * very inode the caller stat'ed (checked after opening), or not at all. Loaded identities come
 * from the operator's database (bounded by the same cap). Threads: every entry point takes d's
 * identity mutex. Entry points: fs.h (cs_fs_deny_known, cs_fs_deny_remember, cs_fs_deny_load,
 * cs_fs_deny_take_changes) and cs__fs_ids_* for fs_deny.c.
 */
/* statx: _GNU_SOURCE comes from the build */
#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#define JOURNAL_MAX 65536 /* changes held between two takes; beyond: the whole set is rewritten */

struct jent {
    struct cs_fs_ident id;
    bool del;
};

struct cs__fs_ids {
    pthread_mutex_t mu;
    struct cs_fs_ident *v; /* open addressing, power-of-two capacity, at most half full; ino 0:
                              an empty slot (no file has inode 0 on Linux file systems) */
    size_t cap, n;
    struct jent *j; /* changes since the last take */
    size_t jn, jcap;
    bool resync; /* the journal overflowed (or a write failed): rewrite the whole set */
};

struct cs__fs_ids *cs__fs_ids_new(void)
{
    struct cs__fs_ids *m = calloc(1, sizeof *m);
    if (m != NULL && pthread_mutex_init(&m->mu, NULL) != 0) {
        free(m);
        m = NULL;
    }
    return m;
}

void cs__fs_ids_free(struct cs__fs_ids *m)
{
    if (m == NULL)
        return;
    free(m->v);
    free(m->j);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* ---- tags ---- */

static bool same_file(const struct cs_fs_ident *a, const struct cs_fs_ident *b)
{
    unsigned both = a->flags & b->flags;
    if ((both & CS_FS_IDENT_GEN) && a->gen != b->gen)
        return false;
    if ((both & CS_FS_IDENT_BTIME) && a->btime_ns != b->btime_ns)
        return false;
    return true;
}

/* The inode generation of the file open as fd: asked directly, or, for an O_PATH descriptor
 * (which ioctl refuses), of the same inode reopened for reading through /proc/self/fd (never a
 * path lookup: it cannot reach another file). */
static bool gen_of(int fd, unsigned int *gen)
{
    if (ioctl(fd, FS_IOC_GETVERSION, gen) == 0)
        return true;
    if (errno != EBADF)
        return false;
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    int r = open(proc, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (r < 0)
        return false;
    bool ok = ioctl(r, FS_IOC_GETVERSION, gen) == 0;
    close(r);
    return ok;
}

/*
 * Whether the file system under fd is a local one that keeps each file's inode through a rename
 * and a link, with its ctime, generation and birth time (ext2/3/4, XFS, btrfs, tmpfs, F2FS): the
 * identity tags (here) and the scan's directory cache (fs_deny.c) trust only these. Not
 * overlayfs: a rename copies a lower file up, keeping its st_ino but not its birth time, so a tag
 * there would set a renamed denied file free. Elsewhere (network, FUSE, overlay) no tag is
 * trusted and (device, inode) alone decides, and nothing is cached: fail closed.
 */
bool cs__fs_keeps_inodes(int fd)
{
    struct statfs sf;
    if (fstatfs(fd, &sf) != 0)
        return false;
    switch ((unsigned long)sf.f_type) {
    case 0xEF53UL:     /* ext2, ext3, ext4 */
    case 0x58465342UL: /* XFS */
    case 0x9123683EUL: /* btrfs */
    case 0x01021994UL: /* tmpfs */
    case 0xF2F52010UL: /* F2FS */
        return true;
    default:
        return false;
    }
}

/* The tags of the file open as fd (any mode, O_PATH too), whose (device, inode) is id's. */
static void tags_of_fd(int fd, struct cs_fs_ident *id)
{
    if (!cs__fs_keeps_inodes(fd))
        return;
    unsigned int gen = 0;
    if (gen_of(fd, &gen)) {
        id->flags |= CS_FS_IDENT_GEN;
        id->gen = gen;
    }
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_BTIME | STATX_INO, &sx) == 0 &&
        (sx.stx_mask & STATX_BTIME) && (uint64_t)sx.stx_ino == id->ino) {
        id->flags |= CS_FS_IDENT_BTIME;
        id->btime_ns = (int64_t)sx.stx_btime.tv_sec * 1000000000 + (int64_t)sx.stx_btime.tv_nsec;
    }
}

int cs_fs_ident_get(int fd, const char *name, const struct stat *st, struct cs_fs_ident *out)
{
    struct cs_fs_ident id = {(uint64_t)st->st_dev, (uint64_t)st->st_ino, 0, 0, 0};
    int rc = -1;
    if (name == NULL) {
        tags_of_fd(fd, &id);
        rc = 0;
        goto out;
    }
    /* An O_PATH descriptor, never following a link: nothing is really opened (no FIFO, no
     * device) until it is checked to be the regular file or directory the caller stat'ed. */
    int f = openat(fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (f < 0)
        goto out;
    struct stat now;
    if (fstat(f, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino &&
        (S_ISREG(now.st_mode) || S_ISDIR(now.st_mode))) {
        tags_of_fd(f, &id);
        rc = 0;
    }
    close(f);
out:
    if (rc == 0)
        *out = id;
    return rc;
}

/* ---- the table (under m->mu) ---- */

static size_t slot_of(uint64_t dev, uint64_t ino, size_t cap)
{
    uint64_t h = ino * 0x9e3779b97f4a7c15ull ^ (dev + 0x632be59bd9b4e019ull);
    h ^= h >> 29;
    return (size_t)h & (cap - 1);
}

static struct cs_fs_ident *find(const struct cs__fs_ids *m, uint64_t dev, uint64_t ino)
{
    if (m->cap == 0)
        return NULL;
    for (size_t i = slot_of(dev, ino, m->cap);; i = (i + 1) & (m->cap - 1)) {
        struct cs_fs_ident *s = &m->v[i];
        if (s->ino == 0)
            return NULL;
        if (s->ino == ino && s->dev == dev)
            return s;
    }
}

static void put_in(struct cs_fs_ident *v, size_t cap, const struct cs_fs_ident *id)
{
    size_t i = slot_of(id->dev, id->ino, cap);
    while (v[i].ino != 0)
        i = (i + 1) & (cap - 1);
    v[i] = *id;
}

/* Removes slot s (linear probing: the entries after it that would no longer be found move back). */
static void erase(struct cs__fs_ids *m, struct cs_fs_ident *s)
{
    size_t i = (size_t)(s - m->v), mask = m->cap - 1;
    m->v[i].ino = 0;
    m->n--;
    for (size_t j = (i + 1) & mask; m->v[j].ino != 0; j = (j + 1) & mask) {
        size_t h = slot_of(m->v[j].dev, m->v[j].ino, m->cap);
        /* j's entry stays when its home h lies cyclically in (i, j]. */
        bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
        if (stays)
            continue;
        m->v[i] = m->v[j];
        m->v[j].ino = 0;
        i = j;
    }
}

static void journal(struct cs__fs_ids *m, const struct cs_fs_ident *id, bool del)
{
    if (m->resync)
        return;
    if (m->jn == m->jcap) {
        size_t nc = m->jcap ? 2 * m->jcap : 64;
        struct jent *nv = nc <= JOURNAL_MAX ? realloc(m->j, nc * sizeof *nv) : NULL;
        if (nv == NULL) {
            m->resync = true; /* the next take hands over the whole set instead */
            m->jn = 0;
            return;
        }
        m->j = nv;
        m->jcap = nc;
    }
    m->j[m->jn++] = (struct jent){*id, del};
}

/* Adds or replaces id. Returns 0, or -1 (the cap, or OOM: not remembered, the rules still hold
 * for the name). */
static int put(struct cs__fs_ids *m, const struct cs_fs_ident *id)
{
    struct cs_fs_ident *s = find(m, id->dev, id->ino);
    if (s != NULL) {
        *s = *id;
        return 0;
    }
    if (m->n >= CS_FS_DENY_MAX_IDS)
        return -1;
    if (2 * (m->n + 1) > m->cap) {
        size_t nc = m->cap ? 2 * m->cap : 64;
        struct cs_fs_ident *nv = calloc(nc, sizeof *nv);
        if (nv == NULL)
            return -1;
        for (size_t i = 0; i < m->cap; i++)
            if (m->v[i].ino != 0)
                put_in(nv, nc, &m->v[i]);
        free(m->v);
        m->v = nv;
        m->cap = nc;
    }
    put_in(m->v, m->cap, id);
    m->n++;
    return 0;
}

/* ---- entry points ---- */

void cs__fs_ids_hold(struct cs__fs_ids *m)
{
    pthread_mutex_lock(&m->mu);
}

void cs__fs_ids_release(struct cs__fs_ids *m)
{
    pthread_mutex_unlock(&m->mu);
}

bool cs__fs_ids_has_held(const struct cs__fs_ids *m, uint64_t dev, uint64_t ino)
{
    return ino != 0 && find(m, dev, ino) != NULL;
}

bool cs__fs_ids_known(struct cs__fs_ids *m, int fd, const char *name, const struct stat *st)
{
    if (m == NULL || st->st_ino == 0)
        return false;
    pthread_mutex_lock(&m->mu);
    bool hit = find(m, (uint64_t)st->st_dev, (uint64_t)st->st_ino) != NULL;
    pthread_mutex_unlock(&m->mu);
    if (!hit)
        return false;
    /* The number is known: is it the same file? Tags are read outside the lock (an open). */
    struct cs_fs_ident cur;
    if (cs_fs_ident_get(fd, name, st, &cur) != 0)
        return true; /* cannot tell (gone or replaced meanwhile): fail closed */
    pthread_mutex_lock(&m->mu);
    struct cs_fs_ident *s = find(m, cur.dev, cur.ino);
    hit = s != NULL && same_file(s, &cur);
    if (s != NULL && !hit) {
        /* Another file under a denied file's number: that file is gone, so is its identity. */
        struct cs_fs_ident old = *s;
        erase(m, s);
        journal(m, &old, true);
    }
    pthread_mutex_unlock(&m->mu);
    return hit;
}

void cs__fs_ids_remember(struct cs__fs_ids *m, int fd, const char *name, const struct stat *st,
                         bool verify)
{
    if (m == NULL || st->st_ino == 0)
        return;
    pthread_mutex_lock(&m->mu);
    const struct cs_fs_ident *s = find(m, (uint64_t)st->st_dev, (uint64_t)st->st_ino);
    bool have = s != NULL;
    pthread_mutex_unlock(&m->mu);
    /* Known and not to be checked again (the scan's unchanged listing: the same inode as when it
     * was remembered): nothing to do. Otherwise the tags are read, since the inode may be a new
     * file reusing the number (a denied file deleted and created again). */
    if (have && !verify)
        return;
    struct cs_fs_ident id = {(uint64_t)st->st_dev, (uint64_t)st->st_ino, 0, 0, 0};
    if (cs_fs_ident_get(fd, name, st, &id) != 0 && have)
        return; /* gone meanwhile: keep what is known */
    pthread_mutex_lock(&m->mu);
    s = find(m, id.dev, id.ino);
    bool changed = s == NULL || s->flags != id.flags || !same_file(s, &id);
    if (changed && put(m, &id) == 0)
        journal(m, &id, false);
    pthread_mutex_unlock(&m->mu);
}

int cs__fs_ids_load(struct cs__fs_ids *m, const struct cs_fs_ident *v, size_t n)
{
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n && rc == 0; i++)
        if (v[i].ino != 0)
            rc = put(m, &v[i]);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int cs__fs_ids_take(struct cs__fs_ids *m, struct cs_fs_deny_changes *out)
{
    memset(out, 0, sizeof *out);
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    size_t k = 0;
    if (m->resync) {
        /* The whole set, replacing what is stored. */
        out->replace = true;
        if (m->n > 0) {
            out->v = calloc(m->n, sizeof *out->v);
            if (out->v == NULL) {
                out->replace = false;
                rc = -1;
                goto out;
            }
            for (size_t i = 0; i < m->cap && k < m->n; i++)
                if (m->v[i].ino != 0)
                    out->v[k++] = (struct cs_fs_deny_change){m->v[i], false};
        }
        out->n = k;
        m->resync = false;
        m->jn = 0;
        goto out;
    }
    if (m->jn == 0)
        goto out;
    out->v = calloc(m->jn, sizeof *out->v);
    if (out->v == NULL) {
        rc = -1;
        goto out;
    }
    for (size_t i = 0; i < m->jn; i++) /* in order: the caller applies them in order */
        out->v[k++] = (struct cs_fs_deny_change){m->j[i].id, m->j[i].del};
    out->n = k;
    m->jn = 0;
out:
    pthread_mutex_unlock(&m->mu);
    return rc;
}

void cs__fs_ids_resync(struct cs__fs_ids *m)
{
    pthread_mutex_lock(&m->mu);
    m->resync = true;
    m->jn = 0;
    pthread_mutex_unlock(&m->mu);
}

void cs_fs_deny_changes_free(struct cs_fs_deny_changes *c)
{
    if (c == NULL)
        return;
    free(c->v);
    memset(c, 0, sizeof *c);
}
