/*
 * test_deny_ident: the identity memory of the deny rules (fs_deny_ident.c) and its table in the
 * operations database (store_ident.c), issue 29. On the build's file system (ext4 here: inode
 * generation and birth time) and on tmpfs (/dev/shm: birth time only, when it is mounted).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "fs.h"
#include "store.h"

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(p);
}

static void make(const char *dir, const char *name, const char *data)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(data, f);
    assert_int_equal(fclose(f), 0);
}

static struct stat stat_of(int dirfd, const char *name)
{
    struct stat st;
    assert_int_equal(fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW), 0);
    return st;
}

static struct cs_fs_deny *rules(void)
{
    struct cs_str r[] = {{"*.pem", 5}};
    struct cs_fs_deny *d = cs_fs_deny_new(r, 1);
    assert_non_null(d);
    return d;
}

/* In base: a denied file scanned, renamed (still known), then deleted and its number handed to a
 * new file (not known, and the identity forgotten: the journal says so). want: the tags the file
 * system must give. */
static void reuse_in(const char *base, unsigned want)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/cs-ident-XXXXXX", base);
    if (mkdtemp(dir) == NULL) {
        print_message("skip %s: %s\n", base, "mkdtemp failed");
        return;
    }
    int rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(rootfd >= 0);
    make(dir, "a.pem", "secret");
    make(dir, "b.pem", "secret");
    struct cs_fs_deny *d = rules();
    char **masks = NULL;
    size_t n = 0;
    struct cs_diag dg = {0};
    assert_int_equal(cs_fs_deny_scan(d, rootfd, &masks, &n, &dg), 0);
    for (size_t i = 0; i < n; i++)
        free(masks[i]);
    free(masks);

    struct stat sa = stat_of(rootfd, "a.pem");
    struct cs_fs_ident id;
    assert_int_equal(cs_fs_ident_get(rootfd, "a.pem", &sa, &id), 0);
    assert_int_equal(id.flags & want, want);
    struct cs_fs_deny_changes c;
    assert_int_equal(cs_fs_deny_take_changes(d, &c), 0);
    assert_int_equal(c.n, 2); /* both learned, journalled for the database */
    assert_false(c.v[0].forget);
    cs_fs_deny_changes_free(&c);

    /* Renamed and hard-linked: still denied. */
    assert_int_equal(renameat(rootfd, "b.pem", rootfd, "b.txt"), 0);
    assert_int_equal(linkat(rootfd, "a.pem", rootfd, "a.txt", 0), 0);
    struct stat sb = stat_of(rootfd, "b.txt"), sl = stat_of(rootfd, "a.txt");
    assert_true(cs_fs_deny_known(d, rootfd, "b.txt", &sb));
    assert_true(cs_fs_deny_known(d, rootfd, "a.txt", &sl));
    int fd = openat(rootfd, "b.txt", O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_true(cs_fs_deny_known(d, fd, NULL, &sb));
    close(fd);

    /* Deleted, then new files until one takes the number (bounded). */
    assert_int_equal(unlinkat(rootfd, "a.pem", 0), 0);
    assert_int_equal(unlinkat(rootfd, "a.txt", 0), 0);
    sync(); /* ext4 frees the inode once the unlink is committed */
    char name[32] = "";
    bool reused = false;
    for (int i = 0; i < 500 && !reused; i++) {
        snprintf(name, sizeof name, "n%04d.txt", i);
        make(dir, name, "free");
        reused = stat_of(rootfd, name).st_ino == sa.st_ino;
    }
    if (!reused) {
        print_message("note %s: no inode number reused in 500 files (tmpfs never reuses; the "
                      "loaded-identity case below covers a mismatch)\n",
                      base);
    } else {
        struct stat sn = stat_of(rootfd, name);
        assert_false(cs_fs_deny_known(d, rootfd, name, &sn));
        assert_int_equal(cs_fs_deny_take_changes(d, &c), 0);
        assert_int_equal(c.n, 1);
        assert_true(c.v[0].forget);
        assert_true(c.v[0].id.ino == (uint64_t)sa.st_ino);
        cs_fs_deny_changes_free(&c);
        /* A spawn's scan masks b.txt (still known) and not the new file. */
        assert_int_equal(cs_fs_deny_scan(d, rootfd, &masks, &n, &dg), 0);
        bool b = false;
        for (size_t i = 0; i < n; i++) {
            b = b || strcmp(masks[i], "b.txt") == 0;
            assert_string_not_equal(masks[i], name);
            free(masks[i]);
        }
        free(masks);
        assert_true(b);
    }
    /* Identities loaded in a new memory (a restart) deny the same renamed file. */
    struct cs_fs_deny *d2 = rules();
    struct cs_fs_ident ib;
    assert_int_equal(cs_fs_ident_get(rootfd, "b.txt", &sb, &ib), 0);
    assert_int_equal(cs_fs_deny_load(d2, &ib, 1), 0);
    assert_true(cs_fs_deny_known(d2, rootfd, "b.txt", &sb));
    /* A loaded identity whose tags differ from the file now there is another file. */
    if (ib.flags != 0) {
        struct cs_fs_ident other = ib;
        other.gen ^= 1u;
        other.btime_ns ^= 1;
        struct cs_fs_deny *d3 = rules();
        assert_int_equal(cs_fs_deny_load(d3, &other, 1), 0);
        assert_false(cs_fs_deny_known(d3, rootfd, "b.txt", &sb));
        cs_fs_deny_free(d3);
    }
    cs_fs_deny_free(d2);
    cs_fs_deny_free(d);
    close(rootfd);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void test_reuse_build_fs(void **state)
{
    (void)state;
    const char *t = getenv("TMPDIR");
    char base[256];
    snprintf(base, sizeof base, "%s", t && t[0] ? t : "/tmp");
    struct statfs sf;
    assert_int_equal(statfs(base, &sf), 0);
    /* ext4 answers both tags; elsewhere whatever it gives. */
    reuse_in(base, sf.f_type == 0xEF53 ? CS_FS_IDENT_GEN | CS_FS_IDENT_BTIME : 0);
}

static void test_reuse_tmpfs(void **state)
{
    (void)state;
    struct statfs sf;
    if (statfs("/dev/shm", &sf) != 0 || sf.f_type != 0x01021994) {
        print_message("skip: /dev/shm is not tmpfs\n");
        return;
    }
    reuse_in("/dev/shm", CS_FS_IDENT_BTIME); /* no generation on tmpfs: the birth time decides */
}

/* overlayfs: a rename copies a lower file up (st_ino kept, birth time not): no tag is trusted
 * there, and the renamed denied file stays denied. Root only (a private mount namespace). */
static void test_overlay_rename(void **state)
{
    (void)state;
    char base[] = "/tmp/cs-ident-ovl-XXXXXX";
    assert_non_null(mkdtemp(base));
    char lower[300], upper[300], work[300], merged[300], opts[1024];
    snprintf(lower, sizeof lower, "%s/lower", base);
    snprintf(upper, sizeof upper, "%s/upper", base);
    snprintf(work, sizeof work, "%s/work", base);
    snprintf(merged, sizeof merged, "%s/merged", base);
    assert_int_equal(
        mkdir(lower, 0700) | mkdir(upper, 0700) | mkdir(work, 0700) | mkdir(merged, 0700), 0);
    make(lower, "a.pem", "secret");
    snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work);
    if (geteuid() != 0 || unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("overlay", merged, "overlay", 0, opts) != 0) {
        print_message("skip: cannot mount an overlay here (%s)\n", strerror(errno));
        nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        return;
    }
    int rootfd = open(merged, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(rootfd >= 0);
    struct cs_fs_deny *d = rules();
    assert_int_equal(cs_fs_deny_scan(d, rootfd, NULL, NULL, NULL), 0);
    struct stat sa = stat_of(rootfd, "a.pem");
    struct cs_fs_ident id;
    assert_int_equal(cs_fs_ident_get(rootfd, "a.pem", &sa, &id), 0);
    assert_int_equal(id.flags, 0); /* untrusted tags: (device, inode) alone */
    assert_int_equal(renameat(rootfd, "a.pem", rootfd, "a.txt"), 0);
    struct stat sr = stat_of(rootfd, "a.txt");
    print_message("overlay: st_ino %s across the copy-up\n",
                  sr.st_ino == sa.st_ino ? "kept" : "changed");
    if (sr.st_ino == sa.st_ino)
        assert_true(cs_fs_deny_known(d, rootfd, "a.txt", &sr));
    cs_fs_deny_free(d);
    close(rootfd);
    assert_int_equal(umount2(merged, MNT_DETACH), 0);
    nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- the table ---- */

static void test_store_round_trip(void **state)
{
    (void)state;
    char dir[] = "/tmp/cs-ident-db-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/ops.db", dir);
    struct cs_store *s = NULL;
    struct cs_diag dg = {0};
    assert_int_equal(cs_store_open(path, &s, &dg), CS_STORE_OK);
    struct cs_store_ident v[] = {
        {1, 10, 7, 123, CS_STORE_IDENT_GEN | CS_STORE_IDENT_BTIME, false},
        {1, 11, 0, -5, CS_STORE_IDENT_BTIME, false},
        {UINT64_MAX, UINT64_MAX - 1, UINT32_MAX, 0, CS_STORE_IDENT_GEN, false},
        {2, 12, 0, 0, 0, false},
    };
    assert_int_equal(cs_store_ident_save(s, "ws", "/r", v, 4, false, &dg), CS_STORE_OK);
    assert_int_equal(cs_store_ident_save(s, "ws", "/other", v, 1, false, &dg), CS_STORE_OK);
    struct cs_store_ident del = {1, 11, 0, 0, 0, true},
                          upd = {2, 12, 9, 0, CS_STORE_IDENT_GEN, false};
    struct cs_store_ident ch[] = {del, upd};
    assert_int_equal(cs_store_ident_save(s, "ws", "/r", ch, 2, false, &dg), CS_STORE_OK);
    cs_store_close(s);

    assert_int_equal(cs_store_open(path, &s, &dg), CS_STORE_OK); /* a restart */
    struct cs_store_ident *got = NULL;
    size_t n = 0;
    assert_int_equal(cs_store_ident_load(s, "ws", "/r", &got, &n, &dg), CS_STORE_OK);
    assert_int_equal(n, 3);
    int seen = 0;
    for (size_t i = 0; i < n; i++) {
        if (got[i].ino == 10) {
            assert_true(got[i].gen == 7 && got[i].btime_ns == 123 &&
                        got[i].flags == (CS_STORE_IDENT_GEN | CS_STORE_IDENT_BTIME));
            seen |= 1;
        } else if (got[i].ino == UINT64_MAX - 1) {
            assert_true(got[i].dev == UINT64_MAX && got[i].gen == UINT32_MAX &&
                        got[i].flags == CS_STORE_IDENT_GEN);
            seen |= 2;
        } else if (got[i].ino == 12) {
            assert_true(got[i].gen == 9 && got[i].flags == CS_STORE_IDENT_GEN);
            seen |= 4;
        } else {
            fail_msg("unexpected ino %llu", (unsigned long long)got[i].ino);
        }
    }
    assert_int_equal(seen, 7);
    free(got);
    /* Keyed by workspace and root; replace drops the rest. */
    assert_int_equal(cs_store_ident_load(s, "ws", "/other", &got, &n, &dg), CS_STORE_OK);
    assert_int_equal(n, 1);
    free(got);
    assert_int_equal(cs_store_ident_load(s, "nope", "/r", &got, &n, &dg), CS_STORE_OK);
    assert_int_equal(n, 0);
    assert_null(got);
    assert_int_equal(cs_store_ident_save(s, "ws", "/r", &v[1], 1, true, &dg), CS_STORE_OK);
    assert_int_equal(cs_store_ident_load(s, "ws", "/r", &got, &n, &dg), CS_STORE_OK);
    assert_int_equal(n, 1);
    assert_true(got[0].ino == 11 && got[0].btime_ns == -5);
    free(got);
    cs_store_close(s);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_build_fs),
        cmocka_unit_test(test_reuse_tmpfs),
        cmocka_unit_test(test_overlay_rename),
        cmocka_unit_test(test_store_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
