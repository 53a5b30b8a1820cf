/*
 * store_ledger: the operation ledger on SQLite. Opening checks the file before anything writes
 * to it (header, quick_check, application id, schema version), then sets WAL, synchronous=FULL,
 * foreign keys and a busy timeout and runs the numbered migrations (PRAGMA user_version), each in
 * one transaction. Every statement is prepared once at open; every text is bound with its length.
 * Also here: operation ids (uuid v4 from getrandom), times (RFC 3339 UTC, milliseconds) and the
 * apply_patch fingerprint.
 *
 * Trust: the path is the operator's; the file's contents are checked before use; ids, keys and
 * workspace ids are the client's and only ever bound as parameters. Rows are decoded back through
 * the generated code, so a tampered row gives CS_STORE_ERROR. Entry points: see store.h.
 */
#include "store.h"

#include "base_id.h"

#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define BUSY_TIMEOUT_MS 5000

enum stmt_id {
    ST_BEGIN_IMMEDIATE,
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_SELECT_KEY,
    ST_INSERT_OP,
    ST_INSERT_EVENT,
    ST_FINISH,
    ST_FINISHED,
    ST_GET_ID,
    ST_GET_KEY,
    ST_EVENTS,
    ST_GET_ERROR,
    ST__COUNT
};

/* The columns ST_GET_ID and ST_GET_KEY return, in this order. */
#define ROW_COLUMNS "id, workspace_id, kind, status, result, created_at, finished_at"

static const char *const stmt_sql[ST__COUNT] = {
    [ST_BEGIN_IMMEDIATE] = "BEGIN IMMEDIATE",
    [ST_BEGIN] = "BEGIN",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_SELECT_KEY] = "SELECT id, fingerprint, status FROM operations WHERE key = ?1",
    [ST_INSERT_OP] = "INSERT INTO operations (id, key, workspace_id, fingerprint, kind, status, "
                     "created_at) VALUES (?1, ?2, ?3, ?4, 'patch', 'unknown', ?5)",
    [ST_INSERT_EVENT] = "INSERT INTO operation_events (operation_id, name, at, reason) "
                        "VALUES (?1, ?2, ?3, ?4)",
    [ST_FINISH] = "UPDATE operations SET status = ?2, result = ?3, finished_at = ?4, error = ?5 "
                  "WHERE id = ?1 AND finished_at IS NULL",
    [ST_FINISHED] = "SELECT finished_at IS NOT NULL FROM operations WHERE id = ?1",
    [ST_GET_ID] = "SELECT " ROW_COLUMNS " FROM operations WHERE id = ?1",
    [ST_GET_KEY] = "SELECT " ROW_COLUMNS " FROM operations WHERE key = ?1",
    [ST_EVENTS] = "SELECT name, at, reason FROM operation_events WHERE operation_id = ?1 "
                  "ORDER BY seq",
    [ST_GET_ERROR] = "SELECT error FROM operations WHERE id = ?1",
};

/*
 * Migrations: entry i takes the schema from version i to i + 1. Never edit a shipped entry; add
 * one (and raise CS_STORE_SCHEMA_VERSION). The CHECK constraints mirror the wire enums.
 */
static const char *const migrations[CS_STORE_SCHEMA_VERSION] = {
    "CREATE TABLE operations ("
    " id TEXT PRIMARY KEY NOT NULL,"
    " key TEXT UNIQUE,"
    " workspace_id TEXT NOT NULL,"
    " fingerprint TEXT NOT NULL,"
    " kind TEXT NOT NULL CHECK (kind IN ('patch')),"
    " status TEXT NOT NULL CHECK (status IN ('applied', 'checked', 'rejected',"
    "  'failed_rolled_back', 'failed_partial', 'unknown')),"
    " result TEXT,"
    " created_at TEXT NOT NULL,"
    " finished_at TEXT"
    ") STRICT;"
    "CREATE TABLE operation_events ("
    " seq INTEGER PRIMARY KEY,"
    " operation_id TEXT NOT NULL REFERENCES operations (id) ON DELETE CASCADE,"
    " name TEXT NOT NULL CHECK (name IN ('minted', 'finished')),"
    " at TEXT NOT NULL,"
    " reason TEXT CHECK (reason IS NULL OR reason IN ('unknown'))"
    ") STRICT;"
    "CREATE INDEX operation_events_by_operation ON operation_events (operation_id, seq);",
    /* 2: the tool error a rejected operation was answered with, {"code", "message"} as JSON,
     * so that a replay answers the same error. */
    "ALTER TABLE operations ADD COLUMN error TEXT;",
};

struct cs_store {
    sqlite3 *db;
    sqlite3_stmt *st[ST__COUNT];
};

/* ---- messages ---- */

/* Writes the formatted text into msg on one line (control bytes become spaces), then replaces
 * every byte that is not part of a well-formed UTF-8 sequence with '?' (a path may hold any
 * bytes, and truncation may cut a character), so the message is always safe to log or send. */
