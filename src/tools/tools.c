/*
 * tools: handler registration and every tool: workspace_info and operation_status here, the
 * others through the runner (runner.h: in-process or uds). The tool layer owns the policy gate,
 * the per-workspace mutation lease (its state machine is tools_lease.c) and the operation ledger;
 * the runner owns the work.
 */
#include "tools.h"
#include "tools_lease.h"
#include "tools_progress.h"

#include "base_roots.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs.h"
#include "patch_txn.h"
#include "tools_recover.h"
#include "runner.h"
#include "supervisor.h"

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
    /* A workspace on a remote worker reports what that worker's last hello stated; its cached
     * answer is rebuilt once another hello has been answered. */
    struct cs_runner *remote =
        slot != SIZE_MAX && slot > 0 && t->remote ? t->remote[slot - 1] : NULL;
    struct cs_supervisor_isolation iso = {0}; /* read only for a remote workspace */
    uint64_t hellos = remote ? cs_runner_tcp_isolation(remote, &iso) : 0;
    if (remote && slot < t->n_info && t->info[slot] && t->info_hellos[slot - 1] != hellos) {
        cs_mcp_cached_free(t->info[slot]);
        t->info[slot] = NULL;
    }
    if (slot != SIZE_MAX && slot < t->n_info && t->info[slot]) {
        cs_mcp_call_ok_cached(call, t->info[slot]);
        return;
    }
    struct csw_mcp_workspace_info_output out;
    struct cs_diag msg = {0};
    /* A workspace where no command can start says so: process.available is false there. */
    struct cs_runtime_caps caps = t->caps;
    if (slot != SIZE_MAX && slot > 0 && t->no_exec && t->no_exec[slot - 1])
        caps.process_available = false;
    struct cs_worker_isolation worker = {iso.sandbox, iso.landlock_abi, iso.syscall_denials};
    if (remote && hellos > 0) {
        caps.worker = &worker;
        t->info_hellos[slot - 1] = hellos;
    }
    int rc = cs_policy_workspace_info(t->cfg, &caps, t->version, in, &out, &msg);
    if (rc != 0) {
        cs_mcp_call_error(call, (enum csw_error)rc, NULL, "%s", msg.text);
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
    t->srv = NULL; /* the processes killed below are not announced */
    cs_runner_free(t->runner);
    t->runner = NULL;
    for (size_t i = 0; i < t->n_info; i++)
        cs_mcp_cached_free(t->info[i]);
    free(t->info);
    t->info = NULL;
    t->n_info = 0;
    if (t->wsdesc) {
        for (size_t i = 0; i < t->cfg->n_workspaces; i++) {
            free(t->wsdesc[i].network_allow.v);
            free(t->wsdesc[i].deny.v);
        }
    }
    free(t->wsdesc);
    t->wsdesc = NULL;
    if (t->leases) {
        for (size_t i = 0; i < t->cfg->n_workspaces; i++)
            free(t->leases[i].live);
    }
    free(t->leases);
    t->leases = NULL;
    if (t->no_exec) {
        for (size_t i = 0; i < t->cfg->n_workspaces; i++)
            free(t->no_exec[i]);
    }
    free(t->no_exec);
    t->no_exec = NULL;
    free(t->remote);
    t->remote = NULL;
    free(t->info_hellos);
    t->info_hellos = NULL;
    cs__tools_recover_free(t);
}

/* ---- the policy gate ---- */

/*
 * The workspace must exist (WORKSPACE_NOT_FOUND) and allow access (UNAUTHORIZED: the profile, or
 * a linux-container environment, which fails closed). Neither error ever carries an
 * operation_id. Returns the workspace, or NULL once the call is completed.
 */
static const struct cs_workspace *gate(struct cs_tools *t, struct cs_mcp_call *call,
                                       const struct cs_str *id, enum cs_policy_access access)
{
    struct cs_diag msg = {0};
    const struct cs_workspace *ws = cs_config_workspace(t->cfg, id->s, id->n);
    if (ws == NULL) {
        cs_mcp_call_error(call, CSW_ERROR_WORKSPACE_NOT_FOUND, NULL,
                          "no workspace is registered under this workspace_id");
        return NULL;
    }
    int rc = cs_workspace_check(ws, access, &msg);
    if (rc != 0) {
        cs_mcp_call_error(call, (enum csw_error)rc, NULL, "%s", msg.text);
        return NULL;
    }
    /* A patch a crash interrupted is settled before any call on its workspace. */
    if (cs__tools_recover_gate(t, (size_t)(ws - t->cfg->workspaces), call))
        return NULL;
    return ws;
}

static const struct csw_runner_workspace *wsdesc(struct cs_tools *t, const struct cs_workspace *ws)
{
    return &t->wsdesc[ws - t->cfg->workspaces];
}

/* ---- runner answers ---- */

/* The MCP output inside a runner result (the wire's data are the tools' output structs). */
static const void *mcp_output_of(const struct csw_runner_wire_result *r)
{
    switch (r->tag) {
    case CSW_RUNNER_WIRE_RESULT_READ:
        return &r->u.read.data;
    case CSW_RUNNER_WIRE_RESULT_FIND:
        return &r->u.find.data;
    case CSW_RUNNER_WIRE_RESULT_WRITE_STDIN:
        return &r->u.write_stdin.data;
    case CSW_RUNNER_WIRE_RESULT_READ_PROCESS:
        return &r->u.read_process.data;
    case CSW_RUNNER_WIRE_RESULT_PROCESS_STATUS:
        return &r->u.process_status.data;
    case CSW_RUNNER_WIRE_RESULT_RESIZE:
        return &r->u.resize.data;
    case CSW_RUNNER_WIRE_RESULT_TERMINATE:
        return &r->u.terminate.data;
    case CSW_RUNNER_WIRE_RESULT_OPERATION_STATUS:
        return &r->u.operation_status.data;
    case CSW_RUNNER_WIRE_RESULT_HELLO:
    case CSW_RUNNER_WIRE_RESULT_VERSION:
    case CSW_RUNNER_WIRE_RESULT_APPLY_PATCH:
    case CSW_RUNNER_WIRE_RESULT_EXEC:
    case CSW_RUNNER_WIRE_RESULT_WORKSPACE_OF:
    case CSW_RUNNER_WIRE_RESULT_TERMINATE_WORKSPACE:
    case CSW_RUNNER_WIRE_RESULT_CANCEL:
    case CSW_RUNNER_WIRE_RESULT_PATCH_OUTCOMES:
        break;
    }
    return NULL;
}

/* Completes a call whose result is the tool's output as it is (read, find, the process tools).
 * A transport failure, before dispatch or ambiguous, is TIMEOUT: these tools change nothing the
 * client could double (a lost write_stdin may have been written: the message says so). */
