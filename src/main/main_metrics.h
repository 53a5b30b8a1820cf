/*
 * main_metrics: the gateway's Prometheus metrics (docs/operations.md, "Metrics"; workflows.md
 * section 6): tool calls by tool and result, a call-duration histogram by tool, live processes,
 * sandbox denials by kind and runner reconnects, rendered in the Prometheus text format (0.0.4)
 * for GET /metrics on the HTTP transport (--metrics). Part of the boundary (main).
 *
 * Where the numbers come from: calls and durations from the MCP core's per-call observer
 * (cs_mcp_on_call_done, through main_calls, the same reports the call log writes); denials from
 * main_calls, once per new entry of a process as it logs them; live processes and reconnects are
 * read from the tools layer (cs_tools_live_processes, struct cs_tools' runner_reconnects) when
 * the page is built. Everything runs on the loop: no locking.
 *
 * Trust: labels are tool names, error codes and denial kinds (the server's own static names),
 * escaped per the text format all the same; never an argument, path or id.
 *
 * Entry points: cs_main_metrics_new, cs_main_metrics_call, cs_main_metrics_denial,
 * cs_main_metrics_text (a cs_http_metrics_fn), cs_main_metrics_free.
 */
#ifndef CS_MAIN_METRICS_H
#define CS_MAIN_METRICS_H

#include <stddef.h>

#include "mcp_server.h"
#include "tools.h"

struct cs_main_metrics;

/* Returns new, zeroed metrics reading live processes and reconnects from t (borrowed; it must
 * outlive them), or NULL on OOM. */
struct cs_main_metrics *cs_main_metrics_new(const struct cs_tools *t);
/* Frees m. Accepts NULL. */
void cs_main_metrics_free(struct cs_main_metrics *m);
/* Counts one completed tool call (its tool, result and duration). */
void cs_main_metrics_call(struct cs_main_metrics *m, const struct cs_mcp_call_report *r);
/* Counts one denial entry of kind (an enum csw_denial_kind; others are ignored). */
void cs_main_metrics_denial(struct cs_main_metrics *m, int kind);
/* The page: a new malloc'd text with its length in *len, or NULL on OOM. arg is the
 * struct cs_main_metrics (the signature is cs_http_metrics_fn's). */
char *cs_main_metrics_text(void *arg, size_t *len);

#endif
