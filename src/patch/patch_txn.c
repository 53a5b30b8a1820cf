/*
 * patch_txn: apply_patch's transaction (see patch_txn.h and docs/patch-format.md, "Transactions").
 *
 * Order: fingerprint, mint the ledger row (a replay or a key conflict stops here), check every
 * path the request names (expected_versions' keys, the parsed patch's) against the deny rules
 * (PATH_DENIED before any file is looked at, contract section 7), check expected_versions, then
 * the parse error if any, normalise and preflight every operation (reading every old content
 * into memory: the snapshots), then for check_only finish as "checked"; otherwise write, verify
 * and roll back on failure, and finish the row with the result. A rejection before any write
 * finishes the row as "rejected" without a stored result and returns the error with the row's id.
 *
 * Trust: the patch, paths, versions and key are the client's. Paths are normalised with the fs
 * rules; every open is cs_fs_open_beneath (no symlink followed, leaf or ancestor), and every
 * create, rename and unlink is done relative to a directory fd that open returned, on a single
 * name component.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "patch_txn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"
#include "patch.h"
#include "patch_journal.h"

#define VERSION_SIZE 72 /* "sha256:" + 64 hex + NUL */

struct item {
    enum csw_patch_change_kind kind;
    struct cs_fs_path path; /* the target; for a move, the destination */
    struct cs_fs_path from; /* move: the source */
    const struct cs_patch_op *op;
    char *old; /* update, delete, move: the old content (the snapshot) */
    size_t old_len;
    mode_t mode; /* the old file's permission bits; 0644 for an add */
    char before[VERSION_SIZE];
    char *new_content; /* add, update, move: the new content */
    size_t new_len;
    char after[VERSION_SIZE];
    char tmp[CS__PATCH_TMP_SIZE]; /* the temporary file name the journal chose for the write */
};

enum undo_kind {
    UNDO_UNLINK,  /* a file we created: remove it */
    UNDO_RESTORE, /* a file we replaced or removed: write the snapshot back */
    UNDO_RMDIR,   /* a directory we created: remove it */
};

struct undo {
    enum undo_kind kind;
    struct cs_fs_path *p; /* owned copy */
    const char *data;     /* UNDO_RESTORE: the snapshot (borrowed from an item) */
    size_t len;
    mode_t mode;
};

struct txn {
    int rootfd;
    struct cs_fs_deny *deny; /* the workspace's deny rules and identity memory; NULL: none */
    struct item *items;
    size_t n_items;
    struct undo *undo;
    size_t n_undo, undo_cap;
    unsigned n_renames;  /* test hook: renames done by the writes step so far */
    unsigned n_restores; /* test hook: snapshot restores tried by the rollback so far */
};

/*
 * TEST-ONLY HOOKS (docs/patch-format.md, "Test hooks"). They exist so that the end-to-end tests
 * can kill the server in the middle of a transaction and make a write or a restore fail; they
 * must never be set in production. The environment is read once, on the first transaction that
 * writes; when neither variable is set the hooks cost one pthread_once and a branch per rename.
 *
 *   CODESPACE_TEST_PATCH_STEP_DELAY_MS=N   sleep N ms after each file of the writes step is
 *                                          renamed into place (so a test can SIGKILL mid-way).
 *   CODESPACE_TEST_PATCH_PREFLIGHT_DELAY_MS=N
 *                                          sleep N ms (in 10 ms slices that poll the cancel
 *                                          flag) before each file of the preflight is read (so a
 *                                          test can hit the time limit before any write).
 *   CODESPACE_TEST_PATCH_HOLD=FILE        while FILE (an absolute path) exists, the preflight of a
 *                                          file whose path starts with "hold/" waits (10 ms
 *                                          slices that poll the cancel flag, 120 s at most), so a
 *                                          test holds the lease for exactly as long as it wants.
 *   CODESPACE_TEST_PATCH_FAIL_AT=rename:N[,restore:M]
 *                                          the Nth rename of the writes step (1-based, per
 *                                          transaction) fails with EIO; the Mth snapshot restore
 *                                          of the rollback (in rollback order) fails with EIO.
 * A malformed value is ignored (the hook stays off).
 */
static struct {
    pthread_once_t once;
    unsigned delay_ms;
    unsigned preflight_delay_ms;
    unsigned fail_rename; /* 0: off */
    unsigned fail_restore;
    const char *hold; /* CODESPACE_TEST_PATCH_HOLD, or NULL */
    bool active;
} test_hook = {.once = PTHREAD_ONCE_INIT};

static unsigned hook_number(const char *s, const char **end)
{
    char *e = NULL;
    errno = 0;
    unsigned long v = strtoul(s, &e, 10);
    if (e == s || errno != 0 || v == 0 || v > 3600000ul) {
        *end = NULL;
        return 0;
    }
    *end = e;
    return (unsigned)v;
}

static void test_hook_read(void)
{
    const char *d = getenv("CODESPACE_TEST_PATCH_STEP_DELAY_MS");
    const char *end;
    if (d != NULL) {
        unsigned v = hook_number(d, &end);
        if (end != NULL && *end == '\0')
            test_hook.delay_ms = v;
    }
    const char *pd = getenv("CODESPACE_TEST_PATCH_PREFLIGHT_DELAY_MS");
    if (pd != NULL) {
        unsigned v = hook_number(pd, &end);
        if (end != NULL && *end == '\0')
            test_hook.preflight_delay_ms = v;
    }
    const char *f = getenv("CODESPACE_TEST_PATCH_FAIL_AT");
    while (f != NULL && *f != '\0') {
        unsigned *slot;
        if (strncmp(f, "rename:", 7) == 0)
            slot = &test_hook.fail_rename, f += 7;
        else if (strncmp(f, "restore:", 8) == 0)
            slot = &test_hook.fail_restore, f += 8;
        else
            break;
        unsigned v = hook_number(f, &end);
        if (end == NULL || (*end != '\0' && *end != ','))
            break;
        *slot = v;
        f = *end == ',' ? end + 1 : end;
    }
    const char *h = getenv("CODESPACE_TEST_PATCH_HOLD");
    if (h != NULL && h[0] == '/')
        test_hook.hold = h;
    test_hook.active = test_hook.delay_ms || test_hook.preflight_delay_ms ||
                       test_hook.fail_rename || test_hook.fail_restore || test_hook.hold;
}

