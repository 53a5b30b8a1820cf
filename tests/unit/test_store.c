/*
 * Unit tests of the store module (the operation ledger): ids and times, opening (parent
 * directories, ":memory:", WAL checked through a second connection, migrations idempotent across
 * reopen, a newer schema version, another application's database, garbage, a truncated and a
 * damaged database, an uncreatable location: every refused file left byte for byte unchanged),
 * mint / finish / look up by id and by key, events and their times, key reuse (replay information
 * and conflict), rows left unknown by a "crash" (closed without finishing), and the fingerprint.
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
#include <regex.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store.h"

#define FP_A "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define FP_B "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

#define TIME_RE "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$"
#define ID_RE   "^op-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"

static struct {
    char dir[128];
    int seq;
} fx;

static void db_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", fx.dir, name);
}

/* A fresh path for each test: <dir>/t<n>/<name>. */
static void fresh_path(char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/t%d/ops.db", fx.dir, ++fx.seq);
}

static bool matches(const char *re, const char *s)
{
    regex_t r;
    assert_int_equal(regcomp(&r, re, REG_EXTENDED | REG_NOSUB), 0);
    int rc = regexec(&r, s, 0, NULL, 0);
    regfree(&r);
    return rc == 0;
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_true(len >= 0);
    rewind(f);
    char *buf = malloc((size_t)len + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static void spit(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n > 0)
        assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static struct cs_store *open_ok(const char *path)
{
    struct cs_store *s = NULL;
    struct cs_diag dg = {0};
    enum cs_store_status rc = cs_store_open(path, &s, &dg);
    if (rc != CS_STORE_OK)
        fail_msg("open %s: %s", path, dg.text);
    assert_non_null(s);
    return s;
}

/* Opening must fail, name the path, contain `want`, and leave the file's bytes unchanged. */
static void open_refused(const char *path, const char *want)
{
    size_t n0 = 0, n1 = 0;
    struct stat st;
    char *before = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? slurp(path, &n0) : NULL;
    struct cs_store *s = (struct cs_store *)1;
    struct cs_diag dg = {0};
    assert_int_equal(cs_store_open(path, &s, &dg), CS_STORE_ERROR);
    assert_null(s);
    if (getenv("CS_TEST_VERBOSE") != NULL)
        print_message("refused: %s\n", dg.text);
    if (strstr(dg.text, path) == NULL || strstr(dg.text, want) == NULL)
        fail_msg("message \"%s\" lacks \"%s\" or the path", dg.text, want);
    /* Through the one formatter: INTERNAL, one line (quick_check's newlines are spelled \x0A). */
    assert_int_equal(dg.code, CSW_ERROR_INTERNAL);
    for (const char *c = dg.text; *c; c++)
        assert_true((unsigned char)*c >= 0x20 && *c != 0x7F);
    if (before != NULL) {
        char *after = slurp(path, &n1);
        assert_int_equal(n0, n1);
        assert_memory_equal(before, after, n0);
        free(after);
        free(before);
    }
}

static void sql(const char *path, const char *text)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *err = NULL;
    if (sqlite3_exec(db, text, NULL, NULL, &err) != SQLITE_OK)
        fail_msg("%s: %s", text, err);
    sqlite3_close(db);
}

static void sql_text(const char *path, const char *text, char *out, size_t cap)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, text, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    snprintf(out, cap, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void mint_ok(struct cs_store *s, const char *key, const char *fp, char id[CS_STORE_ID_SIZE])
{
    struct cs_store_existing ex;
    struct cs_diag dg = {0};
    enum cs_store_status rc =
        cs_store_mint(s, "default", 7, key, key != NULL ? strlen(key) : 0, fp, id, &ex, &dg);
    if (rc != CS_STORE_OK)
        fail_msg("mint: %d %s", rc, dg.text);
    assert_true(matches(ID_RE, id));
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(fx.dir, sizeof fx.dir, "/tmp/cs-store-XXXXXX");
    return mkdtemp(fx.dir) != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    return nftw(fx.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- ids, times ---- */

/* The one mapping of the store's statuses to the catalogue. */
static void test_status_error(void **state)
{
    (void)state;
    assert_int_equal(cs_store_status_error(CS_STORE_OK), 0);
    assert_int_equal(cs_store_status_error(CS_STORE_KEY_EXISTS), 0);
    assert_int_equal(cs_store_status_error(CS_STORE_NOT_FOUND), CSW_ERROR_OPERATION_NOT_FOUND);
    assert_int_equal(cs_store_status_error(CS_STORE_ERROR), CSW_ERROR_INTERNAL);
    assert_int_equal(cs_store_status_error(CS_STORE_INVALID), CSW_ERROR_INTERNAL);
}

static void test_ids(void **state)
{
    (void)state;
    char a[CS_STORE_ID_SIZE], b[CS_STORE_ID_SIZE];
    for (int i = 0; i < 200; i++) {
        assert_int_equal(cs__store_new_id(a), 0);
        assert_true(matches(ID_RE, a));
    }
    assert_int_equal(cs__store_new_id(b), 0);
    assert_string_not_equal(a, b);
    assert_int_equal(strlen(a), CS_STORE_ID_SIZE - 1);
}

static void test_times(void **state)
{
    (void)state;
    char t[CS_STORE_TIME_SIZE];
    cs__store_now(t);
    assert_true(matches(TIME_RE, t));
    assert_int_equal(strlen(t), CS_STORE_TIME_SIZE - 1);
    assert_true(strncmp(t, "20", 2) == 0);
}

/* ---- open ---- */

static void test_open_creates_parents_wal(void **state)
{
    (void)state;
    char path[300], dir[256], out[64];
    snprintf(dir, sizeof dir, "%s/state/codespace", fx.dir);
    snprintf(path, sizeof path, "%s/operations.db", dir);
    struct cs_store *s = open_ok(path);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0700);
    /* journal_mode is persistent in the file: a second connection sees WAL. */
    sql_text(path, "PRAGMA journal_mode", out, sizeof out);
    assert_string_equal(out, "wal");
    sql_text(path, "PRAGMA user_version", out, sizeof out);
    assert_int_equal(atoi(out), CS_STORE_SCHEMA_VERSION);
    sql_text(path, "PRAGMA application_id", out, sizeof out);
    assert_int_equal(atoi(out), CS_STORE_APPLICATION_ID);
    cs_store_close(s);
}

static void test_open_memory(void **state)
{
    (void)state;
    struct cs_store *s = open_ok(":memory:");
    char id[CS_STORE_ID_SIZE];
    mint_ok(s, "k", FP_A, id);
    cs_store_close(s);
    /* A new in-memory ledger is empty. */
    s = open_ok(":memory:");
    struct csw_mcp_operation_status_output o;
    assert_int_equal(cs_store_get_by_key(s, "k", 1, &o, NULL), CS_STORE_NOT_FOUND);
    cs_store_close(s);
    cs_store_close(NULL);
}

static void test_reopen_idempotent(void **state)
{
    (void)state;
    char path[256], out[64], id[CS_STORE_ID_SIZE];
    fresh_path(path, sizeof path);
    struct cs_store *s = open_ok(path);
    mint_ok(s, "k1", FP_A, id);
    cs_store_close(s);
    for (int i = 0; i < 3; i++) {
        s = open_ok(path);
        struct csw_mcp_operation_status_output o;
        assert_int_equal(cs_store_get_by_id(s, id, strlen(id), &o, NULL), CS_STORE_OK);
        csw_mcp_operation_status_output_free(&o);
        cs_store_close(s);
    }
    sql_text(path, "PRAGMA user_version", out, sizeof out);
    assert_int_equal(atoi(out), CS_STORE_SCHEMA_VERSION);
    sql_text(path, "SELECT count(*) FROM operations", out, sizeof out);
    assert_string_equal(out, "1");
}

static void test_newer_version_refused(void **state)
{
    (void)state;
    char path[256];
    fresh_path(path, sizeof path);
    cs_store_close(open_ok(path));
    sql(path, "PRAGMA user_version = 99");
    open_refused(path, "newer");
}

static void test_foreign_database_refused(void **state)
{
    (void)state;
    char path[256];
    fresh_path(path, sizeof path);
    cs_store_close(open_ok(path)); /* creates the directory */
    assert_int_equal(unlink(path), 0);
    sql(path, "CREATE TABLE mine (x INTEGER)");
    open_refused(path, "not a CodeSpace operations database");
    /* Ours in shape but another application id. */
    fresh_path(path, sizeof path);
    cs_store_close(open_ok(path));
    sql(path, "PRAGMA application_id = 7");
    open_refused(path, "not a CodeSpace operations database");
}

static void test_garbage_refused(void **state)
{
    (void)state;
    char path[256];
    db_path(path, sizeof path, "garbage.db");
    char junk[8192];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)('a' + i % 26);
    spit(path, junk, sizeof junk);
    open_refused(path, "not a database");
    open_refused(path, "not a database"); /* still refused: nothing was recreated */
}

/* A real ledger with enough rows to span many pages, closed (checkpointed, no WAL left). */
static void make_big(const char *path)
{
    struct cs_store *s = open_ok(path);
    char id[CS_STORE_ID_SIZE], key[32];
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof key, "key-%d", i);
        mint_ok(s, key, FP_A, id);
    }
    cs_store_close(s);
    char wal[300];
    snprintf(wal, sizeof wal, "%s-wal", path);
    assert_int_not_equal(access(wal, F_OK), 0);
}