static void msgf(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void msgf(char *msg, size_t cap, const char *fmt, ...)
{
    if (msg == NULL || cap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    if (r < 0) {
        msg[0] = '\0';
        return;
    }
    unsigned char *s = (unsigned char *)msg;
    size_t n = strlen(msg);
    for (size_t i = 0; i < n; i++) {
        if (s[i] < 0x20 || s[i] == 0x7F)
            s[i] = ' '; /* one line: quick_check answers with newlines */
    }
    for (size_t i = 0; i < n;) {
        size_t need = s[i] < 0x80                      ? 0
                      : (s[i] >= 0xC2 && s[i] <= 0xDF) ? 1
                      : (s[i] >= 0xE0 && s[i] <= 0xEF) ? 2
                      : (s[i] >= 0xF0 && s[i] <= 0xF4) ? 3
                                                       : 4;
        size_t k = 1;
        while (need < 4 && k <= need && i + k < n && (s[i + k] & 0xC0) == 0x80)
            k++;
        if (need == 4 || k != need + 1) {
            s[i] = '?';
            i++;
            continue;
        }
        i += k;
    }
}

static enum cs_store_status db_fail(struct cs_store *store, char *msg, size_t cap, const char *what)
{
    msgf(msg, cap, "operations database: %s: %s", what, sqlite3_errmsg(store->db));
    return CS_STORE_ERROR;
}

/* ---- ids, times ---- */

int cs__store_new_id(char out[CS_STORE_ID_SIZE])
{
    return cs_id_new("op-", out, CS_STORE_ID_SIZE);
}

void cs__store_now(char out[CS_STORE_TIME_SIZE])
{
    struct timespec ts;
    struct tm tm;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        ts = (struct timespec){0};
    if (gmtime_r(&ts.tv_sec, &tm) == NULL)
        memset(&tm, 0, sizeof tm);
    /* The year is clamped to four digits so the text always fits and always has this shape. */
    int year = tm.tm_year + 1900;
    if (year < 0)
        year = 0;
    if (year > 9999)
        year = 9999;
    /* Formatted into a roomy buffer (the compiler cannot bound struct tm), then copied: every
     * field is in range here, so the text is always 24 characters. */
    char buf[96];
    snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", year, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ts.tv_nsec / 1000000));
    snprintf(out, CS_STORE_TIME_SIZE, "%.24s", buf);
}

/* ---- statements ---- */

static int bind_text(sqlite3_stmt *st, int idx, const char *s, size_t n)
{
    if (s == NULL)
        return sqlite3_bind_null(st, idx);
    if (n > INT_MAX)
        return SQLITE_TOOBIG;
    return sqlite3_bind_text(st, idx, s, (int)n, SQLITE_STATIC);
}

static sqlite3_stmt *stmt(struct cs_store *store, enum stmt_id id)
{
    sqlite3_stmt *st = store->st[id];
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return st;
}

/* Runs a statement without rows (BEGIN, COMMIT, ...). Returns an SQLite code. */
static int run(struct cs_store *store, enum stmt_id id)
{
    sqlite3_stmt *st = stmt(store, id);
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static void rollback(struct cs_store *store)
{
    if (!sqlite3_get_autocommit(store->db))
        (void)run(store, ST_ROLLBACK);
}

/* A column's text and length; NULL for SQL NULL. */
static const char *col_text(sqlite3_stmt *st, int i, size_t *n)
{
    const char *s = (const char *)sqlite3_column_text(st, i);
    int len = sqlite3_column_bytes(st, i);
    *n = s != NULL && len > 0 ? (size_t)len : 0;
    return s;
}

/* ---- open ---- */

/* Creates the missing parent directories of path with mode 0700. */
static enum cs_store_status make_parents(const char *path, char *msg, size_t cap)
{
    enum cs_store_status ret = CS_STORE_ERROR;
    char *dir = strdup(path);
    if (dir == NULL) {
        msgf(msg, cap, "operations database %s: out of memory", path);
        goto out;
    }
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir) {
        ret = CS_STORE_OK; /* the current directory, or "/" */
        goto out;
    }
    *slash = '\0';
    for (char *p = dir + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end)
            continue;
        *p = '\0';
        if (p[-1] != '/' && mkdir(dir, 0700) != 0 && errno != EEXIST) {
            msgf(msg, cap, "operations database %s: cannot create directory %s: %s", path, dir,
                 strerror(errno));
            goto out;
        }
        if (end)
            break;
        *p = '/';
    }
    ret = CS_STORE_OK;
out:
    free(dir);
    return ret;
}

/* Runs a PRAGMA that answers one row; copies its first column's text into buf. */
static int pragma_text(sqlite3 *db, const char *sql, char *buf, size_t cap)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        goto out;
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW)
        goto out;
    const char *s = (const char *)sqlite3_column_text(st, 0);
    snprintf(buf, cap, "%s", s != NULL ? s : "");
    rc = SQLITE_OK;
out:
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_ERROR : rc;
}

static int pragma_int(sqlite3 *db, const char *sql, long long *v)
{
    char buf[32];
    int rc = pragma_text(db, sql, buf, sizeof buf);
    if (rc == SQLITE_OK)
        *v = strtoll(buf, NULL, 10);
    return rc;
}

