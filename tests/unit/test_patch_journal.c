/*
 * Unit tests for apply_patch's crash journal (src/patch/patch_journal.c; docs/patch-format.md,
 * "Crash journal"): the intent parser on journals cs__patch_journal_begin really writes (read
 * back byte for byte, every single-byte corruption and every truncation refused, another version
 * refused by name, paths that are not normalised and temporary names that are not hex refused),
 * and cs__patch_journal_recover_at on a temporary workspace: a corrupt or denied journal touches
 * nothing and says what to do, a journal without an intent is settled as rolled_back, a crash
 * half-way is rolled back, one after every write rolled forward, and a second recovery changes
 * nothing; an Add 70 directories deep has every created directory removed; begin refuses an
 * intent larger than recovery reads, writing nothing. The seed corpus of
 * fuzz/patch_journal_fuzz.c is checked too: "ok-*" seeds parse and read back byte for byte,
 * every other seed is refused. Memory: journals of 8 MiB of minimal items and of items naming the
 * most directories parse and recover in a child whose address space may grow by at most three
 * times the journal plus 48 MiB (setrlimit RLIMIT_AS).
 * Trust: the workspace and the journal bytes are the test's own, made in a fresh temporary
 * directory; the deny rules go through the real matcher (cs_fs_deny_new).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs.h"
#include "patch_journal.h"

#define OP       "op-journal-test"
#define JDIR     CS__PATCH_JOURNAL_DIR "/" OP
#define CHECKSUM "its checksum does not match"

/* ---- a temporary workspace ---- */

struct ws {
    char top[64];  /* the temporary directory */
    char root[96]; /* top/ws: the workspace */
    int rootfd;    /* O_PATH, from cs_fs_root_open */
    char *intent;  /* the bytes begin wrote */
    size_t len;
};

static void put_file(const struct ws *w, const char *rel, const char *content)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", w->root, rel);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(content, 1, strlen(content), f), strlen(content));
    assert_int_equal(fclose(f), 0);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    assert_non_null(buf);
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        cap *= 2;
        buf = realloc(buf, cap + 1);
        assert_non_null(buf);
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

static char *ws_read(const struct ws *w, const char *rel, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", w->root, rel);
    return read_all(path, len);
}

static void ws_write_intent(const struct ws *w, const char *data, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/" JDIR "/intent", w->root);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static bool ws_exists(const struct ws *w, const char *rel)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", w->root, rel);
    return lstat(path, &st) == 0;
}

static void norm(const char *s, struct cs_fs_path *p)
{
    assert_int_equal(cs_fs_path_normalize(s, strlen(s), p, NULL), 0);
}

/* The old tree: a.txt (updated), b.txt (deleted), c.txt (moved to new/dir/c.txt, creating both
 * directories), secret/key.txt (updated), and added.txt added. */
static struct cs_fs_path p_a, p_b, p_c, p_cnew, p_add, p_key;