static void test_truncated_refused(void **state)
{
    (void)state;
    char path[256];
    fresh_path(path, sizeof path);
    make_big(path);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 8 * 4096);
    assert_int_equal(truncate(path, 4 * 4096), 0);
    open_refused(path, "operations database");
}

static void test_damaged_refused(void **state)
{
    (void)state;
    char path[256];
    fresh_path(path, sizeof path);
    make_big(path);
    size_t n;
    char *bytes = slurp(path, &n);
    /* Overwrite the middle of the file (b-tree pages), keep the header intact. */
    assert_true(n > 8 * 4096);
    memset(bytes + 3 * 4096, 0x5A, 4 * 4096);
    spit(path, bytes, n);
    free(bytes);
    open_refused(path, "operations database");
}

static void test_uncreatable_refused(void **state)
{
    (void)state;
    char file[256], path[300];
    db_path(file, sizeof file, "plainfile");
    spit(file, "x", 1);
    /* A parent that is a regular file: refused whoever runs the test (root included). */
    snprintf(path, sizeof path, "%s/sub/ops.db", file);
    open_refused(path, "cannot create directory");
    snprintf(path, sizeof path, "%s/ops.db", file);
    open_refused(path, "operations database");
    /* A directory without write permission (root ignores modes, so only as another user). */
    if (geteuid() != 0) {
        char ro[256];
        db_path(ro, sizeof ro, "readonly");
        assert_int_equal(mkdir(ro, 0500), 0);
        snprintf(path, sizeof path, "%s/ops.db", ro);
        open_refused(path, "operations database");
        snprintf(path, sizeof path, "%s/sub/ops.db", ro);
        open_refused(path, "cannot create directory");
        assert_int_equal(chmod(ro, 0700), 0);
    }
    /* A directory where the file should be. */
    db_path(path, sizeof path, "adir.db");
    assert_int_equal(mkdir(path, 0700), 0);
    open_refused(path, "operations database");
    struct cs_store *s = (struct cs_store *)1;
    struct cs_diag dg = {0};
    assert_int_equal(cs_store_open("", &s, &dg), CS_STORE_ERROR);
    assert_null(s);
}

/* ---- mint, finish, get ---- */

static void fill_result(struct csw_mcp_apply_patch_output *r, const char *id)
{
    memset(r, 0, sizeof *r);
    r->status = CSW_PATCH_STATUS_APPLIED;
    assert_int_equal(cs_str_set_n(&r->operation_id, id, strlen(id)), 0);
    r->files.v = cs_wire_malloc(2 * sizeof *r->files.v);
    assert_non_null(r->files.v);
    memset(r->files.v, 0, 2 * sizeof *r->files.v);
    r->files.n = 2;
    assert_int_equal(cs_str_set_n(&r->files.v[0], "a.txt", 5), 0);
    assert_int_equal(cs_str_set_n(&r->files.v[1], "b.txt", 5), 0);
    r->changes.v = cs_wire_malloc(2 * sizeof *r->changes.v);
    assert_non_null(r->changes.v);
    memset(r->changes.v, 0, 2 * sizeof *r->changes.v);
    r->changes.n = 2;
    struct csw_patch_change *c = r->changes.v;
    c[0].kind = CSW_PATCH_CHANGE_KIND_ADD;
    assert_int_equal(cs_str_set_n(&c[0].path, "a.txt", 5), 0);
    c[0].has_after_version = true;
    assert_int_equal(cs_str_set_n(&c[0].after_version, FP_B, strlen(FP_B)), 0);
    c[1].kind = CSW_PATCH_CHANGE_KIND_MOVE;
    assert_int_equal(cs_str_set_n(&c[1].path, "b.txt", 5), 0);
    c[1].has_from_path = true;
    assert_int_equal(cs_str_set_n(&c[1].from_path, "old.txt", 7), 0);
}

static void check_events(const struct csw_mcp_operation_status_output *o, size_t n)
{
    assert_int_equal(o->events.n, n);
    assert_int_equal(o->events.v[0].name, CSW_MCP_OPERATION_STATUS_OUTPUT_EVENTS_ITEM_NAME_MINTED);
    assert_false(o->events.v[0].has_reason);
    for (size_t i = 0; i < n; i++)
        assert_true(matches(TIME_RE, o->events.v[i].at.s));
    assert_string_equal(o->events.v[0].at.s, o->created_at.s);
}

/* cs_store_mint_as: the row takes the id given (a remote worker's ledger keeps its gateway's
 * id); a key already known is reported as by cs_store_mint; an id taken, empty or too long fails
 * and inserts nothing. */