static bool test_hook_on(void)
{
    (void)pthread_once(&test_hook.once, test_hook_read);
    return test_hook.active;
}

/* Test hook: the pause before a file of the preflight, cut short by cancel. */
static void test_hook_preflight_delay(const struct cs_cancel *cancel)
{
    if (!test_hook_on() || test_hook.preflight_delay_ms == 0)
        return;
    for (unsigned left = test_hook.preflight_delay_ms; left > 0 && !cs_cancel_requested(cancel);) {
        unsigned step = left < 10 ? left : 10;
        struct timespec ts = {0, (long)step * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        left -= step;
    }
}

/* Test hook: the preflight of a file under "hold/" waits while the hold file exists. */
static void test_hook_hold(const char *rel, const struct cs_cancel *cancel)
{
    if (!test_hook_on() || test_hook.hold == NULL || strncmp(rel, "hold/", 5) != 0)
        return;
    for (unsigned n = 0; n < 12000 && !cs_cancel_requested(cancel); n++) {
        if (access(test_hook.hold, F_OK) != 0)
            return;
        struct timespec ts = {0, 10 * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
}

/* Test hook: whether this rename (restore: of a snapshot in the rollback) must fail. */
static bool test_hook_fail(struct txn *t, bool restore)
{
    if (!test_hook_on())
        return false;
    if (restore)
        return test_hook.fail_restore != 0 && ++t->n_restores == test_hook.fail_restore;
    return test_hook.fail_rename != 0 && ++t->n_renames == test_hook.fail_rename;
}

/* Test hook: the pause after a file of the writes step is renamed into place. */
static void test_hook_delay(bool restore)
{
    if (restore || !test_hook_on() || test_hook.delay_ms == 0)
        return;
    struct timespec ts = {(time_t)(test_hook.delay_ms / 1000),
                          (long)(test_hook.delay_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The length of the first n bytes of the valid UTF-8 text s cut to at most max bytes, never
 * inside a sequence (every string quoted here came from JSON, so it is valid UTF-8). */
static size_t utf8_cut(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    size_t i = max;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--; /* s[i] now starts a sequence (or i is 0): cut before it */
    return i;
}

static int clip(const char *s, size_t n, size_t max)
{
    return (int)utf8_cut(s, n, max);
}

/* ---- hashing and reading ---- */

static int hash(const char *data, size_t len, char out[VERSION_SIZE])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    if (EVP_Digest(data, len, md, &mdn, EVP_sha256(), NULL) != 1 || mdn != 32)
        return -1;
    static const char hx[] = "0123456789abcdef";
    memcpy(out, "sha256:", 7);
    for (size_t i = 0; i < 32; i++) {
        out[7 + 2 * i] = hx[md[i] >> 4];
        out[8 + 2 * i] = hx[md[i] & 15];
    }
    out[71] = '\0';
    return 0;
}

/* Reads the regular file p whole (at most CS_PATCH_TXN_MAX_FILE bytes) with its mode and
 * version. *data is a new NUL-terminated buffer. */
static int read_file(int rootfd, struct cs_fs_deny *deny, const struct cs_fs_path *p, char **data,
                     size_t *len, mode_t *mode, char ver[VERSION_SIZE], struct cs_diag *diag)
{
    int fd = -1;
    struct stat st;
    int rc = cs_fs_open_beneath(rootfd, p, CS_FS_WANT_FILE, &fd, &st, diag);
    if (rc != 0)
        return rc;
    if (cs_fs_deny_known(deny, fd, NULL, &st)) { /* a denied file renamed or linked by a command */
        cs_diag_set(diag, CSW_ERROR_PATH_DENIED,
                    "%s is denied: it is a file the workspace's deny rules matched under "
                    "another name",
                    p->rel);
        close(fd);
        return CSW_ERROR_PATH_DENIED;
    }
    char *buf = NULL;
    size_t n = 0, room = (size_t)st.st_size + 1;
    if ((uint64_t)st.st_size > CS_PATCH_TXN_MAX_FILE) {
        cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                    "%s is larger than %u bytes, the most a patch handles", p->rel,
                    CS_PATCH_TXN_MAX_FILE);
        rc = CSW_ERROR_FILE_OPERATION_FAILED;
        goto out;
    }
    buf = malloc(room + 1);
    if (buf == NULL) {
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory reading %s", p->rel);
        rc = CSW_ERROR_INTERNAL;
        goto out;
    }
    for (;;) {
        if (n == room) { /* the file grew since fstat: read on, up to the cap */
            if (room > CS_PATCH_TXN_MAX_FILE) {
                cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                            "%s is larger than %u bytes, the most a patch handles", p->rel,
                            CS_PATCH_TXN_MAX_FILE);
                rc = CSW_ERROR_FILE_OPERATION_FAILED;
                goto out;
            }
            char *nb = realloc(buf, room * 2 + 1);
            if (nb == NULL) {
                cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory reading %s", p->rel);
                rc = CSW_ERROR_INTERNAL;
                goto out;
            }
            buf = nb;
            room *= 2;
        }
        ssize_t got = read(fd, buf + n, room - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED, "cannot read %s: %s", p->rel,
                        strerror(errno));
            rc = CSW_ERROR_FILE_OPERATION_FAILED;
            goto out;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    if (hash(buf, n, ver) != 0) {
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "SHA-256 failed hashing %s", p->rel);
        rc = CSW_ERROR_INTERNAL;
        goto out;
    }
    *data = buf;
    buf = NULL;
    *len = n;
    *mode = st.st_mode & 07777;
out:
    free(buf);
    close(fd);
    return rc;
}

/* ---- paths ---- */

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

/* Opens p's parent directory beneath the root (no symlink followed). */
static int open_parent(int rootfd, const struct cs_fs_path *p, int *dfd, const char **leaf,
                       struct cs_diag *diag)
{
    struct cs_fs_path parent;
    struct stat st;
    split(p, &parent, leaf);
    return cs_fs_open_beneath(rootfd, &parent, CS_FS_WANT_DIR, dfd, &st, diag);
}

/*
 * What is at p, without following anything: 0 when something that may be replaced or reported
 * as existing is there (*is_dir says whether it is a directory), CSW_ERROR_FILE_NOT_FOUND when
 * nothing is (an ancestor may be missing too), or the error of an ancestor or of the leaf
 * (symlink, special file).
 */
static int probe(int rootfd, const struct cs_fs_path *p, bool *is_dir, struct cs_diag *diag)
{
    int dfd = -1;
    const char *leaf;
    int rc = open_parent(rootfd, p, &dfd, &leaf, diag);
    if (rc != 0)
        return rc;
    struct stat st;
    if (fstatat(dfd, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        int e = errno;
        close(dfd);
        if (e == ENOENT) {
            cs_diag_set(diag, CSW_ERROR_FILE_NOT_FOUND, "%s does not exist", p->rel);
            return CSW_ERROR_FILE_NOT_FOUND;
        }
        cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED, "cannot inspect %s: %s", p->rel,
                    strerror(e));
        return CSW_ERROR_FILE_OPERATION_FAILED;
    }
    close(dfd);
    switch (st.st_mode & S_IFMT) {
    case S_IFREG:
        *is_dir = false;
        return 0;
    case S_IFDIR:
        *is_dir = true;
        return 0;
    case S_IFLNK:
        cs_diag_set(diag, CSW_ERROR_SYMLINK_REJECTED,
                    "%s is a symlink; symlinks are never followed", p->rel);
        return CSW_ERROR_SYMLINK_REJECTED;
    default:
        cs_diag_set(diag, CSW_ERROR_SPECIAL_FILE_REJECTED,
                    "%s is a special file; only regular files are patched", p->rel);
        return CSW_ERROR_SPECIAL_FILE_REJECTED;
    }
}

/* Normalises a patch path: fs rules, and it must name a file (no trailing "/", not the root). */
static int norm(const struct cs_fs_deny *deny, const char *s, size_t n, struct cs_fs_path *out,
                struct cs_diag *diag)
{
    int rc = cs_fs_path_normalize(s, n, out, diag);
    if (rc == 0) /* PATH_DENIED before any other check of the path or the file */
        rc = cs__fs_deny_check(deny, out, diag);
    if (rc != 0)
        return rc;
    if (out->len == 0 || out->dir_only) {
        return cs_diag_set(
            diag, out->len == 0 ? CSW_ERROR_PATH_ESCAPE : CSW_ERROR_PATH_NOT_DIRECTORY,
            "%.*s names a directory; a patch path must name a file", clip(s, n, 200), s);
    }
    return 0;
}

/* ---- writes ---- */

static int push_undo(struct txn *t, enum undo_kind kind, const struct cs_fs_path *p,
                     const char *data, size_t len, mode_t mode)
{
    if (t->n_undo == t->undo_cap) {
        size_t nc = t->undo_cap ? t->undo_cap * 2 : 8;
        struct undo *nu = realloc(t->undo, nc * sizeof *nu);
        if (nu == NULL)
            return -1;
        t->undo = nu;
        t->undo_cap = nc;
    }
    struct cs_fs_path *copy = malloc(sizeof *copy);
    if (copy == NULL)
        return -1;
    *copy = *p;
    t->undo[t->n_undo++] = (struct undo){kind, copy, data, len, mode};
    return 0;
}

/* Drops the last journal entry (its action did not happen). */
static void pop_undo(struct txn *t)
{
    t->n_undo--;
    free(t->undo[t->n_undo].p);
}

int cs__patch_write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, data, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        data += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Leftover temporary files (invariant R11): a write interrupted by a crash (kill -9 of the
 * gateway or worker between the temporary file's creation and its rename) leaves a
 * .cs-patch-<16 hex>.tmp beside its target. Before writing into a directory, the engine removes
 * those it finds there: exactly that name shape, a regular file (never followed), owned by our
 * uid, last modified at least TEMP_STALE_SEC ago (so another server's write in progress in the
 * same directory is left alone). At most TEMP_SWEEP_MAX entries of the directory are looked at.
 * Best effort: a failure changes nothing in the patch. */
#define TEMP_STALE_SEC 60
#define TEMP_SWEEP_MAX 4096

static bool temp_name(const char *s)
{
    static const char pre[] = ".cs-patch-", suf[] = ".tmp";
    if (strlen(s) != sizeof pre - 1 + 16 + sizeof suf - 1 || strncmp(s, pre, sizeof pre - 1) != 0 ||
        strcmp(s + sizeof pre - 1 + 16, suf) != 0)
        return false;
    for (size_t i = sizeof pre - 1; i < sizeof pre - 1 + 16; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static void sweep_temps(int dfd)
{
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    time_t now = time(NULL);
    struct dirent *e;
    for (int seen = 0; seen < TEMP_SWEEP_MAX && (e = readdir(d)); seen++) {
        struct stat st;
        if (!temp_name(e->d_name) || fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode) || st.st_uid != geteuid() || now - st.st_mtime < TEMP_STALE_SEC)
            continue;
        (void)unlinkat(dfd, e->d_name, 0);
    }
    closedir(d);
}

/* Writes data to a temporary file beside p (mode mode), fsyncs it and renames it over p (or, with
 * noreplace, onto p only while nothing is there: an add or a move target that appeared since the
 * preflight is not clobbered), then fsyncs the directory. */
static int write_file(struct txn *t, const struct cs_fs_path *p, const char *data, size_t len,
                      mode_t mode, bool noreplace, bool restore, const char *tmpname,
                      struct cs_diag *diag)
{
    int rootfd = t->rootfd;
    int dfd = -1, fd = -1;
    const char *leaf;
    char tmp[96];
    int rc = open_parent(rootfd, p, &dfd, &leaf, diag);
    if (rc != 0)
        return rc;
    sweep_temps(dfd);
    unsigned char rnd[8];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED, "getrandom failed: %s", strerror(errno));
        rc = CSW_ERROR_FILE_OPERATION_FAILED;
        goto out;
    }
    snprintf(tmp, sizeof tmp, ".cs-patch-%02x%02x%02x%02x%02x%02x%02x%02x.tmp", rnd[0], rnd[1],
             rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    if (tmpname != NULL) /* the name the crash journal recorded, so recovery can remove it */
        snprintf(tmp, sizeof tmp, "%s", tmpname);
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0 || fchmod(fd, mode) != 0 || cs__patch_write_all(fd, data, len) != 0 ||
        fsync(fd) != 0) {
        cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                    "cannot write a temporary file for %s: %s", p->rel, strerror(errno));
        rc = CSW_ERROR_FILE_OPERATION_FAILED;
        if (fd >= 0)
            unlinkat(dfd, tmp, 0);
        goto out;
    }
    int rr = test_hook_fail(t, restore)
                 ? (errno = EIO, -1)
                 : renameat2(dfd, tmp, dfd, leaf, noreplace ? RENAME_NOREPLACE : 0);
    if (rr != 0) {
        int e = errno;
        unlinkat(dfd, tmp, 0);
        if (e == EEXIST) {
            cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                        "%s appeared while the patch was being applied", p->rel);
            rc = CSW_ERROR_FILE_OPERATION_FAILED;
            goto out;
        }
        cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                    "cannot rename the temporary file onto %s: %s", p->rel, strerror(e));
        rc = CSW_ERROR_FILE_OPERATION_FAILED;
        goto out;
    }
    (void)fsync(dfd); /* the rename's durability; the data is already synced */
    test_hook_delay(restore);
    if (!restore)
        cs__patch_journal_step();
out:
    if (fd >= 0)
        close(fd);
    close(dfd);
    return rc;
}