/* Applies migrations from version `from` on, each in its own transaction. */
static int migrate(sqlite3 *db, long long from, const char **what)
{
    for (long long v = from; v < CS_STORE_SCHEMA_VERSION; v++) {
        char sql[96];
        *what = "begin migration";
        int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            return rc;
        /* Another process may have migrated between our read and our lock: read again. */
        long long now = 0;
        *what = "read user_version";
        rc = pragma_int(db, "PRAGMA user_version", &now);
        if (rc == SQLITE_OK && now != v) {
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            if (now < v || now > CS_STORE_SCHEMA_VERSION) {
                *what = "schema version changed during migration";
                return SQLITE_ERROR;
            }
            v = now - 1;
            continue;
        }
        if (rc == SQLITE_OK) {
            *what = "migration";
            rc = sqlite3_exec(db, migrations[v], NULL, NULL, NULL);
        }
        if (rc == SQLITE_OK) {
            snprintf(sql, sizeof sql, "PRAGMA user_version = %lld; PRAGMA application_id = %d",
                     v + 1, CS_STORE_APPLICATION_ID);
            rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
        }
        if (rc == SQLITE_OK) {
            *what = "commit migration";
            rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        }
        if (rc != SQLITE_OK) {
            if (!sqlite3_get_autocommit(db))
                sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            return rc;
        }
    }
    return SQLITE_OK;
}

enum cs_store_status cs_store_open(const char *path, struct cs_store **out, char *msg, size_t cap)
{
    enum cs_store_status ret = CS_STORE_ERROR;
    struct cs_store *store = NULL;
    const char *what = "open";
    bool memory = strcmp(path, ":memory:") == 0;
    int rc = SQLITE_OK; /* stays SQLITE_OK unless a SQLite call fails */
    *out = NULL;