static void test_mint_as(void **state)
{
    (void)state;
    char path[256];
    struct cs_diag dg = {0};
    struct cs_store_existing ex;
    fresh_path(path, sizeof path);
    struct cs_store *s = open_ok(path);
    const char *given = "op-11111111-2222-4333-8444-555555555555";
    assert_int_equal(cs_store_mint_as(s, "default", 7, "k", 1, FP_A, given, &ex, &dg), CS_STORE_OK);
    struct csw_mcp_operation_status_output o;
    assert_int_equal(cs_store_get_by_key(s, "k", 1, &o, &dg), CS_STORE_OK);
    assert_string_equal(o.operation_id.s, given);
    csw_mcp_operation_status_output_free(&o);
    /* The key again, under another id: the row it names. */
    assert_int_equal(cs_store_mint_as(s, "default", 7, "k", 1, FP_B,
                                      "op-66666666-7777-4888-8999-aaaaaaaaaaaa", &ex, &dg),
                     CS_STORE_KEY_EXISTS);
    assert_string_equal(ex.id, given);
    assert_string_equal(ex.fingerprint, FP_A);
    /* The id again, without a key: refused, nothing inserted. */
    assert_int_not_equal(cs_store_mint_as(s, "default", 7, NULL, 0, FP_A, given, NULL, &dg),
                         CS_STORE_OK);
    char big[CS_STORE_ID_SIZE + 1];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(cs_store_mint_as(s, "default", 7, NULL, 0, FP_A, big, NULL, &dg),
                     CS_STORE_INVALID);
    assert_int_equal(cs_store_mint_as(s, "default", 7, NULL, 0, FP_A, "", NULL, &dg),
                     CS_STORE_INVALID);
    assert_int_equal(cs_store_get_by_id(s, big, strlen(big), &o, &dg), CS_STORE_NOT_FOUND);
    cs_store_close(s);
}

static void test_mint_finish_get(void **state)
{
    (void)state;
    char path[256], id[CS_STORE_ID_SIZE];
    struct cs_diag dg = {0};
    fresh_path(path, sizeof path);
    struct cs_store *s = open_ok(path);
    mint_ok(s, "key-1", FP_A, id);

    struct csw_mcp_operation_status_output o;
    assert_int_equal(cs_store_get_by_id(s, id, strlen(id), &o, &dg), CS_STORE_OK);
    assert_string_equal(o.operation_id.s, id);
    assert_string_equal(o.workspace_id.s, "default");
    assert_int_equal(o.status, CSW_PATCH_STATUS_UNKNOWN);
    assert_false(o.replayed);
    assert_false(o.has_finished_at);
    assert_true(matches(TIME_RE, o.created_at.s));
    assert_int_equal(o.files.n, 0);
    assert_int_equal(o.changes.n, 0);
    check_events(&o, 1);
    csw_mcp_operation_status_output_free(&o);

    struct csw_mcp_apply_patch_output r;
    fill_result(&r, id);
    assert_int_equal(cs_store_finish(s, id, CSW_PATCH_STATUS_APPLIED, &r, false, &dg), CS_STORE_OK);
    csw_mcp_apply_patch_output_free(&r);

    for (int by_key = 0; by_key < 2; by_key++) {
        enum cs_store_status rc = by_key ? cs_store_get_by_key(s, "key-1", 5, &o, &dg)
                                         : cs_store_get_by_id(s, id, strlen(id), &o, &dg);
        assert_int_equal(rc, CS_STORE_OK);
        assert_string_equal(o.operation_id.s, id);
        assert_int_equal(o.status, CSW_PATCH_STATUS_APPLIED);
        assert_false(o.replayed);
        assert_true(o.has_finished_at);
        assert_true(matches(TIME_RE, o.finished_at.s));
        assert_true(strcmp(o.created_at.s, o.finished_at.s) <= 0);
        assert_int_equal(o.files.n, 2);
        assert_string_equal(o.files.v[1].s, "b.txt");
        assert_int_equal(o.changes.n, 2);
        assert_int_equal(o.changes.v[1].kind, CSW_PATCH_CHANGE_KIND_MOVE);
        assert_string_equal(o.changes.v[1].from_path.s, "old.txt");
        assert_string_equal(o.changes.v[0].after_version.s, FP_B);
        assert_false(o.changes.v[1].has_after_version);
        check_events(&o, 2);
        assert_int_equal(o.events.v[1].name,
                         CSW_MCP_OPERATION_STATUS_OUTPUT_EVENTS_ITEM_NAME_FINISHED);
        assert_false(o.events.v[1].has_reason);
        assert_string_equal(o.events.v[1].at.s, o.finished_at.s);
        /* What operation_status will send validates against its schema. */
        json_t *j = NULL;
        assert_int_equal(csw_mcp_operation_status_output_encode(&o, &j, NULL), CS_WIRE_OK);
        assert_string_equal(json_string_value(json_object_get(j, "kind")), "patch");
        json_decref(j);
        csw_mcp_operation_status_output_free(&o);
    }

    /* The replay: the stored result with replayed true. */
    struct csw_mcp_apply_patch_output p;
    assert_int_equal(cs_store_get_result(s, id, &p, &dg), CS_STORE_OK);
    assert_true(p.replayed);
    assert_int_equal(p.status, CSW_PATCH_STATUS_APPLIED);
    assert_string_equal(p.operation_id.s, id);
    assert_int_equal(p.files.n, 2);
    csw_mcp_apply_patch_output_free(&p);

    /* Finished once only. */
    assert_int_equal(cs_store_finish(s, id, CSW_PATCH_STATUS_UNKNOWN, NULL, true, &dg),
                     CS_STORE_INVALID);
    cs_store_close(s);
}

static void test_not_found(void **state)
{
    (void)state;
    struct cs_store *s = open_ok(":memory:");
    struct csw_mcp_operation_status_output o;
    struct csw_mcp_apply_patch_output p;
    struct cs_diag dg = {0};
    const char *id = "op-00000000-0000-4000-8000-000000000000";
    assert_int_equal(cs_store_get_by_id(s, id, strlen(id), &o, &dg), CS_STORE_NOT_FOUND);
    assert_int_equal(cs_store_get_by_key(s, "nope", 4, &o, &dg), CS_STORE_NOT_FOUND);
    assert_int_equal(cs_store_get_result(s, id, &p, &dg), CS_STORE_NOT_FOUND);
    assert_int_equal(cs_store_finish(s, id, CSW_PATCH_STATUS_UNKNOWN, NULL, true, &dg),
                     CS_STORE_NOT_FOUND);
    /* A missing row is reported under the code cs_store_status_error gives NOT_FOUND. */
    assert_true(dg.set);
    assert_int_equal(dg.code, CSW_ERROR_OPERATION_NOT_FOUND);
    assert_non_null(strstr(dg.text, id));
    /* A key with a NUL byte inside is bound with its length, not cut at the NUL. */
    char id2[CS_STORE_ID_SIZE];
    struct cs_store_existing ex;
    assert_int_equal(cs_store_mint(s, "w", 1, "a\0b", 3, FP_A, id2, &ex, &dg), CS_STORE_OK);
    assert_int_equal(cs_store_get_by_key(s, "a", 1, &o, &dg), CS_STORE_NOT_FOUND);
    assert_int_equal(cs_store_get_by_key(s, "a\0b", 3, &o, &dg), CS_STORE_OK);
    assert_string_equal(o.operation_id.s, id2);
    csw_mcp_operation_status_output_free(&o);
    cs_store_close(s);
}