static void ws_open(struct ws *w)
{
    memset(w, 0, sizeof *w);
    snprintf(w->top, sizeof w->top, "/tmp/cs-pj-XXXXXX");
    assert_non_null(mkdtemp(w->top));
    snprintf(w->root, sizeof w->root, "%s/ws", w->top);
    assert_int_equal(mkdir(w->root, 0755), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/secret", w->root);
    assert_int_equal(mkdir(path, 0755), 0);
    put_file(w, "a.txt", "old a\n");
    put_file(w, "b.txt", "old b\n");
    put_file(w, "c.txt", "old c\n");
    put_file(w, "secret/key.txt", "old key\n");
    assert_int_equal(cs_fs_root_open(w->root, &w->rootfd, NULL), 0);
    norm("a.txt", &p_a);
    norm("b.txt", &p_b);
    norm("c.txt", &p_c);
    norm("new/dir/c.txt", &p_cnew);
    norm("added.txt", &p_add);
    norm("secret/key.txt", &p_key);
}

/* Writes the journal of the patch above as the engine does before its first write, then "crashes"
 * (closes it without an outcome), keeping the intent's bytes in w. */
static void ws_begin(struct ws *w, bool with_key)
{
    struct cs__patch_jitem items[5] = {
        {.kind = 'U', .path = &p_a, .old = "old a\n", .old_len = 6, .mode = 0644},
        {.kind = 'D', .path = &p_b, .old = "old b\n", .old_len = 6, .mode = 0644},
        {.kind = 'M', .path = &p_cnew, .from = &p_c, .old = "old c\n", .old_len = 6, .mode = 0644},
        {.kind = 'A', .path = &p_add, .mode = 0644},
        {.kind = 'U', .path = &p_key, .old = "old key\n", .old_len = 8, .mode = 0600},
    };
    struct cs__patch_journal j;
    struct cs_diag diag = {0};
    int rc = cs__patch_journal_begin(w->rootfd, OP, items, with_key ? 5 : 4, &j, &diag);
    if (rc != 0)
        fail_msg("begin: %s", diag.text);
    cs__patch_journal_close(&j);
    w->intent = ws_read(w, JDIR "/intent", &w->len);
    assert_non_null(w->intent);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void ws_close(struct ws *w)
{
    close(w->rootfd);
    free(w->intent);
    (void)nftw(w->top, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Every entry under the top directory (the workspace and what sits beside it): path, type, inode,
 * mode and content, one line each, in a fixed order. */
static char *snap_buf;
static size_t snap_len;

static void snap_add(const char *s, size_t n)
{
    snap_buf = realloc(snap_buf, snap_len + n + 1);
    assert_non_null(snap_buf);
    memcpy(snap_buf + snap_len, s, n);
    snap_len += n;
    snap_buf[snap_len] = '\0';
}

static void snap_dir(const char *dir)
{
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    assert_true(n >= 0);
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (strcmp(nm, ".") != 0 && strcmp(nm, "..") != 0) {
            char path[1024], line[1100];
            struct stat st;
            snprintf(path, sizeof path, "%s/%s", dir, nm);
            assert_int_equal(lstat(path, &st), 0);
            int k = snprintf(line, sizeof line, "%s %o %ju ", path, (unsigned)st.st_mode,
                             (uintmax_t)st.st_ino);
            assert_true(k > 0 && (size_t)k < sizeof line);
            snap_add(line, (size_t)k);
            if (S_ISREG(st.st_mode)) {
                size_t len = 0;
                char *c = read_all(path, &len);
                assert_non_null(c);
                snap_add(c, len);
                free(c);
            }
            snap_add("\n", 1);
            if (S_ISDIR(st.st_mode))
                snap_dir(path);
        }
        free(names[i]);
    }
    free(names);
}

static char *snapshot(const struct ws *w)
{
    snap_buf = NULL;
    snap_len = 0;
    snap_dir(w->top);
    return snap_buf;
}

/* ---- journal bytes ---- */

/* The intent with its last line replaced by a correct checksum line over what comes before. */
static char *reseal(const char *data, size_t len, size_t *out_len)
{
    size_t body = len;
    if (body > 0 && data[body - 1] == '\n')
        body--;
    while (body > 0 && data[body - 1] != '\n')
        body--;
    char *out = malloc(body + 80);
    assert_non_null(out);
    memcpy(out, data, body);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    assert_int_equal(EVP_Digest(out, body, md, &mdn, EVP_sha256(), NULL), 1);
    size_t n = body + (size_t)snprintf(out + body, 12, "end sha256:");
    for (unsigned i = 0; i < mdn; i++)
        n += (size_t)snprintf(out + n, 3, "%02x", md[i]);
    out[n++] = '\n';
    out[n] = '\0';
    *out_len = n;
    return out;
}

/* The intent with the first occurrence of from replaced by the tl bytes at to, resealed. */
static char *edit_n(const struct ws *w, const char *from, const char *to, size_t tl,
                    size_t *out_len)
{
    const char *at = strstr(w->intent, from);
    if (at == NULL)
        fail_msg("the intent holds no \"%s\"", from);
    size_t pre = (size_t)(at - w->intent), fl = strlen(from);
    char *tmp = malloc(w->len - fl + tl + 1);
    assert_non_null(tmp);
    memcpy(tmp, w->intent, pre);
    memcpy(tmp + pre, to, tl);
    memcpy(tmp + pre + tl, at + fl, w->len - pre - fl);
    char *out = reseal(tmp, w->len - fl + tl, out_len);
    free(tmp);
    return out;
}

static char *edit(const struct ws *w, const char *from, const char *to, size_t *out_len)
{
    return edit_n(w, from, to, strlen(to), out_len);
}

static void refused(const char *data, size_t len, const char *why_part)
{
    const char *why = NULL;
    char *canon = NULL;
    size_t clen = 0;
    assert_int_equal(cs__patch_journal_parse_check(data, len, &canon, &clen, &why), -1);
    assert_null(canon);
    assert_non_null(why);
    if (strstr(why, why_part) == NULL)
        fail_msg("reason \"%s\" does not say \"%s\"", why, why_part);
}

/* ---- recovery ---- */

struct seen {
    unsigned calls;
    char op[64];
    enum csw_patch_status status;
};

static int on_recovered(void *arg, const char *op_id, enum csw_patch_status status)
{
    struct seen *s = arg;
    s->calls++;
    snprintf(s->op, sizeof s->op, "%s", op_id);
    s->status = status;
    return 0;
}

/* Recovery that must refuse with code and a message naming the intent and what to do, and leave
 * every file (the journal too) exactly as it was. */
static void recover_refused(struct ws *w, struct cs_fs_deny *deny, int code, const char *what)
{
    char *before = snapshot(w);
    struct seen seen = {0};
    struct cs_diag diag = {0};
    unsigned n = 0; /* counted up by recover_at, zeroed by its caller */
    int rc = cs__patch_journal_recover_at(w->rootfd, deny, on_recovered, &seen, &n, &diag);
    assert_int_equal(rc, code);
    assert_int_equal(diag.code, code);
    assert_int_equal(n, 0);
    assert_int_equal(seen.calls, 0);
    if (strstr(diag.text, JDIR "/intent") == NULL || strstr(diag.text, what) == NULL ||
        strstr(diag.text, "remove that directory") == NULL)
        fail_msg("message: %s", diag.text);
    char *after = snapshot(w);
    assert_string_equal(after, before);
    free(before);
    free(after);
}

/* The crash half-way: a.txt replaced by a new inode, b.txt deleted, the rest not yet done. */
static void half_apply(struct ws *w)
{
    char a[512], t[512];
    snprintf(a, sizeof a, "%s/a.txt", w->root);
    snprintf(t, sizeof t, "%s/a.txt.new", w->root);
    put_file(w, "a.txt.new", "new a\n");
    assert_int_equal(rename(t, a), 0);
    snprintf(a, sizeof a, "%s/b.txt", w->root);
    assert_int_equal(unlink(a), 0);
}

static void assert_file(const struct ws *w, const char *rel, const char *want)
{
    size_t len = 0;
    char *got = ws_read(w, rel, &len);
    if (got == NULL)
        fail_msg("%s is missing", rel);
    assert_string_equal(got, want);
    free(got);
}

/* ---- tests: the parser ---- */

static void real_journal_reads_back(void **state)
{
    (void)state;
    struct ws w;
    ws_open(&w);
    ws_begin(&w, true);
    /* What begin wrote: the version line, the id, the five items with their kept files. */
    assert_true(strncmp(w.intent, "cs-patch-journal 1\nop " OP "\nitems 5\nU L 644 ", 39) == 0);
    assert_non_null(strstr(w.intent, "\nM L 644 "));
    assert_non_null(strstr(w.intent, "\n13 new/dir/c.txt\n5 c.txt\n3 new\n7 new/dir\n"));
    assert_non_null(strstr(w.intent, "\nA - 644 0 0 .cs-patch-"));
    assert_non_null(strstr(w.intent, "\nU L 600 "));
    assert_true(ws_exists(&w, JDIR "/s0") && ws_exists(&w, JDIR "/s4") &&
                !ws_exists(&w, JDIR "/s3"));
    const char *why = NULL;
    char *canon = NULL;
    size_t clen = 0;
    int rc = cs__patch_journal_parse_check(w.intent, w.len, &canon, &clen, &why);
    if (rc != 0)
        fail_msg("refused: %s", why);
    assert_int_equal(clen, w.len);
    assert_memory_equal(canon, w.intent, w.len);
    free(canon);
    /* Without an output too. */
    assert_int_equal(cs__patch_journal_parse_check(w.intent, w.len, NULL, NULL, NULL), 0);
    ws_close(&w);
}

static void every_corruption_refused(void **state)
{
    (void)state;
    struct ws w;
    ws_open(&w);
    ws_begin(&w, true);
    static const unsigned char masks[] = {0x01, 0x02, 0x20, 0x40, 0x80, 0xff};
    char *copy = malloc(w.len);
    assert_non_null(copy);
    size_t magic = strlen("cs-patch-journal 1\n");
    for (size_t i = 0; i < w.len; i++) {
        for (size_t m = 0; m < sizeof masks; m++) {
            memcpy(copy, w.intent, w.len);
            copy[i] = (char)(copy[i] ^ masks[m]);
            const char *why = NULL;
            char *canon = NULL;
            size_t clen = 0;
            int rc = cs__patch_journal_parse_check(copy, w.len, &canon, &clen, &why);
            if (rc == 0) {
                /* Only acceptable if it reads as the very same journal. */
                if (clen != w.len || memcmp(canon, w.intent, w.len) != 0)
                    fail_msg("byte %zu ^ 0x%02x accepted as another journal", i, masks[m]);
                free(canon);
                continue;
            }
            assert_null(canon);
            /* Past the version line, the checksum line is what catches it. */
            if (i >= magic && strstr(why, CHECKSUM) == NULL)
                fail_msg("byte %zu ^ 0x%02x refused as \"%s\"", i, masks[m], why);
        }
    }
    /* Every truncation, and the file with bytes after it. */
    for (size_t n = 0; n < w.len; n++)
        assert_int_equal(cs__patch_journal_parse_check(w.intent, n, NULL, NULL, NULL), -1);
    char *longer = malloc(w.len + 1);
    assert_non_null(longer);
    memcpy(longer, w.intent, w.len);
    longer[w.len] = '\n';
    refused(longer, w.len + 1, CHECKSUM);
    free(longer);
    free(copy);
    ws_close(&w);
}

static void other_version_refused(void **state)
{
    (void)state;
    struct ws w;
    ws_open(&w);
    ws_begin(&w, false);
    size_t n = 0;
    char *v2 = edit(&w, "cs-patch-journal 1\n", "cs-patch-journal 2\n", &n);
    refused(v2, n, "another version (this server reads version 1)");
    free(v2);
    v2 = edit(&w, "cs-patch-journal 1\n", "cs-patch-journal 10\n", &n);
    refused(v2, n, "another version (this server reads version 1)");
    free(v2);
    v2 = edit(&w, "cs-patch-journal 1\n", "cs-patch-jour\n", &n);
    refused(v2, n, "not a patch journal");
    free(v2);
    ws_close(&w);
}

/* Journals the writer never produces, checksummed as if it had: each one refused as malformed. */
static void malformed_refused(void **state)
{
    (void)state;
    struct ws w;
    ws_open(&w);
    ws_begin(&w, false);
#define E(from, to)                                                                                \
    {                                                                                              \
        from, to, sizeof to - 1                                                                    \
    }
    static const struct {
        const char *from, *to;
        size_t to_len;
    } edits[] = {
        /* paths that are not normalised relative paths (the deny rules match these bytes) */
        E("\n5 a.txt\n", "\n7 ./a.txt\n"),
        E("\n5 a.txt\n", "\n6 /a.txt\n"),
        E("\n5 a.txt\n", "\n8 ../a.txt\n"),
        E("\n5 a.txt\n", "\n6 a.txt/\n"),
        E("\n13 new/dir/c.txt\n", "\n14 new//dir/c.txt\n"),
        E("\n13 new/dir/c.txt\n", "\n14 new/../d/c.txt\n"),
        E("\n3 new\n", "\n4 new/\n"),
        E("\n5 a.txt\n", "\n5 a\0txt\n"),
        E("\n5 a.txt\n", "\n0 \n"),
        E("\n5 a.txt\n", "\n05 a.txt\n"),
        E("\n5 a.txt\n", "\n6 a.txt\n"),
        E("\n5 a.txt\n", "\n18446744073709551621 a.txt\n"),
        /* the header: numbers as printed, kinds and kept-file letters that go together */
        E("\nU L 644 ", "\nU L 0644 "),
        E("\nU L 644 ", "\nU L 648 "),
        E("\nU L 644 ", "\nU L 17777 "),
        E("\nU L 644 ", "\nX L 644 "),
        E("\nU L 644 ", "\nU - 644 "),
        E("\nU L 644 ", "\nU Q 644 "),
        E("\nA - 644 ", "\nA L 644 "),
        E("\nA - 644 0 0 ", "\nA - 644 00 0 "),
        E("\nA - 644 0 0 ", "\nA - 644 0 +0 "),
        E("\nA - 644 0 0 ", "\nA - 644 0  0 "),
        E(" 0\n9 added.txt\n", " 0\0\n9 added.txt\n"),
        E(" 0\n9 added.txt\n", " 2048\n9 added.txt\n"),
        E(" 0\n9 added.txt\n", " 1\n9 added.txt\n"),
        /* a Move without its source, an Add with one */
        E("\n5 c.txt\n", "\n0 \n"),
        E("\n9 added.txt\n0 \n", "\n9 added.txt\n5 b.txt\n"),
        /* the id line and the count */
        E("\nop " OP "\n", "\nop a/b\n"),
        E("\nop " OP "\n", "\nop a\tb\n"),
        E("\nop " OP "\n", "\nop \n"),
        E("\nop " OP "\n", "\nop-x\n"),
        E("\nitems 4\n", "\nitems 5\n"),
        E("\nitems 4\n", "\nitems 3\n"),
        E("\nitems 4\n", "\nitems 04\n"),
        E("\nitems 4\n", "\nitems 1048576\n"),
        E("\nitems 4\n", "\nitems 99999999999999999999\n"),
        E("\nitems 4\n", "\nitems 4\0\n"),
    };
#undef E
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        size_t n = 0;
        char *bad = edit_n(&w, edits[i].from, edits[i].to, edits[i].to_len, &n);
        const char *why = NULL;
        if (cs__patch_journal_parse_check(bad, n, NULL, NULL, &why) != -1)
            fail_msg("edit %zu (%s) accepted", i, edits[i].to);
        assert_string_equal(why, "it is malformed");
        free(bad);
    }
    ws_close(&w);
}

/* A temporary-file name is sixteen hex digits: one holding "/../.." would let recovery unlink
 * (and create) a file outside the workspace. */
static void tmp_name_cannot_escape(void **state)
{
    (void)state;
    struct ws w;
    ws_open(&w);
    ws_begin(&w, false);
    const char *tmp = strstr(w.intent, ".cs-patch-");
    assert_non_null(tmp);
    char from[31], to[31] = ".cs-patch-/../../victim123.tmp";
    memcpy(from, tmp, 30);
    from[30] = '\0';
    assert_int_equal(strlen(to), 30);
    size_t n = 0;
    char *bad = edit(&w, from, to, &n);
    refused(bad, n, "it is malformed");
    /* Through recovery, with the directory the name needs and a file outside to lose. */
    char path[512];
    snprintf(path, sizeof path, "%s/.cs-patch-", w.root);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/victim123.tmp", w.top);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    ws_write_intent(&w, bad, n);
    recover_refused(&w, NULL, CSW_ERROR_FILE_OPERATION_FAILED, "it is malformed");
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    free(bad);
    ws_close(&w);
}

/* ---- tests: recovery ---- */

static void corrupt_intent_touches_nothing(void **state)
{
    (void)state;
    struct ws w;
    ws_open(&w);
    ws_begin(&w, false);
    half_apply(&w);
    char *bad = malloc(w.len);
    assert_non_null(bad);
    memcpy(bad, w.intent, w.len);
    bad[w.len / 2] = (char)(bad[w.len / 2] ^ 0x04);
    ws_write_intent(&w, bad, w.len);
    recover_refused(&w, NULL, CSW_ERROR_FILE_OPERATION_FAILED, CHECKSUM);
    /* Still half-applied: nothing was rolled back. */
    assert_file(&w, "a.txt", "new a\n");
    assert_false(ws_exists(&w, "b.txt"));
    /* A journal of another version is refused the same way, naming the version. */
    size_t n = 0;
    char *v2 = edit(&w, "cs-patch-journal 1\n", "cs-patch-journal 2\n", &n);
    ws_write_intent(&w, v2, n);
    recover_refused(&w, NULL, CSW_ERROR_FILE_OPERATION_FAILED,
                    "another version (this server reads version 1)");
    free(v2);
    free(bad);
    ws_close(&w);
}

static void denied_path_touches_nothing(void **state)
{
    (void)state;
    struct ws w;
    ws_open(&w);
    ws_begin(&w, true);
    half_apply(&w);
    struct cs_str rules[] = {{(char *)"secret", 6}};
    struct cs_fs_deny *deny = cs_fs_deny_new(rules, 1);
    assert_non_null(deny);
    recover_refused(&w, deny, CSW_ERROR_PATH_DENIED, "deny rule \"secret\"");
    assert_file(&w, "a.txt", "new a\n");
    /* The Move's target, under a directory a rule denies at any depth. */
    struct cs_str dir_rule[] = {{(char *)"dir", 3}};
    struct cs_fs_deny *deny2 = cs_fs_deny_new(dir_rule, 1);
    assert_non_null(deny2);
    recover_refused(&w, deny2, CSW_ERROR_PATH_DENIED, "deny rule \"dir\"");
    /* The same journal with the rules gone recovers. */
    struct seen seen = {0};
    struct cs_diag diag = {0};
    assert_int_equal(cs__patch_journal_recover_at(w.rootfd, NULL, on_recovered, &seen, NULL, &diag),
                     0);
    assert_int_equal(seen.status, CSW_PATCH_STATUS_ROLLED_BACK);
    assert_file(&w, "a.txt", "old a\n");
    assert_file(&w, "secret/key.txt", "old key\n");
    cs_fs_deny_free(deny);
    cs_fs_deny_free(deny2);
    ws_close(&w);
}

/* Writes text to path (created or truncated). */
static void put_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Makes <root>/<rel> (mode) and writes its path to path. */
static void ws_mkdir(const struct ws *w, const char *rel, mode_t mode, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", w->root, rel);
    assert_int_equal(mkdir(path, mode), 0);
}

static void no_intent_is_rolled_back(void **state)
{
    (void)state;
    struct ws w;
    ws_open(&w);
    char path[512];
    ws_mkdir(&w, CS__PATCH_JOURNAL_DIR, 0700, path, sizeof path);
    ws_mkdir(&w, JDIR, 0700, path, sizeof path);
    /* What a crash before the durability point leaves: a kept link and the unrenamed intent. */
    char old[512], kept[600];
    snprintf(old, sizeof old, "%s/a.txt", w.root);
    snprintf(kept, sizeof kept, "%s/s0", path);
    assert_int_equal(link(old, kept), 0);
    snprintf(kept, sizeof kept, "%s/intent.tmp", path);
    put_text(kept, "cs-patch-journal 1\nop " OP "\n");
    struct seen seen = {0};
    struct cs_diag diag = {0};
    unsigned n = 0;
    assert_int_equal(cs__patch_journal_recover_at(w.rootfd, NULL, on_recovered, &seen, &n, &diag),
                     0);
    assert_int_equal(n, 1);
    assert_int_equal(seen.calls, 1);
    assert_string_equal(seen.op, OP);
    assert_int_equal(seen.status, CSW_PATCH_STATUS_ROLLED_BACK);
    assert_false(ws_exists(&w, CS__PATCH_JOURNAL_DIR));
    assert_file(&w, "a.txt", "old a\n");
    struct stat st;
    assert_int_equal(stat(old, &st), 0);
    assert_int_equal(st.st_nlink, 1);
    ws_close(&w);
}

/* What a patch or a command put in the journal directory (it is in the workspace) under a name
 * no journal has is left alone: recovery neither reads nor removes it, and does not stop the
 * workspace for it (it did: one Add File of .cs-patch-journal/x.txt stopped the workspace for
 * good). A journal beside them is still recovered. */
static void foreign_entries_left_alone(void **state)
{
    (void)state;
    struct ws w;
    ws_open(&w);
    char path[512];
    ws_mkdir(&w, CS__PATCH_JOURNAL_DIR, 0700, path, sizeof path);
    snprintf(path, sizeof path, "%s/" CS__PATCH_JOURNAL_DIR "/x.txt", w.root);
    put_text(path, "x\n");
    ws_mkdir(&w, CS__PATCH_JOURNAL_DIR "/notes", 0755, path, sizeof path);
    struct seen seen = {0};
    struct cs_diag diag = {0};
    unsigned n = 0;
    assert_int_equal(cs__patch_journal_recover_at(w.rootfd, NULL, on_recovered, &seen, &n, &diag),
                     0);
    assert_int_equal(n, 0);
    assert_int_equal(seen.calls, 0);
    assert_true(ws_exists(&w, CS__PATCH_JOURNAL_DIR "/x.txt"));
    assert_true(ws_exists(&w, CS__PATCH_JOURNAL_DIR "/notes"));
    /* a real journal beside them: recovered, and the foreign entries still there */
    ws_mkdir(&w, JDIR, 0700, path, sizeof path);
    snprintf(path, sizeof path, "%s/" JDIR "/intent.tmp", w.root);
    put_text(path, "cs-patch-journal 1\nop " OP "\n");
    assert_int_equal(cs__patch_journal_recover_at(w.rootfd, NULL, on_recovered, &seen, &n, &diag),
                     0);
    assert_int_equal(n, 1);
    assert_string_equal(seen.op, OP);
    assert_false(ws_exists(&w, JDIR));
    assert_true(ws_exists(&w, CS__PATCH_JOURNAL_DIR "/x.txt"));
    ws_close(&w);
}

/* The same journal on a worker (no ledger: recovery keeps an operation's journal for the
 * gateway): the outcome rolled_back is written so that patch_outcomes reports it, and a settle
 * removes it. Without the outcome the row stayed unknown and the journal stayed for ever. */
static void no_intent_on_a_worker_is_reported(void **state)
{
    (void)state;
    struct ws w;
    ws_open(&w);
    char path[512];
    snprintf(path, sizeof path, "%s/" CS__PATCH_JOURNAL_DIR, w.root);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/" JDIR, w.root);
    assert_int_equal(mkdir(path, 0700), 0);
    struct cs_diag diag = {0};
    assert_int_equal(cs__patch_journal_recover_at(w.rootfd, NULL, NULL, NULL, NULL, &diag), 0);
    assert_true(ws_exists(&w, JDIR "/outcome"));
    const char *ask[] = {OP};
    struct seen seen = {0};
    assert_int_equal(
        cs_patch_journal_outcomes(w.root, NULL, NULL, 0, ask, 1, on_recovered, &seen, &diag), 0);
    assert_int_equal(seen.calls, 1);
    assert_string_equal(seen.op, OP);
    assert_int_equal(seen.status, CSW_PATCH_STATUS_ROLLED_BACK);
    const char *settle[] = {OP};
    memset(&seen, 0, sizeof seen);
    assert_int_equal(
        cs_patch_journal_outcomes(w.root, NULL, settle, 1, NULL, 0, on_recovered, &seen, &diag), 0);
    assert_int_equal(seen.calls, 0);
    assert_false(ws_exists(&w, CS__PATCH_JOURNAL_DIR));
    ws_close(&w);
}

static void half_applied_rolls_back_once(void **state)
{
    (void)state;
    struct ws w;
    ws_open(&w);
    struct stat a0;
    char a[512];
    snprintf(a, sizeof a, "%s/a.txt", w.root);
    assert_int_equal(stat(a, &a0), 0);
    ws_begin(&w, false);
    half_apply(&w);
    struct seen seen = {0};
    struct cs_diag diag = {0};
    unsigned n = 0;
    int rc = cs__patch_journal_recover_at(w.rootfd, NULL, on_recovered, &seen, &n, &diag);
    if (rc != 0)
        fail_msg("recover: %s", diag.text);
    assert_int_equal(n, 1);
    assert_int_equal(seen.calls, 1);
    assert_string_equal(seen.op, OP);
    assert_int_equal(seen.status, CSW_PATCH_STATUS_ROLLED_BACK);
    assert_file(&w, "a.txt", "old a\n");
    assert_file(&w, "b.txt", "old b\n");
    assert_file(&w, "c.txt", "old c\n");
    assert_false(ws_exists(&w, "new"));
    assert_false(ws_exists(&w, "added.txt"));
    assert_false(ws_exists(&w, CS__PATCH_JOURNAL_DIR));
    struct stat a1;
    assert_int_equal(stat(a, &a1), 0);
    assert_int_equal(a1.st_ino, a0.st_ino); /* the old inode itself, renamed back */
    /* Twice: nothing left to do, nothing changes. */
    char *before = snapshot(&w);
    memset(&seen, 0, sizeof seen);
    n = 0;
    assert_int_equal(cs__patch_journal_recover_at(w.rootfd, NULL, on_recovered, &seen, &n, &diag),
                     0);
    assert_int_equal(n, 0);
    assert_int_equal(seen.calls, 0);
    char *after = snapshot(&w);
    assert_string_equal(after, before);
    free(before);
    free(after);
    ws_close(&w);
}

/* Every write done, the crash before the outcome: rolled forward as applied, twice the same. */
static void fully_applied_rolls_forward(void **state)
{
    (void)state;
    struct ws w;
    ws_open(&w);
    ws_begin(&w, false);
    half_apply(&w);
    char path[512];
    snprintf(path, sizeof path, "%s/new", w.root);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/new/dir", w.root);
    assert_int_equal(mkdir(path, 0755), 0);
    char from[512];
    snprintf(from, sizeof from, "%s/c.txt", w.root);
    snprintf(path, sizeof path, "%s/new/dir/c.txt", w.root);
    assert_int_equal(rename(from, path), 0);
    put_file(&w, "added.txt", "added\n");
    /* A temporary file the intent names, left by the crash. */
    const char *tmp = strstr(w.intent, "\nA - 644 0 0 ");
    assert_non_null(tmp);
    char tname[31];
    memcpy(tname, tmp + 13, 30);
    tname[30] = '\0';
    put_file(&w, tname, "partial");
    struct seen seen = {0};
    struct cs_diag diag = {0};
    int rc = cs__patch_journal_recover_at(w.rootfd, NULL, on_recovered, &seen, NULL, &diag);
    if (rc != 0)
        fail_msg("recover: %s", diag.text);
    assert_int_equal(seen.status, CSW_PATCH_STATUS_APPLIED);
    assert_file(&w, "a.txt", "new a\n");
    assert_false(ws_exists(&w, "b.txt"));
    assert_false(ws_exists(&w, "c.txt"));
    assert_file(&w, "new/dir/c.txt", "old c\n");
    assert_file(&w, "added.txt", "added\n");
    assert_false(ws_exists(&w, tname));
    assert_false(ws_exists(&w, CS__PATCH_JOURNAL_DIR));
    char *before = snapshot(&w);
    memset(&seen, 0, sizeof seen);
    assert_int_equal(cs__patch_journal_recover_at(w.rootfd, NULL, on_recovered, &seen, NULL, &diag),
                     0);
    assert_int_equal(seen.calls, 0);
    char *after = snapshot(&w);
    assert_string_equal(after, before);
    free(before);
    free(after);
    ws_close(&w);
}

/* ---- the fuzz harness's seeds ---- */

static void corpus_seeds(void **state)
{
    (void)state;
    DIR *d = opendir(CS_PATCH_JOURNAL_CORPUS);
    assert_non_null(d);
    unsigned ok = 0, bad = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", CS_PATCH_JOURNAL_CORPUS, e->d_name);
        size_t len = 0;
        char *data = read_all(path, &len);
        assert_non_null(data);
        const char *why = NULL;
        char *canon = NULL;
        size_t clen = 0;
        int rc = cs__patch_journal_parse_check(data, len, &canon, &clen, &why);
        if (strncmp(e->d_name, "ok-", 3) == 0) {
            if (rc != 0)
                fail_msg("%s refused: %s", e->d_name, why);
            assert_int_equal(clen, len);
            assert_memory_equal(canon, data, len);
            free(canon);
            ok++;
        } else {
            if (rc != -1)
                fail_msg("%s accepted", e->d_name);
            bad++;
        }
        free(data);
    }
    closedir(d);
    assert_true(ok >= 5 && bad >= 5);
}

/* An Add 70 directories deep (deeper than any fixed small cap), crashed after its directories
 * were made and before its file: recovery removes every directory it created, the deepest first,
 * and keeps the one that was there. */
static void deep_add_rolls_back_every_directory(void **state)
{
    (void)state;
    struct ws w;
    ws_open(&w);
    char rel[512] = "secret";
    size_t n = strlen(rel);
    for (int d = 0; d < 70; d++)
        n += (size_t)snprintf(rel + n, sizeof rel - n, "/d%d", d);
    snprintf(rel + n, sizeof rel - n, "/f.txt");
    struct cs_fs_path p;
    norm(rel, &p);
    struct cs__patch_jitem item = {.kind = 'A', .path = &p, .mode = 0644};
    struct cs__patch_journal j;
    struct cs_diag diag = {0};
    if (cs__patch_journal_begin(w.rootfd, OP, &item, 1, &j, &diag) != 0)
        fail_msg("begin: %s", diag.text);
    cs__patch_journal_close(&j);
    char path[600];
    snprintf(path, sizeof path, "%s/%.*s", w.root, (int)n, rel);
    for (char *s = path + strlen(w.root) + 1 + 7; (s = strchr(s, '/')) != NULL; s++) {
        *s = '\0';
        assert_int_equal(mkdir(path, 0755), 0);
        *s = '/';
    }
    assert_int_equal(mkdir(path, 0755), 0);
    assert_true(ws_exists(&w, "secret/d0/d1"));
    struct seen seen = {0};
    unsigned count = 0;
    assert_int_equal(
        cs__patch_journal_recover_at(w.rootfd, NULL, on_recovered, &seen, &count, &diag), 0);
    assert_int_equal(count, 1);
    assert_int_equal(seen.status, CSW_PATCH_STATUS_ROLLED_BACK);
    assert_false(ws_exists(&w, "secret/d0"));
    assert_true(ws_exists(&w, "secret/key.txt"));
    assert_false(ws_exists(&w, CS__PATCH_JOURNAL_DIR));
    ws_close(&w);
}

/* Adds whose new directory chains would make an intent larger than recovery reads (64 MiB:
 * seventeen files 2046 new directories deep, each directory a prefix of a 4095-byte path): begin
 * refuses before anything is written, and leaves no journal. */
static void oversized_intent_refused(void **state)
{
    (void)state;
    struct ws w;
    ws_open(&w);
    enum { N = 17 };
    static struct cs_fs_path paths[N];
    struct cs__patch_jitem items[N];
    char rel[CS_FS_PATH_MAX + 1];
    for (size_t k = 0; k < 2046; k++)
        memcpy(rel + 2 * k, "a/", 2);
    for (int i = 0; i < N; i++) {
        rel[4092] = 'f'; /* "f00".."f16", written by hand: no format truncation to reason about */
        rel[4093] = (char)('0' + i / 10);
        rel[4094] = (char)('0' + i % 10);
        rel[4095] = '\0';
        norm(rel, &paths[i]);
        assert_int_equal(paths[i].len, CS_FS_PATH_MAX);
        items[i] = (struct cs__patch_jitem){.kind = 'A', .path = &paths[i], .mode = 0644};
    }
    char *before = snapshot(&w);
    struct cs__patch_journal j;
    struct cs_diag diag = {0};
    assert_int_equal(cs__patch_journal_begin(w.rootfd, OP, items, N, &j, &diag),
                     CSW_ERROR_FILE_OPERATION_FAILED);
    if (strstr(diag.text, "64 MiB") == NULL)
        fail_msg("message: %s", diag.text);
    char *after = snapshot(&w);
    assert_string_equal(after, before);
    free(before);
    free(after);
    /* One fewer fits, and recovery reads it (nothing of it exists: rolled back). */
    assert_int_equal(cs__patch_journal_begin(w.rootfd, OP, items, N - 2, &j, &diag), 0);
    cs__patch_journal_close(&j);
    struct seen seen = {0};
    unsigned n = 0;
    assert_int_equal(cs__patch_journal_recover_at(w.rootfd, NULL, on_recovered, &seen, &n, &diag),
                     0);
    assert_int_equal(n, 1);
    assert_int_equal(seen.status, CSW_PATCH_STATUS_ROLLED_BACK);
    ws_close(&w);
}

/* ---- memory: recovery's cost follows the journal's size ---- */

/* A valid journal (correct checksum) of minimal Add items, each creating nd directories, about
 * target bytes long: what any command in the workspace can write. */
static char *big_journal(size_t target, unsigned nd, size_t *out_len)
{
    size_t cap = target + 4096, n = 0;
    char *body = malloc(cap);
    assert_non_null(body);
    int hdr = snprintf(NULL, 0, "A - 644 0 0 .cs-patch-%016x.tmp %u\n", 0u, nd);
    assert_true(hdr > 0);
    size_t count = target / ((size_t)hdr + 6 + 3 + 4 * (size_t)nd);
    n += (size_t)snprintf(body + n, cap - n, "cs-patch-journal 1\nop " OP "\nitems %zu\n", count);
    for (size_t i = 0; i < count; i++) {
        int k =
            snprintf(body + n, cap - n, "A - 644 0 0 .cs-patch-%016zx.tmp %u\n3 d/x\n0 \n", i, nd);
        assert_true(k > 0 && (size_t)k < cap - n);
        n += (size_t)k;
        for (unsigned d = 0; d < nd; d++) {
            assert_true(cap - n > 4);
            memcpy(body + n, "1 d\n", 4);
            n += 4;
        }
    }
    body[n++] = 'x'; /* a last line for reseal to replace */
    body[n++] = '\n';
    char *out = reseal(body, n, out_len);
    free(body);
    return out;
}

/* Virtual memory in use now, in bytes. */
static size_t vm_size(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    unsigned long pages = 0;
    assert_int_equal(fscanf(f, "%lu", &pages), 1);
    fclose(f);
    return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* In a child whose address space may grow by at most 3x the journal plus 48 MiB: the journal
 * parses and reads back byte for byte, and recovery of a workspace where none of its files
 * exist rolls it back. A parser that spends kilobytes per item runs out of memory there. */
static void budgeted(const char *data, size_t len)
{
    struct ws w;
    ws_open(&w);
    char path[512];
    snprintf(path, sizeof path, "%s/" CS__PATCH_JOURNAL_DIR, w.root);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/" JDIR, w.root);
    assert_int_equal(mkdir(path, 0700), 0);
    ws_write_intent(&w, data, len);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        size_t cap = vm_size() + 3 * len + ((size_t)48 << 20);
        struct rlimit rl = {(rlim_t)cap, (rlim_t)(cap + 2 * len)};
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(10);
        char *canon = NULL;
        size_t clen = 0;
        const char *why = "";
        /* parse_check's canonical copy costs up to 2x more: the parse alone first, then the
         * read-back under a cap one journal larger. */
        if (cs__patch_journal_parse_check(data, len, NULL, NULL, &why) != 0) {
            fprintf(stderr, "parse: %s\n", why);
            _exit(11);
        }
        struct seen seen = {0};
        struct cs_diag diag = {0};
        unsigned n = 0;
        if (cs__patch_journal_recover_at(w.rootfd, NULL, on_recovered, &seen, &n, &diag) != 0) {
            fprintf(stderr, "recover: %s\n", diag.text);
            _exit(12);
        }
        if (n != 1 || seen.calls != 1 || seen.status != CSW_PATCH_STATUS_ROLLED_BACK ||
            ws_exists(&w, CS__PATCH_JOURNAL_DIR))
            _exit(13);
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(10);
        if (cs__patch_journal_parse_check(data, len, &canon, &clen, &why) != 0) {
            fprintf(stderr, "parse_check: %s\n", why);
            _exit(14);
        }
        _exit(clen == len && memcmp(canon, data, len) == 0 ? 0 : 15);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("the child under the memory cap ended with status %#x", (unsigned)status);
    ws_close(&w);
}

static void memory_follows_journal_size(void **state)
{
    (void)state;
    size_t len = 0;
    /* 8 MiB of the shortest items: about 150 thousand. */
    char *data = big_journal((size_t)8 << 20, 0, &len);
    budgeted(data, len);
    free(data);
    /* 2 MiB of items that each create the most directories an item may name: one per proper
     * prefix of a path of CS_FS_PATH_MAX bytes. One more is refused. */
    data = big_journal((size_t)2 << 20, CS_FS_PATH_MAX / 2, &len);
    budgeted(data, len);
    free(data);
    data = big_journal((size_t)64 << 10, CS_FS_PATH_MAX / 2 + 1, &len);
    refused(data, len, "it is malformed");
    free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(real_journal_reads_back),
        cmocka_unit_test(every_corruption_refused),
        cmocka_unit_test(other_version_refused),
        cmocka_unit_test(malformed_refused),
        cmocka_unit_test(tmp_name_cannot_escape),
        cmocka_unit_test(corrupt_intent_touches_nothing),
        cmocka_unit_test(denied_path_touches_nothing),
        cmocka_unit_test(no_intent_is_rolled_back),
        cmocka_unit_test(foreign_entries_left_alone),
        cmocka_unit_test(no_intent_on_a_worker_is_reported),
        cmocka_unit_test(half_applied_rolls_back_once),
        cmocka_unit_test(fully_applied_rolls_forward),
        cmocka_unit_test(corpus_seeds),
        cmocka_unit_test(deep_add_rolls_back_every_directory),
        cmocka_unit_test(oversized_intent_refused),
        cmocka_unit_test(memory_follows_journal_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
