/*
 * fs: the file tools' engine (docs/contract/tools.md §3, read and find). Path normalisation,
 * no-follow opening beneath a workspace root, a windowed read that hashes the whole file in the
 * same pass, and a listing walk with a glob matcher. The gateway's tool handlers call it today; the
 * runner's worker will call it through the wire protocol later, so nothing here knows about MCP,
 * tools or the workspace policy: callers check the workspace first and pass its root.
 *
 * Trust: the root (path or directory fd) comes from the operator's registry and is trusted to be
 * a directory the caller may read. Everything else is the client's: paths, globs, offsets and
 * limits are checked here, and the tree under the root may change at any moment (another process
 * may swap a directory for a symlink to /etc between two system calls). Every open therefore goes
 * through openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) from a root fd,
 * or, where openat2 is missing, a component-by-component O_NOFOLLOW walk from that fd: a checked
 * name is never resolved again by string. See docs/file-tools.md.
 *
 * Entry points: cs_fs_read / cs_fs_read_at, cs_fs_find / cs_fs_find_at, and the pure helpers
 * they are built on (cs_fs_path_normalize, cs_fs_glob_match, cs_fs_utf8_lossy), which the unit
 * tests and the fuzz harness call directly. The library never logs or prints.
 *
 * Errors: fallible functions return 0 or an enum csw_error value (never
 * CSW_ERROR_INVALID_ARGUMENTS, which is 0: arguments arrive decoded), write their outputs only on
 * success, and record the code with a human message in diag (base_diag.h; never an errno
 * number alone) when diag is not NULL.
 *
 * Threads and cancellation: read and find may run on several threads at once (the runners' file
 * pool, base_pool.h); their only shared state, the version cache, has a lock. Each takes a cancel
 * flag (NULL: never cancelled) polled between bounded slices of work (a 256 KiB chunk of a read,
 * a directory entry of a walk); once it is set they stop, release everything and return
 * CSW_ERROR_TIMEOUT (the caller says why in its own message).
 */
#ifndef CS_FS_H
#define CS_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "base_cancel.h"
#include "base_diag.h"
#include "csw.h"

/* ---- caps (docs/contract/tools.md sections 3 and 4) ---- */

/* read: bytes per window; the schema's default limit is the cap */
#define CS_FS_READ_MAX_BYTES CSW_MCP_READ_INPUT_LIMIT_DEFAULT
/* find: paths per page; the schema's default limit is the cap */
#define CS_FS_FIND_MAX_PATHS CSW_MCP_FIND_INPUT_LIMIT_DEFAULT
#define CS_FS_FIND_WALK_CAP  100000 /* find: regular files (and, separately, directories) walked */
#define CS_FS_FIND_MAX_BYTES (64u * 1024u * 1024u) /* find: bytes of paths held during a walk */
#define CS_FS_PATH_MAX       4095 /* bytes of a normalised relative path (PATH_MAX less the NUL) */

/* ---- paths ---- */

/* A normalised relative path: '/'-separated components, none empty, "." or "..". */
struct cs_fs_path {
    char rel[CS_FS_PATH_MAX + 1]; /* NUL-terminated; "" names the root itself */
    size_t len;
    bool dir_only; /* the input ended in "/", "." or "..": the target must be a directory */
};

/*
 * Normalises the n bytes at in lexically: empty and "." components go, ".." removes the component
 * before it. Returns 0 with *out filled, or CSW_ERROR_PATH_ESCAPE for an empty path, an absolute
 * one, a NUL byte or a ".." that climbs above the root, or CSW_ERROR_FILE_OPERATION_FAILED when
 * the result is longer than CS_FS_PATH_MAX. Never touches the file system, never allocates.
 */
int cs_fs_path_normalize(const char *in, size_t n, struct cs_fs_path *out, struct cs_diag *diag);

/* Opens the workspace root directory (root: absolute, NUL-terminated) as an O_PATH fd for the
 * *_at functions. Returns 0 with *fd set (the caller closes it), or
 * CSW_ERROR_FILE_OPERATION_FAILED (for example when the root has gone). */
int cs_fs_root_open(const char *root, int *fd, struct cs_diag *diag);

enum cs_fs_want {
    CS_FS_WANT_FILE, /* a regular file, opened O_RDONLY */
    CS_FS_WANT_DIR,  /* a directory, opened O_RDONLY | O_DIRECTORY */
};

