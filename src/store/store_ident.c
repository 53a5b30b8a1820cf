/*
 * store_ident: the identity memory of the deny rules in the operations database (table
 * deny_identities, migration 3 in store_open.c; docs/ledger.md). The runner loads a workspace's
 * rows when it first serves that workspace and writes what each scan learned or forgot in one
 * transaction, so that a denied file renamed or hard-linked before a restart of the gateway, or
 * the replacement of a worker, is still denied after it.
 *
 * Trust: workspace ids and roots come from the gateway's configuration and are bound as
 * parameters; rows read back are the database's (a row out of range is skipped, never trusted to
 * size anything). Statements are prepared per call (a load at start, a save per scan): none are
 * added to store_internal.h's list. Entry points: cs_store_ident_load, cs_store_ident_save.
 */
#include "store_internal.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static sqlite3_int64 i64(uint64_t v)
{
    sqlite3_int64 r;
    memcpy(&r, &v, sizeof r); /* the bits, as SQLite keeps signed 64-bit integers */
    return r;
}

static uint64_t u64(sqlite3_int64 v)
{
    uint64_t r;
    memcpy(&r, &v, sizeof r);
    return r;
}

enum cs_store_status cs_store_ident_load(struct cs_store *store, const char *workspace_id,
                                         const char *root, struct cs_store_ident **v, size_t *n,
                                         struct cs_diag *d)
{
    enum cs_store_status ret = CS_STORE_ERROR;
    sqlite3_stmt *st = NULL;
    struct cs_store_ident *out = NULL;
    size_t k = 0, cap = 0;
    int rc = sqlite3_prepare_v2(store->db,
                                "SELECT dev, ino, gen, btime_ns FROM deny_identities"
                                " WHERE workspace_id = ?1 AND root = ?2",
                                -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(st, 1, workspace_id, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(st, 2, root, -1, SQLITE_STATIC);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        if (k == CS_STORE_IDENT_MAX)
            break;
        if (k == cap) {
            size_t nc = cap ? 2 * cap : 64;
            struct cs_store_ident *nv = realloc(out, nc * sizeof *nv);
            if (nv == NULL) {
                cs__store_fail(d, CS_STORE_ERROR, "deny identities of %s: out of memory",
                               workspace_id);
                goto out;
            }
            out = nv;
            cap = nc;
        }
        struct cs_store_ident id = {
            u64(sqlite3_column_int64(st, 0)), u64(sqlite3_column_int64(st, 1)), 0, 0, 0, false};
        if (sqlite3_column_type(st, 2) == SQLITE_INTEGER) {
            sqlite3_int64 g = sqlite3_column_int64(st, 2);
            if (g < 0 || g > UINT32_MAX)
                continue; /* not a generation this code wrote */
            id.gen = (uint32_t)g;
            id.flags |= CS_STORE_IDENT_GEN;
        }
        if (sqlite3_column_type(st, 3) == SQLITE_INTEGER) {
            id.btime_ns = sqlite3_column_int64(st, 3);
            id.flags |= CS_STORE_IDENT_BTIME;
        }
        if (id.ino == 0)
            continue;
        out[k++] = id;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_OK) {
        cs__store_fail(d, CS_STORE_ERROR, "deny identities of %s: load failed: %s (SQLite code %d)",
                       workspace_id, sqlite3_errmsg(store->db), rc);
        goto out;
    }
    *v = out;
    *n = k;
    out = NULL;
    ret = CS_STORE_OK;
out:
    sqlite3_finalize(st);
    free(out);
    return ret;
}

enum cs_store_status cs_store_ident_save(struct cs_store *store, const char *workspace_id,
                                         const char *root, const struct cs_store_ident *v, size_t n,
                                         bool replace, struct cs_diag *d)
{
    enum cs_store_status ret = CS_STORE_ERROR;
    sqlite3_stmt *put = NULL, *del = NULL, *clear = NULL;
    const char *what = "begin";
    char now[CS_STORE_TIME_SIZE];
    cs__store_now(now);
    int rc = sqlite3_exec(store->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    bool began = rc == SQLITE_OK;
    if (rc == SQLITE_OK) {
        what = "prepare";
        rc = sqlite3_prepare_v2(store->db,
                                "INSERT OR REPLACE INTO deny_identities (workspace_id, root, dev,"
                                " ino, gen, btime_ns, learned_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6,"
                                " ?7)",
                                -1, &put, NULL);
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(store->db,
                                "DELETE FROM deny_identities WHERE workspace_id = ?1 AND root = ?2"
                                " AND dev = ?3 AND ino = ?4",
                                -1, &del, NULL);
    if (rc == SQLITE_OK && replace) {
        what = "clear";
        rc = sqlite3_prepare_v2(store->db,
                                "DELETE FROM deny_identities WHERE workspace_id = ?1 AND root = ?2",
                                -1, &clear, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_bind_text(clear, 1, workspace_id, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
            rc = sqlite3_bind_text(clear, 2, root, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
            rc = sqlite3_step(clear) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(store->db);
    }
    if (rc == SQLITE_OK)
        what = "write";
    for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
        sqlite3_stmt *s = v[i].forget ? del : put;
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        rc = sqlite3_bind_text(s, 1, workspace_id, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
            rc = sqlite3_bind_text(s, 2, root, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
            rc = sqlite3_bind_int64(s, 3, i64(v[i].dev));
        if (rc == SQLITE_OK)
            rc = sqlite3_bind_int64(s, 4, i64(v[i].ino));
        if (rc == SQLITE_OK && !v[i].forget) {
            if (v[i].flags & CS_STORE_IDENT_GEN)
                rc = sqlite3_bind_int64(s, 5, (sqlite3_int64)v[i].gen);
            if (rc == SQLITE_OK && (v[i].flags & CS_STORE_IDENT_BTIME))
                rc = sqlite3_bind_int64(s, 6, v[i].btime_ns);
            if (rc == SQLITE_OK)
                rc = sqlite3_bind_text(s, 7, now, -1, SQLITE_STATIC);
        }
        if (rc == SQLITE_OK)
            rc = sqlite3_step(s) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(store->db);
    }
    if (rc == SQLITE_OK) {
        what = "commit";
        rc = sqlite3_exec(store->db, "COMMIT", NULL, NULL, NULL);
    }
    if (rc != SQLITE_OK) {
        cs__store_fail(d, CS_STORE_ERROR, "deny identities of %s: %s failed: %s (SQLite code %d)",
                       workspace_id, what, sqlite3_errmsg(store->db), rc);
        if (began && !sqlite3_get_autocommit(store->db))
            sqlite3_exec(store->db, "ROLLBACK", NULL, NULL, NULL);
        goto out;
    }
    ret = CS_STORE_OK;
out:
    sqlite3_finalize(put);
    sqlite3_finalize(del);
    sqlite3_finalize(clear);
    return ret;
}
