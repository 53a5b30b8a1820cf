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

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MSG_CAP 512

__attribute__((format(printf, 3, 4))) static void msgf(char *msg, size_t cap, const char *fmt, ...)
{
    if (!msg || cap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
}

int cs_patch_txn_begin(struct cs_store *store, const struct csw_mcp_apply_patch_input *in,
                       struct csw_mcp_apply_patch_output *out, char op_id[CS_STORE_ID_SIZE],
                       enum csw_error *error, char *msg, size_t msg_cap)
{
    char fp[CS_STORE_FINGERPRINT_SIZE];
    char smsg[MSG_CAP];
    memset(out, 0, sizeof *out);
    op_id[0] = '\0';
    if (cs_store_fingerprint(in, fp, smsg, sizeof smsg) != CS_STORE_OK) {
        msgf(msg, msg_cap, "fingerprint: %s", smsg);
        return CSW_ERROR_INTERNAL;
    }
    /* The row first: a replay or a key conflict is decided before anything is looked at. */
    struct cs_store_existing ex;
    enum cs_store_status ss = cs_store_mint(store, in->workspace_id.s, in->workspace_id.n,
                                            in->has_operation_key ? in->operation_key.s : NULL,
                                            in->has_operation_key ? in->operation_key.n : 0, fp,
                                            op_id, &ex, smsg, sizeof smsg);
    if (ss == CS_STORE_KEY_EXISTS) {
        op_id[0] = '\0';
        if (strcmp(ex.fingerprint, fp) != 0) {
            msgf(msg, msg_cap,
                 "operation_key already names operation %s, a different request (another "
                 "workspace, patch, expected_versions or check_only)",
                 ex.id);
            return CSW_ERROR_OPERATION_KEY_CONFLICT;
        }
        /* Refused with a tool error: the same error again, under the same operation_id. */
        enum cs_store_status es =
            cs_store_get_error(store, ex.id, error, msg, msg_cap, smsg, sizeof smsg);
        if (es == CS_STORE_OK) {
            memcpy(op_id, ex.id, CS_STORE_ID_SIZE);
            return CS_PATCH_TXN_REPLAYED_ERROR;
        }
        if (es != CS_STORE_NOT_FOUND) {
            msgf(msg, msg_cap, "replay of %s: %s", ex.id, smsg);
            memcpy(op_id, ex.id, CS_STORE_ID_SIZE);
            return CSW_ERROR_INTERNAL;
        }
        if (cs_store_get_result(store, ex.id, out, smsg, sizeof smsg) != CS_STORE_OK) {
            msgf(msg, msg_cap, "replay of %s: %s", ex.id, smsg);
            memcpy(op_id, ex.id, CS_STORE_ID_SIZE);
            return CSW_ERROR_INTERNAL;
        }
        return CS_PATCH_TXN_REPLAYED;
    }
    if (ss != CS_STORE_OK) {
        op_id[0] = '\0';
        msgf(msg, msg_cap, "ledger: %s", smsg);
        return CSW_ERROR_INTERNAL;
    }
    return 0;
}
