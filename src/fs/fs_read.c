/*
 * fs_read: the read tool. Opens a regular file beneath the root (fs_path.c), then reads it once,
 * start to end, in fixed chunks: every byte goes through SHA-256 and the bytes that fall in the
 * window [offset, offset + limit) are kept. The version and the window therefore always come from
 * the same read sequence on the same fd; fstat's size is never trusted (a file may grow, shrink
 * or be replaced while it is read, and the answer still describes one sequence of bytes).
 * Memory: one chunk buffer and at most limit bytes of window, whatever the file's size.
 *
 * The version cache: reading a big file window by window would rehash the whole file for every
 * window. So a full pass over a file of 2 MiB to 1 GiB also keeps, at every block boundary (at
 * most 128 blocks), the SHA-256 state and the digest of the prefix, and remembers them under the
 * file's fstat identity (device, inode, size, mtime, ctime). A later call on a file with the same
 * identity reads only the blocks that cover its window, continues the hash from the state at the
 * first of them and answers from the cache only if the digest comes out equal to the remembered
 * prefix digest: the window is then provably (SHA-256 collision resistance) the bytes at that
 * offset of the sequence the version hashes, just as in a full pass. Anything else (identity
 * changed, digest differs, a short read, identity changed during the call) falls back to the full
 * pass. A pass is remembered only if the identity was the same before and after it and the
 * file's ctime is older than the call's start by more than the coarsest timestamp step (git's
 * "racily clean" rule, 2.1 s): a later write then always leaves a different ctime. See P4 in
 * docs/security-model.md.
 *
 * Threads: the runners call cs_fs_read from a pool of file-work threads (base_pool.h), so the cache
 * is shared state: one mutex guards it, held only to look up, copy out, insert or drop an entry,
 * never across a read or a hash. A call copies what it needs (the state at its first block, the
 * digest it must reach, the version) and proves its window against that copy.
 *
 * Cancellation: the full pass and the cached window poll the caller's cancel flag before every
 * chunk (256 KiB), so a cancelled read of any size stops within one chunk's read and hash.
 *
 * Also here: the UTF-8 decoding shared by the module (maximal-subpart replacement, as the Unicode
 * standard recommends and the WHATWG decoder does).
 *
 * Trust: the input is the client's (decoded: types and ranges are schema-checked); the file's
 * bytes are arbitrary. Entry points: cs_fs_read, cs_fs_read_at, cs_fs_utf8_lossy.
 */
#include "fs.h"
#include "base_utf8.h"

#include <errno.h>
#include <sched.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHUNK_BYTES (256 * 1024) /* one read(2); sized to stay in cache while it is hashed */

/* ---- UTF-8 ---- */

size_t cs__fs_utf8_step(const unsigned char *s, size_t n, uint32_t *cp, bool *valid)
{
    return cs_utf8_step(s, n, cp, valid);
}

bool cs__fs_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t at = 0;
    while (at < n) {
        if (u[at] < 0x80) {
            at++;
            continue;
        }
        uint32_t cp;
        bool valid;
        at += cs__fs_utf8_step(u + at, n - at, &cp, &valid);
        if (!valid)
            return false;
    }
    return true;
}

size_t cs_fs_utf8_lossy(const unsigned char *s, size_t n, char *out, bool *lossy)
{
    size_t used;
    return cs_utf8_lossy(s, n, false, out, &used, lossy);
}

/* ---- read ---- */

static void hex(const unsigned char *d, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[2 * n] = '\0';
}

/* ---- the version cache ---- */

#define VC_SLOTS      16
#define VC_MIN_BYTES  (2ull * 1024 * 1024)
#define VC_MAX_BYTES  (1ull << 30)
#define VC_MAX_BLOCKS 128
#define VC_BLOCK_UNIT (1024ull * 1024)
/* A pass is remembered only if the file's ctime is older than the call's start by more than
 * this: wider than the coarsest timestamp step of a file system Linux mounts (FAT's 2 s; 1 s
 * on ext4 with 128-byte inodes, ext3, HFS+, sshfs), not only than the kernel's clock tick. */
