/*
 * fs_find: the find tool and its glob matcher.
 *
 * The walk starts from the root fd and opens every directory beneath it again through
 * cs_fs_open_beneath (openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or the O_NOFOLLOW walk),
 * so a directory swapped for a symlink while the walk runs is skipped, never entered. Entries are
 * typed from readdir's d_type (fstatat with AT_SYMLINK_NOFOLLOW when the file system does not say):
 * regular files are candidates, directories are walked, everything else (symlinks included) is
 * skipped. Names that are not UTF-8 are skipped too: the API could not name them. The matching set
 * is sorted bytewise, hashed into listing_version and cut into the requested page.
 *
 * Bounds: at most walk_cap regular files and walk_cap directories are looked at, and at most
 * CS_FS_FIND_MAX_BYTES of paths are held; reaching either stops the walk and sets incomplete.
 * One directory fd is open at a time (plus the root's).
 *
 * Trust: the glob, offset and limit are the client's; the tree may change during the walk.
 * Entry points: cs_fs_find, cs_fs_find_at, cs_fs_glob_match.
 */
#include "fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NONE SIZE_MAX

/* ---- glob ---- */

/* One character of a glob or a path: a code point, or a lone byte of ill-formed UTF-8 (which then
 * only equals itself). Returns its length in bytes (>= 1). */
static size_t next_char(const unsigned char *s, size_t n, uint32_t *c)
{
    bool valid;
    size_t k = cs__fs_utf8_step(s, n, c, &valid);
    if (!valid) {
        *c = 0x110000u + s[0];
        return 1;
    }
    return k;
}

/* A character inside a class, with '\' escaping the next one. */
static size_t class_char(const unsigned char *p, size_t n, uint32_t *c)
{
    if (p[0] == '\\' && n > 1)
        return 1 + next_char(p + 1, n - 1, c);
    return next_char(p, n, c);
}

/*
 * The class starting at p[0] == '['. Returns its length including the closing ']' with *hit set
 * to whether c belongs to it, or 0 when no ']' closes it (the '[' is then an ordinary character).
 * '!' or '^' first negates; a ']' first (after any negation) is literal; "a-z" is a range of code
 * points ('-' first or last is literal).
 */
static size_t class_match(const unsigned char *p, size_t n, uint32_t c, bool *hit)
{
    size_t i = 1;
    bool neg = false, in = false, first = true;
    if (i < n && (p[i] == '!' || p[i] == '^')) {
        neg = true;
        i++;
    }
    while (i < n) {
        if (p[i] == ']' && !first) {
            *hit = in != neg;
            return i + 1;
        }
        first = false;
        uint32_t lo, hi;
        i += class_char(p + i, n - i, &lo);
        hi = lo;
        if (i + 1 < n && p[i] == '-' && p[i + 1] != ']') {
            i++;
            i += class_char(p + i, n - i, &hi);
        }
        if (lo <= c && c <= hi)
            in = true;
    }
    return 0;
}

/*
 * One glob segment against one path segment (neither contains '/'). Greedy with backtracking to
 * the last '*' only: everything between stars is matched at its leftmost position, which is
 * enough because a star matches any run. O(pn * sn).
 */
bool cs__fs_seg_match(const unsigned char *p, size_t pn, const unsigned char *s, size_t sn)
{
    size_t pi = 0, si = 0, star_p = NONE, star_s = 0;
    while (si < sn) {
        bool ok = false;
        if (pi < pn && p[pi] == '*') {
            while (pi < pn && p[pi] == '*')
                pi++;
            star_p = pi;
            star_s = si;
            continue;
        }
        if (pi < pn) {
            uint32_t c;
            size_t sk = next_char(s + si, sn - si, &c);
            size_t pk = 0;
            bool hit = false;
            if (p[pi] == '?') {
                pk = 1;
                hit = true;
            } else if (p[pi] == '[' && (pk = class_match(p + pi, pn - pi, c, &hit)) != 0) {
                /* pk and hit are set */
            } else {
                uint32_t lit;
                if (p[pi] == '\\' && pi + 1 < pn)
                    pk = 1 + next_char(p + pi + 1, pn - pi - 1, &lit);
                else
                    pk = next_char(p + pi, pn - pi, &lit);
                hit = lit == c;
            }
            if (hit) {
                pi += pk;
                si += sk;
                ok = true;
            }
        }
        if (!ok) {
            if (star_p == NONE)
                return false;
            uint32_t c;
            star_s += next_char(s + star_s, sn - star_s, &c);
            si = star_s;
            pi = star_p;
        }
    }
    while (pi < pn && p[pi] == '*')
        pi++;
    return pi == pn;
}

