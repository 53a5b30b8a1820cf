/*
 * store: the operation ledger (docs/contract/runtime.md §6, docs/contract/tools.md §3 apply_patch
 * and operation_status) on SQLite. One row per apply_patch operation: minted with status `unknown`
 * before the first write, finished with the final result. Rows never finished stay `unknown`
 * forever (after a crash too) and are never replayed as anything else. See docs/ledger.md.
 *
 * Nothing here knows about MCP, tools or patches: the tool layer mints, runs the patch, finishes,
 * and answers operation_status from cs_store_get_by_id / cs_store_get_by_key.
 *
 * Trust: the database path comes from the operator (flag or variable). The database file is
 * checked at open (SQLite header, quick_check, application id, schema version) and never replaced
 * or recreated when it fails. Ids, keys and workspace ids come from the client (schema-checked)
 * and are only ever bound as statement parameters, with their lengths. Rows read back are decoded
 * through the generated code, so a tampered row is an error, not a crash.
 *
 * Entry points: cs_store_open / cs_store_close, cs_store_mint, cs_store_finish,
 * cs_store_get_by_id / cs_store_get_by_key (operation_status), cs_store_get_result (a replay),
 * cs_store_fingerprint, cs_store_status_error. The library never logs or prints; a fallible
 * function explains a failure in d (struct cs_diag, may be NULL), under the code
 * cs_store_status_error gives its status, and writes its outputs only on success.
 *
 * Threads: a store is one SQLite connection, used from one thread at a time (the gateway loop).
 */
#ifndef CS_STORE_H
#define CS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base_diag.h"
#include "csw.h"

#define CS_STORE_ID_SIZE          40 /* "op-" + 36-character uuid + NUL */
#define CS_STORE_FINGERPRINT_SIZE 72 /* "sha256:" + 64 lowercase hex + NUL */
#define CS_STORE_TIME_SIZE        25 /* "2026-11-29T10:00:00.123Z" + NUL */
#define CS_STORE_SCHEMA_VERSION   5  /* PRAGMA user_version this code writes and understands */
#define CS_STORE_APPLICATION_ID   0x43534f50 /* PRAGMA application_id: "CSOP" */

/* What a store call returns; cs_store_status_error maps it to the catalogue. */
enum cs_store_status {
    CS_STORE_OK = 0,
    CS_STORE_KEY_EXISTS = 1, /* cs_store_mint: the key names an existing row (see existing) */
    CS_STORE_NOT_FOUND = 2,  /* no row with that id or key */
    CS_STORE_ERROR = -1,     /* SQLite, file system, memory, or a corrupt row; d says which */
    CS_STORE_INVALID = -2,   /* the caller broke this API's contract (a bug); d says how */
};

/*
 * The one mapping of enum cs_store_status to csw_error, and the code every store function puts
 * in its diag: 0 for CS_STORE_OK and CS_STORE_KEY_EXISTS (a decision for the caller, not an
 * error), CSW_ERROR_OPERATION_NOT_FOUND for CS_STORE_NOT_FOUND, CSW_ERROR_INTERNAL for
 * CS_STORE_ERROR and CS_STORE_INVALID (nothing the client sent can cause either). A caller for
 * which a missing row is the server's own inconsistency (a row it just minted or found) reports
 * CSW_ERROR_INTERNAL instead.
 */
int cs_store_status_error(enum cs_store_status st);

struct cs_store;

/* The row a key already names (cs_store_mint answering CS_STORE_KEY_EXISTS). */
struct cs_store_existing {
    char id[CS_STORE_ID_SIZE];
    char fingerprint[CS_STORE_FINGERPRINT_SIZE];
    enum csw_patch_status status;
};