    if (!memory && path[0] == '\0') {
        msgf(msg, cap, "operations database: empty path");
        goto out;
    }
    if (!memory && make_parents(path, msg, cap) != CS_STORE_OK)
        goto out;
    store = calloc(1, sizeof *store);
    if (store == NULL) {
        msgf(msg, cap, "operations database %s: out of memory", path);
        goto out;
    }
    /* No URI parsing: the operator's path is a file name, whatever characters it holds. */
    rc = sqlite3_open_v2(path, &store->db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_EXRESCODE, NULL);
    if (rc != SQLITE_OK)
        goto out;
    sqlite3_extended_result_codes(store->db, 1);
    /* Until the checks pass, closing must not checkpoint a WAL left by an earlier run into the
     * main file: a refused database is left exactly as it was. */
    what = "configure";
    rc = sqlite3_db_config(store->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
    if (rc != SQLITE_OK)
        goto out;
    what = "busy timeout";
    rc = sqlite3_busy_timeout(store->db, BUSY_TIMEOUT_MS);
    if (rc != SQLITE_OK)
        goto out;

    /* Checks first: nothing below writes to a file that fails them. Reading user_version reads
     * the header (SQLITE_NOTADB for a file that is not SQLite); quick_check reads every page. */
    long long version = 0, app_id = 0, objects = 0;
    what = "read schema version";
    rc = pragma_int(store->db, "PRAGMA user_version", &version);
    if (rc != SQLITE_OK)
        goto out;
    char check[256];
    what = "quick_check";
    rc = pragma_text(store->db, "PRAGMA quick_check(1)", check, sizeof check);
    if (rc != SQLITE_OK)
        goto out;
    if (strcmp(check, "ok") != 0) {
        msgf(msg, cap,
             "operations database %s: corrupt (quick_check: %s); refusing to use it, the file was "
             "left as it is",
             path, check);
        goto out;
    }
    what = "read application_id";
    rc = pragma_int(store->db, "PRAGMA application_id", &app_id);
    if (rc == SQLITE_OK) {
        what = "read schema";
        rc = pragma_int(store->db, "SELECT count(*) FROM sqlite_schema", &objects);
    }
    if (rc != SQLITE_OK)
        goto out;
    if (version > CS_STORE_SCHEMA_VERSION) {
        msgf(msg, cap,
             "operations database %s: schema version %lld is newer than this server's (%d); "
             "refusing to use it",
             path, version, CS_STORE_SCHEMA_VERSION);
        goto out;
    }
    if ((version > 0 && app_id != CS_STORE_APPLICATION_ID) || (version == 0 && objects > 0) ||
        version < 0) {
        msgf(msg, cap,
             "operations database %s: not a CodeSpace operations database (application_id %lld, "
             "user_version %lld); refusing to use it",
             path, app_id, version);
        goto out;
    }

    what = "configure";
    rc = sqlite3_db_config(store->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, NULL);
    if (rc != SQLITE_OK)
        goto out;

    /* WAL: readers do not block the writer. ":memory:" has no WAL and answers "memory". */
    char mode[32];
    what = "set journal_mode=WAL";
    rc = pragma_text(store->db, "PRAGMA journal_mode=WAL", mode, sizeof mode);
    if (rc != SQLITE_OK)
        goto out;
    if (strcmp(mode, memory ? "memory" : "wal") != 0) {
        msgf(msg, cap, "operations database %s: journal_mode=WAL answered \"%s\"", path, mode);
        goto out;
    }
    /* FULL: in WAL mode every commit syncs the WAL, so a minted row is on disk before the patch's
     * first write (NORMAL could lose the last commits on power loss). See docs/ledger.md. */
    what = "set synchronous and foreign_keys";
    rc = sqlite3_exec(store->db, "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON", NULL, NULL,
                      NULL);
    if (rc != SQLITE_OK)
        goto out;
    rc = migrate(store->db, version, &what);
    if (rc != SQLITE_OK)
        goto out;
    what = "prepare";
    for (int i = 0; i < ST__COUNT; i++) {
        rc = sqlite3_prepare_v3(store->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                &store->st[i], NULL);
        if (rc != SQLITE_OK)
            goto out;
    }
    *out = store;
    store = NULL;
    ret = CS_STORE_OK;
out:
    if (ret != CS_STORE_OK && rc != SQLITE_OK) {
        /* errno (from the VFS) says why a file could not be opened: permissions, a directory. */
        int errnum = store->db != NULL ? sqlite3_system_errno(store->db) : 0;
        msgf(msg, cap,
             "operations database %s: %s failed: %s (SQLite code %d%s%s); the file was left as "
             "it is",
             path, what, store->db != NULL ? sqlite3_errmsg(store->db) : sqlite3_errstr(rc),
             store->db != NULL ? sqlite3_extended_errcode(store->db) : rc, errnum != 0 ? ", " : "",
             errnum != 0 ? strerror(errnum) : "");
    }
    cs_store_close(store);
    return ret;
}

void cs_store_close(struct cs_store *store)
{
    if (store == NULL)
        return;
    for (int i = 0; i < ST__COUNT; i++)
        sqlite3_finalize(store->st[i]);
    sqlite3_close(store->db);
    free(store);
}

/* ---- mint, finish ---- */

static bool fingerprint_ok(const char *fp)
{
    if (fp == NULL || strncmp(fp, "sha256:", 7) != 0 || strlen(fp) != 71)
        return false;
    for (size_t i = 7; i < 71; i++) {
        if (!((fp[i] >= '0' && fp[i] <= '9') || (fp[i] >= 'a' && fp[i] <= 'f')))
            return false;
    }
    return true;
}

static int insert_event(struct cs_store *store, const char *id, const char *name, const char *at,
                        const char *reason)
{
    sqlite3_stmt *st = stmt(store, ST_INSERT_EVENT);
    int rc = bind_text(st, 1, id, strlen(id));
    if (rc == SQLITE_OK)
        rc = bind_text(st, 2, name, strlen(name));
    if (rc == SQLITE_OK)
        rc = bind_text(st, 3, at, strlen(at));
    if (rc == SQLITE_OK)
        rc = bind_text(st, 4, reason, reason != NULL ? strlen(reason) : 0);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Copies at most cap - 1 bytes of s (n bytes) and a NUL into buf. */
static void copy_text(char *buf, size_t cap, const char *s, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    if (n > 0)
        memcpy(buf, s, n);
    buf[n] = '\0';
}

enum cs_store_status cs_store_mint(struct cs_store *store, const char *workspace_id, size_t ws_n,
                                   const char *key, size_t key_n, const char *fingerprint,
                                   char id_out[CS_STORE_ID_SIZE],
                                   struct cs_store_existing *existing, char *msg, size_t cap)
{
    enum cs_store_status ret = CS_STORE_ERROR;
    char id[CS_STORE_ID_SIZE], now[CS_STORE_TIME_SIZE];
    int rc;

    if (workspace_id == NULL || ws_n == 0 || (key != NULL && (key_n == 0 || existing == NULL)) ||
        !fingerprint_ok(fingerprint)) {
        msgf(msg, cap,
             "operations database: mint: empty workspace id or key, no existing-row "
             "output, or a malformed fingerprint");
        return CS_STORE_INVALID;
    }
    if (cs__store_new_id(id) != 0) {
        msgf(msg, cap, "operations database: mint: getrandom: %s", strerror(errno));
        return CS_STORE_ERROR;
    }
    cs__store_now(now);

    /* IMMEDIATE takes the write lock first: the key check and the insert see one state. */
    rc = run(store, ST_BEGIN_IMMEDIATE);
    if (rc != SQLITE_OK) {
        ret = db_fail(store, msg, cap, "mint: begin");
        goto out;
    }
    if (key != NULL) {
        sqlite3_stmt *st = stmt(store, ST_SELECT_KEY);
        rc = bind_text(st, 1, key, key_n);
        if (rc == SQLITE_OK)
            rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            size_t n;
            const char *s;
            memset(existing, 0, sizeof *existing);
            s = col_text(st, 0, &n);
            copy_text(existing->id, sizeof existing->id, s, n);
            s = col_text(st, 1, &n);
            copy_text(existing->fingerprint, sizeof existing->fingerprint, s, n);
            s = col_text(st, 2, &n);
            int status = s != NULL ? csw_patch_status_from_name(s, n) : -1;
            sqlite3_reset(st);
            if (status < 0) {
                msgf(msg, cap, "operations database: row %s has an invalid status", existing->id);
                goto out;
            }
            existing->status = (enum csw_patch_status)status;
            ret = CS_STORE_KEY_EXISTS;
            goto out;
        }
        sqlite3_reset(st);
        if (rc != SQLITE_DONE) {
            ret = db_fail(store, msg, cap, "mint: look up key");
            goto out;
        }
    }
    sqlite3_stmt *st = stmt(store, ST_INSERT_OP);
    rc = bind_text(st, 1, id, strlen(id));
    if (rc == SQLITE_OK)
        rc = bind_text(st, 2, key, key_n);
    if (rc == SQLITE_OK)
        rc = bind_text(st, 3, workspace_id, ws_n);
    if (rc == SQLITE_OK)
        rc = bind_text(st, 4, fingerprint, strlen(fingerprint));
    if (rc == SQLITE_OK)
        rc = bind_text(st, 5, now, strlen(now));
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        ret = db_fail(store, msg, cap, "mint: insert");
        goto out;
    }
    rc = insert_event(store, id, "minted", now, NULL);
    if (rc != SQLITE_OK) {
        ret = db_fail(store, msg, cap, "mint: insert event");
        goto out;
    }
    rc = run(store, ST_COMMIT);
    if (rc != SQLITE_OK) {
        ret = db_fail(store, msg, cap, "mint: commit");
        goto out;
    }
    memcpy(id_out, id, sizeof id);
    ret = CS_STORE_OK;
out:
    rollback(store);
    return ret;
}