/* End of the segment of x (n bytes) that starts at o: the next '/' or n. */
static size_t seg_end(const unsigned char *x, size_t n, size_t o)
{
    const unsigned char *e = memchr(x + o, '/', n - o);
    return e != NULL ? (size_t)(e - x) : n;
}

/* True when the glob segment [o, e) is "**", or is the empty segment after a trailing '/'. */
static bool globstar(const unsigned char *g, size_t gn, size_t o, size_t e)
{
    if (e - o == 2 && g[o] == '*' && g[o + 1] == '*')
        return true;
    return o == gn && gn > 0 && g[gn - 1] == '/';
}

/*
 * The glob's segments against the path's, the same greedy scheme one level up: a "**" segment
 * is a star over whole segments. Positions are byte offsets of segment starts; n + 1 means "no
 * segment left".
 */
bool cs__fs_path_match(const unsigned char *g, size_t gn, const unsigned char *s, size_t sn)
{
    size_t gi = 0, si = 0, star_g = NONE, star_s = 0;
    while (si <= sn) {
        size_t se = seg_end(s, sn, si);
        bool ok = false;
        if (gi <= gn) {
            size_t ge = seg_end(g, gn, gi);
            if (globstar(g, gn, gi, ge)) {
                star_g = ge + 1;
                star_s = si;
                gi = star_g;
                continue;
            }
            if (cs__fs_seg_match(g + gi, ge - gi, s + si, se - si)) {
                gi = ge + 1;
                si = se + 1;
                ok = true;
            }
        }
        if (!ok) {
            if (star_g == NONE)
                return false;
            star_s = seg_end(s, sn, star_s) + 1;
            si = star_s;
            gi = star_g;
        }
    }
    while (gi <= gn) {
        size_t ge = seg_end(g, gn, gi);
        if (!globstar(g, gn, gi, ge))
            return false;
        gi = ge + 1;
    }
    return true;
}

bool cs_fs_glob_match(const char *glob, size_t glob_n, const char *path, size_t path_n)
{
    const unsigned char *g = (const unsigned char *)glob;
    const unsigned char *s = (const unsigned char *)path;
    if (glob_n == 0)
        return true;
    if (memchr(g, '/', glob_n) == NULL) {
        /* No '/': the file name, in any directory. */
        const unsigned char *slash = NULL;
        for (size_t i = path_n; i > 0; i--) {
            if (s[i - 1] == '/') {
                slash = s + i - 1;
                break;
            }
        }
        size_t off = slash ? (size_t)(slash - s) + 1 : 0;
        return cs__fs_seg_match(g, glob_n, s + off, path_n - off);
    }
    /* A leading "/" or "./" (any run of them) is the root itself: the path is anchored there. */
    for (;;) {
        if (glob_n > 0 && g[0] == '/')
            g++, glob_n--;
        else if (glob_n > 1 && g[0] == '.' && g[1] == '/')
            g += 2, glob_n -= 2;
        else
            break;
    }
    if (glob_n == 0)
        return true; /* "/" or "./": everything below the root */
    return cs__fs_path_match(g, glob_n, s, path_n);
}

/* ---- walk ---- */

struct walk {
    int rootfd;
    const char *glob; /* NULL: every file */
    size_t glob_n;
    size_t cap;
    char *arena; /* the matching paths, each NUL-terminated */
    size_t used, size;
    size_t *offs; /* offsets of the matches in arena */
    size_t n, offs_cap;
    char **stack; /* directories still to read (malloc'd relative paths) */
    size_t depth, stack_cap;
    size_t files, dirs, bytes;
    bool incomplete;
    const struct cs_cancel *cancel; /* polled before every directory entry */
    struct cs_fs_deny *deny;        /* NULL: no deny rules */
};

