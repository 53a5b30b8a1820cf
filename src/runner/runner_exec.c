/*
 * runner_exec: the executor behind both runners. Runs one wire operation against the file layer
 * (src/fs), the patch engine (src/patch, without the ledger: idempotency stays with the gateway)
 * and the supervisor, and completes it with the wire result (whose data are the tools' generated
 * output structs).
 *
 * Trust: ops come from the gateway's tool layer (in-process) or from the one peer of the worker
 * (the gateway that started it); both built them after the policy checks. The executor still
 * refuses exec for a workspace that is not a writable host workspace (defence in depth).
 * Entry points: runner.h (cs_runner_exec_*).
 */
#include "runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs.h"
#include "patch_txn.h"

struct cs_runner_exec {
    struct cs_loop *loop;
    struct cs_supervisor *sup;
    void (*process_exited)(void *arg, const char *id);
    void *arg;
};

/* One supervisor request in flight: what to complete and how to wrap the output. */
struct pending {
    cs_runner_done_fn done;
    void *arg;
    enum csw_runner_wire_result_tag tag;
};

struct cs_runner_exec *cs_runner_exec_new(struct cs_loop *loop,
                                          const struct cs_supervisor_limits *lim,
                                          void (*process_exited)(void *arg, const char *id),
                                          void *arg)
{
    struct cs_runner_exec *ex = calloc(1, sizeof *ex);
    if (!ex)
        return NULL;
    ex->loop = loop;
    ex->process_exited = process_exited;
    ex->arg = arg;
    ex->sup = cs_supervisor_new(loop, lim);
    if (!ex->sup) {
        free(ex);
        return NULL;
    }
    return ex;
}

void cs_runner_exec_free(struct cs_runner_exec *ex)
{
    if (!ex)
        return;
    cs_supervisor_free(ex->sup);
    free(ex);
}

void cs_runner_exec_reap_strays(struct cs_runner_exec *ex)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    long pid;
    while (fscanf(f, "%ld", &pid) == 1)
        if (pid > 0 && !cs_supervisor_owns_pid(ex->sup, (pid_t)pid))
            (void)waitpid((pid_t)pid, NULL, WNOHANG);
    fclose(f);
}

static void fail(cs_runner_done_fn done, void *arg, int code, const char *msg)
{
    struct cs_runner_reply r = {.outcome = CS_RUNNER_ERROR, .code = code, .msg = msg};
    done(arg, &r);
}

static void ok(cs_runner_done_fn done, void *arg, const struct csw_runner_wire_result *res)
{
    struct cs_runner_reply r = {.outcome = CS_RUNNER_OK, .result = res};
    done(arg, &r);
}

/* The root as a C string (the decoder guarantees no NUL only for ids; check). */
static char *root_of(const struct csw_runner_workspace *ws)
{
    if (memchr(ws->root.s, '\0', ws->root.n))
        return NULL;
    return strndup(ws->root.s, ws->root.n);
}

/* ---- supervisor completions ---- */

static void sup_done(void *arg, int code, const char *msg, const void *out)
{
    struct pending *p = arg;
    if (code != 0) {
        fail(p->done, p->arg, code, msg);
        free(p);
        return;
    }
    struct csw_runner_wire_result res;
    memset(&res, 0, sizeof res);
    res.tag = p->tag;
    switch (p->tag) {
    case CSW_RUNNER_WIRE_RESULT_EXEC: {
        const struct csw_mcp_exec_command_output *o = out;
        struct csw_runner_wire_exec_result *e = &res.u.exec.data;
        e->process_id = o->process_id;
        e->has_state = o->has_state;
        e->state = o->state;
        e->has_output = o->has_output;
        e->output = o->output;
        e->has_cursor = o->has_cursor;
        e->cursor = o->cursor;
        e->has_output_lost = o->has_output_lost;
        e->output_lost = o->output_lost;
        e->has_exit_code = o->has_exit_code;
        e->exit_code = o->exit_code;
        e->has_termination = o->has_termination;
        e->termination = o->termination;
        break;
    }
    case CSW_RUNNER_WIRE_RESULT_WRITE_STDIN:
        res.u.write_stdin.data = *(const struct csw_mcp_write_stdin_output *)out;
        break;
    case CSW_RUNNER_WIRE_RESULT_READ_PROCESS:
        res.u.read_process.data = *(const struct csw_mcp_read_process_output *)out;
        break;
    case CSW_RUNNER_WIRE_RESULT_PROCESS_STATUS:
        res.u.process_status.data = *(const struct csw_mcp_process_status_output *)out;
        break;
    case CSW_RUNNER_WIRE_RESULT_RESIZE:
        res.u.resize.data = *(const struct csw_mcp_process_resize_output *)out;
        break;
    case CSW_RUNNER_WIRE_RESULT_TERMINATE:
        res.u.terminate.data = *(const struct csw_mcp_terminate_process_output *)out;
        break;
    case CSW_RUNNER_WIRE_RESULT_HELLO:
    case CSW_RUNNER_WIRE_RESULT_READ:
    case CSW_RUNNER_WIRE_RESULT_FIND:
    case CSW_RUNNER_WIRE_RESULT_VERSION:
    case CSW_RUNNER_WIRE_RESULT_APPLY_PATCH:
    case CSW_RUNNER_WIRE_RESULT_WORKSPACE_OF:
    case CSW_RUNNER_WIRE_RESULT_TERMINATE_WORKSPACE:
        fail(p->done, p->arg, CSW_ERROR_INTERNAL, "supervisor answered an unexpected operation");
        free(p);
        return;
    }
    ok(p->done, p->arg, &res);
    free(p);
}