static int remove_at(int rootfd, const struct cs_fs_path *p, bool dir, struct cs_diag *diag)
{
    int dfd = -1;
    const char *leaf;
    int rc = open_parent(rootfd, p, &dfd, &leaf, diag);
    if (rc != 0)
        return rc;
    if (unlinkat(dfd, leaf, dir ? AT_REMOVEDIR : 0) != 0) {
        cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED, "cannot remove %s: %s", p->rel,
                    strerror(errno));
        rc = CSW_ERROR_FILE_OPERATION_FAILED;
    } else {
        (void)fsync(dfd);
        cs__patch_journal_step();
    }
    close(dfd);
    return rc;
}

/* Creates the missing parent directories of p (0755), each with mkdirat in its opened parent,
 * and journals them. */
static int make_parents(struct txn *t, const struct cs_fs_path *p, struct cs_diag *diag)
{
    struct cs_fs_path pre;
    for (size_t i = 0; i < p->len; i++) {
        if (p->rel[i] != '/')
            continue;
        memcpy(pre.rel, p->rel, i);
        pre.rel[i] = '\0';
        pre.len = i;
        pre.dir_only = false;
        int fd = -1;
        struct stat st;
        int rc = cs_fs_open_beneath(t->rootfd, &pre, CS_FS_WANT_DIR, &fd, &st, diag);
        if (rc == 0) {
            close(fd);
            continue;
        }
        if (rc != CSW_ERROR_FILE_NOT_FOUND)
            return rc;
        int dfd = -1;
        const char *leaf;
        rc = open_parent(t->rootfd, &pre, &dfd, &leaf, diag);
        if (rc != 0)
            return rc;
        if (push_undo(t, UNDO_RMDIR, &pre, NULL, 0, 0) != 0) {
            cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory");
            close(dfd);
            return CSW_ERROR_INTERNAL;
        }
        if (mkdirat(dfd, leaf, 0755) != 0) {
            cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED, "cannot create the directory %s: %s",
                        pre.rel, strerror(errno));
            close(dfd);
            pop_undo(t);
            return CSW_ERROR_FILE_OPERATION_FAILED;
        }
        close(dfd);
        cs__patch_journal_step();
    }
    return 0;
}