static void test_key_exists(void **state)
{
    (void)state;
    struct cs_store *s = open_ok(":memory:");
    char id[CS_STORE_ID_SIZE], id2[CS_STORE_ID_SIZE] = "untouched";
    struct cs_diag dg = {0};
    struct cs_store_existing ex;
    mint_ok(s, "same-key", FP_A, id);
    /* Same key, same fingerprint: the caller replays. */
    assert_int_equal(cs_store_mint(s, "default", 7, "same-key", 8, FP_A, id2, &ex, &dg),
                     CS_STORE_KEY_EXISTS);
    assert_string_equal(id2, "untouched");
    assert_string_equal(ex.id, id);
    assert_string_equal(ex.fingerprint, FP_A);
    assert_int_equal(ex.status, CSW_PATCH_STATUS_UNKNOWN);
    /* An unknown row replays as unknown, never as applied. */
    struct csw_mcp_apply_patch_output p;
    assert_int_equal(cs_store_get_result(s, ex.id, &p, &dg), CS_STORE_OK);
    assert_int_equal(p.status, CSW_PATCH_STATUS_UNKNOWN);
    assert_true(p.replayed);
    assert_string_equal(p.operation_id.s, id);
    assert_int_equal(p.files.n, 0);
    csw_mcp_apply_patch_output_free(&p);
    /* Same key, other fingerprint: the caller sees the difference (OPERATION_KEY_CONFLICT). */
    assert_int_equal(cs_store_mint(s, "default", 7, "same-key", 8, FP_B, id2, &ex, &dg),
                     CS_STORE_KEY_EXISTS);
    assert_string_equal(ex.fingerprint, FP_A);
    /* After the finish the existing row reports its final status. */
    struct csw_mcp_apply_patch_output r;
    fill_result(&r, id);
    assert_int_equal(cs_store_finish(s, id, CSW_PATCH_STATUS_APPLIED, &r, false, &dg), CS_STORE_OK);
    csw_mcp_apply_patch_output_free(&r);
    assert_int_equal(cs_store_mint(s, "default", 7, "same-key", 8, FP_A, id2, &ex, &dg),
                     CS_STORE_KEY_EXISTS);
    assert_int_equal(ex.status, CSW_PATCH_STATUS_APPLIED);
    /* No key: every mint is a new row. */
    mint_ok(s, NULL, FP_A, id);
    mint_ok(s, NULL, FP_A, id2);
    assert_string_not_equal(id, id2);
    cs_store_close(s);
}

static void test_bad_calls(void **state)
{
    (void)state;
    struct cs_store *s = open_ok(":memory:");
    char id[CS_STORE_ID_SIZE];
    struct cs_diag dg = {0};
    struct cs_store_existing ex;
    assert_int_equal(cs_store_mint(s, "w", 1, NULL, 0, "sha256:xyz", id, &ex, &dg),
                     CS_STORE_INVALID);
    assert_int_equal(cs_store_mint(s, "", 0, NULL, 0, FP_A, id, &ex, &dg), CS_STORE_INVALID);
    assert_int_equal(cs_store_mint(s, "w", 1, "k", 1, FP_A, id, NULL, &dg), CS_STORE_INVALID);
    mint_ok(s, NULL, FP_A, id);
    /* The result must describe the same operation and status. */
    struct csw_mcp_apply_patch_output r;
    fill_result(&r, id);
    assert_int_equal(cs_store_finish(s, id, CSW_PATCH_STATUS_CHECKED, &r, false, &dg),
                     CS_STORE_INVALID);
    csw_mcp_apply_patch_output_free(&r);
    fill_result(&r, "op-other");
    assert_int_equal(cs_store_finish(s, id, CSW_PATCH_STATUS_APPLIED, &r, false, &dg),
                     CS_STORE_INVALID);
    csw_mcp_apply_patch_output_free(&r);
    /* Still unfinished after the refused calls. */
    struct csw_mcp_operation_status_output o;
    assert_int_equal(cs_store_get_by_id(s, id, strlen(id), &o, &dg), CS_STORE_OK);
    assert_false(o.has_finished_at);
    assert_int_equal(o.events.n, 1);
    csw_mcp_operation_status_output_free(&o);
    cs_store_close(s);
}

static void test_unknown_after_reopen(void **state)
{
    (void)state;
    char path[256], id[CS_STORE_ID_SIZE], done[CS_STORE_ID_SIZE];
    struct cs_diag dg = {0};
    fresh_path(path, sizeof path);
    struct cs_store *s = open_ok(path);
    mint_ok(s, "crash-key", FP_A, id);
    mint_ok(s, NULL, FP_A, done);
    assert_int_equal(cs_store_finish(s, done, CSW_PATCH_STATUS_UNKNOWN, NULL, true, &dg),
                     CS_STORE_OK);
    cs_store_close(s); /* the "crash": id is never finished */

    s = open_ok(path);
    struct csw_mcp_operation_status_output o;
    assert_int_equal(cs_store_get_by_key(s, "crash-key", 9, &o, &dg), CS_STORE_OK);
    assert_string_equal(o.operation_id.s, id);
    assert_int_equal(o.status, CSW_PATCH_STATUS_UNKNOWN);
    assert_false(o.has_finished_at);
    check_events(&o, 1);
    csw_mcp_operation_status_output_free(&o);
    struct cs_store_existing ex;
    char id2[CS_STORE_ID_SIZE];
    assert_int_equal(cs_store_mint(s, "default", 7, "crash-key", 9, FP_A, id2, &ex, &dg),
                     CS_STORE_KEY_EXISTS);
    assert_int_equal(ex.status, CSW_PATCH_STATUS_UNKNOWN);
    struct csw_mcp_apply_patch_output p;
    assert_int_equal(cs_store_get_result(s, id, &p, &dg), CS_STORE_OK);
    assert_int_equal(p.status, CSW_PATCH_STATUS_UNKNOWN);
    csw_mcp_apply_patch_output_free(&p);

    /* The finish recorded without a confirmed result carries reason "unknown". */
    assert_int_equal(cs_store_get_by_id(s, done, strlen(done), &o, &dg), CS_STORE_OK);
    assert_int_equal(o.status, CSW_PATCH_STATUS_UNKNOWN);
    assert_true(o.has_finished_at);
    check_events(&o, 2);
    assert_true(o.events.v[1].has_reason);
    assert_int_equal(o.events.v[1].reason,
                     CSW_MCP_OPERATION_STATUS_OUTPUT_EVENTS_ITEM_REASON_UNKNOWN);
    json_t *j = NULL;
    assert_int_equal(csw_mcp_operation_status_output_encode(&o, &j, NULL), CS_WIRE_OK);
    char *text = json_dumps(json_object_get(j, "events"), JSON_COMPACT);
    assert_non_null(strstr(text, "\"reason\":\"unknown\""));
    free(text);
    json_decref(j);
    csw_mcp_operation_status_output_free(&o);
    cs_store_close(s);
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    char *bytes = slurp(from, &n);
    spit(to, bytes, n);
    free(bytes);
}

/* A real crash: the files as they are while the store is open (the minted row only in the WAL,
 * never checkpointed, no close) are copied and opened elsewhere. */
