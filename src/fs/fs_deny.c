/*
 * fs_deny: the workspace's deny rules (docs/contract/tools.md §5), one matcher for read, find,
 * apply_patch and the sandbox's masks, and the identity memory that keeps a renamed or
 * hard-linked denied file denied.
 *
 * The matcher is gitignore's reading of a pattern on top of find's glob engine (fs_find.c): a
 * rule with no '/' except a trailing one matches one path component at any depth, any other '/'
 * anchors it at the root, a trailing "/" or '/' followed by "**" covers the tree below; a path is
 * denied when it or one of its ancestors matches. It runs on normalised relative paths only,
 * byte-wise and case-sensitive, so every spelling of a path ("./x", "a/../x", "x/") gets one
 * answer.
 *
 * Trust: rules come from the operator's registry (checked at load by cs_fs_deny_rule_valid, the
 * same function the runner's compile step trusts); paths are the client's, already normalised by
 * cs_fs_path_normalize; the tree under the root may change at any moment (the scan never follows
 * a link and opens every directory beneath the root fd).
 *
 * Threads: the rules are immutable after cs_fs_deny_new; the identity set has a mutex, since
 * reads, finds and patches run on the executor's file-work threads while a spawn scans on the
 * loop thread; scans are serialised by another, which guards the scan's directory cache.
 *
 * Entry points: fs.h (cs_fs_deny_*, cs_fs_read_deny / cs_fs_find_deny are in fs_read.c and
 * fs_find.c). A denied symlink is resolved by fs_deny_link.c (reading links, never following them
 * through the kernel) and handled by scan_link below.
 */

#include "fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const cs_fs_deny_limits[CS_FS_DENY_N_LIMITS] = {
    "a denied path created after a command started is not masked for that command",
    "a masked path that the host replaces while a command runs is not masked for that command",
    "a command can see which denied paths exist (their masks are visible), though never their "
    "contents",
    "a command is refused (PROCESS_SPAWN_FAILED) when the workspace holds more than " CS__FS_STR(
        CS_FS_DENY_SCAN_CAP) " files and directories, denied ones included (the workspace's "
                             "limits.deny_scan_entries)",
    "a command is refused when more than " CS__FS_STR(
        CS_FS_DENY_MAX_MASKS) " existing paths need a mask",
    "a command is refused when its mask paths take more than " CS__FS_STR(
        CS_FS_DENY_MASK_BYTES) " bytes in its sandbox plan",
    "a command is refused when a directory of the workspace, outside denied ones, cannot be read",
    "read, find and apply_patch cannot name a path longer than 4095 bytes or one that is not "
    "UTF-8 (find does not list it); commands see such a path masked like any other",
};

/* ---- the matcher ---- */

/* A rule reduced to its glob: b[0..n) without the anchoring '/' or "./" and the trailing "/" or
 * '/' followed by "**" runs; anchored when the rule holds a '/' that is not trailing. */
struct shape {
    const char *b;
    size_t n;
    bool anchored;
    /* For the scan's quick rejection (leaf_match): the ASCII literal bytes that begin (pre) and
     * end (suf) the glob's last segment, which a matching path's last component must begin and
     * end with; 0 and 0 when the segment starts or ends with anything else. */
    size_t last, pre_n, suf_n; /* last: offset of the last segment in b */
};

static void shape_of(const char *r, size_t n, struct shape *sh)
{
    size_t t = n;
    while (t > 0 && r[t - 1] == '/')
        t--;
    sh->anchored = memchr(r, '/', t) != NULL;
    size_t e = n;
    for (;;) {
        if (e > 0 && r[e - 1] == '/')
            e--;
        else if (e >= 3 && r[e - 3] == '/' && r[e - 2] == '*' && r[e - 1] == '*')
            e -= 3;
        else
            break;
    }
    size_t s = 0;
    for (;;) {
        if (s < e && r[s] == '/')
            s++;
        else if (s + 1 < e && r[s] == '.' && r[s + 1] == '/')
            s += 2;
        else
            break;
    }
    sh->b = r + s;
    sh->n = e > s ? e - s : 0;
    sh->last = sh->pre_n = sh->suf_n = 0;
    for (size_t i = sh->n; i > 0; i--) {
        if (sh->b[i - 1] == '/') {
            sh->last = i;
            break;
        }
    }
    /* Plain ASCII only: a byte that is '*', '?', '[', ']' or '\' (a wildcard, a class, an
     * escape, or escaped itself), or not ASCII (compared as a code point), ends the run. An ASCII
     * byte is always one character of its own in UTF-8, so the bytes must be there verbatim. */
    const unsigned char *g = (const unsigned char *)sh->b;
    size_t ln = sh->n - sh->last;
#define PLAIN(ch)                                                                                  \
    ((ch) < 0x80 && (ch) != '*' && (ch) != '?' && (ch) != '[' && (ch) != ']' && (ch) != '\\')
    while (sh->pre_n < ln && PLAIN(g[sh->last + sh->pre_n]))
        sh->pre_n++;
    while (sh->suf_n < ln && PLAIN(g[sh->n - 1 - sh->suf_n]))
        sh->suf_n++;
#undef PLAIN
    /* An escape before the suffix run only makes its first byte literal, which it is anyway. */
}

/* Whether the segment [o, e) of r closes every '[' it opens (find's class rules: '!' or '^'
 * first negates, a ']' first is literal, '\' escapes). */
static bool classes_closed(const char *r, size_t o, size_t e)
{
    for (size_t i = o; i < e; i++) {
        if (r[i] == '\\') {
            i++;
            continue;
        }
        if (r[i] != '[')
            continue;
        size_t j = i + 1;
        if (j < e && (r[j] == '!' || r[j] == '^'))
            j++;
        bool first = true, closed = false;
        while (j < e) {
            if (r[j] == ']' && !first) {
                closed = true;
                break;
            }
            first = false;
            j += r[j] == '\\' && j + 1 < e ? 2 : 1;
        }
        if (!closed)
            return false;
        i = j;
    }
    return true;
}