/* Whether p is a regular file holding exactly data (len bytes) with permissions mode: a snapshot
 * that needs no restore (the action journaled for it failed before it changed anything). */
static bool holds(int rootfd, const struct cs_fs_path *p, const char *data, size_t len, mode_t mode)
{
    char ver[VERSION_SIZE];
    char *cur = NULL;
    size_t n = 0;
    mode_t m = 0;
    if (read_file(rootfd, NULL, p, &cur, &n, &m, ver, NULL) != 0)
        return false;
    bool same = n == len && m == (mode & 07777) && memcmp(cur, data, len) == 0;
    free(cur);
    return same;
}

/* Undoes the journal in reverse. Returns 0 when everything was restored. A file that already
 * holds its snapshot is left alone, so a failed write to a file that cannot be written (and was
 * therefore not changed) is not reported as a failed restore. */
static int rollback(struct txn *t)
{
    int bad = 0;
    for (size_t i = t->n_undo; i-- > 0;) {
        const struct undo *u = &t->undo[i];
        int rc = 0;
        switch (u->kind) {
        case UNDO_UNLINK:
            rc = remove_at(t->rootfd, u->p, false, NULL);
            break;
        case UNDO_RESTORE:
            if (!holds(t->rootfd, u->p, u->data, u->len, u->mode))
                rc = write_file(t, u->p, u->data, u->len, u->mode, false, true, NULL, NULL);
            break;
        case UNDO_RMDIR:
            rc = remove_at(t->rootfd, u->p, true, NULL);
            break;
        }
        if (rc != 0)
            bad = -1;
    }
    return bad;
}

/*
 * Runs the writes of every item. Each action is journaled before it runs, so an action that may
 * have happened is always undone: undoing one that did not is harmless (the rollback leaves a
 * file that holds its snapshot alone, so it never writes to an unchanged file).
 */
