/*
 * Unit tests of the fs module: path normalisation (escapes, NUL, absolute, empty, ".." inside the
 * root, a sibling whose name has the root as prefix), the glob matcher, lossy UTF-8, read windows
 * and versions (checked against libcrypto directly), the classification of every kind of object
 * a path can meet (through openat2 and through the forced fallback walk, which must agree), and
 * find: sorting, paging, listing versions, the walk cap, skipped links and special files, and a
 * root that has gone.
 *
 * Everything runs in a mkdtemp tree; the test removes it at the end.
 */
#define _XOPEN_SOURCE 700

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"

/* ---- fixture ---- */

static struct {
    char dir[128];  /* mkdtemp, canonical */
    char root[256]; /* <dir>/root: the workspace */
    char evil[256]; /* <dir>/root-evil: a sibling whose name starts with the root's */
    char out[256];  /* <dir>/outside: a directory outside the root */
    bool have_dev;  /* a character device could be made (root in a VM) */
    bool have_sock;
} fx;

static void put(const char *rel, const void *data, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fx.root, rel);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n > 0)
        assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void put_str(const char *rel, const char *s)
{
    put(rel, s, strlen(s));
}

static void mk(const char *rel)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fx.root, rel);
    assert_int_equal(mkdir(path, 0755), 0);
}

