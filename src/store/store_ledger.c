/*
 * store_ledger: the operation ledger's queries on SQLite (store_open.c opens the file, checks it
 * and migrates it). Every statement is prepared once at open (cs__store_prepare); every text is
 * bound with its length. Also here: operation ids (uuid v4 from getrandom), times (RFC 3339 UTC,
 * milliseconds) and the apply_patch fingerprint.
 *
 * Trust: ids, keys and workspace ids are the client's and only ever bound as parameters. Rows
 * are decoded back through the generated code, so a tampered row gives CS_STORE_ERROR. Entry
 * points: see store.h.
 */
#include "store_internal.h"

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
#include <time.h>

/* The columns ST_GET_ID and ST_GET_KEY return, in this order. */
#define ROW_COLUMNS "id, workspace_id, kind, status, result, created_at, finished_at"

static const char *const stmt_sql[ST__COUNT] = {
    [ST_BEGIN_IMMEDIATE] = "BEGIN IMMEDIATE",
    [ST_BEGIN] = "BEGIN",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_SELECT_KEY] = "SELECT id, fingerprint, status FROM operations WHERE key = ?1",
    [ST_INSERT_OP] = "INSERT INTO operations (id, key, workspace_id, fingerprint, kind, status, "
                     "created_at, journaled) VALUES (?1, ?2, ?3, ?4, 'patch', 'unknown', ?5, 1)",
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

/* ---- messages ---- */

enum cs_store_status cs__store_fail(struct cs_diag *d, enum cs_store_status st, const char *fmt,
                                    ...)
{
    va_list ap;
    va_start(ap, fmt);
    cs_diag_vset(d, (enum csw_error)cs_store_status_error(st), fmt, ap);
    va_end(ap);
    return st;
}

int cs_store_status_error(enum cs_store_status st)
{
    switch (st) {
    case CS_STORE_OK:
    case CS_STORE_KEY_EXISTS:
        return 0;
    case CS_STORE_NOT_FOUND:
        return CSW_ERROR_OPERATION_NOT_FOUND;
    case CS_STORE_ERROR:
    case CS_STORE_INVALID:
        break;
    }
    return CSW_ERROR_INTERNAL;
}