#define VC_RACY_NS 2100000000LL

struct vc_key {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtim, ctim;
};

struct vc_entry {
    bool used;
    uint64_t last_use;
    struct vc_key key;
    uint64_t block;              /* bytes per block */
    size_t nblocks;              /* ceil(size / block) */
    EVP_MD_CTX **state;          /* state[k]: after k blocks; state[0] is NULL (a fresh hash) */
    unsigned char (*digest)[32]; /* digest[k]: SHA-256 of the first k+1 blocks (the last one is
                                    the version's) */
    char version[72];
};

/* The cache, its clock and its hit count: under vc_mu. */
static pthread_mutex_t vc_mu = PTHREAD_MUTEX_INITIALIZER;
static struct vc_entry vc[VC_SLOTS];
static uint64_t vc_clock;
static uint64_t vc_hits;

uint64_t cs_fs_version_cache_hits(void)
{
    pthread_mutex_lock(&vc_mu);
    uint64_t n = vc_hits;
    pthread_mutex_unlock(&vc_mu);
    return n;
}

static struct vc_key key_of(const struct stat *st)
{
    struct vc_key k;
    memset(&k, 0, sizeof k);
    k.dev = st->st_dev;
    k.ino = st->st_ino;
    k.size = st->st_size;
    k.mtim = st->st_mtim;
    k.ctim = st->st_ctim;
    return k;
}

static bool key_eq(const struct vc_key *a, const struct vc_key *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtim.tv_sec == b->mtim.tv_sec && a->mtim.tv_nsec == b->mtim.tv_nsec &&
           a->ctim.tv_sec == b->ctim.tv_sec && a->ctim.tv_nsec == b->ctim.tv_nsec;
}

static void vc_clear(struct vc_entry *e)
{
    if (e->state)
        for (size_t k = 0; k < e->nblocks; k++)
            EVP_MD_CTX_free(e->state[k]);
    free(e->state);
    free(e->digest);
    memset(e, 0, sizeof *e);
}

/* Block size for a file of size bytes: whole MiB, at most VC_MAX_BLOCKS blocks. */
static uint64_t vc_block_for(uint64_t size)
{
    uint64_t units = (size + VC_BLOCK_UNIT * VC_MAX_BLOCKS - 1) / (VC_BLOCK_UNIT * VC_MAX_BLOCKS);
    return (units ? units : 1) * VC_BLOCK_UNIT;
}

/* A pass being recorded: states and digests at block boundaries, NULL when not recording. */
struct vc_build {
    struct vc_entry e;
    bool failed; /* out of memory: the pass goes on, nothing is remembered */
};

static bool vc_build_start(struct vc_build *b, const struct stat *st)
{
    memset(b, 0, sizeof *b);
    uint64_t size = (uint64_t)st->st_size;
    if (!S_ISREG(st->st_mode) || size < VC_MIN_BYTES || size > VC_MAX_BYTES)
        return false;
    b->e.key = key_of(st);
    b->e.block = vc_block_for(size);
    b->e.nblocks = (size_t)((size + b->e.block - 1) / b->e.block);
    b->e.state = calloc(b->e.nblocks, sizeof *b->e.state);
    b->e.digest = calloc(b->e.nblocks, sizeof *b->e.digest);
    if (!b->e.state || !b->e.digest) {
        vc_clear(&b->e);
        return false;
    }
    return true;
}