/*
 * Opens the normalised path p beneath rootfd without following any symlink, leaf or ancestor, and
 * without ever opening a fifo, socket or device in a way that can block (special files are
 * classified from an O_PATH fd first; if one is swapped in afterwards, the second open is
 * O_NONBLOCK and its fstat refuses it). Returns 0 with *fd (O_CLOEXEC; the caller closes it) and
 * *st (fstat of that fd), or: CSW_ERROR_FILE_NOT_FOUND, CSW_ERROR_PATH_NOT_DIRECTORY (an ancestor,
 * or a dir_only target, is not a directory), CSW_ERROR_SYMLINK_REJECTED,
 * CSW_ERROR_SPECIAL_FILE_REJECTED, CSW_ERROR_PATH_ESCAPE (the kernel saw an escape), or
 * CSW_ERROR_FILE_OPERATION_FAILED (a directory where a file is wanted, permissions, I/O).
 */
int cs_fs_open_beneath(int rootfd, const struct cs_fs_path *p, enum cs_fs_want want, int *fd,
                       struct stat *st, struct cs_diag *diag);

/* ---- read ---- */

/*
 * The read tool: in is the decoded tool input (workspace_id is ignored here), root the workspace
 * root (absolute, NUL-terminated; cs_fs_read_at takes an fd from cs_fs_root_open instead). Streams
 * the file once through SHA-256 keeping only the window, so the version always belongs to the
 * bytes the window came from, whatever happens to the file meanwhile; for a big file unchanged
 * since an earlier call, only the blocks under the window, proved against that call's hash.
 * Returns 0 with *out filled (release it with csw_mcp_read_output_free), or an error with *out
 * zeroed: CSW_ERROR_OUTPUT_LIMIT (limit 0 or above CS_FS_READ_MAX_BYTES), the errors of
 * cs_fs_path_normalize and cs_fs_open_beneath, CSW_ERROR_FILE_OPERATION_FAILED (root gone, a
 * read error), CSW_ERROR_INTERNAL (out of memory) or CSW_ERROR_TIMEOUT (cancel was set).
 */
int cs_fs_read(const char *root, const struct csw_mcp_read_input *in,
               const struct cs_cancel *cancel, struct csw_mcp_read_output *out,
               struct cs_diag *diag);
int cs_fs_read_at(int rootfd, const struct csw_mcp_read_input *in, const struct cs_cancel *cancel,
                  struct csw_mcp_read_output *out, struct cs_diag *diag);

/*
 * Calls answered from the version cache so far in this process (fs_read.c explains the cache).
 * For tests and benchmarks.
 */
uint64_t cs_fs_version_cache_hits(void);

/* ---- find ---- */

/*
 * The find tool: walks the tree under root with directory fds (never following a link, never
 * leaving the root), lists the regular files whose relative path matches in->glob, sorts them
 * bytewise and returns the page [offset, offset + limit). walk_cap bounds the regular files and,
 * separately, the directories the walk looks at (CS_FS_FIND_WALK_CAP in the tool; tests pass a
 * small one); reaching it sets incomplete. Returns 0 with *out filled (release it with
 * csw_mcp_find_output_free), or an error with *out zeroed: CSW_ERROR_OUTPUT_LIMIT (limit 0 or above
 * CS_FS_FIND_MAX_PATHS), CSW_ERROR_FILE_OPERATION_FAILED (the root has gone or cannot be read),
 * CSW_ERROR_INTERNAL (out of memory), CSW_ERROR_TIMEOUT (cancel was set).
 */
int cs_fs_find(const char *root, const struct csw_mcp_find_input *in,
               const struct cs_cancel *cancel, struct csw_mcp_find_output *out,
               struct cs_diag *diag);
int cs_fs_find_at(int rootfd, const struct csw_mcp_find_input *in, size_t walk_cap,
                  const struct cs_cancel *cancel, struct csw_mcp_find_output *out,
                  struct cs_diag *diag);

/*
 * The find tool's glob over a relative path (docs/contract/tools.md §3): '*' matches within one
 * segment, a "**" segment matches zero or more whole segments, '?' one character (a UTF-8 code
 * point), "[...]" a class of characters and ranges ('!' or '^' first negates; ']' first is
 * literal), '\' makes the next character literal. A glob without '/' matches the last segment (the
 * file name) in any directory; otherwise it matches the whole path, a leading '/' is ignored and a
 * trailing '/' means "everything below". An empty glob matches every path. Pure; cost
 * O(glob_n * path_n) per call; no allocation.
 */