static struct pending *pending_new(cs_runner_done_fn done, void *arg,
                                   enum csw_runner_wire_result_tag tag)
{
    struct pending *p = malloc(sizeof *p);
    if (!p) {
        fail(done, arg, CSW_ERROR_INTERNAL, "out of memory");
        return NULL;
    }
    p->done = done;
    p->arg = arg;
    p->tag = tag;
    return p;
}

static void exited(void *arg, const char *id)
{
    struct cs_runner_exec *ex = arg;
    if (ex->process_exited)
        ex->process_exited(ex->arg, id);
}

/* ---- operations ---- */

static void op_read(const struct csw_runner_wire_read_data *d, cs_runner_done_fn done, void *arg)
{
    char *root = root_of(&d->workspace);
    if (!root) {
        fail(done, arg, CSW_ERROR_INTERNAL, "workspace root is not a C string");
        return;
    }
    struct csw_mcp_read_input in = {
        .workspace_id = d->workspace.id,
        .path = d->path,
        .has_offset = d->has_offset,
        .offset = d->offset,
        .has_limit = d->has_limit,
        .limit = d->limit,
    };
    struct csw_runner_wire_result res = {.tag = CSW_RUNNER_WIRE_RESULT_READ};
    char msg[512];
    int rc = cs_fs_read(root, &in, &res.u.read.data, msg, sizeof msg);
    free(root);
    if (rc != 0) {
        fail(done, arg, rc, msg);
        return;
    }
    ok(done, arg, &res);
    csw_mcp_read_output_free(&res.u.read.data);
}

static void op_find(const struct csw_runner_wire_find_data *d, cs_runner_done_fn done, void *arg)
{
    char *root = root_of(&d->workspace);
    if (!root) {
        fail(done, arg, CSW_ERROR_INTERNAL, "workspace root is not a C string");
        return;
    }
    struct csw_mcp_find_input in = {
        .workspace_id = d->workspace.id,
        .has_glob = d->has_glob,
        .glob = d->glob,
        .has_offset = d->has_offset,
        .offset = d->offset,
        .has_limit = d->has_limit,
        .limit = d->limit,
    };
    struct csw_runner_wire_result res = {.tag = CSW_RUNNER_WIRE_RESULT_FIND};
    char msg[512];
    int rc = cs_fs_find(root, &in, &res.u.find.data, msg, sizeof msg);
    free(root);
    if (rc != 0) {
        fail(done, arg, rc, msg);
        return;
    }
    ok(done, arg, &res);
    csw_mcp_find_output_free(&res.u.find.data);
}

