/*
 * Unit tests of denied symlinks (fs_deny_link.c and the scan's scan_link, docs/contract/tools.md
 * §5): where cs__fs_deny_link_resolve says a link leads (a file, a directory, a chain, an absolute
 * path naming the root, a ".." above the root and back, a link through a linked directory; outside,
 * dangling, a loop, a file used as a directory, the root itself), the masks a scan makes for
 * denied links (the link itself, its target under its real path, once), the same masks from the
 * directory cache, the identities remembered (the target, everything below a target directory),
 * cs__fs_deny_under (a path at or below such a directory, whether or not it exists), and a chain
 * too long to resolve failing the scan.
 *
 * Everything runs in a mkdtemp tree; the test removes it at the end.
 */
#define _XOPEN_SOURCE 700

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"

static char root[256]; /* canonical: the link texts below name it */

static void mk(const char *rel)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    assert_int_equal(mkdir(p, 0755), 0);
}

static void put(const char *rel)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("secret\n", f);
    assert_int_equal(fclose(f), 0);
}

static void ln(const char *target, const char *rel)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    assert_int_equal(symlink(target, p), 0);
}

static int setup(void **state)
{
    (void)state;
    char tmpl[] = "/tmp/cs-fs-link-XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    char canon[PATH_MAX];
    assert_non_null(realpath(tmpl, canon));
    assert_true(strlen(canon) < sizeof root);
    memcpy(root, canon, strlen(canon) + 1);
    mk("real");
    put("real/config.toml");
    mk("store");
    put("store/app.env");
    put("store/other.txt");
    mk("vault");
    put("vault/inner.txt");
    mk("links");
    mk("absvault");
    put("absvault/s.txt");
    mk("up");
    mk("up/deep");
    put("up/deep/u.txt");
    ln("real", ".codex");           /* a directory */
    ln("store/app.env", "app.env"); /* a file */
    ln("../vault/inner.txt", "links/c2");
    ln("links/c2", "c1");
    ln("c1", "chain.key"); /* a chain */
    char abs[512];
    snprintf(abs, sizeof abs, "%s/absvault", root);
    ln(abs, "abs.key"); /* absolute, naming the root */
    const char *base = strrchr(root, '/') + 1;
    snprintf(abs, sizeof abs, "../../%s/up/./deep", base);
    ln(abs, "links/upd.key"); /* up to the root, above it and back */
    snprintf(abs, sizeof abs, "../../../../../../../../../../..%s/vault/inner.txt", root);
    ln(abs, "links/deepup.key"); /* above "/", which ".." does not leave, and back */
    ln("links", "ldir");         /* a linked directory on the way */
    ln("ldir/../store/other.txt", "via.key");
    ln("/etc/passwd", "out.key");       /* outside */
    ln("../../..", "links/outrel.key"); /* outside, relative */
    ln("missing", "dangling.key");
    ln("loop2", "loop.key");
    ln("loop.key", "loop2");
    ln("store/app.env/x", "fileasdir.key");
    ln(".", "rootlink.key");
    ln("real", "real2.key"); /* a second link to the same directory */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static void test_resolve(void **state)
{
    (void)state;
    static const struct {
        const char *link, *target; /* NULL: not inside */
        bool dir;
    } cases[] = {
        {".codex", "real", true},
        {"app.env", "store/app.env", false},
        {"chain.key", "vault/inner.txt", false},
        {"c1", "vault/inner.txt", false},
        {"abs.key", "absvault", true},
        {"links/upd.key", "up/deep", true},
        {"via.key", "store/other.txt", false},
        {"links/deepup.key", "vault/inner.txt", false},
        {"out.key", NULL, false},
        {"links/outrel.key", NULL, false},
        {"dangling.key", NULL, false},
        {"loop.key", NULL, false},
        {"fileasdir.key", NULL, false},
        {"rootlink.key", NULL, false},
    };
    int rootfd = -1;
    assert_int_equal(cs_fs_root_open(root, &rootfd, NULL), 0);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct cs__fs_link l;
        assert_int_equal(cs__fs_deny_link_resolve(rootfd, cases[i].link, strlen(cases[i].link), &l),
                         0);
        if (cases[i].target == NULL) {
            if (l.inside)
                fail_msg("%s: inside at '%s', want outside", cases[i].link, l.target.rel);
            continue;
        }
        if (!l.inside)
            fail_msg("%s: not inside, want '%s'", cases[i].link, cases[i].target);
        assert_string_equal(l.target.rel, cases[i].target);
        assert_int_equal(l.target.len, strlen(cases[i].target));
        assert_int_equal(S_ISDIR(l.st.st_mode), cases[i].dir);
        struct stat st;
        char p[PATH_MAX * 2];
        snprintf(p, sizeof p, "%s/%s", root, cases[i].target);
        assert_int_equal(lstat(p, &st), 0);
        assert_true(st.st_ino == l.st.st_ino && st.st_dev == l.st.st_dev);
    }
    close(rootfd);
}