static int execute(struct txn *t, struct cs_diag *diag)
{
    for (size_t i = 0; i < t->n_items; i++) {
        struct item *it = &t->items[i];
        int rc = 0;
        switch (it->kind) {
        case CSW_PATCH_CHANGE_KIND_ADD:
        case CSW_PATCH_CHANGE_KIND_MOVE:
            rc = make_parents(t, &it->path, diag);
            if (rc != 0)
                return rc;
            if (push_undo(t, UNDO_UNLINK, &it->path, NULL, 0, 0) != 0)
                goto oom;
            rc = write_file(t, &it->path, it->new_content, it->new_len, it->mode, true, false,
                            it->tmp, diag);
            if (rc != 0) {
                pop_undo(t); /* nothing was renamed onto the path: it is not ours to remove */
                return rc;
            }
            if (it->kind == CSW_PATCH_CHANGE_KIND_MOVE) {
                if (push_undo(t, UNDO_RESTORE, &it->from, it->old, it->old_len, it->mode) != 0)
                    goto oom;
                rc = remove_at(t->rootfd, &it->from, false, diag);
                if (rc != 0)
                    return rc;
            }
            break;
        case CSW_PATCH_CHANGE_KIND_UPDATE:
            if (push_undo(t, UNDO_RESTORE, &it->path, it->old, it->old_len, it->mode) != 0)
                goto oom;
            rc = write_file(t, &it->path, it->new_content, it->new_len, it->mode, false, false,
                            it->tmp, diag);
            if (rc != 0)
                return rc;
            break;
        case CSW_PATCH_CHANGE_KIND_DELETE:
            if (push_undo(t, UNDO_RESTORE, &it->path, it->old, it->old_len, it->mode) != 0)
                goto oom;
            rc = remove_at(t->rootfd, &it->path, false, diag);
            if (rc != 0)
                return rc;
            break;
        }
    }
    return 0;
oom:
    cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory journaling the writes");
    return CSW_ERROR_INTERNAL;
}

/* Reads back every written file and checks its hash; checks every removed source is gone. */
static int verify(struct txn *t, struct cs_diag *diag)
{
    for (size_t i = 0; i < t->n_items; i++) {
        const struct item *it = &t->items[i];
        bool is_dir;
        if (it->kind == CSW_PATCH_CHANGE_KIND_DELETE) {
            if (probe(t->rootfd, &it->path, &is_dir, diag) != CSW_ERROR_FILE_NOT_FOUND) {
                cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                            "verification: %s still exists after its delete", it->path.rel);
                return CSW_ERROR_FILE_OPERATION_FAILED;
            }
            continue;
        }
        if (it->kind == CSW_PATCH_CHANGE_KIND_MOVE &&
            probe(t->rootfd, &it->from, &is_dir, diag) != CSW_ERROR_FILE_NOT_FOUND) {
            cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                        "verification: %s still exists after its move", it->from.rel);
            return CSW_ERROR_FILE_OPERATION_FAILED;
        }
        char *data = NULL;
        size_t len;
        mode_t mode;
        char ver[VERSION_SIZE];
        int rc = read_file(t->rootfd, NULL, &it->path, &data, &len, &mode, ver, diag);
        free(data);
        if (rc != 0)
            return rc;
        if (strcmp(ver, it->after) != 0) {
            cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                        "verification: %s on disk is %s, not the written %s", it->path.rel, ver,
                        it->after);
            return CSW_ERROR_FILE_OPERATION_FAILED;
        }
    }
    return 0;
}

/* ---- preflight ---- */

/* The cancel flag, polled between files until the writes begin (never after: a patch that has
 * begun writing runs to its end, so that its result, and the ledger row, tell the truth). */
static int cancelled(const struct cs_cancel *cancel, struct cs_diag *diag)
{
    if (!cs_cancel_requested(cancel))
        return 0;
    cs_diag_set(diag, CSW_ERROR_TIMEOUT, "the patch was cancelled before any write");
    return CSW_ERROR_TIMEOUT;
}

static int check_versions(int rootfd, struct cs_fs_deny *deny,
                          const struct csw_mcp_apply_patch_input *in,
                          const struct cs_cancel *cancel, struct cs_diag *diag)
{
    if (!in->has_expected_versions)
        return 0;
    for (size_t i = 0; i < in->expected_versions.n; i++) {
        if (cancelled(cancel, diag) != 0)
            return CSW_ERROR_TIMEOUT;
        const struct csw_mcp_apply_patch_input_expected_versions_entry *e =
            &in->expected_versions.v[i];
        struct cs_fs_path p;
        int rc = norm(deny, e->key.s, e->key.n, &p, diag); /* denied: deny_first refused it */
        if (rc != 0)
            return rc;
        bool want_absent = e->value.n == 6 && memcmp(e->value.s, "absent", 6) == 0;
        bool is_dir = false;
        rc = probe(rootfd, &p, &is_dir, diag);
        if (rc == CSW_ERROR_FILE_NOT_FOUND) {
            if (want_absent)
                continue;
            cs_diag_set(diag, CSW_ERROR_VERSION_CONFLICT,
                        "expected_versions: %s does not exist, expected %.*s", p.rel,
                        clip(e->value.s, e->value.n, 100), e->value.s);
            return CSW_ERROR_VERSION_CONFLICT;
        }
        if (rc != 0)
            return rc;
        if (want_absent) {
            cs_diag_set(diag, CSW_ERROR_VERSION_CONFLICT,
                        "expected_versions: %s exists, expected absent", p.rel);
            return CSW_ERROR_VERSION_CONFLICT;
        }
        char *data = NULL;
        size_t len;
        mode_t mode;
        char ver[VERSION_SIZE];
        rc = read_file(rootfd, deny, &p, &data, &len, &mode, ver, diag);
        free(data);
        if (rc != 0)
            return rc;
        if (e->value.n != strlen(ver) || memcmp(e->value.s, ver, e->value.n) != 0) {
            cs_diag_set(diag, CSW_ERROR_VERSION_CONFLICT,
                        "expected_versions: %s is %s, expected %.*s", p.rel, ver,
                        clip(e->value.s, e->value.n, 100), e->value.s);
            return CSW_ERROR_VERSION_CONFLICT;
        }
    }
    return 0;
}

