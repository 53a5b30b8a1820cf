/*
 * patch_txn: apply_patch's transaction (contract.md section 6, "Transaction"; docs/patch-format.md
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
 * Entry point: cs_patch_txn_run. The library never logs. Serialization (one transaction per
 * workspace at a time) is the caller's lease.
 */
#ifndef CS_PATCH_TXN_H
#define CS_PATCH_TXN_H

#include <stddef.h>

#include "csw.h"
#include "store.h"

/* Largest file (bytes) a patch reads, snapshots or writes: FILE_OPERATION_FAILED past it. */
#define CS_PATCH_TXN_MAX_FILE (64u * 1024u * 1024u)

/*
 * Runs the apply_patch in (borrowed, decoded) against the workspace at root (absolute,
 * NUL-terminated) with the ledger store. Returns 0 with *out filled (release it with
 * csw_mcp_apply_patch_output_free): applied, checked, failed_rolled_back, failed_partial, or a
 * replay (replayed true). Otherwise returns an enum csw_error value with msg set and *out zeroed;
 * op_id then holds the operation_id the error carries ("" when no row exists yet).
 */
int cs_patch_txn_run(struct cs_store *store, const char *root,
                     const struct csw_mcp_apply_patch_input *in,
                     struct csw_mcp_apply_patch_output *out, char op_id[CS_STORE_ID_SIZE],
                     char *msg, size_t msg_cap);

#endif
