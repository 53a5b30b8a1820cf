/*
 * main_calls: the gateway's log of tool calls (docs/operations.md, "Logs"): one `info` line per
 * completed call naming the tool, the workspace, the duration, the result and the process or
 * operation id, and one `warning` line per new denial entry a process's answers carry. Part of
 * the boundary (main), which is what logs.
 *
 * Trust: the reports come from the MCP core; inputs are client-chosen. Only ids are ever logged,
 * and only a workspace id the registry knows or an id of the server's own form ("proc-<uuid>",
 * "op-<uuid>"): never an argument value, file content, output or token.
 *
 * With metrics (--metrics), the same reports are counted (main_metrics.h): one observer, two uses.
 *
 * Entry points: cs_main_calls_new, cs_main_calls_set_metrics, cs_main_calls_report (a
 * cs_mcp_call_done_fn), cs_main_calls_free.
 */
#ifndef CS_MAIN_CALLS_H
#define CS_MAIN_CALLS_H

#include "mcp_server.h"
#include "policy.h"

struct cs_main_calls;
struct cs_main_metrics;

/* Returns a new call log for the workspaces of cfg (borrowed; it must outlive the log), or NULL
 * on OOM. */
struct cs_main_calls *cs_main_calls_new(const struct cs_config *cfg);
/* Frees it. Accepts NULL. */
void cs_main_calls_free(struct cs_main_calls *c);
/* Also counts every call, and every denial entry it logs, in m (borrowed; it must outlive c;
 * NULL: none). */
void cs_main_calls_set_metrics(struct cs_main_calls *c, struct cs_main_metrics *m);
/* The observer to pass to cs_mcp_on_call_done with c as its argument. */
void cs_main_calls_report(void *c, const struct cs_mcp_call_report *r);

#endif
