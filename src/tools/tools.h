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

/* What the handlers share; borrowed by the handlers for the server's lifetime. */
struct cs_tools {
    const struct cs_config *cfg;
    struct cs_runtime_caps caps; /* what this build and runner really offer */
    const char *version;
    struct cs_mcp_cached **info; /* workspace_info answers, encoded once (see tools.c) */
    size_t n_info;
};

/* Fills t->caps from what this build implements and cfg, and sets the handlers of every
 * implemented tool on srv (the others keep answering "not implemented"). Returns 0 or -1. */
int cs_tools_register(struct cs_mcp *srv, struct cs_tools *t, const struct cs_config *cfg,
                      const char *version);
/* Releases what the handlers cached. Call after the last call completed. */
void cs_tools_free(struct cs_tools *t);

#endif
