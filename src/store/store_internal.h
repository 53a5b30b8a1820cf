/*
 * store_internal: what the ledger's two files share: the connection with its prepared
 * statements (store_open.c opens and closes it, store_ledger.c runs the queries) and the one
 * function they both report failures with (through base_diag, like every module).
 *
 * Trust: as store.h; nothing here is seen outside src/store/. Entry points: cs__store_prepare
 * (store_ledger.c, called by cs_store_open), cs__store_fail.
 */
#ifndef CS_STORE_INTERNAL_H
#define CS_STORE_INTERNAL_H

#include "store.h"

#include <sqlite3.h>

/* The statements store_ledger.c prepares at open (its stmt_sql holds their text). */
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

struct cs_store {
    sqlite3 *db;
    sqlite3_stmt *st[ST__COUNT];
};

/* Prepares every statement on store->db. Returns an SQLite code (SQLITE_OK). */
int cs__store_prepare(struct cs_store *store);

/* Records the failure st in d (may be NULL) with the printf-formatted message, under the code
 * cs_store_status_error gives st, and returns st: `return cs__store_fail(d, CS_STORE_ERROR, ...)`.
 */
enum cs_store_status cs__store_fail(struct cs_diag *d, enum cs_store_status st, const char *fmt,
                                    ...) __attribute__((format(printf, 3, 4)));

#endif
