/*
 * tools: handler registration and every tool: workspace_info, read, find, apply_patch,
 * operation_status, and exec_command and the process tools over the supervisor.
 * Tools whose work lands later keep the core's "not implemented" answer, and workspace_info says
 * honestly that they are unavailable (cs_runtime_caps below).
 */
#include "tools.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"
#include "patch_txn.h"
#include "supervisor.h"

/* fs cannot see policy (it will run in the runner too): the caps it enforces must be the ones
 * workspace_info advertises. */
_Static_assert(CS_FS_READ_MAX_BYTES == CS_POLICY_READ_MAX_BYTES, "read cap differs");
_Static_assert(CS_FS_FIND_MAX_PATHS == CS_POLICY_FIND_MAX_PATHS, "find cap differs");

/* Process limits of runtime.md section 5 that are not configurable. */
#define OUTPUT_RING_BYTES (256 * 1024)     /* output kept per process */
#define RETAIN_MS         (15 * 60 * 1000) /* an exited handle lives this long ... */
#define RETAIN_MAX        64               /* ... and at most this many of them */
#define KILL_GRACE_MS     2000             /* terminate_process: SIGTERM, then SIGKILL */

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
    cs_supervisor_free(t->sup);
    t->sup = NULL;
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

/* ---- the workspace lease ---- */

/*
 * Takes the lease of ws for call: 0 when it was free (the caller now holds it and must call
 * lease_done after running), 1 when a mutation holds it and the call was queued (FIFO;
 * lease_done runs it later, and the input lives until the call completes), or a catalogue code
 * with the call not queued: WORKSPACE_BUSY (a live process holds it), RESOURCE_QUEUE_FULL.
 */
static int lease_acquire(struct cs_tools_lease *l, struct cs_mcp_call *call, const void *input,
                         cs_tools_locked_fn run)
{
    switch (l->state) {
    case CS_TOOLS_LEASE_FREE:
        l->state = CS_TOOLS_LEASE_HELD;
        return 0;
    case CS_TOOLS_LEASE_LIVE:
        return CSW_ERROR_WORKSPACE_BUSY;
    case CS_TOOLS_LEASE_HELD:
        break;
    }
    if (l->n_wait >= CS_TOOLS_LEASE_MAX_WAITERS)
        return CSW_ERROR_RESOURCE_QUEUE_FULL;
    size_t slot = (l->head + l->n_wait) % CS_TOOLS_LEASE_MAX_WAITERS;
    l->wait[slot].call = call;
    l->wait[slot].input = input;
    l->wait[slot].run = run;
    l->n_wait++;
    return 1;
}

static void lease_refuse(struct cs_tools_lease *l, struct cs_mcp_call *call, int code)
{
    if (code == CSW_ERROR_WORKSPACE_BUSY)
        cs_mcp_call_error(call, CSW_ERROR_WORKSPACE_BUSY, NULL,
                          "a live process (%s) holds this workspace until it exits; poll it with "
                          "process_status or stop it with terminate_process",
                          l->process_id);
    else
        cs_mcp_call_error(call, (enum csw_error)code, NULL,
                          "%d calls already wait for this workspace", CS_TOOLS_LEASE_MAX_WAITERS);
}

/* A mutation holding the lease has run: release it unless a live process took it, then hand it
 * to the waiters in order. Once a process holds it, the remaining waiters fail WORKSPACE_BUSY. */
static void lease_done(struct cs_tools_lease *l)
{
    if (l->state == CS_TOOLS_LEASE_HELD)
        l->state = CS_TOOLS_LEASE_FREE;
    while (l->n_wait > 0) {
        struct cs_mcp_call *call = l->wait[l->head].call;
        const void *input = l->wait[l->head].input;
        cs_tools_locked_fn run = l->wait[l->head].run;
        l->head = (l->head + 1) % CS_TOOLS_LEASE_MAX_WAITERS;
        l->n_wait--;
        if (l->state == CS_TOOLS_LEASE_LIVE) {
            lease_refuse(l, call, CSW_ERROR_WORKSPACE_BUSY);
            continue;
        }
        l->state = CS_TOOLS_LEASE_HELD;
        run(l->t, l->ws, call, input);
        if (l->state == CS_TOOLS_LEASE_HELD)
            l->state = CS_TOOLS_LEASE_FREE;
    }
}