static enum cs_store_status db_fail(struct cs_store *store, struct cs_diag *d, const char *what)
{
    return cs__store_fail(d, CS_STORE_ERROR, "operations database: %s: %s", what,
                          sqlite3_errmsg(store->db));
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

/* Prepares every statement of stmt_sql on store->db, once, at open (store_open.c). Returns an
 * SQLite code. */
int cs__store_prepare(struct cs_store *store)
{
    for (int i = 0; i < ST__COUNT; i++) {
        int rc = sqlite3_prepare_v3(store->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                    &store->st[i], NULL);
        if (rc != SQLITE_OK)
            return rc;
    }
    return SQLITE_OK;
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

/* cs_store_mint and cs_store_mint_as: the row gets the id given, or a new one (given NULL). */
static enum cs_store_status mint(struct cs_store *store, const char *workspace_id, size_t ws_n,
                                 const char *key, size_t key_n, const char *fingerprint,
                                 const char *given, char id_out[CS_STORE_ID_SIZE],
                                 struct cs_store_existing *existing, struct cs_diag *d)
{
    enum cs_store_status ret = CS_STORE_ERROR;
    char id[CS_STORE_ID_SIZE], now[CS_STORE_TIME_SIZE];
    int rc;

    if (workspace_id == NULL || ws_n == 0 || (key != NULL && (key_n == 0 || existing == NULL)) ||
        !fingerprint_ok(fingerprint) ||
        (given != NULL && (given[0] == '\0' || strlen(given) >= sizeof id))) {
        return cs__store_fail(
            d, CS_STORE_INVALID,
            "operations database: mint: empty workspace id or key, no existing-row "
            "output, a malformed fingerprint, or an empty or overlong id");
    }
    if (given != NULL) {
        memcpy(id, given, strlen(given) + 1);
    } else if (cs__store_new_id(id) != 0) {
        return cs__store_fail(d, CS_STORE_ERROR, "operations database: mint: getrandom: %s",
                              strerror(errno));
    }
    cs__store_now(now);

    /* IMMEDIATE takes the write lock first: the key check and the insert see one state. */
    rc = run(store, ST_BEGIN_IMMEDIATE);
    if (rc != SQLITE_OK) {
        ret = db_fail(store, d, "mint: begin");
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
                cs__store_fail(d, CS_STORE_ERROR,
                               "operations database: row %s has an invalid status", existing->id);
                goto out;
            }
            existing->status = (enum csw_patch_status)status;
            ret = CS_STORE_KEY_EXISTS;
            goto out;
        }
        sqlite3_reset(st);
        if (rc != SQLITE_DONE) {
            ret = db_fail(store, d, "mint: look up key");
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
        ret = db_fail(store, d, "mint: insert");
        goto out;
    }
    rc = insert_event(store, id, "minted", now, NULL);
    if (rc != SQLITE_OK) {
        ret = db_fail(store, d, "mint: insert event");
        goto out;
    }
    rc = run(store, ST_COMMIT);
    if (rc != SQLITE_OK) {
        ret = db_fail(store, d, "mint: commit");
        goto out;
    }
    memcpy(id_out, id, sizeof id);
    ret = CS_STORE_OK;
out:
    rollback(store);
    return ret;
}

enum cs_store_status cs_store_mint(struct cs_store *store, const char *workspace_id, size_t ws_n,
                                   const char *key, size_t key_n, const char *fingerprint,
                                   char id_out[CS_STORE_ID_SIZE],
                                   struct cs_store_existing *existing, struct cs_diag *d)
{
    return mint(store, workspace_id, ws_n, key, key_n, fingerprint, NULL, id_out, existing, d);
}

enum cs_store_status cs_store_mint_as(struct cs_store *store, const char *workspace_id, size_t ws_n,
                                      const char *key, size_t key_n, const char *fingerprint,
                                      const char *id, struct cs_store_existing *existing,
                                      struct cs_diag *d)
{
    char id_out[CS_STORE_ID_SIZE];
    return mint(store, workspace_id, ws_n, key, key_n, fingerprint, id, id_out, existing, d);
}

/* cs_store_finish, with error (JSON text, may be NULL) for the error column. */
static enum cs_store_status finish_row(struct cs_store *store, const char *id,
                                       enum csw_patch_status status,
                                       const struct csw_mcp_apply_patch_output *result,
                                       bool reason_unknown, const char *error, struct cs_diag *d)
{
    enum cs_store_status ret = CS_STORE_ERROR;
    json_t *j = NULL;
    char *text = NULL;
    char now[CS_STORE_TIME_SIZE];
    int rc;

    if ((unsigned)status >= CSW_PATCH_STATUS__COUNT ||
        (result != NULL && (result->status != status || result->operation_id.s == NULL ||
                            strcmp(result->operation_id.s, id) != 0))) {
        return cs__store_fail(d, CS_STORE_INVALID,
                              "operations database: finish %s: the result's status or operation_id "
                              "does not match",
                              id);
    }
    if (result != NULL) {
        struct cs_wire_diag diag;
        if (csw_mcp_apply_patch_output_encode(result, &j, &diag) != CS_WIRE_OK) {
            char buf[600];
            ret = cs__store_fail(d, CS_STORE_INVALID,
                                 "operations database: finish %s: result does not encode: %s", id,
                                 cs_wire_diag_format(&diag, buf, sizeof buf));
            goto out;
        }
        text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        if (text == NULL) {
            cs__store_fail(d, CS_STORE_ERROR, "operations database: finish %s: out of memory", id);
            goto out;
        }
    }
    cs__store_now(now);
    rc = run(store, ST_BEGIN_IMMEDIATE);
    if (rc != SQLITE_OK) {
        ret = db_fail(store, d, "finish: begin");
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
        ret = db_fail(store, d, "finish: update");
        goto out;
    }
    if (sqlite3_changes(store->db) == 0) {
        st = stmt(store, ST_FINISHED);
        rc = bind_text(st, 1, id, strlen(id));
        if (rc == SQLITE_OK)
            rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc == SQLITE_ROW) {
            ret = cs__store_fail(d, CS_STORE_INVALID,
                                 "operations database: finish %s: already finished", id);
        } else if (rc == SQLITE_DONE) {
            ret = cs__store_fail(d, CS_STORE_NOT_FOUND,
                                 "operations database: finish %s: no such operation", id);
        } else {
            ret = db_fail(store, d, "finish: look up");
        }
        goto out;
    }
    rc = insert_event(store, id, "finished", now, reason_unknown ? "unknown" : NULL);
    if (rc != SQLITE_OK) {
        ret = db_fail(store, d, "finish: insert event");
        goto out;
    }
    rc = run(store, ST_COMMIT);
    if (rc != SQLITE_OK) {
        ret = db_fail(store, d, "finish: commit");
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
                                     bool reason_unknown, struct cs_diag *d)
{
    return finish_row(store, id, status, result, reason_unknown, NULL, d);
}

enum cs_store_status cs_store_finish_rejected(struct cs_store *store, const char *id,
                                              enum csw_error code, const char *message,
                                              struct cs_diag *d)
{
    if ((unsigned)code >= CSW_ERROR__COUNT) {
        return cs__store_fail(d, CS_STORE_INVALID,
                              "operations database: finish %s: no such error code", id);
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
        return cs__store_fail(
            d, CS_STORE_ERROR,
            "operations database: finish %s: the error is not UTF-8, or no memory", id);
    }
    enum cs_store_status ret =
        finish_row(store, id, CSW_PATCH_STATUS_REJECTED, NULL, false, text, d);
    cs_wire_release(text);
    return ret;
}

/* Steps statement sid (one row by id, bound as ?1) to the row of id: CS_STORE_OK with *st at the
 * row, CS_STORE_NOT_FOUND or CS_STORE_ERROR. *st is set either way: the caller resets it. */
static enum cs_store_status row_by_id(struct cs_store *store, enum stmt_id sid, const char *id,
                                      sqlite3_stmt **st, struct cs_diag *d)
{
    *st = stmt(store, sid);
    int rc = bind_text(*st, 1, id, strlen(id));
    if (rc == SQLITE_OK)
        rc = sqlite3_step(*st);
    if (rc == SQLITE_ROW)
        return CS_STORE_OK;
    if (rc == SQLITE_DONE) {
        return cs__store_fail(d, CS_STORE_NOT_FOUND, "operations database: no operation %s", id);
    }
    return db_fail(store, d, "look up operation");
}

enum cs_store_status cs_store_get_error(struct cs_store *store, const char *id,
                                        enum csw_error *code, char *message, size_t message_cap,
                                        struct cs_diag *d)
{
    sqlite3_stmt *st = NULL;
    enum cs_store_status ret = row_by_id(store, ST_GET_ERROR, id, &st, d);
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
        cs__store_fail(d, CS_STORE_ERROR,
                       "operations database: operation %s has an invalid stored error", id);
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
                                          struct csw_mcp_apply_patch_output *out, struct cs_diag *d)
{
    json_error_t jerr;
    json_t *j = json_loadb(s, n, 0, &jerr);
    if (j == NULL) {
        return cs__store_fail(d, CS_STORE_ERROR,
                              "operations database: stored result is not JSON: %s", jerr.text);
    }
    struct cs_wire_diag diag;
    enum cs_wire_status ws = csw_mcp_apply_patch_output_decode(j, out, &diag);
    json_decref(j);
    if (ws != CS_WIRE_OK) {
        char buf[600];
        return cs__store_fail(d, CS_STORE_ERROR,
                              "operations database: stored result does not decode: %s",
                              cs_wire_diag_format(&diag, buf, sizeof buf));
    }
    return CS_STORE_OK;
}

static enum cs_store_status nomem(struct cs_diag *d)
{
    return cs__store_fail(d, CS_STORE_ERROR, "operations database: out of memory");
}

static int set_col(struct cs_str *dst, sqlite3_stmt *st, int i)
{
    size_t n;
    const char *s = col_text(st, i, &n);
    return cs_str_set_n(dst, s != NULL ? s : "", n);
}

/* Reads the events of out->operation_id into out->events. */
static enum cs_store_status
read_events(struct cs_store *store, struct csw_mcp_operation_status_output *out, struct cs_diag *d)
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
                cs__store_fail(d, CS_STORE_ERROR, "operations database: out of memory");
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
            cs__store_fail(d, CS_STORE_ERROR,
                           "operations database: operation %s has an invalid event",
                           out->operation_id.s);
            goto out;
        }
        e->name = (enum csw_mcp_operation_status_output_events_item_name)k;
        e->has_reason = reason != NULL;
        e->reason = (enum csw_mcp_operation_status_output_events_item_reason)r;
        if (set_col(&e->at, st, 1) != 0) {
            cs__store_fail(d, CS_STORE_ERROR, "operations database: out of memory");
            goto out;
        }
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_DONE) {
        ret = db_fail(store, d, "read events");
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
                                        struct csw_mcp_operation_status_output *out,
                                        struct cs_diag *d)
{
    size_t n;
    const char *s = col_text(st, 3, &n);
    int status = s != NULL ? csw_patch_status_from_name(s, n) : -1;
    s = col_text(st, 2, &n);
    if (status < 0 || s == NULL || n != 5 || memcmp(s, "patch", 5) != 0) {
        return cs__store_fail(d, CS_STORE_ERROR,
                              "operations database: a row has an invalid status or kind");
    }
    out->status = (enum csw_patch_status)status;
    out->replayed = false;
    if (set_col(&out->operation_id, st, 0) != 0 || set_col(&out->workspace_id, st, 1) != 0 ||
        set_col(&out->created_at, st, 5) != 0)
        return nomem(d);
    if (sqlite3_column_type(st, 6) != SQLITE_NULL) {
        out->has_finished_at = true;
        if (set_col(&out->finished_at, st, 6) != 0)
            return nomem(d);
    }
    s = col_text(st, 4, &n);
    if (s != NULL) {
        struct csw_mcp_apply_patch_output r = {0}; /* decode_result fills it on success */
        enum cs_store_status ret = decode_result(s, n, &r, d);
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
    return read_events(store, out, d);
}

static enum cs_store_status get_status(struct cs_store *store, enum stmt_id which, const char *s,
                                       size_t n, struct csw_mcp_operation_status_output *out,
                                       struct cs_diag *d)
{
    enum cs_store_status ret = CS_STORE_ERROR;
    memset(out, 0, sizeof *out);
    /* One read transaction: the row and its events come from one snapshot. */
    int rc = run(store, ST_BEGIN);
    if (rc != SQLITE_OK) {
        ret = db_fail(store, d, "begin");
        goto out;
    }
    sqlite3_stmt *st = stmt(store, which);
    rc = bind_text(st, 1, s, n);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        ret =
            cs__store_fail(d, CS_STORE_NOT_FOUND, "operations database: no operation with that %s",
                           which == ST_GET_ID ? "id" : "key");
    } else if (rc == SQLITE_ROW) {
        ret = fill_status(store, st, out, d);
    } else {
        ret = db_fail(store, d, "look up operation");
    }
    sqlite3_reset(st);
out:
    rollback(store);
    if (ret != CS_STORE_OK)
        csw_mcp_operation_status_output_free(out);
    return ret;
}

