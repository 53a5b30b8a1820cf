/*
 * store_internal: what the ledger's two files share: the connection with its prepared
 * statements (store_open.c opens and closes it, store_ledger.c runs the queries) and the one
 * message formatter they both write errors with.
 *
 * Trust: as store.h; nothing here is seen outside src/store/. Entry points: cs__store_prepare
 * (store_ledger.c, called by cs_store_open), msgf.
 */
#ifndef CS_STORE_INTERNAL_H
#define CS_STORE_INTERNAL_H

#include "store.h"

#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

/* Writes the formatted text into msg on one line (control bytes become spaces), then replaces
 * every byte that is not part of a well-formed UTF-8 sequence with '?' (a path may hold any
 * bytes, and truncation may cut a character), so the message is always safe to log or send. */
static inline void msgf(char *msg, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void msgf(char *msg, size_t cap, const char *fmt, ...)
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

#endif