bool cs_fs_glob_match(const char *glob, size_t glob_n, const char *path, size_t path_n);

/* ---- deny rules (docs/contract/tools.md section 5; fs_deny.c) ---- */

#define CS_FS_DENY_MAX_RULES 1024   /* rules per workspace */
#define CS_FS_DENY_SCAN_CAP  100000 /* entries one scan looks at, by default */
#define CS_FS_DENY_SCAN_MIN  1000   /* the registry's limits.deny_scan_entries bounds */
#define CS_FS_DENY_SCAN_MAX  4000000
#define CS_FS_DENY_MAX_MASKS CSW_SANDBOX_PLAN_DENY_MASK_MAX_ITEMS /* paths one spawn may mask */
#define CS_FS_DENY_MAX_IDS   1048576 /* identities remembered per workspace */
/* Bytes the mask paths of one spawn may take in its sandbox plan (quoted and escaped, in hex when
 * not UTF-8): the plan holds at most 2 MiB (helper/sandbox.h CS_SBX_PLAN_MAX), with room left
 * for the command and its environment. */
#define CS_FS_DENY_MASK_BYTES 1572864
#define CS__FS_STR_(x)        #x
#define CS__FS_STR(x)         CS__FS_STR_(x)

/* The documented limits of the deny rules (docs/security-model.md, word for word), as
 * workspace_info's permissions.deny_limits lists them: CS_FS_DENY_N_LIMITS static strings. */
#define CS_FS_DENY_N_LIMITS 8
extern const char *const cs_fs_deny_limits[CS_FS_DENY_N_LIMITS];
/* Which of them names the scan's entry cap (the default's text), and that limit's text for
 * another cap (the workspace's limits.deny_scan_entries) into buf (n bytes, NUL-terminated). */
#define CS_FS_DENY_LIMIT_SCAN 3
void cs_fs_deny_limit_scan_text(size_t cap, char *buf, size_t n);

/*
 * Whether rule (n bytes, as the registry gives it) is a deny rule this matcher accepts: not
 * empty, no NUL, valid UTF-8, at most CS_FS_PATH_MAX bytes, no leading '!' (gitignore's negation
 * is not supported), no empty, "." or ".." component, every '[' closed within its segment, no
 * lone trailing '\', and something left once the anchoring '/' and the trailing "/" or '/' followed
 * by "**" are taken off. Returns true, or false with *why (may be NULL) a static reason. Pure.
 */
bool cs_fs_deny_rule_valid(const char *rule, size_t n, const char **why);

/*
 * Whether glob (n > 0 bytes, find's argument) is one the deny-rule validator above accepts, with
 * two differences: a glob that names the root itself ("/", or "/" then "**") is valid and lists
 * every file, as no glob does, and a leading '!' is a literal character, not a negation. A glob
 * refused here could never match a normalised path (or is not text): find answers INVALID_ARGUMENTS
 * instead of an empty listing. Returns true, or false with *why (may be NULL) a static reason.
 * Pure.
 */
bool cs_fs_glob_valid(const char *glob, size_t n, const char **why);

/*
 * Whether the normalised relative path (path_n bytes, not "") is denied by the valid rule:
 * the path itself or one of its ancestors matches it, gitignore-style. A rule with no '/' except
 * a trailing one matches a component at any depth ("*.pem", ".env", "secrets/"); any other '/'
 * anchors it at the root ("config/local.json", "/build", "**" + "/x"); a trailing "/" or '/'
 * followed by "**" covers the whole tree below (and, since a path's ancestors count, the directory
 * itself). Globs are find's (cs_fs_glob_match: '*' and '?' within a segment, "**" across, classes);
 * '*' matches a leading dot. Byte-wise and case-sensitive. Pure; no allocation.
 */
bool cs_fs_deny_rule_match(const char *rule, size_t rule_n, const char *path, size_t path_n);

/*
 * A workspace's deny rules and its identity memory: the identity (below) of every denied file
 * or directory seen so far (at the first operation, at each spawn, at each listing), so that a
 * file renamed or hard-linked by a command stays denied (docs/contract/tools.md §5). The memory is
 * shared by the file-work threads: every call here is thread-safe. Its changes are journalled
 * for a caller that persists them (cs_fs_deny_take_changes, cs_fs_deny_load).
 */