static void link_to(const char *target, const char *rel)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fx.root, rel);
    assert_int_equal(symlink(target, path), 0);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int group_setup(void **state)
{
    (void)state;
    char tmpl[] = "/tmp/cs-fs-XXXXXX";
    char canon[PATH_MAX];
    if (!mkdtemp(tmpl) || !realpath(tmpl, canon) || strlen(canon) >= 100)
        return -1;
    memcpy(fx.dir, canon, strlen(canon) + 1);
    snprintf(fx.root, sizeof fx.root, "%s/root", fx.dir);
    snprintf(fx.evil, sizeof fx.evil, "%s/root-evil", fx.dir);
    snprintf(fx.out, sizeof fx.out, "%s/outside", fx.dir);
    if (mkdir(fx.root, 0755) || mkdir(fx.evil, 0755) || mkdir(fx.out, 0755))
        return -1;
    char p[512];
    snprintf(p, sizeof p, "%s/secret", fx.evil);
    FILE *f = fopen(p, "w");
    if (!f)
        return -1;
    fputs("evil secret\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/secret", fx.out);
    f = fopen(p, "w");
    if (!f)
        return -1;
    fputs("outside secret\n", f);
    fclose(f);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    cs__fs_force_fallback(false);
    return nftw(fx.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- path normalisation ---- */

struct norm_case {
    const char *in;
    size_t n; /* 0: strlen(in) */
    int rc;
    const char *want;
    bool dir_only;
};

static void test_normalize_table(void **state)
{
    (void)state;
    static const struct norm_case cases[] = {
        {"a.txt", 0, 0, "a.txt", false},
        {"src/main.c", 0, 0, "src/main.c", false},
        {"a/./b", 0, 0, "a/b", false},
        {"a/../b", 0, 0, "b", false},
        {"a//b///c", 0, 0, "a/b/c", false},
        {"./a", 0, 0, "a", false},
        {"a/b/../../c", 0, 0, "c", false},
        {"a/b/..", 0, 0, "a", true},
        {"a/", 0, 0, "a", true},
        {"a/.", 0, 0, "a", true},
        {".", 0, 0, "", true},
        {"a/..", 0, 0, "", true},
        {"...", 0, 0, "...", false}, /* an ordinary name */
        {"..a/b..", 0, 0, "..a/b..", false},
        {"a\\..\\b", 0, 0, "a\\..\\b", false}, /* backslash is not a separator */
        {"", 0, CSW_ERROR_PATH_ESCAPE, NULL, false},
        {"/etc/passwd", 0, CSW_ERROR_PATH_ESCAPE, NULL, false},
        {"/", 0, CSW_ERROR_PATH_ESCAPE, NULL, false},
        {"..", 0, CSW_ERROR_PATH_ESCAPE, NULL, false},
        {"../x", 0, CSW_ERROR_PATH_ESCAPE, NULL, false},
        {"a/../..", 0, CSW_ERROR_PATH_ESCAPE, NULL, false},
        {"a/../../b/..", 0, CSW_ERROR_PATH_ESCAPE, NULL, false},
        {"../root-evil/secret", 0, CSW_ERROR_PATH_ESCAPE, NULL, false}, /* the sibling prefix */
        {"a/../../root/a", 0, CSW_ERROR_PATH_ESCAPE, NULL, false},
        {"a\0b", 3, CSW_ERROR_PATH_ESCAPE, NULL, false},
        {"\0", 1, CSW_ERROR_PATH_ESCAPE, NULL, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct norm_case *c = &cases[i];
        struct cs_fs_path p;
        struct cs_diag msg = {0};
        size_t n = c->n ? c->n : strlen(c->in);
        int rc = cs_fs_path_normalize(c->in, n, &p, &msg);
        if (rc != c->rc)
            fail_msg("case %zu (%s): rc %d, want %d (%s)", i, c->in, rc, c->rc, msg.text);
        if (rc == 0) {
            assert_string_equal(p.rel, c->want);
            assert_int_equal(p.len, strlen(c->want));
            assert_int_equal(p.dir_only, c->dir_only);
        } else {
            assert_true(msg.text[0] != '\0');
            assert_int_equal(msg.code, rc); /* the diag carries the code returned */
        }
    }
}

/* A path's control bytes reach the message spelled out (base_diag), not raw. */
static void test_normalize_message_control_bytes(void **state)
{
    (void)state;
    struct cs_fs_path p;
    struct cs_diag msg = {0};
    static const char in[] = "a\x1b[2J/../../x";
    assert_int_equal(cs_fs_path_normalize(in, sizeof in - 1, &p, &msg), CSW_ERROR_PATH_ESCAPE);
    assert_int_equal(msg.code, CSW_ERROR_PATH_ESCAPE);
    assert_string_equal(msg.text, "a\\x1B[2J/../../x: '..' climbs above the workspace root");
}

static void test_normalize_length(void **state)
{
    (void)state;
    static char in[3 * CS_FS_PATH_MAX];
    struct cs_fs_path p;
    struct cs_diag msg = {0};
    /* Exactly CS_FS_PATH_MAX bytes fits. */
    memset(in, 'a', CS_FS_PATH_MAX);
    assert_int_equal(cs_fs_path_normalize(in, CS_FS_PATH_MAX, &p, &msg), 0);
    assert_int_equal(p.len, CS_FS_PATH_MAX);
    /* One more does not. */
    memset(in, 'a', CS_FS_PATH_MAX + 1);
    assert_int_equal(cs_fs_path_normalize(in, CS_FS_PATH_MAX + 1, &p, &msg),
                     CSW_ERROR_FILE_OPERATION_FAILED);
    /* A long input that normalises short is fine: "x/" then a long component, then "..". */
    size_t n = 0;
    in[n++] = 'x';
    in[n++] = '/';
    memset(in + n, 'b', 2 * CS_FS_PATH_MAX);
    n += 2 * CS_FS_PATH_MAX;
    memcpy(in + n, "/..", 3);
    n += 3;
    assert_int_equal(cs_fs_path_normalize(in, n, &p, &msg), 0);
    assert_string_equal(p.rel, "x");
    /* An escape wins over the length. */
    memcpy(in, "../", 3);
    memset(in + 3, 'c', 2 * CS_FS_PATH_MAX);
    assert_int_equal(cs_fs_path_normalize(in, 3 + 2 * CS_FS_PATH_MAX, &p, &msg),
                     CSW_ERROR_PATH_ESCAPE);
}

/* ---- glob ---- */

struct glob_case {
    const char *glob;
    const char *path;
    bool match;
};

/* The deny matcher (docs/contract/tools.md §5): gitignore anchoring, "**", trailing slash (alone or
 * after "**"), dotfiles, ancestors, byte-wise and case-sensitive. */
static void test_deny_table(void **state)
{
    (void)state;
    static const struct glob_case cases[] = {
        /* no '/': a component at any depth */
        {".env", ".env", true},
        {".env", "sub/.env", true},
        {".env", "a/b/c/.env", true},
        {".env", ".env/inside", true}, /* a directory named .env: everything below */
        {".env", ".envrc", false},
        {".env", "env", false},
        {".env", "x.env", false},
        {".env", ".ENV", false},
        {".env.*", ".env.local", true},
        {".env.*", "a/.env.prod", true},
        {".env.*", ".env", false},
        {"*.pem", "k.pem", true},
        {"*.pem", "a/b/k.pem", true},
        {"*.pem", ".pem", true}, /* '*' matches a leading dot */
        {"*.pem", "k.pem.bak", false},
        {"*", ".hidden", true},
        /* trailing '/': a directory pattern at any depth, itself and below */
        {"secrets/", "secrets", true},
        {"secrets/", "secrets/a", true},
        {"secrets/", "x/secrets/a/b", true},
        {"secrets/", "secretsfile", false},
        {"secrets/", "my-secrets/a", false},
        /* a '/' elsewhere anchors at the root */
        {"config/local.json", "config/local.json", true},
        {"config/local.json", "x/config/local.json", false},
        {"config/local.json", "config/app.json", false},
        {"/build", "build", true},
        {"/build", "build/out.o", true},
        {"/build", "sub/build", false},
        {"secrets/**", "secrets", true},
        {"secrets/**", "secrets/a/b", true},
        {"secrets/**", "x/secrets/a", false},
        {"./tmp/*.log", "tmp/a.log", true},
        {"./tmp/*.log", "x/tmp/a.log", false},
        /* "**" crosses directories */
        {"**/*.pem", "k.pem", true},
        {"**/*.pem", "a/b/k.pem", true},
        {"**/*.pem", "a/b/k.pub", false},
        {"a/**/b", "a/b", true},
        {"a/**/b", "a/x/y/b", true},
        {"a/**/b", "a/x/y/b/c", true},
        {"a/**/b", "z/a/x/b", false},
        {"**/cache", "x/y/cache/z", true},
        /* classes and '?', byte-wise */
        {"key[0-9].txt", "k/key7.txt", true},
        {"key[0-9].txt", "key.txt", false},
        {"?.key", "a.key", true},
        {"?.key", "ab.key", false},
        {"caf\xc3\xa9", "caf\xc3\xa9", true},
        {"caf\xc3\xa9", "cafe", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const struct glob_case *c = &cases[i];
        const char *why = NULL;
        if (!cs_fs_deny_rule_valid(c->glob, strlen(c->glob), &why))
            fail_msg("case %zu: rule '%s' refused: %s", i, c->glob, why);
        bool got = cs_fs_deny_rule_match(c->glob, strlen(c->glob), c->path, strlen(c->path));
        if (got != c->match)
            fail_msg("case %zu: rule '%s' path '%s': got %d", i, c->glob, c->path, got);
    }
    static const struct {
        const char *rule;
        const char *why;
    } bad[] = {
        {"", "empty pattern"},
        {"!x", "negation ('!') is not supported: deny rules only add"},
        {"/", "matches the workspace root itself"},
        {"/**", "matches the workspace root itself"},
        {"./", "has a '.' or '..' component, which no normalised path holds"},
        {"a//b", "has an empty path component"},
        {"a/../b", "has a '.' or '..' component, which no normalised path holds"},
        {"a/./b", "has a '.' or '..' component, which no normalised path holds"},
        {"[abc", "has a '[' class with no closing ']'"},
        {"x/[]", "has a '[' class with no closing ']'"},
        {"x\\", "ends with a lone backslash"},
        {"\xff", "not valid UTF-8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *why = NULL;
        assert_false(cs_fs_deny_rule_valid(bad[i].rule, strlen(bad[i].rule), &why));
        assert_string_equal(why, bad[i].why);
    }
    assert_false(cs_fs_deny_rule_valid("a\0b", 3, NULL));
    assert_true(cs_fs_deny_rule_valid("\\[x", 3, NULL)); /* an escaped '[' is literal */
    assert_true(cs_fs_deny_rule_valid("**", 2, NULL));

    /* find's globs: the same refusals, except that naming the root lists everything and a
     * leading '!' is literal. */
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *why = NULL;
        bool ok = cs_fs_glob_valid(bad[i].rule, strlen(bad[i].rule), &why);
        bool exempt = strcmp(bad[i].rule, "/") == 0 || strcmp(bad[i].rule, "/**") == 0 ||
                      strcmp(bad[i].rule, "!x") == 0;
        if (bad[i].rule[0] == '\0' || exempt) {
            assert_true(ok || bad[i].rule[0] == '\0');
            continue;
        }
        assert_false(ok);
        assert_string_equal(why, bad[i].why);
    }
    assert_true(cs_fs_glob_valid("*.c", 3, NULL));
    assert_true(cs_fs_glob_valid("src/**/*.h", 10, NULL));
    assert_true(cs_fs_glob_valid("docs/", 5, NULL));
    assert_false(cs_fs_glob_valid("a\0b", 3, NULL));
}

/* read and find with rules, and the identity memory, on a real tree. */
/* The scan's matcher (cs__fs_deny_leaf: the last component only, after a quick rejection on the
 * rule's literal ends) answers as cs_fs_deny_path for every path whose ancestors are not denied,
 * over rules with escapes, classes, '?', "**", anchors and non-ASCII bytes and paths of one to
 * three components (invalid UTF-8 included, as a directory listing may hold). */
static void test_deny_leaf_equals_path(void **state)
{
    (void)state;
    static const char *const rules[] = {
        ".env",       ".env.*",   "**/*.pem",   "*.pem",         "secrets/",
        "**/id_rsa*", "vault/**", "**/.aws/**", "a/*/x.pem",     "[a-z]*",
        "?.pem",      "\\[x]",    "*\\*b",      "\xc3\xa9*",     "*m",
        "p?m",        "**",       "a/**/keys",  "/secrets",      "./vault",
        "*.p[e]m",    "[!a]",     "[]]",        "x.pem/",        "**/credentials*",
        "*.\\pem",    "k?ys",     "a/x.pem",    "**/a/**/x.pem", "*\xc3\xa9.pem",
    };
    static const char *const comps[] = {
        "a",     ".env",         "x.pem",      "id_rsa", "id_rsa.pub", "secrets",
        "keys",  "\xc3\xa9.pem", "\xff.pem",   "[x]",    "a*b",        ".aws",
        "vault", "pem",          ".env.local", "k.pxm",
    };
    enum { NC = sizeof comps / sizeof *comps };
    size_t checked = 0, denied = 0;
    for (size_t r = 0; r < sizeof rules / sizeof *rules; r++) {
        struct cs_str rule = {(char *)rules[r], strlen(rules[r])};
        struct cs_fs_deny *d = cs_fs_deny_new(&rule, 1);
        assert_non_null(d);
        for (size_t k = 0; k < NC * NC * NC + NC * NC + NC; k++) {
            /* k enumerates the paths of one, two and three components */
            size_t idx[3], depth;
            if (k < NC) {
                depth = 1, idx[0] = k;
            } else if (k < NC + NC * NC) {
                depth = 2, idx[0] = (k - NC) / NC, idx[1] = (k - NC) % NC;
            } else {
                size_t j = k - NC - NC * NC;
                depth = 3, idx[0] = j / (NC * NC), idx[1] = j / NC % NC, idx[2] = j % NC;
            }
            char path[256];
            size_t n = 0, leaf = 0;
            bool ancestor_denied = false;
            for (size_t c = 0; c < depth; c++) {
                if (c > 0) {
                    if (cs_fs_deny_path(d, path, n) != NULL)
                        ancestor_denied = true;
                    path[n++] = '/';
                }
                leaf = n;
                size_t l = strlen(comps[idx[c]]);
                memcpy(path + n, comps[idx[c]], l);
                n += l;
            }
            path[n] = '\0';
            if (ancestor_denied)
                continue;
            bool want = cs_fs_deny_path(d, path, n) != NULL;
            bool got = cs__fs_deny_leaf(d, path, n, leaf) != NULL;
            if (got != want)
                fail_msg("rule '%s' path '%s': leaf %d, path %d", rules[r], path, got, want);
            checked++;
            denied += want;
        }
        cs_fs_deny_free(d);
    }
    assert_true(checked > 10000);
    assert_true(denied > 500); /* the table is not all misses */
}

/* One scan of d over rootfd: the masks, sorted and joined with ' ' into out. */
static void scan_masks(struct cs_fs_deny *d, int rootfd, char *out, size_t cap)
{
    char **masks = NULL;
    size_t n = 0;
    struct cs_diag msg = {0};
    assert_int_equal(cs_fs_deny_scan(d, rootfd, &masks, &n, &msg), 0);
    for (size_t i = 0; i < n; i++) /* insertion sort: a handful */
        for (size_t j = i; j > 0 && strcmp(masks[j - 1], masks[j]) > 0; j--) {
            char *t = masks[j];
            masks[j] = masks[j - 1];
            masks[j - 1] = t;
        }
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s%s", i ? " " : "", masks[i]);
        free(masks[i]);
    }
    free(masks);
}

/* A path in a message (issue 29): UTF-8 as it is, '"' and '\' escaped, any other byte as \xNN,
 * a long one cut to its head and tail around "..." within the buffer. */
static void test_deny_quote(void **state)
{
    (void)state;
    char q[CS__FS_QUOTE_SIZE];
    cs__fs_quote("app/.env", 8, q, sizeof q);
    assert_string_equal(q, "app/.env");
    cs__fs_quote("\xff"
                 "app/a\"b\\c\n\xc3\xa9",
                 13, q, sizeof q);
    assert_string_equal(q, "\\xffapp/a\\\"b\\\\c\\x0a\xc3\xa9");
    char big[6000];
    memset(big, 'x', sizeof big);
    big[0] = 'H';
    big[sizeof big - 1] = 'T';
    big[sizeof big - 2] = '\xfe';
    cs__fs_quote(big, sizeof big, q, sizeof q);
    assert_true(strlen(q) < sizeof q);
    assert_int_equal(q[0], 'H');
    assert_non_null(strstr(q, "..."));
    assert_string_equal(q + strlen(q) - 5, "\\xfeT");
    assert_true(cs__fs_utf8_valid(q, strlen(q)));
}

/* Paths past every length limit are scanned and masked (issue 29): a denied file below 17
 * nested 250-byte directories (deeper than PATH_MAX) and a 255-byte denied name there, made and
 * removed through directory fds. */
static void test_deny_scan_deep(void **state)
{
    (void)state;
    char root[] = "/tmp/cs-fs-deny-deep-XXXXXX";
    assert_non_null(mkdtemp(root));
    char name[251], pem[256];
    memset(name, 'd', 250);
    name[250] = '\0';
    memset(pem, 'k', 251);
    memcpy(pem + 251, ".pem", 5);
    int fd = open(root, O_RDONLY | O_DIRECTORY);
    assert_true(fd >= 0);
    int fds[17];
    for (int i = 0; i < 17; i++) {
        assert_int_equal(mkdirat(fd, name, 0755), 0);
        fds[i] = fd;
        fd = openat(fd, name, O_RDONLY | O_DIRECTORY);
        assert_true(fd >= 0);
    }
    close(openat(fd, ".env", O_CREAT | O_WRONLY, 0644));
    close(openat(fd, pem, O_CREAT | O_WRONLY, 0644));
    close(openat(fd, "ok.txt", O_CREAT | O_WRONLY, 0644));
    struct cs_str rules[] = {{".env", 4}, {"*.pem", 5}};
    struct cs_fs_deny *d = cs_fs_deny_new(rules, 2);
    int rootfd = -1;
    assert_int_equal(cs_fs_root_open(root, &rootfd, NULL), 0);
    char **masks = NULL;
    size_t n = 0;
    struct cs_diag msg = {0};
    assert_int_equal(cs_fs_deny_scan(d, rootfd, &masks, &n, &msg), 0);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(masks[i]);
        assert_true(l > CS_FS_PATH_MAX);
        assert_true(strcmp(masks[i] + l - 5, "/.env") == 0 || strcmp(masks[i] + l - 255, pem) == 0);
        free(masks[i]);
    }
    free(masks);
    close(rootfd);
    cs_fs_deny_free(d);
    assert_int_equal(unlinkat(fd, ".env", 0), 0);
    assert_int_equal(unlinkat(fd, pem, 0), 0);
    assert_int_equal(unlinkat(fd, "ok.txt", 0), 0);
    close(fd);
    for (int i = 16; i >= 0; i--) {
        assert_int_equal(unlinkat(fds[i], name, AT_REMOVEDIR), 0);
        close(fds[i]);
    }
    rmdir(root);
}

/* Makes <root>/<rel> (a directory) owned by 65534 with mode; root must be root's. */
static void mk_owned(const char *root, const char *rel, mode_t mode)
{
    char p[256];
    snprintf(p, sizeof p, "%s%s%s", root, rel[0] ? "/" : "", rel);
    if (rel[0])
        assert_int_equal(mkdir(p, 0755), 0);
    assert_int_equal(chown(p, 65534, 65534), 0);
    assert_int_equal(chmod(p, mode), 0);
}

/* One scan of root with ".env" and "secrets/" as the unprivileged 65534, in a child: exits 0
 * when the answer is want (0, or CSW_ERROR_FILE_OPERATION_FAILED naming needle). */
static int scan_as_nobody(const char *root, int want, const char *needle)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
            _exit(3);
        struct cs_str rules[] = {{".env", 4}, {"secrets/", 8}};
        struct cs_fs_deny *d = cs_fs_deny_new(rules, 2);
        int rootfd = -1;
        if (d == NULL || cs_fs_root_open(root, &rootfd, NULL) != 0)
            _exit(4);
        char **masks = NULL;
        size_t n = 0;
        struct cs_diag msg = {0};
        int rc = cs_fs_deny_scan(d, rootfd, &masks, &n, &msg);
        if (rc != want)
            _exit(5);
        if (needle && strstr(msg.text, needle) == NULL)
            _exit(6);
        _exit(rc == 0 && n != 2 ? 7 : 0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

/* A directory the scan cannot read refuses the spawn naming it (issue 29), unless it is inside
 * a denied tree, which the topmost mask covers. Needs root (to make the tree for 65534). */
static void test_deny_scan_unreadable(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    char a[] = "/tmp/cs-fs-deny-unread-XXXXXX", b[] = "/tmp/cs-fs-deny-unread-XXXXXX";
    assert_non_null(mkdtemp(a));
    assert_non_null(mkdtemp(b));
    /* a: only secrets/shut is unreadable: scanned, masks .env and secrets */
    mk_owned(a, "", 0755);
    mk_owned(a, "secrets", 0755);
    mk_owned(a, "secrets/shut", 0);
    char p[256];
    snprintf(p, sizeof p, "%s/.env", a);
    close(open(p, O_CREAT | O_WRONLY, 0644));
    assert_int_equal(scan_as_nobody(a, 0, NULL), 0);
    /* b: src/shut is unreadable: refused, the path and the reason named */
    mk_owned(b, "", 0755);
    mk_owned(b, "src", 0755);
    mk_owned(b, "src/shut", 0);
    assert_int_equal(
        scan_as_nobody(b, CSW_ERROR_FILE_OPERATION_FAILED, "permission denied), at \"src/shut\""),
        0);
    for (int i = 0; i < 2; i++) {
        const char *r = i ? b : a;
        char q[300];
        snprintf(q, sizeof q, "rm -rf '%s'", r);
        assert_int_equal(system(q), 0);
    }
}

/* The scan's directory cache never lets a change through: after each change below, a scan that
 * may use the cache answers what a scan that reads everything answers, and what the rules say
 * (a new denied file, a directory renamed to a denied name, a new directory whose name is
 * denied, a renamed tree, a hard link of a denied file), scanned at once and once the change is
 * old enough for the cache to trust the directories again. An unchanged tree is taken from the
 * cache (hits counted), and that answer is compared with a full read. */
static void test_deny_scan_cache(void **state)
{
    (void)state;
    char root[] = "/tmp/cs-fs-deny-cache-XXXXXX";
    assert_non_null(mkdtemp(root));
    char p[512], q[512];
    static const char *const dirs[] = {"a", "a/b", "c"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", root, dirs[i]);
        assert_int_equal(mkdir(p, 0755), 0);
    }
    static const char *const files[] = {"a/f1.txt", "a/b/f2.txt", "top.txt"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", root, files[i]);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fclose(f);
    }
    struct cs_str rules[] = {{"*.pem", 5}, {"secrets/", 8}, {"**/.env", 7}};
    struct cs_fs_deny *d = cs_fs_deny_new(rules, 3), *d2 = cs_fs_deny_new(rules, 3);
    assert_non_null(d);
    assert_non_null(d2);
    int rootfd = -1;
    assert_int_equal(cs_fs_root_open(root, &rootfd, NULL), 0);
    /* Listings older than 50 ms are cached; the tree is made older than that first. */
    cs__fs_deny_cache_window(50);
    usleep(120 * 1000);
    char got[1024], want[1024];
    scan_masks(d, rootfd, got, sizeof got);
    assert_string_equal(got, "");
    scan_masks(d, rootfd, got, sizeof got);
    assert_string_equal(got, "");
    assert_int_equal(cs__fs_deny_cache_hits(d), 4); /* root, a, a/b, c: all from the cache */

    static const struct {
        const char *op, *from, *to, *masks;
        size_t dirs; /* the directories a scan reads then */
    } steps[] = {
        {"create", "a/b/new.pem", NULL, "a/b/new.pem", 4},
        {"rename", "c", "secrets", "a/b/new.pem secrets", 4},
        {"mkdir", "a/.env", NULL, "a/.env a/b/new.pem secrets", 5},
        {"rename", "a", "z", "secrets z/.env z/b/new.pem", 5},
        {"link", "z/b/new.pem", "top-link.txt", "secrets top-link.txt z/.env z/b/new.pem", 5},
    };
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
        snprintf(p, sizeof p, "%s/%s", root, steps[i].from);
        if (steps[i].to)
            snprintf(q, sizeof q, "%s/%s", root, steps[i].to);
        if (strcmp(steps[i].op, "create") == 0) {
            FILE *f = fopen(p, "w");
            assert_non_null(f);
            fclose(f);
        } else if (strcmp(steps[i].op, "mkdir") == 0) {
            assert_int_equal(mkdir(p, 0755), 0);
        } else if (strcmp(steps[i].op, "rename") == 0) {
            assert_int_equal(rename(p, q), 0);
        } else {
            assert_int_equal(link(p, q), 0);
        }
        /* d2 at once: the changed directories are too recent to be trusted (a change in the
         * clock tick of the last read is the hard case) ... */
        scan_masks(d2, rootfd, got, sizeof got);
        if (strcmp(got, steps[i].masks) != 0)
            fail_msg("step %zu (%s %s) at once: masks '%s', want '%s'", i, steps[i].op,
                     steps[i].from, got, steps[i].masks);
        /* ... d once the change is old enough to be trusted: its cached listings of the changed
         * directories are stale and must be seen so ... */
        usleep(120 * 1000);
        scan_masks(d, rootfd, got, sizeof got);
        if (strcmp(got, steps[i].masks) != 0)
            fail_msg("step %zu (%s %s): masks '%s', want '%s'", i, steps[i].op, steps[i].from, got,
                     steps[i].masks);
        /* ... and then the whole tree comes from the cache, with the answer of a full read. */
        scan_masks(d, rootfd, got, sizeof got);
        assert_int_equal(cs__fs_deny_cache_hits(d), steps[i].dirs);
        cs__fs_deny_cache_window(LONG_MAX / 2); /* nothing is cached: a full read */
        scan_masks(d2, rootfd, want, sizeof want);
        assert_int_equal(cs__fs_deny_cache_hits(d2), 0);
        cs__fs_deny_cache_window(50);
        if (strcmp(got, want) != 0 || strcmp(got, steps[i].masks) != 0)
            fail_msg("step %zu: cached '%s', full read '%s', want '%s'", i, got, want,
                     steps[i].masks);
    }
    close(rootfd);
    cs_fs_deny_free(d);
    cs_fs_deny_free(d2);
    cs__fs_deny_cache_window(2000);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

/*
 * The scan's cheap path for an unchanged directory (issue 29, the spawn's cost): a leaf's listing
 * is taken on its lstat through its parent's descriptor, without opening it. What it must still
 * see: a leaf changed while its parent is not (the parent, which has subdirectories, is opened
 * and lstats them afresh), and a leaf replaced by another directory of the same name (a new
 * inode: its old listing must not be used). Each answer is checked against a full read, with
 * openat2 and with the component walk that replaces it on a kernel without it.
 */
static void test_deny_scan_leaf_unopened(void **state)
{
    (void)state;
    char root[] = "/tmp/cs-fs-deny-leaf-XXXXXX";
    assert_non_null(mkdtemp(root));
    char p[512], q[512];
    static const char *const dirs[] = {"d", "d/leaf1", "d/leaf2"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", root, dirs[i]);
        assert_int_equal(mkdir(p, 0755), 0);
    }
    static const char *const files[] = {"d/leaf1/a.txt", "d/leaf2/b.txt"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", root, files[i]);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fclose(f);
    }
    struct cs_str rules[] = {{".env", 4}};
    for (int fb = 0; fb <= 1; fb++) {
        cs__fs_force_fallback(fb != 0);
        struct cs_fs_deny *d = cs_fs_deny_new(rules, 1), *d2 = cs_fs_deny_new(rules, 1);
        assert_non_null(d);
        assert_non_null(d2);
        int rootfd = -1;
        assert_int_equal(cs_fs_root_open(root, &rootfd, NULL), 0);
        cs__fs_deny_cache_window(50);
        usleep(120 * 1000);
        char got[512], want[512];
        scan_masks(d, rootfd, got, sizeof got);
        scan_masks(d, rootfd, got, sizeof got);
        /* root, d, leaf1, leaf2 (and moved, the second time round) */
        assert_int_equal(cs__fs_deny_cache_hits(d), fb ? 5 : 4);
        assert_string_equal(got, fb ? "d/moved/.env" : "");
        if (!fb) {
            /* A leaf changes, its parent does not. */
            snprintf(p, sizeof p, "%s/d/leaf1/.env", root);
            FILE *f = fopen(p, "w");
            assert_non_null(f);
            fclose(f);
            usleep(120 * 1000);
            scan_masks(d, rootfd, got, sizeof got);
            assert_string_equal(got, "d/leaf1/.env");
            assert_int_equal(cs__fs_deny_cache_hits(d), 3); /* leaf1 read again */
            /* The leaf replaced by a new, empty directory of the same name. */
            snprintf(p, sizeof p, "%s/d/leaf1", root);
            snprintf(q, sizeof q, "%s/d/moved", root);
            assert_int_equal(rename(p, q), 0);
            assert_int_equal(mkdir(p, 0755), 0);
            usleep(120 * 1000);
            scan_masks(d, rootfd, got, sizeof got);
            assert_string_equal(got, "d/moved/.env");
        }
        scan_masks(d, rootfd, got, sizeof got); /* all from the cache now */
        assert_int_equal(cs__fs_deny_cache_hits(d), 5);
        cs__fs_deny_cache_window(LONG_MAX / 2); /* nothing cached: a full read */
        scan_masks(d2, rootfd, want, sizeof want);
        assert_int_equal(cs__fs_deny_cache_hits(d2), 0);
        assert_string_equal(got, want);
        assert_string_equal(got, "d/moved/.env");
        close(rootfd);
        cs_fs_deny_free(d);
        cs_fs_deny_free(d2);
    }
    cs__fs_force_fallback(false);
    cs__fs_deny_cache_window(2000);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

static void test_deny_read_find(void **state)
{
    (void)state;
    char root[] = "/tmp/cs-fs-deny-XXXXXX";
    assert_non_null(mkdtemp(root));
    char p[512];
    snprintf(p, sizeof p, "%s/sub", root);
    assert_int_equal(mkdir(p, 0755), 0);
    const char *files[] = {".env", "sub/.env", "sub/ok.txt", "k.pem"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", root, files[i]);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fputs("secret", f);
        fclose(f);
    }
    struct cs_str rules[] = {{".env", 4}, {"*.pem", 5}};
    struct cs_fs_deny *d = cs_fs_deny_new(rules, 2);
    assert_non_null(d);
    int rootfd = -1;
    assert_int_equal(cs_fs_root_open(root, &rootfd, NULL), 0);
    char **masks = NULL;
    size_t n = 0;
    struct cs_diag msg = {0};
    assert_int_equal(cs_fs_deny_scan(d, rootfd, &masks, &n, &msg), 0);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++)
        free(masks[i]);
    free(masks);

    struct csw_mcp_read_input in = {.limit = 100};
    static const char *const denied[] = {".env",      "./.env", "sub/../.env", "sub/.env",
                                         "nope/.env", "k.pem",  ".env/"};
    for (size_t i = 0; i < sizeof denied / sizeof *denied; i++) {
        in.path = (struct cs_str){(char *)denied[i], strlen(denied[i])};
        struct csw_mcp_read_output out;
        assert_int_equal(cs_fs_read_deny(root, d, &in, NULL, &out, &msg), CSW_ERROR_PATH_DENIED);
        assert_null(strstr(msg.text, "secret"));
    }
    in.path = (struct cs_str){"../.env", 7};
    struct csw_mcp_read_output out;
    assert_int_equal(cs_fs_read_deny(root, d, &in, NULL, &out, &msg), CSW_ERROR_PATH_ESCAPE);
    /* a hard link made later is refused through the remembered identity */
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/k.pem", root);
    snprintf(b, sizeof b, "%s/sub/link.txt", root);
    assert_int_equal(link(a, b), 0);
    in.path = (struct cs_str){"sub/link.txt", 12};
    assert_int_equal(cs_fs_read_deny(root, d, &in, NULL, &out, &msg), CSW_ERROR_PATH_DENIED);
    in.path = (struct cs_str){"sub/ok.txt", 10};
    assert_int_equal(cs_fs_read_deny(root, d, &in, NULL, &out, &msg), 0);
    csw_mcp_read_output_free(&out);

    struct csw_mcp_find_input fin = {.limit = 100};
    struct csw_mcp_find_output fout;
    assert_int_equal(cs_fs_find_deny(root, d, &fin, 1000, NULL, &fout, &msg), 0);
    assert_int_equal(fout.paths.n, 1);
    assert_string_equal(fout.paths.v[0].s, "sub/ok.txt");
    csw_mcp_find_output_free(&fout);

    close(rootfd);
    cs_fs_deny_free(d);
    const char *rm[] = {".env", "sub/.env", "sub/ok.txt", "k.pem", "sub/link.txt"};
    for (size_t i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", root, rm[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/sub", root);
    rmdir(p);
    rmdir(root);
}

static void test_glob_table(void **state)
{
    (void)state;
    static const struct glob_case cases[] = {
        /* no '/': the file name anywhere */
        {"*.c", "a.c", true},
        {"*.c", "src/a.c", true},
        {"*.c", "src/deep/er/a.c", true},
        {"*.c", "src/a.h", false},
        {"*.c", "a.c/b.h", false},
        {"a.c", "x/a.c", true},
        {"*", "x/y/z", true},
        {"*", ".hidden", true},
        {"**", "x/y/z", true},
        {"?.c", "ab.c", false},
        {"??.c", "ab.c", true},
        {"?", "\xc3\xa9", true}, /* one character, two bytes */
        {"??", "\xc3\xa9", false},
        /* classes */
        {"[abc].txt", "b.txt", true},
        {"[abc].txt", "d.txt", false},
        {"[a-c].txt", "c.txt", true},
        {"[!a-c].txt", "c.txt", false},
        {"[!a-c].txt", "d.txt", true},
        {"[^a-c].txt", "d.txt", true},
        {"[]]", "]", true},
        {"[!]]", "]", false},
        {"[!]]", "a", true},
        {"[a-]", "-", true},
        {"[-a]", "-", true},
        {"[z-a]", "m", false},
        {"[\xc3\xa0-\xc3\xbf]", "\xc3\xa9", true},
        {"[\\]]", "]", true},
        {"[ab", "[ab", true}, /* unclosed: literal */
        {"[ab", "a", false},
        /* escapes */
        {"\\*", "*", true},
        {"\\*", "a", false},
        {"a\\?", "a?", true},
        {"a\\", "a\\", true},
        /* stars within a segment */
        {"a*b*c", "aXbYc", true},
        {"a*b*c", "abcabc", true},
        {"a*b*c", "abcab", false},
        {"a**b", "aXXb", true}, /* "**" inside a segment is a plain star */
        {"*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
        /* with '/': the whole path */
        {"src/*.c", "src/a.c", true},
        {"src/*.c", "src/x/a.c", false},
        {"src/*.c", "lib/src/a.c", false},
        {"*/a.c", "src/a.c", true},
        {"*/a.c", "a.c", false},
        {"**/*.c", "a.c", true},
        {"**/*.c", "x/y/a.c", true},
        {"src/**", "src/a", true},
        {"src/**", "src/x/y/a", true},
        {"src/**", "srcx/a", false},
        {"src/**", "src", true}, /* ** matches zero segments */
        {"a/**/b", "a/b", true},
        {"a/**/b", "a/x/y/b", true},
        {"a/**/b", "a/x/y/c", false},
        {"a/**/**/b", "a/b", true},
        {"**/x/**/y", "p/x/q/r/y", true},
        {"**/x/**/y", "p/x/q/r/z", false},
        {"/src/*.c", "src/a.c", true},  /* a leading '/' is ignored */
        {"./src/*.c", "src/a.c", true}, /* so is a leading "./", as read accepts "./a.txt" */
        {"././/src/*.c", "src/a.c", true},
        {"./*.c", "a.c", true}, /* anchored: the root's files only */
        {"./*.c", "src/a.c", false},
        {"./", "src/a.c", true},
        {".x/*.c", ".x/a.c", true}, /* a dot that is not "./" stays */
        {"src/", "src/a/b", true},  /* a trailing '/' means everything below */
        {"src/", "other/a", false},
        {"/", "anything/at/all", true},
        {"a//b", "a/b", false}, /* an empty segment matches nothing */
        {"", "a/b", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct glob_case *c = &cases[i];
        bool got = cs_fs_glob_match(c->glob, strlen(c->glob), c->path, strlen(c->path));
        if (got != c->match)
            fail_msg("case %zu: glob '%s' path '%s': got %d", i, c->glob, c->path, got);
    }
}

/* ---- lossy UTF-8 ---- */

struct utf8_case {
    const char *in;
    size_t n;
    const char *want;
    bool lossy;
};

#define R "\xEF\xBF\xBD" /* U+FFFD */

static void test_utf8_table(void **state)
{
    (void)state;
    /* The rows of Unicode's table 3-8 and the WHATWG decoder's behaviour. */
    static const struct utf8_case cases[] = {
        {"", 0, "", false},
        {"abc", 3, "abc", false},
        {"\xc3\xa9", 2, "\xc3\xa9", false},
        {"\xe2\x82\xac", 3, "\xe2\x82\xac", false},
        {"\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80", false},
        {"\xef\xbf\xbd", 3, R, false}, /* a real U+FFFD is not lossy */
        {"\x80", 1, R, true},
        {"\xff", 1, R, true},
        {"\xc0\xaf", 2, R R, true},             /* overlong lead: two subparts */
        {"\xe0\x80\xaf", 3, R R R, true},       /* E0 needs A0..BF */
        {"\xed\xa0\x80", 3, R R R, true},       /* surrogate */
        {"\xf4\x90\x80\x80", 4, R R R R, true}, /* above U+10FFFF */
        {"\xf5\x80", 2, R R, true},             /* F5 never starts */
        {"\xe2\x82", 2, R, true},               /* cut by the end: one subpart */
        {"\xf0\x9f\x98", 3, R, true},           /* the same with four bytes */
        {"\xe2\x82\x61", 3, R "a", true},       /* cut by an ASCII byte */
        {"\xe2\x82\xe2\x82\xac", 5, R "\xe2\x82\xac", true},
        {"a\xf0\x9f\x98\x80\xf0\x9f", 7, "a\xf0\x9f\x98\x80" R, true},
        {"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", 13, "a" R R R "b" R "c" R R "d",
         true}, /* Unicode's example, table 3-8 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct utf8_case *c = &cases[i];
        char out[64];
        bool lossy = !c->lossy;
        size_t n = cs_fs_utf8_lossy((const unsigned char *)c->in, c->n, out, &lossy);
        size_t wn = strlen(c->want);
        if (n != wn || memcmp(out, c->want, n) != 0 || lossy != c->lossy)
            fail_msg("case %zu: got %zu bytes, lossy %d", i, n, lossy);
        assert_true(cs__fs_utf8_valid(out, n));
        assert_int_equal(cs__fs_utf8_valid(c->in, c->n), !c->lossy);
        /* The same between ASCII runs of every length around the eight-byte steps: the answer
         * does not depend on where a case falls against them. */
        static const size_t posts[] = {0, 1, 7, 8, 9, 17};
        for (size_t pre = 0; pre <= 17; pre++) {
            for (size_t pi = 0; pi < sizeof posts / sizeof posts[0]; pi++) {
                size_t post = posts[pi];
                char in[80], big[128], want[128];
                memset(in, 'x', pre);
                memcpy(in + pre, c->in, c->n);
                memset(in + pre + c->n, 'y', post);
                memset(want, 'x', pre);
                memcpy(want + pre, c->want, wn);
                memset(want + pre + wn, 'y', post);
                size_t bn =
                    cs_fs_utf8_lossy((const unsigned char *)in, pre + c->n + post, big, &lossy);
                if (bn != pre + wn + post || memcmp(big, want, bn) != 0 || lossy != c->lossy)
                    fail_msg("case %zu between %zu and %zu ASCII bytes", i, pre, post);
                assert_int_equal(cs__fs_utf8_valid(in, pre + c->n + post), !c->lossy);
            }
        }
    }
    /* NUL bytes are ordinary characters. */
    char out[16];
    bool lossy = true;
    assert_int_equal(cs_fs_utf8_lossy((const unsigned char *)"a\0b", 3, out, &lossy), 3);
    assert_memory_equal(out, "a\0b", 3);
    assert_false(lossy);
}

/* ---- read ---- */

static void sha256_hex(const void *data, size_t n, char out[72])
{
    unsigned char md[32];
    unsigned int mdn = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    assert_non_null(ctx);
    assert_int_equal(EVP_DigestInit_ex(ctx, EVP_sha256(), NULL), 1);
    assert_int_equal(EVP_DigestUpdate(ctx, data, n), 1);
    assert_int_equal(EVP_DigestFinal_ex(ctx, md, &mdn), 1);
    EVP_MD_CTX_free(ctx);
    strcpy(out, "sha256:");
    for (unsigned i = 0; i < mdn; i++)
        snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
}

static struct csw_mcp_read_input read_in(const char *path, int64_t offset, int64_t limit)
{
    struct csw_mcp_read_input in;
    memset(&in, 0, sizeof in);
    in.path.s = (char *)(uintptr_t)path;
    in.path.n = strlen(path);
    in.has_offset = offset >= 0;
    in.offset = offset >= 0 ? offset : 0;
    in.has_limit = limit >= 0;
    in.limit = limit >= 0 ? limit : CS_FS_READ_MAX_BYTES;
    return in;
}

static int do_read(const char *path, int64_t offset, int64_t limit, struct csw_mcp_read_output *out,
                   struct cs_diag *msg)
{
    struct csw_mcp_read_input in = read_in(path, offset, limit);
    int rc = cs_fs_read(fx.root, &in, NULL, out, msg);
    /* A failure carries the code it returns. */
    assert_true(rc == 0 || (msg->set && msg->code == (enum csw_error)rc));
    return rc;
}

static void test_read_windows(void **state)
{
    (void)state;
    char v[72];
    struct cs_diag msg = {0};
    struct csw_mcp_read_output out;
    put_str("abc.txt", "abcdef");
    sha256_hex("abcdef", 6, v);

    /* The contract's example. */
    assert_int_equal(do_read("abc.txt", -1, 3, &out, &msg), 0);
    assert_string_equal(out.path.s, "abc.txt");
    assert_string_equal(out.content.s, "abc");
    assert_int_equal(out.byte_count, 3);
    assert_true(out.truncated);
    assert_true(out.has_next_offset);
    assert_int_equal(out.next_offset, 3);
    assert_false(out.has_offset);
    assert_false(out.content_lossy);
    assert_string_equal(out.version.s, v);
    csw_mcp_read_output_free(&out);

    assert_int_equal(do_read("abc.txt", 3, -1, &out, &msg), 0);
    assert_string_equal(out.content.s, "def");
    assert_false(out.truncated);
    assert_false(out.has_next_offset);
    assert_true(out.has_offset);
    assert_int_equal(out.offset, 3);
    assert_string_equal(out.version.s, v);
    csw_mcp_read_output_free(&out);

    /* An offset of 0 given is echoed; a window ending exactly at the end is not truncated. */
    assert_int_equal(do_read("./abc.txt", 0, 6, &out, &msg), 0);
    assert_string_equal(out.path.s, "abc.txt");
    assert_true(out.has_offset);
    assert_int_equal(out.offset, 0);
    assert_false(out.truncated);
    csw_mcp_read_output_free(&out);

    /* Past the end and at the end: empty, not truncated, the same version. */
    for (int64_t off = 6; off <= 1000; off += 994) {
        assert_int_equal(do_read("abc.txt", off, 2, &out, &msg), 0);
        assert_string_equal(out.content.s, "");
        assert_int_equal(out.byte_count, 0);
        assert_false(out.truncated);
        assert_string_equal(out.version.s, v);
        csw_mcp_read_output_free(&out);
    }
    assert_int_equal(do_read("abc.txt", INT64_MAX, 2, &out, &msg), 0);
    assert_int_equal(out.byte_count, 0);
    csw_mcp_read_output_free(&out);

    /* Limits. */
    assert_int_equal(do_read("abc.txt", -1, 0, &out, &msg), CSW_ERROR_OUTPUT_LIMIT);
    assert_int_equal(do_read("abc.txt", -1, CS_FS_READ_MAX_BYTES + 1, &out, &msg),
                     CSW_ERROR_OUTPUT_LIMIT);
    assert_null(out.content.s);
    assert_int_equal(do_read("abc.txt", -1, CS_FS_READ_MAX_BYTES, &out, &msg), 0);
    csw_mcp_read_output_free(&out);

    /* An empty file. */
    put("empty", "", 0);
    sha256_hex("", 0, v);
    assert_int_equal(do_read("empty", -1, -1, &out, &msg), 0);
    assert_int_equal(out.byte_count, 0);
    assert_false(out.truncated);
    assert_string_equal(out.version.s, v);
    csw_mcp_read_output_free(&out);

    /* A window that cuts a character: lossy for that window only. */
    put_str("utf8.txt", "a\xe2\x82\xac"
                        "b");
    assert_int_equal(do_read("utf8.txt", -1, 3, &out, &msg), 0);
    assert_string_equal(out.content.s, "a" R);
    assert_true(out.content_lossy);
    assert_int_equal(out.byte_count, 3);
    assert_int_equal(out.next_offset, 3);
    csw_mcp_read_output_free(&out);
    assert_int_equal(do_read("utf8.txt", 1, -1, &out, &msg), 0);
    assert_string_equal(out.content.s, "\xe2\x82\xac"
                                       "b");
    assert_false(out.content_lossy);
    csw_mcp_read_output_free(&out);
}

/* A file bigger than the read chunk and than one window: every window is the file's bytes and
 * the version is the whole file's. */
static void test_read_large(void **state)
{
    (void)state;
    size_t n = 3 * CS_FS_READ_MAX_BYTES + 12345;
    unsigned char *data = malloc(n);
    assert_non_null(data);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        data[i] = (unsigned char)('a' + (x >> 16) % 26);
    }
    put("big.txt", data, n);
    char v[72];
    struct cs_diag msg = {0};
    sha256_hex(data, n, v);
    struct csw_mcp_read_output out;
    int64_t off = 0;
    size_t windows = 0;
    for (;;) {
        assert_int_equal(do_read("big.txt", off, 1000003, &out, &msg), 0);
        assert_string_equal(out.version.s, v);
        assert_int_equal(out.content.n, (size_t)out.byte_count);
        assert_memory_equal(out.content.s, data + off, (size_t)out.byte_count);
        windows++;
        bool more = out.truncated;
        if (more) {
            assert_int_equal(out.next_offset, off + out.byte_count);
            off = out.next_offset;
        } else {
            assert_int_equal(off + out.byte_count, (int64_t)n);
        }
        csw_mcp_read_output_free(&out);
        if (!more)
            break;
    }
    assert_int_equal(windows, (n + 1000002) / 1000003);
    /* A window straddling the chunk size. */
    assert_int_equal(do_read("big.txt", 256 * 1024 - 5, 10, &out, &msg), 0);
    assert_memory_equal(out.content.s, data + 256 * 1024 - 5, 10);
    csw_mcp_read_output_free(&out);
    free(data);
}

/* ---- classification: openat2 and the fallback walk must agree ---- */

struct class_case {
    const char *path;
    int rc;
};

static void make_class_tree(void)
{
    mk("d");
    mk("d/sub");
    put_str("d/sub/f.txt", "inside\n");
    put_str("d/file", "a file\n");
    link_to("file", "d/leaf-link");       /* to a file inside */
    link_to("sub", "d/dir-link");         /* to a directory inside */
    link_to(fx.out, "d/out-link");        /* to a directory outside */
    link_to("/etc/passwd", "d/abs-link"); /* absolute, outside */
    link_to("nowhere", "d/dangling");     /* dangling */
    link_to("../../root-evil", "d/evil"); /* to the prefix sibling */
    char p[512];
    snprintf(p, sizeof p, "%s/d/fifo", fx.root);
    assert_int_equal(mkfifo(p, 0644), 0);
    snprintf(p, sizeof p, "%s/d/chr", fx.root);
    fx.have_dev = mknod(p, S_IFCHR | 0644, makedev(1, 3)) == 0;
    snprintf(p, sizeof p, "%s/d/sock", fx.root);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    fx.have_sock = s >= 0 && strlen(p) < sizeof sa.sun_path;
    if (fx.have_sock) {
        memcpy(sa.sun_path, p, strlen(p) + 1);
        fx.have_sock = bind(s, (struct sockaddr *)&sa, sizeof sa) == 0;
    }
    if (s >= 0)
        close(s);
}

static const struct class_case class_cases[] = {
    {"d/sub/f.txt", 0},
    {"d/./sub/../sub/f.txt", 0},
    {"d/file", 0},
    {"d/missing", CSW_ERROR_FILE_NOT_FOUND},
    {"d/missing/x", CSW_ERROR_FILE_NOT_FOUND},
    {"d/file/x", CSW_ERROR_PATH_NOT_DIRECTORY},
    {"d/file/", CSW_ERROR_PATH_NOT_DIRECTORY},
    {"d/sub/f.txt/..", CSW_ERROR_FILE_OPERATION_FAILED}, /* lexically d/sub: a directory */
    {"d", CSW_ERROR_FILE_OPERATION_FAILED},
    {".", CSW_ERROR_FILE_OPERATION_FAILED},
    {"d/leaf-link", CSW_ERROR_SYMLINK_REJECTED},
    {"d/dir-link/f.txt", CSW_ERROR_SYMLINK_REJECTED},
    {"d/out-link/secret", CSW_ERROR_SYMLINK_REJECTED},
    {"d/out-link", CSW_ERROR_SYMLINK_REJECTED},
    {"d/abs-link", CSW_ERROR_SYMLINK_REJECTED},
    {"d/dangling", CSW_ERROR_SYMLINK_REJECTED},
    {"d/evil/secret", CSW_ERROR_SYMLINK_REJECTED},
    {"d/fifo", CSW_ERROR_SPECIAL_FILE_REJECTED},
    {"d/fifo/x", CSW_ERROR_PATH_NOT_DIRECTORY},
    {"../root-evil/secret", CSW_ERROR_PATH_ESCAPE},
    {"/etc/passwd", CSW_ERROR_PATH_ESCAPE},
};

static void run_class_cases(bool fallback)
{
    cs__fs_force_fallback(fallback);
    struct cs_diag msg = {0};
    struct csw_mcp_read_output out;
    for (size_t i = 0; i < sizeof class_cases / sizeof class_cases[0]; i++) {
        const struct class_case *c = &class_cases[i];
        int rc = do_read(c->path, -1, -1, &out, &msg);
        if (rc != c->rc)
            fail_msg("%s: %s: rc %d, want %d (%s)", fallback ? "fallback" : "openat2", c->path, rc,
                     c->rc, rc ? msg.text : "ok");
        if (rc == 0) {
            assert_null(strstr(out.content.s, "secret"));
            csw_mcp_read_output_free(&out);
        }
    }
    if (fx.have_dev)
        assert_int_equal(do_read("d/chr", -1, -1, &out, &msg), CSW_ERROR_SPECIAL_FILE_REJECTED);
    if (fx.have_sock)
        assert_int_equal(do_read("d/sock", -1, -1, &out, &msg), CSW_ERROR_SPECIAL_FILE_REJECTED);
    cs__fs_force_fallback(false);
}

/*
 * The version cache (fs_read.c): a big file's later windows are proved against the first pass's
 * hash instead of rehashing the file, and every change is still seen: an in-place write through
 * write(2) changes ctime; a write through a live shared mapping may not, and is then caught by
 * the window's block hash when it falls under the window.
 */
static void test_version_cache(void **state)
{
    (void)state;
    size_t n = 5 * 1024 * 1024 + 777;
    unsigned char *data = malloc(n);
    assert_non_null(data);
    for (size_t i = 0; i < n; i++)
        data[i] = (unsigned char)('a' + (i * 7 + i / 4096) % 26);
    put("cached.txt", data, n);
    char path[512], v[72];
    struct cs_diag msg = {0};
    snprintf(path, sizeof path, "%s/cached.txt", fx.root);
    struct csw_mcp_read_output out;
    /* A file changed less than the coarsest timestamp step ago is never remembered (2.1 s: this
     * test passes on a file system that stamps whole seconds too): wait it out. */
    usleep(2200 * 1000);

    uint64_t hits = cs_fs_version_cache_hits();
    sha256_hex(data, n, v);
    assert_int_equal(do_read("cached.txt", 0, 1000, &out, &msg), 0);
    assert_string_equal(out.version.s, v);
    csw_mcp_read_output_free(&out);
    assert_int_equal(cs_fs_version_cache_hits(), hits); /* the first pass */

    /* Windows anywhere, across block boundaries, to the end and past it: from the cache. */
    const int64_t offs[] = {2 * 1024 * 1024 + 5, 1024 * 1024 - 10, (int64_t)n - 100, 0};
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        assert_int_equal(do_read("cached.txt", offs[i], 1048576, &out, &msg), 0);
        size_t want = n - (size_t)offs[i] < 1048576 ? n - (size_t)offs[i] : 1048576;
        assert_int_equal((size_t)out.byte_count, want);
        assert_memory_equal(out.content.s, data + offs[i], want);
        assert_string_equal(out.version.s, v);
        assert_int_equal(out.truncated, (size_t)offs[i] + want < n);
        csw_mcp_read_output_free(&out);
    }
    assert_int_equal(do_read("cached.txt", (int64_t)n + 10, 10, &out, &msg), 0);
    assert_int_equal(out.byte_count, 0);
    assert_false(out.truncated);
    assert_string_equal(out.version.s, v);
    csw_mcp_read_output_free(&out);
    assert_int_equal(cs_fs_version_cache_hits(), hits + 5);

    /* A read cut short (its deadline already passed: the loop's inline try, or a cancelled
     * call) answers TIMEOUT and keeps the entry, which the call's next try then uses. */
    struct cs_cancel past = {.deadline_ns = 1};
    atomic_init(&past.set, false);
    struct csw_mcp_read_input cut = read_in("cached.txt", 1024 * 1024, 1048576);
    assert_int_equal(cs_fs_read(fx.root, &cut, &past, &out, &msg), CSW_ERROR_TIMEOUT);
    cs_diag_clear(&msg);
    assert_int_equal(do_read("cached.txt", 1024 * 1024, 1048576, &out, &msg), 0);
    assert_memory_equal(out.content.s, data + 1024 * 1024, 1048576);
    assert_string_equal(out.version.s, v);
    csw_mcp_read_output_free(&out);
    assert_int_equal(cs_fs_version_cache_hits(), hits + 6);

    /* An in-place write of one byte (same size) far from the window: a new version at once. */
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    data[10] = 'Z';
    assert_int_equal(pwrite(fd, "Z", 1, 10), 1);
    sha256_hex(data, n, v);
    assert_int_equal(do_read("cached.txt", 4 * 1024 * 1024, 100, &out, &msg), 0);
    assert_string_equal(out.version.s, v);
    assert_memory_equal(out.content.s, data + 4 * 1024 * 1024, 100);
    csw_mcp_read_output_free(&out);

    /* A shared mapping: its first write stamps ctime; once the file is remembered again, a second
     * write to the same (already writable) page need not. The window over it must not be
     * answered from the cache unless its bytes are the remembered ones. */
    unsigned char *map = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(map != MAP_FAILED);
    map[3 * 1024 * 1024 + 1] = 'Y';
    data[3 * 1024 * 1024 + 1] = 'Y';
    usleep(2200 * 1000);
    sha256_hex(data, n, v);
    assert_int_equal(do_read("cached.txt", 0, 10, &out, &msg), 0); /* remembered again */
    assert_string_equal(out.version.s, v);
    csw_mcp_read_output_free(&out);
    map[3 * 1024 * 1024 + 2] = 'X';
    data[3 * 1024 * 1024 + 2] = 'X';
    sha256_hex(data, n, v);
    assert_int_equal(do_read("cached.txt", 3 * 1024 * 1024 - 50, 100, &out, &msg), 0);
    assert_string_equal(out.version.s, v);
    assert_memory_equal(out.content.s, data + 3 * 1024 * 1024 - 50, 100);
    csw_mcp_read_output_free(&out);
    assert_int_equal(munmap(map, n), 0);

    /* Truncated and regrown to the same size within one tick: a different ctime, a new pass. */
    assert_int_equal(ftruncate(fd, 0), 0);
    memset(data, 'q', n);
    assert_int_equal(pwrite(fd, data, n, 0), (ssize_t)n);
    close(fd);
    sha256_hex(data, n, v);
    assert_int_equal(do_read("cached.txt", 1024 * 1024, 10, &out, &msg), 0);
    assert_string_equal(out.version.s, v);
    assert_memory_equal(out.content.s, "qqqqqqqqqq", 10);
    csw_mcp_read_output_free(&out);

    /* Replaced by another file (a new inode): never the old version. */
    data[0] = 'R';
    put("cached.new", data, n);
    char np[512];
    snprintf(np, sizeof np, "%s/cached.new", fx.root);
    assert_int_equal(rename(np, path), 0);
    sha256_hex(data, n, v);
    assert_int_equal(do_read("cached.txt", 0, 1, &out, &msg), 0);
    assert_string_equal(out.version.s, v);
    assert_memory_equal(out.content.s, "R", 1);
    csw_mcp_read_output_free(&out);
    free(data);
}

static void test_classify_openat2(void **state)
{
    (void)state;
    make_class_tree();
    run_class_cases(false);
}

static void test_classify_fallback(void **state)
{
    (void)state;
    run_class_cases(true);
}

/* The message names the offending component in both modes. */
static void test_classify_messages(void **state)
{
    (void)state;
    struct cs_diag msg = {0};
    struct csw_mcp_read_output out;
    for (int fb = 0; fb < 2; fb++) {
        cs__fs_force_fallback(fb);
        assert_int_equal(do_read("d/dir-link/f.txt", -1, -1, &out, &msg),
                         CSW_ERROR_SYMLINK_REJECTED);
        assert_non_null(strstr(msg.text, "d/dir-link"));
        assert_int_equal(do_read("d/file/x", -1, -1, &out, &msg), CSW_ERROR_PATH_NOT_DIRECTORY);
        assert_non_null(strstr(msg.text, "d/file"));
    }
    cs__fs_force_fallback(false);
}

/* cs_fs_open_beneath for directories, as find and (later) patch use it. */
static void test_open_dir(void **state)
{
    (void)state;
    int rootfd = -1;
    struct cs_diag msg = {0};
    assert_int_equal(cs_fs_root_open(fx.root, &rootfd, &msg), 0);
    for (int fb = 0; fb < 2; fb++) {
        cs__fs_force_fallback(fb);
        struct cs_fs_path p;
        struct stat st;
        int fd = -1;
        assert_int_equal(cs_fs_path_normalize("d/sub", 5, &p, &msg), 0);
        assert_int_equal(cs_fs_open_beneath(rootfd, &p, CS_FS_WANT_DIR, &fd, &st, &msg), 0);
        assert_true(S_ISDIR(st.st_mode));
        close(fd);
        assert_int_equal(cs_fs_path_normalize("d/dir-link", 10, &p, &msg), 0);
        assert_int_equal(cs_fs_open_beneath(rootfd, &p, CS_FS_WANT_DIR, &fd, &st, &msg),
                         CSW_ERROR_SYMLINK_REJECTED);
        assert_int_equal(cs_fs_path_normalize("d/file", 6, &p, &msg), 0);
        assert_int_equal(cs_fs_open_beneath(rootfd, &p, CS_FS_WANT_DIR, &fd, &st, &msg),
                         CSW_ERROR_PATH_NOT_DIRECTORY);
        assert_int_equal(cs_fs_path_normalize(".", 1, &p, &msg), 0);
        assert_int_equal(cs_fs_open_beneath(rootfd, &p, CS_FS_WANT_DIR, &fd, &st, &msg), 0);
        close(fd);
    }
    cs__fs_force_fallback(false);
    close(rootfd);
}

/* ---- find ---- */

static struct csw_mcp_find_input find_in(const char *glob, int64_t offset, int64_t limit)
{
    struct csw_mcp_find_input in;
    memset(&in, 0, sizeof in);
    if (glob) {
        in.has_glob = true;
        in.glob.s = (char *)(uintptr_t)glob;
        in.glob.n = strlen(glob);
    }
    in.has_offset = offset >= 0;
    in.offset = offset >= 0 ? offset : 0;
    in.has_limit = limit >= 0;
    in.limit = limit >= 0 ? limit : CS_FS_FIND_MAX_PATHS;
    return in;
}

static int do_find_in(const char *root, const char *glob, int64_t offset, int64_t limit, size_t cap,
                      struct csw_mcp_find_output *out)
{
    struct csw_mcp_find_input in = find_in(glob, offset, limit);
    struct cs_diag msg = {0};
    int rootfd = -1;
    int rc = cs_fs_root_open(root, &rootfd, &msg);
    if (rc != 0)
        return rc;
    rc = cs_fs_find_at(rootfd, &in, cap, NULL, out, &msg);
    close(rootfd);
    return rc;
}

static char findroot[256];

static void make_find_tree(void)
{
    snprintf(findroot, sizeof findroot, "%s/findroot", fx.dir);
    assert_int_equal(mkdir(findroot, 0755), 0);
    static const char *const dirs[] = {"a", "a/b", "B", "z", "\xc3\xa9"};
    static const char *const files[] = {"a.b",       "a/b/c.c",      "a/x.c", "B/up.txt", "b.txt",
                                        "z/.hidden", "\xc3\xa9/e.c", "z/z.h", "a/b/d.h"};
    char p[512];
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", findroot, dirs[i]);
        assert_int_equal(mkdir(p, 0755), 0);
    }
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", findroot, files[i]);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fclose(f);
    }
    /* Skipped: links (to a file, to a directory inside, to one outside), a fifo, a name that
     * is not UTF-8. */
    snprintf(p, sizeof p, "%s/link.c", findroot);
    assert_int_equal(symlink("a/x.c", p), 0);
    snprintf(p, sizeof p, "%s/dirlink", findroot);
    assert_int_equal(symlink("a", p), 0);
    snprintf(p, sizeof p, "%s/outlink", findroot);
    assert_int_equal(symlink(fx.out, p), 0);
    snprintf(p, sizeof p, "%s/fifo.c", findroot);
    assert_int_equal(mkfifo(p, 0644), 0);
    snprintf(p, sizeof p, "%s/bad\xff.c", findroot);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
}

static void assert_paths(const struct csw_mcp_find_output *out, const char *const *want, size_t n)
{
    if (out->paths.n != n)
        fail_msg("got %zu paths, want %zu", out->paths.n, n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(out->paths.v[i].s, want[i]);
}

static void test_find_all_sorted(void **state)
{
    (void)state;
    make_find_tree();
    struct csw_mcp_find_output out;
    assert_int_equal(do_find_in(findroot, NULL, -1, -1, CS_FS_FIND_WALK_CAP, &out), 0);
    /* Bytewise: 'B' < 'a'; "a.b" < "a/..." ('.' < '/'); UTF-8 names after ASCII. */
    static const char *const want[] = {"B/up.txt", "a.b",       "a/b/c.c", "a/b/d.h",     "a/x.c",
                                       "b.txt",    "z/.hidden", "z/z.h",   "\xc3\xa9/e.c"};
    assert_paths(&out, want, 9);
    assert_false(out.truncated);
    assert_false(out.has_next_offset);
    assert_false(out.has_offset);
    assert_false(out.incomplete);
    assert_int_equal(strncmp(out.listing_version.s, "sha256:", 7), 0);
    assert_int_equal(out.listing_version.n, 71);
    csw_mcp_find_output_free(&out);
}

static void test_find_glob(void **state)
{
    (void)state;
    struct csw_mcp_find_output out;
    assert_int_equal(do_find_in(findroot, "*.c", -1, -1, CS_FS_FIND_WALK_CAP, &out), 0);
    static const char *const c[] = {"a/b/c.c", "a/x.c", "\xc3\xa9/e.c"};
    assert_paths(&out, c, 3);
    csw_mcp_find_output_free(&out);
    assert_int_equal(do_find_in(findroot, "a/*", -1, -1, CS_FS_FIND_WALK_CAP, &out), 0);
    static const char *const a[] = {"a/x.c"};
    assert_paths(&out, a, 1);
    csw_mcp_find_output_free(&out);
    assert_int_equal(do_find_in(findroot, "a/**", -1, -1, CS_FS_FIND_WALK_CAP, &out), 0);
    static const char *const aa[] = {"a/b/c.c", "a/b/d.h", "a/x.c"};
    assert_paths(&out, aa, 3);
    csw_mcp_find_output_free(&out);
    assert_int_equal(do_find_in(findroot, "nothing*", -1, -1, CS_FS_FIND_WALK_CAP, &out), 0);
    assert_paths(&out, NULL, 0);
    assert_false(out.truncated);
    csw_mcp_find_output_free(&out);
}

static void test_find_paging(void **state)
{
    (void)state;
    struct csw_mcp_find_output all, page;
    assert_int_equal(do_find_in(findroot, NULL, -1, -1, CS_FS_FIND_WALK_CAP, &all), 0);
    size_t seen = 0;
    int64_t off = 0;
    for (;;) {
        assert_int_equal(do_find_in(findroot, NULL, off, 4, CS_FS_FIND_WALK_CAP, &page), 0);
        assert_true(page.has_offset);
        assert_int_equal(page.offset, off);
        assert_string_equal(page.listing_version.s, all.listing_version.s);
        for (size_t i = 0; i < page.paths.n; i++)
            assert_string_equal(page.paths.v[i].s, all.paths.v[seen + i].s);
        seen += page.paths.n;
        bool more = page.truncated;
        if (more) {
            assert_int_equal(page.next_offset, off + 4);
            off = page.next_offset;
        }
        csw_mcp_find_output_free(&page);
        if (!more)
            break;
    }
    assert_int_equal(seen, all.paths.n);
    /* Past the end: empty, not truncated. */
    assert_int_equal(do_find_in(findroot, NULL, 1000, 4, CS_FS_FIND_WALK_CAP, &page), 0);
    assert_int_equal(page.paths.n, 0);
    assert_false(page.truncated);
    csw_mcp_find_output_free(&page);
    /* Limits. */
    assert_int_equal(do_find_in(findroot, NULL, -1, 0, CS_FS_FIND_WALK_CAP, &page),
                     CSW_ERROR_OUTPUT_LIMIT);
    assert_int_equal(
        do_find_in(findroot, NULL, -1, CS_FS_FIND_MAX_PATHS + 1, CS_FS_FIND_WALK_CAP, &page),
        CSW_ERROR_OUTPUT_LIMIT);
    assert_int_equal(
        do_find_in(findroot, NULL, -1, CS_FS_FIND_MAX_PATHS, CS_FS_FIND_WALK_CAP, &page), 0);
    csw_mcp_find_output_free(&page);
    csw_mcp_find_output_free(&all);
}

static void test_find_version_changes(void **state)
{
    (void)state;
    struct csw_mcp_find_output a, b;
    char v1[80], p[512];
    assert_int_equal(do_find_in(findroot, NULL, -1, -1, CS_FS_FIND_WALK_CAP, &a), 0);
    snprintf(v1, sizeof v1, "%s", a.listing_version.s);
    csw_mcp_find_output_free(&a);
    /* Same set, same version; a new file changes it; a glob that excludes it does not. */
    assert_int_equal(do_find_in(findroot, "*.h", -1, -1, CS_FS_FIND_WALK_CAP, &a), 0);
    snprintf(p, sizeof p, "%s/new.txt", findroot);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(do_find_in(findroot, NULL, -1, -1, CS_FS_FIND_WALK_CAP, &b), 0);
    assert_string_not_equal(b.listing_version.s, v1);
    csw_mcp_find_output_free(&b);
    assert_int_equal(do_find_in(findroot, "*.h", -1, -1, CS_FS_FIND_WALK_CAP, &b), 0);
    assert_string_equal(a.listing_version.s, b.listing_version.s);
    csw_mcp_find_output_free(&b);
    csw_mcp_find_output_free(&a);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(do_find_in(findroot, NULL, -1, -1, CS_FS_FIND_WALK_CAP, &b), 0);
    assert_string_equal(b.listing_version.s, v1);
    csw_mcp_find_output_free(&b);
}

static void test_find_cap(void **state)
{
    (void)state;
    struct csw_mcp_find_output out;
    /* 10 regular files (9 + bad\xff.c, counted though not listed) and 5 directories. */
    assert_int_equal(do_find_in(findroot, NULL, -1, -1, 10, &out), 0);
    assert_false(out.incomplete);
    assert_int_equal(out.paths.n, 9);
    csw_mcp_find_output_free(&out);
    assert_int_equal(do_find_in(findroot, NULL, -1, -1, 9, &out), 0);
    assert_true(out.incomplete);
    assert_true(out.paths.n <= 9);
    csw_mcp_find_output_free(&out);
    assert_int_equal(do_find_in(findroot, NULL, -1, -1, 3, &out), 0);
    assert_true(out.incomplete);
    assert_true(out.paths.n <= 3);
    csw_mcp_find_output_free(&out);
    assert_int_equal(do_find_in(findroot, NULL, -1, -1, 0, &out), 0);
    assert_true(out.incomplete);
    assert_int_equal(out.paths.n, 0);
    csw_mcp_find_output_free(&out);
}

static void test_find_root_gone(void **state)
{
    (void)state;
    char gone[300];
    struct cs_diag msg = {0};
    snprintf(gone, sizeof gone, "%s/gone", fx.dir);
    assert_int_equal(mkdir(gone, 0755), 0);
    int rootfd = -1;
    assert_int_equal(cs_fs_root_open(gone, &rootfd, &msg), 0);
    assert_int_equal(rmdir(gone), 0);
    struct csw_mcp_find_output out;
    struct csw_mcp_find_input in = find_in(NULL, -1, -1);
    /* By path: the root cannot be opened. */
    assert_int_equal(cs_fs_find(gone, &in, NULL, &out, &msg), CSW_ERROR_FILE_OPERATION_FAILED);
    assert_non_null(strstr(msg.text, "gone"));
    /* By an fd opened before: the dead directory cannot be read. */
    assert_int_equal(cs_fs_find_at(rootfd, &in, 10, NULL, &out, &msg),
                     CSW_ERROR_FILE_OPERATION_FAILED);
    struct csw_mcp_read_input rin = read_in("a", -1, -1);
    struct csw_mcp_read_output rout;
    assert_int_equal(cs_fs_read(gone, &rin, NULL, &rout, &msg), CSW_ERROR_FILE_OPERATION_FAILED);
    assert_int_equal(cs_fs_read_at(rootfd, &rin, NULL, &rout, &msg),
                     CSW_ERROR_FILE_OPERATION_FAILED);
    assert_non_null(strstr(msg.text, "gone"));
    close(rootfd);
}

/* A root that has become a symlink (the registry holds canonical roots) is not followed. */
static void test_root_replaced_by_symlink(void **state)
{
    (void)state;
    char link[300];
    struct cs_diag msg = {0};
    snprintf(link, sizeof link, "%s/rootlink", fx.dir);
    assert_int_equal(symlink(fx.root, link), 0);
    struct csw_mcp_read_input in = read_in("abc.txt", -1, -1);
    struct csw_mcp_read_output out;
    assert_int_equal(cs_fs_read(link, &in, NULL, &out, &msg), CSW_ERROR_FILE_OPERATION_FAILED);
    assert_non_null(strstr(msg.text, "no longer a directory"));
    struct csw_mcp_find_input fin = find_in(NULL, -1, -1);
    struct csw_mcp_find_output fout;
    assert_int_equal(cs_fs_find(link, &fin, NULL, &fout, &msg), CSW_ERROR_FILE_OPERATION_FAILED);
    assert_int_equal(unlink(link), 0);
}

/* A set cancel flag stops read and find with TIMEOUT, outputs zeroed (the runners' time limit). */
static void test_cancelled(void **state)
{
    (void)state;
    size_t n = 3 * 1024 * 1024;
    unsigned char *data = calloc(1, n);
    assert_non_null(data);
    put("cancel.bin", data, n);
    free(data);
    struct cs_cancel cancel = {false};
    cs_cancel_set(&cancel);
    struct cs_diag msg = {0};
    struct csw_mcp_read_input in = read_in("cancel.bin", 0, 16);
    struct csw_mcp_read_output out;
    assert_int_equal(cs_fs_read(fx.root, &in, &cancel, &out, &msg), CSW_ERROR_TIMEOUT);
    assert_non_null(strstr(msg.text, "cancelled"));
    assert_null(out.version.s);
    assert_null(out.content.s);
    struct csw_mcp_find_input fin = find_in(NULL, -1, -1);
    struct csw_mcp_find_output fout;
    assert_int_equal(cs_fs_find(fx.root, &fin, &cancel, &fout, &msg), CSW_ERROR_TIMEOUT);
    assert_non_null(strstr(msg.text, "cancelled"));
    assert_null(fout.listing_version.s);
    assert_int_equal(fout.paths.n, 0);
    /* A flag that is not set changes nothing. */
    struct cs_cancel idle = {false};
    assert_int_equal(cs_fs_read(fx.root, &in, &idle, &out, &msg), 0);
    assert_int_equal(out.byte_count, 16);
    csw_mcp_read_output_free(&out);
}

/* The version cache is shared by the runners' file threads: windows read from four threads at
 * once all come from it, each proved and each the right bytes. */
struct cache_reader {
    const unsigned char *data;
    size_t n;
    const char *version;
    int failures;
};

static void *cache_reader_main(void *arg)
{
    struct cache_reader *r = arg;
    struct cs_diag msg = {0};
    for (int i = 0; i < 25; i++) {
        int64_t off = (int64_t)(((size_t)i * 524287u + (size_t)(uintptr_t)arg % 4096) % r->n);
        struct csw_mcp_read_input in = read_in("shared.bin", off, 65536);
        struct csw_mcp_read_output out;
        size_t want = r->n - (size_t)off < 65536 ? r->n - (size_t)off : 65536;
        if (cs_fs_read(fx.root, &in, NULL, &out, &msg) != 0) {
            r->failures++;
            continue;
        }
        if ((size_t)out.byte_count != want || strcmp(out.version.s, r->version) != 0 ||
            memcmp(out.content.s, r->data + off, want) != 0)
            r->failures++;
        csw_mcp_read_output_free(&out);
    }
    return NULL;
}

static void test_version_cache_threads(void **state)
{
    (void)state;
    size_t n = 4 * 1024 * 1024 + 321;
    unsigned char *data = malloc(n);
    assert_non_null(data);
    for (size_t i = 0; i < n; i++)
        data[i] = (unsigned char)('a' + (i * 13 + i / 1000) % 26);
    put("shared.bin", data, n);
    char v[72];
    struct cs_diag msg = {0};
    sha256_hex(data, n, v);
    usleep(2200 * 1000); /* older than the coarsest timestamp step: remembered */
    struct csw_mcp_read_input in = read_in("shared.bin", 0, 1);
    struct csw_mcp_read_output out;
    assert_int_equal(cs_fs_read(fx.root, &in, NULL, &out, &msg), 0);
    assert_string_equal(out.version.s, v);
    csw_mcp_read_output_free(&out);
    uint64_t hits = cs_fs_version_cache_hits();
    struct cache_reader r[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (struct cache_reader){.data = data, .n = n, .version = v};
        assert_int_equal(pthread_create(&th[i], NULL, cache_reader_main, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(r[i].failures, 0);
    }
    assert_int_equal(cs_fs_version_cache_hits(), hits + 100);
    free(data);
}

/* The walk in fallback mode lists the same set. */
static void test_find_fallback(void **state)
{
    (void)state;
    struct csw_mcp_find_output a, b;
    assert_int_equal(do_find_in(findroot, NULL, -1, -1, CS_FS_FIND_WALK_CAP, &a), 0);
    cs__fs_force_fallback(true);
    assert_int_equal(do_find_in(findroot, NULL, -1, -1, CS_FS_FIND_WALK_CAP, &b), 0);
    cs__fs_force_fallback(false);
    assert_string_equal(a.listing_version.s, b.listing_version.s);
    assert_int_equal(a.paths.n, b.paths.n);
    csw_mcp_find_output_free(&a);
    csw_mcp_find_output_free(&b);
}

/* ---- race: a directory and a symlink to outside swapped while reads and finds run ---- */

static atomic_bool race_stop;
static atomic_long race_swaps;
static char race_swap[300], race_alt[300];

static void *swapper(void *arg)
{
    (void)arg;
    while (!atomic_load(&race_stop)) {
        /* Atomic exchange: "swap" is always either the real directory or the symlink. */
        if (renameat2(AT_FDCWD, race_swap, AT_FDCWD, race_alt, RENAME_EXCHANGE) == 0)
            atomic_fetch_add(&race_swaps, 1);
    }
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_race(void **state)
{
    (void)state;
    mk("race");
    mk("race/swap");
    mk("race/swap/sub");
    put_str("race/swap/file.txt", "inside\n");
    put_str("race/swap/sub/file.txt", "inside\n");
    char p[512];
    snprintf(p, sizeof p, "%s/race", fx.out);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/race/sub", fx.out);
    assert_int_equal(mkdir(p, 0755), 0);
    static const char *const secrets[] = {"file.txt", "sub/file.txt", "only-outside.txt"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/race/%s", fx.out, secrets[i]);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fputs("OUTSIDE-SECRET\n", f);
        fclose(f);
    }
    snprintf(p, sizeof p, "%s/race", fx.out);
    link_to(p, "race/alt");
    snprintf(race_swap, sizeof race_swap, "%s/race/swap", fx.root);
    snprintf(race_alt, sizeof race_alt, "%s/race/alt", fx.root);

    for (int fb = 0; fb < 2; fb++) {
        cs__fs_force_fallback(fb);
        atomic_store(&race_stop, false);
        atomic_store(&race_swaps, 0);
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, swapper, NULL), 0);
        long ok = 0, refused = 0, n = 0;
        double end = now() + 1.0;
        while (now() < end) {
            n++;
            struct cs_diag msg = {0};
            if (n % 16 == 0) {
                struct csw_mcp_find_output out;
                assert_int_equal(do_find_in(fx.root, "race/**", -1, -1, 1000, &out), 0);
                for (size_t i = 0; i < out.paths.n; i++)
                    assert_null(strstr(out.paths.v[i].s, "only-outside"));
                csw_mcp_find_output_free(&out);
                continue;
            }
            struct csw_mcp_read_output out;
            int rc = do_read(n % 2 ? "race/swap/file.txt" : "race/swap/sub/file.txt", -1, -1, &out,
                             &msg);
            if (rc == 0) {
                assert_string_equal(out.content.s, "inside\n");
                csw_mcp_read_output_free(&out);
                ok++;
            } else {
                assert_null(strstr(msg.text, "SECRET"));
                if (rc != CSW_ERROR_SYMLINK_REJECTED && rc != CSW_ERROR_FILE_NOT_FOUND &&
                    rc != CSW_ERROR_PATH_NOT_DIRECTORY)
                    fail_msg("%s: unexpected rc %d: %s", fb ? "fallback" : "openat2", rc, msg.text);
                refused++;
            }
        }
        atomic_store(&race_stop, true);
        assert_int_equal(pthread_join(th, NULL), 0);
        print_message("race (%s): %ld swaps, %ld reads ok, %ld refused\n",
                      fb ? "fallback" : "openat2", (long)atomic_load(&race_swaps), ok, refused);
        assert_true(ok > 0 && refused > 0);
    }
    cs__fs_force_fallback(false);
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normalize_table),
        cmocka_unit_test(test_normalize_message_control_bytes),
        cmocka_unit_test(test_normalize_length),
        cmocka_unit_test(test_glob_table),
        cmocka_unit_test(test_deny_table),
        cmocka_unit_test(test_deny_leaf_equals_path),
        cmocka_unit_test(test_deny_scan_cache),
        cmocka_unit_test(test_deny_scan_leaf_unopened),
        cmocka_unit_test(test_deny_quote),
        cmocka_unit_test(test_deny_scan_deep),
        cmocka_unit_test(test_deny_scan_unreadable),
        cmocka_unit_test(test_deny_read_find),
        cmocka_unit_test(test_utf8_table),
        cmocka_unit_test(test_read_windows),
        cmocka_unit_test(test_read_large),
        cmocka_unit_test(test_version_cache),
        cmocka_unit_test(test_classify_openat2),
        cmocka_unit_test(test_classify_fallback),
        cmocka_unit_test(test_classify_messages),
        cmocka_unit_test(test_open_dir),
        cmocka_unit_test(test_find_all_sorted),
        cmocka_unit_test(test_find_glob),
        cmocka_unit_test(test_find_paging),
        cmocka_unit_test(test_find_version_changes),
        cmocka_unit_test(test_find_cap),
        cmocka_unit_test(test_find_root_gone),
        cmocka_unit_test(test_root_replaced_by_symlink),
        cmocka_unit_test(test_cancelled),
        cmocka_unit_test(test_version_cache_threads),
        cmocka_unit_test(test_find_fallback),
        cmocka_unit_test(test_race),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