static void plain_done(void *arg, const struct cs_runner_reply *r)
{
    struct cs_mcp_call *call = arg;
    const void *out;
    switch (r->outcome) {
    case CS_RUNNER_OK:
        out = mcp_output_of(r->result);
        if (out)
            cs_mcp_call_ok(call, out);
        else
            cs_mcp_call_error(call, CSW_ERROR_INTERNAL, NULL,
                              "the runner answered %s with another operation's result",
                              cs_mcp_call_tool(call));
        return;
    case CS_RUNNER_ERROR:
        cs_mcp_call_error(call, (enum csw_error)r->code, NULL, "%s", r->msg ? r->msg : "");
        return;
    case CS_RUNNER_BEFORE_DISPATCH:
    case CS_RUNNER_AMBIGUOUS:
        break;
    }
    cs_mcp_call_error(call, CSW_ERROR_TIMEOUT, NULL, "%s", r->msg ? r->msg : "runner failed");
}

/* A read or find whose reply is made on the file thread that ran it (cs_runner_prepare): quoting
 * a megabyte window twice costs as much as reading it, and on the loop thread it would hold up
 * every other client. */
struct prepared_call {
    struct cs_mcp_call *call;
    struct cs_mcp_frame *frame;
};

/* What prepared_make made: the reply text and its length. */
struct made_reply {
    char *text;
    size_t n;
};

static void *prepared_make(void *arg, const void *output)
{
    const struct prepared_call *pc = arg;
    struct made_reply *m = malloc(sizeof *m);
    if (m && !(m->text = cs_mcp_frame_reply(pc->frame, output, &m->n))) {
        free(m);
        m = NULL;
    }
    return m;
}

static void prepared_release(void *made)
{
    struct made_reply *m = made;
    free(m->text);
    free(m);
}

static void prepared_done(void *arg, const struct cs_runner_reply *r)
{
    struct prepared_call *pc = arg;
    struct cs_mcp_call *call = pc->call;
    struct made_reply *m = r->prepared;
    cs_mcp_frame_free(pc->frame);
    free(pc);
    if (m) {
        cs_mcp_call_ok_reply(call, m->text, m->n);
        free(m);
    } else {
        plain_done(call, r); /* nothing made: another runner, or the encoder's complaint */
    }
}

/* Submits op for call, with its reply made off the loop when the runner can. */
static void call_prepared(struct cs_tools *t, struct cs_mcp_call *call,
                          const struct csw_runner_wire_op *op)
{
    struct prepared_call *pc = malloc(sizeof *pc);
    struct cs_mcp_frame *f = pc ? cs_mcp_call_frame(call) : NULL;
    if (!f) {
        free(pc);
        cs_runner_call(t->runner, op, plain_done, call);
        return;
    }
    *pc = (struct prepared_call){call, f};
    struct cs_runner_prepare prep = {prepared_make, prepared_release, pc};
    cs_runner_call_prepared(t->runner, op, &prep, prepared_done, pc);
}

static void read_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    struct cs_tools *t = arg;
    const struct csw_mcp_read_input *in = input;
    const struct cs_workspace *ws = gate(t, call, &in->workspace_id, CS_POLICY_ACCESS_READ);
    if (!ws)
        return;
    struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_READ};
    op.u.read.data =
        (struct csw_runner_wire_read_data){.workspace = *wsdesc(t, ws), .args = in->args};
    call_prepared(t, call, &op);
}

static void find_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    struct cs_tools *t = arg;
    const struct csw_mcp_find_input *in = input;
    const struct cs_workspace *ws = gate(t, call, &in->workspace_id, CS_POLICY_ACCESS_READ);
    if (!ws)
        return;
    /* A glob the deny rules' validator refuses could never match (an empty, "." or ".."
     * component, an unclosed class, ...): say so rather than answer an empty listing. */
    const char *why = NULL;
    if (in->args.has_glob && in->args.glob.n > 0 &&
        !cs_fs_glob_valid(in->args.glob.s, in->args.glob.n, &why)) {
        cs_mcp_call_error(call, CSW_ERROR_INVALID_ARGUMENTS, NULL,
                          "/glob: \"%.*s\" can never match a file (%s); globs look like "
                          "\"*.c\", \"src/**/*.h\" or \"docs/\"",
                          (int)(in->args.glob.n < 200 ? in->args.glob.n : 200), in->args.glob.s,
                          why);
        return;
    }
    struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_FIND};
    op.u.find.data =
        (struct csw_runner_wire_find_data){.workspace = *wsdesc(t, ws), .args = in->args};
    call_prepared(t, call, &op);
}

/* ---- the workspace lease (the state machine is tools_lease.c) ---- */

/* The cancel hook of a queued mutation: it leaves the FIFO (held nothing else) and completes
 * into nothing (docs/contract/tools.md section 2). */