/* cs_fs_deny_rule_valid, and cs_fs_glob_valid when root_ok (a glob may name the root). */
static bool rule_valid(const char *rule, size_t n, bool root_ok, const char **why)
{
    const char *w = NULL;
    struct shape sh;
    if (n == 0)
        w = "empty pattern";
    else if (memchr(rule, '\0', n) != NULL)
        w = "contains a NUL byte";
    else if (n > CS_FS_PATH_MAX)
        w = "longer than 4095 bytes";
    else if (!cs__fs_utf8_valid(rule, n))
        w = "not valid UTF-8";
    else if (rule[0] == '!' && !root_ok) /* in a find glob, a leading '!' is literal */
        w = "negation ('!') is not supported: deny rules only add";
    if (w == NULL) {
        size_t bs = 0; /* backslashes ending the rule */
        while (bs < n && rule[n - 1 - bs] == '\\')
            bs++;
        if (bs % 2 == 1)
            w = "ends with a lone backslash";
    }
    if (w == NULL) {
        shape_of(rule, n, &sh);
        if (sh.n == 0 && root_ok)
            return true; /* every file */
        if (sh.n == 0)
            w = "matches the workspace root itself";
    }
    for (size_t o = 0; w == NULL && o <= sh.n;) {
        const char *slash = memchr(sh.b + o, '/', sh.n - o);
        size_t e = slash ? (size_t)(slash - sh.b) : sh.n;
        size_t l = e - o;
        if (l == 0)
            w = "has an empty path component";
        else if ((l == 1 && sh.b[o] == '.') || (l == 2 && sh.b[o] == '.' && sh.b[o + 1] == '.'))
            w = "has a '.' or '..' component, which no normalised path holds";
        else if (!classes_closed(sh.b, o, e))
            w = "has a '[' class with no closing ']'";
        o = e + 1;
    }
    if (w != NULL && why != NULL)
        *why = w;
    return w == NULL;
}

bool cs_fs_deny_rule_valid(const char *rule, size_t n, const char **why)
{
    return rule_valid(rule, n, false, why);
}

bool cs_fs_glob_valid(const char *glob, size_t n, const char **why)
{
    return rule_valid(glob, n, true, why);
}

static bool shape_match(const struct shape *sh, const char *path, size_t path_n)
{
    const unsigned char *g = (const unsigned char *)sh->b;
    const unsigned char *s = (const unsigned char *)path;
    if (sh->n == 0 || path_n == 0)
        return false;
    if (!sh->anchored) {
        /* One component at any depth: the path or an ancestor is denied when any of its
         * components matches. */
        for (size_t o = 0; o <= path_n;) {
            const unsigned char *slash = memchr(s + o, '/', path_n - o);
            size_t e = slash ? (size_t)(slash - s) : path_n;
            if (cs__fs_seg_match(g, sh->n, s + o, e - o))
                return true;
            o = e + 1;
        }
        return false;
    }
    /* Anchored: the whole path, or one of its ancestors (each prefix ending before a '/'). */
    for (size_t e = 0; e <= path_n; e++) {
        if (e < path_n && s[e] != '/')
            continue;
        if (cs__fs_path_match(g, sh->n, s, e))
            return true;
    }
    return false;
}

/*
 * shape_match for the scan, which meets every path after its ancestors (cs_fs_deny_scan descends
 * only into directories no rule denied, and evaluates nothing inside a denied one): a rule that
 * matched a proper ancestor, or a component other than the last, would have matched one of
 * those ancestors already. So only the last component (one component at any depth) or the whole
 * path (anchored) is left to try, the same answer shape_match gives for such a path. leaf is the
 * offset of the last component. First the rule's literal ends against it (quick rejection).
 */
static bool leaf_match(const struct shape *sh, const char *path, size_t path_n, size_t leaf)
{
    const unsigned char *g = (const unsigned char *)sh->b;
    const unsigned char *s = (const unsigned char *)path;
    if (sh->n == 0 || path_n == 0)
        return false;
    size_t ln = path_n - leaf;
    /* (The last glob segment is never "**": shape_of strips trailing ones, and a lone "**"
     * has neither run.) */
    if (ln < sh->pre_n || ln < sh->suf_n || memcmp(s + leaf, g + sh->last, sh->pre_n) != 0 ||
        memcmp(s + path_n - sh->suf_n, g + sh->n - sh->suf_n, sh->suf_n) != 0)
        return false;
    if (!sh->anchored)
        return cs__fs_seg_match(g, sh->n, s + leaf, ln);
    return cs__fs_path_match(g, sh->n, s, path_n);
}

bool cs_fs_deny_rule_match(const char *rule, size_t rule_n, const char *path, size_t path_n)
{
    struct shape sh;
    shape_of(rule, rule_n, &sh);
    return shape_match(&sh, path, path_n);
}

/* ---- rules and identities ---- */

struct cdir;

struct cs_fs_deny {
    char **text; /* the rules as given */
    struct shape *shapes;
    size_t n;
    struct cs__fs_ids *ids;  /* the identity memory (fs_deny_ident.c), with its own mutex */
    pthread_mutex_t scan_mu; /* one scan at a time: guards the directory cache */
    struct cdir *dirs;       /* the scan's directory cache (see there), open addressing */
    size_t dirs_cap, dirs_n, dirs_entries, dirs_hits;
    size_t scan_cap; /* entries a scan covers (cs_fs_deny_set_scan_cap) */
};

void cs_fs_deny_limit_scan_text(size_t cap, char *buf, size_t n)
{
    snprintf(buf, n,
             "a command is refused (PROCESS_SPAWN_FAILED) when the workspace holds more than %zu "
             "files and directories, denied ones included (the workspace's "
             "limits.deny_scan_entries)",
             cap);
}

void cs_fs_deny_set_scan_cap(struct cs_fs_deny *d, size_t cap)
{
    d->scan_cap = cap < CS_FS_DENY_SCAN_MIN   ? CS_FS_DENY_SCAN_MIN
                  : cap > CS_FS_DENY_SCAN_MAX ? CS_FS_DENY_SCAN_MAX
                                              : cap;
}

struct cs_fs_deny *cs_fs_deny_new(const struct cs_str *rules, size_t n)
{
    if (n > CS_FS_DENY_MAX_RULES)
        return NULL;
    struct cs_fs_deny *d = calloc(1, sizeof *d);
    if (d == NULL)
        return NULL;
    if (pthread_mutex_init(&d->scan_mu, NULL) != 0) {
        free(d);
        return NULL;
    }
    d->scan_cap = CS_FS_DENY_SCAN_CAP;
    d->ids = cs__fs_ids_new();
    d->text = calloc(n + 1, sizeof *d->text);
    d->shapes = calloc(n + 1, sizeof *d->shapes);
    if (d->text == NULL || d->shapes == NULL || d->ids == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        if (!cs_fs_deny_rule_valid(rules[i].s, rules[i].n, NULL))
            goto fail;
        d->text[i] = malloc(rules[i].n + 1);
        if (d->text[i] == NULL)
            goto fail;
        memcpy(d->text[i], rules[i].s, rules[i].n);
        d->text[i][rules[i].n] = '\0';
        d->n = i + 1;
        shape_of(d->text[i], rules[i].n, &d->shapes[i]);
    }
    return d;
fail:
    cs_fs_deny_free(d);
    return NULL;
}