static void scan_masks(struct cs_fs_deny *d, int rootfd, char *out, size_t cap)
{
    char **masks = NULL;
    size_t n = 0;
    struct cs_diag msg = {0};
    assert_int_equal(cs_fs_deny_scan(d, rootfd, &masks, &n, &msg), 0);
    for (size_t i = 0; i < n; i++)
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

static bool known(struct cs_fs_deny *d, const char *rel)
{
    char p[PATH_MAX * 2];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", root, rel);
    assert_int_equal(lstat(p, &st), 0);
    return cs_fs_deny_known(d, AT_FDCWD, p, &st);
}

static int under(struct cs_fs_deny *d, int rootfd, const char *rel)
{
    struct cs_fs_path p;
    assert_int_equal(cs_fs_path_normalize(rel, strlen(rel), &p, NULL), 0);
    struct cs_diag msg = {0};
    return cs__fs_deny_under(d, rootfd, &p, &msg);
}

static void test_scan(void **state)
{
    (void)state;
    struct cs_str rules[] = {{".codex/", 7}, {"app.env", 7}, {"*.key", 5}};
    struct cs_fs_deny *d = cs_fs_deny_new(rules, 3);
    assert_non_null(d);
    int rootfd = -1;
    assert_int_equal(cs_fs_root_open(root, &rootfd, NULL), 0);
    /* Every denied link is masked itself; each target inside once under its real path (real is
     * reached by .codex and real2.key; c1 and links/c2, which no rule denies, are not masked). */
    const char *want =
        ".codex abs.key absvault app.env chain.key dangling.key fileasdir.key "
        "links/deepup.key links/outrel.key links/upd.key loop.key out.key real real2.key "
        "rootlink.key store/app.env store/other.txt up/deep vault/inner.txt "
        "via.key";
    char got[2048];
    cs__fs_deny_cache_window(0); /* every listing cached at once: the second scan reads none */
    scan_masks(d, rootfd, got, sizeof got);
    assert_string_equal(got, want);
    scan_masks(d, rootfd, got, sizeof got);
    assert_true(cs__fs_deny_cache_hits(d) > 0);
    assert_string_equal(got, want); /* the cached listings keep the links */
    cs__fs_deny_cache_window(2000);
    /* The targets and everything below a target directory are remembered. */
    static const char *const denied[] = {
        "real",           "real/config.toml", "store/app.env", "vault/inner.txt", "absvault",
        "absvault/s.txt", "up/deep",          "up/deep/u.txt", "store/other.txt"};
    for (size_t i = 0; i < sizeof denied / sizeof *denied; i++)
        if (!known(d, denied[i]))
            fail_msg("%s is not remembered as denied", denied[i]);
    static const char *const free_[] = {"store", "vault", "up", "links", "c1"};
    for (size_t i = 0; i < sizeof free_ / sizeof *free_; i++)
        if (known(d, free_[i]))
            fail_msg("%s is remembered as denied", free_[i]);
    /* At or below a target directory, existing or not: denied; elsewhere not. */
    assert_int_equal(under(d, rootfd, "real"), CSW_ERROR_PATH_DENIED);
    assert_int_equal(under(d, rootfd, "real/config.toml"), CSW_ERROR_PATH_DENIED);
    assert_int_equal(under(d, rootfd, "real/new/deeper.txt"), CSW_ERROR_PATH_DENIED);
    assert_int_equal(under(d, rootfd, "up/deep/x"), CSW_ERROR_PATH_DENIED);
    assert_int_equal(under(d, rootfd, "up/x"), 0);
    assert_int_equal(under(d, rootfd, "store/new.txt"), 0);
    assert_int_equal(under(d, rootfd, "vault/inner.txt"), 0); /* a file: the tools check it */
    assert_int_equal(under(d, rootfd, "ldir/x"), 0); /* a link on the way: the open refuses it */
    assert_int_equal(under(NULL, rootfd, "real/x"), 0);
    close(rootfd);
    cs_fs_deny_free(d);
}

/* A link below a denied directory is not masked itself (the directory's mask hides it), but what
 * it leads to elsewhere in the workspace is. */
static void test_link_below_denied_dir(void **state)
{
    (void)state;
    mk("secrets");
    ln("../store/other.txt", "secrets/prod.env");
    struct cs_str rules[] = {{"secrets/", 8}};
    struct cs_fs_deny *d = cs_fs_deny_new(rules, 1);
    assert_non_null(d);
    int rootfd = -1;
    assert_int_equal(cs_fs_root_open(root, &rootfd, NULL), 0);
    char got[512];
    scan_masks(d, rootfd, got, sizeof got);
    assert_string_equal(got, "secrets store/other.txt");
    assert_true(known(d, "store/other.txt"));
    close(rootfd);
    cs_fs_deny_free(d);
}

/* A chain the resolver cannot hold (more than CS_FS_PATH_MAX bytes left to walk) fails the scan,
 * naming the link: what it leads to could go unmasked. */
static void test_chain_too_long_fails_the_scan(void **state)
{
    (void)state;
    static char text[3200];
    for (int i = 0; i < 3; i++) {
        int n = snprintf(text, sizeof text, "long%d", i + 1);
        while (n + 2 < 3100) {
            text[n++] = '/';
            text[n++] = '.';
        }
        text[n] = '\0';
        char name[16];
        snprintf(name, sizeof name, "long%d", i);
        ln(text, name);
    }
    ln("vault", "long3");
    int rootfd = -1;
    assert_int_equal(cs_fs_root_open(root, &rootfd, NULL), 0);
    struct cs__fs_link l;
    assert_int_equal(cs__fs_deny_link_resolve(rootfd, "long0", 5, &l), ENAMETOOLONG);
    assert_false(l.inside);
    assert_int_equal(cs__fs_deny_link_resolve(rootfd, "long1", 5, &l), 0); /* shorter: fine */
    assert_true(l.inside);
    assert_string_equal(l.target.rel, "vault");
    struct cs_str rules[] = {{"long0", 5}};
    struct cs_fs_deny *d = cs_fs_deny_new(rules, 1);
    assert_non_null(d);
    char **masks = NULL;
    size_t n = 0;
    struct cs_diag msg = {0};
    assert_int_equal(cs_fs_deny_scan(d, rootfd, &masks, &n, &msg), CSW_ERROR_FILE_OPERATION_FAILED);
    assert_null(masks);
    assert_non_null(strstr(msg.text, "cannot resolve the denied symlink \"long0\""));
    close(rootfd);
    cs_fs_deny_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_scan),
        cmocka_unit_test(test_link_below_denied_dir),
        cmocka_unit_test(test_chain_too_long_fails_the_scan),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