static void lease_wait_cancelled(void *arg, struct cs_mcp_call *call)
{
    struct cs_tools_lease *l = arg;
    if (cs__tools_lease_unqueue(l, call))
        cs_mcp_call_error(call, CSW_ERROR_TIMEOUT, NULL,
                          "cancelled by the client while waiting for the workspace");
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

/* The lease's hooks: a waiter's turn, a waiter refused because a process went live. */
static void lease_grant(struct cs_tools_lease *l, struct cs_mcp_call *call, const void *input,
                        cs_tools_locked_fn run)
{
    cs_mcp_call_on_cancel(call, NULL, NULL); /* no longer queued; run sets its own */
    run(l->t, l->ws, call, input);
}

static void lease_busy(struct cs_tools_lease *l, struct cs_mcp_call *call)
{
    lease_refuse(l, call, CSW_ERROR_WORKSPACE_BUSY);
}

static const struct cs_tools_lease_hooks lease_hooks = {lease_grant, lease_busy};

/* Runs run under ws's lease: now, queued, or refused. run releases the lease when done. */
static void with_lease(struct cs_tools *t, const struct cs_workspace *ws, struct cs_mcp_call *call,
                       const void *input, cs_tools_locked_fn run)
{
    struct cs_tools_lease *l = &t->leases[ws - t->cfg->workspaces];
    int rc = cs__tools_lease_acquire(l, call, input, run);
    if (rc == 1) { /* queued: a release runs it, unless its client cancels it first */
        cs_mcp_call_on_cancel(call, lease_wait_cancelled, l);
        return;
    }
    if (rc != 0) {
        lease_refuse(l, call, rc);
        return;
    }
    run(t, ws, call, input);
}

/* Tells the MCP clients that process_id ended (docs/protocol.md, "Logging"): one info
 * notifications/message naming it, its workspace (how's, else ws's: an older worker names
 * none) and how it ended; never its output, argv or environment. */
static void log_exit(struct cs_tools *t, const char *process_id, const struct csw_runner_exit *how,
                     const struct cs_workspace *ws)
{
    if (!t->srv || (!how->has_workspace_id && !ws))
        return; /* shutting down, or a process of no workspace we know: nothing to name */
    struct csw_protocol_log_data data;
    memset(&data, 0, sizeof data);
    data.tag = CSW_PROTOCOL_LOG_DATA_PROCESS_EXITED;
    struct csw_protocol_log_process_exited *e = &data.u.process_exited;
    e->process_id = (struct cs_str){(char *)(uintptr_t)process_id, strlen(process_id)};
    e->workspace_id =
        how->has_workspace_id ? how->workspace_id : (struct cs_str){ws->id, ws->id_len};
    e->has_exit_code = how->has_exit_code;
    e->exit_code = how->exit_code;
    e->termination = how->has_termination ? how->termination : CSW_PROCESS_TERMINATION_UNKNOWN;
    e->has_signal = how->has_signal;
    e->signal = how->signal;
    (void)cs_mcp_log(t->srv, CSW_PROTOCOL_LOGGING_LEVEL_INFO, &data);
}

/* The most live processes of a shared workspace (workflows.md section 3): its own limit. */
static int64_t ws_max_live(const struct cs_tools *t, const struct cs_workspace *ws)
{
    (void)t;
    return ws->limits.max_live_processes;
}

/* The runner's events: a process finished (its lease goes, or in a shared workspace its place;
 * then the clients are told), or the default runner's uds worker is gone (every process with
 * it). */
static void on_process_exited(void *arg, const char *process_id, const struct csw_runner_exit *how)
{
    struct cs_tools *t = arg;
    struct cs_tools_lease *held = NULL;
    for (size_t i = 0; i < t->cfg->n_workspaces && !held; i++)
        if (cs__tools_lease_holds(&t->leases[i], process_id))
            held = &t->leases[i];
    /* Told first: what the freed lease lets run next is answered after it. */
    log_exit(t, process_id, how, held ? held->ws : NULL);
    if (!held)
        return;
    if (held->live)
        cs__tools_lease_unshare(held, process_id);
    else
        cs__tools_lease_release(held);
}

/* Only the default runner reports a loss: the workspaces placed on remote workers
 * (docs/scale-out.md) are not its, their processes live on, and their leases stay. */
static void on_runner_lost(void *arg)
{
    struct cs_tools *t = arg;
    for (size_t i = 0; i < t->cfg->n_workspaces; i++)
        if (!t->cfg->workspaces[i].has_runner)
            cs__tools_lease_lost(&t->leases[i]);
    cs__tools_recover_mark(t, (size_t)-1); /* a lost uds worker may have been mid-patch */
}

/* ---- apply_patch ---- */

/* A remote worker's patch, recorded: answered once the worker removed its journal (or failed
 * to: the next exchange removes it), from the row, which holds the result as the runner said. */
struct settle_answer {
    struct cs_tools *t;
    struct cs_mcp_call *call;
    char op_id[CS_STORE_ID_SIZE];
};

static void answer_settled(void *arg)
{
    struct settle_answer *sa = arg;
    struct csw_mcp_apply_patch_output out;
    struct cs_diag sd = {0};
    if (cs_store_get_result(sa->t->store, sa->op_id, &out, &sd) == CS_STORE_OK) {
        out.replayed = false; /* the stored result, answered as this call's own */
        cs_mcp_call_ok(sa->call, &out);
        csw_mcp_apply_patch_output_free(&out);
    } else {
        cs_mcp_call_error(sa->call, CSW_ERROR_INTERNAL, sa->op_id,
                          "the patch ended and was recorded, but the record cannot be read: %s",
                          sd.text);
    }
    free(sa);
}

struct patch_call {
    struct cs_tools *t;
    struct cs_tools_lease *l;
    struct cs_mcp_call *call;
    size_t ws; /* the registry index of the workspace */
    char op_id[CS_STORE_ID_SIZE];
};

static void patch_done(void *arg, const struct cs_runner_reply *r)
{
    struct patch_call *pc = arg;
    struct cs_tools *t = pc->t;
    struct cs_diag sd = {0}; /* the ledger's account of a failed finish */
    struct csw_mcp_apply_patch_output out;
    memset(&out, 0, sizeof out);
    out.operation_id = (struct cs_str){pc->op_id, strlen(pc->op_id)};
    switch (r->outcome) {
    case CS_RUNNER_OK: {
        const struct csw_runner_wire_apply_patch_result *res = &r->result->u.apply_patch.data;
        if (r->result->tag != CSW_RUNNER_WIRE_RESULT_APPLY_PATCH) {
            (void)cs_store_finish(t->store, pc->op_id, CSW_PATCH_STATUS_UNKNOWN, NULL, true, &sd);
            cs_mcp_call_error(pc->call, CSW_ERROR_INTERNAL, pc->op_id,
                              "the runner answered apply_patch with another result");
            break;
        }
        out.status = res->status;
        out.files.v = res->files.v;
        out.files.n = res->files.n;
        out.changes.v = res->changes.v;
        out.changes.n = res->changes.n;
        if (res->has_replayed && res->replayed && res->has_operation_id) {
            /* The worker's ledger knew the key (sent through another gateway first): nothing ran
             * now, so this gateway's row goes and the answer is that operation's. A row that
             * cannot go is finished as what it answered, never left for recovery. */
            if (cs_store_forget(t->store, pc->op_id, &sd) != CS_STORE_OK)
                (void)cs_store_finish(t->store, pc->op_id, out.status, &out, false, &sd);
            out.operation_id = res->operation_id;
            out.replayed = true;
            cs_mcp_call_ok(pc->call, &out);
            break;
        }
        if (cs_store_finish(t->store, pc->op_id, out.status, &out, false, &sd) != CS_STORE_OK) {
            cs_mcp_call_error(pc->call, CSW_ERROR_INTERNAL, pc->op_id,
                              "the patch ended %s but the ledger could not record it: %s",
                              csw_patch_status_names[out.status], sd.text);
            break;
        }
        /* The row holds the outcome: the crash journal is no longer needed (a remote worker
         * removes it when told). */
        if (cs__tools_recover_local(t, pc->ws)) {
            cs_patch_journal_settle(t->cfg->workspaces[pc->ws].root, pc->op_id);
        } else if (out.status != CSW_PATCH_STATUS_CHECKED) {
            /* The answer waits for the worker to remove it (one round trip), so that the client's
             * next call never finds the journal of a patch it was told has ended. */
            struct settle_answer *sa = calloc(1, sizeof *sa);
            if (sa != NULL) {
                sa->t = t;
                sa->call = pc->call;
                memcpy(sa->op_id, pc->op_id, sizeof sa->op_id);
                cs__tools_recover_ask(t, pc->ws, pc->op_id, answer_settled, sa);
                break;
            }
        }
        cs_mcp_call_ok(pc->call, &out);
        break;
    }
    case CS_RUNNER_ERROR:
        /* Rejected before any write: the row keeps the error, which a replay answers again. */
        (void)cs_store_finish_rejected(t->store, pc->op_id, (enum csw_error)r->code,
                                       r->msg ? r->msg : "", &sd);
        cs_mcp_call_error(pc->call, (enum csw_error)r->code, pc->op_id, "%s", r->msg ? r->msg : "");
        break;
    case CS_RUNNER_BEFORE_DISPATCH:
        /* Nothing ran: the row goes, so the key runs when the client retries it (issue 32). */
        (void)cs_store_forget(t->store, pc->op_id, &sd);
        cs_mcp_call_error(pc->call, CSW_ERROR_TIMEOUT, NULL,
                          "%s (nothing ran; retrying with the same operation_key runs it)",
                          r->msg ? r->msg : "the runner could not take the call");
        break;
    case CS_RUNNER_AMBIGUOUS:
        /* The patch may or may not have been written: the row says unknown until a recovery
         * settles the journal (a lost uds worker), for good on a remote worker. */
        cs__tools_recover_mark(t, pc->ws);
        out.status = CSW_PATCH_STATUS_UNKNOWN;
        if (cs_store_finish(t->store, pc->op_id, out.status, &out, true, &sd) != CS_STORE_OK)
            cs_mcp_call_error(pc->call, CSW_ERROR_INTERNAL, pc->op_id,
                              "the runner was lost and the ledger could not record it: %s",
                              sd.text);
        else
            cs_mcp_call_ok(pc->call, &out);
        break;
    }
    cs__tools_patching_remove(t, pc->op_id);
    struct cs_tools_lease *l = pc->l;
    free(pc);
    cs__tools_lease_release(l);
}

static void apply_patch_locked(struct cs_tools *t, const struct cs_workspace *ws,
                               struct cs_mcp_call *call, const void *input)
{
    const struct csw_mcp_apply_patch_input *in = input;
    struct cs_tools_lease *l = &t->leases[ws - t->cfg->workspaces];
    struct patch_call *pc = calloc(1, sizeof *pc);
    if (!pc) {
        cs_mcp_call_error(call, CSW_ERROR_INTERNAL, NULL, "out of memory");
        cs__tools_lease_release(l);
        return;
    }
    pc->t = t;
    pc->l = l;
    pc->call = call;
    pc->ws = (size_t)(ws - t->cfg->workspaces);
    struct csw_mcp_apply_patch_output replay;
    struct cs_diag msg = {0};
    enum csw_error replayed_error = CSW_ERROR_INTERNAL;
    int rc = cs_patch_txn_begin(t->store, in, &replay, pc->op_id, &replayed_error, &msg);
    if (rc == CS_PATCH_TXN_REPLAYED) {
        cs_mcp_call_ok(call, &replay);
        csw_mcp_apply_patch_output_free(&replay);
    } else if (rc == CS_PATCH_TXN_REPLAYED_ERROR) {
        cs_mcp_call_error(call, replayed_error, pc->op_id, "%s", msg.text);
    } else if (rc != 0) {
        cs_mcp_call_error(call, (enum csw_error)rc, pc->op_id[0] ? pc->op_id : NULL, "%s",
                          msg.text);
    }
    if (rc == 0 && cs__tools_patching_add(t, pc->op_id) != 0) {
        (void)cs_store_forget(t->store, pc->op_id, &msg);
        cs_mcp_call_error(call, CSW_ERROR_INTERNAL, NULL, "out of memory");
        rc = CSW_ERROR_INTERNAL;
    }
    if (rc != 0) {
        free(pc);
        cs__tools_lease_release(l);
        return;
    }
    _Static_assert(sizeof(struct csw_runner_wire_apply_patch_data_expected_versions_entry) ==
                       sizeof(struct csw_mcp_apply_patch_input_expected_versions_entry),
                   "expected_versions entries differ");
    struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_APPLY_PATCH};
    op.u.apply_patch.data = (struct csw_runner_wire_apply_patch_data){
        .workspace = *wsdesc(t, ws),
        .patch = in->patch,
        .has_expected_versions = in->has_expected_versions,
        .expected_versions = {(struct csw_runner_wire_apply_patch_data_expected_versions_entry *)
                                  in->expected_versions.v,
                              in->expected_versions.n},
        .has_check_only = in->has_check_only,
        .check_only = in->check_only,
        /* The journal is named by the row: this gateway settles it where it reaches the files,
         * and tells a remote worker to (patch_outcomes). */
        .has_operation_id = true,
        .operation_id = {pc->op_id, strlen(pc->op_id)},
        /* A worker's own ledger (a --listen worker) answers a key another gateway sent first. */
        .has_operation_key = in->has_operation_key,
        .operation_key = in->operation_key,
    };
    cs_runner_call(t->runner, &op, patch_done, pc);
}

