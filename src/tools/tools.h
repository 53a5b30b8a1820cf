/*
 * tools: the handlers behind the MCP tools. Each handler receives arguments already decoded by
 * the generated input decoder, applies the workspace policy, does the work (through the runner
 * once it exists) and completes the call with a result the output encoder checks.
 *
 * Trust: decoded arguments are well-typed but still client-chosen values (ids, paths).
 * Entry points: cs_tools_register.
 */
#ifndef CS_TOOLS_H
#define CS_TOOLS_H

#include "mcp_server.h"
#include "policy.h"
#include "store.h"

/* Most apply_patch calls waiting on one workspace's lease (runtime.md section 5); past it,
 * RESOURCE_QUEUE_FULL. */
#define CS_TOOLS_LEASE_MAX_WAITERS 64

/*
 * One workspace's mutation lease: a holder flag and a FIFO of waiting calls (a ring of at most
 * CS_TOOLS_LEASE_MAX_WAITERS). apply_patch runs synchronously today, so the lease is always free
 * when a call arrives and the FIFO stays empty; the structure and its cap are here for the
 * process supervisor, whose live processes will hold the lease across calls.
 */
struct cs_tools_lease {
    bool busy;
    struct cs_mcp_call *wait[CS_TOOLS_LEASE_MAX_WAITERS];
    const void *wait_input[CS_TOOLS_LEASE_MAX_WAITERS];
    size_t head, n_wait;
};

/* What the handlers share; borrowed by the handlers for the server's lifetime. */
struct cs_tools {
    const struct cs_config *cfg;
    struct cs_runtime_caps caps; /* what this build and runner really offer */
    const char *version;
    struct cs_mcp_cached **info; /* workspace_info answers, encoded once (see tools.c) */
    size_t n_info;
    struct cs_store *store;        /* the operation ledger (borrowed) */
    struct cs_tools_lease *leases; /* one per registry workspace, same order */
};

/* Fills t->caps from what this build implements and cfg, and sets the handlers of every
 * implemented tool on srv (the others keep answering "not implemented"). store (borrowed; it must
 * outlive every call) is the operation ledger apply_patch and operation_status use. Returns 0 or
 * -1. */
int cs_tools_register(struct cs_mcp *srv, struct cs_tools *t, const struct cs_config *cfg,
                      const char *version, struct cs_store *store);
/* Releases what the handlers cached. Call after the last call completed. */
void cs_tools_free(struct cs_tools *t);

#endif