struct cs_fs_deny;

/* Compiles n valid rules (cs_fs_deny_rule_valid; n <= CS_FS_DENY_MAX_RULES). Returns the new
 * object (free it with cs_fs_deny_free), or NULL on OOM or an invalid rule. */
struct cs_fs_deny *cs_fs_deny_new(const struct cs_str *rules, size_t n);
void cs_fs_deny_free(struct cs_fs_deny *d);
/* The entries the scan covers before it fails closed: CS_FS_DENY_SCAN_MIN .. CS_FS_DENY_SCAN_MAX
 * (clamped), CS_FS_DENY_SCAN_CAP until set. Set it before the first scan. */
void cs_fs_deny_set_scan_cap(struct cs_fs_deny *d, size_t cap);

/* The rule (NUL-terminated, as given; borrowed for d's life) denying the normalised path rel, or
 * NULL. d may be NULL (no rules). */
const char *cs_fs_deny_path(const struct cs_fs_deny *d, const char *rel, size_t rel_n);

/*
 * Identities (fs_deny_ident.c): (device, inode) plus what tells two files with that number apart,
 * each where the file system answers: the inode generation (FS_IOC_GETVERSION) and the birth time
 * (statx STATX_BTIME). Two identities with one (device, inode) are one file unless a tag both
 * carry differs; with no tag at all, (device, inode) alone decides (fail closed).
 */
#define CS_FS_IDENT_GEN   1u /* gen holds the inode generation */
#define CS_FS_IDENT_BTIME 2u /* btime_ns holds the birth time, ns since the epoch */
struct cs_fs_ident {
    uint64_t dev, ino;
    uint32_t gen;
    int64_t btime_ns;
    unsigned flags; /* CS_FS_IDENT_* */
};

/* The identity of the file st describes (st from fstat or fstatat without following): fd is the
 * file itself (any mode; an O_PATH one is reopened through /proc/self/fd for the generation)
 * when name is NULL, else a directory and name a path beneath it, opened O_PATH without
 * following its last component and used only when it is still st's regular file or directory.
 * Returns 0, or -1 when name is no longer that file (or cannot be opened). */
int cs_fs_ident_get(int fd, const char *name, const struct stat *st, struct cs_fs_ident *out);

/*
 * Whether the file st describes (fd and name as for cs_fs_ident_get) has a remembered denied
 * identity. A remembered (device, inode) met under a file whose tags differ is forgotten (the
 * denied file is gone) and false is answered; one whose tags cannot be read counts as known.
 * d may be NULL.
 */
bool cs_fs_deny_known(struct cs_fs_deny *d, int fd, const char *name, const struct stat *st);
/* Remembers that file's identity as denied, replacing one a previous file with the same number
 * left (quietly nothing once CS_FS_DENY_MAX_IDS are held). */
void cs_fs_deny_remember(struct cs_fs_deny *d, int fd, const char *name, const struct stat *st);

/* What the identity memory learned (forget false) and forgot since the last take, in order; or,
 * with replace, the whole set, replacing whatever the caller stored (cs_fs_deny_take_changes). */
struct cs_fs_deny_change {
    struct cs_fs_ident id;
    bool forget;
};
struct cs_fs_deny_changes {
    struct cs_fs_deny_change *v;
    size_t n;
    bool replace;
};
/* Adds n stored identities to d's memory (at start, before any operation). Returns 0, or -1 at
 * the cap or on OOM (those loaded so far stay). Not journalled. */
int cs_fs_deny_load(struct cs_fs_deny *d, const struct cs_fs_ident *v, size_t n);
/* Takes the changes since the last take into *out (release with cs_fs_deny_changes_free; n 0:
 * nothing changed). Returns 0, or -1 on OOM (nothing taken). */
int cs_fs_deny_take_changes(struct cs_fs_deny *d, struct cs_fs_deny_changes *out);
/* Makes the next take hand over the whole set (replace): after the caller failed to store one. */
void cs_fs_deny_resync(struct cs_fs_deny *d);
void cs_fs_deny_changes_free(struct cs_fs_deny_changes *c);