/* The hash has just taken in exactly k blocks: keep its state (k > 0) and the prefix digest. */
static void vc_build_boundary(struct vc_build *b, size_t k, EVP_MD_CTX *ctx)
{
    if (b->failed || k == 0 || k > b->e.nblocks)
        return;
    /* The state after the last block is never a starting point: only its digest is kept. */
    EVP_MD_CTX *fin = EVP_MD_CTX_new();
    unsigned int n = 0;
    bool ok = fin && EVP_MD_CTX_copy_ex(fin, ctx) == 1 &&
              EVP_DigestFinal_ex(fin, b->e.digest[k - 1], &n) == 1 && n == 32;
    EVP_MD_CTX_free(fin);
    if (ok && k < b->e.nblocks) {
        b->e.state[k] = EVP_MD_CTX_new();
        ok = b->e.state[k] && EVP_MD_CTX_copy_ex(b->e.state[k], ctx) == 1;
    }
    b->failed = !ok; /* vc_clear frees a state[k] set before the copy failed */
}

/*
 * Remembers a finished pass of total bytes with this version, if the file's identity after the
 * pass (st_after) is the one it had before, the pass read exactly that many bytes, and its ctime
 * is older than the call's start (t0) by more than a timestamp tick. Takes b's memory either way.
 */
static void vc_build_finish(struct vc_build *b, uint64_t total, const char *version,
                            const struct stat *st_after, const struct timespec *t0)
{
    struct vc_key after = key_of(st_after);
    int64_t ct = (int64_t)after.ctim.tv_sec * 1000000000LL + after.ctim.tv_nsec;
    int64_t start = (int64_t)t0->tv_sec * 1000000000LL + t0->tv_nsec;
    if (b->failed || !key_eq(&after, &b->e.key) || total != (uint64_t)b->e.key.size ||
        ct >= start - VC_RACY_NS) {
        vc_clear(&b->e);
        return;
    }
    /* The same file's older entry, else a free slot, else the least recently used. */
    pthread_mutex_lock(&vc_mu);
    struct vc_entry *slot = NULL;
    for (size_t i = 0; i < VC_SLOTS && !slot; i++)
        if (vc[i].used && vc[i].key.dev == after.dev && vc[i].key.ino == after.ino)
            slot = &vc[i];
    for (size_t i = 0; i < VC_SLOTS && !slot; i++)
        if (!vc[i].used)
            slot = &vc[i];
    if (!slot) {
        slot = &vc[0];
        for (size_t i = 1; i < VC_SLOTS; i++)
            if (vc[i].last_use < slot->last_use)
                slot = &vc[i];
    }
    struct vc_entry old = *slot;
    *slot = b->e;
    slot->used = true;
    slot->last_use = ++vc_clock;
    snprintf(slot->version, sizeof slot->version, "%s", version);
    pthread_mutex_unlock(&vc_mu);
    vc_clear(&old); /* frees the evicted states outside the lock */
    memset(&b->e, 0, sizeof b->e);
}

static void vc_forget(const struct stat *st)
{
    pthread_mutex_lock(&vc_mu);
    for (size_t i = 0; i < VC_SLOTS; i++)
        if (vc[i].used && vc[i].key.dev == st->st_dev && vc[i].key.ino == st->st_ino)
            vc_clear(&vc[i]);
    pthread_mutex_unlock(&vc_mu);
}

static struct vc_entry *vc_find_locked(const struct vc_key *k)
{
    for (size_t i = 0; i < VC_SLOTS; i++)
        if (vc[i].used && key_eq(&vc[i].key, k))
            return &vc[i];
    return NULL;
}

/* What one cached read needs of an entry, copied out under the lock. */
struct vc_snap {
    struct vc_key key;
    uint64_t block;
    size_t first, last;       /* the blocks under the window */
    EVP_MD_CTX *state;        /* the state after `first` blocks; NULL when first is 0 */
    unsigned char digest[32]; /* the digest of the prefix ending with block `last` */
    char version[72];
};

/* Copies the entry for st (if any) for the window at offset, limit. Returns true with *s set
 * (release s->state with EVP_MD_CTX_free), false when there is no entry or out of memory. */
