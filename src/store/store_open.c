/*
 * store_open: opening the operation ledger (store_ledger.c holds its queries). The file is
 * checked before anything writes to it (header, quick_check, application id, schema version);
 * then WAL, synchronous=FULL, foreign keys and a busy timeout are set and the numbered migrations
 * (PRAGMA user_version) run, each in one transaction; then every statement is prepared once. A
 * file refused at open is left exactly as it was.
 *
 * Trust: the path is the operator's (a plain file name, never parsed as a URI); the file's
 * contents are untrusted until the checks pass. Entry points: cs_store_open, cs_store_close
 * (store.h).
 */
#include "store_internal.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BUSY_TIMEOUT_MS 5000

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
    /* 3 (issue #29, deny identities): the identity memory of each workspace's deny rules
     * (store_ident.c). Self-contained (IF NOT EXISTS): it composes with migrations added
     * beside it in any order. */
    "CREATE TABLE IF NOT EXISTS deny_identities ("
    " workspace_id TEXT NOT NULL,"
    " root TEXT NOT NULL,"
    " dev INTEGER NOT NULL,"
    " ino INTEGER NOT NULL,"
    " gen INTEGER,"
    " btime_ns INTEGER,"
    " learned_at TEXT NOT NULL,"
    " PRIMARY KEY (workspace_id, root, dev, ino)"
    ") STRICT, WITHOUT ROWID;",
    /* 4: crash recovery of apply_patch (docs/ledger.md "Recovery"): status 'rolled_back' and the
     * event 'recovered'. SQLite cannot change a CHECK in place, so both tables are rebuilt (the
     * events first out, so that no cascade fires) and renamed back. */
    "CREATE TABLE operations_v4 ("
    " id TEXT PRIMARY KEY NOT NULL,"
    " key TEXT UNIQUE,"
    " workspace_id TEXT NOT NULL,"
    " fingerprint TEXT NOT NULL,"
    " kind TEXT NOT NULL CHECK (kind IN ('patch')),"
    " status TEXT NOT NULL CHECK (status IN ('applied', 'checked', 'rejected',"
    "  'failed_rolled_back', 'failed_partial', 'unknown', 'rolled_back')),"
    " result TEXT,"
    " created_at TEXT NOT NULL,"
    " finished_at TEXT,"
    " error TEXT"
    ") STRICT;"
    "INSERT INTO operations_v4 (id, key, workspace_id, fingerprint, kind, status, result,"
    " created_at, finished_at, error) SELECT id, key, workspace_id, fingerprint, kind, status,"
    " result, created_at, finished_at, error FROM operations;"
    "CREATE TABLE operation_events_v4 ("
    " seq INTEGER PRIMARY KEY,"
    " operation_id TEXT NOT NULL REFERENCES operations_v4 (id) ON DELETE CASCADE,"
    " name TEXT NOT NULL CHECK (name IN ('minted', 'finished', 'recovered')),"
    " at TEXT NOT NULL,"
    " reason TEXT CHECK (reason IS NULL OR reason IN ('unknown'))"
    ") STRICT;"
    "INSERT INTO operation_events_v4 (seq, operation_id, name, at, reason)"
    " SELECT seq, operation_id, name, at, reason FROM operation_events;"
    "DROP TABLE operation_events;"
    "DROP TABLE operations;"
    "ALTER TABLE operations_v4 RENAME TO operations;"
    "ALTER TABLE operation_events_v4 RENAME TO operation_events;"
    "CREATE INDEX operation_events_by_operation ON operation_events (operation_id, seq);",
    /* 5: rows minted by a build that journals every patch under its operation id (issue 30):
     * for these alone, no journal after a crash means nothing was written (rolled_back). An
     * older row left unknown stays unknown: nothing tells what its patch did. */
    "ALTER TABLE operations ADD COLUMN journaled INTEGER"
    " CHECK (journaled IS NULL OR journaled = 1)"
    ";",
};

/* ---- open ---- */

/* Creates the missing parent directories of path with mode 0700. */
static enum cs_store_status make_parents(const char *path, struct cs_diag *d)
{
    enum cs_store_status ret = CS_STORE_ERROR;
    char *dir = strdup(path);
    if (dir == NULL) {
        cs__store_fail(d, CS_STORE_ERROR, "operations database %s: out of memory", path);
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
            cs__store_fail(d, CS_STORE_ERROR,
                           "operations database %s: cannot create directory %s: %s", path, dir,
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

enum cs_store_status cs_store_open(const char *path, struct cs_store **out, struct cs_diag *d)
{
    enum cs_store_status ret = CS_STORE_ERROR;
    struct cs_store *store = NULL;
    const char *what = "open";
    bool memory = strcmp(path, ":memory:") == 0;
    int rc = SQLITE_OK; /* stays SQLITE_OK unless a SQLite call fails */
    *out = NULL;

    if (!memory && path[0] == '\0') {
        cs__store_fail(d, CS_STORE_ERROR, "operations database: empty path");
        goto out;
    }
    if (!memory && make_parents(path, d) != CS_STORE_OK)
        goto out;
    store = calloc(1, sizeof *store);
    if (store == NULL) {
        cs__store_fail(d, CS_STORE_ERROR, "operations database %s: out of memory", path);
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
        cs__store_fail(
            d, CS_STORE_ERROR,
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
        cs__store_fail(
            d, CS_STORE_ERROR,
            "operations database %s: schema version %lld is newer than this server's (%d); "
            "refusing to use it",
            path, version, CS_STORE_SCHEMA_VERSION);
        goto out;
    }
    if ((version > 0 && app_id != CS_STORE_APPLICATION_ID) || (version == 0 && objects > 0) ||
        version < 0) {
        cs__store_fail(
            d, CS_STORE_ERROR,
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
        cs__store_fail(d, CS_STORE_ERROR,
                       "operations database %s: journal_mode=WAL answered \"%s\"", path, mode);
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
    rc = cs__store_prepare(store);
    if (rc != SQLITE_OK)
        goto out;
    *out = store;
    store = NULL;
    ret = CS_STORE_OK;
out:
    if (ret != CS_STORE_OK && rc != SQLITE_OK) {
        /* errno (from the VFS) says why a file could not be opened: permissions, a directory. */
        int errnum = store->db != NULL ? sqlite3_system_errno(store->db) : 0;
        cs__store_fail(
            d, CS_STORE_ERROR,
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
