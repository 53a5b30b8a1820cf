/*
 * tools_recover: apply_patch's crash recovery at the gateway (docs/contract/runtime.md §6 "Crash
 * atomicity of apply_patch"; docs/patch-format.md "Crash journal"). For every workspace whose
 * root this gateway reaches (in-process and uds runners; not a remote worker's), the journals a
 * crash left are settled at start, and again after a lost uds worker before the next call on that
 * workspace; each settled operation's ledger row takes its status (cs_store_recover). A journal
 * that cannot be recovered stops that workspace only: every call on it answers the reason.
 *
 * A remote worker's journals are its own: after a start and after every link made again, the
 * gateway asks the worker (runner op patch_outcomes) what became of its rows still unknown, and
 * operation_status asks before it answers unknown for such a row.
 *
 * Entry points: cs__tools_recover_init, cs__tools_recover_free, cs__tools_recover_gate,
 * cs__tools_recover_mark, cs__tools_recover_local, cs__tools_recover_ask.
 */
#ifndef CS_TOOLS_RECOVER_H
#define CS_TOOLS_RECOVER_H

#include <stdbool.h>
#include <stddef.h>

#include "base_diag.h"

struct cs_tools;
struct cs_mcp_call;

/* Allocates the per-workspace state (cs_tools_recover, tools.h, runs the start's recovery).
 * Returns 0, or non-zero (out of memory) with err set. */
int cs__tools_recover_init(struct cs_tools *t, struct cs_diag *err);
void cs__tools_recover_free(struct cs_tools *t);
/* Whether the gateway reaches workspace i's files (it recovers them). */
bool cs__tools_recover_local(const struct cs_tools *t, size_t i);
/* Marks local workspace i (every local one when i is (size_t)-1) for recovery before its next
 * call (a lost uds worker). */
void cs__tools_recover_mark(struct cs_tools *t, size_t i);
/* Before a call on workspace i: runs a pending recovery; returns true when the workspace is
 * stopped, after completing call with the reason. */
bool cs__tools_recover_gate(struct cs_tools *t, size_t i, struct cs_mcp_call *call);
/* Runs every pending recovery (operation_status: a row a lost worker left unknown is settled
 * before it is reported). */
void cs__tools_recover_pending(struct cs_tools *t);

/* The ledger rows in flight (struct cs_tools' patching): add returns 0 or -1 (out of memory). */
int cs__tools_patching_add(struct cs_tools *t, const char *op_id);
void cs__tools_patching_remove(struct cs_tools *t, const char *op_id);
/* Whether workspace i is placed on a remote worker, whose crash journals the gateway cannot
 * reach: their outcomes come over the runner (patch_outcomes). */
bool cs__tools_recover_remote(const struct cs_tools *t, size_t i);
/* Asks the remote worker of workspace i what became of the rows of i still unknown and not in
 * flight (rolled back or forward by the worker's recovery, or absent: nothing written), records
 * the answers (cs_store_recover), then tells the worker to remove the settled journals, with
 * settle_id (may be NULL: an operation just recorded) among them. then (may be NULL) runs once the
 * answers are recorded, or the exchange failed, with arg. */
void cs__tools_recover_ask(struct cs_tools *t, size_t i, const char *settle_id,
                           void (*then)(void *arg), void *arg);
/* cs__tools_recover_ask on every remote workspace (a start, a worker's link made again). */
void cs__tools_recover_ask_all(struct cs_tools *t);

#endif