static void op_version(const struct csw_runner_wire_version_data *d, cs_runner_done_fn done,
                       void *arg)
{
    char *root = root_of(&d->workspace);
    if (!root) {
        fail(done, arg, CSW_ERROR_INTERNAL, "workspace root is not a C string");
        return;
    }
    struct csw_mcp_read_input in = {
        .workspace_id = d->workspace.id, .path = d->path, .has_limit = true, .limit = 1};
    struct csw_mcp_read_output out;
    char msg[512];
    int rc = cs_fs_read(root, &in, &out, msg, sizeof msg);
    free(root);
    struct csw_runner_wire_result res = {.tag = CSW_RUNNER_WIRE_RESULT_VERSION};
    if (rc == CSW_ERROR_FILE_NOT_FOUND) {
        res.u.version.data.version = (struct cs_str){"absent", 6};
        ok(done, arg, &res);
        return;
    }
    if (rc != 0) {
        fail(done, arg, rc, msg);
        return;
    }
    res.u.version.data.version = out.version;
    ok(done, arg, &res);
    csw_mcp_read_output_free(&out);
}

static void op_apply_patch(const struct csw_runner_wire_apply_patch_data *d, cs_runner_done_fn done,
                           void *arg)
{
    if (d->workspace.profile != CSW_RUNNER_WORKSPACE_PROFILE_WORKSPACE_WRITE) {
        fail(done, arg, CSW_ERROR_UNAUTHORIZED, "the workspace profile does not allow writes");
        return;
    }
    char *root = root_of(&d->workspace);
    if (!root) {
        fail(done, arg, CSW_ERROR_INTERNAL, "workspace root is not a C string");
        return;
    }
    /* The two expected_versions entry types are generated from the same shape. */
    _Static_assert(sizeof(struct csw_runner_wire_apply_patch_data_expected_versions_entry) ==
                       sizeof(struct csw_mcp_apply_patch_input_expected_versions_entry),
                   "expected_versions entries differ");
    struct csw_mcp_apply_patch_input in = {
        .workspace_id = d->workspace.id,
        .patch = d->patch,
        .has_expected_versions = d->has_expected_versions,
        .expected_versions = {(struct csw_mcp_apply_patch_input_expected_versions_entry *)
                                  d->expected_versions.v,
                              d->expected_versions.n},
        .has_check_only = d->has_check_only,
        .check_only = d->check_only,
    };
    struct csw_mcp_apply_patch_output out;
    char msg[512];
    int rc = cs_patch_txn_apply(root, &in, &out, msg, sizeof msg);
    free(root);
    if (rc != 0) {
        fail(done, arg, rc, msg);
        return;
    }
    struct csw_runner_wire_result res = {.tag = CSW_RUNNER_WIRE_RESULT_APPLY_PATCH};
    res.u.apply_patch.data.status = out.status;
    res.u.apply_patch.data.files.v = out.files.v;
    res.u.apply_patch.data.files.n = out.files.n;
    res.u.apply_patch.data.changes.v = out.changes.v;
    res.u.apply_patch.data.changes.n = out.changes.n;
    ok(done, arg, &res);
    csw_mcp_apply_patch_output_free(&out);
}

static void op_exec(struct cs_runner_exec *ex, const struct csw_runner_wire_exec_data *d,
                    cs_runner_done_fn done, void *arg)
{
    if (d->workspace.profile != CSW_RUNNER_WORKSPACE_PROFILE_WORKSPACE_WRITE ||
        d->workspace.environment_kind != CSW_RUNNER_WORKSPACE_ENVIRONMENT_KIND_HOST) {
        fail(done, arg, CSW_ERROR_UNAUTHORIZED,
             "the workspace is not a writable host workspace: no exec");
        return;
    }
    char *root = root_of(&d->workspace);
    char *pid = strndup(d->process_id.s, d->process_id.n);
    char *wsid = strndup(d->workspace.id.s, d->workspace.id.n);
    struct pending *p = NULL;
    if (!root || !pid || !wsid || d->process_id.n >= CS_SUPERVISOR_ID_SIZE) {
        fail(done, arg, CSW_ERROR_INTERNAL,
             !root ? "workspace root is not a C string" : "bad process_id or out of memory");
    } else if ((p = pending_new(done, arg, CSW_RUNNER_WIRE_RESULT_EXEC))) {
        struct cs_supervisor_spawn sp = {
            .process_id = pid,
            .root = root,
            .argv = d->argv.v,
            .argc = d->argv.n,
            .workspace_id = wsid,
            .writable = d->policy.workspace_profile ==
                        CSW_RUNNER_WIRE_EXEC_DATA_POLICY_WORKSPACE_PROFILE_WORKSPACE_WRITE,
            .network_enabled =
                d->policy.network == CSW_RUNNER_WIRE_EXEC_DATA_POLICY_NETWORK_ENABLED,
            .has_network_allow = d->policy.has_network_allow,
            .network_allow = d->policy.network_allow.v,
            .n_network_allow = d->policy.network_allow.n,
            .tty = d->tty,
            .timeout_ms = d->timeout_ms,
            .yield_ms = d->has_yield_ms ? d->yield_ms : 0,
            .on_exit = exited,
            .exit_arg = ex,
        };
        char msg[512];
        int rc = cs_supervisor_spawn(ex->sup, &sp, sup_done, p, msg, sizeof msg);
        if (rc != 0) {
            fail(done, arg, rc, msg);
            free(p);
        }
    }
    free(root);
    free(pid);
    free(wsid);
}

