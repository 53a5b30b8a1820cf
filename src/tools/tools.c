/*
 * tools: handler registration and the tools implemented so far (workspace_info). Tools whose
 * work lands later keep the core's "not implemented" answer, and workspace_info says honestly
 * that they are unavailable (cs_runtime_caps below).
 */
#include "tools.h"

#include <string.h>

/* Output ring per process (runtime.md section 5); reported once the supervisor exists. */
#define OUTPUT_RING_BYTES (256 * 1024)

static void workspace_info(void *arg, struct cs_mcp_call *call, const void *input)
{
    struct cs_tools *t = arg;
    struct csw_mcp_workspace_info_output out;
    char msg[512];
    int rc = cs_policy_workspace_info(t->cfg, &t->caps, t->version, input, &out, msg, sizeof msg);
    if (rc != 0) {
        cs_mcp_call_error(call, (enum csw_error)rc, NULL, "%s", msg);
        return;
    }
    cs_mcp_call_ok(call, &out);
    csw_mcp_workspace_info_output_free(&out);
}

int cs_tools_register(struct cs_mcp *srv, struct cs_tools *t, const struct cs_config *cfg,
                      const char *version)
{
    memset(t, 0, sizeof *t);
    t->cfg = cfg;
    t->version = version;
    /* Nothing but workspace_info is implemented yet: say so rather than promise it. */
    t->caps.files_available = false;
    t->caps.patch_available = false;
    t->caps.process_available = false;
    t->caps.uds_runner = cfg->runner == CS_CONFIG_RUNNER_UDS;
    t->caps.sandbox = false; /* no probe yet: command_sandbox none, enforcement none */
    t->caps.tty_supported = false;
    t->caps.max_live_processes = cfg->max_processes;
    t->caps.timeout_ms = cfg->process_timeout_secs * 1000;
    t->caps.output_ring_bytes = OUTPUT_RING_BYTES;
    return cs_mcp_set_tool(srv, "workspace_info", workspace_info, t);
}