static void apply_patch_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    struct cs_tools *t = arg;
    const struct csw_mcp_apply_patch_input *in = input;
    const struct cs_workspace *ws = gate(t, call, &in->workspace_id, CS_POLICY_ACCESS_WRITE);
    if (ws)
        with_lease(t, ws, call, input, apply_patch_locked);
}

/* ---- exec_command and the process tools ---- */

struct exec_call {
    struct cs_tools *t;
    struct cs_tools_lease *l;
    struct cs_mcp_call *call;
    struct cs_tools_progress *progress; /* notifications while a yield waits, or NULL */
    char process_id[CS_SUPERVISOR_ID_SIZE];
};

static void exec_done(void *arg, const struct cs_runner_reply *r)
{
    struct exec_call *ec = arg;
    struct cs_tools_lease *l = ec->l;
    cs__tools_progress_stop(ec->progress); /* before the reply: nothing may follow it */
    ec->progress = NULL;
    struct csw_mcp_exec_command_output out;
    memset(&out, 0, sizeof out);
    out.process_id = (struct cs_str){ec->process_id, strlen(ec->process_id)};
    bool release = false;
    switch (r->outcome) {
    case CS_RUNNER_OK: {
        const struct csw_runner_wire_exec_result *e = &r->result->u.exec.data;
        if (r->result->tag != CSW_RUNNER_WIRE_RESULT_EXEC) {
            cs_mcp_call_error(ec->call, CSW_ERROR_INTERNAL, NULL,
                              "the runner answered exec with another result");
            break; /* the process may run: the lease stays until its exit or the runner's loss */
        }
        out.dispatch_status = CSW_MCP_EXEC_COMMAND_OUTPUT_DISPATCH_STATUS_CONFIRMED;
        out.process = e->process; /* the same generated type on both sides */
        cs_mcp_call_ok(ec->call, &out);
        break;
    }
    case CS_RUNNER_ERROR:
        /* Nothing started (the runner confirms it): the lease goes at once. */
        cs_mcp_call_error(ec->call, (enum csw_error)r->code, NULL, "%s", r->msg ? r->msg : "");
        release = true;
        break;
    case CS_RUNNER_BEFORE_DISPATCH:
        cs_mcp_call_error(ec->call, CSW_ERROR_TIMEOUT, NULL, "%s", r->msg ? r->msg : "");
        release = true;
        break;
    case CS_RUNNER_AMBIGUOUS:
        /* It may run: do not start a duplicate. The workspace stays busy until the runner is
         * known to be gone (on_runner_lost). */
        out.dispatch_status = CSW_MCP_EXEC_COMMAND_OUTPUT_DISPATCH_STATUS_UNKNOWN;
        cs_mcp_call_ok(ec->call, &out);
        break;
    }
    bool mine = cs__tools_lease_holds(l, ec->process_id);
    char id[CS_SUPERVISOR_ID_SIZE];
    memcpy(id, ec->process_id, sizeof id);
    free(ec);
    if (release && mine && l->live)
        cs__tools_lease_unshare(l, id); /* a shared workspace: its place goes */
    else if (release && mine)
        cs__tools_lease_release(l);
}