static bool vc_snapshot(const struct stat *st, uint64_t offset, size_t limit, struct vc_snap *s)
{
    memset(s, 0, sizeof *s);
    struct vc_key k = key_of(st);
    bool ok = false;
    pthread_mutex_lock(&vc_mu);
    const struct vc_entry *e = vc_find_locked(&k);
    if (e) {
        uint64_t size = (uint64_t)e->key.size;
        s->key = e->key;
        s->block = e->block;
        snprintf(s->version, sizeof s->version, "%s", e->version);
        ok = true;
        if (offset < size) {
            uint64_t wend = size - offset < limit ? size : offset + limit;
            s->first = (size_t)(offset / e->block);
            s->last = (size_t)((wend - 1) / e->block);
            memcpy(s->digest, e->digest[s->last], sizeof s->digest);
            if (s->first > 0) {
                s->state = EVP_MD_CTX_new();
                ok = s->state && EVP_MD_CTX_copy_ex(s->state, e->state[s->first]) == 1;
            }
        }
    }
    pthread_mutex_unlock(&vc_mu);
    if (!ok) {
        EVP_MD_CTX_free(s->state);
        s->state = NULL;
    }
    return ok;
}

/* A call answered from the cache: counts it and refreshes the entry's use, if still there. */
static void vc_hit(const struct vc_key *k)
{
    pthread_mutex_lock(&vc_mu);
    struct vc_entry *e = vc_find_locked(k);
    if (e)
        e->last_use = ++vc_clock;
    vc_hits++;
    pthread_mutex_unlock(&vc_mu);
}

/*
 * One pass over fd (cancel polled before every chunk: CSW_ERROR_TIMEOUT): hashes every byte into
 * version ("sha256:" + 64 hex, NUL-terminated) and copies the bytes of [offset, offset + limit)
 * into *win (malloc'd, *win_n bytes). *total is the number of bytes read. With build, also records
 * the block boundaries. Returns 0 or an error.
 */
static int stream(int fd, uint64_t offset, size_t limit, const char *rel, unsigned char **win,
                  size_t *win_n, uint64_t *total, char version[72], struct vc_build *build,
                  const struct cs_cancel *cancel, struct cs_diag *diag)
{
    int rc = 0;
    unsigned char *chunk = malloc(CHUNK_BYTES);
    unsigned char *w = NULL;
    size_t wn = 0, wcap = 0;
    uint64_t pos = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (chunk == NULL || ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory (or no SHA-256) reading %s", rel);
        rc = CSW_ERROR_INTERNAL;
        goto out;
    }
    for (;;) {
        /* A whole-file hash is the one long CPU burn of the file tools: between chunks it lets
         * another runnable thread go first (another call's job, on a box with fewer CPUs than
         * busy hashes), so a small call never waits behind a big one's time slice. */
        cs_cancel_yield(cancel);
        if (cs_cancel_requested(cancel)) {
            cs_diag_set(diag, CSW_ERROR_TIMEOUT, "reading %s was cancelled", rel);
            rc = CSW_ERROR_TIMEOUT;
            goto out;
        }
        ssize_t r = read(fd, chunk, CHUNK_BYTES);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED, "reading %s failed: %s", rel,
                        strerror(errno));
            rc = CSW_ERROR_FILE_OPERATION_FAILED;
            goto out;
        }
        if (r == 0)
            break;
        size_t got = (size_t)r;
        /* Hash the chunk, stopping at each block boundary it crosses when recording. */
        for (size_t done = 0; done < got;) {
            size_t part = got - done;
            uint64_t at = pos + done;
            if (build && !build->failed) {
                uint64_t to_boundary = build->e.block - at % build->e.block;
                if (part > to_boundary)
                    part = (size_t)to_boundary;
            }
            if (EVP_DigestUpdate(ctx, chunk + done, part) != 1) {
                cs_diag_set(diag, CSW_ERROR_INTERNAL, "hashing %s failed", rel);
                rc = CSW_ERROR_INTERNAL;
                goto out;
            }
            done += part;
            if (build && !build->failed && (pos + done) % build->e.block == 0)
                vc_build_boundary(build, (size_t)((pos + done) / build->e.block), ctx);
        }
        /* The part of this chunk inside the window, if any. */
        uint64_t end = pos + got;
        if (wn < limit && end > offset) {
            uint64_t from = offset > pos ? offset : pos;
            size_t take = (size_t)(end - from);
            if (take > limit - wn)
                take = limit - wn;
            if (wn + take > wcap) {
                /* Grow by doubling, never past limit (at most CS_FS_READ_MAX_BYTES). */
                size_t nc = wcap ? wcap : 64 * 1024;
                while (nc < wn + take)
                    nc *= 2;
                if (nc > limit)
                    nc = limit;
                unsigned char *nw = realloc(w, nc);
                if (nw == NULL) {
                    cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory reading %s", rel);
                    rc = CSW_ERROR_INTERNAL;
                    goto out;
                }
                w = nw;
                wcap = nc;
            }
            if (take > 0) /* w is still NULL when nothing was taken yet */
                memcpy(w + wn, chunk + (from - pos), take);
            wn += take;
        }
        pos = end;
    }
    /* The last block is usually partial: its digest is the version's. */
    if (build && !build->failed && pos % build->e.block != 0)
        vc_build_boundary(build, (size_t)(pos / build->e.block + 1), ctx);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    if (EVP_DigestFinal_ex(ctx, md, &mdn) != 1 || mdn != 32) {
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "hashing %s failed", rel);
        rc = CSW_ERROR_INTERNAL;
        goto out;
    }
    memcpy(version, "sha256:", 7);
    hex(md, mdn, version + 7);
    *win = w;
    *win_n = wn;
    *total = pos;
    w = NULL;