/* Grows *v (elements of size sz) to hold at least need; returns false on OOM. */
static bool grow(void **v, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap)
        return true;
    size_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    void *nv = realloc(*v, nc * sz);
    if (nv == NULL)
        return false;
    *v = nv;
    *cap = nc;
    return true;
}

/* Accounts len bytes of held paths; false (and incomplete) past the byte cap. */
static bool charge(struct walk *w, size_t len)
{
    if (w->bytes + len > CS_FS_FIND_MAX_BYTES) {
        w->incomplete = true;
        return false;
    }
    w->bytes += len;
    return true;
}

static int add_match(struct walk *w, const char *path, size_t len)
{
    if (!charge(w, len + 1))
        return 0;
    void *arena = w->arena, *offs = w->offs;
    if (!grow(&arena, &w->size, w->used + len + 1, 1))
        return -1;
    w->arena = arena;
    if (!grow(&offs, &w->offs_cap, w->n + 1, sizeof *w->offs))
        return -1;
    w->offs = offs;
    memcpy(w->arena + w->used, path, len + 1);
    w->offs[w->n++] = w->used;
    w->used += len + 1;
    return 0;
}

static int push_dir(struct walk *w, const char *path, size_t len)
{
    if (!charge(w, len + 1))
        return 0;
    void *stack = w->stack;
    if (!grow(&stack, &w->stack_cap, w->depth + 1, sizeof *w->stack))
        return -1;
    w->stack = stack;
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return -1;
    memcpy(copy, path, len + 1);
    w->stack[w->depth++] = copy;
    return 0;
}

/* The d_type of an entry, asking fstatat when readdir did not say. DT_UNKNOWN on error. */
static unsigned char entry_type(DIR *d, const struct dirent *e)
{
    if (e->d_type != DT_UNKNOWN)
        return e->d_type;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return DT_UNKNOWN;
    if (S_ISREG(st.st_mode))
        return DT_REG;
    if (S_ISDIR(st.st_mode))
        return DT_DIR;
    return DT_UNKNOWN; /* links and special files are skipped alike */
}

/*
 * Reads the directory rel (len bytes; "" is the root): matching regular files are added,
 * directories pushed. A directory that cannot be opened beneath the root (it went away, became a
 * symlink or a file, or is not readable) is skipped; for the root itself that is an error.
 * Returns 0, 1 when the walk must stop (a cap), or an error code.
 */