/*
 * The cancel hook of a dispatched exec_command (docs/contract/tools.md §2): its client will never
 * learn the process id, so the process is killed at once (SIGKILL to its group) and a yield
 * stops waiting. The lease stays held, as by a running mutation, until the process has finished
 * (its exit releases it), so the next mutation queues behind the kill instead of failing
 * WORKSPACE_BUSY. A spawn that failed, or a worker lost meanwhile, releases it as usual.
 */
static void exec_cancelled(void *arg, struct cs_mcp_call *call)
{
    struct exec_call *ec = arg;
    (void)call;
    struct cs_tools_lease *l = ec->l;
    struct cs_runner *runner = ec->t->runner;
    char id[CS_SUPERVISOR_ID_SIZE];
    memcpy(id, ec->process_id, sizeof id); /* ec may be freed inside cs_runner_cancel */
    if (!l->live) /* a shared workspace's process keeps its place until its exit */
        cs__tools_lease_kill(l, id);
    cs_runner_cancel(runner, exec_done, ec, id);
}

static void exec_locked(struct cs_tools *t, const struct cs_workspace *ws, struct cs_mcp_call *call,
                        const void *input)
{
    const struct csw_mcp_exec_command_input *in = input;
    struct cs_tools_lease *l = &t->leases[ws - t->cfg->workspaces];
    struct exec_call *ec = calloc(1, sizeof *ec);
    if (!ec || cs_supervisor_new_id(ec->process_id) != 0) {
        free(ec);
        cs_mcp_call_error(call, CSW_ERROR_INTERNAL, NULL, "no memory or random source");
        if (!l->live) /* a shared workspace's exec never holds the lease */
            cs__tools_lease_release(l);
        return;
    }
    /* A shared workspace: the process takes a place among at most max_live_processes, never
     * the lease (patches run meanwhile, other processes start). */
    if (l->live && cs__tools_lease_share(l, ec->process_id) != 0) {
        free(ec);
        cs_mcp_call_error(call, CSW_ERROR_WORKSPACE_BUSY, NULL,
                          "workspace \"%s\" already runs %zu live processes, its "
                          "max_live_processes; wait for one to exit (process_status) or stop one "
                          "(terminate_process)",
                          ws->id, l->n_live);
        return;
    }
    ec->t = t;
    ec->l = l;
    ec->call = call;
    const struct csw_runner_workspace *w = wsdesc(t, ws);
    struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_EXEC};
    struct csw_runner_wire_exec_data *d = &op.u.exec.data;
    d->workspace = *w;
    d->argv.v = in->command.v;
    d->argv.n = in->command.n;
    d->process_id = (struct cs_str){ec->process_id, strlen(ec->process_id)};
    d->env.use_runner_defaults = true;
    /* The workspace's own limits (docs/operations.md), enforced by the runner's supervisor. */
    _Static_assert(CS_POLICY_MAX_RING_BYTES <= CS_SUPERVISOR_RING_MAX,
                   "every ring the registry allows is one the runner accepts");
    d->timeout_ms = ws->limits.timeout_ms;
    d->output_bytes_cap = ws->limits.output_ring_bytes;
    d->has_max_live_processes = true;
    d->max_live_processes = ws->limits.max_live_processes;
    d->tty = in->has_tty && in->tty;
    d->policy.workspace_profile =
        (enum csw_runner_wire_exec_data_policy_workspace_profile)w->profile;
    d->policy.network = (enum csw_runner_wire_exec_data_policy_network)w->network;
    d->policy.has_network_allow = w->has_network_allow;
    d->policy.network_allow.v = w->network_allow.v;
    d->policy.network_allow.n = w->network_allow.n;
    d->has_yield_ms = in->has_yield_ms;
    d->yield_ms = in->has_yield_ms ? in->yield_ms : 0;
    /* Live from here: a confirmed process holds the lease until it exits; with yield_ms 0 the
     * call may complete inside cs_runner_call. Queued waiters fail at once. (A shared
     * workspace's process took its place above instead.) */
    if (!l->live)
        cs__tools_lease_go_live(l, ec->process_id);
    cs_mcp_call_on_cancel(call, exec_cancelled, ec);
    if (d->yield_ms > 0)
        ec->progress = cs__tools_progress_start(t->loop, t->runner, call, ec->process_id);
    cs_runner_call(t->runner, &op, exec_done, ec);
}

static void exec_command_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    struct cs_tools *t = arg;
    const struct csw_mcp_exec_command_input *in = input;
    const struct cs_workspace *ws = gate(t, call, &in->workspace_id, CS_POLICY_ACCESS_EXEC);
    if (!ws)
        return;
    if (in->command.n == 0 || in->command.v[0].n == 0) {
        cs_mcp_call_error(call, CSW_ERROR_INVALID_COMMAND, NULL,
                          in->command.n == 0 ? "command is empty: give at least the program"
                                             : "command[0] is empty: name the program to run");
        return;
    }
    const char *why = t->no_exec[ws - t->cfg->workspaces];
    if (why) {
        cs_mcp_call_error(call, CSW_ERROR_PROCESS_SPAWN_FAILED, NULL, "%s", why);
        return;
    }
    if (t->leases[ws - t->cfg->workspaces].live)
        exec_locked(t, ws, call, input); /* shared: never waits for the lease (workflows.md 3) */
    else
        with_lease(t, ws, call, input, exec_locked);
}

static void write_stdin_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_WRITE_STDIN};
    op.u.write_stdin.data = *(const struct csw_mcp_write_stdin_input *)input;
    cs_runner_call(((struct cs_tools *)arg)->runner, &op, plain_done, call);
}

/* The cancel hook of a process tool that may wait in the supervisor (read_process with wait_ms,
 * terminate_process): the wait ends now and its answer completes the call into nothing. */
static void wait_cancelled(void *arg, struct cs_mcp_call *call)
{
    struct cs_tools *t = arg;
    cs_runner_cancel(t->runner, plain_done, call, NULL);
}

/* A read_process that waits with progress notifications (tools_progress.h). */
struct read_wait {
    struct cs_tools *t;
    struct cs_mcp_call *call;
    struct cs_tools_progress *progress;
};

static void read_wait_done(void *arg, const struct cs_runner_reply *r)
{
    struct read_wait *w = arg;
    struct cs_mcp_call *call = w->call;
    cs__tools_progress_stop(w->progress); /* before the reply: nothing may follow it */
    free(w);
    plain_done(call, r);
}

static void read_wait_cancelled(void *arg, struct cs_mcp_call *call)
{
    struct read_wait *w = arg;
    (void)call;
    cs_runner_cancel(w->t->runner, read_wait_done, w, NULL);
}

static void read_process_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    struct cs_tools *t = arg;
    const struct csw_mcp_read_process_input *in = input;
    struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_READ_PROCESS};
    op.u.read_process.data = *in;
    struct read_wait *w = NULL;
    if (in->has_wait_ms && in->wait_ms > 0 && cs_mcp_call_wants_progress(call) &&
        in->process_id.n == strlen(in->process_id.s) && (w = calloc(1, sizeof *w))) {
        w->t = t;
        w->call = call;
        w->progress = cs__tools_progress_start(t->loop, t->runner, call, in->process_id.s);
    }
    if (!w || !w->progress) {
        free(w);
        cs_mcp_call_on_cancel(call, wait_cancelled, arg);
        cs_runner_call(t->runner, &op, plain_done, call);
        return;
    }
    cs_mcp_call_on_cancel(call, read_wait_cancelled, w);
    cs_runner_call(t->runner, &op, read_wait_done, w);
}

