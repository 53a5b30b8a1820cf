/*
 * store_recover: the ledger side of apply_patch's crash recovery (docs/ledger.md "Recovery";
 * docs/contract/runtime.md §6 "Crash atomicity of apply_patch"). The patch module settles a crash
 * journal and tells the gateway the operation's final status; this records it on a row still
 * `unknown`. Kept apart from store_ledger.c (its own statements, prepared per call: recovery is
 * rare).
 *
 * Trust: the id comes from a journal file in the workspace (untrusted bytes, checked by the patch
 * module's parser); it is only ever bound as a statement parameter. Entry point: cs_store_recover.
 */
#include "store_internal.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

static int exec_bound4(sqlite3 *db, const char *sql, const char *a, const char *b, const char *c,
                       const char *e)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    const char *v[4] = {a, b, c, e};
    for (int i = 0; rc == SQLITE_OK && i < 4 && v[i] != NULL; i++)
        rc = sqlite3_bind_text(st, i + 1, v[i], (int)strlen(v[i]), SQLITE_TRANSIENT);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static int exec_bound(sqlite3 *db, const char *sql, const char *a, const char *b, const char *c)
{
    return exec_bound4(db, sql, a, b, c, NULL);
}

enum cs_store_status cs_store_recover(struct cs_store *store, const char *workspace_id,
                                      const char *id, enum csw_patch_status status, bool *changed,
                                      struct cs_diag *d)
{
    if (changed != NULL)
        *changed = false;
    if ((unsigned)status >= CSW_PATCH_STATUS__COUNT || status == CSW_PATCH_STATUS_UNKNOWN)
        return cs__store_fail(d, CS_STORE_INVALID, "operations database: recover %s: status %d", id,
                              (int)status);
    char now[CS_STORE_TIME_SIZE];
    cs__store_now(now);
    const char *what = "begin";
    int rc = sqlite3_exec(store->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        goto fail;
    what = "update";
    /* The result a lost worker's row stored says unknown: it goes, a replay answers the status. */
    /* Only a row of the workspace whose journal said so: a command can write any journal into
     * its own workspace, never settle another workspace's row. */
    rc = exec_bound4(store->db,
                     "UPDATE operations SET status = ?2, finished_at = ?3, result = NULL "
                     "WHERE id = ?1 AND status = 'unknown' AND workspace_id = ?4",
                     id, csw_patch_status_names[status], now, workspace_id);
    if (rc != SQLITE_OK)
        goto fail;
    bool settled = sqlite3_changes(store->db) == 1;
    if (settled) {
        what = "insert event";
        rc = exec_bound(store->db,
                        "INSERT INTO operation_events (operation_id, name, at) "
                        "VALUES (?1, 'recovered', ?2)",
                        id, now, NULL);
        if (rc != SQLITE_OK)
            goto fail;
    } else {
        sqlite3_stmt *st = NULL;
        what = "look up";
        rc = sqlite3_prepare_v2(store->db,
                                "SELECT 1 FROM operations WHERE id = ?1 AND workspace_id = ?2", -1,
                                &st, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_bind_text(st, 1, id, (int)strlen(id), SQLITE_TRANSIENT);
        if (rc == SQLITE_OK)
            rc =
                sqlite3_bind_text(st, 2, workspace_id, (int)strlen(workspace_id), SQLITE_TRANSIENT);
        if (rc == SQLITE_OK)
            rc = sqlite3_step(st);
        sqlite3_finalize(st);
        if (rc == SQLITE_DONE) {
            sqlite3_exec(store->db, "ROLLBACK", NULL, NULL, NULL);
            return cs__store_fail(d, CS_STORE_NOT_FOUND,
                                  "operations database: recover %s: no such operation", id);
        }
        if (rc != SQLITE_ROW)
            goto fail;
    }
    what = "commit";
    rc = sqlite3_exec(store->db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        goto fail;
    if (changed != NULL)
        *changed = settled;
    return CS_STORE_OK;
fail:;
    char msg[256];
    snprintf(msg, sizeof msg, "%s", sqlite3_errmsg(store->db));
    if (!sqlite3_get_autocommit(store->db))
        sqlite3_exec(store->db, "ROLLBACK", NULL, NULL, NULL);
    return cs__store_fail(d, CS_STORE_ERROR, "operations database: recover %s: %s: %s", id, what,
                          msg);
}

enum cs_store_status cs_store_unknown_ops(struct cs_store *store, const char *workspace_id,
                                          int (*fn)(void *arg, const char *id), void *arg,
                                          struct cs_diag *d)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(store->db,
                                "SELECT id FROM operations WHERE workspace_id = ?1 AND "
                                "status = 'unknown' AND journaled = 1 ORDER BY created_at",
                                -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(st, 1, workspace_id, (int)strlen(workspace_id), SQLITE_TRANSIENT);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *id = sqlite3_column_text(st, 0);
        rc = id != NULL && fn(arg, (const char *)id) != 0 ? SQLITE_DONE : SQLITE_OK;
    }
    enum cs_store_status ret = CS_STORE_OK;
    if (rc != SQLITE_DONE)
        ret = cs__store_fail(d, CS_STORE_ERROR, "operations database: unknown rows of %s: %s",
                             workspace_id, sqlite3_errmsg(store->db));
    sqlite3_finalize(st);
    return ret;
}

enum cs_store_status cs_store_forget(struct cs_store *store, const char *id, struct cs_diag *d)
{
    /* The events go by the foreign key's cascade (foreign_keys is on, store_open.c). */
    int rc = exec_bound(store->db, "DELETE FROM operations WHERE id = ?1 AND finished_at IS NULL",
                        id, NULL, NULL);
    if (rc != SQLITE_OK)
        return cs__store_fail(d, CS_STORE_ERROR, "operations database: forget %s: %s", id,
                              sqlite3_errmsg(store->db));
    return CS_STORE_OK;
}
