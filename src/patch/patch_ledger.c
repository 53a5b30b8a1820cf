/*
 * patch_ledger: apply_patch's ledger side (docs/contract/patch.md §1, docs/contract/runtime.md §6):
 * mint the row before anything is looked at (a replay or a key conflict is decided there), and
 * finish it with the outcome of cs_patch_txn_apply, which may have run in this process or in the
 * uds worker. Kept apart from patch_txn.c so the worker, which applies patches but owns no ledger,
 * links no database.
 *
 * Trust: as patch_txn.h. Entry point: cs_patch_txn_begin (the tool layer finishes the row).
 */
#include "patch_txn.h"

#include <string.h>

int cs_patch_txn_begin(struct cs_store *store, const struct csw_mcp_apply_patch_input *in,
                       struct csw_mcp_apply_patch_output *out, char op_id[CS_STORE_ID_SIZE],
                       enum csw_error *error, struct cs_diag *diag)
{
    char fp[CS_STORE_FINGERPRINT_SIZE];
    struct cs_diag sd = {0}; /* the store's own account, quoted in diag */
    memset(out, 0, sizeof *out);
    op_id[0] = '\0';
    if (cs_store_fingerprint(in, fp, &sd) != CS_STORE_OK) {
        return cs_diag_set(diag, sd.code, "fingerprint: %s", sd.text);
    }
    /* The row first: a replay or a key conflict is decided before anything is looked at. */
    struct cs_store_existing ex;
    enum cs_store_status ss =
        cs_store_mint(store, in->workspace_id.s, in->workspace_id.n,
                      in->has_operation_key ? in->operation_key.s : NULL,
                      in->has_operation_key ? in->operation_key.n : 0, fp, op_id, &ex, &sd);
    if (ss == CS_STORE_KEY_EXISTS) {
        op_id[0] = '\0';
        if (strcmp(ex.fingerprint, fp) != 0) {
            return cs_diag_set(diag, CSW_ERROR_OPERATION_KEY_CONFLICT,
                               "operation_key already names operation %s, a different request "
                               "(another workspace, patch, expected_versions or check_only)",
                               ex.id);
        }
        /* Refused with a tool error: the same error again, under the same operation_id. */
        char stored[CS_DIAG_TEXT_SIZE];
        enum cs_store_status es =
            cs_store_get_error(store, ex.id, error, stored, sizeof stored, &sd);
        if (es == CS_STORE_OK) {
            cs_diag_set(diag, *error, "%s", stored);
            memcpy(op_id, ex.id, CS_STORE_ID_SIZE);
            return CS_PATCH_TXN_REPLAYED_ERROR;
        }
        /* The row was just found: a read that fails now, even as NOT_FOUND, is the server's
         * own failure (INTERNAL), not the client's unknown operation. */
        if (es != CS_STORE_NOT_FOUND) {
            memcpy(op_id, ex.id, CS_STORE_ID_SIZE);
            return cs_diag_set(diag, CSW_ERROR_INTERNAL, "replay of %s: %s", ex.id, sd.text);
        }
        if (cs_store_get_result(store, ex.id, out, &sd) != CS_STORE_OK) {
            memcpy(op_id, ex.id, CS_STORE_ID_SIZE);
            return cs_diag_set(diag, CSW_ERROR_INTERNAL, "replay of %s: %s", ex.id, sd.text);
        }
        return CS_PATCH_TXN_REPLAYED;
    }
    if (ss != CS_STORE_OK) {
        op_id[0] = '\0';
        return cs_diag_set(diag, sd.code, "ledger: %s", sd.text);
    }
    return 0;
}
