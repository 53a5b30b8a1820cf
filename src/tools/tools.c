/*
 * tools: handler registration and the tools implemented so far (workspace_info, read, find,
 * apply_patch, operation_status).
 * Tools whose work lands later keep the core's "not implemented" answer, and workspace_info says
 * honestly that they are unavailable (cs_runtime_caps below).
 */
#include "tools.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"
#include "patch_txn.h"

/* fs cannot see policy (it will run in the runner too): the caps it enforces must be the ones
 * workspace_info advertises. */
_Static_assert(CS_FS_READ_MAX_BYTES == CS_POLICY_READ_MAX_BYTES, "read cap differs");
_Static_assert(CS_FS_FIND_MAX_PATHS == CS_POLICY_FIND_MAX_PATHS, "find cap differs");

/* Output ring per process (runtime.md section 5); reported once the supervisor exists. */
#define OUTPUT_RING_BYTES (256 * 1024)

/*
 * workspace_info depends only on the registry and the runtime's capabilities, both fixed while
 * the server runs, so each answer is encoded (and checked against the outputSchema) once, the
 * first time it is asked for, and shared by every later reply: slot 0 is "no workspace_id",
 * slot i + 1 the registry's workspace i.
 */
static void workspace_info(void *arg, struct cs_mcp_call *call, const void *input)
{
    struct cs_tools *t = arg;
    const struct csw_mcp_workspace_info_input *in = input;
    size_t slot = 0;
    if (in->has_workspace_id && in->workspace_id.n > 0) {
        const struct cs_workspace *ws =
            cs_config_workspace(t->cfg, in->workspace_id.s, in->workspace_id.n);
        if (ws)
            slot = (size_t)(ws - t->cfg->workspaces) + 1;
        else
            slot = SIZE_MAX; /* unknown: the builder reports it; nothing to cache */
    }
    if (slot != SIZE_MAX && slot < t->n_info && t->info[slot]) {
        cs_mcp_call_ok_cached(call, t->info[slot]);
        return;
    }
    struct csw_mcp_workspace_info_output out;
    char msg[512];
    int rc = cs_policy_workspace_info(t->cfg, &t->caps, t->version, in, &out, msg, sizeof msg);
    if (rc != 0) {
        cs_mcp_call_error(call, (enum csw_error)rc, NULL, "%s", msg);
        return;
    }
    json_t *j = NULL;
    struct cs_wire_diag diag;
    if (slot < t->n_info && csw_mcp_workspace_info_output_encode(&out, &j, &diag) == CS_WIRE_OK)
        t->info[slot] = cs_mcp_cached_new(j);
    json_decref(j);
    if (slot < t->n_info && t->info[slot])
        cs_mcp_call_ok_cached(call, t->info[slot]);
    else
        cs_mcp_call_ok(call, &out); /* reports the encoder's complaint, or OOM, as usual */
    csw_mcp_workspace_info_output_free(&out);
}

void cs_tools_free(struct cs_tools *t)
{
    for (size_t i = 0; i < t->n_info; i++)
        cs_mcp_cached_free(t->info[i]);
    free(t->info);
    t->info = NULL;
    t->n_info = 0;
    free(t->leases);
    t->leases = NULL;
}

/*
 * The gate of the file tools: the workspace must exist (WORKSPACE_NOT_FOUND) and allow reading
 * from an exec path (UNAUTHORIZED; a linux-container workspace fails closed). Neither error ever
 * carries an operation_id. Returns the workspace, or NULL once the call is completed.
 */
static const struct cs_workspace *read_gate(struct cs_tools *t, struct cs_mcp_call *call,
                                            const struct cs_str *id)
{
    char msg[512];
    const struct cs_workspace *ws = cs_config_workspace(t->cfg, id->s, id->n);
    if (ws == NULL) {
        cs_mcp_call_error(call, CSW_ERROR_WORKSPACE_NOT_FOUND, NULL,
                          "no workspace is registered under this workspace_id");
        return NULL;
    }
    int rc = cs_workspace_check(ws, CS_POLICY_ACCESS_READ, msg, sizeof msg);
    if (rc != 0) {
        cs_mcp_call_error(call, (enum csw_error)rc, NULL, "%s", msg);
        return NULL;
    }
    return ws;
}