static void test_unknown_after_crash(void **state)
{
    (void)state;
    char path[256], copy[256], wal[300], copy_wal[300], id[CS_STORE_ID_SIZE];
    struct cs_diag dg = {0};
    fresh_path(path, sizeof path);
    struct cs_store *s = open_ok(path);
    mint_ok(s, "in-flight", FP_A, id);
    snprintf(wal, sizeof wal, "%s-wal", path);
    struct stat st;
    assert_int_equal(stat(wal, &st), 0);
    assert_true(st.st_size > 0);
    fresh_path(copy, sizeof copy);
    cs_store_close(open_ok(copy)); /* makes the directory */
    snprintf(copy_wal, sizeof copy_wal, "%s-wal", copy);
    copy_file(path, copy);
    copy_file(wal, copy_wal);
    cs_store_close(s);

    s = open_ok(copy);
    struct csw_mcp_operation_status_output o;
    assert_int_equal(cs_store_get_by_key(s, "in-flight", 9, &o, &dg), CS_STORE_OK);
    assert_string_equal(o.operation_id.s, id);
    assert_int_equal(o.status, CSW_PATCH_STATUS_UNKNOWN);
    assert_false(o.has_finished_at);
    csw_mcp_operation_status_output_free(&o);
    cs_store_close(s);
}

/* A row altered behind the store's back is an error, not a crash. */
static void test_tampered_row(void **state)
{
    (void)state;
    char path[256], id[CS_STORE_ID_SIZE];
    struct cs_diag dg = {0};
    fresh_path(path, sizeof path);
    struct cs_store *s = open_ok(path);
    mint_ok(s, "k", FP_A, id);
    cs_store_close(s);
    sql(path, "UPDATE operations SET result = '{\"status\": 3}'");
    s = open_ok(path);
    struct csw_mcp_operation_status_output o;
    assert_int_equal(cs_store_get_by_id(s, id, strlen(id), &o, &dg), CS_STORE_ERROR);
    assert_non_null(strstr(dg.text, "does not decode"));
    assert_int_equal(dg.code, CSW_ERROR_INTERNAL); /* a corrupt row is the server's failure */
    sql(path, "UPDATE operations SET result = 'not json'");
    assert_int_equal(cs_store_get_by_id(s, id, strlen(id), &o, &dg), CS_STORE_ERROR);
    assert_non_null(strstr(dg.text, "not JSON"));
    cs_store_close(s);
}

/* ---- fingerprint ---- */

static void set_ev(struct csw_mcp_apply_patch_input *in, const char *const *kv, size_t n)
{
    in->has_expected_versions = true;
    in->expected_versions.n = n;
    in->expected_versions.v = cs_wire_malloc(n * sizeof *in->expected_versions.v);
    assert_non_null(in->expected_versions.v);
    memset(in->expected_versions.v, 0, n * sizeof *in->expected_versions.v);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(
            cs_str_set_n(&in->expected_versions.v[i].key, kv[2 * i], strlen(kv[2 * i])), 0);
        assert_int_equal(
            cs_str_set_n(&in->expected_versions.v[i].value, kv[2 * i + 1], strlen(kv[2 * i + 1])),
            0);
    }
}

/* Replaces the string s holds (cs_str_set_n does not free the old one). */
static void reset(struct cs_str *s, const char *text)
{
    cs_wire_release(s->s);
    s->s = NULL;
    assert_int_equal(cs_str_set_n(s, text, strlen(text)), 0);
}

static void fingerprint(const struct csw_mcp_apply_patch_input *in, char out[72])
{
    struct cs_diag dg = {0};
    assert_int_equal(cs_store_fingerprint(in, out, &dg), CS_STORE_OK);
    assert_true(matches("^sha256:[0-9a-f]{64}$", out));
}

/* A rejection keeps its tool error; a replay reads it back. Rows without one say NOT_FOUND. */
/* Three rows in s: a never finished, b finished unknown (a lost worker), c applied. */
static void three_rows(struct cs_store *s, char a[CS_STORE_ID_SIZE], char b[CS_STORE_ID_SIZE],
                       char c[CS_STORE_ID_SIZE])
{
    struct cs_diag dg = {0};
    mint_ok(s, "never-finished", FP_A, a);
    mint_ok(s, "lost-worker", FP_B, b);
    mint_ok(s, "applied", FP_A, c);
    struct csw_mcp_apply_patch_output r;
    memset(&r, 0, sizeof r);
    r.status = CSW_PATCH_STATUS_UNKNOWN;
    r.operation_id = (struct cs_str){b, strlen(b)};
    assert_int_equal(cs_store_finish(s, b, CSW_PATCH_STATUS_UNKNOWN, &r, true, &dg), CS_STORE_OK);
    struct csw_mcp_apply_patch_output ok;
    fill_result(&ok, c);
    assert_int_equal(cs_store_finish(s, c, CSW_PATCH_STATUS_APPLIED, &ok, false, &dg), CS_STORE_OK);
    csw_mcp_apply_patch_output_free(&ok);
}

/* Crash recovery (cs_store_recover): only an unknown row changes, with a "recovered" event; a
 * stored unknown result goes so that a replay answers the recovered status. */
static void test_recover(void **state)
{
    (void)state;
    char path[256], a[CS_STORE_ID_SIZE], b[CS_STORE_ID_SIZE], c[CS_STORE_ID_SIZE];
    struct cs_diag dg = {0};
    fresh_path(path, sizeof path);
    struct cs_store *s = open_ok(path);
    three_rows(s, a, b, c);

    /* A journal naming another workspace's row settles nothing (a command writes journals into
     * its own workspace only). */
    assert_int_equal(cs_store_recover(s, "other", a, CSW_PATCH_STATUS_APPLIED, NULL, &dg),
                     CS_STORE_NOT_FOUND);
    bool changed = false;
    assert_int_equal(cs_store_recover(s, "default", a, CSW_PATCH_STATUS_ROLLED_BACK, &changed, &dg),
                     CS_STORE_OK);
    assert_int_equal(cs_store_recover(s, "default", b, CSW_PATCH_STATUS_APPLIED, NULL, &dg),
                     CS_STORE_OK);
    /* Already settled: nothing changes (a second recovery of one journal is harmless). */
    assert_int_equal(cs_store_recover(s, "default", c, CSW_PATCH_STATUS_ROLLED_BACK, NULL, &dg),
                     CS_STORE_OK);
    assert_true(changed);
    assert_int_equal(cs_store_recover(s, "default", a, CSW_PATCH_STATUS_APPLIED, &changed, &dg),
                     CS_STORE_OK);
    assert_false(changed); /* already settled: a second report changes nothing */
    assert_int_equal(cs_store_recover(s, "default", "op-none", CSW_PATCH_STATUS_APPLIED, NULL, &dg),
                     CS_STORE_NOT_FOUND);
    assert_int_equal(cs_store_recover(s, "default", a, CSW_PATCH_STATUS_UNKNOWN, NULL, &dg),
                     CS_STORE_INVALID);
    cs_store_close(s);

    s = open_ok(path);
    struct csw_mcp_operation_status_output o;
    assert_int_equal(cs_store_get_by_id(s, a, strlen(a), &o, &dg), CS_STORE_OK);
    assert_int_equal(o.status, CSW_PATCH_STATUS_ROLLED_BACK);
    assert_true(o.has_finished_at);
    assert_int_equal(o.events.n, 2);
    assert_int_equal(o.events.v[1].name,
                     CSW_MCP_OPERATION_STATUS_OUTPUT_EVENTS_ITEM_NAME_RECOVERED);
    csw_mcp_operation_status_output_free(&o);
    assert_int_equal(cs_store_get_by_id(s, c, strlen(c), &o, &dg), CS_STORE_OK);
    assert_int_equal(o.status, CSW_PATCH_STATUS_APPLIED);
    assert_int_equal(o.events.n, 2); /* minted, finished: no recovered */
    csw_mcp_operation_status_output_free(&o);
    struct csw_mcp_apply_patch_output rp;
    assert_int_equal(cs_store_get_result(s, b, &rp, &dg), CS_STORE_OK);
    assert_int_equal(rp.status, CSW_PATCH_STATUS_APPLIED);
    assert_true(rp.replayed);
    csw_mcp_apply_patch_output_free(&rp);
    cs_store_close(s);
}