static void process_status_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_PROCESS_STATUS};
    op.u.process_status.data = *(const struct csw_mcp_process_status_input *)input;
    cs_runner_call(((struct cs_tools *)arg)->runner, &op, plain_done, call);
}

static void process_resize_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_RESIZE};
    op.u.resize.data = *(const struct csw_mcp_process_resize_input *)input;
    cs_runner_call(((struct cs_tools *)arg)->runner, &op, plain_done, call);
}

static void terminate_process_tool(void *arg, struct cs_mcp_call *call, const void *input)
{
    struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_TERMINATE};
    op.u.terminate.data = *(const struct csw_mcp_terminate_process_input *)input;
    cs_mcp_call_on_cancel(call, wait_cancelled, arg);
    cs_runner_call(((struct cs_tools *)arg)->runner, &op, plain_done, call);
}

/* ---- operation_status ---- */

/* An operation_status waiting for a remote worker's answer on its row (status_asked). */
struct status_call {
    struct cs_tools *t;
    struct cs_mcp_call *call;
    bool by_id;
    struct cs_str key; /* owned */
};

static void status_answer(struct cs_tools *t, struct cs_mcp_call *call, bool by_id,
                          const struct cs_str *key, bool may_ask);

static void status_asked(void *arg)
{
    struct status_call *sc = arg;
    status_answer(sc->t, sc->call, sc->by_id, &sc->key, false);
    free(sc->key.s);
    free(sc);
}

/* The row's workspace index, when it is placed on a remote worker; else (size_t)-1. */
static size_t remote_index(const struct cs_tools *t, const struct cs_str *ws_id)
{
    for (size_t i = 0; i < t->cfg->n_workspaces; i++)
        if (t->cfg->workspaces[i].id_len == ws_id->n &&
            memcmp(t->cfg->workspaces[i].id, ws_id->s, ws_id->n) == 0)
            return cs__tools_recover_remote(t, i) ? i : (size_t)-1;
    return (size_t)-1;
}

/* operation_status asked of the workers' ledgers (issue 32): a row of a workspace this gateway
 * serves is answered; another gateway's workspace on the same worker is not this client's. */
struct worker_status {
    struct cs_tools *t;
    struct cs_mcp_call *call;
};

static void worker_status_done(void *arg, const struct cs_runner_reply *r)
{
    struct worker_status *ws = arg;
    struct cs_tools *t = ws->t;
    struct cs_mcp_call *call = ws->call;
    free(ws);
    if (r->outcome == CS_RUNNER_OK && r->result->tag == CSW_RUNNER_WIRE_RESULT_OPERATION_STATUS) {
        const struct csw_mcp_operation_status_output *out = &r->result->u.operation_status.data;
        for (size_t i = 0; i < t->cfg->n_workspaces; i++)
            if (t->cfg->workspaces[i].id_len == out->workspace_id.n &&
                memcmp(t->cfg->workspaces[i].id, out->workspace_id.s, out->workspace_id.n) == 0) {
                cs_mcp_call_ok(call, out);
                return;
            }
        cs_mcp_call_error(call, CSW_ERROR_OPERATION_NOT_FOUND, NULL,
                          "no operation with this id or key in a workspace of this server");
        return;
    }
    if (r->outcome == CS_RUNNER_BEFORE_DISPATCH || r->outcome == CS_RUNNER_AMBIGUOUS) {
        cs_mcp_call_error(call, CSW_ERROR_TIMEOUT, NULL,
                          "not in this server's ledger, and a worker's ledger (which records "
                          "what any gateway sent it) could not be asked: %s",
                          r->msg ? r->msg : "runner failed");
        return;
    }
    plain_done(call, r);
}

/* Not in this gateway's ledger: the ledgers of the workers holding its remote workspaces, which
 * record what any gateway in front of them sent (runner_exec.c, ledger_begin). */
static bool ask_workers(struct cs_tools *t, struct cs_mcp_call *call, bool by_id,
                        const struct cs_str *key)
{
    /* The wire's bounds (an id of 1 to 64 bytes, a key of 1 to 200): no worker holds another. */
    if (key->n == 0 || key->n > (by_id ? 64u : 200u))
        return false;
    bool remote = false;
    for (size_t i = 0; i < t->cfg->n_workspaces && !remote; i++)
        remote = cs__tools_recover_remote(t, i);
    struct worker_status *ws = remote ? calloc(1, sizeof *ws) : NULL;
    if (!ws)
        return false;
    ws->t = t;
    ws->call = call;
    struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_OPERATION_STATUS};
    op.u.operation_status.data = (struct csw_runner_wire_operation_status_data){
        .has_operation_id = by_id,
        .operation_id = by_id ? *key : (struct cs_str){0},
        .has_operation_key = !by_id,
        .operation_key = by_id ? (struct cs_str){0} : *key,
    };
    cs_runner_call(t->runner, &op, worker_status_done, ws);
    return true;
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
    cs__tools_recover_pending(t);
    status_answer(t, call, in->has_operation_id,
                  in->has_operation_id ? &in->operation_id : &in->operation_key, true);
}

/* Answers the row named by key; a row still unknown on a remote worker's workspace, not in
 * flight here, is first asked about (may_ask: once), since the worker's recovery may know. */
static void status_answer(struct cs_tools *t, struct cs_mcp_call *call, bool by_id,
                          const struct cs_str *key, bool may_ask)
{
    struct csw_mcp_operation_status_output out;
    struct cs_diag sd = {0};
    enum cs_store_status ss = by_id ? cs_store_get_by_id(t->store, key->s, key->n, &out, &sd)
                                    : cs_store_get_by_key(t->store, key->s, key->n, &out, &sd);
    if (ss == CS_STORE_NOT_FOUND) {
        if (may_ask && ask_workers(t, call, by_id, key))
            return;
        cs_mcp_call_error(call, CSW_ERROR_OPERATION_NOT_FOUND, NULL, "no operation with this %s",
                          by_id ? "operation_id" : "operation_key");
        return;
    }
    if (ss != CS_STORE_OK) {
        cs_mcp_call_error(call, sd.code, NULL, "ledger: %s", sd.text);
        return;
    }
    size_t ri = may_ask && out.status == CSW_PATCH_STATUS_UNKNOWN
                    ? remote_index(t, &out.workspace_id)
                    : (size_t)-1;
    struct status_call *sc = ri != (size_t)-1 ? calloc(1, sizeof *sc) : NULL;
    if (sc != NULL && (sc->key.s = malloc(key->n + 1)) != NULL) {
        memcpy(sc->key.s, key->s, key->n);
        sc->key.s[key->n] = '\0';
        sc->key.n = key->n;
        sc->t = t;
        sc->call = call;
        sc->by_id = by_id;
        csw_mcp_operation_status_output_free(&out);
        cs__tools_recover_ask(t, ri, NULL, status_asked, sc);
        return;
    }
    free(sc);
    cs_mcp_call_ok(call, &out);
    csw_mcp_operation_status_output_free(&out);
}