/* The destination of an add or a move must not exist (its parents may be missing). */
static int check_absent(int rootfd, const struct cs_fs_path *p, enum csw_error exists_code,
                        struct cs_diag *diag)
{
    bool is_dir;
    int rc = probe(rootfd, p, &is_dir, diag);
    if (rc == CSW_ERROR_FILE_NOT_FOUND)
        return 0;
    if (rc != 0)
        return rc;
    cs_diag_set(diag, exists_code, "%s already exists%s", p->rel, is_dir ? " (a directory)" : "");
    return (int)exists_code;
}

static int cmp_paths(const void *a, const void *b)
{
    const struct cs_fs_path *const *x = a;
    const struct cs_fs_path *const *y = b;
    return strcmp((*x)->rel, (*y)->rel);
}

/* Two operations on one file after normalisation ("a/b" and "a/./b") are an INVALID_PATCH. */
static int check_duplicates(const struct txn *t, struct cs_diag *diag)
{
    size_t n = 0;
    const struct cs_fs_path **v = malloc((2 * t->n_items + 1) * sizeof *v);
    if (v == NULL) {
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory");
        return CSW_ERROR_INTERNAL;
    }
    for (size_t i = 0; i < t->n_items; i++) {
        v[n++] = &t->items[i].path;
        if (t->items[i].kind == CSW_PATCH_CHANGE_KIND_MOVE)
            v[n++] = &t->items[i].from;
    }
    qsort(v, n, sizeof *v, cmp_paths);
    int rc = 0;
    for (size_t i = 1; i < n; i++) {
        if (strcmp(v[i - 1]->rel, v[i]->rel) == 0) {
            cs_diag_set(diag, CSW_ERROR_INVALID_PATCH,
                        "two operations touch %s (after path normalisation)", v[i]->rel);
            rc = CSW_ERROR_INVALID_PATCH;
            break;
        }
    }
    free(v);
    return rc;
}

/* Normalises every operation's paths and checks each against the deny rules, by name and below a
 * directory denied under another name (a denied link's target, a denied directory renamed):
 * refused whether or not the file exists, so adds and moves too. No file is read here. */
static int preflight_paths(struct txn *t, const struct cs_patch *plan, struct cs_diag *diag)
{
    t->items = calloc(plan->n_ops + 1, sizeof *t->items);
    if (t->items == NULL) {
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory");
        return CSW_ERROR_INTERNAL;
    }
    t->n_items = plan->n_ops;
    /* Paths first, all of them: a path error names itself before any content is looked at. */
    for (size_t i = 0; i < plan->n_ops; i++) {
        const struct cs_patch_op *op = &plan->ops[i];
        struct item *it = &t->items[i];
        it->op = op;
        int rc = norm(t->deny, op->path, op->path_len, &it->path, diag);
        if (rc != 0)
            return rc;
        switch (op->kind) {
        case CS_PATCH_OP_ADD:
            it->kind = CSW_PATCH_CHANGE_KIND_ADD;
            break;
        case CS_PATCH_OP_DELETE:
            it->kind = CSW_PATCH_CHANGE_KIND_DELETE;
            break;
        case CS_PATCH_OP_UPDATE:
            it->kind = CSW_PATCH_CHANGE_KIND_UPDATE;
            if (op->move_to != NULL) {
                it->from = it->path;
                rc = norm(t->deny, op->move_to, op->move_to_len, &it->path, diag);
                if (rc != 0)
                    return rc;
                /* A move onto itself is refused as the parser refuses it when both are spelt
                 * alike (one operation per path: docs/patch-differences.md). */
                if (strcmp(it->from.rel, it->path.rel) == 0)
                    return cs_diag_set(diag, CSW_ERROR_INVALID_PATCH,
                                       "line %zu: %s is moved onto itself (after path "
                                       "normalisation); for an update leave out \"*** Move to\"",
                                       op->move_line, it->path.rel);
                it->kind = CSW_PATCH_CHANGE_KIND_MOVE;
            }
            break;
        }
    }
    for (size_t i = 0; i < t->n_items; i++) {
        struct item *it = &t->items[i];
        int rc = cs__fs_deny_under(t->deny, t->rootfd, &it->path, diag);
        if (rc == 0 && it->kind == CSW_PATCH_CHANGE_KIND_MOVE)
            rc = cs__fs_deny_under(t->deny, t->rootfd, &it->from, diag);
        if (rc != 0)
            return rc;
    }
    return check_duplicates(t, diag);
}

/* PATH_DENIED for path (client spelling) when it normalises and a deny rule, a denied directory's
 * remembered identity above it, or its own file's remembered identity (a denied file renamed or
 * linked: opened, never read) covers it; 0 otherwise (any other problem of the path is answered
 * later, in its place). */
static int denied(struct cs_fs_deny *deny, int rootfd, const char *s, size_t n,
                  struct cs_diag *diag)
{
    struct cs_fs_path p;
    struct cs_diag ignored = {0};
    if (deny == NULL || cs_fs_path_normalize(s, n, &p, &ignored) != 0)
        return 0;
    int rc = cs__fs_deny_check(deny, &p, diag);
    if (rc == 0)
        rc = cs__fs_deny_under(deny, rootfd, &p, diag);
    int fd = -1;
    struct stat st;
    if (rc == 0 && p.len > 0 && !p.dir_only &&
        cs_fs_open_beneath(rootfd, &p, CS_FS_WANT_FILE, &fd, &st, &ignored) == 0) {
        if (cs_fs_deny_known(deny, fd, NULL, &st))
            rc = cs_diag_set(diag, CSW_ERROR_PATH_DENIED,
                             "%s is denied: it is a file the workspace's deny rules matched "
                             "under another name",
                             p.rel);
        close(fd);
    }
    return rc == CSW_ERROR_PATH_DENIED ? rc : 0;
}