struct listed {
    char ids[8][CS_STORE_ID_SIZE];
    size_t n;
};

static int list_one(void *arg, const char *id)
{
    struct listed *l = arg;
    if (l->n < 8)
        snprintf(l->ids[l->n++], CS_STORE_ID_SIZE, "%s", id);
    return 0;
}

static bool listed_has(const struct listed *l, const char *id)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->ids[i], id) == 0)
            return true;
    return false;
}

/* The rows a crash left unknown (cs_store_unknown_ops): only this workspace's, only those a
 * journaling build minted (migration 5), never a finished one; and cs_store_forget removes only
 * a row not finished, with its events (issue 32: a call that never left is not recorded). */
static void test_unknown_ops_and_forget(void **state)
{
    (void)state;
    char path[256], a[CS_STORE_ID_SIZE], b[CS_STORE_ID_SIZE], c[CS_STORE_ID_SIZE], out[64];
    struct cs_diag dg = {0};
    fresh_path(path, sizeof path);
    struct cs_store *s = open_ok(path);
    three_rows(s, a, b, c);
    /* A row an older build left unknown (no journaled mark), and one of another workspace. */
    sql(path, "INSERT INTO operations (id, workspace_id, fingerprint, kind, status, created_at)"
              " VALUES ('op-00000000-0000-4000-8000-000000000001', 'default', '" FP_A "',"
              " 'patch', 'unknown', '2026-01-01T00:00:00.000Z'),"
              " ('op-00000000-0000-4000-8000-000000000002', 'other', '" FP_A "',"
              " 'patch', 'unknown', '2026-01-01T00:00:00.000Z')");
    struct listed l = {0};
    assert_int_equal(cs_store_unknown_ops(s, "default", list_one, &l, &dg), CS_STORE_OK);
    assert_int_equal(l.n, 2);
    assert_true(listed_has(&l, a));
    assert_true(listed_has(&l, b));
    memset(&l, 0, sizeof l);
    assert_int_equal(cs_store_unknown_ops(s, "other", list_one, &l, &dg), CS_STORE_OK);
    assert_int_equal(l.n, 0);
    /* Settled: no longer listed. */
    assert_int_equal(cs_store_recover(s, "default", b, CSW_PATCH_STATUS_ROLLED_BACK, NULL, &dg),
                     CS_STORE_OK);
    memset(&l, 0, sizeof l);
    assert_int_equal(cs_store_unknown_ops(s, "default", list_one, &l, &dg), CS_STORE_OK);
    assert_int_equal(l.n, 1);
    assert_true(listed_has(&l, a));

    assert_int_equal(cs_store_forget(s, a, &dg), CS_STORE_OK);
    assert_int_equal(cs_store_forget(s, c, &dg), CS_STORE_OK); /* finished: kept */
    assert_int_equal(cs_store_forget(s, "op-none", &dg), CS_STORE_OK);
    struct csw_mcp_operation_status_output o;
    assert_int_equal(cs_store_get_by_id(s, a, strlen(a), &o, &dg), CS_STORE_NOT_FOUND);
    assert_int_equal(cs_store_get_by_id(s, c, strlen(c), &o, &dg), CS_STORE_OK);
    assert_int_equal(o.status, CSW_PATCH_STATUS_APPLIED);
    csw_mcp_operation_status_output_free(&o);
    char q[160];
    snprintf(q, sizeof q, "SELECT count(*) FROM operation_events WHERE operation_id = '%s'", a);
    sql_text(path, q, out, sizeof out);
    assert_string_equal(out, "0");
    /* The key is free again: minting it makes a new operation, not a replay. */
    struct cs_store_existing ex;
    char again[CS_STORE_ID_SIZE];
    assert_int_equal(cs_store_mint(s, "default", 7, "never-finished", 14, FP_A, again, &ex, &dg),
                     CS_STORE_OK);
    assert_string_not_equal(again, a);
    cs_store_close(s);
}

static void test_rejected_keeps_error(void **state)
{
    (void)state;
    char path[256], id[CS_STORE_ID_SIZE], id2[CS_STORE_ID_SIZE], text[128];
    struct cs_diag dg = {0};
    fresh_path(path, sizeof path);
    struct cs_store *s = open_ok(path);
    mint_ok(s, "rej", FP_A, id);
    enum csw_error code = CSW_ERROR_INTERNAL;
    assert_int_equal(cs_store_get_error(s, id, &code, text, sizeof text, &dg),
                     CS_STORE_NOT_FOUND); /* not finished yet */
    assert_int_equal(cs_store_finish_rejected(s, id, CSW_ERROR_INVALID_ARGUMENTS,
                                              "update of a.txt: \"quoted\" \xc3\xa9", &dg),
                     CS_STORE_OK);
    assert_int_equal(cs_store_finish_rejected(s, id, CSW_ERROR_INVALID_PATCH, "again", &dg),
                     CS_STORE_INVALID); /* already finished */
    cs_store_close(s);
    s = open_ok(path); /* it is in the file */
    assert_int_equal(cs_store_get_error(s, id, &code, text, sizeof text, &dg), CS_STORE_OK);
    assert_int_equal(code, CSW_ERROR_INVALID_ARGUMENTS);
    assert_string_equal(text, "update of a.txt: \"quoted\" \xc3\xa9");
    struct csw_mcp_operation_status_output o;
    assert_int_equal(cs_store_get_by_id(s, id, strlen(id), &o, &dg), CS_STORE_OK);
    assert_int_equal(o.status, CSW_PATCH_STATUS_REJECTED);
    csw_mcp_operation_status_output_free(&o);
    /* An applied row keeps no error; an unknown id is not found. */
    mint_ok(s, "ok", FP_B, id2);
    struct csw_mcp_apply_patch_output r;
    fill_result(&r, id2);
    assert_int_equal(cs_store_finish(s, id2, CSW_PATCH_STATUS_APPLIED, &r, false, &dg),
                     CS_STORE_OK);
    csw_mcp_apply_patch_output_free(&r);
    assert_int_equal(cs_store_get_error(s, id2, &code, text, sizeof text, &dg), CS_STORE_NOT_FOUND);
    assert_int_equal(cs_store_get_error(s, "op-none", &code, text, sizeof text, &dg),
                     CS_STORE_NOT_FOUND);
    assert_int_equal(cs_store_finish_rejected(s, id2, (enum csw_error)CSW_ERROR__COUNT, "x", &dg),
                     CS_STORE_INVALID);
    cs_store_close(s);
}