/* The wire description of every workspace, built once. */
static int build_wsdesc(struct cs_tools *t)
{
    const struct cs_config *cfg = t->cfg;
    t->wsdesc = calloc(cfg->n_workspaces + 1, sizeof *t->wsdesc);
    if (!t->wsdesc)
        return -1;
    for (size_t i = 0; i < cfg->n_workspaces; i++) {
        const struct cs_workspace *ws = &cfg->workspaces[i];
        struct csw_runner_workspace *d = &t->wsdesc[i];
        d->id = (struct cs_str){ws->id, ws->id_len};
        d->root = (struct cs_str){ws->root, strlen(ws->root)};
        d->profile = ws->profile == CS_POLICY_PROFILE_WORKSPACE_WRITE
                         ? CSW_RUNNER_WORKSPACE_PROFILE_WORKSPACE_WRITE
                         : CSW_RUNNER_WORKSPACE_PROFILE_READ_ONLY;
        d->environment_kind = ws->env_kind == CS_POLICY_ENV_HOST
                                  ? CSW_RUNNER_WORKSPACE_ENVIRONMENT_KIND_HOST
                                  : CSW_RUNNER_WORKSPACE_ENVIRONMENT_KIND_LINUX_CONTAINER;
        switch (ws->network) {
        case CS_POLICY_NETWORK_RESTRICTED:
            d->network = CSW_RUNNER_WORKSPACE_NETWORK_RESTRICTED;
            break;
        case CS_POLICY_NETWORK_ENABLED:
            d->network = CSW_RUNNER_WORKSPACE_NETWORK_ENABLED;
            break;
        case CS_POLICY_NETWORK_LOOPBACK:
            d->network = CSW_RUNNER_WORKSPACE_NETWORK_LOOPBACK;
            break;
        }
        /* sent only when shared: an exclusive workspace's description stays as it was */
        d->has_processes = ws->processes == CS_WORKSPACE_PROCESSES_SHARED;
        d->processes = CSW_RUNNER_WORKSPACE_PROCESSES_SHARED;
        d->has_network_allow = ws->has_network_allow;
        if (ws->n_network_allow > 0) {
            d->network_allow.v = calloc(ws->n_network_allow, sizeof *d->network_allow.v);
            if (!d->network_allow.v)
                return -1;
            for (size_t k = 0; k < ws->n_network_allow; k++)
                d->network_allow.v[k] =
                    (struct cs_str){ws->network_allow[k], strlen(ws->network_allow[k])};
            d->network_allow.n = ws->n_network_allow;
        }
        /* The deny rules travel with every operation, so the executor (in this process or the
         * uds worker) applies the same rules the registry validated. */
        if (ws->n_deny > 0) {
            d->has_deny = true;
            d->deny.v = calloc(ws->n_deny, sizeof *d->deny.v);
            if (!d->deny.v)
                return -1;
            for (size_t k = 0; k < ws->n_deny; k++)
                d->deny.v[k] = (struct cs_str){ws->deny[k], strlen(ws->deny[k])};
            d->deny.n = ws->n_deny;
            d->has_deny_scan_entries = ws->limits.deny_scan_entries != CS_FS_DENY_SCAN_CAP;
            d->deny_scan_entries = ws->limits.deny_scan_entries;
        }
    }
    return 0;
}

/*
 * docs/contract/sandbox.md §3, for a server running as root: a command never holds host uid 0.
 * Without the sandbox there is no unprivileged identity to give it, so no command runs at all
 * (never the unsandboxed fallback a non-root server has); with it, a workspace whose root is owned
 * by root needs an idmapped bind, and a workspace whose filesystem cannot have one runs no command
 * either. Each such workspace gets its reason in t->no_exec (exec_command answers
 * PROCESS_SPAWN_FAILED with it; workspace_info reports process.available false). probe_err is
 * why the probe failed. Returns 0, or -1 on OOM with err set.
 */
static int identity_rules(struct cs_tools *t, bool sandboxed, const char *probe_err,
                          struct cs_diag *err)
{
    const struct cs_config *cfg = t->cfg;
    t->no_exec = calloc(cfg->n_workspaces + 1, sizeof *t->no_exec);
    if (!t->no_exec)
        return cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
    /* A tcp:// worker applies its own: as root it runs only with --sandbox and a command id. */
    if (geteuid() != 0 || cfg->runner == CS_CONFIG_RUNNER_TCP)
        return 0;
    for (size_t i = 0; i < cfg->n_workspaces; i++) {
        const struct cs_workspace *ws = &cfg->workspaces[i];
        char why[1024] = "";
        struct cs_diag d = {0};
        if (ws->has_runner)
            continue; /* its worker applies its own (docs/scale-out.md) */
        if (!sandboxed)
            snprintf(why, sizeof why,
                     "this server runs as root and never runs a command as host root: without "
                     "the Linux sandbox (its probe failed: %s) no command can run",
                     probe_err);
        else if (ws->has_root_fd && cs_supervisor_sandbox_identity_check(
                                        ws->root_fd, cfg->sandbox_uid, cfg->sandbox_gid, &d) != 0)
            snprintf(why, sizeof why, "%s", d.text);
        else
            continue;
        t->no_exec[i] = strdup(why);
        if (!t->no_exec[i])
            return cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
    }
    return 0;
}

int cs_tools_init(struct cs_tools *t, const struct cs_config *cfg, const char *version,
                  struct cs_store *store, struct cs_loop *loop, struct cs_diag *err)
{
    memset(t, 0, sizeof *t);
    t->loop = loop;
    t->cfg = cfg;
    t->version = version;
    t->store = store;
    t->info = calloc(cfg->n_workspaces + 1, sizeof *t->info);
    if (!t->info)
        return cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
    t->n_info = cfg->n_workspaces + 1;
    t->leases = calloc(cfg->n_workspaces + 1, sizeof *t->leases);
    t->remote = calloc(cfg->n_workspaces + 1, sizeof *t->remote);
    t->info_hellos = calloc(cfg->n_workspaces + 1, sizeof *t->info_hellos);
    if (!t->leases || !t->remote || !t->info_hellos || build_wsdesc(t) != 0)
        return cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
    for (size_t i = 0; i < cfg->n_workspaces; i++) {
        t->leases[i].hooks = &lease_hooks;
        t->leases[i].t = t;
        t->leases[i].ws = &cfg->workspaces[i];
        if (cfg->workspaces[i].processes == CS_WORKSPACE_PROCESSES_SHARED) {
            t->leases[i].max_live = (size_t)ws_max_live(t, &cfg->workspaces[i]);
            t->leases[i].live = calloc(t->leases[i].max_live, sizeof *t->leases[i].live);
            if (!t->leases[i].live)
                return cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
        }
    }
    /* Before anything is served: patches a crash interrupted are rolled back or forward. */
    if (cs__tools_recover_init(t, err) != 0)
        return -1;
    /* docs/contract/runtime.md §2: every root was opened once at load; from here on the file tools,
     * the supervisor and the sandbox reach a root only through that descriptor. */
    for (size_t i = 0; i < cfg->n_workspaces; i++) {
        const struct cs_workspace *ws = &cfg->workspaces[i];
        if (ws->has_root_fd && cs_roots_get(ws->root) < 0 &&
            cs_roots_add(ws->root, ws->root_fd) != 0)
            return cs_diag_set(err, CSW_ERROR_INTERNAL, "cannot hold workspace root %s: %s",
                               ws->root, strerror(errno));
    }
    return 0;
}