static void cache_clear(struct cs_fs_deny *d);

void cs_fs_deny_free(struct cs_fs_deny *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; d->text && i < d->n; i++) /* d may be half-built */
        free(d->text[i]);
    free(d->text);
    free(d->shapes);
    cs__fs_ids_free(d->ids);
    cache_clear(d);
    pthread_mutex_destroy(&d->scan_mu);
    free(d);
}

const char *cs_fs_deny_path(const struct cs_fs_deny *d, const char *rel, size_t rel_n)
{
    if (d == NULL)
        return NULL;
    for (size_t i = 0; i < d->n; i++)
        if (shape_match(&d->shapes[i], rel, rel_n))
            return d->text[i];
    return NULL;
}

const char *cs__fs_deny_leaf(const struct cs_fs_deny *d, const char *rel, size_t rel_n, size_t leaf)
{
    for (size_t i = 0; i < d->n; i++)
        if (leaf_match(&d->shapes[i], rel, rel_n, leaf))
            return d->text[i];
    return NULL;
}

int cs__fs_deny_check(const struct cs_fs_deny *d, const struct cs_fs_path *p, struct cs_diag *diag)
{
    const char *rule = cs_fs_deny_path(d, p->rel, p->len);
    if (rule == NULL)
        return 0;
    /* The rule is the operator's text; the path is the client's own, normalised. Nothing about
     * the file (whether it exists, its type) is said. */
    cs_diag_set(diag, CSW_ERROR_PATH_DENIED,
                "path \"%.*s\" is denied by the workspace's deny rule \"%.*s\"",
                cs__fs_clip(p->rel, p->len, 200), p->rel, cs__fs_clip(rule, strlen(rule), 200),
                rule);
    return CSW_ERROR_PATH_DENIED;
}

bool cs_fs_deny_known(struct cs_fs_deny *d, int fd, const char *name, const struct stat *st)
{
    return d != NULL && cs__fs_ids_known(d->ids, fd, name, st);
}

void cs_fs_deny_remember(struct cs_fs_deny *d, int fd, const char *name, const struct stat *st)
{
    if (d != NULL)
        cs__fs_ids_remember(d->ids, fd, name, st, true);
}

int cs_fs_deny_load(struct cs_fs_deny *d, const struct cs_fs_ident *v, size_t n)
{
    return cs__fs_ids_load(d->ids, v, n);
}

int cs_fs_deny_take_changes(struct cs_fs_deny *d, struct cs_fs_deny_changes *out)
{
    return cs__fs_ids_take(d->ids, out);
}

void cs_fs_deny_resync(struct cs_fs_deny *d)
{
    cs__fs_ids_resync(d->ids);
}

/* ---- the scan's directory cache ---- */

/*
 * The scan reads every directory and stats every entry at every spawn (10,000 files: most of a
 * spawn's cost). What it reads of a directory, the names with their type and identity, changes
 * only with the directory's own entries, and any change to those (a file created, removed,
 * renamed in or out, hard-linked in) sets the directory's ctime to the time of the change; no
 * caller can set a ctime back. So a directory whose inode, ctime, mtime, size and link count are
 * those of the cached listing has that listing, and the scan reuses it instead of readdir and a
 * stat per entry. Everything else is decided afresh at each scan from the listing, as before:
 * the rules, the remembered identities (a file whose inode was remembered since is masked), the
 * masks. A new file or directory, a rename, a new directory whose name a rule matches: each
 * changes a directory's ctime, so that directory is read again.
 *
 * Finding a directory unchanged costs as little as the kernel allows (issue 29, the spawn's cost):
 * its lstat is taken through its parent's open descriptor (one fstatat, never a link followed)
 * when the parent is listed, so a cached listing that holds no directory (a leaf, most of a tree)
 * is taken without opening the directory at all; one that holds directories is opened with one
 * openat2 (beneath the root, no link) to lstat them in turn. A warm scan of the bench's
 * 10,000-file workspace (104 directories) makes 114 system calls where it made 623, and whether
 * each file's (device, inode) is remembered is asked under one lock per listing.
 *
 * Trusted only where this holds: a listing is kept when the directory is on the root's file
 * system, that is one whose ctime is the local kernel's (ext2/3/4, XFS, btrfs, tmpfs, F2FS; not
 * a network or overlay file system), and its ctime is at least cache_racy_ms (2 s) old when it is
 * read: a change in the same clock tick as the read could keep the ctime the read saw (timestamps
 * are coarse), so a recently changed directory is read again next time too. Outside what this
 * covers: the host's clock set back by more than that window, and a mount made on the host over
 * a file of the workspace (root only), whose cached identity stays the file's beneath.
 */
struct centry {
    uint64_t dev, ino;
    uint32_t name; /* offset in names */
    uint16_t len;
    uint8_t kind; /* KIND_* */
    uint8_t here; /* the rules' verdict on the path, once known: 0 not yet, 1 allowed, 2 denied
                   * (the rules never change and the path is the listing's key: issue 29) */
};

enum { KIND_OTHER, KIND_REG, KIND_DIR, KIND_LINK };

struct cdir {
    char *rel; /* NULL: an empty slot */
    uint64_t dev, ino, size, nlink;
    struct timespec ctim, mtim;
    char *names;
    struct centry *e;
    size_t n;
    size_t n_dirs; /* entries that are directories: none, and the scan need not open it */
    bool used;     /* met by the current scan */
};

static long cache_racy_ms = 2000;

void cs__fs_deny_cache_window(long ms)
{
    cache_racy_ms = ms;
}

size_t cs__fs_deny_cache_hits(const struct cs_fs_deny *d)
{
    return d->dirs_hits;
}

static size_t dir_slot(const char *rel, size_t n, size_t cap)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)rel[i]) * 0x100000001b3ull;
    return (size_t)(h ^ (h >> 31)) & (cap - 1);
}

static void cdir_free(struct cdir *c)
{
    free(c->rel);
    free(c->names);
    free(c->e);
    memset(c, 0, sizeof *c);
}