/*
 * Opens (creating when missing) the ledger at path, a NUL-terminated file path or ":memory:" (a
 * private in-memory ledger that dies with the store). For a file, missing parent directories are
 * created with mode 0700. Then: the header is read and PRAGMA quick_check must answer "ok"; a
 * database written by a newer schema version, or another application's database, is refused;
 * journal_mode=WAL (checked), synchronous=FULL, foreign_keys=ON and a 5 s busy timeout are set;
 * pending migrations run, each in one transaction. A file that cannot be opened, is not SQLite, is
 * corrupt or is refused is left exactly as it was (never replaced, truncated or recreated).
 * Returns CS_STORE_OK with *out a new store (release it with cs_store_close), or CS_STORE_ERROR
 * with *out NULL and d naming the path and SQLite's error.
 */
enum cs_store_status cs_store_open(const char *path, struct cs_store **out, struct cs_diag *d);

/* Closes the connection and frees the store. Accepts NULL. */
void cs_store_close(struct cs_store *store);

/*
 * Mints an operation: one transaction inserts a row (kind "patch", status "unknown", created_at
 * now) and its "minted" event, and commits durably (synchronous=FULL) before returning, so the row
 * survives a crash during the writes that follow. workspace_id (ws_n bytes) must not be empty;
 * key (key_n bytes, not empty) may be NULL for an operation without an operation_key; fingerprint
 * is a NUL-terminated "sha256:<64 lowercase hex>" (cs_store_fingerprint).
 *
 * Returns CS_STORE_OK with id_out set to the new "op-<uuid v4>" (from getrandom(2)), or
 * CS_STORE_KEY_EXISTS when key already names a row: nothing is inserted and *existing (required
 * when key is not NULL) holds that row's id, fingerprint and status. The check and the insert are
 * one IMMEDIATE transaction, so two minters of one key cannot both insert. The caller decides:
 * same fingerprint is a replay (cs_store_get_result), another is OPERATION_KEY_CONFLICT.
 */
enum cs_store_status cs_store_mint(struct cs_store *store, const char *workspace_id, size_t ws_n,
                                   const char *key, size_t key_n, const char *fingerprint,
                                   char id_out[CS_STORE_ID_SIZE],
                                   struct cs_store_existing *existing, struct cs_diag *d);

/*
 * cs_store_mint with the id given (NUL-terminated, not empty, under CS_STORE_ID_SIZE bytes): a
 * remote worker's ledger keeps the row under the id its gateway minted (runner_exec.c), so that
 * every gateway names the operation alike. An id already taken fails (CS_STORE_ERROR).
 */
enum cs_store_status cs_store_mint_as(struct cs_store *store, const char *workspace_id, size_t ws_n,
                                      const char *key, size_t key_n, const char *fingerprint,
                                      const char *id, struct cs_store_existing *existing,
                                      struct cs_diag *d);

/*
 * Finishes the operation id (NUL-terminated): sets status, the result, finished_at (now) and adds
 * a "finished" event, in one transaction. result (borrowed, may be NULL when there is no result to
 * replay, e.g. a rejection reported as a tool error) is stored as its compact JSON; its status must
 * equal status and its operation_id must equal id. reason_unknown records reason "unknown" on the
 * event: the server finished the row without a confirmed result. Returns CS_STORE_OK,
 * CS_STORE_NOT_FOUND, CS_STORE_INVALID (result inconsistent, or the row is already finished) or
 * CS_STORE_ERROR.
 */
enum cs_store_status cs_store_finish(struct cs_store *store, const char *id,
                                     enum csw_patch_status status,
                                     const struct csw_mcp_apply_patch_output *result,
                                     bool reason_unknown, struct cs_diag *d);

/*
 * Finishes operation id as rejected, keeping the tool error it was answered with (code, message)
 * in the same transaction, so that a replay answers that error again (cs_store_get_error).
 * Returns as cs_store_finish; CS_STORE_INVALID for a code outside the catalogue.
 */
enum cs_store_status cs_store_finish_rejected(struct cs_store *store, const char *id,
                                              enum csw_error code, const char *message,
                                              struct cs_diag *d);