/* The supervisor's exit callback: the live process holding the lease has finished. */
static void lease_process_exit(void *arg, const char *process_id)
{
    struct cs_tools_lease *l = arg;
    (void)process_id;
    l->state = CS_TOOLS_LEASE_FREE;
    l->process_id[0] = '\0';
    lease_done(l);
}

/* Runs run under ws's lease: now, queued, or refused. */
static void with_lease(struct cs_tools *t, const struct cs_workspace *ws, struct cs_mcp_call *call,
                       const void *input, cs_tools_locked_fn run)
{
    struct cs_tools_lease *l = &t->leases[ws - t->cfg->workspaces];
    int rc = lease_acquire(l, call, input, run);
    if (rc == 1)
        return; /* queued: lease_done runs it */
    if (rc != 0) {
        lease_refuse(l, call, rc);
        return;
    }
    run(t, ws, call, input);
    lease_done(l);
}

/* The gate of the mutating tools: WORKSPACE_NOT_FOUND, then UNAUTHORIZED (read-only profile,
 * linux-container environment), which never carries an operation_id. */
static const struct cs_workspace *mutation_gate(struct cs_tools *t, struct cs_mcp_call *call,
                                                const struct cs_str *id,
                                                enum cs_policy_access access)
{
    char msg[512];
    const struct cs_workspace *ws = cs_config_workspace(t->cfg, id->s, id->n);
    if (ws == NULL) {
        cs_mcp_call_error(call, CSW_ERROR_WORKSPACE_NOT_FOUND, NULL,
                          "no workspace is registered under this workspace_id");
        return NULL;
    }
    int rc = cs_workspace_check(ws, access, msg, sizeof msg);
    if (rc != 0) {
        cs_mcp_call_error(call, (enum csw_error)rc, NULL, "%s", msg);
        return NULL;
    }
    return ws;
}

/* ---- apply_patch ---- */

static void apply_patch_locked(struct cs_tools *t, const struct cs_workspace *ws,
                               struct cs_mcp_call *call, const void *input)
{
    const struct csw_mcp_apply_patch_input *in = input;
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
    const struct cs_workspace *ws =
        mutation_gate(t, call, &in->workspace_id, CS_POLICY_ACCESS_WRITE);
    if (ws)
        with_lease(t, ws, call, input, apply_patch_locked);
}

/* ---- exec_command and the process tools ---- */

/* Completes an MCP call from a supervisor answer. */
static void call_done(void *arg, int code, const char *msg, const void *out)
{
    struct cs_mcp_call *call = arg;
    if (code != 0)
        cs_mcp_call_error(call, (enum csw_error)code, NULL, "%s", msg ? msg : "");
    else
        cs_mcp_call_ok(call, out);
}

static void exec_locked(struct cs_tools *t, const struct cs_workspace *ws, struct cs_mcp_call *call,
                        const void *input)
{
    const struct csw_mcp_exec_command_input *in = input;
    struct cs_tools_lease *l = &t->leases[ws - t->cfg->workspaces];
    char id[CS_SUPERVISOR_ID_SIZE];
    char msg[512];
    if (cs_supervisor_new_id(id) != 0) {
        cs_mcp_call_error(call, CSW_ERROR_INTERNAL, NULL, "no random source for a process_id");
        return;
    }
    struct cs_supervisor_spawn sp = {
        .process_id = id,
        .root = ws->root,
        .argv = in->command.v,
        .argc = in->command.n,
        .tty = in->has_tty && in->tty,
        .yield_ms = in->has_yield_ms ? in->yield_ms : 0,
        .on_exit = lease_process_exit,
        .exit_arg = l,
    };
    /* Mark the lease live first: with yield_ms 0 the call completes inside the spawn. The exit
     * callback never runs inside it. */
    l->state = CS_TOOLS_LEASE_LIVE;
    snprintf(l->process_id, sizeof l->process_id, "%s", id);
    int rc = cs_supervisor_spawn(t->sup, &sp, call_done, call, msg, sizeof msg);
    if (rc != 0) {
        /* Nothing started: the lease goes at once (lease_done). */
        l->state = CS_TOOLS_LEASE_HELD;
        l->process_id[0] = '\0';
        cs_mcp_call_error(call, (enum csw_error)rc, NULL, "%s", msg);
    }
}