static int read_dir(struct walk *w, const char *rel, size_t len, struct cs_diag *diag)
{
    int rc = 0;
    int fd = -1;
    DIR *d = NULL;
    char path[CS_FS_PATH_MAX + 1];
    if (len == 0) {
        fd = openat(w->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
            cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED, "cannot read the workspace root: %s",
                        errno == ENOENT ? "it has gone" : strerror(errno));
            rc = CSW_ERROR_FILE_OPERATION_FAILED;
            goto out;
        }
        /* A removed directory reads as empty: say it has gone instead of listing nothing. */
        struct stat st;
        if (fstat(fd, &st) != 0 || st.st_nlink == 0) {
            cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                        "cannot read the workspace root: it has gone");
            rc = CSW_ERROR_FILE_OPERATION_FAILED;
            goto out;
        }
    } else {
        struct cs_fs_path p; /* read_dir is not recursive: one on the stack at a time */
        memcpy(p.rel, rel, len + 1);
        p.len = len;
        p.dir_only = true;
        struct stat st;
        if (cs_fs_open_beneath(w->rootfd, &p, CS_FS_WANT_DIR, &fd, &st, NULL) != 0)
            goto out;
    }
    d = fdopendir(fd);
    if (d == NULL) {
        if (len == 0) {
            cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED, "cannot read the workspace root: %s",
                        strerror(errno));
            rc = CSW_ERROR_FILE_OPERATION_FAILED;
        }
        goto out;
    }
    fd = -1;
    memcpy(path, rel, len);
    size_t base = len ? len + 1 : 0;
    if (len)
        path[len] = '/';
    for (;;) {
        if (cs_cancel_requested(w->cancel)) {
            cs_diag_set(diag, CSW_ERROR_TIMEOUT, "listing the workspace was cancelled");
            rc = CSW_ERROR_TIMEOUT;
            break;
        }
        errno = 0;
        struct dirent *e = readdir(d);
        if (e == NULL) {
            if (errno != 0 && len == 0) {
                cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                            "reading the workspace root failed: %s", strerror(errno));
                rc = CSW_ERROR_FILE_OPERATION_FAILED;
            }
            break;
        }
        const char *name = e->d_name;
        if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
            continue;
        unsigned char type = entry_type(d, e);
        if (type != DT_REG && type != DT_DIR)
            continue;
        size_t *count = type == DT_REG ? &w->files : &w->dirs;
        if (*count >= w->cap) {
            w->incomplete = true;
            rc = 1;
            break;
        }
        (*count)++;
        size_t nl = strlen(name);
        if (base + nl > CS_FS_PATH_MAX || !cs__fs_utf8_valid(name, nl))
            continue; /* no read could name it */
        memcpy(path + base, name, nl + 1);
        size_t plen = base + nl;
        int r = 0;
        if (w->deny != NULL) {
            /* Never listed, never descended into: a denied path, or a file whose identity was
             * denied under another name. What is denied here is remembered (docs/contract/tools.md
             * section 5: "at each listing"). */
            struct stat st;
            bool have = fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) == 0;
            if (cs_fs_deny_path(w->deny, path, plen) != NULL) {
                if (have)
                    cs_fs_deny_remember(w->deny, dirfd(d), name, &st);
                continue;
            }
            if (!have || cs_fs_deny_known(w->deny, dirfd(d), name, &st))
                continue;
        }
        if (type == DT_DIR)
            r = push_dir(w, path, plen);
        else if (w->glob == NULL || cs_fs_glob_match(w->glob, w->glob_n, path, plen))
            r = add_match(w, path, plen);
        if (r != 0) {
            cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory listing the workspace");
            rc = CSW_ERROR_INTERNAL;
            break;
        }
        if (w->incomplete) {
            rc = 1;
            break;
        }
    }
out:
    if (d != NULL)
        closedir(d);
    if (fd >= 0)
        close(fd);
    return rc;
}

static int cmp_path(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "sha256:" + hex of every path followed by a NUL byte (which no path contains). */
static int listing_version(const char *const *v, size_t n, char out[72])
{
    static const char digits[] = "0123456789abcdef";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    int ok = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (EVP_DigestUpdate(ctx, v[i], strlen(v[i]) + 1) != 1)
            goto out;
    }
    if (EVP_DigestFinal_ex(ctx, md, &mdn) != 1 || mdn != 32)
        goto out;
    memcpy(out, "sha256:", 7);
    for (unsigned i = 0; i < mdn; i++) {
        out[7 + 2 * i] = digits[md[i] >> 4];
        out[8 + 2 * i] = digits[md[i] & 15];
    }
    out[7 + 2 * mdn] = '\0';
    ok = 1;
out:
    EVP_MD_CTX_free(ctx);
    return ok ? 0 : -1;
}

static int find_at(int rootfd, struct cs_fs_deny *deny, const struct csw_mcp_find_input *in,
                   size_t walk_cap, const struct cs_cancel *cancel, struct csw_mcp_find_output *out,
                   struct cs_diag *diag)
{
    int rc = 0;
    const char **sorted = NULL;
    struct walk w;
    memset(&w, 0, sizeof w);
    memset(out, 0, sizeof *out);
    w.rootfd = rootfd;
    w.cap = walk_cap;
    w.cancel = cancel;
    w.deny = deny;
    if (in->has_glob && in->glob.n > 0) {
        w.glob = in->glob.s;
        w.glob_n = in->glob.n;
    }

    /* The decoder sets the default limit when it is absent. */
    if (in->limit <= 0 || in->limit > CS_FS_FIND_MAX_PATHS) {
        cs_diag_set(diag, CSW_ERROR_OUTPUT_LIMIT, "limit %lld is outside 1..%d paths",
                    (long long)in->limit, CS_FS_FIND_MAX_PATHS);
        rc = CSW_ERROR_OUTPUT_LIMIT;
        goto out;
    }
    if (in->offset < 0) {
        cs_diag_set(diag, CSW_ERROR_OUTPUT_LIMIT, "offset %lld is negative", (long long)in->offset);
        rc = CSW_ERROR_OUTPUT_LIMIT;
        goto out;
    }