out:
    EVP_MD_CTX_free(ctx);
    free(chunk);
    free(w);
    return rc;
}

/*
 * The window [offset, offset + limit) of the file the snapshot e of an entry remembers, read from
 * fd and proved to be that sequence's bytes: the blocks covering it are read with pread and hashed
 * on from the state at the first of them; the digest must equal the remembered prefix digest.
 * Returns true with *win (malloc'd or NULL) and *win_n, or false (not proved, out of memory, a read
 * error): the caller makes a full pass, which reports any error itself.
 */
static bool vc_window(int fd, const struct vc_snap *e, uint64_t offset, size_t limit,
                      const struct cs_cancel *cancel, unsigned char **win, size_t *win_n)
{
    uint64_t size = (uint64_t)e->key.size;
    *win = NULL;
    *win_n = 0;
    if (offset >= size)
        return true; /* no bytes: the identity alone says what the file is */
    uint64_t wend = size - offset < limit ? size : offset + limit;
    size_t first = e->first, last = e->last;
    uint64_t pos = (uint64_t)first * e->block;
    uint64_t stop = (uint64_t)(last + 1) * e->block < size ? (uint64_t)(last + 1) * e->block : size;
    bool ok = false;
    unsigned char *chunk = malloc(CHUNK_BYTES);
    unsigned char *w = malloc((size_t)(wend - offset));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!chunk || !w || !ctx)
        goto out;
    if (first == 0 ? EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1
                   : EVP_MD_CTX_copy_ex(ctx, e->state) != 1)
        goto out;
    while (pos < stop) {
        cs_cancel_yield(cancel); /* as in the full pass */
        if (cs_cancel_requested(cancel))
            goto out; /* the caller tells a cut-short proof from a failed one */
        size_t want = stop - pos < CHUNK_BYTES ? (size_t)(stop - pos) : CHUNK_BYTES;
        ssize_t r = pread(fd, chunk, want, (off_t)pos);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || EVP_DigestUpdate(ctx, chunk, (size_t)r) != 1)
            goto out;
        uint64_t end = pos + (uint64_t)r;
        if (end > offset && pos < wend) {
            uint64_t from = offset > pos ? offset : pos;
            uint64_t to = end < wend ? end : wend;
            memcpy(w + (from - offset), chunk + (from - pos), (size_t)(to - from));
        }
        pos = end;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    if (EVP_DigestFinal_ex(ctx, md, &mdn) != 1 || mdn != 32 || memcmp(md, e->digest, 32) != 0)
        goto out;
    *win = w;
    *win_n = (size_t)(wend - offset);
    w = NULL;
    ok = true;