static void exec_command_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    struct cs_tools *t = arg;
    const struct csw_mcp_exec_command_input *in = input;
    const struct cs_workspace *ws =
        mutation_gate(t, call, &in->workspace_id, CS_POLICY_ACCESS_EXEC);
    if (!ws)
        return;
    if (in->command.n == 0 || in->command.v[0].n == 0) {
        cs_mcp_call_error(call, CSW_ERROR_INVALID_COMMAND, NULL,
                          in->command.n == 0 ? "command is empty: give at least the program"
                                             : "command[0] is empty: name the program to run");
        return;
    }
    with_lease(t, ws, call, input, exec_locked);
}

static void write_stdin_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    cs_supervisor_write_stdin(((struct cs_tools *)arg)->sup, input, call_done, call);
}

static void read_process_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    cs_supervisor_read(((struct cs_tools *)arg)->sup, input, call_done, call);
}

static void process_status_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    cs_supervisor_status(((struct cs_tools *)arg)->sup, input, call_done, call);
}

static void process_resize_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    cs_supervisor_resize(((struct cs_tools *)arg)->sup, input, call_done, call);
}

static void terminate_process_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    cs_supervisor_terminate(((struct cs_tools *)arg)->sup, input, call_done, call);
}

/* ---- operation_status ---- */

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
                      const char *version, struct cs_store *store, struct cs_loop *loop)
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
    for (size_t i = 0; i < cfg->n_workspaces; i++) {
        t->leases[i].t = t;
        t->leases[i].ws = &cfg->workspaces[i];
    }
    const char *path = getenv("PATH");
    const char *tmpdir = getenv("TMPDIR");
    struct cs_supervisor_limits lim = {
        .max_live = cfg->max_processes,
        .timeout_ms = cfg->process_timeout_secs * 1000,
        .ring_bytes = OUTPUT_RING_BYTES,
        .retain_ms = RETAIN_MS,
        .retain_max = RETAIN_MAX,
        .kill_grace_ms = KILL_GRACE_MS,
        .path = path && path[0] ? path : NULL,
        .tmpdir = tmpdir && tmpdir[0] == '/' ? tmpdir : NULL,
    };
    t->sup = cs_supervisor_new(loop, &lim);
    if (!t->sup)
        return -1;
    /* Files (src/fs), patches (src/patch, src/store) and processes (src/supervisor, running
     * unsandboxed in this process: no sandbox probe yet, so command_sandbox none). */
    t->caps.files_available = true;
    t->caps.patch_available = true;
    t->caps.process_available = true;
    t->caps.uds_runner = cfg->runner == CS_CONFIG_RUNNER_UDS;
    t->caps.sandbox = false; /* no probe yet: command_sandbox none, enforcement none */
    t->caps.tty_supported = true;
    t->caps.max_live_processes = cfg->max_processes;
    t->caps.timeout_ms = cfg->process_timeout_secs * 1000;
    t->caps.output_ring_bytes = OUTPUT_RING_BYTES;
    if (cs_mcp_set_tool(srv, "workspace_info", workspace_info, t) != 0 ||
        cs_mcp_set_tool(srv, "read", read_tool, t) != 0 ||
        cs_mcp_set_tool(srv, "find", find_tool, t) != 0 ||
        cs_mcp_set_tool(srv, "apply_patch", apply_patch_tool, t) != 0 ||
        cs_mcp_set_tool(srv, "operation_status", operation_status_tool, t) != 0 ||
        cs_mcp_set_tool(srv, "exec_command", exec_command_tool, t) != 0 ||
        cs_mcp_set_tool(srv, "write_stdin", write_stdin_tool, t) != 0 ||
        cs_mcp_set_tool(srv, "read_process", read_process_tool, t) != 0 ||
        cs_mcp_set_tool(srv, "process_status", process_status_tool, t) != 0 ||
        cs_mcp_set_tool(srv, "process_resize", process_resize_tool, t) != 0 ||
        cs_mcp_set_tool(srv, "terminate_process", terminate_process_tool, t) != 0)
        return -1;
    return 0;
}