/* A schema-1 ledger (before rejected rows kept their error) is migrated in place: its rows stay,
 * a rejected one reads as having no error, and new rejections keep theirs. */
static void test_migrates_version_1(void **state)
{
    (void)state;
    char path[256], out[64], text[64], id[CS_STORE_ID_SIZE];
    struct cs_diag dg = {0};
    fresh_path(path, sizeof path);
    *strrchr(path, '/') = '\0';
    assert_int_equal(mkdir(path, 0700), 0);
    path[strlen(path)] = '/';
    sql(path, "CREATE TABLE operations (id TEXT PRIMARY KEY NOT NULL, key TEXT UNIQUE,"
              " workspace_id TEXT NOT NULL, fingerprint TEXT NOT NULL,"
              " kind TEXT NOT NULL CHECK (kind IN ('patch')),"
              " status TEXT NOT NULL CHECK (status IN ('applied', 'checked', 'rejected',"
              "  'failed_rolled_back', 'failed_partial', 'unknown')),"
              " result TEXT, created_at TEXT NOT NULL, finished_at TEXT) STRICT;"
              "CREATE TABLE operation_events (seq INTEGER PRIMARY KEY,"
              " operation_id TEXT NOT NULL REFERENCES operations (id) ON DELETE CASCADE,"
              " name TEXT NOT NULL CHECK (name IN ('minted', 'finished')), at TEXT NOT NULL,"
              " reason TEXT CHECK (reason IS NULL OR reason IN ('unknown'))) STRICT;"
              "CREATE INDEX operation_events_by_operation ON operation_events"
              " (operation_id, seq);"
              "INSERT INTO operations VALUES ('op-11111111-1111-4111-8111-111111111111', 'old',"
              " 'default', '" FP_A "', 'patch', 'rejected', NULL,"
              " '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.001Z');"
              "INSERT INTO operation_events (operation_id, name, at) VALUES"
              " ('op-11111111-1111-4111-8111-111111111111', 'minted', '2026-01-01T00:00:00.000Z'),"
              " ('op-11111111-1111-4111-8111-111111111111', 'finished',"
              " '2026-01-01T00:00:00.001Z');");
    snprintf(out, sizeof out, "PRAGMA user_version = 1; PRAGMA application_id = %d",
             CS_STORE_APPLICATION_ID);
    sql(path, out);
    struct cs_store *s = open_ok(path);
    sql_text(path, "PRAGMA user_version", out, sizeof out);
    assert_int_equal(atoi(out), CS_STORE_SCHEMA_VERSION);
    enum csw_error code;
    assert_int_equal(cs_store_get_error(s, "op-11111111-1111-4111-8111-111111111111", &code, text,
                                        sizeof text, &dg),
                     CS_STORE_NOT_FOUND);
    struct csw_mcp_apply_patch_output r;
    assert_int_equal(cs_store_get_result(s, "op-11111111-1111-4111-8111-111111111111", &r, &dg),
                     CS_STORE_OK);
    assert_int_equal(r.status, CSW_PATCH_STATUS_REJECTED);
    csw_mcp_apply_patch_output_free(&r);
    mint_ok(s, "new", FP_B, id);
    assert_int_equal(cs_store_finish_rejected(s, id, CSW_ERROR_VERSION_CONFLICT, "v", &dg),
                     CS_STORE_OK);
    assert_int_equal(cs_store_get_error(s, id, &code, text, sizeof text, &dg), CS_STORE_OK);
    assert_int_equal(code, CSW_ERROR_VERSION_CONFLICT);
    cs_store_close(s);
}

static void test_fingerprint(void **state)
{
    (void)state;
    static const char *const kv1[] = {"b.txt", "absent", "a.txt", "sha256:00", "é.txt", "x"};
    static const char *const kv2[] = {"é.txt", "x", "a.txt", "sha256:00", "b.txt", "absent"};
    struct csw_mcp_apply_patch_input a, b;
    char fa[72], fb[72], fc[72];
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    assert_int_equal(cs_str_set_n(&a.workspace_id, "default", 7), 0);
    reset(&b.workspace_id, "default");
    assert_int_equal(cs_str_set_n(&a.patch, "*** Begin Patch\n", 16), 0);
    reset(&b.patch, "*** Begin Patch\n");

    /* Absent expected_versions and check_only are {} and false. */
    fingerprint(&a, fa);
    b.has_check_only = true;
    b.check_only = false;
    set_ev(&b, kv1, 0);
    fingerprint(&b, fb);
    assert_string_equal(fa, fb);

    /* The key order of expected_versions does not matter; the key (operation_key) is no part. */
    csw_mcp_apply_patch_input_free(&b);
    memset(&b, 0, sizeof b);
    reset(&b.workspace_id, "default");
    reset(&b.patch, "*** Begin Patch\n");
    set_ev(&a, kv1, 3);
    set_ev(&b, kv2, 3);
    b.has_operation_key = true;
    assert_int_equal(cs_str_set_n(&b.operation_key, "k", 1), 0);
    fingerprint(&a, fa);
    fingerprint(&b, fb);
    assert_string_equal(fa, fb);

    /* Every field counts. */
    b.has_check_only = true;
    b.check_only = true;
    fingerprint(&b, fc);
    assert_string_not_equal(fa, fc);
    b.check_only = false;
    reset(&b.workspace_id, "other");
    fingerprint(&b, fc);
    assert_string_not_equal(fa, fc);
    reset(&b.workspace_id, "default");
    reset(&b.patch, "*** Begin Patch\r\n");
    fingerprint(&b, fc);
    assert_string_not_equal(fa, fc);
    reset(&b.patch, "*** Begin Patch\n");
    reset(&b.expected_versions.v[0].value, "y");
    fingerprint(&b, fc);
    assert_string_not_equal(fa, fc);

    /* Pinned: SHA-256 of the canonical text, computed independently. */
    csw_mcp_apply_patch_input_free(&a);
    memset(&a, 0, sizeof a);
    assert_int_equal(cs_str_set_n(&a.workspace_id, "w", 1), 0);
    assert_int_equal(cs_str_set_n(&a.patch, "p", 1), 0);
    fingerprint(&a, fa);
    /* printf '{"check_only":false,"expected_versions":{},"patch":"p","workspace_id":"w"}' |
     * sha256sum */
    assert_string_equal(fa,
                        "sha256:9d5bb9dee55741d22196ed76211c89f798b1298a4267d690e6bec83e086616a0");
    csw_mcp_apply_patch_input_free(&a);
    csw_mcp_apply_patch_input_free(&b);
}

/* Rows already stored are keyed by their fingerprint: these were computed by the code before the
 * fingerprint came from the generated encoder (every field present, non-ASCII, an operation_key)
 * and must never change, or a retry after an upgrade would see OPERATION_KEY_CONFLICT. */