out:
    EVP_MD_CTX_free(ctx);
    free(chunk);
    free(w);
    return ok;
}

static int read_at(int rootfd, struct cs_fs_deny *deny, const struct csw_mcp_read_input *in,
                   const struct cs_cancel *cancel, struct csw_mcp_read_output *out,
                   struct cs_diag *diag)
{
    int rc;
    int fd = -1;
    unsigned char *win = NULL;
    size_t win_n = 0;
    uint64_t total = 0;
    char version[72];
    struct cs_fs_path p;
    struct vc_build build;
    bool building = false;
    memset(out, 0, sizeof *out);

    /* The decoder sets the default limit when it is absent. */
    if (in->limit <= 0 || in->limit > CS_FS_READ_MAX_BYTES) {
        cs_diag_set(diag, CSW_ERROR_OUTPUT_LIMIT, "limit %lld is outside 1..%d bytes",
                    (long long)in->limit, CS_FS_READ_MAX_BYTES);
        rc = CSW_ERROR_OUTPUT_LIMIT;
        goto out;
    }
    if (in->offset < 0) {
        cs_diag_set(diag, CSW_ERROR_OUTPUT_LIMIT, "offset %lld is negative", (long long)in->offset);
        rc = CSW_ERROR_OUTPUT_LIMIT;
        goto out;
    }
    rc = cs_fs_path_normalize(in->path.s, in->path.n, &p, diag);
    if (rc == 0)
        rc = cs__fs_deny_check(deny, &p, diag); /* before any look at the file */
    if (rc == 0) /* a directory denied under another name, or below one (a denied link's target) */
        rc = cs__fs_deny_under(deny, rootfd, &p, diag);
    if (rc != 0)
        goto out;
    struct timespec t0 = {0, 0}; /* no clock: nothing is remembered (every ctime is too new) */
    (void)clock_gettime(CLOCK_REALTIME, &t0);
    struct stat st, st2;
    rc = cs_fs_open_beneath(rootfd, &p, CS_FS_WANT_FILE, &fd, &st, diag);
    if (rc != 0)
        goto out;
    if (cs_fs_deny_known(deny, fd, NULL, &st)) {
        /* A denied file under another name: renamed or hard-linked since it was seen. */
        cs_diag_set(diag, CSW_ERROR_PATH_DENIED,
                    "path \"%.*s\" is denied: the file is one the workspace's deny rules matched "
                    "under another name",
                    cs__fs_clip(p.rel, p.len, 200), p.rel);
        rc = CSW_ERROR_PATH_DENIED;
        goto out;
    }
    uint64_t offset = (uint64_t)in->offset;
    struct vc_snap snap;
    bool cached = vc_snapshot(&st, offset, (size_t)in->limit, &snap);
    bool hit = cached && vc_window(fd, &snap, offset, (size_t)in->limit, cancel, &win, &win_n) &&
               fstat(fd, &st2) == 0;
    if (hit) {
        struct vc_key k2 = key_of(&st2); /* the identity must not have changed during the reads */
        hit = key_eq(&k2, &snap.key);
    }
    if (!hit && cached && cs_cancel_requested(cancel)) {
        /* Cut short (a cancelled call, or the loop's inline deadline, after which the call runs
         * again on a thread): the entry was not disproved, so it stays for that next try. */
        EVP_MD_CTX_free(snap.state);
        cs_diag_set(diag, CSW_ERROR_TIMEOUT, "reading %s was cancelled", p.rel);
        rc = CSW_ERROR_TIMEOUT;
        goto out;
    }
    if (hit) {
        EVP_MD_CTX_free(snap.state);
        vc_hit(&snap.key);
        total = (uint64_t)snap.key.size;
        snprintf(version, sizeof version, "%s", snap.version);
    } else {
        if (cached)
            EVP_MD_CTX_free(snap.state);
        free(win);
        win = NULL;
        /* An entry of this file that did not match, or did not prove the window, is never
         * used again; the pass below may remember a new one. */
        vc_forget(&st);
        building = vc_build_start(&build, &st);
        rc = stream(fd, offset, (size_t)in->limit, p.rel, &win, &win_n, &total, version,
                    building ? &build : NULL, cancel, diag);
        if (rc != 0)
            goto out;
        if (building) {
            building = false;
            if (fstat(fd, &st2) == 0)
                vc_build_finish(&build, total, version, &st2, &t0);
            else
                vc_clear(&build.e);
        }
    }

