/*
 * patch_journal: apply_patch's crash journal and its recovery (see patch_journal.h and
 * docs/patch-format.md, "Crash journal").
 *
 * Recovery never reads a workspace file's content: it decides by metadata (is every new file in
 * place? the old inode numbers are in the journal) and restores by renaming the kept old file
 * back (or, for a copy, by writing the journal's own bytes beside the target and renaming). Every
 * path the journal names is checked against the workspace's deny rules first; a denied path, a
 * corrupt journal or one of another version stops the recovery of that workspace with a message
 * naming the file, and nothing is touched.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "patch_journal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "patch_txn.h"

#define MAGIC        "cs-patch-journal 1\n"
#define MAGIC_PREFIX "cs-patch-journal "
#define MAX_JOURNAL  (64u * 1024u * 1024u)
#define MAX_ITEMS    (1u << 20)
/* Directories one add or move may create: every proper prefix of its path, as many as a path of
 * CS_FS_PATH_MAX bytes has ("a/a/.../a": one per two bytes). Recovery removes them all. */
#define MAX_DIRS    (CS_FS_PATH_MAX / 2u)
#define OUTCOME_MAX 32
#define MIN_ITEM    50u /* bytes of the shortest item: "A - 0 0 0 <tmp> 0\n1 a\n0 \n" */

/* ---- test hooks (docs/patch-format.md, "Test hooks") ---- */

static unsigned env_number(const char *name)
{
    const char *s = getenv(name);
    if (s == NULL || *s == '\0')
        return 0;
    char *e = NULL;
    unsigned long v = strtoul(s, &e, 10);
    return *e == '\0' && v <= 3600000ul ? (unsigned)v : 0;
}

/* CODESPACE_TEST_PATCH_CRASH_AT=N: the process applying the patch kills itself with SIGKILL at
 * its Nth step boundary (counted over the process's life). */
void cs__patch_journal_step(void)
{
    static unsigned at, count;
    static int read_env;
    if (!read_env) {
        at = env_number("CODESPACE_TEST_PATCH_CRASH_AT");
        read_env = 1;
    }
    if (at != 0 && ++count == at)
        (void)raise(SIGKILL);
}

/* CODESPACE_TEST_PATCH_RECOVER_DELAY_MS=N: recovery sleeps N ms after each item it restores, so
 * a test can kill the recovery itself half-way. */
static void recover_delay(void)
{
    unsigned ms = env_number("CODESPACE_TEST_PATCH_RECOVER_DELAY_MS");
    if (ms == 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- the journals of this process's transactions in progress ----
 * Recovery skips them: a worker serves several gateways (and a gateway that restarted while its
 * patch still runs there), so a recovery may run beside a live transaction of the same workspace
 * and must never undo it. Names are unique (an operation id, or "tx-" and 64 random bits). */

static pthread_mutex_t active_mu = PTHREAD_MUTEX_INITIALIZER;
/* One recovery (or settle) at a time in this process: two would restore the same items. */
static pthread_mutex_t recover_mu = PTHREAD_MUTEX_INITIALIZER;
static char (*active)[48];
static size_t n_active, cap_active;

static int active_add(const char *name)
{
    int rc = 0;
    pthread_mutex_lock(&active_mu);
    if (n_active == cap_active) {
        size_t nc = cap_active ? cap_active * 2 : 8;
        void *na = realloc(active, nc * sizeof *active);
        if (na == NULL)
            rc = -1;
        else {
            active = na;
            cap_active = nc;
        }
    }
    if (rc == 0)
        snprintf(active[n_active++], sizeof active[0], "%s", name);
    pthread_mutex_unlock(&active_mu);
    return rc;
}

static void active_del(const char *name)
{
    pthread_mutex_lock(&active_mu);
    for (size_t i = 0; i < n_active; i++)
        if (strcmp(active[i], name) == 0) {
            memcpy(active[i], active[--n_active], sizeof active[0]);
            break;
        }
    pthread_mutex_unlock(&active_mu);
}

static bool active_has(const char *name)
{
    bool found = false;
    pthread_mutex_lock(&active_mu);
    for (size_t i = 0; !found && i < n_active; i++)
        found = strcmp(active[i], name) == 0;
    pthread_mutex_unlock(&active_mu);
    return found;
}

/* ---- small helpers ---- */

static int sha256_hex(const char *data, size_t len, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    if (EVP_Digest(data, len, md, &mdn, EVP_sha256(), NULL) != 1 || mdn != 32)
        return -1;
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < 32; i++) {
        out[2 * i] = hx[md[i] >> 4];
        out[2 * i + 1] = hx[md[i] & 15];
    }
    out[64] = '\0';
    return 0;
}

struct buf {
    char *p;
    size_t n, cap;
    bool oom;
};

static void put(struct buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n + 1)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (np == NULL) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void putf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct buf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->oom = true;
        return;
    }
    put(b, tmp, (size_t)n);
}

static void put_path(struct buf *b, const char *s, size_t n)
{
    putf(b, "%zu ", n);
    put(b, s, n);
    put(b, "\n", 1);
}

/* The parent of p (the root for a one-component path) and p's last component. */
static void split(const struct cs_fs_path *p, struct cs_fs_path *parent, const char **leaf)
{
    const char *slash = strrchr(p->rel, '/');
    size_t plen = slash ? (size_t)(slash - p->rel) : 0;
    memcpy(parent->rel, p->rel, plen);
    parent->rel[plen] = '\0';
    parent->len = plen;
    parent->dir_only = false;
    *leaf = slash ? slash + 1 : p->rel;
}