static void test_fingerprint_pinned(void **state)
{
    (void)state;
    static const char *const kv[] = {
        "b.txt", "absent", "a.txt", "sha256:00", "\xc3\xa9/\"q\".txt", "sha256:\xe2\x82\xac"};
    struct csw_mcp_apply_patch_input a;
    char fa[72];
    memset(&a, 0, sizeof a);
    assert_int_equal(cs_str_set_n(&a.workspace_id, "default", 7), 0);
    assert_int_equal(cs_str_set_n(&a.patch, "*** Begin Patch\n*** Add File: \xc3\xa9\n+x\t\n", 37),
                     0);
    a.has_operation_key = true;
    assert_int_equal(cs_str_set_n(&a.operation_key, "key-1", 5), 0);
    set_ev(&a, kv, 3);
    a.has_check_only = true;
    a.check_only = true;
    fingerprint(&a, fa);
    assert_string_equal(fa,
                        /* sha256 of {"check_only":true,"expected_versions":{"a.txt":"sha256:00",
                         * "b.txt":"absent","\\u00E9/\\"q\\".txt":"sha256:\\u20AC"},"patch":
                         * "*** Begin Patch\\n*** Add File: \\u00E9\\n+x\\t\\n","workspace_id":
                         * "default"} */
                        "sha256:974c2063b428507b20595e53dae43854076f864edb56f02a8105a756f0c7fb3d");
    /* check_only spelled out as its default; expected_versions present but empty. */
    csw_mcp_apply_patch_input_free(&a);
    memset(&a, 0, sizeof a);
    assert_int_equal(cs_str_set_n(&a.workspace_id, "w", 1), 0);
    assert_int_equal(cs_str_set_n(&a.patch, "p", 1), 0);
    a.has_check_only = true;
    set_ev(&a, kv, 0);
    fingerprint(&a, fa);
    assert_string_equal(fa,
                        "sha256:9d5bb9dee55741d22196ed76211c89f798b1298a4267d690e6bec83e086616a0");
    csw_mcp_apply_patch_input_free(&a);
}

/* The fingerprint is the generated encoding of the whole input, not a field list: the apply_patch
 * input's own descriptor plus one new optional property (as a future schema would add) hashes
 * the same while the property is absent, and differently once it is present. */
struct input_v2 {
    struct csw_mcp_apply_patch_input v1;
    bool has_dry_run;
    bool dry_run;
    bool has_note;
    struct cs_str note;
};

static void test_fingerprint_new_field(void **state)
{
    (void)state;
    const struct cs_wire_object *o1 = csw_mcp_apply_patch_input_type.obj;
    const struct cs_wire_type *boolean = NULL, *string = NULL;
    struct cs_wire_field fields[16];
    assert_true(o1->nfields + 2 <= 16);
    for (size_t i = 0; i < o1->nfields; i++) {
        fields[i] = o1->fields[i];
        if (strcmp(fields[i].name, "check_only") == 0)
            boolean = fields[i].type;
        if (strcmp(fields[i].name, "patch") == 0)
            string = fields[i].type;
    }
    assert_non_null(boolean);
    assert_non_null(string);
    fields[o1->nfields] =
        (struct cs_wire_field){.name = "dry_run",
                               .offset = offsetof(struct input_v2, dry_run),
                               .has_offset = offsetof(struct input_v2, has_dry_run),
                               .type = boolean};
    fields[o1->nfields + 1] =
        (struct cs_wire_field){.name = "note",
                               .offset = offsetof(struct input_v2, note),
                               .has_offset = offsetof(struct input_v2, has_note),
                               .type = string,
                               .has_default = true,
                               .def_str = "none"};
    struct cs_wire_object o2 = {fields, o1->nfields + 2};
    struct cs_wire_type t2 = csw_mcp_apply_patch_input_type;
    t2.size = sizeof(struct input_v2);
    t2.obj = &o2;
    struct input_v2 in;
    memset(&in, 0, sizeof in);
    assert_int_equal(cs_str_set_n(&in.v1.workspace_id, "w", 1), 0);
    assert_int_equal(cs_str_set_n(&in.v1.patch, "p", 1), 0);
    char f1[72], f2[72], f3[72];
    struct cs_diag dg = {0};
    fingerprint(&in.v1, f1);
    /* dry_run absent (no default): not in the text, the v1 fingerprint is kept */
    t2.obj = &(struct cs_wire_object){fields, o1->nfields + 1};
    assert_int_equal(cs__store_fingerprint_of(&t2, &in, "operation_key", f2, &dg), CS_STORE_OK);
    assert_string_equal(f1, f2);
    /* present: in the text */
    in.has_dry_run = true;
    assert_int_equal(cs__store_fingerprint_of(&t2, &in, "operation_key", f3, &dg), CS_STORE_OK);
    assert_string_not_equal(f1, f3);
    in.dry_run = true;
    assert_int_equal(cs__store_fingerprint_of(&t2, &in, "operation_key", f2, &dg), CS_STORE_OK);
    assert_string_not_equal(f2, f3);
    /* note has a default: absent and spelled out as "none" are the same request, and in the text */
    in.has_dry_run = false;
    t2.obj = &o2;
    assert_int_equal(cs__store_fingerprint_of(&t2, &in, "operation_key", f2, &dg), CS_STORE_OK);
    assert_string_not_equal(f1, f2);
    in.has_note = true;
    in.note = (struct cs_str){(char *)"none", 4};
    assert_int_equal(cs__store_fingerprint_of(&t2, &in, "operation_key", f3, &dg), CS_STORE_OK);
    assert_string_equal(f2, f3);
    /* dropping a property other than operation_key: the key now counts */
    in.v1.has_operation_key = true;
    in.v1.operation_key = (struct cs_str){(char *)"k", 1};
    assert_int_equal(cs__store_fingerprint_of(&t2, &in, NULL, f3, &dg), CS_STORE_OK);
    assert_string_not_equal(f2, f3);
    in.v1.has_operation_key = false;
    in.v1.operation_key = (struct cs_str){NULL, 0};
    csw_mcp_apply_patch_input_free(&in.v1);
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_error),
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_mint_as),
        cmocka_unit_test(test_times),
        cmocka_unit_test(test_open_creates_parents_wal),
        cmocka_unit_test(test_open_memory),
        cmocka_unit_test(test_reopen_idempotent),
        cmocka_unit_test(test_newer_version_refused),
        cmocka_unit_test(test_foreign_database_refused),
        cmocka_unit_test(test_garbage_refused),
        cmocka_unit_test(test_truncated_refused),
        cmocka_unit_test(test_damaged_refused),
        cmocka_unit_test(test_uncreatable_refused),
        cmocka_unit_test(test_mint_finish_get),
        cmocka_unit_test(test_not_found),
        cmocka_unit_test(test_key_exists),
        cmocka_unit_test(test_bad_calls),
        cmocka_unit_test(test_unknown_after_reopen),
        cmocka_unit_test(test_unknown_after_crash),
        cmocka_unit_test(test_tampered_row),
        cmocka_unit_test(test_unknown_ops_and_forget),
        cmocka_unit_test(test_rejected_keeps_error),
        cmocka_unit_test(test_recover),
        cmocka_unit_test(test_migrates_version_1),
        cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_fingerprint_pinned),
        cmocka_unit_test(test_fingerprint_new_field),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