    char *text = cs_wire_malloc(3 * win_n + 1);
    if (text == NULL || cs_str_set_n(&out->path, p.rel, p.len) != 0 ||
        cs_str_set_n(&out->version, version, strlen(version)) != 0) {
        cs_wire_release(text);
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory reading %s", p.rel);
        rc = CSW_ERROR_INTERNAL;
        goto out;
    }
    out->content.n = cs_fs_utf8_lossy(win, win_n, text, &out->content_lossy);
    out->content.s = text;
    out->byte_count = (int64_t)win_n;
    /* Bytes remain after the window: the window is full and the file goes on past it. */
    out->truncated = offset < total && total - offset > win_n;
    out->has_offset = in->has_offset;
    out->offset = in->has_offset ? in->offset : 0;
    if (out->truncated) {
        out->has_next_offset = true;
        out->next_offset = (int64_t)(offset + win_n);
    }
    rc = 0;
out:
    if (building)
        vc_clear(&build.e);
    if (rc != 0)
        csw_mcp_read_output_free(out);
    if (fd >= 0)
        close(fd);
    free(win);
    return rc;
}

int cs_fs_read_at(int rootfd, const struct csw_mcp_read_input *in, const struct cs_cancel *cancel,
                  struct csw_mcp_read_output *out, struct cs_diag *diag)
{
    return read_at(rootfd, NULL, in, cancel, out, diag);
}

int cs_fs_read_deny(const char *root, struct cs_fs_deny *d, const struct csw_mcp_read_input *in,
                    const struct cs_cancel *cancel, struct csw_mcp_read_output *out,
                    struct cs_diag *diag)
{
    int rootfd = -1;
    memset(out, 0, sizeof *out);
    /* PATH_DENIED does not depend on the root or the file: answer it before either is opened
     * (read_at checks again, after the same normalisation, with the limit checks first). */
    struct cs_fs_path p;
    if (in->limit > 0 && in->limit <= CS_FS_READ_MAX_BYTES && in->offset >= 0 &&
        cs_fs_path_normalize(in->path.s, in->path.n, &p, NULL) == 0 &&
        cs__fs_deny_check(d, &p, diag) != 0)
        return CSW_ERROR_PATH_DENIED;
    int rc = cs_fs_root_open(root, &rootfd, diag);
    if (rc != 0)
        return rc;
    rc = read_at(rootfd, d, in, cancel, out, diag);
    close(rootfd);
    return rc;
}

int cs_fs_read(const char *root, const struct csw_mcp_read_input *in,
               const struct cs_cancel *cancel, struct csw_mcp_read_output *out,
               struct cs_diag *diag)
{
    int rootfd = -1;
    memset(out, 0, sizeof *out);
    int rc = cs_fs_root_open(root, &rootfd, diag);
    if (rc != 0)
        return rc;
    rc = cs_fs_read_at(rootfd, in, cancel, out, diag);
    close(rootfd);
    return rc;
}
