/*
 * patch_txn: apply_patch's transaction (docs/contract/patch.md section 2; docs/patch-format.md
 * "Transactions"). Checks expected_versions, parses the patch (patch.h), normalises and preflights
 * every path through the fs layer with no write, then, unless check_only, writes every new content
 * to a temporary file beside its target, fsyncs and renames it into place, verifies the hashes on
 * disk and restores the snapshots on any failure. The ledger row (store.h) is minted before any
 * of that, so an error raised afterwards carries its operation_id, and is finished with the final
 * result.
 *
 * Trust: the workspace root comes from the operator's registry and the caller has checked the
 * workspace policy; the input (patch text, paths, versions, key) is the client's. Every file
 * access goes through cs_fs_open_beneath from a root fd (no symlink is ever followed), and every
 * write, mkdir, rename and unlink is relative to a directory fd that open returned.
 *
 * Entry points: cs_patch_txn_apply, cs_patch_txn_begin. The library never logs. Serialization (one
 * transaction per workspace at a time) is the caller's lease.
 */
#ifndef CS_PATCH_TXN_H
#define CS_PATCH_TXN_H

#include <stdbool.h>
#include <stddef.h>

#include "base_cancel.h"
#include "base_diag.h"
#include "csw.h"
#include "store.h"

/* Largest file (bytes) a patch reads, snapshots or writes: FILE_OPERATION_FAILED past it. */
#define CS_PATCH_TXN_MAX_FILE (64u * 1024u * 1024u)

/*
 * The transaction in two halves, as the runner applies the patch (possibly in the uds worker)
 * while the ledger stays with the gateway:
 *
 * cs_patch_txn_begin (patch_ledger.c) mints the ledger row for in. Returns 0 (op_id set: apply,
 * then the caller finishes the row with cs_store_finish, or cs_store_finish_rejected when the
 * patch is refused with a tool error),
 * CS_PATCH_TXN_REPLAYED (the key names the same request: *out holds the recorded result; done),
 * CS_PATCH_TXN_REPLAYED_ERROR (the key names the same request, which was refused with a tool
 * error: *error and diag hold it and op_id its operation; done), or an enum csw_error value with
 * diag set (op_id "" unless the error carries one).
 */
#define CS_PATCH_TXN_REPLAYED       (-1)
#define CS_PATCH_TXN_REPLAYED_ERROR (-2)
int cs_patch_txn_begin(struct cs_store *store, const struct csw_mcp_apply_patch_input *in,
                       struct csw_mcp_apply_patch_output *out, char op_id[CS_STORE_ID_SIZE],
                       enum csw_error *error, struct cs_diag *diag);
/* Applies in (workspace_id and operation_key are ignored) at root with no ledger. Returns 0 with
 * *out filled (operation_id empty), or an enum csw_error value (rejected before any write) with
 * diag set and *out zeroed. cancel (NULL: never) is polled between files of the version checks and
 * the preflight and once more just before the first write; when it is set there, the result is
 * CSW_ERROR_TIMEOUT and nothing was written. Once the writes have begun it is no longer looked
 * at: the transaction runs to its end (applied, or rolled back) and reports that. */
int cs_patch_txn_apply(const char *root, const struct csw_mcp_apply_patch_input *in,
                       const struct cs_cancel *cancel, struct csw_mcp_apply_patch_output *out,
                       struct cs_diag *diag);
/* As cs_patch_txn_apply, with the workspace's deny rules (docs/contract/tools.md §5; deny may be
 * NULL): a path of the patch or of expected_versions that a rule denies (added, updated, deleted,
 * moved from or to) answers CSW_ERROR_PATH_DENIED before any file is looked at, and a file whose
 * identity deny remembers (renamed or linked by a command) answers it in preflight; nothing is
 * written either way. */
struct cs_fs_deny;
int cs_patch_txn_apply_deny(const char *root, struct cs_fs_deny *deny,
                            const struct csw_mcp_apply_patch_input *in,
                            const struct cs_cancel *cancel, struct csw_mcp_apply_patch_output *out,
                            struct cs_diag *diag);
/* As cs_patch_txn_apply_deny for ledger operation op_id (NUL-terminated, or NULL/"" without one),
 * which names the crash journal so that recovery can settle that row (docs/patch-format.md
 * "Crash journal"). Before anything else, every journal a crashed transaction left in the
 * workspace is recovered (without a ledger: the gateway settles its rows itself); a journal that
 * cannot be recovered answers its error and nothing is applied. */
int cs_patch_txn_apply_op(const char *root, struct cs_fs_deny *deny, const char *op_id,
                          const struct csw_mcp_apply_patch_input *in,
                          const struct cs_cancel *cancel, struct csw_mcp_apply_patch_output *out,
                          struct cs_diag *diag);

/*
 * Crash recovery (docs/contract/runtime.md §6, "Crash atomicity of apply_patch"). Every journal
 * under root/.cs-patch-journal is settled: an outcome already recorded is kept; otherwise the
 * operation is rolled forward when every new file is in place (judged by metadata alone) and
 * back otherwise (the kept old files renamed back, new files and created directories removed).
 * fn (may be NULL) is told each operation id with its final status (CSW_PATCH_STATUS_APPLIED,
 * CSW_PATCH_STATUS_ROLLED_BACK, or the outcome the transaction recorded) and returns 0 once it
 * has recorded it; only then is the journal removed, so a crash anywhere in the recovery ends the
 * same way on the next try. Recovery never reads a workspace file's content, and never touches a
 * path that deny (may be NULL) denies. Returns 0 (*n_recovered journals settled; may be NULL), or
 * a csw_error with diag naming the journal file and what to do (corrupt, another version, a
 * denied path, a failed restore): that journal is left as it was.
 */
typedef int (*cs_patch_recovered_fn)(void *arg, const char *op_id, enum csw_patch_status status);
int cs_patch_journal_recover(const char *root, struct cs_fs_deny *deny, cs_patch_recovered_fn fn,
                             void *arg, unsigned *n_recovered, struct cs_diag *diag);
/* Removes operation op_id's journal once its outcome is recorded there and in the ledger. Best
 * effort; a journal without an outcome is left for recovery. */
void cs_patch_journal_settle(const char *root, const char *op_id);
/*
 * The journals of a workspace whose ledger is elsewhere (a remote worker's: the gateway holds the
 * rows; docs/patch-format.md, "Crash journal"). First each journal of settle that holds its
 * outcome is removed (its row records it now); then every unfinished journal is recovered as
 * cs_patch_journal_recover does, its outcome written and the journal kept; then fn is told the
 * status of every journal holding an outcome (not those of this process's transactions in
 * progress), and CSW_PATCH_STATUS_UNKNOWN for each id of ask that no journal names (nothing of it
 * was written, unless its patch is still to run: the caller leaves out the ids in flight).
 * Returns 0, or a csw_error with diag (a journal that cannot be recovered, as
 * cs_patch_journal_recover says; or fn's failure).
 */
int cs_patch_journal_outcomes(const char *root, struct cs_fs_deny *deny, const char *const *settle,
                              size_t n_settle, const char *const *ask, size_t n_ask,
                              cs_patch_recovered_fn fn, void *arg, struct cs_diag *diag);
/* Writes len bytes at data to fd whole (EINTR retried). Returns 0, or -1 with errno set. */
int cs__patch_write_all(int fd, const char *data, size_t len);
#endif