enum cs_store_status cs_store_get_by_id(struct cs_store *store, const char *id, size_t id_n,
                                        struct csw_mcp_operation_status_output *out,
                                        struct cs_diag *d)
{
    return get_status(store, ST_GET_ID, id, id_n, out, d);
}

enum cs_store_status cs_store_get_by_key(struct cs_store *store, const char *key, size_t key_n,
                                         struct csw_mcp_operation_status_output *out,
                                         struct cs_diag *d)
{
    return get_status(store, ST_GET_KEY, key, key_n, out, d);
}

enum cs_store_status cs_store_get_result(struct cs_store *store, const char *id,
                                         struct csw_mcp_apply_patch_output *out, struct cs_diag *d)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st = NULL;
    enum cs_store_status ret = row_by_id(store, ST_GET_ID, id, &st, d);
    if (ret != CS_STORE_OK)
        goto out;
    ret = CS_STORE_ERROR;
    size_t n;
    const char *s = col_text(st, 4, &n);
    if (s != NULL) {
        ret = decode_result(s, n, out, d);
        if (ret != CS_STORE_OK)
            goto out;
    } else {
        s = col_text(st, 3, &n);
        int status = s != NULL ? csw_patch_status_from_name(s, n) : -1;
        if (status < 0) {
            cs__store_fail(d, CS_STORE_ERROR,
                           "operations database: operation %s has an invalid status", id);
            goto out;
        }
        out->status = (enum csw_patch_status)status;
        if (cs_str_set_n(&out->operation_id, id, strlen(id)) != 0) {
            cs__store_fail(d, CS_STORE_ERROR, "operations database: out of memory");
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
                                              struct cs_diag *d)
{
    static const char digits[] = "0123456789abcdef";
    enum cs_store_status ret = CS_STORE_ERROR;
    char *text = NULL; /* from jansson's allocator */
    EVP_MD_CTX *ctx = NULL;
    json_t *j = NULL;
    char *view = t->kind == CS_WIRE_OBJECT ? malloc(t->size) : NULL;
    if (view == NULL) {
        cs__store_fail(d, CS_STORE_ERROR, "fingerprint: out of memory, or not an object type");
        goto out;
    }
    memcpy(view, in, t->size);
    fingerprint_view(t->obj, view, drop);
    struct cs_wire_diag diag;
    if (cs_wire_encode(t, view, &j, &diag) != CS_WIRE_OK) {
        char buf[600];
        cs__store_fail(d, CS_STORE_ERROR, "fingerprint: %s",
                       cs_wire_diag_format(&diag, buf, sizeof buf));
        goto out;
    }
    text = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII);
    if (text == NULL) {
        cs__store_fail(d, CS_STORE_ERROR, "fingerprint: out of memory");
        goto out;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    ctx = EVP_MD_CTX_new();
    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1 ||
        EVP_DigestUpdate(ctx, text, strlen(text)) != 1 || EVP_DigestFinal_ex(ctx, md, &mdn) != 1 ||
        mdn != 32) {
        cs__store_fail(d, CS_STORE_ERROR, "fingerprint: SHA-256 failed");
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
                                          char out[CS_STORE_FINGERPRINT_SIZE], struct cs_diag *d)
{
    return cs__store_fingerprint_of(&csw_mcp_apply_patch_input_type, in, "operation_key", out, d);
}