/*
 * The spawn-time (and first-use) scan: walks the tree under rootfd without following links,
 * paths of any length and any bytes (a directory past CS_FS_PATH_MAX is opened one component at
 * a time), remembering the identity of every denied entry and of everything below a denied
 * directory; a directory unchanged since the last complete scan (identity, size, links, ctime and
 * mtime, older than the racy window) is not read again. When masks is not NULL it receives the
 * paths to mask in the sandbox: each topmost denied file, directory or symlink, what a denied
 * symlink leads to inside the workspace (under its real path; a directory there is walked as
 * denied), and every other regular file whose identity is remembered (a hard link of a denied
 * file); *n_masks their number.
 * Returns 0 (the caller frees each string and the array) only when the scan covered the whole
 * workspace; CSW_ERROR_FILE_OPERATION_FAILED when the root cannot be read or the scan cannot be
 * complete (more than CS_FS_DENY_SCAN_CAP entries, more than CS_FS_DENY_MAX_MASKS masks, masks
 * over CS_FS_DENY_MASK_BYTES, a directory that cannot be read, a denied symlink that cannot be
 * resolved): diag names the reason, the path
 * (escaped, cs__fs_quote) and a remedy where there is one, and the spawn must fail closed, never
 * run with a partial list (issue 29); CSW_ERROR_INTERNAL on OOM.
 */
int cs_fs_deny_scan(struct cs_fs_deny *d, int rootfd, char ***masks, size_t *n_masks,
                    struct cs_diag *diag);

/*
 * read and find with deny rules (d may be NULL: none): read answers CSW_ERROR_PATH_DENIED for a
 * denied path (after PATH_ESCAPE, before any file check: whether or not it exists) and for a file
 * whose identity is remembered; find never lists a denied path or a remembered identity, never
 * descends into a denied directory, and remembers the denied entries it meets.
 */
int cs_fs_read_deny(const char *root, struct cs_fs_deny *d, const struct csw_mcp_read_input *in,
                    const struct cs_cancel *cancel, struct csw_mcp_read_output *out,
                    struct cs_diag *diag);
int cs_fs_find_deny(const char *root, struct cs_fs_deny *d, const struct csw_mcp_find_input *in,
                    size_t walk_cap, const struct cs_cancel *cancel,
                    struct csw_mcp_find_output *out, struct cs_diag *diag);

/* ---- UTF-8 ---- */

/*
 * Decodes the n bytes at s as UTF-8 into out, replacing every maximal ill-formed subpart (Unicode
 * chapter 3, "U+FFFD substitution of maximal subparts"; the WHATWG decoder) by U+FFFD, including a
 * sequence cut by the end of the input. out must hold 3 * n + 1 bytes; the result is
 * NUL-terminated. Returns its length; *lossy says whether anything was replaced.
 */
size_t cs_fs_utf8_lossy(const unsigned char *s, size_t n, char *out, bool *lossy);

/* ---- internals shared by the module's files (cs__fs_: not for other modules) ---- */

/* One step of UTF-8 decoding at s (n >= 1 bytes): returns the bytes of a well-formed sequence with
 * *cp its code point and *valid true, or the length of the maximal ill-formed subpart (>= 1) with
 * *cp U+FFFD and *valid false. */
size_t cs__fs_utf8_step(const unsigned char *s, size_t n, uint32_t *cp, bool *valid);
/* True when the n bytes at s are well-formed UTF-8. */
bool cs__fs_utf8_valid(const char *s, size_t n);
/* At most max bytes of the n at s, cut back to a code point boundary (for quoting in messages). */
int cs__fs_clip(const char *s, size_t n, size_t max);

/* find's glob engine, shared with the deny matcher: one glob segment against one path segment,
 * and a glob's segments against a path's ("**" across segments). */
bool cs__fs_seg_match(const unsigned char *p, size_t pn, const unsigned char *s, size_t sn);
bool cs__fs_path_match(const unsigned char *g, size_t gn, const unsigned char *s, size_t sn);
/* The PATH_DENIED check of a normalised path: 0, or CSW_ERROR_PATH_DENIED with diag naming the
 * rule (never anything about the file). */
/* cs_fs_deny_path for the scan: a path none of whose ancestors a rule denies, with leaf the
 * offset of its last component; only that component (or the whole path, for an anchored rule)
 * is matched, after a quick rejection on the rule's literal ends. */
const char *cs__fs_deny_leaf(const struct cs_fs_deny *d, const char *rel, size_t rel_n,
                             size_t leaf);