/* cs_store_finish, with error (JSON text, may be NULL) for the error column. */
static enum cs_store_status finish_row(struct cs_store *store, const char *id,
                                       enum csw_patch_status status,
                                       const struct csw_mcp_apply_patch_output *result,
                                       bool reason_unknown, const char *error, char *msg,
                                       size_t cap)
{
    enum cs_store_status ret = CS_STORE_ERROR;
    json_t *j = NULL;
    char *text = NULL;
    char now[CS_STORE_TIME_SIZE];
    int rc;

    if ((unsigned)status >= CSW_PATCH_STATUS__COUNT ||
        (result != NULL && (result->status != status || result->operation_id.s == NULL ||
                            strcmp(result->operation_id.s, id) != 0))) {
        msgf(msg, cap,
             "operations database: finish %s: the result's status or operation_id "
             "does not match",
             id);
        return CS_STORE_INVALID;
    }
    if (result != NULL) {
        struct cs_wire_diag diag;
        if (csw_mcp_apply_patch_output_encode(result, &j, &diag) != CS_WIRE_OK) {
            char buf[600];
            msgf(msg, cap, "operations database: finish %s: result does not encode: %s", id,
                 cs_wire_diag_format(&diag, buf, sizeof buf));
            ret = CS_STORE_INVALID;
            goto out;
        }
        text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        if (text == NULL) {
            msgf(msg, cap, "operations database: finish %s: out of memory", id);
            goto out;
        }
    }
    cs__store_now(now);
    rc = run(store, ST_BEGIN_IMMEDIATE);
    if (rc != SQLITE_OK) {
        ret = db_fail(store, msg, cap, "finish: begin");
        goto out;
    }
    sqlite3_stmt *st = stmt(store, ST_FINISH);
    const char *name = csw_patch_status_names[status];
    rc = bind_text(st, 1, id, strlen(id));
    if (rc == SQLITE_OK)
        rc = bind_text(st, 2, name, strlen(name));
    if (rc == SQLITE_OK)
        rc = bind_text(st, 3, text, text != NULL ? strlen(text) : 0);
    if (rc == SQLITE_OK)
        rc = bind_text(st, 4, now, strlen(now));
    if (rc == SQLITE_OK)
        rc = bind_text(st, 5, error, error != NULL ? strlen(error) : 0);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        ret = db_fail(store, msg, cap, "finish: update");
        goto out;
    }
    if (sqlite3_changes(store->db) == 0) {
        st = stmt(store, ST_FINISHED);
        rc = bind_text(st, 1, id, strlen(id));
        if (rc == SQLITE_OK)
            rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc == SQLITE_ROW) {
            msgf(msg, cap, "operations database: finish %s: already finished", id);
            ret = CS_STORE_INVALID;
        } else if (rc == SQLITE_DONE) {
            msgf(msg, cap, "operations database: finish %s: no such operation", id);
            ret = CS_STORE_NOT_FOUND;
        } else {
            ret = db_fail(store, msg, cap, "finish: look up");
        }
        goto out;
    }
    rc = insert_event(store, id, "finished", now, reason_unknown ? "unknown" : NULL);
    if (rc != SQLITE_OK) {
        ret = db_fail(store, msg, cap, "finish: insert event");
        goto out;
    }
    rc = run(store, ST_COMMIT);
    if (rc != SQLITE_OK) {
        ret = db_fail(store, msg, cap, "finish: commit");
        goto out;
    }
    ret = CS_STORE_OK;
out:
    rollback(store);
    cs_wire_release(text);
    json_decref(j);
    return ret;
}

enum cs_store_status cs_store_finish(struct cs_store *store, const char *id,
                                     enum csw_patch_status status,
                                     const struct csw_mcp_apply_patch_output *result,
                                     bool reason_unknown, char *msg, size_t cap)
{
    return finish_row(store, id, status, result, reason_unknown, NULL, msg, cap);
}

enum cs_store_status cs_store_finish_rejected(struct cs_store *store, const char *id,
                                              enum csw_error code, const char *message, char *msg,
                                              size_t cap)
{
    if ((unsigned)code >= CSW_ERROR__COUNT) {
        msgf(msg, cap, "operations database: finish %s: no such error code", id);
        return CS_STORE_INVALID;
    }
    /* The stored body is the error schema's (errors.json), written by its generated encoder. */
    struct csw_errors e = {
        .code = code, .message = {(char *)(message ? message : ""), message ? strlen(message) : 0}};
    char *text = NULL;
    size_t n = 0;
    struct cs_wire_diag diag;
    if (csw_errors_encode_text(&e, &text, &n, &diag) != CS_WIRE_OK)
        text = NULL;
    if (!text) {
        msgf(msg, cap, "operations database: finish %s: the error is not UTF-8, or no memory", id);
        return CS_STORE_ERROR;
    }
    enum cs_store_status ret =
        finish_row(store, id, CSW_PATCH_STATUS_REJECTED, NULL, false, text, msg, cap);
    cs_wire_release(text);
    return ret;
}