static void cache_clear(struct cs_fs_deny *d)
{
    for (size_t i = 0; i < d->dirs_cap; i++)
        cdir_free(&d->dirs[i]);
    free(d->dirs);
    d->dirs = NULL;
    d->dirs_cap = d->dirs_n = d->dirs_entries = 0;
}

static struct cdir *cache_find(struct cs_fs_deny *d, const char *rel, size_t n)
{
    if (d->dirs_cap == 0)
        return NULL;
    for (size_t i = dir_slot(rel, n, d->dirs_cap);; i = (i + 1) & (d->dirs_cap - 1)) {
        struct cdir *c = &d->dirs[i];
        if (c->rel == NULL)
            return NULL;
        if (strlen(c->rel) == n && memcmp(c->rel, rel, n) == 0)
            return c;
    }
}

static bool same_ts(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

static bool cdir_fresh(const struct cdir *c, const struct stat *st)
{
    return c->dev == (uint64_t)st->st_dev && c->ino == (uint64_t)st->st_ino &&
           c->size == (uint64_t)st->st_size && c->nlink == (uint64_t)st->st_nlink &&
           same_ts(&c->ctim, &st->st_ctim) && same_ts(&c->mtim, &st->st_mtim);
}

/* Puts c (moved in) into the table, replacing rel's old listing. Returns 0, or -1 on OOM (c is
 * freed; the cache stays as it was but for rel's old listing, dropped). */
static int cache_put(struct cs_fs_deny *d, struct cdir *c)
{
    size_t n = strlen(c->rel);
    struct cdir *old = cache_find(d, c->rel, n);
    if (old != NULL) {
        d->dirs_entries -= old->n;
        free(old->rel);
        free(old->names);
        free(old->e);
        *old = *c;
        d->dirs_entries += c->n;
        return 0;
    }
    if (2 * (d->dirs_n + 1) > d->dirs_cap) {
        size_t nc = d->dirs_cap ? 2 * d->dirs_cap : 64;
        struct cdir *nv = calloc(nc, sizeof *nv);
        if (nv == NULL) {
            cdir_free(c);
            return -1;
        }
        for (size_t i = 0; i < d->dirs_cap; i++) {
            struct cdir *o = &d->dirs[i];
            if (o->rel == NULL)
                continue;
            size_t j = dir_slot(o->rel, strlen(o->rel), nc);
            while (nv[j].rel != NULL)
                j = (j + 1) & (nc - 1);
            nv[j] = *o;
        }
        free(d->dirs);
        d->dirs = nv;
        d->dirs_cap = nc;
    }
    size_t j = dir_slot(c->rel, n, d->dirs_cap);
    while (d->dirs[j].rel != NULL)
        j = (j + 1) & (d->dirs_cap - 1);
    d->dirs[j] = *c;
    d->dirs_n++;
    d->dirs_entries += c->n;
    return 0;
}

/* After a complete scan: drops the listings of directories it did not meet (gone, renamed, or
 * below a directory now denied). Rebuilt in place through a fresh table. */
static void cache_sweep(struct cs_fs_deny *d)
{
    struct cdir *old = d->dirs;
    size_t cap = d->dirs_cap;
    d->dirs = NULL;
    d->dirs_cap = d->dirs_n = d->dirs_entries = 0;
    for (size_t i = 0; i < cap; i++) {
        struct cdir *c = &old[i];
        if (c->rel == NULL)
            continue;
        if (!c->used) {
            cdir_free(c);
            continue;
        }
        c->used = false;
        if (cache_put(d, c) != 0)
            break; /* OOM: what is left is dropped below */
    }
    for (size_t i = 0; i < cap; i++)
        if (old[i].rel != NULL && old[i].used)
            cdir_free(&old[i]);
    free(old);
}

/* A listing being read: entries and names grow together. */
struct cbuild {
    struct cdir c;
    size_t ecap, ncap, nlen;
    bool dead; /* not to be cached (OOM, too long) */
};

static void cbuild_add(struct cbuild *b, const char *name, size_t nl, int kind,
                       const struct stat *st)
{
    if (b->dead)
        return;
    if (nl > UINT16_MAX || b->nlen + nl > UINT32_MAX) {
        b->dead = true;
        return;
    }
    if (b->c.n == b->ecap) {
        size_t nc = b->ecap ? 2 * b->ecap : 16;
        struct centry *nv = realloc(b->c.e, nc * sizeof *nv);
        if (nv == NULL) {
            b->dead = true;
            return;
        }
        b->c.e = nv;
        b->ecap = nc;
    }
    if (b->nlen + nl > b->ncap) {
        size_t nc = b->ncap ? 2 * b->ncap : 256;
        while (nc < b->nlen + nl)
            nc *= 2;
        char *nv = realloc(b->c.names, nc);
        if (nv == NULL) {
            b->dead = true;
            return;
        }
        b->c.names = nv;
        b->ncap = nc;
    }
    memcpy(b->c.names + b->nlen, name, nl);
    if (kind == KIND_DIR)
        b->c.n_dirs++;
    b->c.e[b->c.n++] = (struct centry){
        .dev = kind == KIND_OTHER ? 0 : (uint64_t)st->st_dev,
        .ino = kind == KIND_OTHER ? 0 : (uint64_t)st->st_ino,
        .name = (uint32_t)b->nlen,
        .len = (uint16_t)nl,
        .kind = (uint8_t)kind,
    };
    b->nlen += nl;
}

/* ---- the scan ---- */

/* One character of a quoted path (cs__fs_quote): its bytes at b (n left), written to out when
 * out is not NULL. Returns the bytes it takes in the output; *step the bytes it consumes. */
static size_t quote_char(const unsigned char *b, size_t n, char *out, size_t *step)
{
    static const char hex[] = "0123456789abcdef";
    uint32_t cp;
    bool valid;
    size_t k = cs__fs_utf8_step(b, n, &cp, &valid);
    *step = k;
    if (valid && cp >= 0x20 && cp != 0x7F && cp != '"' && cp != '\\') {
        if (out)
            memcpy(out, b, k);
        return k;
    }
    if (valid && (cp == '"' || cp == '\\')) {
        if (out)
            out[0] = '\\', out[1] = (char)cp;
        return 2;
    }
    for (size_t i = 0; out && i < k; i++) {
        out[4 * i] = '\\';
        out[4 * i + 1] = 'x';
        out[4 * i + 2] = hex[b[i] >> 4];
        out[4 * i + 3] = hex[b[i] & 15];
    }
    return 4 * k;
}

void cs__fs_quote(const char *s, size_t n, char *out, size_t cap)
{
    const unsigned char *b = (const unsigned char *)s;
    size_t total = 0, step;
    for (size_t i = 0; i < n; i += step)
        total += quote_char(b + i, n - i, NULL, &step);
    /* A long path keeps its head (where) and its tail (the entry) around "...". */
    size_t half = total < cap ? cap : (cap - 4) / 2, o = 0, i = 0;
    while (i < n) {
        size_t w = quote_char(b + i, n - i, NULL, &step);
        if (o + w > half)
            break;
        o += quote_char(b + i, n - i, out + o, &step);
        i += step;
    }
    if (i < n) {
        memcpy(out + o, "...", 3);
        o += 3;
        size_t before = 0, j = 0; /* the output bytes of [0, j) */
        while (j < n && (j < i || total - before > half)) {
            before += quote_char(b + j, n - j, NULL, &step);
            j += step;
        }
        for (; j < n; j += step)
            o += quote_char(b + j, n - j, out + o, &step);
    }
    out[o] = '\0';
}

struct scan_dir {
    char *rel;
    bool denied; /* inside a denied directory: remember everything, mask nothing more */
    bool has_st; /* st holds the directory's lstat, taken through its parent's descriptor */
    struct stat st;
};

/* A denied link's target, by (device, inode): walked as denied once per scan. */
struct link_target {
    uint64_t dev, ino;
};

struct scan {
    struct cs_fs_deny *d;
    int rootfd;
    struct scan_dir *stack;
    size_t depth, stack_cap;
    size_t seen;
    char cap_why[160]; /* the entry cap's reason, with this workspace's cap */
    char **masks;
    size_t n_masks, masks_cap, mask_bytes;
    bool want_masks;
    /* Why the scan cannot cover the workspace (it then ends: no partial mask list): a static
     * reason, the path it concerns (malloc'd) and what the client can do, or NULL. */
    const char *stop_why, *stop_fix;
    char *stop_path;
    bool cache_ok;       /* the root's file system keeps ctimes the cache can trust */
    uint64_t dev;        /* the root's device: only its directories are cached */
    struct timespec now; /* when the scan began */
    /* The denied links' targets this scan handled (scan_link), and the first link it could not
     * resolve (link_err its errno: the spawn fails, as its target may go unmasked). */
    struct link_target *linked;
    size_t n_linked, linked_cap;
    int link_err;
    char *link_path;
    bool *miss; /* per entry of a cached listing: its (device, inode) is not remembered */
    size_t miss_cap;
};

/* Pushes the directory rel for a later scan_dir; st, when not NULL, is its lstat through its
 * parent's descriptor (lets scan_dir take an unchanged listing without opening it). */
static int scan_push(struct scan *s, const char *rel, size_t len, bool denied,
                     const struct stat *st)
{
    if (s->depth == s->stack_cap) {
        size_t nc = s->stack_cap ? 2 * s->stack_cap : 32;
        struct scan_dir *nv = realloc(s->stack, nc * sizeof *nv);
        if (nv == NULL)
            return -1;
        s->stack = nv;
        s->stack_cap = nc;
    }
    char *copy = strndup(rel, len);
    if (copy == NULL)
        return -1;
    s->stack[s->depth] = (struct scan_dir){copy, denied, st != NULL, {0}};
    if (st != NULL)
        s->stack[s->depth].st = *st;
    s->depth++;
    return 0;
}

#define CAP_FIX                                                                                    \
    "remove files the commands do not need (build outputs, dependencies) from the workspace, or "  \
    "have the operator raise the workspace's limits.deny_scan_entries"

/* Ends the scan incomplete (see struct scan): returns 1, or -1 on OOM. */
static int scan_stop(struct scan *s, const char *why, const char *fix, const char *rel, size_t len)
{
    s->stop_why = why;
    s->stop_fix = fix;
    s->stop_path = strndup(rel, len);
    return s->stop_path ? 1 : -1;
}

static int scan_mask(struct scan *s, const char *rel, size_t len)
{
    if (!s->want_masks)
        return 0;
    if (s->n_masks >= CS_FS_DENY_MAX_MASKS)
        return scan_stop(s,
                         "more existing paths match the deny rules than one command's sandbox "
                         "can mask (" CS__FS_STR(CS_FS_DENY_MAX_MASKS) ")",
                         "remove or merge denied files, or deny their directory instead", rel, len);
    /* What the path costs in the plan: its bytes, quoted; in the byte form (not UTF-8) two hex
     * digits a byte; a control character is escaped in six. */
    size_t cost = len + 4;
    if (!cs__fs_utf8_valid(rel, len))
        cost += len;
    for (size_t i = 0; i < len; i++)
        cost += (unsigned char)rel[i] < 0x20 ? 5 : 0;
    if (s->mask_bytes + cost > CS_FS_DENY_MASK_BYTES)
        return scan_stop(s,
                         "the denied paths are longer in total than one command's sandbox plan "
                         "can carry (" CS__FS_STR(CS_FS_DENY_MASK_BYTES) " bytes)",
                         "shorten or remove deeply nested denied paths, or deny a directory "
                         "higher up",
                         rel, len);
    if (s->n_masks == s->masks_cap) {
        size_t nc = s->masks_cap ? 2 * s->masks_cap : 16;
        char **nv = realloc(s->masks, nc * sizeof *nv);
        if (nv == NULL)
            return -1;
        s->masks = nv;
        s->masks_cap = nc;
    }
    s->masks[s->n_masks] = strndup(rel, len);
    if (s->masks[s->n_masks] == NULL)
        return -1;
    s->n_masks++;
    s->mask_bytes += cost;
    return 0;
}

/* ---- denied symlinks (docs/contract/tools.md §5; fs_deny_link.c resolves them) ---- */

static bool linked_has(const struct scan *s, const struct stat *st)
{
    for (size_t i = 0; i < s->n_linked; i++)
        if (s->linked[i].ino == (uint64_t)st->st_ino && s->linked[i].dev == (uint64_t)st->st_dev)
            return true;
    return false;
}

static bool mask_has(const struct scan *s, const char *rel, size_t len)
{
    for (size_t i = 0; i < s->n_masks; i++)
        if (strncmp(s->masks[i], rel, len) == 0 && s->masks[i][len] == '\0')
            return true;
    return false;
}

/*
 * A symlink the rules deny, at path (plen bytes): matched itself (here), or below a denied
 * directory. A link matched itself is masked itself (the helper binds the empty file onto the
 * link: a mount point, which no command can remove, rename or replace). What it leads to inside
 * the workspace, followed through a chain of links, is denied too: masked under its real path
 * (once per scan, unless a rule denies it by name, whose mask the walk makes), remembered, and a
 * directory is walked as denied so that everything below it is remembered (the walk then skips
 * it). A link leading outside has nothing to mask there. A link that cannot be resolved (a
 * directory on its way that cannot be searched, a chain too long) fails the scan once the walk
 * ends. Returns 0, -1 on OOM.
 */
static int scan_link(struct scan *s, const char *path, size_t plen, bool here)
{
    if (here) {
        int m = scan_mask(s, path, plen);
        if (m != 0)
            return m;
    }
    struct cs__fs_link l;
    int err = cs__fs_deny_link_resolve(s->rootfd, path, plen, &l);
    if (err != 0 && s->link_err == 0) {
        s->link_err = err;
        s->link_path = strndup(path, plen);
        if (s->link_path == NULL)
            return -1;
    }
    if (!l.inside || cs_fs_deny_path(s->d, l.target.rel, l.target.len) != NULL ||
        linked_has(s, &l.st))
        return 0;
    if (s->n_linked >= CS_FS_DENY_MAX_MASKS) /* each one needs a mask anyway */
        return scan_stop(s,
                         "more existing paths match the deny rules than one command's sandbox "
                         "can mask (" CS__FS_STR(CS_FS_DENY_MAX_MASKS) ")",
                         "remove or merge denied files, or deny their directory instead", path,
                         plen);
    if (s->n_linked == s->linked_cap) {
        size_t nc = s->linked_cap ? 2 * s->linked_cap : 8;
        struct link_target *nv = realloc(s->linked, nc * sizeof *nv);
        if (nv == NULL)
            return -1;
        s->linked = nv;
        s->linked_cap = nc;
    }
    s->linked[s->n_linked++] = (struct link_target){(uint64_t)l.st.st_dev, (uint64_t)l.st.st_ino};
    cs_fs_deny_remember(s->d, s->rootfd, l.target.rel, &l.st);
    if (!mask_has(s, l.target.rel, l.target.len)) {
        int m = scan_mask(s, l.target.rel, l.target.len);
        if (m != 0)
            return m;
    }
    if (S_ISDIR(l.st.st_mode))
        return scan_push(s, l.target.rel, l.target.len, true, NULL);
    return 0;
}

/* One entry of directory rel (path[0..base) is rel and its '/', with room for any name after
 * it), kind and st as the directory holds them now. Paths of any length and any bytes are
 * scanned: a path too long for the tools to name can still be read by a command (issue 29).
 * dst: a directory's full lstat through the listed directory's descriptor, or NULL; unknown:
 * a probe of the identity memory found its (device, inode) absent just now.
 * Returns 0, 1 when the scan cannot go on (s->stop_*), -1 on OOM. */
static int scan_entry(struct scan *s, char *path, size_t base, const char *name, size_t nl,
                      int kind, const struct stat *st, bool denied, uint8_t *verdict,
                      const struct stat *dst, bool unknown)
{
    if (++s->seen > s->d->scan_cap)
        return scan_stop(s, s->cap_why, CAP_FIX, path, base ? base - 1 : 0);
    if (kind == KIND_OTHER)
        return 0; /* special files: the tools refuse them anyway */
    memcpy(path + base, name, nl);
    path[base + nl] = '\0';
    size_t plen = base + nl;
    bool is_dir = kind == KIND_DIR, is_reg = kind == KIND_REG;
    bool here = false;
    if (!denied && verdict != NULL && *verdict != 0) {
        here = *verdict == 2; /* a cached listing's entry: the rules' answer is known */
    } else if (!denied) {
        here = cs__fs_deny_leaf(s->d, path, plen, base) != NULL;
        if (verdict != NULL)
            *verdict = here ? 2 : 1;
    }
    if (kind == KIND_LINK)
        return denied || here ? scan_link(s, path, plen, here) : 0;
    if (is_dir && !denied && !here && linked_has(s, st))
        return 0; /* a denied link's target directory, walked as denied already */
    /* Identities: path is relative to the root. An entry from a cached listing carries only
     * (device, inode) (st_mode 0): the directory is unchanged, so a known number there is still
     * the file remembered, and its tags are not read again. */
    if (denied || here)
        cs__fs_ids_remember(s->d->ids, s->rootfd, path, st, st->st_mode != 0);
    if (here || (!denied && is_reg && !unknown &&
                 cs__fs_ids_known(s->d->ids, s->rootfd, path, st) && !mask_has(s, path, plen))) {
        int m = scan_mask(s, path, plen);
        if (m != 0)
            return m;
    }
    if (is_dir && scan_push(s, path, plen, denied || here, dst) != 0)
        return -1;
    return 0;
}

/* Whether a directory changed at ts may still change within the same timestamp (see the cache). */
static bool racy(const struct scan *s, const struct timespec *ts)
{
    int64_t age_ms = ((int64_t)s->now.tv_sec - (int64_t)ts->tv_sec) * 1000 +
                     ((int64_t)s->now.tv_nsec - (int64_t)ts->tv_nsec) / 1000000;
    return age_ms < cache_racy_ms;
}

/*
 * Opens the directory rel (len bytes, not "") beneath the root by a walk of its components, each
 * opened with O_NOFOLLOW relative to the one before: no length limit, never a link followed.
 * Returns the fd, or -1 with errno.
 */
static int open_walk(int rootfd, const char *rel, size_t len)
{
    char comp[NAME_MAX + 1];
    int fd = dup(rootfd);
    for (size_t o = 0; fd >= 0 && o < len;) {
        const char *slash = memchr(rel + o, '/', len - o);
        size_t e = slash ? (size_t)(slash - rel) : len;
        if (e - o > NAME_MAX) {
            close(fd);
            errno = ENAMETOOLONG;
            return -1;
        }
        memcpy(comp, rel + o, e - o);
        comp[e - o] = '\0';
        int nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int err = errno;
        close(fd);
        errno = err;
        fd = nfd;
        o = e + 1;
    }
    return fd;
}

/*
 * Opens the directory rel (len bytes, NUL-terminated, not "") for the scan: beneath the root
 * without following a link (one openat2 for a path a tool could name, else the component walk).
 * Returns 0 with *fd, 1 when it is gone or no longer a directory (changed since its parent was
 * read: nothing there to mask), or -1 with errno when it cannot be read.
 */
static int scan_open(const struct scan *s, const char *rel, size_t len, int *fd, struct stat *st)
{
    if (len <= CS_FS_PATH_MAX) {
        int f = cs__fs_open_dir_beneath(s->rootfd, rel);
        if (f >= 0 && fstat(f, st) == 0) {
            *fd = f;
            return 0;
        }
        if (f >= 0)
            close(f);
    }
    /* A long path, or a failure to explain: the walk says which errno it was. */
    int f = open_walk(s->rootfd, rel, len);
    if (f < 0)
        return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? 1 : -1;
    if (fstat(f, st) != 0) {
        int err = errno;
        close(f);
        errno = err;
        return -1;
    }
    *fd = f;
    return 0;
}

/* Whether a directory with lstat st may have its listing taken from the cache at all. */
static bool cacheable_st(const struct scan *s, const struct stat *st)
{
    return s->cache_ok && (uint64_t)st->st_dev == s->dev && !racy(s, &st->st_ctim) &&
           !racy(s, &st->st_mtim);
}

/*
 * The entries of c, an unchanged directory's cached listing (path and base as for scan_entry).
 * fd is that directory, open, when it has subdirectories: each is lstat'ed through it (one
 * fstatat), so that scan_dir can take its listing in turn without opening it; -1 when c has none.
 * Whether each regular file's (device, inode) is remembered is asked under one lock for the whole
 * listing (a hit then goes through cs__fs_ids_known, which reads the tags). Returns as scan_dir.
 */
static int scan_cached(struct scan *s, struct cdir *c, char *path, size_t base, int fd, bool denied)
{
    c->used = true;
    s->d->dirs_hits++;
    if (!denied && c->n > s->miss_cap) {
        bool *nv = realloc(s->miss, c->n * sizeof *nv);
        if (nv == NULL)
            return -1;
        s->miss = nv;
        s->miss_cap = c->n;
    }
    if (!denied) {
        cs__fs_ids_hold(s->d->ids);
        for (size_t i = 0; i < c->n; i++)
            s->miss[i] = c->e[i].kind == KIND_REG &&
                         !cs__fs_ids_has_held(s->d->ids, c->e[i].dev, c->e[i].ino);
        cs__fs_ids_release(s->d->ids);
    }
    int rc = 0;
    struct stat st, dst; /* st: only (device, inode), st_mode 0 (a cached entry, see scan_entry) */
    memset(&st, 0, sizeof st); /* once: a memset per entry was most of this loop's time */
    for (size_t i = 0; i < c->n && rc == 0; i++) {
        const struct centry *e = &c->e[i];
        const struct stat *dp = NULL;
        st.st_dev = (dev_t)e->dev;
        st.st_ino = (ino_t)e->ino;
        if (fd >= 0 && e->kind == KIND_DIR) {
            memcpy(path + base, c->names + e->name, e->len);
            path[base + e->len] = '\0';
            /* Still the listed directory (the listing is unchanged, so it should be): its
             * lstat goes with it; otherwise scan_dir opens it by its path, as before. */
            if (fstatat(fd, path + base, &dst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(dst.st_mode) &&
                (uint64_t)dst.st_dev == e->dev && (uint64_t)dst.st_ino == e->ino)
                dp = &dst;
        }
        rc = scan_entry(s, path, base, c->names + e->name, e->len, e->kind, &st, denied,
                        &c->e[i].here, dp, !denied && s->miss[i]);
    }
    return rc;
}

/* Reads one directory (rel, len bytes, NUL-terminated, "" for the root), or takes its cached
 * listing when it has not changed. pst, when not NULL, is the directory's lstat through its
 * parent's descriptor: a listing unchanged since (identity, size, links, ctime, mtime, out of
 * the racy window) that holds no directory is then taken without opening the directory at all.
 * Returns 0, 1 when the scan cannot go on (s->stop_*: the cap, a directory that cannot be read),
 * -1 on OOM, -2 when the root itself cannot be read. A directory gone since its parent was read
 * is skipped. */
static int scan_dir(struct scan *s, const char *rel, size_t len, bool denied,
                    const struct stat *pst)
{
    int fd;
    struct stat dst;
    if (len > 0 && pst != NULL && cacheable_st(s, pst)) {
        struct cdir *c = cache_find(s->d, rel, len);
        if (c != NULL && c->n_dirs == 0 && cdir_fresh(c, pst)) {
            char *path = malloc(len + 2 + NAME_MAX + 1);
            if (path == NULL)
                return -1;
            memcpy(path, rel, len);
            path[len] = '/';
            int rc = scan_cached(s, c, path, len + 1, -1, denied);
            free(path);
            return rc;
        }
    }
    if (len == 0) {
        fd = openat(s->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
            return -2;
        if (fstat(fd, &dst) != 0) {
            close(fd);
            return -2;
        }
    } else {
        int o = scan_open(s, rel, len, &fd, &dst);
        if (o == 1 || (o < 0 && denied))
            return 0; /* gone; or inside a denied tree, whose topmost mask covers it anyway */
        if (o < 0)
            return scan_stop(s,
                             errno == EACCES || errno == EPERM
                                 ? "a directory of the workspace cannot be read (permission "
                                   "denied)"
                                 : "a directory of the workspace cannot be read",
                             errno == EACCES || errno == EPERM
                                 ? "make the directory readable by the server, or remove it"
                                 : NULL,
                             rel, len);
    }
    int rc = 0;
    char *path = malloc(len + 2 + NAME_MAX + 1);
    if (path == NULL) {
        close(fd);
        return -1;
    }
    memcpy(path, rel, len);
    size_t base = len ? len + 1 : 0;
    if (len)
        path[len] = '/';
    bool cacheable = cacheable_st(s, &dst);
    struct cdir *c = cacheable ? cache_find(s->d, rel, len) : NULL;
    if (c != NULL && cdir_fresh(c, &dst)) {
        /* Unchanged since it was read: the same names, types and identities. */
        rc = scan_cached(s, c, path, base, c->n_dirs > 0 ? fd : -1, denied);
        close(fd);
        free(path);
        return rc;
    }
    DIR *dir = fdopendir(fd);
    if (dir == NULL) {
        close(fd);
        free(path);
        return len == 0
                   ? -2
                   : scan_stop(s, "a directory of the workspace cannot be read", NULL, rel, len);
    }
    struct cbuild b;
    memset(&b, 0, sizeof b);
    b.dead = !cacheable;
    struct dirent *e;
    /* The names first (no stat: cheap), so that a directory taking the scan past its entry cap
     * stops it before a stat of each entry: a workspace far over the cap fails fast. */
    size_t left = s->seen < s->d->scan_cap ? s->d->scan_cap - s->seen : 0;
    size_t count = 0;
    while (count <= left && (e = readdir(dir)) != NULL) {
        const char *name = e->d_name;
        if (!(name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))))
            count++;
    }
    if (count > left) {
        s->seen = s->d->scan_cap + 1;
        rc = scan_stop(s, s->cap_why, CAP_FIX, rel, len);
    }
    rewinddir(dir);
    errno = 0;
    while (rc == 0 && (e = readdir(dir)) != NULL) {
        const char *name = e->d_name;
        if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
            continue;
        size_t nl = strlen(name);
        struct stat st;
        int kind = KIND_OTHER;
        if (fstatat(dirfd(dir), name, &st, AT_SYMLINK_NOFOLLOW) == 0)
            kind = S_ISDIR(st.st_mode)   ? KIND_DIR
                   : S_ISREG(st.st_mode) ? KIND_REG
                   : S_ISLNK(st.st_mode) ? KIND_LINK
                                         : KIND_OTHER;
        cbuild_add(&b, name, nl, kind, &st);
        rc = scan_entry(s, path, base, name, nl, kind, &st, denied,
                        b.dead ? NULL : &b.c.e[b.c.n - 1].here, kind == KIND_DIR ? &st : NULL,
                        false);
        errno = 0;
    }
    if (rc == 0 && errno != 0) /* readdir failed part-way: what is left was never seen */
        rc = len == 0 ? -2
                      : scan_stop(s, "a directory of the workspace cannot be read", NULL, rel, len);
    closedir(dir);
    free(path);
    if (rc == 0 && !b.dead && s->d->dirs_entries + b.c.n <= s->d->scan_cap) {
        b.c.rel = strndup(rel, len);
        b.c.dev = (uint64_t)dst.st_dev;
        b.c.ino = (uint64_t)dst.st_ino;
        b.c.size = (uint64_t)dst.st_size;
        b.c.nlink = (uint64_t)dst.st_nlink;
        b.c.ctim = dst.st_ctim;
        b.c.mtim = dst.st_mtim;
        b.c.used = true;
        if (b.c.rel == NULL)
            cdir_free(&b.c);
        else
            (void)cache_put(s->d, &b.c); /* OOM: not cached, nothing else changes */
    } else {
        cdir_free(&b.c);
        if (c != NULL)
            c->used = false; /* stale: swept after the scan */
    }
    return rc;
}

int cs_fs_deny_scan(struct cs_fs_deny *d, int rootfd, char ***masks, size_t *n_masks,
                    struct cs_diag *diag)
{
    struct scan s;
    memset(&s, 0, sizeof s);
    s.d = d;
    s.rootfd = rootfd;
    s.want_masks = masks != NULL;
    if (masks != NULL) {
        *masks = NULL;
        *n_masks = 0;
    }
    int rc = 0;
    if (d == NULL || d->n == 0)
        return 0;
    snprintf(s.cap_why, sizeof s.cap_why,
             "the workspace holds more files and directories than the deny-rule scan covers (%zu, "
             "the workspace's limits.deny_scan_entries)",
             d->scan_cap);
    struct stat rst;
    pthread_mutex_lock(&d->scan_mu);
    d->dirs_hits = 0;
    s.cache_ok = cs__fs_keeps_inodes(rootfd) && fstat(rootfd, &rst) == 0 &&
                 clock_gettime(CLOCK_REALTIME, &s.now) == 0;
    s.dev = s.cache_ok ? (uint64_t)rst.st_dev : 0;
    if (!s.cache_ok)
        cache_clear(d);
    int r = scan_dir(&s, "", 0, false, NULL);
    while (r == 0 && s.depth > 0) {
        struct scan_dir top = s.stack[--s.depth];
        r = scan_dir(&s, top.rel, strlen(top.rel), top.denied, top.has_st ? &top.st : NULL);
        free(top.rel);
    }
    /* A complete scan keeps the listings it met, and so does one stopped incomplete (what it
     * read is still each directory's listing: the next attempt fails or succeeds faster); OOM
     * or an unreadable root starts afresh next time. */
    if (r == 0 || r == 1)
        cache_sweep(d);
    else
        cache_clear(d);
    pthread_mutex_unlock(&d->scan_mu);
    if (r == -2) {
        cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                    "cannot read the workspace root to resolve its deny rules");
        rc = CSW_ERROR_FILE_OPERATION_FAILED;
    } else if (r == -1) {
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory resolving the workspace's deny rules");
        rc = CSW_ERROR_INTERNAL;
    } else if (r == 1) {
        /* Never a partial mask list: the command must not start (issue 29). */
        char q[CS__FS_QUOTE_SIZE];
        if (s.stop_path[0] == '\0')
            memcpy(q, ".", 2); /* the root itself */
        else
            cs__fs_quote(s.stop_path, strlen(s.stop_path), q, sizeof q);
        cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                    "the workspace's deny rules cannot be enforced, so the command was not "
                    "started: %s, at \"%s\"%s%s",
                    s.stop_why, q, s.stop_fix ? "; remedy: " : "", s.stop_fix ? s.stop_fix : "");
        rc = CSW_ERROR_FILE_OPERATION_FAILED;
    } else if (s.link_err != 0) {
        char q[CS__FS_QUOTE_SIZE];
        cs__fs_quote(s.link_path, strlen(s.link_path), q, sizeof q);
        cs_diag_set(diag, CSW_ERROR_FILE_OPERATION_FAILED,
                    "cannot resolve the denied symlink \"%s\" (%s), so what it leads to cannot "
                    "be masked in the sandbox; remove the link or point it at its target directly",
                    q, strerror(s.link_err));
        rc = CSW_ERROR_FILE_OPERATION_FAILED;
    }
    free(s.stop_path);
    while (s.depth > 0)
        free(s.stack[--s.depth].rel);
    free(s.stack);
    free(s.linked);
    free(s.link_path);
    free(s.miss);
    if (rc != 0 || masks == NULL) {
        for (size_t i = 0; i < s.n_masks; i++)
            free(s.masks[i]);
        free(s.masks);
        return rc;
    }
    *masks = s.masks;
    *n_masks = s.n_masks;
    return 0;
}