static void deny_warmed(void *arg, const struct cs_runner_reply *r)
{
    struct cs_tools *t = arg;
    (void)r; /* whatever the answer: a scan that failed fails the workspace's operations */
    if (t->deny_warming > 0 && --t->deny_warming == 0 && t->warm_wait != NULL)
        cs_loop_stop(t->warm_wait);
}

static void deny_warmed_unwaited(void *arg, const struct cs_runner_reply *r)
{
    (void)arg;
    (void)r;
}

static void deny_warm_timeout(void *arg)
{
    struct cs_tools *t = arg;
    t->warm_timer = NULL; /* fired: the loop owns it no more */
    if (t->warm_wait != NULL)
        cs_loop_stop(t->warm_wait);
}

int cs_tools_deny_warm_wait(struct cs_tools *t, struct cs_loop *loop, int64_t limit_ms)
{
    if (t->deny_warming == 0)
        return 0;
    t->warm_timer = cs_loop_timer_add(loop, limit_ms, deny_warm_timeout, t);
    if (t->warm_timer == NULL)
        return 0;
    t->warm_wait = loop;
    int rc = cs_loop_run(loop); /* until the last answer, the time limit or a stop of another */
    t->warm_wait = NULL;
    /* Stopped by neither: something else (a signal) asked the loop to stop. */
    bool other = rc != 0 || (t->deny_warming > 0 && t->warm_timer != NULL);
    cs_loop_timer_cancel(t->warm_timer); /* NULL once fired */
    t->warm_timer = NULL;
    return other ? -1 : 0;
}

/*
 * The deny rules' start-up scan (contract section 7: the identity of every denied file is
 * remembered "at start"): the runner builds a workspace's deny state, scanning it and storing
 * what it finds, when an operation first names the workspace. A version check of the root (it
 * reads no file: the root is no file) is that operation, sent for every workspace with deny
 * rules when the runner starts and again when a worker replaces a lost one, so that a denied
 * file renamed before the client's first call is still denied under its new name.
 */
static void deny_warm_all(struct cs_tools *t)
{
    for (size_t i = 0; i < t->cfg->n_workspaces; i++) {
        if (t->cfg->workspaces[i].n_deny == 0)
            continue;
        struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_VERSION};
        op.u.version.data =
            (struct csw_runner_wire_version_data){.workspace = t->wsdesc[i], .path = {".", 1}};
        /* waited for at start only when the scan is this gateway's or its uds worker's */
        bool local = cs__tools_recover_local(t, i);
        if (local)
            t->deny_warming++;
        cs_runner_call(t->runner, &op, local ? deny_warmed : deny_warmed_unwaited, t);
    }
}

/* What the gateway asks its runners at start (cs_tools_register), and again whenever a link to
 * a worker is made after those questions may not have reached it: the journals a crash left
 * (remote workers' patches) and the deny rules' start-up scans. */
static void start_calls(struct cs_tools *t)
{
    cs__tools_recover_ask_all(t);
    deny_warm_all(t);
}

/* Any runner made a link to a worker again (a uds worker replaced, a tcp worker's hello
 * answered again): counted for the operator's metrics (docs/operations.md, "Metrics"). */
static void on_runner_reconnected(void *arg)
{
    struct cs_tools *t = arg;
    t->runner_reconnects++;
    /* A worker back (or a new one): what became of the patches the link's loss left unknown,
     * and the deny scans a new worker has not made. */
    start_calls(t);
}

/* A remote worker first reached after the start-up's calls to it failed before dispatch: they
 * are sent now (not counted as a reconnection), so that the deny scan is the start's, made when
 * the worker is first reachable rather than at the client's first call on the workspace. */
static void on_runner_first_link_late(void *arg)
{
    start_calls(arg);
}

struct cs_runner_events cs_tools_runner_events(struct cs_tools *t)
{
    return (struct cs_runner_events){.process_exited = on_process_exited,
                                     .lost = on_runner_lost,
                                     .reconnected = on_runner_reconnected,
                                     .first_link_late = on_runner_first_link_late,
                                     .arg = t};
}

size_t cs_tools_live_processes(const struct cs_tools *t)
{
    size_t n = 0;
    for (size_t i = 0; t->leases && i < t->cfg->n_workspaces; i++) {
        const struct cs_tools_lease *l = &t->leases[i];
        if (l->live)
            n += l->n_live;
        else if (cs__tools_lease_holds(l, NULL))
            n++;
    }
    return n;
}

int cs_tools_register(struct cs_mcp *srv, struct cs_tools *t, const struct cs_tools_sandbox *sb,
                      struct cs_diag *err)
{
    const struct cs_config *cfg = t->cfg;
    if (!t->runner)
        return cs_diag_set(err, CSW_ERROR_INTERNAL, "internal: no runner was set");
    t->srv = srv; /* process exits are announced from here on */
    /* A tcp:// worker runs its commands under its own --sandbox, which the gateway cannot see:
     * it claims no sandbox rather than one it cannot check (docs/scale-out.md). */
    bool sandboxed = sb->sandboxed && cfg->runner != CS_CONFIG_RUNNER_TCP;
    if (identity_rules(t, sandboxed, sb->reason, err) != 0)
        return -1;
    t->caps.sandbox = sandboxed;
    if (sandboxed) {
        t->caps.has_landlock_abi = sb->landlock_abi > 0;
        t->caps.landlock_abi = sb->landlock_abi;
        t->caps.syscall_denials = sb->syscall_denials;
    }
    /* Files (src/fs), patches (src/patch, src/store) and processes (src/supervisor), in this
     * process or in the uds worker; command_sandbox and enforcement follow the probe. */
    t->caps.files_available = true;
    t->caps.patch_available = true;
    t->caps.process_available = true;
    t->caps.uds_runner = cfg->runner == CS_CONFIG_RUNNER_UDS;
    if (cfg->runner == CS_CONFIG_RUNNER_TCP)
        t->caps.remote = &cfg->remote;
    t->caps.tty_supported = true;
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
        return cs_diag_set(err, CSW_ERROR_INTERNAL,
                           "internal: a tool is missing from the generated table");
    /* A command line where an argv belongs is the commonest mistake with exec_command. */
    if (cs_mcp_set_tool_hint(srv, "exec_command", "/command",
                             "command is an argv (an array of strings), never parsed by a shell; "
                             "for a command line use [\"sh\",\"-c\",\"...\"]") != 0)
        return cs_diag_set(err, CSW_ERROR_INTERNAL, "internal: exec_command has no hint slot");
    /* A remote worker's journals a crash left: their rows are settled once the link is up. */
    start_calls(t);
    return 0;
}