/* Steps statement sid (one row by id, bound as ?1) to the row of id: CS_STORE_OK with *st at the
 * row, CS_STORE_NOT_FOUND or CS_STORE_ERROR. *st is set either way: the caller resets it. */
static enum cs_store_status row_by_id(struct cs_store *store, enum stmt_id sid, const char *id,
                                      sqlite3_stmt **st, char *msg, size_t cap)
{
    *st = stmt(store, sid);
    int rc = bind_text(*st, 1, id, strlen(id));
    if (rc == SQLITE_OK)
        rc = sqlite3_step(*st);
    if (rc == SQLITE_ROW)
        return CS_STORE_OK;
    if (rc == SQLITE_DONE) {
        msgf(msg, cap, "operations database: no operation %s", id);
        return CS_STORE_NOT_FOUND;
    }
    return db_fail(store, msg, cap, "look up operation");
}

enum cs_store_status cs_store_get_error(struct cs_store *store, const char *id,
                                        enum csw_error *code, char *message, size_t message_cap,
                                        char *msg, size_t cap)
{
    sqlite3_stmt *st = NULL;
    enum cs_store_status ret = row_by_id(store, ST_GET_ERROR, id, &st, msg, cap);
    if (ret != CS_STORE_OK)
        goto out;
    ret = CS_STORE_ERROR;
    size_t n;
    const char *s = col_text(st, 0, &n);
    if (s == NULL) {
        ret = CS_STORE_NOT_FOUND; /* not rejected, or rejected before errors were kept */
        goto out;
    }
    /* Read back through the error schema's generated decoder. */
    json_error_t jerr;
    json_t *j = json_loadb(s, n, 0, &jerr);
    struct csw_errors e;
    struct cs_wire_diag diag;
    if (!j || csw_errors_decode(j, &e, &diag) != CS_WIRE_OK) {
        json_decref(j);
        msgf(msg, cap, "operations database: operation %s has an invalid stored error", id);
        goto out;
    }
    *code = e.code;
    snprintf(message, message_cap, "%.*s", (int)e.message.n, e.message.s);
    csw_errors_free(&e);
    json_decref(j);
    ret = CS_STORE_OK;
out:
    sqlite3_reset(st);
    return ret;
}

/* ---- reading rows ---- */

/* Decodes a stored result (n bytes of JSON) into *out. */
static enum cs_store_status decode_result(const char *s, size_t n,
                                          struct csw_mcp_apply_patch_output *out, char *msg,
                                          size_t cap)
{
    json_error_t jerr;
    json_t *j = json_loadb(s, n, 0, &jerr);
    if (j == NULL) {
        msgf(msg, cap, "operations database: stored result is not JSON: %s", jerr.text);
        return CS_STORE_ERROR;
    }
    struct cs_wire_diag diag;
    enum cs_wire_status ws = csw_mcp_apply_patch_output_decode(j, out, &diag);
    json_decref(j);
    if (ws != CS_WIRE_OK) {
        char buf[600];
        msgf(msg, cap, "operations database: stored result does not decode: %s",
             cs_wire_diag_format(&diag, buf, sizeof buf));
        return CS_STORE_ERROR;
    }
    return CS_STORE_OK;
}

static enum cs_store_status nomem(char *msg, size_t cap)
{
    msgf(msg, cap, "operations database: out of memory");
    return CS_STORE_ERROR;
}

static int set_col(struct cs_str *dst, sqlite3_stmt *st, int i)
{
    size_t n;
    const char *s = col_text(st, i, &n);
    return cs_str_set_n(dst, s != NULL ? s : "", n);
}

/* Reads the events of out->operation_id into out->events. */
static enum cs_store_status read_events(struct cs_store *store,
                                        struct csw_mcp_operation_status_output *out, char *msg,
                                        size_t cap)
{
    sqlite3_stmt *st = stmt(store, ST_EVENTS);
    size_t have = 0, room = 0;
    struct csw_mcp_operation_status_output_events_item *v = NULL;
    enum cs_store_status ret = CS_STORE_ERROR;
    int rc = bind_text(st, 1, out->operation_id.s, out->operation_id.n);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (have == room) {
            size_t nroom = room == 0 ? 4 : room * 2;
            struct csw_mcp_operation_status_output_events_item *nv =
                cs_wire_malloc(nroom * sizeof *nv);
            if (nv == NULL) {
                msgf(msg, cap, "operations database: out of memory");
                goto out;
            }
            memset(nv, 0, nroom * sizeof *nv);
            if (have > 0)
                memcpy(nv, v, have * sizeof *v);
            cs_wire_release(v);
            v = nv;
            room = nroom;
        }
        struct csw_mcp_operation_status_output_events_item *e = &v[have++];
        size_t n;
        const char *name = col_text(st, 0, &n);
        int k =
            name != NULL ? csw_mcp_operation_status_output_events_item_name_from_name(name, n) : -1;
        const char *reason = col_text(st, 2, &n);
        int r = reason != NULL
                    ? csw_mcp_operation_status_output_events_item_reason_from_name(reason, n)
                    : 0;
        if (k < 0 || r < 0) {
            msgf(msg, cap, "operations database: operation %s has an invalid event",
                 out->operation_id.s);
            goto out;
        }
        e->name = (enum csw_mcp_operation_status_output_events_item_name)k;
        e->has_reason = reason != NULL;
        e->reason = (enum csw_mcp_operation_status_output_events_item_reason)r;
        if (set_col(&e->at, st, 1) != 0) {
            msgf(msg, cap, "operations database: out of memory");
            goto out;
        }
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_DONE) {
        ret = db_fail(store, msg, cap, "read events");
        goto out;
    }
    out->events.v = v;
    out->events.n = have;
    v = NULL;
    have = 0;
    ret = CS_STORE_OK;