static void read_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    const struct csw_mcp_read_input *in = input;
    const struct cs_workspace *ws = read_gate(arg, call, &in->workspace_id);
    if (ws == NULL)
        return;
    struct csw_mcp_read_output out;
    char msg[512];
    int rc = cs_fs_read(ws->root, in, &out, msg, sizeof msg);
    if (rc != 0) {
        cs_mcp_call_error(call, (enum csw_error)rc, NULL, "%s", msg);
        return;
    }
    cs_mcp_call_ok(call, &out);
    csw_mcp_read_output_free(&out);
}

static void find_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    const struct csw_mcp_find_input *in = input;
    const struct cs_workspace *ws = read_gate(arg, call, &in->workspace_id);
    if (ws == NULL)
        return;
    struct csw_mcp_find_output out;
    char msg[512];
    int rc = cs_fs_find(ws->root, in, &out, msg, sizeof msg);
    if (rc != 0) {
        cs_mcp_call_error(call, (enum csw_error)rc, NULL, "%s", msg);
        return;
    }
    cs_mcp_call_ok(call, &out);
    csw_mcp_find_output_free(&out);
}

/* ---- apply_patch and operation_status ---- */

/*
 * Takes a workspace's lease for call: 0 when it was free (the caller now holds it and must
 * lease_release it), 1 when it is held and the call was queued (FIFO; lease_release runs it, and
 * the input must live until then), or CSW_ERROR_RESOURCE_QUEUE_FULL when
 * CS_TOOLS_LEASE_MAX_WAITERS calls already wait. Handlers complete synchronously today, so the
 * lease is always free on arrival; a live process holding it (the supervisor) is what will queue.
 */
static int lease_acquire(struct cs_tools_lease *l, struct cs_mcp_call *call, const void *input)
{
    if (!l->busy) {
        l->busy = true;
        return 0;
    }
    if (l->n_wait >= CS_TOOLS_LEASE_MAX_WAITERS)
        return CSW_ERROR_RESOURCE_QUEUE_FULL;
    size_t slot = (l->head + l->n_wait) % CS_TOOLS_LEASE_MAX_WAITERS;
    l->wait[slot] = call;
    l->wait_input[slot] = input;
    l->n_wait++;
    return 1;
}

static void apply_patch_locked(struct cs_tools *t, const struct cs_workspace *ws,
                               struct cs_mcp_call *call,
                               const struct csw_mcp_apply_patch_input *in);

/* Releases the lease, handing it to the first waiter, which runs at once. */
static void lease_release(struct cs_tools *t, const struct cs_workspace *ws)
{
    struct cs_tools_lease *l = &t->leases[ws - t->cfg->workspaces];
    while (l->n_wait > 0) {
        struct cs_mcp_call *call = l->wait[l->head];
        const struct csw_mcp_apply_patch_input *in = l->wait_input[l->head];
        l->head = (l->head + 1) % CS_TOOLS_LEASE_MAX_WAITERS;
        l->n_wait--;
        apply_patch_locked(t, ws, call, in); /* keeps busy set while it runs */
    }
    l->busy = false;
}

static void apply_patch_locked(struct cs_tools *t, const struct cs_workspace *ws,
                               struct cs_mcp_call *call, const struct csw_mcp_apply_patch_input *in)
{
    struct csw_mcp_apply_patch_output out;
    char op_id[CS_STORE_ID_SIZE];
    char msg[512];
    int rc = cs_patch_txn_run(t->store, ws->root, in, &out, op_id, msg, sizeof msg);
    if (rc != 0) {
        cs_mcp_call_error(call, (enum csw_error)rc, op_id[0] ? op_id : NULL, "%s", msg);
        return;
    }
    cs_mcp_call_ok(call, &out);
    csw_mcp_apply_patch_output_free(&out);
}