/*
 * The tool error operation id (NUL-terminated) was rejected with: CS_STORE_OK with *code and
 * message (NUL-terminated, cut to message_cap), CS_STORE_NOT_FOUND when there is no such row or
 * it keeps no error (not rejected, or rejected by a server before schema version 2), or
 * CS_STORE_ERROR.
 */
enum cs_store_status cs_store_get_error(struct cs_store *store, const char *id,
                                        enum csw_error *code, char *message, size_t message_cap,
                                        struct cs_diag *d);

/*
 * operation_status: fills *out (overwritten; release with csw_mcp_operation_status_output_free)
 * from the row whose id (id_n bytes) or key (key_n bytes) matches: kind, workspace, status,
 * replayed false, created_at, finished_at when finished, files and changes of the stored result
 * (empty without one) and the events in order. Returns CS_STORE_OK, CS_STORE_NOT_FOUND or
 * CS_STORE_ERROR; out is zeroed unless CS_STORE_OK.
 */
enum cs_store_status cs_store_get_by_id(struct cs_store *store, const char *id, size_t id_n,
                                        struct csw_mcp_operation_status_output *out,
                                        struct cs_diag *d);
enum cs_store_status cs_store_get_by_key(struct cs_store *store, const char *key, size_t key_n,
                                         struct csw_mcp_operation_status_output *out,
                                         struct cs_diag *d);

/*
 * A replay: fills *out (overwritten; release with csw_mcp_apply_patch_output_free) with the stored
 * result of operation id (NUL-terminated) and replayed true. A row without a stored result (still
 * unknown, or finished without one) gives its status, the id and empty files and changes: an
 * unknown row replays as unknown, never as applied. Returns CS_STORE_OK, CS_STORE_NOT_FOUND or
 * CS_STORE_ERROR; out is zeroed unless CS_STORE_OK.
 */
enum cs_store_status cs_store_get_result(struct cs_store *store, const char *id,
                                         struct csw_mcp_apply_patch_output *out, struct cs_diag *d);

/*
 * The apply_patch idempotency fingerprint: "sha256:" + lowercase hex of the SHA-256 of the
 * canonical JSON of in (borrowed), written by the input schema's generated encoder with
 * operation_key left out (it names the request; it is no part of it). Every other field is in
 * it, so a field added to schema/mcp/apply_patch.input.json is in it too. An absent optional
 * field with a schema default counts as that default (absent check_only is false) and an absent
 * map as an empty one (absent expected_versions is {}): leaving a field out and spelling out its
 * default is the same request. A field absent without a default is left out, so rows stored
 * before a new optional field existed keep their fingerprint. Canonical JSON is jansson's
 * json_dumps with JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII: keys in bytewise order, no
 * whitespace, everything outside ASCII escaped as \uXXXX. Rows already stored are keyed by this
 * text, so it must never change for an existing input (tests/unit/test_store.c pins it).
 * Returns CS_STORE_OK with out set, or CS_STORE_ERROR (input fails its schema, out of memory,
 * libcrypto failure).
 */
enum cs_store_status cs_store_fingerprint(const struct csw_mcp_apply_patch_input *in,
                                          char out[CS_STORE_FINGERPRINT_SIZE], struct cs_diag *d);

/*
 * The identity memory of a workspace's deny rules (store_ident.c; contract section 7, "The
 * remembered identities survive a restart"), keyed by workspace id and root (NUL-terminated).
 * A row is (device, inode) with the inode generation and the birth time where the file system
 * gave them (flags as fs.h's CS_FS_IDENT_*: this module does not depend on fs).
 */
#define CS_STORE_IDENT_GEN   1u
#define CS_STORE_IDENT_BTIME 2u
#define CS_STORE_IDENT_MAX   1048576 /* rows loaded per workspace (fs.h CS_FS_DENY_MAX_IDS) */
struct cs_store_ident {
    uint64_t dev, ino;
    uint32_t gen;
    int64_t btime_ns;
    unsigned flags;
    bool forget; /* cs_store_ident_save: remove this (device, inode) instead */
};