out:
    sqlite3_reset(st);
    for (size_t i = 0; i < have; i++)
        cs_wire_release(v[i].at.s);
    cs_wire_release(v);
    return ret;
}

/* Fills out from the row st (ROW_COLUMNS) is on. */
static enum cs_store_status fill_status(struct cs_store *store, sqlite3_stmt *st,
                                        struct csw_mcp_operation_status_output *out, char *msg,
                                        size_t cap)
{
    size_t n;
    const char *s = col_text(st, 3, &n);
    int status = s != NULL ? csw_patch_status_from_name(s, n) : -1;
    s = col_text(st, 2, &n);
    if (status < 0 || s == NULL || n != 5 || memcmp(s, "patch", 5) != 0) {
        msgf(msg, cap, "operations database: a row has an invalid status or kind");
        return CS_STORE_ERROR;
    }
    out->status = (enum csw_patch_status)status;
    out->replayed = false;
    if (set_col(&out->operation_id, st, 0) != 0 || set_col(&out->workspace_id, st, 1) != 0 ||
        set_col(&out->created_at, st, 5) != 0)
        return nomem(msg, cap);
    if (sqlite3_column_type(st, 6) != SQLITE_NULL) {
        out->has_finished_at = true;
        if (set_col(&out->finished_at, st, 6) != 0)
            return nomem(msg, cap);
    }
    s = col_text(st, 4, &n);
    if (s != NULL) {
        struct csw_mcp_apply_patch_output r;
        enum cs_store_status ret = decode_result(s, n, &r, msg, cap);
        if (ret != CS_STORE_OK)
            return ret;
        /* Move the arrays: both structs come from the same allocator and item types. */
        out->files.v = r.files.v;
        out->files.n = r.files.n;
        out->changes.v = r.changes.v;
        out->changes.n = r.changes.n;
        r.files.v = NULL;
        r.files.n = 0;
        r.changes.v = NULL;
        r.changes.n = 0;
        csw_mcp_apply_patch_output_free(&r);
    }
    return read_events(store, out, msg, cap);
}

static enum cs_store_status get_status(struct cs_store *store, enum stmt_id which, const char *s,
                                       size_t n, struct csw_mcp_operation_status_output *out,
                                       char *msg, size_t cap)
{
    enum cs_store_status ret = CS_STORE_ERROR;
    memset(out, 0, sizeof *out);
    /* One read transaction: the row and its events come from one snapshot. */
    int rc = run(store, ST_BEGIN);
    if (rc != SQLITE_OK) {
        ret = db_fail(store, msg, cap, "begin");
        goto out;
    }
    sqlite3_stmt *st = stmt(store, which);
    rc = bind_text(st, 1, s, n);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        msgf(msg, cap, "operations database: no operation with that %s",
             which == ST_GET_ID ? "id" : "key");
        ret = CS_STORE_NOT_FOUND;
    } else if (rc == SQLITE_ROW) {
        ret = fill_status(store, st, out, msg, cap);
    } else {
        ret = db_fail(store, msg, cap, "look up operation");
    }
    sqlite3_reset(st);
out:
    rollback(store);
    if (ret != CS_STORE_OK)
        csw_mcp_operation_status_output_free(out);
    return ret;
}

enum cs_store_status cs_store_get_by_id(struct cs_store *store, const char *id, size_t id_n,
                                        struct csw_mcp_operation_status_output *out, char *msg,
                                        size_t cap)
{
    return get_status(store, ST_GET_ID, id, id_n, out, msg, cap);
}

enum cs_store_status cs_store_get_by_key(struct cs_store *store, const char *key, size_t key_n,
                                         struct csw_mcp_operation_status_output *out, char *msg,
                                         size_t cap)
{
    return get_status(store, ST_GET_KEY, key, key_n, out, msg, cap);
}

enum cs_store_status cs_store_get_result(struct cs_store *store, const char *id,
                                         struct csw_mcp_apply_patch_output *out, char *msg,
                                         size_t cap)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st = NULL;
    enum cs_store_status ret = row_by_id(store, ST_GET_ID, id, &st, msg, cap);
    if (ret != CS_STORE_OK)
        goto out;
    ret = CS_STORE_ERROR;
    size_t n;
    const char *s = col_text(st, 4, &n);
    if (s != NULL) {
        ret = decode_result(s, n, out, msg, cap);
        if (ret != CS_STORE_OK)
            goto out;
    } else {
        s = col_text(st, 3, &n);
        int status = s != NULL ? csw_patch_status_from_name(s, n) : -1;
        if (status < 0) {
            msgf(msg, cap, "operations database: operation %s has an invalid status", id);
            goto out;
        }
        out->status = (enum csw_patch_status)status;
        if (cs_str_set_n(&out->operation_id, id, strlen(id)) != 0) {
            msgf(msg, cap, "operations database: out of memory");
            goto out;
        }
    }
    out->replayed = true;
    ret = CS_STORE_OK;