static void apply_patch_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    struct cs_tools *t = arg;
    const struct csw_mcp_apply_patch_input *in = input;
    char msg[512];
    const struct cs_workspace *ws =
        cs_config_workspace(t->cfg, in->workspace_id.s, in->workspace_id.n);
    if (ws == NULL) {
        cs_mcp_call_error(call, CSW_ERROR_WORKSPACE_NOT_FOUND, NULL,
                          "no workspace is registered under this workspace_id");
        return;
    }
    /* UNAUTHORIZED (read-only profile, linux-container environment) comes before the ledger
     * row, so it never carries an operation_id. */
    int rc = cs_workspace_check(ws, CS_POLICY_ACCESS_WRITE, msg, sizeof msg);
    if (rc != 0) {
        cs_mcp_call_error(call, (enum csw_error)rc, NULL, "%s", msg);
        return;
    }
    struct cs_tools_lease *l = &t->leases[ws - t->cfg->workspaces];
    rc = lease_acquire(l, call, input);
    if (rc == 1)
        return; /* queued: lease_release runs it */
    if (rc != 0) {
        cs_mcp_call_error(call, (enum csw_error)rc, NULL,
                          "%d calls already wait for this workspace", CS_TOOLS_LEASE_MAX_WAITERS);
        return;
    }
    apply_patch_locked(t, ws, call, in);
    lease_release(t, ws);
}

static void operation_status_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    struct cs_tools *t = arg;
    const struct csw_mcp_operation_status_input *in = input;
    if (in->has_operation_id == in->has_operation_key) {
        cs_mcp_call_error(call, CSW_ERROR_OPERATION_NOT_FOUND, NULL,
                          "provide exactly one of operation_id or operation_key");
        return;
    }
    struct csw_mcp_operation_status_output out;
    char msg[512];
    enum cs_store_status ss = in->has_operation_id
                                  ? cs_store_get_by_id(t->store, in->operation_id.s,
                                                       in->operation_id.n, &out, msg, sizeof msg)
                                  : cs_store_get_by_key(t->store, in->operation_key.s,
                                                        in->operation_key.n, &out, msg, sizeof msg);
    if (ss == CS_STORE_NOT_FOUND) {
        cs_mcp_call_error(call, CSW_ERROR_OPERATION_NOT_FOUND, NULL, "no operation with this %s",
                          in->has_operation_id ? "operation_id" : "operation_key");
        return;
    }
    if (ss != CS_STORE_OK) {
        cs_mcp_call_error(call, CSW_ERROR_INTERNAL, NULL, "ledger: %s", msg);
        return;
    }
    cs_mcp_call_ok(call, &out);
    csw_mcp_operation_status_output_free(&out);
}

int cs_tools_register(struct cs_mcp *srv, struct cs_tools *t, const struct cs_config *cfg,
                      const char *version, struct cs_store *store)
{
    memset(t, 0, sizeof *t);
    t->cfg = cfg;
    t->version = version;
    t->info = calloc(cfg->n_workspaces + 1, sizeof *t->info);
    if (!t->info)
        return -1;
    t->n_info = cfg->n_workspaces + 1;
    t->store = store;
    t->leases = calloc(cfg->n_workspaces + 1, sizeof *t->leases);
    if (!t->leases)
        return -1;
    /* read and find (src/fs) and apply_patch (src/patch, src/store) are implemented; processes
     * are not yet: say so rather than promise them. */
    t->caps.files_available = true;
    t->caps.patch_available = true;
    t->caps.process_available = false;
    t->caps.uds_runner = cfg->runner == CS_CONFIG_RUNNER_UDS;
    t->caps.sandbox = false; /* no probe yet: command_sandbox none, enforcement none */
    t->caps.tty_supported = false;
    t->caps.max_live_processes = cfg->max_processes;
    t->caps.timeout_ms = cfg->process_timeout_secs * 1000;
    t->caps.output_ring_bytes = OUTPUT_RING_BYTES;
    if (cs_mcp_set_tool(srv, "workspace_info", workspace_info, t) != 0 ||
        cs_mcp_set_tool(srv, "read", read_tool, t) != 0 ||
        cs_mcp_set_tool(srv, "find", find_tool, t) != 0 ||
        cs_mcp_set_tool(srv, "apply_patch", apply_patch_tool, t) != 0 ||
        cs_mcp_set_tool(srv, "operation_status", operation_status_tool, t) != 0)
        return -1;
    return 0;
}