/* Loads the stored identities of (workspace_id, root) into *v (a new array, free() it; NULL
 * when *n is 0), at most CS_STORE_IDENT_MAX. Returns CS_STORE_OK or CS_STORE_ERROR. */
enum cs_store_status cs_store_ident_load(struct cs_store *store, const char *workspace_id,
                                         const char *root, struct cs_store_ident **v, size_t *n,
                                         struct cs_diag *d);

/* Applies n changes in order (an insert-or-replace, or a removal when forget), in one
 * transaction committed durably; replace first removes every stored identity of the workspace
 * (the set given is then the whole of it). Returns CS_STORE_OK or CS_STORE_ERROR (nothing
 * changed). */
enum cs_store_status cs_store_ident_save(struct cs_store *store, const char *workspace_id,
                                         const char *root, const struct cs_store_ident *v, size_t n,
                                         bool replace, struct cs_diag *d);

/*
 * Crash recovery (docs/ledger.md "Recovery"): operation id (NUL-terminated), found in a crash
 * journal and settled as status (CSW_PATCH_STATUS_APPLIED, CSW_PATCH_STATUS_ROLLED_BACK or an
 * outcome the transaction recorded), is recorded: a row still `unknown` (never finished, or
 * finished `unknown` when its worker was lost) takes status, finished_at now and a "recovered"
 * event, in one transaction. A row already holding another status is left alone (its result was
 * recorded before the crash). Returns CS_STORE_OK (also when nothing needed changing),
 * *changed (may be NULL) says whether
 * the row took the status now. CS_STORE_NOT_FOUND (no such row of workspace_id, NUL-terminated: a
 * journal of another ledger, or one a command wrote naming another workspace's row) or
 * CS_STORE_ERROR.
 */
enum cs_store_status cs_store_recover(struct cs_store *store, const char *workspace_id,
                                      const char *id, enum csw_patch_status status, bool *changed,
                                      struct cs_diag *d);

/*
 * The rows of workspace_id still `unknown` that a journaling build minted (migration 5): what a
 * crash or a lost worker left. Each id (NUL-terminated, borrowed for the call) goes to fn; a
 * non-zero return from fn stops the listing. Returns CS_STORE_OK or CS_STORE_ERROR.
 */
enum cs_store_status cs_store_unknown_ops(struct cs_store *store, const char *workspace_id,
                                          int (*fn)(void *arg, const char *id), void *arg,
                                          struct cs_diag *d);

/*
 * The row of a call that failed before its request left (nothing ran, issue 32): removed with its
 * events, so that the key runs when retried. Only a row not finished is removed. Returns
 * CS_STORE_OK (also when there was nothing to remove) or CS_STORE_ERROR.
 */
enum cs_store_status cs_store_forget(struct cs_store *store, const char *id, struct cs_diag *d);

/* Helpers the unit tests call directly. */

/* Writes a fresh "op-<uuid v4>" from getrandom(2). Returns 0, or -1 (getrandom failed). */
int cs__store_new_id(char out[CS_STORE_ID_SIZE]);

/* Writes the current time as RFC 3339 UTC with milliseconds ("2026-11-29T10:00:00.123Z"). */
void cs__store_now(char out[CS_STORE_TIME_SIZE]);

/* cs_store_fingerprint for a value in (borrowed) of any generated object type t, leaving out the
 * property named drop (NULL: none): lets a test run it on a variant of the apply_patch input. */
enum cs_store_status cs__store_fingerprint_of(const struct cs_wire_type *t, const void *in,
                                              const char *drop, char out[CS_STORE_FINGERPRINT_SIZE],
                                              struct cs_diag *d);

#endif