    /* Depth-first from the root; the order does not matter, the result is sorted. */
    rc = read_dir(&w, "", 0, diag);
    while (rc == 0 && w.depth > 0) {
        char *dir = w.stack[--w.depth];
        rc = read_dir(&w, dir, strlen(dir), diag);
        free(dir);
    }
    if (rc == 1)
        rc = 0; /* a cap: incomplete is set */
    if (rc != 0)
        goto out;

    sorted = malloc((w.n ? w.n : 1) * sizeof *sorted);
    if (sorted == NULL) {
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory listing the workspace");
        rc = CSW_ERROR_INTERNAL;
        goto out;
    }
    for (size_t i = 0; i < w.n; i++)
        sorted[i] = w.arena + w.offs[i];
    qsort(sorted, w.n, sizeof *sorted, cmp_path);

    char version[72];
    if (listing_version(sorted, w.n, version) != 0) {
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "hashing the listing failed");
        rc = CSW_ERROR_INTERNAL;
        goto out;
    }
    size_t start = (uint64_t)in->offset < w.n ? (size_t)in->offset : w.n;
    size_t count = w.n - start;
    if (count > (size_t)in->limit)
        count = (size_t)in->limit;
    rc = cs_str_set_n(&out->listing_version, version, strlen(version)) != 0;
    if (rc == 0 && count > 0) {
        out->paths.v = cs_wire_malloc(count * sizeof *out->paths.v);
        rc = out->paths.v == NULL;
        if (rc == 0)
            memset(out->paths.v, 0, count * sizeof *out->paths.v);
        for (size_t i = 0; rc == 0 && i < count; i++) {
            rc = cs_str_set_n(&out->paths.v[i], sorted[start + i], strlen(sorted[start + i]));
            if (rc == 0)
                out->paths.n++;
        }
    }
    if (rc != 0) {
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory listing the workspace");
        rc = CSW_ERROR_INTERNAL;
        goto out;
    }
    out->truncated = start + count < w.n;
    if (out->truncated) {
        out->has_next_offset = true;
        out->next_offset = (int64_t)(start + count);
    }
    out->has_offset = in->has_offset;
    out->offset = in->has_offset ? in->offset : 0;
    out->incomplete = w.incomplete;
out:
    if (rc != 0)
        csw_mcp_find_output_free(out);
    while (w.depth > 0)
        free(w.stack[--w.depth]);
    free(w.stack);
    free(w.arena);
    free(w.offs);
    free(sorted);
    return rc;
}

int cs_fs_find_at(int rootfd, const struct csw_mcp_find_input *in, size_t walk_cap,
                  const struct cs_cancel *cancel, struct csw_mcp_find_output *out,
                  struct cs_diag *diag)
{
    return find_at(rootfd, NULL, in, walk_cap, cancel, out, diag);
}

int cs_fs_find_deny(const char *root, struct cs_fs_deny *d, const struct csw_mcp_find_input *in,
                    size_t walk_cap, const struct cs_cancel *cancel,
                    struct csw_mcp_find_output *out, struct cs_diag *diag)
{
    int rootfd = -1;
    memset(out, 0, sizeof *out);
    int rc = cs_fs_root_open(root, &rootfd, diag);
    if (rc != 0)
        return rc;
    rc = find_at(rootfd, d, in, walk_cap, cancel, out, diag);
    close(rootfd);
    return rc;
}

int cs_fs_find(const char *root, const struct csw_mcp_find_input *in,
               const struct cs_cancel *cancel, struct csw_mcp_find_output *out,
               struct cs_diag *diag)
{
    int rootfd = -1;
    memset(out, 0, sizeof *out);
    int rc = cs_fs_root_open(root, &rootfd, diag);
    if (rc != 0)
        return rc;
    rc = cs_fs_find_at(rootfd, in, CS_FS_FIND_WALK_CAP, cancel, out, diag);
    close(rootfd);
    return rc;
}