/* Opens p's parent beneath the root; -1 when it cannot (missing, not a directory, a symlink). */
static int open_parent(int rootfd, const struct cs_fs_path *p, const char **leaf)
{
    struct cs_fs_path parent;
    struct stat st;
    int dfd = -1;
    split(p, &parent, leaf);
    if (cs_fs_open_beneath(rootfd, &parent, CS_FS_WANT_DIR, &dfd, &st, NULL) != 0)
        return -1;
    return dfd;
}

static int write_small(int dfd, const char *tmpname, const char *name, const char *data, size_t len,
                       bool sync)
{
    int fd = openat(dfd, tmpname, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int rc = cs__patch_write_all(fd, data, len) == 0 && (!sync || fsync(fd) == 0) ? 0 : -1;
    close(fd);
    if (rc == 0)
        rc = renameat(dfd, tmpname, dfd, name);
    if (rc == 0 && sync)
        rc = fsync(dfd);
    if (rc != 0)
        (void)unlinkat(dfd, tmpname, 0);
    return rc;
}

/* Removes everything in the journal directory jdfd (it holds only plain files) and then the
 * directory name in jrootfd, then the journal root itself when it is empty. */
static void remove_dir(int jrootfd, int jdfd, const char *name)
{
    int fd = openat(jdfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL && fd >= 0)
        close(fd);
    if (d != NULL) {
        /* The stashes, then the intent, the outcome last: while it exists the outcome decides. */
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (e->d_name[0] == 's' || strcmp(e->d_name, "intent.tmp") == 0 ||
                strcmp(e->d_name, "outcome.tmp") == 0)
                (void)unlinkat(jdfd, e->d_name, 0);
        closedir(d);
    }
    (void)unlinkat(jdfd, "intent", 0);
    (void)unlinkat(jdfd, "outcome", 0);
    (void)unlinkat(jrootfd, name, AT_REMOVEDIR);
}

static void remove_jroot(int rootfd)
{
    (void)unlinkat(rootfd, CS__PATCH_JOURNAL_DIR, AT_REMOVEDIR); /* fails while not empty */
}

/* ---- writing ---- */

/* fsync of the root directory (rootfd may be an O_PATH descriptor, which fsync refuses). */
static int fsync_root(int rootfd)
{
    int fd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static int random_hex(char *out, size_t nbytes)
{
    unsigned char rnd[16];
    if (nbytes > sizeof rnd || getrandom(rnd, nbytes, 0) != (ssize_t)nbytes)
        return -1;
    for (size_t i = 0; i < nbytes; i++)
        snprintf(out + 2 * i, 3, "%02x", rnd[i]);
    return 0;
}

/* The directories an add or a move to p would create: the missing prefixes, shallowest first. */
static void missing_dirs(int rootfd, const struct cs_fs_path *p, struct buf *b, size_t *n)
{
    struct cs_fs_path pre;
    size_t count = 0;
    for (size_t i = 0; i < p->len; i++) {
        if (p->rel[i] != '/')
            continue;
        memcpy(pre.rel, p->rel, i);
        pre.rel[i] = '\0';
        pre.len = i;
        pre.dir_only = false;
        int fd = -1;
        struct stat st;
        if (count == 0 && cs_fs_open_beneath(rootfd, &pre, CS_FS_WANT_DIR, &fd, &st, NULL) == 0) {
            close(fd);
            continue;
        }
        put_path(b, pre.rel, pre.len);
        count++;
    }
    *n = count;
}

int cs__patch_journal_begin(int rootfd, const char *op_id, struct cs__patch_jitem *items, size_t n,
                            struct cs__patch_journal *j, struct cs_diag *diag)
{
    struct buf b = {0};
    int rc = CSW_ERROR_FILE_OPERATION_FAILED;
    const char *what = "";
    *j = (struct cs__patch_journal){.rootfd = rootfd, .jrootfd = -1, .jdfd = -1};
    /* Recovery takes only these two forms for journals (recover_locked). */
    if (op_id != NULL && strncmp(op_id, "op-", 3) == 0 && strlen(op_id) < sizeof j->name &&
        strchr(op_id, '/') == NULL) {
        snprintf(j->name, sizeof j->name, "%s", op_id);
    } else {
        memcpy(j->name, "tx-", 3);
        if (random_hex(j->name + 3, 8) != 0) {
            what = "getrandom";
            goto fail;
        }
    }
    if (active_add(j->name) != 0) {
        what = "out of memory";
        errno = ENOMEM;
        goto fail;
    }
    j->active = true;
    bool made_jroot = false;
    /* Twice: a recovery beside us removes the directory whenever it finds it empty, which may
     * fall between our mkdir, open and mkdir of the operation's own directory. */
    for (int attempt = 0; attempt < 2; attempt++) {
        if (j->jrootfd >= 0)
            close(j->jrootfd);
        j->jrootfd = -1;
        made_jroot = mkdirat(rootfd, CS__PATCH_JOURNAL_DIR, 0700) == 0;
        if (!made_jroot && errno != EEXIST) {
            what = "mkdir " CS__PATCH_JOURNAL_DIR;
            goto fail;
        }
        j->jrootfd =
            openat(rootfd, CS__PATCH_JOURNAL_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        what = "open " CS__PATCH_JOURNAL_DIR;
        if (j->jrootfd < 0 && errno == ENOENT)
            continue;
        if (j->jrootfd < 0)
            goto fail;
        what = "mkdir of the operation's journal";
        if (mkdirat(j->jrootfd, j->name, 0700) == 0)
            break;
        if (errno != ENOENT || attempt == 1)
            goto fail;
    }
    if (j->jrootfd < 0)
        goto fail;
    j->jdfd = openat(j->jrootfd, j->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (j->jdfd < 0) {
        what = "open of the operation's journal";
        goto fail;
    }
    putf(&b, "%sop %s\nitems %zu\n", MAGIC, op_id && op_id[0] ? op_id : "-", n);
    for (size_t i = 0; i < n; i++) {
        struct cs__patch_jitem *it = &items[i];
        memcpy(it->tmp, ".cs-patch-", 10);
        if (random_hex(it->tmp + 10, 8) != 0) {
            what = "getrandom";
            goto fail;
        }
        memcpy(it->tmp + 26, ".tmp", 5);
        char stash = '-';
        uintmax_t dev = 0, ino = 0;
        if (it->kind != 'A') {
            const struct cs_fs_path *src = it->kind == 'M' ? it->from : it->path;
            const char *leaf;
            char sname[32];
            snprintf(sname, sizeof sname, "s%zu", i);
            int dfd = open_parent(rootfd, src, &leaf);
            if (dfd < 0) {
                what = "open of a parent directory";
                goto fail;
            }
            struct stat st;
            if (fstatat(dfd, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
                close(dfd);
                what = "stat of an old file";
                goto fail;
            }
            dev = (uintmax_t)st.st_dev;
            ino = (uintmax_t)st.st_ino;
            if (linkat(dfd, leaf, j->jdfd, sname, 0) == 0) {
                stash = 'L';
            } else {
                /* Another file system (a mount inside the workspace), or links refused: keep a
                 * copy of the snapshot instead. */
                int fd = openat(j->jdfd, sname, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
                if (fd < 0 || cs__patch_write_all(fd, it->old, it->old_len) != 0 ||
                    fsync(fd) != 0) {
                    if (fd >= 0)
                        close(fd);
                    close(dfd);
                    what = "copy of an old file";
                    goto fail;
                }
                close(fd);
                stash = 'C';
            }
            close(dfd);
        }
        struct buf dirs = {0};
        size_t nd = 0;
        if (it->kind == 'A' || it->kind == 'M')
            missing_dirs(rootfd, it->path, &dirs, &nd);
        putf(&b, "%c %c %o %ju %ju %s %zu\n", it->kind, stash, (unsigned)(it->mode & 07777), dev,
             ino, it->tmp, nd);
        put_path(&b, it->path->rel, it->path->len);
        if (it->kind == 'M')
            put_path(&b, it->from->rel, it->from->len);
        else
            put_path(&b, "", 0);
        if (nd > 0)
            put(&b, dirs.p, dirs.n);
        bool doom = dirs.oom;
        free(dirs.p);
        if (doom)
            b.oom = true;
        if (b.n > MAX_JOURNAL)
            goto too_big; /* checked per item: one item adds at most a few MiB */
    }
    char hx[65];
    if (b.oom || sha256_hex(b.p, b.n, hx) != 0) {
        rc = CSW_ERROR_INTERNAL;
        what = "out of memory";
        goto fail;
    }
    putf(&b, "end sha256:%s\n", hx);
    if (b.oom) {
        rc = CSW_ERROR_INTERNAL;
        what = "out of memory";
        goto fail;
    }
    if (b.n > MAX_JOURNAL)
        goto too_big;
    /* The durability point: the intent (and the kept old files, by the directory fsync). */
    if (write_small(j->jdfd, "intent.tmp", "intent", b.p, b.n, true) != 0 ||
        fsync(j->jrootfd) != 0 || (made_jroot && fsync_root(rootfd) != 0)) {
        what = "write of the intent";
        goto fail;
    }
    free(b.p);
    cs__patch_journal_step();
    return 0;
too_big:
    /* Recovery reads no larger intent (slurp): after a crash it would stop the workspace. */
    errno = EFBIG;
    what = "its intent would pass the 64 MiB recovery reads";
fail:;
    int e = errno;
    free(b.p);
    if (j->jdfd >= 0)
        remove_dir(j->jrootfd, j->jdfd, j->name);
    cs__patch_journal_close(j);
    remove_jroot(rootfd);
    return cs_diag_set(diag, (enum csw_error)rc, "cannot write the patch journal (%s): %s", what,
                       strerror(e));
}

int cs__patch_journal_end(struct cs__patch_journal *j, enum csw_patch_status st)
{
    const char *name = csw_patch_status_names[st];
    /* An applied outcome needs no fsync: lost with the page cache (power loss), recovery finds
     * every new file in place and rolls forward to the same status. A failed one must last. */
    bool sync = st != CSW_PATCH_STATUS_APPLIED;
    return write_small(j->jdfd, "outcome.tmp", "outcome", name, strlen(name), sync) == 0 ? 0 : -1;
}

void cs__patch_journal_remove(struct cs__patch_journal *j)
{
    if (j->jdfd < 0)
        return;
    remove_dir(j->jrootfd, j->jdfd, j->name);
    remove_jroot(j->rootfd);
}

void cs__patch_journal_close(struct cs__patch_journal *j)
{
    if (j->jdfd >= 0)
        close(j->jdfd);
    if (j->jrootfd >= 0)
        close(j->jrootfd);
    j->jdfd = j->jrootfd = -1;
    if (j->active)
        active_del(j->name);
    j->active = false;
}

/* ---- reading ---- */

/*
 * What parse read holds views into the journal text, which its caller keeps for as long as the
 * struct rjournal lives (recover_one holds it for the whole recovery): no path is copied, so
 * recovery's memory is the text plus one struct ritem per item, and an item is at least
 * MIN_ITEM bytes of text. A struct cs_fs_path (4 KiB) is built on the stack where one is needed.
 */
struct rpath {
    const char *s; /* not NUL-terminated */
    size_t len;
};

struct ritem {
    char kind, stash;
    uint16_t n_dirs;
    mode_t mode;
    uintmax_t dev, ino;
    const char *tmp; /* the 30 bytes of the temporary name (not NUL-terminated) */
    struct rpath path, from;
    const char *dirs; /* the first of n_dirs "<len> <bytes>\n" fields, checked by parse */
};

_Static_assert(MAX_DIRS <= UINT16_MAX, "n_dirs is a uint16_t");
/* Recovery holds the text (n bytes) and at most n / MIN_ITEM + 1 items: under 3n + a constant. */
_Static_assert(sizeof(struct ritem) <= 2 * MIN_ITEM, "an item costs at most twice its text");

struct rjournal {
    char op[48];
    struct ritem *items;
    size_t n;
};

static void rjournal_free(struct rjournal *r)
{
    free(r->items);
}

/* The "<len> <bytes>\n" field at *p, which parse checked (an item's created directories, from
 * it->dirs, shallowest first); moves *p past it. */
static struct rpath dir_next(const char **p)
{
    const char *s = *p;
    size_t n = 0;
    while (*s != ' ')
        n = n * 10 + (size_t)(*s++ - '0');
    *p = s + 2 + n;
    return (struct rpath){s + 1, n};
}

/* it's temporary file name, NUL-terminated. */
static void tmp_name(const struct ritem *it, char out[CS__PATCH_TMP_SIZE])
{
    memcpy(out, it->tmp, 30);
    out[30] = '\0';
}

/* p as a NUL-terminated struct cs_fs_path. */
static void rpath_get(const struct rpath *p, struct cs_fs_path *out)
{
    memcpy(out->rel, p->s, p->len);
    out->rel[p->len] = '\0';
    out->len = p->len;
    out->dir_only = false;
}

struct cursor {
    const char *p, *end;
};

/* The next line (without its "\n"): 0, or -1 at the end or without a "\n". */
static int line(struct cursor *c, const char **s, size_t *n)
{
    const char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
    if (nl == NULL)
        return -1;
    *s = c->p;
    *n = (size_t)(nl - c->p);
    c->p = nl + 1;
    return 0;
}

/* "<len> <bytes>\n" into a path. The bytes must be a normalised relative path exactly as
 * cs_fs_path_normalize writes it (or empty): the deny rules are matched on these bytes, so "a//b",
 * "./a" or "a/" (which open the same file as the normalised form) would slip past a rule. */
static int path_field(struct cursor *c, struct rpath *out)
{
    char *e = NULL;
    if (c->p >= c->end || *c->p < '0' || *c->p > '9' || (c->p[0] == '0' && c->p[1] != ' '))
        return -1;
    errno = 0;
    unsigned long long len = strtoull(c->p, &e, 10);
    if (errno != 0 || e >= c->end || *e != ' ' || len > CS_FS_PATH_MAX ||
        (size_t)(c->end - (e + 1)) < len + 1 || e[1 + len] != '\n')
        return -1;
    if (len > 0) {
        struct cs_fs_path norm;
        if (cs_fs_path_normalize(e + 1, (size_t)len, &norm, NULL) != 0 || norm.dir_only ||
            norm.len != len || memcmp(norm.rel, e + 1, (size_t)len) != 0)
            return -1;
    }
    *out = (struct rpath){e + 1, (size_t)len};
    c->p = e + 2 + len;
    return 0;
}

/* A number in base at *p (digits only, at most max), then sep ('\0': the end of the string).
 * Moves *p past both. 0, or -1. */
static int number(const char **p, int base, uintmax_t max, char sep, uintmax_t *out)
{
    const char *s = *p;
    if (!(*s >= '0' && *s <= (base == 8 ? '7' : '9')) ||
        (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
        return -1; /* digits as the writer prints them: no leading zero */
    char *e = NULL;
    errno = 0;
    uintmax_t v = strtoumax(s, &e, base);
    if (errno != 0 || v > max || *e != sep)
        return -1;
    *out = v;
    *p = sep == '\0' ? e : e + 1;
    return 0;
}

/* An item's header line "K S mode dev ino tmpname ndirs": hdr is a NUL-terminated copy of the
 * journal's line at text, which it->tmp points into. */
static int item_header(const char *hdr, const char *text, struct ritem *it, size_t *nd)
{
    uintmax_t mode = 0, n = 0;
    const char *p = hdr;
    if (strlen(p) < 4 || p[1] != ' ' || p[3] != ' ')
        return -1;
    it->kind = p[0];
    it->stash = p[2];
    p += 4;
    if (number(&p, 8, 07777, ' ', &mode) != 0 || number(&p, 10, UINTMAX_MAX, ' ', &it->dev) != 0 ||
        number(&p, 10, UINTMAX_MAX, ' ', &it->ino) != 0)
        return -1;
    if (strlen(p) < 31 || p[30] != ' ' || strncmp(p, ".cs-patch-", 10) != 0 ||
        strncmp(p + 26, ".tmp", 4) != 0)
        return -1;
    /* Sixteen lowercase hex digits, as begin draws them: recovery unlinks and creates this name
     * beside the item's path, so a "/" or ".." in it would reach outside the workspace. */
    for (size_t k = 10; k < 26; k++)
        if (!((p[k] >= '0' && p[k] <= '9') || (p[k] >= 'a' && p[k] <= 'f')))
            return -1;
    it->tmp = text + (p - hdr);
    p += 31;
    if (number(&p, 10, MAX_DIRS, '\0', &n) != 0)
        return -1;
    it->mode = (mode_t)mode;
    *nd = (size_t)n;
    return 0;
}

static int parse(const char *data, size_t len, struct rjournal *r, const char **why)
{
    memset(r, 0, sizeof *r);
    const char *endl = NULL;
    for (size_t i = len; i > 0; i--) /* the start of the last line */
        if (i >= 2 && data[i - 2] == '\n') {
            endl = data + i - 1;
            break;
        }
    if (len < sizeof MAGIC_PREFIX - 1 || memcmp(data, MAGIC_PREFIX, sizeof MAGIC_PREFIX - 1) != 0) {
        *why = "it is not a patch journal";
        return -1;
    }
    if (len < sizeof MAGIC - 1 || memcmp(data, MAGIC, sizeof MAGIC - 1) != 0) {
        *why = "it was written by another version (this server reads version 1)";
        return -1;
    }
    char hx[65];
    if (endl == NULL || data[len - 1] != '\n' || (size_t)(data + len - endl) != 4 + 7 + 64 + 1 ||
        memcmp(endl, "end sha256:", 11) != 0 || sha256_hex(data, (size_t)(endl - data), hx) != 0 ||
        memcmp(endl + 11, hx, 64) != 0) {
        *why = "its checksum does not match (truncated or altered)";
        return -1;
    }
    struct cursor c = {data + sizeof MAGIC - 1, endl};
    const char *s;
    size_t n;
    *why = "it is malformed";
    if (line(&c, &s, &n) != 0 || n < 4 || n >= 3 + sizeof r->op || memcmp(s, "op ", 3) != 0)
        return -1;
    for (size_t k = 3; k < n; k++)
        if ((unsigned char)s[k] < 0x20 || s[k] == 0x7f || s[k] == '/')
            return -1; /* an operation id (a directory name): no NUL, control byte or "/" */
    memcpy(r->op, s + 3, n - 3);
    r->op[n - 3] = '\0';
    if (strcmp(r->op, "-") == 0)
        r->op[0] = '\0';
    char tmp[64];
    if (line(&c, &s, &n) != 0 || n >= sizeof tmp || memchr(s, '\0', n) != NULL)
        return -1;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    uintmax_t count = 0;
    const char *cp = tmp + 6;
    if (strncmp(tmp, "items ", 6) != 0 || number(&cp, 10, MAX_ITEMS, '\0', &count) != 0 ||
        count > (size_t)(c.end - c.p) / MIN_ITEM)
        return -1; /* a count the bytes cannot hold would only size an allocation */
    r->items = calloc(count + 1, sizeof *r->items);
    if (r->items == NULL) {
        *why = "out of memory";
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        struct ritem *it = &r->items[i];
        r->n = i + 1;
        char hdr[160];
        if (line(&c, &s, &n) != 0 || n >= sizeof hdr || memchr(s, '\0', n) != NULL)
            return -1;
        memcpy(hdr, s, n);
        hdr[n] = '\0';
        size_t nd = 0;
        if (item_header(hdr, s, it, &nd) != 0 || strchr("AUDM", it->kind) == NULL ||
            strchr("LC-", it->stash) == NULL || (it->kind == 'A') != (it->stash == '-') ||
            (nd > 0 && it->kind != 'A' && it->kind != 'M'))
            return -1;
        if (path_field(&c, &it->path) != 0 || it->path.len == 0 || path_field(&c, &it->from) != 0 ||
            (it->kind == 'M') != (it->from.len > 0))
            return -1;
        it->dirs = c.p;
        for (size_t k = 0; k < nd; k++) {
            struct rpath d;
            if (path_field(&c, &d) != 0 || d.len == 0)
                return -1;
        }
        it->n_dirs = (uint16_t)nd;
    }
    if (c.p != c.end)
        return -1;
    return 0;
}

/* What parse read, written back as begin writes it (version line to checksum line). */
static void render(const struct rjournal *r, struct buf *b)
{
    putf(b, "%sop %s\nitems %zu\n", MAGIC, r->op[0] ? r->op : "-", r->n);
    for (size_t i = 0; i < r->n; i++) {
        const struct ritem *it = &r->items[i];
        putf(b, "%c %c %o %ju %ju %.30s %u\n", it->kind, it->stash, (unsigned)it->mode, it->dev,
             it->ino, it->tmp, (unsigned)it->n_dirs);
        put_path(b, it->path.s, it->path.len);
        put_path(b, it->from.s, it->from.len);
        const char *dp = it->dirs;
        for (size_t k = 0; k < it->n_dirs; k++) {
            struct rpath d = dir_next(&dp);
            put_path(b, d.s, d.len);
        }
    }
    char hx[65];
    if (b->oom || sha256_hex(b->p, b->n, hx) != 0) {
        b->oom = true;
        return;
    }
    putf(b, "end sha256:%s\n", hx);
}

int cs__patch_journal_parse_check(const char *data, size_t len, char **canon, size_t *canon_len,
                                  const char **why)
{
    struct rjournal r;
    const char *reason = "";
    int rc = parse(data, len, &r, &reason);
    if (rc == 0 && canon != NULL) {
        struct buf b = {0};
        render(&r, &b);
        if (b.oom) {
            free(b.p);
            reason = "out of memory";
            rc = -1;
        } else {
            *canon = b.p;
            *canon_len = b.n;
        }
    }
    rjournal_free(&r);
    if (why != NULL)
        *why = rc == 0 ? "" : reason;
    return rc;
}

/* Reads a small journal file whole: 0, 1 when it does not exist, -1 on error. */
static int slurp(int dfd, const char *name, char **data, size_t *len)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 1 : -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > MAX_JOURNAL) {
        close(fd);
        return -1;
    }
    size_t cap = (size_t)st.st_size, n = 0;
    char *buf = malloc(cap + 1);
    if (buf == NULL) {
        close(fd);
        return -1;
    }
    while (n < cap) {
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

/* ---- recovery ---- */

/* open_parent for a path of the journal; *leaf points into buf. */
static int open_parent_r(int rootfd, const struct rpath *p, struct cs_fs_path *buf,
                         const char **leaf)
{
    rpath_get(p, buf);
    return open_parent(rootfd, buf, leaf);
}

static bool exists_at(int rootfd, const struct rpath *p, struct stat *st)
{
    struct cs_fs_path buf;
    const char *leaf;
    int dfd = open_parent_r(rootfd, p, &buf, &leaf);
    if (dfd < 0)
        return false;
    bool ok = fstatat(dfd, leaf, st, AT_SYMLINK_NOFOLLOW) == 0;
    close(dfd);
    return ok;
}

static void unlink_at(int rootfd, const struct rpath *p, const char *name_or_null, int flags)
{
    struct cs_fs_path buf;
    const char *leaf;
    int dfd = open_parent_r(rootfd, p, &buf, &leaf);
    if (dfd < 0)
        return;
    if (unlinkat(dfd, name_or_null ? name_or_null : leaf, flags) == 0)
        (void)fsync(dfd);
    close(dfd);
}

/* Whether item it is in its new state, by metadata only. */
static bool is_new(int rootfd, const struct ritem *it)
{
    struct stat st;
    switch (it->kind) {
    case 'A':
        return exists_at(rootfd, &it->path, &st);
    case 'U':
        return exists_at(rootfd, &it->path, &st) &&
               ((uintmax_t)st.st_dev != it->dev || (uintmax_t)st.st_ino != it->ino);
    case 'D':
        return !exists_at(rootfd, &it->path, &st);
    case 'M':
        return !exists_at(rootfd, &it->from, &st) && exists_at(rootfd, &it->path, &st);
    default:
        return false;
    }
}

/* Puts the kept old file s<i> back at p. The stash gone means it was put back already. */
static int restore(int rootfd, int jdfd, size_t i, const struct ritem *it, const struct rpath *p)
{
    char sname[32];
    snprintf(sname, sizeof sname, "s%zu", i);
    struct stat st;
    if (fstatat(jdfd, sname, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -1;
    struct cs_fs_path buf;
    const char *leaf;
    int dfd = open_parent_r(rootfd, p, &buf, &leaf);
    if (dfd < 0)
        return -1;
    char tmp[CS__PATCH_TMP_SIZE];
    tmp_name(it, tmp);
    int rc = 0;
    if (it->stash == 'L') {
        /* Renaming a hard link onto another link of the same inode does nothing: unlink after. */
        rc = renameat(jdfd, sname, dfd, leaf);
        if (rc == 0)
            (void)unlinkat(jdfd, sname, 0);
    } else {
        char *data = NULL;
        size_t len = 0;
        rc = slurp(jdfd, sname, &data, &len) == 0 ? 0 : -1;
        int fd = -1;
        if (rc == 0) {
            fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, it->mode);
            rc = fd >= 0 && fchmod(fd, it->mode) == 0 && cs__patch_write_all(fd, data, len) == 0 &&
                         fsync(fd) == 0
                     ? 0
                     : -1;
        }
        if (fd >= 0)
            close(fd);
        free(data);
        if (rc == 0)
            rc = renameat(dfd, tmp, dfd, leaf);
        if (rc == 0)
            (void)unlinkat(jdfd, sname, 0);
    }
    if (rc == 0)
        (void)fsync(dfd);
    close(dfd);
    return rc;
}

static int roll_back(int rootfd, int jdfd, const struct rjournal *r)
{
    int bad = 0;
    for (size_t i = r->n; i-- > 0;) {
        const struct ritem *it = &r->items[i];
        struct stat st;
        switch (it->kind) {
        case 'A':
        case 'M':
            if (exists_at(rootfd, &it->path, &st) && S_ISREG(st.st_mode))
                unlink_at(rootfd, &it->path, NULL, 0);
            const char *dirs[MAX_DIRS], *dp = it->dirs; /* removed deepest first */
            for (size_t k = 0; k < it->n_dirs; k++) {
                dirs[k] = dp;
                (void)dir_next(&dp);
            }
            for (size_t k = it->n_dirs; k-- > 0;) {
                dp = dirs[k];
                struct rpath d = dir_next(&dp);
                unlink_at(rootfd, &d, NULL, AT_REMOVEDIR); /* only when empty */
            }
            if (it->kind == 'M' && restore(rootfd, jdfd, i, it, &it->from) != 0)
                bad = -1;
            break;
        case 'U':
        case 'D':
            if (restore(rootfd, jdfd, i, it, &it->path) != 0)
                bad = -1;
            break;
        default:
            break;
        }
        recover_delay();
    }
    return bad;
}

static int parse_outcome(const char *s, size_t n, enum csw_patch_status *st)
{
    for (size_t k = 0; k < CSW_PATCH_STATUS__COUNT; k++) {
        const char *name = csw_patch_status_names[k];
        if (strlen(name) == n && memcmp(name, s, n) == 0) {
            *st = (enum csw_patch_status)k;
            return 0;
        }
    }
    return -1;
}

/* Recovers one journal directory. */
static int recover_one(int rootfd, int jrootfd, const char *name, struct cs_fs_deny *deny,
                       cs_patch_recovered_fn fn, void *arg, struct cs_diag *diag)
{
    int jdfd = openat(jrootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (jdfd < 0)
        return cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                           "%s/%s is not a journal directory (%s): remove it by hand",
                           CS__PATCH_JOURNAL_DIR, name, strerror(errno));
    struct rjournal r = {0};
    char *data = NULL, *od = NULL;
    size_t len = 0, olen = 0;
    int rc = 0;
    enum csw_patch_status status = CSW_PATCH_STATUS_ROLLED_BACK;
    int os = slurp(jdfd, "outcome", &od, &olen);
    if (os < 0 || (os == 0 && parse_outcome(od, olen, &status) != 0)) {
        rc = cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                         "the patch journal %s/%s/outcome is unreadable or holds no known status; "
                         "the workspace is stopped: check its files, then remove that directory "
                         "and restart",
                         CS__PATCH_JOURNAL_DIR, name);
        goto out;
    }
    char op[48];
    snprintf(op, sizeof op, "%s", strncmp(name, "tx-", 3) == 0 ? "" : name);
    if (os == 1) {
        int is = slurp(jdfd, "intent", &data, &len);
        if (is < 0) {
            rc = cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                             "cannot read the patch journal %s/%s/intent (%s); the workspace is "
                             "stopped: check its files, then remove that directory and restart",
                             CS__PATCH_JOURNAL_DIR, name, strerror(errno));
            goto out;
        }
        if (is == 0) {
            const char *why = "";
            if (parse(data, len, &r, &why) != 0) {
                rc = cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                                 "the patch journal %s/%s/intent cannot be used: %s; nothing was "
                                 "changed and the workspace is stopped: check the files it names, "
                                 "then remove that directory and restart",
                                 CS__PATCH_JOURNAL_DIR, name, why);
                goto out;
            }
            for (size_t i = 0; i < r.n; i++) {
                const struct ritem *it = &r.items[i];
                const char *rule = cs_fs_deny_path(deny, it->path.s, it->path.len);
                if (rule == NULL && it->kind == 'M')
                    rule = cs_fs_deny_path(deny, it->from.s, it->from.len);
                const char *dp = it->dirs;
                for (size_t k = 0; rule == NULL && k < it->n_dirs; k++) {
                    struct rpath d = dir_next(&dp);
                    rule = cs_fs_deny_path(deny, d.s, d.len);
                }
                if (rule != NULL) {
                    rc = cs_diag_set(
                        diag, CSW_ERROR_PATH_DENIED,
                        "the patch journal %s/%s/intent names a path the deny rule \"%s\" denies; "
                        "recovery never touches a denied path, so nothing was changed and the "
                        "workspace is stopped: restore the files by hand, remove that directory "
                        "and restart",
                        CS__PATCH_JOURNAL_DIR, name, rule);
                    goto out;
                }
            }
            if (r.op[0] != '\0')
                snprintf(op, sizeof op, "%s", r.op);
            /* The temporary files first (their names are in the journal): never renamed now. */
            for (size_t i = 0; i < r.n; i++) {
                char tmp[CS__PATCH_TMP_SIZE];
                tmp_name(&r.items[i], tmp);
                unlink_at(rootfd, &r.items[i].path, tmp, 0);
            }
            bool all_new = r.n > 0;
            for (size_t i = 0; all_new && i < r.n; i++)
                all_new = is_new(rootfd, &r.items[i]);
            if (all_new) {
                status = CSW_PATCH_STATUS_APPLIED;
            } else if (roll_back(rootfd, jdfd, &r) != 0) {
                rc = cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                                 "rolling back the patch of journal %s/%s failed (%s); the "
                                 "workspace is stopped: check the files it names and restart",
                                 CS__PATCH_JOURNAL_DIR, name, strerror(errno));
                goto out;
            }
            const char *sn = csw_patch_status_names[status];
            if (write_small(jdfd, "outcome.tmp", "outcome", sn, strlen(sn), true) != 0) {
                rc = cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                                 "cannot record the outcome in %s/%s (%s); the workspace is "
                                 "stopped until a restart",
                                 CS__PATCH_JOURNAL_DIR, name, strerror(errno));
                goto out;
            }
        }
        /* No intent: the journal died before its durability point; nothing was written. Kept for
         * the ledger's owner (a worker), it says so, or it would never be reported. */
        if (is == 1 && fn == NULL && op[0] != '\0') {
            const char *sn = csw_patch_status_names[status];
            if (write_small(jdfd, "outcome.tmp", "outcome", sn, strlen(sn), true) != 0) {
                rc = cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                                 "cannot record the outcome in %s/%s (%s); the workspace is "
                                 "stopped until a restart",
                                 CS__PATCH_JOURNAL_DIR, name, strerror(errno));
                goto out;
            }
        }
    }
    if (fn != NULL && op[0] != '\0' && fn(arg, op, status) != 0) {
        rc = cs_diag_set(diag, CSW_ERROR_INTERNAL,
                         "the patch of %s was recovered as %s but the ledger could not record "
                         "it; the journal is kept and the next start tries again",
                         op, csw_patch_status_names[status]);
        goto out;
    }
    /* Without a ledger here, an operation's journal (its outcome now written) is kept for the
     * ledger's owner, who settles it once its row holds the status (cs_patch_journal_outcomes). */
    if (fn != NULL || op[0] == '\0')
        remove_dir(jrootfd, jdfd, name);
out:
    rjournal_free(&r);
    free(data);
    free(od);
    close(jdfd);
    return rc;
}

int cs_patch_journal_recover(const char *root, struct cs_fs_deny *deny, cs_patch_recovered_fn fn,
                             void *arg, unsigned *n_recovered, struct cs_diag *diag)
{
    int rootfd = -1;
    if (n_recovered != NULL)
        *n_recovered = 0;
    int rc = cs_fs_root_open(root, &rootfd, diag);
    if (rc != 0)
        return rc;
    rc = cs__patch_journal_recover_at(rootfd, deny, fn, arg, n_recovered, diag);
    close(rootfd);
    return rc;
}

static int recover_locked(int rootfd, struct cs_fs_deny *deny, cs_patch_recovered_fn fn, void *arg,
                          unsigned *n_recovered, struct cs_diag *diag)
{
    int jrootfd =
        openat(rootfd, CS__PATCH_JOURNAL_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (jrootfd < 0) {
        if (errno == ENOENT)
            return 0;
        return cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                           "cannot open the patch journal directory %s: %s; remove it by hand "
                           "if it is not a directory",
                           CS__PATCH_JOURNAL_DIR, strerror(errno));
    }
    /* The names first, then each journal: one kept for the ledger's owner stays listed. */
    char(*names)[256] = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    int fd = openat(jrootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        rc = cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                         "cannot list the patch journal directory %s: %s", CS__PATCH_JOURNAL_DIR,
                         strerror(errno));
        if (fd >= 0)
            close(fd);
        goto out;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        /* Only names a journal gets (an operation id, or "tx-" and random hex) are journals;
         * anything else was put here by a patch or a command (the directory is in the
         * workspace) and is not ours to read, remove or stop the workspace for. */
        if (strncmp(e->d_name, "op-", 3) != 0 && strncmp(e->d_name, "tx-", 3) != 0)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            void *nn = nc <= MAX_ITEMS ? realloc(names, nc * sizeof *names) : NULL;
            if (nn == NULL) {
                rc = cs_diag_set(diag, CSW_ERROR_INTERNAL,
                                 "too many patch journals under %s (or out of memory)",
                                 CS__PATCH_JOURNAL_DIR);
                break;
            }
            names = nn;
            cap = nc;
        }
        snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (active_has(names[i]))
            continue; /* a transaction of this process, in progress */
        rc = recover_one(rootfd, jrootfd, names[i], deny, fn, arg, diag);
        if (rc == 0 && n_recovered != NULL)
            (*n_recovered)++;
    }
out:
    free(names);
    close(jrootfd);
    if (rc == 0)
        remove_jroot(rootfd);
    return rc;
}

/* Whether op_id can name a journal directory (never ".", "..", a path or an empty name). */
static bool journal_name_ok(const char *op_id)
{
    size_t n = op_id != NULL ? strlen(op_id) : 0;
    return n > 0 && n < 64 && op_id[0] != '.' && strchr(op_id, '/') == NULL;
}

/* Removes op_id's journal when its outcome is recorded; one without is a crash for recovery. */
static void settle_at(int rootfd, int jrootfd, const char *op_id)
{
    int jdfd = openat(jrootfd, op_id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (jdfd >= 0 && fstatat(jdfd, "outcome", &st, AT_SYMLINK_NOFOLLOW) == 0) {
        remove_dir(jrootfd, jdfd, op_id);
        remove_jroot(rootfd);
    }
    if (jdfd >= 0)
        close(jdfd);
}

int cs__patch_journal_recover_at(int rootfd, struct cs_fs_deny *deny, cs_patch_recovered_fn fn,
                                 void *arg, unsigned *n_recovered, struct cs_diag *diag)
{
    pthread_mutex_lock(&recover_mu);
    int rc = recover_locked(rootfd, deny, fn, arg, n_recovered, diag);
    pthread_mutex_unlock(&recover_mu);
    return rc;
}

void cs_patch_journal_settle(const char *root, const char *op_id)
{
    int rootfd = -1;
    if (!journal_name_ok(op_id) || cs_fs_root_open(root, &rootfd, NULL) != 0)
        return;
    int jrootfd =
        openat(rootfd, CS__PATCH_JOURNAL_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (jrootfd >= 0) {
        pthread_mutex_lock(&recover_mu);
        settle_at(rootfd, jrootfd, op_id);
        pthread_mutex_unlock(&recover_mu);
        close(jrootfd);
    }
    close(rootfd);
}

int cs_patch_journal_outcomes(const char *root, struct cs_fs_deny *deny, const char *const *settle,
                              size_t n_settle, const char *const *ask, size_t n_ask,
                              cs_patch_recovered_fn fn, void *arg, struct cs_diag *diag)
{
    int rootfd = -1;
    int rc = cs_fs_root_open(root, &rootfd, diag);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&recover_mu);
    int jrootfd =
        openat(rootfd, CS__PATCH_JOURNAL_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    for (size_t i = 0; jrootfd >= 0 && i < n_settle; i++)
        if (journal_name_ok(settle[i]))
            settle_at(rootfd, jrootfd, settle[i]);
    if (jrootfd >= 0)
        close(jrootfd);
    /* Every unfinished journal gets its outcome (and is kept: there is no ledger here). */
    rc = recover_locked(rootfd, deny, NULL, NULL, NULL, diag);
    jrootfd = rc == 0 ? openat(rootfd, CS__PATCH_JOURNAL_DIR,
                               O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                      : -1;
    /* Every journal holding its outcome, asked or not: a settle lost with its gateway leaves
     * one whose row is recorded, and only its report makes the gateway settle it again. */
    int dfd = jrootfd >= 0 ? openat(jrootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (d == NULL && dfd >= 0)
        close(dfd);
    struct dirent *e;
    while (rc == 0 && d != NULL && (e = readdir(d)) != NULL) {
        if (!journal_name_ok(e->d_name) || strncmp(e->d_name, "tx-", 3) == 0 ||
            active_has(e->d_name))
            continue;
        int jdfd = openat(jrootfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        char *od = NULL;
        size_t olen = 0;
        enum csw_patch_status st;
        if (jdfd >= 0 && slurp(jdfd, "outcome", &od, &olen) == 0 &&
            parse_outcome(od, olen, &st) == 0 && st != CSW_PATCH_STATUS_UNKNOWN &&
            fn(arg, e->d_name, st) != 0)
            rc = cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory listing patch outcomes");
        free(od);
        if (jdfd >= 0)
            close(jdfd);
    }
    if (d != NULL)
        closedir(d);
    /* An asked id no journal names: nothing of it was written (the caller left out those in
     * flight). */
    for (size_t i = 0; rc == 0 && i < n_ask; i++) {
        struct stat st;
        if (journal_name_ok(ask[i]) &&
            (jrootfd < 0 || fstatat(jrootfd, ask[i], &st, AT_SYMLINK_NOFOLLOW) != 0) &&
            fn(arg, ask[i], CSW_PATCH_STATUS_UNKNOWN) != 0)
            rc = cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory listing patch outcomes");
    }
    pthread_mutex_unlock(&recover_mu);
    if (jrootfd >= 0)
        close(jrootfd);
    close(rootfd);
    return rc;
}