out:
    sqlite3_reset(st);
    if (ret != CS_STORE_OK)
        csw_mcp_apply_patch_output_free(out);
    return ret;
}

/* ---- fingerprint ---- */

/* Turns *v, a shallow copy of a value of object type t, into what the fingerprint hashes: drop
 * marked absent, every other absent optional field with a schema default set to it, every absent
 * map set to empty. Walks the descriptor, not a field list, so a new input field needs nothing
 * here. The copy owns nothing and is never freed: defaults point at the descriptor's text. */
static void fingerprint_view(const struct cs_wire_object *o, char *v, const char *drop)
{
    for (size_t i = 0; i < o->nfields; i++) {
        const struct cs_wire_field *f = &o->fields[i];
        if (f->has_offset == CS_WIRE_NO_HAS)
            continue;
        bool has = false;
        if (drop && strcmp(f->name, drop) == 0) {
            memcpy(v + f->has_offset, &has, sizeof has);
            continue;
        }
        memcpy(&has, v + f->has_offset, sizeof has);
        if (has)
            continue;
        void *slot = v + f->offset;
        switch (f->type->kind) {
        case CS_WIRE_INT:
            if (!f->has_default)
                continue;
            memcpy(slot, &f->def_int, sizeof f->def_int);
            break;
        case CS_WIRE_BOOL: {
            if (!f->has_default)
                continue;
            bool b = f->def_int != 0;
            memcpy(slot, &b, sizeof b);
            break;
        }
        case CS_WIRE_ENUM: {
            if (!f->has_default)
                continue;
            int e = (int)f->def_int;
            memcpy(slot, &e, sizeof e);
            break;
        }
        case CS_WIRE_STRING:
        case CS_WIRE_NSTRING: {
            if (!f->has_default || !f->def_str)
                continue;
            struct cs_str d = {(char *)f->def_str, strlen(f->def_str)};
            memcpy(slot, &d, sizeof d);
            break;
        }
        case CS_WIRE_MAP: {
            struct cs_wire_array empty = {NULL, 0};
            memcpy(slot, &empty, sizeof empty);
            break;
        }
        case CS_WIRE_CONST:
        case CS_WIRE_OBJECT:
        case CS_WIRE_ARRAY:
        case CS_WIRE_UNION:
        case CS_WIRE_JSON:
            continue;
        }
        has = true;
        memcpy(v + f->has_offset, &has, sizeof has);
    }
}

enum cs_store_status cs__store_fingerprint_of(const struct cs_wire_type *t, const void *in,
                                              const char *drop, char out[CS_STORE_FINGERPRINT_SIZE],
                                              char *msg, size_t cap)
{
    static const char digits[] = "0123456789abcdef";
    enum cs_store_status ret = CS_STORE_ERROR;
    char *text = NULL; /* from jansson's allocator */
    EVP_MD_CTX *ctx = NULL;
    json_t *j = NULL;
    char *view = t->kind == CS_WIRE_OBJECT ? malloc(t->size) : NULL;
    if (view == NULL) {
        msgf(msg, cap, "fingerprint: out of memory, or not an object type");
        goto out;
    }
    memcpy(view, in, t->size);
    fingerprint_view(t->obj, view, drop);
    struct cs_wire_diag diag;
    if (cs_wire_encode(t, view, &j, &diag) != CS_WIRE_OK) {
        char buf[600];
        msgf(msg, cap, "fingerprint: %s", cs_wire_diag_format(&diag, buf, sizeof buf));
        goto out;
    }
    text = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII);
    if (text == NULL) {
        msgf(msg, cap, "fingerprint: out of memory");
        goto out;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    ctx = EVP_MD_CTX_new();
    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1 ||
        EVP_DigestUpdate(ctx, text, strlen(text)) != 1 || EVP_DigestFinal_ex(ctx, md, &mdn) != 1 ||
        mdn != 32) {
        msgf(msg, cap, "fingerprint: SHA-256 failed");
        goto out;
    }
    memcpy(out, "sha256:", 7);
    for (unsigned i = 0; i < mdn; i++) {
        out[7 + 2 * i] = digits[md[i] >> 4];
        out[8 + 2 * i] = digits[md[i] & 15];
    }
    out[7 + 2 * mdn] = '\0';
    ret = CS_STORE_OK;
out:
    EVP_MD_CTX_free(ctx);
    cs_wire_release(text);
    json_decref(j);
    free(view);
    return ret;
}

enum cs_store_status cs_store_fingerprint(const struct csw_mcp_apply_patch_input *in,
                                          char out[CS_STORE_FINGERPRINT_SIZE], char *msg,
                                          size_t cap)
{
    return cs__store_fingerprint_of(&csw_mcp_apply_patch_input_type, in, "operation_key", out, msg,
                                    cap);
}