void cs_runner_exec_op(struct cs_runner_exec *ex, const struct csw_runner_wire_op *op,
                       cs_runner_done_fn done, void *arg)
{
    struct pending *p;
    switch (op->tag) {
    case CSW_RUNNER_WIRE_OP_READ:
        op_read(&op->u.read.data, done, arg);
        return;
    case CSW_RUNNER_WIRE_OP_FIND:
        op_find(&op->u.find.data, done, arg);
        return;
    case CSW_RUNNER_WIRE_OP_VERSION:
        op_version(&op->u.version.data, done, arg);
        return;
    case CSW_RUNNER_WIRE_OP_APPLY_PATCH:
        op_apply_patch(&op->u.apply_patch.data, done, arg);
        return;
    case CSW_RUNNER_WIRE_OP_EXEC:
        op_exec(ex, &op->u.exec.data, done, arg);
        return;
    case CSW_RUNNER_WIRE_OP_WRITE_STDIN:
        if ((p = pending_new(done, arg, CSW_RUNNER_WIRE_RESULT_WRITE_STDIN)))
            cs_supervisor_write_stdin(ex->sup, &op->u.write_stdin.data, sup_done, p);
        return;
    case CSW_RUNNER_WIRE_OP_READ_PROCESS:
        if ((p = pending_new(done, arg, CSW_RUNNER_WIRE_RESULT_READ_PROCESS)))
            cs_supervisor_read(ex->sup, &op->u.read_process.data, sup_done, p);
        return;
    case CSW_RUNNER_WIRE_OP_PROCESS_STATUS:
        if ((p = pending_new(done, arg, CSW_RUNNER_WIRE_RESULT_PROCESS_STATUS)))
            cs_supervisor_status(ex->sup, &op->u.process_status.data, sup_done, p);
        return;
    case CSW_RUNNER_WIRE_OP_RESIZE:
        if ((p = pending_new(done, arg, CSW_RUNNER_WIRE_RESULT_RESIZE)))
            cs_supervisor_resize(ex->sup, &op->u.resize.data, sup_done, p);
        return;
    case CSW_RUNNER_WIRE_OP_TERMINATE:
        if ((p = pending_new(done, arg, CSW_RUNNER_WIRE_RESULT_TERMINATE)))
            cs_supervisor_terminate(ex->sup, &op->u.terminate.data, sup_done, p);
        return;
    case CSW_RUNNER_WIRE_OP_WORKSPACE_OF: {
        const char *ws = cs_supervisor_workspace_of(ex->sup, &op->u.workspace_of.data.process_id);
        if (!ws) {
            fail(done, arg, CSW_ERROR_PROCESS_NOT_FOUND, "no process with this process_id");
            return;
        }
        struct csw_runner_wire_result res = {.tag = CSW_RUNNER_WIRE_RESULT_WORKSPACE_OF};
        res.u.workspace_of.data.workspace_id = (struct cs_str){(char *)ws, strlen(ws)};
        ok(done, arg, &res);
        return;
    }
    case CSW_RUNNER_WIRE_OP_TERMINATE_WORKSPACE: {
        struct csw_runner_wire_result res = {.tag = CSW_RUNNER_WIRE_RESULT_TERMINATE_WORKSPACE};
        res.u.terminate_workspace.data.count = (int64_t)cs_supervisor_terminate_workspace(
            ex->sup, &op->u.terminate_workspace.data.workspace_id);
        ok(done, arg, &res);
        return;
    }
    case CSW_RUNNER_WIRE_OP_HELLO:
    case CSW_RUNNER_WIRE_OP_REPLAY:
        break;
    }
    fail(done, arg, CSW_ERROR_INTERNAL, "hello and replay belong to the connection");
}