/* Quotes the n bytes at s for a message, clipped to fit cap bytes (cap >= 32, with the NUL):
 * valid UTF-8 as it is, '"' and '\\' escaped by '\\', other bytes (control, not UTF-8) as
 * \\xNN; a long path keeps its head and tail around "...". */
#define CS__FS_QUOTE_SIZE 200
void cs__fs_quote(const char *s, size_t n, char *out, size_t cap);
/* Tests: the age under which a directory's listing is not cached (default 2000 ms), and how
 * many directories the last scan of d took from its cache. */
void cs__fs_deny_cache_window(long ms);
size_t cs__fs_deny_cache_hits(const struct cs_fs_deny *d);
int cs__fs_deny_check(const struct cs_fs_deny *d, const struct cs_fs_path *p, struct cs_diag *diag);

/* The identity memory (fs_deny_ident.c), held by a struct cs_fs_deny. */
struct cs__fs_ids;
struct cs__fs_ids *cs__fs_ids_new(void);
void cs__fs_ids_free(struct cs__fs_ids *m);
bool cs__fs_ids_known(struct cs__fs_ids *m, int fd, const char *name, const struct stat *st);
/* verify false: a (device, inode) already known is taken as the same file without reading its
 * tags (the scan's unchanged listing: the directory still holds that inode). */
void cs__fs_ids_remember(struct cs__fs_ids *m, int fd, const char *name, const struct stat *st,
                         bool verify);
/* Many (device, inode) questions under one lock (the scan's unchanged listing: one lock per
 * directory instead of one per file): between cs__fs_ids_hold and cs__fs_ids_release only
 * cs__fs_ids_has_held may be called. A hit still goes through cs__fs_ids_known (the tags). */
void cs__fs_ids_hold(struct cs__fs_ids *m);
void cs__fs_ids_release(struct cs__fs_ids *m);
bool cs__fs_ids_has_held(const struct cs__fs_ids *m, uint64_t dev, uint64_t ino);
int cs__fs_ids_load(struct cs__fs_ids *m, const struct cs_fs_ident *v, size_t n);
int cs__fs_ids_take(struct cs__fs_ids *m, struct cs_fs_deny_changes *out);
void cs__fs_ids_resync(struct cs__fs_ids *m);
/* Denied symlinks (fs_deny_link.c). Where a symlink of the workspace leads: inside is true, with
 * the target's normalised path and lstat, when a chain of links followed within the workspace (at
 * most 40) ends at an existing regular file or directory other than the root; false when it leads
 * outside, to the root, to nothing or to a loop (then only the link itself can be masked). Never
 * follows a link through the kernel, never allocates. Returns 0, or an errno value when a step
 * failed otherwise (a directory that cannot be searched, the root's path unknown for an absolute
 * link, ENAMETOOLONG for a chain longer than the resolver holds), inside then false. */
struct cs__fs_link {
    bool inside;
    struct cs_fs_path target;
    struct stat st;
};
int cs__fs_deny_link_resolve(int rootfd, const char *rel, size_t len, struct cs__fs_link *out);
/* PATH_DENIED (with diag) when p beneath rootfd is, or lies below, a directory whose
 * identity is remembered as denied (a denied link's target, a denied directory renamed), whether
 * or not p exists; else 0. d may be NULL. */
/* Whether the file system under fd keeps inodes, ctimes and identity tags through a rename
 * (fs_deny_ident.c): the identity tags and the scan's directory cache trust only these. */
bool cs__fs_keeps_inodes(int fd);
int cs__fs_deny_under(struct cs_fs_deny *d, int rootfd, const struct cs_fs_path *p,
                      struct cs_diag *diag);

/* The directory rel (normalised, NUL-terminated, at most CS_FS_PATH_MAX bytes, not "") beneath
 * rootfd by one openat2 (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
 * O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC): the deny scan's open, one system call where
 * cs_fs_open_beneath takes two (it must classify a special file before opening it). Returns the
 * fd, or -1 with errno: ENOSYS when openat2 is missing or the fallback is forced (the caller then
 * walks the components itself). */
int cs__fs_open_dir_beneath(int rootfd, const char *rel);

/* ---- test hooks (internal) ---- */

/* Makes every open take the openat2 path (false) or the fallback walk (true), as on a kernel
 * without openat2. The fallback is also chosen for good once openat2 answers ENOSYS. */
void cs__fs_force_fallback(bool on);

#endif