/* Contract section 7: PATH_DENIED before any other check that looks at a file, so before
 * expected_versions (section 6 checks them first) and before any operation's preflight: every
 * expected_versions key, then every path of the patch (when it parsed). Nothing is read. */
static int deny_first(int rootfd, struct cs_fs_deny *deny,
                      const struct csw_mcp_apply_patch_input *in, const struct cs_patch *plan,
                      struct cs_diag *diag)
{
    for (size_t i = 0; in->has_expected_versions && i < in->expected_versions.n; i++) {
        const struct cs_str *key = &in->expected_versions.v[i].key;
        int rc = denied(deny, rootfd, key->s, key->n, diag);
        if (rc != 0)
            return rc;
    }
    for (size_t i = 0; plan != NULL && i < plan->n_ops; i++) {
        const struct cs_patch_op *op = &plan->ops[i];
        int rc = denied(deny, rootfd, op->path, op->path_len, diag);
        if (rc == 0 && op->move_to != NULL)
            rc = denied(deny, rootfd, op->move_to, op->move_to_len, diag);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Preflights every operation whose paths passed: reads every old content; computes every new
 * one. */
static int preflight(struct txn *t, const struct cs_cancel *cancel, struct cs_diag *diag)
{
    for (size_t i = 0; i < t->n_items; i++) {
        test_hook_preflight_delay(cancel);
        test_hook_hold(t->items[i].path.rel, cancel);
        if (cancelled(cancel, diag) != 0)
            return CSW_ERROR_TIMEOUT;
        struct item *it = &t->items[i];
        const struct cs_fs_path *src =
            it->kind == CSW_PATCH_CHANGE_KIND_MOVE ? &it->from : &it->path;
        int rc;
        if (it->kind == CSW_PATCH_CHANGE_KIND_ADD) {
            rc = check_absent(t->rootfd, &it->path, CSW_ERROR_ADD_FILE_EXISTS, diag);
            if (rc != 0)
                return rc;
            it->mode = 0644;
            it->new_content = malloc(it->op->content_len + 1);
            if (it->new_content == NULL) {
                cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory");
                return CSW_ERROR_INTERNAL;
            }
            memcpy(it->new_content, it->op->content, it->op->content_len);
            it->new_content[it->op->content_len] = '\0';
            it->new_len = it->op->content_len;
        } else {
            rc = read_file(t->rootfd, t->deny, src, &it->old, &it->old_len, &it->mode, it->before,
                           diag);
            if (rc != 0)
                return rc;
            if (it->kind == CSW_PATCH_CHANGE_KIND_MOVE) {
                rc = check_absent(t->rootfd, &it->path, CSW_ERROR_MOVE_DESTINATION_EXISTS, diag);
                if (rc != 0)
                    return rc;
            }
            if (it->kind != CSW_PATCH_CHANGE_KIND_DELETE) {
                rc = cs_patch_apply_update(it->op, it->old, it->old_len, &it->new_content,
                                           &it->new_len, diag);
                if (rc != CS_PATCH_OK)
                    return cs_patch_rc_error(rc);
                if (it->new_len > CS_PATCH_TXN_MAX_FILE) {
                    cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                                "the new %s would be larger than %u bytes", it->path.rel,
                                CS_PATCH_TXN_MAX_FILE);
                    return CSW_ERROR_FILE_OPERATION_FAILED;
                }
            }
        }
        if (it->kind != CSW_PATCH_CHANGE_KIND_DELETE &&
            hash(it->new_content, it->new_len, it->after) != 0) {
            cs_diag_set(diag, CSW_ERROR_INTERNAL, "SHA-256 failed");
            return CSW_ERROR_INTERNAL;
        }
    }
    return 0;
}

static void txn_free(struct txn *t)
{
    for (size_t i = 0; i < t->n_items; i++) {
        free(t->items[i].old);
        free(t->items[i].new_content);
    }
    free(t->items);
    for (size_t i = 0; i < t->n_undo; i++)
        free(t->undo[i].p);
    free(t->undo);
    if (t->rootfd >= 0)
        close(t->rootfd);
}

/* ---- output ---- */

static int set_str(struct cs_str *s, const char *z)
{
    return cs_str_set_n(s, z, strlen(z));
}

static int build_output(const struct txn *t, enum csw_patch_status status, bool with_after,
                        const char *id, struct csw_mcp_apply_patch_output *out)
{
    memset(out, 0, sizeof *out);
    out->status = status;
    out->replayed = false;
    if (set_str(&out->operation_id, id) != 0)
        goto oom;
    size_t nf = 0;
    for (size_t i = 0; i < t->n_items; i++)
        nf += t->items[i].kind == CSW_PATCH_CHANGE_KIND_MOVE ? 2 : 1;
    if (nf > 0) {
        out->files.v = cs_wire_malloc(nf * sizeof *out->files.v);
        out->changes.v = cs_wire_malloc(t->n_items * sizeof *out->changes.v);
        if (out->files.v == NULL || out->changes.v == NULL)
            goto oom;
        memset(out->files.v, 0, nf * sizeof *out->files.v);
        memset(out->changes.v, 0, t->n_items * sizeof *out->changes.v);
    }
    for (size_t i = 0; i < t->n_items; i++) {
        const struct item *it = &t->items[i];
        struct csw_patch_change *c = &out->changes.v[out->changes.n++];
        c->kind = it->kind;
        if (set_str(&c->path, it->path.rel) != 0 ||
            set_str(&out->files.v[out->files.n++], it->path.rel) != 0)
            goto oom;
        if (it->kind == CSW_PATCH_CHANGE_KIND_MOVE) {
            c->has_from_path = true;
            if (set_str(&c->from_path, it->from.rel) != 0 ||
                set_str(&out->files.v[out->files.n++], it->from.rel) != 0)
                goto oom;
        }
        if (it->kind != CSW_PATCH_CHANGE_KIND_ADD) {
            c->has_before_version = true;
            if (set_str(&c->before_version, it->before) != 0)
                goto oom;
        }
        if (with_after && it->kind != CSW_PATCH_CHANGE_KIND_DELETE) {
            c->has_after_version = true;
            if (set_str(&c->after_version, it->after) != 0)
                goto oom;
        }
    }
    return 0;
oom:
    csw_mcp_apply_patch_output_free(out);
    return -1;
}

/* ---- the transaction ---- */

int cs_patch_txn_apply(const char *root, const struct csw_mcp_apply_patch_input *in,
                       const struct cs_cancel *cancel, struct csw_mcp_apply_patch_output *out,
                       struct cs_diag *diag)
{
    return cs_patch_txn_apply_deny(root, NULL, in, cancel, out, diag);
}

int cs_patch_txn_apply_deny(const char *root, struct cs_fs_deny *deny,
                            const struct csw_mcp_apply_patch_input *in,
                            const struct cs_cancel *cancel, struct csw_mcp_apply_patch_output *out,
                            struct cs_diag *diag)
{
    return cs_patch_txn_apply_op(root, deny, NULL, in, cancel, out, diag);
}

/* Writes the crash journal for every item, before the first write. */
static int journal_begin(struct txn *t, const char *op_id, struct cs__patch_journal *j,
                         struct cs_diag *diag)
{
    struct cs__patch_jitem *ji = calloc(t->n_items + 1, sizeof *ji);
    if (ji == NULL) {
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory");
        return CSW_ERROR_INTERNAL;
    }
    for (size_t i = 0; i < t->n_items; i++) {
        const struct item *it = &t->items[i];
        static const char kinds[] = {[CSW_PATCH_CHANGE_KIND_ADD] = 'A',
                                     [CSW_PATCH_CHANGE_KIND_UPDATE] = 'U',
                                     [CSW_PATCH_CHANGE_KIND_DELETE] = 'D',
                                     [CSW_PATCH_CHANGE_KIND_MOVE] = 'M'};
        ji[i] = (struct cs__patch_jitem){.kind = kinds[it->kind],
                                         .path = &it->path,
                                         .from = &it->from,
                                         .old = it->old,
                                         .old_len = it->old_len,
                                         .mode = it->mode};
    }
    int rc = cs__patch_journal_begin(t->rootfd, op_id, ji, t->n_items, j, diag);
    for (size_t i = 0; rc == 0 && i < t->n_items; i++)
        memcpy(t->items[i].tmp, ji[i].tmp, sizeof ji[i].tmp);
    free(ji);
    return rc;
}

int cs_patch_txn_apply_op(const char *root, struct cs_fs_deny *deny, const char *op_id,
                          const struct csw_mcp_apply_patch_input *in,
                          const struct cs_cancel *cancel, struct csw_mcp_apply_patch_output *out,
                          struct cs_diag *diag)
{
    struct txn t = {.rootfd = -1, .deny = deny};
    struct cs_patch *plan = NULL;
    int rc;
    memset(out, 0, sizeof *out);
    enum csw_patch_status status = CSW_PATCH_STATUS_APPLIED;
    rc = cs_fs_root_open(root, &t.rootfd, diag);
    /* A transaction a crash interrupted is settled before anything is looked at. */
    if (rc == 0)
        rc = cs__patch_journal_recover_at(t.rootfd, deny, NULL, NULL, NULL, diag);
    /* Parsed first for its paths only: a parse error is answered after the versions, in the
     * order of contract section 6, as is every check but PATH_DENIED (section 7). */
    struct cs_diag parse_diag = {0};
    int parse_rc = 0;
    if (rc == 0)
        parse_rc = cs_patch_rc_error(cs_patch_parse(in->patch.s, in->patch.n, &plan, &parse_diag));
    if (rc == 0)
        rc = deny_first(t.rootfd, deny, in, parse_rc == 0 ? plan : NULL, diag);
    if (rc == 0)
        rc = check_versions(t.rootfd, deny, in, cancel, diag);
    if (rc == 0 && parse_rc != 0) {
        if (diag != NULL)
            *diag = parse_diag;
        rc = parse_rc;
    }
    if (rc == 0)
        rc = preflight_paths(&t, plan, diag);
    if (rc == 0)
        rc = preflight(&t, cancel, diag);
    /* The last safe point: past it the writes begin and the transaction runs to its end. */
    if (rc == 0)
        rc = cancelled(cancel, diag);
    if (rc != 0)
        goto out; /* rejected (or cancelled) before any write */
    if (in->has_check_only && in->check_only) {
        status = CSW_PATCH_STATUS_CHECKED;
    } else {
        struct cs__patch_journal j;
        rc = journal_begin(&t, op_id, &j, diag);
        if (rc != 0)
            goto out; /* nothing written */
        /* What went wrong is in the output's per-file results, not in the diag. */
        int wrc = execute(&t, NULL);
        if (wrc == 0)
            wrc = verify(&t, NULL);
        if (wrc != 0)
            status = rollback(&t) == 0 ? CSW_PATCH_STATUS_FAILED_ROLLED_BACK
                                       : CSW_PATCH_STATUS_FAILED_PARTIAL;
        /* The outcome, durably; the ledger's owner settles (removes) the journal once its row
         * holds it too (cs_patch_journal_settle). Without an operation id nobody will. */
        if (cs__patch_journal_end(&j, status) == 0 && (op_id == NULL || op_id[0] == '\0'))
            cs__patch_journal_remove(&j);
        cs__patch_journal_close(&j);
        cs__patch_journal_step();
    }
    if (build_output(&t, status, status == CSW_PATCH_STATUS_APPLIED, "", out) != 0) {
        cs_diag_set(diag, CSW_ERROR_INTERNAL,
                    "the patch ended %s but its result could not be built (out of memory)",
                    csw_patch_status_names[status]);
        rc = CSW_ERROR_INTERNAL;
    }
out:
    cs_patch_free(plan);
    txn_free(&t);
    return rc;
}
